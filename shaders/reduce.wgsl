// Column sums of a row-major [rows, cols] matrix (per-channel sums of an NHWC tensor, whose
// channels are the fastest dimension), and through cols = 1 the sum of a vector.
//
// A workgroup owns a tile of 2^col_log2 adjacent columns and a chunk of chunk_rows rows: its
// WG invocations are laid out as lanes x columns with the column fastest, so neighbouring
// invocations read neighbouring floats of a row. Each lane sums every lanes-th row of the
// chunk, the lanes are then folded by a tree in workgroup memory, and lane 0 writes
// out[chunk * cols + col]. With one chunk that is the answer; with several, the host runs
// the same kernel again over the [chunks, cols] partials (see src/kernels/reduce.rs).

struct Params {
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

override WG: u32 = 256u;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn sum_columns(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let width = 1u << p.col_log2;
    let lanes = WG >> p.col_log2;
    let lane = lid >> p.col_log2;
    let col = wid.x * width + (lid & (width - 1u));
    let chunk = wid.y;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);

    var s = 0.0;
    if (col < p.cols) {
        for (var r = start + lane; r < end; r += lanes) {
            s += x[r * p.cols + col];
        }
    }
    partial[lid] = s;
    workgroupBarrier();
    // lanes is uniform (it comes from the uniform buffer), so every invocation reaches
    // every barrier.
    for (var half = lanes >> 1u; half > 0u; half >>= 1u) {
        if (lane < half) {
            let other = lid + half * width;
            partial[lid] += partial[other];
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < p.cols && chunk < p.chunks) {
        out[chunk * p.cols + col] = partial[lid];
    }
}
