//! Image input normalisation (`shaders/image.wgsl`): u8 pixels, uploaded four to a word,
//! become `(x / 255 - mean[c]) / std[c]` in f32 on the GPU, or in f16 with the channels
//! padded by zeros (mixed_float16's stem reads the image so).
//!
//! # Shapes
//! `x`: `[batch, height, width, channels]` u8 -> `y`: the same shape, f32; or `[batch,
//! height, width, padded]` f16 with an even `padded` of at least `channels`.

use bytemuck::{Pod, Zeroable};
use wgpu::util::DeviceExt;

use super::{expect_shape, grid_for, u32_of, Dispatch, IMAGE, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    channels: u32,
    out_channels: u32,
    _pad: u32,
}

/// `y = (x / 255 - mean[c]) / std[c]` for every pixel of a u8 NHWC batch; `mean` and `std`
/// hold one value per channel. An f16 `y` may have more channels than `x`: those are zero.
///
/// # Shapes
/// `x`: `[batch, height, width, channels]` u8 -> `y`: `[batch, height, width, channels]` f32,
/// or `[batch, height, width, padded]` f16 with an even `padded >= channels`.
pub fn normalize_u8(device: &Device, x: &Tensor, mean: &[f32], std: &[f32], y: &Tensor) -> Result<Dispatch> {
    let k = "normalize_u8";
    let &[batch, height, width, channels] = x.shape() else {
        bail!(Shape, "{k}: x must be [batch, height, width, channels], got {:?}", x.shape());
    };
    let padded = match y.shape() {
        &[_, _, _, p] if y.dtype() == DType::F16 && p >= channels && p % 2 == 0 => p,
        _ => channels,
    };
    expect_shape(k, "y", y, &[batch, height, width, padded])?;
    if x.dtype() != DType::U8 || !matches!(y.dtype(), DType::F32 | DType::F16) {
        bail!(Shape, "{k}: x {:?} must be U8 and y {:?} F32 or F16, got {:?} and {:?}", x.shape(), y.shape(), x.dtype(), y.dtype());
    }
    if y.dtype() == DType::F16 && padded % 2 != 0 {
        bail!(Shape, "{k}: an f16 y {:?} needs an even channel count (two halves a word)", y.shape());
    }
    if channels == 0 {
        bail!(Shape, "{k}: x {:?} has no channels", x.shape());
    }
    if mean.len() != channels || std.len() != channels {
        bail!(Shape, "{k}: {channels} channels but {} means and {} standard deviations", mean.len(), std.len());
    }
    if let Some(s) = std.iter().find(|s| !(s.is_finite() && **s != 0.0)) {
        bail!(Config, "{k}: standard deviations must be finite and non-zero, got {s} in {std:?}");
    }
    if x.same_storage(y) {
        bail!(Shape, "{k}: x {:?} and y {:?} share a buffer", x.shape(), y.shape());
    }
    // Folded in f64 so the kernel's one multiply-add rounds once.
    let affine: Vec<f32> = mean
        .iter()
        .zip(std)
        .flat_map(|(&m, &s)| [(1.0 / (255.0 * s as f64)) as f32, (-(m as f64) / s as f64) as f32])
        .collect();
    // A buffer of its own, held by the bind group as long as the dispatch lives.
    let table = device.wgpu().create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("normalize_u8 mean/std"),
        contents: bytemuck::cast_slice(&affine),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let channels = u32_of(k, "channels", channels)?;
    if y.dtype() == DType::F16 {
        // One invocation per output word: two halves of one pixel. The shader indexes x's
        // bytes in u32.
        u32_of(k, "pixels", x.len())?;
        let words = y.len() / 2;
        let params = Params { n: u32_of(k, "output words", words)?, channels, out_channels: padded as u32, _pad: 0 };
        let uniform = device.uniform(&params);
        let bindings = [(0, uniform.as_entire_buffer_binding()), (1, x.binding()), (2, table.as_entire_buffer_binding()), (4, y.binding())];
        let tag = if padded == channels as usize { "f16" } else { "f16 padded" };
        return Ok(Dispatch::new(device, &IMAGE, "normalize_u8_f16", &[WG_CONST], &bindings, grid_for(device, words)?).tagged(tag));
    }
    // The shader rounds the pixel count up to whole words in u32.
    u32_of(k, "pixels + 3", x.len() + 3)?;
    let params = Params { n: u32_of(k, "pixels", x.len())?, channels, out_channels: channels, _pad: 0 };
    let uniform = device.uniform(&params);
    let bindings = [
        (0, uniform.as_entire_buffer_binding()),
        (1, x.binding()),
        (2, table.as_entire_buffer_binding()),
        (3, y.binding()),
    ];
    // Each invocation converts one u32 word of four pixels; a last partial word is guarded.
    let words = if x.len().is_multiple_of(4) { "words=whole" } else { "words=tail" };
    Ok(Dispatch::new(device, &IMAGE, k, &[WG_CONST], &bindings, grid_for(device, x.len().div_ceil(4))?).tagged(words))
}
