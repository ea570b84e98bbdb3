//! Transfer learning on a built model: the same weights at another image size, and a new
//! classifier head (Keras' recipe: the base kept, a fresh `Dense` for the new classes).
//!
//! Both rebuild the model from its architecture and carry every weight over by its name
//! (`residual_3/conv2d_1/kernel`), which names the same tensor in both models since the layers
//! are the same up to the one changed.

use serde_json::Value;

use crate::model::layout::Layout;
use crate::model::Sequential;
use crate::{bail, Result};

impl Sequential {
    /// The same model for `input_shape` (`[height, width, channels]`) images, its weights,
    /// normalisation, class names and frozen flags kept: a network that ends in global pooling
    /// takes any image size with the same weights (fine-tuning an ImageNet model at 160 or 32
    /// px). Refused, naming the tensor, when a weight's shape depends on the input size (a
    /// Flatten before a Dense). The result is not compiled.
    pub fn with_input_shape(self, input_shape: &[usize]) -> Result<Sequential> {
        let mut arch = self.architecture();
        arch["input_shape"] = serde_json::json!(input_shape);
        let mut model = self.rebuilt(&arch, u64::MAX)?;
        let old = self.def.build_layout()?;
        let new = model.def.build_layout()?;
        for (e, o) in new.params.iter().chain(&new.states).zip(old.params.iter().chain(&old.states)) {
            if e.spec.shape != o.spec.shape {
                bail!(Shape, "{} is {:?} for {:?} images but {:?} for {input_shape:?}: this model's weights depend on its input size", e.name, o.spec.shape, self.def.input_shape, e.spec.shape);
            }
        }
        model.class_names = self.class_names;
        Ok(model)
    }

    /// Replaces the last layer, which must be a `Dense`, by a fresh one of `classes` units
    /// (Glorot-uniform kernel drawn from `seed`, zero bias, as Keras' `Dense`), keeping every
    /// other weight, the moving statistics, the normalisation and the frozen flags. The class
    /// names go (the data of the next `fit` gives them) and so does the optimizer state. The
    /// result is not compiled.
    pub fn with_new_head(self, classes: usize, seed: u64) -> Result<Sequential> {
        let last = self.def.layers.len().checked_sub(1).ok_or_else(|| crate::Error::Config("the model has no layers".into()))?;
        if self.def.layers[last].class_name() != "Dense" {
            bail!(Config, "the last layer is a {}, not the Dense classifier a new head replaces", self.def.layers[last].class_name());
        }
        if classes == 0 {
            bail!(Config, "a new head needs at least one class, got 0");
        }
        let mut arch = self.architecture();
        arch["layers"][last]["config"]["units"] = serde_json::json!(classes);
        self.rebuilt(&arch, seed)
    }

    /// A model from `arch` with this one's weights wherever the name and shape agree, the rest
    /// drawn from `seed`; normalisation and precision policy kept.
    fn rebuilt(&self, arch: &Value, seed: u64) -> Result<Sequential> {
        let mut model = Sequential::from_architecture(arch)?;
        let (params, states, _) = self.get_weights()?;
        let old = self.def.build_layout()?;
        let new = model.def.build_layout()?;
        let (mut p, mut s) = new.initial_values(seed);
        carry(&old, &new, &params, &mut p, false);
        carry(&old, &new, &states, &mut s, true);
        model.def.mean = self.def.mean.clone();
        model.def.std = self.def.std.clone();
        model.def.policy = self.def.policy;
        model.def.loss_scale = self.def.loss_scale;
        model.normalization_fixed = self.normalization_fixed;
        model.pending_weights = Some((p, s, Vec::new()));
        Ok(model)
    }
}

/// Copies each tensor of `old` into the tensor of `new` with its name, where the shapes agree.
fn carry(old: &Layout, new: &Layout, from: &[f32], to: &mut [f32], states: bool) {
    let (old_entries, new_entries) = if states { (&old.states, &new.states) } else { (&old.params, &new.params) };
    let by_name: std::collections::HashMap<&str, &crate::model::layout::Entry> = old_entries.iter().map(|e| (e.name.as_str(), e)).collect();
    for e in new_entries {
        if let Some(o) = by_name.get(e.name.as_str()).filter(|o| o.spec.shape == e.spec.shape) {
            to[e.range()].copy_from_slice(&from[o.range()]);
        }
    }
}
