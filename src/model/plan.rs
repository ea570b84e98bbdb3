//! A compiled step: every buffer and dispatch of one replica's forward (+ loss + backward)
//! for one batch size, recorded once and replayed every step.

use std::sync::Arc;

use crate::device::Readback;
use crate::kernels::{elementwise, image, loss, Dispatch};
use crate::layers::{Graph, Layer, Saved, Weights};
use crate::model::layout::{inbound_of, Layout};
use crate::model::losses::Loss;
use crate::model::{DTypePolicy, LossScale};
use crate::kernels::loss_scale;
use crate::{DType, Device, Result, Tensor};

/// What every replica shares about the model: layers, layout, input and loss.
pub struct Definition {
    /// The per-sample input shape, `[height, width, channels]`.
    pub input_shape: Vec<usize>,
    /// The layers, in order (topological order for a functional model).
    pub layers: Vec<Box<dyn Layer>>,
    /// The nodes each layer reads, for a functional model (see
    /// [`crate::model::layout::inbound_of`]); empty for a `Sequential` stack.
    pub inbound: Vec<Vec<usize>>,
    /// Layers whose ReLU was fused into the layer before them: recorded as nothing.
    pub fused: Vec<bool>,
    /// Where each parameter and state tensor sits in the flat tensors.
    pub layout: Layout,
    /// The loss the model was compiled with.
    pub loss: Loss,
    /// Keras' `label_smoothing` of the cross-entropy (0: one-hot targets).
    pub label_smoothing: f32,
    /// Output classes: the last layer's width.
    pub classes: usize,
    /// Per-channel normalisation of the u8 input: `(x / 255 - mean) / std`.
    pub mean: Vec<f32>,
    /// Per-channel divisor of the normalisation, on the 0..1 scale of `x / 255`.
    pub std: Vec<f32>,
    /// The precision policy and, under `mixed_float16`, its loss scaling.
    pub policy: DTypePolicy,
    /// Loss scaling under `mixed_float16` (unused under `float32`).
    pub loss_scale: LossScale,
    /// Layers set `trainable = false` (Keras): their parameters get no update (and no weight
    /// decay), and their BatchNormalizations run in inference mode. Compiled into the
    /// replicas, so a change takes effect at `compile`; saved with the model.
    pub frozen: std::collections::BTreeSet<usize>,
}

impl Definition {
    /// Fuses each ReLU into the layer before it where that layer can apply it (BatchNorm,
    /// a residual join), here and inside composite layers: the plan records a fused ReLU as
    /// nothing.
    ///
    /// In a graph, a ReLU fuses only into a layer whose output nothing else reads: the fused
    /// layer no longer exposes the value before the ReLU.
    pub fn fuse_relus(&mut self) {
        let n = self.layers.len();
        self.fused = vec![false; n];
        for layer in self.layers.iter_mut() {
            layer.fuse_inner();
        }
        let inbound: Vec<Vec<usize>> = (0..n).map(|i| inbound_of(&self.inbound, i)).collect();
        let mut readers = vec![0usize; n + 1];
        inbound.iter().flatten().for_each(|&j| readers[j] += 1);
        for i in 0..n {
            if let [j] = inbound[i][..]
                && j > 0
                && readers[j] == 1
                && self.layers[i].is_plain_relu()
                && !self.fused[j - 1]
                && self.layers[j - 1].fuse_relu()
            {
                self.fused[i] = true;
            }
        }
    }

    /// The layout of the model as it stands (layers, input and inbound lists), checked.
    pub fn build_layout(&self) -> Result<Layout> {
        Layout::graph(&self.input_shape, &self.layers, &self.inbound)
    }
}

/// The tensors of one replica that every plan of it shares.
pub struct Shared {
    /// Each parameter tensor, a view into one flat buffer in the layout's order.
    pub params: Vec<Tensor>,
    /// Each gradient, a view into one flat buffer parallel to `params` (what the replicas
    /// exchange).
    pub grads: Vec<Tensor>,
    /// Each state tensor (moving statistics), a view into one flat buffer.
    pub states: Vec<Tensor>,
    /// u32 `[4]`: word 0 is the step counter (dropout masks, augmentation draws), word 1
    /// the replica's first sample in the step's whole batch (augmentation draws).
    pub step: Tensor,
    /// Under `mixed_float16`, the loss-scale state (`kernels::loss_scale`): the loss
    /// gradient is multiplied by its scale.
    pub loss_scale: Option<Tensor>,
    /// f32 `[classes]`: Keras' `class_weight` of the running `fit` (ones otherwise), read by
    /// training steps' cross-entropy.
    pub class_weights: Tensor,
    /// The policy the replica was compiled with (the definition's may have changed since:
    /// it takes effect at the next `compile`).
    pub policy: DTypePolicy,
    /// The layers frozen when the replica was compiled (`set_trainable` takes effect at the
    /// next `compile`, for the update and for BatchNorm's mode alike).
    pub frozen: std::collections::BTreeSet<usize>,
}

/// One replica's recorded step for one batch size, training or inference: its input, output and
/// loss tensors and every dispatch, recorded once and replayed each step.
pub struct Plan {
    /// Samples per step on this replica.
    pub batch: usize,
    /// Whether the plan trains (backward and gradients recorded) or only infers.
    pub training: bool,
    /// u8 `[batch, h, w, c]` and u32 `[batch]`, filled through the staging ring.
    pub images: Tensor,
    /// u32 `[batch]`: the labels.
    pub labels: Tensor,
    /// f32 one-hot `[batch, classes]` (mean squared error only).
    pub targets: Option<Tensor>,
    /// f32 `[batch, classes]`: the last layer's output.
    pub logits: Tensor,
    /// f32 `[batch]`: each sample's loss.
    pub loss: Tensor,
    /// u32 `[batch]`: each label's rank among its sample's logits (0: the largest), for the
    /// accuracy metrics.
    pub rank: Tensor,
    /// Forward, loss and (when training) backward, in order.
    pub dispatches: Vec<Dispatch>,
    /// Two readbacks of `[loss | rank]`, alternated so step k's is read while k+1 runs.
    pub readbacks: [Readback; 2],
    /// Which of `readbacks` the next step uses.
    pub next_readback: usize,
    /// Index into `dispatches` where each layer's backward starts, last layer first, for
    /// splitting the backward into gradient buckets.
    pub backward_marks: Vec<(usize, usize)>,
    /// Each recorded layer's index, input and saved tensors, kept only for inspection
    /// (`convoy check` reads the device's ReLU masks and max-pool choices from them). Left
    /// empty otherwise: holding them would keep every activation out of the device pool,
    /// which the plans of other batch sizes share.
    pub records: Vec<Record>,
}

/// One recorded layer of a plan's forward: its index in the model, its input, and what its
/// forward saved (output, extra tensors, nested layers' records).
pub type Record = (usize, Tensor, Saved);

impl Plan {
    /// Records the step of `def` for `batch` samples on `device`. `scale` multiplies the
    /// loss gradient: one over the global batch, so summing replicas' gradients averages.
    /// With `keep_records`, the forward's tensors stay readable after each step ([`Plan::records`]).
    ///
    /// A step that does not fit the device's memory is an error naming the largest
    /// per-device batch that does, found by building smaller plans.
    pub fn build(def: &Definition, device: &Arc<Device>, shared: &Shared, batch: usize, training: bool, scale: f32, keep_records: bool) -> Result<Plan> {
        check_bindings(def, device, batch)?;
        let oom = match Self::build_scoped(def, device, shared, batch, training, scale, keep_records)? {
            Ok(plan) => return Ok(plan),
            Err(oom) => oom,
        };
        // Halve, then bisect between what fitted and what did not, in whole groups of 8.
        let (mut fits, mut fails) = (0, batch);
        for _ in 0..8 {
            let mid = if fits == 0 { fails / 2 } else { (fits + fails) / 2 };
            let mid = if mid >= 8 { mid / 8 * 8 } else { mid };
            if mid == 0 || mid <= fits || mid >= fails {
                break;
            }
            match Self::build_scoped(def, device, shared, mid, training, scale, false)? {
                Ok(_) => fits = mid,
                Err(_) => fails = mid,
            }
        }
        device.release_idle();
        let advice = if fits == 0 { format!("not even a batch of {fails} per device fits") } else { format!("the largest per-device batch that fits is about {fits} (tried: {fits} fits, {fails} does not)") };
        crate::bail!(Gpu, "out of GPU memory on {}: the training step for a batch of {batch} per device does not fit ({oom}); {advice}", device.name())
    }

    /// [`Plan::build`]'s recording inside an out-of-memory error scope: `Ok(Err(message))`
    /// when the device ran out of memory, with the partial plan's buffers freed. Errors that
    /// follow from a buffer that could not be created (binding it) are part of that failure.
    fn build_scoped(def: &Definition, device: &Arc<Device>, shared: &Shared, batch: usize, training: bool, scale: f32, keep_records: bool) -> Result<std::result::Result<Plan, String>> {
        let oom = device.wgpu().push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = device.wgpu().push_error_scope(wgpu::ErrorFilter::Validation);
        let plan = Self::record(def, device, shared, batch, training, scale, keep_records);
        let invalid = pollster::block_on(invalid.pop());
        match pollster::block_on(oom.pop()) {
            Some(e) => {
                drop(plan);
                device.release_idle();
                Ok(Err(e.to_string().lines().next().unwrap_or("out of memory").to_string()))
            }
            None => match invalid {
                Some(e) => crate::bail!(Gpu, "recording the step for a batch of {batch} on {}: {e}", device.name()),
                None => plan.map(Ok),
            },
        }
    }

    fn record(def: &Definition, device: &Arc<Device>, shared: &Shared, batch: usize, training: bool, scale: f32, keep_records: bool) -> Result<Plan> {
        let [h, w, c] = [def.input_shape[0], def.input_shape[1], def.input_shape[2]];
        let images = device.alloc(&[batch, h, w, c], DType::U8)?;
        let labels = device.alloc(&[batch], DType::U32)?;
        let mut g = Graph::new(device, batch, training, shared.step.clone());
        g.policy = shared.policy;
        // Under mixed_float16 an image whose channels are not whole quads (RGB) becomes f16
        // padded by zero channels where every layer reading it takes that (the stem
        // convolution): its products then gather quads, and it writes f16 (resnet18 @224 on
        // an H100: the stem's forward 1.71 -> 0.99 ms, its weight gradient 2.70 -> 1.45, and
        // the cast of its f32 output gone).
        let quad = c.next_multiple_of(4);
        let readers: Vec<usize> = (0..def.layers.len()).filter(|&i| def.layout.inbound[i].contains(&0)).collect();
        let pad = g.policy.is_mixed() && quad != c && !readers.is_empty() && readers.iter().all(|&i| !def.fused[i] && def.layers[i].supports_mixed_precision() && def.layers[i].reads_padded_channels());
        let x = if pad { device.alloc(&[batch, h, w, quad], DType::F16)? } else { g.activation(&def.input_shape)? };
        g.push(image::normalize_u8(device, &images, &def.mean, &def.std, &x)?);

        // One slot per node (0: the normalised input, i + 1: layer i's output); every layer's
        // inputs are recorded before it, as the layout's order guarantees.
        let n = def.layers.len();
        let mut slots: Vec<Option<Tensor>> = vec![None; n + 1];
        slots[0] = Some(x);
        let mut records: Vec<Record> = Vec::new();
        let mut inputs: Vec<Vec<Tensor>> = Vec::new();
        // Layers whose output only a training BatchNormalization reads: they may compute its
        // statistics as they write it (Graph::want_statistics).
        let mut readers = vec![0usize; n + 1];
        def.layout.inbound.iter().flatten().for_each(|&j| readers[j] += 1);
        let feeds_statistics = |i: usize| {
            training
                && i + 1 < n
                && !def.fused[i + 1]
                && def.layout.inbound[i + 1] == [i + 1]
                && readers[i + 1] == 1
                && def.layers[i + 1].takes_statistics()
                && !shared.frozen.contains(&(i + 1))
        };
        for (i, layer) in def.layers.iter().enumerate() {
            let xs: Vec<Tensor> = def.layout.inbound[i].iter().map(|&j| slots[j].clone().expect("the layout orders every input before its reader")).collect();
            if def.fused[i] {
                // The layer before wrote relu(y) as its output.
                slots[i + 1] = Some(xs[0].clone());
                continue;
            }
            g.layer_index = i;
            g.frozen = shared.frozen.contains(&i);
            let xs = xs.iter().map(|x| g.input_for(layer.as_ref(), x)).collect::<Result<Vec<_>>>()?;
            let saved = g.feeding_statistics(feeds_statistics(i), |g| g.under_policy_of(layer.as_ref(), |g| layer.forward_all(g, &xs, &weights(def, shared, i))))?;
            slots[i + 1] = Some(saved.output.clone());
            records.push((i, xs[0].clone(), saved));
            inputs.push(xs);
        }
        // The loss reads f32 logits.
        let logits = g.cast_to(&slots[n].clone().expect("the last layer was recorded"), DType::F32)?;
        let loss = device.alloc(&[batch], DType::F32)?;
        let rank = device.alloc(&[batch], DType::U32)?;
        let dlogits = device.alloc(logits.shape(), DType::F32)?;
        let mut targets = None;
        match def.loss {
            Loss::SparseCategoricalCrossentropy => {
                // Evaluation is unweighted, as Keras' `evaluate` without sample weights.
                let weights = training.then_some(&shared.class_weights);
                g.push(loss::softmax_cross_entropy_weighted(device, &logits, &labels, weights, scale, def.label_smoothing, &loss, &dlogits, &rank)?);
            }
            Loss::MeanSquaredError => {
                // Cross-entropy still runs for the label ranks the metrics need; its loss and
                // gradient go to scratch tensors.
                let (scratch_loss, scratch_grad) = (device.alloc(&[batch], DType::F32)?, device.alloc(logits.shape(), DType::F32)?);
                g.push(loss::softmax_cross_entropy(device, &logits, &labels, scale, &scratch_loss, &scratch_grad, &rank)?);
                let t = device.alloc(logits.shape(), DType::F32)?;
                // Keras' class_weight in training, by each sample's label (its one-hot target's class).
                g.push(match training {
                    true => loss::mean_squared_error_weighted(device, &logits, &t, &labels, &shared.class_weights, scale, &loss, &dlogits)?,
                    false => loss::mean_squared_error(device, &logits, &t, scale, &loss, &dlogits)?,
                });
                targets = Some(t);
            }
        }

        let mut backward_marks = Vec::new();
        if training && let Some(state) = &shared.loss_scale {
            g.push(loss_scale::scale_gradient(device, &dlogits, state)?);
        }
        if training {
            // The kernel flips the input gradients read, all in one dispatch.
            g.record_flips()?;
            // The gradient of each node, summed over its readers as they are recorded (last
            // layer first); a fused ReLU hands its gradient to the layer that applied it.
            // Each gradient is stored as its node's activation (`Graph::gradient`): a
            // layer's input gradient is cast to its node's storage where the layer read a
            // cast copy, before the readers' gradients are summed.
            let mut grads: Vec<Option<Tensor>> = vec![None; n + 1];
            let storage = |j: usize| slots[j].as_ref().map_or(DType::F32, |t| t.dtype());
            grads[n] = Some(g.cast_to(&dlogits, storage(n))?);
            // Whether a node's gradient is used: some layer on a path from the input to it
            // has parameters. The input's never is, nor that of a Flatten or a pool in
            // front of the first weights (an MLP's first Dense behind Flatten computed the
            // images' gradient: a third of its step).
            let mut wanted = vec![false; n + 1];
            for i in 0..n {
                wanted[i + 1] = def.layout.per_layer[i].1 > 0 || def.layout.inbound[i].iter().any(|&j| wanted[j]);
            }
            // Nodes whose gradient the reader already masked by the fused ReLU that wrote them.
            let mut masked = vec![false; n + 1];
            let mut recorded = records.iter().zip(&inputs).rev().peekable();
            for i in (0..n).rev() {
                let from = &def.layout.inbound[i];
                if def.fused[i] {
                    grads[from[0]] = grads[i + 1].take();
                    masked[from[0]] = masked[i + 1];
                    continue;
                }
                let Some(((_, _, saved), xs)) = recorded.next_if(|((r, _, _), _)| *r == i) else { continue };
                if !wanted[i + 1] {
                    continue;
                }
                let Some(dy) = grads[i + 1].take() else {
                    crate::bail!(Config, "layer {i} ({}): its output reaches no loss", def.layout.layer_names[i]);
                };
                backward_marks.push((i, g.dispatches.len()));
                g.layer_index = i;
                g.frozen = shared.frozen.contains(&i);
                let need_dx = from.iter().any(|&j| wanted[j]);
                let layer = def.layers[i].as_ref();
                // The mask of a fused ReLU before a layer that sums its input gradient moves
                // into that sum, where the layer is the only reader of the ReLU's output and
                // reads it as stored. The ReLU is a fused layer of its own after the one
                // that applies it (a residual block's join): its output is its input.
                let j = from.first().copied().unwrap_or(0);
                let applied = (j > 0 && def.fused[j - 1] && readers[j] == 1).then(|| def.layout.inbound[j - 1][0]).filter(|&k| k > 0 && readers[k] == 1);
                let premask = need_dx && from.len() == 1 && layer.masks_dx_by_input() && applied.is_some_and(|k| !def.fused[k - 1] && def.layers[k - 1].masks_dy_by_output()) && xs[0].dtype() == storage(j);
                (g.dy_masked, g.mask_dx) = (masked[i + 1], premask);
                masked[j] = premask;
                let dxs = g.under_policy_of(layer, |g| layer.backward_all(g, xs, saved, &dy, &weights(def, shared, i), need_dx))?;
                (g.dy_masked, g.mask_dx) = (false, false);
                for (&j, dx) in from.iter().zip(dxs) {
                    let (true, Some(dx)) = (wanted[j], dx) else { continue };
                    // A node's only gradient reaches a layer that takes either storage as it is.
                    let as_is = j > 0 && !def.fused[j - 1] && def.layers[j - 1].takes_f16_gradient() && readers[j] == 1;
                    let dx = if as_is { dx } else { g.cast_to(&dx, storage(j))? };
                    grads[j] = Some(match grads[j].take() {
                        None => dx,
                        Some(prev) => {
                            let sum = g.gradient(&prev)?;
                            g.push(elementwise::add(device, &prev, &dx, &sum)?);
                            sum
                        }
                    });
                }
            }
        }
        g.flush_deferred();
        // The gradient buckets are cut at the marks (`Replica`): a layer's weight gradient,
        // deferred past the next layer's first kernel (Graph::defer), must lie before the
        // mark of the layer after it.
        backward_marks.iter_mut().for_each(|(_, at)| *at = g.settled_after(*at));
        let bytes = 8 * batch as u64;
        Ok(Plan {
            batch,
            training,
            images,
            labels,
            targets,
            logits,
            loss,
            rank,
            dispatches: g.dispatches,
            readbacks: [Readback::new(device.wgpu(), bytes), Readback::new(device.wgpu(), bytes)],
            next_readback: 0,
            backward_marks,
            records: if keep_records { records } else { Vec::new() },
        })
    }

    /// Encodes the copies of this step's loss and ranks into readback buffer `which`.
    pub fn encode_readback(&self, encoder: &mut wgpu::CommandEncoder, which: usize) {
        let rb = &self.readbacks[which].buffer;
        let n = 4 * self.batch as u64;
        encoder.copy_buffer_to_buffer(self.loss.buffer(), self.loss.offset(), rb, 0, n);
        encoder.copy_buffer_to_buffer(self.rank.buffer(), self.rank.offset(), rb, n, n);
    }
}

/// Refuses a batch whose largest activation (the normalised input or a layer's output,
/// `[batch, ..]` f32) would not fit one storage binding of `device`, naming the layer and the
/// largest per-device batch that fits, before anything is allocated for the step.
fn check_bindings(def: &Definition, device: &Device, batch: usize) -> Result<()> {
    let max = device.limits().max_storage_buffer_binding_size;
    let input = ("the normalised input".to_string(), &def.input_shape);
    let outputs = def.layout.layer_names.iter().map(|n| format!("layer {n}")).zip(&def.layout.shapes);
    let Some((name, shape, per_sample)) = std::iter::once(input)
        .chain(outputs)
        .map(|(name, shape)| (name, shape, 4 * shape.iter().map(|&d| d as u64).product::<u64>()))
        .max_by_key(|(_, _, bytes)| *bytes)
    else {
        return Ok(());
    };
    if per_sample.saturating_mul(batch as u64) > max {
        let fits = max / per_sample.max(1);
        crate::bail!(
            Shape,
            "a batch of {batch} per device needs {} bytes for {name}'s output [{batch}, {}], more than {}'s largest storage binding ({max} bytes): the largest per-device batch that fits is {fits}",
            per_sample.saturating_mul(batch as u64),
            shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            device.name()
        );
    }
    Ok(())
}

fn weights<'a>(def: &Definition, shared: &'a Shared, layer: usize) -> Weights<'a> {
    let (p0, np, s0, ns) = def.layout.per_layer[layer];
    Weights { params: &shared.params[p0..p0 + np], grads: &shared.grads[p0..p0 + np], states: &shared.states[s0..s0 + ns] }
}
