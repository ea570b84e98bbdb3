//! Data-parallel training: one replica per device, the global batch split across them by
//! measured speed, gradients summed on the host and every replica applying the same update.
//!
//! A step's backward is submitted in gradient buckets (about 8 MB, last layers first), each
//! ending with the copy of its gradients into a MAP_READ buffer; the host sums bucket b in
//! place while the devices run the backward of the later buckets (each replica's thread a
//! slice of it, written into every replica's upload slot) and queues its upload and
//! optimizer update behind the backward, and records the next step meanwhile, which each
//! replica submits right behind its last update. So only the last bucket's readback, sum,
//! upload and update remain between two steps.
//!
//! Why the result does not depend on the split: each replica's loss gradient is scaled by
//! one over the *global* batch, so the host sum of the replicas' gradients is exactly the
//! gradient of the mean loss over the whole batch, weighted by each replica's sample count.
//!
//! BatchNorm's moving statistics are per replica while an epoch runs (each sees its own
//! share of the batch, as in PyTorch DDP without SyncBatchNorm); they are averaged across
//! the replicas that trained at the end of every epoch and before any evaluation or save
//! (one that saw no sample weighs nothing), so every replica and every saved model holds
//! the same values.
//!
//! Which replicas take part is decided before training (`ReplicaSet::calibrate`, called by
//! `fit` on its first batch): a device whose share cannot make the step faster, counting
//! its fixed cost and the exchange, is set aside for the run (`split::choose`). A replica
//! set aside runs nothing and takes no part in the exchange (with one replica left there is
//! none); it takes the trained weights and optimizer state at the next sync or when it
//! rejoins. The price: with BatchNorm, a replica's
//! gradients use its share's batch statistics, so two replicas do not reproduce one device
//! (3.9e-2 relative weight difference after 5 steps of batch 16 split 8 + 8). What they do
//! is checked exactly: the f64 reference of `crate::check` computes each share with its own
//! statistics and holds the summed gradients, moving statistics and updates to 1e-4
//! (tests/parallel.rs, tests/reference.rs). Without BatchNorm they agree with one device to 1e-7.

mod gpu_spans;
pub mod replica;
mod split;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;

pub use replica::{HostBatch, Replica, StepOutput, NO_UPDATE};
pub use split::{choose, drop_negligible, split, StepCost};

use crate::distributed::{Pending, Ranks};
use crate::kernels::optimizer::Hyper;
use crate::model::plan::Definition;
use crate::Result;

/// Training steps a replica set keeps in flight at most (see `ReplicaSet::train_step`).
const MAX_IN_FLIGHT: usize = 2;

/// Where a process's batch sits in the step's global batch: samples `first..first + n` of
/// `size`. One process alone trains the whole batch ([`GlobalBatch::whole`]); under `mpirun`
/// (`crate::distributed`) each rank trains its share, and the loss gradient is scaled by one
/// over the global `size`, so the sum across ranks is the gradient of the mean loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalBatch {
    /// The position of the process's first sample in the global batch (augmentation layers
    /// draw per sample of the global batch).
    pub first: usize,
    /// Samples in the global batch, over all processes.
    pub size: usize,
}

impl GlobalBatch {
    /// A batch of `n` that is the whole step.
    pub fn whole(n: usize) -> Self {
        GlobalBatch { first: 0, size: n }
    }
}

/// Where one step's time went on the host, per replica (seconds).
#[derive(Clone, Debug, Default)]
pub struct StepTiming {
    /// Staging the inputs and recording the step.
    pub upload: f64,
    /// Waiting for the device to finish forward and backward.
    pub compute: f64,
    /// Summing this replica's slices of the gradient buckets into every upload slot.
    pub exchange: f64,
}

/// The model's replicas, one per device, and how a global batch is split among them: each replica
/// runs its share of the step, the gradients are summed across them, and every replica applies the
/// same update.
pub struct ReplicaSet {
    /// The replicas, one per device, in the order the devices were selected.
    pub replicas: Vec<Replica>,
    /// Relative speed of each replica that the split follows. Changed only when the measured
    /// speeds drift away from it: every distinct share is a separately compiled step.
    speed: Vec<f64>,
    /// Samples per second of device work per replica, smoothed over steps.
    measured: Vec<f64>,
    steps_since_resplit: usize,
    /// Counts down to the early resplit (at 1), after the first exchanged steps.
    resplits_due: usize,
    /// Set when the user fixed the split: speeds are then not re-measured.
    fixed_split: bool,
    /// The last step's exchange, finished by the next `train_step` or by `flush`.
    pending_exchange: Option<PendingExchange>,
    /// Replicas that ran each step in flight, oldest first.
    in_flight: std::collections::VecDeque<Vec<usize>>,
    /// Steps waited for whose outputs `collect` has not handed out yet, oldest first.
    finished: std::collections::VecDeque<(Vec<StepOutput>, Duration)>,
    /// The newest entry of `finished` is a synchronous step's, which the next one replaces:
    /// a loop of synchronous steps that never collects keeps one step's outputs, not all.
    sync_last: bool,
    /// Training samples each replica has processed.
    pub samples: Vec<usize>,
    /// Per replica: samples since the moving statistics were last averaged (their weight in
    /// the average), and whether its weights and optimizer state are the current ones (a
    /// replica set aside misses the updates until `sync_states` or its rejoining copies them).
    book: std::sync::Mutex<(Vec<usize>, Vec<bool>)>,
    /// Whether the split was decided from a measurement (`calibrate`) or fixed by the user.
    calibrated: bool,
    /// The messages said when replicas were set aside, in order.
    pub left_out: Vec<String>,
    /// Seconds added to each timed calibration step per replica: a simulated slow device
    /// for tests (a replica with a delay counts as an adapter of its own).
    pub calibration_delay: Vec<f64>,
    /// Accumulated host-side timing per replica since the last `take_timing`.
    timing: Vec<StepTiming>,
    /// The other processes training with this one, under `mpirun`: each bucket's host sum
    /// is then summed across them before its upload.
    ranks: Option<&'static Ranks>,
}

impl ReplicaSet {
    /// A set splitting batches evenly until speeds are measured.
    pub fn new(replicas: Vec<Replica>) -> Self {
        let n = replicas.len();
        ReplicaSet { replicas, speed: vec![1.0; n], measured: vec![0.0; n], steps_since_resplit: 0, resplits_due: 6, fixed_split: false, pending_exchange: None, in_flight: Default::default(), finished: Default::default(), sync_last: false, samples: vec![0; n], timing: vec![StepTiming::default(); n], book: std::sync::Mutex::new((vec![0; n], vec![true; n])), calibrated: false, left_out: Vec::new(), calibration_delay: vec![0.0; n], ranks: crate::distributed::world() }
    }

    /// The processes this set trains with under `mpirun`; `None` alone.
    pub fn ranks(&self) -> Option<&'static Ranks> {
        self.ranks
    }

    /// Replicas (devices) in the set.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }
    /// `true` for a set of no replicas.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// Fixes the batch split to these relative speeds (one per replica) instead of measuring.
    /// A speed of 0, or one under 1/64 of the fastest ([`drop_negligible`]), sets the replica aside: it gets no samples and takes no part in the
    /// exchange (with one replica left, there is none), and its weights are brought up to
    /// date when the statistics are synced or when it gets samples again.
    pub fn set_speeds(&mut self, speeds: &[f64]) -> Result<()> {
        if speeds.len() != self.replicas.len() || speeds.iter().any(|s| !(s.is_finite() && *s >= 0.0)) || !speeds.iter().any(|&s| s > 0.0) {
            crate::bail!(Config, "need {} speeds, each positive or 0 (left out), at least one positive, got {speeds:?}", self.replicas.len());
        }
        self.speed = drop_negligible(speeds);
        self.fixed_split = true;
        Ok(())
    }

    /// Replicas that take part in training steps now (speed above 0), in order.
    pub fn active(&self) -> Vec<usize> {
        (0..self.speed.len()).filter(|&r| self.speed[r] > 0.0).collect()
    }

    /// The first replica taking part: the one single-device work (gradients, profiles,
    /// predictions) runs on. Its weights are always current.
    pub fn lead(&self) -> usize {
        self.active().first().copied().unwrap_or(0)
    }

    /// The replica [`ReplicaSet::lead`] names.
    pub fn lead_replica(&self) -> &Replica {
        &self.replicas[self.lead()]
    }

    /// Whether the split has been decided: fixed by the user or measured by `calibrate`.
    pub fn split_decided(&self) -> bool {
        self.fixed_split || self.calibrated || self.replicas.len() < 2
    }

    /// Decides the split before training from a measurement: on each replica alone, a
    /// training step of a group of samples and one of the whole batch, each run twice (the
    /// first compiles its pipelines) with the second timed, give its fixed and per-sample
    /// cost; the host exchange is timed on the host's memory. [`choose`] then keeps the
    /// replicas whose inclusion makes the step faster; the others are set aside for the run,
    /// each said once on stderr. The steps update nothing (no optimizer step; the moving
    /// statistics are put back).
    pub fn calibrate(&mut self, def: &Definition, images: &[u8], labels: &[u32], step: u32) -> Result<()> {
        if self.split_decided() || labels.is_empty() {
            self.calibrated = true;
            return Ok(());
        }
        self.settle()?;
        let n = labels.len();
        let sample = images.len() / n;
        let small = if n >= 32 { (n / 8).div_ceil(8) * 8 } else { n.div_ceil(2) }.min(n);
        let delay = self.calibration_delay.clone();
        let time_of = |rep: &mut Replica, k: usize| -> Result<f64> {
            let batch = HostBatch { images: &images[..k * sample], labels: &labels[..k], first: 0 };
            let mut grads = Vec::new();
            let mut t = 0.0;
            for _ in 0..2 {
                let t0 = Instant::now();
                rep.run_step(def, &batch, true, NO_UPDATE, step, 1.0 / n as f32, true)?;
                rep.take_gradients(&mut grads)?;
                while rep.collect()?.is_some() {}
                std::thread::sleep(Duration::from_secs_f64(delay[rep.device.ordinal.min(delay.len() - 1)]));
                t = t0.elapsed().as_secs_f64();
            }
            Ok(t)
        };
        let states: Vec<Vec<f32>> = self.replicas.iter().map(|r| r.read_states()).collect::<Result<_>>()?;
        // Replicas on one adapter (`0,0`, `software:2`) share its hardware: timed alone each
        // would look as fast as the adapter, so the adapter is timed once, through its first
        // replica, and kept or left out as a whole; its replicas split its share evenly.
        let key = |r: &Replica| {
            let i = r.device.info();
            let own = if delay.get(r.device.ordinal).is_some_and(|&d| d > 0.0) { Some(r.device.ordinal) } else { None };
            (i.name.clone(), i.vendor, i.device, i.device_pci_bus_id.clone(), format!("{:?}", i.backend), own)
        };
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for r in 0..self.replicas.len() {
            match groups.iter_mut().find(|g| key(&self.replicas[g[0]]) == key(&self.replicas[r])) {
                Some(g) => g.push(r),
                None => groups.push(vec![r]),
            }
        }
        let mut small_t = Vec::new();
        for g in &groups {
            small_t.push(time_of(&mut self.replicas[g[0]], small)?);
        }
        // The whole batch, fastest first; an adapter whose small step already takes longer
        // than a faster one's whole batch cannot help and is not run on the whole batch.
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by(|&a, &b| small_t[a].total_cmp(&small_t[b]));
        let mut cost = vec![StepCost { fixed: 0.0, per_sample: 0.0 }; groups.len()];
        let mut best = f64::INFINITY;
        for &g in &order {
            cost[g] = if groups.len() == 1 || small_t[g] >= best || small == n {
                StepCost { fixed: 0.0, per_sample: small_t[g] / small as f64 }
            } else {
                let t = time_of(&mut self.replicas[groups[g][0]], n)?;
                best = best.min(t);
                StepCost::fit((small, small_t[g]), (n, t))
            };
        }
        for (rep, s) in self.replicas.iter().zip(&states) {
            rep.write_states(s)?;
        }
        let exchange = exchange_cost(def.layout.param_len);
        let group_speed = choose(n, &cost, &exchange, 0.05);
        let fastest = groups[order[0]][0];
        let mut speed = vec![0.0; self.replicas.len()];
        for (g, members) in groups.iter().enumerate() {
            if group_speed[g] == 0.0 {
                // What it would have given beside the fastest, said with the decision.
                let alone = cost[order[0]].time(n);
                let pair = split::predict(n, &cost, &[order[0], g], &exchange);
                let why = format!(
                    "a step of {n}: {:.1} ms alone, {:.1} ms with it, {:.1} ms of that the exchange",
                    1e3 * alone,
                    1e3 * (pair.compute + pair.exchange),
                    1e3 * pair.exchange
                );
                self.say_left_out(members[0], cost[g].time(n) / alone, fastest, &why);
            }
            for &r in members {
                speed[r] = group_speed[g] / members.len() as f64;
            }
        }
        self.speed = speed;
        self.calibrated = true;
        self.steps_since_resplit = 0;
        Ok(())
    }

    /// Current share of a batch per replica.
    pub fn shares(&self, batch: usize) -> Vec<usize> {
        split(batch, &self.speed)
    }

    /// Runs one training step of `batch` across the replicas and returns the timing per
    /// replica. With several replicas the step is pipelined: step k is staged and recorded
    /// while the devices still run step k-1, then k-1's gradients are summed and applied,
    /// then k is submitted behind them; k's own exchange finishes in the next call (or in
    /// `flush`). Outputs (loss and ranks) come later from `collect`.
    /// `global` places the batch in the step's global batch (a process's share under `mpirun`);
    /// a share may be empty, and the process still takes part in the exchange.
    pub fn train_step(&mut self, def: &Definition, images: &[u8], labels: &[u32], global: GlobalBatch, hyper: Hyper, step: u32) -> Result<Vec<StepTiming>> {
        // Each plan reads its loss back through two buffers, alternately: a third step in
        // flight would take the buffer of the first before it was read. So the oldest step
        // is waited for first (`fit` keeps one in flight, so it never waits here).
        while self.in_flight.len() >= MAX_IN_FLIGHT {
            let done = self.wait_oldest()?.expect("steps are in flight");
            self.push_finished(done, false);
        }
        let n = labels.len();
        let parts = self.active();
        // A replica rejoining after being set aside first takes the current weights.
        if parts.iter().any(|&r| !self.book.lock().unwrap().1[r]) {
            self.settle()?;
            self.broadcast_weights()?;
        }
        let counts = self.shares(n);
        let sample = images.len() / n.max(1);
        let scale = 1.0 / global.size as f32;
        let exchange = parts.len() > 1 || self.ranks.is_some();
        let mut starts = Vec::with_capacity(counts.len());
        let mut at = 0;
        for &c in &counts {
            starts.push(at);
            at += c;
        }
        let ran: Vec<usize> = (0..counts.len()).filter(|&r| counts[r] > 0).collect();
        let mut timing = vec![StepTiming::default(); self.replicas.len()];
        let recorded = on_each(&mut self.replicas, ran.len(), |r, rep| -> Result<(Option<replica::Recorded>, f64)> {
            let (lo, hi) = (starts[r], starts[r] + counts[r]);
            let batch = HostBatch { images: &images[lo * sample..hi * sample], labels: &labels[lo..hi], first: global.first + lo };
            if batch.is_empty() {
                return Ok((None, 0.0));
            }
            let _s = crate::trace::span("stage + record", 1 + r);
            let t0 = Instant::now();
            let rec = rep.record_step(def, &batch, true, hyper, step, scale, exchange)?;
            Ok((Some(rec), t0.elapsed().as_secs_f64()))
        })?;
        let mut steps = Vec::with_capacity(recorded.len());
        for (r, (rec, upload)) in recorded.into_iter().enumerate() {
            timing[r].upload = upload;
            steps.push(rec);
        }
        let previous = self.flush_timed(&mut steps)?;
        for (t, p) in timing.iter_mut().zip(previous) {
            t.compute = p.compute;
            t.exchange = p.exchange;
        }
        if exchange {
            self.pending_exchange = Some(PendingExchange { parts: parts.clone(), ran: ran.clone(), counts: counts.clone(), hyper });
        }
        self.in_flight.push_back(ran);
        {
            let mut book = self.book.lock().unwrap();
            let (seen_since_sync, current) = &mut *book;
            for (r, (seen, current)) in seen_since_sync.iter_mut().zip(current.iter_mut()).enumerate() {
                *seen += counts[r];
                if !parts.contains(&r) {
                    *current = false;
                }
            }
        }
        for (r, t) in timing.iter().enumerate() {
            self.samples[r] += counts[r];
            self.timing[r].upload += t.upload;
            self.timing[r].compute += t.compute;
            self.timing[r].exchange += t.exchange;
        }
        Ok(timing)
    }

    /// Finishes the gradient exchange of the last step, if one is pending: afterwards every
    /// replica holds the updated weights.
    pub fn flush(&mut self) -> Result<()> {
        let t = self.flush_timed(&mut [])?;
        for (acc, t) in self.timing.iter_mut().zip(t) {
            acc.compute += t.compute;
            acc.exchange += t.exchange;
        }
        Ok(())
    }

    /// `flush`, returning per replica the time spent waiting for its gradients and the
    /// time of the sums and updates; then submits `next` (the next step, recorded per
    /// replica) on each replica right behind its last update.
    fn flush_timed(&mut self, next: &mut [Option<replica::Recorded>]) -> Result<Vec<StepTiming>> {
        let mut timing = vec![StepTiming::default(); self.replicas.len()];
        let Some(PendingExchange { parts, ran, counts, hyper }) = self.pending_exchange.take() else {
            for (rep, rec) in self.replicas.iter_mut().zip(next) {
                if let Some(rec) = rec.take() {
                    rep.submit_step(rec);
                }
            }
            return Ok(timing);
        };
        // Bucket by bucket, last layers first: while the host sums bucket b the devices are
        // still running the backward of the buckets after it. A thread per replica waits for
        // its own bucket, then every thread sums its slice of the bucket over all replicas'
        // readbacks and writes it into every replica's staging slot (so the summing and the
        // writes into upload memory, the slow part, spread over the replicas' threads and
        // no thread waits for another's hand-over), and once all slices are in, each submits
        // its own update. The threads meet through counters they spin on.
        let t_flush = Instant::now();
        // Replicas set aside take no part; a step of theirs (none is expected: they rejoin
        // after a settle) goes in as it is.
        let mut next: Vec<Option<replica::Recorded>> = (0..self.replicas.len()).map(|r| next.get_mut(r).and_then(Option::take)).collect();
        for (r, rep) in self.replicas.iter_mut().enumerate() {
            if !parts.contains(&r) {
                if let Some(rec) = next[r].take() {
                    rep.submit_step(rec);
                }
            } else {
                rep.begin_apply(hyper)?;
            }
        }
        let buckets = self.replicas[0].bucket_count();
        let threads = parts.len();
        let io: Vec<BucketIo> = (0..buckets)
            .map(|b| {
                let (_, lo, hi) = self.replicas[0].bucket(b);
                BucketIo {
                    readbacks: ran.iter().map(|&r| self.replicas[r].bucket(b).0.clone()).collect(),
                    stagings: parts.iter().map(|&r| self.replicas[r].apply_staging(b).clone()).collect(),
                    bytes: hi - lo,
                }
            })
            .collect();
        let mapped: Vec<AtomicUsize> = parts.iter().map(|_| AtomicUsize::new(0)).collect();
        // Slices summed so far, over all buckets: bucket b is complete at (b + 1) * threads.
        let (summed, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
        let relay = self.ranks.map(|ranks| Relay::new(ranks, buckets, threads));
        let relay = relay.as_ref();
        let waited: Vec<Result<(f64, f64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .replicas
                .iter_mut()
                .zip(next.iter_mut().map(Option::take))
                .enumerate()
                .filter(|(r, _)| parts.contains(r))
                .enumerate()
                .map(|(p, (r, (rep, mut rec)))| {
                    let (mapped, summed, failed, ran, io) = (&mapped, &summed, &failed, &ran, &io);
                    s.spawn(move || -> Result<(f64, f64)> {
                        let mut run = || -> Result<(f64, f64)> {
                            let (mut compute, mut summing) = (0.0, 0.0);
                            // This thread's sum of a slice, reused across the buckets.
                            let mut acc = Vec::new();
                            // Buckets whose sum across the ranks this replica has uploaded.
                            let mut applied = 0;
                            let io_all = io;
                            for (b, io) in io.iter().enumerate() {
                                if ran.contains(&r) {
                                    let _s = crate::trace::span("wait for gradient bucket", 1 + r);
                                    rep.wait_bucket(b)?;
                                    compute = t_flush.elapsed().as_secs_f64();
                                }
                                mapped[p].store(b + 1, Ordering::Release);
                                if !spin_until(|| mapped.iter().all(|m| m.load(Ordering::Acquire) > b), failed) {
                                    return Ok((compute, summing));
                                }
                                if let Some(relay) = relay {
                                    {
                                        let _s = crate::trace::span("host all-reduce", 1 + r);
                                        let t0 = Instant::now();
                                        let start = io.sum_slice_host(p, threads, &mut acc)?;
                                        relay.give(b, start, &acc, io.bytes);
                                        summing += t0.elapsed().as_secs_f64();
                                    }
                                    // The sums across the ranks that are in go up now, in
                                    // order; the others after the last bucket.
                                    while let Some(sum) = relay.ready(applied).filter(|_| applied <= b) {
                                        let _s = crate::trace::span("upload + update", 1 + r);
                                        apply_summed(rep, &mut rec, &io_all[applied], p, applied, buckets, &sum)?;
                                        applied += 1;
                                    }
                                    continue;
                                }
                                {
                                    let _s = crate::trace::span("host all-reduce", 1 + r);
                                    let t0 = Instant::now();
                                    io.sum_slice(p, threads, &mut acc)?;
                                    summing += t0.elapsed().as_secs_f64();
                                }
                                summed.fetch_add(1, Ordering::AcqRel);
                                if !spin_until(|| summed.load(Ordering::Acquire) >= (b + 1) * threads, failed) {
                                    return Ok((compute, summing));
                                }
                                // The device cannot run an update before the rest of the
                                // backward, so all but the last two buckets' updates go out
                                // together with the last-but-one (one submission instead of
                                // several on the device's path); after the last bucket, the
                                // next step's first command buffer goes in the same
                                // submission, and the rest follows while the device runs it.
                                let _s = crate::trace::span("upload + update", 1 + r);
                                let last = b + 1 == buckets;
                                rep.apply_bucket(b, b + 2 < buckets, if last { rec.as_mut() } else { None })?;
                            }
                            while let Some(relay) = relay.filter(|_| applied < buckets) {
                                let t0 = Instant::now();
                                let sum = {
                                    let _s = crate::trace::span("wait for the sum across ranks", 1 + r);
                                    let Some(sum) = relay.wait(applied, failed) else { return Ok((compute, summing)) };
                                    sum
                                };
                                summing += t0.elapsed().as_secs_f64();
                                let _s = crate::trace::span("upload + update", 1 + r);
                                apply_summed(rep, &mut rec, &io_all[applied], p, applied, buckets, &sum)?;
                                applied += 1;
                            }
                            if let Some(rec) = rec.take() {
                                let _s = crate::trace::span("submit rest of next step", 1 + r);
                                rep.submit_step(rec);
                            }
                            Ok((compute, summing))
                        };
                        let out = run();
                        if out.is_err() {
                            failed.store(true, Ordering::Release);
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().map(|t| t.join().expect("replica thread panicked")).collect()
        });
        for (&r, w) in parts.iter().zip(waited) {
            (timing[r].compute, timing[r].exchange) = w?;
        }
        for &r in &ran {
            if !self.fixed_split {
                // Samples per second of device time, smoothed so one slow step does not swing the split.
                let rate = counts[r] as f64 / (timing[r].compute + 1e-4);
                self.measured[r] = if self.measured[r] == 0.0 { rate } else { 0.9 * self.measured[r] + 0.1 * rate };
            }
        }
        if !self.fixed_split {
            self.maybe_resplit();
        }
        Ok(timing)
    }

    /// Moves the split among the replicas taking part to their measured speeds when these
    /// differ from it by more than 10%: first after 5 exchanged steps (the first ones
    /// compile and warm up), then at most every 50, so equal devices keep one compiled step
    /// per batch size and unequal ones converge to shares that finish together. Replicas
    /// set aside stay aside.
    fn maybe_resplit(&mut self) {
        self.steps_since_resplit += 1;
        self.resplits_due = self.resplits_due.saturating_sub(1);
        let parts = self.active();
        if (self.steps_since_resplit < 50 && self.resplits_due != 1) || parts.iter().any(|&r| self.measured[r] <= 0.0) {
            return;
        }
        let norm = |v: &[f64]| -> Vec<f64> {
            let s: f64 = parts.iter().map(|&r| v[r]).sum();
            (0..v.len()).map(|r| if parts.contains(&r) { v[r] / s } else { 0.0 }).collect()
        };
        let (now, want) = (norm(&self.speed), drop_negligible(&norm(&self.measured)));
        if parts.iter().any(|&r| (now[r] - want[r]).abs() > 0.1 * now[r]) {
            let fastest = (0..want.len()).max_by(|&a, &b| want[a].total_cmp(&want[b])).unwrap_or(0);
            for &r in &parts {
                if want[r] == 0.0 {
                    let ratio = want[fastest] / (self.measured[r] / parts.iter().map(|&p| self.measured[p]).sum::<f64>()).max(1e-12);
                    self.say_left_out(r, ratio, fastest, "");
                }
            }
            self.speed = want;
        }
        self.steps_since_resplit = 0;
    }

    /// Host timing per replica accumulated since the last call.
    pub fn take_timing(&mut self) -> Vec<StepTiming> {
        std::mem::replace(&mut self.timing, vec![StepTiming::default(); self.replicas.len()])
    }

    /// Steps submitted whose outputs `collect` has not handed out.
    pub fn pending(&self) -> usize {
        self.finished.len() + self.in_flight.len()
    }

    /// The outputs of the oldest step not collected yet (every participating replica's),
    /// waiting for it if it is still in flight, and the time waited.
    pub fn collect(&mut self) -> Result<Option<(Vec<StepOutput>, Duration)>> {
        match self.finished.pop_front() {
            Some(done) => {
                self.sync_last &= !self.finished.is_empty();
                Ok(Some(done))
            }
            None => self.wait_oldest(),
        }
    }

    /// Finishes the last exchange and waits for every step in flight, keeping their outputs
    /// for `collect`: afterwards the replicas run nothing, so a step that is not a training
    /// step (evaluation, gradients, a profile) can use them and read its own output.
    pub fn settle(&mut self) -> Result<()> {
        self.flush()?;
        while let Some(done) = self.wait_oldest()? {
            self.push_finished(done, false);
        }
        Ok(())
    }

    /// Runs a training step and waits for it (Keras' synchronous `train_on_batch`): returns
    /// its outputs, which also stay for `collect` until the next synchronous step.
    pub fn train_step_sync(&mut self, def: &Definition, images: &[u8], labels: &[u32], global: GlobalBatch, hyper: Hyper, step: u32) -> Result<Vec<StepOutput>> {
        self.settle()?;
        if self.sync_last {
            self.finished.pop_back();
        }
        self.train_step(def, images, labels, global, hyper, step)?;
        self.settle()?;
        self.sync_last = true;
        Ok(self.finished.back().map(|(outs, _)| outs.clone()).unwrap_or_default())
    }

    /// Drops the outputs no one collected (a `fit` starts from its own steps).
    pub fn forget_finished(&mut self) {
        self.finished.clear();
        self.sync_last = false;
    }

    fn push_finished(&mut self, done: (Vec<StepOutput>, Duration), sync: bool) {
        self.finished.push_back(done);
        self.sync_last = sync;
    }

    /// Waits for the oldest step in flight and returns every participating replica's output.
    fn wait_oldest(&mut self) -> Result<Option<(Vec<StepOutput>, Duration)>> {
        let Some(ran) = self.in_flight.pop_front() else { return Ok(None) };
        let _s = crate::trace::span("wait for step", 0);
        let t0 = Instant::now();
        let mut out = Vec::with_capacity(ran.len());
        for r in ran {
            if let Some(o) = self.replicas[r].collect()? {
                out.push(o);
            }
        }
        Ok(Some((out, t0.elapsed())))
    }

    /// Averages BatchNorm's moving statistics across the replicas that trained since the last
    /// average (see the module docs): the moving mean of one device trained on the whole
    /// batch is the samples-weighted mean of the replicas', so one that saw no sample, idle
    /// or set aside, weighs nothing and its stale statistics do not dilute the others'
    /// (`crate::check`'s f64 reference weighs them the same way). Every current replica then
    /// holds the same values; replicas set aside take them, with the weights, only when they
    /// are used again ([`broadcast_weights`](Self::broadcast_weights)), so a slow device set
    /// aside costs a fast one's short epochs no copy (H100 + lavapipe, mlp: 0.95-0.96x of the
    /// H100 alone with this, 0.86x in session 8's code that copied at every epoch's end).
    pub fn sync_states(&self) -> Result<()> {
        if self.replicas.len() < 2 {
            return Ok(());
        }
        let weights: Vec<usize> = std::mem::replace(&mut self.book.lock().unwrap().0, vec![0; self.replicas.len()]);
        let total: usize = weights.iter().sum();
        if total == 0 {
            return Ok(());
        }
        let mut mean: Vec<f64> = Vec::new();
        for (r, &w) in weights.iter().enumerate() {
            if w == 0 {
                continue;
            }
            let s = self.replicas[r].read_states()?;
            mean.resize(s.len(), 0.0);
            let f = w as f64 / total as f64;
            for (m, x) in mean.iter_mut().zip(s) {
                *m += f * x as f64;
            }
        }
        let mean: Vec<f32> = mean.into_iter().map(|x| x as f32).collect();
        self.write_states_to_current(&mean)
    }

    /// Writes averaged moving statistics into every current replica; one set aside takes
    /// them from a current one when it is used again (see [`sync_states`](Self::sync_states)).
    fn write_states_to_current(&self, mean: &[f32]) -> Result<()> {
        let current = self.book.lock().unwrap().1.clone();
        for (r, _) in self.replicas.iter().zip(current).filter(|(_, fresh)| *fresh) {
            r.write_states(mean)?;
        }
        Ok(())
    }

    /// [`sync_states`](Self::sync_states) over every replica of every rank under `mpirun`
    /// (each rank's samples-weighted sum and sample count summed across the ranks), so every
    /// current replica of every rank holds the same moving statistics; `sync_states` alone without
    /// ranks. A collective: every rank calls it at the same point (`fit` does at each
    /// epoch's end), even one whose replicas saw no sample.
    pub fn sync_states_across_ranks(&self) -> Result<()> {
        let Some(ranks) = self.ranks else { return self.sync_states() };
        let weights: Vec<usize> = std::mem::replace(&mut self.book.lock().unwrap().0, vec![0; self.replicas.len()]);
        let len = self.replicas[0].read_states()?.len();
        // The weighted sum of the statistics, then the weight.
        let mut acc = vec![0.0f64; len + 1];
        for (r, &w) in weights.iter().enumerate().filter(|&(_, &w)| w > 0) {
            for (a, x) in acc.iter_mut().zip(self.replicas[r].read_states()?) {
                *a += w as f64 * x as f64;
            }
            acc[len] += w as f64;
        }
        let acc = ranks.sum_f64(acc)?;
        if acc[len] == 0.0 || len == 0 {
            return Ok(());
        }
        let mean: Vec<f32> = acc[..len].iter().map(|s| (s / acc[len]) as f32).collect();
        self.write_states_to_current(&mean)
    }

    /// Gives every replica of every rank rank 0's weights, moving statistics and optimizer
    /// state (a no-op without ranks): the model rank 0 built or loaded is the one trained.
    /// A collective, as [`sync_states_across_ranks`](Self::sync_states_across_ranks).
    pub fn broadcast_from_rank0(&mut self) -> Result<()> {
        let Some(ranks) = self.ranks else { return Ok(()) };
        self.settle()?;
        self.broadcast_weights()?;
        let lead = self.lead_replica();
        let params = ranks.broadcast(lead.read_params()?)?;
        let states = ranks.broadcast(lead.read_states()?)?;
        let opt: Vec<Vec<f32>> = lead.read_optimizer_state()?.into_iter().map(|s| ranks.broadcast(s)).collect::<Result<_>>()?;
        for r in &self.replicas {
            r.write_params(&params)?;
            r.write_states(&states)?;
            r.write_optimizer_state(&opt)?;
        }
        Ok(())
    }

    /// Copies the weights, moving statistics and optimizer state of a current replica to
    /// every replica that missed updates while set aside. With a step in flight or an exchange pending (a
    /// `get_weights` between `train_on_batch_async` and `collect(0)`) it copies nothing and
    /// the replicas stay marked, so no replica takes weights an update has yet to reach;
    /// `train_step` settles before a replica rejoins.
    pub fn broadcast_weights(&self) -> Result<()> {
        if self.pending_exchange.is_some() || !self.in_flight.is_empty() {
            return Ok(());
        }
        let (stale, fresh): (Vec<usize>, Vec<usize>) = {
            let book = self.book.lock().unwrap();
            (0..self.replicas.len()).partition(|&r| !book.1[r])
        };
        if stale.is_empty() || fresh.is_empty() {
            return Ok(());
        }
        let lead = &self.replicas[fresh[0]];
        let (params, states, opt) = (lead.read_params()?, lead.read_states()?, lead.read_optimizer_state()?);
        // The loss scale too: replicas agree on every skip and growth only from the same state.
        let scale = lead.read_loss_scale_state()?;
        for &r in &stale {
            self.replicas[r].write_params(&params)?;
            self.replicas[r].write_states(&states)?;
            self.replicas[r].write_optimizer_state(&opt)?;
            if let Some(words) = &scale {
                self.replicas[r].write_loss_scale_state(words)?;
            }
        }
        let mut book = self.book.lock().unwrap();
        for r in stale {
            book.1[r] = true;
        }
        Ok(())
    }

    /// Says once, on stderr and in `left_out`, that replica `r`, `ratio` times slower than
    /// replica `fastest`, takes no part from now on.
    fn say_left_out(&mut self, r: usize, ratio: f64, fastest: usize, why: &str) {
        let why = if why.is_empty() { String::new() } else { format!(" ({why})") };
        let note = format!("{}: {} slower than {}{why}, left out (choose with --devices)", self.replicas[r].device.name(), format_ratio(ratio), self.replicas[fastest].device.name());
        eprintln!("{note}");
        self.left_out.push(note);
    }
}

/// The share of a training step's compute that is the backward, beside which the exchange
/// of all buckets but the last runs: twice the forward's products.
const BACKWARD_SHARE: f64 = 2.0 / 3.0;

/// Predicted time one exchange among `k` replicas of `params` parameters adds to a step whose
/// slowest share computes for `compute` seconds. Its host work (each replica's gradients read
/// from mapped memory and the sum written into every replica's upload slot) is timed here on
/// a copy of that size (the host's memory speed), plus a fixed 0.3 ms a step for mapping, the
/// extra submissions and the threads meeting. The buckets are summed while the backward
/// computes the earlier layers' gradients, so only the last bucket and what does not fit
/// beside the backward add to the step (two H100s, resnet18_cifar: a serial estimate of about
/// as long as half a step set the second GPU aside, where it trains at 94.5% efficiency).
/// The readback and upload over the bus are not included: the 5% margin of `choose` covers
/// part of them.
fn exchange_cost(params: usize) -> impl Fn(usize, f64) -> f64 {
    let a: Vec<f32> = vec![1.0; params.max(1)];
    // Written once before timing: a fresh allocation's first pass is page faults, which
    // doubled the estimate at random and set an equal GPU aside in some runs and not others.
    let mut b: Vec<f32> = vec![2.0; params.max(1)];
    let mut pass = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        for (x, y) in b.iter_mut().zip(&a) {
            *x += y;
        }
        std::hint::black_box(&mut b);
        pass = pass.min(t0.elapsed().as_secs_f64());
    }
    let bytes = 4 * params.max(1) as u64;
    let buckets = bytes.div_ceil(replica::bucket_bytes(bytes)).max(1) as f64;
    move |k, compute| {
        if k < 2 {
            return 0.0;
        }
        let serial = pass * (2 * k) as f64;
        let last = serial / buckets;
        3e-4 + last + (serial - last - BACKWARD_SHARE * compute).max(0.0)
    }
}

/// A step's exchange waiting for the next `train_step` or `flush` to finish it.
struct PendingExchange {
    /// Replicas taking part (each receives the sum).
    parts: Vec<usize>,
    /// Replicas that ran the step (each contributes gradients).
    ran: Vec<usize>,
    /// Samples per replica.
    counts: Vec<usize>,
    /// The step's optimizer inputs.
    hyper: Hyper,
}

/// The stage across the ranks of a step's exchange (`crate::distributed`): the replica
/// threads' slices of a bucket's host sum are gathered here, the last slice in hands the
/// bucket to the MPI thread (so buckets go out in order on every rank), and each replica
/// uploads the sum across the ranks once it is in.
struct Relay {
    ranks: &'static Ranks,
    /// Slices per bucket: one per replica thread.
    slices: usize,
    /// Per bucket: its host sum so far and the slices in it.
    gathering: Vec<std::sync::Mutex<(Vec<f32>, usize)>>,
    /// Per bucket: its sum across the ranks, once handed to the MPI thread.
    sums: Vec<std::sync::OnceLock<std::sync::Arc<Pending<Vec<f32>>>>>,
}

impl Relay {
    fn new(ranks: &'static Ranks, buckets: usize, slices: usize) -> Self {
        Relay { ranks, slices, gathering: (0..buckets).map(|_| Default::default()).collect(), sums: (0..buckets).map(|_| Default::default()).collect() }
    }

    /// Adds one thread's `slice` of bucket `b` (`bytes` long), which starts at byte `start`.
    fn give(&self, b: usize, start: u64, slice: &[f32], bytes: u64) {
        let mut g = self.gathering[b].lock().unwrap();
        let (sum, given) = &mut *g;
        if sum.is_empty() {
            sum.resize((bytes / 4) as usize, 0.0);
        }
        let at = (start / 4) as usize;
        sum[at..at + slice.len()].copy_from_slice(slice);
        *given += 1;
        // Sent under the lock: the next bucket cannot be complete before this one is sent.
        if *given == self.slices {
            let _ = self.sums[b].set(self.ranks.sum_f32(std::mem::take(sum)));
        }
    }

    /// Waits for bucket `b`'s sum across the ranks (asleep: the MPI thread and the other
    /// ranks on this host need the cores), or until another thread `failed`.
    fn wait(&self, b: usize, failed: &AtomicBool) -> Option<std::sync::Arc<Vec<f32>>> {
        loop {
            if failed.load(Ordering::Acquire) {
                return None;
            }
            match self.sums[b].get() {
                Some(sum) => {
                    if let Some(v) = sum.wait_timeout(Duration::from_millis(1)) {
                        return Some(v);
                    }
                }
                None => std::thread::yield_now(),
            }
        }
    }

    /// Bucket `b`'s sum across the ranks, if it is in.
    fn ready(&self, b: usize) -> Option<std::sync::Arc<Vec<f32>>> {
        self.sums.get(b)?.get()?.get()
    }
}

/// Writes bucket `b`'s sum across the ranks into replica `rep`'s staging slot (`p`: its place
/// among the replicas taking part) and submits its upload and update, as the one-process
/// path does once its host sum is in; after the last bucket, with the next step `rec`.
fn apply_summed(rep: &mut Replica, rec: &mut Option<replica::Recorded>, io: &BucketIo, p: usize, b: usize, buckets: usize, sum: &[f32]) -> Result<()> {
    io.stagings[p].get_mapped_range_mut(0..io.bytes).map_err(|e| crate::Error::Gpu(format!("all-reduce map: {e:?}")))?.copy_from_slice(bytemuck::cast_slice(sum));
    let last = b + 1 == buckets;
    rep.apply_bucket(b, b + 2 < buckets, if last { rec.as_mut() } else { None })
}

/// "700x", "3.2x", "1.05x".
fn format_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}x")
    } else if r >= 2.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

/// What summing one gradient bucket touches: the mapped readbacks of the replicas that ran
/// and every replica's mapped staging slot (handles, so the replica threads keep `&mut`).
struct BucketIo {
    readbacks: Vec<wgpu::Buffer>,
    stagings: Vec<wgpu::Buffer>,
    bytes: u64,
}

impl BucketIo {
    /// Sums slice `part` of `parts` (256-byte aligned) over the mapped readbacks into `acc`
    /// (the caller's scratch, kept across buckets) and writes it into every mapped staging
    /// slot. A slice above 1 MB is cut in 1 MB chunks
    /// for the rayon pool (the 8 MB buckets of resnet18_cifar); smaller ones stay on the calling
    /// thread, as waking the pool costs more than it saves. `CONVOY_SUM_CHUNK` overrides the
    /// chunk (a tuning hook).
    fn sum_slice(&self, part: usize, parts: usize, acc: &mut Vec<f32>) -> Result<()> {
        let chunk = sum_chunk_bytes();
        let (start, end) = self.slice(part, parts);
        let map_err = |e: wgpu::MapRangeError| crate::Error::Gpu(format!("all-reduce map: {e:?}"));
        let sum_chunk = |acc: &mut Vec<f32>, c: u64| -> Result<()> {
            let (lo, hi) = (start + c * chunk, (start + (c + 1) * chunk).min(end));
            acc.clear();
            acc.resize(((hi - lo) / 4) as usize, 0.0);
            for readback in &self.readbacks {
                let view = readback.get_mapped_range(lo..hi).map_err(map_err)?;
                for (a, g) in acc.iter_mut().zip(bytemuck::cast_slice::<u8, f32>(&view)) {
                    *a += g;
                }
            }
            for staging in &self.stagings {
                staging.get_mapped_range_mut(lo..hi).map_err(map_err)?.copy_from_slice(bytemuck::cast_slice(acc));
            }
            Ok(())
        };
        // Rayon hands even a single item to a pool thread and waits for it.
        match (end - start).div_ceil(chunk) {
            0 => Ok(()),
            1 => sum_chunk(acc, 0),
            chunks => (0..chunks).into_par_iter().try_for_each_init(Vec::new, sum_chunk),
        }
    }
}

impl BucketIo {
    /// The byte range of slice `part` of `parts`.
    fn slice(&self, part: usize, parts: usize) -> (u64, u64) {
        let per = self.bytes.div_ceil(256 * parts as u64) * 256;
        ((part as u64 * per).min(self.bytes), ((part as u64 + 1) * per).min(self.bytes))
    }

    /// Sums slice `part` of `parts` over the mapped readbacks into `out` (host memory, for
    /// the sum across the ranks) and returns the byte the slice starts at; cut in chunks
    /// for the rayon pool as [`BucketIo::sum_slice`].
    fn sum_slice_host(&self, part: usize, parts: usize, out: &mut Vec<f32>) -> Result<u64> {
        let (start, end) = self.slice(part, parts);
        let chunk = (sum_chunk_bytes() / 4) as usize;
        out.clear();
        out.resize(((end - start) / 4) as usize, 0.0);
        let add = |c: usize, acc: &mut [f32]| -> Result<()> {
            let lo = start + (c * chunk * 4) as u64;
            for readback in &self.readbacks {
                let view = readback.get_mapped_range(lo..lo + acc.len() as u64 * 4).map_err(|e| crate::Error::Gpu(format!("all-reduce map: {e:?}")))?;
                for (a, g) in acc.iter_mut().zip(bytemuck::cast_slice::<u8, f32>(&view)) {
                    *a += g;
                }
            }
            Ok(())
        };
        if out.len() <= chunk {
            add(0, out)?;
        } else {
            out.par_chunks_mut(chunk).enumerate().try_for_each(|(c, acc)| add(c, acc))?;
        }
        Ok(start)
    }
}

/// The piece of a slice one rayon task sums: 1 MB, or `CONVOY_SUM_CHUNK` bytes (a tuning hook).
fn sum_chunk_bytes() -> u64 {
    static CHUNK_BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CHUNK_BYTES.get_or_init(|| std::env::var("CONVOY_SUM_CHUNK").ok().and_then(|v| v.parse().ok()).filter(|&c: &u64| c >= 256).unwrap_or(1 << 20) / 256 * 256)
}

/// Spins until `done` or until another thread `failed`; says which. Yields between
/// checks: on a small host the threads spun on outnumber the cores.
fn spin_until(done: impl Fn() -> bool, failed: &AtomicBool) -> bool {
    loop {
        if done() {
            return true;
        }
        if failed.load(Ordering::Acquire) {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Runs `f` on every replica at once, a thread each (a replica's host work blocks on its own
/// device only), or in turn on this thread when at most `busy` = 1 of them has work; returns
/// the results in replica order.
fn on_each<T: Send>(replicas: &mut [Replica], busy: usize, f: impl Fn(usize, &mut Replica) -> Result<T> + Sync) -> Result<Vec<T>> {
    // With one replica at work (one device, or the others set aside) a thread would only add
    // its start and join to every step (an MLP step on an H100 is about 0.3 ms).
    if busy <= 1 {
        return replicas.iter_mut().enumerate().map(|(r, rep)| f(r, rep)).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = replicas.iter_mut().enumerate().map(|(r, rep)| s.spawn(move || f(r, rep))).collect();
        handles.into_iter().map(|h| h.join().expect("replica thread panicked")).collect()
    })
}

#[cfg(test)]
mod exchange_tests {
    use super::exchange_cost;

    /// Beside a long enough backward only the last of the buckets is left to wait for.
    #[test]
    fn the_backward_hides_all_buckets_but_the_last() {
        let params = 11_000_000; // resnet18_cifar: 44 MB of gradients, six 8 MB buckets
        let cost = exchange_cost(params);
        let (serial, beside) = (cost(2, 0.0), cost(2, 10.0));
        assert_eq!(cost(1, 0.0), 0.0);
        assert!(beside < serial / 5.0 && beside > 3e-4, "{beside} vs {serial}");
    }
}
