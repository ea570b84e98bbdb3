//! LayerNormalization over the last axis, with Keras 3's defaults (axis -1, epsilon 1e-3,
//! center and scale): each sample position is normalised over its own channels, so
//! training and inference compute the same thing and there are no moving statistics.

use serde_json::json;

use super::{Graph, Init, Layer, ParamSpec, Saved, Weights};
use crate::kernels::layernorm;
use crate::{bail, Result, Tensor};

/// `y = gamma * (x - mean) / sqrt(var + epsilon) + beta`, mean and biased variance over the
/// last axis; `gamma` (ones) and `beta` (zeros) have the last axis' size.
#[derive(Debug, Clone)]
pub struct LayerNormalization {
    /// Added to the variance before the square root (Keras' default 1e-3).
    pub epsilon: f32,
}

impl Default for LayerNormalization {
    fn default() -> Self {
        LayerNormalization { epsilon: 1e-3 }
    }
}

impl LayerNormalization {
    /// Keras' defaults: axis -1, epsilon 1e-3, center and scale.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets epsilon; [`Layer::output_shape`] refuses one that is not positive and finite.
    pub fn epsilon(mut self, e: f32) -> Self {
        self.epsilon = e;
        self
    }
}

impl Layer for LayerNormalization {
    fn class_name(&self) -> &'static str {
        "LayerNormalization"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.is_empty() || input.contains(&0) {
            bail!(Shape, "LayerNormalization needs a non-empty last axis, got input shape {input:?}");
        }
        if !(self.epsilon > 0.0 && self.epsilon.is_finite()) {
            bail!(Config, "LayerNormalization needs a positive finite epsilon, got {}", self.epsilon);
        }
        Ok(input.to_vec())
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        let c = *input.last().unwrap_or(&0);
        vec![ParamSpec::new("gamma", vec![c], Init::Ones, false), ParamSpec::new("beta", vec![c], Init::Zeros, false)]
    }
    fn config(&self) -> serde_json::Value {
        json!({ "axis": -1, "epsilon": self.epsilon, "center": true, "scale": true })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let y = g.activation(&x.shape()[1..])?;
        let c = x.shape().last().copied().unwrap_or(0);
        // Kept in the record in inference too: the dispatch binds it for as long as it replays.
        let saved = g.device.alloc(&[x.len().checked_div(c).unwrap_or(0), 2], crate::DType::F32)?;
        g.extend(layernorm::forward(g.device, self.epsilon, x, &w.params[0], &w.params[1], &saved, &y)?);
        Ok(Saved { output: y, extra: vec![saved], inner: Vec::new() })
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, _need_dx: bool) -> Result<Option<Tensor>> {
        let dx = g.activation(&x.shape()[1..])?;
        let stats = saved.extra.first().ok_or_else(|| crate::Error::Config("LayerNormalization backward without its forward's statistics".into()))?;
        g.extend(layernorm::backward(g.device, x, dy, &w.params[0], stats, &dx, &w.grads[0], &w.grads[1])?);
        Ok(Some(dx))
    }
}
