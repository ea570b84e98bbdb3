//! Concatenation along the last axis and its gradient (`shaders/concat.wgsl`).
//!
//! # Shapes
//! A part `[.., width]` is the block of columns `offset..offset + width` of a whole
//! `[.., total]` with the same leading dimensions: in NHWC, the channels of one input of a
//! `Concatenate`.

use bytemuck::{Pod, Zeroable};

use super::{grid_for, u32_of, Dispatch, CONCAT, WG_CONST};
use crate::{bail, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    width: u32,
    total: u32,
    offset: u32,
}

/// Checks that `part` is the block of `whole` at column `offset` and builds the parameters.
fn block(kernel: &str, part: &Tensor, whole: &Tensor, offset: usize) -> Result<Params> {
    let (ps, ws) = (part.shape(), whole.shape());
    let (width, total) = (ps.last().copied().unwrap_or(0), ws.last().copied().unwrap_or(0));
    if ps.len() != ws.len() || ps[..ps.len().saturating_sub(1)] != ws[..ws.len().saturating_sub(1)] || width == 0 || offset + width > total {
        bail!(Shape, "{kernel}: part {ps:?} at column {offset} does not fit whole {ws:?} (same leading dimensions, columns within the last)");
    }
    Ok(Params { n: u32_of(kernel, "elements", part.len())?, width: width as u32, total: u32_of(kernel, "columns", total)?, offset: offset as u32 })
}

/// `whole[.., offset + c] = part[.., c]`: one input of a concatenation into its block.
pub fn concat_block(device: &Device, part: &Tensor, whole: &Tensor, offset: usize) -> Result<Dispatch> {
    let p = block("concat_block", part, whole, offset)?;
    Ok(Dispatch::with_params(device, &CONCAT, "concat_block", &[WG_CONST], &p, &[(1, part), (2, whole)], grid_for(device, part.len())?))
}

/// `part[.., c] = whole[.., offset + c]`: the gradient of one input of a concatenation.
pub fn slice_block(device: &Device, whole: &Tensor, part: &Tensor, offset: usize) -> Result<Dispatch> {
    let p = block("slice_block", part, whole, offset)?;
    Ok(Dispatch::with_params(device, &CONCAT, "slice_block", &[WG_CONST], &p, &[(1, whole), (2, part)], grid_for(device, part.len())?))
}

/// `whole[.., offset + c] = part[.., c]` and zero in every other column of `whole`: a block
/// padded with zeros, all of `whole` written (a convolution's kernel padded to the zero
/// channels of its input).
pub fn pad_block(device: &Device, part: &Tensor, whole: &Tensor, offset: usize) -> Result<Dispatch> {
    let p = block("pad_block", part, whole, offset)?;
    u32_of("pad_block", "elements of whole", whole.len())?;
    Ok(Dispatch::with_params(device, &CONCAT, "pad_block", &[WG_CONST], &p, &[(1, part), (2, whole)], grid_for(device, whole.len())?))
}
