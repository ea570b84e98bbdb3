//! MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D and GlobalMaxPooling2D over NHWC tensors
//! (`shaders/pool.wgsl`), with Keras' `"valid"`/`"same"` padding or PyTorch's explicit
//! symmetric padding.
//!
//! # Shapes
//! `x`, `dx`: `[batch, in_h, in_w, channels]`; `y`, `dy`: `[batch, out_h, out_w,
//! channels]`; global pooling outputs `[batch, channels]`; max pooling's `argmax` as
//! [`argmax_shape`] (global: [`global_argmax_shape`]) says.
//!
//! # Storage
//! A gradient is stored as its activation; argmax is u32. Max pooling (global too) and global
//! average pooling take `x` and `y` both f32 or both f16, and their backwards `dy` and `dx`
//! both f32 or both f16 (f16 sums are taken in f32 and rounded once, when stored); f16 needs
//! channels divisible by 4, since only the vec4 kernels store f16 (a scalar store would share
//! a word with its neighbour's). Average pooling, forward and backward, takes f32 alone: its
//! activations are never f16, so neither are its gradients.

use bytemuck::{Pod, Zeroable};

use super::{expect_activations, expect_dtype, expect_separate, expect_shape, grid_for, u32_of, width_token, Dispatch, Shader, Storage, POOL, POOL_ALL, WG_CONST};
use crate::{bail, DType, Device, Error, Result, Tensor};

/// Keras' `padding` argument of the pooling layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPadding {
    /// Only windows that fit entirely inside the input.
    Valid,
    /// `ceil(in / stride)` outputs; the padding is split with the extra row/column at the
    /// bottom/right, and padded positions take no part in the max or the mean.
    Same,
    /// PyTorch's `padding=(h, w)`: `h` rows above and below, `w` columns left and right,
    /// `(in + 2 * pad - pool) / stride + 1` outputs (the ResNet stem's 3x3 stride-2 max pool
    /// has padding 1). Padded positions never win a max; average pooling counts them as
    /// zeros (PyTorch's default `count_include_pad=True`), so every window divides by
    /// `pool_h * pool_w`. Each pad must be at most half the pool size, as PyTorch requires,
    /// so that every window holds input elements.
    Explicit(usize, usize),
}

impl PoolPadding {
    /// The architecture-JSON form: `"valid"`, `"same"` or `[h, w]` (as `Conv2D`'s padding).
    pub fn to_config(self) -> serde_json::Value {
        match self {
            PoolPadding::Valid => serde_json::json!("valid"),
            PoolPadding::Same => serde_json::json!("same"),
            PoolPadding::Explicit(h, w) => serde_json::json!([h, w]),
        }
    }

    /// Reads [`PoolPadding::to_config`]'s form; pads above the side cap are refused here,
    /// pads above half the pool size by [`Pool2dGeometry::new`].
    pub fn from_config(v: &serde_json::Value) -> Result<Self> {
        match v {
            serde_json::Value::String(s) => s.parse(),
            serde_json::Value::Array(a) if a.len() == 2 && a.iter().all(|x| x.as_u64().is_some()) => {
                let (h, w) = (a[0].as_u64().unwrap_or(0), a[1].as_u64().unwrap_or(0));
                let cap = crate::limits::MAX_SIDE as u64;
                if h > cap || w > cap {
                    bail!(Config, "pooling padding [{h}, {w}] is above the cap of {cap} per side");
                }
                Ok(PoolPadding::Explicit(h as usize, w as usize))
            }
            other => bail!(Config, "pooling padding must be \"valid\", \"same\" or [h, w], got {other}"),
        }
    }
}

impl std::str::FromStr for PoolPadding {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "valid" => Ok(PoolPadding::Valid),
            "same" => Ok(PoolPadding::Same),
            _ => bail!(Config, "padding must be \"valid\" or \"same\", got {s:?}"),
        }
    }
}

/// Where every pooling window of a 2-D pooling layer lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dGeometry {
    /// Samples.
    pub batch: usize,
    /// Input height, in pixels.
    pub in_h: usize,
    /// Input width, in pixels.
    pub in_w: usize,
    /// Channels, the same in and out.
    pub channels: usize,
    /// Window height.
    pub pool_h: usize,
    /// Window width.
    pub pool_w: usize,
    /// Vertical step between windows.
    pub stride_h: usize,
    /// Horizontal step between windows.
    pub stride_w: usize,
    /// Padded rows above the input.
    pub pad_top: usize,
    /// Padded columns left of the input.
    pub pad_left: usize,
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// Average pooling divides by `pool_h * pool_w` (padded positions count as zeros), not
    /// by the input positions of the window: set by [`PoolPadding::Explicit`] only.
    pub count_padding: bool,
}

/// (outputs, padding before) along one axis, as TensorFlow (or, for explicit padding,
/// PyTorch) computes them; `pad` is this axis' explicit padding.
fn axis(size: usize, pool: usize, stride: usize, padding: PoolPadding, pad: usize) -> Option<(usize, usize)> {
    match padding {
        PoolPadding::Valid => size.checked_sub(pool).map(|d| (d / stride + 1, 0)),
        PoolPadding::Explicit(..) => size.saturating_add(pad.saturating_mul(2)).checked_sub(pool).map(|d| (d / stride + 1, pad)),
        PoolPadding::Same => {
            let out = size.div_ceil(stride);
            let total = ((out - 1) * stride + pool).saturating_sub(size);
            Some((out, total / 2))
        }
    }
}

impl Pool2dGeometry {
    /// `strides` defaults to `pool_size`, as in Keras.
    ///
    /// # Shapes
    /// `input_shape`: `[batch, height, width, channels]`.
    pub fn new(input_shape: &[usize], pool_size: [usize; 2], strides: Option<[usize; 2]>, padding: PoolPadding) -> Result<Self> {
        let strides = strides.unwrap_or(pool_size);
        let &[batch, in_h, in_w, channels] = input_shape else {
            bail!(Shape, "pooling expects a 4-d NHWC input, got {input_shape:?}");
        };
        if pool_size.contains(&0) || strides.contains(&0) {
            bail!(Config, "pooling needs positive pool_size and strides, got {pool_size:?} and {strides:?}");
        }
        if in_h == 0 || in_w == 0 || channels == 0 {
            bail!(Shape, "pooling input {input_shape:?} is empty");
        }
        let pads = match padding {
            PoolPadding::Explicit(h, w) => [h, w],
            _ => [0, 0],
        };
        // PyTorch's rule: a pad of at most half the pool keeps every window at least half on
        // the input (a pad as large as the pool would place windows wholly on padding, which
        // have no max), and keeps models that load in PyTorch and in convoy the same set.
        if pads[0] > pool_size[0] / 2 || pads[1] > pool_size[1] / 2 {
            bail!(Config, "pooling padding {pads:?} must be at most half of pool_size {pool_size:?} on each axis, as in PyTorch");
        }
        let too_small = || Error::Shape(format!("pooling input {input_shape:?} is smaller than pool_size {pool_size:?} with padding {padding:?}"));
        let (out_h, pad_top) = axis(in_h, pool_size[0], strides[0], padding, pads[0]).ok_or_else(too_small)?;
        let (out_w, pad_left) = axis(in_w, pool_size[1], strides[1], padding, pads[1]).ok_or_else(too_small)?;
        let g = Pool2dGeometry {
            batch,
            in_h,
            in_w,
            channels,
            pool_h: pool_size[0],
            pool_w: pool_size[1],
            stride_h: strides[0],
            stride_w: strides[1],
            pad_top,
            pad_left,
            out_h,
            out_w,
            count_padding: matches!(padding, PoolPadding::Explicit(..)),
        };
        // The shader indexes in u32 and places windows in i32.
        u32_of("pooling", "input elements", g.input_shape().iter().product())?;
        if [in_h, in_w, g.pool_h, g.pool_w, g.stride_h, g.stride_w].iter().any(|&v| v >= 1 << 30) {
            bail!(Shape, "pooling of {input_shape:?} with pool_size {pool_size:?} and strides {strides:?} is too large");
        }
        Ok(g)
    }

    /// `[batch, in_h, in_w, channels]`.
    pub fn input_shape(&self) -> [usize; 4] {
        [self.batch, self.in_h, self.in_w, self.channels]
    }

    /// `[batch, out_h, out_w, channels]`.
    pub fn output_shape(&self) -> [usize; 4] {
        [self.batch, self.out_h, self.out_w, self.channels]
    }

    fn params(&self, n: usize) -> Result<Params> {
        let u = |v: usize| u32_of("pooling", "a dimension", v);
        Ok(Params {
            batch: u(self.batch)?,
            in_h: u(self.in_h)?,
            in_w: u(self.in_w)?,
            channels: u(self.channels)?,
            pool_h: u(self.pool_h)?,
            pool_w: u(self.pool_w)?,
            stride_h: u(self.stride_h)?,
            stride_w: u(self.stride_w)?,
            pad_top: u(self.pad_top)?,
            pad_left: u(self.pad_left)?,
            out_h: u(self.out_h)?,
            out_w: u(self.out_w)?,
            n: u32_of("pooling", "elements", n)?,
            count_padding: self.count_padding as u32,
            _pad: [0; 2],
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    batch: u32,
    in_h: u32,
    in_w: u32,
    channels: u32,
    pool_h: u32,
    pool_w: u32,
    stride_h: u32,
    stride_w: u32,
    pad_top: u32,
    pad_left: u32,
    out_h: u32,
    out_w: u32,
    n: u32,
    count_padding: u32,
    _pad: [u32; 2],
}

fn launch(device: &Device, shader: &Shader, entry: &'static str, params: Params, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    launch_with(device, shader, entry, &[WG_CONST], params, bindings)
}

/// [`launch`] with pipeline constants besides the workgroup size.
fn launch_with(device: &Device, shader: &Shader, entry: &'static str, constants: &[(&'static str, f64)], params: Params, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    Ok(Dispatch::with_params(device, shader, entry, constants, &params, bindings, grid_for(device, params.n as usize)?))
}

/// A launch four channels (or more) an invocation: counted as `entry` in profiles, tagged
/// with its width, `storage` and any `more` tokens.
fn quad_wide(d: Dispatch, entry: &'static str, storage: Storage, more: &str) -> Dispatch {
    d.named(entry, 0.0).tagged(format!("{} {} {more}", width_token(true), storage.token()))
}

/// A packed-argmax kernel (`entry4c`, counted as `entry`) over the `n` elements of its output
/// (the forward's y, the backward's dx), each invocation taking the most quads of one pixel
/// that `QUADS` allows (4, 2 or 1, dividing the pixel's quads; see shaders/pool.wgsl).
fn launch_packed(device: &Device, (entry, entry4c): (&'static str, &'static str), geom: &Pool2dGeometry, n: usize, storage: Storage, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    let quads = [4, 2, 1].into_iter().find(|q| (geom.channels / 4).is_multiple_of(*q)).unwrap_or(1);
    let p = geom.params(n)?;
    let p = Params { n: p.n / (4 * quads as u32), ..p };
    let d = launch_with(device, storage.pick(&POOL_ALL), entry4c, &[WG_CONST, ("QUADS", quads as f64)], p, bindings)?;
    Ok(quad_wide(d, entry, storage, &format!("packed quads={quads}")))
}

/// `entry` four channels per invocation (`entry4` on the `wide` bindings: the gradients'
/// and argmax's quad views at binding + 4, the forward's x and y at 9 and 10) where the
/// channel count allows it, else one on the `narrow` bindings; both count as `entry` in
/// profiles. Views start 256-byte aligned, so a multiple of four channels keeps every quad
/// within one aligned vec4. `storage` picks the module; the callers have refused f16 where
/// the channels are not a multiple of 4.
#[allow(clippy::too_many_arguments)]
fn launch_vec4(device: &Device, entry: &'static str, entry4: &'static str, geom: &Pool2dGeometry, n: usize, storage: Storage, narrow: &[(u32, &Tensor)], wide: &[(u32, &Tensor)]) -> Result<Dispatch> {
    launch_width(device, (entry, entry4), geom.params(n)?, storage, geom.channels.is_multiple_of(4), (narrow, wide))
}

/// `entry` one element per invocation on the `narrow` bindings or, `quads`, `entry4` four
/// channels per invocation on the `wide` ones (counted as `entry` in profiles), in
/// `storage`'s module and tagged with the width and the storage. f16 takes the quads alone.
fn launch_width(device: &Device, (entry, entry4): (&'static str, &'static str), p: Params, storage: Storage, quads: bool, (narrow, wide): (&[(u32, &Tensor)], &[(u32, &Tensor)])) -> Result<Dispatch> {
    let shader = storage.pick(&POOL_ALL);
    if !quads {
        debug_assert_eq!(storage, Storage::F32, "{entry}: f16 reached the scalar kernel");
        return Ok(launch(device, shader, entry, p, narrow)?.tagged(format!("{} {}", width_token(false), storage.token())));
    }
    Ok(quad_wide(launch(device, shader, entry4, Params { n: p.n / 4, ..p }, wide)?, entry, storage, ""))
}

/// The storage of a forward kernel's `x` and `y`, which must share it.
fn forward_storage(kernel: &str, x: &Tensor, y: &Tensor, channels: usize) -> Result<Storage> {
    expect_activations(kernel, &[("x", x), ("y", y)], ("channels", channels))
}

/// The storage of a backward kernel's `dy` and `dx`, which must share it: one module reads
/// and writes both, and the gradients are stored as the activations they belong to.
fn backward_storage(kernel: &str, dy: &Tensor, dx: &Tensor, channels: usize) -> Result<Storage> {
    expect_activations(kernel, &[("dy", dy), ("dx", dx)], ("channels", channels))
}

/// Whether max pooling over `geom` packs its argmax (see [`argmax_shape`]): four channels an
/// invocation and windows of 255 elements or fewer, so that a byte holds a place in the
/// window with 255 left for an empty one.
fn packed_argmax(geom: &Pool2dGeometry) -> bool {
    geom.channels.is_multiple_of(4) && geom.pool_h * geom.pool_w <= 255
}

/// The shape of the `argmax` tensor (u32) that [`max_pool_forward`] fills for `geom`: the
/// output's where each element holds an input position, or `[batch, out_h, out_w, channels
/// / 4]` where the channels divide by 4 and a window holds 255 elements or fewer: each word
/// then packs four channels' places in their windows, a byte each (the backward reads a
/// sixteenth of the bytes; ResNet's 3x3 stride-2 pool reads it once per covering window).
/// [`argmax_positions`] turns either into input positions.
pub fn argmax_shape(geom: &Pool2dGeometry) -> Vec<usize> {
    let mut shape = geom.output_shape().to_vec();
    if packed_argmax(geom) {
        shape[3] /= 4;
    }
    shape
}

/// The input position `h * in_w + w` each output of max pooling over `geom` took its value
/// from, read from `argmax` as [`max_pool_forward`] wrote it (`u32::MAX` for a window that
/// held no input, and for a packed place no window of `geom` has or one in its padding,
/// which only a faulty device writes: `convoy check` then reports a position outside the
/// window rather than this panicking), in the output's element order. Positions in full
/// (one word an output) pass through as they are.
pub fn argmax_positions(geom: &Pool2dGeometry, argmax: &[u32]) -> Result<Vec<u32>> {
    let outputs: usize = geom.output_shape().iter().product();
    if argmax.len() == outputs {
        return Ok(argmax.to_vec());
    }
    let want: usize = argmax_shape(geom).iter().product();
    if argmax.len() != want {
        bail!(Shape, "argmax_positions: {} words for pooling {:?}, expected {want} or {outputs}", argmax.len(), geom.input_shape());
    }
    let mut out = Vec::with_capacity(argmax.len() * 4);
    for (q, word) in argmax.iter().enumerate() {
        // The output pixel of quad q (its four channels share it).
        let pixel = q * 4 / geom.channels;
        let (ow, oh) = (pixel % geom.out_w, (pixel / geom.out_w) % geom.out_h);
        for lane in 0..4 {
            let place = ((word >> (8 * lane)) & 255) as usize;
            let h = (oh * geom.stride_h + place / geom.pool_w).checked_sub(geom.pad_top);
            let w = (ow * geom.stride_w + place % geom.pool_w).checked_sub(geom.pad_left);
            out.push(match (h, w) {
                (Some(h), Some(w)) if place < geom.pool_h * geom.pool_w && h < geom.in_h && w < geom.in_w => (h * geom.in_w + w) as u32,
                _ => u32::MAX,
            });
        }
    }
    Ok(out)
}

/// Max pooling; `argmax` records, per output, the input position `h * in_w + w` that won
/// (the first maximum in row-major window order on ties), for the backward pass, in the
/// form [`argmax_shape`] says. A window holding NaN outputs NaN, its first NaN the argmax:
/// a diverged input is never hidden by its neighbours.
///
/// # Shapes
/// `x`: `[batch, in_h, in_w, channels]` -> `y`: `[batch, out_h, out_w, channels]`, both f32
/// or both f16 (channels divisible by 4), `argmax`: [`argmax_shape`], u32.
pub fn max_pool_forward(device: &Device, geom: &Pool2dGeometry, x: &Tensor, y: &Tensor, argmax: &Tensor) -> Result<Dispatch> {
    let k = "max_pool_forward";
    expect_shape(k, "x", x, &geom.input_shape())?;
    expect_shape(k, "y", y, &geom.output_shape())?;
    expect_shape(k, "argmax", argmax, &argmax_shape(geom))?;
    let storage = forward_storage(k, x, y, geom.channels)?;
    expect_dtype(k, "argmax", argmax, DType::U32)?;
    expect_separate(k, &[("y", y), ("argmax", argmax)], &[("x", x)])?;
    if packed_argmax(geom) {
        return launch_packed(device, (k, "max_pool_forward4c"), geom, y.len(), storage, &[(9, x), (10, y), (4, argmax)]);
    }
    launch_vec4(device, k, "max_pool_forward4", geom, y.len(), storage, &[(1, x), (3, y), (4, argmax)], &[(9, x), (10, y), (8, argmax)]).map(|d| d.tagged("positions"))
}

/// The gradient of max pooling: each input position receives the sum of `dy` over the
/// outputs whose `argmax` chose it, taken in f32 and rounded once where `dx` is f16 (a sum
/// past f16's range is infinite). Overwrites `dx`.
///
/// # Shapes
/// `dy`: `[batch, out_h, out_w, channels]`, `argmax`: [`argmax_shape`] (u32) -> `dx`:
/// `[batch, in_h, in_w, channels]`; `dy` and `dx` both f32 or both f16 (channels divisible
/// by 4).
pub fn max_pool_backward(device: &Device, geom: &Pool2dGeometry, dy: &Tensor, argmax: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "max_pool_backward";
    expect_shape(k, "dy", dy, &geom.output_shape())?;
    expect_shape(k, "argmax", argmax, &argmax_shape(geom))?;
    expect_shape(k, "dx", dx, &geom.input_shape())?;
    let storage = backward_storage(k, dy, dx, geom.channels)?;
    expect_dtype(k, "argmax", argmax, DType::U32)?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy), ("argmax", argmax)])?;
    if packed_argmax(geom) {
        return launch_packed(device, (k, "max_pool_backward4c"), geom, dx.len(), storage, &[(5, dy), (2, argmax), (7, dx)]);
    }
    let (narrow, wide) = ([(1, dy), (2, argmax), (3, dx)], [(5, dy), (6, argmax), (7, dx)]);
    launch_vec4(device, k, "max_pool_backward4", geom, dx.len(), storage, &narrow, &wide).map(|d| d.tagged("positions"))
}

/// Average pooling; the mean is over the input positions of each window (padding is not
/// counted), as in Keras, except with [`PoolPadding::Explicit`], which divides by the whole
/// window as PyTorch's default `count_include_pad=True` does.
///
/// # Shapes
/// `x`: `[batch, in_h, in_w, channels]` -> `y`: `[batch, out_h, out_w, channels]`, f32.
pub fn avg_pool_forward(device: &Device, geom: &Pool2dGeometry, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    let k = "avg_pool_forward";
    expect_shape(k, "x", x, &geom.input_shape())?;
    expect_shape(k, "y", y, &geom.output_shape())?;
    expect_dtype(k, "x", x, DType::F32)?;
    expect_dtype(k, "y", y, DType::F32)?;
    expect_separate(k, &[("y", y)], &[("x", x)])?;
    launch(device, &POOL, k, geom.params(y.len())?, &[(1, x), (3, y)])
}

/// The gradient of average pooling. Overwrites `dx`.
///
/// # Shapes
/// `dy`: `[batch, out_h, out_w, channels]` -> `dx`: `[batch, in_h, in_w, channels]`, f32
/// (as [`avg_pool_forward`]'s activations, whose gradients they are).
pub fn avg_pool_backward(device: &Device, geom: &Pool2dGeometry, dy: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "avg_pool_backward";
    expect_shape(k, "dy", dy, &geom.output_shape())?;
    expect_shape(k, "dx", dx, &geom.input_shape())?;
    expect_dtype(k, "dy", dy, DType::F32)?;
    expect_dtype(k, "dx", dx, DType::F32)?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy)])?;
    launch(device, &POOL, k, geom.params(dx.len())?, &[(1, dy), (3, dx)])
}

/// The geometry of a pool over the whole map, from the 4-d input (or input-gradient) shape.
fn global_geometry(kernel: &str, shape: &[usize]) -> Result<Pool2dGeometry> {
    let &[_, h, w, _] = shape else {
        bail!(Shape, "{kernel}: expects a 4-d NHWC tensor, got {shape:?}");
    };
    Pool2dGeometry::new(shape, [h, w], None, PoolPadding::Valid).map_err(|e| Error::Shape(format!("{kernel}: {e}")))
}

/// The mean over height and width of each channel. f16 runs four channels per invocation
/// (the only way to store f16 without racing on a word); f32 keeps one per invocation.
///
/// # Shapes
/// `x`: `[batch, height, width, channels]` -> `y`: `[batch, channels]`, both f32 or both f16
/// (channels divisible by 4).
pub fn global_avg_pool_forward(device: &Device, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    let k = "global_avg_pool_forward";
    let g = global_geometry(k, x.shape())?;
    expect_shape(k, "y", y, &[g.batch, g.channels])?;
    let storage = forward_storage(k, x, y, g.channels)?;
    expect_separate(k, &[("y", y)], &[("x", x)])?;
    let f16 = storage == Storage::F16;
    launch_width(device, (k, "global_avg_pool_forward4"), g.params(y.len())?, storage, f16, (&[(1, x), (3, y)], &[(9, x), (10, y)]))
}

/// Spreads `dy / (height * width)` over the map. Overwrites `dx`. f16 runs four channels
/// per invocation, dividing in f32 and rounding once (the only way to store f16 without
/// racing on a word); f32 keeps one per invocation.
///
/// # Shapes
/// `dy`: `[batch, channels]` -> `dx`: `[batch, height, width, channels]`, both f32 or both
/// f16 (channels divisible by 4).
pub fn global_avg_pool_backward(device: &Device, dy: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "global_avg_pool_backward";
    let g = global_geometry(k, dx.shape())?;
    expect_shape(k, "dy", dy, &[g.batch, g.channels])?;
    let storage = backward_storage(k, dy, dx, g.channels)?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy)])?;
    let f16 = storage == Storage::F16;
    launch_width(device, (k, "global_avg_pool_backward4"), g.params(dx.len())?, storage, f16, (&[(1, dy), (3, dx)], &[(5, dy), (7, dx)]))
}

/// The maximum over height and width of each channel: max pooling with one window over the
/// whole map, so ties (the first maximum in row-major order wins) and NaN (the first NaN
/// wins and is output) behave as in [`max_pool_forward`]. `argmax` records the winning
/// position `h * width + w` per channel, in the form [`global_argmax_shape`] says.
///
/// # Shapes
/// `x`: `[batch, height, width, channels]` -> `y`: `[batch, channels]`, both f32 or both
/// f16 (channels divisible by 4); `argmax` (u32): [`global_argmax_shape`].
pub fn global_max_pool_forward(device: &Device, x: &Tensor, y: &Tensor, argmax: &Tensor) -> Result<Dispatch> {
    let k = "global_max_pool_forward";
    let g = global_geometry(k, x.shape())?;
    expect_shape(k, "y", y, &[g.batch, g.channels])?;
    expect_shape(k, "argmax", argmax, &global_argmax_shape(x.shape())?)?;
    // Checked here too so a refusal names this kernel, not the max pool it runs as.
    forward_storage(k, x, y, g.channels)?;
    let map = g.output_shape();
    Ok(max_pool_forward(device, &g, x, &y.reshape(&map)?, &argmax.reshape(&argmax_shape(&g))?)?.named(k, 0.0).tagged("global"))
}

/// The shape of the `argmax` tensor (u32) of a global max pool over `[batch, height, width,
/// channels]`: `[batch, channels]` of positions `h * width + w`, or `[batch, channels / 4]`
/// of packed places where [`argmax_shape`] packs them (channels divisible by 4, maps of 255
/// pixels or fewer). [`global_argmax_positions`] reads either.
pub fn global_argmax_shape(input_shape: &[usize]) -> Result<Vec<usize>> {
    let g = global_geometry("global_max_pool_forward", input_shape)?;
    let s = argmax_shape(&g);
    Ok(vec![s[0], s[3]])
}

/// [`argmax_positions`] for a global max pool over `input_shape`: per sample and channel,
/// the winning position `h * width + w`.
pub fn global_argmax_positions(input_shape: &[usize], argmax: &[u32]) -> Result<Vec<u32>> {
    argmax_positions(&global_geometry("global_max_pool_forward", input_shape)?, argmax)
}

/// The gradient of [`global_max_pool_forward`]: `dy` goes to each channel's `argmax`
/// position, zeros elsewhere. Overwrites `dx`.
///
/// # Shapes
/// `dy`: `[batch, channels]`, `argmax`: [`global_argmax_shape`] (u32) -> `dx`: `[batch,
/// height, width, channels]`; `dy` and `dx` both f32 or both f16 (channels divisible by 4).
pub fn global_max_pool_backward(device: &Device, dy: &Tensor, argmax: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "global_max_pool_backward";
    let g = global_geometry(k, dx.shape())?;
    expect_shape(k, "dy", dy, &[g.batch, g.channels])?;
    expect_shape(k, "argmax", argmax, &global_argmax_shape(dx.shape())?)?;
    // Checked here too so a refusal names this kernel, not the max pool it runs as.
    backward_storage(k, dy, dx, g.channels)?;
    let map = g.output_shape();
    Ok(max_pool_backward(device, &g, &dy.reshape(&map)?, &argmax.reshape(&argmax_shape(&g))?, dx)?.named(k, 0.0).tagged("global"))
}
