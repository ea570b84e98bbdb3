//! ReLU, residual add, scaling and dropout (`shaders/elementwise.wgsl`).
//!
//! # Shapes
//! Every operand has the same number of elements; shapes are otherwise free.

use bytemuck::{Pod, Zeroable};

use super::{expect_same_len, grid_for, u32_of, width_token, Dispatch, ELEMENTWISE, WG_CONST};
use crate::{bail, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    seed: u32,
    c: u32,
}

fn launch(device: &Device, entry: &'static str, params: Params, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    Ok(Dispatch::with_params(device, &ELEMENTWISE, entry, &[WG_CONST], &params, bindings, grid_for(device, params.n as usize)?))
}

/// `entry` four elements per invocation (`entry4`, the operands bound as vec4 arrays at
/// binding + 4) where the element count allows it, else one; both count as `entry` in
/// profiles.
fn launch_vec4(device: &Device, entry: &'static str, entry4: &'static str, n: usize, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    let p = params(entry, n)?;
    if !n.is_multiple_of(4) {
        return Ok(launch(device, entry, p, bindings)?.tagged(width_token(false)));
    }
    let wide: Vec<(u32, &Tensor)> = bindings.iter().map(|&(i, t)| (i + 4, t)).collect();
    Ok(launch(device, entry4, Params { n: p.n / 4, ..p }, &wide)?.named(entry, 0.0).tagged(width_token(true)))
}

fn params(kernel: &str, n: usize) -> Result<Params> {
    Ok(Params { n: u32_of(kernel, "elements", n)?, alpha: 0.0, seed: 0, c: 1 })
}

/// `y = max(x, 0)`; NaN stays NaN (a diverged activation must not turn into a finite 0).
pub fn relu_forward(device: &Device, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    expect_same_len("relu_forward", ("x", x), ("y", y))?;
    launch_vec4(device, "relu_forward", "relu_forward4", x.len(), &[(1, x), (3, y)])
}

/// `dx = dy * (y > 0)`, from the forward's output `y` (so `x` need not be kept); NaN where
/// `y` is NaN, the derivative there.
pub fn relu_backward(device: &Device, dy: &Tensor, y: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    expect_same_len("relu_backward", ("dy", dy), ("y", y))?;
    expect_same_len("relu_backward", ("dy", dy), ("dx", dx))?;
    launch_vec4(device, "relu_backward", "relu_backward4", dy.len(), &[(1, dy), (2, y), (3, dx)])
}

/// `out = a + b`.
pub fn add(device: &Device, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Dispatch> {
    expect_same_len("add", ("a", a), ("b", b))?;
    expect_same_len("add", ("a", a), ("out", out))?;
    launch_vec4(device, "add", "add4", a.len(), &[(1, a), (2, b), (3, out)])
}

/// `out = max(a + b, 0)`: a residual join and the ReLU after it in one pass; NaN stays NaN.
pub fn add_relu(device: &Device, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Dispatch> {
    expect_same_len("add_relu", ("a", a), ("b", b))?;
    expect_same_len("add_relu", ("a", a), ("out", out))?;
    launch_vec4(device, "add_relu", "add_relu4", a.len(), &[(1, a), (2, b), (3, out)])
}

/// `out = alpha * a`.
pub fn scale(device: &Device, a: &Tensor, alpha: f32, out: &Tensor) -> Result<Dispatch> {
    expect_same_len("scale", ("a", a), ("out", out))?;
    let p = Params { alpha, ..params("scale", a.len())? };
    launch(device, "scale", p, &[(1, a), (3, out)])
}

/// `y += bias`, broadcast over the last dimension of `y`, in place.
pub fn bias_add(device: &Device, y: &Tensor, bias: &Tensor) -> Result<Dispatch> {
    let c = *y.shape().last().unwrap_or(&0);
    if bias.len() != c || c == 0 {
        bail!(Shape, "bias_add: bias {:?} does not match the last dimension of {:?}", bias.shape(), y.shape());
    }
    let p = Params { c: c as u32, ..params("bias_add", y.len())? };
    launch(device, "bias_add", p, &[(2, bias), (3, y)])
}

/// Inverted dropout with a mask drawn from `(seed, step[0], index)`: kept elements are
/// scaled by `1 / (1 - rate)`. The backward pass is the same call on the gradients with the
/// same seed and step, so the mask is never stored.
pub fn dropout(device: &Device, x: &Tensor, y: &Tensor, rate: f32, seed: u32, step: &Tensor) -> Result<Dispatch> {
    expect_same_len("dropout", ("x", x), ("y", y))?;
    if !(0.0..1.0).contains(&rate) {
        bail!(Config, "dropout rate must be in [0, 1), got {rate}");
    }
    let p = Params { alpha: rate, seed, ..params("dropout", x.len())? };
    launch(device, "dropout", p, &[(1, x), (3, y), (4, step)])
}

/// The host twin of the shaders' counter hash (dropout's mask, the augmentation layers'
/// draws): counter `i` under `seed` at training step `step`.
pub fn hash(i: u32, seed: u32, step: u32) -> u32 {
    let mut h = i.wrapping_mul(747796405).wrapping_add((seed ^ step.wrapping_mul(2654435769)).wrapping_mul(2891336453)).wrapping_add(1);
    h = ((h >> ((h >> 28) + 4)) ^ h).wrapping_mul(277803737);
    (h >> 22) ^ h
}

/// The host twin of the shader's mask, for tests: true where element `i` is kept.
pub fn dropout_keeps(i: u32, rate: f32, seed: u32, step: u32) -> bool {
    (hash(i, seed, step) >> 8) as f32 * (1.0 / 16777216.0) >= rate
}
