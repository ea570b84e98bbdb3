//! Precision policies: what a model computes in (Keras' `DTypePolicy`), and the dynamic loss
//! scaling that `mixed_float16` trains with (Keras' `LossScaleOptimizer`).

use crate::{Result, bail};

/// The arithmetic of a model's convolutions and dense layers. Weights, optimizer state,
/// BatchNorm statistics, reductions and the loss stay f32 under every policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DTypePolicy {
    /// Everything in f32 (Keras' `"float32"`, the default).
    #[default]
    Float32,
    /// Keras' `"mixed_float16"`: products on f16 operands with f32 accumulation, on the
    /// tensor cores where the adapter has cooperative matrices (elsewhere the f32 units
    /// compute the same numbers), activations stored as f16 between the layers that can
    /// (`Layer::stores_f16`, channels in whole quads) and each gradient as its activation,
    /// and the loss scaled dynamically ([`LossScale`]).
    MixedFloat16,
}

impl DTypePolicy {
    /// Keras' name: `"float32"` or `"mixed_float16"`.
    pub fn name(self) -> &'static str {
        match self {
            DTypePolicy::Float32 => "float32",
            DTypePolicy::MixedFloat16 => "mixed_float16",
        }
    }

    /// A policy from Keras' name, or the command line's `float32` / `mixed`.
    pub fn from_name(name: &str) -> Result<DTypePolicy> {
        match name {
            "float32" => Ok(DTypePolicy::Float32),
            "mixed_float16" | "mixed" => Ok(DTypePolicy::MixedFloat16),
            _ => bail!(
                Config,
                "unknown precision policy {name:?}: expected float32 or mixed_float16 (mixed)"
            ),
        }
    }

    /// Whether products take f16 operands (and gradients carry a loss scale).
    pub fn is_mixed(self) -> bool {
        self == DTypePolicy::MixedFloat16
    }
}

/// Dynamic loss scaling, as Keras' `LossScaleOptimizer`: the loss gradient is multiplied by
/// the scale so small f16 gradients do not flush to zero; a step with a NaN or infinite
/// gradient (on any replica: they are summed first) is skipped and halves the scale, and
/// `dynamic_growth_steps` finite steps in a row double it. The scale never goes below 1.
/// Unlike Keras, a skipped step still counts for Adam's bias correction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScale {
    /// The loss scale of the first step (Keras' `initial_scale`, 2^15).
    pub initial_scale: f32,
    /// Finite steps in a row after which the scale doubles (Keras' `dynamic_growth_steps`, 2000).
    pub dynamic_growth_steps: u32,
}

impl Default for LossScale {
    /// Keras' defaults: 2^15 and 2000 steps.
    fn default() -> Self {
        LossScale {
            initial_scale: 32768.0,
            dynamic_growth_steps: 2000,
        }
    }
}

impl LossScale {
    /// Refuses a scale that is not a finite number of at least 1, or zero growth steps.
    pub fn validate(&self) -> Result<()> {
        if !(self.initial_scale.is_finite() && self.initial_scale >= 1.0) {
            bail!(
                Config,
                "loss scaling: initial_scale must be a finite number of at least 1, got {}",
                self.initial_scale
            );
        }
        if self.dynamic_growth_steps == 0 {
            bail!(
                Config,
                "loss scaling: dynamic_growth_steps must be at least 1, got 0"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_ones_are_named() {
        for p in [DTypePolicy::Float32, DTypePolicy::MixedFloat16] {
            assert_eq!(DTypePolicy::from_name(p.name()).unwrap(), p);
        }
        assert_eq!(
            DTypePolicy::from_name("mixed").unwrap(),
            DTypePolicy::MixedFloat16
        );
        let e = DTypePolicy::from_name("bfloat16").unwrap_err().to_string();
        assert!(e.contains("\"bfloat16\""), "{e}");
        assert!(LossScale::default().validate().is_ok());
        assert!(
            LossScale {
                initial_scale: 0.5,
                ..LossScale::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            LossScale {
                initial_scale: f32::INFINITY,
                ..LossScale::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            LossScale {
                dynamic_growth_steps: 0,
                ..LossScale::default()
            }
            .validate()
            .is_err()
        );
    }
}
