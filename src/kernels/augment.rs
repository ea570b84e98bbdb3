//! Per-sample image augmentation (`shaders/augment.wgsl`): the draws, gathers and input
//! gradients of RandomFlip, RandomCrop and RandomTranslation.
//!
//! Along each axis a sample's transform reads input index `i = a * y + t` for output index
//! `y`, with `a = ±1`; an `i` outside the input reads what the [`FillMode`] says. The four
//! numbers `(a_y, t_y, a_x, t_x)` of every sample are drawn on the device ([`draw`]) into a
//! small tensor that the forward and the backward both read, and that a reference can read
//! back; [`host_draws`] computes the same numbers on the host, bit for bit.
//!
//! # Shapes
//! `x`: `[batch, in_h, in_w, channels]` f32 -> `y`: `[batch, out_h, out_w, channels]` f32,
//! with `out_h <= in_h` and `out_w <= in_w`; `draws`: `[batch, 4]` u32 (i32 values); `dy`
//! like `y`, `dx` like `x`; `step`: u32 `[2]` or longer (the step counter, then the index of
//! the batch's first sample in the whole step's batch).

use bytemuck::{Pod, Zeroable};

use super::elementwise::hash;
use super::{expect_dtype, expect_separate, expect_shape, grid_for, u32_of, Dispatch, AUGMENT, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

/// What an index outside the input reads (Keras' `fill_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillMode {
    /// `fill_value`: `(k k k k | a b c d | k k k k)`.
    Constant,
    /// Reflected about the edge of the last pixel: `(d c b a | a b c d | d c b a)`.
    Reflect,
    /// Wrapped around: `(a b c d | a b c d | a b c d)`.
    Wrap,
    /// The nearest edge pixel: `(a a a a | a b c d | d d d d)`.
    Nearest,
}

impl FillMode {
    /// Every mode, in the shader's numbering.
    pub const ALL: [FillMode; 4] = [FillMode::Constant, FillMode::Reflect, FillMode::Wrap, FillMode::Nearest];

    /// Keras' name: `constant`, `reflect`, `wrap`, `nearest`.
    pub fn name(self) -> &'static str {
        match self {
            FillMode::Constant => "constant",
            FillMode::Reflect => "reflect",
            FillMode::Wrap => "wrap",
            FillMode::Nearest => "nearest",
        }
    }
}

impl std::str::FromStr for FillMode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<FillMode> {
        match FillMode::ALL.iter().find(|m| m.name() == s) {
            Some(m) => Ok(*m),
            None => bail!(Config, "fill_mode must be \"constant\", \"reflect\", \"wrap\" or \"nearest\", got {s:?}"),
        }
    }
}

/// How one axis of each sample is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisDraw {
    /// The identity: `(a, t) = (1, 0)`.
    Keep,
    /// Reversed with probability 1/2: `(-1, n - 1)`, else `(1, 0)`.
    Flip,
    /// A crop's start, uniform in `0..count`: `(1, start)`.
    Offset {
        /// The number of starts, `in - out + 1` (at most 65,536).
        count: u32,
    },
    /// The image moved by `round(lo + u * span)` pixels, `u` uniform in `[0, 1)` with 12
    /// bits, `lo` and `span` in eighths of a pixel: `(1, -shift)`.
    Shift {
        /// The lowest shift, in eighths of a pixel.
        lo8: i32,
        /// The width of the range, in eighths of a pixel (below 2^20).
        span8: u32,
    },
}

impl AxisDraw {
    /// The shift of an `n`-pixel axis by a fraction of it drawn from `[lower, upper]`
    /// (Keras' `height_factor` / `width_factor`, each in `[-1, 1]`).
    pub fn shift(lower: f32, upper: f32, n: usize) -> Result<AxisDraw> {
        if !(lower.is_finite() && upper.is_finite() && (-1.0..=1.0).contains(&lower) && (-1.0..=1.0).contains(&upper) && lower <= upper) {
            bail!(Config, "a translation factor range must lie in [-1, 1] with lower <= upper, got ({lower}, {upper})");
        }
        if n > crate::limits::MAX_SIDE {
            bail!(Shape, "a translated side of {n} px is above the cap of {}", crate::limits::MAX_SIDE);
        }
        let eighths = |f: f64| (f * n as f64 * 8.0).round();
        Ok(AxisDraw::Shift { lo8: eighths(lower as f64) as i32, span8: eighths(upper as f64 - lower as f64) as u32 })
    }

    /// The shader's (kind, arg0, arg1) and the path token.
    fn encode(self) -> ([u32; 3], &'static str) {
        match self {
            AxisDraw::Keep => ([0, 0, 0], "keep"),
            AxisDraw::Flip => ([1, 0, 0], "flip"),
            AxisDraw::Offset { count } => ([2, count, 0], "offset"),
            AxisDraw::Shift { lo8, span8 } => ([3, lo8 as u32, span8], "shift"),
        }
    }

    /// Refuses arguments whose products would overflow the shader's 32-bit arithmetic.
    fn validate(self, axis: &str, n: usize) -> Result<()> {
        match self {
            AxisDraw::Offset { count } if count == 0 || count as usize > n.max(1) || count > 1 << 16 => {
                bail!(Shape, "augment_draw: {axis} crop of an axis of {n} has {count} starts; need 1..={}", n.min(1 << 16))
            }
            AxisDraw::Shift { span8, .. } if span8 >= 1 << 20 => bail!(Shape, "augment_draw: {axis} shift range of {span8} eighths of a pixel exceeds 2^20"),
            _ => Ok(()),
        }
    }

    /// `(a, t)` from hash `h`, as the shader's `axis`.
    fn apply(self, n: usize, h: u32) -> [i32; 2] {
        match self {
            AxisDraw::Keep => [1, 0],
            AxisDraw::Flip if h >> 31 == 1 => [-1, n as i32 - 1],
            AxisDraw::Flip => [1, 0],
            AxisDraw::Offset { count } => [1, (((h >> 16) * count) >> 16) as i32],
            AxisDraw::Shift { lo8, span8 } => {
                let t8 = lo8 + (((h >> 20) * span8) >> 12) as i32;
                [1, -((t8 + 4) >> 3)]
            }
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    channels: u32,
    in_h: u32,
    in_w: u32,
    out_h: u32,
    out_w: u32,
    fill: u32,
    fill_value: f32,
    seed: u32,
    axis_y: [u32; 3],
    axis_x: [u32; 3],
    _pad: u32,
}


/// The host twin of [`draw`]: `(a_y, t_y, a_x, t_x)` of samples `first..first + batch` of
/// an `in_h x in_w` input at training step `step`.
pub fn host_draws(y: AxisDraw, x: AxisDraw, (in_h, in_w): (usize, usize), seed: u32, step: u32, first: u32, batch: usize) -> Vec<[i32; 4]> {
    (0..batch as u32)
        .map(|b| {
            let s = first.wrapping_add(b).wrapping_mul(2);
            let ([ay, ty], [ax, tx]) = (y.apply(in_h, hash(s, seed, step)), x.apply(in_w, hash(s.wrapping_add(1), seed, step)));
            [ay, ty, ax, tx]
        })
        .collect()
}

/// Draws every sample's `(a_y, t_y, a_x, t_x)` into `draws` from `(seed, step[0],
/// step[1] + sample)`: a new draw each step, the same for a sample whichever replica runs it.
///
/// # Shapes
/// `draws`: `[batch, 4]` u32; `step`: u32 with at least 2 words; `in_hw`: the input's
/// height and width.
pub fn draw(device: &Device, y: AxisDraw, x: AxisDraw, in_hw: (usize, usize), seed: u32, step: &Tensor, draws: &Tensor) -> Result<Dispatch> {
    let k = "augment_draw";
    let batch = draws.shape().first().copied().unwrap_or(0);
    expect_shape(k, "draws", draws, &[batch, 4])?;
    expect_dtype(k, "draws", draws, DType::U32)?;
    expect_dtype(k, "step", step, DType::U32)?;
    if step.len() < 2 {
        bail!(Shape, "augment_draw: step {:?} needs 2 words (step, first sample)", step.shape());
    }
    expect_separate(k, &[("draws", draws)], &[("step", step)])?;
    y.validate("vertical", in_hw.0)?;
    x.validate("horizontal", in_hw.1)?;
    let ((axis_y, ty), (axis_x, tx)) = (y.encode(), x.encode());
    let p = Params {
        n: u32_of(k, "batch", batch)?,
        in_h: u32_of(k, "height", in_hw.0)?,
        in_w: u32_of(k, "width", in_hw.1)?,
        seed,
        axis_y,
        axis_x,
        ..Zeroable::zeroed()
    };
    Ok(Dispatch::with_params(device, &AUGMENT, k, &[WG_CONST], &p, &[(4, step), (5, draws)], grid_for(device, batch)?).tagged(format!("y={ty} x={tx}")))
}

/// Checks `big: [batch, bh, bw, c]` f32 (the input side) against `small: [batch, sh, sw, c]`
/// (the output side), `sh <= bh`, `sw <= bw`, and `draws: [batch, 4]` u32.
fn check(k: &str, (big_name, big): (&str, &Tensor), (small_name, small): (&str, &Tensor), draws: &Tensor) -> Result<Params> {
    let (&[b, bh, bw, c], &[sb, sh, sw, sc]) = (big.shape(), small.shape()) else {
        bail!(Shape, "{k}: {big_name} {:?} and {small_name} {:?} must both be [batch, height, width, channels]", big.shape(), small.shape());
    };
    if sb != b || sc != c || sh > bh || sw > bw || c == 0 {
        bail!(Shape, "{k}: {small_name} {:?} must have the batch and channels of {big_name} {:?} and no larger a height or width", small.shape(), big.shape());
    }
    for (name, t) in [(big_name, big), (small_name, small)] {
        expect_dtype(k, name, t, DType::F32)?;
    }
    expect_shape(k, "draws", draws, &[b, 4])?;
    expect_dtype(k, "draws", draws, DType::U32)?;
    Ok(Params {
        channels: u32_of(k, "channels", c)?,
        in_h: u32_of(k, "input height", bh)?,
        in_w: u32_of(k, "input width", bw)?,
        out_h: u32_of(k, "output height", sh)?,
        out_w: u32_of(k, "output width", sw)?,
        ..Zeroable::zeroed()
    })
}

/// `y[b, oy, ox, c] = x[b, fill(a_y * oy + t_y), fill(a_x * ox + t_x), c]`, or
/// `fill_value` where the fill is `Constant` and an index falls outside.
///
/// # Shapes
/// `x`: `[batch, in_h, in_w, channels]`, `draws`: `[batch, 4]` u32 ->
/// `y`: `[batch, out_h, out_w, channels]`, `out_h <= in_h`, `out_w <= in_w`.
pub fn forward(device: &Device, x: &Tensor, draws: &Tensor, fill: FillMode, fill_value: f32, y: &Tensor) -> Result<Dispatch> {
    let k = "augment_forward";
    let p = check(k, ("x", x), ("y", y), draws)?;
    expect_separate(k, &[("y", y)], &[("x", x), ("draws", draws)])?;
    let p = Params { n: u32_of(k, "elements", y.len())?, fill: fill as u32, fill_value, ..p };
    let tokens = format!("fill={}", fill.name());
    Ok(Dispatch::with_params(device, &AUGMENT, k, &[WG_CONST], &p, &[(1, x), (2, draws), (3, y)], grid_for(device, y.len())?).tagged(tokens))
}

/// The gradient of [`forward`]: `dx[b, i, j, c]` is the sum of `dy` over the output pixels
/// that read input pixel `(i, j)`; 0 for a pixel no output reads (cropped away, or moved
/// out under a constant fill). Filled outputs pass nothing back.
///
/// # Shapes
/// `dy`: `[batch, out_h, out_w, channels]`, `draws`: `[batch, 4]` u32 ->
/// `dx`: `[batch, in_h, in_w, channels]`.
pub fn backward(device: &Device, dy: &Tensor, draws: &Tensor, fill: FillMode, dx: &Tensor) -> Result<Dispatch> {
    let k = "augment_backward";
    let p = check(k, ("dx", dx), ("dy", dy), draws)?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy), ("draws", draws)])?;
    let p = Params { n: u32_of(k, "elements", dx.len())?, fill: fill as u32, ..p };
    let tokens = format!("fill={}", fill.name());
    Ok(Dispatch::with_params(device, &AUGMENT, k, &[WG_CONST], &p, &[(1, dy), (2, draws), (3, dx)], grid_for(device, dx.len())?).tagged(tokens))
}
