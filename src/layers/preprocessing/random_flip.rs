//! RandomFlip: each sample mirrored with probability 1/2 per axis while training.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use super::augment::{self, Transform};
use crate::kernels::augment::{AxisDraw, FillMode};
use crate::{bail, Result, Tensor};

/// Which axes a [`RandomFlip`] may mirror (Keras' `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlipMode {
    /// Left to right: `"horizontal"`.
    Horizontal,
    /// Top to bottom: `"vertical"`.
    Vertical,
    /// Each independently: `"horizontal_and_vertical"` (Keras' default).
    HorizontalAndVertical,
}

impl FlipMode {
    /// Keras' name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            FlipMode::Horizontal => "horizontal",
            FlipMode::Vertical => "vertical",
            FlipMode::HorizontalAndVertical => "horizontal_and_vertical",
        }
    }
}

impl std::str::FromStr for FlipMode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<FlipMode> {
        match s {
            "horizontal" => Ok(FlipMode::Horizontal),
            "vertical" => Ok(FlipMode::Vertical),
            "horizontal_and_vertical" => Ok(FlipMode::HorizontalAndVertical),
            _ => bail!(Config, "RandomFlip mode must be \"horizontal\", \"vertical\" or \"horizontal_and_vertical\", got {s:?}"),
        }
    }
}

/// Keras' `layers.RandomFlip(mode, seed)`: while training, each sample of an NHWC batch is
/// flipped left to right and/or top to bottom, each with probability 1/2, drawn anew every
/// step on the device from the seed, the layer's position, the step and the sample's index
/// in the whole batch (so a run is reproducible from its seed, and data-parallel replicas
/// draw what one device would). The identity in inference. Its gradient flips `dy` back.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomFlip {
    mode: FlipMode,
    seed: u32,
}

impl RandomFlip {
    /// Flips along the axes of `mode`, with seed 0.
    pub fn new(mode: FlipMode) -> Self {
        RandomFlip { mode, seed: 0 }
    }
    /// Seeds the draws (Keras' `seed`).
    pub fn seed(mut self, seed: u32) -> Self {
        self.seed = seed;
        self
    }
    fn transform(&self) -> Transform {
        let (v, h) = match self.mode {
            FlipMode::Horizontal => (false, true),
            FlipMode::Vertical => (true, false),
            FlipMode::HorizontalAndVertical => (true, true),
        };
        let axis = |on: bool| if on { AxisDraw::Flip } else { AxisDraw::Keep };
        Transform { y: axis(v), x: axis(h), fill: FillMode::Constant, fill_value: 0.0 }
    }
}

impl Default for RandomFlip {
    /// Keras' default: both axes.
    fn default() -> Self {
        RandomFlip::new(FlipMode::HorizontalAndVertical)
    }
}

impl Layer for RandomFlip {
    fn class_name(&self) -> &'static str {
        "RandomFlip"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        augment::image("RandomFlip", input)?;
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "mode": self.mode.name(), "seed": self.seed, "data_format": "channels_last" })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        if !g.training {
            return Ok(Saved::output(x.clone()));
        }
        augment::forward(g, x, &x.shape()[1..], &self.transform(), self.seed)
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        augment::backward(g, x, saved, dy, FillMode::Constant, need_dx)
    }
}
