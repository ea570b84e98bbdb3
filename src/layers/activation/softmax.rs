//! Softmax over the last axis.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use crate::kernels::activation;
use crate::{bail, Result, Tensor};

/// Keras' `layers.Softmax(axis=-1)`: `exp(x - max) / Σ exp(x - max)` along the last axis,
/// the only axis supported. Before a `SparseCategoricalCrossentropy` loss, which takes
/// logits, leave it out: the loss applies its own softmax.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Softmax;

impl Softmax {
    /// A softmax over the last axis.
    pub fn new() -> Self {
        Softmax
    }
}

/// Records the softmax of `x`; its output is what the backward pass reads.
pub(super) fn forward(g: &mut Graph, x: &Tensor) -> Result<Saved> {
    let y = g.activation(&x.shape()[1..])?;
    g.push(activation::softmax_forward(g.device, x, &y)?);
    Ok(Saved::output(y))
}

/// Records `dx = y * (dy - Σ dy * y)` from the forward's `y`.
pub(super) fn backward(g: &mut Graph, saved: &Saved, dy: &Tensor, need_dx: bool) -> Result<Option<Tensor>> {
    if !need_dx {
        return Ok(None);
    }
    let dx = g.activation(&saved.output.shape()[1..])?;
    g.push(activation::softmax_backward(g.device, dy, &saved.output, &dx)?);
    Ok(Some(dx))
}

impl Layer for Softmax {
    fn class_name(&self) -> &'static str {
        "Softmax"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.last().is_none_or(|&k| k == 0) {
            bail!(Shape, "Softmax needs a non-empty last axis, got input {input:?}");
        }
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "axis": -1 })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        forward(g, x)
    }
    fn backward(&self, g: &mut Graph, _: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        backward(g, saved, dy, need_dx)
    }
}
