//! Learning-rate schedules, evaluated per step on the host; the step's rate reaches the GPU
//! through the optimizer's `hyper` tensor, so a schedule never recompiles anything.
//!
//! An optimizer owns one (`Optimizer::sgd(0.1).schedule(..)`, Keras' `SGD(learning_rate=
//! CosineDecay(..))`): it is evaluated at the optimizer's global step before every training
//! step, saved with the model, and continues from the step reached in a second `fit` or after
//! a load. `LearningRateScheduler::from_schedule` applies one as a callback instead.
//!
//! The Keras and PyTorch schedules count steps, with the optimizer's learning rate as their
//! `initial_learning_rate` (OneCycle: its `max_lr`); `Step`, `Cosine` and `Warmup` count
//! epochs, of the running `fit`'s length.

use serde::{Deserialize, Serialize};

use crate::{bail, Result};

/// A learning rate as a function of the step: the constant rate, epoch-long schedules, and
/// the step-counted schedules of Keras (`keras.optimizers.schedules`) and PyTorch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum Schedule {
    #[default]
    /// The base rate at every step (the default).
    Constant,
    /// Multiply by `gamma` every `step_size` epochs (PyTorch's StepLR).
    Step {
        /// Epochs between reductions.
        step_size: usize,
        /// The factor applied at each reduction.
        gamma: f32,
    },
    /// Cosine decay from the base rate to `min_lr` over `epochs` (after any warm-up), step by
    /// step (PyTorch's CosineAnnealingLR stepped per batch, Keras' CosineDecay).
    Cosine {
        /// Epochs the decay lasts; the rate stays at `min_lr` after them.
        epochs: usize,
        /// The rate the decay ends at.
        min_lr: f32,
    },
    /// Linear warm-up over `warmup_epochs`, step by step, then `then`.
    Warmup {
        /// Epochs of the linear ramp up to the base rate (fractions allowed; at least one step).
        warmup_epochs: f32,
        /// The schedule after the warm-up, its epochs counted from the warm-up's end.
        then: Box<Schedule>,
    },
    /// Keras' `CosineDecay(initial_learning_rate, decay_steps, alpha, warmup_target,
    /// warmup_steps)`, the base rate being `initial_learning_rate`. Without `warmup_target`:
    /// `base * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) + alpha)`.
    /// With it, a linear ramp from `base` to `warmup_target` over `warmup_steps`, then that
    /// decay from `warmup_target` over the next `decay_steps`.
    CosineDecay {
        /// Steps over which the rate decays.
        decay_steps: usize,
        #[serde(default)]
        /// The final rate as a fraction of the decayed-from rate (default 0).
        alpha: f32,
        #[serde(default)]
        /// The rate the warm-up ramps to; none: no warm-up.
        warmup_target: Option<f32>,
        #[serde(default)]
        /// Steps of the linear warm-up (default 0).
        warmup_steps: usize,
    },
    /// Keras' `ExponentialDecay`: `base * decay_rate ^ (step / decay_steps)`, the exponent
    /// rounded down with `staircase`.
    ExponentialDecay {
        /// Steps per factor of `decay_rate`.
        decay_steps: usize,
        /// The factor the rate is multiplied by every `decay_steps`.
        decay_rate: f32,
        #[serde(default)]
        /// Round the exponent down, so the rate falls in steps.
        staircase: bool,
    },
    /// Keras' `PiecewiseConstantDecay` (multi-step): `values[0]` while `step <= boundaries[0]`,
    /// `values[i]` while `boundaries[i-1] < step <= boundaries[i]`, the last value after the
    /// last boundary. The values are the rates themselves, as in Keras: the base rate is unused.
    PiecewiseConstantDecay {
        /// The steps at which the rate changes, increasing.
        boundaries: Vec<usize>,
        /// The rates, one more than the boundaries.
        values: Vec<f32>,
    },
    /// PyTorch's `OneCycleLR(max_lr=base, total_steps, pct_start, div_factor,
    /// final_div_factor)` with its default cosine annealing and two phases: from
    /// `base / div_factor` up to `base` until step `pct_start * total_steps - 1`, then down to
    /// `base / div_factor / final_div_factor` at step `total_steps - 1`, each phase
    /// `end + (start - end) / 2 * (1 + cos(pi * pct))`. PyTorch refuses steps past
    /// `total_steps`; here they keep the final rate.
    OneCycle {
        /// Steps of the whole cycle.
        total_steps: usize,
        /// Fraction of the cycle spent rising.
        pct_start: f32,
        /// The starting rate is `base / div_factor`.
        div_factor: f32,
        /// The final rate is `base / div_factor / final_div_factor`.
        final_div_factor: f32,
    },
}

impl Schedule {
    /// Keras' `CosineDecay(base, decay_steps)`: down to 0 over `decay_steps`, no warm-up.
    pub fn cosine_decay(decay_steps: usize) -> Self {
        Schedule::CosineDecay { decay_steps, alpha: 0.0, warmup_target: None, warmup_steps: 0 }
    }
    /// Keras' `ExponentialDecay(base, decay_steps, decay_rate)`, not staircase.
    pub fn exponential_decay(decay_steps: usize, decay_rate: f32) -> Self {
        Schedule::ExponentialDecay { decay_steps, decay_rate, staircase: false }
    }
    /// Keras' `PiecewiseConstantDecay(boundaries, values)`.
    pub fn piecewise_constant(boundaries: Vec<usize>, values: Vec<f32>) -> Self {
        Schedule::PiecewiseConstantDecay { boundaries, values }
    }
    /// PyTorch's `OneCycleLR(max_lr=base, total_steps)` with its defaults: `pct_start` 0.3,
    /// `div_factor` 25, `final_div_factor` 1e4.
    pub fn one_cycle(total_steps: usize) -> Self {
        Schedule::OneCycle { total_steps, pct_start: 0.3, div_factor: 25.0, final_div_factor: 1e4 }
    }

    /// Whether the rate never moves (the optimizer's rate is then the callbacks' to set).
    pub fn is_constant(&self) -> bool {
        matches!(self, Schedule::Constant)
    }

    /// Refuses settings that give no rate, or a negative or non-finite one, naming them.
    pub fn validate(&self) -> Result<()> {
        let rate = |what: &str, v: f32| -> Result<()> {
            if !(v.is_finite() && v >= 0.0) {
                bail!(Config, "schedule: {what} must be finite and >= 0, got {v}");
            }
            Ok(())
        };
        match self {
            Schedule::Constant => {}
            Schedule::Step { gamma, .. } => rate("Step gamma", *gamma)?,
            Schedule::Cosine { min_lr, .. } => rate("Cosine min_lr", *min_lr)?,
            Schedule::Warmup { warmup_epochs, then } => {
                rate("Warmup warmup_epochs", *warmup_epochs)?;
                then.validate()?;
            }
            Schedule::CosineDecay { decay_steps, alpha, warmup_target, .. } => {
                if *decay_steps == 0 {
                    bail!(Config, "CosineDecay: decay_steps must be positive, got 0");
                }
                rate("CosineDecay alpha", *alpha)?;
                if let Some(t) = warmup_target {
                    rate("CosineDecay warmup_target", *t)?;
                }
            }
            Schedule::ExponentialDecay { decay_steps, decay_rate, .. } => {
                if *decay_steps == 0 {
                    bail!(Config, "ExponentialDecay: decay_steps must be positive, got 0");
                }
                if !(decay_rate.is_finite() && *decay_rate > 0.0) {
                    bail!(Config, "ExponentialDecay: decay_rate must be finite and > 0, got {decay_rate}");
                }
            }
            Schedule::PiecewiseConstantDecay { boundaries, values } => {
                if values.len() != boundaries.len() + 1 {
                    bail!(Config, "PiecewiseConstantDecay: {} boundaries need {} values, got {}", boundaries.len(), boundaries.len() + 1, values.len());
                }
                if let Some(w) = boundaries.windows(2).find(|w| w[0] >= w[1]) {
                    bail!(Config, "PiecewiseConstantDecay: boundaries must increase, got {} then {} in {boundaries:?}", w[0], w[1]);
                }
                for v in values {
                    rate("PiecewiseConstantDecay value", *v)?;
                }
            }
            Schedule::OneCycle { total_steps, pct_start, div_factor, final_div_factor } => {
                for (what, v) in [("div_factor", *div_factor), ("final_div_factor", *final_div_factor)] {
                    if !(v.is_finite() && v > 0.0) {
                        bail!(Config, "OneCycle: {what} must be finite and > 0, got {v}");
                    }
                }
                // Both phases must last: PyTorch divides by their lengths.
                let up = *pct_start as f64 * *total_steps as f64 - 1.0;
                if !(up > 0.0 && up < *total_steps as f64 - 1.0) {
                    bail!(Config, "OneCycle: pct_start {pct_start} of {total_steps} steps leaves a phase of no steps (the rise ends at step pct_start * total_steps - 1 = {up}, which must lie in (0, {}))", *total_steps as f64 - 1.0);
                }
            }
        }
        Ok(())
    }

    /// The rate of step `step` (counted from 0 over the whole training) when an epoch has
    /// `steps_per_epoch` steps. Decays are taken where the step starts, so the first step
    /// runs at `base`. The warm-up's W = `warmup_epochs x steps_per_epoch` steps (at least 1)
    /// run at `base x (k + 1) / W`: the first at `base / W`, not 0 (Goyal et al.'s gradual
    /// warm-up; a step at rate 0 would be wasted), the last at `base`.
    pub fn rate(&self, base: f32, step: usize, steps_per_epoch: usize) -> f32 {
        let per_epoch = steps_per_epoch.max(1);
        match self {
            Schedule::Constant => base,
            Schedule::Step { step_size, gamma } => base * gamma.powi((step / per_epoch / (*step_size).max(1)) as i32),
            Schedule::Cosine { epochs, min_lr } => {
                let t = (step as f64 / (epochs * per_epoch).max(1) as f64).clamp(0.0, 1.0) as f32;
                min_lr + 0.5 * (base - min_lr) * (1.0 + (std::f32::consts::PI * t).cos())
            }
            Schedule::Warmup { warmup_epochs, then } => {
                let warmup = ((*warmup_epochs as f64 * per_epoch as f64).round() as usize).max(1);
                if step < warmup {
                    base * (step + 1) as f32 / warmup as f32
                } else {
                    then.rate(base, step - warmup, steps_per_epoch)
                }
            }
            // In f64, as Keras computes in the rate's dtype and PyTorch in Python floats.
            Schedule::CosineDecay { decay_steps, alpha, warmup_target, warmup_steps } => {
                let (base, alpha, decay) = (base as f64, *alpha as f64, *decay_steps as f64);
                let decayed = |done: f64, from: f64| from * ((1.0 - alpha) * 0.5 * (1.0 + (std::f64::consts::PI * done / decay).cos()) + alpha);
                let rate = match warmup_target {
                    None => decayed((step as f64).min(decay), base),
                    Some(target) => {
                        let (target, warm) = (*target as f64, *warmup_steps as f64);
                        let s = (step as f64).min(decay + warm);
                        if s < warm { (target - base) * s / warm + base } else { decayed(s - warm, target) }
                    }
                };
                rate as f32
            }
            Schedule::ExponentialDecay { decay_steps, decay_rate, staircase } => {
                let p = step as f64 / *decay_steps as f64;
                let p = if *staircase { p.floor() } else { p };
                (base as f64 * (*decay_rate as f64).powf(p)) as f32
            }
            Schedule::PiecewiseConstantDecay { boundaries, values } => {
                let i = boundaries.iter().position(|&b| step <= b).unwrap_or(boundaries.len());
                // `validate` asks for one value more than boundaries; unchecked, the last holds.
                values.get(i).or(values.last()).copied().unwrap_or(base)
            }
            Schedule::OneCycle { total_steps, pct_start, div_factor, final_div_factor } => {
                let max = base as f64;
                let initial = max / *div_factor as f64;
                let min = initial / *final_div_factor as f64;
                let (up, end) = (*pct_start as f64 * *total_steps as f64 - 1.0, *total_steps as f64 - 1.0);
                let s = (step as f64).min(end);
                let anneal = |start: f64, stop: f64, pct: f64| stop + (start - stop) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0);
                let rate = if s <= up { anneal(initial, max, s / up) } else { anneal(max, min, (s - up) / (end - up)) };
                rate as f32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    #[test]
    fn step_cosine_and_warmup_follow_their_formulas() {
        // Ten steps an epoch.
        let step = Schedule::Step { step_size: 2, gamma: 0.1 };
        assert_eq!(step.rate(1.0, 0, 10), 1.0);
        assert_eq!(step.rate(1.0, 19, 10), 1.0);
        assert!((step.rate(1.0, 20, 10) - 0.1).abs() < 1e-7);
        assert!((step.rate(1.0, 45, 10) - 0.01).abs() < 1e-7);
        let cos = Schedule::Cosine { epochs: 10, min_lr: 0.0 };
        assert!((cos.rate(2.0, 0, 10) - 2.0).abs() < 1e-6);
        assert!((cos.rate(2.0, 50, 10) - 1.0).abs() < 1e-6);
        assert!(cos.rate(2.0, 100, 10).abs() < 1e-6);
        // Between epochs 0 and 1 the cosine moves at every step, not once an epoch.
        assert!(cos.rate(2.0, 5, 10) < cos.rate(2.0, 4, 10));
        // Two epochs of warm-up: 20 steps at 1/20, 2/20, ... 20/20.
        let warm = Schedule::Warmup { warmup_epochs: 2.0, then: Box::new(Schedule::Cosine { epochs: 10, min_lr: 0.0 }) };
        assert!((warm.rate(1.0, 0, 10) - 0.05).abs() < 1e-7);
        assert!((warm.rate(1.0, 9, 10) - 0.5).abs() < 1e-7);
        assert_eq!(warm.rate(1.0, 19, 10), 1.0);
        // then the cosine from its own step 0
        assert_eq!(warm.rate(1.0, 20, 10), 1.0);
        assert!((warm.rate(1.0, 70, 10) - 0.5).abs() < 1e-6);
        // a fraction of an epoch of warm-up is at least one step
        let short = Schedule::Warmup { warmup_epochs: 0.01, then: Box::new(Schedule::Constant) };
        assert_eq!(short.rate(0.5, 0, 10), 0.5);
    }

    /// (schedule, base rate, [(step, expected rate)]): each expected rate worked out by hand
    /// from the formula quoted beside it (Keras 3 `keras/src/optimizers/schedules/
    /// learning_rate_schedule.py`, PyTorch 2 `torch/optim/lr_scheduler.py` `OneCycleLR`).
    fn cases() -> Vec<(&'static str, Schedule, f32, Vec<(usize, f64)>)> {
        vec![
            // CosineDecay(0.1, decay_steps=10): 0.1 * 0.5 * (1 + cos(pi * min(step, 10) / 10))
            ("cosine", Schedule::cosine_decay(10), 0.1, vec![(0, 0.1), (3, 0.05 * (1.0 + 0.587_785_252_292_473_1)), (5, 0.05), (10, 0.0), (15, 0.0)]),
            // CosineDecay(0.0, 100, alpha=0.1, warmup_target=1.0, warmup_steps=10): the ramp
            // (1.0 - 0.0) * step / 10 + 0.0, then 1.0 * (0.9 * 0.5 * (1 + cos(pi * (s - 10) / 100)) + 0.1)
            // with s = min(step, 110): step 35 -> 0.45 * (1 + cos(pi / 4)) + 0.1, step 60 -> 0.55.
            (
                "cosine with warm-up",
                Schedule::CosineDecay { decay_steps: 100, alpha: 0.1, warmup_target: Some(1.0), warmup_steps: 10 },
                0.0,
                vec![(0, 0.0), (1, 0.1), (5, 0.5), (10, 1.0), (35, 0.45 * (1.0 + std::f64::consts::FRAC_1_SQRT_2) + 0.1), (60, 0.55), (110, 0.1), (200, 0.1)],
            ),
            // ExponentialDecay(0.1, 10, 0.5): 0.1 * 0.5^(step / 10)
            ("exponential", Schedule::exponential_decay(10, 0.5), 0.1, vec![(0, 0.1), (5, 0.1 * std::f64::consts::FRAC_1_SQRT_2), (10, 0.05), (25, 0.025 * std::f64::consts::FRAC_1_SQRT_2)]),
            // staircase: 0.1 * 0.5^floor(step / 10)
            ("staircase", Schedule::ExponentialDecay { decay_steps: 10, decay_rate: 0.5, staircase: true }, 0.1, vec![(0, 0.1), (9, 0.1), (10, 0.05), (19, 0.05), (25, 0.025)]),
            // PiecewiseConstantDecay([5, 8], [1.0, 0.5, 0.1]): step <= 5 -> 1.0, 5 < step <= 8 -> 0.5,
            // else 0.1 (the base rate plays no part)
            ("piecewise", Schedule::piecewise_constant(vec![5, 8], vec![1.0, 0.5, 0.1]), 7.0, vec![(0, 1.0), (5, 1.0), (6, 0.5), (8, 0.5), (9, 0.1), (1000, 0.1)]),
            // OneCycleLR(max_lr=1, total_steps=100): initial 1 / 25 = 0.04, min 0.04 / 1e4 = 4e-6;
            // rise to step 0.3 * 100 - 1 = 29, fall to step 99, each end + (start - end) / 2 * (1 + cos(pi * pct)):
            // step 10 -> 1 + (0.04 - 1) / 2 * (1 + cos(pi * 10 / 29)); step 64 -> pct 35 / 70 = 0.5 -> (1 + 4e-6) / 2
            (
                "one-cycle",
                Schedule::one_cycle(100),
                1.0,
                vec![(0, 0.04), (10, 1.0 - 0.48 * (1.0 + (std::f64::consts::PI * 10.0 / 29.0).cos())), (29, 1.0), (64, 0.500_002), (99, 4e-6), (150, 4e-6)],
            ),
        ]
    }

    #[test]
    fn keras_and_pytorch_schedules_follow_their_formulas() {
        for (name, schedule, base, table) in cases() {
            schedule.validate().unwrap();
            for (step, want) in table {
                // steps_per_epoch plays no part in a schedule counted in steps
                for per_epoch in [1, 7] {
                    let got = schedule.rate(base, step, per_epoch) as f64;
                    assert!((got - want).abs() <= 1e-6 * want.abs().max(1e-3), "{name} at step {step}: {got}, want {want}");
                }
            }
        }
    }

    #[test]
    fn schedules_that_give_no_rate_are_named() {
        let bad = [
            (Schedule::cosine_decay(0), "decay_steps must be positive, got 0"),
            (Schedule::CosineDecay { decay_steps: 5, alpha: -0.5, warmup_target: None, warmup_steps: 0 }, "alpha must be finite and >= 0, got -0.5"),
            (Schedule::exponential_decay(10, 0.0), "decay_rate must be finite and > 0, got 0"),
            (Schedule::piecewise_constant(vec![5, 8], vec![1.0, 0.5]), "2 boundaries need 3 values, got 2"),
            (Schedule::piecewise_constant(vec![8, 5], vec![1.0, 0.5, 0.1]), "got 8 then 5"),
            (Schedule::piecewise_constant(vec![5], vec![1.0, f32::NAN]), "value must be finite and >= 0, got NaN"),
            (Schedule::one_cycle(1), "pct_start 0.3 of 1 steps"),
            (Schedule::OneCycle { total_steps: 100, pct_start: 0.3, div_factor: 0.0, final_div_factor: 1e4 }, "div_factor must be finite and > 0, got 0"),
        ];
        for (s, want) in bad {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{s:?}: {e}");
        }
    }
}
