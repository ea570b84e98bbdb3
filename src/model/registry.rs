//! Layers of the user's own that saved models may name: Keras' `register_keras_serializable`.
//!
//! `load` rebuilds each layer from its `{class_name, config}`; the built-in classes are known
//! to [`crate::model::config`], any other class must be registered here first, by the
//! program that loads the model (the command line cannot know them).

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use serde_json::Value;

use crate::layers::Layer;
use crate::{bail, Result};

/// Builds a layer from the `config` its [`Layer::config`] wrote: the other half of saving a
/// custom layer (Keras' `from_config`).
pub trait FromConfig {
    /// The class name the layer's [`Layer::class_name`] returns, under which saved models
    /// name it.
    const CLASS_NAME: &'static str;
    /// The layer its `config` describes; a bad value is an error naming the key and value.
    fn from_config(config: &Value) -> Result<Self>
    where
        Self: Sized;
}

type Build = fn(&Value) -> Result<Box<dyn Layer>>;

static REGISTRY: LazyLock<RwLock<HashMap<&'static str, (TypeId, Build)>>> = LazyLock::new(Default::default);

fn build<L: Layer + FromConfig + 'static>(config: &Value) -> Result<Box<dyn Layer>> {
    let layer = L::from_config(config)?;
    // A mismatch would save under one name and load under another.
    if layer.class_name() != L::CLASS_NAME {
        bail!(Config, "registered layer `{}` built a layer whose class_name() is `{}`: the two must agree", L::CLASS_NAME, layer.class_name());
    }
    Ok(Box::new(layer))
}

/// Lets `load` (and [`crate::model::config::layer_from_config`]) rebuild layers of class
/// `L::CLASS_NAME` with `L::from_config`, for the rest of the process.
///
/// Registering the same type again is a no-op. A class name of a built-in layer, or one
/// already registered by another type, is an error: a saved file must mean one thing.
///
/// ```
/// use convoy::layers::{Graph, Layer, Saved, Weights};
/// use convoy::model::FromConfig;
/// # use convoy::{Result, Tensor};
/// #[derive(Debug)]
/// struct Identity;
/// impl Layer for Identity {
///     fn class_name(&self) -> &'static str { "Identity" }
///     fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> { Ok(input.to_vec()) }
///     fn config(&self) -> serde_json::Value { serde_json::json!({}) }
///     fn forward(&self, _: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> { Ok(Saved::output(x.clone())) }
///     fn backward(&self, _: &mut Graph, _: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
///         Ok(need_dx.then(|| dy.clone()))
///     }
/// }
/// impl FromConfig for Identity {
///     const CLASS_NAME: &'static str = "Identity";
///     fn from_config(_: &serde_json::Value) -> Result<Self> { Ok(Identity) }
/// }
/// convoy::register_layer::<Identity>().unwrap();
/// let layer = convoy::model::config::layer_from_config(&serde_json::json!({"class_name": "Identity", "config": {}})).unwrap();
/// assert_eq!(layer.class_name(), "Identity");
/// ```
pub fn register_layer<L: Layer + FromConfig + 'static>() -> Result<()> {
    let name = L::CLASS_NAME;
    if crate::model::config::is_builtin(name) {
        bail!(Config, "register_layer: `{name}` is the class name of a built-in layer; give the custom layer a name of its own");
    }
    let mut registry = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    match registry.get(name) {
        Some((id, _)) if *id != TypeId::of::<L>() => {
            bail!(Config, "register_layer: `{name}` is already registered by another type ({})", std::any::type_name::<L>())
        }
        _ => {
            registry.insert(name, (TypeId::of::<L>(), build::<L>));
            Ok(())
        }
    }
}

/// The registered layer of `class`, built from `config`; `None` when nothing registered it.
pub(crate) fn build_registered(class: &str, config: &Value) -> Option<Result<Box<dyn Layer>>> {
    let build = REGISTRY.read().unwrap_or_else(|e| e.into_inner()).get(class).map(|(_, b)| *b)?;
    Some(build(config))
}
