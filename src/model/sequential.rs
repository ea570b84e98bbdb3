//! `Sequential`: a stack of layers, compiled for a set of devices, trained with `fit`.

use std::sync::Arc;

use crate::layers::Layer;
use crate::model::layout::Layout;
use crate::model::losses::{Loss, Metric};
use crate::model::plan::Definition;
use crate::model::{DTypePolicy, LossScale};
use crate::model::profile::{KernelTime, Profile};
use crate::device::Timestamps;
use crate::optim::Optimizer;
use crate::kernels::optimizer::Hyper;
use crate::parallel::{GlobalBatch, Replica, ReplicaSet, StepOutput, StepTiming};
use crate::{bail, Device, Result};

/// A model's state on the host, in the flat layout: parameters, moving statistics, and the
/// optimizer's state tensors.
pub type HostWeights = (Vec<f32>, Vec<f32>, Vec<Vec<f32>>);

/// Everything `compile` fixes: the update rule, the loss and metrics, the devices.
pub struct Compiled {
    /// The update rule.
    pub optimizer: Optimizer,
    /// The metrics `fit` and `evaluate` report.
    pub metrics: Vec<Metric>,
    /// One replica of the model per device.
    pub replicas: ReplicaSet,
    /// Optimizer steps taken since `compile` (Keras' `optimizer.iterations`: Adam's bias
    /// correction and dropout masks use it).
    pub step: u64,
    /// Epochs trained, over every `fit` call and across save and load: a resumed run's
    /// `initial_epoch`; it also seeds each epoch's data order.
    pub epoch: usize,
    /// The rate callbacks set (`LearningRateScheduler`, `ReduceLROnPlateau`), or the last
    /// step's under the optimizer's own schedule.
    pub learning_rate: f32,
    /// Steps of an epoch of the running (or last) `fit`, for schedules counted in epochs.
    pub steps_per_epoch: usize,
    /// The seed of the initial weights.
    pub seed: u64,
    /// The largest batch a training step takes: the staging buffers hold that many samples.
    pub max_batch: usize,
}

impl Compiled {
    /// The learning rate of the next step: the optimizer's schedule at the global step, or,
    /// without one, the rate callbacks last set.
    pub(crate) fn next_rate(&self) -> f32 {
        if self.optimizer.learning_rate_schedule().is_constant() {
            self.learning_rate
        } else {
            self.optimizer.rate_at(self.step, self.steps_per_epoch)
        }
    }

    /// Refuses a training batch of `n` samples above `max_batch` before anything is staged,
    /// naming both (a staging buffer would otherwise refuse it mid-step).
    /// `what` names the batch in the message: "fit: batch_size".
    pub(crate) fn check_batch(&self, what: &str, n: usize) -> Result<()> {
        if n > self.max_batch {
            bail!(Config, "{what} {n} is above the max_batch {} the model was compiled with (its staging buffers hold that many samples); compile with max_batch: {n} or more", self.max_batch);
        }
        Ok(())
    }
}

/// A model (Keras' `Sequential`, or a functional graph built with [`Sequential::functional`]): its
/// definition, and once compiled, its replicas and training state.
pub struct Sequential {
    pub(crate) def: Definition,
    pub(crate) compiled: Option<Compiled>,
    /// Saved state waiting for `compile` (a loaded model): params, states, optimizer state.
    pub(crate) pending_weights: Option<HostWeights>,
    /// Set once the normalisation has been chosen: by the user, from data, loaded from a
    /// file, or by training with the defaults.
    pub(crate) normalization_fixed: bool,
    /// The name of each output class, from the data of the first `fit` (saved with the
    /// model, so `predict` can name what it sees); empty when unknown.
    pub(crate) class_names: Vec<String>,
}

/// `compile`'s arguments, with Keras' names and defaults: only the optimizer is required.
///
/// ```no_run
/// # use convoy::prelude::*;
/// # fn main() -> convoy::Result<()> {
/// # let mut model = Sequential::new(&[32, 32, 3]);
/// // Keras: model.compile(optimizer=SGD(0.1), loss=SparseCategoricalCrossentropy(label_smoothing=0.1),
/// //                      metrics=["accuracy"])
/// model.compile(CompileOptions::new(Optimizer::sgd(0.1)).label_smoothing(0.1))?;
/// # Ok(()) }
/// ```
pub struct CompileOptions {
    /// The update rule (Keras' `optimizer`), the only argument without a default.
    pub optimizer: Optimizer,
    /// Default: sparse categorical cross-entropy on the logits.
    pub loss: Loss,
    /// Default: `[Metric::Accuracy]`.
    pub metrics: Vec<Metric>,
    /// The devices to train on: the model is replicated on each, the batch split across them.
    /// Empty (the default): `device::open("all")`, every adapter that makes training faster.
    pub devices: Vec<Arc<Device>>,
    /// Seeds the initial weights. Default 0.
    pub seed: u64,
    /// The largest batch `fit` and `train_on_batch` will use (staging buffers are sized for
    /// it); `evaluate` and `predict` take larger batches in pieces of this size. Default 32,
    /// `fit`'s default `batch_size`.
    pub max_batch: usize,
    /// Keras' `label_smoothing` of the cross-entropy, in [0, 1]: the targets become
    /// `(1 - a) * onehot + a / classes`. Default 0. Mean squared error ignores it.
    pub label_smoothing: f32,
}

impl CompileOptions {
    /// `optimizer` with Keras' other defaults: sparse categorical cross-entropy, accuracy,
    /// every useful device, a batch of at most 32, no label smoothing.
    pub fn new(optimizer: Optimizer) -> Self {
        CompileOptions {
            optimizer,
            loss: Loss::SparseCategoricalCrossentropy,
            metrics: vec![Metric::Accuracy],
            devices: Vec::new(),
            seed: 0,
            max_batch: 32,
            label_smoothing: 0.0,
        }
    }
    /// The loss to minimise.
    pub fn loss(mut self, loss: Loss) -> Self {
        self.loss = loss;
        self
    }
    /// The metrics logged beside the loss.
    pub fn metrics(mut self, metrics: Vec<Metric>) -> Self {
        self.metrics = metrics;
        self
    }
    /// The devices to replicate the model on (see [`crate::device::open`]).
    pub fn devices(mut self, devices: Vec<Arc<Device>>) -> Self {
        self.devices = devices;
        self
    }
    /// The seed of the initial weights.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// The largest training batch.
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }
    /// Keras' `label_smoothing` (checked by `compile`: in [0, 1]).
    pub fn label_smoothing(mut self, label_smoothing: f32) -> Self {
        self.label_smoothing = label_smoothing;
        self
    }
}

impl Sequential {
    /// An empty model taking `(height, width, channels)` u8 images.
    pub fn new(input_shape: &[usize]) -> Self {
        Sequential {
            def: Definition {
                input_shape: input_shape.to_vec(),
                layers: Vec::new(),
                inbound: Vec::new(),
                fused: Vec::new(),
                layout: Layout::default(),
                loss: Loss::SparseCategoricalCrossentropy,
                label_smoothing: 0.0,
                classes: 0,
                mean: vec![0.5; input_shape.last().copied().unwrap_or(1)],
                std: vec![0.25; input_shape.last().copied().unwrap_or(1)],
                policy: Default::default(),
                loss_scale: Default::default(),
                frozen: Default::default(),
            },
            compiled: None,
            pending_weights: None,
            normalization_fixed: false,
            class_names: Vec::new(),
        }
    }

    /// Appends a layer (Keras' `model.add`); the model must be compiled again.
    pub fn add(&mut self, layer: impl Layer + 'static) -> &mut Self {
        self.add_boxed(Box::new(layer))
    }

    /// Appends a boxed layer, as built from a config or chosen at run time.
    pub fn add_boxed(&mut self, layer: Box<dyn Layer>) -> &mut Self {
        self.def.layers.push(layer);
        self.compiled = None;
        self
    }

    /// Keras' `layer.trainable = False` for layer `index` (counted from 0, as `layers()`, the
    /// topological order for a functional model): its parameters receive no update and no
    /// weight decay, and, as in Keras 3, a frozen BatchNormalization (or one inside a frozen
    /// residual block) runs in inference mode in training too: it normalises with its moving
    /// statistics, does not update them, and gets no gamma or beta gradient. As in Keras, it
    /// takes effect at the next `compile` (which keeps the trained weights). The flag is saved
    /// with the model (`"trainable": false` in the layer's config) and restored by `load`.
    pub fn set_trainable(&mut self, index: usize, trainable: bool) -> Result<()> {
        if index >= self.def.layers.len() {
            bail!(Config, "set_trainable: no layer {index} (the model has {} layers)", self.def.layers.len());
        }
        if trainable {
            self.def.frozen.remove(&index);
        } else {
            self.def.frozen.insert(index);
        }
        Ok(())
    }
    /// Whether layer `index`'s parameters are trained (see [`Sequential::set_trainable`]).
    pub fn is_trainable(&self, index: usize) -> bool {
        !self.def.frozen.contains(&index)
    }

    /// The per-sample input shape, `[height, width, channels]`.
    pub fn input_shape(&self) -> &[usize] {
        &self.def.input_shape
    }
    /// The layers, in order (topological order for a functional model).
    pub fn layers(&self) -> &[Box<dyn Layer>] {
        &self.def.layers
    }
    /// Whether `compile` has run since the last change to the layers.
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// The per-sample output shape, checking every layer against its input.
    pub fn output_shape(&self) -> Result<Vec<usize>> {
        Ok(self.def.build_layout()?.shapes.last().cloned().unwrap_or_else(|| self.def.input_shape.clone()))
    }

    /// Sets the per-channel normalisation applied on the GPU to u8 input:
    /// `(x / 255 - mean) / std`. It is the model's from then on: `fit` computes statistics
    /// from the data only for a model whose normalisation was never set (nor loaded, nor
    /// trained with). Steps recorded before (an `evaluate`, a `predict`) are recorded again.
    pub fn set_normalization(&mut self, mean: Vec<f32>, std: Vec<f32>) -> Result<()> {
        let c = *self.def.input_shape.last().unwrap_or(&0);
        if mean.len() != c || std.len() != c || std.iter().any(|s| *s <= 0.0 || !s.is_finite()) {
            bail!(Config, "normalization needs {c} means and {c} positive stds, got {mean:?} and {std:?}");
        }
        if let Some(compiled) = self.compiled.as_mut() {
            compiled.replicas.settle()?;
            for r in &mut compiled.replicas.replicas {
                r.drop_plans();
            }
        }
        self.def.mean = mean;
        self.def.std = std;
        self.normalization_fixed = true;
        Ok(())
    }
    /// Sets the precision policy (Keras' `keras.config.set_dtype_policy`, here per model):
    /// `compile` builds the model's steps with it, so a change takes effect at the next
    /// `compile`, which keeps the trained weights. Under `mixed_float16`, an adapter without
    /// cooperative matrices computes the same f16 products on its f32 units, with a notice.
    pub fn set_dtype_policy(&mut self, policy: DTypePolicy) {
        self.def.policy = policy;
    }
    /// The precision policy the next `compile` uses.
    pub fn dtype_policy(&self) -> DTypePolicy {
        self.def.policy
    }
    /// Sets the dynamic loss scaling of the `mixed_float16` policy (Keras'
    /// `LossScaleOptimizer` arguments); as the policy, it takes effect at the next `compile`.
    pub fn set_loss_scale(&mut self, loss_scale: LossScale) -> Result<()> {
        loss_scale.validate()?;
        self.def.loss_scale = loss_scale;
        Ok(())
    }
    /// The loss scale now and the steps skipped so far (for a non-finite gradient), read from
    /// the first device taking part; `None` unless the model was compiled under `mixed_float16`.
    pub fn loss_scale(&self) -> Result<Option<(f32, u64)>> {
        let Some(c) = self.compiled.as_ref() else { return Ok(None) };
        c.replicas.lead_replica().loss_scale()
    }
    /// The per-channel mean and std of the input normalisation.
    pub fn normalization(&self) -> (&[f32], &[f32]) {
        (&self.def.mean, &self.def.std)
    }

    /// The name of each output class, in label order: those of the data the model was first
    /// trained on (saved with it), or empty.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// Builds the layout, fuses ReLUs into the layers before them, allocates the weights on
    /// every device and prepares the optimizer. Plans are recorded on first use per batch size.
    ///
    /// Compiling a compiled model again keeps its weights and moving statistics, as Keras
    /// keeps a built model's: only the optimizer (which starts from zero state and step 0),
    /// the loss, the metrics and the devices change, so lowering the learning rate to
    /// fine-tune continues from the trained weights. The count of epochs trained is kept.
    pub fn compile(&mut self, mut opts: CompileOptions) -> Result<()> {
        opts.optimizer.validate()?;
        if !(0.0..=1.0).contains(&opts.label_smoothing) {
            bail!(Config, "label_smoothing must be in [0, 1], got {}", opts.label_smoothing);
        }
        if opts.devices.is_empty() {
            opts.devices = crate::device::open("all")?;
        }
        if self.def.input_shape.len() != 3 || self.def.input_shape.contains(&0) {
            bail!(Shape, "the model input must be (height, width, channels), got {:?}", self.def.input_shape);
        }
        if self.def.layers.is_empty() {
            bail!(Config, "the model has no layers");
        }
        let layout = self.def.build_layout()?;
        let out = layout.shapes.last().unwrap();
        if out.len() != 1 {
            bail!(Shape, "the last layer must output (classes,) logits, got {out:?}");
        }
        self.def.classes = out[0];
        self.def.loss = opts.loss;
        self.def.label_smoothing = opts.label_smoothing;
        self.def.fuse_relus();
        self.def.layout = layout;
        let seed = opts.seed;
        let trained = match self.compiled.as_mut() {
            Some(c) => {
                c.replicas.settle()?;
                c.replicas.sync_states()?;
                let r = c.replicas.lead_replica();
                Some((r.read_params()?, r.read_states()?, Vec::new()))
            }
            None => None,
        };
        let (params, states, opt_state) = match trained.or_else(|| self.pending_weights.take()) {
            Some(w) => w,
            None => {
                let (p, s) = self.def.layout.initial_values(seed);
                (p, s, Vec::new())
            }
        };
        let mut replicas = Vec::new();
        for device in &opts.devices {
            let r = Replica::new(device.clone(), &self.def, &opts.optimizer, &params, &states, opts.max_batch.max(1))?;
            if opt_state.len() == r.optimizer_state_len() {
                r.write_optimizer_state(&opt_state)?;
            }
            replicas.push(r);
        }
        if self.def.policy.is_mixed() {
            for d in opts.devices.iter().filter(|d| !d.has_coop16()) {
                eprintln!("notice: {} has no cooperative matrices: mixed_float16 computes its f16 products on the f32 units there (the same numbers, not faster)", d.name());
            }
        }
        let epoch = self.compiled.as_ref().map_or(0, |c| c.epoch);
        self.compiled = Some(Compiled {
            learning_rate: opts.optimizer.learning_rate(),
            steps_per_epoch: 1,
            optimizer: opts.optimizer,
            metrics: opts.metrics,
            replicas: ReplicaSet::new(replicas),
            step: 0,
            epoch,
            seed,
            max_batch: opts.max_batch.max(1),
        });
        Ok(())
    }

    pub(crate) fn compiled(&mut self) -> Result<&mut Compiled> {
        self.compiled.as_mut().ok_or_else(not_compiled)
    }

    /// [`Sequential::compiled`] for reading.
    pub(crate) fn compiled_ref(&self) -> Result<&Compiled> {
        self.compiled.as_ref().ok_or_else(not_compiled)
    }

    /// [`Sequential::train_on_batch`] without waiting: the step is submitted and this
    /// returns the host timing per replica, while the devices run it; its loss and ranks
    /// come from [`Sequential::collect`]. Any number of calls in a row is fine: past two
    /// steps in flight a call waits for the oldest (its outputs wait for `collect`). With
    /// several devices the weights are exchanged at the next step or `collect(0)`, so
    /// `get_weights` sees this step's update after `collect(0)`.
    ///
    /// Under `mpirun` (`crate::distributed`) every rank calls it with its own batch, all of
    /// one size: the step's global batch is theirs together.
    pub fn train_on_batch_async(&mut self, images: &[u8], labels: &[u32]) -> Result<Vec<StepTiming>> {
        let global = self.global_batch(labels.len());
        self.train_share_async(images, labels, global)
    }

    /// The global batch a batch of `n` given to every rank makes: the ranks' batches in
    /// rank order (the whole batch alone).
    pub(crate) fn global_batch(&self, n: usize) -> GlobalBatch {
        match crate::distributed::world() {
            Some(w) => GlobalBatch { first: w.rank() * n, size: w.size() * n },
            None => GlobalBatch::whole(n),
        }
    }

    /// [`Sequential::train_on_batch_async`] of a share of the global batch `global` (`fit`
    /// under `mpirun`): the share may be empty, as a short last batch leaves a rank.
    pub(crate) fn train_share_async(&mut self, images: &[u8], labels: &[u32], global: GlobalBatch) -> Result<Vec<StepTiming>> {
        let hyper = self.next_step("train_on_batch_async", images, labels, global.size > 0)?;
        let def = &self.def;
        let c = self.compiled.as_mut().expect("next_step checked it");
        let timing = c.replicas.train_step(def, images, labels, global, hyper, c.step as u32)?;
        c.step += 1;
        Ok(timing)
    }

    /// Checks a training batch (sizes, labels, a compiled model, `max_batch`) and returns
    /// the optimizer inputs of the step it will be. An empty batch passes only as a rank's
    /// empty share of a global one (`share`).
    pub(crate) fn next_step(&mut self, who: &str, images: &[u8], labels: &[u32], share: bool) -> Result<Hyper> {
        let sample: usize = self.def.input_shape.iter().product();
        if (labels.is_empty() && !share) || images.len() != labels.len() * sample {
            bail!(Shape, "{who}: {} image bytes for {} labels of {:?}", images.len(), labels.len(), self.def.input_shape);
        }
        if let Some(bad) = labels.iter().position(|&l| l as usize >= self.def.classes) {
            bail!(Shape, "label {} at index {bad} is out of range for {} classes", labels[bad], self.def.classes);
        }
        // Weights trained on the current normalisation belong to it.
        self.normalization_fixed = true;
        let c = self.compiled()?;
        if !labels.is_empty() {
            c.check_batch(&format!("{who}: a batch of"), labels.len())?;
        }
        c.learning_rate = c.next_rate();
        Hyper::for_step(c.learning_rate, &c.optimizer.kind(), c.step + 1)
    }

    /// The mean loss over a batch and the gradient of it with respect to every parameter
    /// (laid out as the flat parameter tensor), without updating anything but BatchNorm's
    /// moving statistics. Runs on the first device.
    pub fn compute_gradients(&mut self, images: &[u8], labels: &[u32]) -> Result<(f64, Vec<f32>)> {
        let def = &self.def;
        let c = self.compiled.as_mut().ok_or_else(not_compiled)?;
        c.check_batch("compute_gradients: a batch of", labels.len())?;
        c.replicas.settle()?;
        c.replicas.broadcast_weights()?;
        let lead = c.replicas.lead();
        let r = &mut c.replicas.replicas[lead];
        let batch = crate::parallel::HostBatch { images, labels, first: 0 };
        r.run_step(def, &batch, true, crate::parallel::NO_UPDATE, c.step as u32, 1.0 / labels.len() as f32, true)?;
        let mut grads = Vec::new();
        r.take_gradients(&mut grads)?;
        // Under mixed_float16 they carry the loss scale (no update has moved it since).
        if let Some((scale, _)) = r.loss_scale()? {
            grads.iter_mut().for_each(|g| *g /= scale);
        }
        let out = r.collect()?.expect("the step just submitted");
        let loss = out.loss.iter().map(|&l| l as f64).sum::<f64>() / labels.len() as f64;
        Ok((loss, grads))
    }

    /// Times every kernel of a training step on the first device with GPU timestamps:
    /// one warm-up step, then the average of `steps` (each step also updates the weights).
    pub fn profile(&mut self, images: &[u8], labels: &[u32], steps: usize) -> Result<Profile> {
        let def = &self.def;
        let c = self.compiled.as_mut().ok_or_else(not_compiled)?;
        c.check_batch("profile: a batch of", labels.len())?;
        c.replicas.settle()?;
        c.replicas.broadcast_weights()?;
        let lead = c.replicas.lead();
        let r = &mut c.replicas.replicas[lead];
        let mut timer = Timestamps::new(&r.device, 2048)
            .ok_or_else(|| crate::Error::Device(format!("{} cannot time kernels: it has no timestamp queries", r.device.name())))?;
        let batch = crate::parallel::HostBatch { images, labels, first: 0 };
        let mut runs = Vec::new();
        for s in 0..=steps.max(1) {
            // `next_rate` spelled out on the fields: the replica is borrowed.
            let lr = if c.optimizer.learning_rate_schedule().is_constant() { c.learning_rate } else { c.optimizer.rate_at(c.step, c.steps_per_epoch) };
            let hyper = Hyper::for_step(lr, &c.optimizer.kind(), c.step + 1)?;
            let timed = r.profile_step(def, &batch, hyper, c.step as u32, &mut timer)?;
            c.step += 1;
            if s > 0 {
                runs.push(timed.iter().map(|(d, ns)| KernelTime::from_dispatch(d, *ns)).collect::<Vec<_>>());
            }
        }
        Ok(Profile::average(labels.len(), &runs))
    }

    /// Overwrites the parameters (flat layout, as `get_weights` returns them) on every device.
    pub fn set_weights(&mut self, params: &[f32]) -> Result<()> {
        let c = self.compiled()?;
        for r in &c.replicas.replicas {
            r.write_params(params)?;
        }
        Ok(())
    }

    /// Collects the outputs of training steps until at most `keep` remain uncollected,
    /// waiting for those still in flight (`keep` 0 also finishes the last weight exchange);
    /// returns the outputs (one per replica that ran, per step) and the time waited. After
    /// [`Sequential::train_on_batch`] it hands out that step's per-sample outputs, once.
    pub fn collect(&mut self, keep: usize) -> Result<(Vec<StepOutput>, f64)> {
        let c = self.compiled()?;
        if keep == 0 {
            c.replicas.flush()?;
        }
        let (mut outs, mut waited) = (Vec::new(), 0.0);
        while c.replicas.pending() > keep {
            let (o, w) = c.replicas.collect()?.expect("a step is pending");
            outs.extend(o);
            waited += w.as_secs_f64();
        }
        Ok((outs, waited))
    }

    /// Host timing per replica accumulated since the last call.
    pub fn take_timing(&mut self) -> Vec<StepTiming> {
        self.compiled.as_mut().map(|c| c.replicas.take_timing()).unwrap_or_default()
    }

    /// Fixes how each batch is split across the devices (relative speeds, one per device)
    /// instead of measuring their speed before training. A speed of 0 leaves a device out:
    /// it gets no samples and no exchange, and takes the trained weights when the moving
    /// statistics are synced (end of epoch, evaluation, save, `get_weights`).
    pub fn set_device_speeds(&mut self, speeds: &[f64]) -> Result<()> {
        self.compiled()?.replicas.set_speeds(speeds)
    }

    /// How a batch of `n` samples is split across the devices now.
    pub fn device_shares(&self, n: usize) -> Vec<usize> {
        self.compiled.as_ref().map(|c| c.replicas.shares(n)).unwrap_or_default()
    }

    /// Epochs trained, over every `fit` call (and before a save, for a loaded model).
    pub fn compiled_epoch(&self) -> usize {
        self.compiled.as_ref().map(|c| c.epoch).unwrap_or(0)
    }

    /// Each device's own parameters and moving statistics, without averaging (replicas set
    /// aside first take the current ones): after a sync (end of epoch, `get_weights`) they are
    /// all the same.
    pub fn replica_weights(&self) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
        let c = self.compiled_ref()?;
        // Replicas set aside take the current values when used, as here.
        c.replicas.broadcast_weights()?;
        c.replicas.replicas.iter().map(|r| Ok((r.read_params()?, r.read_states()?))).collect()
    }

    /// Each device's own dynamic loss scale and skipped steps under `mixed_float16` (`None`
    /// in float32), replicas set aside first taking the current ones as in
    /// [`Sequential::replica_weights`]: the replicas agree on every skip and growth, so these
    /// are all the same.
    pub fn replica_loss_scales(&self) -> Result<Vec<Option<(f32, u64)>>> {
        let c = self.compiled_ref()?;
        c.replicas.broadcast_weights()?;
        c.replicas.replicas.iter().map(|r| r.loss_scale()).collect()
    }

    /// Whether the split across devices is decided: fixed by `set_device_speeds`, measured
    /// before the first step of a `fit`, or a single device.
    pub fn split_decided(&self) -> bool {
        self.compiled.as_ref().is_some_and(|c| c.replicas.split_decided())
    }

    /// The devices set aside for being too slow to help, each as it was said once on stderr
    /// (`llvmpipe: 700x slower than NVIDIA H100, left out (choose with --devices)`).
    pub fn devices_left_out(&self) -> Vec<String> {
        self.compiled.as_ref().map(|c| c.replicas.left_out.clone()).unwrap_or_default()
    }

    /// Tests only: adds `seconds` to every timed step of device `replica` when `fit`
    /// measures the devices, simulating a slow adapter of its own.
    #[doc(hidden)]
    pub fn simulate_slow_device(&mut self, replica: usize, seconds: f64) -> Result<()> {
        let c = self.compiled()?;
        if replica >= c.replicas.len() {
            bail!(Config, "no device {replica}");
        }
        c.replicas.calibration_delay[replica] = seconds;
        Ok(())
    }

    /// Training samples each device has processed.
    pub fn replica_samples(&self) -> Vec<usize> {
        self.compiled.as_ref().map(|c| c.replicas.samples.clone()).unwrap_or_default()
    }

    /// The layers, layout, loss and normalisation every replica shares.
    pub fn definition(&self) -> &Definition {
        &self.def
    }

    /// The devices the model is compiled for.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.compiled.as_ref().map(|c| c.replicas.replicas.iter().map(|r| r.device.clone()).collect()).unwrap_or_default()
    }

    /// Parameters, moving statistics and optimizer state, read from the first replica
    /// after averaging the statistics across replicas.
    pub fn get_weights(&self) -> Result<HostWeights> {
        if let Some(w) = &self.pending_weights {
            return Ok(w.clone());
        }
        let c = self.compiled.as_ref().ok_or_else(|| crate::Error::Config("the model has no weights yet: compile it first".into()))?;
        c.replicas.sync_states()?;
        // The lead replica is current; one set aside may not be (see `sync_states`).
        let r = c.replicas.lead_replica();
        Ok((r.read_params()?, r.read_states()?, r.read_optimizer_state()?))
    }
}

/// The error of every call that needs `compile` first.
pub(crate) fn not_compiled() -> crate::Error {
    crate::Error::Config("the model must be compiled first".into())
}
