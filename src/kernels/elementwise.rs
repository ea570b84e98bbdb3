//! ReLU, residual add, scaling and dropout (`shaders/elementwise.wgsl`).
//!
//! # Shapes
//! Every operand has the same number of elements; shapes are otherwise free.
//!
//! # Storage
//! A gradient is stored as its activation. The residual join ([`add`], [`add_relu`]) takes its
//! operands all f32 or all f16, as do gradient sums ([`add`], [`add_relu_backward`]),
//! [`relu_forward`] (`x`, `y`) and [`relu_backward`] (`dy`, `y`, `dx`); an f16 operand needs a multiple of 4 elements,
//! since only the vec4 kernels store f16 (a scalar store would share a word with its
//! neighbour's). The other kernels take f32 alone.

use bytemuck::{Pod, Zeroable};

use super::{expect_activations, expect_dtype, expect_same_len, grid_for, u32_of, width_token, Dispatch, Shader, Storage, ELEMENTWISE, ELEMENTWISE_ALL, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    seed: u32,
    c: u32,
}

fn launch(device: &Device, shader: &Shader, entry: &'static str, params: Params, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    Ok(Dispatch::with_params(device, shader, entry, &[WG_CONST], &params, bindings, grid_for(device, params.n as usize)?))
}

/// `entry` four elements per invocation (`entry4` on the `wide` bindings: the activations'
/// quad views at binding + 7) where the element count allows it, else
/// one on the `narrow` bindings; both count as `entry` in profiles. `storage` picks the
/// module; the callers have refused f16 where the count is not a multiple of 4.
fn launch_vec4(device: &Device, entry: &'static str, entry4: &'static str, n: usize, storage: Storage, narrow: &[(u32, &Tensor)], wide: &[(u32, &Tensor)]) -> Result<Dispatch> {
    let p = params(entry, n)?;
    let shader = storage.pick(&ELEMENTWISE_ALL);
    if !n.is_multiple_of(4) {
        debug_assert_eq!(storage, Storage::F32, "{entry}: f16 reached the scalar kernel");
        return Ok(launch(device, shader, entry, p, narrow)?.tagged(format!("{} {}", width_token(false), storage.token())));
    }
    Ok(launch(device, shader, entry4, Params { n: p.n / 4, ..p }, wide)?.named(entry, 0.0).tagged(format!("{} {}", width_token(true), storage.token())))
}

fn params(kernel: &str, n: usize) -> Result<Params> {
    Ok(Params { n: u32_of(kernel, "elements", n)?, alpha: 0.0, seed: 0, c: 1 })
}

/// The storage of the residual join's operands: `a`'s, which `b` and `out` must share.
fn join_storage(kernel: &str, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Storage> {
    expect_same_len(kernel, ("a", a), ("b", b))?;
    expect_same_len(kernel, ("a", a), ("out", out))?;
    expect_activations(kernel, &[("a", a), ("b", b), ("out", out)], ("elements", a.len()))
}

/// `y = max(x, 0)`; NaN stays NaN (a diverged activation must not turn into a finite 0).
/// `x` and `y` both f32 or both f16 (a ReLU between layers that store f16); in f16 `y` holds
/// `x` or 0 exactly.
pub fn relu_forward(device: &Device, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    let k = "relu_forward";
    expect_same_len(k, ("x", x), ("y", y))?;
    let storage = expect_activations(k, &[("x", x), ("y", y)], ("elements", x.len()))?;
    launch_vec4(device, k, "relu_forward4", x.len(), storage, &[(1, x), (3, y)], &[(8, x), (10, y)])
}

/// `dx = dy * (y > 0)`, from the forward's output `y` (so `x` need not be kept); NaN where
/// `y` is NaN, the derivative there. `dy`, `y` and `dx` all f32 or all f16 (the gradients
/// stored as the activation); in f16 `dx` holds `dy`'s values exactly, infinities included.
pub fn relu_backward(device: &Device, dy: &Tensor, y: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "relu_backward";
    expect_same_len(k, ("dy", dy), ("y", y))?;
    expect_same_len(k, ("dy", dy), ("dx", dx))?;
    let storage = expect_activations(k, &[("y", y), ("dy", dy), ("dx", dx)], ("elements", y.len()))?;
    launch_vec4(device, k, "relu_backward4", dy.len(), storage, &[(1, dy), (2, y), (3, dx)], &[(8, dy), (9, y), (10, dx)])
}

/// `out = a + b`: a, b and out all f32 or all f16 (the residual join's forward, and the sum
/// of two gradients of an activation stored as f16). f16 sums are taken in f32 and rounded
/// once: a sum past f16's range is infinite, never clipped, and an infinite or NaN operand
/// stays so, which loss scaling watches for.
pub fn add(device: &Device, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Dispatch> {
    let storage = join_storage("add", a, b, out)?;
    launch_vec4(device, "add", "add4", a.len(), storage, &[(1, a), (2, b), (3, out)], &[(8, a), (9, b), (10, out)])
}

/// `out = relu_backward(a + b, y)`: a gradient sum masked by the ReLU output `y` it is the
/// gradient of (zero where `y <= 0`, NaN where `y` is NaN), in one pass instead of [`add`]
/// then [`relu_backward`], with the same result. All four f32 or all f16.
pub fn add_relu_backward(device: &Device, a: &Tensor, b: &Tensor, y: &Tensor, out: &Tensor) -> Result<Dispatch> {
    let k = "add_relu_backward";
    expect_same_len(k, ("a", a), ("y", y))?;
    let storage = join_storage(k, a, b, out)?;
    expect_activations(k, &[("a", a), ("y", y)], ("elements", a.len()))?;
    launch_vec4(device, k, "add_relu_backward4", a.len(), storage, &[(1, a), (2, b), (5, y), (3, out)], &[(8, a), (9, b), (12, y), (10, out)])
}

/// `out = max(a + b, 0)`: a residual join and the ReLU after it in one pass; NaN stays NaN.
/// a, b and out all f32 or all f16.
pub fn add_relu(device: &Device, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<Dispatch> {
    let storage = join_storage("add_relu", a, b, out)?;
    launch_vec4(device, "add_relu", "add_relu4", a.len(), storage, &[(1, a), (2, b), (3, out)], &[(8, a), (9, b), (10, out)])
}

/// `out = alpha * a`, f32.
pub fn scale(device: &Device, a: &Tensor, alpha: f32, out: &Tensor) -> Result<Dispatch> {
    expect_same_len("scale", ("a", a), ("out", out))?;
    expect_dtype("scale", "a", a, DType::F32)?;
    expect_dtype("scale", "out", out, DType::F32)?;
    let p = Params { alpha, ..params("scale", a.len())? };
    launch(device, &ELEMENTWISE, "scale", p, &[(1, a), (3, out)])
}

/// `y += bias`, broadcast over the last dimension of `y`, in place; f32.
pub fn bias_add(device: &Device, y: &Tensor, bias: &Tensor) -> Result<Dispatch> {
    let c = *y.shape().last().unwrap_or(&0);
    if bias.len() != c || c == 0 {
        bail!(Shape, "bias_add: bias {:?} does not match the last dimension of {:?}", bias.shape(), y.shape());
    }
    expect_dtype("bias_add", "y", y, DType::F32)?;
    expect_dtype("bias_add", "bias", bias, DType::F32)?;
    let p = Params { c: c as u32, ..params("bias_add", y.len())? };
    launch(device, &ELEMENTWISE, "bias_add", p, &[(2, bias), (3, y)])
}

/// Inverted dropout with a mask drawn from `(seed, step[0], index)`: kept elements are
/// scaled by `1 / (1 - rate)`. The backward pass is the same call on the gradients with the
/// same seed and step, so the mask is never stored. `x` and `y` are f32.
pub fn dropout(device: &Device, x: &Tensor, y: &Tensor, rate: f32, seed: u32, step: &Tensor) -> Result<Dispatch> {
    expect_same_len("dropout", ("x", x), ("y", y))?;
    expect_dtype("dropout", "x", x, DType::F32)?;
    expect_dtype("dropout", "y", y, DType::F32)?;
    if !(0.0..1.0).contains(&rate) {
        bail!(Config, "dropout rate must be in [0, 1), got {rate}");
    }
    let p = Params { alpha: rate, seed, ..params("dropout", x.len())? };
    launch(device, &ELEMENTWISE, "dropout", p, &[(1, x), (3, y), (4, step)])
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
