//! ReduceLROnPlateau: divide the learning rate when the monitored metric stalls (Keras 3
//! semantics).

use super::monitor::{check_min_delta, improves, monitored};
use super::{Callback, Context, Logs, Mode};
use crate::{Error, Result};

/// Multiplies the learning rate by `factor` once `monitor` has not improved by more than
/// `min_delta` for `patience` epochs, never going below `min_lr`; then waits `cooldown`
/// epochs, in which no reduction happens, before counting again.
///
/// A monitored metric missing from the logs is an `Error::Config` listing the keys that
/// exist (Keras only warns).
///
/// ```
/// use convoy::callbacks::ReduceLROnPlateau;
/// let plateau = ReduceLROnPlateau::new("val_loss").factor(0.2).patience(5).min_lr(1e-5);
/// ```
pub struct ReduceLROnPlateau {
    monitor: String,
    factor: f32,
    patience: usize,
    mode: Mode,
    min_delta: f64,
    cooldown: usize,
    min_lr: f32,
    wait: usize,
    cooldown_counter: usize,
    best: Option<f64>,
}

impl Default for ReduceLROnPlateau {
    fn default() -> Self {
        Self::new("val_loss")
    }
}

impl ReduceLROnPlateau {
    /// Keras' defaults: `factor` 0.1, `patience` 10, `Mode::Auto`, `min_delta` 1e-4,
    /// `cooldown` 0, `min_lr` 0.
    pub fn new(monitor: impl Into<String>) -> Self {
        Self {
            monitor: monitor.into(),
            factor: 0.1,
            patience: 10,
            mode: Mode::Auto,
            min_delta: 1e-4,
            cooldown: 0,
            min_lr: 0.0,
            wait: 0,
            cooldown_counter: 0,
            best: None,
        }
    }
    /// Multiplier applied to the rate, in `[0, 1)`.
    pub fn factor(mut self, factor: f32) -> Self {
        self.factor = factor;
        self
    }
    /// Epochs without improvement after which the rate is multiplied by `factor`.
    pub fn patience(mut self, patience: usize) -> Self {
        self.patience = patience;
        self
    }
    /// Whether a smaller or a larger monitored value is better (`Auto` by default: larger for
    /// accuracies).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// The smallest change that counts as an improvement.
    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }
    /// Epochs to wait after a reduction before counting stalled epochs again.
    pub fn cooldown(mut self, cooldown: usize) -> Self {
        self.cooldown = cooldown;
        self
    }
    /// Lower bound on the learning rate.
    pub fn min_lr(mut self, min_lr: f32) -> Self {
        self.min_lr = min_lr;
        self
    }
}

impl Callback for ReduceLROnPlateau {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        // Keras refuses factor >= 1: it would never reduce anything.
        if !(0.0..1.0).contains(&self.factor) {
            return Err(Error::Config(format!("ReduceLROnPlateau: factor must be in [0, 1), got {}", self.factor)));
        }
        if !(self.min_lr.is_finite() && self.min_lr >= 0.0) {
            return Err(Error::Config(format!("ReduceLROnPlateau: min_lr must be >= 0, got {}", self.min_lr)));
        }
        check_min_delta("ReduceLROnPlateau", self.min_delta)?;
        self.wait = 0;
        self.cooldown_counter = 0;
        self.best = None;
        Ok(())
    }

    fn on_epoch_end(&mut self, _epoch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        let current = monitored("ReduceLROnPlateau", &self.monitor, logs)?;
        if self.cooldown_counter > 0 {
            self.cooldown_counter -= 1;
            self.wait = 0;
        }
        if improves(self.mode.maximizes(&self.monitor), current, self.best, self.min_delta) {
            self.best = Some(current);
            self.wait = 0;
        } else if self.cooldown_counter == 0 {
            self.wait += 1;
            if self.wait >= self.patience && ctx.learning_rate > self.min_lr {
                ctx.learning_rate = (ctx.learning_rate * self.factor).max(self.min_lr);
                self.cooldown_counter = self.cooldown;
                self.wait = 0;
            }
        }
        Ok(())
    }
}
