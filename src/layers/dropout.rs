//! Dropout: inverted dropout while training, the identity otherwise.

use serde_json::json;

use super::{Graph, Layer, Saved, Weights};
use crate::kernels::elementwise;
use crate::{bail, Result, Tensor};

#[derive(Debug, Clone)]
/// Inverted dropout (Keras' `Dropout`): while training, zeroes each element with probability `rate`
/// and scales the others by `1 / (1 - rate)`; the identity in evaluation.
pub struct Dropout {
    /// Fraction of the elements dropped, in `[0, 1)`.
    pub rate: f32,
    /// Seed of the masks; the layer's position is mixed in, so two layers with the same seed draw
    /// different masks, and the step counter, so every step draws a new one.
    pub seed: u32,
}

impl Dropout {
    /// Drops `rate` of the elements, with seed 0.
    pub fn new(rate: f32) -> Self {
        Dropout { rate, seed: 0 }
    }
    /// Seeds the masks (Keras' `seed`).
    pub fn seed(mut self, seed: u32) -> Self {
        self.seed = seed;
        self
    }
    /// Each Dropout layer of a model draws an independent mask.
    fn layer_seed(&self, g: &Graph) -> u32 {
        self.seed.wrapping_add((g.layer_index as u32).wrapping_mul(0x9E37_79B9))
    }
}

impl Layer for Dropout {
    fn class_name(&self) -> &'static str {
        "Dropout"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if !(0.0..1.0).contains(&self.rate) {
            bail!(Config, "Dropout rate must be in [0, 1), got {}", self.rate);
        }
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "rate": self.rate, "seed": self.seed })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        if !g.training || self.rate == 0.0 {
            return Ok(Saved::output(x.clone()));
        }
        let y = g.activation(&x.shape()[1..])?;
        g.push(elementwise::dropout(g.device, x, &y, self.rate, self.layer_seed(g), &g.step)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        if self.rate == 0.0 {
            return Ok(Some(dy.clone()));
        }
        let dx = g.activation(&x.shape()[1..])?;
        g.push(elementwise::dropout(g.device, dy, &dx, self.rate, self.layer_seed(g), &g.step)?);
        Ok(Some(dx))
    }
}
