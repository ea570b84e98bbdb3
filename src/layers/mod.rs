//! Layers: what each contributes to a compiled step.
//!
//! A layer describes its parameters and output shape from its input shape (built lazily, as
//! in Keras: the model gives the input shape once), and records its forward and backward
//! kernels into a [`Graph`] when a step is compiled. Shapes exclude the batch dimension.

mod activation;
mod batch_norm;
mod conv2d;
mod dense;
mod depthwise_conv2d;
mod dropout;
mod flatten;
mod layer_norm;
mod merge;
mod pooling;
mod preprocessing;
mod residual;

pub use activation::{Activation, ActivationFn, LeakyReLU, ReLU, Softmax};
pub use batch_norm::BatchNormalization;
pub use conv2d::{padding_from_config, padding_to_config, Conv2D};
pub use dense::Dense;
pub use depthwise_conv2d::{DepthwiseConv2D, Pair};
pub use dropout::Dropout;
pub use flatten::Flatten;
pub use layer_norm::LayerNormalization;
pub use merge::{Add, Concatenate};
pub use pooling::{AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, MaxPool2D};
pub use preprocessing::{FlipMode, Normalization, RandomCrop, RandomFlip, RandomTranslation, Rescaling};
pub(crate) use preprocessing::{factor_from_config, seed_from_config};
pub use residual::Residual;

pub use crate::kernels::augment::FillMode;
pub use crate::kernels::conv2d::Padding;

use crate::kernels::Dispatch;
use crate::{Device, Result, Tensor};

/// How a parameter starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Every element 0 (biases, BatchNorm's `beta` and `moving_mean`).
    Zeros,
    /// Every element 1 (BatchNorm's `gamma` and `moving_variance`).
    Ones,
    /// Keras' default for kernels: U(±sqrt(6 / (fan_in + fan_out))).
    GlorotUniform {
        /// Inputs feeding each output (`kh * kw * in` for a convolution kernel).
        fan_in: usize,
        /// Outputs each input feeds (`kh * kw * filters` for a convolution kernel).
        fan_out: usize,
    },
    /// He et al.'s normal init, sqrt(2 / fan_in), the usual choice before ReLU.
    HeNormal {
        /// Inputs feeding each output (`kh * kw * in` for a convolution kernel).
        fan_in: usize,
    },
}

/// A parameter (trainable) or state tensor (BatchNorm's moving statistics) of a layer.
#[derive(Clone, Debug)]
pub struct ParamSpec {
    /// Keras' name: `kernel`, `bias`, `gamma`, `beta`, `moving_mean`, `moving_variance`.
    pub name: &'static str,
    /// The tensor's shape (`[kh, kw, in, filters]` for a convolution kernel, `[in, units]` for a
    /// dense one).
    pub shape: Vec<usize>,
    /// How the tensor starts.
    pub init: Init,
    /// Whether weight decay applies (kernels yes; biases and BatchNorm's scale and shift no).
    pub decay: bool,
}

impl ParamSpec {
    /// A tensor spec; `decay` says whether weight decay applies to it.
    pub fn new(name: &'static str, shape: Vec<usize>, init: Init, decay: bool) -> Self {
        ParamSpec { name, shape, init, decay }
    }
    /// Elements: the product of the shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A layer's slice of the model's flat parameter, gradient and state tensors, in the order
/// of its `params()` and `states()`.
pub struct Weights<'a> {
    /// The layer's parameters, one tensor per [`ParamSpec`] of its `params()`.
    pub params: &'a [Tensor],
    /// The parameters' gradients, in the same order; empty when no gradients are recorded
    /// (inference).
    pub grads: &'a [Tensor],
    /// The layer's state tensors, one per [`ParamSpec`] of its `states()`.
    pub states: &'a [Tensor],
}

impl<'a> Weights<'a> {
    /// The sub-range belonging to a nested layer that owns `np` params and `ns` states
    /// starting at (`p0`, `s0`).
    pub fn slice(&self, p0: usize, np: usize, s0: usize, ns: usize) -> Weights<'a> {
        Weights {
            params: &self.params[p0..p0 + np],
            grads: if self.grads.is_empty() { &[] } else { &self.grads[p0..p0 + np] },
            states: &self.states[s0..s0 + ns],
        }
    }
}

/// What a layer's forward keeps for its backward: its output and any extra tensors.
#[derive(Clone, Debug)]
pub struct Saved {
    /// The layer's output, the next layer's input.
    pub output: Tensor,
    /// Tensors the backward needs besides the output (MaxPool2D's argmax, BatchNorm's batch
    /// statistics).
    pub extra: Vec<Tensor>,
    /// Nested layers' records (the residual block).
    pub inner: Vec<(Tensor, Saved)>,
}

impl Saved {
    /// A record holding the output only.
    pub fn output(output: Tensor) -> Self {
        Saved { output, extra: Vec::new(), inner: Vec::new() }
    }
}

/// The recording context of a step: the device, the batch size, and the dispatch list the
/// layers append to, in execution order.
pub struct Graph<'d> {
    /// The device the kernels run on.
    pub device: &'d Device,
    /// Samples per step on this device.
    pub batch: usize,
    /// Whether the step trains (Dropout drops, BatchNorm uses batch statistics unless
    /// frozen) or infers.
    pub training: bool,
    /// u32 `[4]`: the step counter (word 0; dropout and augmentation draw from it) and the
    /// index of this replica's first sample in the step's whole batch (word 1), rewritten
    /// every step.
    pub step: Tensor,
    /// The recorded kernels, in execution order.
    pub dispatches: Vec<Dispatch>,
    /// The layer being recorded and the number of layers before it, for names in errors
    /// and per-layer seeds.
    pub layer_index: usize,
    /// The model's precision policy: how convolutions and dense layers multiply.
    pub policy: crate::model::DTypePolicy,
    /// The layer being recorded is frozen (Keras' `trainable = False`): a BatchNormalization
    /// in it (nested ones too) normalises with its moving statistics and leaves them alone in
    /// training as well, as in Keras 3.
    pub frozen: bool,
    /// Set by the plan for one backward: the layer's output gradient arrives already masked
    /// by its fused ReLU (the reader masked it, [`Layer::masks_dx_by_input`]), so a layer
    /// that [`Layer::masks_dy_by_output`] skips its own mask.
    pub dy_masked: bool,
    /// Set by the plan for one backward: the layer's input came from a layer that masks its
    /// gradient by a fused ReLU of its own, and the layer masks the input gradient it writes
    /// by its input's sign instead, in its last pass.
    pub mask_dx: bool,
    /// Set by the plan (or a composite layer) while it records a layer whose output only a
    /// training BatchNormalization reads ([`Layer::takes_statistics`]): a layer that can
    /// compute that output's statistics as it writes it (a convolution whose product runs
    /// on an ALU kernel, not the tensor cores) leaves them in [`Graph::statistics`].
    pub want_statistics: bool,
    /// The statistics a layer computed of its output for the BatchNormalization after it:
    /// that output and its partials. Cleared by the recorder once the next layer is recorded.
    pub statistics: Option<(Tensor, crate::kernels::batchnorm::Partials)>,
    /// Kernels put off by [`Graph::defer`] until the next one is pushed, and the tensors
    /// they read, held (not read) to keep them leased until then.
    deferred: Vec<Dispatch>,
    deferred_reads: Vec<Tensor>,
    /// Where in `dispatches` the kernels now deferred were put off.
    deferred_at: usize,
    /// Each deferred group recorded: where it was put off and where its kernels end.
    deferred_ends: Vec<(usize, usize)>,
    /// Kernels the forward asked to have flipped for their input gradients
    /// ([`Graph::flip_ahead`]), and once [`Graph::record_flips`] wrote them, each kernel with
    /// its flip (views of one buffer, held here).
    flip_requests: Vec<(crate::kernels::conv2d::Conv2dGeometry, Tensor)>,
    flips: Vec<(Tensor, Tensor)>,
}

impl<'d> Graph<'d> {
    /// An empty recording for `batch` samples on `device`; `step` is the step-counter tensor.
    pub fn new(device: &'d Device, batch: usize, training: bool, step: Tensor) -> Self {
        Graph {
            device,
            batch,
            training,
            step,
            dispatches: Vec::new(),
            layer_index: 0,
            policy: Default::default(),
            frozen: false,
            dy_masked: false,
            mask_dx: false,
            want_statistics: false,
            statistics: None,
            deferred: Vec::new(),
            deferred_reads: Vec::new(),
            deferred_at: 0,
            deferred_ends: Vec::new(),
            flip_requests: Vec::new(),
            flips: Vec::new(),
        }
    }
    /// Asks for `w`, the kernel of the convolution `geom`, flipped as its input gradient reads
    /// it ([`crate::kernels::conv2d::reads_flipped`]): written with every other kernel asked
    /// for in one dispatch at the start of the backward ([`Graph::record_flips`]), where each
    /// input gradient flipped its own kernel first, a dispatch each (ResNet-50: 49 of them,
    /// 0.28 ms of a 35 ms step on the H200). A kernel asked for twice (a layer called twice)
    /// is flipped once.
    pub fn flip_ahead(&mut self, geom: &crate::kernels::conv2d::Conv2dGeometry, w: &Tensor) {
        if !self.flip_requests.iter().any(|(_, k)| same_view(k, w)) {
            self.flip_requests.push((*geom, w.clone()));
        }
    }
    /// Records the flips [`Graph::flip_ahead`] asked for, into one buffer: the plan calls it
    /// once, after the forward and before the first input gradient.
    pub fn record_flips(&mut self) -> Result<()> {
        if self.flip_requests.is_empty() {
            return Ok(());
        }
        // Each flip at a 256-byte boundary, where a view may start.
        let slot = |w: &Tensor| w.len().div_ceil(64) * 64;
        let total: usize = self.flip_requests.iter().map(|(_, w)| slot(w)).sum();
        let arena = self.device.alloc(&[total], crate::DType::F32)?;
        let mut at = 0;
        for (_, w) in &self.flip_requests {
            self.flips.push((w.clone(), arena.view(at, &[w.len()])?));
            at += slot(w);
        }
        let flips: Vec<_> = self.flip_requests.iter().zip(&self.flips).map(|((geom, w), (_, flipped))| crate::kernels::conv2d::KernelFlip { geom, w, flipped }).collect();
        let dispatches = crate::kernels::conv2d::flip_kernels(self.device, &flips)?;
        self.extend(dispatches);
        self.flip_requests.clear();
        Ok(())
    }
    /// The flip [`Graph::record_flips`] wrote of kernel `w`, if one was asked for.
    pub fn flipped(&self, w: &Tensor) -> Option<Tensor> {
        self.flips.iter().find(|(k, _)| same_view(k, w)).map(|(_, f)| f.clone())
    }
    /// Records a layer through `record` with [`Graph::want_statistics`] set to `feeds` (its
    /// output goes only to a training BatchNormalization); then the request is withdrawn, and
    /// statistics left by a layer that did not feed one are dropped, so that they reach the
    /// next layer alone. The plan and composite layers record each of their layers so.
    pub fn feeding_statistics<T>(&mut self, feeds: bool, record: impl FnOnce(&mut Self) -> T) -> T {
        self.want_statistics = feeds;
        let out = record(self);
        self.want_statistics = false;
        if !feeds {
            self.statistics = None;
        }
        out
    }
    /// The statistics of `x` that the layer writing it computed ([`Graph::statistics`]), taken.
    pub fn take_statistics(&mut self, x: &Tensor) -> Option<crate::kernels::batchnorm::Partials> {
        match self.statistics.take() {
            Some((of, partials)) if same_view(&of, x) => Some(partials),
            other => {
                self.statistics = other;
                None
            }
        }
    }
    /// How the policy has products computed.
    pub fn gemm(&self) -> crate::kernels::gemm::GemmOptions {
        crate::kernels::gemm::GemmOptions { mixed: self.policy.is_mixed(), ..Default::default() }
    }
    /// A batch-sized activation tensor: `[batch, ..shape]`.
    pub fn activation(&self, shape: &[usize]) -> Result<Tensor> {
        self.batched(shape, crate::DType::F32)
    }
    fn batched(&self, shape: &[usize], dtype: crate::DType) -> Result<Tensor> {
        let mut full = vec![self.batch];
        full.extend_from_slice(shape);
        self.device.alloc(&full, dtype)
    }
    /// The storage of an activation with `channels` channels written by a layer that
    /// [stores f16](Layer::stores_f16): f16 under `mixed_float16` where the channels are
    /// whole quads (the f16 kernels store quads only), f32 otherwise.
    pub fn storage(&self, channels: usize) -> crate::DType {
        if self.policy.is_mixed() && channels.is_multiple_of(4) { crate::DType::F16 } else { crate::DType::F32 }
    }
    /// A batch-sized activation tensor `[batch, ..shape]` as a layer that [stores
    /// f16](Layer::stores_f16) writes its output: see [`Graph::storage`].
    pub fn stored(&self, shape: &[usize]) -> Result<Tensor> {
        self.batched(shape, self.storage(shape.last().copied().unwrap_or(0)))
    }
    /// A tensor of x's shape stored as `x` is: the output of a layer that [keeps its input's
    /// storage](Layer::keeps_input_storage).
    pub fn like(&self, x: &Tensor) -> Result<Tensor> {
        self.device.alloc(x.shape(), x.dtype())
    }
    /// The gradient of `x`, stored as `x` is: under `mixed_float16` a gradient is f16 where
    /// its activation is (the loss scale keeps it inside f16's range, and an overflow
    /// becomes infinite, which the scale's check sees), f32 elsewhere.
    pub fn gradient(&self, x: &Tensor) -> Result<Tensor> {
        self.like(x)
    }
    /// `x` in the storage `layer` reads: f16 where the layer [stores f16](Layer::stores_f16)
    /// (and follows the mixed policy) and x's channels are whole quads, f32 otherwise; a
    /// cast is recorded where x is stored the other way. The cast's gradient is the identity,
    /// cast back to x's storage by whoever sums it (the plan, a composite layer).
    pub fn input_for(&mut self, layer: &dyn Layer, x: &Tensor) -> Result<Tensor> {
        if layer.supports_mixed_precision() && layer.keeps_input_storage() {
            return Ok(x.clone());
        }
        let channels = x.shape().last().copied().unwrap_or(0);
        let f16 = layer.supports_mixed_precision() && layer.stores_f16();
        let want = if f16 { self.storage(channels) } else { crate::DType::F32 };
        self.cast_to(x, want)
    }
    /// `x` stored as `dtype` (F32 or F16), cast by a recorded dispatch where it is not.
    pub fn cast_to(&mut self, x: &Tensor, dtype: crate::DType) -> Result<Tensor> {
        if x.dtype() == dtype {
            return Ok(x.clone());
        }
        let out = self.device.alloc(x.shape(), dtype)?;
        let cast = match dtype {
            crate::DType::F16 => crate::kernels::cast::to_f16(self.device, x, &out)?,
            _ => crate::kernels::cast::from_f16(self.device, x, &out)?,
        };
        self.push(cast);
        Ok(out)
    }
    /// Appends a kernel, tagged with the layer being recorded (for per-layer profiles).
    pub fn push(&mut self, mut d: Dispatch) {
        d.layer = Some(self.layer_index);
        self.dispatches.push(d);
        self.flush_deferred();
    }
    /// Records `d` (tagged with the layer being recorded) after the next kernel pushed
    /// instead of now: kernels whose result nothing recorded next reads, such as a weight
    /// gradient, which the next layer's first pass may then run beside. The GPU overlaps two
    /// dispatches where no barrier stands between them (wgpu puts one only where a buffer
    /// one writes the other uses), and the first pass of a layer's backward (a
    /// BatchNormalization's gradient sums) is a latency-bound read that leaves most of the
    /// GPU idle. On the H200 in mixed precision, the convolutions' weight gradients so
    /// deferred took resnet50 from 3,569 / 3,579 to 3,606 / 3,598 images/s and
    /// resnet18_cifar from 30,280 / 30,187 to 30,446 / 30,434; deferred past two or three
    /// kernels (the sums and the input gradient), less or nothing
    /// (benches/results/2026-12-02f, calls 4 and 5).
    ///
    /// `reads` stay leased until `d` is recorded: a tensor dropped before would give its
    /// buffer back to the pool, for a kernel recorded in between to overwrite. Whoever takes
    /// [`Graph::dispatches`] calls [`Graph::flush_deferred`] first, and cuts them (as the
    /// gradient buckets do) where [`Graph::settled_after`] says.
    pub fn defer(&mut self, d: Vec<Dispatch>, reads: Vec<Tensor>) {
        if self.deferred.is_empty() {
            self.deferred_at = self.dispatches.len();
        }
        for mut d in d {
            d.layer = Some(self.layer_index);
            self.deferred.push(d);
        }
        self.deferred_reads.extend(reads);
    }
    /// Records the kernels [`Graph::defer`] put off, now.
    pub fn flush_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        self.dispatches.append(&mut self.deferred);
        self.deferred_reads.clear();
        self.deferred_ends.push((self.deferred_at, self.dispatches.len()));
    }
    /// Where kernels recorded up to `at` in [`Graph::dispatches`] are all done: `at`, or
    /// past the kernels deferred by then (so that everything a layer recorded before `at`
    /// lies before it, its deferred kernels too).
    pub fn settled_after(&self, at: usize) -> usize {
        self.deferred_ends.iter().filter(|&&(put_off, _)| put_off <= at).map(|&(_, end)| end).fold(at, usize::max)
    }
    /// Records `layer`'s kernels with `record` under the policy the layer follows: the
    /// model's when it [supports mixed precision](Layer::supports_mixed_precision), f32
    /// otherwise, so a custom layer that never declared it keeps f32 products under
    /// `mixed_float16`.
    pub fn under_policy_of<T>(&mut self, layer: &dyn Layer, record: impl FnOnce(&mut Self) -> T) -> T {
        let outer = self.policy;
        if !layer.supports_mixed_precision() {
            self.policy = crate::model::DTypePolicy::Float32;
        }
        let out = record(self);
        self.policy = outer;
        out
    }
    /// Appends kernels in order, each tagged with the layer being recorded.
    pub fn extend(&mut self, d: Vec<Dispatch>) {
        for d in d {
            self.push(d);
        }
    }
}

/// A layer of a `Sequential` model.
pub trait Layer: Send + Sync + std::fmt::Debug {
    /// Keras' class name (`Conv2D`, `Dense`, ...), used in summaries and saved models.
    fn class_name(&self) -> &'static str;
    /// The per-sample output shape for a per-sample input shape, or a shape error naming both.
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>>;
    /// The trainable parameters a layer needs for a per-sample input shape (Keras' `build`); none
    /// by default.
    fn params(&self, _input: &[usize]) -> Vec<ParamSpec> {
        Vec::new()
    }
    /// The non-trainable state tensors (BatchNorm's moving statistics) for a per-sample input
    /// shape; none by default.
    fn states(&self, _input: &[usize]) -> Vec<ParamSpec> {
        Vec::new()
    }
    /// The constructor arguments, for saving the architecture (Keras' `get_config`).
    fn config(&self) -> serde_json::Value;
    /// Records the forward kernels reading `x` (`[batch, ..input]`).
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved>;
    /// Records the backward kernels: writes the parameter gradients into `w.grads` and, when
    /// `need_dx`, returns the gradient with respect to `x`.
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>>;
    /// Floating-point operations of one sample's forward pass (for summaries and benchmarks).
    fn flops(&self, _input: &[usize]) -> u64 {
        0
    }
    /// Whether the layer follows a `mixed_float16` policy ([`Graph::gemm`] then asks for f16
    /// operands). Layers that do not say so run in f32 under every policy, as the
    /// extension contract promises a custom layer; convoy's convolutions and dense layers do.
    fn supports_mixed_precision(&self) -> bool {
        false
    }
    /// Under `mixed_float16`, whether the layer reads and writes its activations as f16
    /// ([`crate::DType::F16`]) where their channels are whole quads (see
    /// [`Graph::input_for`], [`Graph::stored`]): its kernels then take f16 inputs and
    /// outputs, and their gradients stored the same way ([`Graph::gradient`]). A layer that
    /// does not say so reads and writes f32, the model casting between the two; convoy's
    /// convolutions without groups (their output f16 only from an f16 input),
    /// BatchNormalization, the residual join, Add and the spatial poolings do.
    fn stores_f16(&self) -> bool {
        false
    }
    /// Under `mixed_float16`, whether the layer reads its input as it is stored, f32 or f16,
    /// and writes its output and its input's gradient the same way ([`Graph::like`]): the
    /// element-wise activations, which a cast would only cost (f16 between f16 layers,
    /// f32 between f32 ones such as Dense).
    fn keeps_input_storage(&self) -> bool {
        false
    }
    /// Whether the layer's backward takes its output's gradient stored either way (f32 or
    /// f16) whatever its output is stored as: the plan then hands it an f16 gradient as it
    /// was written rather than casting it to the output's f32 (the stem convolution, whose
    /// products read either).
    fn takes_f16_gradient(&self) -> bool {
        false
    }
    /// Under `mixed_float16`, whether the layer takes an input whose channels are padded by
    /// zeros past those its parameters were built for: the plan then normalises a model's
    /// image input (RGB) into f16 padded to a whole quad, which the f16 kernels read four
    /// channels at a time, when every layer reading it says so (a convolution without groups,
    /// typically the stem).
    fn reads_padded_channels(&self) -> bool {
        false
    }
    /// Whether the layer normalises its input by the batch's statistics when training
    /// (BatchNormalization): the layer writing that input may compute them as it stores it
    /// ([`Graph::want_statistics`]).
    fn takes_statistics(&self) -> bool {
        false
    }
    /// Whether this is a plain `max(x, 0)` ReLU, the only kind a BatchNorm or residual join
    /// applies in its own pass (see [`Layer::fuse_relu`]); a capped or leaky one is not.
    fn is_plain_relu(&self) -> bool {
        false
    }
    /// Set by the model when a plain ReLU directly follows, so the layer can fuse it.
    fn fuse_relu(&mut self) -> bool {
        false
    }
    /// Called by the model at compile so that a composite layer fuses the ReLUs inside it
    /// as the model does at the top level.
    fn fuse_inner(&mut self) {}
    /// Whether the backward starts with a pass of its own that masks the output gradient by
    /// a fused ReLU's output (a residual block's join), which it skips under
    /// [`Graph::dy_masked`].
    fn masks_dy_by_output(&self) -> bool {
        false
    }
    /// Whether the backward can mask the input gradient it writes by its input's sign in its
    /// last pass (a residual block's gradient sum), as [`Graph::mask_dx`] asks: the mask of
    /// the layer before that [`Layer::masks_dy_by_output`], one pass saved.
    fn masks_dx_by_input(&self) -> bool {
        false
    }
    /// As the last layer of a residual block's main chain, writes the block's output itself:
    /// `self(x) + addend` into `out`, ReLU'd if `relu`, in one pass where the layer can
    /// (BatchNormalization: the normalize and the join in one pass over the output),
    /// returning the layer's record, whose backward then takes the join's gradient. `None`
    /// where it cannot: the block runs the layer and the join apart.
    fn forward_joined(&self, _g: &mut Graph, _x: &Tensor, _w: &Weights, _addend: &Tensor, _relu: bool, _out: &Tensor) -> Result<Option<Saved>> {
        Ok(None)
    }
    /// As the first layer of a residual block's main chain, the backward that finishes the
    /// block's input gradient itself: its own input gradient plus `join.d` (the shortcut's),
    /// masked by `join.y` (the block's input, a ReLU's output), as the block's gradient sum
    /// would (Conv2D: in the store of its input-gradient product, one pass over three tensors
    /// saved). `Some(dx)` where the layer can; `None`, having recorded nothing, where it
    /// cannot: the block runs the layer's backward and the sum apart.
    fn backward_joined(&self, _g: &mut Graph, _x: &Tensor, _saved: &Saved, _dy: &Tensor, _w: &Weights, _join: crate::kernels::conv2d::Join<'_>) -> Result<Option<Tensor>> {
        Ok(None)
    }
    /// The names of the layer's parameters (`states`: its moving statistics), in the order
    /// of `params()` / `states()`, as they follow the layer's name in a checkpoint: the
    /// spec's name for a plain layer (`kernel`), the sub-layer's Keras name before it for a
    /// composite one (`conv2d_1/kernel`), so that a person can map them to Keras or PyTorch.
    fn tensor_names(&self, input: &[usize], states: bool) -> Vec<String> {
        let specs = if states { self.states(input) } else { self.params(input) };
        specs.iter().map(|s| s.name.to_string()).collect()
    }

    /// Whether the layer joins several inputs (`Add`, `Concatenate`): a functional model
    /// calls it on two or more tensors, and the `*_of` / `*_all` methods below take them
    /// all. Every other layer takes one input, which those methods default to.
    fn is_merge(&self) -> bool {
        false
    }
    /// [`Layer::output_shape`] for the per-sample shapes of all the layer's inputs.
    fn output_shape_of(&self, inputs: &[Vec<usize>]) -> Result<Vec<usize>> {
        match inputs {
            [one] => self.output_shape(one),
            _ => crate::bail!(Shape, "{} takes one input, got {} ({inputs:?})", self.class_name(), inputs.len()),
        }
    }
    /// [`Layer::forward`] on all the layer's inputs, in the order they were given.
    fn forward_all(&self, g: &mut Graph, xs: &[Tensor], w: &Weights) -> Result<Saved> {
        match xs {
            [x] => self.forward(g, x, w),
            _ => crate::bail!(Shape, "{} takes one input, got {}", self.class_name(), xs.len()),
        }
    }
    /// [`Layer::backward`] on all the layer's inputs: the gradient with respect to each
    /// (`None` for all when `need_dx` is false).
    fn backward_all(&self, g: &mut Graph, xs: &[Tensor], saved: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Vec<Option<Tensor>>> {
        match xs {
            [x] => Ok(vec![self.backward(g, x, saved, dy, w, need_dx)?]),
            _ => crate::bail!(Shape, "{} takes one input, got {}", self.class_name(), xs.len()),
        }
    }
}

/// Whether two tensors are the same view: one buffer, one offset, one shape.
fn same_view(a: &Tensor, b: &Tensor) -> bool {
    a.same_storage(b) && a.offset() == b.offset() && a.shape() == b.shape()
}
