//! Depthwise 2-D convolution (`shaders/depthwise.wgsl`): Keras' `DepthwiseConv2D`, each
//! input channel convolved with its own `depth_multiplier` kernels, output channel
//! `ci * depth_multiplier + m`. Strides, dilation and every [`Padding`] of Conv2D, with
//! Conv2D's output sizes and "same" split (TensorFlow's, on the dilated kernel's extent).
//!
//! Not a GEMM: each output reads `kh * kw` inputs of one channel, so there is no reduction
//! long enough to tile. Forward and input gradient are gathers, one invocation per output
//! element, or per four adjacent channels where the channel count allows (`vec4` path). The
//! kernel gradient is a long reduction (every output pixel of the batch) into a small output,
//! done as a column reduction like [`super::reduce`]'s: see [`backward_weights`].
//!
//! # Shapes
//! x, dx `[batch, in_h, in_w, channels]`; kernel, dw `[kh, kw, channels, multiplier]`; bias,
//! db `[channels * multiplier]`; y, dy `[batch, out_h, out_w, channels * multiplier]`.

use bytemuck::{Pod, Zeroable};

use super::conv2d::{axis, Padding};
use super::gemm::quad_binding;
use super::reduce::{scratch, sum_rows};
use super::{expect_dtype, expect_separate, expect_shape, grid_3d, grid_for, u32_of, width_token, Dispatch, DEPTHWISE, WG, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

/// Every size of one depthwise convolution, resolved once from the input shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthwiseGeometry {
    /// Samples.
    pub batch: usize,
    /// Input rows.
    pub in_h: usize,
    /// Input columns.
    pub in_w: usize,
    /// Input channels.
    pub channels: usize,
    /// Keras' `depth_multiplier`: kernels per input channel.
    pub multiplier: usize,
    /// Kernel taps down.
    pub kh: usize,
    /// Kernel taps across.
    pub kw: usize,
    /// Rows between the windows of adjacent output rows.
    pub stride_h: usize,
    /// Columns between the windows of adjacent output columns.
    pub stride_w: usize,
    /// Keras' `dilation_rate`: tap `i` of the kernel reads input row `i * dilation_h` below
    /// the window's first.
    pub dilation_h: usize,
    /// The same along the width.
    pub dilation_w: usize,
    /// Padding rows above the image ("same": half the total, the odd one below).
    pub pad_top: usize,
    /// Padding columns left of the image ("same": half the total, the odd one right).
    pub pad_left: usize,
    /// Output rows.
    pub out_h: usize,
    /// Output columns.
    pub out_w: usize,
}

/// Sides, strides, dilations and pads above this would overflow the shader's i32 positions.
const MAX_I32_SIDE: usize = 1 << 30;

impl DepthwiseGeometry {
    /// Resolves the geometry of a depthwise convolution of an NHWC input of `input_shape`
    /// with a `kernel = (kh, kw)` kernel per channel and output.
    ///
    /// # Shapes
    /// `input_shape`: `[batch, height, width, channels]`.
    pub fn new(input_shape: &[usize], multiplier: usize, kernel: (usize, usize), strides: (usize, usize), dilation: (usize, usize), padding: Padding) -> Result<Self> {
        const K: &str = "depthwise_conv2d";
        let &[batch, in_h, in_w, channels] = input_shape else {
            bail!(Shape, "{K} expects an NHWC input [batch, height, width, channels], got {input_shape:?}");
        };
        if input_shape.contains(&0) {
            bail!(Shape, "{K}: input shape {input_shape:?} has an empty dimension");
        }
        if multiplier == 0 || kernel.0 == 0 || kernel.1 == 0 {
            bail!(Config, "{K}: depth_multiplier ({multiplier}) and kernel size {kernel:?} must be positive");
        }
        if strides.0 == 0 || strides.1 == 0 || dilation.0 == 0 || dilation.1 == 0 {
            bail!(Config, "{K}: strides {strides:?} and dilation_rate {dilation:?} must be positive");
        }
        let pads = match padding {
            Padding::Explicit(ph, pw) => (ph, pw),
            _ => (0, 0),
        };
        for (what, v) in [("height", in_h), ("width", in_w), ("kernel height", kernel.0), ("kernel width", kernel.1), ("stride", strides.0.max(strides.1)), ("dilation", dilation.0.max(dilation.1)), ("padding", pads.0.max(pads.1))] {
            if v >= MAX_I32_SIDE {
                bail!(Shape, "{K}: {what} {v} is too large (the limit is {MAX_I32_SIDE})");
            }
        }
        // The window a dilated kernel spans, which every output-size rule uses (TensorFlow's
        // "same" included).
        let extent = ((kernel.0 - 1) * dilation.0 + 1, (kernel.1 - 1) * dilation.1 + 1);
        if padding != Padding::Same {
            for (what, size, pad, k, d, e) in [("height", in_h, pads.0, kernel.0, dilation.0, extent.0), ("width", in_w, pads.1, kernel.1, dilation.1, extent.1)] {
                if size + 2 * pad < e {
                    bail!(Shape, "{K}: input {what} {size} with padding {pad} is smaller than the kernel's extent {e} ({k} taps at dilation {d}): the output would be empty");
                }
            }
        }
        let (out_h, pad_top) = axis("height", in_h, extent.0, strides.0, padding, pads.0)?;
        let (out_w, pad_left) = axis("width", in_w, extent.1, strides.1, padding, pads.1)?;
        let g = DepthwiseGeometry {
            batch,
            in_h,
            in_w,
            channels,
            multiplier,
            kh: kernel.0,
            kw: kernel.1,
            stride_h: strides.0,
            stride_w: strides.1,
            dilation_h: dilation.0,
            dilation_w: dilation.1,
            pad_top,
            pad_left,
            out_h,
            out_w,
        };
        // The shaders index in u32.
        u32_of(K, "input elements", input_shape.iter().product())?;
        u32_of(K, "output elements", g.output_shape().iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX))?;
        u32_of(K, "kernel elements", g.kernel_shape().iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX))?;
        Ok(g)
    }

    /// `[batch, in_h, in_w, channels]`.
    pub fn input_shape(&self) -> Vec<usize> {
        vec![self.batch, self.in_h, self.in_w, self.channels]
    }
    /// `[batch, out_h, out_w, channels * multiplier]`.
    pub fn output_shape(&self) -> Vec<usize> {
        vec![self.batch, self.out_h, self.out_w, self.out_channels()]
    }
    /// Keras' `[kh, kw, channels, multiplier]`.
    pub fn kernel_shape(&self) -> Vec<usize> {
        vec![self.kh, self.kw, self.channels, self.multiplier]
    }
    /// `channels * multiplier`.
    pub fn out_channels(&self) -> usize {
        self.channels * self.multiplier
    }

    /// Multiply-adds of the forward pass, counted as 2 flops each (each backward pass does
    /// as many).
    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.out_h * self.out_w) as u64 * self.out_channels() as u64 * (self.kh * self.kw) as u64
    }

    fn out_pixels(&self) -> usize {
        self.batch * self.out_h * self.out_w
    }

    fn params(&self, n: usize) -> Result<Params> {
        let u = |v: usize| u32_of("depthwise_conv2d", "a dimension", v);
        Ok(Params {
            batch: u(self.batch)?,
            in_h: u(self.in_h)?,
            in_w: u(self.in_w)?,
            channels: u(self.channels)?,
            multiplier: u(self.multiplier)?,
            out_h: u(self.out_h)?,
            out_w: u(self.out_w)?,
            kh: u(self.kh)?,
            kw: u(self.kw)?,
            stride_h: u(self.stride_h)?,
            stride_w: u(self.stride_w)?,
            dil_h: u(self.dilation_h)?,
            dil_w: u(self.dilation_w)?,
            pad_top: u(self.pad_top)?,
            pad_left: u(self.pad_left)?,
            n: u(n)?,
            ..Params::zeroed()
        })
    }

    /// The multiplier's path token: with one kernel per channel the vec4 passes read every
    /// operand as aligned quads; with several, the input-side operand lane by lane.
    fn multiplier_token(&self) -> &'static str {
        if self.multiplier == 1 { "multiplier=one" } else { "multiplier=many" }
    }
}

/// shaders/depthwise.wgsl's `Params`, member for member.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    batch: u32,
    in_h: u32,
    in_w: u32,
    channels: u32,
    multiplier: u32,
    out_h: u32,
    out_w: u32,
    kh: u32,
    kw: u32,
    stride_h: u32,
    stride_w: u32,
    dil_h: u32,
    dil_w: u32,
    pad_top: u32,
    pad_left: u32,
    n: u32,
    has_bias: u32,
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    _pad: [u32; 2],
}

/// How a bound operand is read: as `array<f32>`, as `array<vec4<f32>>`, or a scratch buffer.
enum Bind<'a> {
    F32(&'a Tensor),
    Quads(&'a Tensor),
    Scratch(&'a wgpu::Buffer),
}

fn launch(device: &Device, kernel: &str, entry: &'static str, params: &Params, binds: &[(u32, Bind<'_>)], groups: [u32; 3]) -> Result<Dispatch> {
    let uniform = device.uniform(params);
    let mut bindings = vec![(0, uniform.as_entire_buffer_binding())];
    for (i, b) in binds {
        bindings.push((
            *i,
            match b {
                Bind::F32(t) => t.binding(),
                Bind::Quads(t) => quad_binding(kernel, t)?,
                Bind::Scratch(s) => s.as_entire_buffer_binding(),
            },
        ));
    }
    Ok(Dispatch::new(device, &DEPTHWISE, entry, &[WG_CONST], &bindings, groups))
}

fn expect_f32(kernel: &str, operands: &[(&str, &Tensor)]) -> Result<()> {
    operands.iter().try_for_each(|(name, t)| expect_dtype(kernel, name, t, DType::F32))
}

/// `y[n, oh, ow, c * multiplier + m] = bias[c * multiplier + m] + sum_{i, j}
/// x[n, oh*sh - pt + i*dh, ow*sw - pl + j*dw, c] * w[i, j, c, m]`, zero outside the image.
/// Four output channels per invocation when `channels * multiplier` is a multiple of 4.
///
/// # Shapes
/// x `[batch, in_h, in_w, channels]`, w `[kh, kw, channels, multiplier]`, bias
/// `[channels * multiplier]`, y `[batch, out_h, out_w, channels * multiplier]`.
pub fn forward(device: &Device, geom: &DepthwiseGeometry, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, y: &Tensor) -> Result<Dispatch> {
    const K: &str = "depthwise_forward";
    expect_shape(K, "x", x, &geom.input_shape())?;
    expect_shape(K, "kernel", w, &geom.kernel_shape())?;
    expect_shape(K, "y", y, &geom.output_shape())?;
    if let Some(b) = bias {
        expect_shape(K, "bias", b, &[geom.out_channels()])?;
    }
    let b = bias.unwrap_or(w); // bound but unread without has_bias
    expect_f32(K, &[("x", x), ("kernel", w), ("bias", b), ("y", y)])?;
    expect_separate(K, &[("y", y)], &[("x", x), ("kernel", w), ("bias", b)])?;
    let flops = geom.flops() as f64;
    let bias_token = if bias.is_some() { "bias" } else { "" };
    let tokens = format!("{} {} {bias_token}", width_token(geom.out_channels().is_multiple_of(4)), geom.multiplier_token());
    let mut p = geom.params(y.len())?;
    p.has_bias = bias.is_some() as u32;
    if !geom.out_channels().is_multiple_of(4) {
        let binds = [(1, Bind::F32(x)), (2, Bind::F32(w)), (3, Bind::F32(b)), (5, Bind::F32(y))];
        return Ok(launch(device, K, "depthwise_forward", &p, &binds, grid_for(device, y.len())?)?.named(K, flops).tagged(tokens));
    }
    p.n /= 4;
    let binds = [(1, Bind::F32(x)), (6, Bind::Quads(x)), (7, Bind::Quads(w)), (8, Bind::Quads(b)), (10, Bind::Quads(y))];
    Ok(launch(device, K, "depthwise_forward4", &p, &binds, grid_for(device, y.len() / 4)?)?.named(K, flops).tagged(tokens))
}

/// The input gradient: `dx[n, ih, iw, c] = sum dy[n, oh, ow, c * multiplier + m] * w[i, j, c, m]`
/// over every `(oh, ow, i, j, m)` with `oh*sh - pt + i*dh = ih` and `ow*sw - pl + j*dw = iw`.
/// Overwrites `dx`; pixels no output reads get zero. Four input channels per invocation when
/// `channels` is a multiple of 4.
///
/// # Shapes
/// dy `[batch, out_h, out_w, channels * multiplier]`, w `[kh, kw, channels, multiplier]`,
/// dx `[batch, in_h, in_w, channels]`.
pub fn backward_data(device: &Device, geom: &DepthwiseGeometry, dy: &Tensor, w: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    const K: &str = "depthwise_backward_data";
    expect_shape(K, "dy", dy, &geom.output_shape())?;
    expect_shape(K, "kernel", w, &geom.kernel_shape())?;
    expect_shape(K, "dx", dx, &geom.input_shape())?;
    expect_f32(K, &[("dy", dy), ("kernel", w), ("dx", dx)])?;
    expect_separate(K, &[("dx", dx)], &[("dy", dy), ("kernel", w)])?;
    let flops = geom.flops() as f64;
    let tokens = format!("{} {}", width_token(geom.channels.is_multiple_of(4)), geom.multiplier_token());
    let mut p = geom.params(dx.len())?;
    if !geom.channels.is_multiple_of(4) {
        let binds = [(2, Bind::F32(w)), (4, Bind::F32(dy)), (5, Bind::F32(dx))];
        return Ok(launch(device, K, "depthwise_backward_data", &p, &binds, grid_for(device, dx.len())?)?.named(K, flops).tagged(tokens));
    }
    p.n /= 4;
    let binds = [(2, Bind::F32(w)), (4, Bind::F32(dy)), (7, Bind::Quads(w)), (9, Bind::Quads(dy)), (10, Bind::Quads(dx))];
    Ok(launch(device, K, "depthwise_backward_data4", &p, &binds, grid_for(device, dx.len() / 4)?)?.named(K, flops).tagged(tokens))
}

/// Widest column tile of the kernel gradient's workgroups (as [`super::reduce`]'s): 64
/// adjacent floats (or quads) of a row, with 4 lanes down the rows.
const MAX_TILE_LOG2: u32 = 6;
/// Rows each lane reads at least before the lanes are folded.
const ROWS_PER_LANE: usize = 16;
/// Workgroups of the first pass (taps x column tiles x row chunks) to aim for: enough to
/// fill a large GPU several times over; more would only lengthen the merge.
const TARGET_WORKGROUPS: usize = 1024;

/// The kernel gradient's split: `tiles` column tiles of `2^col_log2` columns, `chunks`
/// chunks of `chunk_rows` rows, one workgroup per (tile, chunk, tap).
struct Split {
    rows: usize,
    cols: usize,
    col_log2: u32,
    chunk_rows: usize,
    chunks: usize,
}

impl Split {
    fn new(rows: usize, cols: usize, taps: usize) -> Split {
        let col_log2 = cols.next_power_of_two().trailing_zeros().min(MAX_TILE_LOG2);
        let lanes = (WG >> col_log2) as usize;
        let tiles = cols.div_ceil(1 << col_log2);
        let want = rows.div_ceil(lanes * ROWS_PER_LANE).clamp(1, (TARGET_WORKGROUPS / (tiles * taps)).max(1));
        let chunk_rows = rows.div_ceil(want).max(1);
        // Recounted so that no chunk is empty.
        let chunks = rows.div_ceil(chunk_rows).max(1);
        Split { rows, cols, col_log2, chunk_rows, chunks }
    }
    fn tiles(&self) -> usize {
        self.cols.div_ceil(1 << self.col_log2)
    }
    /// The tokens of [`super::reduce::Split::tokens`]: one row chunk or several, one column
    /// tile or several.
    fn tokens(&self) -> String {
        let chunks = if self.chunks > 1 { "chunks=multi" } else { "chunks=single" };
        let tiles = if self.tiles() > 1 { "cols=tiled" } else { "cols=one_tile" };
        format!("{chunks} {tiles}")
    }
}

/// The kernel gradient: `dw[i, j, c, m] = sum_{n, oh, ow} x[n, oh*sh - pt + i*dh, ow*sw - pl + j*dw, c]
/// times dy[n, oh, ow, c * multiplier + m]`. Overwrites `dw`.
///
/// Why a split reduction: the sum runs over every output pixel of the batch into only
/// `kh * kw * channels * multiplier` outputs: MobileNetV2's first depthwise layer at 224 px
/// and batch 64 sums 802,816 rows (64 x 112 x 112) into 288 (3 x 3 x 32). One workgroup per
/// kernel element would give 288 workgroups, too few to fill a large GPU, each looping over
/// 800K rows alone and reading one float per 128-byte row of x and dy (a channel column), a
/// memory transaction per float. Instead a workgroup owns one tap, up to 64 adjacent output
/// channels (whole lines of each row of x and dy, as [`super::reduce`]'s column sums) and a
/// chunk of rows; taps, column tiles and chunks together make about `TARGET_WORKGROUPS`
/// workgroups (there 9 taps x 113 chunks of 7,105 rows, each lane of a workgroup summing 222
/// rows), and a second pass sums each output's 113 partials. Both passes add in a fixed
/// order (lanes by a tree, chunks in sequence), so every run gives the same bits: no atomics.
/// Each tap re-reads x and dy, as the forward re-reads x per tap.
///
/// # Shapes
/// x `[batch, in_h, in_w, channels]`, dy `[batch, out_h, out_w, channels * multiplier]`,
/// dw `[kh, kw, channels, multiplier]`.
pub fn backward_weights(device: &Device, geom: &DepthwiseGeometry, x: &Tensor, dy: &Tensor, dw: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "depthwise_backward_weights";
    expect_shape(K, "x", x, &geom.input_shape())?;
    expect_shape(K, "dy", dy, &geom.output_shape())?;
    expect_shape(K, "dw", dw, &geom.kernel_shape())?;
    expect_f32(K, &[("x", x), ("dy", dy), ("dw", dw)])?;
    expect_separate(K, &[("dw", dw)], &[("x", x), ("dy", dy)])?;
    let vec4 = geom.out_channels().is_multiple_of(4);
    let cols = if vec4 { geom.out_channels() / 4 } else { geom.out_channels() };
    let taps = geom.kh * geom.kw;
    let split = Split::new(geom.out_pixels(), cols, taps);
    let what = format!("{} output channels in {} column tiles and a {}x{} kernel ({taps} taps)", geom.out_channels(), split.tiles(), geom.kh, geom.kw);
    let groups = grid_3d(device, K, &what, [split.tiles(), split.chunks, taps])?;
    let mut p = geom.params(0)?;
    p.rows = u32_of(K, "rows", split.rows)?;
    p.cols = u32_of(K, "columns", split.cols)?;
    p.chunk_rows = u32_of(K, "chunk rows", split.chunk_rows)?;
    p.chunks = u32_of(K, "chunks", split.chunks)?;
    p.col_log2 = split.col_log2;
    let (entry, x_bind, dy_bind) = if vec4 { ("depthwise_backward_weights4", 6, 9) } else { ("depthwise_backward_weights", 1, 4) };
    let wide = |t| if vec4 { Bind::Quads(t) } else { Bind::F32(t) };
    let flops = geom.flops() as f64;
    let tokens = format!("{} {} {}", width_token(vec4), geom.multiplier_token(), split.tokens());
    let mut binds = vec![(x_bind, wide(x)), (dy_bind, wide(dy))];
    if vec4 {
        // x_quad's lanes read x as floats when the multiplier is not 1.
        binds.push((1, Bind::F32(x)));
    }
    if split.chunks == 1 {
        binds.push((if vec4 { 10 } else { 5 }, wide(dw)));
        return Ok(vec![launch(device, K, entry, &p, &binds, groups)?.named(K, flops).tagged(format!("pass=only {tokens}"))]);
    }
    // The partials live in a buffer of their own, not a pooled tensor, which the pool could
    // hand to another caller while this plan still writes it (see reduce::scratch).
    let partial = scratch(device, "depthwise kernel-gradient partials", split.chunks * taps * geom.out_channels());
    binds.push((if vec4 { 10 } else { 5 }, Bind::Scratch(&partial)));
    let first = launch(device, K, entry, &p, &binds, groups)?.named(K, flops).tagged(format!("pass=partial {tokens}"));
    let mut m = geom.params(dw.len())?;
    m.chunks = p.chunks;
    let merge_groups = grid_for(device, dw.len())?;
    let merge = launch(device, K, "depthwise_merge", &m, &[(11, Bind::Scratch(&partial)), (5, Bind::F32(dw))], merge_groups)?
        .named(K, 0.0)
        .tagged(format!("pass=merge {}", split.tokens()));
    Ok(vec![first, merge])
}

/// The bias gradient: `db[o] = sum_{n, oh, ow} dy[n, oh, ow, o]`, through the column sums of
/// [`super::reduce`]. Overwrites `db`.
///
/// # Shapes
/// dy `[batch, out_h, out_w, channels * multiplier]`, db `[channels * multiplier]`.
pub fn backward_bias(device: &Device, geom: &DepthwiseGeometry, dy: &Tensor, db: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "depthwise_backward_bias";
    expect_shape(K, "dy", dy, &geom.output_shape())?;
    expect_shape(K, "bias gradient", db, &[geom.out_channels()])?;
    expect_f32(K, &[("dy", dy), ("bias gradient", db)])?;
    sum_rows(device, &dy.reshape(&[geom.out_pixels(), geom.out_channels()])?, db)
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::Params;

    /// The WGSL `Params` and the Rust one are written twice: naga reads the shader's and
    /// every member must sit at the Rust field's offset.
    #[test]
    fn params_match_the_shader_struct() {
        let module = naga::front::wgsl::parse_str(super::super::DEPTHWISE.source).unwrap();
        let (members, span) = module
            .types
            .iter()
            .find_map(|(_, t)| match (&t.name, &t.inner) {
                (Some(n), naga::TypeInner::Struct { members, span }) if n == "Params" => Some((members.clone(), *span)),
                _ => None,
            })
            .expect("depthwise.wgsl declares Params");
        let rust = [
            ("batch", offset_of!(Params, batch)),
            ("in_h", offset_of!(Params, in_h)),
            ("in_w", offset_of!(Params, in_w)),
            ("channels", offset_of!(Params, channels)),
            ("multiplier", offset_of!(Params, multiplier)),
            ("out_h", offset_of!(Params, out_h)),
            ("out_w", offset_of!(Params, out_w)),
            ("kh", offset_of!(Params, kh)),
            ("kw", offset_of!(Params, kw)),
            ("stride_h", offset_of!(Params, stride_h)),
            ("stride_w", offset_of!(Params, stride_w)),
            ("dil_h", offset_of!(Params, dil_h)),
            ("dil_w", offset_of!(Params, dil_w)),
            ("pad_top", offset_of!(Params, pad_top)),
            ("pad_left", offset_of!(Params, pad_left)),
            ("n", offset_of!(Params, n)),
            ("has_bias", offset_of!(Params, has_bias)),
            ("rows", offset_of!(Params, rows)),
            ("cols", offset_of!(Params, cols)),
            ("chunk_rows", offset_of!(Params, chunk_rows)),
            ("chunks", offset_of!(Params, chunks)),
            ("col_log2", offset_of!(Params, col_log2)),
        ];
        let shader: Vec<(String, usize)> =
            members.iter().filter_map(|m| Some((m.name.clone()?, m.offset as usize))).filter(|(n, _)| !n.starts_with('_')).collect();
        let rust: Vec<(String, usize)> = rust.iter().map(|(n, o)| (n.to_string(), *o)).collect();
        assert_eq!(shader, rust, "depthwise.wgsl's Params against the Rust struct");
        assert_eq!(span as usize, size_of::<Params>(), "struct sizes");
    }
}
