//! Losses and metrics, with Keras' names.

use serde::{Deserialize, Serialize};

use crate::{bail, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// What training minimizes, with Keras' names.
pub enum Loss {
    /// Integer labels against softmax logits (the model's last layer outputs raw logits).
    SparseCategoricalCrossentropy,
    /// Mean squared error against the one-hot encoding of the integer labels.
    MeanSquaredError,
}

impl Loss {
    /// The loss by its Keras name: `sparse_categorical_crossentropy` (or `crossentropy`), `mse` (or
    /// `mean_squared_error`).
    pub fn from_name(name: &str) -> Result<Loss> {
        Ok(match name {
            "sparse_categorical_crossentropy" | "crossentropy" => Loss::SparseCategoricalCrossentropy,
            "mse" | "mean_squared_error" => Loss::MeanSquaredError,
            other => bail!(Config, "unknown loss `{other}` (expected sparse_categorical_crossentropy or mse)"),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// What `fit` and `evaluate` report besides the loss, with Keras' names.
pub enum Metric {
    /// Top-1 accuracy; logged as `accuracy`.
    Accuracy,
    /// Top-k accuracy; logged as `top_k_accuracy` (k = 5 is Keras' default).
    TopKAccuracy(usize),
}

impl Metric {
    /// The key the metric is logged under (`accuracy`, `top_k_accuracy`, `top_3_accuracy`; `val_`
    /// is prepended for validation data).
    pub fn name(&self) -> String {
        match self {
            Metric::Accuracy => "accuracy".into(),
            Metric::TopKAccuracy(5) => "top_k_accuracy".into(),
            Metric::TopKAccuracy(k) => format!("top_{k}_accuracy"),
        }
    }
    /// Whether a sample whose label ranks `rank` (0 = the largest logit) and whose loss is
    /// `loss` counts as a hit. A non-finite loss never does: its logits hold NaN or infinity,
    /// which compare false, so the rank alone could call a diverged prediction correct.
    pub fn hit(&self, rank: u32, loss: f32) -> bool {
        if !loss.is_finite() {
            return false;
        }
        match self {
            Metric::Accuracy => rank == 0,
            Metric::TopKAccuracy(k) => (rank as usize) < *k,
        }
    }
}
