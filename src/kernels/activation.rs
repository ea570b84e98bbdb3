//! Activations beyond the plain ReLU (`shaders/activation.wgsl`): Keras' ReLU with
//! `max_value` and `negative_slope`, sigmoid, tanh, SiLU and GELU, element by element; a
//! softmax over the last axis; and the per-channel affine map of Rescaling and Normalization.
//!
//! # Shapes
//! Element-wise kernels: every operand has the same number of elements, shapes otherwise
//! free. Softmax: `[.., k]`, rows of the last axis. Channel maps: `[.., channels]` with a
//! table of 1 or `channels` entries.
//!
//! # Storage
//! The element-wise functions ([`activation_forward`], [`activation_backward`]) take their
//! operands all f32 or all f16 (a gradient is stored as its activation); an f16 operand needs
//! a multiple of 4 elements, since only the vec4 kernels store f16 (a scalar store would share
//! a word with its neighbour's). They compute in f32 and round each result once. Softmax and
//! the channel maps take f32 alone.

use bytemuck::{Pod, Zeroable};
use wgpu::util::DeviceExt;

use super::{expect_activations, expect_dtype, expect_same_len, expect_separate, grid, grid_for, u32_of, width_token, Dispatch, Storage, ACTIVATION, ACTIVATION_ALL, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

/// Invocations per softmax row; the shader's `ROW`.
pub const ROW_THREADS: u32 = 64;

/// An element-wise function the kernels compute, with its constants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Function {
    /// Keras 3's ReLU at threshold 0: `negative_slope * x` below 0, `x` up to `max_value`,
    /// `max_value` above (`f32::INFINITY`: no cap).
    Relu {
        /// The cap (`f32::INFINITY`: none; 6 for ReLU6).
        max_value: f32,
        /// The slope below 0 (0: plain ReLU; LeakyReLU's `negative_slope` otherwise).
        negative_slope: f32,
    },
    /// `1 / (1 + exp(-x))`, from `exp(-|x|)` on both sides (no overflow, no cancellation).
    Sigmoid,
    /// `tanh`, computed by the kernel itself: the builtin's precision is the driver's, and
    /// some return NaN for large |x|. Within 8 ulp (lavapipe: 3.9).
    Tanh,
    /// `x * sigmoid(x)` (Keras' `silu`, also named `swish`).
    Silu,
    /// `x * Φ(x)` with the normal CDF Φ from an erfc fit of fractional error below 1.2e-7
    /// (Numerical Recipes' `erfcc`; WGSL has no erf): Keras' `gelu` with `approximate=False`.
    /// In f32 it stays within 6 + x² ulp of the exact value, each value relative to itself
    /// (lavapipe: 3.3 ulp below |x| = 1; in the far tail, 27 ulp at x = -9 where the value
    /// is -1e-18, the error is that of `exp` at -x²/2, which Vulkan allows 3 + x² ulp).
    Gelu,
    /// `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`: Keras' `gelu` with `approximate=True`.
    GeluTanh,
}

impl Function {
    /// The shader's `OP` constant.
    fn op(self) -> u32 {
        match self {
            Function::Relu { .. } => 0,
            Function::Sigmoid => 1,
            Function::Tanh => 2,
            Function::Silu => 3,
            Function::Gelu => 4,
            Function::GeluTanh => 5,
        }
    }

    /// The path token naming the function (`op=gelu`).
    pub fn token(self) -> &'static str {
        match self {
            Function::Relu { .. } => "op=relu",
            Function::Sigmoid => "op=sigmoid",
            Function::Tanh => "op=tanh",
            Function::Silu => "op=silu",
            Function::Gelu => "op=gelu",
            Function::GeluTanh => "op=gelu_tanh",
        }
    }

    /// Every function, for coverage lists (ReLU with placeholder constants).
    pub const ALL: [Function; 6] = [
        Function::Relu { max_value: f32::INFINITY, negative_slope: 0.0 },
        Function::Sigmoid,
        Function::Tanh,
        Function::Silu,
        Function::Gelu,
        Function::GeluTanh,
    ];

    fn params(self, kernel: &str, n: usize) -> Result<Params> {
        let (alpha, beta) = match self {
            Function::Relu { max_value, negative_slope } => {
                // NaN would pass every comparison the shader makes and select nothing sane.
                if max_value.is_nan() || max_value < 0.0 || !(negative_slope.is_finite() && negative_slope >= 0.0) {
                    bail!(Config, "{kernel}: ReLU needs max_value >= 0 and a finite negative_slope >= 0, got {max_value} and {negative_slope}");
                }
                (max_value, negative_slope)
            }
            _ => (0.0, 0.0),
        };
        Ok(Params { n: u32_of(kernel, "elements", n)?, alpha, beta, c: 1 })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    beta: f32,
    c: u32,
}

/// How a vec4 entry point binds its operands: the channel maps' f32 views at binding + 4, or
/// the element-wise functions' views in `Storage` at binding + 8 (`act4`, either module).
#[derive(Clone, Copy)]
enum Views {
    F32,
    Act(Storage),
}

/// `entry` over `p.n` elements, or `entry4` over `p.n / 4` vec4s (the operands bound at their
/// `views`) where the count allows it; both count as `entry` in profiles. The callers have
/// refused f16 where the count is not a multiple of 4.
fn launch_vec4(
    device: &Device,
    (entry, entry4): (&'static str, &'static str),
    constants: &[(&'static str, f64)],
    p: Params,
    (bindings, views): (&[(u32, &Tensor)], Views),
    table: Option<&wgpu::Buffer>,
) -> Result<Dispatch> {
    let wide = p.n.is_multiple_of(4) && (p.c == 1 || p.c.is_multiple_of(4));
    let (shift, storage) = match views {
        Views::F32 => (4, Storage::F32),
        Views::Act(s) => (8, s),
    };
    debug_assert!(wide || storage == Storage::F32, "{entry}: f16 reached the scalar kernel");
    let (label, p, groups) = if wide { (entry4, Params { n: p.n / 4, ..p }, grid_for(device, p.n as usize / 4)?) } else { (entry, p, grid_for(device, p.n as usize)?) };
    let uniform = device.uniform(&p);
    let mut all = vec![(0, uniform.as_entire_buffer_binding())];
    all.extend(bindings.iter().map(|&(i, t)| (if wide { i + shift } else { i }, t.binding())));
    if let Some(t) = table {
        all.push((8, t.as_entire_buffer_binding()));
    }
    let d = Dispatch::new(device, storage.pick(&ACTIVATION_ALL), label, constants, &all, groups).named(entry, 0.0).tagged(width_token(wide));
    Ok(match views {
        Views::F32 => d,
        Views::Act(s) => d.tagged(s.token()),
    })
}

/// Softmax's and the channel maps' operands: f32 alone (their layers do not store f16, so
/// an f16 operand here is a caller's mistake, named as such).
fn expect_f32(kernel: &str, operands: &[(&str, &Tensor)]) -> Result<()> {
    if let Some((name, t)) = operands.iter().find(|(_, t)| t.dtype() == DType::F16) {
        bail!(Shape, "{kernel}: {name} {:?} is F16, expected F32 (only activation_forward and activation_backward take f16 storage)", t.shape());
    }
    operands.iter().try_for_each(|(name, t)| expect_dtype(kernel, name, t, DType::F32))
}

/// `y = f(x)`; NaN stays NaN. `x` and `y` both f32 or both f16 (f16: a multiple of 4
/// elements; `y` is f(x) in f32 rounded once to f16, past f16's range infinite).
pub fn activation_forward(device: &Device, f: Function, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    let k = "activation_forward";
    expect_same_len(k, ("x", x), ("y", y))?;
    let storage = expect_activations(k, &[("x", x), ("y", y)], ("elements", x.len()))?;
    expect_separate(k, &[("y", y)], &[("x", x)])?;
    let constants = [WG_CONST, ("OP", f.op() as f64)];
    Ok(launch_vec4(device, (k, "activation_forward4"), &constants, f.params(k, x.len())?, (&[(1, x), (3, y)], Views::Act(storage)), None)?.tagged(f.token()))
}

/// `dx = dy * f'(x)`, from the forward's input `x`; NaN where `x` is NaN. At ReLU's kinks
/// the derivative is TensorFlow's: 0 at `max_value`, `negative_slope` at 0. `dy`, `x` and
/// `dx` all f32 or all f16 (the gradients stored as the activation; f16: a multiple of 4
/// elements, the product taken in f32 and rounded once, past f16's range infinite, which
/// loss scaling watches for).
pub fn activation_backward(device: &Device, f: Function, dy: &Tensor, x: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "activation_backward";
    expect_same_len(k, ("dy", dy), ("x", x))?;
    expect_same_len(k, ("dy", dy), ("dx", dx))?;
    let storage = expect_activations(k, &[("x", x), ("dy", dy), ("dx", dx)], ("elements", x.len()))?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy), ("x", x)])?;
    let constants = [WG_CONST, ("OP", f.op() as f64)];
    Ok(launch_vec4(device, (k, "activation_backward4"), &constants, f.params(k, dy.len())?, (&[(1, dy), (2, x), (3, dx)], Views::Act(storage)), None)?.tagged(f.token()))
}

/// Rows of the last axis of `t`, which must have at least one column.
fn rows_of(kernel: &str, operand: &str, t: &Tensor) -> Result<(usize, usize)> {
    match t.shape().last() {
        Some(&k) if k > 0 => Ok((t.len() / k, k)),
        _ => bail!(Shape, "{kernel}: {operand} needs a non-empty last axis, got {:?}", t.shape()),
    }
}

fn launch_rows(device: &Device, entry: &'static str, (rows, k): (usize, usize), bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    let p = Params { n: u32_of(entry, "rows", rows)?, alpha: 0.0, beta: 0.0, c: u32_of(entry, "row length", k)? };
    u32_of(entry, "elements", rows * k)?;
    // A row's ROW_THREADS lanes stride over it: one pass or several.
    let pass = if k > ROW_THREADS as usize { "row=strided" } else { "row=one_pass" };
    Ok(Dispatch::with_params(device, &ACTIVATION, entry, &[], &p, bindings, grid(device, rows as u64)?).tagged(pass))
}

/// `y = exp(x - max) / Σ exp(x - max)` over the last axis (Keras' `Softmax(axis=-1)`); a
/// row holding NaN or +inf becomes NaN.
///
/// # Shapes
/// `x`: `[.., k]` -> `y`: the same shape.
pub fn softmax_forward(device: &Device, x: &Tensor, y: &Tensor) -> Result<Dispatch> {
    let k = "softmax_forward";
    let rows = rows_of(k, "x", x)?;
    super::expect_shape(k, "y", y, x.shape())?;
    expect_f32(k, &[("x", x), ("y", y)])?;
    expect_separate(k, &[("y", y)], &[("x", x)])?;
    launch_rows(device, k, rows, &[(1, x), (3, y)])
}

/// `dx = y * (dy - Σ dy * y)` over the last axis, from the forward's output `y`.
///
/// # Shapes
/// `dy`, `y`: `[.., k]` -> `dx`: the same shape.
pub fn softmax_backward(device: &Device, dy: &Tensor, y: &Tensor, dx: &Tensor) -> Result<Dispatch> {
    let k = "softmax_backward";
    let rows = rows_of(k, "dy", dy)?;
    super::expect_shape(k, "y", y, dy.shape())?;
    super::expect_shape(k, "dx", dx, dy.shape())?;
    expect_f32(k, &[("dy", dy), ("y", y), ("dx", dx)])?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy), ("y", y)])?;
    launch_rows(device, k, rows, &[(1, dy), (2, y), (3, dx)])
}

/// The `(scale, offset)` table of a channel map, checked against `x`'s last axis.
fn channel_table(device: &Device, kernel: &str, x: &Tensor, scale: &[f32], offset: &[f32]) -> Result<(wgpu::Buffer, u32)> {
    let channels = x.shape().last().copied().unwrap_or(0);
    let len = scale.len();
    if len == 0 || offset.len() != len || (len != 1 && len != channels) {
        bail!(Shape, "{kernel}: {} scales and {} offsets for x {:?}: both need 1 or {channels} (the last axis)", scale.len(), offset.len(), x.shape());
    }
    if let Some(v) = scale.iter().chain(offset).find(|v| !v.is_finite()) {
        bail!(Config, "{kernel}: scales and offsets must be finite, got {v}");
    }
    let pairs: Vec<f32> = scale.iter().zip(offset).flat_map(|(&s, &o)| [s, o]).collect();
    // A buffer of its own, held by the bind group as long as the dispatch lives (a pool
    // tensor would go back to the pool, and to another plan's activations, once recorded).
    let table = device.wgpu().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("channel scale/offset"),
        contents: bytemuck::cast_slice(&pairs),
        usage: wgpu::BufferUsages::STORAGE,
    });
    Ok((table, u32_of(kernel, "channels", len)?))
}

/// The path token of a channel map's table: one entry for all, or one per channel (the
/// vec4 kernels read the quad's four entries, or one).
fn table_token(len: u32) -> &'static str {
    if len == 1 { "table=broadcast" } else { "table=per_channel" }
}

/// `y = x * scale[c] + offset[c]` with `c` the index along the last axis; a table of one
/// entry applies to every channel (Keras' scalar `Rescaling`).
///
/// # Shapes
/// `x`: `[.., channels]` -> `y`: the same shape; `scale`, `offset`: `[1]` or `[channels]`.
pub fn channel_affine(device: &Device, x: &Tensor, scale: &[f32], offset: &[f32], y: &Tensor) -> Result<Dispatch> {
    let k = "channel_affine";
    super::expect_shape(k, "y", y, x.shape())?;
    expect_f32(k, &[("x", x), ("y", y)])?;
    expect_separate(k, &[("y", y)], &[("x", x)])?;
    let (table, c) = channel_table(device, k, x, scale, offset)?;
    let p = Params { n: u32_of(k, "elements", x.len())?, alpha: 0.0, beta: 0.0, c };
    Ok(launch_vec4(device, (k, "channel_affine4"), &[WG_CONST], p, (&[(1, x), (3, y)], Views::F32), Some(&table))?.tagged(table_token(c)))
}

/// The gradient of [`channel_affine`]: `dx = dy * scale[c]`.
///
/// # Shapes
/// `dy`: `[.., channels]` -> `dx`: the same shape; `scale`: `[1]` or `[channels]`.
pub fn channel_scale(device: &Device, dy: &Tensor, scale: &[f32], dx: &Tensor) -> Result<Dispatch> {
    let k = "channel_scale";
    super::expect_shape(k, "dx", dx, dy.shape())?;
    expect_f32(k, &[("dy", dy), ("dx", dx)])?;
    expect_separate(k, &[("dx", dx)], &[("dy", dy)])?;
    let (table, c) = channel_table(device, k, dy, scale, &vec![0.0; scale.len()])?;
    let p = Params { n: u32_of(k, "elements", dy.len())?, alpha: 0.0, beta: 0.0, c };
    Ok(launch_vec4(device, (k, "channel_scale4"), &[WG_CONST], p, (&[(1, dy), (3, dx)], Views::F32), Some(&table))?.tagged(table_token(c)))
}
