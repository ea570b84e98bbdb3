//! LearningRateScheduler: the learning rate as a function of the epoch (Keras) or of the
//! global step (warm-up).

use super::{Callback, Context, Logs};
use crate::{Error, Result};

/// `(epoch or global step, current learning rate) -> new learning rate`.
pub type Schedule = Box<dyn Fn(usize, f32) -> f32 + Send>;

/// Sets `ctx.learning_rate` from a schedule function, like Keras' `LearningRateScheduler`.
///
/// ```
/// use convoy::callbacks::LearningRateScheduler;
/// // Keras' example: keep the rate for 10 epochs, then decay it.
/// let decay = LearningRateScheduler::new(|epoch, lr| if epoch < 10 { lr } else { lr * 0.9 });
/// // Linear warm-up to 0.1 over the first 500 steps.
/// let warmup =
///     LearningRateScheduler::per_batch(|step, lr| if step < 500 { 0.1 * (step + 1) as f32 / 500.0 } else { lr });
/// ```
pub struct LearningRateScheduler {
    schedule: Schedule,
    per_batch: bool,
    epoch: usize,
}

impl LearningRateScheduler {
    /// Calls `schedule(epoch, lr)` at each epoch begin (epochs counted from 0).
    pub fn new(schedule: impl Fn(usize, f32) -> f32 + Send + 'static) -> Self {
        Self { schedule: Box::new(schedule), per_batch: false, epoch: 0 }
    }

    /// Calls `schedule(step, lr)` once before every step, `step` counting all batches from 0
    /// across epochs (`epoch * steps_per_epoch + batch`).
    pub fn per_batch(schedule: impl Fn(usize, f32) -> f32 + Send + 'static) -> Self {
        Self { schedule: Box::new(schedule), per_batch: true, epoch: 0 }
    }

    fn apply(&self, at: usize, ctx: &mut Context) -> Result<()> {
        let lr = (self.schedule)(at, ctx.learning_rate);
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
        let at = if self.per_batch { epoch * ctx.steps_per_epoch } else { epoch };
        self.apply(at, ctx)
    }

    // There is no batch-begin hook; a rate set at a batch's end applies from the next batch,
    // so this sets the rate of step `batch + 1`. The epoch's first step is set at epoch begin,
    // which keeps each step to exactly one call of the schedule.
    fn on_batch_end(&mut self, batch: usize, _logs: &Logs, ctx: &mut Context) -> Result<()> {
        if !self.per_batch || batch + 1 >= ctx.steps_per_epoch {
            return Ok(());
        }
        self.apply(self.epoch * ctx.steps_per_epoch + batch + 1, ctx)
    }
}
