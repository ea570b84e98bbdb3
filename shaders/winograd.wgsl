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
