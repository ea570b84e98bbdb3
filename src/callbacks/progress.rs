//! ProgressBar: Keras' ProgbarLogger, one indicatif bar per epoch.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressDrawTarget, ProgressStyle};

use super::{Callback, Context, Logs};
use crate::{Error, Result};

/// Log keys that describe the step rather than the model; shown as throughput and markers.
const NOT_METRICS: [&str; 8] = ["batch_size", "images_per_sec", "input_wait", "compute", "exchange", "learning_rate", "seconds", "samples"];
/// Step-time shares above which a step is said to wait on input or on the gradient exchange.
const INPUT_BOUND: f64 = 0.2;
const EXCHANGE_BOUND: f64 = 0.3;

/// Shows training progress on stderr:
///
/// `Epoch 3/10 [=====>    ] 120/390 loss 0.4213 accuracy 0.8711 4,213 img/s ETA 00:12`
///
/// with the validation metrics appended when the epoch ends, and `input-bound` or
/// `exchange-bound` after the throughput when more than 20 % of the step time waits for input
/// or more than 30 % goes to exchanging gradients.
///
/// `verbose` 0 prints nothing, 1 (the default) a bar redrawn every batch, 2 one plain line per
/// epoch. When stderr is not a terminal (CI, `2> log`), 1 behaves as 2, so logs stay readable.
pub struct ProgressBar {
    verbose: u8,
    writer: Option<Box<dyn Write + Send>>,
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    epoch: usize,
    epochs: usize,
    steps: usize,
    started: Instant,
    last_batch: Logs,
}

impl Default for ProgressBar {
    fn default() -> Self {
        Self::new()
    }
}

impl ProgressBar {
    /// A bar redrawn every batch (`verbose` 1), as Keras' default `fit` output.
    pub fn new() -> Self {
        Self {
            verbose: 1,
            writer: None,
            bar: None,
            plain: true,
            epoch: 0,
            epochs: 0,
            steps: 0,
            started: Instant::now(),
            last_batch: Logs::new(),
        }
    }
    /// 0: silent, 1: a bar per epoch, 2: one line per epoch.
    pub fn verbose(mut self, verbose: u8) -> Self {
        self.verbose = verbose;
        self
    }
    /// One plain line per epoch into `writer` instead of stderr.
    pub fn to_writer(mut self, writer: impl Write + Send + 'static) -> Self {
        self.writer = Some(Box::new(writer));
        self
    }

    fn prefix(&self) -> String {
        format!("Epoch {}/{}", self.epoch + 1, self.epochs)
    }

    /// Throughput and markers, from `logs` or, for keys it lacks, the last batch's logs.
    fn throughput(&self, logs: &Logs) -> String {
        let get = |key: &str| logs.get(key).or_else(|| self.last_batch.get(key)).copied();
        let mut parts = Vec::new();
        if let Some(rate) = get("images_per_sec").filter(|r| r.is_finite() && *r >= 0.0) {
            parts.push(format!("{} img/s", grouped(rate.round() as u64)));
        }
        if get("input_wait").is_some_and(|share| share > INPUT_BOUND) {
            parts.push("input-bound".to_string());
        }
        if get("exchange").is_some_and(|share| share > EXCHANGE_BOUND) {
            parts.push("exchange-bound".to_string());
        }
        parts.join(" ")
    }

    fn epoch_summary(&self, logs: &Logs) -> String {
        let elapsed = fmt_elapsed(self.started.elapsed());
        [metrics(logs), self.throughput(logs), elapsed]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Callback for ProgressBar {
    fn on_train_begin(&mut self, ctx: &mut Context) -> Result<()> {
        if self.verbose > 2 {
            return Err(Error::Config(format!("ProgressBar: verbose must be 0, 1 or 2, got {}", self.verbose)));
        }
        self.epochs = ctx.epochs;
        self.steps = ctx.steps_per_epoch;
        self.plain = self.verbose == 2 || self.writer.is_some() || !std::io::stderr().is_terminal();
        Ok(())
    }

    fn on_epoch_begin(&mut self, epoch: usize, _ctx: &mut Context) -> Result<()> {
        self.epoch = epoch;
        self.started = Instant::now();
        self.last_batch.clear();
        if self.verbose == 1 && !self.plain {
            let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .map(|s| s.progress_chars("=> "))
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar = indicatif::ProgressBar::with_draw_target(Some(self.steps as u64), ProgressDrawTarget::stderr())
                .with_style(style)
                .with_prefix(self.prefix());
            self.bar = Some(bar);
        }
        Ok(())
    }

    fn on_batch_end(&mut self, batch: usize, logs: &Logs, _ctx: &mut Context) -> Result<()> {
        self.last_batch.clone_from(logs);
        let Some(bar) = &self.bar else { return Ok(()) };
        let done = batch + 1;
        let elapsed = self.started.elapsed();
        let eta = elapsed.mul_f64(self.steps.saturating_sub(done) as f64 / done as f64);
        let msg = [metrics(logs), self.throughput(logs), format!("ETA {}", fmt_clock(eta))];
        bar.set_position(done as u64);
        bar.set_message(msg.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" "));
        Ok(())
    }

    fn on_epoch_end(&mut self, _epoch: usize, logs: &Logs, _ctx: &mut Context) -> Result<()> {
        if self.verbose == 0 {
            return Ok(());
        }
        let summary = self.epoch_summary(logs);
        if let Some(bar) = self.bar.take() {
            bar.finish_with_message(summary);
            return Ok(());
        }
        let steps = if self.last_batch.is_empty() { String::new() } else { format!(" {0}/{0}", self.steps) };
        let line = format!("{}{steps} {summary}\n", self.prefix());
        // Progress output is best effort: a closed stderr must not abort a training run.
        let _ = match &mut self.writer {
            Some(w) => w.write_all(line.as_bytes()).and_then(|()| w.flush()),
            None => std::io::stderr().write_all(line.as_bytes()),
        };
        Ok(())
    }

    fn on_train_end(&mut self, _logs: &Logs, _ctx: &mut Context) -> Result<()> {
        // Training stopped mid-epoch (TerminateOnNaN): leave the bar where it stopped.
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
        Ok(())
    }
}

/// `loss` first, then the other training metrics, then `val_loss` and the other validation
/// metrics, each as Keras prints it.
fn metrics(logs: &Logs) -> String {
    let rank = |k: &str| match k {
        "loss" => 0,
        "val_loss" => 2,
        k if k.starts_with("val_") => 3,
        _ => 1,
    };
    let mut keys: Vec<&str> = logs.keys().map(String::as_str).filter(|k| !NOT_METRICS.contains(k)).collect();
    keys.sort_by_key(|k| (rank(k), *k));
    keys.iter().map(|k| format!("{k} {}", fmt_value(logs[*k]))).collect::<Vec<_>>().join(" ")
}

/// Keras' `%.4f`, switching to `%.4e` for tiny values so they do not read as zero.
fn fmt_value(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || v.abs() >= 1e-3 { format!("{v:.4}") } else { format!("{v:.4e}") }
}

/// `4213` -> `4,213`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `00:12`, `1:02:03`.
fn fmt_clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

/// `12s`, `3m05s`, `1h02m`.
fn fmt_elapsed(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}
