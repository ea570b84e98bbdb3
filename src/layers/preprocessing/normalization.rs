//! Normalization with a given mean and variance.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use crate::{bail, Result, Tensor};

/// Keras 3's `backend.epsilon()`: the floor of the standard deviation a Normalization
/// divides by.
const EPSILON: f64 = 1e-7;

/// Keras' `layers.Normalization(axis=-1, mean=..., variance=..., invert=False)` with the
/// mean and variance given: `y = (x - mean) / max(sqrt(variance), 1e-7)` per channel (the
/// last axis), or with `invert` the inverse map `mean + x * max(sqrt(variance), 1e-7)`.
///
/// Keras can also `adapt()` the statistics to a data set; convoy cannot: compute them (for
/// images, `convoy::data::channel_stats` reads a data set's per-channel mean and standard
/// deviation of `x / 255`) and pass them here.
/// Only `axis=-1` is supported.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalization {
    mean: Vec<f32>,
    variance: Vec<f32>,
    invert: bool,
}

impl Normalization {
    /// One value for all channels or one per channel, each. Checked when the model is built:
    /// finite, the variance at least 0, as many means as variances.
    pub fn new(mean: Vec<f32>, variance: Vec<f32>) -> Self {
        Normalization { mean, variance, invert: false }
    }
    /// Maps normalised values back (`mean + x * std`), as Keras' `invert=True`.
    pub fn invert(mut self, invert: bool) -> Self {
        self.invert = invert;
        self
    }
    /// Refuses what Keras refuses (and non-finite statistics), naming the values.
    pub fn validate(&self) -> Result<()> {
        super::expect_finite("Normalization", "mean", &self.mean)?;
        super::expect_finite("Normalization", "variance", &self.variance)?;
        if let Some(v) = self.variance.iter().find(|v| **v < 0.0) {
            bail!(Config, "Normalization: a variance must be >= 0, got {v} in {:?}", self.variance);
        }
        if self.mean.len() != self.variance.len() {
            bail!(Config, "Normalization: {} means but {} variances", self.mean.len(), self.variance.len());
        }
        Ok(())
    }
    /// The map as `x * scale + offset`, folded in f64 so each value rounds once.
    fn tables(&self) -> (Vec<f32>, Vec<f32>) {
        self.mean
            .iter()
            .zip(&self.variance)
            .map(|(&m, &v)| {
                let std = (v as f64).sqrt().max(EPSILON);
                if self.invert { (std as f32, m) } else { ((1.0 / std) as f32, (-(m as f64) / std) as f32) }
            })
            .unzip()
    }
}

impl Layer for Normalization {
    fn class_name(&self) -> &'static str {
        "Normalization"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.validate()?;
        super::expect_channels("Normalization", "mean", self.mean.len(), input)?;
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        json!({ "axis": -1, "mean": super::to_config(&self.mean), "variance": super::to_config(&self.variance), "invert": self.invert })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let (scale, offset) = self.tables();
        super::forward(g, x, &scale, &offset)
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        super::backward(g, x, dy, &self.tables().0, need_dx)
    }
}
