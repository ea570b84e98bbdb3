// Probes of what WGSL cooperative matrices give on this chip, for benches/gemm.rs: a plain
// row-major product C = A B on f16 operands with f32 accumulation, every size a multiple of
// the tile. The operands in memory are `Quad`s, which the bench declares before this text
// (with the `enable` directives): vec4<f16>, or vec4<f32> rounded on their way into
// workgroup memory.

struct Params { m: u32, n: u32, k: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<Quad>;
@group(0) @binding(2) var<storage, read> b: array<Quad>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// Subgroups in SG_ROWS x SG_COLS, each a 64 x 64 block of C in 4 x 4 accumulators; K BK at a
// time through workgroup memory (rows padded by 8 halves), the next step's quads fetched into
// registers while this one multiplies.
override SG_ROWS: u32 = 2u;
override SG_COLS: u32 = 4u;
override THREADS: u32 = 32u * SG_ROWS * SG_COLS;
override BM: u32 = 64u * SG_ROWS;
override BN: u32 = 64u * SG_COLS;
override BK: u32 = 32u;
override AS: u32 = BK + 8u;
override BS: u32 = BN + 8u;
// Quads of A's and B's tile per invocation (at most 16).
override A_SLOTS: u32 = BM * BK / (4u * THREADS);
override B_SLOTS: u32 = BN * BK / (4u * THREADS);
var<workgroup> as_: array<f16, BM * AS>;
var<workgroup> bs_: array<f16, BK * BS>;
var<private> ar: array<Quad, 16>;
var<private> br: array<Quad, 16>;

fn fetch(m0: u32, n0: u32, k0: u32, lid: u32) {
    for (var s = 0u; s < A_SLOTS; s++) {
        let q = lid + s * THREADS;
        let row = q / (BK / 4u);
        let col = (q % (BK / 4u)) * 4u;
        ar[s] = a[((m0 + row) * p.k + k0 + col) / 4u];
    }
    for (var s = 0u; s < B_SLOTS; s++) {
        let q = lid + s * THREADS;
        let row = q / (BN / 4u);
        let col = (q % (BN / 4u)) * 4u;
        br[s] = b[((k0 + row) * p.n + n0 + col) / 4u];
    }
}

fn stash(lid: u32) {
    for (var s = 0u; s < A_SLOTS; s++) {
        let q = lid + s * THREADS;
        let at = (q / (BK / 4u)) * AS + (q % (BK / 4u)) * 4u;
        as_[at] = f16(ar[s].x);
        as_[at + 1u] = f16(ar[s].y);
        as_[at + 2u] = f16(ar[s].z);
        as_[at + 3u] = f16(ar[s].w);
    }
    for (var s = 0u; s < B_SLOTS; s++) {
        let q = lid + s * THREADS;
        let at = (q / (BN / 4u)) * BS + (q % (BN / 4u)) * 4u;
        bs_[at] = f16(br[s].x);
        bs_[at + 1u] = f16(br[s].y);
        bs_[at + 2u] = f16(br[s].z);
        bs_[at + 3u] = f16(br[s].w);
    }
}

@compute @workgroup_size(THREADS)
fn staged(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
          @builtin(subgroup_id) sg: u32) {
    let m0 = wid.y * BM;
    let n0 = wid.x * BN;
    let rm = (sg / SG_COLS) * 64u;
    let rn = (sg % SG_COLS) * 64u;
    let ns = p.n;
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
    fetch(m0, n0, 0u, lid);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        workgroupBarrier();
        stash(lid);
        workgroupBarrier();
        if (k0 + BK < p.k) {
            fetch(m0, n0, k0 + BK, lid);
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let ia0 = (rm + 0u) * AS + kk;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&as_[ia0], AS);
            let ia1 = (rm + 16u) * AS + kk;
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&as_[ia1], AS);
            let ia2 = (rm + 32u) * AS + kk;
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&as_[ia2], AS);
            let ia3 = (rm + 48u) * AS + kk;
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&as_[ia3], AS);
            let ib0 = kk * BS + rn + 0u;
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&bs_[ib0], BS);
            let ib1 = kk * BS + rn + 16u;
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&bs_[ib1], BS);
            let ib2 = kk * BS + rn + 32u;
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&bs_[ib2], BS);
            let ib3 = kk * BS + rn + 48u;
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&bs_[ib3], BS);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
        }
    }
    { let at = (m0 + rm + 0u) * p.n + n0 + rn + 0u; coopStoreT(c00, &c[at], ns); }
    { let at = (m0 + rm + 0u) * p.n + n0 + rn + 16u; coopStoreT(c01, &c[at], ns); }
    { let at = (m0 + rm + 0u) * p.n + n0 + rn + 32u; coopStoreT(c02, &c[at], ns); }
    { let at = (m0 + rm + 0u) * p.n + n0 + rn + 48u; coopStoreT(c03, &c[at], ns); }
    { let at = (m0 + rm + 16u) * p.n + n0 + rn + 0u; coopStoreT(c10, &c[at], ns); }
    { let at = (m0 + rm + 16u) * p.n + n0 + rn + 16u; coopStoreT(c11, &c[at], ns); }
    { let at = (m0 + rm + 16u) * p.n + n0 + rn + 32u; coopStoreT(c12, &c[at], ns); }
    { let at = (m0 + rm + 16u) * p.n + n0 + rn + 48u; coopStoreT(c13, &c[at], ns); }
    { let at = (m0 + rm + 32u) * p.n + n0 + rn + 0u; coopStoreT(c20, &c[at], ns); }
    { let at = (m0 + rm + 32u) * p.n + n0 + rn + 16u; coopStoreT(c21, &c[at], ns); }
    { let at = (m0 + rm + 32u) * p.n + n0 + rn + 32u; coopStoreT(c22, &c[at], ns); }
    { let at = (m0 + rm + 32u) * p.n + n0 + rn + 48u; coopStoreT(c23, &c[at], ns); }
    { let at = (m0 + rm + 48u) * p.n + n0 + rn + 0u; coopStoreT(c30, &c[at], ns); }
    { let at = (m0 + rm + 48u) * p.n + n0 + rn + 16u; coopStoreT(c31, &c[at], ns); }
    { let at = (m0 + rm + 48u) * p.n + n0 + rn + 32u; coopStoreT(c32, &c[at], ns); }
    { let at = (m0 + rm + 48u) * p.n + n0 + rn + 48u; coopStoreT(c33, &c[at], ns); }
}
