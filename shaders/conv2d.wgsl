// Implicit GEMM for convolution and dense layers: C[M, N] = sum_k A[m, k] * B[k, n].
//
// One tile loop serves every product; the override constants A_KIND and B_KIND pick how a
// tile of A and of B is gathered from memory (plain matrix, transposed matrix, im2col of an
// NHWC image, zero-stuffed gradient), and TM / WM / WN / BK pick the tile. Pipelines are
// specialised per combination, so the driver folds every branch on them away.
//
// Tile: BM = WM * TM rows by BN = WN * 4 columns, WM * WN invocations, each holding a TM x 4
// register block. K advances BK at a time through workgroup memory. B is stored k-major, so
// the inner loop reads four columns of one k as a vec4. A is stored as it is gathered: k-major
// (a column of four rows per vec4) for the m-contiguous kinds, row-major (four k of one row
// per vec4, used against four rows of B) for the others, so no gather is transposed on its
// way in (H100: resnet50 128.3 -> 123.8 ms a step, from its 1x1 products). (An 8 x 8 block
// on a 128 x 128 tile, A read once for both column quads, ran at 25 TFLOP/s on an H200
// where this 8 x 4 one on 128 x 64 runs at 29.5.)
//
// Double buffering: each tile has two K-step buffers, so a step multiplies one while the
// next step's quads (loaded into registers meanwhile) are stored into the other, with one
// barrier a step instead of two (H200, resnet18 224 px: weight gradients 27.7 -> 30.5
// TFLOP/s). `gemm`'s loop is two steps so each names its buffer by a constant: a runtime
// buffer offset slowed the forward and input-gradient products by 2-6%.
//
// Phase products (PHASE_TAPS, PHASE_ROWS): the input gradient at stride s is s_h * s_w convolutions,
// one per phase (ih % s_h, iw % s_w) of dx, each over only the taps that phase meets (see
// `phase_tap_block` and `c_index`); the host gives each the geometry of its sub-convolution.
//
// Split K: workgroup `split` sums k in [split * k_chunk, (split + 1) * k_chunk) and writes
// its partial C at c[split * M * N ..]; `reduce_splits` adds the partials (and the bias).
//
// Grouped convolutions (GROUPED): p.groups products of M x N on one grid, product j over the
// j-th slice of each operand (a_off, b_off, c_off: see `enter_group`), the slices' rows
// a_ld, b_ld, c_ld elements apart. Its split partials are [splits, groups, M, N].
// Dilated convolutions (DILATED): the gathers' tap offsets are multiplied by the dilation
// (p.dil_h, p.dil_w); stride is then 1 (the host refuses both), so no phase product is
// dilated.
//
// Every operand is bound as an array of quads: a quad is one 16-byte load where the layout
// allows (flags), and a scalar is element i % 4 of quad i / 4 elsewhere. A, B and C may
// hold f16 (activations, and gradients stored as their activations, under mixed_float16): A
// is read through shaders/lib/act_*.wgsl's `act_raw` / `act_elem`, B through
// shaders/lib/b_*.wgsl's `b_staged` / `b_elem`, C written through shaders/lib/c_*.wgsl's
// `c_put4` / `c_put1`, and src/kernels/mod.rs builds a module for each combination. The
// bias and the split partials are f32. The host rounds binding sizes up to 16 bytes; every index is
// guarded against the real sizes below.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // K per split, a multiple of BK so no tile straddles two splits
    k_chunk: u32,
    tiles_m: u32,
    tiles_n: u32,
    splits: u32,
    // bit 0: A quads are aligned 16-byte loads; bit 1: B quads are; bit 2: C rows are
    // (N % 4 == 0); bit 3: add bias[n]
    flags: u32,
    // convolution geometry: x[batch, in_h, in_w, in_c], kernel [kh, kw, in_c, filters],
    // y[batch, out_h, out_w, filters]
    in_h: u32,
    in_w: u32,
    in_c: u32,
    filters: u32,
    out_h: u32,
    out_w: u32,
    kh: u32,
    kw: u32,
    stride_h: u32,
    stride_w: u32,
    pad_top: u32,
    pad_left: u32,
    // B_BLOCKED_T: B[k, n] = b[((k / kb) * N + n) * kb + k % kb]
    kb: u32,
    // Phase products: block (i', j') of B is tap (tap_i0 + step_h * (kh - 1 - i'),
    // tap_j0 + step_w * (kw - 1 - j')) of a kernel tap_kw wide, and row (n, qh, qw) of C is
    // pixel (n, qh * step_h + dst_ph, qw * step_w + dst_pw) of a dst_h x dst_w image.
    tap_i0: u32,
    tap_j0: u32,
    tap_kw: u32,
    step_h: u32,
    step_w: u32,
    dst_h: u32,
    dst_w: u32,
    dst_ph: u32,
    dst_pw: u32,
    // 0x7f800000, f32's infinity: ROUND_F16's overflow, as a runtime value (a constant
    // infinity is an error in WGSL)
    inf_bits: u32,
    // GROUPED: the number of products, and per operand the elements between rows (pixels)
    // and between the slices of consecutive groups
    groups: u32,
    a_ld: u32,
    a_step: u32,
    b_ld: u32,
    b_step: u32,
    c_ld: u32,
    c_step: u32,
    // DILATED: the spacing of the kernel's taps along height and width
    dil_h: u32,
    dil_w: u32,
}

// The products of one dispatch: the first, or up to four phase products of one strided input
// gradient, one a z-layer of the grid (their different taps and pixels run side by side
// instead of one short dispatch after another). Each workgroup copies its own into `p`.
@group(0) @binding(0) var<uniform> products: array<Params, 4>;
var<private> p: Params;
@group(0) @binding(1) var<storage, read> a: array<act4>;
@group(0) @binding(2) var<storage, read> b: array<b4>;
@group(0) @binding(3) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> c: array<c_quad>;
// STATS: the product's C feeds a training BatchNormalization, and the GEMM kernels write its
// first pass themselves as they store C: per column the mean and M2 of each tile row of C
// (`p.tiles_m` chunks of the tile's rows), as stored (bias added, rounded where C is f16), in
// that pass's layout: means at [chunk * N + n], M2 at [(tiles_m + chunk) * N + n] (see
// shaders/batchnorm.wgsl). Only an unsplit product without groups or phases does, and only on
// `gemm` and gemm_cpu.wgsl (the host sees to it; see COOP_ENTRY in src/kernels/gemm.rs for
// why not the tensor-core kernel). Those two entry points always read this binding's
// declaration, so the host binds C again where STATS is off.
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
override STATS: bool = false;
// A_NORM: A is a convolution's input seen through the BatchNormalization (with A_NORM_RELU,
// and its fused ReLU) that produced it: the gathers make each element what that layer's
// forward would have stored, affine(x, mean[c], k[c], b[c]) with k = inv_std * gamma and
// b = beta (shaders/lib/affine.wgsl), rounded as A is stored, so that the normalized tensor
// need not be written and read back. `a_norm` holds mean, k and b, C each ([3, C], C = p.in_c); the padding stays zero,
// as the convolution pads the normalized input. The forward (A = Rows, Im2col) and the
// weight gradient (A = Cols, Im2colT) of an ungrouped convolution (the host sees to it).
// Every GEMM entry point reads this binding's declaration: the host binds A again where
// A_NORM is off.
@group(0) @binding(6) var<storage, read> a_norm: array<f32>;
override A_NORM: bool = false;
override A_NORM_RELU: bool = false;
// JOIN: C is the input gradient of a residual block's first convolution, and its store
// finishes the block's input gradient as the join's backward pass would (add_relu_backward in
// shaders/elementwise.wgsl): C as stored, plus the shortcut's gradient `join_d`, through the
// ReLU whose output `join_y` was the block's input. Rounding C to its storage first keeps
// every value the separate pass's, bit for bit, without C written and read back in between.
// Both tensors are stored as C; only whole quads of an ungrouped C without phase rows (the
// host sees to it). Every entry point that stores C reads these bindings' declarations: the
// host binds A (or the partials) again where JOIN is off.
@group(0) @binding(7) var<storage, read> join_d: array<c_quad>;
@group(0) @binding(8) var<storage, read> join_y: array<c_quad>;
override JOIN: bool = false;

// A quad of C as JOIN stores it: the product's value v, the join's quads d and y.
fn join4(v: vec4<f32>, d: c_quad, y: c_quad) -> vec4<f32> {
    return relu_grad4(c_stored4(v) + c_value4(d), c_value4(y));
}

// Quad q of C as JOIN stores it, from the product's value v.
fn joined4(q: u32, v: vec4<f32>) -> vec4<f32> {
    return join4(v, join_d[q], join_y[q]);
}

// The channel of A[m, k]: k (Rows), k's c (Im2col), m (Cols: x as [pixels, C], A its
// transpose) or m's c (Im2colT); the k-contiguous kinds ignore m, the others k.
fn a_channel(m: u32, k: u32) -> u32 {
    switch A_KIND {
        case A_ROWS: { return k; }
        case A_IM2COL: { return k % p.in_c; }
        case A_COLS: { return m; }
        default: { return m % p.in_c; }
    }
}

// Element x of channel c as the BatchNorm would have stored it (before the storage rounding).
fn normed(x: f32, c: u32) -> f32 {
    let v = affine(x, a_norm[c], a_norm[p.in_c + c], a_norm[2u * p.in_c + c]);
    return select(v, relu(v), A_NORM_RELU);
}

// Channels c..c+3 of a quad, rounded as A is stored (shaders/lib/act_*.wgsl's `raw_of`).
fn normed_raw(v: a_stage, c: u32) -> a_stage {
    let x = raw_value(v);
    return raw_of(vec4<f32>(normed(x.x, c), normed(x.y, c + 1u), normed(x.z, c + 2u), normed(x.w, c + 3u)));
}

// How A[m, k] is gathered. Keep in step with `ALoad` in src/kernels/gemm.rs.
const A_ROWS: u32 = 0u;       // a[M, K] row-major: k contiguous
const A_COLS: u32 = 1u;       // a[K, M] (A transposed): m contiguous
const A_IM2COL: u32 = 2u;     // conv forward: m = (n, oh, ow), k = (i, j, c) of x
const A_IM2COL_T: u32 = 3u;   // conv weight gradient: m = (i, j, c), k = (n, oh, ow) of x
const A_DY_STUFFED: u32 = 4u; // conv input gradient: m = (n, ih, iw), k = (i, j, f) of dy
// How B[k, n] is gathered.
const B_ROWS: u32 = 0u;       // b[K, N] row-major: n contiguous
const B_BLOCKED_T: u32 = 1u;  // b[K / kb, N, kb]: k contiguous within blocks of kb

override A_KIND: u32 = 0u;
override B_KIND: u32 = 0u;
// A's quad flag (bit 0 of flags) as a pipeline constant, for the convolution gathers: a
// runtime branch to their one-float-at-a-time forms slowed the vec4 pipelines by 10-25%.
override A_QUADS: bool = false;
// B's quad flag (bit 1) as a pipeline constant as well. `b_quad` branches on it only in
// convolution forwards (A_IM2COL with B the kernel's rows, the flipped input gradients
// included): there it took the H200's 3x3 tensor-core products 4-13% faster than the
// runtime flag (ResNet-18's 3x3 256 at 224 px, batch 256: 0.382 -> 0.337 ms) and the
// models 2-3.4%. The weight gradients keep the runtime flag: with the constant their
// products ran up to 2.3x slower on the same registers (3x3 256: 0.453 -> 1.064 ms), and so
// did fetches that load every slot from a clamped index and zero it by a select
// (benches/results/2026-11-28h, calls 5-7).
override B_QUADS: bool = false;
// The host's proof that every fetch of row-major A (A_INSIDE: M a multiple of the tile's
// rows, K of its step, whole quads, ungrouped, not normalized) or of B's rows in a
// convolution forward or a 1x1 product (B_INSIDE: N a multiple of the tile's columns, K of
// its step) lies inside the operand: those fetches load without an edge test. Fetched so
// with no test at all (unsafe at edges), the 4096^3 product ran at 227 TFLOP/s on the H200
// against 131 with the tests (benches/results/2026-11-28h, calls 4 and 6); with these
// constants at 226, resnet50 3,184 -> 3,314 images/s, resnet18_cifar 27,514 -> 28,403
// (2026-11-28i/call1). B_INSIDE in the weight gradients too cost resnet18 5%.
override A_INSIDE: bool = false;
override B_INSIDE: bool = false;
// The host's proof that a convolution's image gather (A_IM2COL, quads) meets no row past M
// and no K past the kernel's (M a multiple of the tile's rows, K of its step): the gather
// then tests only the padding. The same for the weight gradients' transposed gather
// (IM2COL_T) cost resnet18 3% and resnet18_cifar 4% (2026-12-02/call2), as B_INSIDE did there.
override A_WHOLE: bool = false;
// A phase product's B gather (PHASE_TAPS) and, in whichever dispatch writes C, its rows
// (PHASE_ROWS); pipeline constants so that no other product carries their arithmetic.
override PHASE_TAPS: bool = false;
override PHASE_ROWS: bool = false;
// IM2COL_T advanced by BK through a loop of row carries instead, which the 128 x 128
// tensor-core tile runs faster (see `step_loop` in src/kernels/gemm.rs).
override STEP_LOOP: bool = false;
// Invocations summing each quad of C in `reduce_splits` (see there).
override SPLIT_LANES: u32 = 1u;
// Both declared here, not beside their code: naga 30's override processing panicked on an
// override declared further down, between private variables (tests/translate.rs catches it).

// Takes this workgroup's product into `p`: the phase of its grid's z-layer where the
// product is a phase product, else the only one (a constant index, as the uniform was).
fn enter_product(wid: vec3<u32>) {
    p = products[select(0u, wid.z, PHASE_TAPS)];
}
// A grouped convolution (see the top); pipeline constants like the phase ones.
override GROUPED: bool = false;
// A dilated convolution: its taps p.dil_h and p.dil_w apart. One constant for every
// dilation, so that the dilation amounts do not multiply the pipelines; undilated products
// multiply by a constant 1.
override DILATED: bool = false;

fn dil_h() -> u32 {
    return select(1u, p.dil_h, DILATED);
}

fn dil_w() -> u32 {
    return select(1u, p.dil_w, DILATED);
}
// The mixed_float16 policy where the tensor-core kernel cannot run: each operand is rounded
// to f16 on its way into workgroup memory, so the product sees the numbers the tensor cores
// would (f16 operands, f32 accumulation), computed on the f32 units.
override ROUND_F16: bool = false;
// rows per invocation: 4 or 8 (the accumulator holds 8)
override TM: u32 = 4u;
// invocations along M and along N (each owns 4 columns)
override WM: u32 = 16u;
override WN: u32 = 16u;
// K step, a multiple of 4
override BK: u32 = 16u;
override WG: u32 = 256u;

override BM: u32 = WM * TM;
override BN: u32 = WN * 4u;
override THREADS: u32 = WM * WN;
// A quads each invocation loads per K step (see `fetch_a_conv`)
override A_SLOTS: u32 = BM * BK / (4u * THREADS);
// B quads each invocation loads per K step
override B_SLOTS: u32 = BN * BK / (4u * THREADS);
// Quads of one of the two buffers of each tile (see `gemm`).
override A_BUF: u32 = BK * BM / 4u;
override B_BUF: u32 = BK * BN / 4u;
const MAX_SLOTS: u32 = 8u;

const NONE: u32 = 0xffffffffu;

// b_tile holds B[k0 + kk, n0 + n] at float kk * BN + n; a_tile holds A[m0 + m, k0 + kk] at
// float kk * BM + m (m-contiguous kinds) or m * BK + kk (the others).
var<workgroup> a_tile: array<vec4<f32>, 2u * BK * BM / 4u>;
var<workgroup> b_tile: array<vec4<f32>, 2u * BK * BN / 4u>;

fn flag(bit: u32) -> bool {
    return (p.flags & (1u << bit)) != 0u;
}

// GROUPED: where this workgroup's group starts in A (its image's channels or its matrix's
// columns), in B (its columns, or its blocks' k) and in C (its columns), in elements.
var<private> a_off: u32;
var<private> b_off: u32;
var<private> c_off: u32;

fn enter_group(group: u32) {
    a_off = group * p.a_step;
    b_off = group * p.b_step;
    c_off = group * p.c_step;
}

// Element index of channel `ch` of pixel `pix` of A's image (x, or dy in the input gradient)
// whose pixels hold `depth` channels; in a grouped product, of the group's slice of a wider
// image.
fn image_index(pix: u32, ch: u32, depth: u32) -> u32 {
    if (GROUPED) {
        return pix * p.a_ld + a_off + ch;
    }
    return pix * depth + ch;
}

// Element index in x of x[n, oh * s - pt + i * dh, ow * s - pl + j * dw, c], or NONE in the
// padding. Rows above the image wrap around to huge u32 values and fail the `< in_h` test.
fn x_index(n: u32, oh: u32, ow: u32, i: u32, j: u32, ch: u32) -> u32 {
    let ih = oh * p.stride_h + i * dil_h() - p.pad_top;
    let iw = ow * p.stride_w + j * dil_w() - p.pad_left;
    if (ih >= p.in_h || iw >= p.in_w) {
        return NONE;
    }
    return image_index((n * p.in_h + ih) * p.in_w + iw, ch, p.in_c);
}

// Element index in a of A[m, k], or NONE where A is zero (outside A, or padding).
fn a_index(m: u32, k: u32) -> u32 {
    if (m >= p.m || k >= p.k) {
        return NONE;
    }
    switch A_KIND {
        case A_ROWS: {
            if (GROUPED) {
                return m * p.a_ld + a_off + k;
            }
            return m * p.k + k;
        }
        case A_COLS: {
            if (GROUPED) {
                return k * p.a_ld + a_off + m;
            }
            return k * p.m + m;
        }
        case A_IM2COL: {
            let ow = m % p.out_w;
            let t = m / p.out_w;
            let ch = k % p.in_c;
            let ij = k / p.in_c;
            return x_index(t / p.out_h, t % p.out_h, ow, ij / p.kw, ij % p.kw, ch);
        }
        case A_IM2COL_T: {
            let ow = k % p.out_w;
            let t = k / p.out_w;
            let ch = m % p.in_c;
            let ij = m / p.in_c;
            return x_index(t / p.out_h, t % p.out_h, ow, ij / p.kw, ij % p.kw, ch);
        }
        default: { // A_DY_STUFFED
            // dx[n, ih, iw, c] gathers dy[n, oh, ow, f] where oh * s - pt + i == ih. For
            // stride s only one (i, j) in s * s hits a whole oh: the rest of K is the zeros
            // of a zero-stuffed dy (phase products leave them out of K).
            let iw = m % p.in_w;
            let t = m / p.in_w;
            let ih = t % p.in_h;
            let f = k % p.filters;
            let ij = k / p.filters;
            let i = (ij / p.kw) * dil_h();
            let j = (ij % p.kw) * dil_w();
            let th = ih + p.pad_top;
            let tw = iw + p.pad_left;
            if (th < i || tw < j) {
                return NONE;
            }
            let oh = (th - i) / p.stride_h;
            let ow = (tw - j) / p.stride_w;
            if (oh * p.stride_h != th - i || ow * p.stride_w != tw - j || oh >= p.out_h || ow >= p.out_w) {
                return NONE;
            }
            return image_index(((t / p.in_h) * p.out_h + oh) * p.out_w + ow, f, p.filters);
        }
    }
}

fn b_index(k: u32, n: u32) -> u32 {
    if (k >= p.k || n >= p.n) {
        return NONE;
    }
    if (B_KIND == B_ROWS) {
        if (GROUPED) {
            return k * p.b_ld + b_off + n;
        }
        return k * p.n + n;
    }
    var block = k / p.kb;
    if (PHASE_TAPS) {
        block = phase_tap_block(block);
    }
    if (GROUPED) {
        return (block * p.n + n) * p.b_ld + b_off + k % p.kb;
    }
    return (block * p.n + n) * p.kb + k % p.kb;
}

// The kernel tap of a phase product's block (i', j'): the sub-kernel is the phase's taps,
// flipped so that the product is a unit-stride convolution of dy.
fn phase_tap_block(block: u32) -> u32 {
    let i = p.tap_i0 + p.step_h * (p.kh - 1u - block / p.kw);
    let j = p.tap_j0 + p.step_w * (p.kw - 1u - block % p.kw);
    return i * p.tap_kw + j;
}

fn a_at(m: u32, k: u32) -> f32 {
    let i = a_index(m, k);
    if (i == NONE) {
        return 0.0;
    }
    let q = i / 4u;
    let r = i % 4u;
    let v = act_elem(a[q][act_lane(r)], i);
    if (A_NORM) {
        return normed(v, a_channel(m, k));
    }
    return v;
}

fn b_at(k: u32, n: u32) -> f32 {
    let i = b_index(k, n);
    if (i == NONE) {
        return 0.0;
    }
    return b_elem(i);
}

fn a_is_m_contiguous() -> bool {
    return A_KIND == A_COLS || A_KIND == A_IM2COL_T;
}

// Four consecutive elements of A along its contiguous direction, starting at (m, k).
// The host sets the quad flag only where the four share one validity and sit in one
// aligned vec4, so the first element's index decides for all.
// Staged as `a_reg` holds quads (shaders/lib/act_*.wgsl's `act_raw`).
fn a_quad(m: u32, k: u32) -> a_stage {
    if (flag(0u)) {
        let i = a_index(m, k);
        if (i == NONE) {
            return a_stage();
        }
        let q = i / 4u;
        if (A_NORM) {
            return normed_raw(act_raw(a[q]), a_channel(m, k));
        }
        return act_raw(a[q]);
    }
    if (a_is_m_contiguous()) {
        return raw_of(vec4<f32>(a_at(m, k), a_at(m + 1u, k), a_at(m + 2u, k), a_at(m + 3u, k)));
    }
    return raw_of(vec4<f32>(a_at(m, k), a_at(m, k + 1u), a_at(m, k + 2u), a_at(m, k + 3u)));
}

fn b_quad(k: u32, n: u32) -> b_stage {
    if (select(flag(1u), B_QUADS, A_KIND == A_IM2COL && B_KIND == B_ROWS)) {
        let i = b_index(k, n);
        if (i == NONE) {
            return b_stage();
        }
        return b_staged(i / 4u);
    }
    if (B_KIND == B_ROWS) {
        return b_staged_of(vec4<f32>(b_at(k, n), b_at(k, n + 1u), b_at(k, n + 2u), b_at(k, n + 3u)));
    }
    return b_staged_of(vec4<f32>(b_at(k, n), b_at(k + 1u, n), b_at(k + 2u, n), b_at(k + 3u, n)));
}

fn set_b_tile(i: u32, v: f32) {
    let q = i / 4u;
    let r = i % 4u;
    b_tile[q][r] = v;
}

// The K loop is software-pipelined: the quads of step k + BK are fetched from memory into
// registers (`fetch_*`) while the tile of step k is multiplied, and written to workgroup
// memory (`store_*`) after it. Each invocation handles A_SLOTS quads of A and B_SLOTS of B
// per step: slot s is linear index l = lid + s * THREADS of the tile's quads, with
// consecutive invocations on consecutive addresses of the source. A's slots hold quads as
// stored (f16 ones as their two words: see shaders/lib/act_*.wgsl's `act_raw`), and B's
// likewise (shaders/lib/b_*.wgsl's `b_staged`).
var<private> a_reg: array<a_stage, MAX_SLOTS>;
var<private> b_reg: array<b_stage, MAX_SLOTS>;

// Where slot l of A goes. The m-contiguous kinds (A_COLS, IM2COL_T) fill a k-major tile
// with quads along m; the others fill a row-major one with quads along k, slot l being row
// l / (BK / 4), quad l % (BK / 4): either way one aligned 16-byte store, no transposing.
fn store_a(lid: u32, base: u32) {
    for (var s = 0u; s < A_SLOTS; s++) {
        let l = lid + s * THREADS;
        let v = operand(raw_value(a_reg[s]));
        if (a_is_m_contiguous()) {
            a_tile[base + (l / (BM / 4u)) * (BM / 4u) + l % (BM / 4u)] = v;
        } else {
            a_tile[base + l] = v;
        }
    }
}

// A quad as the product uses it: as loaded, or rounded to the nearest f16 (ROUND_F16), kept
// in f32. The rounding is done on the bits: NVIDIA's compiler folds
// unpack2x16float(pack2x16float(v)) into v. Past f16's range a value becomes infinite, as
// the tensor cores' conversion makes it, so that loss scaling sees the same overflows.
fn operand(v: vec4<f32>) -> vec4<f32> {
    if (!ROUND_F16) {
        return v;
    }
    return vec4<f32>(round_f16(v.x), round_f16(v.y), round_f16(v.z), round_f16(v.w));
}

fn round_f16(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    // NaN stays itself: the rounding below would carry a mantissa of all ones (NVIDIA's
    // NaN, 0x7fffffff) out through the sign bit into -0.0.
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return x;
    }
    let a = abs(x);
    if (a >= 65520.0) {
        // From 65520 round-to-nearest-even reaches f16's infinity.
        return sign(x) * bitcast<f32>(p.inf_bits);
    }
    if (a < 6.103515625e-5) {
        // f16's subnormals: multiples of 2^-24 (scaling by powers of two is exact; `round`
        // breaks ties to even).
        return round(x * 16777216.0) / 16777216.0;
    }
    // Normal range: keep 10 of f32's 23 mantissa bits, ties to even; a carry out of the
    // mantissa moves the exponent up, as it should.
    let odd = (bits >> 13u) & 1u;
    return bitcast<f32>((bits + 0x0fffu + odd) & 0xffffe000u);
}

// The general gather, which decomposes every index; `fetch_a_conv` is the fast one.
fn fetch_a(m0: u32, k0: u32, lid: u32) {
    if (A_INSIDE) {
        for (var s = 0u; s < A_SLOTS; s++) {
            let l = lid + s * THREADS;
            a_reg[s] = act_raw(a[((m0 + l / (BK / 4u)) * p.k + k0 + (l % (BK / 4u)) * 4u) / 4u]);
        }
        return;
    }
    for (var s = 0u; s < A_SLOTS; s++) {
        let l = lid + s * THREADS;
        if (a_is_m_contiguous()) {
            a_reg[s] = a_quad(m0 + (l % (BM / 4u)) * 4u, k0 + l / (BM / 4u));
        } else {
            a_reg[s] = a_quad(m0 + l / (BK / 4u), k0 + (l % (BK / 4u)) * 4u);
        }
    }
}

fn fetch_b(n0: u32, k0: u32, lid: u32) {
    if (B_INSIDE) {
        for (var s = 0u; s < B_SLOTS; s++) {
            let l = lid + s * THREADS;
            b_reg[s] = b_staged(((k0 + l / (BN / 4u)) * p.n + n0 + (l % (BN / 4u)) * 4u) / 4u);
        }
        return;
    }
    for (var s = 0u; s < B_SLOTS; s++) {
        let l = lid + s * THREADS;
        if (B_KIND == B_ROWS) {
            b_reg[s] = b_quad(k0 + l / (BN / 4u), n0 + (l % (BN / 4u)) * 4u);
        } else {
            b_reg[s] = b_quad(k0 + (l % (BK / 4u)) * 4u, n0 + l / (BK / 4u));
        }
    }
}

fn store_b(lid: u32, base: u32) {
    for (var s = 0u; s < B_SLOTS; s++) {
        let l = lid + s * THREADS;
        let v = operand(b_staged_value(b_reg[s]));
        if (B_KIND == B_ROWS) {
            b_tile[base + (l / (BN / 4u)) * (BN / 4u) + l % (BN / 4u)] = v;
        } else {
            let at = base * 4u + (l % (BK / 4u)) * 4u * BN + l / (BK / 4u);
            set_b_tile(at, v.x);
            set_b_tile(at + BN, v.y);
            set_b_tile(at + 2u * BN, v.z);
            set_b_tile(at + 3u * BN, v.w);
        }
    }
}

// The fast convolution loads. Every tile has THREADS dividing BM * BK / 4 and both BM / 4
// and BK / 4 dividing THREADS, so an invocation loads A_SLOTS quads per K step and each
// slot keeps its row (k-major kinds) or its column (IM2COL_T) for the whole K loop: what
// depends on it is decomposed once, before the loop, instead of at every load.
// IM2COL: (n * in_h, oh * sh - pt, ow * sw - pl, valid); DY_STUFFED: (n * out_h, ih + pt,
// iw + pl, valid), per slot.
var<private> rows: array<vec4<i32>, MAX_SLOTS>;
// IM2COL_T: (n, oh, ow) of each slot's k, advanced by BK per step: by col_step, BK as
// (images, rows, columns) of the output, with at most one carry each way.
var<private> cols: array<vec3<u32>, MAX_SLOTS>;
var<private> col_step: vec3<u32>;
// IM2COL_T: (c, i, j, valid) of each of the invocation's four rows (with aligned quads
// only the first is read).
var<private> taps: array<vec4<u32>, 4>;
// IM2COL and DY_STUFFED: (c, i, j) of the invocation's k (the same for all its rows),
// advanced by BK per step without a division.
var<private> tap_now: vec3<u32>;

// A kind with a geometric gather: the image gathers at any channel count (without the quad
// flag one float at a time, e.g. a 3-channel stem), the stuffed gradient only where the
// host's quad flag guarantees filters % 4 == 0.
fn conv_fast() -> bool {
    return A_KIND == A_IM2COL || A_KIND == A_IM2COL_T || (A_QUADS && A_KIND == A_DY_STUFFED);
}

fn init_conv_loads(m0: u32, k_begin: u32, lid: u32) {
    for (var s = 0u; s < A_SLOTS; s++) {
        let l = lid + s * THREADS;
        if (A_KIND == A_IM2COL_T) {
            let k = k_begin + l / (BM / 4u);
            let t = k / p.out_w;
            cols[s] = vec3<u32>(t / p.out_h, t % p.out_h, k % p.out_w);
        } else {
            let m = m0 + l / (BK / 4u);
            let valid = select(0, 1, m < p.m);
            if (A_KIND == A_IM2COL) {
                let t = m / p.out_w;
                let ih0 = i32((t % p.out_h) * p.stride_h) - i32(p.pad_top);
                let iw0 = i32((m % p.out_w) * p.stride_w) - i32(p.pad_left);
                rows[s] = vec4<i32>(i32((t / p.out_h) * p.in_h), ih0, iw0, valid);
            } else {
                let pix = m;
                let t = pix / p.in_w;
                rows[s] = vec4<i32>(i32((t / p.in_h) * p.out_h), i32(t % p.in_h + p.pad_top), i32(pix % p.in_w + p.pad_left), valid);
            }
        }
    }
    if (A_KIND != A_IM2COL_T) {
        let depth = select(p.filters, p.in_c, A_KIND == A_IM2COL);
        let k = k_begin + (lid % (BK / 4u)) * 4u;
        let ij = k / depth;
        tap_now = vec3<u32>(k % depth, ij / p.kw, ij % p.kw);
    }
    if (A_KIND == A_IM2COL_T) {
        let rows_step = BK / p.out_w;
        col_step = vec3<u32>(rows_step / p.out_h, rows_step % p.out_h, BK % p.out_w);
        for (var e = 0u; e < select(4u, 1u, A_QUADS); e++) {
            let m = m0 + (lid % (BM / 4u)) * 4u + e;
            let ij = m / p.in_c;
            taps[e] = vec4<u32>(m % p.in_c, ij / p.kw, ij % p.kw, select(0u, 1u, m < p.m));
        }
    }
}

// x[n, oh * sh - pt + i, ow * sw - pl + j, c] for IM2COL_T's (n, oh, ow) and tap
// (c, i, j, valid); zero in the padding.
fn x_at_tap(nc: vec3<u32>, tap: vec4<u32>) -> f32 {
    let ih = i32(nc.y * p.stride_h + tap.y * dil_h()) - i32(p.pad_top);
    let iw = i32(nc.z * p.stride_w + tap.z * dil_w()) - i32(p.pad_left);
    if (tap.w == 0u || ih < 0 || ih >= i32(p.in_h) || iw < 0 || iw >= i32(p.in_w)) {
        return 0.0;
    }
    let i = image_index((nc.x * p.in_h + u32(ih)) * p.in_w + u32(iw), tap.x, p.in_c);
    let v = act_elem(a[i / 4u][act_lane(i % 4u)], i);
    if (A_NORM) {
        return normed(v, tap.x);
    }
    return v;
}

// IM2COL without aligned quads: the quad's four k each have their own tap (i, j, c), found
// once per K step for all of the invocation's rows.
fn fetch_im2col_scalar(k: u32) {
    var tap: array<vec3<i32>, 4>; // (i, j, c), c = -1 past K
    for (var e = 0u; e < 4u; e++) {
        let ke = k + e;
        let ij = ke / p.in_c;
        tap[e] = vec3<i32>(i32((ij / p.kw) * dil_h()), i32((ij % p.kw) * dil_w()), select(-1, i32(ke % p.in_c), ke < p.k));
    }
    for (var s = 0u; s < A_SLOTS; s++) {
        let r = rows[s];
        var v = vec4<f32>(0.0);
        for (var e = 0u; e < 4u; e++) {
            let t = tap[e];
            let ih = r.y + t.x;
            let iw = r.z + t.y;
            if (r.w != 0 && t.z >= 0 && ih >= 0 && ih < i32(p.in_h) && iw >= 0 && iw < i32(p.in_w)) {
                let i = image_index(u32(r.x + ih) * p.in_w + u32(iw), u32(t.z), p.in_c);
                v[e] = act_elem(a[i / 4u][act_lane(i % 4u)], i);
                if (A_NORM) {
                    v[e] = normed(v[e], u32(t.z));
                }
            }
        }
        a_reg[s] = raw_of(v);
    }
}

fn fetch_a_conv(k0: u32, lid: u32) {
    if (A_KIND == A_IM2COL_T) {
        for (var s = 0u; s < A_SLOTS; s++) {
            let kk = lid / (BM / 4u) + s * (THREADS / (BM / 4u));
            let nc = cols[s];
            var v = a_stage();
            if (k0 + kk < p.k) {
                if (A_QUADS) {
                    let t = taps[0];
                    let ih = i32(nc.y * p.stride_h + t.y * dil_h()) - i32(p.pad_top);
                    let iw = i32(nc.z * p.stride_w + t.z * dil_w()) - i32(p.pad_left);
                    if (t.w != 0u && ih >= 0 && ih < i32(p.in_h) && iw >= 0 && iw < i32(p.in_w)) {
                        v = act_raw(a[image_index((nc.x * p.in_h + u32(ih)) * p.in_w + u32(iw), t.x, p.in_c) / 4u]);
                        if (A_NORM) {
                            v = normed_raw(v, t.x);
                        }
                    }
                } else {
                    v = raw_of(vec4<f32>(x_at_tap(nc, taps[0]), x_at_tap(nc, taps[1]), x_at_tap(nc, taps[2]), x_at_tap(nc, taps[3])));
                }
            }
            a_reg[s] = v;
            if (STEP_LOOP) {
                var next = vec3<u32>(nc.x, nc.y, nc.z + BK);
                while (next.z >= p.out_w) {
                    next.z -= p.out_w;
                    next.y += 1u;
                    if (next.y == p.out_h) {
                        next.y = 0u;
                        next.x += 1u;
                    }
                }
                cols[s] = next;
            } else {
                // Without a loop: each part of col_step is below its extent, so each sum
                // carries at most once.
                var next = nc + col_step;
                if (next.z >= p.out_w) {
                    next.z -= p.out_w;
                    next.y += 1u;
                }
                if (next.y >= p.out_h) {
                    next.y -= p.out_h;
                    next.x += 1u;
                }
                cols[s] = next;
            }
        }
        return;
    }
    // The k part is the same for all of the invocation's rows.
    let kq = lid % (BK / 4u);
    let k = k0 + kq * 4u;
    if (A_KIND == A_IM2COL && !A_QUADS) {
        fetch_im2col_scalar(k);
        return;
    }
    let depth = select(p.filters, p.in_c, A_KIND == A_IM2COL);
    let ch = tap_now.x;
    let i = i32(tap_now.y * dil_h());
    let j = i32(tap_now.z * dil_w());
    // Four integer divisions a step cost the forward and input-gradient products 2-3%
    // (H100, resnet18 224 px).
    var t = tap_now;
    t.x += BK;
    while (t.x >= depth) {
        t.x -= depth;
        t.z += 1u;
        if (t.z == p.kw) {
            t.z = 0u;
            t.y += 1u;
        }
    }
    tap_now = t;
    let unit_stride = p.stride_h == 1u && p.stride_w == 1u;
    for (var s = 0u; s < A_SLOTS; s++) {
        let r = rows[s];
        var v = a_stage();
        if (A_WHOLE || (r.w != 0 && k < p.k)) {
            if (A_KIND == A_IM2COL) {
                let ih = r.y + i;
                let iw = r.z + j;
                if (ih >= 0 && ih < i32(p.in_h) && iw >= 0 && iw < i32(p.in_w)) {
                    v = act_raw(a[image_index(u32(r.x + ih) * p.in_w + u32(iw), ch, p.in_c) / 4u]);
                    if (A_NORM) {
                        v = normed_raw(v, ch);
                    }
                }
            } else {
                // dx[ih] gathers dy[oh] where oh * s = ih + pt - i: a whole oh only in one
                // tap of s (the zero-stuffed rest of K loads nothing).
                let th = r.y - i;
                let tw = r.z - j;
                if (th >= 0 && tw >= 0) {
                    var oh = u32(th);
                    var ow = u32(tw);
                    var hit = true;
                    if (!unit_stride) {
                        oh = u32(th) / p.stride_h;
                        ow = u32(tw) / p.stride_w;
                        hit = oh * p.stride_h == u32(th) && ow * p.stride_w == u32(tw);
                    }
                    if (hit && oh < p.out_h && ow < p.out_w) {
                        v = act_raw(a[image_index((u32(r.x) + oh) * p.out_w + ow, ch, p.filters) / 4u]);
                    }
                }
            }
        }
        a_reg[s] = v;
    }
}

fn bias_at(n: u32) -> f32 {
    let q = n / 4u;
    let r = n % 4u;
    return bias[q][r];
}

// Where C[m, n] is stored: row-major, or in a phase product at its pixel of dx; in a grouped
// product, in the group's columns of a wider C.
fn c_index(m: u32, n: u32) -> u32 {
    var row = m;
    if (PHASE_ROWS) {
        let qw = m % p.out_w;
        let t = m / p.out_w;
        let ih = (t % p.out_h) * p.step_h + p.dst_ph;
        let iw = qw * p.step_w + p.dst_pw;
        row = ((t / p.out_h) * p.dst_h + ih) * p.dst_w + iw;
    }
    if (GROUPED) {
        return row * p.c_ld + c_off + n;
    }
    return row * p.n + n;
}

fn store(base: u32, m: u32, n: u32, v: vec4<f32>) {
    var out = v;
    if (flag(3u)) {
        out += vec4<f32>(bias_at(n), bias_at(min(n + 1u, p.n - 1u)), bias_at(min(n + 2u, p.n - 1u)), bias_at(min(n + 3u, p.n - 1u)));
    }
    let i = base + c_index(m, n);
    if (flag(2u)) {
        // N % 4 == 0: the four columns are one aligned vec4, all inside C
        let q = i / 4u;
        if (JOIN) {
            out = joined4(q, out);
        }
        c_put4(q, out);
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        if (n + e < p.n) {
            let ie = i + e;
            let q = ie / 4u;
            let r = ie % 4u;
            c_put1(ie, out[e]);
        }
    }
}

// Element n of C as `store` writes it: plus its bias, rounded as C's storage rounds.
fn stat_value(v: f32, n: u32) -> f32 {
    if (flag(3u)) {
        return c_stored(v + bias_at(min(n, p.n - 1u)));
    }
    return c_stored(v);
}

// A quad of C at columns n.. as `store` writes it.
fn stat4(v: vec4<f32>, n: u32) -> vec4<f32> {
    var out = v;
    if (flag(3u)) {
        out += vec4<f32>(bias_at(min(n, p.n - 1u)), bias_at(min(n + 1u, p.n - 1u)), bias_at(min(n + 2u, p.n - 1u)), bias_at(min(n + 3u, p.n - 1u)));
    }
    return c_stored4(out);
}

// Chan's merge of (nb, mean_b, m2_b) into (na, mean_a, m2_a): the mean and M2 of both sets.
fn chan_merge(na: f32, mean_a: f32, m2_a: f32, nb: f32, mean_b: f32, m2_b: f32) -> vec2<f32> {
    let n = na + nb;
    if (nb == 0.0) {
        return vec2<f32>(mean_a, m2_a);
    }
    let d = mean_b - mean_a;
    let f = nb / n;
    return vec2<f32>(mean_a + d * f, m2_a + m2_b + d * d * na * f);
}

// Column n's statistics of chunk `chunk` into `stats` (see its binding).
fn write_stats(chunk: u32, n: u32, mean: f32, m2: f32) {
    stats[chunk * p.n + n] = mean;
    stats[(p.tiles_m + chunk) * p.n + n] = m2;
}

// One K step of `gemm` on buffer `buf`: fetch step k0 + BK into registers, multiply the
// tile in `buf`, store the fetched quads into the other buffer, then the step's barrier.
fn step(acc: ptr<function, array<vec4<f32>, 8>>, k0: u32, k_end: u32, m0: u32, n0: u32, lid: u32,
        tx: u32, ty: u32, fast: bool, buf: u32) {
    let more = k0 + BK < k_end;
    if (more) {
        if (fast) {
            fetch_a_conv(k0 + BK, lid);
        } else {
            fetch_a(m0, k0 + BK, lid);
        }
        fetch_b(n0, k0 + BK, lid);
    }
    // Each operand's row offset is added once, outside the unrolled kk loop, so every kk is a
    // constant offset from one base (with `(kk * BM + ty * TM) / 4` the driver could not
    // distribute the division: weight gradients 2.5% slower on an H100).
    let bb = buf * B_BUF + tx;
    if (a_is_m_contiguous()) {
        let ab = buf * A_BUF + ty * (TM / 4u);
        for (var kk = 0u; kk < BK; kk++) {
            let bv = b_tile[bb + kk * (BN / 4u)];
            for (var q = 0u; q < TM / 4u; q++) {
                let av = a_tile[ab + kk * (BM / 4u) + q];
                (*acc)[q * 4u] = fma(vec4<f32>(av.x), bv, (*acc)[q * 4u]);
                (*acc)[q * 4u + 1u] = fma(vec4<f32>(av.y), bv, (*acc)[q * 4u + 1u]);
                (*acc)[q * 4u + 2u] = fma(vec4<f32>(av.z), bv, (*acc)[q * 4u + 2u]);
                (*acc)[q * 4u + 3u] = fma(vec4<f32>(av.w), bv, (*acc)[q * 4u + 3u]);
            }
        }
    } else {
        // Four k at a time: four rows of B, then each of the invocation's rows of A as one
        // quad along k.
        let ar = buf * A_BUF + ty * TM * (BK / 4u);
        for (var k4 = 0u; k4 < BK / 4u; k4++) {
            let b0 = b_tile[bb + (k4 * 4u) * (BN / 4u)];
            let b1 = b_tile[bb + (k4 * 4u + 1u) * (BN / 4u)];
            let b2 = b_tile[bb + (k4 * 4u + 2u) * (BN / 4u)];
            let b3 = b_tile[bb + (k4 * 4u + 3u) * (BN / 4u)];
            for (var r = 0u; r < TM; r++) {
                let av = a_tile[ar + r * (BK / 4u) + k4];
                var v = fma(vec4<f32>(av.x), b0, (*acc)[r]);
                v = fma(vec4<f32>(av.y), b1, v);
                v = fma(vec4<f32>(av.z), b2, v);
                (*acc)[r] = fma(vec4<f32>(av.w), b3, v);
            }
        }
    }
    if (more) {
        store_a(lid, (1u - buf) * A_BUF);
        store_b(lid, (1u - buf) * B_BUF);
    }
    workgroupBarrier();
}

// What workgroup `tile` of the grid computes: its output tile's first row and column and
// its K range. n-tiles vary fastest, so neighbouring workgroups share their rows of A (the
// large im2col side) in cache.
struct Origin {
    m0: u32,
    n0: u32,
    split: u32,
    k_begin: u32,
    k_end: u32,
    group: u32,
}

fn origin(tile: u32) -> Origin {
    let tn = tile % p.tiles_n;
    let rest = tile / p.tiles_n;
    var split = rest / p.tiles_m;
    var group = 0u;
    if (GROUPED) {
        // groups between the tiles and the splits
        group = split % p.groups;
        split = split / p.groups;
    }
    let k_begin = split * p.k_chunk;
    return Origin((rest % p.tiles_m) * BM, tn * BN, split, k_begin, min(k_begin + p.k_chunk, p.k), group);
}

// Workgroups of the grid that have a tile (the rest of a folded grid leaves at once).
// gemm_coop counts them inline from the uniform: naga's uniformity analysis takes `p`, a
// private copy, and any function's argument as non-uniform.
fn tile_count() -> u32 {
    return p.tiles_m * p.tiles_n * p.splits * select(1u, p.groups, GROUPED);
}

// Where split `split`'s partial C starts (0 where there is no split: C itself).
fn partial_base(split: u32) -> u32 {
    if (GROUPED) {
        return split * p.groups * p.m * p.n;
    }
    return split * p.m * p.n;
}

// The first K step's quads into registers (the convolution gathers first decompose what
// their slots keep for the whole loop).
fn fetch_first(o: Origin, lid: u32) {
    if (GROUPED) {
        enter_group(o.group);
    }
    if (conv_fast()) {
        init_conv_loads(o.m0, o.k_begin, lid);
        fetch_a_conv(o.k_begin, lid);
    } else {
        fetch_a(o.m0, o.k_begin, lid);
    }
    fetch_b(o.n0, o.k_begin, lid);
}

@compute @workgroup_size(THREADS)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    enter_product(wid);
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= tile_count()) {
        return; // uniform: the whole workgroup leaves
    }
    let o = origin(tile);
    let m0 = o.m0;
    let n0 = o.n0;
    let k_end = o.k_end;
    let tx = lid % WN;
    let ty = lid / WN;
    let fast = conv_fast();
    // Row i of the invocation's block. It must stay indexed by constants (after the short
    // loops unroll), or the driver keeps it in local memory.
    var acc: array<vec4<f32>, 8>;
    fetch_first(o, lid);
    store_a(lid, 0u);
    store_b(lid, 0u);
    workgroupBarrier();
    // Two buffers per tile: a step multiplies one while the quads of the next step,
    // fetched into registers meanwhile, go into the other after it; one barrier per step.
    // The loop body is two steps so that each names its buffer by a constant.
    var k0 = o.k_begin;
    while (k0 < k_end) {
        step(&acc, k0, k_end, m0, n0, lid, tx, ty, fast, 0u);
        k0 += BK;
        if (k0 >= k_end) {
            break;
        }
        step(&acc, k0, k_end, m0, n0, lid, tx, ty, fast, 1u);
        k0 += BK;
    }

    // The row loop must unroll (acc indexed by constants) or acc lives in local memory: with
    // the phase products' row mapping behind a runtime flag in `store` it did not, 2 TFLOP/s
    // on an H200. Spelt out as four-row calls instead of the loop it ran 10-15% slower.
    let base = partial_base(o.split);
    let n = n0 + tx * 4u;
    if (n >= p.n && !STATS) {
        return;
    }
    if (n < p.n) {
        for (var i = 0u; i < TM; i++) {
            let m = m0 + ty * TM + i;
            if (m < p.m) {
                store(base, m, n, acc[i]);
            }
        }
    }
    if (STATS) {
        tile_stats(&acc, m0, n, ty, lid);
    }
}

// STATS in `gemm`: each invocation's mean and M2 over its TM rows of its four columns, then
// the WM invocations of a column quad folded by Chan's merge through the operand tiles (free
// after the K loop's last barrier), as BatchNorm's first pass folds its lanes.
fn tile_stats(acc: ptr<function, array<vec4<f32>, 8>>, m0: u32, n: u32, ty: u32, lid: u32) {
    let rows = min(TM, p.m - min(p.m, m0 + ty * TM));
    var sum = vec4<f32>(0.0);
    for (var i = 0u; i < TM; i++) {
        if (i < rows) {
            sum += stat4((*acc)[i], n);
        }
    }
    let mean = sum / max(f32(rows), 1.0);
    var m2 = vec4<f32>(0.0);
    for (var i = 0u; i < TM; i++) {
        if (i < rows) {
            let d = stat4((*acc)[i], n) - mean;
            m2 += d * d;
        }
    }
    a_tile[lid] = mean;
    a_tile[THREADS + lid] = vec4<f32>(f32(rows));
    b_tile[lid] = m2;
    workgroupBarrier();
    for (var half = WM / 2u; half > 0u; half /= 2u) {
        if (ty < half) {
            let j = lid + half * WN;
            let na = a_tile[THREADS + lid].x;
            let nb = a_tile[THREADS + j].x;
            if (nb > 0.0) {
                let d = a_tile[j] - a_tile[lid];
                let f = nb / (na + nb);
                a_tile[lid] += d * f;
                b_tile[lid] += b_tile[j] + d * d * (na * f);
                a_tile[THREADS + lid] = vec4<f32>(na + nb);
            }
        }
        workgroupBarrier();
    }
    if (ty == 0u) {
        for (var e = 0u; e < 4u; e++) {
            if (n + e < p.n) {
                write_stats(m0 / BM, n + e, a_tile[lid][e], b_tile[lid][e]);
            }
        }
    }
}

// c = sum over the split partials a[s * M * N ..] (+ bias[n]), stored where `c_index` says.
// SPLIT_LANES invocations share each quad of C, lane l summing splits l, l + SPLIT_LANES, ...
// of it; the lanes' sums fold in workgroup memory. One invocation summing a hundred splits in
// turn made each a chain of a hundred loads on a few dozen workgroups (resnet18_cifar's 3x3
// 64 weight gradients: 114 splits, 16.8 MB of partials in 18 us, under 1 TB/s on an H100).
// Consecutive invocations take consecutive quads of one split, so each lane's loads are
// whole lines.
var<workgroup> split_sums: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn reduce_splits(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    enter_product(wid);
    let per_group = WG / SPLIT_LANES;
    let lane = lid / per_group;
    let quad = (wid.x + wid.y * nwg.x) * per_group + lid % per_group;
    var len = p.m * p.n;
    if (GROUPED) {
        len *= p.groups;
    }
    let i0 = quad * 4u;
    let live = i0 < len;
    var s = vec4<f32>(0.0);
    if (live) {
        if (flag(2u)) {
            // N % 4 == 0, so every partial starts on a vec4
            for (var sp = lane; sp < p.splits; sp += SPLIT_LANES) {
                let q = (sp * len + i0) / 4u;
                s += act_quad(a[q]);
            }
        } else {
            for (var sp = lane; sp < p.splits; sp += SPLIT_LANES) {
                for (var e = 0u; e < 4u; e++) {
                    if (i0 + e < len) {
                        let ie = sp * len + i0 + e;
                        let q = ie / 4u;
                        let r = ie % 4u;
                        s[e] += act_elem(a[q][act_lane(r)], ie);
                    }
                }
            }
        }
    }
    if (SPLIT_LANES > 1u) {
        // SPLIT_LANES is a pipeline constant: every invocation takes these barriers.
        split_sums[lid] = s;
        workgroupBarrier();
        for (var half = SPLIT_LANES / 2u; half > 0u; half /= 2u) {
            if (lane < half) {
                split_sums[lid] += split_sums[lid + half * per_group];
            }
            workgroupBarrier();
        }
        s = split_sums[lid];
    }
    if (!live || lane != 0u) {
        return;
    }
    if (flag(2u) && !GROUPED) {
        // N % 4 == 0: the quad is one aligned quad of C, at its row or at its phase row's
        // pixel (the only store an f16 C takes: shaders/lib/c_f16.wgsl).
        var v = s;
        if (flag(3u)) {
            let n = i0 % p.n;
            v += vec4<f32>(bias_at(n), bias_at(n + 1u), bias_at(n + 2u), bias_at(n + 3u));
        }
        var at = i0;
        if (PHASE_ROWS) {
            at = c_index(i0 / p.n, i0 % p.n);
        }
        if (JOIN) {
            v = joined4(at / 4u, v);
        }
        c_put4(at / 4u, v);
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        let ie = i0 + e;
        if (ie < len) {
            var v = s[e];
            if (flag(3u)) {
                v += bias_at(ie % p.n);
            }
            var mn = ie;
            if (GROUPED) {
                // partial element ie is (group, m, n) of [groups, M, N]
                enter_group(ie / (p.m * p.n));
                mn = ie % (p.m * p.n);
            }
            c_put1(c_index(mn / p.n, mn % p.n), v);
        }
    }
}

// Column sums of a[M, N] (the bias gradient), split over row chunks of k_chunk rows:
// c[chunk * N + n] = sum of a[r, n] for r in the chunk. A workgroup covers 64 columns with
// 4 invocations on each, which stride through the chunk's rows and then combine.
const CS_COLS: u32 = 64u;
const CS_LANES: u32 = 4u;
var<workgroup> cs_part: array<f32, 256>;

@compute @workgroup_size(256)
fn column_sums(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    enter_product(wid);
    let tile = wid.x + wid.y * nwg.x;
    let live = tile < p.tiles_n * p.splits; // uniform across the workgroup
    let col = (tile % p.tiles_n) * CS_COLS + lid % CS_COLS;
    let chunk = tile / p.tiles_n;
    let lane = lid / CS_COLS;
    var s = 0.0;
    if (live && col < p.n) {
        let r_end = min((chunk + 1u) * p.k_chunk, p.m);
        for (var r = chunk * p.k_chunk + lane; r < r_end; r += CS_LANES) {
            let ie = r * p.n + col;
            let q = ie / 4u;
            let e = ie % 4u;
            s += act_elem(a[q][act_lane(e)], ie);
        }
    }
    cs_part[lid] = s;
    workgroupBarrier();
    if (lane == 0u && live && col < p.n) {
        let total = cs_part[lid] + cs_part[lid + CS_COLS] + cs_part[lid + 2u * CS_COLS] + cs_part[lid + 3u * CS_COLS];
        let ie = chunk * p.n + col;
        let q = ie / 4u;
        let e = ie % 4u;
        c_put1(ie, total);
    }
}
