//! EarlyStopping: stop when the monitored metric has stopped improving (Keras 3 semantics).

use super::monitor::{check_min_delta, improves, monitored};
use super::{Callback, Context, Logs, Mode, Weights};
use crate::Result;

/// Stops training once `monitor` has not improved by more than `min_delta` for `patience`
/// epochs.
///
/// With a `baseline`, an epoch only resets the patience count when it beats both the best
/// value so far and the baseline, so training stops after `patience` epochs that never reach
/// the baseline.
///
/// With `restore_best_weights`, the model ends training with the weights of its best epoch
/// (Keras 3: restored at the end of training, whether it stopped early or not; the weights
/// of the first epoch count as the best until one improves on them). They are kept on the
/// host, a copy of the parameters and moving statistics; the optimizer state stays as the
/// last epoch left it.
///
/// A monitored metric missing from the epoch's logs is an `Error::Config` listing the keys
/// that exist (Keras only warns).
///
/// ```
/// use convoy::callbacks::EarlyStopping;
/// let stop = EarlyStopping::new("val_accuracy").patience(3).min_delta(1e-3);
/// ```
pub struct EarlyStopping {
    monitor: String,
    min_delta: f64,
    patience: usize,
    mode: Mode,
    baseline: Option<f64>,
    wait: usize,
    best: Option<f64>,
    best_epoch: Option<usize>,
    stopped_epoch: Option<usize>,
    restore_best_weights: bool,
    best_weights: Option<Weights>,
}

impl Default for EarlyStopping {
    fn default() -> Self {
        Self::new("val_loss")
    }
}

impl EarlyStopping {
    /// Monitors `monitor` with Keras' defaults: `min_delta` 0, `patience` 0, `Mode::Auto`,
    /// no baseline.
    pub fn new(monitor: impl Into<String>) -> Self {
        Self {
            monitor: monitor.into(),
            min_delta: 0.0,
            patience: 0,
            mode: Mode::Auto,
            baseline: None,
            wait: 0,
            best: None,
            best_epoch: None,
            stopped_epoch: None,
            restore_best_weights: false,
            best_weights: None,
        }
    }
    /// Ends training with the weights of the best epoch instead of the last.
    pub fn restore_best_weights(mut self, restore: bool) -> Self {
        self.restore_best_weights = restore;
        self
    }
    /// The smallest change that counts as an improvement.
    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }
    /// Epochs without improvement after which training stops.
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
    /// A value the metric must beat for an epoch to reset the patience count.
    pub fn baseline(mut self, baseline: f64) -> Self {
        self.baseline = Some(baseline);
        self
    }

    /// The best monitored value seen (readable after `fit` through a shared callback, see
    /// [`Callback`]).
    pub fn best(&self) -> Option<f64> {
        self.best
    }
    /// The epoch (0-based, as `fit` counts) of the best monitored value seen.
    pub fn best_epoch(&self) -> Option<usize> {
        self.best_epoch
    }
    /// The epoch at whose end training was stopped, if it was.
    pub fn stopped_epoch(&self) -> Option<usize> {
        self.stopped_epoch
    }
}

impl Callback for EarlyStopping {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        check_min_delta("EarlyStopping", self.min_delta)?;
        self.wait = 0;
        self.best = None;
        self.best_epoch = None;
        self.stopped_epoch = None;
        self.best_weights = None;
        Ok(())
    }

    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        let current = monitored("EarlyStopping", &self.monitor, logs)?;
        let maximize = self.mode.maximizes(&self.monitor);
        let improved = improves(maximize, current, self.best, self.min_delta);
        // As Keras: until an epoch improves (a NaN first one does not), the weights of the
        // first epoch seen are the ones to restore.
        if self.restore_best_weights && (improved || self.best_weights.is_none()) {
            self.best_weights = Some(ctx.saver.get_weights()?);
            self.best_epoch = Some(epoch);
        }
        self.wait += 1;
        if improved {
            self.best = Some(current);
            self.best_epoch = Some(epoch);
            if self.baseline.is_none() || improves(maximize, current, self.baseline, self.min_delta) {
                self.wait = 0;
            }
            return Ok(());
        }
        // Keras never stops at the first epoch: there is nothing to compare it with.
        if self.wait >= self.patience && epoch > 0 {
            self.stopped_epoch = Some(epoch);
            ctx.stop_training = true;
        }
        Ok(())
    }

    fn on_train_end(&mut self, _logs: &Logs, ctx: &mut Context) -> Result<()> {
        if let Some(weights) = self.best_weights.take() {
            ctx.saver.set_weights(&weights)?;
        }
        Ok(())
    }
}
