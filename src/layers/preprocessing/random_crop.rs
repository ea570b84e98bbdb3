//! RandomCrop: a random window of each sample while training, the centre one in inference.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use super::augment::{self, Transform};
use crate::kernels::augment::{AxisDraw, FillMode};
use crate::{bail, Result, Tensor};

/// Keras' `layers.RandomCrop(height, width, seed)`: while training, a `height x width`
/// window of each sample at a start drawn uniformly per sample and step on the device (as
/// [`super::RandomFlip`] draws); in inference the centre window (start `(in - out) / 2`,
/// rounded down). The output is `(height, width, channels)` in both modes; the gradient
/// is `dy` in the window and 0 around it.
///
/// Two differences from Keras 3, which draws one start for the whole batch and at inference
/// resizes the largest window of the target's aspect ratio (so an input larger than the
/// target is scaled, not cropped): convoy draws per sample, and crops the centre at
/// inference. An input smaller than the window is refused when the model is built (Keras
/// would resize it).
#[derive(Clone, Debug, PartialEq)]
pub struct RandomCrop {
    height: usize,
    width: usize,
    seed: u32,
}

impl RandomCrop {
    /// A `height x width` window, with seed 0. Checked when the model is built: at least 1
    /// and at most the input's size.
    pub fn new(height: usize, width: usize) -> Self {
        RandomCrop { height, width, seed: 0 }
    }
    /// Seeds the draws (Keras' `seed`).
    pub fn seed(mut self, seed: u32) -> Self {
        self.seed = seed;
        self
    }
    /// The window's height and width.
    pub fn size(&self) -> (usize, usize) {
        (self.height, self.width)
    }
    /// The input's height and width, checked against the window.
    fn input_hw(&self, input: &[usize]) -> Result<(usize, usize)> {
        let [h, w, _] = augment::image("RandomCrop", input)?;
        if self.height == 0 || self.width == 0 || self.height > h || self.width > w {
            bail!(Shape, "RandomCrop: a {}x{} window does not fit input {input:?}; it needs 1 <= height <= {h} and 1 <= width <= {w}", self.height, self.width);
        }
        Ok((h, w))
    }
    fn transform(&self, (h, w): (usize, usize)) -> Transform {
        let count = |n: usize, k: usize| AxisDraw::Offset { count: (n - k + 1) as u32 };
        Transform { y: count(h, self.height), x: count(w, self.width), fill: FillMode::Constant, fill_value: 0.0 }
    }
}

impl Layer for RandomCrop {
    fn class_name(&self) -> &'static str {
        "RandomCrop"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.input_hw(input)?;
        Ok(vec![self.height, self.width, input[2]])
    }
    fn config(&self) -> serde_json::Value {
        json!({ "height": self.height, "width": self.width, "seed": self.seed, "data_format": "channels_last" })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let (h, w) = self.input_hw(&x.shape()[1..])?;
        let out = [self.height, self.width, x.shape()[3]];
        if g.training {
            return augment::forward(g, x, &out, &self.transform((h, w)), self.seed);
        }
        let centre = [1, ((h - self.height) / 2) as u32, 1, ((w - self.width) / 2) as u32];
        let draws = g.device.upload_u32(&[g.batch, 4], &centre.repeat(g.batch))?;
        augment::gather(g, x, &out, &self.transform((h, w)), draws)
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        augment::backward(g, x, saved, dy, FillMode::Constant, need_dx)
    }
}
