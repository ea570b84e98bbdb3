//! SGD and Adam/AdamW with Keras' argument names and PyTorch's update rules (stated in
//! `kernels::optimizer`).
//!
//! Weight decay comes in the two forms of the field: `weight_decay` is Keras 3's, decoupled
//! from the gradient (`p -= lr * wd * p` before the update, AdamW's rule), and `l2` is
//! PyTorch's `weight_decay` of SGD and Adam, added to the gradient (`g += wd * p`), which the
//! benchmark recipes use. For Adam the two differ; Keras 3's `Adam(weight_decay=wd)` is
//! AdamW, so `Optimizer::adam(lr).weight_decay(wd)` is `Optimizer::adamw(lr).weight_decay(wd)`.
//!
//! SGD likewise: `Optimizer::sgd(lr).weight_decay(wd)` is Keras 3's `SGD(weight_decay=wd)`
//! (`p -= lr * wd * p`, then the step), `.l2(wd)` PyTorch's `torch.optim.SGD(weight_decay=wd)`;
//! with momentum the two differ. A model file saved before SGD had both forms says nothing
//! of it and loads as the L2 form it was trained with.
//!
//! The learning rate may follow a [`Schedule`] the optimizer owns ([`Optimizer::schedule`]),
//! evaluated at its global step before every training step (Keras' `learning_rate=` a
//! `LearningRateSchedule`). A file saved before schedules existed says nothing of one and
//! loads with the constant rate it was trained with.

use serde::{Deserialize, Serialize};

use crate::kernels::optimizer::OptimizerKind;
use crate::optim::Schedule;
use crate::{bail, Result};

/// An update rule and its settings, as saved in a model file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase")]
pub enum Optimizer {
    /// SGD; `weight_decay` is decoupled (Keras 3's SGD) or, without `decoupled`, added to the
    /// gradient (L2, PyTorch's SGD): [`Optimizer::weight_decay`], [`Optimizer::l2`].
    Sgd {
        /// The base learning rate (the schedule's starting point).
        learning_rate: f32,
        /// Velocity decay factor (Keras' `momentum`); 0 keeps no velocity.
        momentum: f32,
        /// Nesterov momentum: the step looks ahead along the velocity.
        nesterov: bool,
        /// Weight decay coefficient (0: none).
        weight_decay: f32,
        #[serde(default)]
        /// Apply `weight_decay` to the parameters (Keras 3) instead of adding it to the gradient
        /// (PyTorch's L2).
        decoupled: bool,
        #[serde(default, skip_serializing_if = "Schedule::is_constant")]
        /// The learning rate over the steps; constant by default.
        schedule: Schedule,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Rescale the gradients together so their global L2 norm is at most this (Keras'
        /// `global_clipnorm`); none by default.
        global_clipnorm: Option<f32>,
    },
    /// Adam; `weight_decay` is added to the gradient (L2, PyTorch's Adam): [`Optimizer::l2`].
    Adam {
        /// The base learning rate (the schedule's starting point).
        learning_rate: f32,
        /// Decay of the first-moment (mean) estimate (Keras' `beta_1`, 0.9).
        beta_1: f32,
        /// Decay of the second-moment estimate (Keras' `beta_2`, 0.999).
        beta_2: f32,
        /// Added to the second moment's square root in the denominator (Keras' `epsilon`).
        epsilon: f32,
        /// L2 coefficient added to the gradient (0: none).
        weight_decay: f32,
        #[serde(default, skip_serializing_if = "Schedule::is_constant")]
        /// The learning rate over the steps; constant by default.
        schedule: Schedule,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Rescale the gradients together so their global L2 norm is at most this (Keras'
        /// `global_clipnorm`); none by default.
        global_clipnorm: Option<f32>,
    },
    /// Adam with `weight_decay` decoupled (Keras 3's Adam and AdamW, PyTorch's AdamW).
    AdamW {
        /// The base learning rate (the schedule's starting point).
        learning_rate: f32,
        /// Decay of the first-moment (mean) estimate (Keras' `beta_1`, 0.9).
        beta_1: f32,
        /// Decay of the second-moment estimate (Keras' `beta_2`, 0.999).
        beta_2: f32,
        /// Added to the second moment's square root in the denominator (Keras' `epsilon`).
        epsilon: f32,
        /// Decoupled weight decay coefficient, applied to the parameters before each step.
        weight_decay: f32,
        #[serde(default, skip_serializing_if = "Schedule::is_constant")]
        /// The learning rate over the steps; constant by default.
        schedule: Schedule,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Rescale the gradients together so their global L2 norm is at most this (Keras'
        /// `global_clipnorm`); none by default.
        global_clipnorm: Option<f32>,
    },
}

impl Optimizer {
    /// Keras' `SGD(learning_rate)`: no momentum, no weight decay.
    pub fn sgd(learning_rate: f32) -> Self {
        Optimizer::Sgd { learning_rate, momentum: 0.0, nesterov: false, weight_decay: 0.0, decoupled: false, schedule: Schedule::Constant, global_clipnorm: None }
    }
    /// Keras' `Adam(learning_rate)` with beta_1 0.9, beta_2 0.999, epsilon 1e-7.
    pub fn adam(learning_rate: f32) -> Self {
        Optimizer::Adam { learning_rate, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-7, weight_decay: 0.0, schedule: Schedule::Constant, global_clipnorm: None }
    }
    /// Keras' `AdamW(learning_rate)`: decoupled weight decay 0.004 by default.
    pub fn adamw(learning_rate: f32) -> Self {
        Optimizer::AdamW { learning_rate, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-7, weight_decay: 0.004, schedule: Schedule::Constant, global_clipnorm: None }
    }
    /// SGD's momentum (ignored by Adam).
    pub fn momentum(mut self, m: f32) -> Self {
        if let Optimizer::Sgd { momentum, .. } = &mut self {
            *momentum = m;
        }
        self
    }
    /// Nesterov momentum for SGD (ignored by Adam).
    pub fn nesterov(mut self, n: bool) -> Self {
        if let Optimizer::Sgd { nesterov, .. } = &mut self {
            *nesterov = n;
        }
        self
    }
    /// Keras 3's weight decay, decoupled from the gradient: `p -= lr * wd * p` before each
    /// update, on kernels only. Adam becomes AdamW (the rule Keras 3 gives both).
    pub fn weight_decay(self, wd: f32) -> Self {
        match self {
            Optimizer::Sgd { learning_rate, momentum, nesterov, schedule, global_clipnorm, .. } => {
                Optimizer::Sgd { learning_rate, momentum, nesterov, weight_decay: wd, decoupled: true, schedule, global_clipnorm }
            }
            Optimizer::Adam { learning_rate, beta_1, beta_2, epsilon, schedule, global_clipnorm, .. }
            | Optimizer::AdamW { learning_rate, beta_1, beta_2, epsilon, schedule, global_clipnorm, .. } => {
                Optimizer::AdamW { learning_rate, beta_1, beta_2, epsilon, weight_decay: wd, schedule, global_clipnorm }
            }
        }
    }

    /// L2 regularisation in the gradient, `g += wd * p` on kernels: PyTorch's `weight_decay`
    /// of SGD and Adam (which the PyTorch references of the benchmarks use). AdamW becomes
    /// Adam with L2.
    pub fn l2(self, wd: f32) -> Self {
        match self {
            Optimizer::Sgd { learning_rate, momentum, nesterov, schedule, global_clipnorm, .. } => {
                Optimizer::Sgd { learning_rate, momentum, nesterov, weight_decay: wd, decoupled: false, schedule, global_clipnorm }
            }
            Optimizer::Adam { learning_rate, beta_1, beta_2, epsilon, schedule, global_clipnorm, .. }
            | Optimizer::AdamW { learning_rate, beta_1, beta_2, epsilon, schedule, global_clipnorm, .. } => {
                Optimizer::Adam { learning_rate, beta_1, beta_2, epsilon, weight_decay: wd, schedule, global_clipnorm }
            }
        }
    }

    /// Makes the learning rate follow `schedule` from this rate (its `initial_learning_rate`,
    /// OneCycle's `max_lr`), evaluated at the optimizer's global step before every training
    /// step, as Keras' `SGD(learning_rate=CosineDecay(0.1, 1000))` is
    /// `Optimizer::sgd(0.1).schedule(Schedule::cosine_decay(1000))`. Callbacks then may not
    /// set the rate (Keras refuses it too).
    pub fn schedule(mut self, s: Schedule) -> Self {
        match &mut self {
            Optimizer::Sgd { schedule, .. } | Optimizer::Adam { schedule, .. } | Optimizer::AdamW { schedule, .. } => *schedule = s,
        }
        self
    }

    /// Keras' `global_clipnorm`: before every update, every gradient is scaled by
    /// `min(1, clipnorm / norm)`, `norm` being the L2 norm of the whole gradient (the sum over
    /// the replicas, after the exchange, so every replica applies the same update) over the
    /// trainable parameters: a frozen layer's gradient is left out, as Keras never computes it.
    pub fn global_clipnorm(mut self, clipnorm: f32) -> Self {
        match &mut self {
            Optimizer::Sgd { global_clipnorm, .. } | Optimizer::Adam { global_clipnorm, .. } | Optimizer::AdamW { global_clipnorm, .. } => {
                *global_clipnorm = Some(clipnorm)
            }
        }
        self
    }

    /// The global norm gradients are clipped to, if any.
    pub fn clipnorm(&self) -> Option<f32> {
        match self {
            Optimizer::Sgd { global_clipnorm, .. } | Optimizer::Adam { global_clipnorm, .. } | Optimizer::AdamW { global_clipnorm, .. } => *global_clipnorm,
        }
    }

    /// The schedule the learning rate follows ([`Schedule::Constant`] unless one was set).
    pub fn learning_rate_schedule(&self) -> &Schedule {
        match self {
            Optimizer::Sgd { schedule, .. } | Optimizer::Adam { schedule, .. } | Optimizer::AdamW { schedule, .. } => schedule,
        }
    }

    /// The rate of global step `step` (counted from 0) under the schedule, an epoch being
    /// `steps_per_epoch` steps for the schedules counted in epochs.
    pub fn rate_at(&self, step: u64, steps_per_epoch: usize) -> f32 {
        let step = usize::try_from(step).unwrap_or(usize::MAX);
        self.learning_rate_schedule().rate(self.learning_rate(), step, steps_per_epoch)
    }

    /// The base learning rate: the constant rate, or where the schedule starts from.
    pub fn learning_rate(&self) -> f32 {
        match self {
            Optimizer::Sgd { learning_rate, .. } | Optimizer::Adam { learning_rate, .. } | Optimizer::AdamW { learning_rate, .. } => {
                *learning_rate
            }
        }
    }
    /// The weight decay, in either form.
    pub fn weight_decay_value(&self) -> f32 {
        match self {
            Optimizer::Sgd { weight_decay, .. } | Optimizer::Adam { weight_decay, .. } | Optimizer::AdamW { weight_decay, .. } => *weight_decay,
        }
    }

    /// Parses the command line's `--optimizer` name. `sgd` is the benchmarks' recipe, with
    /// PyTorch's L2 form of the decay so its figures compare with `torch.optim.SGD`'s.
    pub fn from_name(name: &str, learning_rate: f32) -> Result<Self> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "sgd" => Optimizer::sgd(learning_rate).momentum(0.9).nesterov(true).l2(5e-4),
            "adam" => Optimizer::adam(learning_rate),
            "adamw" => Optimizer::adamw(learning_rate),
            other => bail!(Config, "unknown optimizer `{other}` (expected sgd, adam or adamw)"),
        })
    }

    /// Refuses settings Keras or PyTorch refuse, naming the value.
    pub fn validate(&self) -> Result<()> {
        self.learning_rate_schedule().validate()?;
        if let Some(c) = self.clipnorm()
            && !(c.is_finite() && c > 0.0)
        {
            bail!(Config, "global_clipnorm must be finite and > 0, got {c}");
        }
        let lr = self.learning_rate();
        if !(lr.is_finite() && lr > 0.0) {
            bail!(Config, "learning rate must be positive and finite, got {lr}");
        }
        let wd = self.weight_decay_value();
        if !(wd.is_finite() && wd >= 0.0) {
            bail!(Config, "weight decay must be >= 0, got {wd}");
        }
        match self {
            Optimizer::Sgd { momentum, .. } if !(0.0..1.0).contains(momentum) => bail!(Config, "momentum must be in [0, 1), got {momentum}"),
            Optimizer::Adam { beta_1, beta_2, .. } | Optimizer::AdamW { beta_1, beta_2, .. }
                if !(0.0..1.0).contains(beta_1) || !(0.0..1.0).contains(beta_2) =>
            {
                bail!(Config, "beta_1 and beta_2 must be in [0, 1), got {beta_1} and {beta_2}")
            }
            _ => Ok(()),
        }
    }

    /// The kernel's view: the update rule and how many state tensors it keeps per parameter.
    pub fn kind(&self) -> OptimizerKind {
        match *self {
            Optimizer::Sgd { momentum, nesterov, decoupled, .. } => OptimizerKind::Sgd { momentum, nesterov, decoupled },
            Optimizer::Adam { beta_1, beta_2, epsilon, .. } => OptimizerKind::Adam { beta1: beta_1, beta2: beta_2, epsilon, decoupled: false },
            Optimizer::AdamW { beta_1, beta_2, epsilon, .. } => OptimizerKind::Adam { beta1: beta_1, beta2: beta_2, epsilon, decoupled: true },
        }
    }

    /// Flat state tensors the optimizer keeps (velocity; or Adam's two moments).
    pub fn state_count(&self) -> usize {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => 0,
            Optimizer::Sgd { .. } => 1,
            _ => 2,
        }
    }
}
