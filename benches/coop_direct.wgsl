enable f16;
enable wgpu_cooperative_matrix;

// Probes of what WGSL cooperative matrices give on this chip, for benches/gemm.rs: a plain
// row-major f16 product C = A B (f32 accumulation), every size a multiple of the tile.

struct Params { m: u32, n: u32, k: u32, _pad: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(2) var<storage, read> b: array<f16>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// One subgroup a workgroup, a 64 x 64 block of C in 4 x 4 accumulators, its operands loaded
// straight from memory (through the caches): no workgroup memory, no barrier.
@compute @workgroup_size(32)
fn direct(@builtin(workgroup_id) wid: vec3<u32>) {
    let m0 = wid.y * 64u;
    let n0 = wid.x * 64u;
    // Strides bound to lets: naga 30's SPIR-V writer fails on a uniform's field written
    // inside a cooperative load or store.
    let ks = p.k;
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
    for (var k = 0u; k < p.k; k += 16u) {
        let ia0 = (m0 + 0u) * p.k + k;
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia0], ks);
        let ia1 = (m0 + 16u) * p.k + k;
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia1], ks);
        let ia2 = (m0 + 32u) * p.k + k;
        let a2 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia2], ks);
        let ia3 = (m0 + 48u) * p.k + k;
        let a3 = coopLoadT<coop_mat16x16<f16, A>>(&a[ia3], ks);
        let ib0 = k * p.n + n0 + 0u;
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib0], ns);
        let ib1 = k * p.n + n0 + 16u;
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib1], ns);
        let ib2 = k * p.n + n0 + 32u;
        let b2 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib2], ns);
        let ib3 = k * p.n + n0 + 48u;
        let b3 = coopLoadT<coop_mat16x16<f16, B>>(&b[ib3], ns);
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
    { let at = (m0 + 0u) * p.n + n0 + 0u; coopStoreT(c00, &c[at], ns); }
    { let at = (m0 + 0u) * p.n + n0 + 16u; coopStoreT(c01, &c[at], ns); }
    { let at = (m0 + 0u) * p.n + n0 + 32u; coopStoreT(c02, &c[at], ns); }
    { let at = (m0 + 0u) * p.n + n0 + 48u; coopStoreT(c03, &c[at], ns); }
    { let at = (m0 + 16u) * p.n + n0 + 0u; coopStoreT(c10, &c[at], ns); }
    { let at = (m0 + 16u) * p.n + n0 + 16u; coopStoreT(c11, &c[at], ns); }
    { let at = (m0 + 16u) * p.n + n0 + 32u; coopStoreT(c12, &c[at], ns); }
    { let at = (m0 + 16u) * p.n + n0 + 48u; coopStoreT(c13, &c[at], ns); }
    { let at = (m0 + 32u) * p.n + n0 + 0u; coopStoreT(c20, &c[at], ns); }
    { let at = (m0 + 32u) * p.n + n0 + 16u; coopStoreT(c21, &c[at], ns); }
    { let at = (m0 + 32u) * p.n + n0 + 32u; coopStoreT(c22, &c[at], ns); }
    { let at = (m0 + 32u) * p.n + n0 + 48u; coopStoreT(c23, &c[at], ns); }
    { let at = (m0 + 48u) * p.n + n0 + 0u; coopStoreT(c30, &c[at], ns); }
    { let at = (m0 + 48u) * p.n + n0 + 16u; coopStoreT(c31, &c[at], ns); }
    { let at = (m0 + 48u) * p.n + n0 + 32u; coopStoreT(c32, &c[at], ns); }
    { let at = (m0 + 48u) * p.n + n0 + 48u; coopStoreT(c33, &c[at], ns); }
}
