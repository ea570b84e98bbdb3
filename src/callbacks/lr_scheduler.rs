//! LearningRateScheduler: the learning rate as a function of the epoch (Keras) or of the
//! global step (warm-up, a [`crate::optim::Schedule`]).

use super::{Callback, Context};
use crate::optim;
use crate::{Error, Result};

/// `(epoch or global step, current learning rate) -> new learning rate`.
pub type Schedule = Box<dyn Fn(usize, f32) -> f32 + Send>;

/// `(epoch or global step, steps per epoch, current learning rate) -> new learning rate`.
type Rule = Box<dyn Fn(usize, usize, f32) -> f32 + Send>;

/// Sets `ctx.learning_rate` from a schedule function, like Keras' `LearningRateScheduler`.
///
/// ```
/// use convoy::callbacks::LearningRateScheduler;
/// use convoy::optim::Schedule;
/// // Keras' example: keep the rate for 10 epochs, then decay it.
/// let decay = LearningRateScheduler::new(|epoch, lr| if epoch < 10 { lr } else { lr * 0.9 });
/// // Linear warm-up to 0.1 over the first 500 steps.
/// let warmup =
///     LearningRateScheduler::per_batch(|step, lr| if step < 500 { 0.1 * (step + 1) as f32 / 500.0 } else { lr });
/// // One epoch of warm-up to 0.1, then cosine decay over 29 epochs, evaluated every step.
/// let cosine = Schedule::Warmup { warmup_epochs: 1.0, then: Box::new(Schedule::Cosine { epochs: 29, min_lr: 0.0 }) };
/// let recipe = LearningRateScheduler::from_schedule(0.1, cosine);
/// ```
pub struct LearningRateScheduler {
    rule: Rule,
    per_batch: bool,
    epoch: usize,
}

impl LearningRateScheduler {
    /// Calls `schedule(epoch, lr)` at each epoch begin (epochs counted from 0).
    pub fn new(schedule: impl Fn(usize, f32) -> f32 + Send + 'static) -> Self {
        Self { rule: Box::new(move |at, _, lr| schedule(at, lr)), per_batch: false, epoch: 0 }
    }

    /// Calls `schedule(step, lr)` once before every step, `step` counting all batches from 0
    /// across epochs (`epoch * steps_per_epoch + batch`).
    pub fn per_batch(schedule: impl Fn(usize, f32) -> f32 + Send + 'static) -> Self {
        Self { rule: Box::new(move |at, _, lr| schedule(at, lr)), per_batch: true, epoch: 0 }
    }

    /// Runs every step at `schedule.rate(base, step, steps_per_epoch)`: warm-ups ramp and
    /// decays move step by step, as the optimizer schedules of Keras and PyTorch do.
    pub fn from_schedule(base: f32, schedule: optim::Schedule) -> Self {
        Self { rule: Box::new(move |step, per_epoch, _| schedule.rate(base, step, per_epoch)), per_batch: true, epoch: 0 }
    }

    fn apply(&self, at: usize, ctx: &mut Context) -> Result<()> {
        let lr = (self.rule)(at, ctx.steps_per_epoch, ctx.learning_rate);
        if !lr.is_finite() || lr < 0.0 {
            let unit = if self.per_batch { "step" } else { "epoch" };
            return Err(Error::Config(format!(
                "LearningRateScheduler: schedule returned {lr} at {unit} {at} (from lr {}); \
                 a learning rate must be finite and >= 0",
                ctx.learning_rate
            )));
        }
        ctx.learning_rate = lr;
        Ok(())
    }
}

impl Callback for LearningRateScheduler {
    fn on_epoch_begin(&mut self, epoch: usize, ctx: &mut Context) -> Result<()> {
        self.epoch = epoch;
        if self.per_batch {
            return Ok(());
        }
        self.apply(epoch, ctx)
    }

    fn on_batch_begin(&mut self, batch: usize, ctx: &mut Context) -> Result<()> {
        if !self.per_batch {
            return Ok(());
        }
        self.apply(self.epoch * ctx.steps_per_epoch + batch, ctx)
    }
}
