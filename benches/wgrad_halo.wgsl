// A probe for benches/gemm.rs (`--probe-wgrad`): the weight gradient of a 3x3, stride-1,
// pad-1 convolution of 64 channels with a row of taps in one workgroup, to see what that
// structure gives before the engine takes it. The engine's transposed im2col runs each tap
// (64 rows of M) in its own workgroup, so dy is fetched nine times and every x nine times
// through nine gathers; here a K step is one segment of 16 pixels of an image row, whose
// 18 pixels of x in the row the taps read (their halo) and 16 pixels of dy are staged once
// and read by the row's three taps. (All nine in one workgroup would take 288 invocations,
// past the 256 the device is opened with.)
//
// Workgroup (s, j, ky) holds taps (ky, 0..2); subgroup kx (32 invocations) owns tap (ky,
// kx): its 64 input channels by NT output channels (4 x NT / 16 accumulators). Its A for
// pixel p of the segment is halo column kx + p: element (ci, p) at ((kx + p) * HS + ci),
// column-major with stride HS, as the engine stages an A gathered along m; B is dy row-major
// ((p, co) at p * DS + co). It sums segments [s * per_split, ...) into output columns j * NT
// of partial s: [splits, 9 * 64, f] f32, rows tap * 64 + ci (the engine's order for a
// kernel [3, 3, 64, f]).

struct Params { n: u32, h: u32, w: u32, f: u32, segs: u32, per_split: u32, row_segs: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> dy: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

override NT: u32 = 64u;
const THREADS: u32 = 96u;
const SEG: u32 = 16u;
const HALO_PX: u32 = 18u;
// Halves a staged pixel row takes: 64 channels and 8 of padding, so that a block's rows start
// in different banks.
const HS: u32 = 72u;
override DS: u32 = NT + 8u;
override DY_QUADS: u32 = SEG * NT / 4u;
// BUFS 2: the next segment is stashed into the other buffer while this one multiplies, one
// barrier a step; BUFS 1: a barrier before the stash as well.
override BUFS: u32 = 2u;
const HALO16: u32 = HALO_PX * HS / 4u;
override DY16: u32 = SEG * DS / 4u;
var<workgroup> halo: array<vec4<f16>, BUFS * HALO16>;
var<workgroup> dys: array<vec4<f16>, BUFS * DY16>;
var<private> hr: array<vec4<f16>, 3>;
var<private> dr: array<vec4<f16>, 3>;

// Segment s's quads for taps row ky into registers: three of the halo per invocation, up to
// three of dy. Padding and the pixels past the row's end are zeros.
fn fetch(s: u32, n0: u32, ky: u32, lid: u32) {
    let row = s / p.row_segs;
    let x0 = (s % p.row_segs) * SEG;
    let img = row / p.h;
    let y = row % p.h;
    let yy = i32(y) + i32(ky) - 1;
    for (var i = 0u; i < 3u; i++) {
        let q = lid + i * THREADS;
        let px = q / 16u;
        let xx = i32(x0) + i32(px) - 1;
        var v = vec4<f16>(0.0);
        if (yy >= 0 && yy < i32(p.h) && xx >= 0 && xx < i32(p.w)) {
            v = x[((img * p.h + u32(yy)) * p.w + u32(xx)) * 16u + q % 16u];
        }
        hr[i] = v;
    }
    for (var i = 0u; i < 3u; i++) {
        let q = lid + i * THREADS;
        let px = q / (NT / 4u);
        let xx = x0 + px;
        var v = vec4<f16>(0.0);
        if (q < DY_QUADS && xx < p.w) {
            v = dy[(row * p.w + xx) * (p.f / 4u) + n0 / 4u + q % (NT / 4u)];
        }
        dr[i] = v;
    }
}

fn stash(lid: u32, buf: u32) {
    for (var i = 0u; i < 3u; i++) {
        let q = lid + i * THREADS;
        halo[buf * HALO16 + ((q / 16u) * HS + (q % 16u) * 4u) / 4u] = hr[i];
    }
    for (var i = 0u; i < 3u; i++) {
        let q = lid + i * THREADS;
        if (q < DY_QUADS) {
            dys[buf * DY16 + ((q / (NT / 4u)) * DS + (q % (NT / 4u)) * 4u) / 4u] = dr[i];
        }
    }
}

@compute @workgroup_size(THREADS)
fn wgrad(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
         @builtin(subgroup_id) sg: u32) {
    let first = wid.x * p.per_split;
    let last = min(first + p.per_split, p.segs);
    let n0 = wid.y * NT;
    let ky = wid.z;
    let wide = NT == 64u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    if (first < last) {
        fetch(first, n0, ky, lid);
        stash(lid, 0u);
    }
    workgroupBarrier();
    var buf = 0u;
    for (var s = first; s < last; s++) {
        if (s + 1u < last) {
            fetch(s + 1u, n0, ky, lid);
        }
        let ia0 = buf * HALO16 + sg * HS / 4u;
        let ia1 = ia0 + 4u;
        let ia2 = ia0 + 8u;
        let ia3 = ia0 + 12u;
        let a0 = coopLoad<coop_mat16x16<f16, A>>(&halo[ia0], HS / 4u);
        let a1 = coopLoad<coop_mat16x16<f16, A>>(&halo[ia1], HS / 4u);
        let a2 = coopLoad<coop_mat16x16<f16, A>>(&halo[ia2], HS / 4u);
        let a3 = coopLoad<coop_mat16x16<f16, A>>(&halo[ia3], HS / 4u);
        let ib0 = buf * DY16;
        let ib1 = ib0 + 4u;
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&dys[ib0], DS / 4u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&dys[ib1], DS / 4u);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        c20 = coopMultiplyAdd(a2, b0, c20);
        c21 = coopMultiplyAdd(a2, b1, c21);
        c30 = coopMultiplyAdd(a3, b0, c30);
        c31 = coopMultiplyAdd(a3, b1, c31);
        if (wide) {
            let ib2 = ib0 + 8u;
            let ib3 = ib0 + 12u;
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&dys[ib2], DS / 4u);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&dys[ib3], DS / 4u);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
        }
        if (BUFS == 1u) {
            workgroupBarrier();
        }
        let next = select(0u, 1u - buf, BUFS == 2u);
        if (s + 1u < last) {
            stash(lid, next);
        }
        workgroupBarrier();
        buf = next;
    }
    // Straight to the partial: element (ci, co) of tap t at row t * 64 + ci, column co.
    let base = wid.x * 576u * p.f + ((ky * 3u + sg) * 64u) * p.f + n0;
    let f = p.f;
    let o00 = base;
    let o10 = base + 16u * f;
    let o20 = base + 32u * f;
    let o30 = base + 48u * f;
    coopStoreT(c00, &out[o00], f);
    coopStoreT(c10, &out[o10], f);
    coopStoreT(c20, &out[o20], f);
    coopStoreT(c30, &out[o30], f);
    let o01 = o00 + 16u;
    let o11 = o10 + 16u;
    let o21 = o20 + 16u;
    let o31 = o30 + 16u;
    coopStoreT(c01, &out[o01], f);
    coopStoreT(c11, &out[o11], f);
    coopStoreT(c21, &out[o21], f);
    coopStoreT(c31, &out[o31], f);
    if (wide) {
        let o02 = o00 + 32u;
        let o12 = o10 + 32u;
        let o22 = o20 + 32u;
        let o32 = o30 + 32u;
        let o03 = o00 + 48u;
        let o13 = o10 + 48u;
        let o23 = o20 + 48u;
        let o33 = o30 + 48u;
        coopStoreT(c02, &out[o02], f);
        coopStoreT(c12, &out[o12], f);
        coopStoreT(c22, &out[o22], f);
        coopStoreT(c32, &out[o32], f);
        coopStoreT(c03, &out[o03], f);
        coopStoreT(c13, &out[o13], f);
        coopStoreT(c23, &out[o23], f);
        coopStoreT(c33, &out[o33], f);
    }
}
