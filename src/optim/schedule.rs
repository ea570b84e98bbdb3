//! Learning-rate schedules, evaluated per step on the host; the step's rate reaches the GPU
//! through the optimizer's `hyper` tensor, so a schedule never recompiles anything.
//! `LearningRateScheduler::from_schedule` applies one in `fit`, before every step.

use serde::{Deserialize, Serialize};

/// A learning rate as a function of the step, with lengths given in epochs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum Schedule {
    Constant,
    /// Multiply by `gamma` every `step_size` epochs (PyTorch's StepLR).
    Step { step_size: usize, gamma: f32 },
    /// Cosine decay from the base rate to `min_lr` over `epochs` (after any warm-up), step by
    /// step (PyTorch's CosineAnnealingLR stepped per batch, Keras' CosineDecay).
    Cosine { epochs: usize, min_lr: f32 },
    /// Linear warm-up over `warmup_epochs`, step by step, then `then`.
    Warmup { warmup_epochs: f32, then: Box<Schedule> },
}

impl Schedule {
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
}
