// BatchNormalization over the last dimension, with an optional fused ReLU.
//
// Every tensor is seen as a row-major [rows, cols] matrix: rows = N*H*W (or N after a Dense
// layer), cols = channels, the fastest dimension in NHWC. Per-channel statistics are column
// reductions split like shaders/reduce.wgsl: a workgroup owns 2^col_log2 adjacent columns
// and one chunk of chunk_rows rows, its invocations laid out as lanes x columns; each lane
// walks every lanes-th row of the chunk, the lanes fold through a tree in workgroup memory,
// and a second pass merges the [chunks, cols] partials. Where the channels divide by 4 the
// first passes run their *4 forms instead: the same column tile and chunks, an invocation
// owning a quad of four adjacent channels (col_log2 then counts quads, and there are four
// times the lanes), read as whole quads; they write the same partials.
//
// Training statistics are Welford per lane and Chan's pairwise merge between lanes and
// chunks: E[x²] − E[x]² in f32 loses every digit when |mean| >> std. The variance is the
// biased one (divided by rows), as Keras 3 both normalises with and feeds to the moving
// variance; the unbiased one would divide by zero for a batch of one row.
//
// saved holds [2, cols]: row 0 the batch mean, row 1 the inverse standard deviation
// 1 / sqrt(var + epsilon), which the backward pass reuses.
//
// The activations x and y, and their gradients dy and dx (a gradient is stored as its
// activation), are bound through shaders/lib/act_f32.wgsl's names, so the module built with
// act_f16.wgsl reads and writes all four as f16 (mixed_float16 halves their traffic); the
// statistics, the parameters, their gradients and every sum stay f32 in either. f16 y and
// dx are stored only by the vec4 passes (out4): a scalar f16 store would race with its
// neighbour on the shared word, so the host refuses f16 activations unless the channels
// divide by 4, and never runs the scalar passes on them (the partial passes included, whose
// scalar reads would load each word twice, once per half).
//
// The joined normalize passes (*_joined4) add addend4, a residual block's shortcut, before
// the ReLU: the block's end in one pass. They exist only four channels at a time.

struct Params {
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    // Column tile of this pass (the merge passes use a narrower one than the first pass).
    col_log2: u32,
    relu: u32,
    momentum: f32,
    epsilon: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
// Inputs.
@group(0) @binding(1) var<storage, read> x: array<act>;
@group(0) @binding(2) var<storage, read> y: array<act>;
@group(0) @binding(3) var<storage, read> dy: array<act>;
@group(0) @binding(4) var<storage, read> gamma: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read> saved: array<f32>;
@group(0) @binding(7) var<storage, read> moving_mean_in: array<f32>;
@group(0) @binding(8) var<storage, read> moving_var_in: array<f32>;
@group(0) @binding(9) var<storage, read> partials_in: array<f32>;
@group(0) @binding(10) var<storage, read> dgamma_in: array<f32>;
@group(0) @binding(11) var<storage, read> dbeta_in: array<f32>;
// Outputs.
@group(0) @binding(12) var<storage, read_write> partials: array<f32>;
@group(0) @binding(13) var<storage, read_write> saved_out: array<f32>;
@group(0) @binding(14) var<storage, read_write> moving_mean: array<f32>;
@group(0) @binding(15) var<storage, read_write> moving_var: array<f32>;
// The scalar passes' output, y or dx: f32 even in the f16 module, which never runs them
// (see the header).
@group(0) @binding(16) var<storage, read_write> out: array<f32>;
@group(0) @binding(17) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(18) var<storage, read_write> dbeta: array<f32>;

// x, y, dy and the output (y or dx) seen four channels at a time, for the *4 entry points
// (channels divisible by 4): 16-byte loads stream faster than 4-byte ones, and the only
// stores an f16 binding can take.
@group(0) @binding(19) var<storage, read> x4: array<act4>;
@group(0) @binding(20) var<storage, read> y4: array<act4>;
@group(0) @binding(21) var<storage, read> dy4: array<act4>;
@group(0) @binding(22) var<storage, read_write> out4: array<act4>;
// What the joined normalize passes add to y before the ReLU: a residual block's shortcut,
// in the activations' storage (see forward_train_joined in src/kernels/batchnorm.rs).
@group(0) @binding(23) var<storage, read> addend4: array<act4>;
// The per-channel arrays seen four channels at a time, for the *4 entry points and the CPU
// kernels (channels divisible by 4): one 16-byte load where there were four scalar ones,
// which cost the per-element passes more than their quads of x (the H200's backward_dx4
// ran at 62% of its memory floor).
@group(0) @binding(25) var<storage, read> gamma_q: array<vec4<f32>>;
@group(0) @binding(26) var<storage, read> beta_q: array<vec4<f32>>;
@group(0) @binding(27) var<storage, read> saved_q: array<vec4<f32>>;
@group(0) @binding(28) var<storage, read> moving_mean_q: array<vec4<f32>>;
@group(0) @binding(29) var<storage, read> moving_var_q: array<vec4<f32>>;
@group(0) @binding(30) var<storage, read> dgamma_q: array<vec4<f32>>;
@group(0) @binding(31) var<storage, read> dbeta_q: array<vec4<f32>>;

override WG: u32 = 256u;

// Per invocation: a count and two statistics (mean and M2, or two sums); the quad passes
// keep their two statistics in sh_a4 and sh_b4 (one count serves a quad: its channels
// share their rows). 11 KiB in all, within the 16 KiB every adapter offers.
var<workgroup> sh_n: array<f32, WG>;
var<workgroup> sh_a: array<f32, WG>;
var<workgroup> sh_b: array<f32, WG>;
var<workgroup> sh_a4: array<vec4<f32>, WG>;
var<workgroup> sh_b4: array<vec4<f32>, WG>;

// Where an invocation sits in its workgroup's lanes x columns layout (in the quad passes,
// col and width count quads).
struct Tile {
    col: u32,
    lane: u32,
    lanes: u32,
    width: u32,
}

fn tile(wid: vec3<u32>, lid: u32) -> Tile {
    let width = 1u << p.col_log2;
    return Tile(wid.x * width + (lid & (width - 1u)), lid >> p.col_log2, WG >> p.col_log2, width);
}

// Rows in chunk k (never 0 for k < chunks: the host sizes chunks that way).
fn chunk_size(k: u32) -> f32 {
    return f32(min(p.chunk_rows, p.rows - k * p.chunk_rows));
}

// Folds the lanes' (n, mean, M2) into lane 0 with Chan's merge. Every invocation must call
// it: it holds barriers, and t.lanes is uniform.
fn fold_welford(t: Tile, lid: u32) {
    workgroupBarrier();
    for (var half = t.lanes >> 1u; half > 0u; half >>= 1u) {
        if (t.lane < half) {
            let j = lid + half * t.width;
            let na = sh_n[lid];
            let nb = sh_n[j];
            let n = na + nb;
            if (nb > 0.0) {
                let d = sh_a[j] - sh_a[lid];
                let f = nb / n;
                sh_a[lid] += d * f;
                sh_b[lid] += sh_b[j] + d * d * na * f;
                sh_n[lid] = n;
            }
        }
        workgroupBarrier();
    }
}

// Folds the lanes' two sums into lane 0; same contract as fold_welford.
fn fold_sums(t: Tile, lid: u32) {
    workgroupBarrier();
    for (var half = t.lanes >> 1u; half > 0u; half >>= 1u) {
        if (t.lane < half) {
            let j = lid + half * t.width;
            sh_a[lid] += sh_a[j];
            sh_b[lid] += sh_b[j];
        }
        workgroupBarrier();
    }
}

// fold_welford of the quad passes' (n, mean, M2) in sh_n, sh_a4 and sh_b4.
fn fold_welford4(t: Tile, lid: u32) {
    workgroupBarrier();
    for (var half = t.lanes >> 1u; half > 0u; half >>= 1u) {
        if (t.lane < half) {
            let j = lid + half * t.width;
            let na = sh_n[lid];
            let nb = sh_n[j];
            let n = na + nb;
            if (nb > 0.0) {
                let d = sh_a4[j] - sh_a4[lid];
                let f = nb / n;
                sh_a4[lid] += d * f;
                sh_b4[lid] += sh_b4[j] + d * d * na * f;
                sh_n[lid] = n;
            }
        }
        workgroupBarrier();
    }
}

// fold_sums of the quad passes' sums in sh_a4 and sh_b4.
fn fold_sums4(t: Tile, lid: u32) {
    workgroupBarrier();
    for (var half = t.lanes >> 1u; half > 0u; half >>= 1u) {
        if (t.lane < half) {
            let j = lid + half * t.width;
            sh_a4[lid] += sh_a4[j];
            sh_b4[lid] += sh_b4[j];
        }
        workgroupBarrier();
    }
}

// Column c's two statistics of a chunk into the planes of partials that the merges read.
fn write_partial(chunk: u32, c: u32, a: f32, b: f32) {
    partials[chunk * p.cols + c] = a;
    partials[(p.chunks + chunk) * p.cols + c] = b;
}

// The same for quad q's four columns.
fn write_partial4(chunk: u32, q: u32, a: vec4<f32>, b: vec4<f32>) {
    for (var e = 0u; e < 4u; e++) {
        write_partial(chunk, 4u * q + e, a[e], b[e]);
    }
}

// is_nan, relu and relu_grad (and their vec4 forms) come from lib/relu.wgsl.

fn linear_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// Element i of x, y and dy, widened to f32 where they are stored as f16.
fn x_at(i: u32) -> f32 {
    return act_elem(x[act_word(i)], i);
}
fn y_at(i: u32) -> f32 {
    return act_elem(y[act_word(i)], i);
}
fn dy_at(i: u32) -> f32 {
    return act_elem(dy[act_word(i)], i);
}

// A running count, mean and sum of squared deviations.
struct Welford {
    n: f32,
    mean: f32,
    m2: f32,
}

fn welford(s: Welford, v: f32) -> Welford {
    let n = s.n + 1.0;
    let d = v - s.mean;
    let mean = s.mean + d / n;
    return Welford(n, mean, s.m2 + d * (v - mean));
}

// Four columns' Welford states over the same rows: one count.
struct Welford4 {
    n: f32,
    mean: vec4<f32>,
    m2: vec4<f32>,
}

// welford on each of four columns.
fn welford4(s: Welford4, v: vec4<f32>) -> Welford4 {
    let n = s.n + 1.0;
    let d = v - s.mean;
    let mean = s.mean + d / n;
    return Welford4(n, mean, s.m2 + d * (v - mean));
}

// Four rows of four columns into the running state at once: the rows' own mean and M2 by
// two passes over the registers, then Chan's merge, so one scalar division serves sixteen
// values where welford4 divides each (the H200 ran stats_partial4 at 45% of its memory
// floor, the only BatchNorm pass under 60%).
fn welford4_block(s: Welford4, v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>) -> Welford4 {
    let m = ((v0 + v1) + (v2 + v3)) * 0.25;
    let d0 = v0 - m;
    let d1 = v1 - m;
    let d2 = v2 - m;
    let d3 = v3 - m;
    let m2 = (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    let n = s.n + 4.0;
    let f = 4.0 / n;
    let d = m - s.mean;
    return Welford4(n, s.mean + d * f, s.m2 + m2 + d * d * (s.n * f));
}

// Pass 1 of the training statistics: per (chunk, column) mean and M2 into
// partials[chunk * cols + col] and partials[(chunks + chunk) * cols + col].
@compute @workgroup_size(WG)
fn stats_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    let chunk = wid.y;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    var s = Welford(0.0, 0.0, 0.0);
    if (t.col < p.cols) {
        // Four rows' loads issued before their updates: one 4-byte load at a time, each
        // waited for, left the memory idle (the same rows, in the same order, as one by one).
        let step = t.lanes * p.cols;
        var r = start + t.lane;
        for (; r + 3u * t.lanes < end; r += 4u * t.lanes) {
            let i = r * p.cols + t.col;
            let v = vec4<f32>(x_at(i), x_at(i + step), x_at(i + 2u * step), x_at(i + 3u * step));
            s = welford(welford(welford(welford(s, v.x), v.y), v.z), v.w);
        }
        for (; r < end; r += t.lanes) {
            s = welford(s, x_at(r * p.cols + t.col));
        }
    }
    sh_n[lid] = s.n;
    sh_a[lid] = s.mean;
    sh_b[lid] = s.m2;
    fold_welford(t, lid);
    if (t.lane == 0u && t.col < p.cols && chunk < p.chunks) {
        write_partial(chunk, t.col, sh_a[lid], sh_b[lid]);
    }
}

// Four rows of quad column i's loads at once, `step` quads apart: the first passes keep
// them in flight together.
fn x_rows4(i: u32, step: u32) -> array<act4, 4> {
    return array<act4, 4>(x4[i], x4[i + step], x4[i + 2u * step], x4[i + 3u * step]);
}
fn dy_rows4(i: u32, step: u32) -> array<act4, 4> {
    return array<act4, 4>(dy4[i], dy4[i + step], dy4[i + 2u * step], dy4[i + 3u * step]);
}

// stats_partial over quads (channels divisible by 4): the lanes of quad column t.col walk
// the chunk's rows as stats_partial's do, four channels a load (8 bytes as f16, where the
// scalar pass loads each shared word twice), and write the same partials.
@compute @workgroup_size(WG)
fn stats_partial4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    stats_chunk4(t, wid.y, lid);
    if (t.lane == 0u && t.col < (p.cols >> 2u)) {
        write_partial4(wid.y, t.col, sh_a4[lid], sh_b4[lid]);
    }
}

// The statistics of quad column t.col over chunk `chunk`, folded into lane 0's sh_n, sh_a4
// and sh_b4 (the first pass of stats_partial4 and of batchnorm_merge.wgsl's stats_merged4).
// Every invocation must call it: it holds barriers.
fn stats_chunk4(t: Tile, chunk: u32, lid: u32) {
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    let quads = p.cols >> 2u;
    var s = Welford4(0.0, vec4<f32>(0.0), vec4<f32>(0.0));
    if (t.col < quads) {
        // Four rows' loads in flight, as in stats_partial, merged as one block; the next
        // four rows' loads are issued before this block's merge (the last block reloads its
        // own rows), as in grad_sums_chunk4.
        let step = t.lanes * quads;
        var r = start + t.lane;
        if (r + 3u * t.lanes < end) {
            var i = r * quads + t.col;
            var v = x_rows4(i, step);
            loop {
                let next = r + 4u * t.lanes;
                let more = next + 3u * t.lanes < end;
                let j = select(i, next * quads + t.col, more);
                let nv = x_rows4(j, step);
                s = welford4_block(s, act_quad(v[0]), act_quad(v[1]), act_quad(v[2]), act_quad(v[3]));
                r = next;
                if (!more) { break; }
                i = j;
                v = nv;
            }
        }
        for (; r < end; r += t.lanes) {
            s = welford4(s, act_quad(x4[r * quads + t.col]));
        }
    }
    sh_n[lid] = s.n;
    sh_a4[lid] = s.mean;
    sh_b4[lid] = s.m2;
    fold_welford4(t, lid);
}

// The means of column col's partials are merged less the first chunk's, the same for every
// lane: a running mean near zero keeps digits a running mean near 100 rounds away (4e-5 of
// the mean after 128 sequential merges, which dgamma then carries).
fn merge_shift(col: u32) -> f32 {
    return partials_in[col];
}

// Chan's merge of the chunks first, first + stride, ... of column col's partials, the means
// less merge_shift(col).
fn merge_chunks(col: u32, first: u32, stride: u32) -> Welford {
    let shift = merge_shift(col);
    var w = Welford(0.0, 0.0, 0.0);
    for (var k = first; k < p.chunks; k += stride) {
        let nb = chunk_size(k);
        let total = w.n + nb;
        let d = (partials_in[k * p.cols + col] - shift) - w.mean;
        let f = nb / total;
        w.mean += d * f;
        w.m2 += partials_in[(p.chunks + k) * p.cols + col] + d * d * w.n * f;
        w.n = total;
    }
    return w;
}

// Column c's batch statistics into saved_out, and the moving statistics updated as
// moving = momentum * moving + (1 - momentum) * batch.
fn store_stats(c: u32, batch_mean: f32, m2: f32) {
    // clamps rounding below zero; a NaN variance reaches the moving statistics as NaN
    let batch_var = relu(m2 / f32(p.rows));
    saved_out[c] = batch_mean;
    saved_out[p.cols + c] = inverseSqrt(batch_var + p.epsilon);
    moving_mean[c] = p.momentum * moving_mean[c] + (1.0 - p.momentum) * batch_mean;
    moving_var[c] = p.momentum * moving_var[c] + (1.0 - p.momentum) * batch_var;
}

// Pass 2: merges the chunks per column and stores the statistics.
@compute @workgroup_size(WG)
fn stats_finalize(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    var w = Welford(0.0, 0.0, 0.0);
    if (t.col < p.cols) {
        w = merge_chunks(t.col, t.lane, t.lanes);
    }
    sh_n[lid] = w.n;
    sh_a[lid] = w.mean;
    sh_b[lid] = w.m2;
    fold_welford(t, lid);
    if (t.lane == 0u && t.col < p.cols) {
        store_stats(t.col, sh_a[lid] + merge_shift(t.col), sh_b[lid]);
    }
}

// Only ever run on f32 activations (see the header).
fn write_y(i: u32, c: u32, mean: f32, inv_std: f32) {
    var v = affine(x_at(i), mean, inv_std * gamma[c], beta[c]);
    if (p.relu != 0u) {
        v = relu(v);
    }
    out[i] = v;
}

// Pass 3 of training: y = gamma * (x - mean) * inv_std + beta with the batch statistics.
@compute @workgroup_size(WG)
fn normalize_train(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = linear_index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    let c = i % p.cols;
    write_y(i, c, saved[c], saved[p.cols + c]);
}

// Inference: the same with the moving statistics.
@compute @workgroup_size(WG)
fn normalize_infer(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = linear_index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    let c = i % p.cols;
    write_y(i, c, moving_mean_in[c], inverseSqrt(moving_var_in[c] + p.epsilon));
}

// Channels c..c+3 (c a multiple of 4) of a per-channel array, through its quad view; saved4
// takes p.cols + c for the inverse standard deviations.
fn gamma4(c: u32) -> vec4<f32> { return gamma_q[c >> 2u]; }
fn beta4(c: u32) -> vec4<f32> { return beta_q[c >> 2u]; }
fn saved4(c: u32) -> vec4<f32> { return saved_q[c >> 2u]; }
fn moving_mean4(c: u32) -> vec4<f32> { return moving_mean_q[c >> 2u]; }
fn moving_var4(c: u32) -> vec4<f32> { return moving_var_q[c >> 2u]; }
fn dgamma4(c: u32) -> vec4<f32> { return dgamma_q[c >> 2u]; }
fn dbeta4(c: u32) -> vec4<f32> { return dbeta_q[c >> 2u]; }

// The vec4 per-element passes take one quad of channels over QUAD_ROWS consecutive rows an
// invocation, consecutive invocations consecutive quads of a row, so that the channels'
// factors (then four scalar loads each) are loaded once for all of them: one quad a load, they
// cost more than the quad itself under f16 (H100, resnet50 mixed: the normalize at 52% of
// its memory floor). Keep in step with QUAD_ROWS in src/kernels/batchnorm.rs.
const QUAD_ROWS: u32 = 4u;

struct Quads {
    // The first quad's index, the quads between rows, how many rows, and the first channel.
    first: u32,
    stride: u32,
    count: u32,
    c: u32,
}

fn quads_of(i: u32) -> Quads {
    let per_row = p.cols >> 2u;
    let row0 = (i / per_row) * QUAD_ROWS;
    let cq = i % per_row;
    let count = select(0u, min(QUAD_ROWS, p.rows - min(row0, p.rows)), row0 < p.rows);
    return Quads(row0 * per_row + cq, per_row, count, cq << 2u);
}

// The ReLU of the layer, or of the residual join the pass writes.
fn finish4(v: vec4<f32>) -> vec4<f32> {
    if (p.relu != 0u) {
        return relu4(v);
    }
    return v;
}

// The invocation's quads of x (or of addend4), every load issued before the first store:
// a load after a store to another binding waits unless the compiler proves them apart, so
// loading row by row between stores could leave one load in flight at a time (the H200 ran
// these passes at 61-80% of their memory floor; the gain is not yet measured).
fn quads_x(q: Quads) -> array<vec4<f32>, QUAD_ROWS> {
    var v: array<vec4<f32>, QUAD_ROWS>;
    for (var r = 0u; r < QUAD_ROWS; r++) {
        if (r < q.count) {
            v[r] = act_quad(x4[q.first + r * q.stride]);
        }
    }
    return v;
}

fn quads_addend(q: Quads) -> array<vec4<f32>, QUAD_ROWS> {
    var v: array<vec4<f32>, QUAD_ROWS>;
    for (var r = 0u; r < QUAD_ROWS; r++) {
        if (r < q.count) {
            v[r] = act_quad(addend4[q.first + r * q.stride]);
        }
    }
    return v;
}

// y over the invocation's quads: affine4, k = inv_std * gamma and b = beta.
fn write_y4(q: Quads, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) {
    let x = quads_x(q);
    for (var r = 0u; r < QUAD_ROWS; r++) {
        if (r < q.count) {
            out4[q.first + r * q.stride] = act_pack(finish4(affine4(x[r], mean, k, b)));
        }
    }
}

// write_y4 with the addend joined before the ReLU, rounded once: a residual block's end in
// one pass over its output instead of two (the normalize's store and the join's load).
fn write_joined4(q: Quads, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) {
    let x = quads_x(q);
    let a = quads_addend(q);
    for (var r = 0u; r < QUAD_ROWS; r++) {
        if (r < q.count) {
            out4[q.first + r * q.stride] = act_pack(finish4(affine4(x[r], mean, k, b) + a[r]));
        }
    }
}

// normalize_train and normalize_infer over the vec4s, QUAD_ROWS rows an invocation.
@compute @workgroup_size(WG)
fn normalize_train4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    write_y4(q, saved4(q.c), saved4(p.cols + q.c) * gamma4(q.c), beta4(q.c));
}

// The moving statistics' mean and inv_std * gamma of channels c..c+3.
fn moving4(c: u32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(moving_mean4(c), inverseSqrt(moving_var4(c) + vec4<f32>(p.epsilon)) * gamma4(c));
}

@compute @workgroup_size(WG)
fn normalize_infer4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    let m = moving4(q.c);
    write_y4(q, m[0], m[1], beta4(q.c));
}

// normalize_train4 and normalize_infer4 joined with addend4 (write_joined4).
@compute @workgroup_size(WG)
fn normalize_train_joined4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    write_joined4(q, saved4(q.c), saved4(p.cols + q.c) * gamma4(q.c), beta4(q.c));
}

@compute @workgroup_size(WG)
fn normalize_infer_joined4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    let m = moving4(q.c);
    write_joined4(q, m[0], m[1], beta4(q.c));
}

// The inference backward's upstream gradient, masked by the fused ReLU's output y where
// there is one; NaN where y is NaN, as in elementwise.wgsl's relu_backward.
fn grad(i: u32) -> f32 {
    if (p.relu == 0u) { return dy_at(i); }
    return relu_grad(dy_at(i), y_at(i));
}

// grad of quad i (dy4 and y4).
fn grad_quad(i: u32) -> vec4<f32> {
    if (p.relu == 0u) { return act_quad(dy4[i]); }
    return relu_grad4(act_quad(dy4[i]), act_quad(y4[i]));
}

// The training backward's upstream gradient: dy, masked by the fused ReLU where there is
// one. The mask is the forward's y > 0 (NaN where y is NaN) with y recomputed from x rather
// than read: write_y's and write_y4's expression on the same saved statistics and
// parameters, rounded as y was stored, so the same y. It spares the first pass a third of
// its reads and the last a quarter of its traffic, and the layer's output is not needed here.
fn y_again(xv: f32, c: u32) -> f32 {
    return relu(affine(xv, saved[c], saved[p.cols + c] * gamma[c], beta[c]));
}

fn grad_train(i: u32) -> f32 {
    if (p.relu == 0u) { return dy_at(i); }
    return relu_grad(dy_at(i), y_again(x_at(i), i % p.cols));
}

// y_again of the quad xq of x: k = inv_std * gamma, b = beta of its channels.
fn y_again4(xq: vec4<f32>, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return act_quad(act_pack(relu4(affine4(xq, mean, k, b))));
}

// grad_train of quad i, whose x is xq.
fn grad_train4(i: u32, xq: vec4<f32>, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return grad_of4(act_quad(dy4[i]), xq, mean, k, b);
}

// grad_train4 on a dy quad already loaded.
fn grad_of4(dq: vec4<f32>, xq: vec4<f32>, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    if (p.relu == 0u) { return dq; }
    return relu_grad4(dq, y_again4(xq, mean, k, b));
}

// Backward pass 1: per (chunk, column) Σ dy and Σ dy * (x - mean) into the two planes of
// partials (inv_std is applied once, in the merge).
@compute @workgroup_size(WG)
fn backward_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    let chunk = wid.y;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    var s_dy = 0.0;
    var s_dyx = 0.0;
    if (t.col < p.cols) {
        let mean = saved[t.col];
        // Four rows at a time, as in stats_partial.
        let step = t.lanes * p.cols;
        var r = start + t.lane;
        for (; r + 3u * t.lanes < end; r += 4u * t.lanes) {
            let i = r * p.cols + t.col;
            let g = vec4<f32>(grad_train(i), grad_train(i + step), grad_train(i + 2u * step), grad_train(i + 3u * step));
            let xc = vec4<f32>(x_at(i), x_at(i + step), x_at(i + 2u * step), x_at(i + 3u * step)) - vec4<f32>(mean);
            s_dy += ((g.x + g.y) + g.z) + g.w;
            s_dyx += ((g.x * xc.x + g.y * xc.y) + g.z * xc.z) + g.w * xc.w;
        }
        for (; r < end; r += t.lanes) {
            let i = r * p.cols + t.col;
            let g = grad_train(i);
            s_dy += g;
            s_dyx += g * (x_at(i) - mean);
        }
    }
    sh_a[lid] = s_dy;
    sh_b[lid] = s_dyx;
    fold_sums(t, lid);
    if (t.lane == 0u && t.col < p.cols && chunk < p.chunks) {
        write_partial(chunk, t.col, sh_a[lid], sh_b[lid]);
    }
}

// backward_partial over quads, laid out as stats_partial4.
@compute @workgroup_size(WG)
fn backward_partial4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    grad_sums_chunk4(t, wid.y, lid);
    if (t.lane == 0u && t.col < (p.cols >> 2u)) {
        write_partial4(wid.y, t.col, sh_a4[lid], sh_b4[lid]);
    }
}

// backward_partial's two sums of quad column t.col over chunk `chunk`, folded into lane 0's
// sh_a4 and sh_b4 (the first pass of backward_partial4 and of batchnorm_merge.wgsl's
// backward_merged4). Every invocation must call it: it holds barriers.
fn grad_sums_chunk4(t: Tile, chunk: u32, lid: u32) {
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    let quads = p.cols >> 2u;
    var s_dy = vec4<f32>(0.0);
    var s_dyx = vec4<f32>(0.0);
    if (t.col < quads) {
        let c = 4u * t.col;
        let mean = saved4(c);
        let k = saved4(p.cols + c) * gamma4(c);
        let b = beta4(c);
        // Four rows at a time, summed in backward_partial's order; the next four rows' loads
        // are issued before this step's arithmetic (the last step reloads its own rows), so
        // that each lane keeps eight quads in flight past the sums.
        let step = t.lanes * quads;
        var r = start + t.lane;
        if (r + 3u * t.lanes < end) {
            var i = r * quads + t.col;
            var x = x_rows4(i, step);
            var d = dy_rows4(i, step);
            loop {
                let next = r + 4u * t.lanes;
                let more = next + 3u * t.lanes < end;
                let j = select(i, next * quads + t.col, more);
                let nx = x_rows4(j, step);
                let nd = dy_rows4(j, step);
                let xq0 = act_quad(x[0]);
                let xq1 = act_quad(x[1]);
                let xq2 = act_quad(x[2]);
                let xq3 = act_quad(x[3]);
                let g0 = grad_of4(act_quad(d[0]), xq0, mean, k, b);
                let g1 = grad_of4(act_quad(d[1]), xq1, mean, k, b);
                let g2 = grad_of4(act_quad(d[2]), xq2, mean, k, b);
                let g3 = grad_of4(act_quad(d[3]), xq3, mean, k, b);
                s_dy += ((g0 + g1) + g2) + g3;
                s_dyx += ((g0 * (xq0 - mean) + g1 * (xq1 - mean)) + g2 * (xq2 - mean)) + g3 * (xq3 - mean);
                r = next;
                if (!more) { break; }
                i = j;
                x = nx;
                d = nd;
            }
        }
        for (; r < end; r += t.lanes) {
            let i = r * quads + t.col;
            let xq = act_quad(x4[i]);
            let g = grad_train4(i, xq, mean, k, b);
            s_dy += g;
            s_dyx += g * (xq - mean);
        }
    }
    sh_a4[lid] = s_dy;
    sh_b4[lid] = s_dyx;
    fold_sums4(t, lid);
}

// Σ dy and Σ dy * (x - mean) over the chunks first, first + stride, ... of column col's partials.
fn sum_chunks(col: u32, first: u32, stride: u32) -> vec2<f32> {
    var s = vec2<f32>(0.0);
    for (var k = first; k < p.chunks; k += stride) {
        s += vec2<f32>(partials_in[k * p.cols + col], partials_in[(p.chunks + k) * p.cols + col]);
    }
    return s;
}

// dbeta = Σ dy, dgamma = Σ dy * x_hat of column c.
fn store_gradients(c: u32, sums: vec2<f32>) {
    dbeta[c] = sums.x;
    dgamma[c] = sums.y * saved[p.cols + c];
}

// Backward pass 2: the chunks merged per column into dbeta and dgamma.
@compute @workgroup_size(WG)
fn backward_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    var s = vec2<f32>(0.0);
    if (t.col < p.cols) {
        s = sum_chunks(t.col, t.lane, t.lanes);
    }
    sh_a[lid] = s.x;
    sh_b[lid] = s.y;
    fold_sums(t, lid);
    if (t.lane == 0u && t.col < p.cols) {
        store_gradients(t.col, vec2<f32>(sh_a[lid], sh_b[lid]));
    }
}

// Backward pass 3: dx = gamma * inv_std / M * (M * dy - dbeta - x_hat * dgamma), M = rows.
@compute @workgroup_size(WG)
fn backward_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = linear_index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    let c = i % p.cols;
    let inv_std = saved[p.cols + c];
    let x_hat = (x_at(i) - saved[c]) * inv_std;
    let m = f32(p.rows);
    out[i] = gamma[c] * inv_std * (grad_train(i) - (dbeta_in[c] + x_hat * dgamma_in[c]) / m);
}

// backward_dx over rows * cols / 4 vec4s.
@compute @workgroup_size(WG)
fn backward_dx4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    let c = q.c;
    let inv_std = saved4(p.cols + c);
    let mean = saved4(c);
    let k = inv_std * gamma4(c);
    let b = beta4(c);
    let db = dbeta4(c);
    let dg = dgamma4(c);
    // Row by row, unlike write_y4: loading every row's x, dy and y first (as quads_x does)
    // took ResNet-50's 53 passes on the H200 from 2.99 to 3.36 ms (benches/results/2026-11-28f).
    for (var r = 0u; r < q.count; r++) {
        let i = q.first + r * q.stride;
        let xq = act_quad(x4[i]);
        let x_hat = (xq - mean) * inv_std;
        out4[i] = act_pack(k * (grad_train4(i, xq, mean, k, b) - (db + x_hat * dg) / f32(p.rows)));
    }
}

// Backward of the inference forward, for a layer that trains in inference mode (Keras 3's
// frozen BatchNormalization): the moving statistics are constants, so dx = dy * gamma *
// inv_std, and gamma and beta get no gradient.
@compute @workgroup_size(WG)
fn backward_infer_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = linear_index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    let c = i % p.cols;
    out[i] = grad(i) * (gamma[c] * inverseSqrt(moving_var_in[c] + p.epsilon));
}

// backward_infer_dx over rows * cols / 4 vec4s.
@compute @workgroup_size(WG)
fn backward_infer_dx4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let q = quads_of(linear_index(wid, nwg, lid));
    if (q.count == 0u) { return; }
    let c = q.c;
    let k = gamma4(c) * inverseSqrt(moving_var4(c) + vec4<f32>(p.epsilon));
    for (var r = 0u; r < q.count; r++) {
        let i = q.first + r * q.stride;
        out4[i] = act_pack(grad_quad(i) * k);
    }
}
