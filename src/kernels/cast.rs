//! Casts between f32 tensors and f16 ones (`shaders/cast.wgsl`, `DType::F16`): the rounding
//! to f16 is to nearest, ties to even, infinite from 65520 up, NaN kept, bit for bit what
//! [`crate::device::half`] computes on the host.
//!
//! # Shapes
//! Both operands have the same number of elements; shapes are otherwise free.

use bytemuck::{Pod, Zeroable};

use super::{expect_dtype, expect_same_len, grid_for, u32_of, Dispatch, CAST, WG_CONST};
use crate::{DType, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `out` (f16) = `x` (f32) rounded to f16.
pub fn to_f16(device: &Device, x: &Tensor, out: &Tensor) -> Result<Dispatch> {
    cast(device, "to_f16", (x, DType::F32, 1), (out, DType::F16, 2))
}

/// `out` (f32) = `x` (f16), exactly.
pub fn from_f16(device: &Device, x: &Tensor, out: &Tensor) -> Result<Dispatch> {
    cast(device, "from_f16", (x, DType::F16, 3), (out, DType::F32, 4))
}

/// One invocation per word of the f16 side: `(tensor, dtype, binding)` of each operand.
fn cast(device: &Device, kernel: &'static str, x: (&Tensor, DType, u32), out: (&Tensor, DType, u32)) -> Result<Dispatch> {
    expect_dtype(kernel, "x", x.0, x.1)?;
    expect_dtype(kernel, "out", out.0, out.1)?;
    expect_same_len(kernel, ("x", x.0), ("out", out.0))?;
    if out.0.overlaps(x.0) {
        crate::bail!(Shape, "{kernel}: output {:?} overlaps input {:?}", out.0.shape(), x.0.shape());
    }
    let n = x.0.len();
    let params = Params { n: u32_of(kernel, "elements", n)?, _pad: [0; 3] };
    Ok(Dispatch::with_params(device, &CAST, kernel, &[WG_CONST], &params, &[(x.2, x.0), (out.2, out.0)], grid_for(device, n.div_ceil(2))?))
}
