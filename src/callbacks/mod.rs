//! Callbacks: hooks `fit` calls at the start and end of training, epochs and batches, with
//! Keras' names and log keys (`loss`, `accuracy`, `val_loss`, `val_accuracy`, ...).
//! Users write their own by implementing [`Callback`]; every hook has a no-op default.
//! Epoch and batch indices passed to the hooks count from 0, as in Keras.

mod csv_logger;
mod early_stopping;
mod history;
mod lr_scheduler;
mod model_checkpoint;
mod monitor;
mod path_template;
mod progress;
mod reduce_lr;
mod terminate_on_nan;

pub use csv_logger::CsvLogger;
pub use early_stopping::EarlyStopping;
pub use history::History;
pub use lr_scheduler::{LearningRateScheduler, Schedule};
pub use model_checkpoint::ModelCheckpoint;
pub use monitor::Mode;
pub use progress::ProgressBar;
pub use reduce_lr::ReduceLROnPlateau;
pub use terminate_on_nan::TerminateOnNaN;

use std::collections::BTreeMap;
use std::path::Path;

use crate::Result;

/// Metric name to value, as Keras passes `logs`.
pub type Logs = BTreeMap<String, f64>;

/// The model being trained, as callbacks reach it: saving it (ModelCheckpoint) and reading
/// or restoring its weights (EarlyStopping's `restore_best_weights`).
///
/// Contract for implementations of `save`:
/// - Write atomically: write a temporary file in the same directory as `path`, then rename it
///   over `path`, so that a crash or a full disk never leaves a half-written checkpoint and an
///   existing file at `path` stays intact until the new one is complete.
/// - Do not create missing parent directories: a missing or unwritable directory is an
///   `Error::Io` naming `path`, so a mistyped `--checkpoint-dir` fails instead of silently
///   writing somewhere unexpected.
pub trait Saver {
    /// Writes the model to `path`.
    fn save(&self, path: &Path) -> Result<()>;
    /// The model's parameters and moving statistics (Keras' `get_weights`), in the flat
    /// layout. The default says the saver cannot read them.
    fn get_weights(&self) -> Result<Weights> {
        Err(crate::Error::Config("this model's weights cannot be read from a callback".into()))
    }
    /// Replaces the model's parameters and moving statistics with `weights` (what
    /// `get_weights` returned); the optimizer state stays. The default says it cannot.
    fn set_weights(&self, _weights: &Weights) -> Result<()> {
        Err(crate::Error::Config("this model's weights cannot be set from a callback".into()))
    }
}

/// A model's parameters and moving statistics, in the flat layout.
pub type Weights = (Vec<f32>, Vec<f32>);

/// What a callback may read and change while training runs.
pub struct Context<'a> {
    /// Set to stop training after the current epoch (EarlyStopping) or batch (TerminateOnNaN).
    pub stop_training: bool,
    /// The optimizer's learning rate; a change applies from the next batch.
    pub learning_rate: f32,
    /// Epochs `fit` was asked to run.
    pub epochs: usize,
    /// Batches per epoch (the last one may be partial).
    pub steps_per_epoch: usize,
    /// Samples per epoch.
    pub samples: usize,
    /// Saves the model and reads or replaces its weights (ModelCheckpoint, EarlyStopping's
    /// `restore_best_weights`).
    pub saver: &'a dyn Saver,
}

/// A hook set for `fit`. Every hook has a no-op default.
///
/// `fit` takes its callbacks by value; to read one afterwards (EarlyStopping's
/// `stopped_epoch`, a custom callback's records), share it: an `Arc<Mutex<C>>` is a callback
/// too.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use convoy::callbacks::{Callback, EarlyStopping};
/// let stop = Arc::new(Mutex::new(EarlyStopping::new("val_loss").patience(2)));
/// let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(stop.clone())];
/// // model.fit(train, FitOptions { callbacks, .. })?;
/// assert_eq!(stop.lock().unwrap().stopped_epoch(), None);
/// ```
pub trait Callback: Send {
    /// Called once before the first epoch (Keras' `on_train_begin`).
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// Called before epoch `epoch` (0-based) starts (Keras' `on_epoch_begin`).
    fn on_epoch_begin(&mut self, _epoch: usize, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// Called before batch `batch` of the epoch is trained: a learning rate set here is the
    /// one this step runs at (Keras' `on_train_batch_begin`).
    fn on_batch_begin(&mut self, _batch: usize, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// `logs` holds the running means of the epoch so far, batch `batch` included, plus its
    /// `batch_size`, `images_per_sec` and the step-time shares (`input_wait`, `compute`,
    /// `exchange`). A batch's loss is read while the devices run the next step, so this
    /// comes after `on_batch_begin(batch + 1)`, and a stop or learning rate set here reaches
    /// the step after that one (the next is already on its way).
    fn on_batch_end(&mut self, _batch: usize, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// `logs` holds the epoch's training metrics and, with validation data, `val_` ones.
    fn on_epoch_end(&mut self, _epoch: usize, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// `logs` are the last epoch's (EarlyStopping restores the best weights here).
    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
}

/// A shared callback: `fit` drives it through the lock, and whoever holds another clone of
/// the `Arc` reads it once `fit` returns.
impl<C: Callback> Callback for std::sync::Arc<std::sync::Mutex<C>> {
    fn on_train_begin(&mut self, ctx: &mut Context) -> Result<()> {
        lock(self).on_train_begin(ctx)
    }
    fn on_epoch_begin(&mut self, epoch: usize, ctx: &mut Context) -> Result<()> {
        lock(self).on_epoch_begin(epoch, ctx)
    }
    fn on_batch_begin(&mut self, batch: usize, ctx: &mut Context) -> Result<()> {
        lock(self).on_batch_begin(batch, ctx)
    }
    fn on_batch_end(&mut self, batch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        lock(self).on_batch_end(batch, logs, ctx)
    }
    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        lock(self).on_epoch_end(epoch, logs, ctx)
    }
    fn on_train_end(&mut self, logs: &Logs, ctx: &mut Context) -> Result<()> {
        lock(self).on_train_end(logs, ctx)
    }
}

/// The callback behind the lock; a panic in an earlier holder does not make its state
/// unreadable (the callback's fields are plain records).
fn lock<C>(shared: &std::sync::Mutex<C>) -> std::sync::MutexGuard<'_, C> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
