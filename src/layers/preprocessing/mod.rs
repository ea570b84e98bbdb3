//! Preprocessing placed inside a model. Fixed per-channel maps: Rescaling and Normalization
//! (given mean and variance), which record one `channel_affine` pass forward and one
//! `channel_scale` pass backward. Augmentation active only while training: RandomFlip,
//! RandomCrop and RandomTranslation (`augment`), which draw a transform per sample on the
//! device. None has weights.

mod augment;
mod normalization;
mod random_crop;
mod random_flip;
mod random_translation;
mod rescaling;

pub use normalization::Normalization;
pub use random_crop::RandomCrop;
pub use random_flip::{FlipMode, RandomFlip};
pub use random_translation::RandomTranslation;
pub use rescaling::Rescaling;
pub(crate) use augment::seed_from_config;
pub(crate) use random_translation::factor_from_config;

use super::{Graph, Saved};
use crate::kernels::activation;
use crate::{bail, Result, Tensor};

/// Checks that a per-channel table of `len` entries fits `input` (1 or its last axis).
fn expect_channels(class: &str, what: &str, len: usize, input: &[usize]) -> Result<()> {
    let channels = input.last().copied().unwrap_or(0);
    if len != 1 && len != channels {
        bail!(Shape, "{class}: {len} values of {what} for input {input:?}; need 1 or {channels} (the last axis)");
    }
    Ok(())
}

/// Refuses a non-finite value of `what`, naming it.
fn expect_finite(class: &str, what: &str, values: &[f32]) -> Result<()> {
    if values.is_empty() {
        bail!(Config, "{class}: {what} is empty; give 1 value or one per channel");
    }
    if let Some(v) = values.iter().find(|v| !v.is_finite()) {
        bail!(Config, "{class}: {what} must be finite, got {v} in {values:?}");
    }
    Ok(())
}

/// Records `y = x * scale[c] + offset[c]`.
fn forward(g: &mut Graph, x: &Tensor, scale: &[f32], offset: &[f32]) -> Result<Saved> {
    let y = g.activation(&x.shape()[1..])?;
    g.push(activation::channel_affine(g.device, x, scale, offset, &y)?);
    Ok(Saved::output(y))
}

/// Records `dx = dy * scale[c]`.
fn backward(g: &mut Graph, x: &Tensor, dy: &Tensor, scale: &[f32], need_dx: bool) -> Result<Option<Tensor>> {
    if !need_dx {
        return Ok(None);
    }
    let dx = g.activation(&x.shape()[1..])?;
    g.push(activation::channel_scale(g.device, dy, scale, &dx)?);
    Ok(Some(dx))
}

/// A table of one value as a JSON number (Keras' scalar form), else as a list.
fn to_config(values: &[f32]) -> serde_json::Value {
    match values {
        [v] => serde_json::json!(v),
        _ => serde_json::json!(values),
    }
}
