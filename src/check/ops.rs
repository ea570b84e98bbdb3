//! The reference's dense arithmetic in f64, on the host, parallel with rayon.
//!
//! Every loop keeps its innermost pass over memory that is contiguous in NHWC activations,
//! `[kh, kw, in, filters]` conv kernels and `[in, out]` dense kernels (the last axis), as
//! axpys that vectorise without reassociating sums: that keeps a whole ResNet-20 step at
//! batch 64 affordable on a small CPU. Parallel work is split over output rows so that no
//! two threads write the same element; weight gradients are summed per chunk of rows and
//! the chunks added at the end.

use rayon::prelude::*;

use crate::kernels::conv2d::Conv2dGeometry;
use crate::kernels::depthwise::DepthwiseGeometry;

/// How the reference rounds. [`Exact`] is the reference itself; [`F32`] rounds every
/// product, sum and quotient to f32 (a product or sum of two f32 values computed in f64 and
/// rounded once is exactly f32's correctly rounded result), which makes the same code a
/// plain f32 implementation of the same model: how far *it* lands from f64 is how far
/// rounding alone takes a correct f32 computation of this model, batch and weights.
pub(crate) trait Arith: Copy + Send + Sync + 'static {
    /// Rounds one operation's result.
    fn r(x: f64) -> f64;
    /// Whether the products of convolutions and dense layers take f16-rounded operands.
    const F16_OPERANDS: bool = false;
    /// Whether activations are stored as f16 where the device stores them so (the nodes of
    /// [`super::net::Node::stores_f16`], channels in whole quads): mixed_float16's storage.
    const F16_STORAGE: bool = false;
    /// Whether convolutions the device computes through Winograd's F(m x m, 3 x 3) are
    /// computed the same way (`check::winograd`): the plain-f32 model of the float32 policy.
    const WINOGRAD: bool = false;
}

/// No rounding: the f64 reference.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Exact;

impl Arith for Exact {
    #[inline(always)]
    fn r(x: f64) -> f64 {
        x
    }
}

/// Every operation rounded to f32, sums accumulated in order (no pairwise or tiled sums).
#[derive(Clone, Copy, Debug)]
pub(crate) struct F32;

impl Arith for F32 {
    #[inline(always)]
    fn r(x: f64) -> f64 {
        x as f32 as f64
    }
    const WINOGRAD: bool = true;
}

/// [`F32`] with the products of convolutions and dense layers on f16-rounded operands and
/// activations stored as f16 where the device stores them so: a plain implementation of
/// the `mixed_float16` policy (f16 operands and activations, f32 sums and gradients), whose
/// distance from f64 is what that policy's rounding alone does to a step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mixed;

impl Arith for Mixed {
    #[inline(always)]
    fn r(x: f64) -> f64 {
        x as f32 as f64
    }
    const F16_OPERANDS: bool = true;
    const F16_STORAGE: bool = true;
}

/// `x` (an f32 value) rounded to the nearest f16, ties to even, infinite from 65520 up: as
/// the device rounds a product's operands.
pub(crate) fn round_f16(x: f64) -> f64 {
    // NaN stays itself: the carry below would take a mantissa of all ones through the sign
    // bit into -0.0.
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 65520.0 {
        return f64::INFINITY.copysign(x);
    }
    if a < 2f64.powi(-14) {
        // f16's subnormals: multiples of 2^-24.
        return (x * 2f64.powi(24)).round_ties_even() / 2f64.powi(24);
    }
    // Keep 10 of f32's 23 mantissa bits, ties to even (a carry moves the exponent up).
    let bits = (x as f32).to_bits();
    f32::from_bits(bits.wrapping_add(0x0fff + ((bits >> 13) & 1)) & 0xffff_e000) as f64
}

/// A product's operand tensor as the product takes it: itself, or rounded to f16.
fn operands<A: Arith>(v: &[f64]) -> std::borrow::Cow<'_, [f64]> {
    if A::F16_OPERANDS {
        std::borrow::Cow::Owned(v.par_iter().map(|&x| round_f16(x)).collect())
    } else {
        std::borrow::Cow::Borrowed(v)
    }
}

/// `out += a * x`, the one inner loop almost everything here reduces to.
#[inline]
pub(crate) fn axpy<A: Arith>(out: &mut [f64], a: f64, x: &[f64]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = A::r(*o + A::r(a * v));
    }
}

/// Chunks of `rows` for folds: a few per thread, so the per-chunk accumulators (a whole
/// kernel gradient each) stay few while the threads stay balanced.
fn chunk_len(rows: usize) -> usize {
    rows.div_ceil(4 * rayon::current_num_threads()).max(1)
}

/// Per column `j < cols`, the sum over `rows` of `f(r * cols + j)`.
pub(crate) fn col_sums<A: Arith>(rows: usize, cols: usize, f: impl Fn(usize) -> f64 + Sync) -> Vec<f64> {
    let chunk = chunk_len(rows);
    (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|k| {
            let mut acc = vec![0.0; cols];
            for r in k * chunk..((k + 1) * chunk).min(rows) {
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = A::r(*a + A::r(f(r * cols + j)));
                }
            }
            acc
        })
        .reduce(|| vec![0.0; cols], add_into::<A>)
}

fn add_into<A: Arith>(mut a: Vec<f64>, b: Vec<f64>) -> Vec<f64> {
    for (x, y) in a.iter_mut().zip(&b) {
        *x = A::r(*x + y);
    }
    a
}

/// The input row (or column) that tap `i` of output `o` reads, if it is inside the input.
#[inline]
fn tap(o: usize, stride: usize, pad: usize, i: usize, size: usize) -> Option<usize> {
    let t = (o * stride + i).checked_sub(pad)?;
    (t < size).then_some(t)
}

/// The output row (or column) whose tap `i` reads input `t`, if there is one.
#[inline]
fn tapped_by(t: usize, stride: usize, pad: usize, i: usize, out: usize) -> Option<usize> {
    let s = (t + pad).checked_sub(i)?;
    (s % stride == 0 && s / stride < out).then_some(s / stride)
}

/// `y = conv(x, w) + bias`: per output pixel, per tap, per input channel, an axpy over the
/// filters of the channel's group (all of them in one group). Tap `i` is `i * dilation`
/// pixels into the window.
pub(crate) fn conv_forward<A: Arith>(g: &Conv2dGeometry, x: &[f64], w: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let (x, w) = (&*operands::<A>(x), &*operands::<A>(w));
    let (c, f) = (g.in_c, g.filters);
    let (cg, fg) = (g.group_in_c(), g.group_filters());
    let mut y = vec![0.0; g.batch * g.out_h * g.out_w * f];
    y.par_chunks_mut(g.out_w * f).enumerate().for_each(|(row, yrow)| {
        let (b, oh) = (row / g.out_h, row % g.out_h);
        for ow in 0..g.out_w {
            let out = &mut yrow[ow * f..(ow + 1) * f];
            if let Some(bias) = bias {
                out.copy_from_slice(bias);
            }
            for i in 0..g.kh {
                let Some(ih) = tap(oh, g.stride_h, g.pad_top, i * g.dilation_h, g.in_h) else { continue };
                for j in 0..g.kw {
                    let Some(iw) = tap(ow, g.stride_w, g.pad_left, j * g.dilation_w, g.in_w) else { continue };
                    let xs = &x[((b * g.in_h + ih) * g.in_w + iw) * c..][..c];
                    let ws = &w[(i * g.kw + j) * cg * f..][..cg * f];
                    for (ci, &xv) in xs.iter().enumerate() {
                        let (grp, cl) = (ci / cg, ci % cg);
                        axpy::<A>(&mut out[grp * fg..(grp + 1) * fg], xv, &ws[cl * f + grp * fg..][..fg]);
                    }
                }
            }
        }
    });
    y
}

/// The kernel transposed per tap to `[kh, kw, filters, in / groups]`, so the input gradient
/// is an axpy over input channels instead of a dot over filters (a dot does not vectorise
/// without reassociating its sum).
fn transpose_taps(g: &Conv2dGeometry, w: &[f64]) -> Vec<f64> {
    let (c, f) = (g.group_in_c(), g.filters);
    let mut t = vec![0.0; w.len()];
    for tap in 0..g.kh * g.kw {
        for ci in 0..c {
            for fi in 0..f {
                t[(tap * f + fi) * c + ci] = w[(tap * c + ci) * f + fi];
            }
        }
    }
    t
}

/// `dx` of a convolution, gathered per input pixel (so threads never share an element):
/// every (tap, output) that read it contributes `dy[o] · w[tap]ᵀ`.
pub(crate) fn conv_input_grad<A: Arith>(g: &Conv2dGeometry, dy: &[f64], w: &[f64]) -> Vec<f64> {
    let (dy, w) = (&*operands::<A>(dy), &*operands::<A>(w));
    let (c, f) = (g.in_c, g.filters);
    let (cg, fg) = (g.group_in_c(), g.group_filters());
    let wt = transpose_taps(g, w);
    let mut dx = vec![0.0; g.batch * g.in_h * g.in_w * c];
    dx.par_chunks_mut(g.in_w * c).enumerate().for_each(|(row, dxrow)| {
        let (b, ih) = (row / g.in_h, row % g.in_h);
        for iw in 0..g.in_w {
            let out = &mut dxrow[iw * c..(iw + 1) * c];
            for i in 0..g.kh {
                let Some(oh) = tapped_by(ih, g.stride_h, g.pad_top, i * g.dilation_h, g.out_h) else { continue };
                for j in 0..g.kw {
                    let Some(ow) = tapped_by(iw, g.stride_w, g.pad_left, j * g.dilation_w, g.out_w) else { continue };
                    let dys = &dy[((b * g.out_h + oh) * g.out_w + ow) * f..][..f];
                    let ws = &wt[(i * g.kw + j) * f * cg..][..f * cg];
                    for (fi, &d) in dys.iter().enumerate() {
                        let grp = fi / fg;
                        axpy::<A>(&mut out[grp * cg..(grp + 1) * cg], d, &ws[fi * cg..(fi + 1) * cg]);
                    }
                }
            }
        }
    });
    dx
}

/// `dw[tap, ci, :] += x[in pixel, ci] * dy[out pixel, :]`, per chunk of output rows, the
/// chunks' sums added at the end.
pub(crate) fn conv_weight_grad<A: Arith>(g: &Conv2dGeometry, x: &[f64], dy: &[f64]) -> Vec<f64> {
    let (x, dy) = (&*operands::<A>(x), &*operands::<A>(dy));
    let (c, f) = (g.in_c, g.filters);
    let (cg, fg) = (g.group_in_c(), g.group_filters());
    let n = g.kh * g.kw * cg * f;
    let rows = g.batch * g.out_h;
    let chunk = chunk_len(rows);
    (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|k| {
            let mut dw = vec![0.0; n];
            for row in k * chunk..((k + 1) * chunk).min(rows) {
                let (b, oh) = (row / g.out_h, row % g.out_h);
                for ow in 0..g.out_w {
                    let dys = &dy[((b * g.out_h + oh) * g.out_w + ow) * f..][..f];
                    for i in 0..g.kh {
                        let Some(ih) = tap(oh, g.stride_h, g.pad_top, i * g.dilation_h, g.in_h) else { continue };
                        for j in 0..g.kw {
                            let Some(iw) = tap(ow, g.stride_w, g.pad_left, j * g.dilation_w, g.in_w) else { continue };
                            let xs = &x[((b * g.in_h + ih) * g.in_w + iw) * c..][..c];
                            let dws = &mut dw[(i * g.kw + j) * cg * f..][..cg * f];
                            for (ci, &xv) in xs.iter().enumerate() {
                                let (grp, cl) = (ci / cg, ci % cg);
                                axpy::<A>(&mut dws[cl * f + grp * fg..][..fg], xv, &dys[grp * fg..(grp + 1) * fg]);
                            }
                        }
                    }
                }
            }
            dw
        })
        .reduce(|| vec![0.0; n], add_into::<A>)
}

/// `y[n, :] = bias + Σ_i x[n, i] · w[i, :]`.
pub(crate) fn dense_forward<A: Arith>(x: &[f64], inputs: usize, w: &[f64], units: usize, bias: Option<&[f64]>) -> Vec<f64> {
    let (x, w) = (&*operands::<A>(x), &*operands::<A>(w));
    let rows = x.len() / inputs;
    let mut y = vec![0.0; rows * units];
    y.par_chunks_mut(units).zip(x.par_chunks(inputs)).for_each(|(out, xs)| {
        if let Some(bias) = bias {
            out.copy_from_slice(bias);
        }
        for (i, &xv) in xs.iter().enumerate() {
            axpy::<A>(out, xv, &w[i * units..(i + 1) * units]);
        }
    });
    y
}

/// `dx[n, i] = Σ_u dy[n, u] · w[i, u]`, through the transposed kernel (axpys over `i`).
pub(crate) fn dense_input_grad<A: Arith>(dy: &[f64], w: &[f64], inputs: usize, units: usize) -> Vec<f64> {
    let (dy, w) = (&*operands::<A>(dy), &*operands::<A>(w));
    let mut wt = vec![0.0; w.len()];
    for i in 0..inputs {
        for u in 0..units {
            wt[u * inputs + i] = w[i * units + u];
        }
    }
    let rows = dy.len() / units;
    let mut dx = vec![0.0; rows * inputs];
    dx.par_chunks_mut(inputs).zip(dy.par_chunks(units)).for_each(|(out, dys)| {
        for (u, &d) in dys.iter().enumerate() {
            axpy::<A>(out, d, &wt[u * inputs..(u + 1) * inputs]);
        }
    });
    dx
}

/// `dw[i, :] = Σ_n x[n, i] · dy[n, :]`, one kernel row per task.
pub(crate) fn dense_weight_grad<A: Arith>(x: &[f64], dy: &[f64], inputs: usize, units: usize) -> Vec<f64> {
    let (x, dy) = (&*operands::<A>(x), &*operands::<A>(dy));
    let rows = dy.len() / units;
    let mut dw = vec![0.0; inputs * units];
    dw.par_chunks_mut(units).enumerate().for_each(|(i, out)| {
        for n in 0..rows {
            axpy::<A>(out, x[n * inputs + i], &dy[n * units..(n + 1) * units]);
        }
    });
    dw
}

/// `y = depthwise(x, w) + bias`: output channel `ci * m + k` of a pixel sums, over the taps,
/// input channel `ci` times `w[tap, ci, k]`. The device's depthwise kernels take f32 operands
/// under every policy (no f16 path), so neither does this.
pub(crate) fn depthwise_forward<A: Arith>(g: &DepthwiseGeometry, x: &[f64], w: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
    let (c, m) = (g.channels, g.multiplier);
    let cm = c * m;
    let mut y = vec![0.0; g.batch * g.out_h * g.out_w * cm];
    y.par_chunks_mut(g.out_w * cm).enumerate().for_each(|(row, yrow)| {
        let (b, oh) = (row / g.out_h, row % g.out_h);
        for ow in 0..g.out_w {
            let out = &mut yrow[ow * cm..(ow + 1) * cm];
            for i in 0..g.kh {
                let Some(ih) = tap(oh, g.stride_h, g.pad_top, i * g.dilation_h, g.in_h) else { continue };
                for j in 0..g.kw {
                    let Some(iw) = tap(ow, g.stride_w, g.pad_left, j * g.dilation_w, g.in_w) else { continue };
                    let xs = &x[((b * g.in_h + ih) * g.in_w + iw) * c..][..c];
                    let ws = &w[(i * g.kw + j) * cm..][..cm];
                    for (o, v) in out.iter_mut().enumerate() {
                        *v = A::r(*v + A::r(xs[o / m] * ws[o]));
                    }
                }
            }
            if let Some(bias) = bias {
                for (v, b) in out.iter_mut().zip(bias) {
                    *v = A::r(*v + b);
                }
            }
        }
    });
    y
}

/// `dx` of a depthwise convolution, gathered per input pixel: every (tap, output) that read
/// it contributes `Σ_k dy[o, ci * m + k] · w[tap, ci, k]` to channel `ci`.
pub(crate) fn depthwise_input_grad<A: Arith>(g: &DepthwiseGeometry, dy: &[f64], w: &[f64]) -> Vec<f64> {
    let (c, m) = (g.channels, g.multiplier);
    let cm = c * m;
    let mut dx = vec![0.0; g.batch * g.in_h * g.in_w * c];
    dx.par_chunks_mut(g.in_w * c).enumerate().for_each(|(row, dxrow)| {
        let (b, ih) = (row / g.in_h, row % g.in_h);
        for iw in 0..g.in_w {
            let out = &mut dxrow[iw * c..(iw + 1) * c];
            for i in 0..g.kh {
                let Some(oh) = tapped_by(ih, g.stride_h, g.pad_top, i * g.dilation_h, g.out_h) else { continue };
                for j in 0..g.kw {
                    let Some(ow) = tapped_by(iw, g.stride_w, g.pad_left, j * g.dilation_w, g.out_w) else { continue };
                    let dys = &dy[((b * g.out_h + oh) * g.out_w + ow) * cm..][..cm];
                    let ws = &w[(i * g.kw + j) * cm..][..cm];
                    for (o, (&d, &wv)) in dys.iter().zip(ws).enumerate() {
                        out[o / m] = A::r(out[o / m] + A::r(d * wv));
                    }
                }
            }
        }
    });
    dx
}

/// `dw[tap, ci * m + k] += x[in pixel, ci] · dy[out pixel, ci * m + k]`, per chunk of output
/// rows, the chunks' sums added at the end.
pub(crate) fn depthwise_weight_grad<A: Arith>(g: &DepthwiseGeometry, x: &[f64], dy: &[f64]) -> Vec<f64> {
    let (c, m) = (g.channels, g.multiplier);
    let cm = c * m;
    let n = g.kh * g.kw * cm;
    let rows = g.batch * g.out_h;
    let chunk = chunk_len(rows);
    (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|k| {
            let mut dw = vec![0.0; n];
            for row in k * chunk..((k + 1) * chunk).min(rows) {
                let (b, oh) = (row / g.out_h, row % g.out_h);
                for ow in 0..g.out_w {
                    let dys = &dy[((b * g.out_h + oh) * g.out_w + ow) * cm..][..cm];
                    for i in 0..g.kh {
                        let Some(ih) = tap(oh, g.stride_h, g.pad_top, i * g.dilation_h, g.in_h) else { continue };
                        for j in 0..g.kw {
                            let Some(iw) = tap(ow, g.stride_w, g.pad_left, j * g.dilation_w, g.in_w) else { continue };
                            let xs = &x[((b * g.in_h + ih) * g.in_w + iw) * c..][..c];
                            let dws = &mut dw[(i * g.kw + j) * cm..][..cm];
                            for (o, (v, &d)) in dws.iter_mut().zip(dys).enumerate() {
                                *v = A::r(*v + A::r(xs[o / m] * d));
                            }
                        }
                    }
                }
            }
            dw
        })
        .reduce(|| vec![0.0; n], add_into::<A>)
}
