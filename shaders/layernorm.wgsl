// LayerNormalization over the last dimension (Keras' axis=-1).
//
// Every tensor is seen as a row-major [rows, cols] matrix: rows = N*H*W (or N after a Dense
// layer), cols = channels. Unlike BatchNorm the statistics belong to a row, so the row
// passes give each row 2^lane_log2 adjacent invocations of a workgroup (WG >> lane_log2
// rows per workgroup): a row of 3 channels wastes no more than 1 of 4 lanes, and a row of
// thousands has all WG lanes walk it. Row sums fold through a tree in workgroup memory.
//
// The parameter gradients are column sums over the rows, split as in shaders/reduce.wgsl
// (a first pass per chunk of rows and column tile, a merge over the chunks): the same
// order on every run, so the sums are deterministic.
//
// saved holds [rows, 2]: per row the mean and 1 / sqrt(var + epsilon), var the biased
// variance, computed in two passes over the row (x - mean squared): one pass of E[x²] − E[x]²
// in f32 loses every digit when |mean| >> std.

struct Params {
    rows: u32,
    cols: u32,
    lane_log2: u32,
    epsilon: f32,
    // The column-sum passes' split (see kernels::reduce::Split).
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// Inputs.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read> gamma: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> saved: array<f32>;
@group(0) @binding(6) var<storage, read> partials_in: array<f32>;
// Outputs.
@group(0) @binding(7) var<storage, read_write> saved_out: array<f32>;
@group(0) @binding(8) var<storage, read_write> out: array<f32>;
@group(0) @binding(9) var<storage, read_write> partials: array<f32>;
@group(0) @binding(10) var<storage, read_write> dgamma: array<f32>;
@group(0) @binding(11) var<storage, read_write> dbeta: array<f32>;

override WG: u32 = 256u;

var<workgroup> sh_a: array<f32, WG>;
var<workgroup> sh_b: array<f32, WG>;

// Where an invocation sits in a row pass: its row, its lane in the row, the row's lanes.
struct Seg {
    row: u32,
    lane: u32,
    lanes: u32,
}

fn seg(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Seg {
    let group = wid.x + wid.y * nwg.x;
    return Seg(group * (WG >> p.lane_log2) + (lid >> p.lane_log2), lid & ((1u << p.lane_log2) - 1u), 1u << p.lane_log2);
}

// Folds each row's two lane sums into the row's first lane. Every invocation must call it
// (it holds barriers; s.lanes is uniform), rows past the end with zeros.
fn fold_row(s: Seg, lid: u32) {
    workgroupBarrier();
    for (var half = s.lanes >> 1u; half > 0u; half >>= 1u) {
        if (s.lane < half) {
            sh_a[lid] += sh_a[lid + half];
            sh_b[lid] += sh_b[lid + half];
        }
        workgroupBarrier();
    }
}

// Forward: per row mean and inv_std into saved_out, y = gamma * (x - mean) * inv_std + beta.
@compute @workgroup_size(WG)
fn forward_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let s = seg(wid, nwg, lid);
    let live = s.row < p.rows;
    let base = s.row * p.cols;
    let lead = lid - s.lane;
    let n = f32(p.cols);
    var sum = 0.0;
    if (live) {
        for (var c = s.lane; c < p.cols; c += s.lanes) {
            sum += x[base + c];
        }
    }
    sh_a[lid] = sum;
    sh_b[lid] = 0.0;
    fold_row(s, lid);
    let mean = sh_a[lead] / n;
    var sq = 0.0;
    if (live) {
        for (var c = s.lane; c < p.cols; c += s.lanes) {
            let d = x[base + c] - mean;
            sq += d * d;
        }
    }
    // Every lane has read its row's mean before the slots are reused.
    workgroupBarrier();
    sh_a[lid] = 0.0;
    sh_b[lid] = sq;
    fold_row(s, lid);
    let inv_std = inverseSqrt(sh_b[lead] / n + p.epsilon);
    if (live) {
        if (s.lane == 0u) {
            saved_out[2u * s.row] = mean;
            saved_out[2u * s.row + 1u] = inv_std;
        }
        for (var c = s.lane; c < p.cols; c += s.lanes) {
            out[base + c] = (x[base + c] - mean) * inv_std * gamma[c] + beta[c];
        }
    }
}

// Backward, dx: with g = dy * gamma and n = cols,
// dx = inv_std / n * (n * g - Σ g - x_hat * Σ g * x_hat), the sums over the row.
@compute @workgroup_size(WG)
fn backward_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let s = seg(wid, nwg, lid);
    let live = s.row < p.rows;
    let base = s.row * p.cols;
    let lead = lid - s.lane;
    var mean = 0.0;
    var inv_std = 0.0;
    var sg = 0.0;
    var sgx = 0.0;
    if (live) {
        mean = saved[2u * s.row];
        inv_std = saved[2u * s.row + 1u];
        for (var c = s.lane; c < p.cols; c += s.lanes) {
            let g = dy[base + c] * gamma[c];
            sg += g;
            sgx += g * (x[base + c] - mean) * inv_std;
        }
    }
    sh_a[lid] = sg;
    sh_b[lid] = sgx;
    fold_row(s, lid);
    let n = f32(p.cols);
    let sum_g = sh_a[lead];
    let sum_gx = sh_b[lead];
    if (live) {
        for (var c = s.lane; c < p.cols; c += s.lanes) {
            let x_hat = (x[base + c] - mean) * inv_std;
            out[base + c] = inv_std * (dy[base + c] * gamma[c] - (sum_g + x_hat * sum_gx) / n);
        }
    }
}

// Where an invocation sits in a column pass's lanes x columns layout (as in batchnorm.wgsl).
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

// Folds the lanes' two sums of each column into lane 0; same contract as fold_row.
fn fold_cols(t: Tile, lid: u32) {
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

// Parameter gradients, pass 1: per (chunk, column) Σ dy and Σ dy * x_hat into the two
// planes of partials.
@compute @workgroup_size(WG)
fn params_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    let chunk = wid.y;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    var s_dy = 0.0;
    var s_dyx = 0.0;
    if (t.col < p.cols) {
        for (var r = start + t.lane; r < end; r += t.lanes) {
            let i = r * p.cols + t.col;
            s_dy += dy[i];
            s_dyx += dy[i] * (x[i] - saved[2u * r]) * saved[2u * r + 1u];
        }
    }
    sh_a[lid] = s_dy;
    sh_b[lid] = s_dyx;
    fold_cols(t, lid);
    if (t.lane == 0u && t.col < p.cols) {
        partials[chunk * p.cols + t.col] = sh_a[lid];
        partials[(p.chunks + chunk) * p.cols + t.col] = sh_b[lid];
    }
}

// Pass 2: dbeta = Σ dy, dgamma = Σ dy * x_hat, merged over the chunks.
@compute @workgroup_size(WG)
fn params_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    var s_dy = 0.0;
    var s_dyx = 0.0;
    if (t.col < p.cols) {
        for (var k = t.lane; k < p.chunks; k += t.lanes) {
            s_dy += partials_in[k * p.cols + t.col];
            s_dyx += partials_in[(p.chunks + k) * p.cols + t.col];
        }
    }
    sh_a[lid] = s_dy;
    sh_b[lid] = s_dyx;
    fold_cols(t, lid);
    if (t.lane == 0u && t.col < p.cols) {
        dbeta[t.col] = sh_a[lid];
        dgamma[t.col] = sh_b[lid];
    }
}
