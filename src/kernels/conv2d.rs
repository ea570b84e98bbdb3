//! 2-D convolution as implicit GEMM (`shaders/conv2d.wgsl`, through [`super::gemm`]).
//!
//! Forward, input gradient and kernel gradient are three GEMMs over the same image:
//! - forward: `y[M = N*OH*OW, F] = im2col(x)[M, K = KH*KW*C] · w[K, F]`
//! - input gradient: `dx[N*H*W, C] = stuffed(dy)[N*H*W, KH*KW*F] · wᵀ` (w read per (i, j)
//!   block as `[C, F]` transposed); at stride > 1 one such product per phase of dx, over
//!   only the taps the phase meets (see [`backward_data`]); in mixed precision on tensor cores,
//!   at unit stride, the forward convolution of dy by w flipped into rows instead
//!   ([`flipped_geometry`])
//! - kernel gradient: `dw[KH*KW*C, F] = im2col(x)ᵀ · dy[N*OH*OW, F]`, its long K split
//!   across workgroups and reduced by a second dispatch.
//!
//! 1x1 kernels at stride 1 without padding skip the image arithmetic: x is already the
//! `[N*H*W, C]` matrix. Unit-stride 3x3 convolutions of 32 channels and more take the forward
//! and the input gradient through Winograd's F(4x4, 3x3) instead ([`super::winograd`]).
//!
//! Keras' `groups` and `dilation_rate` ride on the same products. A grouped convolution is
//! `groups` products on one grid, each over its group's slice of the channels (see
//! `gemm::Groups`); dilation multiplies the tap offsets of the gathers (the shader's
//! `DILATED` and `p.dil_h`, `p.dil_w`). As in Keras, dilation comes only with stride 1, so
//! the input gradient of a dilated convolution is one unit-stride product and the phase
//! products never see it.

use super::batchnorm::Partials;
use super::gemm::{self, ALoad, BLoad, Gemm, GemmOptions, Groups, Phase};
use super::winograd::{self, Pass};
use super::{elementwise, expect_shape, grid, grid_3d, u32_of, Dispatch, FLIP};
use crate::{bail, Device, Result, Tensor};

/// How the borders of the image are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// No padding: `out = (in - k) / s + 1`, rounded down.
    Valid,
    /// Keras / TensorFlow "same": `out = ceil(in / s)`, the padding split with the odd
    /// pixel at the bottom / right.
    Same,
    /// PyTorch's symmetric `(pad_h, pad_w)`: `out = (in + 2p - k) / s + 1`, rounded down.
    Explicit(usize, usize),
}

/// Every size of one convolution, resolved once from the input shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Samples.
    pub batch: usize,
    /// Input height, in pixels.
    pub in_h: usize,
    /// Input width, in pixels.
    pub in_w: usize,
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub filters: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Vertical step between windows.
    pub stride_h: usize,
    /// Horizontal step between windows.
    pub stride_w: usize,
    /// Zero rows above the input (with `same`, the odd row of padding goes below).
    pub pad_top: usize,
    /// Zero columns left of the input (with `same`, the odd column goes right).
    pub pad_left: usize,
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// Keras' `dilation_rate` along the height: tap `i` reads the input row `i * dilation_h`
    /// below the window's first (1: adjacent taps).
    pub dilation_h: usize,
    /// The same along the width.
    pub dilation_w: usize,
    /// Keras' `groups`: filters `[j * F / g, (j + 1) * F / g)` read only the input channels
    /// `[j * C / g, (j + 1) * C / g)`.
    pub groups: usize,
}

/// Output length and leading padding along one axis (the depthwise convolution's too, with
/// its dilated kernel's extent as `k`).
pub(crate) fn axis(what: &str, input: usize, k: usize, s: usize, padding: Padding, pad: usize) -> Result<(usize, usize)> {
    let (out, before) = match padding {
        Padding::Same => {
            let out = input.div_ceil(s);
            let total = ((out - 1) * s + k).saturating_sub(input);
            (out, total / 2)
        }
        Padding::Valid | Padding::Explicit(..) => {
            let padded = input + 2 * pad;
            if padded < k {
                bail!(Shape, "conv2d: {what} {input} with padding {pad} is smaller than the kernel ({k}): the output would be empty");
            }
            ((padded - k) / s + 1, pad)
        }
    };
    Ok((out, before))
}

impl Conv2dGeometry {
    /// Resolves the geometry of a convolution of an NHWC input of `input_shape` with
    /// `filters` kernels of `kernel = (kh, kw)` (no dilation, one group).
    pub fn new(input_shape: &[usize], filters: usize, kernel: (usize, usize), strides: (usize, usize), padding: Padding) -> Result<Self> {
        Self::new_with(input_shape, filters, kernel, strides, (1, 1), 1, padding)
    }

    /// [`Conv2dGeometry::new`] with Keras' `dilation_rate` and `groups`. As in Keras, a
    /// stride above 1 cannot come with a dilation above 1, and `groups` must divide both the
    /// input channels and `filters`. "same" pads for the dilated kernel's extent
    /// `(k - 1) * d + 1`, as TensorFlow does.
    pub fn new_with(input_shape: &[usize], filters: usize, kernel: (usize, usize), strides: (usize, usize), dilation: (usize, usize), groups: usize, padding: Padding) -> Result<Self> {
        let &[batch, in_h, in_w, in_c] = input_shape else {
            bail!(Shape, "conv2d expects an NHWC input [batch, height, width, channels], got {input_shape:?}");
        };
        if input_shape.contains(&0) {
            bail!(Shape, "conv2d: input shape {input_shape:?} has an empty dimension");
        }
        if filters == 0 || kernel.0 == 0 || kernel.1 == 0 {
            bail!(Config, "conv2d: filters ({filters}) and kernel size {kernel:?} must be positive");
        }
        if strides.0 == 0 || strides.1 == 0 {
            bail!(Config, "conv2d: strides {strides:?} must be positive");
        }
        if dilation.0 == 0 || dilation.1 == 0 {
            bail!(Config, "conv2d: dilation_rate {dilation:?} must be positive");
        }
        if (strides.0 > 1 || strides.1 > 1) && (dilation.0 > 1 || dilation.1 > 1) {
            bail!(Config, "conv2d: strides {strides:?} with dilation_rate {dilation:?}: as in Keras, any stride != 1 is incompatible with any dilation_rate != 1");
        }
        if groups == 0 || !in_c.is_multiple_of(groups) || !filters.is_multiple_of(groups) {
            bail!(Config, "conv2d: groups {groups} must divide both the input channels ({in_c}) and filters ({filters})");
        }
        let (ph, pw) = match padding {
            Padding::Explicit(ph, pw) => (ph, pw),
            _ => (0, 0),
        };
        // The window a dilated kernel spans, which every output-size rule uses.
        let extent = ((kernel.0 - 1).saturating_mul(dilation.0).saturating_add(1), (kernel.1 - 1).saturating_mul(dilation.1).saturating_add(1));
        if extent.0.max(extent.1) >= 1 << 30 {
            bail!(Shape, "conv2d: kernel {kernel:?} at dilation_rate {dilation:?} spans {extent:?} pixels, too many (the limit is {})", 1 << 30);
        }
        if padding != Padding::Same {
            for (what, size, pad, k, d, e) in [("height", in_h, ph, kernel.0, dilation.0, extent.0), ("width", in_w, pw, kernel.1, dilation.1, extent.1)] {
                if d > 1 && size + 2 * pad < e {
                    bail!(Shape, "conv2d: input {what} {size} with padding {pad} is smaller than the kernel's extent {e} ({k} taps at dilation {d}): the output would be empty");
                }
            }
        }
        let (out_h, pad_top) = axis("height", in_h, extent.0, strides.0, padding, ph)?;
        let (out_w, pad_left) = axis("width", in_w, extent.1, strides.1, padding, pw)?;
        Ok(Conv2dGeometry {
            batch,
            in_h,
            in_w,
            in_c,
            filters,
            kh: kernel.0,
            kw: kernel.1,
            stride_h: strides.0,
            stride_w: strides.1,
            pad_top,
            pad_left,
            out_h,
            out_w,
            dilation_h: dilation.0,
            dilation_w: dilation.1,
            groups,
        })
    }

    /// `[batch, in_h, in_w, in_c]`.
    pub fn input_shape(&self) -> Vec<usize> {
        vec![self.batch, self.in_h, self.in_w, self.in_c]
    }
    /// `[batch, out_h, out_w, filters]`.
    pub fn output_shape(&self) -> Vec<usize> {
        vec![self.batch, self.out_h, self.out_w, self.filters]
    }
    /// `[kh, kw, in_c / groups, filters]`, Keras' kernel layout.
    pub fn kernel_shape(&self) -> Vec<usize> {
        vec![self.kh, self.kw, self.group_in_c(), self.filters]
    }
    /// Input channels one group reads.
    pub fn group_in_c(&self) -> usize {
        self.in_c / self.groups
    }
    /// Filters of one group.
    pub fn group_filters(&self) -> usize {
        self.filters / self.groups
    }

    /// Multiply-adds of the forward pass, counted as 2 flops each: the useful work of each
    /// of the three passes (the input gradient's GEMM at stride > 1 multiplies more zeros,
    /// which the profile does not count).
    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.out_h * self.out_w) as u64 * self.filters as u64 * (self.kh * self.kw * self.group_in_c()) as u64
    }

    /// A 1x1 kernel at stride 1 without padding: the image is already the GEMM's matrix.
    pub fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride_h == 1 && self.stride_w == 1 && self.pad_top == 0 && self.pad_left == 0
    }

    fn out_pixels(&self) -> usize {
        self.batch * self.out_h * self.out_w
    }
    fn in_pixels(&self) -> usize {
        self.batch * self.in_h * self.in_w
    }
}

/// `y[n, oh, ow, f] = sum_{i, j, c} x[n, oh*sh - pt + i*dh, ow*sw - pl + j*dw, c] * w[i, j, c, f]`,
/// zero outside the image; in a grouped convolution c runs over the input channels of f's
/// group (and indexes w from the group's first).
///
/// # Shapes
/// x `[batch, in_h, in_w, in_c]`, w `[kh, kw, in_c / groups, filters]`, y `[batch, out_h, out_w, filters]`.
pub fn forward(device: &Device, geom: &Conv2dGeometry, x: &Tensor, w: &Tensor, y: &Tensor) -> Result<Vec<Dispatch>> {
    forward_with(device, geom, x, w, y, &GemmOptions::default())
}

/// [`forward`] with the tile and K split forced (tuning, tests).
pub fn forward_with(device: &Device, geom: &Conv2dGeometry, x: &Tensor, w: &Tensor, y: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    Ok(forward_statistics(device, geom, x, w, None, y, opts, false)?.0)
}

/// A training or inference BatchNormalization, with its fused ReLU where `relu`, applied to a
/// convolution's input as the product gathers it ([`forward_normalized`]): each element x of
/// channel c becomes `(x - mean[c]) * k[c] + b[c]`, one fused multiply-add as the layer's own
/// kernels compute it (shaders/lib/affine.wgsl), then the ReLU, rounded as x is stored —
/// what that layer's forward would have stored — so that its output need not be written and
/// read back. `params` is `[3, in_c]` f32: the means, `k = inv_std * gamma` and `b = beta`
/// (a training layer's batch statistics, or the moving ones). The padding stays zero.
///
/// The models do not use it: each element is normalized once per tap and column tile that
/// gathers it, against once by the normalize pass, and on the H200's tensor cores the
/// products that did so ran 1.6-2x slower (ResNet-50 mixed 3,057 -> 2,549 images/s;
/// benches/results/2026-11-28g/call2).
#[derive(Clone, Copy, Debug)]
pub struct InputNorm<'a> {
    /// `[3, in_c]` f32: mean, inv_std * gamma, beta.
    pub params: &'a Tensor,
    /// The ReLU after the normalization.
    pub relu: bool,
}

/// A residual block's join finished by its first convolution's input gradient: the product
/// stores `relu_grad(dx + d, y)`, dx rounded to its storage first, where the join's backward
/// pass (`elementwise::add_relu_backward`) would read dx, the shortcut's gradient `d` and
/// the block's input `y` (the ReLU output that masks them) after it: the same values, with
/// one pass over three tensors fewer. `JOIN` in shaders/conv2d.wgsl.
#[derive(Clone, Copy, Debug)]
pub struct Join<'a> {
    /// The shortcut's gradient, stored as dx.
    pub d: &'a Tensor,
    /// The block's input, the output of the ReLU before it, stored as dx.
    pub y: &'a Tensor,
}

impl Join<'_> {
    /// Whether `c`'s product can store the join: both tensors of `c`'s storage and size in
    /// buffers of their own (wgpu binds no buffer both written and read in one dispatch), C's
    /// rows whole quads.
    pub fn fits(&self, c: &Tensor) -> bool {
        let alike = |t: &Tensor| t.dtype() == c.dtype() && t.len() == c.len() && !t.same_storage(c);
        alike(self.d) && alike(self.y) && c.shape().last().is_some_and(|n| n.is_multiple_of(4))
    }

    /// Refuses a product `g` that cannot store the join, naming what it got.
    pub(crate) fn check(&self, kernel: &str, g: &Gemm) -> Result<()> {
        if !self.fits(g.c) || g.groups.is_some() || g.phase.is_some() || g.bias.is_some() || !g.n.is_multiple_of(4) {
            bail!(
                Config,
                "{kernel}: a join stores whole quads of an ungrouped C without phases or bias, from tensors of C's storage and size ({:?} {:?}) in other buffers: got d {:?} {:?}, y {:?} {:?}, {} columns",
                g.c.dtype(),
                g.c.shape(),
                self.d.dtype(),
                self.d.shape(),
                self.y.dtype(),
                self.y.shape(),
                g.n
            );
        }
        Ok(())
    }
}

/// [`forward_with`] of the input normalized as it is gathered (see [`InputNorm`]), on the
/// implicit GEMM (not Winograd); grouped convolutions are refused. Its kernel's gradient is
/// [`backward_weights_normalized`]'s.
pub fn forward_normalized(device: &Device, geom: &Conv2dGeometry, x: &Tensor, norm: InputNorm<'_>, w: &Tensor, y: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    const K: &str = "conv2d_forward";
    expect_forward_shapes(K, geom, x, w, y)?;
    let g = forward_gemm(K, geom, x, w, y, geom.flops() as f64);
    gemm::launch(device, &Gemm { a_norm: Some(norm), ..g }, opts)
}

/// x, the kernel and y of a forward `geom` against its shapes.
fn expect_forward_shapes(kernel: &str, geom: &Conv2dGeometry, x: &Tensor, w: &Tensor, y: &Tensor) -> Result<()> {
    expect_shape(kernel, "x", x, &geom.input_shape())?;
    expect_shape(kernel, "kernel", w, &geom.kernel_shape())?;
    expect_shape(kernel, "y", y, &geom.output_shape())
}

/// [`forward_with`] plus a `bias` (`[filters]`, f32) added to y, and for a convolution whose
/// output a training BatchNormalization normalises, y's statistics: with `stats`, where the
/// implicit GEMM computes y unsplit on an ALU kernel (not Winograd, no groups, K not split,
/// not the tensor cores: see `gemm::launch_statistics`), its epilogue
/// also writes y's per-channel statistics over chunks of rows as it stores y (bias
/// included), the BatchNorm's first pass, returned for
/// [`super::batchnorm::forward_train_with`]; `None` where it does not. The bias goes in as
/// the GEMM stores its tile, or by a pass of its own after Winograd and grouped products
/// (an f32 y then).
#[allow(clippy::too_many_arguments)]
pub fn forward_statistics(
    device: &Device,
    geom: &Conv2dGeometry,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    y: &Tensor,
    opts: &GemmOptions,
    stats: bool,
) -> Result<(Vec<Dispatch>, Option<Partials>)> {
    const K: &str = "conv2d_forward";
    expect_forward_shapes(K, geom, x, w, y)?;
    if let Some(b) = bias {
        expect_shape(K, "bias", b, &[geom.filters])?;
    }
    // The bias apart, after the product: the pass that takes it once y is whole.
    let apart = |mut products: Vec<Dispatch>| -> Result<Vec<Dispatch>> {
        if let Some(b) = bias {
            products.push(elementwise::bias_add(device, y, b)?);
        }
        Ok(products)
    };
    // The Winograd transforms read and write f32; f16 activations take the implicit GEMM.
    let f32_storage = x.dtype() == crate::DType::F32 && y.dtype() == crate::DType::F32;
    if f32_storage && let Some(m) = winograd::choose(device, geom, Pass::Forward, opts)? {
        return Ok((apart(winograd::convolve(device, K, geom, Pass::Forward, m, x, w, y, opts)?)?, None));
    }
    let g = forward_gemm(K, geom, x, w, y, geom.flops() as f64);
    if g.groups.is_some() {
        // A grouped product stores a group's slice of each row and takes no bias.
        return Ok((apart(gemm::launch(device, &g, opts)?)?, None));
    }
    gemm::launch_statistics(device, &Gemm { bias, ..g }, opts, stats)
}

/// The forward's product `im2col(x) · w` (x itself as the matrix for a 1x1 kernel).
fn forward_gemm<'a>(label: &'static str, geom: &'a Conv2dGeometry, x: &'a Tensor, w: &'a Tensor, y: &'a Tensor, flops: f64) -> Gemm<'a> {
    let (c, f) = (geom.group_in_c(), geom.group_filters());
    Gemm {
        label,
        m: geom.out_pixels(),
        n: f,
        k: geom.kh * geom.kw * c,
        a_load: if geom.is_pointwise() { ALoad::Rows } else { ALoad::Im2col },
        b_load: BLoad::Rows,
        conv: Some(geom),
        phase: None,
        // x's channels and y's and w's columns, a group's slice of each.
        groups: Groups::of(geom, (geom.in_c, c), (geom.filters, f), (geom.filters, f)),
        a: x,
        b: w,
        bias: None,
        c: y,
        stats: None,
        a_norm: None,
        join: None,
        flops,
    }
}

/// The slot of [`Device::scratch`] that holds a flipped kernel (see [`flipped`]).
const SCRATCH_FLIPPED: usize = 3;

/// The forward convolution whose output is `geom`'s input gradient, where one is: at unit
/// stride, undilated and ungrouped, dx is dy convolved with the kernel flipped in both axes
/// and its channels swapped, padded by `k - 1 - pad` before (the padding after follows from
/// the sizes). Paddings above `k - 1` have none.
pub fn flipped_geometry(geom: &Conv2dGeometry) -> Option<Conv2dGeometry> {
    let unit = (geom.stride_h, geom.stride_w, geom.dilation_h, geom.dilation_w, geom.groups) == (1, 1, 1, 1, 1);
    (unit && geom.pad_top < geom.kh && geom.pad_left < geom.kw).then(|| Conv2dGeometry {
        in_h: geom.out_h,
        in_w: geom.out_w,
        in_c: geom.filters,
        filters: geom.in_c,
        pad_top: geom.kh - 1 - geom.pad_top,
        pad_left: geom.kw - 1 - geom.pad_left,
        out_h: geom.in_h,
        out_w: geom.in_w,
        ..*geom
    })
}

/// Whether `geom`'s input gradient is computed as [`flipped`]: as `opts.flip` forces, else on
/// the tensor cores, whose kernel reads the transposed blocks of w and the stuffed dy slower
/// than the forward's rows (H100, batch 256, `cargo bench --bench gemm -- --flip on,off`:
/// ResNet-18's 3x3 convolutions of 64-512 channels 0.50-0.78 ms flipped against 0.66-0.99;
/// ResNet-50's 1x1 ones 0.28-0.52 against 0.33-0.60: the 64 -> 256 one, first timed at
/// 0.75, takes 0.46-0.47 in three later runs).
/// The float32 kernel gained 0-5% on 1x1 and nothing where Winograd takes the 3x3 ones.
fn flips(device: &Device, kernel: &str, geom: &Conv2dGeometry, opts: &GemmOptions) -> Result<Option<Conv2dGeometry>> {
    let back = flipped_geometry(geom);
    match opts.flip {
        Some(false) => Ok(None),
        Some(true) if !flippable(geom) => {
            bail!(Config, "{kernel}: the flipped kernel cannot compute {geom:?}'s input gradient: it takes unit-stride, undilated, ungrouped convolutions padded by less than the kernel, and strided unpadded ungrouped 1x1 ones")
        }
        Some(true) => Ok(back),
        None => Ok(if flips_by_default(device, kernel, opts)? { back } else { None }),
    }
}

/// Where `opts.flip` is unset, whether the input gradients read the kernel flipped: mixed
/// products on tensor cores.
fn flips_by_default(device: &Device, kernel: &str, opts: &GemmOptions) -> Result<bool> {
    Ok(opts.mixed && device.has_coop16() && gemm::Engine::of(device, opts, kernel)? == gemm::Engine::Tiled)
}

/// Whether `opts.flip = Some(true)` can compute `geom`'s input gradient: through
/// [`flipped_geometry`], or as a downsample's one tapped phase reading w flipped (see
/// `transposes`).
pub fn flippable(geom: &Conv2dGeometry) -> bool {
    flipped_geometry(geom).is_some() || downsample(geom)
}

/// Whether a strided input gradient's one tapped phase reads w transposed beforehand (a
/// 1x1 kernel's flip) as plain rows, rather than gathering w's block transposed as it loads:
/// on a strided unpadded ungrouped 1x1 kernel (a ResNet downsample) on the tiled kernels, as
/// `opts.flip` forces, else on the tensor cores. There its rows fetch without edge tests
/// (`inside_b`): ResNet-50's downsample input gradients 0.35-0.42 ms -> 0.26-0.38 (H200,
/// batch 128, session 38). Gathering the larger kernels' taps from a transposed copy changed
/// nothing (the 3x3/2 ones, 1.78 ms summed either way), so they keep the gather.
fn transposes(device: &Device, kernel: &str, geom: &Conv2dGeometry, opts: &GemmOptions) -> Result<bool> {
    if !downsample(geom) || gemm::Engine::of(device, opts, kernel)? != gemm::Engine::Tiled {
        return Ok(false);
    }
    match opts.flip {
        Some(forced) => Ok(forced),
        None => flips_by_default(device, kernel, opts),
    }
}

/// A strided, unpadded, ungrouped 1x1 convolution: its input gradient's one tapped phase is
/// dy's rows times w transposed.
fn downsample(geom: &Conv2dGeometry) -> bool {
    let strided = geom.stride_h > 1 || geom.stride_w > 1;
    strided && (geom.kh, geom.kw, geom.pad_top, geom.pad_left, geom.groups) == (1, 1, 0, 0, 1)
}

/// dx as the forward convolution `back` (see [`flipped_geometry`]) of dy by w flipped into
/// the device's scratch (`shaders/flip.wgsl`): two dispatches, the flip a read of w.
/// With `ready`, w's flip written beforehand ([`flip_kernel`]), the product alone.
#[allow(clippy::too_many_arguments)]
fn flipped(device: &Device, kernel: &'static str, geom: &Conv2dGeometry, back: &Conv2dGeometry, dy: &Tensor, w: &Tensor, ready: Option<&Tensor>, dx: &Tensor, join: Option<Join<'_>>, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    let (wf, flip) = flip_or_ready(device, kernel, geom, w, ready)?;
    let wf = wf.reshape(&back.kernel_shape())?;
    let product = gemm::launch(device, &Gemm { join, ..forward_gemm(kernel, back, dy, &wf, dx, geom.flops() as f64) }, opts)?;
    Ok(flip.into_iter().chain(product.into_iter().map(|d| d.tagged("flipped"))).collect())
}

/// `ready` where w's flip was written beforehand, else a flip into the device's scratch and
/// the dispatch that writes it.
fn flip_or_ready(device: &Device, kernel: &'static str, geom: &Conv2dGeometry, w: &Tensor, ready: Option<&Tensor>) -> Result<(Tensor, Option<Dispatch>)> {
    match ready {
        Some(flipped) => {
            check_flipped(kernel, w, flipped)?;
            Ok((flipped.clone(), None))
        }
        None => {
            let wf = device.scratch(SCRATCH_FLIPPED, w.len())?;
            let flip = flip_into(device, kernel, geom, w, &wf)?;
            Ok((wf, Some(flip)))
        }
    }
}

/// Whether [`backward_data_with`] (and [`backward_data_joined`]) read `geom`'s kernel
/// flipped under `opts` (a unit-stride input gradient as a forward convolution, or a
/// downsample's transposed 1x1 kernel), flipping it into the device's scratch first: where
/// they do, a caller can write the flip ahead with [`flip_kernel`] (or with its other
/// kernels' in one dispatch, [`flip_kernels`]) and hand it to [`backward_data_flipped`]. A
/// model flips all its kernels so before its backward: a flip before each input gradient, a
/// short dispatch behind a barrier of its own, cost ResNet-50 0.28 ms a step (H200, mixed,
/// 49 of them).
pub fn reads_flipped(device: &Device, geom: &Conv2dGeometry, opts: &GemmOptions) -> Result<bool> {
    const K: &str = "conv2d_backward_data";
    Ok(flips(device, K, geom, opts)?.is_some() || transposes(device, K, geom, opts)?)
}

/// `w` `[kh, kw, c, f]` flipped as the input gradient reads it (see [`reads_flipped`]) into
/// `flipped`, an F32 tensor of w's length: one dispatch.
pub fn flip_kernel(device: &Device, geom: &Conv2dGeometry, w: &Tensor, flipped: &Tensor) -> Result<Dispatch> {
    const K: &str = "conv2d_flip_kernel";
    expect_shape(K, "kernel", w, &geom.kernel_shape())?;
    check_flipped(K, w, flipped)?;
    flip_into(device, K, geom, w, flipped)
}

/// One kernel of [`flip_kernels`]: its convolution, the kernel, and where its flip goes (F32,
/// the kernel's length).
#[derive(Clone, Copy, Debug)]
pub struct KernelFlip<'a> {
    /// The convolution whose input gradient reads the flip.
    pub geom: &'a Conv2dGeometry,
    /// The kernel `[kh, kw, c, f]`.
    pub w: &'a Tensor,
    /// Where its flip goes.
    pub flipped: &'a Tensor,
}

/// Kernels one [`flip_kernels`] dispatch flips at most (`MAX_FLIPS` in shaders/flip.wgsl).
const MAX_FLIPS: usize = 64;

/// [`flip_kernel`] of each of `flips`, in as few dispatches as their storage allows: one for
/// up to 64 kernels that are views of one buffer (a model's flat parameters) whose flips are
/// views of another, each buffer's range within a binding (`flip_kernels` in
/// shaders/flip.wgsl). A model records it once at the start of its backward: a flip a
/// dispatch, 49 in ResNet-50, cost its step 0.28 ms on the H200.
pub fn flip_kernels(device: &Device, flips: &[KernelFlip<'_>]) -> Result<Vec<Dispatch>> {
    const K: &str = "conv2d_flip_kernels";
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct FlipTable {
        count: [u32; 4],
        at: [[u32; 4]; 2 * MAX_FLIPS],
    }
    for f in flips {
        expect_shape(K, "kernel", f.w, &f.geom.kernel_shape())?;
        check_flipped(K, f.w, f.flipped)?;
    }
    let limit = device.limits().max_storage_buffer_binding_size;
    // A byte range of one buffer: the one a group's kernels (or flips) span, and what it
    // would span with one more.
    let span = |range: Option<(u64, u64)>, t: &Tensor| range.map_or((t.offset(), t.offset() + t.bytes()), |(a, b)| (a.min(t.offset()), b.max(t.offset() + t.bytes())));
    let mut dispatches = Vec::new();
    let mut start = 0;
    while start < flips.len() {
        let (first, mut end) = (&flips[start], start);
        let (mut src, mut dst) = (None, None);
        while end < flips.len() && end - start < MAX_FLIPS {
            let f = &flips[end];
            let (s, d) = (span(src, f.w), span(dst, f.flipped));
            if !f.w.same_storage(first.w) || !f.flipped.same_storage(first.flipped) || s.1 - s.0 > limit || d.1 - d.0 > limit {
                break;
            }
            (src, dst, end) = (Some(s), Some(d), end + 1);
        }
        let (Some((src_at, src_end)), Some((dst_at, dst_end))) = (src, dst) else {
            bail!(Shape, "{K}: a kernel of {} bytes or its flip exceeds a binding's {limit}", first.w.bytes());
        };
        let mut table = FlipTable { count: [(end - start) as u32, 0, 0, 0], at: [[0; 4]; 2 * MAX_FLIPS] };
        let mut workgroups = 0u64;
        for (i, f) in flips[start..end].iter().enumerate() {
            let g = f.geom;
            let (blocks_c, blocks_f) = (g.in_c.div_ceil(32), g.filters.div_ceil(32));
            let at = |t: &Tensor, base: u64| u32_of(K, "a kernel's place in its buffer", ((t.offset() - base) / 4) as usize);
            table.at[2 * i] = [at(f.w, src_at)?, at(f.flipped, dst_at)?, u32_of(K, "taps", g.kh * g.kw)?, u32_of(K, "workgroups", workgroups as usize)?];
            table.at[2 * i + 1] = [u32_of(K, "channels", g.in_c)?, u32_of(K, "filters", g.filters)?, blocks_c as u32, blocks_f as u32];
            workgroups += (blocks_c * blocks_f * g.kh * g.kw) as u64;
        }
        let uniform = device.uniform(&table);
        fn binding(t: &Tensor, (at, end): (u64, u64)) -> wgpu::BufferBinding<'_> {
            wgpu::BufferBinding { buffer: t.buffer(), offset: at, size: std::num::NonZeroU64::new(end - at) }
        }
        let bindings = [(1, binding(first.w, (src_at, src_end))), (2, binding(first.flipped, (dst_at, dst_end))), (4, uniform.as_entire_buffer_binding())];
        dispatches.push(Dispatch::new(device, &FLIP, "flip_kernels", &[], &bindings, grid(device, workgroups)?).named(K, 0.0).tagged(format!("kernels={}", end - start)));
        start = end;
    }
    Ok(dispatches)
}

/// A flipped kernel's tensor: F32 and w's length.
fn check_flipped(kernel: &str, w: &Tensor, flipped: &Tensor) -> Result<()> {
    if flipped.dtype() != crate::DType::F32 || flipped.len() != w.len() {
        bail!(Shape, "{kernel}: the flipped kernel is {:?} {:?}, expected F32 of {} elements as the kernel {:?}", flipped.dtype(), flipped.shape(), w.len(), w.shape());
    }
    Ok(())
}

/// [`backward_data_with`], or with `join` [`backward_data_joined`], reading w's flip from
/// `flipped` ([`flip_kernel`]) instead of flipping it first where one is given and the path
/// reads a flip ([`reads_flipped`]; elsewhere `flipped` is not read). `None` (nothing
/// recorded) where a join cannot be stored, as [`backward_data_joined`] says.
#[allow(clippy::too_many_arguments)]
pub fn backward_data_flipped(device: &Device, geom: &Conv2dGeometry, dy: &Tensor, w: &Tensor, flipped: Option<&Tensor>, dx: &Tensor, join: Option<Join<'_>>, opts: &GemmOptions) -> Result<Option<Vec<Dispatch>>> {
    if let Some(join) = join
        && (!join.fits(dx) || geom.groups != 1)
    {
        return Ok(None);
    }
    backward_data_inner(device, geom, dy, w, flipped, dx, join, opts)
}

/// The dispatch that writes w `[kh, kw, c, f]` flipped in both spatial axes with its channel
/// axes swapped, `[kh, kw, f, c]` (a 1x1 kernel's transpose), into `wf` (`shaders/flip.wgsl`).
fn flip_into(device: &Device, kernel: &'static str, geom: &Conv2dGeometry, w: &Tensor, wf: &Tensor) -> Result<Dispatch> {
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Params {
        taps: u32,
        c: u32,
        f: u32,
        _pad: u32,
    }
    let p = Params { taps: u32_of(kernel, "taps", geom.kh * geom.kw)?, c: u32_of(kernel, "channels", geom.in_c)?, f: u32_of(kernel, "filters", geom.filters)?, _pad: 0 };
    u32_of(kernel, "kernel elements", w.len())?;
    // 32 x 32 blocks of (c, f) a workgroup, one tap a layer of the grid (shaders/flip.wgsl).
    let grid = grid_3d(device, kernel, &format!("the flips of a {:?} kernel", w.shape()), [geom.in_c.div_ceil(32), geom.filters.div_ceil(32), geom.kh * geom.kw])?;
    Ok(Dispatch::with_params(device, &FLIP, "flip_kernel", &[], &p, &[(1, w), (2, wf)], grid).named(kernel, 0.0))
}

/// The bias's gradient: `db[f] = sum dy[n, oh, ow, f]` over every output pixel, summed in
/// f32 from dy stored either way.
///
/// # Shapes and dtypes
/// dy `[batch, out_h, out_w, filters]` F32 or F16, db `[filters]` F32.
pub fn backward_bias(device: &Device, dy: &Tensor, db: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "conv2d_backward_bias";
    let filters = db.len();
    let rows = dy.len().checked_div(filters).unwrap_or(0);
    if dy.shape().last() != Some(&filters) || db.shape() != [filters] {
        bail!(Shape, "{K}: db {:?} does not match the channels of dy {:?}", db.shape(), dy.shape());
    }
    gemm::column_sums(device, K, dy, rows, filters, db)
}

/// The input gradient: `dx[n, ih, iw, c] = sum dy[n, oh, ow, f] * w[i, j, c, f]` over
/// every `(oh, ow, i, j)` with `oh*sh - pt + i = ih` and `ow*sw - pl + j = iw`. `dx` is
/// overwritten; pixels no output reads get zero.
///
/// At stride s only about 1/s² of the KH*KW taps of an input pixel line up with an output,
/// and which ones depends only on the pixel's phase (ih % s, iw % s). So the gradient is
/// s_h * s_w GEMMs, one per phase, each a unit-stride convolution of dy with only the taps
/// its phase meets (a phase that meets none is written as zeros): no multiply-add is with
/// a zero of a stuffed dy. On the GPU kernels up to four of them share a dispatch
/// (`gemm::launch_phases`). Paddings above the kernel, which would put a phase's first tap
/// before its pixel, multiply the stuffed zeros in one GEMM instead.
///
/// # Shapes
/// dy `[batch, out_h, out_w, filters]`, w `[kh, kw, in_c / groups, filters]`, dx `[batch, in_h, in_w, in_c]`.
///
/// # Dtypes
/// dy and dx F32 or F16 (gradients stored as their activations under `mixed_float16`); an
/// F16 dx needs whole quads of channels and one group.
pub fn backward_data(device: &Device, geom: &Conv2dGeometry, dy: &Tensor, w: &Tensor, dx: &Tensor) -> Result<Vec<Dispatch>> {
    backward_data_with(device, geom, dy, w, dx, &GemmOptions::default())
}

/// [`backward_data`] with the tile and K split forced.
pub fn backward_data_with(device: &Device, geom: &Conv2dGeometry, dy: &Tensor, w: &Tensor, dx: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    // Without a join every path takes the gradient.
    Ok(backward_data_inner(device, geom, dy, w, None, dx, None, opts)?.unwrap_or_default())
}

/// [`backward_data_with`] with a residual join finished as dx is stored (see [`Join`]), or
/// `None` (nothing recorded) where the input gradient's product cannot store it: a strided
/// or grouped convolution's, Winograd's, or one whose tensors [`Join::fits`] refuses.
pub fn backward_data_joined(device: &Device, geom: &Conv2dGeometry, dy: &Tensor, w: &Tensor, dx: &Tensor, join: Join<'_>, opts: &GemmOptions) -> Result<Option<Vec<Dispatch>>> {
    backward_data_flipped(device, geom, dy, w, None, dx, Some(join), opts)
}

/// The input gradient's dispatches; `ready` is w's flip where a caller wrote it beforehand.
#[allow(clippy::too_many_arguments)]
fn backward_data_inner(device: &Device, geom: &Conv2dGeometry, dy: &Tensor, w: &Tensor, ready: Option<&Tensor>, dx: &Tensor, join: Option<Join<'_>>, opts: &GemmOptions) -> Result<Option<Vec<Dispatch>>> {
    const K: &str = "conv2d_backward_data";
    expect_shape(K, "dy", dy, &geom.output_shape())?;
    expect_shape(K, "kernel", w, &geom.kernel_shape())?;
    expect_shape(K, "dx", dx, &geom.input_shape())?;
    if let Some(back) = flips(device, K, geom, opts)? {
        return flipped(device, K, geom, &back, dy, w, ready, dx, join, opts).map(Some);
    }
    // The Winograd transforms read and write f32; an f16 gradient takes the implicit GEMM.
    let f32_storage = dy.dtype() == crate::DType::F32 && dx.dtype() == crate::DType::F32;
    if f32_storage && let Some(m) = winograd::choose(device, geom, Pass::BackwardData, opts)? {
        if join.is_some() {
            return Ok(None);
        }
        return winograd::convolve(device, K, geom, Pass::BackwardData, m, dy, w, dx, opts).map(Some);
    }
    if let Some(phases) = phase_products(geom) {
        if join.is_some() {
            return Ok(None);
        }
        let work = |(sub, _, taps): &(Conv2dGeometry, Phase, usize)| (sub.out_pixels() * taps) as f64;
        let total: f64 = phases.iter().map(work).sum();
        let (c, f) = (geom.group_in_c(), geom.group_filters());
        // A downsample's w transposed beforehand, where `transposes` takes it.
        let transposed = if transposes(device, K, geom, opts)? { Some(flip_or_ready(device, K, geom, w, ready)?) } else { None };
        let (b, b_load) = match &transposed {
            Some((wt, _)) => (wt, BLoad::Rows),
            None => (w, BLoad::BlockedT(f)),
        };
        // An unpadded 1x1 kernel: the one phase its tap meets is dy's rows times the kernel,
        // read as a plain matrix (the others meet no tap). Every phase takes the same load
        // and, with whole quads of filters, the same quads, so that they share a dispatch.
        let a_load = if geom.kh == 1 && geom.kw == 1 && geom.pad_top == 0 && geom.pad_left == 0 && f.is_multiple_of(4) { ALoad::Rows } else { ALoad::Im2col };
        let products = phases.iter().map(|product| {
            let (sub, phase, taps) = product;
            Gemm {
                label: K,
                m: sub.out_pixels(),
                n: c,
                k: taps * f,
                a_load,
                b_load,
                conv: Some(sub),
                phase: Some(*phase),
                groups: data_groups(geom),
                a: dy,
                b,
                bias: None,
                c: dx,
                stats: None,
                a_norm: None,
                join: None,
                // The forward's useful count, shared out by each phase's multiply-adds.
                flops: if total > 0.0 { geom.flops() as f64 * work(product) / total } else { 0.0 },
            }
        });
        let dispatches = gemm::launch_phases(device, &products.collect::<Vec<_>>(), opts)?;
        return Ok(Some(match transposed {
            Some((_, flip)) => flip.into_iter().chain(dispatches.into_iter().map(|d| d.tagged("transposed"))).collect(),
            None => dispatches,
        }));
    }
    let a_load = if geom.is_pointwise() { ALoad::Rows } else { ALoad::DyStuffed };
    let (c, f) = (geom.group_in_c(), geom.group_filters());
    let g = Gemm {
        label: K,
        m: geom.in_pixels(),
        n: c,
        k: geom.kh * geom.kw * f,
        a_load,
        // w[i, j] is a [C, F] block: B[(i, j, f), c] reads it transposed.
        b_load: BLoad::BlockedT(f),
        conv: Some(geom),
        phase: None,
        groups: data_groups(geom),
        a: dy,
        b: w,
        bias: None,
        c: dx,
        stats: None,
        a_norm: None,
        join,
        flops: geom.flops() as f64,
    };
    gemm::launch(device, &g, opts).map(Some)
}

/// The groups of an input gradient: dy's channels, w's blocks (k along the filters) and dx's
/// columns, a group's slice of each.
fn data_groups(geom: &Conv2dGeometry) -> Option<Groups> {
    let (c, f) = (geom.group_in_c(), geom.group_filters());
    Groups::of(geom, (geom.filters, f), (geom.filters, f), (geom.in_c, c))
}

/// The phase products of a strided input gradient: for each phase (ph, pw), the
/// unit-stride convolution of dy (as the image, F channels) that gives dx's pixels
/// (n, qh * s_h + ph, qw * s_w + pw), where its taps and rows lie, and its number of taps
/// (0 for a phase no tap meets: its geometry keeps a 1x1 window so the shader never divides
/// by zero, and its K is empty). None at stride 1, or where a padding larger than the
/// kernel makes a phase's window start past its pixel.
fn phase_products(g: &Conv2dGeometry) -> Option<Vec<(Conv2dGeometry, Phase, usize)>> {
    if g.stride_h == 1 && g.stride_w == 1 {
        return None;
    }
    let mut out = Vec::new();
    for ph in 0..g.stride_h {
        let rows = phase_axis(g.in_h, g.kh, g.stride_h, g.pad_top, ph)?;
        for pw in 0..g.stride_w {
            let cols = phase_axis(g.in_w, g.kw, g.stride_w, g.pad_left, pw)?;
            let sub = Conv2dGeometry {
                batch: g.batch,
                in_h: g.out_h,
                in_w: g.out_w,
                in_c: g.filters,
                filters: g.in_c,
                kh: rows.taps.max(1),
                kw: cols.taps.max(1),
                stride_h: 1,
                stride_w: 1,
                pad_top: rows.pad,
                pad_left: cols.pad,
                out_h: rows.pixels,
                out_w: cols.pixels,
                dilation_h: 1,
                dilation_w: 1,
                groups: g.groups,
            };
            let phase = Phase {
                tap_i0: rows.first_tap,
                tap_j0: cols.first_tap,
                tap_kw: g.kw,
                step_h: g.stride_h,
                step_w: g.stride_w,
                dst_h: g.in_h,
                dst_w: g.in_w,
                dst_ph: ph,
                dst_pw: pw,
            };
            out.push((sub, phase, rows.taps * cols.taps));
        }
    }
    Some(out)
}

/// One axis of a phase product.
struct PhaseAxis {
    /// dx pixels of the phase (ih = phase + s * q < input).
    pixels: usize,
    /// Kernel taps that meet them: first_tap, first_tap + s, ... below k.
    taps: usize,
    first_tap: usize,
    /// The sub-convolution's leading padding over dy.
    pad: usize,
}

/// Pixel ih = phase + s*q meets tap i = first + s*t at output oh = q + shift - t, where
/// first = (phase + pad) % s and shift = (phase + pad) / s. With the taps flipped
/// (i' = taps - 1 - t) that is a unit-stride window at q - (taps - 1 - shift) + i'.
fn phase_axis(input: usize, k: usize, s: usize, pad: usize, phase: usize) -> Option<PhaseAxis> {
    let pixels = input.saturating_sub(phase).div_ceil(s);
    let first_tap = (phase + pad) % s;
    let taps = if first_tap < k { (k - first_tap).div_ceil(s) } else { 0 };
    let shift = (phase + pad) / s;
    let pad = match taps {
        0 => 0,
        _ => (taps - 1).checked_sub(shift)?,
    };
    Some(PhaseAxis { pixels, taps, first_tap, pad })
}

/// The kernel gradient: `dw[i, j, c, f] = sum_{n, oh, ow} x[n, oh*sh - pt + i, ow*sw - pl + j, c]
/// times dy[n, oh, ow, f]`. `dw` is overwritten. K (every output pixel of the batch) is long
/// and the output small, so K is split across workgroups into a private workspace and
/// summed by a second dispatch.
///
/// # Shapes
/// x `[batch, in_h, in_w, in_c]`, dy `[batch, out_h, out_w, filters]`, dw `[kh, kw, in_c / groups, filters]`.
///
/// # Dtypes
/// x and dy F32 or F16, each on its own; dw F32.
pub fn backward_weights(device: &Device, geom: &Conv2dGeometry, x: &Tensor, dy: &Tensor, dw: &Tensor) -> Result<Vec<Dispatch>> {
    backward_weights_with(device, geom, x, dy, dw, &GemmOptions::default())
}

/// [`backward_weights`] with the tile and K split forced.
pub fn backward_weights_with(device: &Device, geom: &Conv2dGeometry, x: &Tensor, dy: &Tensor, dw: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    weights_gradient(device, geom, x, None, dy, dw, opts)
}

/// [`backward_weights_with`] for a convolution whose input is `x` normalized as in
/// [`forward_normalized`]: the gradient with respect to the kernel of that convolution.
pub fn backward_weights_normalized(device: &Device, geom: &Conv2dGeometry, x: &Tensor, norm: InputNorm<'_>, dy: &Tensor, dw: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    weights_gradient(device, geom, x, Some(norm), dy, dw, opts)
}

fn weights_gradient(device: &Device, geom: &Conv2dGeometry, x: &Tensor, a_norm: Option<InputNorm<'_>>, dy: &Tensor, dw: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    const K: &str = "conv2d_backward_weights";
    expect_shape(K, "x", x, &geom.input_shape())?;
    expect_shape(K, "dy", dy, &geom.output_shape())?;
    expect_shape(K, "dw", dw, &geom.kernel_shape())?;
    // x seen as [N*H*W, C] is the stored transpose of A[C, N*H*W] in the pointwise case.
    let a_load = if geom.is_pointwise() { ALoad::Cols } else { ALoad::Im2colT };
    let (c, f) = (geom.group_in_c(), geom.group_filters());
    let g = Gemm {
        label: K,
        m: geom.kh * geom.kw * c,
        n: f,
        k: geom.out_pixels(),
        a_load,
        b_load: BLoad::Rows,
        conv: Some(geom),
        phase: None,
        // x's channels, dy's columns and dw's columns, a group's slice of each.
        groups: Groups::of(geom, (geom.in_c, c), (geom.filters, f), (geom.filters, f)),
        a: x,
        b: dy,
        bias: None,
        c: dw,
        stats: None,
        a_norm,
        join: None,
        flops: geom.flops() as f64,
    };
    gemm::launch(device, &g, opts)
}
