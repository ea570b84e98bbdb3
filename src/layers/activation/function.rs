//! Keras' `layers.Activation("name")`: a function chosen by name.

use serde_json::json;

use super::super::{Graph, Layer, Saved, Weights};
use crate::kernels::activation::Function;
use crate::{bail, Error, Result, Tensor};

/// The functions [`Activation`] applies, by their Keras names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationFn {
    /// `linear`: the identity (records no kernel).
    Linear,
    /// `relu`: `max(x, 0)`.
    Relu,
    /// `relu6`: `min(max(x, 0), 6)`.
    Relu6,
    /// `sigmoid`.
    Sigmoid,
    /// `tanh`.
    Tanh,
    /// `silu`, also named `swish`: `x * sigmoid(x)`.
    Silu,
    /// `gelu`: `x * Φ(x)` (the erf form, Keras' default `approximate=False`; see
    /// [`Function::Gelu`] for the accuracy of its erf), or with `approximate` its tanh form.
    Gelu {
        /// Use the tanh approximation instead of the erf form.
        approximate: bool,
    },
    /// `softmax` over the last axis, as the [`super::Softmax`] layer.
    Softmax,
}

/// The names [`ActivationFn::from_str`] reads, for its error message.
const NAMES: &str = "linear, relu, relu6, sigmoid, tanh, silu, swish, gelu, softmax";

impl ActivationFn {
    /// The Keras name a saved model carries (`swish` is saved as `silu`, as Keras 3 does).
    pub fn name(self) -> &'static str {
        match self {
            ActivationFn::Linear => "linear",
            ActivationFn::Relu => "relu",
            ActivationFn::Relu6 => "relu6",
            ActivationFn::Sigmoid => "sigmoid",
            ActivationFn::Tanh => "tanh",
            ActivationFn::Silu => "silu",
            ActivationFn::Gelu { .. } => "gelu",
            ActivationFn::Softmax => "softmax",
        }
    }

    /// The element-wise kernel's function; `None` for the identity and softmax.
    fn function(self) -> Option<Function> {
        Some(match self {
            ActivationFn::Linear | ActivationFn::Softmax => return None,
            ActivationFn::Relu => Function::Relu { max_value: f32::INFINITY, negative_slope: 0.0 },
            ActivationFn::Relu6 => Function::Relu { max_value: 6.0, negative_slope: 0.0 },
            ActivationFn::Sigmoid => Function::Sigmoid,
            ActivationFn::Tanh => Function::Tanh,
            ActivationFn::Silu => Function::Silu,
            ActivationFn::Gelu { approximate: false } => Function::Gelu,
            ActivationFn::Gelu { approximate: true } => Function::GeluTanh,
        })
    }
}

impl std::str::FromStr for ActivationFn {
    type Err = Error;
    /// A Keras name; `gelu` is the erf form (Keras' default).
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "linear" => ActivationFn::Linear,
            "relu" => ActivationFn::Relu,
            "relu6" => ActivationFn::Relu6,
            "sigmoid" => ActivationFn::Sigmoid,
            "tanh" => ActivationFn::Tanh,
            "silu" | "swish" => ActivationFn::Silu,
            "gelu" => ActivationFn::Gelu { approximate: false },
            "softmax" => ActivationFn::Softmax,
            _ => bail!(Config, "unknown activation {s:?}; known: {NAMES}"),
        })
    }
}

/// Keras' `layers.Activation(activation)`: `Activation::new("sigmoid")?`, or from the enum
/// with [`Activation::of`].
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    function: ActivationFn,
}

impl Activation {
    /// The function of Keras name `name`; an unknown name is an error that names it.
    pub fn new(name: &str) -> Result<Self> {
        Ok(Activation { function: name.parse()? })
    }
    /// The layer applying `function`.
    pub fn of(function: ActivationFn) -> Self {
        Activation { function }
    }
    /// What the layer applies.
    pub fn function(&self) -> ActivationFn {
        self.function
    }
}

impl Layer for Activation {
    fn class_name(&self) -> &'static str {
        "Activation"
    }
    // The element-wise functions take f16 quads; softmax stays f32 (its sums want f32), and
    // the identity records nothing, passing its input on as an f32 layer would see it.
    fn supports_mixed_precision(&self) -> bool {
        self.function.function().is_some()
    }
    fn keeps_input_storage(&self) -> bool {
        self.function.function().is_some()
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(input.to_vec())
    }
    fn config(&self) -> serde_json::Value {
        match self.function {
            // Keras' Activation has no `approximate`: its tanh GELU is a function object,
            // which a name cannot carry, so the flag is an extra key of convoy's.
            ActivationFn::Gelu { approximate: true } => json!({ "activation": "gelu", "approximate": true }),
            f => json!({ "activation": f.name() }),
        }
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        match (self.function, self.function.function()) {
            (_, Some(f)) => super::forward(g, x, f),
            (ActivationFn::Softmax, _) => super::softmax::forward(g, x),
            _ => Ok(Saved::output(x.clone())),
        }
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        match (self.function, self.function.function()) {
            (_, Some(f)) => super::backward(g, x, dy, f, need_dx),
            (ActivationFn::Softmax, _) => super::softmax::backward(g, saved, dy, need_dx),
            _ => Ok(need_dx.then(|| dy.clone())),
        }
    }
}
