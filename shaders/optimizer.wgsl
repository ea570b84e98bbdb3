// Optimizer updates over flat f32 tensors: every parameter of a model in one dispatch.
// One invocation per element of the bound tensors; the grid may be folded into 2-D
// (see src/kernels/mod.rs). Formulas follow PyTorch's torch.optim.SGD / Adam / AdamW; the
// Rust side (src/kernels/optimizer.rs) documents them.

// Static settings, fixed when a step is compiled.
struct Params {
    // elements to update
    n: u32,
    // global_clipnorm (flag bit 4): the largest global norm of the gradient
    clipnorm: f32,
    weight_decay: f32,
    // SGD
    momentum: f32,
    // Adam
    beta1: f32,
    beta2: f32,
    epsilon: f32,
    // bit 0: Nesterov (SGD) or decoupled weight decay (AdamW); bit 1: `decays` masks the
    // weight decay per element; bit 2: decoupled weight decay (SGD); bit 3: loss-scaled
    // gradients; bit 4: gradients clipped by their global norm
    flags: u32,
}

// Settings the training loop rewrites every step (mirrors `optimizer::Hyper`), so a
// compiled step replays with a new learning rate without being rebuilt.
struct Hyper {
    lr: f32,
    // 1 - beta1^step and 1 - beta2^step (Adam only)
    bias_correction1: f32,
    bias_correction2: f32,
    // min(1, clipnorm / global norm), written by `clip_factor` before the update (flag bit 4)
    clip: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> grads: array<f32>;
@group(0) @binding(2) var<storage, read> hyper: Hyper;
@group(0) @binding(3) var<storage, read_write> params: array<f32>;
// SGD: velocity; Adam: first moment
@group(0) @binding(4) var<storage, read_write> state0: array<f32>;
// Adam: second moment
@group(0) @binding(5) var<storage, read_write> state1: array<f32>;
// Per element, 1 where weight decay applies and 0 where it does not (flag bit 1; without it
// the host binds `grads` here and every element decays).
@group(0) @binding(6) var<storage, read> decays: array<f32>;
// The mixed_float16 policy's loss-scale state (shaders/loss_scale.wgsl): word 0 the scale
// the gradients carry, word 2 set when one of them is NaN or infinite. Read only with flag
// bit 3 (without it the host binds `hyper` here).
@group(0) @binding(7) var<storage, read> loss_scale: array<u32>;

// Flag bit 3: gradients carry the loss scale. Each is divided by it, and a step with a
// non-finite one changes nothing (Keras' LossScaleOptimizer).
fn scaled() -> bool {
    return (p.flags & 8u) != 0u;
}

fn skipped() -> bool {
    return scaled() && loss_scale[2] != 0u;
}

// The gradient without the loss scale, as the global norm measures it.
fn unscaled(i: u32) -> f32 {
    if (scaled()) {
        return grads[i] / bitcast<f32>(loss_scale[0]);
    }
    return grads[i];
}

fn grad(i: u32) -> f32 {
    if ((p.flags & 16u) != 0u) {
        return unscaled(i) * hyper.clip;
    }
    return unscaled(i);
}

fn decay_at(i: u32) -> f32 {
    if ((p.flags & 2u) != 0u) {
        return p.weight_decay * decays[i];
    }
    return p.weight_decay;
}

override WG: u32 = 256u;

// The element of this invocation; callers return when it is >= p.n. The host has checked n
// against every bound tensor, so that guard keeps unchecked builds in bounds.
fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// SGD's parameter after its weight decay and the gradient the step uses: decoupled (Keras 3),
// param -= lr * wd * param and the plain gradient; else (PyTorch's L2) grad + wd * param.
struct Decayed {
    w: f32,
    g: f32,
}

fn sgd_decay(i: u32) -> Decayed {
    let w = params[i];
    if ((p.flags & 4u) != 0u) {
        return Decayed(w - hyper.lr * decay_at(i) * w, grad(i));
    }
    return Decayed(w, grad(i) + decay_at(i) * w);
}

// param -= lr * g
@compute @workgroup_size(WG)
fn sgd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n || skipped()) { return; }
    let d = sgd_decay(i);
    params[i] = d.w - hyper.lr * d.g;
}

// v = momentum * v + g; update = Nesterov ? g + momentum * v : v; param -= lr * update
@compute @workgroup_size(WG)
fn sgd_momentum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n || skipped()) { return; }
    let d = sgd_decay(i);
    let v = p.momentum * state0[i] + d.g;
    state0[i] = v;
    let update = select(v, d.g + p.momentum * v, (p.flags & 1u) != 0u);
    params[i] = d.w - hyper.lr * update;
}

// Adam with L2 decay folded into the gradient, or AdamW's decoupled decay applied to the
// parameter first; epsilon is added outside the square root, as in PyTorch.
@compute @workgroup_size(WG)
fn adam(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n || skipped()) { return; }
    let lr = hyper.lr;
    var w = params[i];
    var g = grad(i);
    let wd = decay_at(i);
    if ((p.flags & 1u) != 0u) {
        w = w * (1.0 - lr * wd);
    } else {
        g = g + wd * w;
    }
    let m = p.beta1 * state0[i] + (1.0 - p.beta1) * g;
    let v = p.beta2 * state1[i] + (1.0 - p.beta2) * g * g;
    state0[i] = m;
    state1[i] = v;
    let m_hat = m / hyper.bias_correction1;
    let v_hat = v / hyper.bias_correction2;
    params[i] = w - lr * m_hat / (sqrt(v_hat) + p.epsilon);
}

// Clipping by global norm (Keras' global_clipnorm), before the update: `norm_partials` sums
// the squares of the (unscaled) gradient in NORM_GROUPS workgroups, each striding over the
// whole tensor (frozen layers' elements masked out, as Keras takes the norm over trainable
// variables only), and `clip_factor` adds the partial sums in one workgroup and writes
// min(1, clipnorm / norm) where the update reads it. A fixed grid keeps the second pass one
// workgroup whatever the model's size. A NaN norm leaves the factor 1 (the update then
// carries the NaN, as without clipping).
const NORM_GROUPS: u32 = 256u;
const NORM_WG: u32 = 256u;

@group(0) @binding(8) var<storage, read_write> partials: array<f32>;
// the `hyper` tensor again, written: its word 3 is `Hyper.clip`
@group(0) @binding(9) var<storage, read_write> hyper_out: array<f32>;

var<workgroup> red: array<f32, NORM_WG>;

fn reduce_red(lid: u32) -> f32 {
    workgroupBarrier();
    for (var s = NORM_WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] += red[lid + s]; }
        workgroupBarrier();
    }
    return red[0];
}

@compute @workgroup_size(NORM_WG)
fn norm_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    // Flag bit 1 here: `decays` holds 1 where the element counts toward the norm and 0 for
    // a frozen layer's, which is skipped (a product by 0 would keep a NaN).
    let masked = (p.flags & 2u) != 0u;
    for (var i = wid.x * NORM_WG + lid; i < p.n; i += NORM_GROUPS * NORM_WG) {
        if (masked && decays[i] == 0.0) { continue; }
        let g = unscaled(i);
        s += g * g;
    }
    red[lid] = s;
    let total = reduce_red(lid);
    if (lid == 0u) { partials[wid.x] = total; }
}

@compute @workgroup_size(NORM_WG)
fn clip_factor(@builtin(local_invocation_index) lid: u32) {
    red[lid] = partials[lid];
    let norm = sqrt(reduce_red(lid));
    if (lid == 0u) { hyper_out[3] = select(1.0, p.clipnorm / norm, norm > p.clipnorm); }
}
