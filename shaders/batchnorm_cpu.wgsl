// BatchNormalization's kernels for software adapters (lavapipe, llvmpipe), appended to
// batchnorm.wgsl: the same parameters, bindings, statistics (Welford per invocation, Chan's
// merge between chunks) and formulas, laid out for a CPU.
//
// Why kernels of their own: a software adapter runs a workgroup on one CPU thread with the
// invocations across SIMD lanes, every storage load is a trip through a loop over the lanes,
// and a barrier switches coroutines (gemm_cpu.wgsl's header has the details). The GPU passes
// fold 256 lanes through workgroup memory with eight barriers and read one float per load;
// their per-element passes load 17 floats per four outputs (the per-channel vectors channel
// by channel, again for every element). Here an invocation owns four channels, a vec4, over
// one chunk of rows and walks the chunk alone: one vec4 load per row and tensor, the
// per-channel values loaded once, no workgroup memory and no barrier. The merges take one
// invocation per channel. The channel count is a multiple of 4 (the host runs the GPU
// kernels otherwise), so x, y, dy and the output (y or dx) are bound as vec4 arrays only,
// read through act_quad and stored through act_pack in either storage of the activations.
//
// Invocation g is (chunk, quad) = (g / quads, g % quads); lanes past the last walk no rows
// and store nothing, and read their per-channel values at the last quad (in range).

// Invocations per workgroup: one AVX2 vector of lanes.
override CPU_WG: u32 = 8u;
// The fused ReLU as a pipeline constant: a runtime branch costs both sides on SIMD lanes.
override CPU_RELU: bool = false;

// An invocation's four channels and rows.
struct Span {
    quad: u32,
    // The first of its channels.
    c: u32,
    chunk: u32,
    start: u32,
    // start where the invocation is past the last (chunk, quad).
    end: u32,
    live: bool,
}

fn span(wid: vec3<u32>, lid: u32) -> Span {
    let quads = p.cols >> 2u;
    let total = quads * p.chunks;
    let g = wid.x * CPU_WG + lid;
    let h = min(g, total - 1u);
    let chunk = h / quads;
    let quad = h - chunk * quads;
    let start = chunk * p.chunk_rows;
    let live = g < total;
    return Span(quad, quad * 4u, chunk, start, select(start, min(start + p.chunk_rows, p.rows), live), live);
}

fn vec4_index(s: Span, r: u32) -> u32 {
    return r * (p.cols >> 2u) + s.quad;
}

// The training backward's grad_train4 (batchnorm.wgsl): the mask from y recomputed from x,
// normalize_span's expression, as y was stored.
fn grad_train_cpu(i: u32, xq: vec4<f32>, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    if (CPU_RELU) {
        return relu_grad4(act_quad(dy4[i]), y_again4(xq, mean, k, b));
    }
    return act_quad(dy4[i]);
}

// The inference backward's upstream gradient at vec4 i, masked by the fused ReLU's output
// (NaN where it is NaN).
fn grad4(i: u32) -> vec4<f32> {
    if (CPU_RELU) {
        return relu_grad4(act_quad(dy4[i]), act_quad(y4[i]));
    }
    return act_quad(dy4[i]);
}

// Writes a (chunk, 4 channels) partial: the two statistics at planes 0 and 1 of partials.
fn store_partial(s: Span, a: vec4<f32>, b: vec4<f32>) {
    if (s.live) {
        for (var e = 0u; e < 4u; e++) {
            partials[s.chunk * p.cols + s.c + e] = a[e];
            partials[(p.chunks + s.chunk) * p.cols + s.c + e] = b[e];
        }
    }
}

// The channel of a merge invocation (one per channel), clamped into range, and whether it is live.
fn merge_channel(wid: vec3<u32>, lid: u32) -> vec2<u32> {
    let g = wid.x * CPU_WG + lid;
    return vec2<u32>(min(g, p.cols - 1u), u32(g < p.cols));
}

// Rows summed into a fresh accumulator before it joins the chunk's, which then takes a few
// dozen additions instead of hundreds.
const BLOCK_ROWS: u32 = 16u;

// Pass 1 of the training statistics: mean and M2 of the chunk per channel, Welford within
// blocks of rows and Chan's merge between them, on x less the chunk's first row: M2 does not
// move with the shift, and the running mean stays near zero, where f32 holds it finely (on
// 70,000 rows near 100 unshifted, its rounding cost 8e-6 of the mean, 1e-4 of dgamma).
@compute @workgroup_size(CPU_WG)
fn stats_partial_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let shift = act_quad(x4[vec4_index(s, s.start)]);
    var n = 0.0;
    var mean = vec4<f32>(0.0);
    var m2 = vec4<f32>(0.0);
    for (var r0 = s.start; r0 < s.end; r0 += BLOCK_ROWS) {
        var b_mean = vec4<f32>(0.0);
        var b_m2 = vec4<f32>(0.0);
        let r1 = min(r0 + BLOCK_ROWS, s.end);
        for (var r = r0; r < r1; r++) {
            let v = act_quad(x4[vec4_index(s, r)]) - shift;
            let d = v - b_mean;
            b_mean += d / f32(r - r0 + 1u);
            b_m2 += d * (v - b_mean);
        }
        let nb = f32(r1 - r0);
        let total = n + nb;
        let d = b_mean - mean;
        let f = nb / total;
        mean += d * f;
        m2 += b_m2 + d * d * (n * f);
        n = total;
    }
    store_partial(s, mean + shift, m2);
}

// Pass 2: the chunks merged per channel, then what stats_finalize stores.
@compute @workgroup_size(CPU_WG)
fn stats_finalize_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = merge_channel(wid, lid);
    let w = merge_chunks(c.x, 0u, 1u);
    if (c.y != 0u) {
        store_stats(c.x, w.mean + merge_shift(c.x), w.m2);
    }
}

// Pass 3 of training: y = gamma * (x - mean) * inv_std + beta with the batch statistics.
@compute @workgroup_size(CPU_WG)
fn normalize_train_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    normalize_span(s, saved4(s.c), saved4(p.cols + s.c) * gamma4(s.c));
}

// Inference: the same with the moving statistics (moving4 gives inv_std * gamma).
@compute @workgroup_size(CPU_WG)
fn normalize_infer_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let m = moving4(s.c);
    normalize_span(s, m[0], m[1]);
}

// The fused ReLU, of the layer or of the residual join the pass writes.
fn finish_cpu(v: vec4<f32>) -> vec4<f32> {
    if (CPU_RELU) {
        return relu4(v);
    }
    return v;
}

// y over the invocation's rows, k = inv_std * gamma, its factors loaded once.
fn normalize_span(s: Span, mean: vec4<f32>, k: vec4<f32>) {
    let b = beta4(s.c);
    for (var r = s.start; r < s.end; r++) {
        let i = vec4_index(s, r);
        out4[i] = act_pack(finish_cpu(affine4(act_quad(x4[i]), mean, k, b)));
    }
}

// normalize_span with addend4 joined before the ReLU (write_joined4 of batchnorm.wgsl).
fn normalize_joined_span(s: Span, mean: vec4<f32>, k: vec4<f32>) {
    let b = beta4(s.c);
    for (var r = s.start; r < s.end; r++) {
        let i = vec4_index(s, r);
        out4[i] = act_pack(finish_cpu(affine4(act_quad(x4[i]), mean, k, b) + act_quad(addend4[i])));
    }
}

@compute @workgroup_size(CPU_WG)
fn normalize_train_joined_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    normalize_joined_span(s, saved4(s.c), saved4(p.cols + s.c) * gamma4(s.c));
}

@compute @workgroup_size(CPU_WG)
fn normalize_infer_joined_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let m = moving4(s.c);
    normalize_joined_span(s, m[0], m[1]);
}

// Backward pass 1: Σ dy and Σ dy * (x - mean) of the chunk per channel.
@compute @workgroup_size(CPU_WG)
fn backward_partial_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let mean = saved4(s.c);
    let k = saved4(p.cols + s.c) * gamma4(s.c);
    let b = beta4(s.c);
    var s_dy = vec4<f32>(0.0);
    var s_dyx = vec4<f32>(0.0);
    for (var r0 = s.start; r0 < s.end; r0 += BLOCK_ROWS) {
        var b_dy = vec4<f32>(0.0);
        var b_dyx = vec4<f32>(0.0);
        for (var r = r0; r < min(r0 + BLOCK_ROWS, s.end); r++) {
            let i = vec4_index(s, r);
            let xq = act_quad(x4[i]);
            let g = grad_train_cpu(i, xq, mean, k, b);
            b_dy += g;
            b_dyx += g * (xq - mean);
        }
        s_dy += b_dy;
        s_dyx += b_dyx;
    }
    store_partial(s, s_dy, s_dyx);
}

// Backward pass 2: dbeta and dgamma, the chunks summed per channel.
@compute @workgroup_size(CPU_WG)
fn backward_merge_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = merge_channel(wid, lid);
    let sums = sum_chunks(c.x, 0u, 1u);
    if (c.y != 0u) {
        store_gradients(c.x, sums);
    }
}

// Backward pass 3: backward_dx4 over the invocation's rows.
@compute @workgroup_size(CPU_WG)
fn backward_dx_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let c = s.c;
    let inv_std = saved4(p.cols + c);
    let mean = saved4(c);
    let k = inv_std * gamma4(c);
    let b = beta4(c);
    let db = dbeta4(c);
    let dg = dgamma4(c);
    let m = f32(p.rows);
    for (var r = s.start; r < s.end; r++) {
        let i = vec4_index(s, r);
        let xq = act_quad(x4[i]);
        let x_hat = (xq - mean) * inv_std;
        out4[i] = act_pack(k * (grad_train_cpu(i, xq, mean, k, b) - (db + x_hat * dg) / m));
    }
}

// backward_infer_dx4 over the invocation's rows.
@compute @workgroup_size(CPU_WG)
fn backward_infer_dx_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let s = span(wid, lid);
    let c = s.c;
    let k = gamma4(c) * inverseSqrt(moving_var4(c) + vec4<f32>(p.epsilon));
    for (var r = s.start; r < s.end; r++) {
        let i = vec4_index(s, r);
        out4[i] = act_pack(grad4(i) * k);
    }
}
