//! Optimizer updates: SGD (momentum, Nesterov), Adam and AdamW over flat f32 tensors
//! (`shaders/optimizer.wgsl`).
//!
//! A model's parameters live in one flat tensor and its gradients in another of the same
//! length, so one dispatch updates every parameter. The optimizer state (SGD's velocity,
//! Adam's `m` and `v`) are flat tensors of that length too, zero-filled before the first step.
//!
//! Settings split in two: static ones (momentum, betas, epsilon, weight decay) are baked
//! into the dispatch's uniform; the ones that move during training (the learning rate of a
//! schedule, Adam's bias corrections) are read from a 4-element f32 tensor laid out as
//! [`Hyper`], which the training loop rewrites before each step, so a compiled step never
//! needs rebuilding.
//!
//! Formulas, as in PyTorch 2 (`torch.optim.SGD`, `Adam`, `AdamW`; `g` is the gradient,
//! `wd` the weight decay, `t` the step counted from 1):
//! - SGD: `g += wd·p; v = momentum·v + g; u = nesterov ? g + momentum·v : v; p -= lr·u`
//!   (with momentum 0 there is no velocity and `u = g`). Dampening is not supported (it is 0).
//!   With `decoupled` (Keras 3's SGD `weight_decay`): `p -= lr·wd·p` first, then the step
//!   without the L2 term, as AdamW does for Adam.
//! - Adam: `g += wd·p` (L2 decay in the gradient); `m = β1·m + (1-β1)·g;
//!   v = β2·v + (1-β2)·g²; p -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)`.
//! - AdamW (`decoupled`): `p -= lr·wd·p` first, then the Adam step without L2 decay.
//!
//! Clipping by global norm (Keras' `global_clipnorm`): [`clip_by_global_norm`] measures the
//! whole gradient on the device and writes `min(1, clipnorm / norm)` into `hyper`, and an
//! update built by [`update_clipped`] multiplies every gradient by it (before the decay's L2
//! term and the momentum), so the host never waits for the norm.
//!
//! Excluding parameters from weight decay (BatchNorm gamma/beta, biases) is done by
//! updating ranges separately: [`update`] on views ([`Tensor::view`], 64-element aligned) or
//! [`update_masked`], which takes the excluded element ranges directly. A model that lays out
//! its decayed parameters first and the excluded ones after needs only two dispatches.
//!
//! # Shapes
//! `params`, `grads` and every state tensor have the same number of elements (shapes are
//! otherwise free); `hyper` has exactly [`Hyper::LEN`] elements.

use std::ops::Range;

use bytemuck::{Pod, Zeroable};

use super::{grid_for, u32_of, Dispatch, OPTIMIZER, WG_CONST};
use crate::{bail, DType, Device, Result, Tensor};

/// Which update rule to run, with its static settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// Stochastic gradient descent; `momentum` 0 keeps no velocity; `decoupled` applies the
    /// weight decay to the parameters before the step instead of adding it to the gradient.
    Sgd {
        /// Velocity decay factor, Keras' `momentum`.
        momentum: f32,
        /// Nesterov momentum: the step looks ahead along the velocity.
        nesterov: bool,
        /// Weight decay applied to the parameters instead of the gradient.
        decoupled: bool,
    },
    /// Adam; `decoupled` makes it AdamW.
    Adam {
        /// Decay of the first-moment (mean) estimate, Keras' `beta_1`.
        beta1: f32,
        /// Decay of the second-moment (uncentered variance) estimate, Keras' `beta_2`.
        beta2: f32,
        /// Added to the second moment's square root in the denominator.
        epsilon: f32,
        /// Weight decay applied to the parameters instead of the gradient (AdamW).
        decoupled: bool,
    },
}

impl OptimizerKind {
    /// SGD with PyTorch's L2 weight decay (added to the gradient).
    pub fn sgd(momentum: f32, nesterov: bool) -> Self {
        OptimizerKind::Sgd { momentum, nesterov, decoupled: false }
    }
    /// SGD with Keras 3's decoupled weight decay.
    pub fn sgd_decoupled(momentum: f32, nesterov: bool) -> Self {
        OptimizerKind::Sgd { momentum, nesterov, decoupled: true }
    }
    /// Adam with PyTorch's defaults (β1 0.9, β2 0.999, eps 1e-8; Keras uses eps 1e-7).
    pub fn adam() -> Self {
        OptimizerKind::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-8, decoupled: false }
    }
    /// AdamW with PyTorch's defaults.
    pub fn adamw() -> Self {
        OptimizerKind::Adam { beta1: 0.9, beta2: 0.999, epsilon: 1e-8, decoupled: true }
    }

    /// How many state tensors [`update`] expects: 0 for plain SGD, 1 (velocity) for SGD with
    /// momentum, 2 (`m`, `v`) for Adam.
    pub fn state_count(&self) -> usize {
        match self {
            OptimizerKind::Sgd { momentum, .. } if *momentum == 0.0 => 0,
            OptimizerKind::Sgd { .. } => 1,
            OptimizerKind::Adam { .. } => 2,
        }
    }

    /// Refuses settings PyTorch refuses (and NaNs).
    pub fn validate(&self, weight_decay: f32) -> Result<()> {
        if !(weight_decay >= 0.0 && weight_decay.is_finite()) {
            bail!(Config, "weight_decay must be finite and >= 0, got {weight_decay}");
        }
        match *self {
            OptimizerKind::Sgd { momentum, nesterov, .. } => {
                if !(momentum >= 0.0 && momentum.is_finite()) {
                    bail!(Config, "SGD momentum must be finite and >= 0, got {momentum}");
                }
                if nesterov && momentum == 0.0 {
                    bail!(Config, "Nesterov momentum needs a momentum > 0");
                }
            }
            OptimizerKind::Adam { beta1, beta2, epsilon, .. } => {
                for (name, beta) in [("beta1", beta1), ("beta2", beta2)] {
                    if !(0.0..1.0).contains(&beta) {
                        bail!(Config, "Adam {name} must be in [0, 1), got {beta}");
                    }
                }
                if !(epsilon >= 0.0 && epsilon.is_finite()) {
                    bail!(Config, "Adam epsilon must be finite and >= 0, got {epsilon}");
                }
            }
        }
        Ok(())
    }
}

/// The per-step settings, as the kernels read them from the `hyper` tensor (mirrored by
/// `struct Hyper` in `shaders/optimizer.wgsl`). Rewrite it before each step with
/// [`Hyper::write`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct Hyper {
    /// Learning rate of this step (after any schedule).
    pub lr: f32,
    /// `1 - beta1^step` (Adam; 1 for SGD).
    pub bias_correction1: f32,
    /// `1 - beta2^step` (Adam; 1 for SGD).
    pub bias_correction2: f32,
    /// Gradient clipping's factor `min(1, clipnorm / norm)`, written on the device by
    /// [`clip_by_global_norm`]'s dispatches; the host's value is never read.
    pub clip_factor: f32,
}

impl Hyper {
    /// Elements of the `hyper` tensor.
    pub const LEN: usize = 4;

    /// The settings for update number `step`, counted from 1 as PyTorch does (the first
    /// update is step 1; step 0 would divide by a zero bias correction).
    pub fn for_step(lr: f32, kind: &OptimizerKind, step: u64) -> Result<Hyper> {
        if step == 0 {
            bail!(Config, "optimizer steps count from 1, got step 0");
        }
        let (bc1, bc2) = match *kind {
            OptimizerKind::Sgd { .. } => (1.0, 1.0),
            // In f64: 1 - 0.999^t loses most of its digits in f32 for small t.
            OptimizerKind::Adam { beta1, beta2, .. } => {
                let t = step.min(i32::MAX as u64) as i32;
                (1.0 - (beta1 as f64).powi(t), 1.0 - (beta2 as f64).powi(t))
            }
        };
        Ok(Hyper { lr, bias_correction1: bc1 as f32, bias_correction2: bc2 as f32, clip_factor: 1.0 })
    }

    /// A new `hyper` tensor holding these settings.
    pub fn upload(&self, device: &Device) -> Result<Tensor> {
        device.upload(&[Hyper::LEN], bytemuck::cast_slice(std::slice::from_ref(self)))
    }

    /// Overwrites `hyper` before the next submission. Sixteen bytes: `write_buffer` is the
    /// cheapest path for a write this small.
    pub fn write(&self, device: &Device, hyper: &Tensor) -> Result<()> {
        expect_hyper(hyper)?;
        device.queue().write_buffer(hyper.buffer(), hyper.offset(), bytemuck::bytes_of(self));
        Ok(())
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    clipnorm: f32,
    weight_decay: f32,
    momentum: f32,
    beta1: f32,
    beta2: f32,
    epsilon: f32,
    flags: u32,
}

/// One update of every element of `params` from `grads`, reading the learning rate and
/// bias corrections from `hyper` (see [`Hyper`]). `state` holds
/// [`OptimizerKind::state_count`] tensors: `[velocity]` for SGD with momentum, `[m, v]` for
/// Adam. Any operand may be a view, so sub-ranges with different weight decay are separate
/// calls on views of the flat tensors.
///
/// # Shapes
/// `params`, `grads`, each `state`: any shape, equal element counts; `hyper`: `[4]`.
pub fn update(
    device: &Device,
    kind: &OptimizerKind,
    weight_decay: f32,
    params: &Tensor,
    grads: &Tensor,
    state: &[&Tensor],
    hyper: &Tensor,
) -> Result<Dispatch> {
    check(kind, weight_decay, params, grads, state, hyper)?;
    launch(device, kind, weight_decay, params, grads, state, hyper, None, None, false)
}

/// [`update`] over the whole tensors, with weight decay skipped on the element ranges in
/// `no_decay` (Keras' and PyTorch users' usual exclusion of BatchNorm gamma/beta and biases).
/// Ranges need no alignment; they may come in any order but must not overlap. One dispatch:
/// where decay is mixed, a per-element mask (uploaded here, kept by the dispatch) says which
/// elements decay.
///
/// # Shapes
/// As [`update`]; every range lies within `0..params.len()`.
#[allow(clippy::too_many_arguments)]
pub fn update_masked(
    device: &Device,
    kind: &OptimizerKind,
    weight_decay: f32,
    params: &Tensor,
    grads: &Tensor,
    state: &[&Tensor],
    hyper: &Tensor,
    no_decay: &[Range<usize>],
) -> Result<Dispatch> {
    update_scaled(device, kind, weight_decay, params, grads, state, hyper, no_decay, None)
}

/// [`update_masked`] for gradients that carry a loss scale: with `loss_scale` (the state of
/// [`super::loss_scale`]) each gradient is divided by its scale, and nothing changes on a
/// step its non-finite flag marks.
#[allow(clippy::too_many_arguments)]
pub fn update_scaled(
    device: &Device,
    kind: &OptimizerKind,
    weight_decay: f32,
    params: &Tensor,
    grads: &Tensor,
    state: &[&Tensor],
    hyper: &Tensor,
    no_decay: &[Range<usize>],
    loss_scale: Option<&Tensor>,
) -> Result<Dispatch> {
    update_clipped(device, kind, weight_decay, params, grads, state, hyper, no_decay, loss_scale, false)
}

/// [`update_scaled`] that multiplies every gradient by the factor [`clip_by_global_norm`]
/// wrote into `hyper` when `clipped`: those dispatches must run before it in every step.
#[allow(clippy::too_many_arguments)]
pub fn update_clipped(
    device: &Device,
    kind: &OptimizerKind,
    weight_decay: f32,
    params: &Tensor,
    grads: &Tensor,
    state: &[&Tensor],
    hyper: &Tensor,
    no_decay: &[Range<usize>],
    loss_scale: Option<&Tensor>,
    clipped: bool,
) -> Result<Dispatch> {
    check(kind, weight_decay, params, grads, state, hyper)?;
    if let Some(t) = loss_scale
        && (t.dtype() != DType::U32 || t.len() != super::loss_scale::STATE_LEN)
    {
        bail!(Shape, "optimizer: loss-scale state is {:?} {:?}, expected u32 [{}]", t.dtype(), t.shape(), super::loss_scale::STATE_LEN);
    }
    let segments = segments(params.len(), weight_decay, no_decay)?;
    if let [(_, wd)] = segments.as_slice() {
        return launch(device, kind, *wd, params, grads, state, hyper, None, loss_scale, clipped);
    }
    let mut mask = vec![0.0f32; params.len()];
    for (range, wd) in &segments {
        mask[range.clone()].fill(if *wd != 0.0 { 1.0 } else { 0.0 });
    }
    // A buffer of its own, not a pooled tensor: the pool would hand it out again while this
    // dispatch still reads it.
    let mask = wgpu::util::DeviceExt::create_buffer_init(
        device.wgpu(),
        &wgpu::util::BufferInitDescriptor { label: Some("weight decay mask"), contents: bytemuck::cast_slice(&mask), usage: wgpu::BufferUsages::STORAGE },
    );
    launch(device, kind, weight_decay, params, grads, state, hyper, Some(&mask), loss_scale, clipped)
}

/// Workgroups of the first pass of [`clip_by_global_norm`]; the shader's `NORM_GROUPS`.
pub const NORM_GROUPS: usize = 256;

/// Clipping by global norm (Keras' `global_clipnorm`): two dispatches that compute
/// `norm = sqrt(Σ g²)` over the whole of `grads` (divided by the loss scale when
/// `loss_scale` is given) and write `min(1, clipnorm / norm)` into `hyper` for an update
/// built with [`update_clipped`] to multiply every gradient by. `partials` is scratch of
/// [`NORM_GROUPS`] floats. Run them after the gradients are final (after the exchange, with
/// several replicas: every replica then computes the same factor).
///
/// # Shapes
/// `grads`: any shape; `hyper`: `[4]`; `partials`: [`NORM_GROUPS`] elements.
pub fn clip_by_global_norm(device: &Device, clipnorm: f32, grads: &Tensor, hyper: &Tensor, partials: &Tensor, loss_scale: Option<&Tensor>) -> Result<Vec<Dispatch>> {
    clip_by_global_norm_except(device, clipnorm, grads, hyper, partials, loss_scale, &[])
}

/// [`clip_by_global_norm`] with the element ranges in `excluded` left out of the norm: the
/// gradients of frozen layers, which Keras never computes (its norm is over the trainable
/// variables' gradients only). Ranges need no alignment and may come in any order; where
/// there are any, a per-element mask (uploaded here, kept by the dispatch) says which
/// elements count.
///
/// # Shapes
/// As [`clip_by_global_norm`]; every range lies within `0..grads.len()`.
#[allow(clippy::too_many_arguments)]
pub fn clip_by_global_norm_except(
    device: &Device,
    clipnorm: f32,
    grads: &Tensor,
    hyper: &Tensor,
    partials: &Tensor,
    loss_scale: Option<&Tensor>,
    excluded: &[Range<usize>],
) -> Result<Vec<Dispatch>> {
    if !(clipnorm.is_finite() && clipnorm > 0.0) {
        bail!(Config, "global_clipnorm must be finite and > 0, got {clipnorm}");
    }
    expect_hyper(hyper)?;
    for (name, t, len) in [("grads", grads, grads.len()), ("partials", partials, NORM_GROUPS)] {
        if t.dtype() != DType::F32 || t.len() != len {
            bail!(Shape, "clip_by_global_norm: {name} is {:?} {:?}, expected f32 of {len} elements", t.dtype(), t.shape());
        }
    }
    if partials.same_storage(grads) || partials.same_storage(hyper) || hyper.same_storage(grads) {
        bail!(Shape, "clip_by_global_norm: grads, hyper and partials must be separate buffers");
    }
    let mut p = Params { n: u32_of("clip_by_global_norm", "elements", grads.len())?, clipnorm, weight_decay: 0.0, momentum: 0.0, beta1: 0.0, beta2: 0.0, epsilon: 0.0, flags: 0 };
    if loss_scale.is_some() {
        p.flags |= 8;
    }
    if let Some(r) = excluded.iter().find(|r| r.start > r.end || r.end > grads.len()) {
        bail!(Shape, "clip_by_global_norm: excluded range {r:?} is not within the {} gradients", grads.len());
    }
    let mask = excluded.iter().any(|r| !r.is_empty()).then(|| {
        let mut counts = vec![1.0f32; grads.len()];
        for r in excluded {
            counts[r.clone()].fill(0.0);
        }
        // A buffer of its own, as the update's decay mask (see `update_clipped`).
        wgpu::util::DeviceExt::create_buffer_init(
            device.wgpu(),
            &wgpu::util::BufferInitDescriptor { label: Some("global norm mask"), contents: bytemuck::cast_slice(&counts), usage: wgpu::BufferUsages::STORAGE },
        )
    });
    if mask.is_some() {
        p.flags |= 2;
    }
    let uniform = device.uniform(&p);
    // Without the loss scale the kernel never reads binding 7 (`hyper` fills it), nor binding
    // 6 without a mask (`grads` fills it).
    let first = [
        (0, uniform.as_entire_buffer_binding()),
        (1, grads.binding()),
        (6, mask.as_ref().map_or_else(|| grads.binding(), |m| m.as_entire_buffer_binding())),
        (7, loss_scale.unwrap_or(hyper).binding()),
        (8, partials.binding()),
    ];
    let mut norm = Dispatch::new(device, &OPTIMIZER, "norm_partials", &[], &first, [NORM_GROUPS as u32, 1, 1]).tagged(if mask.is_some() { "excluded=yes" } else { "excluded=no" });
    if mask.is_none() {
        norm.bytes -= grads.bytes() as f64; // the stand-in is never read
    }
    Ok(vec![norm, Dispatch::with_params(device, &OPTIMIZER, "clip_factor", &[], &p, &[(8, partials), (9, hyper)], [1, 1, 1])])
}

/// Splits `0..n` into `(range, weight decay)` stretches, merging neighbours of equal decay.
fn segments(n: usize, weight_decay: f32, no_decay: &[Range<usize>]) -> Result<Vec<(Range<usize>, f32)>> {
    let mut excluded: Vec<Range<usize>> = no_decay.iter().filter(|r| !r.is_empty()).cloned().collect();
    excluded.sort_by_key(|r| r.start);
    let mut out: Vec<(Range<usize>, f32)> = Vec::new();
    let mut push = |range: Range<usize>, wd: f32| match out.last_mut() {
        _ if range.is_empty() => {}
        Some((last, last_wd)) if *last_wd == wd && last.end == range.start => last.end = range.end,
        _ => out.push((range, wd)),
    };
    let mut at = 0;
    for r in &excluded {
        if r.end > n {
            bail!(Shape, "optimizer: no-decay range {r:?} exceeds the {n} parameters");
        }
        if r.start < at {
            bail!(Shape, "optimizer: no-decay ranges overlap at {r:?}");
        }
        push(at..r.start, weight_decay);
        push(r.clone(), 0.0);
        at = r.end;
    }
    push(at..n, weight_decay);
    Ok(out)
}

fn expect_hyper(hyper: &Tensor) -> Result<()> {
    if hyper.dtype() != DType::F32 || hyper.len() != Hyper::LEN {
        bail!(Shape, "optimizer: hyper is {:?} {:?}, expected f32 [{}]", hyper.dtype(), hyper.shape(), Hyper::LEN);
    }
    Ok(())
}

fn check(kind: &OptimizerKind, weight_decay: f32, params: &Tensor, grads: &Tensor, state: &[&Tensor], hyper: &Tensor) -> Result<()> {
    kind.validate(weight_decay)?;
    expect_hyper(hyper)?;
    if state.len() != kind.state_count() {
        bail!(Shape, "optimizer: {kind:?} keeps {} state tensors, got {}", kind.state_count(), state.len());
    }
    let written: Vec<(&str, &Tensor)> = [("params", params)].into_iter().chain(state.iter().map(|t| ("state", *t))).collect();
    for (name, t) in written.iter().copied().chain([("grads", grads)]) {
        if t.dtype() != DType::F32 || t.len() != params.len() {
            bail!(Shape, "optimizer: {name} is {:?} {:?}, params {:?}: expected f32 of equal size", t.dtype(), t.shape(), params.shape());
        }
    }
    for (i, (a_name, a)) in written.iter().enumerate() {
        // wgpu refuses a buffer bound read_write and read in one dispatch, ranges aside.
        for (r_name, r) in [("grads", grads), ("hyper", hyper)] {
            if a.same_storage(r) {
                bail!(Shape, "optimizer: {r_name} must not share a buffer with {a_name}, which the kernel writes");
            }
        }
        for (b_name, b) in &written[i + 1..] {
            if a.overlaps(b) {
                bail!(Shape, "optimizer: {a_name} {:?} and {b_name} {:?} overlap", a.shape(), b.shape());
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn launch(
    device: &Device,
    kind: &OptimizerKind,
    weight_decay: f32,
    params: &Tensor,
    grads: &Tensor,
    state: &[&Tensor],
    hyper: &Tensor,
    decay_mask: Option<&wgpu::Buffer>,
    loss_scale: Option<&Tensor>,
    clipped: bool,
) -> Result<Dispatch> {
    let mut p = Params {
        n: u32_of("optimizer", "elements", params.len())?,
        clipnorm: 0.0,
        weight_decay,
        momentum: 0.0,
        beta1: 0.0,
        beta2: 0.0,
        epsilon: 0.0,
        flags: 0,
    };
    let entry = match *kind {
        OptimizerKind::Sgd { momentum: 0.0, decoupled, .. } => {
            p.flags = (decoupled as u32) << 2;
            "sgd"
        }
        OptimizerKind::Sgd { momentum, nesterov, decoupled } => {
            (p.momentum, p.flags) = (momentum, nesterov as u32 | (decoupled as u32) << 2);
            "sgd_momentum"
        }
        OptimizerKind::Adam { beta1, beta2, epsilon, decoupled } => {
            (p.beta1, p.beta2, p.epsilon, p.flags) = (beta1, beta2, epsilon, decoupled as u32);
            "adam"
        }
    };
    if decay_mask.is_some() {
        p.flags |= 2;
    }
    if loss_scale.is_some() {
        p.flags |= 8;
    }
    if clipped {
        p.flags |= 16;
    }
    // The shader's branches: bit 0 (Nesterov, or AdamW's decoupled decay), bit 1 (the mask),
    // bit 2 (SGD's decoupled decay), bit 3 (loss-scaled), bit 4 (clipped).
    let flag = |bit: u32, name: &str| format!("{name}={}", if p.flags & bit != 0 { "yes" } else { "no" });
    let path = match entry {
        "sgd" => format!("{} {} {}", flag(4, "decoupled"), flag(2, "decay_mask"), flag(8, "scaled")),
        "sgd_momentum" => format!("{} {} {} {}", flag(1, "nesterov"), flag(4, "decoupled"), flag(2, "decay_mask"), flag(8, "scaled")),
        _ => format!("{} {} {}", flag(1, "decoupled"), flag(2, "decay_mask"), flag(8, "scaled")),
    };
    let path = if clipped { format!("{path} clipped=yes") } else { path };
    let uniform = device.uniform(&p);
    let mut bindings = vec![(0, uniform.as_entire_buffer_binding()), (1, grads.binding()), (2, hyper.binding()), (3, params.binding())];
    bindings.extend(state.iter().enumerate().map(|(i, t)| (4 + i as u32, t.binding())));
    // Without a mask the kernel never reads binding 6; `grads` fills it.
    bindings.push((6, decay_mask.map_or_else(|| grads.binding(), |m| m.as_entire_buffer_binding())));
    // Without the loss scale the kernel never reads binding 7; `hyper` fills it.
    bindings.push((7, loss_scale.unwrap_or(hyper).binding()));
    let mut d = Dispatch::new(device, &OPTIMIZER, entry, &[WG_CONST], &bindings, grid_for(device, params.len())?).tagged(path);
    if decay_mask.is_none() {
        d.bytes -= grads.bytes() as f64; // the stand-in is never read
    }
    if loss_scale.is_none() {
        d.bytes -= hyper.bytes() as f64;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_merge_and_validate() {
        assert_eq!(segments(10, 0.1, &[]).unwrap(), vec![(0..10, 0.1)]);
        assert_eq!(segments(10, 0.1, &[6..10, 2..4, 4..5]).unwrap(), vec![(0..2, 0.1), (2..5, 0.0), (5..6, 0.1), (6..10, 0.0)]);
        assert_eq!(segments(10, 0.0, &[3..4]).unwrap(), vec![(0..10, 0.0)]);
        assert!(segments(10, 0.1, &[2..5, 4..6]).is_err());
        assert!(segments(10, 0.1, &[8..11]).is_err());
    }
}
