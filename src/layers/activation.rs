//! ReLU.

use serde_json::json;

use super::{Graph, Layer, Saved, Weights};
use crate::kernels::elementwise;
use crate::{Result, Tensor};

#[derive(Debug, Default, Clone)]
pub struct ReLU;

impl ReLU {
    pub fn new() -> Self {
        ReLU
    }
}

impl Layer for ReLU {
    fn class_name(&self) -> &'static str {
        "ReLU"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let y = g.activation(&x.shape()[1..])?;
        g.push(elementwise::relu_forward(g.device, x, &y)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let dx = g.activation(&x.shape()[1..])?;
        g.push(elementwise::relu_backward(g.device, dy, &saved.output, &dx)?);
        Ok(Some(dx))
    }
}
