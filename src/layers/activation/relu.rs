//! ReLU (Keras 3's, with `max_value` and `negative_slope`) and LeakyReLU.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use crate::kernels::activation::Function;
use crate::kernels::elementwise;
use crate::{bail, Result, Tensor};

/// Keras' `layers.ReLU(max_value=None, negative_slope=0.0)`: `negative_slope * x` below 0,
/// `x` up to `max_value`, `max_value` above. `ReLU::new().max_value(6.0)` is MobileNetV2's
/// ReLU6. Keras' `threshold` is always 0 here.
///
/// Only a plain ReLU (no cap, no slope) is fused into the BatchNorm or residual join before
/// it ([`Layer::is_plain_relu`]); the others run their own kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct ReLU {
    max_value: Option<f32>,
    negative_slope: f32,
}

impl Default for ReLU {
    fn default() -> Self {
        ReLU { max_value: None, negative_slope: 0.0 }
    }
}

/// Keras' own checks on a rectifier's constants, with the values in the message.
fn check(class: &str, max_value: Option<f32>, negative_slope: f32) -> Result<()> {
    if let Some(m) = max_value
        && (m.is_nan() || m < 0.0)
    {
        bail!(Config, "{class} max_value must be a number >= 0 (or None), got {m}");
    }
    if !(negative_slope.is_finite() && negative_slope >= 0.0) {
        bail!(Config, "{class} negative_slope must be a finite number >= 0, got {negative_slope}");
    }
    Ok(())
}

impl ReLU {
    /// A plain ReLU, `max(x, 0)`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Caps the output (ReLU6: 6). Checked when the model is built: at least 0.
    pub fn max_value(mut self, max_value: f32) -> Self {
        self.max_value = Some(max_value);
        self
    }
    /// The slope below 0. Checked when the model is built: finite and at least 0.
    pub fn negative_slope(mut self, negative_slope: f32) -> Self {
        self.negative_slope = negative_slope;
        self
    }
    /// Refuses the constants Keras refuses, naming them.
    pub fn validate(&self) -> Result<()> {
        check("ReLU", self.max_value, self.negative_slope)
    }
    fn function(&self) -> Function {
        Function::Relu { max_value: self.max_value.unwrap_or(f32::INFINITY), negative_slope: self.negative_slope }
    }
}

impl Layer for ReLU {
    fn class_name(&self) -> &'static str {
        "ReLU"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    // Every form: the plain one's own kernels (when not fused) and the capped or leaky ones'
    // take f16 quads, so a ReLU6 between f16 BatchNorms costs no cast.
    fn keeps_input_storage(&self) -> bool {
        true
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.validate()?;
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "max_value": self.max_value, "negative_slope": self.negative_slope, "threshold": 0.0 })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        if !self.is_plain_relu() {
            return super::forward(g, x, self.function());
        }
        let y = g.like(x)?;
        g.push(elementwise::relu_forward(g.device, x, &y)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !self.is_plain_relu() {
            return super::backward(g, x, dy, self.function(), need_dx);
        }
        if !need_dx {
            return Ok(None);
        }
        let dx = g.gradient(x)?;
        g.push(elementwise::relu_backward(g.device, dy, &saved.output, &dx)?);
        Ok(Some(dx))
    }
    fn is_plain_relu(&self) -> bool {
        self.max_value.is_none() && self.negative_slope == 0.0
    }
}

/// Keras' `layers.LeakyReLU(negative_slope=0.3)`: `x` above 0, `negative_slope * x` below.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakyReLU {
    negative_slope: f32,
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU { negative_slope: 0.3 }
    }
}

impl LeakyReLU {
    /// Keras' default slope, 0.3.
    pub fn new() -> Self {
        Self::default()
    }
    /// The slope below 0. Checked when the model is built: finite and at least 0.
    pub fn negative_slope(mut self, negative_slope: f32) -> Self {
        self.negative_slope = negative_slope;
        self
    }
    /// Refuses the slopes Keras refuses, naming them.
    pub fn validate(&self) -> Result<()> {
        check("LeakyReLU", None, self.negative_slope)
    }
    fn function(&self) -> Function {
        Function::Relu { max_value: f32::INFINITY, negative_slope: self.negative_slope }
    }
}

impl Layer for LeakyReLU {
    fn class_name(&self) -> &'static str {
        "LeakyReLU"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn keeps_input_storage(&self) -> bool {
        true
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.validate()?;
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "negative_slope": self.negative_slope })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        super::forward(g, x, self.function())
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        super::backward(g, x, dy, self.function(), need_dx)
    }
}
