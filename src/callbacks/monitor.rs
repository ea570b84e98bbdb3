//! What the monitoring callbacks (EarlyStopping, ModelCheckpoint, ReduceLROnPlateau) share:
//! which direction counts as better, and reading the monitored value out of the logs.

use super::Logs;
use crate::{Error, Result};

/// Whether a smaller or a larger monitored value is better, as Keras' `mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Larger is better for names containing "acc" (`accuracy`, `val_accuracy`), smaller
    /// otherwise (`loss`, `val_loss`): Keras' rule.
    #[default]
    Auto,
    /// Smaller is better (losses).
    Min,
    /// Larger is better (accuracies).
    Max,
}

impl Mode {
    /// `true` when larger values of `monitor` are better.
    pub(crate) fn maximizes(self, monitor: &str) -> bool {
        match self {
            Mode::Min => false,
            Mode::Max => true,
            Mode::Auto => monitor.contains("acc"),
        }
    }
}

/// `current` beats `best` by more than `min_delta` in the monitored direction; with no
/// `best` yet, anything but NaN does (a NaN taken as best would make every later value fail
/// to improve on it).
pub(crate) fn improves(maximize: bool, current: f64, best: Option<f64>, min_delta: f64) -> bool {
    match best {
        _ if current.is_nan() => false,
        None => true,
        Some(best) if maximize => current > best + min_delta,
        Some(best) => current < best - min_delta,
    }
}

/// The monitored value, or an error that says which keys exist: Keras only warns, which lets
/// a typo (or forgotten validation data) run a whole training without the callback acting.
pub(crate) fn monitored(who: &str, monitor: &str, logs: &Logs) -> Result<f64> {
    logs.get(monitor).copied().ok_or_else(|| {
        let keys: Vec<&str> = logs.keys().map(String::as_str).collect();
        let hint = if monitor.starts_with("val_") { " (val_ metrics need validation data)" } else { "" };
        Error::Config(format!(
            "{who}: monitored metric \"{monitor}\" is not in the logs; available: [{}]{hint}",
            keys.join(", ")
        ))
    })
}

/// `min_delta` must be a finite non-negative number.
pub(crate) fn check_min_delta(who: &str, min_delta: f64) -> Result<()> {
    if min_delta.is_finite() && min_delta >= 0.0 {
        Ok(())
    } else {
        Err(Error::Config(format!("{who}: min_delta must be finite and >= 0, got {min_delta}")))
    }
}
