// Losses with their gradients fused: softmax cross-entropy over integer labels (with the
// rank of the label's logit, for accuracy metrics) and mean squared error. One workgroup per
// row; the row grid may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    rows: u32,
    // classes (cross-entropy) or outputs per row (MSE)
    k: u32,
    // the gradient's factor: 1 / global batch, since replicas' gradients are summed
    scale: f32,
    // cross-entropy's label smoothing a: targets (1 - a) * onehot + a / k (Keras)
    smoothing: f32,
    // 1: each row's loss and gradient are multiplied by class_weights[label] (Keras'
    // class_weight); 0: binding 7 is a stand-in, never read
    weighted: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// logits or predictions, [rows, k]
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> labels: array<u32>;
// MSE targets, [rows, k]
@group(0) @binding(3) var<storage, read> targets: array<f32>;
@group(0) @binding(4) var<storage, read_write> loss: array<f32>;
@group(0) @binding(5) var<storage, read_write> grad: array<f32>;
@group(0) @binding(6) var<storage, read_write> rank: array<u32>;
// per-class weights, [k] (with p.weighted)
@group(0) @binding(7) var<storage, read> class_weights: array<f32>;

// Invocations per row, shared with `ROW_THREADS` in src/kernels/loss.rs. Rows are short
// (classes), so a small group keeps most invocations busy.
const ROW: u32 = 64u;

var<workgroup> red_f: array<f32, ROW>;
var<workgroup> red_g: array<f32, ROW>;
var<workgroup> red_u: array<u32, ROW>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    red_f[lid] = v;
    workgroupBarrier();
    for (var s = ROW / 2u; s > 0u; s >>= 1u) {
        if (lid < s) { red_f[lid] = max(red_f[lid], red_f[lid + s]); }
        workgroupBarrier();
    }
    let r = red_f[0];
    // the next reduction must not overwrite red_f[0] before everyone has read it
    workgroupBarrier();
    return r;
}

struct Sums {
    f: f32,
    g: f32,
    n: u32,
}

// Sums two floats and a count in one pass of barriers.
fn reduce_sum(lid: u32, v: f32, w: f32, n: u32) -> Sums {
    red_f[lid] = v;
    red_g[lid] = w;
    red_u[lid] = n;
    workgroupBarrier();
    for (var s = ROW / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red_f[lid] += red_f[lid + s];
            red_g[lid] += red_g[lid + s];
            red_u[lid] += red_u[lid + s];
        }
        workgroupBarrier();
    }
    let r = Sums(red_f[0], red_g[0], red_u[0]);
    workgroupBarrier();
    return r;
}

// Inf or NaN, on the bits: `x != x` may be folded away under the finite-math assumptions
// WGSL permits, and `max` (SPIR-V FMax) may drop a NaN operand; integer compares cannot.
fn non_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// loss = logsumexp(row) - sum_j t_j row[j] with targets t = (1 - a) * onehot(label) + a / k
// (a = 0: logsumexp(row) - row[label]), computed after subtracting the row's max so ±80 logits
// stay finite; grad = scale * (softmax - t); rank = classes scoring strictly above the label.
// With a = 0 every smoothing term is an exact 0 or 1, so the unsmoothed results are unchanged. A label >= k reads in bounds and yields a NaN loss and rank k. A row with any
// non-finite logit also yields a NaN loss and rank k: NaN compares false, so it would rank 0
// and count as a correct prediction, and the max above may have dropped it.
@compute @workgroup_size(ROW)
fn softmax_cross_entropy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(local_invocation_index) lid: u32) {
    let row = row_of(wid, nwg);
    // uniform across the workgroup, so no barrier is skipped by part of it
    if (row >= p.rows) { return; }
    let base = row * p.k;
    var m = a[base];
    for (var j = lid; j < p.k; j += ROW) {
        m = max(m, a[base + j]);
    }
    m = reduce_max(lid, m);

    let label = labels[row];
    let valid = label < p.k;
    let safe = min(label, p.k - 1u);
    let target_logit = a[base + safe];
    var s = 0.0;
    // sum of (logit - max), for the a / k share of every class in the smoothed target
    var z = 0.0;
    var above = 0u;
    var bad = false;
    for (var j = lid; j < p.k; j += ROW) {
        let v = a[base + j];
        s += exp(v - m);
        z += v - m;
        above += select(0u, 1u, v > target_logit);
        bad = bad || non_finite(v);
    }
    // An invocation that saw a non-finite logit adds k: the row's sum reaches k exactly when
    // one did (finite rows count at most k - 1 classes above), in the same reduction. The sum
    // stays below 2^32 for k < 2^26 classes (64 invocations).
    let sums = reduce_sum(lid, s, z, select(above, p.k, bad));
    let total = sums.f;
    let finite = sums.n < p.k;

    let spread = p.smoothing / f32(p.k);
    // The sample's weight: its class's, or 1 (the same 1 for an out-of-range label).
    var weight = 1.0;
    if (p.weighted != 0u) { weight = class_weights[safe]; }
    for (var j = lid; j < p.k; j += ROW) {
        let prob = exp(a[base + j] - m) / total;
        grad[base + j] = weight * p.scale * (prob - (select(0.0, 1.0 - p.smoothing, j == label) + spread));
    }
    if (lid == 0u) {
        // WGSL rejects NaN in constant expressions, so its bits depend on a runtime value
        let nan = bitcast<f32>(0x7fc00000u | (label & 1u));
        let ce = log(total) + (m - target_logit) * (1.0 - p.smoothing) - spread * sums.g;
        loss[row] = select(nan, weight * ce, valid && finite);
        rank[row] = select(p.k, sums.n, valid && finite);
    }
}

// loss = mean over the row of (pred - target)^2; grad = scale * 2 * (pred - target) / k;
// with p.weighted both times class_weights[label] (the targets are the label's one-hot, whose
// class Keras takes as its argmax). Unweighted, bindings 2 and 7 are stand-ins, never read.
@compute @workgroup_size(ROW)
fn mean_squared_error(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let row = row_of(wid, nwg);
    if (row >= p.rows) { return; }
    let base = row * p.k;
    let kf = f32(p.k);
    var weight = 1.0;
    if (p.weighted != 0u) { weight = class_weights[min(labels[row], p.k - 1u)]; }
    var s = 0.0;
    for (var j = lid; j < p.k; j += ROW) {
        let d = a[base + j] - targets[base + j];
        s += d * d;
        grad[base + j] = weight * p.scale * 2.0 * d / kf;
    }
    let sums = reduce_sum(lid, s, 0.0, 0u);
    if (lid == 0u) {
        loss[row] = weight * (sums.f / kf);
    }
}
