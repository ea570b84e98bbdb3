//! ModelCheckpoint: save the model at the end of every epoch, or only when it improved.

use std::path::{Path, PathBuf};

use super::monitor::{improves, monitored};
use super::path_template::PathTemplate;
use super::{Callback, Context, Logs, Mode};
use crate::Result;

/// Saves the model through `ctx.saver` at each epoch end, to `filepath` with its placeholders
/// filled: `{epoch}` (counted from 1, as Keras does in file names) and any log key, plain
/// (`{val_loss}`), fixed-point (`{val_loss:.4f}`) or as a whole number (`{epoch:03d}`).
/// Write `{{` and `}}` for literal braces.
///
/// With `save_best_only`, it saves only when `monitor` beats the best value so far; the
/// monitored key missing from the logs is then an `Error::Config` listing the keys that exist.
/// Writing atomically and refusing missing directories is the [`Saver`](super::Saver)'s job.
///
/// An epoch whose `loss` or `val_loss` is NaN or infinite is not saved (one line on stderr
/// says so): its weights have almost surely diverged too (`val_loss` is measured on the
/// epoch's final weights), and saving them would replace the last good checkpoint with one
/// that can never be resumed from.
///
/// ```
/// use convoy::callbacks::ModelCheckpoint;
/// let best = ModelCheckpoint::new("ckpt/best.safetensors").save_best_only(true);
/// let every = ModelCheckpoint::new("ckpt/e{epoch:03d}-{val_loss:.4f}.safetensors");
/// ```
pub struct ModelCheckpoint {
    filepath: String,
    monitor: String,
    mode: Mode,
    save_best_only: bool,
    template: Option<PathTemplate>,
    best: Option<f64>,
    last_saved: Option<PathBuf>,
}

impl ModelCheckpoint {
    /// Saves every epoch to `filepath`, monitoring `val_loss` once `save_best_only` is set.
    pub fn new(filepath: impl Into<String>) -> Self {
        Self {
            filepath: filepath.into(),
            monitor: "val_loss".into(),
            mode: Mode::Auto,
            save_best_only: false,
            template: None,
            best: None,
            last_saved: None,
        }
    }
    /// The log key compared between epochs with `save_best_only` (`val_loss` by default).
    pub fn monitor(mut self, monitor: impl Into<String>) -> Self {
        self.monitor = monitor.into();
        self
    }
    /// Whether a smaller or a larger monitored value is better (`Auto` by default: larger for
    /// accuracies).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// Save only when the monitored value improves on the best seen, instead of every epoch.
    pub fn save_best_only(mut self, save_best_only: bool) -> Self {
        self.save_best_only = save_best_only;
        self
    }

    /// The best monitored value seen (tracked with `save_best_only` only).
    pub fn best(&self) -> Option<f64> {
        self.best
    }
    /// Where the last save went.
    pub fn last_saved(&self) -> Option<&Path> {
        self.last_saved.as_deref()
    }
}

impl Callback for ModelCheckpoint {
    fn on_train_begin(&mut self, _ctx: &mut Context) -> Result<()> {
        self.template = Some(PathTemplate::parse(&self.filepath)?);
        self.best = None;
        Ok(())
    }

    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, ctx: &mut Context) -> Result<()> {
        if self.template.is_none() {
            self.template = Some(PathTemplate::parse(&self.filepath)?);
        }
        let template = self.template.as_ref().expect("parsed above");
        if let Some((key, v)) = ["loss", "val_loss"].iter().find_map(|k| logs.get(*k).filter(|v| !v.is_finite()).map(|v| (k, v))) {
            eprintln!("ModelCheckpoint: epoch {} not saved: {key} is {v}; the last checkpoint is kept", epoch + 1);
            return Ok(());
        }
        if self.save_best_only {
            let current = monitored("ModelCheckpoint", &self.monitor, logs)?;
            // A NaN never counts as an improvement, so it never overwrites a good checkpoint.
            if !improves(self.mode.maximizes(&self.monitor), current, self.best, 0.0) {
                return Ok(());
            }
            self.best = Some(current);
        }
        let path = template.render(epoch, logs)?;
        ctx.saver.save(&path)?;
        self.last_saved = Some(path);
        Ok(())
    }
}
