// The GEMM engine's kernel for software adapters (lavapipe, llvmpipe), appended to
// conv2d.wgsl: the same parameters, bindings, products, gathers' geometry, split-K partials
// and stores (`store`, `c_index`, `partial_base`), computed a different way.
//
// Why a kernel of its own: a software adapter runs a workgroup on one CPU thread with the
// invocations across SIMD lanes (8 with AVX2), and Mesa up to 24 turns every storage or
// workgroup load under control flow into a loop over the lanes, one scalar load per lane and
// component, while a barrier switches coroutines. The tile kernel stages A and B through
// workgroup memory, which doubles those loads and adds two barriers a K step: 3 GFLOP/s on
// two cores. Here each invocation computes a CPU_ROWS x CPU_COLS block of C straight from
// memory, in registers: per four k, 16 vec4 loads (a vec4 is one trip through the lane loop
// for four floats) feed 256 multiply-adds. No workgroup memory, no barrier. A 384 x 3072 x
// 384 product on two cores (scratch probe of the inner loop): 8 x 8 blocks 18-20 GFLOP/s,
// 4 x 16 13-15, 8 x 16 and 16 x 8 10-12 (their accumulators spill), 4 x 8 9-11.
//
// Every path choice is a pipeline constant: a runtime branch costs both of its sides here,
// since the lanes run an `if` under an execution mask rather than jumping.
//
// The gathers are separable: A[m, k] sits at row_off(m) + k_off(k) and is inside the image
// where row_h(m) + k_h(k) and row_w(m) + k_w(k) are, so the row parts are computed once per
// invocation and the k parts once per K step for all rows, advanced without a division
// (a vector division is eight scalar ones). The strided stuffed gradient is not separable
// (which taps meet an output depends on both); it alone takes `a_at` (A_GENERAL).

// Rows and columns of C per invocation; the accumulators are CPU_ROWS x CPU_COLS / 4 vec4s.
const CPU_ROWS: u32 = 8u;
const CPU_COLS: u32 = 8u;
// Invocations per workgroup: one AVX2 vector of lanes (16 and 64 ran the same).
override CPU_WG: u32 = 8u;
// A through `a_at`: the stuffed input gradient at a stride above 1.
override A_GENERAL: bool = false;
// C's quads (bit 2 of flags) and, in a dispatch that writes C itself, the bias (bit 3), as
// pipeline constants: `store`'s runtime branches on them, sixteen times inlined, made the
// whole kernel 1.6x slower (its K loop too, though they run after it).
override C_QUADS: bool = false;
override CPU_BIAS: bool = false;

// Row parts of the A gather for the invocation's rows (k-contiguous kinds) or for the first
// row of each quad of rows (m-contiguous kinds with quads): element offset and the image
// coordinates the k part adds to.
var<private> ar_off: array<i32, 8>;
var<private> ar_h: array<i32, 8>;
var<private> ar_w: array<i32, 8>;
// K-step trackers: the decomposition of the k being gathered, advanced without dividing.
// A: (c, i, j) of a k along (i, j, c) (IM2COL, DY_STUFFED), or (n, oh, ow) of a k along
// output pixels (IM2COL_T); ROWS and COLS read k itself. B (BLOCKED_T): (k % kb, block) and,
// for phase products, the block's (i', j').
var<private> at: vec3<u32>;
var<private> bt: vec2<u32>;
var<private> bt_ij: vec2<u32>;

fn a_k_contiguous() -> bool {
    return A_KIND == A_ROWS || A_KIND == A_IM2COL || A_KIND == A_DY_STUFFED;
}

// Elements between pixels of A's image (x, or dy in the input gradient), or between rows of
// a plain matrix; a grouped product's slices are a_ld apart.
fn a_ld() -> i32 {
    if (GROUPED) {
        return i32(p.a_ld);
    }
    switch A_KIND {
        case A_ROWS: {
            return i32(p.k);
        }
        case A_COLS: {
            return i32(p.m);
        }
        case A_DY_STUFFED: {
            return i32(p.filters);
        }
        default: {
            return i32(p.in_c);
        }
    }
}

// The row part of A[m, k] for a valid m: (offset, h, w).
fn a_row(m: u32) -> vec3<i32> {
    let ld = a_ld();
    switch A_KIND {
        case A_ROWS: {
            return vec3<i32>(i32(m) * ld, 0, 0);
        }
        case A_COLS: {
            return vec3<i32>(i32(m + a_off), 0, 0);
        }
        case A_IM2COL: {
            let t = m / p.out_w;
            let ih = i32((t % p.out_h) * p.stride_h) - i32(p.pad_top);
            let iw = i32((m % p.out_w) * p.stride_w) - i32(p.pad_left);
            return vec3<i32>(((i32((t / p.out_h) * p.in_h) + ih) * i32(p.in_w) + iw) * ld, ih, iw);
        }
        case A_IM2COL_T: {
            return a_tap(m % p.in_c, (m / p.in_c) / p.kw, (m / p.in_c) % p.kw);
        }
        default: { // A_DY_STUFFED at unit stride: dx[ih] gathers dy[ih + pt - i]
            let t = m / p.in_w;
            let th = i32(t % p.in_h + p.pad_top);
            let tw = i32(m % p.in_w + p.pad_left);
            return vec3<i32>(((i32((t / p.in_h) * p.out_h) + th) * i32(p.out_w) + tw) * ld, th, tw);
        }
    }
}

// The (c, i, j) part of an image gather: a tap of the kernel and a channel.
fn a_tap(c: u32, i: u32, j: u32) -> vec3<i32> {
    let h = i32(i * dil_h());
    let w = i32(j * dil_w());
    if (A_KIND == A_DY_STUFFED) {
        return vec3<i32>(-(h * i32(p.out_w) + w) * a_ld() + i32(c + a_off), -h, -w);
    }
    return vec3<i32>((h * i32(p.in_w) + w) * a_ld() + i32(c + a_off), h, w);
}

// The k part of A[m, k] for the tracker's k: (offset, h, w).
fn a_col(k: u32) -> vec3<i32> {
    switch A_KIND {
        case A_ROWS: {
            return vec3<i32>(i32(k + a_off), 0, 0);
        }
        case A_COLS: {
            return vec3<i32>(i32(k) * a_ld(), 0, 0);
        }
        case A_IM2COL_T: {
            let ih = i32(at.y * p.stride_h) - i32(p.pad_top);
            let iw = i32(at.z * p.stride_w) - i32(p.pad_left);
            return vec3<i32>(((i32(at.x * p.in_h) + ih) * i32(p.in_w) + iw) * a_ld(), ih, iw);
        }
        default: {
            return a_tap(at.x, at.y, at.z);
        }
    }
}

// Sets the A tracker to k.
fn a_track(k: u32) {
    if (A_KIND == A_IM2COL_T) {
        let t = k / p.out_w;
        at = vec3<u32>(t / p.out_h, t % p.out_h, k % p.out_w);
    } else if (A_KIND == A_IM2COL || A_KIND == A_DY_STUFFED) {
        let depth = select(p.in_c, p.filters, A_KIND == A_DY_STUFFED);
        let ij = k / depth;
        at = vec3<u32>(k % depth, ij / p.kw, ij % p.kw);
    }
}

// Moves the A tracker on by `step` k (1, or 4 where quads keep the innermost count a
// multiple of 4): one wrap at most, since step divides (quads) or is 1.
fn a_advance(step: u32) {
    if (A_KIND == A_IM2COL_T) {
        var t = at;
        t.z += step;
        let wrap = t.z >= p.out_w;
        t.z = select(t.z, t.z - p.out_w, wrap);
        t.y += select(0u, 1u, wrap);
        let wrap2 = t.y == p.out_h;
        t.y = select(t.y, 0u, wrap2);
        t.x += select(0u, 1u, wrap2);
        at = t;
    } else if (A_KIND == A_IM2COL || A_KIND == A_DY_STUFFED) {
        let depth = select(p.in_c, p.filters, A_KIND == A_DY_STUFFED);
        var t = at;
        t.x += step;
        let wrap = t.x >= depth;
        t.x = select(t.x, t.x - depth, wrap);
        t.z += select(0u, 1u, wrap);
        let wrap2 = t.z == p.kw;
        t.z = select(t.z, 0u, wrap2);
        t.y += select(0u, 1u, wrap2);
        at = t;
    }
}

// Whether row part `r` plus k part `q` lies inside A's image (or matrix).
fn a_inside(r: vec3<i32>, q: vec3<i32>) -> bool {
    switch A_KIND {
        case A_ROWS, A_COLS: {
            return true;
        }
        case A_DY_STUFFED: {
            return u32(r.y + q.y) < p.out_h && u32(r.z + q.z) < p.out_w;
        }
        default: {
            return u32(r.y + q.y) < p.in_h && u32(r.z + q.z) < p.in_w;
        }
    }
}

fn a_scalar(i: i32, inside: bool) -> f32 {
    let e = u32(select(0, i, inside));
    return select(0.0, act_elem(a[e / 4u][act_lane(e % 4u)], e), inside);
}

fn a_vec(i: i32, inside: bool) -> vec4<f32> {
    return select(vec4<f32>(0.0), act_quad(a[u32(select(0, i, inside)) / 4u]), inside);
}

// The invocation's rows (clamped into C: the extra rows load row M - 1 and are not stored).
fn a_rows(m0: u32) {
    if (a_k_contiguous()) {
        for (var r = 0u; r < CPU_ROWS; r++) {
            let q = a_row(min(m0 + r, p.m - 1u));
            ar_off[r] = q.x;
            ar_h[r] = q.y;
            ar_w[r] = q.z;
        }
    } else {
        for (var r = 0u; r < CPU_ROWS; r++) {
            // With quads, whole quads: M is a multiple of 4 there.
            var m = min(m0 + r, p.m - 1u);
            if (A_QUADS) {
                m = min(m0 + (r / 4u) * 4u, p.m - 4u) + r % 4u;
            }
            let q = a_row(m);
            ar_off[r] = q.x;
            ar_h[r] = q.y;
            ar_w[r] = q.z;
        }
    }
}

// A_NORM (conv2d.wgsl) on a gathered quad of channels c..c+3, zero where it is outside the
// image (the padding of the normalized input).
fn normed_vec(v: vec4<f32>, c: u32, inside: bool) -> vec4<f32> {
    if (!A_NORM) {
        return v;
    }
    return select(vec4<f32>(0.0), vec4<f32>(normed(v.x, c), normed(v.y, c + 1u), normed(v.z, c + 2u), normed(v.w, c + 3u)), inside);
}

// ap[r] = A[m0 + r, k0 .. k0 + 4], zero past k_end (and in the padding); with A_NORM the
// normalized input, rounded as A is stored.
fn a_panel(ap: ptr<function, array<vec4<f32>, 8>>, m0: u32, k0: u32, k_end: u32) {
    a_gather(ap, m0, k0, k_end);
    if (A_NORM) {
        for (var r = 0u; r < CPU_ROWS; r++) {
            (*ap)[r] = act_quad(act_pack((*ap)[r]));
        }
    }
}

fn a_gather(ap: ptr<function, array<vec4<f32>, 8>>, m0: u32, k0: u32, k_end: u32) {
    if (A_GENERAL) {
        for (var r = 0u; r < CPU_ROWS; r++) {
            let m = min(m0 + r, p.m - 1u);
            (*ap)[r] = vec4<f32>(a_at(m, k0), a_at(m, k0 + 1u), a_at(m, k0 + 2u), a_at(m, k0 + 3u));
        }
        return;
    }
    if (a_k_contiguous()) {
        if (A_QUADS) {
            // The four k share one tap (the host's quad flag: K and the channels are
            // multiples of 4), so one k part serves them.
            let q = a_col(k0);
            let ok = k0 < k_end;
            let c = a_channel(0u, k0);
            for (var r = 0u; r < CPU_ROWS; r++) {
                let rp = vec3<i32>(ar_off[r], ar_h[r], ar_w[r]);
                let inside = ok && a_inside(rp, q);
                (*ap)[r] = normed_vec(a_vec(rp.x + q.x, inside), c, inside);
            }
            a_advance(4u);
            return;
        }
        for (var e = 0u; e < 4u; e++) {
            let q = a_col(k0 + e);
            let ok = k0 + e < k_end;
            let c = a_channel(0u, k0 + e);
            for (var r = 0u; r < CPU_ROWS; r++) {
                let rp = vec3<i32>(ar_off[r], ar_h[r], ar_w[r]);
                let inside = ok && a_inside(rp, q);
                var v = a_scalar(rp.x + q.x, inside);
                if (A_NORM && inside) {
                    v = normed(v, c);
                }
                (*ap)[r][e] = v;
            }
            a_advance(1u);
        }
        return;
    }
    // m-contiguous (COLS, IM2COL_T): k at a time, rows along the quads.
    for (var e = 0u; e < 4u; e++) {
        let q = a_col(k0 + e);
        let ok = k0 + e < k_end;
        if (A_QUADS) {
            for (var h = 0u; h < CPU_ROWS / 4u; h++) {
                let rp = vec3<i32>(ar_off[h * 4u], ar_h[h * 4u], ar_w[h * 4u]);
                let inside = ok && a_inside(rp, q);
                // The quad's rows as a_rows clamped them: whole quads, channels c..c+3.
                let v = normed_vec(a_vec(rp.x + q.x, inside), a_channel(min(m0 + h * 4u, p.m - 4u), 0u), inside);
                (*ap)[h * 4u][e] = v.x;
                (*ap)[h * 4u + 1u][e] = v.y;
                (*ap)[h * 4u + 2u][e] = v.z;
                (*ap)[h * 4u + 3u][e] = v.w;
            }
        } else {
            for (var r = 0u; r < CPU_ROWS; r++) {
                let rp = vec3<i32>(ar_off[r], ar_h[r], ar_w[r]);
                let inside = ok && a_inside(rp, q);
                var v = a_scalar(rp.x + q.x, inside);
                if (A_NORM && inside) {
                    v = normed(v, a_channel(min(m0 + r, p.m - 1u), 0u));
                }
                (*ap)[r][e] = v;
            }
        }
        a_advance(1u);
    }
}

// B's elements between its rows (ROWS) or between its blocks' columns (BLOCKED_T).
fn b_ld() -> u32 {
    if (GROUPED) {
        return p.b_ld;
    }
    return select(p.n, p.kb, B_KIND == B_BLOCKED_T);
}

fn b_track(k: u32) {
    let block = k / p.kb;
    bt = vec2<u32>(k % p.kb, block);
    if (PHASE_TAPS) {
        bt_ij = vec2<u32>(block / p.kw, block % p.kw);
    }
}

// The k part of a BLOCKED_T element: its block's first element plus k % kb.
fn b_block_off() -> u32 {
    var block = bt.y;
    if (PHASE_TAPS) {
        let i = p.tap_i0 + p.step_h * (p.kh - 1u - bt_ij.x);
        let j = p.tap_j0 + p.step_w * (p.kw - 1u - bt_ij.y);
        block = i * p.tap_kw + j;
    }
    return block * p.n * b_ld() + bt.x + b_off;
}

fn b_advance(step: u32) {
    var t = bt;
    t.x += step;
    let wrap = t.x >= p.kb;
    t.x = select(t.x, t.x - p.kb, wrap);
    t.y += select(0u, 1u, wrap);
    bt = t;
    if (PHASE_TAPS) {
        var ij = bt_ij;
        ij.y += select(0u, 1u, wrap);
        let wrap2 = ij.y == p.kw;
        ij.y = select(ij.y, 0u, wrap2);
        ij.x += select(0u, 1u, wrap2);
        bt_ij = ij;
    }
}

fn b_scalar(i: u32, ok: bool) -> f32 {
    let e = select(0u, i, ok);
    return select(0.0, b_elem(e), ok);
}

// bq[kk * 2 + h] = B[k0 + kk, n0 + 4h .. n0 + 4h + 4], zero past k_end; columns past N
// read column N - 1 (never stored).
fn b_panel(bq: ptr<function, array<vec4<f32>, 8>>, n0: u32, k0: u32, k_end: u32) {
    let ld = b_ld();
    if (B_KIND == B_ROWS) {
        for (var kk = 0u; kk < 4u; kk++) {
            let k = k0 + kk;
            let ok = k < k_end;
            let row = k * ld + b_off;
            for (var h = 0u; h < CPU_COLS / 4u; h++) {
                if (B_QUADS) {
                    let n = min(n0 + h * 4u, p.n - 4u);
                    (*bq)[kk * 2u + h] = select(vec4<f32>(0.0), b_value(select(0u, row + n, ok) / 4u), ok);
                } else {
                    for (var e = 0u; e < 4u; e++) {
                        (*bq)[kk * 2u + h][e] = b_scalar(row + min(n0 + h * 4u + e, p.n - 1u), ok);
                    }
                }
            }
        }
        return;
    }
    // BLOCKED_T: k is contiguous; a quad is four k of one column.
    if (B_QUADS) {
        let ok = k0 < k_end;
        let base = b_block_off();
        for (var c = 0u; c < CPU_COLS; c++) {
            let v = select(vec4<f32>(0.0), b_value(select(0u, base + min(n0 + c, p.n - 1u) * ld, ok) / 4u), ok);
            (*bq)[c / 4u][c % 4u] = v.x;
            (*bq)[2u + c / 4u][c % 4u] = v.y;
            (*bq)[4u + c / 4u][c % 4u] = v.z;
            (*bq)[6u + c / 4u][c % 4u] = v.w;
        }
        b_advance(4u);
        return;
    }
    for (var kk = 0u; kk < 4u; kk++) {
        let ok = k0 + kk < k_end;
        let base = b_block_off();
        for (var c = 0u; c < CPU_COLS; c++) {
            (*bq)[kk * 2u + c / 4u][c % 4u] = b_scalar(base + min(n0 + c, p.n - 1u) * ld, ok);
        }
        b_advance(1u);
    }
}

// What invocation `tile` computes, as `origin` for the tile kernel.
fn cpu_origin(tile: u32) -> Origin {
    let tn = tile % p.tiles_n;
    let rest = tile / p.tiles_n;
    var split = rest / p.tiles_m;
    var group = 0u;
    if (GROUPED) {
        group = split % p.groups;
        split = split / p.groups;
    }
    let k_begin = split * p.k_chunk;
    return Origin((rest % p.tiles_m) * CPU_ROWS, tn * CPU_COLS, split, k_begin, min(k_begin + p.k_chunk, p.k), group);
}

@compute @workgroup_size(CPU_WG)
fn gemm_cpu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    enter_product(wid);
    let tile = (wid.x + wid.y * nwg.x) * CPU_WG + lid;
    // No early return (it would put the rest of the kernel under a mask): the grid's spare
    // invocations compute the last block again and store nothing.
    let live = tile < tile_count();
    let o = cpu_origin(min(tile, tile_count() - 1u));
    if (GROUPED) {
        enter_group(o.group);
    }
    a_rows(o.m0);
    a_track(o.k_begin);
    if (B_KIND == B_BLOCKED_T) {
        b_track(o.k_begin);
    }
    var acc: array<vec4<f32>, 16>;
    var ap: array<vec4<f32>, 8>;
    var bq: array<vec4<f32>, 8>;
    for (var k0 = o.k_begin; k0 < o.k_end; k0 += 4u) {
        a_panel(&ap, o.m0, k0, o.k_end);
        b_panel(&bq, o.n0, k0, o.k_end);
        for (var r = 0u; r < CPU_ROWS; r++) {
            let av = operand(ap[r]);
            for (var h = 0u; h < CPU_COLS / 4u; h++) {
                var v = acc[r * 2u + h];
                v = fma(vec4<f32>(av.x), operand(bq[h]), v);
                v = fma(vec4<f32>(av.y), operand(bq[2u + h]), v);
                v = fma(vec4<f32>(av.z), operand(bq[4u + h]), v);
                acc[r * 2u + h] = fma(vec4<f32>(av.w), operand(bq[6u + h]), v);
            }
        }
    }
    if (!live) {
        return;
    }
    let base = partial_base(o.split);
    for (var h = 0u; h < CPU_COLS / 4u; h++) {
        let n = o.n0 + h * 4u;
        var add = vec4<f32>(0.0);
        if (CPU_BIAS) {
            if (C_QUADS) {
                add = bias[min(n, p.n - 4u) / 4u];
            } else {
                add = vec4<f32>(bias_at(min(n, p.n - 1u)), bias_at(min(n + 1u, p.n - 1u)), bias_at(min(n + 2u, p.n - 1u)), bias_at(min(n + 3u, p.n - 1u)));
            }
        }
        for (var r = 0u; r < CPU_ROWS; r++) {
            let m = o.m0 + r;
            if (m < p.m && n < p.n) {
                let out = acc[r * 2u + h] + add;
                let i = base + c_index(m, n);
                if (C_QUADS) {
                    // JOIN (see its bindings in conv2d.wgsl) only where C is whole quads; a
                    // branch, since the stand-in bindings without it may be shorter than C.
                    if (JOIN) {
                        c_put4(i / 4u, joined4(i / 4u, out));
                    } else {
                        c_put4(i / 4u, out);
                    }
                } else {
                    for (var e = 0u; e < 4u; e++) {
                        if (n + e < p.n) {
                            c_put1(i + e, out[e]);
                        }
                    }
                }
            }
        }
        // STATS (see its binding in conv2d.wgsl): the block's own rows are a chunk.
        if (STATS) {
            let rows = min(CPU_ROWS, p.m - min(p.m, o.m0));
            var sum = vec4<f32>(0.0);
            for (var r = 0u; r < CPU_ROWS; r++) {
                if (r < rows) {
                    sum += c_stored4(acc[r * 2u + h] + add);
                }
            }
            let mean = sum / max(f32(rows), 1.0);
            var m2 = vec4<f32>(0.0);
            for (var r = 0u; r < CPU_ROWS; r++) {
                if (r < rows) {
                    let d = c_stored4(acc[r * 2u + h] + add) - mean;
                    m2 += d * d;
                }
            }
            for (var e = 0u; e < 4u; e++) {
                if (n + e < p.n) {
                    write_stats(o.m0 / CPU_ROWS, n + e, mean[e], m2[e]);
                }
            }
        }
    }
}
