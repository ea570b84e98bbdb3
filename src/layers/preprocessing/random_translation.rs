//! RandomTranslation: each sample moved by a random whole number of pixels while training.

use serde_json::{json, Value};

use super::super::{Graph, Layer, Saved, Weights};
use super::augment::{self, Transform};
use crate::kernels::augment::{AxisDraw, FillMode};
use crate::{bail, Result, Tensor};

/// Keras' `layers.RandomTranslation(height_factor, width_factor, fill_mode, fill_value,
/// interpolation="nearest", seed)`: while training, each sample moves down by
/// `round(u * height)` pixels with `u` drawn uniformly from the height factor's range (up
/// when negative), and right likewise, drawn per sample and step on the device (as
/// [`super::RandomFlip`] draws); pixels moved in from outside are filled as `fill_mode`
/// says. The identity in inference. The gradient is the transpose: each input pixel gets
/// the gradients of the outputs that read it (none for a constant-filled output).
///
/// A factor `f` means the range `[-f, f]` of the side; [`RandomTranslation::height_range`]
/// gives `(lower, upper)`, each in `[-1, 1]`. Shifts are whole pixels
/// (`interpolation="nearest"`, drawn with 12 bits of `u` and rounded from eighths of a
/// pixel); Keras' default `"bilinear"`, which moves by fractions of a pixel, is refused.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomTranslation {
    height: (f32, f32),
    width: (f32, f32),
    fill_mode: FillMode,
    fill_value: f32,
    seed: u32,
}

impl RandomTranslation {
    /// Moves up to `height_factor` of the height and `width_factor` of the width either way,
    /// filling by reflection (Keras' default `fill_mode`), with seed 0.
    pub fn new(height_factor: f32, width_factor: f32) -> Self {
        RandomTranslation { height: (-height_factor, height_factor), width: (-width_factor, width_factor), fill_mode: FillMode::Reflect, fill_value: 0.0, seed: 0 }
    }
    /// The vertical shift as fractions `(lower, upper)` of the height (negative: up).
    pub fn height_range(mut self, lower: f32, upper: f32) -> Self {
        self.height = (lower, upper);
        self
    }
    /// The horizontal shift as fractions `(lower, upper)` of the width (negative: left).
    pub fn width_range(mut self, lower: f32, upper: f32) -> Self {
        self.width = (lower, upper);
        self
    }
    /// What the pixels moved in from outside show (Keras' `fill_mode`).
    pub fn fill_mode(mut self, mode: FillMode) -> Self {
        self.fill_mode = mode;
        self
    }
    /// The value of `FillMode::Constant` (Keras' `fill_value`).
    pub fn fill_value(mut self, value: f32) -> Self {
        self.fill_value = value;
        self
    }
    /// Seeds the draws (Keras' `seed`).
    pub fn seed(mut self, seed: u32) -> Self {
        self.seed = seed;
        self
    }
    /// Refuses what Keras refuses (a range outside [-1, 1] or reversed) and a non-finite
    /// fill value, naming the values.
    pub fn validate(&self) -> Result<()> {
        for (name, (lo, hi)) in [("height_factor", self.height), ("width_factor", self.width)] {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi && lo.abs() <= 1.0 && hi.abs() <= 1.0) {
                bail!(Config, "RandomTranslation `{name}` must give a range (lower, upper) with -1 <= lower <= upper <= 1, got ({lo}, {hi})");
            }
        }
        if !self.fill_value.is_finite() {
            bail!(Config, "RandomTranslation `fill_value` must be finite, got {}", self.fill_value);
        }
        Ok(())
    }
    fn transform(&self, input: &[usize]) -> Result<Transform> {
        self.validate()?;
        let [h, w, _] = augment::image("RandomTranslation", input)?;
        Ok(Transform {
            y: AxisDraw::shift(self.height.0, self.height.1, h)?,
            x: AxisDraw::shift(self.width.0, self.width.1, w)?,
            fill: self.fill_mode,
            fill_value: self.fill_value,
        })
    }
}

/// A range as Keras writes a factor: one number for a symmetric one, else `[lower, upper]`.
fn factor_to_config((lo, hi): (f32, f32)) -> Value {
    if lo == -hi && hi >= 0.0 { json!(hi) } else { json!([lo, hi]) }
}

/// A factor as Keras reads it: `f` is `(-f, f)`, a list of two is `(lower, upper)`.
pub(crate) fn factor_from_config(key: &str, cfg: &Value) -> Result<(f32, f32)> {
    let num = |v: &Value| v.as_f64().filter(|f| (*f as f32).is_finite()).map(|f| f as f32);
    match cfg.get(key) {
        Some(Value::Array(a)) if a.len() == 2 => match (num(&a[0]), num(&a[1])) {
            (Some(lo), Some(hi)) => Ok((lo, hi)),
            _ => bail!(Config, "RandomTranslation `{key}` must be a number or two numbers, got {}", cfg[key]),
        },
        Some(v) => match num(v) {
            Some(f) => Ok((-f, f)),
            None => bail!(Config, "RandomTranslation `{key}` must be a number or two numbers, got {v}"),
        },
        None => bail!(Config, "RandomTranslation config needs `{key}`"),
    }
}

impl Layer for RandomTranslation {
    fn class_name(&self) -> &'static str {
        "RandomTranslation"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        self.transform(input)?;
        Ok(input.to_vec())
    }
    fn config(&self) -> Value {
        json!({
            "height_factor": factor_to_config(self.height),
            "width_factor": factor_to_config(self.width),
            "fill_mode": self.fill_mode.name(),
            "fill_value": self.fill_value,
            "interpolation": "nearest",
            "seed": self.seed,
            "data_format": "channels_last",
        })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        if !g.training {
            return Ok(Saved::output(x.clone()));
        }
        let t = self.transform(&x.shape()[1..])?;
        augment::forward(g, x, &x.shape()[1..], &t, self.seed)
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        augment::backward(g, x, saved, dy, self.fill_mode, need_dx)
    }
}
