// The quad first passes of batchnorm.wgsl with their merge: the last workgroup of each
// column tile to finish merges the tile's partials as stats_finalize and backward_merge
// would, so the GPU waits for one dispatch where it waited for two (a merge pass is a few
// microseconds of almost no work, 106 of them in a ResNet-50 step).
//
// The tile's workgroups each write their partials and count themselves done on the tile's
// counter; the one that counts last reads them all. What the others wrote must reach it
// past any cache a GPU keeps per workgroup: the counters are atomics, and the partials are
// coherent (`@coherent`, wgpu's MEMORY_DECORATION_COHERENT, the host runs these passes only
// where the device has it) and read as plain loads, which keep many loads in flight where
// atomic loads went one at a time (the H200 took 8-16 us more a pass with atomic ones).
// The storage barriers publish the partials before the count and order the last one's reads
// after it. The last workgroup leaves its counter at zero for the next run; a new buffer
// starts zeroed.
//
// Appended to batchnorm.wgsl (its parameters, bindings, folds and first passes).

// Column tiles a dispatch may have: the host runs the merge passes where the channels give
// no more (16,384 channels at 64 a tile).
const MAX_TILES: u32 = 256u;

struct Sync {
    counters: array<atomic<u32>, MAX_TILES>,
    // The partials, laid out as batchnorm.wgsl's partials, four channels an element.
    partials: array<vec4<f32>>,
}

@group(0) @binding(24) @coherent var<storage, read_write> sync: Sync;

// Whether this workgroup is its column tile's last (see publish_last).
var<workgroup> sh_last: u32;

// Chunk k's statistic `plane` (0 or 1) of quad column q, in partials' layout.
fn sync_index(plane: u32, k: u32, q: u32) -> u32 {
    return (plane * p.chunks + k) * (p.cols >> 2u) + q;
}

// Writes this workgroup's partials (lane 0's sh_a4 and sh_b4, its chunk wid.y of column tile
// wid.x) and says whether it is the tile's last to have, the one that then merges them; the
// last one leaves the tile's counter at zero. Every invocation must call it (barriers); the
// result is uniform.
fn publish_last(t: Tile, wid: vec3<u32>, lid: u32) -> bool {
    if (t.lane == 0u && t.col < (p.cols >> 2u)) {
        sync.partials[sync_index(0u, wid.y, t.col)] = sh_a4[lid];
        sync.partials[sync_index(1u, wid.y, t.col)] = sh_b4[lid];
    }
    storageBarrier();
    if (lid == 0u) {
        let last = atomicAdd(&sync.counters[wid.x], 1u) + 1u == p.chunks;
        if (last) {
            atomicStore(&sync.counters[wid.x], 0u);
        }
        sh_last = select(0u, 1u, last);
    }
    let last = workgroupUniformLoad(&sh_last) != 0u;
    if (last) {
        storageBarrier();
    }
    return last;
}

// Chan's merge of a chunk of nb rows (its mean and M2) into w.
fn chan4(w: Welford4, nb: f32, mean: vec4<f32>, m2: vec4<f32>) -> Welford4 {
    let n = w.n + nb;
    let d = mean - w.mean;
    let f = nb / n;
    return Welford4(n, w.mean + d * f, w.m2 + m2 + d * d * (w.n * f));
}

// Chunks a merging lane loads at once, a step: eight took the H200's backward_merged4 from
// 2.21 to 2.60 ms a ResNet-50 step (registers for the merge cost the first pass occupancy).
const MERGE_STEP: u32 = 4u;

// stats_partial4, its tile's last workgroup then merging as stats_finalize does, in the first
// pass's layout: each lane merges the chunks lane, lane + lanes, ... of its quad column
// (MERGE_STEP chunks' loads in flight at once, the means less chunk 0's as merge_shift has
// them), the lanes fold, and lane 0 stores the quad's statistics.
@compute @workgroup_size(WG)
fn stats_merged4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    let quads = p.cols >> 2u;
    stats_chunk4(t, wid.y, lid);
    if (!publish_last(t, wid, lid)) {
        return;
    }
    var w = Welford4(0.0, vec4<f32>(0.0), vec4<f32>(0.0));
    var shift = vec4<f32>(0.0);
    if (t.col < quads) {
        shift = sync.partials[sync_index(0u, 0u, t.col)];
        let s = t.lanes;
        var k = t.lane;
        for (; k + (MERGE_STEP - 1u) * s < p.chunks; k += MERGE_STEP * s) {
            var mean: array<vec4<f32>, MERGE_STEP>;
            var m2: array<vec4<f32>, MERGE_STEP>;
            for (var e = 0u; e < MERGE_STEP; e++) {
                mean[e] = sync.partials[sync_index(0u, k + e * s, t.col)];
                m2[e] = sync.partials[sync_index(1u, k + e * s, t.col)];
            }
            for (var e = 0u; e < MERGE_STEP; e++) {
                w = chan4(w, chunk_size(k + e * s), mean[e] - shift, m2[e]);
            }
        }
        for (; k < p.chunks; k += s) {
            w = chan4(w, chunk_size(k), sync.partials[sync_index(0u, k, t.col)] - shift, sync.partials[sync_index(1u, k, t.col)]);
        }
    }
    sh_n[lid] = w.n;
    sh_a4[lid] = w.mean;
    sh_b4[lid] = w.m2;
    fold_welford4(t, lid);
    if (t.lane == 0u && t.col < quads) {
        for (var e = 0u; e < 4u; e++) {
            store_stats(4u * t.col + e, sh_a4[lid][e] + shift[e], sh_b4[lid][e]);
        }
    }
}

// backward_partial4, its tile's last workgroup then summing the chunks as backward_merge does,
// laid out as stats_merged4's merge.
@compute @workgroup_size(WG)
fn backward_merged4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = tile(wid, lid);
    let quads = p.cols >> 2u;
    grad_sums_chunk4(t, wid.y, lid);
    if (!publish_last(t, wid, lid)) {
        return;
    }
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    if (t.col < quads) {
        let s = t.lanes;
        var k = t.lane;
        for (; k + (MERGE_STEP - 1u) * s < p.chunks; k += MERGE_STEP * s) {
            var da: array<vec4<f32>, MERGE_STEP>;
            var db: array<vec4<f32>, MERGE_STEP>;
            for (var e = 0u; e < MERGE_STEP; e++) {
                da[e] = sync.partials[sync_index(0u, k + e * s, t.col)];
                db[e] = sync.partials[sync_index(1u, k + e * s, t.col)];
            }
            for (var e = 0u; e < MERGE_STEP; e++) {
                a += da[e];
                b += db[e];
            }
        }
        for (; k < p.chunks; k += s) {
            a += sync.partials[sync_index(0u, k, t.col)];
            b += sync.partials[sync_index(1u, k, t.col)];
        }
    }
    sh_a4[lid] = a;
    sh_b4[lid] = b;
    fold_sums4(t, lid);
    if (t.lane == 0u && t.col < quads) {
        // store_gradients through the quad view of saved.
        let c = 4u * t.col;
        let inv_std = saved4(p.cols + c);
        for (var e = 0u; e < 4u; e++) {
            dbeta[c + e] = sh_a4[lid][e];
            dgamma[c + e] = sh_b4[lid][e] * inv_std[e];
        }
    }
}
