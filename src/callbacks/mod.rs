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

/// Saves the model being trained (ModelCheckpoint uses it).
///
/// Contract for implementations:
/// - Write atomically: write a temporary file in the same directory as `path`, then rename it
///   over `path`, so that a crash or a full disk never leaves a half-written checkpoint and an
///   existing file at `path` stays intact until the new one is complete.
/// - Do not create missing parent directories: a missing or unwritable directory is an
///   `Error::Io` naming `path`, so a mistyped `--checkpoint-dir` fails instead of silently
///   writing somewhere unexpected.
pub trait Saver {
    fn save(&self, path: &Path) -> Result<()>;
}

/// What a callback may read and change while training runs.
pub struct Context<'a> {
    /// Set to stop training after the current epoch (EarlyStopping) or batch (TerminateOnNaN).
    pub stop_training: bool,
    /// The optimizer's learning rate; a change applies from the next batch.
    pub learning_rate: f32,
    pub epochs: usize,
    pub steps_per_epoch: usize,
    /// Samples per epoch.
    pub samples: usize,
    pub saver: &'a dyn Saver,
}

pub trait Callback: Send {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    fn on_epoch_begin(&mut self, _epoch: usize, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// Called before batch `batch` of the epoch is trained: a learning rate set here is the
    /// one this step runs at (Keras' `on_train_batch_begin`).
    fn on_batch_begin(&mut self, _batch: usize, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// `logs` holds the running means of the epoch so far plus `batch_size`, `images_per_sec`
    /// and the step-time shares (`input_wait`, `compute`, `exchange`).
    fn on_batch_end(&mut self, _batch: usize, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    /// `logs` holds the epoch's training metrics and, with validation data, `val_` ones.
    fn on_epoch_end(&mut self, _epoch: usize, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }
}
