// Winograd's minimal filtering F(m x m, 3 x 3) for unit-stride 3x3 convolutions over NHWC
// images: each m x m tile of the output is A^T [(G g G^T) . (B^T d B)] A, with d the
// (m + 2) x (m + 2) input window of the tile and g a 3x3 kernel. The elementwise products
// summed over the input channels are ALPHA^2 = (m + 2)^2 independent GEMMs (one per point
// of the transformed tile), run by conv2d.wgsl's engine between the transforms below. Per
// output, F(4x4, 3x3) multiplies 36 / 16 = 2.25 times where the direct convolution
// multiplies 9 times: the GEMMs do a quarter of the direct convolution's work.
//
// Three kernels, one invocation per (tile or kernel, channel) so that neighbouring
// invocations touch neighbouring channels (coalesced loads and stores):
// - `weights`: U[xi, nu, k, n] = (G g G^T)[xi, nu] for each (k, n) of the GEMM's B; for the
//   input gradient (`flip`), g is the kernel flipped in both axes with its channels
//   swapped: dx is the unit-stride convolution of dy with that kernel.
// - `input`: V[xi, nu, t, c] = (B^T d B)[xi, nu] for tile t and channel c of the source
//   image, zero outside it (the padding).
// - `output`: dst[n, oh, ow, f] = (A^T M A)[oh % m, ow % m] of the GEMMs' M[xi, nu, t, f],
//   for the outputs inside the destination image (the last tiles of a row may overhang).
//
// The matrices are Lavin and Gray's (2015), interpolation points 0, -1, 1 for F(2, 3) and
// 0, +-1, +-2 for F(4, 3). Every loop below runs to constants, so once the driver unrolls
// them the matrices' zeros and ones fold away.

struct Params {
    // source image [batch, src_h, src_w, src_c]; destination [batch, dst_h, dst_w, dst_c]
    batch: u32,
    src_h: u32,
    src_w: u32,
    src_c: u32,
    dst_h: u32,
    dst_w: u32,
    dst_c: u32,
    // the destination's window over the source starts this far above and left of it
    pad_top: u32,
    pad_left: u32,
    // tiles along the destination's height and width, and in all (batch * tiles_h * tiles_w)
    tiles_h: u32,
    tiles_w: u32,
    tiles: u32,
    // `weights`: U is [ALPHA^2, k, n]; flip = 1 for the input gradient's kernel
    k: u32,
    n: u32,
    flip: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

// m: output pixels per tile side, 2 or 4
override M_OUT: u32 = 4u;
override ALPHA: u32 = M_OUT + 2u;
override WG: u32 = 256u;

const BT2: array<f32, 16> = array<f32, 16>(
    1.0, 0.0, -1.0, 0.0,
    0.0, 1.0, 1.0, 0.0,
    0.0, -1.0, 1.0, 0.0,
    0.0, 1.0, 0.0, -1.0);
const G2: array<f32, 12> = array<f32, 12>(
    1.0, 0.0, 0.0,
    0.5, 0.5, 0.5,
    0.5, -0.5, 0.5,
    0.0, 0.0, 1.0);
const AT2: array<f32, 8> = array<f32, 8>(
    1.0, 1.0, 1.0, 0.0,
    0.0, 1.0, -1.0, -1.0);

const BT4: array<f32, 36> = array<f32, 36>(
    4.0, 0.0, -5.0, 0.0, 1.0, 0.0,
    0.0, -4.0, -4.0, 1.0, 1.0, 0.0,
    0.0, 4.0, -4.0, -1.0, 1.0, 0.0,
    0.0, -2.0, -1.0, 2.0, 1.0, 0.0,
    0.0, 2.0, -1.0, -2.0, 1.0, 0.0,
    0.0, 4.0, 0.0, -5.0, 0.0, 1.0);
const G4: array<f32, 18> = array<f32, 18>(
    0.25, 0.0, 0.0,
    -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
    -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
    1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0,
    1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0,
    0.0, 0.0, 1.0);
const AT4: array<f32, 24> = array<f32, 24>(
    1.0, 1.0, 1.0, 1.0, 1.0, 0.0,
    0.0, 1.0, -1.0, 2.0, -2.0, 0.0,
    0.0, 1.0, 1.0, 4.0, 4.0, 0.0,
    0.0, 1.0, -1.0, 8.0, -8.0, 1.0);

// The largest tile, ALPHA = 6.
const MAX_TILE: u32 = 36u;

// B^T[i, j] (ALPHA x ALPHA), G[i, j] (ALPHA x 3), A^T[i, j] (M_OUT x ALPHA). Copied into
// function variables so a loop index may select the element (naga indexes constant arrays
// only by constants); the indices are constants again once the loops unroll.
fn bt(i: u32, j: u32) -> f32 {
    if (M_OUT == 2u) {
        var m = BT2;
        return m[i * 4u + j];
    }
    var m = BT4;
    return m[i * 6u + j];
}

fn g_at(i: u32, j: u32) -> f32 {
    if (M_OUT == 2u) {
        var m = G2;
        return m[i * 3u + j];
    }
    var m = G4;
    return m[i * 3u + j];
}

fn at(i: u32, j: u32) -> f32 {
    if (M_OUT == 2u) {
        var m = AT2;
        return m[i * 4u + j];
    }
    var m = AT4;
    return m[i * 6u + j];
}

// Tile t's image and the first row and column of its destination pixels.
fn tile_origin(t: u32) -> vec3<u32> {
    let rest = t / p.tiles_w;
    return vec3<u32>(rest / p.tiles_h, (rest % p.tiles_h) * M_OUT, (t % p.tiles_w) * M_OUT);
}

fn linear(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn weights(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid);
    let n = i % p.n;
    let k = i / p.n;
    if (k >= p.k) {
        return;
    }
    // The forward's kernel is w[3, 3, k, n]. The input gradient's is w[2 - r, 2 - s, n, k]
    // of the same w, which is [3, 3, n, k] there.
    var g: array<f32, 9>;
    for (var r = 0u; r < 3u; r++) {
        for (var s = 0u; s < 3u; s++) {
            if (p.flip == 0u) {
                g[r * 3u + s] = src[((r * 3u + s) * p.k + k) * p.n + n];
            } else {
                g[r * 3u + s] = src[(((2u - r) * 3u + (2u - s)) * p.n + n) * p.k + k];
            }
        }
    }
    // (G g) then (G g) G^T.
    var gg: array<f32, 18>;
    for (var xi = 0u; xi < ALPHA; xi++) {
        for (var s = 0u; s < 3u; s++) {
            var v = 0.0;
            for (var r = 0u; r < 3u; r++) {
                v = fma(g_at(xi, r), g[r * 3u + s], v);
            }
            gg[xi * 3u + s] = v;
        }
    }
    for (var xi = 0u; xi < ALPHA; xi++) {
        for (var nu = 0u; nu < ALPHA; nu++) {
            var v = 0.0;
            for (var s = 0u; s < 3u; s++) {
                v = fma(gg[xi * 3u + s], g_at(nu, s), v);
            }
            dst[((xi * ALPHA + nu) * p.k + k) * p.n + n] = v;
        }
    }
}

@compute @workgroup_size(WG)
fn input(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid);
    let c = i % p.src_c;
    let t = i / p.src_c;
    if (t >= p.tiles) {
        return;
    }
    let o = tile_origin(t);
    let b = o.x;
    // Rows above the image wrap to huge u32 values and fail the `< src_h` test.
    let h0 = o.y - p.pad_top;
    let w0 = o.z - p.pad_left;
    var d: array<f32, MAX_TILE>;
    for (var r = 0u; r < ALPHA; r++) {
        for (var s = 0u; s < ALPHA; s++) {
            let ih = h0 + r;
            let iw = w0 + s;
            var v = 0.0;
            if (ih < p.src_h && iw < p.src_w) {
                v = src[((b * p.src_h + ih) * p.src_w + iw) * p.src_c + c];
            }
            d[r * ALPHA + s] = v;
        }
    }
    // (B^T d) then (B^T d) B.
    var bd: array<f32, MAX_TILE>;
    for (var xi = 0u; xi < ALPHA; xi++) {
        for (var s = 0u; s < ALPHA; s++) {
            var v = 0.0;
            for (var r = 0u; r < ALPHA; r++) {
                v = fma(bt(xi, r), d[r * ALPHA + s], v);
            }
            bd[xi * ALPHA + s] = v;
        }
    }
    for (var xi = 0u; xi < ALPHA; xi++) {
        for (var nu = 0u; nu < ALPHA; nu++) {
            var v = 0.0;
            for (var s = 0u; s < ALPHA; s++) {
                v = fma(bd[xi * ALPHA + s], bt(nu, s), v);
            }
            dst[((xi * ALPHA + nu) * p.tiles + t) * p.src_c + c] = v;
        }
    }
}

@compute @workgroup_size(WG)
fn output(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid);
    let f = i % p.dst_c;
    let t = i / p.dst_c;
    if (t >= p.tiles) {
        return;
    }
    let o = tile_origin(t);
    let b = o.x;
    var mm: array<f32, MAX_TILE>;
    for (var e = 0u; e < ALPHA * ALPHA; e++) {
        mm[e] = src[(e * p.tiles + t) * p.dst_c + f];
    }
    // (A^T M) then (A^T M) A.
    var am: array<f32, 24>;
    for (var a = 0u; a < M_OUT; a++) {
        for (var nu = 0u; nu < ALPHA; nu++) {
            var v = 0.0;
            for (var xi = 0u; xi < ALPHA; xi++) {
                v = fma(at(a, xi), mm[xi * ALPHA + nu], v);
            }
            am[a * ALPHA + nu] = v;
        }
    }
    for (var a = 0u; a < M_OUT; a++) {
        let oh = o.y + a;
        for (var e = 0u; e < M_OUT; e++) {
            let ow = o.z + e;
            var v = 0.0;
            for (var nu = 0u; nu < ALPHA; nu++) {
                v = fma(am[a * ALPHA + nu], at(e, nu), v);
            }
            if (oh < p.dst_h && ow < p.dst_w) {
                dst[((b * p.dst_h + oh) * p.dst_w + ow) * p.dst_c + f] = v;
            }
        }
    }
}

// `input` and `output` of F(4x4, 3x3) four channels at a time, for the GEMM engine's CPU
// kernel (software adapters, channels divisible by 4). A software adapter runs invocations
// as SIMD lanes and every storage load as a loop over them, so one vec4 load replaces four
// scalar ones; the loads are unconditional (clamped, then zeroed by a select) because a load
// under a branch costs that loop again; and the transforms are written out as straight-line
// sums of named values: the loops over function arrays above, four times wider in vec4s,
// were left unrolled and their arrays in memory (1.8x slower than the scalar kernels).
// Invocations past the last (tile, quad) compute the last one's values and store nothing.
@group(0) @binding(3) var<storage, read> src4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> dst4: array<vec4<f32>>;

// Six values along one axis of a 6 x 6 tile.
struct Six {
    v0: vec4<f32>,
    v1: vec4<f32>,
    v2: vec4<f32>,
    v3: vec4<f32>,
    v4: vec4<f32>,
    v5: vec4<f32>,
}

// Four values along one axis of a 4 x 4 output tile.
struct Four {
    v0: vec4<f32>,
    v1: vec4<f32>,
    v2: vec4<f32>,
    v3: vec4<f32>,
}

// B^T x for F(4x4, 3x3) (the rows of BT4).
fn bt6(x: Six) -> Six {
    return Six(
        4.0 * x.v0 - 5.0 * x.v2 + x.v4,
        -4.0 * (x.v1 + x.v2) + x.v3 + x.v4,
        4.0 * (x.v1 - x.v2) - x.v3 + x.v4,
        2.0 * (x.v3 - x.v1) - x.v2 + x.v4,
        2.0 * (x.v1 - x.v3) - x.v2 + x.v4,
        4.0 * x.v1 - 5.0 * x.v3 + x.v5);
}

// A^T x for F(4x4, 3x3) (the rows of AT4).
fn at6(x: Six) -> Four {
    return Four(
        x.v0 + x.v1 + x.v2 + x.v3 + x.v4,
        x.v1 - x.v2 + 2.0 * (x.v3 - x.v4),
        x.v1 + x.v2 + 4.0 * (x.v3 + x.v4),
        x.v1 - x.v2 + 8.0 * (x.v3 - x.v4) + x.v5);
}

// What one invocation of input4 or output4 owns: tile t (its image and first destination
// pixel in o) and channels 4q..4q+3 of `quads` per pixel; past the last (tile, quad), the
// last one's values and live false.
struct QuadTile {
    t: u32,
    q: u32,
    quads: u32,
    o: vec3<u32>,
    live: bool,
}

fn quad_tile(i: u32, channels: u32) -> QuadTile {
    let quads = channels / 4u;
    let j = min(i, p.tiles * quads - 1u);
    let t = j / quads;
    return QuadTile(t, j % quads, quads, tile_origin(t), i < p.tiles * quads);
}

// The input pixel (image s.o.x, ih, iw) of s's channels; zero outside the image.
fn window_at(s: QuadTile, ih: u32, iw: u32) -> vec4<f32> {
    let inside = ih < p.src_h && iw < p.src_w;
    return select(vec4<f32>(0.0), src4[select(0u, ((s.o.x * p.src_h + ih) * p.src_w + iw) * s.quads + s.q, inside)], inside);
}

// Row r of s's input window, whose first pixel is (h0, w0).
fn window_row(s: QuadTile, h0: u32, w0: u32, r: u32) -> Six {
    let ih = h0 + r;
    return Six(window_at(s, ih, w0), window_at(s, ih, w0 + 1u), window_at(s, ih, w0 + 2u),
               window_at(s, ih, w0 + 3u), window_at(s, ih, w0 + 4u), window_at(s, ih, w0 + 5u));
}

// V's column nu (the values at xi = 0..5) of s, stored.
fn store_v(col: Six, nu: u32, s: QuadTile) {
    let at = (nu * p.tiles + s.t) * s.quads + s.q;
    let step = 6u * p.tiles * s.quads;
    dst4[at] = col.v0;
    dst4[at + step] = col.v1;
    dst4[at + 2u * step] = col.v2;
    dst4[at + 3u * step] = col.v3;
    dst4[at + 4u * step] = col.v4;
    dst4[at + 5u * step] = col.v5;
}

@compute @workgroup_size(WG)
fn input4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let s = quad_tile(linear(wid, nwg, lid), p.src_c);
    // Rows above or left of the image wrap to huge u32 values and fail the `< src_h` test.
    let h0 = s.o.y - p.pad_top;
    let w0 = s.o.z - p.pad_left;
    // E = d B, a row at a time (B^T applied to each row of d), then V = B^T E a column at a time.
    let e0 = bt6(window_row(s, h0, w0, 0u));
    let e1 = bt6(window_row(s, h0, w0, 1u));
    let e2 = bt6(window_row(s, h0, w0, 2u));
    let e3 = bt6(window_row(s, h0, w0, 3u));
    let e4 = bt6(window_row(s, h0, w0, 4u));
    let e5 = bt6(window_row(s, h0, w0, 5u));
    if (!s.live) {
        return;
    }
    store_v(bt6(Six(e0.v0, e1.v0, e2.v0, e3.v0, e4.v0, e5.v0)), 0u, s);
    store_v(bt6(Six(e0.v1, e1.v1, e2.v1, e3.v1, e4.v1, e5.v1)), 1u, s);
    store_v(bt6(Six(e0.v2, e1.v2, e2.v2, e3.v2, e4.v2, e5.v2)), 2u, s);
    store_v(bt6(Six(e0.v3, e1.v3, e2.v3, e3.v3, e4.v3, e5.v3)), 3u, s);
    store_v(bt6(Six(e0.v4, e1.v4, e2.v4, e3.v4, e4.v4, e5.v4)), 4u, s);
    store_v(bt6(Six(e0.v5, e1.v5, e2.v5, e3.v5, e4.v5, e5.v5)), 5u, s);
}

// Row xi of the products M (nu = 0..5) of s.
fn products_row(xi: u32, s: QuadTile) -> Six {
    let step = p.tiles * s.quads;
    let i = ((xi * 6u) * p.tiles + s.t) * s.quads + s.q;
    return Six(src4[i], src4[i + step], src4[i + 2u * step], src4[i + 3u * step], src4[i + 4u * step], src4[i + 5u * step]);
}

// Output pixel (image s.o.x, oh, ow) of s's channels, if s is live and the pixel inside
// the destination.
fn store_output(v: vec4<f32>, s: QuadTile, oh: u32, ow: u32) {
    if (s.live && oh < p.dst_h && ow < p.dst_w) {
        dst4[((s.o.x * p.dst_h + oh) * p.dst_w + ow) * s.quads + s.q] = v;
    }
}

// Output row oh of s's tile, pixels s.o.z .. s.o.z + 3.
fn store_output_row(row: Four, s: QuadTile, oh: u32) {
    store_output(row.v0, s, oh, s.o.z);
    store_output(row.v1, s, oh, s.o.z + 1u);
    store_output(row.v2, s, oh, s.o.z + 2u);
    store_output(row.v3, s, oh, s.o.z + 3u);
}

@compute @workgroup_size(WG)
fn output4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let s = quad_tile(linear(wid, nwg, lid), p.dst_c);
    // A^T M a column at a time (F = rows a = 0..3 of each column nu), then (A^T M) A a row at a time.
    let m0 = products_row(0u, s);
    let m1 = products_row(1u, s);
    let m2 = products_row(2u, s);
    let m3 = products_row(3u, s);
    let m4 = products_row(4u, s);
    let m5 = products_row(5u, s);
    let f0 = at6(Six(m0.v0, m1.v0, m2.v0, m3.v0, m4.v0, m5.v0));
    let f1 = at6(Six(m0.v1, m1.v1, m2.v1, m3.v1, m4.v1, m5.v1));
    let f2 = at6(Six(m0.v2, m1.v2, m2.v2, m3.v2, m4.v2, m5.v2));
    let f3 = at6(Six(m0.v3, m1.v3, m2.v3, m3.v3, m4.v3, m5.v3));
    let f4 = at6(Six(m0.v4, m1.v4, m2.v4, m3.v4, m4.v4, m5.v4));
    let f5 = at6(Six(m0.v5, m1.v5, m2.v5, m3.v5, m4.v5, m5.v5));
    store_output_row(at6(Six(f0.v0, f1.v0, f2.v0, f3.v0, f4.v0, f5.v0)), s, s.o.y);
    store_output_row(at6(Six(f0.v1, f1.v1, f2.v1, f3.v1, f4.v1, f5.v1)), s, s.o.y + 1u);
    store_output_row(at6(Six(f0.v2, f1.v2, f2.v2, f3.v2, f4.v2, f5.v2)), s, s.o.y + 2u);
    store_output_row(at6(Six(f0.v3, f1.v3, f2.v3, f3.v3, f4.v3, f5.v3)), s, s.o.y + 3u);
}
