//! Rescaling: `x * scale + offset`.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use crate::{Result, Tensor};

/// Keras' `layers.Rescaling(scale, offset=0.0)`: `y = x * scale + offset`, with a scalar or
/// one value per channel (the last axis) for each. `Rescaling::new(2.0, -1.0)` maps [0, 1]
/// to [-1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct Rescaling {
    scale: Vec<f32>,
    offset: Vec<f32>,
}

impl Rescaling {
    /// One scale and offset for every channel.
    pub fn new(scale: f32, offset: f32) -> Self {
        Rescaling { scale: vec![scale], offset: vec![offset] }
    }
    /// A scale and an offset per channel; either may hold a single value for all. Checked
    /// when the model is built: finite, and 1 or `channels` values each.
    pub fn per_channel(scale: Vec<f32>, offset: Vec<f32>) -> Self {
        Rescaling { scale, offset }
    }
    /// Refuses empty or non-finite scales and offsets, naming them.
    pub fn validate(&self) -> Result<()> {
        super::expect_finite("Rescaling", "scale", &self.scale)?;
        super::expect_finite("Rescaling", "offset", &self.offset)
    }
    /// Both tables at the same length (the kernel takes one table of pairs).
    fn tables(&self) -> (Vec<f32>, Vec<f32>) {
        let n = self.scale.len().max(self.offset.len());
        let widen = |v: &[f32]| if v.len() == n { v.to_vec() } else { vec![v.first().copied().unwrap_or(0.0); n] };
        (widen(&self.scale), widen(&self.offset))
    }
}

impl Layer for Rescaling {
    fn class_name(&self) -> &'static str {
        "Rescaling"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.validate()?;
        super::expect_channels("Rescaling", "scale", self.scale.len(), input)?;
        super::expect_channels("Rescaling", "offset", self.offset.len(), input)?;
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "scale": super::to_config(&self.scale), "offset": super::to_config(&self.offset) })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let (scale, offset) = self.tables();
        super::forward(g, x, &scale, &offset)
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        super::backward(g, x, dy, &self.tables().0, need_dx)
    }
}
