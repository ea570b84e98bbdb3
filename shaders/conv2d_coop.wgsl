// `gemm` on tensor cores: the same tiles, gathers, K split and stores as conv2d.wgsl (this
// file is appended to it, after `enable f16; enable wgpu_cooperative_matrix;`), with the
// product done by 16x16x16 cooperative matrices: f16 operands, f32 accumulation.
//
// Each K step's quads are fetched by the gathers of conv2d.wgsl as stored: f32 ones are
// rounded to f16 on their way into workgroup memory (a value past f16's range becomes
// infinite: the mixed precision policy's loss scaling keeps gradients inside it), f16 ones
// go in as they are (src/kernels/mod.rs says which are staged as f16). Each quad is stored along the
// direction it was gathered, so that its four halves are neighbours rather than a tile row
// apart: A gathered along m (A_COLS, IM2COL_T) is column-major (element (m, k) at k * AS + m),
// A gathered along k (the others) row-major ((m, k) at m * AKS + k); B gathered along n
// (B_ROWS) is row-major ((k, n) at k * BS + n), B gathered along k (B_BLOCKED_T)
// column-major ((k, n) at n * BKS + k). coopLoad reads the column-major tiles and coopLoadT
// the row-major ones, each 16x16 block with the tile's row as its stride. Every row is padded
// by 8 halves (16 bytes) so that a block's rows start in different banks.
//
// Subgroup s (the host runs this only where subgroups have 32 invocations, so a tile of
// THREADS invocations has THREADS / 32 of them, one per SG_M x SG_N region) owns rows
// (s / (BN / SG_N)) * SG_M and columns (s % (BN / SG_N)) * SG_N of the tile: 2 x 2
// accumulators, 4 x 2 in the wide tile (128 x 128 on 256 invocations, SG_M 64), or 4 x 4 in
// the widest (128 x 256, SG_M and SG_N 64), where each operand loaded from workgroup memory
// feeds four products. The widest tile's two buffers would not fit in 48 KB: it runs one
// (BUFS 1), with a barrier before each step's quads overwrite it.
// At the end the accumulators go through workgroup memory, one 16x16 block of each subgroup
// at a time (each subgroup through its own block, ordered by subgroup barriers), so that
// every invocation stores quads with conv2d.wgsl's `store` (bias, phase rows, partial
// splits, edges).

// Floats of unused workgroup memory after c_stage: see CoopTile::stage_pad in
// src/kernels/gemm.rs (declared up here, with the other overrides an array's size reads).
override STAGE_PAD: u32 = 0u;
// PERSIST: a grid smaller than the product's tiles, whose workgroups walk the tiles a grid
// apart, each fetching its next tile's first K step into registers before this tile's
// epilogue so that those loads are in flight while it stores (the host sets it where
// GemmOptions::persist asks, on a plain product only: one product, no groups, no K split, no
// phase rows; see PERSIST_WORKGROUPS in src/kernels/gemm.rs).
override PERSIST: bool = false;
// Rows and columns of the tile one subgroup owns: 32 or 64 each (2 or 4 accumulators).
override SG_M: u32 = 32u;
override SG_N: u32 = 32u;
// Buffers of each operand's tile: 2 (the next K step is stored while this one multiplies)
// or 1.
override BUFS: u32 = 2u;
override AS: u32 = BM + 8u;
override BS: u32 = BN + 8u;
override AKS: u32 = BK + 8u;
override BKS: u32 = BK + 8u;
// Halves of one of the two buffers of each tile, in either layout.
override A16: u32 = max(BK * AS, BM * AKS);
override B16: u32 = max(BK * BS, BN * BKS);
// The tiles hold quads (vec4<f16>): a staged quad goes in with one 8-byte store, and the
// cooperative loads count their offsets and strides in quads (every block starts, and every
// row is padded, at a multiple of 8 halves).
var<workgroup> a16: array<vec4<f16>, BUFS * A16 / 4u>;
var<workgroup> b16: array<vec4<f16>, BUFS * B16 / 4u>;
var<workgroup> c_stage: array<f32, THREADS * 8u + STAGE_PAD>;

// A staged quad as the tile holds it: as staged (act_h16.wgsl), or widened from its two words
// (act_f16.wgsl) or its f32 values and rounded.
fn a_half4(v: a_stage) -> vec4<f16> {
    if (A_STAGED_F16) {
        return vec4<f16>(v);
    }
    return vec4<f16>(raw_value(v));
}

// `store_a` of conv2d.wgsl into the f16 tile; `base` counts elements.
fn store_a16(lid: u32, base: u32) {
    for (var s = 0u; s < A_SLOTS; s++) {
        let l = lid + s * THREADS;
        var at: u32;
        if (a_is_m_contiguous()) {
            at = base + (l / (BM / 4u)) * AS + (l % (BM / 4u)) * 4u;
        } else {
            at = base + (l / (BK / 4u)) * AKS + (l % (BK / 4u)) * 4u;
        }
        a16[at / 4u] = a_half4(a_reg[s]);
    }
}

// B is f32 (rounded here) or read as f16 (b_h16.wgsl): src/kernels/mod.rs never builds this
// kernel with b_f16.wgsl, whose staged words this conversion would misread.
fn store_b16(lid: u32, base: u32) {
    for (var s = 0u; s < B_SLOTS; s++) {
        let l = lid + s * THREADS;
        var at: u32;
        if (B_KIND == B_ROWS) {
            at = base + (l / (BN / 4u)) * BS + (l % (BN / 4u)) * 4u;
        } else {
            at = base + (l / (BK / 4u)) * BKS + (l % (BK / 4u)) * 4u;
        }
        b16[at / 4u] = vec4<f16>(b_reg[s]);
    }
}

// The join's two tensors (see JOIN in conv2d.wgsl) at the two quads a lane stores in one
// round of the epilogue below.
struct JoinQuads {
    d0: c_quad,
    d1: c_quad,
    y0: c_quad,
    y1: c_quad,
}

// The quads lane `lane` stores in round `round` of a subgroup's region at (row0, col0):
// block (round / (SG_N / 16), round % (SG_N / 16)), rows lane / 4 and 8 + lane / 4, four
// columns at (lane % 4) * 4, as the epilogue walks them. Quads outside C stay zero.
fn join_round(round: u32, row0: u32, col0: u32, lane: u32) -> JoinQuads {
    var out = JoinQuads();
    let across = SG_N / 16u;
    for (var j = 0u; j < 2u; j++) {
        let within = lane + j * 32u;
        let m = row0 + (round / across) * 16u + within / 4u;
        let n = col0 + (round % across) * 16u + (within % 4u) * 4u;
        if (m < p.m && n < p.n) {
            let q = c_index(m, n) / 4u;
            if (j == 0u) {
                out.d0 = join_d[q];
                out.y0 = join_y[q];
            } else {
                out.d1 = join_d[q];
                out.y1 = join_y[q];
            }
        }
    }
    return out;
}

@compute @workgroup_size(THREADS)
fn gemm_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32,
             @builtin(subgroup_invocation_id) lane: u32) {
    enter_product(wid);
    let tile = wid.x + wid.y * nwg.x;
    // tile_count() of the product, read from the uniform (see tile_count).
    let q = products[select(0u, wid.z, PHASE_TAPS)];
    let count = q.tiles_m * q.tiles_n * q.splits * select(1u, q.groups, GROUPED);
    if (tile >= count) {
        return; // uniform: the whole workgroup leaves
    }
    var o = origin(tile);
    // Nothing to sum (a phase of a strided input gradient that meets no tap: three of a 1x1
    // stride-2 downsample's four): zeros, plus any bias, straight to C, without the
    // operand tiles or the accumulators' rounds through workgroup memory. Tested on `q`, the
    // uniform: naga takes what comes through `p`, a private copy, as non-uniform.
    if (q.k == 0u) {
        if (GROUPED) {
            enter_group(o.group);
        }
        let zero_base = partial_base(o.split);
        for (var at = lid; at < BM * BN / 4u; at += THREADS) {
            let m = o.m0 + at / (BN / 4u);
            let n = o.n0 + (at % (BN / 4u)) * 4u;
            if (m < p.m && n < p.n) {
                store(zero_base, m, n, vec4<f32>(0.0));
            }
        }
        return;
    }
    let fast = conv_fast();
    let walk = select(count, nwg.x * nwg.y, PERSIST);
    fetch_first(o, lid);
    store_a16(lid, 0u);
    store_b16(lid, 0u);
    workgroupBarrier();

    let cols_sg = BN / SG_N;
    let rm = (sg / cols_sg) * SG_M;
    let rn = (sg % cols_sg) * SG_N;
    let tall = SG_M == 64u;
    let wide = SG_N == 64u;
    // One pass without PERSIST. Each pass starts with its first K step stored in buffer 0 and
    // `o` its tile's origin. The accumulators are declared in the pass, so none is live from
    // one pass into the next: declared before the loop and zeroed at each later pass, they
    // cost every product, walking or not (the H200 of benches/results/2026-12-03 call 14:
    // ResNet-50 2,937 -> 3,375 images/s with them here).
    for (var at_tile = tile; at_tile < count; at_tile += walk) {
        let m0 = o.m0;
        let n0 = o.n0;
        let split = o.split;
        let k_end = o.k_end;
        var c00 = coop_mat16x16<f32, C>();
        var c01 = coop_mat16x16<f32, C>();
        var c10 = coop_mat16x16<f32, C>();
        var c11 = coop_mat16x16<f32, C>();
        var c20 = coop_mat16x16<f32, C>();
        var c21 = coop_mat16x16<f32, C>();
        var c30 = coop_mat16x16<f32, C>();
        var c31 = coop_mat16x16<f32, C>();
        var c02 = coop_mat16x16<f32, C>();
        var c03 = coop_mat16x16<f32, C>();
        var c12 = coop_mat16x16<f32, C>();
        var c13 = coop_mat16x16<f32, C>();
        var c22 = coop_mat16x16<f32, C>();
        var c23 = coop_mat16x16<f32, C>();
        var c32 = coop_mat16x16<f32, C>();
        var c33 = coop_mat16x16<f32, C>();
        var buf = 0u;
        for (var k0 = o.k_begin; k0 < k_end; k0 += BK) {
            let more = k0 + BK < k_end;
            if (more) {
                if (fast) {
                    fetch_a_conv(k0 + BK, lid);
                } else {
                    fetch_a(m0, k0 + BK, lid);
                }
                fetch_b(n0, k0 + BK, lid);
            }
            for (var kk = 0u; kk < BK; kk += 16u) {
                // Indices bound to lets first: naga 30's SPIR-V writer fails on an index written
                // inside the load's pointer argument (../shared/gpu-facts.md).
                var a0: coop_mat16x16<f16, A>;
                var a1: coop_mat16x16<f16, A>;
                var a2: coop_mat16x16<f16, A>;
                var a3: coop_mat16x16<f16, A>;
                // The kinds spelt out, with a non-short-circuit `|`: naga's uniformity analysis
                // takes a function's result and a `||` (lowered to a branch) as non-uniform, and
                // cooperative loads need uniform control flow.
                if ((A_KIND == A_COLS) | (A_KIND == A_IM2COL_T)) {
                    let ia0 = (buf * A16 + kk * AS + rm) / 4u;
                    let ia1 = ia0 + 4u;
                    a0 = coopLoad<coop_mat16x16<f16, A>>(&a16[ia0], AS / 4u);
                    a1 = coopLoad<coop_mat16x16<f16, A>>(&a16[ia1], AS / 4u);
                    if (tall) {
                        let ia2 = ia0 + 8u;
                        let ia3 = ia0 + 12u;
                        a2 = coopLoad<coop_mat16x16<f16, A>>(&a16[ia2], AS / 4u);
                        a3 = coopLoad<coop_mat16x16<f16, A>>(&a16[ia3], AS / 4u);
                    }
                } else {
                    let ia0 = (buf * A16 + rm * AKS + kk) / 4u;
                    let ia1 = ia0 + 4u * AKS;
                    a0 = coopLoadT<coop_mat16x16<f16, A>>(&a16[ia0], AKS / 4u);
                    a1 = coopLoadT<coop_mat16x16<f16, A>>(&a16[ia1], AKS / 4u);
                    if (tall) {
                        let ia2 = ia0 + 8u * AKS;
                        let ia3 = ia0 + 12u * AKS;
                        a2 = coopLoadT<coop_mat16x16<f16, A>>(&a16[ia2], AKS / 4u);
                        a3 = coopLoadT<coop_mat16x16<f16, A>>(&a16[ia3], AKS / 4u);
                    }
                }
                var b0: coop_mat16x16<f16, B>;
                var b1: coop_mat16x16<f16, B>;
                var b2: coop_mat16x16<f16, B>;
                var b3: coop_mat16x16<f16, B>;
                if (B_KIND == B_ROWS) {
                    let ib0 = (buf * B16 + kk * BS + rn) / 4u;
                    let ib1 = ib0 + 4u;
                    b0 = coopLoadT<coop_mat16x16<f16, B>>(&b16[ib0], BS / 4u);
                    b1 = coopLoadT<coop_mat16x16<f16, B>>(&b16[ib1], BS / 4u);
                    if (wide) {
                        let ib2 = ib0 + 8u;
                        let ib3 = ib0 + 12u;
                        b2 = coopLoadT<coop_mat16x16<f16, B>>(&b16[ib2], BS / 4u);
                        b3 = coopLoadT<coop_mat16x16<f16, B>>(&b16[ib3], BS / 4u);
                    }
                } else {
                    let ib0 = (buf * B16 + rn * BKS + kk) / 4u;
                    let ib1 = ib0 + 4u * BKS;
                    b0 = coopLoad<coop_mat16x16<f16, B>>(&b16[ib0], BKS / 4u);
                    b1 = coopLoad<coop_mat16x16<f16, B>>(&b16[ib1], BKS / 4u);
                    if (wide) {
                        let ib2 = ib0 + 8u * BKS;
                        let ib3 = ib0 + 12u * BKS;
                        b2 = coopLoad<coop_mat16x16<f16, B>>(&b16[ib2], BKS / 4u);
                        b3 = coopLoad<coop_mat16x16<f16, B>>(&b16[ib3], BKS / 4u);
                    }
                }
                c00 = coopMultiplyAdd(a0, b0, c00);
                c01 = coopMultiplyAdd(a0, b1, c01);
                c10 = coopMultiplyAdd(a1, b0, c10);
                c11 = coopMultiplyAdd(a1, b1, c11);
                if (tall) {
                    c20 = coopMultiplyAdd(a2, b0, c20);
                    c21 = coopMultiplyAdd(a2, b1, c21);
                    c30 = coopMultiplyAdd(a3, b0, c30);
                    c31 = coopMultiplyAdd(a3, b1, c31);
                }
                if (wide) {
                    c02 = coopMultiplyAdd(a0, b2, c02);
                    c03 = coopMultiplyAdd(a0, b3, c03);
                    c12 = coopMultiplyAdd(a1, b2, c12);
                    c13 = coopMultiplyAdd(a1, b3, c13);
                }
                if (tall & wide) {
                    c22 = coopMultiplyAdd(a2, b2, c22);
                    c23 = coopMultiplyAdd(a2, b3, c23);
                    c32 = coopMultiplyAdd(a3, b2, c32);
                    c33 = coopMultiplyAdd(a3, b3, c33);
                }
            }
            // One buffer: every subgroup has read it before the next step's quads go in.
            if (BUFS == 1u) {
                workgroupBarrier();
            }
            let next = select(0u, 1u - buf, BUFS == 2u);
            if (more) {
                store_a16(lid, next * A16);
                store_b16(lid, next * B16);
            }
            workgroupBarrier();
            buf = next;
        }

        // One round per accumulator (SG_M / 16 x SG_N / 16 of them): each subgroup puts its
        // 16x16 block row-major at c_stage[sg * 256] and its own 32 invocations take it out, two
        // quads each, through `store`. No other subgroup touches that block, so a subgroup
        // barrier orders its writes and reads: subgroups leave their rounds at their own pace,
        // where workgroup barriers held every round to the slowest (two a round). naga writes
        // subgroupBarrier as OpControlBarrier at subgroup scope with SubgroupMemory semantics,
        // not WorkgroupMemory: the order of these workgroup-memory accesses rests on the
        // barrier's execution sync, which NVIDIA's warp sync gives (PTX bar.warp.sync orders
        // memory among the threads it syncs); the GPU kernel tests check every tile through it.
        // The next tile's first K step, in flight while this one stores: the K loop's last
        // barrier has every subgroup done with the operand buffers, and its registers are free.
        // Behind PERSIST, a constant, so that a product which does not walk compiles without
        // the fetch and the closing barrier (call 15: ResNet-50 3,375 -> 3,580 images/s).
        let ahead = at_tile + walk;
        if (PERSIST & (ahead < count)) {
            o = origin(ahead);
            fetch_first(o, lid);
        }
        let base = partial_base(split);
        let stage = sg * 256u;
        let across = SG_N / 16u;
        let rounds = (SG_M / 16u) * across;
        // JOIN (an unsplit product: base 0): the join's quads of the next round are loaded while
        // this one stores, where loading them in `store` left each round waiting on memory.
        var join_next = JoinQuads();
        if (JOIN) {
            join_next = join_round(0u, m0 + rm, n0 + rn, lane);
        }
        for (var round = 0u; round < rounds; round++) {
            let bi = round / across;
            let bj = round % across;
            let join_now = join_next;
            if (JOIN && round + 1u < rounds) {
                join_next = join_round(round + 1u, m0 + rm, n0 + rn, lane);
            }
            switch bi * 4u + bj {
                case 0u: { coopStoreT(c00, &c_stage[stage], 16u); }
                case 1u: { coopStoreT(c01, &c_stage[stage], 16u); }
                case 2u: { coopStoreT(c02, &c_stage[stage], 16u); }
                case 3u: { coopStoreT(c03, &c_stage[stage], 16u); }
                case 4u: { coopStoreT(c10, &c_stage[stage], 16u); }
                case 5u: { coopStoreT(c11, &c_stage[stage], 16u); }
                case 6u: { coopStoreT(c12, &c_stage[stage], 16u); }
                case 7u: { coopStoreT(c13, &c_stage[stage], 16u); }
                case 8u: { coopStoreT(c20, &c_stage[stage], 16u); }
                case 9u: { coopStoreT(c21, &c_stage[stage], 16u); }
                case 10u: { coopStoreT(c22, &c_stage[stage], 16u); }
                case 11u: { coopStoreT(c23, &c_stage[stage], 16u); }
                case 12u: { coopStoreT(c30, &c_stage[stage], 16u); }
                case 13u: { coopStoreT(c31, &c_stage[stage], 16u); }
                case 14u: { coopStoreT(c32, &c_stage[stage], 16u); }
                default: { coopStoreT(c33, &c_stage[stage], 16u); }
            }
            subgroupBarrier();
            for (var j = 0u; j < 2u; j++) {
                let within = lane + j * 32u;
                let m = m0 + rm + bi * 16u + within / 4u;
                let n = n0 + rn + bj * 16u + (within % 4u) * 4u;
                if (m < p.m && n < p.n) {
                    let at = stage + within * 4u;
                    let v = vec4<f32>(c_stage[at], c_stage[at + 1u], c_stage[at + 2u], c_stage[at + 3u]);
                    if (JOIN) {
                        let q = c_index(m, n) / 4u;
                        let d = select(join_now.d1, join_now.d0, j == 0u);
                        let y = select(join_now.y1, join_now.y0, j == 0u);
                        c_put4(q, join4(v, d, y));
                    } else {
                        store(base, m, n, v);
                    }
                }
            }
            subgroupBarrier();
        }
        // The next tile's first K step in buffer 0 before any subgroup reads it there.
        if (PERSIST) {
            if (ahead < count) {
                store_a16(lid, 0u);
                store_b16(lid, 0u);
            }
            workgroupBarrier();
        }
    }
}
