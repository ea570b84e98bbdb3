// Per-sample image augmentation of NHWC f32 batches: RandomFlip, RandomCrop and
// RandomTranslation. Along each axis a sample's transform maps output row (or column) y to
// input index i = a * y + t, a = +-1, and a fill rule decides what an i outside the input
// reads. `augment_draw` draws (a_y, t_y, a_x, t_x) for every sample from a counter-based
// hash of (seed, step, sample), `augment_forward` gathers through it, and
// `augment_backward` is the forward's transpose written as a gather: each input pixel sums
// the gradients of the output pixels that read it, so no two invocations write one value
// and no atomics are needed. One invocation per sample (draw) or element (the others); the
// grid may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // samples (draw), output elements (forward), input elements (backward)
    n: u32,
    channels: u32,
    in_h: u32,
    in_w: u32,
    out_h: u32,
    out_w: u32,
    // 0 constant, 1 reflect, 2 wrap, 3 nearest (src/kernels/augment.rs FillMode)
    fill: u32,
    fill_value: f32,
    seed: u32,
    // per axis, y then x: the draw (0 keep, 1 flip, 2 offset, 3 shift) and its two arguments
    kind_y: u32,
    arg0_y: u32,
    arg1_y: u32,
    kind_x: u32,
    arg0_x: u32,
    arg1_x: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// forward: the input; backward: the output's gradient
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> draws: array<vec4<i32>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
// word 0: the training step; word 1: this replica's first sample in the global batch, so a
// sample draws the same whichever device runs it
@group(0) @binding(4) var<storage, read> step: array<u32>;
@group(0) @binding(5) var<storage, read_write> draws_out: array<vec4<i32>>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// Dropout's hash (shaders/elementwise.wgsl) of counter i; the host twin is
// kernels::augment::hash.
fn hash(i: u32) -> u32 {
    var h = i * 747796405u + (p.seed ^ (step[0] * 2654435769u)) * 2891336453u + 1u;
    h = ((h >> ((h >> 28u) + 4u)) ^ h) * 277803737u;
    return (h >> 22u) ^ h;
}

// (a, t) of one axis of n input pixels from hash h. Integer arithmetic only, so that the
// host twin draws bit for bit the same: flip on the top bit; an offset uniform in
// 0..arg0 from 16 bits; a shift of round(u * span + lo) pixels, u from 12 bits, lo = arg0
// and span = arg1 in eighths of a pixel (the image moves by the shift: t = -shift).
fn axis(kind: u32, arg0: u32, arg1: u32, n: u32, h: u32) -> vec2<i32> {
    switch kind {
        case 1u: {
            if ((h >> 31u) == 1u) { return vec2<i32>(-1, i32(n) - 1); }
            return vec2<i32>(1, 0);
        }
        case 2u: {
            return vec2<i32>(1, i32(((h >> 16u) * arg0) >> 16u));
        }
        case 3u: {
            let t8 = bitcast<i32>(arg0) + i32(((h >> 20u) * arg1) >> 12u);
            return vec2<i32>(1, -((t8 + 4) >> 3u));
        }
        default: {
            return vec2<i32>(1, 0);
        }
    }
}

@compute @workgroup_size(WG)
fn augment_draw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let b = index(wid, nwg, lid);
    if (b >= p.n) { return; }
    let s = (step[1] + b) * 2u;
    let y = axis(p.kind_y, p.arg0_y, p.arg1_y, p.in_h, hash(s));
    let x = axis(p.kind_x, p.arg0_x, p.arg1_x, p.in_w, hash(s + 1u));
    draws_out[b] = vec4<i32>(y.x, y.y, x.x, x.y);
}

// i modulo m in 0..m, with `%` only on non-negative operands: GLSL leaves `%` of a negative
// operand undefined, and llvmpipe's GL gave reflect fills wrong pixels (tests/gl.rs's kernels).
fn pmod(i: i32, m: i32) -> i32 {
    if (i >= 0) { return i % m; }
    return m - 1 - (-(i + 1)) % m;
}

// The input index that index i (possibly outside 0..n) reads; -1: the fill value.
fn source(i: i32, n: i32) -> i32 {
    if (i >= 0 && i < n) { return i; }
    switch p.fill {
        // reflect about the edge of the last pixel: (d c b a | a b c d | d c b a)
        case 1u: {
            let m = pmod(i, 2 * n);
            return select(2 * n - 1 - m, m, m < n);
        }
        case 2u: { return pmod(i, n); }
        case 3u: { return clamp(i, 0, n - 1); }
        default: { return -1; }
    }
}

@compute @workgroup_size(WG)
fn augment_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let o = index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let c = o % p.channels;
    let px = o / p.channels;
    let x = px % p.out_w;
    let row = px / p.out_w;
    let y = row % p.out_h;
    let b = row / p.out_h;
    let d = draws[b];
    let sy = source(d.x * i32(y) + d.y, i32(p.in_h));
    let sx = source(d.z * i32(x) + d.w, i32(p.in_w));
    if (sy < 0 || sx < 0) {
        out[o] = p.fill_value;
        return;
    }
    out[o] = src[((b * p.in_h + u32(sy)) * p.in_w + u32(sx)) * p.channels + c];
}

// The outputs y in 0..n_out whose index a * y + t reads input index s under the fill rule:
// at most two ranges (lo0, hi0, lo1, hi1), a range empty when lo > hi. The wrapper allows
// n_out <= n_in only, so that a periodic rule (wrap: n, reflect: 2n) meets the window of
// indices the output reads at most once per family.
fn readers(s: i32, a: i32, t: i32, n_in: i32, n_out: i32) -> vec4<i32> {
    // the indices the output reads: [wlo, whi]
    let wlo = select(t - n_out + 1, t, a > 0);
    let whi = wlo + n_out - 1;
    // in index space first; (1, 0) is empty
    var r = vec4<i32>(s, s, 1, 0);
    switch p.fill {
        case 1u: {
            let i1 = wlo + pmod(s - wlo, 2 * n_in);
            let i2 = wlo + pmod(-1 - s - wlo, 2 * n_in);
            r = vec4<i32>(i1, i1, i2, i2);
        }
        case 2u: {
            let i = wlo + pmod(s - wlo, n_in);
            r = vec4<i32>(i, i, 1, 0);
        }
        // the edge pixels are read by every index beyond them
        case 3u: {
            r = vec4<i32>(select(s, wlo, s == 0), select(s, whi, s == n_in - 1), 1, 0);
        }
        default: {}
    }
    let lo = max(r.xz, vec2<i32>(wlo));
    let hi = min(r.yw, vec2<i32>(whi));
    // back to outputs: y = a * (i - t), which reverses a range when a = -1
    if (a > 0) {
        return vec4<i32>(lo.x - t, hi.x - t, lo.y - t, hi.y - t);
    }
    return vec4<i32>(t - hi.x, t - lo.x, t - hi.y, t - lo.y);
}

@compute @workgroup_size(WG)
fn augment_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let o = index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let c = o % p.channels;
    let px = o / p.channels;
    let sx = px % p.in_w;
    let row = px / p.in_w;
    let sy = row % p.in_h;
    let b = row / p.in_h;
    let d = draws[b];
    let ry = readers(i32(sy), d.x, d.y, i32(p.in_h), i32(p.out_h));
    let rx = readers(i32(sx), d.z, d.w, i32(p.in_w), i32(p.out_w));
    let base = b * p.out_h;
    var acc = 0.0;
    for (var k = 0u; k < 2u; k++) {
        let ys = select(ry.zw, ry.xy, k == 0u);
        for (var y = ys.x; y <= ys.y; y++) {
            let line = (base + u32(y)) * p.out_w;
            for (var q = 0u; q < 2u; q++) {
                let xs = select(rx.zw, rx.xy, q == 0u);
                for (var x = xs.x; x <= xs.y; x++) {
                    acc += src[(line + u32(x)) * p.channels + c];
                }
            }
        }
    }
    out[o] = acc;
}
