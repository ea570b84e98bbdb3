//! Dynamic loss scaling on the device (`shaders/loss_scale.wgsl`): the `mixed_float16`
//! policy's guard against f16 gradients that underflow (scaled up) or overflow (step
//! skipped, scale halved).

use bytemuck::{Pod, Zeroable};

use super::{grid, grid_for, u32_of, Dispatch, LOSS_SCALE, WG, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

/// Words of the state tensor: scale (f32 bits), finite steps in a row, the step's
/// non-finite flag, steps skipped so far.
pub const STATE_LEN: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    growth_steps: u32,
    _pad: [u32; 2],
}

/// The initial state for `scale`: u32 words to upload.
pub fn initial_state(scale: f32) -> [u32; STATE_LEN] {
    [scale.to_bits(), 0, 0, 0]
}

fn expect_state(kernel: &str, state: &Tensor) -> Result<()> {
    if state.dtype() != DType::U32 || state.len() != STATE_LEN {
        bail!(Shape, "{kernel}: loss-scale state is {:?} {:?}, expected u32 [{STATE_LEN}]", state.dtype(), state.shape());
    }
    Ok(())
}

fn launch(device: &Device, entry: &'static str, data: &Tensor, state: &Tensor, growth_steps: u32) -> Result<Dispatch> {
    expect_state(entry, state)?;
    if entry != "update_scale" && data.dtype() != DType::F32 {
        bail!(Shape, "{entry}: data is {:?}, expected F32", data.dtype());
    }
    let p = Params { n: u32_of(entry, "elements", data.len())?, growth_steps, _pad: [0; 2] };
    let (groups, tensors): ([u32; 3], Vec<(u32, &Tensor)>) = match entry {
        // `update_scale` reads no data: its layout has no binding 1.
        "update_scale" => ([1, 1, 1], vec![(2, state)]),
        // Quads bound as vec4s, QUADS (shaders/loss_scale.wgsl) of them an invocation.
        "find_non_finite4" => (grid(device, (data.len() / 4).div_ceil(4 * WG as usize) as u64)?, vec![(2, state), (3, data)]),
        _ => (grid_for(device, data.len())?, vec![(1, data), (2, state)]),
    };
    Ok(Dispatch::with_params(device, &LOSS_SCALE, entry, &[WG_CONST], &p, &tensors, groups))
}

/// `grad *= scale`, in place: the loss gradient before the backward.
pub fn scale_gradient(device: &Device, grad: &Tensor, state: &Tensor) -> Result<Dispatch> {
    launch(device, "scale_gradient", grad, state, 0)
}

/// Flags the step when any of `grads` is NaN or infinite: four at a load where they are
/// whole quads (`find_non_finite4`), else one.
pub fn find_non_finite(device: &Device, grads: &Tensor, state: &Tensor) -> Result<Dispatch> {
    let quads = !grads.is_empty() && grads.len().is_multiple_of(4) && grads.dtype() == DType::F32;
    let (entry, token) = if quads { ("find_non_finite4", "vec4") } else { ("find_non_finite", "scalar") };
    Ok(launch(device, entry, grads, state, 0)?.tagged(token))
}

/// After the optimizer: halves the scale on a flagged step, doubles it after `growth_steps`
/// finite ones in a row.
pub fn update_scale(device: &Device, state: &Tensor, growth_steps: u32) -> Result<Dispatch> {
    if growth_steps == 0 {
        bail!(Config, "loss scaling: dynamic_growth_steps must be at least 1, got 0");
    }
    launch(device, "update_scale", state, state, growth_steps)
}
