//! One replica: a device with its own copy of the weights, gradients, optimizer state,
//! compiled plans and staging ring. No replica is a master: all hold the same tensors.

use std::collections::HashMap;
use std::sync::Arc;

use crate::device::{Readback, StagingRing, Timestamps};
use crate::parallel::gpu_spans::GpuSpans;
use crate::kernels::optimizer::{self, Hyper};
use crate::kernels::{loss_scale, Dispatch};
use crate::model::plan::{Definition, Plan, Shared};
use crate::optim::Optimizer;
use crate::{DType, Device, Result, Tensor};

/// One batch on the host, as the data pipeline produces it.
pub struct HostBatch<'a> {
    /// The images, u8 HWC, back to back.
    pub images: &'a [u8],
    /// One class index per image.
    pub labels: &'a [u32],
    /// The index of the first image in the whole step's batch (a replica's share starts
    /// past the shares before it): augmentation layers draw per sample of the whole batch,
    /// so that a sample's draw does not depend on which replica runs it.
    pub first: usize,
}

impl HostBatch<'_> {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// `true` for a batch of no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// Optimizer inputs for a step that must not change the weights (evaluation, gradients).
pub const NO_UPDATE: Hyper = Hyper { lr: 0.0, bias_correction1: 1.0, bias_correction2: 1.0, clip_factor: 1.0 };

/// A step recorded by `Replica::record_step`, waiting for `submit_step`.
pub struct Recorded {
    /// Command buffers in order, each with the gradient bucket it ends (the first, which
    /// also copies out the loss, is 0); `None` for the lead of the forward.
    commands: std::collections::VecDeque<(wgpu::CommandBuffer, Option<usize>)>,
    /// Command buffers already submitted.
    submitted: usize,
    /// The GPU span set its passes write, if traced.
    spans: Option<usize>,
    slot: usize,
    key: PlanKey,
    readback: usize,
    exchange: bool,
}

/// Per-sample loss and label rank of one finished step.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// Each sample's loss.
    pub loss: Vec<f32>,
    /// Each label's rank among its sample's logits (0: the largest), for the accuracy metrics.
    pub rank: Vec<u32>,
}

/// Batch size, training, and the bits of the loss scale (one over the global batch).
type PlanKey = (usize, bool, u32);

/// The model on one device: its flat parameter, gradient and state buffers, the optimizer's state,
/// and a compiled plan per batch size.
pub struct Replica {
    /// The device it runs on.
    pub device: Arc<Device>,
    /// Every parameter, flat, in the layout's order.
    pub params: Tensor,
    /// Every gradient, flat, parallel to `params`: what the replicas exchange.
    pub grads: Tensor,
    /// Every state tensor (moving statistics), flat.
    pub states: Tensor,
    opt_state: Vec<Tensor>,
    hyper: Tensor,
    shared: Shared,
    /// The optimizer over every trainable parameter (one dispatch per run of unfrozen layers).
    update: Vec<Dispatch>,
    /// Under `mixed_float16`: the search of the whole gradient for NaN and infinity before
    /// any update, and the loss-scale update after them (`kernels::loss_scale`).
    scaling: Option<Scaling>,
    /// With `global_clipnorm`: the norm of the whole (summed) gradient and the clip factor,
    /// before the update.
    clipping: Option<Clipping>,
    plans: HashMap<PlanKey, Plan>,
    ring: StagingRing,
    /// Plans whose readback is in flight, oldest first.
    in_flight: std::collections::VecDeque<(PlanKey, usize)>,
    /// Gradient buckets in reverse layer order, each read back as soon as the backward
    /// kernels that write it have run.
    buckets: Vec<Bucket>,
    scratch: Vec<u8>,
    /// GPU spans for `--trace`, while a trace is recorded.
    spans: Option<GpuSpans>,
    /// The span set of the last exchanged step: its prepared updates resolve it, and the
    /// last one's submission hands it to `spans`.
    spans_pending: Option<usize>,
    /// Bucket updates applied but not yet submitted: (bucket, staging slot, commands).
    held: Vec<(usize, usize, wgpu::CommandBuffer)>,
    /// Plans keep their forward's tensors readable (see [`Replica::keep_records`]).
    keep_records: bool,
}

impl Replica {
    /// Allocates every shared tensor on `device` and uploads the initial values.
    pub fn new(device: Arc<Device>, def: &Definition, optimizer: &Optimizer, params: &[f32], states: &[f32], max_batch: usize) -> Result<Replica> {
        let l = &def.layout;
        let p = device.upload(&[l.param_len], params)?;
        let grads = device.zeros(&[l.param_len])?;
        let s = device.upload(&[l.state_len], states)?;
        let view = |t: &Tensor, e: &crate::model::layout::Entry| t.view(e.offset, &e.spec.shape);
        let shared = Shared {
            params: l.params.iter().map(|e| view(&p, e)).collect::<Result<_>>()?,
            grads: l.params.iter().map(|e| view(&grads, e)).collect::<Result<_>>()?,
            states: l.states.iter().map(|e| view(&s, e)).collect::<Result<_>>()?,
            step: device.zeros_of(&[4], DType::U32)?,
            loss_scale: if def.policy.is_mixed() {
                def.loss_scale.validate()?;
                Some(device.upload_u32(&[loss_scale::STATE_LEN], &loss_scale::initial_state(def.loss_scale.initial_scale))?)
            } else {
                None
            },
            class_weights: device.upload(&[def.classes], &vec![1.0; def.classes])?,
            policy: def.policy,
            frozen: def.frozen.clone(),
        };
        let opt_state = (0..optimizer.state_count()).map(|_| device.zeros(&[l.param_len])).collect::<Result<Vec<_>>>()?;
        let hyper = device.zeros(&[4])?;
        let wd = optimizer.weight_decay_value();
        let kept: Vec<(usize, usize)> = l.decay_ranges().into_iter().filter(|r| !r.2).map(|(offset, len, _)| (offset, offset + len)).collect();
        // The optimizer over elements [lo, hi): one dispatch, decay masked off where the
        // layout says (BatchNorm's gamma and beta, biases).
        // Frozen layers' parameters (`trainable = false`): element ranges left out of every
        // update. Parameters are laid out ALIGN-aligned, so the rest splits into views.
        let frozen: Vec<(usize, usize)> = def
            .frozen
            .iter()
            .filter_map(|&i| l.per_layer.get(i))
            .flat_map(|&(p0, np, _, _)| &l.params[p0..p0 + np])
            .map(|e| (e.offset, e.offset + e.spec.len().div_ceil(crate::model::layout::ALIGN) * crate::model::layout::ALIGN))
            .collect();
        let update_one = |lo: usize, hi: usize| -> Result<Dispatch> {
            let view = |t: &Tensor| t.view(lo, &[hi - lo]);
            let state: Vec<Tensor> = opt_state.iter().map(view).collect::<Result<_>>()?;
            let state_refs: Vec<&Tensor> = state.iter().collect();
            let no_decay: Vec<std::ops::Range<usize>> = kept.iter().filter(|(a, b)| *a < hi && *b > lo).map(|&(a, b)| a.max(lo) - lo..b.min(hi) - lo).collect();
            optimizer::update_clipped(&device, &optimizer.kind(), wd, &view(&p)?, &view(&grads)?, &state_refs, &hyper, &no_decay, shared.loss_scale.as_ref(), optimizer.clipnorm().is_some())
        };
        // The dispatches over the trainable elements of [lo, hi): one, unless layers in it
        // are frozen.
        let update_of = |lo: usize, hi: usize| -> Result<Vec<Dispatch>> {
            let mut cuts: Vec<(usize, usize)> = frozen.iter().filter(|(a, b)| *a < hi && *b > lo).map(|&(a, b)| (a.max(lo), b.min(hi))).collect();
            cuts.sort();
            let (mut out, mut at) = (Vec::new(), lo);
            for (a, b) in cuts.into_iter().chain([(hi, hi)]) {
                if a > at {
                    out.push(update_one(at, a)?);
                }
                at = at.max(b);
            }
            Ok(out)
        };
        let clipping = match optimizer.clipnorm() {
            Some(clipnorm) => {
                let partials = device.zeros(&[optimizer::NORM_GROUPS])?;
                // Over the trainable gradients only, as Keras (a frozen layer's are never used).
                let excluded: Vec<std::ops::Range<usize>> = frozen.iter().map(|&(a, b)| a.min(l.param_len)..b.min(l.param_len)).collect();
                let dispatches = optimizer::clip_by_global_norm_except(&device, clipnorm, &grads, &hyper, &partials, shared.loss_scale.as_ref(), &excluded)?;
                Some(Clipping { _partials: partials, dispatches })
            }
            None => None,
        };
        let scaling = match &shared.loss_scale {
            Some(state) => Some(Scaling {
                find: loss_scale::find_non_finite(&device, &grads, state)?,
                update: loss_scale::update_scale(&device, state, def.loss_scale.dynamic_growth_steps)?,
            }),
            None => None,
        };
        let update = update_of(0, l.param_len)?;
        let buckets = buckets(device.wgpu(), &def.layout, update_of)?;
        // Images, labels and one-hot targets of `max_batch` samples; sized from the model's
        // declared input and a command-line batch, so checked before wgpu is asked for it (an
        // oversized buffer is a validation error, which panics).
        let per_sample = def.input_shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64)).and_then(|sample| sample.checked_add(4)?.checked_add((def.classes as u64).checked_mul(4)?));
        let staging = per_sample.and_then(|p| p.checked_mul(max_batch as u64)?.checked_add(64));
        let max = device.wgpu().limits().max_buffer_size;
        let staging = match staging {
            Some(s) if s <= max => s,
            _ => {
                let fits = per_sample.map_or(0, |p| max.saturating_sub(64) / p.max(1));
                crate::bail!(Shape, "a staging buffer for a batch of {max_batch} samples of {:?} needs more than {}'s largest buffer ({max} bytes); the largest batch that fits is {fits}", def.input_shape, device.name());
            }
        };
        let ring = StagingRing::new(device.wgpu(), 3, staging);
        Ok(Replica {
            buckets,
            device,
            params: p,
            grads,
            states: s,
            opt_state,
            hyper,
            shared,
            update,
            scaling,
            clipping,
            plans: HashMap::new(),
            ring,
            in_flight: Default::default(),
            scratch: Vec::new(),
            spans: None,
            spans_pending: None,
            held: Vec::new(),
            keep_records: false,
        })
    }

    /// Stages `batch`, then records and submits forward, loss and (when training) backward.
    /// With `exchange`, the gradients are copied out for the host all-reduce and the update
    /// waits for `apply_gradients`; otherwise the optimizer runs in the same submission.
    #[allow(clippy::too_many_arguments)]
    pub fn run_step(&mut self, def: &Definition, batch: &HostBatch, training: bool, hyper: Hyper, step: u32, scale: f32, exchange: bool) -> Result<()> {
        let recorded = self.record_step(def, batch, training, hyper, step, scale, exchange)?;
        self.submit_step(recorded);
        Ok(())
    }

    /// Stages `batch` and records its step without submitting it, so the host work of
    /// step k+1 can overlap the device work and gradient exchange of step k.
    #[allow(clippy::too_many_arguments)]
    pub fn record_step(&mut self, def: &Definition, batch: &HostBatch, training: bool, hyper: Hyper, step: u32, scale: f32, exchange: bool) -> Result<Recorded> {
        let n = batch.len();
        let dev = self.device.clone();
        let mut enc = dev.wgpu().create_command_encoder(&Default::default());
        let (slot, rb) = self.stage(def, batch, training, hyper, step, scale, &mut enc)?;
        let plan = self.plans.get_mut(&(n, training, scale.to_bits())).expect("staged plans exist");
        let exchange = training && exchange;
        if !crate::trace::enabled() {
            self.spans = None;
        } else if self.spans.is_none() {
            self.spans = GpuSpans::new(&dev, 2 * self.buckets.len() as u32 + 4)?;
        }
        let set = match self.spans.as_mut() {
            Some(s) => Some(s.begin_step(&dev)?),
            None => None,
        };
        let mut spans = self.spans.as_mut().zip(set);
        let mut commands = Vec::new();
        if exchange {
            // One command buffer per bucket, each ending with the copy of its gradients, so
            // bucket b can be read back while the backward of the buckets after it runs.
            // A short lead of the forward goes first in a command buffer of its own: it is
            // what the device starts on right after the last update, so the submission on
            // that path stays cheap and the device runs it while the rest is submitted.
            let cuts = bucket_cuts(&self.buckets, &plan.backward_marks, plan.dispatches.len());
            let mut start = LEAD_DISPATCHES.min(cuts[0]);
            {
                let mut pass = GpuSpans::begin(&mut spans, || "forward, lead".to_string(), &mut enc);
                for d in &plan.dispatches[..start] {
                    d.encode(&mut pass);
                }
            }
            commands.push((enc.finish(), None));
            for (b, &end) in cuts.iter().enumerate() {
                let mut enc = dev.wgpu().create_command_encoder(&Default::default());
                {
                    let name = || if b == 0 { "forward + backward, bucket 0".to_string() } else { format!("backward, bucket {b}") };
                    let mut pass = GpuSpans::begin(&mut spans, name, &mut enc);
                    for d in &plan.dispatches[start..end] {
                        d.encode(&mut pass);
                    }
                }
                if b == 0 {
                    plan.encode_readback(&mut enc, rb);
                }
                let bucket = &self.buckets[b];
                enc.copy_buffer_to_buffer(self.grads.buffer(), self.grads.offset() + bucket.lo, &bucket.readback.buffer, 0, bucket.hi - bucket.lo);
                commands.push((enc.finish(), Some(b)));
                start = end;
            }
        } else {
            {
                let name = || if training { "forward + backward" } else { "forward" }.to_string();
                let mut pass = GpuSpans::begin(&mut spans, name, &mut enc);
                for d in &plan.dispatches {
                    d.encode(&mut pass);
                }
            }
            plan.encode_readback(&mut enc, rb);
            if training {
                let mut pass = GpuSpans::begin(&mut spans, || "optimizer".to_string(), &mut enc);
                for d in whole_update(&self.update, &self.scaling, &self.clipping) {
                    d.encode(&mut pass);
                }
            }
            if let Some((s, i)) = &spans {
                s.resolve(*i, &mut enc);
            }
            commands.push((enc.finish(), Some(0)));
        }
        Ok(Recorded { commands: commands.into(), submitted: 0, spans: set, slot, key: (n, training, scale.to_bits()), readback: rb, exchange })
    }

    /// Builds the plan for this batch if needed and encodes the copies of the batch, the
    /// optimizer inputs and the step counter out of the next staging slot; returns the slot
    /// and the plan's loss readback this step takes.
    #[allow(clippy::too_many_arguments)]
    fn stage(&mut self, def: &Definition, batch: &HostBatch, training: bool, hyper: Hyper, step: u32, scale: f32, enc: &mut wgpu::CommandEncoder) -> Result<(usize, usize)> {
        let n = batch.len();
        let dev = self.device.clone();
        let step_words = [step, batch.first as u32, 0, 0];
        let targets: Vec<f32> = if def.loss == crate::model::losses::Loss::MeanSquaredError {
            let mut t = vec![0.0f32; n * def.classes];
            for (i, &l) in batch.labels.iter().enumerate() {
                t[i * def.classes + l as usize] = 1.0;
            }
            t
        } else {
            Vec::new()
        };
        let (hyper_t, step_t) = (self.hyper.clone(), self.shared.step.clone());
        let plan = plan_for(&mut self.plans, &self.in_flight, def, &dev, &self.shared, (n, training, scale), self.keep_records)?;
        let mut parts: Vec<(&[u8], &wgpu::Buffer, u64)> = vec![
            (batch.images, plan.images.buffer(), plan.images.offset()),
            (bytemuck::cast_slice(batch.labels), plan.labels.buffer(), plan.labels.offset()),
            (bytemuck::bytes_of(&hyper), hyper_t.buffer(), hyper_t.offset()),
            (bytemuck::cast_slice(&step_words), step_t.buffer(), step_t.offset()),
        ];
        if let Some(t) = &plan.targets {
            parts.push((bytemuck::cast_slice(&targets), t.buffer(), t.offset()));
        }
        let rb = plan.next_readback;
        plan.next_readback ^= 1;
        Ok((self.ring.stage(dev.wgpu(), enc, &parts)?, rb))
    }

    /// Runs one training step (forward, backward and optimizer) with every dispatch in a
    /// pass of its own between two timestamps, waits for it, and returns each dispatch with
    /// its GPU time in nanoseconds, in order.
    pub fn profile_step(&mut self, def: &Definition, batch: &HostBatch, hyper: Hyper, step: u32, timer: &mut Timestamps) -> Result<Vec<(Dispatch, f64)>> {
        let n = batch.len();
        let scale = 1.0 / n as f32;
        let dev = self.device.clone();
        let mut enc = dev.wgpu().create_command_encoder(&Default::default());
        let (slot, rb) = self.stage(def, batch, true, hyper, step, scale, &mut enc)?;
        let key = (n, true, scale.to_bits());
        let plan = &self.plans[&key];
        let all: Vec<Dispatch> = plan.dispatches.iter().chain(whole_update(&self.update, &self.scaling, &self.clipping)).filter(|d| !d.groups().contains(&0)).cloned().collect();
        if all.len() > timer.capacity() as usize {
            crate::bail!(Config, "a step of {} dispatches exceeds the {} a profile can time", all.len(), timer.capacity());
        }
        for (i, d) in all.iter().enumerate() {
            d.encode(&mut Timestamps::begin(Some(timer), i as u32, &mut enc));
        }
        plan.encode_readback(&mut enc, rb);
        timer.resolve(&mut enc, all.len() as u32);
        let mut step = Recorded { commands: [(enc.finish(), Some(0))].into(), submitted: 0, spans: None, slot, key, readback: rb, exchange: false };
        let submission = self.submit_part(&mut step, Vec::new()).expect("one command buffer");
        timer.submitted(submission);
        self.collect()?;
        let times = timer.read(&dev, all.len() as u32)?;
        Ok(all.into_iter().zip(times).map(|(d, (t0, t1))| (d, (t1 - t0).max(0.0))).collect())
    }

    /// Submits a recorded step. Its gradient readback must not be mapped any more: the
    /// previous step's exchange has to be finished first.
    pub fn submit_step(&mut self, mut r: Recorded) {
        while self.submit_part(&mut r, Vec::new()).is_some() {}
    }

    /// Submits the next command buffer of `r`, behind `before` in the same submission
    /// (one submission is cheaper than two on the path between steps).
    fn submit_part(&mut self, r: &mut Recorded, before: Vec<wgpu::CommandBuffer>) -> Option<wgpu::SubmissionIndex> {
        let (commands, bucket) = r.commands.pop_front()?;
        let first = r.submitted == 0;
        r.submitted += 1;
        let submission = self.device.queue().submit(before.into_iter().chain([commands]));
        if let (Some(spans), Some(set)) = (self.spans.as_mut(), r.spans) {
            // An exchanged step's spans are resolved after its optimizer pass.
            if r.exchange {
                self.spans_pending = Some(set);
            } else if r.commands.is_empty() {
                spans.submitted(set, submission.clone());
            }
        }
        if first {
            self.ring.submitted(r.slot, submission.clone());
            self.in_flight.push_back((r.key, r.readback));
        }
        if bucket == Some(0)
            && let Some(plan) = self.plans.get_mut(&r.key)
        {
            plan.readbacks[r.readback].request(submission.clone());
        }
        if let (true, Some(b)) = (r.exchange, bucket) {
            self.buckets[b].readback.request(submission.clone());
        }
        Some(submission)
    }

    /// Waits for this replica's gradients of the last step and returns them (f32 words).
    pub fn take_gradients(&mut self, out: &mut Vec<f32>) -> Result<()> {
        out.clear();
        out.resize((self.grads.bytes() / 4) as usize, 0.0);
        for b in &mut self.buckets {
            b.readback.take(self.device.wgpu(), (b.hi - b.lo) as usize, &mut self.scratch)?;
            out[(b.lo / 4) as usize..(b.hi / 4) as usize].copy_from_slice(bytemuck::cast_slice(&self.scratch));
        }
        Ok(())
    }

    /// Gradient buckets, last layers first.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Waits until gradient bucket `b` of the last step is readable in place; on a GPU
    /// spinning, as the next step waits for it.
    pub fn wait_bucket(&mut self, b: usize) -> Result<()> {
        let bucket = &mut self.buckets[b];
        bucket.readback.wait(self.device.wgpu(), !self.device.is_software())?;
        bucket.mapped = true;
        Ok(())
    }

    /// Bucket `b`'s MAP_READ buffer and the byte range of the flat gradients it holds.
    pub fn bucket(&self, b: usize) -> (&wgpu::Buffer, u64, u64) {
        let bucket = &self.buckets[b];
        (&bucket.readback.buffer, bucket.lo, bucket.hi)
    }

    /// Takes a staging slot per gradient bucket for the summed gradients and records each
    /// bucket's upload and optimizer update ahead, so that only unmapping and submitting is
    /// left once its sum is written: write bucket b's sum into `apply_staging(b)` (byte 0 is
    /// the bucket's first byte), then call `apply_bucket(b)`. Bucket 0 also uploads this
    /// step's optimizer inputs (again: a replica that sat out a short batch has not seen them).
    pub fn begin_apply(&mut self, hyper: Hyper) -> Result<()> {
        let dev = self.device.clone();
        let set = self.spans_pending.filter(|_| self.spans.is_some());
        let count = self.buckets.len();
        for (b, bucket) in self.buckets.iter_mut().enumerate() {
            let slot = bucket.staging.acquire(dev.wgpu())?;
            let bytes = bucket.hi - bucket.lo;
            let mut copies = vec![(0, bytes, self.grads.buffer(), self.grads.offset() + bucket.lo)];
            if b == 0 {
                bucket
                    .staging
                    .slot_buffer(slot)
                    .get_mapped_range_mut(bytes..bytes + 16)
                    .map_err(|e| crate::Error::Gpu(format!("staging map: {e:?}")))?
                    .copy_from_slice(bytemuck::bytes_of(&hyper));
                copies.push((bytes, 16, self.hyper.buffer(), self.hyper.offset()));
            }
            let mut enc = dev.wgpu().create_command_encoder(&Default::default());
            bucket.staging.encode(slot, &mut enc, &copies);
            let mut spans = self.spans.as_mut().zip(set);
            if self.scaling.is_none() && self.clipping.is_none() {
                let mut pass = GpuSpans::begin(&mut spans, || format!("optimizer, bucket {b}"), &mut enc);
                for d in &bucket.update {
                    d.encode(&mut pass);
                }
            } else if b + 1 == count {
                // Every replica skips a step or none does, and every replica clips by the same
                // factor: the search, the norm and the update wait for the last bucket of the
                // summed gradients, which every replica receives alike.
                let mut pass = GpuSpans::begin(&mut spans, || "optimizer".to_string(), &mut enc);
                for d in whole_update(&self.update, &self.scaling, &self.clipping) {
                    d.encode(&mut pass);
                }
            }
            if b + 1 == count && let Some((s, i)) = &spans {
                s.resolve(*i, &mut enc);
            }
            bucket.prepared = Some((slot, enc.finish()));
        }
        Ok(())
    }

    /// The upload buffer of gradient bucket `b`, prepared by `begin_apply`: the summed gradients
    /// are written into it before `apply_bucket`.
    pub(crate) fn apply_staging(&self, b: usize) -> &wgpu::Buffer {
        let bucket = &self.buckets[b];
        bucket.staging.slot_buffer(bucket.prepared.as_ref().expect("begin_apply prepares every bucket").0)
    }

    /// Submits bucket `b`'s upload and optimizer update, together with any held back
    /// before; with `hold` keeps it for the next call instead (the device cannot run it
    /// before the rest of the backward anyway, and one submission costs the device less
    /// than several). The updates of the early buckets queue up behind the backward while
    /// the host still sums the later ones, so only the last bucket's is left between two
    /// steps. With `next`, the first command buffer of the next step goes in the same
    /// submission.
    pub fn apply_bucket(&mut self, b: usize, hold: bool, next: Option<&mut Recorded>) -> Result<()> {
        let last = b + 1 == self.buckets.len();
        let bucket = &mut self.buckets[b];
        if bucket.mapped {
            bucket.readback.finish();
            bucket.mapped = false;
        }
        let (slot, commands) = bucket.prepared.take().expect("begin_apply prepares every bucket");
        bucket.staging.release(slot);
        self.held.push((b, slot, commands));
        if hold && next.is_none() {
            return Ok(());
        }
        let (owners, commands): (Vec<(usize, usize)>, Vec<wgpu::CommandBuffer>) = self.held.drain(..).map(|(b, slot, c)| ((b, slot), c)).unzip();
        // Taken before `next` goes out: submitting it makes its own set the pending one.
        let resolved = if last { self.spans_pending.take() } else { None };
        let submission = match next {
            Some(r) => self.submit_part(r, commands).expect("a recorded step has commands"),
            None => self.device.queue().submit(commands),
        };
        if let (Some(i), Some(s)) = (resolved, self.spans.as_mut()) {
            s.submitted(i, submission.clone());
        }
        for (b, slot) in owners {
            self.buckets[b].staging.submitted(slot, submission.clone());
        }
        Ok(())
    }

    /// Makes the plans built from now on keep their forward's tensors, so that the last
    /// step's activations can be read back ([`Replica::records`]); drops the plans built
    /// without them. Costs device memory: for checking, not for training.
    pub fn keep_records(&mut self, keep: bool) {
        if self.keep_records != keep {
            self.keep_records = keep;
            self.drop_plans();
        }
    }

    /// Drops the compiled plans with no step in flight, so the next steps record new ones:
    /// plans bake in what the model held when they were built (the normalisation, whether
    /// records are kept).
    pub fn drop_plans(&mut self) {
        let in_flight: Vec<PlanKey> = self.in_flight.iter().map(|f| f.0).collect();
        self.plans.retain(|k, _| in_flight.contains(k));
    }

    /// The forward records of the last training step of `n` samples whose loss gradient was
    /// scaled by `scale`, if its plan kept them.
    pub fn records(&self, n: usize, scale: f32) -> Option<&[crate::model::plan::Record]> {
        self.plans.get(&(n, true, scale.to_bits())).map(|p| p.records.as_slice()).filter(|r| !r.is_empty())
    }

    /// The recorded dispatches (forward, loss, backward) of the training step of `n` samples
    /// whose loss gradient was scaled by `scale`, if that plan is built: what a test reads
    /// each kernel's storage from.
    pub fn training_dispatches(&self, n: usize, scale: f32) -> Option<&[Dispatch]> {
        self.plans.get(&(n, true, scale.to_bits())).map(|p| p.dispatches.as_slice())
    }

    /// Steps submitted whose outputs have not been collected.
    pub fn pending(&self) -> usize {
        self.in_flight.len()
    }

    /// Waits for the oldest submitted step and returns its per-sample loss and ranks.
    pub fn collect(&mut self) -> Result<Option<StepOutput>> {
        let Some((key, rb)) = self.in_flight.pop_front() else { return Ok(None) };
        let n = key.0;
        let plan = self.plans.get_mut(&key).expect("plans in flight are kept");
        plan.readbacks[rb].take(self.device.wgpu(), 8 * n, &mut self.scratch)?;
        let (loss, rank) = self.scratch.split_at(4 * n);
        self.device.check()?;
        Ok(Some(StepOutput { loss: bytemuck::cast_slice(loss).to_vec(), rank: bytemuck::cast_slice(rank).to_vec() }))
    }

    /// Runs an inference forward of `batch` and returns its logits `[n, classes]`.
    pub fn logits(&mut self, def: &Definition, batch: &HostBatch) -> Result<Vec<f32>> {
        self.run_step(def, batch, false, NO_UPDATE, 0, 1.0, false)?;
        self.collect()?;
        let logits = self.plans[&(batch.len(), false, 1f32.to_bits())].logits.clone();
        self.device.read(&logits)
    }

    /// The loss scale and the steps skipped so far, under `mixed_float16`. Waits for the
    /// device.
    pub fn loss_scale(&self) -> Result<Option<(f32, u64)>> {
        Ok(self.read_loss_scale_state()?.map(|words| (f32::from_bits(words[0]), words[3] as u64)))
    }
    /// The dynamic loss scale's state words (scale bits, growth counter, skip flag, skipped
    /// steps) under `mixed_float16`, waiting for the device; `None` in float32.
    pub fn read_loss_scale_state(&self) -> Result<Option<Vec<u32>>> {
        self.shared.loss_scale.as_ref().map(|state| self.device.read_u32(state)).transpose()
    }
    /// Overwrites the loss scale's state with another replica's words, where there is one.
    pub fn write_loss_scale_state(&self, words: &[u32]) -> Result<()> {
        match &self.shared.loss_scale {
            Some(state) => self.device.write(state, words),
            None => Ok(()),
        }
    }
    /// Reads the parameters back in the flat layout, waiting for the device.
    pub fn read_params(&self) -> Result<Vec<f32>> {
        self.device.read(&self.params)
    }
    /// Reads the state tensors back in the flat layout, waiting for the device.
    pub fn read_states(&self) -> Result<Vec<f32>> {
        self.device.read(&self.states)
    }
    /// Reads the optimizer's state tensors back (momentum; Adam's two moments), waiting for the
    /// device.
    pub fn read_optimizer_state(&self) -> Result<Vec<Vec<f32>>> {
        self.opt_state.iter().map(|t| self.device.read(t)).collect()
    }
    /// Overwrites the parameters with `params`, in the flat layout.
    pub fn write_params(&self, params: &[f32]) -> Result<()> {
        self.device.write(&self.params, params)
    }
    /// Sets the per-class weights of the training loss (ones: unweighted).
    pub fn write_class_weights(&self, weights: &[f32]) -> Result<()> {
        self.device.write(&self.shared.class_weights, weights)
    }
    /// Overwrites the state tensors with `states`, in the flat layout.
    pub fn write_states(&self, states: &[f32]) -> Result<()> {
        self.device.write(&self.states, states)
    }
    /// Overwrites the optimizer's state tensors, in the order
    /// [`read_optimizer_state`](Self::read_optimizer_state) returns them.
    pub fn write_optimizer_state(&self, state: &[Vec<f32>]) -> Result<()> {
        for (t, v) in self.opt_state.iter().zip(state) {
            self.device.write(t, v)?;
        }
        Ok(())
    }
    /// Optimizer state tensors: 0 for SGD without momentum, 1 with it, 2 for Adam.
    pub(crate) fn optimizer_state_len(&self) -> usize {
        self.opt_state.len()
    }
}

/// The compiled plan for `n` samples, built on first use. A short last batch gets its own
/// plan, so BatchNorm's statistics always cover exactly the samples present.
#[allow(clippy::too_many_arguments)]
fn plan_for<'p>(
    plans: &'p mut HashMap<PlanKey, Plan>,
    in_flight: &std::collections::VecDeque<(PlanKey, usize)>,
    def: &Definition,
    device: &Arc<Device>,
    shared: &Shared,
    (n, training, scale): (usize, bool, f32),
    keep_records: bool,
) -> Result<&'p mut Plan> {
    let key = (n, training, scale.to_bits());
    if !plans.contains_key(&key) {
        // Keep the full-batch plan and at most one short-batch plan of each kind.
        if plans.keys().filter(|k| k.1 == training).count() >= 2 {
            let idle = plans.keys().filter(|k| k.1 == training && !in_flight.iter().any(|f| f.0 == **k)).copied();
            if let Some(k) = idle.min_by_key(|k| k.0) {
                plans.remove(&k);
            }
        }
        plans.insert(key, Plan::build(def, device, shared, n, training, scale, keep_records)?);
    }
    Ok(plans.get_mut(&key).unwrap())
}

/// The loss-scale dispatches of a replica under `mixed_float16`.
struct Scaling {
    find: Dispatch,
    update: Dispatch,
}

/// Gradient clipping by global norm: the scratch of its partial sums (owned here, not
/// pooled: the dispatches keep reading it) and its two dispatches.
struct Clipping {
    _partials: Tensor,
    dispatches: Vec<Dispatch>,
}

/// The whole-model update in order: under `mixed_float16` the search for non-finite
/// gradients first; with `global_clipnorm` the gradient's norm and clip factor; the optimizer
/// (which skips a flagged step); under `mixed_float16` the scale's update last.
fn whole_update<'a>(optimizer: &'a [Dispatch], scaling: &'a Option<Scaling>, clipping: &'a Option<Clipping>) -> Vec<&'a Dispatch> {
    let mut all = Vec::new();
    all.extend(scaling.as_ref().map(|s| &s.find));
    all.extend(clipping.iter().flat_map(|c| &c.dispatches));
    all.extend(optimizer);
    all.extend(scaling.as_ref().map(|s| &s.update));
    all
}

/// A contiguous byte range of the flat gradients, written by the backward of `layers`.
struct Bucket {
    /// Layer indices, last layer first.
    layers: Vec<usize>,
    lo: u64,
    hi: u64,
    readback: Readback,
    mapped: bool,
    /// MAP_WRITE slots for the summed gradients (+ the optimizer inputs in bucket 0).
    staging: StagingRing,
    /// The acquired staging slot and the recorded upload + update, between `begin_apply`
    /// and `apply_bucket`.
    prepared: Option<(usize, wgpu::CommandBuffer)>,
    /// The optimizer over this bucket's trainable parameters.
    update: Vec<Dispatch>,
}

/// Bytes of gradients per bucket: large enough that a submission per bucket costs little,
/// small enough that the last bucket, which cannot overlap anything, is short: 8 MB, or a
/// quarter of a small model's gradients (at least 64 KB).
/// `CONVOY_BUCKET_BYTES` overrides it (tests use tiny buckets to exercise the cuts).
pub(crate) fn bucket_bytes(total: u64) -> u64 {
    let default = (total / 4).clamp(64 << 10, 8 << 20);
    std::env::var("CONVOY_BUCKET_BYTES").ok().and_then(|v| v.parse().ok()).filter(|&b| b > 0).unwrap_or(default)
}

/// Groups layers, last first, into buckets of about `bucket_bytes`, each with the optimizer
/// `update_of(first, end)` over its elements. Parameters are laid out by layer, so a run of
/// layers owns a contiguous range.
fn buckets(device: &wgpu::Device, layout: &crate::model::layout::Layout, update_of: impl Fn(usize, usize) -> Result<Vec<Dispatch>>) -> Result<Vec<Bucket>> {
    use crate::model::layout::ALIGN;
    let target = bucket_bytes(4 * layout.param_len as u64);
    let mut ranges: Vec<(Vec<usize>, u64, u64)> = Vec::new();
    let (mut layers, mut lo, mut hi) = (Vec::new(), u64::MAX, 0u64);
    for layer in (0..layout.per_layer.len()).rev() {
        let (p0, np, _, _) = layout.per_layer[layer];
        layers.push(layer);
        for e in &layout.params[p0..p0 + np] {
            lo = lo.min(4 * e.offset as u64);
            hi = hi.max(4 * (e.offset + e.spec.len().div_ceil(ALIGN) * ALIGN) as u64);
        }
        if hi > lo && hi - lo >= target {
            ranges.push((std::mem::take(&mut layers), lo, hi));
            (lo, hi) = (u64::MAX, 0);
        }
    }
    if hi > lo {
        ranges.push((layers, lo, hi));
    } else if let Some(last) = ranges.last_mut() {
        last.0.extend(layers);
    } else {
        ranges.push((layers, 0, 4 * layout.param_len as u64));
    }
    ranges
        .into_iter()
        .map(|(layers, lo, hi)| {
            Ok(Bucket {
                layers,
                lo,
                hi,
                readback: Readback::new(device, hi - lo),
                mapped: false,
                staging: StagingRing::new(device, 2, hi - lo + 16),
                prepared: None,
                update: update_of((lo / 4) as usize, (hi / 4) as usize)?,
            })
        })
        .collect()
}

/// Dispatches of the forward's lead command buffer (see `record_step`): the input and the
/// first layer or two, enough device work to cover the submission of the rest.
const LEAD_DISPATCHES: usize = 8;

/// Where each bucket's command buffer ends in a plan's dispatch list: just before the
/// backward of the next bucket's first recorded layer (the last one ends the list).
fn bucket_cuts(buckets: &[Bucket], marks: &[(usize, usize)], len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = buckets[1..]
        .iter()
        .map(|next| marks.iter().find(|(layer, _)| next.layers.contains(layer)).map(|m| m.1).unwrap_or(len))
        .collect();
    cuts.push(len);
    // Monotone even if a bucket recorded nothing.
    for i in 1..cuts.len() {
        cuts[i] = cuts[i].max(cuts[i - 1]);
    }
    cuts
}
