//! Learning-rate schedules, evaluated per step on the host; the step's rate reaches the GPU
//! through the optimizer's `hyper` tensor, so a schedule never recompiles anything.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum Schedule {
    Constant,
    /// Multiply by `gamma` every `step_size` epochs (PyTorch's StepLR).
    Step { step_size: usize, gamma: f32 },
    /// Cosine decay from the base rate to `min_lr` over `epochs` (after any warm-up).
    Cosine { epochs: usize, min_lr: f32 },
    /// Linear warm-up over `warmup_epochs`, then `then`.
    Warmup { warmup_epochs: f32, then: Box<Schedule> },
}

impl Schedule {
    /// The rate at fractional epoch `epoch` (0-based; `epoch + step/steps_per_epoch`).
    pub fn rate(&self, base: f32, epoch: f32) -> f32 {
        match self {
            Schedule::Constant => base,
            Schedule::Step { step_size, gamma } => base * gamma.powi((epoch.floor() as usize / (*step_size).max(1)) as i32),
            Schedule::Cosine { epochs, min_lr } => {
                let t = (epoch / (*epochs).max(1) as f32).clamp(0.0, 1.0);
                min_lr + 0.5 * (base - min_lr) * (1.0 + (std::f32::consts::PI * t).cos())
            }
            Schedule::Warmup { warmup_epochs, then } => {
                if epoch < *warmup_epochs {
                    base * (epoch + 1e-3).min(*warmup_epochs) / warmup_epochs
                } else {
                    then.rate(base, epoch - warmup_epochs)
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
        let step = Schedule::Step { step_size: 2, gamma: 0.1 };
        assert_eq!(step.rate(1.0, 0.0), 1.0);
        assert_eq!(step.rate(1.0, 1.9), 1.0);
        assert!((step.rate(1.0, 2.0) - 0.1).abs() < 1e-7);
        assert!((step.rate(1.0, 4.5) - 0.01).abs() < 1e-7);
        let cos = Schedule::Cosine { epochs: 10, min_lr: 0.0 };
        assert!((cos.rate(2.0, 0.0) - 2.0).abs() < 1e-6);
        assert!((cos.rate(2.0, 5.0) - 1.0).abs() < 1e-6);
        assert!(cos.rate(2.0, 10.0).abs() < 1e-6);
        let warm = Schedule::Warmup { warmup_epochs: 2.0, then: Box::new(Schedule::Constant) };
        assert!(warm.rate(1.0, 0.0) < 0.01);
        assert!((warm.rate(1.0, 1.0) - 0.5).abs() < 1e-3);
        assert_eq!(warm.rate(1.0, 3.0), 1.0);
    }
}
