//! What RandomFlip, RandomCrop and RandomTranslation share: the per-sample draw, the gather
//! and its transpose (`kernels::augment`), and the checks of an image input.

use super::super::{Graph, Saved};
use crate::kernels::augment::{self, AxisDraw, FillMode};
use crate::{bail, DType, Result, Tensor};

/// One augmentation as the kernels take it: how each axis is drawn and what an index
/// outside the input reads.
pub(super) struct Transform {
    pub y: AxisDraw,
    pub x: AxisDraw,
    pub fill: FillMode,
    pub fill_value: f32,
}

/// The `(height, width, channels)` of a per-sample image input, or an error naming the layer.
pub(super) fn image(class: &str, input: &[usize]) -> Result<[usize; 3]> {
    match *input {
        [h, w, c] if h > 0 && w > 0 && c > 0 => Ok([h, w, c]),
        _ => bail!(Shape, "{class} expects (height, width, channels) images with no zero dimension, got {input:?}"),
    }
}

/// A seed per layer, as Dropout's: two augmentation layers with the same seed draw
/// independently.
pub(super) fn layer_seed(seed: u32, g: &Graph) -> u32 {
    seed.wrapping_add((g.layer_index as u32).wrapping_mul(0x9E37_79B9))
}

/// Records the training forward: each sample's draw, then the gather into a
/// `[batch, ..out]` output. The draws are kept for the backward (and for the f64 check,
/// which reads them back).
pub(super) fn forward(g: &mut Graph, x: &Tensor, out: &[usize], t: &Transform, seed: u32) -> Result<Saved> {
    let draws = g.device.alloc(&[g.batch, 4], DType::U32)?;
    let in_hw = (x.shape()[1], x.shape()[2]);
    g.push(augment::draw(g.device, t.y, t.x, in_hw, layer_seed(seed, g), &g.step, &draws)?);
    gather(g, x, out, t, draws)
}

/// Records the gather through given `draws` (the inference centre crop's fixed ones).
pub(super) fn gather(g: &mut Graph, x: &Tensor, out: &[usize], t: &Transform, draws: Tensor) -> Result<Saved> {
    let y = g.activation(out)?;
    g.push(augment::forward(g.device, x, &draws, t.fill, t.fill_value, &y)?);
    Ok(Saved { output: y, extra: vec![draws], inner: Vec::new() })
}

/// Records the input gradient, the transpose of the gather; nothing when the layer reads the
/// model's input (`need_dx` false) or the forward was the identity.
pub(super) fn backward(g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, fill: FillMode, need_dx: bool) -> Result<Option<Tensor>> {
    if !need_dx {
        return Ok(None);
    }
    let Some(draws) = saved.extra.first() else {
        return Ok(Some(dy.clone()));
    };
    let dx = g.activation(&x.shape()[1..])?;
    g.push(augment::backward(g.device, dy, draws, fill, &dx)?);
    Ok(Some(dx))
}

/// A seed from a config: a number, or `null` / absent (Keras' `seed=None`) for 0.
pub(crate) fn seed_from_config(class: &str, cfg: &serde_json::Value) -> Result<u32> {
    match cfg.get("seed") {
        None | Some(serde_json::Value::Null) => Ok(0),
        Some(v) => match v.as_u64() {
            Some(s) if s <= u32::MAX as u64 => Ok(s as u32),
            _ => bail!(Config, "{class} `seed` must be an integer in 0..=4294967295 or null, got {v}"),
        },
    }
}
