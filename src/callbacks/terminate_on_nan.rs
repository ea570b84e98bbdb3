//! TerminateOnNaN: stop as soon as the loss diverges.

use super::{Callback, Context, Logs};
use crate::Result;

/// Stops training at the first batch whose `loss` is NaN or infinite: every later step would
/// only spread NaN through the weights. Batches without a `loss` key are ignored, as in Keras.
#[derive(Debug, Default)]
pub struct TerminateOnNaN {
    terminated: Option<(usize, usize)>,
    epoch: usize,
}

impl TerminateOnNaN {
    /// A callback that has stopped nothing yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// `(epoch, batch)` at which training was stopped, if it was.
    pub fn terminated_at(&self) -> Option<(usize, usize)> {
        self.terminated
    }
}

impl Callback for TerminateOnNaN {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        self.terminated = None;
        Ok(())
    }

    fn on_epoch_begin(&mut self, epoch: usize, _ctx: &mut Context) -> Result<()> {
        self.epoch = epoch;
        Ok(())
    }

    fn on_batch_end(&mut self, batch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        match logs.get("loss") {
            Some(loss) if !loss.is_finite() => {
                eprintln!("Epoch {} batch {batch}: invalid loss {loss}, terminating training", self.epoch + 1);
                self.terminated = Some((self.epoch, batch));
                ctx.stop_training = true;
            }
            _ => {}
        }
        Ok(())
    }
}
