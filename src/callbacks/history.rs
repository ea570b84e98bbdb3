//! History: every epoch's logs, as Keras' `history.history["loss"]`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Callback, Context, Logs};
use crate::Result;

/// Records the logs of each epoch; `fit` returns the one of its call, as Keras does.
/// [`History::epochs`] says which epoch each entry belongs to (from `initial_epoch` on); a
/// `History` passed to several calls as a callback keeps accumulating their epochs.
///
/// Serialises as `{"epoch": [0, 1, ...], "history": {"loss": [...], ...}}`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct History {
    epoch: Vec<usize>,
    history: BTreeMap<String, Vec<f64>>,
}

impl History {
    /// An empty record; `fit` fills one and returns it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Metric name to one value per recorded epoch. A key that appeared only in some epochs
    /// (validation run every few epochs) has fewer values, as in Keras.
    pub fn history(&self) -> &BTreeMap<String, Vec<f64>> {
        &self.history
    }

    /// The epoch indices recorded, in order.
    pub fn epochs(&self) -> &[usize] {
        &self.epoch
    }

    /// The values of one metric; `None` when it was never logged.
    pub fn get(&self, key: &str) -> Option<&[f64]> {
        self.history.get(key).map(Vec::as_slice)
    }
}

impl Callback for History {
    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, _ctx: &mut Context) -> Result<()> {
        self.epoch.push(epoch);
        for (key, value) in logs {
            self.history.entry(key.clone()).or_default().push(*value);
        }
        Ok(())
    }
}
