//! `fit`, `train_on_batch`, `evaluate` and `predict`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::callbacks::{Callback, Context, History, Logs, ProgressBar, Saver, Weights};
use crate::data::{batch_count, channel_stats, epoch_indices, Augment, Dataset, Loader, Shard, Subset};
use crate::distributed::Ranks;
use crate::model::losses::Metric;
use crate::model::Sequential;
use crate::parallel::{GlobalBatch, HostBatch, StepOutput, NO_UPDATE};
use crate::{bail, Result};

/// `fit`'s arguments, with Keras' names and defaults.
pub struct FitOptions {
    /// The epoch to end at: `fit` trains epochs `initial_epoch..epochs` (Keras' `epochs`).
    pub epochs: usize,
    /// The global batch, split across the model's devices.
    pub batch_size: usize,
    /// Reshuffle the sample order every epoch (default true, as Keras).
    pub shuffle: bool,
    /// Seed of the data order and the augmentation draws.
    pub seed: u64,
    /// Data evaluated at the end of every epoch; its results are logged with the `val_` prefix.
    pub validation_data: Option<Arc<dyn Dataset>>,
    /// Hooks called around epochs and batches (see [`Callback`]).
    pub callbacks: Vec<Box<dyn Callback>>,
    /// Random augmentation applied to each training batch on the host; none by default.
    pub augment: Option<Augment>,
    /// Drop a last batch smaller than `batch_size`. Default false (Keras' behaviour): the
    /// short batch is trained on, with its own compiled step.
    pub drop_remainder: bool,
    /// The epoch to start at: `fit` trains epochs `initial_epoch..epochs`, as Keras does, so
    /// `fit(epochs: N)` trains N epochs every time it is called (each call continues from the
    /// weights the last one left), and a resumed run passes the epochs already trained
    /// (`compiled_epoch()`) to end at epoch `epochs`. An `initial_epoch` at or past `epochs`
    /// is an error (Keras silently trains nothing).
    pub initial_epoch: usize,
    /// 0: silent, 1: a progress bar.
    pub verbose: u8,
    /// Write a Chrome trace of the run here.
    pub trace: Option<std::path::PathBuf>,
    /// Keras' `validation_split`, in [0, 1): the last fraction of the data (the last
    /// `n - floor(n * (1 - split))` samples, taken before any shuffling) is set aside and
    /// evaluated after every epoch instead of trained on. 0 (the default) sets nothing aside.
    /// With `validation_data` as well it is an error (Keras silently prefers the data).
    pub validation_split: f32,
    /// Keras' `steps_per_epoch`: an epoch is the first this many batches of the epoch's
    /// (shuffled) order, the rest of the data waiting for later epochs' orders. More batches
    /// than the data holds is an error. `None` (the default): the whole data set.
    pub steps_per_epoch: Option<usize>,
    /// Keras' `class_weight`: `{class: weight}`, each training sample's loss and gradient
    /// multiplied by its class's weight (classes not named weigh 1). The training `loss`
    /// logged is the weighted one; validation is unweighted. Under mean squared error a
    /// sample's class is its label: the targets are the label's one-hot encoding, whose class
    /// Keras takes as its argmax.
    pub class_weight: Option<BTreeMap<u32, f32>>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            epochs: 1,
            batch_size: 32,
            shuffle: true,
            seed: 0,
            validation_data: None,
            callbacks: Vec::new(),
            augment: None,
            drop_remainder: false,
            initial_epoch: 0,
            verbose: 1,
            trace: None,
            validation_split: 0.0,
            steps_per_epoch: None,
            class_weight: None,
        }
    }
}

/// Running sums of a pass over data.
#[derive(Default)]
struct Tally {
    samples: usize,
    loss: f64,
    hits: Vec<usize>,
    nonfinite: bool,
}

impl Tally {
    fn add(&mut self, metrics: &[Metric], outs: &[StepOutput]) {
        self.hits.resize(metrics.len(), 0);
        for o in outs {
            self.samples += o.loss.len();
            for &l in &o.loss {
                if !l.is_finite() {
                    self.nonfinite = true;
                }
                self.loss += l as f64;
            }
            for (m, h) in metrics.iter().zip(self.hits.iter_mut()) {
                *h += o.rank.iter().zip(&o.loss).filter(|&(&r, &l)| m.hit(r, l)).count();
            }
        }
    }
    /// Sums the tally over the ranks under `mpirun`, and `extra` with it (returned summed), so
    /// every rank logs the same figures of the whole data.
    fn sum_across(&mut self, ranks: &Ranks, metrics: &[Metric], extra: &[f64]) -> Result<Vec<f64>> {
        self.hits.resize(metrics.len(), 0);
        let mut v = vec![self.samples as f64, self.loss, f64::from(u8::from(self.nonfinite))];
        v.extend(self.hits.iter().map(|&h| h as f64));
        v.extend_from_slice(extra);
        let v = ranks.sum_f64(v)?;
        (self.samples, self.loss, self.nonfinite) = (v[0] as usize, v[1], v[2] > 0.0);
        for (h, x) in self.hits.iter_mut().zip(&v[3..]) {
            *h = *x as usize;
        }
        Ok(v[3 + metrics.len()..].to_vec())
    }

    fn logs(&self, metrics: &[Metric], prefix: &str) -> Logs {
        let n = self.samples.max(1) as f64;
        let mut logs = Logs::new();
        logs.insert(format!("{prefix}loss"), if self.nonfinite { f64::NAN } else { self.loss / n });
        for (m, h) in metrics.iter().zip(&self.hits) {
            logs.insert(format!("{prefix}{}", m.name()), *h as f64 / n);
        }
        logs
    }
}

/// The first non-finite training loss of a `fit`, reported once. Training goes on, as in
/// Keras (a `TerminateOnNaN` callback stops it), but a run that diverged says where and why
/// instead of leaving a NaN in the logs to be found later.
#[derive(Default)]
struct Divergence {
    reported: bool,
}

impl Divergence {
    /// Checks the outputs of step `step` (counted from 1 over the whole training), batch
    /// `batch` of epoch `epoch` (both counted from 1), run at learning rate `lr`.
    fn check(&mut self, outs: &[StepOutput], step: u64, epoch: usize, batch: u64, lr: f32) {
        if self.reported {
            return;
        }
        if let Some(l) = outs.iter().flat_map(|o| &o.loss).find(|l| !l.is_finite()) {
            self.reported = true;
            eprintln!("{}", divergence_message(*l, step, epoch, batch, lr));
        }
    }
}

fn divergence_message(loss: f32, step: u64, epoch: usize, batch: u64, lr: f32) -> String {
    format!("warning: the loss became non-finite ({loss}) at step {step} (epoch {epoch}, batch {batch}) with learning rate {lr}; try a lower learning rate")
}

/// The ranks' relative speeds for the next epoch from the samples per busy second each
/// `measured` in the last: kept while every rank is within 10% of its share (every distinct
/// share is a step compiled anew), else the measured ones. A rank that measured nothing
/// (no samples) keeps the current speeds.
fn reshare(now: &[f64], measured: &[f64]) -> Vec<f64> {
    if measured.iter().any(|&m| !(m.is_finite() && m > 0.0)) {
        return now.to_vec();
    }
    let norm = |v: &[f64]| -> Vec<f64> {
        let s: f64 = v.iter().sum();
        v.iter().map(|x| x / s).collect()
    };
    let (a, b) = (norm(now), norm(measured));
    if a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 0.1 * x) { b } else { now.to_vec() }
}

/// Where an epoch's host time went so far: waiting for input while no step ran, device work
/// (staging, recording, waiting for steps) and the gradient exchange, in seconds.
#[derive(Default)]
struct Shares {
    wait: f64,
    compute: f64,
    exchange: f64,
}

impl Shares {
    /// Adds `images_per_sec` and the three shares of the wall time `elapsed` (`input_wait`,
    /// `compute`, `exchange`) to `logs`. Compute is the rest of the wall time: the host
    /// timers miss time the driver spends inside a submission (a software adapter runs the
    /// step there), and as shares of the timed sum alone, 0.13 s of waits in a 12 s epoch
    /// on lavapipe read as 34% input wait.
    fn insert(&self, logs: &mut Logs, samples: usize, elapsed: f64) {
        let total = elapsed.max(self.wait + self.compute + self.exchange).max(1e-9);
        logs.insert("images_per_sec".into(), samples as f64 / elapsed.max(1e-9));
        logs.insert("input_wait".into(), self.wait / total);
        logs.insert("compute".into(), 1.0 - (self.wait + self.exchange) / total);
        logs.insert("exchange".into(), self.exchange / total);
    }
}

/// What `on_batch_end` receives: the running means of the epoch so far, the batch's size,
/// images/s and the shares of the time.
fn batch_logs(tally: &Tally, metrics: &[Metric], batch_size: usize, shares: &Shares, t_epoch: Instant) -> Logs {
    let mut logs = tally.logs(metrics, "");
    logs.insert("batch_size".into(), batch_size as f64);
    shares.insert(&mut logs, tally.samples, t_epoch.elapsed().as_secs_f64());
    logs
}

struct ModelSaver<'a>(&'a Sequential);

impl Saver for ModelSaver<'_> {
    fn save(&self, path: &Path) -> Result<()> {
        self.0.save(path)
    }
    fn get_weights(&self) -> Result<Weights> {
        let (params, states, _) = self.0.get_weights()?;
        Ok((params, states))
    }
    // Callbacks run between steps, with every exchange finished: writing each replica is
    // all it takes.
    fn set_weights(&self, (params, states): &Weights) -> Result<()> {
        let c = self.0.compiled_ref()?;
        for r in &c.replicas.replicas {
            r.write_params(params)?;
            r.write_states(states)?;
        }
        Ok(())
    }
}

impl Sequential {
    /// Trains on `data` and returns the per-epoch logs.
    pub fn fit(&mut self, data: Arc<dyn Dataset>, opts: FitOptions) -> Result<History> {
        let Some(class_weight) = &opts.class_weight else { return self.fit_epochs(data, opts) };
        let table = self.class_weight_table(class_weight)?;
        self.write_class_weights(&table)?;
        let result = self.fit_epochs(data, opts);
        // The weights are this fit's: later steps (train_on_batch, another fit) are unweighted.
        let reset = self.write_class_weights(&vec![1.0; table.len()]);
        let history = result?;
        reset?;
        Ok(history)
    }

    /// Keras' `class_weight` as one weight per class, checked against the model.
    fn class_weight_table(&mut self, class_weight: &BTreeMap<u32, f32>) -> Result<Vec<f32>> {
        let classes = self.def.classes;
        self.compiled()?;
        let mut table = vec![1.0f32; classes];
        for (&class, &w) in class_weight {
            if class as usize >= classes {
                bail!(Config, "fit: class_weight names class {class}, but the model has {classes} classes (0..{classes})");
            }
            if !(w.is_finite() && w >= 0.0) {
                bail!(Config, "fit: class_weight of class {class} must be finite and >= 0, got {w}");
            }
            table[class as usize] = w;
        }
        Ok(table)
    }

    fn write_class_weights(&mut self, table: &[f32]) -> Result<()> {
        for r in &self.compiled()?.replicas.replicas {
            r.write_class_weights(table)?;
        }
        Ok(())
    }

    /// `fit` after its class weights are in place.
    fn fit_epochs(&mut self, data: Arc<dyn Dataset>, mut opts: FitOptions) -> Result<History> {
        let split = opts.validation_split;
        if !(0.0..1.0).contains(&split) {
            bail!(Config, "fit: validation_split must be in [0, 1), got {split}");
        }
        let data = if split > 0.0 {
            if opts.validation_data.is_some() {
                bail!(Config, "fit: validation_split {split} and validation_data both given: pass one");
            }
            // Keras: split_at = floor(n * (1 - validation_split)), in f64 as Python computes it.
            let n = data.len();
            let at = (n as f64 * (1.0 - split as f64)).floor() as usize;
            if at == 0 || at == n {
                bail!(Config, "fit: validation_split {split} of {} samples leaves {at} to train on and {} to validate on", n, n - at);
            }
            opts.validation_data = Some(Arc::new(Subset::new(data.clone(), at..n)?));
            Arc::new(Subset::new(data, 0..at)?) as Arc<dyn Dataset>
        } else {
            data
        };
        self.check_data(data.as_ref())?;
        if let Some(v) = &opts.validation_data {
            self.check_data(v.as_ref())?;
        }
        if opts.batch_size == 0 {
            bail!(Config, "batch_size must be positive");
        }
        self.compiled()?.check_batch("fit: batch_size", opts.batch_size)?;
        if opts.initial_epoch >= opts.epochs {
            bail!(Config, "fit: initial_epoch {} is not below epochs {}: nothing to train (fit trains epochs initial_epoch..epochs)", opts.initial_epoch, opts.epochs);
        }
        if data.is_empty() || (opts.drop_remainder && data.len() < opts.batch_size) {
            bail!(Config, "{}: {} samples give no batch of {}", data.source(), data.len(), opts.batch_size);
        }
        // Normalisation statistics come from the first data a fresh model is trained on.
        if !self.normalization_fixed {
            let (mean, std) = channel_stats(data.as_ref(), 2048)?;
            self.set_normalization(mean, std)?;
        }
        // A model names its classes after the data it first learns them from.
        if self.class_names.is_empty() && data.class_names().len() == self.def.classes {
            self.class_names = data.class_names();
        }
        // The outputs of steps run before, never collected, are not this fit's.
        let c = self.compiled()?;
        c.replicas.settle()?;
        c.replicas.forget_finished();
        let ranks = c.replicas.ranks();
        if let Some(ranks) = ranks {
            // Every rank trains rank 0's model from rank 0's step.
            c.replicas.broadcast_from_rank0()?;
            let at = ranks.sum_f64(if ranks.rank() == 0 { vec![c.step as f64, c.epoch as f64] } else { vec![0.0; 2] })?;
            (c.step, c.epoch) = (at[0] as u64, at[1] as usize);
        }
        let rank = ranks.map_or(0, |r| r.rank());
        // Each rank's relative speed: its share of every global batch (equal until measured).
        let mut rank_speeds = vec![1.0; ranks.map_or(1, |r| r.size())];
        let mut history = History::new();
        let mut progress = ProgressBar::new().verbose(if rank == 0 { opts.verbose } else { 0 });
        let mut steps = batch_count(data.len(), opts.batch_size, opts.drop_remainder);
        let mut samples = if opts.drop_remainder { steps * opts.batch_size } else { data.len() };
        if let Some(s) = opts.steps_per_epoch {
            if s == 0 || s > steps {
                bail!(Config, "fit: steps_per_epoch {s} is not within the 1..={steps} batches of {} that {} samples give", opts.batch_size, data.len());
            }
            if s < steps {
                (steps, samples) = (s, s * opts.batch_size);
            }
        }
        let c = self.compiled()?;
        c.steps_per_epoch = steps;
        // Under the optimizer's schedule the rate is the schedule's, which callbacks see
        // but may not change (Keras refuses to set a scheduled rate too).
        let scheduled = !c.optimizer.learning_rate_schedule().is_constant();
        let mut lr = c.next_rate();
        let mut cbs: Vec<&mut dyn Callback> = vec![&mut history as &mut dyn Callback, &mut progress];
        cbs.extend(opts.callbacks.iter_mut().map(|c| c.as_mut() as &mut dyn Callback));

        macro_rules! hook {
            ($method:ident ( $($arg:expr),* )) => {{
                let mut ctx = Context { stop_training: false, learning_rate: lr, epochs: opts.epochs, steps_per_epoch: steps, samples, saver: &ModelSaver(self) };
                for cb in cbs.iter_mut() {
                    cb.$method($($arg,)* &mut ctx)?;
                }
                if scheduled && ctx.learning_rate != lr {
                    bail!(Config, "a callback set the learning rate to {} in {}, but the optimizer follows its own schedule (rate {lr} at this step): drop the callback or the optimizer's schedule", ctx.learning_rate, stringify!($method));
                }
                #[allow(unused_assignments)]
                { lr = ctx.learning_rate; }
                ctx.stop_training
            }};
        }

        if opts.trace.is_some() {
            crate::trace::start();
        }
        let mut stop = hook!(on_train_begin());
        let mut last_logs = Logs::new();
        let mut divergence = Divergence::default();
        let mut epoch = opts.initial_epoch;
        while epoch < opts.epochs && !stop {
            stop |= hook!(on_epoch_begin(epoch));
            // The data order and augmentation follow the epochs trained, not the index this
            // call gives the epoch: two calls of one epoch then train as one call of two,
            // and a resumed run replays the order of an uninterrupted one.
            let trained = self.compiled()?.epoch;
            let mut indices = epoch_indices(data.len(), opts.shuffle, opts.seed, trained);
            indices.truncate(samples);
            let shard = ranks.map(|_| Shard { speeds: rank_speeds.clone(), rank });
            let mut loader = Loader::sharded(data.clone(), indices, opts.batch_size, opts.drop_remainder, opts.augment, opts.seed ^ (trained as u64) << 32, 4, shard.clone())?;
            // Seconds this rank's devices were busy, for its speed.
            let mut busy = 0.0;
            let mut tally = Tally::default();
            let t_epoch = Instant::now();
            let mut shares = Shares::default();
            let mut t_wait = Instant::now();
            let mut next_batch = 0;
            let epoch_start_step = self.compiled()?.step;
            // The step in flight: its batch index, size and learning rate. Its loss is read
            // while the next step runs, and its `on_batch_end` comes then, with logs that
            // include it.
            let mut in_flight: Option<(usize, usize, f32)> = None;
            // Collects the steps that finished (all but `keep` of those submitted), tallies
            // their outputs and checks them for divergence at the step they reached; `done`,
            // the step the collection finished, then gets its `on_batch_end` where `call`.
            // The wait counts as device time where `count_wait`.
            macro_rules! complete {
                (keep: $keep:expr, count_wait: $count:expr, done: $done:expr, call: $call:expr) => {{
                    let (outs, waited) = self.collect($keep)?;
                    if $count {
                        shares.compute += waited;
                    }
                    let c = self.compiled()?;
                    tally.add(&c.metrics, &outs);
                    let reached = c.step - c.replicas.pending() as u64;
                    if let Some((done_batch, size, done_lr)) = $done {
                        divergence.check(&outs, reached, epoch + 1, reached - epoch_start_step, done_lr);
                        if $call {
                            let logs = batch_logs(&tally, &c.metrics, size, &shares, t_epoch);
                            stop |= hook!(on_batch_end(done_batch, &logs));
                        }
                    }
                }};
            }
            loop {
                let next = match loader.try_next() {
                    Some(next) => next,
                    None => {
                        // The batch is not ready while a step runs: finish the step first, as
                        // device time, so that the wait left is time the devices sat idle for
                        // input. Counted from the step's submission, the wait included the
                        // step itself whenever the loader was slower than nothing, and a
                        // software adapter, whose kernels share the cores with the loader,
                        // showed "input-bound" with its dense kernels at 97% of the step.
                        if let Some(done) = in_flight.take() {
                            complete!(keep: 0, count_wait: true, done: Some(done), call: true);
                            if stop && ranks.is_none() {
                                break;
                            }
                            t_wait = Instant::now();
                        }
                        let _s = crate::trace::span("wait for input", 0);
                        loader.next()
                    }
                };
                let Some(batch) = next else { break };
                let batch = batch?;
                let b = next_batch;
                next_batch += 1;
                shares.wait += t_wait.elapsed().as_secs_f64();
                if scheduled {
                    lr = self.compiled()?.next_rate();
                }
                stop |= hook!(on_batch_begin(b));
                self.compiled()?.learning_rate = lr;
                // The split is decided on the first batch, before its step.
                if !self.compiled()?.replicas.split_decided() {
                    let def = &self.def;
                    let c = self.compiled.as_mut().expect("checked above");
                    c.replicas.calibrate(def, &batch.images, &batch.labels, c.step as u32)?;
                }
                let global = opts.batch_size.min(samples - b * opts.batch_size);
                let first = shard.as_ref().map_or(0, |s| s.range(global).start);
                let timing = self.train_share_async(&batch.images, &batch.labels, GlobalBatch { first, size: global })?;
                busy += timing.iter().map(|t| t.upload).fold(0.0, f64::max) + timing.iter().map(|t| t.compute).fold(0.0, f64::max);
                // The slowest replica sets the pace of each phase.
                shares.compute += timing.iter().map(|t| t.upload).fold(0.0, f64::max);
                shares.compute += timing.iter().map(|t| t.compute).fold(0.0, f64::max);
                shares.exchange += timing.iter().map(|t| t.exchange).fold(0.0, f64::max);
                // Read step b-1's loss while step b runs.
                complete!(keep: 1, count_wait: true, done: in_flight.replace((b, batch.labels.len(), lr)), call: true);
                // Ranks stop together, at the epoch's end (see `crate::distributed`).
                if stop && ranks.is_none() {
                    break;
                }
                t_wait = Instant::now();
            }
            // After a stop, as in Keras, no batch hook comes (the step ran: it was in flight).
            complete!(keep: 0, count_wait: false, done: in_flight, call: !stop);
            let c = self.compiled()?;
            // `collect(0)` finished the last exchange, so every replica holds the same weights.
            c.replicas.sync_states_across_ranks()?;
            if let Some(ranks) = ranks {
                // One sum over the ranks: the epoch's tally, any rank's request to stop, and
                // each rank's samples per busy second (in its own slot) for the next shares.
                let rate = tally.samples as f64 / busy.max(1e-9);
                let mut extra = vec![f64::from(u8::from(stop))];
                extra.extend((0..rank_speeds.len()).map(|r| if r == rank { rate } else { 0.0 }));
                let extra = tally.sum_across(ranks, &c.metrics, &extra)?;
                stop = extra[0] > 0.0;
                rank_speeds = reshare(&rank_speeds, &extra[1..]);
            }
            c.epoch += 1;
            let elapsed = t_epoch.elapsed().as_secs_f64();
            let mut logs = tally.logs(&c.metrics, "");
            logs.insert("seconds".into(), elapsed);
            shares.insert(&mut logs, tally.samples, elapsed);
            logs.insert("learning_rate".into(), lr as f64);
            if let Some((scale, skipped)) = c.replicas.lead_replica().loss_scale()? {
                logs.insert("loss_scale".into(), scale as f64);
                logs.insert("skipped_steps".into(), skipped as f64);
            }
            if let Some(val) = opts.validation_data.clone() {
                let _s = crate::trace::span("validation", 0);
                let v = self.evaluate(val, opts.batch_size)?;
                for (k, x) in v.into_iter().filter(|(k, _)| k != "samples") {
                    logs.insert(format!("val_{k}"), x);
                }
            }
            stop |= hook!(on_epoch_end(epoch, &logs));
            last_logs = logs;
            epoch += 1;
        }
        hook!(on_train_end(&last_logs));
        drop(cbs);
        if let Some(path) = &opts.trace {
            let mut tracks = vec!["training loop".to_string()];
            tracks.extend(self.devices().iter().map(|d| format!("replica {}: {}", d.ordinal, d.name())));
            crate::trace::finish(&crate::distributed::trace_path(path), &tracks)?;
        }
        Ok(history)
    }

    /// One training step on a global batch of u8 images `[n, h, w, c]` and labels, split
    /// across the replicas, as Keras' `train_on_batch`: it waits for the step and returns the
    /// batch's `loss` and metrics (`accuracy`, ...); every replica then holds the updated
    /// weights. Its per-sample outputs stay for one [`Sequential::collect`] until the next
    /// step. [`Sequential::train_on_batch_async`] overlaps steps instead.
    pub fn train_on_batch(&mut self, images: &[u8], labels: &[u32]) -> Result<Logs> {
        let hyper = self.next_step("train_on_batch", images, labels, false)?;
        let global = self.global_batch(labels.len());
        let def = &self.def;
        let c = self.compiled.as_mut().expect("next_step checked it");
        let outs = c.replicas.train_step_sync(def, images, labels, global, hyper, c.step as u32)?;
        c.step += 1;
        let mut tally = Tally::default();
        tally.add(&c.metrics, &outs);
        Ok(tally.logs(&c.metrics, ""))
    }

    /// Loss and metrics over `data` (`loss`, `accuracy`, ..., `samples`), in batches of
    /// `batch_size` (at most the compiled `max_batch`). Under `mpirun` each rank evaluates
    /// every size-th sample and the figures are summed over the ranks: every rank calls it.
    pub fn evaluate(&mut self, data: Arc<dyn Dataset>, batch_size: usize) -> Result<Logs> {
        self.check_data(data.as_ref())?;
        let def = &self.def;
        let c = self.compiled.as_mut().ok_or_else(super::sequential::not_compiled)?;
        c.replicas.settle()?;
        c.replicas.sync_states()?;
        let ranks = c.replicas.ranks();
        let indices: Vec<usize> = match ranks {
            Some(r) => (r.rank()..data.len()).step_by(r.size()).collect(),
            None => (0..data.len()).collect(),
        };
        // Inference does not depend on the batch: a larger one runs in pieces that fit.
        let loader = Loader::new(data.clone(), indices, batch_size.clamp(1, c.max_batch), false, None, 0, 4)?;
        let mut tally = Tally::default();
        let n = c.replicas.len();
        for batch in loader {
            let batch = batch?;
            // Evaluation batches go to the replicas in turn: each runs whole batches.
            let counts = c.replicas.shares(batch.labels.len());
            let sample = batch.images.len() / batch.labels.len();
            let mut at = 0;
            let mut outs = Vec::new();
            for (r, &k) in counts.iter().enumerate().take(n) {
                if k == 0 {
                    continue;
                }
                let hb = HostBatch { images: &batch.images[at * sample..(at + k) * sample], labels: &batch.labels[at..at + k], first: at };
                c.replicas.replicas[r].run_step(def, &hb, false, NO_UPDATE, 0, 1.0, false)?;
                at += k;
            }
            for r in c.replicas.replicas.iter_mut() {
                while let Some(o) = r.collect()? {
                    outs.push(o);
                }
            }
            tally.add(&c.metrics, &outs);
        }
        if let Some(ranks) = ranks {
            tally.sum_across(ranks, &c.metrics, &[])?;
        }
        let mut logs = tally.logs(&c.metrics, "");
        logs.insert("samples".into(), tally.samples as f64);
        Ok(logs)
    }

    /// Class probabilities (softmax of the logits) for every sample of `data`, in order, in
    /// batches of `batch_size` (at most the compiled `max_batch`).
    pub fn predict(&mut self, data: Arc<dyn Dataset>, batch_size: usize) -> Result<Vec<Vec<f32>>> {
        self.check_data(data.as_ref())?;
        let def = &self.def;
        let classes = def.classes;
        let c = self.compiled.as_mut().ok_or_else(super::sequential::not_compiled)?;
        c.replicas.settle()?;
        c.replicas.sync_states()?;
        let loader = Loader::new(data.clone(), (0..data.len()).collect(), batch_size.clamp(1, c.max_batch), false, None, 0, 4)?;
        let mut out = Vec::with_capacity(data.len());
        for batch in loader {
            let batch = batch?;
            let hb = HostBatch { images: &batch.images, labels: &batch.labels, first: 0 };
            let lead = c.replicas.lead();
            let logits = c.replicas.replicas[lead].logits(def, &hb)?;
            for row in logits.chunks(classes) {
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
                let s: f32 = e.iter().sum();
                out.push(e.iter().map(|v| v / s).collect());
            }
        }
        Ok(out)
    }

    /// Refuses data whose images or classes do not fit the model, naming both.
    fn check_data(&self, data: &dyn Dataset) -> Result<()> {
        let shape = data.image_shape();
        if shape[..] != self.def.input_shape[..] {
            bail!(Shape, "{}: images are {:?} (height, width, channels) but the model takes {:?}", data.source(), shape, self.def.input_shape);
        }
        if self.def.classes != 0 && data.num_classes() > self.def.classes {
            bail!(Shape, "{}: {} classes but the model outputs {}", data.source(), data.num_classes(), self.def.classes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_with_a_non_finite_loss_are_never_hits_and_make_the_loss_nan() {
        // rank 0 with a NaN loss is what a NaN logit row looked like before the loss kernel
        // ranked it last: it must not count as correct here either
        let out = StepOutput { loss: vec![0.5, f32::NAN, f32::INFINITY, 0.25], rank: vec![0, 0, 0, 3] };
        let metrics = [Metric::Accuracy, Metric::TopKAccuracy(5)];
        let mut t = Tally::default();
        t.add(&metrics, &[out]);
        let logs = t.logs(&metrics, "val_");
        assert!(logs["val_loss"].is_nan(), "{logs:?}");
        assert_eq!(logs["val_accuracy"], 0.25, "{logs:?}");
        assert_eq!(logs["val_top_k_accuracy"], 0.5, "{logs:?}");
    }

    #[test]
    fn the_first_non_finite_loss_is_reported_once_with_where_and_what_to_do() {
        let m = divergence_message(f32::NAN, 37, 2, 5, 1e4);
        assert_eq!(m, "warning: the loss became non-finite (NaN) at step 37 (epoch 2, batch 5) with learning rate 10000; try a lower learning rate");
        let mut d = Divergence::default();
        d.check(&[StepOutput { loss: vec![1.0], rank: vec![0] }], 1, 1, 1, 0.1);
        assert!(!d.reported, "a finite loss is not reported");
        d.check(&[StepOutput { loss: vec![1.0, f32::NAN], rank: vec![0, 0] }], 2, 1, 2, 0.1);
        assert!(d.reported);
    }
}
