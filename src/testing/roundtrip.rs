//! Keras' layer-test harness for one layer: config round trip, weight counts, one training
//! step inside a model.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use crate::layers::{Dense, Flatten, Layer};
use crate::model::config::layer_from_config;
use crate::model::{CompileOptions, Sequential};
use crate::optim::Optimizer;
use crate::{bail, Device, Result};

/// What [`layer_roundtrip`] checked.
#[derive(Clone, Debug)]
pub struct RoundtripReport {
    /// The saved architecture entry: `{class_name, config}`.
    pub saved: serde_json::Value,
    /// Parameter elements the layer owns at the input shape.
    pub params: usize,
    /// State elements (moving statistics and the like) the layer owns.
    pub states: usize,
    /// The loss of the training step.
    pub loss: f64,
}

/// Checks what loading and training need of a layer, Keras' `run_layer_test`:
/// - its `{class_name, config}` rebuilds (built-in or [registered](crate::register_layer))
///   into a layer with the same class name and config;
/// - the rebuilt layer declares the same parameter and state shapes at `input_shape`;
/// - inside a model (`input_shape` is an image `[h, w, c]`; a Dense head of two classes
///   follows), one SGD step on `device` gives a finite loss and moves the layer's
///   parameters, if it has any.
pub fn layer_roundtrip(device: &Arc<Device>, layer: &dyn Layer, input_shape: &[usize]) -> Result<RoundtripReport> {
    let class = layer.class_name();
    let saved = json!({ "class_name": class, "config": layer.config() });
    let rebuilt = layer_from_config(&saved)?;
    if rebuilt.class_name() != class || rebuilt.config() != layer.config() {
        bail!(Mismatch, "layer_roundtrip: {class} saved as {saved} came back as {} with config {}", rebuilt.class_name(), rebuilt.config());
    }
    let shapes = |l: &dyn Layer, states: bool| -> Vec<Vec<usize>> {
        let specs = if states { l.states(input_shape) } else { l.params(input_shape) };
        specs.into_iter().map(|s| s.shape).collect()
    };
    for states in [false, true] {
        let (a, b) = (shapes(layer, states), shapes(rebuilt.as_ref(), states));
        if a != b {
            let what = if states { "states" } else { "parameters" };
            bail!(Mismatch, "layer_roundtrip: {class} declares {what} {a:?} at input {input_shape:?}, its rebuilt copy {b:?}");
        }
    }
    let count = |l: &dyn Layer, states: bool| -> usize {
        let specs = if states { l.states(input_shape) } else { l.params(input_shape) };
        specs.iter().map(|s| s.len()).sum()
    };
    let (params, states) = (count(layer, false), count(layer, true));
    if input_shape.len() != 3 {
        bail!(Shape, "layer_roundtrip: the training step feeds images [h, w, c]; got input shape {input_shape:?}");
    }

    let mut model = Sequential::new(input_shape);
    model.add_boxed(rebuilt);
    model.add(Flatten::new());
    model.add(Dense::new(2));
    model.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(vec![device.clone()]).seed(1).max_batch(4))?;
    let mut rng = StdRng::seed_from_u64(7);
    let images: Vec<u8> = (0..4 * input_shape.iter().product::<usize>()).map(|_| rng.random()).collect();
    let labels: Vec<u32> = (0..4).map(|i| i % 2).collect();
    let before = model.get_weights()?.0;
    let logs = model.train_on_batch(&images, &labels)?;
    let loss = logs.get("loss").copied().unwrap_or(f64::NAN);
    if !loss.is_finite() {
        bail!(Mismatch, "layer_roundtrip: one training step of a model with {class} gave the loss {loss}");
    }
    // The layer comes first, so its parameters lead the flat list.
    let after = model.get_weights()?.0;
    if params > 0 && before[..params] == after[..params] {
        bail!(Mismatch, "layer_roundtrip: one SGD step left all {params} parameters of {class} unchanged: its backward wrote no gradient");
    }
    Ok(RoundtripReport { saved, params, states, loss })
}
