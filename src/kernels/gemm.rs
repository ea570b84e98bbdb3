//! The implicit-GEMM engine behind `conv2d` and `dense` (`shaders/conv2d.wgsl`).
//!
//! Every product is `C[M, N] = sum_k A[m, k] * B[k, n]`; the callers only say how A and B
//! are gathered (`ALoad`, `BLoad`) and the engine picks a [`Tile`], splits K across
//! workgroups when the output is too small to fill the GPU, and checks which operands can
//! be read as aligned vec4s.

use bytemuck::{Pod, Zeroable};

use super::conv2d::Conv2dGeometry;
use super::{grid, u32_of, Dispatch, Shader, CONV2D_ALL, CONV2D_COOP_ALL, CONV2D_COOP_HALVES, WG, WG_CONST};
use super::batchnorm::Partials;
use crate::{bail, DType, Device, Error, Result, Tensor};

/// An output tile: `bm x bn` outputs per workgroup, K staged `bk` at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    /// 256 invocations, 8x4 each: the big layers (many output pixels and >= 64 filters).
    M128N64,
    /// 128 invocations, 8x4 each: many pixels, 32 filters.
    M128N32,
    /// 256 invocations, 4x4 each.
    M64N64,
    /// 64 invocations, 4x4 each: small outputs that would leave most of the GPU idle.
    M32N32,
    /// 64 invocations, 4x4 each: narrow outputs (16 filters, a classifier's 10 classes).
    M64N16,
}

/// Rows of M from which the tensor-core kernel takes its tall tile for outputs of 33-64
/// columns: below, a 256-row tile would leave too much of its last row of tiles idle.
const COOP_TALL_MIN_M: usize = 2048;

/// Rows of M from which the tensor-core kernel takes its 256 x 128 tile for outputs of 65-128
/// columns (the 128-channel weight gradient's 1,152 rows gained from it).
const COOP_WIDE_TALL_MIN_M: usize = 1024;

/// Workgroups a plain tensor-core product of more tiles walks them on where
/// [`GemmOptions::persist`] asks (`PERSIST` in shaders/conv2d_coop.wgsl): about four per
/// compute unit of a large GPU (an H200's 132), where each one's next first K step is
/// fetched while it stores a tile. 264, 528 and 1,056 workgroups were alike (results
/// 2026-12-03, calls 11 and 16).
const PERSIST_WORKGROUPS: usize = 528;

/// Rows (all phases together) up to which a strided input gradient's phase products run on
/// 128 x 64 whatever their columns (see [`CoopTile::choose`]): resnet18_cifar's 256 -> 512
/// at batch 256 (16,384), not resnet18 @224's (50,176).
const PHASES_NARROW_MAX_M: usize = 32_768;

/// A tensor-core tile (`shaders/conv2d_coop.wgsl`): its rows and columns, the region each
/// 32-invocation subgroup owns (32 or 64 each way: 2 or 4 accumulators), the buffers of each
/// operand it stages (two, or one where two would not fit) and the K it stages a step. Its
/// invocations are 32 per region. Larger regions feed more products from each operand a
/// subgroup loads from workgroup memory, and larger tiles gather each operand for more
/// outputs. The engine picks one by the product's shape (`CoopTile::choose`, private);
/// [`GemmOptions::coop_tile`] forces one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopTile {
    /// Output rows of one workgroup.
    pub bm: usize,
    /// Output columns of one workgroup.
    pub bn: usize,
    /// Rows of one subgroup's region: 32 or 64.
    pub sg_m: usize,
    /// Columns of one subgroup's region: 32 or 64.
    pub sg_n: usize,
    /// Buffers of each operand's K step in workgroup memory: 1 or 2.
    pub bufs: usize,
    /// K staged a step: 16 or 32.
    pub bk: usize,
}

impl CoopTile {
    /// 128 x 128 at 64 x 32 a subgroup, one buffer, K 16: most of the ResNets' products.
    const SQUARE16: CoopTile = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 32, bufs: 1, bk: 16 };

    /// Floats of unused workgroup memory after the accumulators' staging. Only SQUARE16 has
    /// them, 1,024, which take it from 20 KB to 24 KB (two of its workgroups share a compute
    /// unit either way, by registers). Measured, not understood (H200, benches/results/
    /// 2026-11-28e): the weight gradient of resnet18_cifar's 3x3 128 ran 0.178 -> 0.157 ms at
    /// 24 KB (`cargo bench --bench gemm -- "3x3 128 weight grad" --side 32 --store f16`; its
    /// forward 0.146 -> 0.144), resnet18_cifar 26,108 / 26,178 -> 26,440 / 26,467 and resnet50
    /// 3,065 -> 3,073 images/s (alternating in one call). Workgroup memory is a step as sharp
    /// as registers and not monotonic: at 26 KB every product on this tile ran 1.5-2x slower,
    /// the 256 x 64 tile 1.5x slower at 24.4 KB than at its 23.4, and the 64 x 64 one 1.5x
    /// slower both at 13 KB and at 8.5 KB (its operand buffers sized to their one layout)
    /// than at its 10; the 64 x 64-region tiles gained nothing from 8 KB more and lost 2-5%
    /// at 48 KB.
    fn stage_pad(self) -> usize {
        if self == CoopTile::SQUARE16 { 1024 } else { 0 }
    }

    /// The shape `tile` runs as its own: 32 x 32 a subgroup, two buffers, K 32 a step on
    /// M128N64 (two 16-deep products a barrier), 16 on M128N32.
    fn of(tile: Tile) -> CoopTile {
        let bk = if tile == Tile::M128N64 { 32 } else { tile.bk() };
        CoopTile { bm: tile.bm(), bn: tile.bn(), sg_m: 32, sg_n: 32, bufs: 2, bk }
    }

    /// Invocations of one workgroup: a subgroup of 32 per region.
    pub fn threads(self) -> usize {
        32 * (self.bm / self.sg_m.max(1)) * (self.bn / self.sg_n.max(1))
    }

    /// The shape M128N64 runs an `m x n` product gathered as `a` on, within `limit` bytes of
    /// workgroup memory; H100 figures for mixed_float16 at batch 256 (`cargo bench --bench
    /// gemm -- --coop ...`, benches/results/2026-11-26c and 2026-11-27b):
    /// - over 128 columns, 128 x 256 at 64 x 64 a subgroup, one buffer: the plain 4096^3
    ///   product 97 -> 121 TFLOP/s, resnet18 3,760 -> 4,059 images/s;
    /// - 65-128 columns on at least [`COOP_WIDE_TALL_MIN_M`] rows, 256 x 128 at 64 x 64, one
    ///   buffer: ResNet-18's 128-channel 3x3 products 0.605 / 0.615 / 1.320 -> 0.536 / 0.530
    ///   / 1.246 ms (forward, input and weight gradient), resnet18 4,443 -> 4,542 with the
    ///   next tile;
    /// - 65-128 columns on fewer rows, 128 x 128 at 64 x 32, two buffers (48 KB): resnet18
    ///   3,026 -> 3,764; one buffer staging K 16 (20 KB): 6,125 -> 6,220, resnet50 2,315 ->
    ///   2,326 (benches/results/2026-11-27f/call3, where K 16 on the wide tiles lost 1-5%);
    /// - a weight gradient into 33-64 columns, 64 x 64 at 32 x 32 on 128 invocations: the
    ///   64-channel 3x3 one 2.54 ms (on the f32 kernel, rounding) -> 2.24, the stem's 3.56 ->
    ///   3.44; 128 x 64 on 256 invocations took 2.67 and 4.61; staging K 16 a step rather
    ///   than 32: resnet18 mixed 5,600 -> 6,165 images/s, resnet50 2,245 -> 2,329
    ///   (benches/results/2026-11-27f/call2); and in one buffer (10 KB): 6,193 -> 6,490 and
    ///   2,318 -> 2,359 (call5);
    /// - 33-64 columns and at least [`COOP_TALL_MIN_M`] rows, 256 x 64 at 32 x 64, one buffer:
    ///   the 64-channel 3x3 forward 0.96 -> 0.77 ms, resnet18 4,059 -> 4,176; staged K 16
    ///   a step (half the operands' workgroup memory) rather than 32, and taken too for a
    ///   `k` of 128 or less over more columns (ResNet-50's 1x1 64 -> 256), unless a weight
    ///   gradient: resnet18 mixed 5,358 -> 5,548 images/s, resnet50 2,131 -> 2,203,
    ///   MobileNetV2 2,930 -> 3,005 (benches/results/2026-11-27e/call4);
    /// - weight gradients (A the activations transposed, 3x3 or 1x1) on 128 x 128 at 64 x 32,
    ///   one buffer, K 16, up to 1,024 columns, and on 64 x 64 where either side is 64 or
    ///   less (`cargo bench --bench gemm -- "weight grad" --store f16`, batch 256, ms): 3x3
    ///   128 channels 1.159 -> 0.569, 256 0.693 -> 0.573, 512 0.827 -> 0.586; 1x1 1024 -> 256
    ///   0.313 -> 0.243, 64 -> 256 0.996 -> 0.443, 256 -> 64 0.468 -> 0.379 (2026-11-27f/call11);
    ///   1x1 512 -> 2048 kept the widest tile (0.231, 0.264 on 128 x 128).
    /// - 3x3 weight gradients into 256 columns or more on the widest tile (A and B staged as
    ///   f16, `-- "weight grad" --store f16 --coop ...`, TFLOP/s): 3x3 256 channels 93.1 ->
    ///   118.7, 512 90.8 -> 100.7; the 1x1 ones (A = Cols) lose there (1024 -> 256 143 -> 102)
    ///   and 3x3 128 too (92.8 -> 65.1 on 128 columns) (2026-11-27h/call4). Staging K 32 a
    ///   step rather than 16 (H200, batch 128, `--warm 200`, ms): 3x3 256 0.252 -> 0.233, 512
    ///   0.290 -> 0.270, the stride-2 ones 256 -> 256 0.255 -> 0.231 and 512 -> 512 0.299 ->
    ///   0.276; resnet50 3,691 -> 3,714 images/s, resnet18 9,844 -> 9,976
    ///   (benches/results/2026-12-03/call20).
    ///
    /// - 1x1 forwards and input gradients (A = Rows) into 129-256 columns on 256 x 64, K 16,
    ///   into more columns on 128 x 128, K 16, unless K is 2,048 or more (`cargo bench --bench
    ///   gemm -- 1x1 --store f16`, ms): 1024 -> 256 forward 0.245 -> 0.201, its input gradient
    ///   0.297 -> 0.243, 512 -> 2048 forward 0.231 -> 0.203; the input gradient of 512 -> 2048
    ///   (K 2,048) 0.259 on every tile (benches/results/2026-11-27g/call1).
    /// - with the fetches' edge tests gone (`A_INSIDE`, `B_INSIDE`), 1x1 forwards and input
    ///   gradients (A = Rows) on [`COOP_TALL_MIN_M`] rows or more into a multiple of 128
    ///   columns: where K is 512 or more and above the columns, 128 x 128 at 64 x 64 on 128
    ///   invocations staging K 32; where K is below them, 128 x 128 at K 16 (`cargo bench
    ///   --bench gemm -- "1x1 " --batch 128 --store f16 --coop ...`, ms, the earlier choice /
    ///   this one): 1024 -> 256 forward 0.119 / 0.097 and its twin (N 256, K 1,024) 256 -> 1024
    ///   input gradient 0.127 / 0.103, 2048 -> 512 forward 0.117 / 0.096, 512 -> 128 forward
    ///   0.093 / 0.088; 64 -> 256 forward 0.201 / 0.183, 128 -> 512 forward 0.140 / 0.124
    ///   (benches/results/2026-11-28i/call2). Equal K and N (the 4096^3 product) keep the
    ///   widest tile.
    /// - forwards and input gradients into more than 64 columns, 4,096 rows or more and a K of
    ///   2,304 or less whose wide tile would make a grid of 256 workgroups or fewer (128 on 128
    ///   x 256), on 128 x 128 at K 16
    ///   (`cargo bench --bench gemm -- --side 32 --store f16 --coop ...`, ms, wide / 128 x
    ///   128): resnet18_cifar's 3x3 128 forward 0.156 / 0.146, 3x3 256 0.163 / 0.138, the
    ///   stride-2 forwards 64 -> 128 0.094 / 0.090, 128 -> 256 0.100 / 0.073, 256 -> 512 0.096
    ///   / 0.091, the phase products of 256 -> 512's input gradient 0.278 / 0.219. At 224 px
    ///   the 3x3 256 (392 workgroups) 0.388 / 0.402 and 3x3 512 (K 4,608) 0.402 / 0.485 keep
    ///   the wide tiles; taking 128 x 128 there cost resnet18 1.7% (benches/results/2026-11-28,
    ///   call2 and call3). On 128 x 256 grids of 129-256 workgroups (ResNet-50's 3x3 256 at
    ///   batch 128: 196) 128 x 128 cost resnet50 0.7% (call5: 2,754 -> 2,733 images/s), while
    ///   256 x 128 grids of 256 (resnet18_cifar's 3x3 128) gain 0.6% (23,515 -> 23,648).
    ///
    /// - the phase products of a strided input gradient (`phased`, `m` all their rows) into
    ///   64 columns or fewer, or on [`PHASES_NARROW_MAX_M`] rows or fewer, on 128 x 64 at 32
    ///   x 32, one buffer, K 16: their short K per phase leaves the larger tiles waiting on
    ///   each step's loads with few workgroups to cover them (`cargo bench --bench gemm --
    ///   3x3/2 --store f16 --coop ...`, ms, the earlier choice / 128 x 64 / 256 x 128 at K 32):
    ///   at side 32 (resnet18_cifar) 64 -> 128 0.186 / 0.152 / 0.240, 256 -> 512 0.157 /
    ///   0.123 / 0.166; at side 56 (resnet18 @224) 64 -> 128 0.562 / 0.466 / 0.712. Over more
    ///   rows 256 x 128 at K 32 takes up to 256 columns: 128 -> 256 at side 32 0.158 / 0.126 /
    ///   0.121 and at side 56 0.410 (128 x 64) / 0.342, 256 -> 512 at side 56 0.389 /
    ///   0.306-0.350 (benches/results/2026-11-28b/call2 and call3), unless K (the longest
    ///   phase's) is under 512, as a 1x1 downsample's: resnet18_cifar's 128 -> 256 one 0.039
    ///   ms on 128 x 64, 0.050 on 256 x 128, where its 3x3 took 0.143 / 0.130 (call4). A 1x1
    ///   downsample's phases (A = Rows, three of the four meeting no tap) into 65-256 columns
    ///   on more rows take 128 x 128 at K 16: ResNet-50's 256 -> 512 at batch 128 0.759 ms on
    ///   256 x 128, 0.542 in the sweep and 0.390 on the engine's own (benches/results/
    ///   2026-11-28i/call4 and call5; resnet50 3,381 / 3,377 -> 3,388 / 3,396 images/s).
    ///   That phase is launched alone (`launch_phases`), its `m` a quarter of the rows: into
    ///   more than 256 columns over a longer K (ResNet-50's 512 -> 1024 and 1024 -> 2048 at
    ///   batch 128, 25,088 and 6,272 rows) it runs as a plain 1x1 product, on 128 x 128 at 64
    ///   x 64, K 32, where the narrow tile took it (ms, narrow / 128 x 128 at K 32 / at K 16):
    ///   0.321 / 0.231 / 0.234 and 0.284 / 0.229 / 0.236 (benches/results/2026-12-03/call2).
    ///
    /// Tiles of 128 invocations with 64-row regions ran most other products 1.5-3x slower.
    fn choose(tile: Tile, a: ALoad, (m, n, k): (usize, usize, usize), phased: bool, limit: usize) -> CoopTile {
        let own = CoopTile::of(tile);
        if tile != Tile::M128N64 {
            return own;
        }
        let tall16 = CoopTile { bm: 256, bn: 64, sg_m: 32, sg_n: 64, bufs: 1, bk: 16 };
        let square16 = CoopTile::SQUARE16;
        let small16 = CoopTile { bm: 64, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 };
        let narrow16 = CoopTile { bm: 128, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 };
        let widest = CoopTile { bm: 128, bn: 256, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        let wide_tall = CoopTile { bm: 256, bn: 128, ..widest };
        let square32 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        let narrow_tall = CoopTile { bm: 128, bn: 64, sg_m: 64, sg_n: 32, bufs: 1, bk: 16 };
        // A 3x3 forward or flipped input gradient into 64 columns over many rows (K 576:
        // ResNet stage 1's): 128 x 64 on 128 invocations, 4 accumulators each, where the tall
        // tile's 256 x 64 had 256. H200 (benches/results/2026-12-03 call 22, alternating):
        // resnet50 3,695 -> 3,708 images/s, resnet18 @224 9,963 -> 10,106. The stem's
        // 7x7 gather (K 196) ran alike on either, and a 1x1 one (A = Rows) slower.
        let gather64 = a == ALoad::Im2col && !phased && n == 64 && k >= 512 && m >= COOP_TALL_MIN_M;
        // A 1x1 forward or input gradient over many rows into whole 128-column tiles.
        let whole_columns = a == ALoad::Rows && !phased && n.is_multiple_of(128) && m >= COOP_TALL_MIN_M;
        // A weight gradient (A the activations transposed, K the batch's pixels).
        let weight_grad = matches!(a, ALoad::Im2colT | ALoad::Cols);
        // A 1x1 forward or input gradient over more than 128 columns (A the activations as
        // stored): K 16 a step beat the wide tile's 32 unless K is long.
        let pointwise = matches!(a, ALoad::Rows) && n > 128;
        // A forward or input gradient of 4,096 rows or more whose wide tile (K 32 a step)
        // would leave a large GPU about one workgroup a compute unit (128 x 256 half that: 196
        // of them, ResNet-50's 3x3 256 at batch 128, ran faster there), on a K of 2,304 or
        // less: 128 x 128 at K 16 has twice the workgroups (a longer K keeps the wide tile's
        // fewer barriers; on fewer rows neither tile's time matters).
        let (wide, most) = if n > 128 { (widest, TARGET_WORKGROUPS / 2) } else { (wide_tall, TARGET_WORKGROUPS) };
        let few = m >= 4096 && m.div_ceil(wide.bm) * n.div_ceil(wide.bn) <= most && k <= 2304;
        // A 1x1 downsample's one tapped phase, a product of its own (`launch_phases`) over a
        // quarter of the rows, into more than 256 columns: as a plain 1x1 product over more
        // K than columns.
        let downsample_phase = phased && a == ALoad::Rows && n > 256 && n.is_multiple_of(128) && k > n;
        let candidates = [
            (downsample_phase, square32),
            (phased && (n <= 64 || m <= PHASES_NARROW_MAX_M || k < 512), narrow16),
            (phased && a == ALoad::Rows && n > 64 && n <= 256, square16),
            (phased && n <= 256, wide_tall),
            (gather64, narrow_tall),
            (weight_grad && (m <= 64 || n <= 64), small16),
            (a == ALoad::Im2colT && n >= 256, widest),
            (weight_grad && n <= 1024, square16),
            (whole_columns && k >= 512 && k > n, square32),
            (whole_columns && k < n, square16),
            (k <= 128 && n > 64 && m >= COOP_TALL_MIN_M && !weight_grad, tall16),
            (pointwise && n <= 256 && m >= COOP_TALL_MIN_M, tall16),
            (pointwise && k < 2048, square16),
            (n > 64 && !weight_grad && few, square16),
            (n > 128, widest),
            (n > 64 && m >= COOP_WIDE_TALL_MIN_M, wide_tall),
            (n > 64, square16),
            (m >= COOP_TALL_MIN_M, tall16),
        ];
        candidates.into_iter().find(|&(want, shape)| want && shape.bytes() <= limit).map_or(own, |(_, shape)| shape)
    }

    /// Workgroup memory: the f16 operand tiles with 8 halves of padding a row (stored either
    /// way round), plus the accumulators' 8 floats an invocation on their way out and any
    /// [`CoopTile::stage_pad`].
    fn bytes(self) -> usize {
        let bk = self.bk;
        let (a, b) = ((bk * (self.bm + 8)).max(self.bm * (bk + 8)), (bk * (self.bn + 8)).max(self.bn * (bk + 8)));
        self.bufs * (a + b) * 2 + (self.threads() * 8 + self.stage_pad()) * 4
    }

    /// A forced tile the kernel can run within `limit` bytes of workgroup memory, or an error
    /// naming what it breaks: the kernel's regions, slots and gathers need these.
    fn check(self, kernel: &str, limit: usize) -> Result<()> {
        let t = self;
        let threads = t.threads();
        let slots = |rows: usize| (rows * t.bk).is_multiple_of(4 * threads) && (1..=MAX_SLOTS).contains(&(rows * t.bk / (4 * threads)));
        let why = if ![32, 64].contains(&t.sg_m) || ![32, 64].contains(&t.sg_n) {
            "regions are 32 or 64 each way"
        } else if !t.bm.is_multiple_of(t.sg_m) || !t.bn.is_multiple_of(t.sg_n) || threads > 256 {
            "the tile must be whole regions, at most 8 of them"
        } else if ![1, 2].contains(&t.bufs) || ![16, 32].contains(&t.bk) {
            "buffers are 1 or 2 and the K step 16 or 32"
        } else if !slots(t.bm) || !slots(t.bn) || !threads.is_multiple_of(t.bm / 4) {
            "each invocation must gather 1-8 whole quads of each operand, on a fixed column of A"
        } else if t.bytes() > limit {
            "it needs more workgroup memory than the device has"
        } else {
            return Ok(());
        };
        bail!(Config, "{kernel}: tensor-core tile {t:?} ({threads} invocations, {} bytes, limit {limit}): {why}", t.bytes())
    }

    /// The pipeline constants that differ from `tile`'s own, and the path tokens: `coop`,
    /// the tile (`coop=256x64`) and its whole shape (`coop_tile=256x64/32x64/1/16`, as the gemm bench
    /// names it), and its invocations where they are not `tile`'s.
    fn constants(self, tile: Tile) -> (Vec<(&'static str, f64)>, String) {
        let own = CoopTile::of(tile);
        let mut constants = Vec::new();
        let mut token = "coop".to_string();
        let fields = [
            ("BM", self.bm, own.bm),
            ("BN", self.bn, own.bn),
            ("SG_M", self.sg_m, 32),
            ("SG_N", self.sg_n, 32),
            ("BUFS", self.bufs, 2),
            ("BK", self.bk, tile.bk()),
            ("THREADS", self.threads(), tile.threads()),
        ];
        for (name, value, default) in fields.into_iter().chain([("STAGE_PAD", self.stage_pad(), 0)]) {
            if value != default {
                constants.push((name, value as f64));
            }
        }
        token += &format!(" coop={}x{} coop_tile={}x{}/{}x{}/{}/{}", self.bm, self.bn, self.bm, self.bn, self.sg_m, self.sg_n, self.bufs, self.bk);
        if self.threads() != tile.threads() {
            token += &format!(" threads={}", self.threads());
        }
        (constants, token)
    }
}

/// Quads of each operand one invocation gathers a K step, at most (`MAX_SLOTS` in
/// `shaders/conv2d.wgsl`).
const MAX_SLOTS: usize = 8;

/// How much more of its rows a 64-row tile must use than a 128-row one to be chosen.
const ROWS_USED_MARGIN: f64 = 0.15;

/// Workgroups that fill a large GPU (~130 compute units, one or two groups each). A tuning
/// hook: the tile and split choices below are reasoned, not yet measured.
const TARGET_WORKGROUPS: usize = 256;

impl Tile {
    /// Every tile, for tests and tuning sweeps that must reach each one.
    pub const ALL: [Tile; 5] = [Tile::M128N64, Tile::M128N32, Tile::M64N64, Tile::M32N32, Tile::M64N16];

    /// (rows per invocation, invocations along M, invocations along N, K step)
    fn shape(self) -> (u32, u32, u32, u32) {
        match self {
            Tile::M128N64 => (8, 16, 16, 16),
            Tile::M128N32 => (8, 16, 8, 16),
            Tile::M64N64 => (4, 16, 16, 16),
            Tile::M32N32 => (4, 8, 8, 16),
            Tile::M64N16 => (4, 16, 4, 16),
        }
    }
    /// Output rows one workgroup computes.
    pub fn bm(self) -> usize {
        let (tm, wm, _, _) = self.shape();
        (tm * wm) as usize
    }
    /// Output columns one workgroup computes.
    pub fn bn(self) -> usize {
        (self.shape().2 * 4) as usize
    }
    /// Depth of the K slice loaded into shared memory per iteration.
    pub fn bk(self) -> usize {
        self.shape().3 as usize
    }
    /// Bytes of workgroup memory the tile takes in the f32 kernel: two buffers each of A's
    /// and B's K step. (The tensor-core kernel's tiles say their own: [`CoopTile`].)
    pub fn workgroup_bytes(self) -> usize {
        2 * self.bk() * (self.bm() + self.bn()) * 4
    }
    fn threads(self) -> usize {
        let (_, wm, wn, _) = self.shape();
        (wm * wn) as usize
    }
    fn tiles(self, m: usize, n: usize) -> usize {
        m.div_ceil(self.bm()) * n.div_ceil(self.bn())
    }

    /// The largest tile that, with K split where K is long, still gives the GPU enough
    /// workgroups; big tiles reuse each loaded value more. `workgroup_limit` is the device's
    /// `max_compute_workgroup_storage_size`: a tile that needs more is never chosen (WebGPU's
    /// default 16 KB leaves out the 128-row tiles, whose 20-24 KB wgpu would not refuse).
    pub fn choose(m: usize, n: usize, k: usize, workgroup_limit: usize) -> Tile {
        Tile::choose_grouped(m, n, k, 1, workgroup_limit)
    }

    /// [`Tile::choose`] for `groups` products of `m x n` on one grid.
    fn choose_grouped(m: usize, n: usize, k: usize, groups: usize, workgroup_limit: usize) -> Tile {
        let fits = |t: Tile| t.workgroup_bytes() <= workgroup_limit;
        if n <= 16 {
            return Tile::M64N16;
        }
        // A short M (the stem's weight gradient: 147 rows) wastes most of a second 128-row
        // tile; 64-row tiles waste less (H100, resnet18 stem: 4.2 -> 3.1 ms).
        let rows_used = |t: Tile| m as f64 / (m.div_ceil(t.bm()) * t.bm()) as f64;
        let big: &[Tile] = if n <= 32 {
            &[Tile::M128N32]
        } else if rows_used(Tile::M64N64) > rows_used(Tile::M128N64) + ROWS_USED_MARGIN {
            &[Tile::M64N64, Tile::M128N64]
        } else {
            &[Tile::M128N64, Tile::M64N64]
        };
        for &t in big.iter().filter(|&&t| fits(t)) {
            let tiles = t.tiles(m, n) * groups;
            if tiles * choose_splits(t.threads(), tiles, m * n * groups, k).0 >= TARGET_WORKGROUPS {
                return t;
            }
        }
        Tile::M32N32
    }

    fn constants(self, a: ALoad, b: BLoad) -> Vec<(&'static str, f64)> {
        let (tm, wm, wn, bk) = self.shape();
        vec![
            ("A_KIND", a.kind() as f64),
            ("B_KIND", b.kind() as f64),
            ("TM", tm as f64),
            ("WM", wm as f64),
            ("WN", wn as f64),
            ("BK", bk as f64),
        ]
    }
}

/// Overrides of the engine's own choices, for tuning and for tests that must reach every
/// tile and the split-K path on small shapes.
#[derive(Clone, Copy, Debug, Default)]
pub struct GemmOptions {
    /// The tile to use instead of the engine's choice.
    pub tile: Option<Tile>,
    /// Workgroups along K (1 = no split); rounded down so every split gets work.
    pub splits: Option<usize>,
    /// The `mixed_float16` product: f16 operands rounded from the f32 inputs, f32
    /// accumulation. On cooperative matrices where the device has them
    /// ([`Device::has_coop16`]) and the output is wider than 8 columns; elsewhere the f32
    /// kernel rounds its operands to f16 first, so the numbers are the same everywhere.
    pub mixed: bool,
    /// Winograd's F(m x m, 3 x 3) for a convolution's forward and input gradient (see
    /// [`super::winograd`]): `Some(0)` never, `Some(2)` or `Some(4)` that tile (an error for a
    /// convolution it cannot compute), `None` the engine's choice.
    pub winograd: Option<usize>,
    /// An input gradient reading the kernel flipped with its channels swapped, copied so
    /// beforehand (see [`super::conv2d::backward_data`]): at unit stride the forward
    /// convolution of dy by it, for a strided unpadded 1x1 kernel its one tapped phase's rows
    /// (on the tiled kernels; the CPU-shaped one keeps its gather). `Some(true)` always (an
    /// error for a convolution neither can compute), `Some(false)` never, `None` the
    /// engine's choice (mixed products on tensor cores).
    pub flip: Option<bool>,
    /// The tensor-core tile instead of the engine's choice, for mixed products on a device
    /// with cooperative matrices (outputs of 8 columns or fewer stay on the f32 kernel); an
    /// error elsewhere, or for a tile the kernel cannot run.
    pub coop_tile: Option<CoopTile>,
    /// How the tensor-core kernel stages an f16 A instead of the engine's choice (as f16
    /// beside an f16 B into 64 columns or more, but for 3x3 weight gradients on the 128 x 128
    /// tile; as two words elsewhere). Products that do
    /// not read an f16 A through tensor cores have nothing to stage and ignore it, so one
    /// setting can sweep a model's mixed products.
    pub a_stage: Option<AStage>,
    /// The kernel that computes the product instead of the device's own (see [`Engine`]), so
    /// tests reach both kernels on any adapter.
    pub engine: Option<Engine>,
    /// A plain tensor-core product (one product, no groups, no K split, no phase rows) of more
    /// tiles than `PERSIST_WORKGROUPS` walks them on that many workgroups, each fetching its
    /// next tile's first K step while it stores this one; other products ignore it. Not the
    /// engine's choice: on an H200 ResNet-50 mixed ran 2.7% faster with no product walking
    /// (results 2026-12-03 call 16, 3,545 -> 3,643 images/s), where single short-K products
    /// ran up to 7% faster walking (call 11).
    pub persist: bool,
}

/// How the tensor-core kernel carries an f16 A from memory into its workgroup tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AStage {
    /// Each quad as its two stored words, widened to f32 and rounded back to f16 on the way
    /// in (`shaders/lib/act_f16.wgsl`, [`super::CONV2D_COOP_ALL`]).
    Words,
    /// Each quad read and staged as a `vec4<f16>`, stored as it is (`shaders/lib/act_h16.wgsl`,
    /// [`super::CONV2D_COOP_HALVES`]).
    Halves,
}

impl AStage {
    /// The path token: `a_words` or `a_halves`.
    fn token(self) -> &'static str {
        match self {
            AStage::Words => "a_words",
            AStage::Halves => "a_halves",
        }
    }

    /// The staging of a product reading A (gathered as `a`) through tensor cores (`coop`) on
    /// `halves` and the tile `shape`: `forced`, else halves beside an f16 B into `n >= 64`
    /// columns, words elsewhere and for a 3x3 weight gradient on the 128 x 128 tile; `None`
    /// where A is not f16 on tensor cores. H100, `cargo bench --bench gemm -- --store f16
    /// --stage auto,words,halves` (benches/results/2026-11-28/call1, ms, words / halves):
    /// 3x3 weight gradients 64 channels 0.808 / 0.695 (64 x 64), 128 0.580 / 0.642 (128 x
    /// 128; 0.58 / 0.64 in 2026-11-27h too), 256 0.668 / 0.505 and 512 0.744 / 0.590 (128 x
    /// 256); 1x1 ones 1024 -> 256 0.224 / 0.188 (128 x 128), 64 -> 256 0.403 / 0.351.
    fn choose(coop: bool, halves: Halves, a: ALoad, shape: CoopTile, n: usize, forced: Option<AStage>) -> Option<AStage> {
        if !(coop && halves.a) {
            return None;
        }
        let square_3x3 = a == ALoad::Im2colT && (shape.bm, shape.bn) == (128, 128);
        Some(forced.unwrap_or(if halves.b && n >= 64 && !square_3x3 { AStage::Halves } else { AStage::Words }))
    }
}

/// Whether a tensor-core product gathered as `a` on `shape` advances its transposed im2col
/// rows by BK through a loop of row carries (`STEP_LOOP` in shaders/conv2d.wgsl) rather than
/// by a precomputed step with one carry each way. The step took the weight gradients on every
/// other tile 3-15% faster and the 128 x 128 one 20% slower, for no reason the source shows
/// (H100, `cargo bench --bench gemm -- "weight grad" --side 32 --store f16`, ms, loop / step:
/// 3x3 64 0.251 / 0.238 on 64 x 64, 512 0.240 / 0.203 on 128 x 256; 3x3 128 0.184 / 0.222
/// and 3x3/2 64 -> 128 0.125 / 0.145 on 128 x 128; benches/results/2026-11-28c/call3 and
/// call7).
fn step_loop(a: ALoad, shape: CoopTile) -> bool {
    a == ALoad::Im2colT && (shape.bm, shape.bn) == (128, 128)
}

/// Which kernel computes a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Workgroup tiles staged through workgroup memory ([`Tile`], `shaders/conv2d.wgsl`, and
    /// the tensor-core kernel where the device has one): what GPUs run.
    Tiled,
    /// An 8 x 8 block of C per invocation, from memory into registers, with no workgroup
    /// memory and no barrier (`shaders/gemm_cpu.wgsl`): what a software adapter runs, whose
    /// invocations are SIMD lanes of one CPU thread.
    Cpu,
}

impl Engine {
    /// Both engines, for tests that run each.
    pub const ALL: [Engine; 2] = [Engine::Tiled, Engine::Cpu];

    /// The engine for a product on `device` under `opts`: the forced one; else the tiled
    /// engine where a tile (or a tensor-core tile) is forced or the device is hardware, the
    /// CPU engine on a software adapter. A tile forced on the CPU engine is an error naming
    /// both.
    pub fn of(device: &Device, opts: &GemmOptions, kernel: &str) -> Result<Engine> {
        let forced = opts.tile.map(|t| format!("{t:?}")).or_else(|| opts.coop_tile.map(|t| format!("{t:?}")));
        match (opts.engine, forced) {
            (Some(Engine::Cpu), Some(tile)) => bail!(Config, "{kernel}: tile {tile} is the tiled engine's; the CPU engine computes 8 x 8 blocks"),
            (Some(engine), _) => Ok(engine),
            (None, Some(_)) => Ok(Engine::Tiled),
            (None, None) => Ok(Engine::for_device(device)),
        }
    }

    /// The engine a device runs unless told otherwise: the CPU kernels on a software
    /// adapter, the tiled ones on hardware.
    pub fn for_device(device: &Device) -> Engine {
        if device.is_software() { Engine::Cpu } else { Engine::Tiled }
    }
}

/// How `A[m, k]` is gathered; values match `A_*` in the shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ALoad {
    /// `a[M, K]`.
    Rows,
    /// `a[K, M]`, i.e. Aᵀ is stored.
    Cols,
    /// im2col of x: m = (n, oh, ow), k = (i, j, c).
    Im2col,
    /// Transposed im2col of x: m = (i, j, c), k = (n, oh, ow).
    Im2colT,
    /// dy seen through the transposed convolution: m = (n, ih, iw), k = (i, j, f).
    DyStuffed,
}

impl ALoad {
    pub(super) fn kind(self) -> u32 {
        self as u32
    }
}

/// How `B[k, n]` is gathered; values match `B_*` in the shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BLoad {
    /// `b[K, N]` (in a phase product, a 1x1 kernel's one tap transposed: see
    /// `conv2d::backward_data`).
    Rows,
    /// `b[K / kb, N, kb]`: Bᵀ stored in blocks of `kb` k (kb = K for a plain transpose).
    BlockedT(usize),
}

impl BLoad {
    pub(super) fn kind(self) -> u32 {
        match self {
            BLoad::Rows => 0,
            BLoad::BlockedT(_) => 1,
        }
    }
}

/// One product for [`launch`].
pub(crate) struct Gemm<'a> {
    pub label: &'static str,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a_load: ALoad,
    pub b_load: BLoad,
    pub conv: Option<&'a Conv2dGeometry>,
    /// One phase of the input gradient at stride > 1 (see [`Phase`]).
    pub phase: Option<Phase>,
    /// A grouped convolution's products, one per group on one grid (see [`Groups`]); `m`,
    /// `n` and `k` are then one group's.
    pub groups: Option<Groups>,
    pub a: &'a Tensor,
    pub b: &'a Tensor,
    pub bias: Option<&'a Tensor>,
    pub c: &'a Tensor,
    /// Where the epilogue writes C's per-column statistics (`STATS` in
    /// shaders/conv2d.wgsl); set by [`launch_statistics`] alone.
    pub stats: Option<&'a Tensor>,
    /// A forward convolution's input normalized as it is gathered (`A_NORM` in
    /// shaders/conv2d.wgsl; see [`super::conv2d::InputNorm`]).
    pub a_norm: Option<super::conv2d::InputNorm<'a>>,
    /// A residual join finished in C's store (`JOIN` in shaders/conv2d.wgsl; see
    /// [`super::conv2d::Join`]).
    pub join: Option<super::conv2d::Join<'a>>,
    /// Useful floating-point operations, for the profile: `2 * m * n * k` for a plain
    /// product, the forward's count for each convolution pass (the stride > 1 input
    /// gradient's K holds taps that never meet an output, which are not useful work).
    pub flops: f64,
}

/// A phase product: the input gradient of a stride-s convolution restricted to the dx
/// pixels of one phase `(ih % s_h, iw % s_w)`, a unit-stride convolution of dy with the
/// phase's taps of the kernel, flipped. The [`Gemm`] carries the sub-convolution's
/// geometry; this says where its kernel blocks and output rows are in w and dx.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phase {
    /// The first tap the phase meets, and the full kernel's width.
    pub tap_i0: usize,
    pub tap_j0: usize,
    pub tap_kw: usize,
    /// The convolution's strides: taps and dx pixels of one phase are this far apart.
    pub step_h: usize,
    pub step_w: usize,
    /// dx's height and width, and the phase.
    pub dst_h: usize,
    pub dst_w: usize,
    pub dst_ph: usize,
    pub dst_pw: usize,
}

/// The products of a grouped convolution, `count` of them on one grid: product `j` reads
/// its operands and writes C from the `j`-th slice of each. Each operand is a row-major
/// matrix (or NHWC image) whose rows (pixels) are `ld` elements apart, of which the group's
/// slice starts `j * step` elements in: A's gathers index channel `ch` of pixel `p` as
/// `p * ld + j * step + ch`, B (`Rows`) reads `b[k * ld + j * step + n]`, B (`BlockedT`)
/// `b[(block * N + n) * ld + j * step + k % kb]`, and C is written at `m * ld + j * step + n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Groups {
    pub count: usize,
    /// `(ld, step)` of A, B and C.
    pub a: (usize, usize),
    pub b: (usize, usize),
    pub c: (usize, usize),
}

impl Groups {
    /// The groups of `geom`'s products with these `(ld, step)`s, or None for one group (the
    /// ungrouped pipelines stay as they were).
    pub fn of(geom: &Conv2dGeometry, a: (usize, usize), b: (usize, usize), c: (usize, usize)) -> Option<Groups> {
        (geom.groups > 1).then_some(Groups { count: geom.groups, a, b, c })
    }
    /// Whether every row and slice of an operand starts on a vec4.
    fn quads(ld_step: (usize, usize)) -> bool {
        ld_step.0.is_multiple_of(4) && ld_step.1.is_multiple_of(4)
    }
}

/// The uniform parameters of `shaders/conv2d.wgsl` (and the kernels appended to it).
#[repr(C)]
#[derive(Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct Params {
    m: u32,
    n: u32,
    k: u32,
    k_chunk: u32,
    tiles_m: u32,
    tiles_n: u32,
    splits: u32,
    flags: u32,
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
    kb: u32,
    tap_i0: u32,
    tap_j0: u32,
    tap_kw: u32,
    step_h: u32,
    step_w: u32,
    dst_h: u32,
    dst_w: u32,
    dst_ph: u32,
    dst_pw: u32,
    inf_bits: u32,
    groups: u32,
    a_ld: u32,
    a_step: u32,
    b_ld: u32,
    b_step: u32,
    c_ld: u32,
    c_step: u32,
    dil_h: u32,
    dil_w: u32,
}

impl Params {
    /// Workgroups along K.
    pub(super) fn splits(&self) -> usize {
        self.splits as usize
    }
}

const QUAD_A: u32 = 1;
const QUAD_B: u32 = 2;
const QUAD_C: u32 = 4;
const BIAS: u32 = 8;

/// Workspace above this many bytes is not worth the extra traffic of splitting K.
pub(super) const MAX_WORKSPACE: usize = 64 << 20;

/// Invocations that keep a large GPU busy (~130 compute units with about a thousand
/// resident invocations each): a weight gradient's small output splits K until it has them.
const TARGET_THREADS: usize = 128 * 1024;

/// K at or above which a product is a weight gradient over a batch of pixels.
const LONG_K: usize = 16 * 1024;

/// Workgroup waves a grid of full tiles should hold before its long K is left unsplit, and
/// the least K per split then.
const BALANCE_WAVES: usize = 4;
const BALANCE_K: usize = 2048;

/// K splits for a grid of `tiles` over `outputs` elements of C: enough workgroups to fill a large GPU, at least 512 k
/// per split so the partials stay few. A long K with a small output (a weight gradient)
/// splits further, down to 256 k, until the GPU holds `TARGET_THREADS` invocations: on
/// resnet20's first stage (M = 144, N = 16, K = 262,144) 86 splits of 64 invocations ran at
/// 2.3 TFLOP/s. Returns the count and the rule that chose it, for the path label.
fn choose_splits(threads: usize, tiles: usize, outputs: usize, k: usize) -> (usize, &'static str) {
    let by_space = (MAX_WORKSPACE / (4 * outputs).max(1)).max(1);
    // A grid of a few waves leaves the last partly idle: resnet18's last-stage weight
    // gradient (288 tiles of 256 invocations, K = 12,544) ran at 18-20 TFLOP/s, its
    // third-stage ones (72 tiles split 8 ways: 576 workgroups, 2.2 waves of two a compute
    // unit on an H100) at 28 where the second stage's 522 ran at 38. A long K splits until
    // the grid holds several waves, at least BALANCE_K k per split, small grids too.
    let balance = if k >= 2 * BALANCE_K && tiles < BALANCE_WAVES * TARGET_WORKGROUPS {
        (BALANCE_WAVES * TARGET_WORKGROUPS).div_ceil(tiles).min(k / BALANCE_K).min(by_space)
    } else {
        1
    };
    if tiles >= TARGET_WORKGROUPS {
        return if balance > 1 { (balance, "split=balance") } else { (1, "split=auto") };
    }
    let (want, per_split, rule) = if k >= LONG_K {
        (TARGET_WORKGROUPS.div_ceil(tiles).max(TARGET_THREADS.div_ceil(tiles * threads)), 256, "split=auto_long_k")
    } else {
        (TARGET_WORKGROUPS.div_ceil(tiles), 512, "split=auto")
    };
    let by_k = (k / per_split).max(1);
    let splits = want.min(by_k).min(by_space);
    if balance > splits {
        return (balance, "split=balance");
    }
    (splits, rule)
}

/// The path tokens of a GEMM's operand widths: each operand read (or written) as vec4s or
/// one float at a time.
fn quad_tokens(flags: u32) -> String {
    let token = |bit: u32, name: &str| format!("{}_{name}", if flags & bit != 0 { "quad" } else { "scalar" });
    format!("{} {} {}", token(QUAD_A, "a"), token(QUAD_B, "b"), token(QUAD_C, "c"))
}

/// A binding of `t` as `array<vec4<f32>>`: its size rounded up to whole vec4s. Pool
/// buffers come in multiples of 256 bytes and views start 256-aligned, so the rounded
/// range stays inside the buffer; the kernel never touches the padding.
pub(crate) fn quad_binding<'t>(kernel: &str, t: &'t Tensor) -> Result<wgpu::BufferBinding<'t>> {
    let size = t.bytes().div_ceil(16).max(1) * 16;
    if !t.offset().is_multiple_of(16) || t.offset() + size > t.buffer().size() {
        bail!(Shape, "{kernel}: tensor {:?} at byte {} of a {}-byte buffer cannot be bound as vec4s", t.shape(), t.offset(), t.buffer().size());
    }
    Ok(wgpu::BufferBinding { buffer: t.buffer(), offset: t.offset(), size: std::num::NonZeroU64::new(size) })
}

fn conv_params(p: &mut Params, g: &Conv2dGeometry, kernel: &str) -> Result<()> {
    let u = |what, v| u32_of(kernel, what, v);
    p.in_h = u("in_h", g.in_h)?;
    p.in_w = u("in_w", g.in_w)?;
    // One group's channels: what the gathers decompose k over.
    p.in_c = u("in_c", g.group_in_c())?;
    p.filters = u("filters", g.group_filters())?;
    p.out_h = u("out_h", g.out_h)?;
    p.out_w = u("out_w", g.out_w)?;
    p.kh = u("kh", g.kh)?;
    p.kw = u("kw", g.kw)?;
    p.stride_h = u("stride_h", g.stride_h)?;
    p.stride_w = u("stride_w", g.stride_w)?;
    p.pad_top = u("pad_top", g.pad_top)?;
    p.pad_left = u("pad_left", g.pad_left)?;
    Ok(())
}

/// Whether quads along A's contiguous direction are aligned vec4s that are wholly inside
/// or wholly outside A (and the padding).
fn a_quads(g: &Gemm) -> bool {
    let c = g.conv.map_or(0, |c| c.group_in_c());
    let own = match g.a_load {
        ALoad::Rows => g.k.is_multiple_of(4),
        ALoad::Cols => g.m.is_multiple_of(4),
        ALoad::Im2col | ALoad::Im2colT => c.is_multiple_of(4),
        ALoad::DyStuffed => g.conv.is_some_and(|c| c.group_filters() % 4 == 0),
    };
    own && g.groups.is_none_or(|gr| Groups::quads(gr.a))
}

fn b_quads(g: &Gemm) -> bool {
    let own = match g.b_load {
        BLoad::Rows => g.n.is_multiple_of(4),
        BLoad::BlockedT(kb) => kb % 4 == 0,
    };
    own && g.groups.is_none_or(|gr| Groups::quads(gr.b))
}

/// Whether a product on an f32-unit kernel rounds its operands to f16 as it loads them, and
/// its path token: a mixed product rounds (`round_f16`) unless both operands are stored as
/// f16 already (`as_stored`), since those are their own rounding: rounding them again cost
/// resnet20's 16-channel weight gradients (both operands f16, 16 columns) 0.31 -> 0.87 ms
/// each on the H100 once the rounding learned to keep NaN. A float32 product has no token.
pub(super) fn operand_rounding(g: &Gemm, opts: &GemmOptions) -> (bool, &'static str) {
    match (opts.mixed, g.a.dtype() == DType::F32 || g.b.dtype() == DType::F32) {
        (false, _) => (false, ""),
        (true, true) => (true, "round_f16"),
        (true, false) => (false, "as_stored"),
    }
}

pub(super) fn c_quads(g: &Gemm) -> bool {
    g.n.is_multiple_of(4) && g.groups.is_none_or(|gr| Groups::quads(gr.c))
}

/// Records `g` as one GEMM dispatch, plus a reduction when K is split. `c` is overwritten.
pub(crate) fn launch(device: &Device, g: &Gemm, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    Ok(launch_statistics(device, g, opts, false)?.0)
}

/// The tensor-core kernel's entry point, the one GEMM kernel whose epilogue writes no
/// statistics: written there (each 16x16 block's columns, two lanes a column, Chan-merged
/// round by round and then across the subgroups), they took ResNet-50's forward convolutions
/// on the H200 from 0.21 to 0.61 ms (1x1 64 -> 256) and 0.27 to 0.36 ms (3x3 64), the whole
/// step 41.8 -> 47.2 ms, for the ~0.8 ms of BatchNorm first passes they saved
/// (benches/results/2026-11-28f).
const COOP_ENTRY: &str = "gemm_coop";

/// Whether GEMM entry point `entry` declares the statistics' binding (`stats` in
/// shaders/conv2d.wgsl): every one but [`COOP_ENTRY`], whose pipelines' layouts, derived
/// from the shader, then have no binding 5 to fill.
fn declares_stats(entry: &str) -> bool {
    entry != COOP_ENTRY
}

/// [`launch`]; with `stats`, where the product runs unsplit, without groups or phases and on
/// an ALU kernel (not [`COOP_ENTRY`]), its epilogue also writes C's per-column statistics over each tile row of C (as stored),
/// the first pass of a training BatchNormalization reading C, returned for
/// [`super::batchnorm::forward_train_with`] (`None` where the product cannot).
pub(crate) fn launch_statistics(device: &Device, g: &Gemm, opts: &GemmOptions, stats: bool) -> Result<(Vec<Dispatch>, Option<Partials>)> {
    check_operands(g)?;
    if g.m == 0 || g.n == 0 {
        return Ok((Vec::new(), None));
    }
    let stats = stats && g.groups.is_none() && g.phase.is_none();
    if Engine::of(device, opts, g.label)? == Engine::Cpu {
        return super::gemm_cpu::launch(device, g, opts, stats);
    }
    let kernel = Kernel::choose(device, g, opts)?;
    let group_count = g.groups.map_or(1, |gr| gr.count);
    let (tiles_m, tiles_n) = kernel.tiles(g);
    let split = match opts.splits {
        Some(s) => (s, "split=forced"),
        None => choose_splits(kernel.threads, tiles_m * tiles_n * group_count, g.m * g.n * group_count, g.k),
    };
    let mut constants = kernel.constants.clone();
    let (p, mut tokens) = product_params(g, (tiles_m, tiles_n), kernel.bk, split, &mut constants)?;
    for (name, token) in inside(g, &kernel) {
        constants.push((name, 1.0));
        tokens.push_str(token);
    }
    let workgroups = tiles_m * tiles_n * p.splits() * group_count;
    let walks = opts.persist && kernel.entry == COOP_ENTRY && group_count == 1 && g.phase.is_none() && p.splits() == 1 && p.k > 0 && workgroups > PERSIST_WORKGROUPS;
    let path = format!("{} {tokens} {}", kernel.tile_token, kernel.shape_token);
    // A walking product runs on PERSIST_WORKGROUPS, each walking its tiles a grid apart.
    let (workgroups, path) = match walks {
        true => {
            constants.push(("PERSIST", 1.0));
            (PERSIST_WORKGROUPS, format!("{path} persist"))
        }
        false => (workgroups, path),
    };
    let stats = stats && p.splits() == 1 && declares_stats(kernel.entry);
    record_statistics(device, g, stats, (kernel.bm, tiles_m), (kernel.family, kernel.entry), constants, p, workgroups, path)
}

/// [`record`] of one product `p` whose epilogue, where `wanted`, also writes C's statistics:
/// one chunk per tile row of `rows` rows, `tiles_m` of them, into a tensor returned with the
/// dispatches (`STATS` among the constants, `stats` in the path). Both engines record so.
#[allow(clippy::too_many_arguments)]
pub(super) fn record_statistics(
    device: &Device,
    g: &Gemm,
    wanted: bool,
    (rows, tiles_m): (usize, usize),
    kernel: (&'static [Shader; 8], &'static str),
    mut constants: Vec<(&'static str, f64)>,
    p: Params,
    workgroups: usize,
    path: String,
) -> Result<(Vec<Dispatch>, Option<Partials>)> {
    let partials = match wanted {
        true => {
            constants.push(("STATS", 1.0));
            Some(Partials { tensor: device.alloc(&[2, tiles_m, g.n], DType::F32)?, chunk_rows: rows, chunks: tiles_m })
        }
        false => None,
    };
    let with_stats = Gemm { stats: partials.as_ref().map(|s| &s.tensor), ..*g };
    let path = if wanted { format!("{path} stats") } else { path };
    Ok((record(device, &with_stats, kernel, &constants, &[p], workgroups, path)?, partials))
}

/// The bindings of a product on `entry`: its `operands`, `target` as C (the product's C or
/// its split partials) and `stats` as the statistics' binding where the entry point
/// declares one ([`declares_stats`]: the tensor-core entry point has none).
fn product_bindings<'b>(entry: &str, operands: &[(u32, wgpu::BufferBinding<'b>)], target: wgpu::BufferBinding<'b>, stats: wgpu::BufferBinding<'b>) -> Vec<(u32, wgpu::BufferBinding<'b>)> {
    let mut bindings = operands.to_vec();
    bindings.push((4, target));
    if declares_stats(entry) {
        bindings.push((5, stats));
    }
    bindings
}

/// Products one dispatch holds at most: the phases of a stride-2 input gradient
/// (`products` in shaders/conv2d.wgsl).
pub(crate) const MAX_PRODUCTS: usize = 4;

/// Records the phase products of one strided input gradient ([`Phase`]), each overwriting
/// its pixels of their shared `c`: up to [`MAX_PRODUCTS`] of them in one dispatch, each a
/// z-layer of the grid on one tile, K unsplit. One after another, resnet18_cifar's four
/// phases of a 64 -> 128 input gradient (K of 1, 2, 2 and 4 taps, 256 workgroups each)
/// took 0.044-0.087 ms apiece on an H100, each short K a chain of waits that the others
/// now fill. Products whose pipeline constants differ (a phase meeting no tap, one whose
/// fetches stay inside its operands: see [`inside`]) take dispatches of their own. The CPU
/// engine, and a forced K split, take them one by one as [`launch`].
pub(crate) fn launch_phases(device: &Device, phases: &[Gemm], opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    let Some(first) = phases.first() else { return Ok(Vec::new()) };
    let label = first.label;
    for g in phases {
        check_operands(g)?;
        if g.phase.is_none() || g.n != first.n || !std::ptr::eq(g.c, first.c) || g.groups != first.groups {
            bail!(Config, "{label}: only the phases of one input gradient share a dispatch");
        }
    }
    if first.n == 0 || Engine::of(device, opts, label)? == Engine::Cpu || opts.splits.is_some() {
        return Ok(phases.iter().map(|g| launch(device, g, opts)).collect::<Result<Vec<_>>>()?.concat());
    }
    // The longest K first: its workgroups start first and the short ones fill in behind.
    let mut order: Vec<&Gemm> = phases.iter().filter(|g| g.m > 0).collect();
    if order.is_empty() {
        return Ok(Vec::new());
    }
    order.sort_by_key(|g| std::cmp::Reverse(g.k));
    // One phase alone meets taps (an unpadded 1x1 kernel's): a product of its own, with the
    // tile and K split its sizes take (on ResNet-50's 1024 -> 2048 downsample 0.24 ms on the
    // tile chosen for all four phases' rows, session 38), and the others share the zeros.
    if order.len() > 1 && order.iter().filter(|g| g.k > 0).count() == 1 {
        let zeros: Vec<Gemm> = order[1..].iter().map(|g| Gemm { ..**g }).collect();
        let mut dispatches = launch(device, order[0], opts)?;
        dispatches.extend(launch_phases(device, &zeros, opts)?);
        return Ok(dispatches);
    }
    // One tile for all, chosen for the whole grid and the longest K.
    let whole = Gemm { m: order.iter().map(|g| g.m).sum(), k: order[0].k, ..*first };
    let kernel = Kernel::choose(device, &whole, opts)?;
    let group_count = first.groups.map_or(1, |gr| gr.count);
    // Each product's parameters and pipeline constants; those whose constants agree share
    // dispatches (a phase meeting no tap, or one whose fetches stay inside its operands,
    // specialises differently from the rest).
    struct Planned<'p, 'a> {
        g: &'p Gemm<'a>,
        params: Params,
        tokens: String,
        constants: Vec<(&'static str, f64)>,
    }
    let mut planned = Vec::new();
    for g in order {
        let mut constants = kernel.constants.clone();
        let (params, mut tokens) = product_params(g, kernel.tiles(g), kernel.bk, (1, "split=none"), &mut constants)?;
        for (name, token) in inside(g, &kernel) {
            constants.push((name, 1.0));
            tokens.push_str(token);
        }
        planned.push(Planned { g, params, tokens, constants });
    }
    let mut dispatches = Vec::new();
    while !planned.is_empty() {
        let constants = planned[0].constants.clone();
        let (same, rest): (Vec<_>, Vec<_>) = planned.into_iter().partition(|q| q.constants == constants);
        planned = rest;
        for batch in same.chunks(MAX_PRODUCTS) {
            let workgroups = batch.iter().map(|q| kernel.tiles(q.g)).map(|(m, n)| m * n * group_count).max().unwrap_or(0);
            let tokens = &batch.iter().find(|q| q.g.k == 0).unwrap_or(&batch[0]).tokens;
            let products: Vec<Params> = batch.iter().map(|q| q.params).collect();
            let flops = batch.iter().map(|q| q.g.flops).sum();
            let path = format!("{} {tokens} phases={} {}", kernel.tile_token, batch.len(), kernel.shape_token);
            dispatches.extend(record(device, &Gemm { flops, ..*batch[0].g }, (kernel.family, kernel.entry), &constants, &products, workgroups, path)?);
        }
    }
    Ok(dispatches)
}

/// The operand checks every product passes before it is recorded: dtypes, overlaps, an f16
/// C's whole quads, a convolution load's geometry.
fn check_operands(g: &Gemm) -> Result<()> {
    let kernel = g.label;
    if g.conv.is_none() && matches!(g.a_load, ALoad::Im2col | ALoad::Im2colT | ALoad::DyStuffed) {
        bail!(Config, "{kernel}: a convolution load needs its geometry");
    }
    for (name, t) in [("a", g.a), ("b", g.b), ("c", g.c)].into_iter().chain(g.bias.map(|b| ("bias", b))) {
        // A, B and C may be activations or their gradients stored as f16 (mixed_float16);
        // the bias is f32.
        let f16_allowed = name != "bias";
        if t.dtype() != DType::F32 && !(f16_allowed && t.dtype() == DType::F16) {
            let expected = if f16_allowed { "F32 or F16" } else { "F32" };
            bail!(Shape, "{kernel}: {name} {:?} is {:?}, expected {expected}", t.shape(), t.dtype());
        }
        if name != "c" && g.c.overlaps(t) {
            bail!(Shape, "{kernel}: output {:?} overlaps input {name} {:?}", g.c.shape(), t.shape());
        }
    }
    // An f16 C is stored a whole quad at a time (two invocations would share a word): its
    // rows (or a phase product's pixels) must be whole quads, not a group's slice.
    if g.c.dtype() == DType::F16 && (!g.n.is_multiple_of(4) || g.groups.is_some()) {
        bail!(Shape, "{kernel}: an F16 output {:?} needs a multiple of 4 columns in whole rows, got {} columns{}", g.c.shape(), g.n, if g.groups.is_some() { ", grouped" } else { "" });
    }
    if g.groups.is_some() && g.bias.is_some() {
        bail!(Config, "{kernel}: a grouped product takes no bias (the convolution adds its own)");
    }
    if let Some(join) = g.join {
        join.check(kernel, g)?;
    }
    if let Some(norm) = g.a_norm {
        let channels = g.conv.map(|geom| geom.in_c);
        if g.a_load == ALoad::DyStuffed || g.groups.is_some() || g.phase.is_some() || channels.is_none() {
            bail!(Config, "{kernel}: only an ungrouped convolution's forward and weight gradient normalize its input as they gather it (A {:?})", g.a_load);
        }
        let want = [3, channels.unwrap_or(0)];
        if norm.params.shape() != want || norm.params.dtype() != DType::F32 {
            bail!(Shape, "{kernel}: the input's normalization {:?} {:?}, expected F32 {want:?} (mean, inv_std * gamma, beta)", norm.params.shape(), norm.params.dtype());
        }
    }
    Ok(())
}

/// The tiled engine's kernel for a product: tile, tensor-core shape, A's staging, module
/// family and entry, and the pipeline constants they fix.
struct Kernel {
    family: &'static [Shader; 8],
    entry: &'static str,
    constants: Vec<(&'static str, f64)>,
    /// C's rows and columns a workgroup computes, and its K step.
    bm: usize,
    bn: usize,
    bk: usize,
    threads: usize,
    /// `tile=...`, and the tensor-core shape's and staging's tokens.
    tile_token: String,
    shape_token: String,
}

impl Kernel {
    /// The kernel for `g` on a GPU engine (the caller has checked its operands).
    fn choose(device: &Device, g: &Gemm, opts: &GemmOptions) -> Result<Kernel> {
        let kernel = g.label;
        let group_count = g.groups.map_or(1, |gr| gr.count);
        let limit = device.limits().max_compute_workgroup_storage_size as usize;
        // The tensor-core kernel runs on M128N64's constants (M128N32's for 9-32 columns), its
        // own shape given by a `CoopTile`.
        let coop_base = if g.n > 32 || opts.coop_tile.is_some() { Tile::M128N64 } else { Tile::M128N32 };
        // Outputs of 8 columns or fewer stay on the f32 kernel, a tensor-core tile forced or not.
        // Narrower products gain from the tensor cores too, with up to half of M128N32's columns
        // idle: on the H100 (benches/results/2026-11-27f/call4) moving the weight gradients into
        // 17-32 columns there, then every product of 9-16 columns, took resnet20 mixed 32,040 ->
        // 33,060 -> 41,510 images/s and MobileNetV2 3,035 -> 3,623 -> 3,704.
        let tensor_cores = opts.mixed && device.has_coop16();
        let wide_enough = g.n > 8;
        let coop = tensor_cores && wide_enough && CoopTile::of(coop_base).bytes() <= limit;
        let tile = match opts.tile {
            Some(t) => t,
            None if coop => coop_base,
            None => Tile::choose_grouped(g.m, g.n, g.k, group_count, limit),
        };
        let coop = coop && matches!(tile, Tile::M128N64 | Tile::M128N32);
        let shape = match (coop, opts.coop_tile) {
            (true, Some(forced)) if tile == Tile::M128N64 => {
                forced.check(kernel, limit)?;
                forced
            }
            (false, Some(_)) if tensor_cores && !wide_enough && opts.tile.is_none() => CoopTile::of(tile),
            (_, Some(forced)) => bail!(Config, "{kernel}: tensor-core tile {forced:?} forced on a product that runs on {tile:?} without tensor cores (mixed: {}, cooperative matrices: {})", opts.mixed, device.has_coop16()),
            (true, None) => CoopTile::choose(tile, g.a_load, (g.m, g.n, g.k), g.phase.is_some(), limit),
            (false, None) => CoopTile::of(tile),
        };
        let bytes = if coop { shape.bytes() } else { tile.workgroup_bytes() };
        if bytes > limit {
            bail!(Config, "{kernel}: tile {tile:?} needs {bytes} bytes of workgroup memory, more than {}'s {limit}", device.name());
        }
        let stage = AStage::choose(coop, Halves::of(g), g.a_load, shape, g.n, opts.a_stage);
        let (family, entry): (&'static [Shader; 8], &'static str) = match stage {
            _ if !coop => (&CONV2D_ALL, "gemm"),
            Some(AStage::Halves) => (&CONV2D_COOP_HALVES, COOP_ENTRY),
            _ => (&CONV2D_COOP_ALL, COOP_ENTRY),
        };
        let stage_token = stage.map_or("", AStage::token);
        let (bk, threads) = if coop { (shape.bk, shape.threads()) } else { (tile.bk(), tile.threads()) };
        let mut constants = tile.constants(g.a_load, g.b_load);
        let (round, round_token) = if coop { (false, "") } else { operand_rounding(g, opts) };
        if round {
            constants.push(("ROUND_F16", 1.0));
        }
        let coop_token = if coop {
            let (shape_constants, token) = shape.constants(tile);
            constants.retain(|(name, _)| shape_constants.iter().all(|(other, _)| other != name));
            constants.extend(shape_constants);
            token
        } else {
            round_token.to_string()
        };
        let step_token = if coop && step_loop(g.a_load, shape) {
            constants.push(("STEP_LOOP", 1.0));
            " step=loop"
        } else {
            ""
        };
        let (bm, bn) = (shape.bm, shape.bn);
        Ok(Kernel { family, entry, constants, bm, bn, bk, threads, tile_token: format!("tile={tile:?}"), shape_token: format!("{coop_token} {stage_token}{step_token}") })
    }

    /// The grid of `g`'s tiles of C: (rows, columns).
    fn tiles(&self, g: &Gemm) -> (usize, usize) {
        (g.m.div_ceil(self.bm), g.n.div_ceil(self.bn))
    }
}

/// The operands whose every fetch `kernel`'s tiles of `g` keep inside them, as the pipeline
/// constants that drop the fetches' edge tests (`A_INSIDE`, `B_INSIDE` in
/// shaders/conv2d.wgsl) and their path tokens: row-major A whose rows and K fill whole tiles
/// and steps, and the rows of B in a forward-type product (A the image gather or row-major)
/// whose columns and K do; and `A_WHOLE`, an image gather whose rows and K fill whole tiles
/// and steps (it keeps the padding's tests). Phase products take them as any product
/// (their A and their rows of B are plain; their C alone is scattered): on ResNet-50
/// (H200, batch 128) 1% of the step, the 1x1 downsamples' input gradients 0.35-0.42 ms ->
/// 0.26-0.38 (session 38). Grouped ones keep the tests.
fn inside(g: &Gemm, kernel: &Kernel) -> Vec<(&'static str, &'static str)> {
    let plain = g.groups.is_none() && g.k.is_multiple_of(kernel.bk) && g.k > 0;
    // A's rows fill whole tiles, fetched as quads of its own values (not normalized).
    let a_fills = plain && a_quads(g) && g.a_norm.is_none() && g.m.is_multiple_of(kernel.bm);
    let a = a_fills && g.a_load == ALoad::Rows;
    let b = plain && g.b_load == BLoad::Rows && b_quads(g) && matches!(g.a_load, ALoad::Rows | ALoad::Im2col) && g.n.is_multiple_of(kernel.bn);
    let whole = a_fills && g.a_load == ALoad::Im2col;
    [(a, ("A_INSIDE", " inside_a")), (b, ("B_INSIDE", " inside_b")), (whole, ("A_WHOLE", " whole_a"))].into_iter().filter(|(on, _)| *on).map(|(_, c)| c).collect()
}

/// The parameters of `g` on a grid of `tiles` (rows, columns) of C whose K advances `k_step`
/// at a time, K split as `split` (count, rule) asks: sizes, the convolution's geometry,
/// groups, phases, and which operands are read as vec4s (flags, and the pipeline constants
/// the gathers specialise on, added to `constants`). Returns them with the path tokens they
/// decide (see [`Dispatch::path`]).
pub(super) fn product_params(
    g: &Gemm,
    tiles: (usize, usize),
    k_step: usize,
    split: (usize, &'static str),
    constants: &mut Vec<(&'static str, f64)>,
) -> Result<(Params, String)> {
    let kernel = g.label;
    let group_count = g.groups.map_or(1, |gr| gr.count);
    let k_steps = g.k.div_ceil(k_step).max(1);
    let want = split.0.clamp(1, k_steps);
    // Whole K steps per split; recount so no split is empty.
    let k_chunk = k_steps.div_ceil(want) * k_step;
    let splits = g.k.div_ceil(k_chunk).max(1);
    let split_token = if splits == 1 { "split=none".to_string() } else { format!("{} splits={splits}", split.1) };
    let b_token = match g.b_load {
        BLoad::Rows => "b=Rows",
        BLoad::BlockedT(_) => "b=BlockedT",
    };
    let mut p = Params {
        m: u32_of(kernel, "M", g.m)?,
        n: u32_of(kernel, "N", g.n)?,
        k: u32_of(kernel, "K", g.k)?,
        k_chunk: u32_of(kernel, "K per split", k_chunk)?,
        tiles_m: u32_of(kernel, "row tiles", tiles.0)?,
        tiles_n: u32_of(kernel, "column tiles", tiles.1)?,
        splits: splits as u32,
        inf_bits: f32::INFINITY.to_bits(),
        groups: 1,
        ..Params::default()
    };
    u32_of(kernel, "M * N * splits * groups", g.m * g.n * splits * group_count)?;
    let mut conv_token = "";
    if let Some(conv) = g.conv {
        conv_params(&mut p, conv, kernel)?;
        // One pipeline constant for every dilation: undilated products keep their pipelines
        // and the dilated ones share theirs.
        (p.dil_h, p.dil_w) = (u32_of(kernel, "dilation", conv.dilation_h)?, u32_of(kernel, "dilation", conv.dilation_w)?);
        if (conv.dilation_h, conv.dilation_w) != (1, 1) {
            constants.push(("DILATED", 1.0));
            conv_token = "dilated";
        }
    }
    if let Some(gr) = &g.groups {
        let u = |what, v| u32_of(kernel, what, v);
        p.groups = u("groups", gr.count)?;
        (p.a_ld, p.a_step, p.b_ld, p.b_step) = (u("A's row stride", gr.a.0)?, u("A's group step", gr.a.1)?, u("B's row stride", gr.b.0)?, u("B's group step", gr.b.1)?);
        (p.c_ld, p.c_step) = (u("C's row stride", gr.c.0)?, u("C's group step", gr.c.1)?);
        // The last group's last element of each operand must be indexable in u32.
        for (what, (ld, step), rows) in [("A", gr.a, g.m.max(g.k)), ("B", gr.b, g.k.max(g.n)), ("C", gr.c, g.m)] {
            u32_of(kernel, what, rows.saturating_mul(ld).saturating_add(gr.count.saturating_mul(step)))?;
        }
        constants.push(("GROUPED", 1.0));
    }
    if let BLoad::BlockedT(kb) = g.b_load {
        p.kb = u32_of(kernel, "kb", kb)?;
    }
    let (quad_a, quad_b) = (a_quads(g), b_quads(g));
    p.flags |= if quad_a { QUAD_A } else { 0 } | if quad_b { QUAD_B } else { 0 };
    constants.push(("A_QUADS", if quad_a { 1.0 } else { 0.0 }));
    constants.push(("B_QUADS", if quad_b { 1.0 } else { 0.0 }));
    let mut phase_token = String::new();
    if let Some(ph) = &g.phase {
        let u = |what, v| u32_of(kernel, what, v);
        (p.tap_i0, p.tap_j0, p.tap_kw) = (u("tap_i0", ph.tap_i0)?, u("tap_j0", ph.tap_j0)?, u("tap_kw", ph.tap_kw)?);
        (p.step_h, p.step_w) = (u("step_h", ph.step_h)?, u("step_w", ph.step_w)?);
        (p.dst_h, p.dst_w, p.dst_ph, p.dst_pw) = (u("dst_h", ph.dst_h)?, u("dst_w", ph.dst_w)?, u("dst_ph", ph.dst_ph)?, u("dst_pw", ph.dst_pw)?);
        constants.push(("PHASE_TAPS", 1.0));
        phase_token = if g.k == 0 { "phase taps=none".into() } else { "phase".into() };
    }
    p.flags |= if c_quads(g) { QUAD_C } else { 0 };
    let group_token = if g.groups.is_some() { "grouped" } else { "" };
    let tokens = format!("a={:?} {b_token} {split_token} {} {phase_token} {group_token} {conv_token}", g.a_load, quad_tokens(p.flags));
    Ok((p, tokens))
}

/// Which of A, B and C are stored as f16 (activations and their gradients under
/// `mixed_float16`).
#[derive(Clone, Copy)]
struct Halves {
    a: bool,
    b: bool,
    c: bool,
}

impl Halves {
    fn of(g: &Gemm) -> Halves {
        Halves { a: g.a.dtype() == DType::F16, b: g.b.dtype() == DType::F16, c: g.c.dtype() == DType::F16 }
    }
    /// The module of a GEMM family for this storage (see `gemm_family!` in
    /// src/kernels/mod.rs).
    fn variant(self, family: &'static [Shader; 8]) -> &'static Shader {
        &family[self.a as usize + 2 * self.c as usize + 4 * self.b as usize]
    }
    /// The path token: `store=` and the f16 operands (`store=a16b16c16`), or none for f32
    /// operands.
    fn token(self) -> String {
        let names: String = [(self.a, "a16"), (self.b, "b16"), (self.c, "c16")].iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
        if names.is_empty() { String::new() } else { format!("store={names}") }
    }
}

/// The dispatches of one product, or of up to [`MAX_PRODUCTS`] phase products of `g`'s C
/// unsplit (one z-layer of the grid each): `entry` of the `family`'s module for its storage
/// over `workgroups` (folded by [`grid`]), writing C itself, or, when the one product splits
/// K, its partials into a workspace that a second dispatch sums into C (adding the bias
/// there). `path` names the product's branches.
pub(super) fn record(
    device: &Device,
    g: &Gemm,
    (family, entry): (&'static [Shader; 8], &'static str),
    constants: &[(&'static str, f64)],
    products: &[Params],
    workgroups: usize,
    path: String,
) -> Result<Vec<Dispatch>> {
    let kernel = g.label;
    let mut p = products[0];
    let group_count = g.groups.map_or(1, |gr| gr.count);
    let mut constants = constants.to_vec();
    let bias = g.bias.unwrap_or(g.b); // bound but unread without the BIAS flag
    let flops = g.flops;
    let mut groups = grid(device, workgroups as u64)?;
    // One z-layer a product (see `launch_phases`).
    groups[2] = products.len() as u32;
    let bias_token = if g.bias.is_some() { "bias" } else { "" };
    if let Some(norm) = g.a_norm {
        constants.push(("A_NORM", 1.0));
        if norm.relu {
            constants.push(("A_NORM_RELU", 1.0));
        }
    }
    // A, B, the bias, the normalization (whose binding every GEMM entry point declares,
    // taking A where there is none) and the join's two tensors (A where there are none);
    // `product_bindings` adds the product's target.
    let (join_d, join_y) = g.join.map_or((g.a, g.a), |j| (j.d, j.y));
    let operands = [
        (1, quad_binding(kernel, g.a)?),
        (2, quad_binding(kernel, g.b)?),
        (3, quad_binding(kernel, bias)?),
        (6, quad_binding(kernel, g.a_norm.map_or(g.a, |n| n.params))?),
        (7, quad_binding(kernel, join_d)?),
        (8, quad_binding(kernel, join_y)?),
    ];
    let path = if g.a_norm.is_some() { format!("{path} a_norm") } else { path };
    // The join goes with whichever dispatch stores C: the product, or the sum of its splits.
    let join_constant = g.join.map(|_| ("JOIN", 1.0));
    let join_token = if g.join.is_some() { "join" } else { "" };
    let group_token = if g.groups.is_some() { "grouped" } else { "" };
    // Whichever dispatch writes c stores a phase product's rows at their dx pixels.
    let rows = g.phase.is_some();
    if products.len() > MAX_PRODUCTS || products.iter().any(|q| q.splits() > 1) && products.len() > 1 {
        bail!(Config, "{kernel}: {} products in one dispatch, at most {MAX_PRODUCTS} and none with K split", products.len());
    }
    if p.splits() == 1 {
        let bias_flag = if g.bias.is_some() { BIAS } else { 0 };
        let products: Vec<Params> = products.iter().map(|q| Params { flags: q.flags | bias_flag, ..*q }).collect();
        if rows {
            constants.push(("PHASE_ROWS", 1.0));
        }
        constants.extend(join_constant);
        // Without STATS the statistics' binding takes C again, unwritten.
        let bindings = product_bindings(entry, &operands, quad_binding(kernel, g.c)?, quad_binding(kernel, g.stats.unwrap_or(g.c))?);
        let halves = Halves::of(g);
        let gemm = with_uniform(device, halves.variant(family), entry, &constants, &products, &bindings, groups).named(kernel, flops);
        return Ok(vec![gemm.tagged(format!("{path} {bias_token} {join_token} {}", halves.token()))]);
    }

    if g.stats.is_some() {
        bail!(Config, "{kernel}: a product split along K writes no statistics");
    }
    // A forced split can ask for more partial sums than one binding holds (the engine's own
    // splits stay within MAX_WORKSPACE): refused here, by the device's own binding check,
    // not by wgpu's validation.
    let partials_shape = [p.splits() * group_count, g.m, g.n];
    let partial_bytes = match device.binding_bytes(&partials_shape, DType::F32) {
        Ok(bytes) => bytes.div_ceil(16) * 16,
        Err(Error::Shape(msg)) => bail!(Shape, "{kernel}: the partial sums of {} K splits: {msg}", p.splits()),
        Err(e) => return Err(e),
    };
    // The partials live in a buffer of their own rather than a pooled tensor: the pool
    // would hand a dropped tensor's buffer to the next caller while this plan still
    // writes it. The bind groups keep the buffer alive as long as the dispatches.
    let workspace = device.wgpu().create_buffer(&wgpu::BufferDescriptor {
        label: Some("gemm split-K partials"),
        size: partial_bytes,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let partials = workspace.as_entire_buffer_binding();
    let bindings = product_bindings(entry, &operands, partials.clone(), partials.clone());
    // The partials of split s and group j are the compact M x N block s * groups + j; the
    // reduce stores each group's block into C's slice.
    let mut partial = p;
    if g.groups.is_some() {
        (partial.c_ld, partial.c_step) = (p.n, u32_of(kernel, "M * N", g.m * g.n)?);
    }
    // The partials are f32 whatever C is: the reduce rounds once.
    let halves = Halves::of(g);
    let gemm = with_uniform(device, Halves { c: false, ..halves }.variant(family), entry, &constants, &[partial], &bindings, groups).named(kernel, flops).tagged(format!("{path} {}", halves.token()));
    p.flags |= if g.bias.is_some() { BIAS } else { 0 };
    let mut rows_constants = Vec::new();
    if rows {
        rows_constants.push(("PHASE_ROWS", 1.0));
    }
    if g.groups.is_some() {
        rows_constants.push(("GROUPED", 1.0));
    }
    rows_constants.extend(join_constant);
    let reduce = reduce_dispatch(device, kernel, &p, &rows_constants, partials, bias, g.c, g.join)?.named(kernel, 0.0).tagged(format!("{bias_token} {group_token} {join_token}"));
    Ok(vec![gemm, reduce])
}

fn with_uniform(
    device: &Device,
    shader: &Shader,
    entry: &'static str,
    constants: &[(&'static str, f64)],
    products: &[Params],
    bindings: &[(u32, wgpu::BufferBinding<'_>)],
    groups: [u32; 3],
) -> Dispatch {
    // The shader's `products` array is always whole: entries past `products` stay zero.
    let mut array = [Params::default(); MAX_PRODUCTS];
    array[..products.len()].copy_from_slice(products);
    let uniform = device.uniform(&array);
    let mut all = vec![(0, uniform.as_entire_buffer_binding())];
    all.extend(bindings.iter().cloned());
    Dispatch::new(device, shader, entry, constants, &all, groups)
}

/// `c = sum over p.splits partials of M * N` (+ bias when flagged), for each of p.groups;
/// `rows` are the constants that say where C's rows go (`PHASE_ROWS`, `GROUPED`).
fn reduce_dispatch(
    device: &Device,
    kernel: &str,
    p: &Params,
    rows: &[(&'static str, f64)],
    partials: wgpu::BufferBinding<'_>,
    bias: &Tensor,
    c: &Tensor,
    join: Option<super::conv2d::Join<'_>>,
) -> Result<Dispatch> {
    let quads = (p.m as usize * p.n as usize * p.groups.max(1) as usize).div_ceil(4);
    let lanes = split_lanes(p.splits as usize);
    let groups = grid(device, quads.div_ceil(WG as usize / lanes) as u64)?;
    // The join's tensors, or the partials again where there is none (see `record`).
    let (join_d, join_y) = match join {
        Some(j) => (quad_binding(kernel, j.d)?, quad_binding(kernel, j.y)?),
        None => (partials.clone(), partials.clone()),
    };
    let bindings = [(1, partials), (3, quad_binding(kernel, bias)?), (4, quad_binding(kernel, c)?), (7, join_d), (8, join_y)];
    let quads = if p.flags & QUAD_C != 0 { "quad_c" } else { "scalar_c" };
    let mut constants = vec![WG_CONST, ("SPLIT_LANES", lanes as f64)];
    constants.extend_from_slice(rows);
    let shader = Halves { a: false, b: false, c: c.dtype() == DType::F16 }.variant(&CONV2D_ALL);
    let lanes_token = if lanes > 1 { "lanes=many" } else { "lanes=one" };
    Ok(with_uniform(device, shader, "reduce_splits", &constants, &[*p], &bindings, groups).tagged(format!("{quads} splits={} {lanes_token}", p.splits)))
}

/// Splits one invocation of the reduction sums at most, about: more take several lanes a
/// quad (`SPLIT_LANES` in shaders/conv2d.wgsl).
const SPLITS_PER_LANE: usize = 8;
/// Lanes a quad at most: a power of two dividing the workgroup, which the shader splits into
/// `WG / SPLIT_LANES` quads.
const MAX_SPLIT_LANES: usize = 16;

/// Invocations that share a quad of the reduction's output: a power of two up to
/// [`MAX_SPLIT_LANES`] giving each about [`SPLITS_PER_LANE`] splits.
fn split_lanes(splits: usize) -> usize {
    splits.div_ceil(SPLITS_PER_LANE).next_power_of_two().min(MAX_SPLIT_LANES)
}

/// Rows per chunk of the column sums: long enough to amortise the second pass, short
/// enough that tall inputs (a conv bias over N * H * W rows) still spread over the GPU.
const COLUMN_CHUNK: usize = 1024;
const COLUMN_TILE: usize = 64;

/// `out[n] = sum_m a[m, n]` for `a` seen as `[rows, cols]`; `out` is overwritten.
pub(crate) fn column_sums(device: &Device, kernel: &str, a: &Tensor, rows: usize, cols: usize, out: &Tensor) -> Result<Vec<Dispatch>> {
    if cols == 0 {
        return Ok(Vec::new());
    }
    if out.overlaps(a) {
        bail!(Shape, "{kernel}: output {:?} overlaps input {:?}", out.shape(), a.shape());
    }
    // The sums are f32; `a` may be an f16 gradient (read through act_f16.wgsl).
    if !matches!(a.dtype(), DType::F32 | DType::F16) || out.dtype() != DType::F32 {
        bail!(Shape, "{kernel}: expected an F32 or F16 input and an F32 output, got {:?} and {:?}", a.dtype(), out.dtype());
    }
    let halves = Halves { a: a.dtype() == DType::F16, b: false, c: false };
    let shader = halves.variant(&CONV2D_ALL);
    let chunks = rows.div_ceil(COLUMN_CHUNK).max(1);
    let tiles_n = cols.div_ceil(COLUMN_TILE);
    let mut p = Params {
        m: u32_of(kernel, "rows", rows)?,
        n: u32_of(kernel, "columns", cols)?,
        k_chunk: COLUMN_CHUNK as u32,
        tiles_n: u32_of(kernel, "column tiles", tiles_n)?,
        splits: u32_of(kernel, "row chunks", chunks)?,
        ..Params::default()
    };
    u32_of(kernel, "rows * columns", rows * cols)?;
    let groups = grid(device, (tiles_n * chunks) as u64)?;
    if chunks == 1 {
        let bindings = [(1, quad_binding(kernel, a)?), (4, quad_binding(kernel, out)?)];
        return Ok(vec![with_uniform(device, shader, "column_sums", &[], &[p], &bindings, groups).tagged("chunks=single").tagged(halves.token())]);
    }
    let workspace = device.wgpu().create_buffer(&wgpu::BufferDescriptor {
        label: Some("column-sum partials"),
        size: ((chunks * cols) as u64 * 4).div_ceil(16) * 16,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let partials = workspace.as_entire_buffer_binding();
    let sums = with_uniform(device, shader, "column_sums", &[], &[p], &[(1, quad_binding(kernel, a)?), (4, partials.clone())], groups).tagged("chunks=multi").tagged(halves.token());
    // The reduction sees the partials as [chunks, 1, cols]; `a` fills the unread bias slot.
    p.m = 1;
    p.flags = if cols.is_multiple_of(4) { QUAD_C } else { 0 };
    let reduce = reduce_dispatch(device, kernel, &p, &[], partials, a, out, None)?;
    Ok(vec![sums, reduce])
}

#[cfg(test)]
mod tests {
    use super::{split_lanes, step_loop, AStage, ALoad, CoopTile, Halves, Tile};

    #[test]
    fn tiles_say_their_workgroup_memory_and_the_choice_keeps_under_the_limit() {
        let f32_bytes: Vec<usize> = Tile::ALL.iter().map(|t| t.workgroup_bytes()).collect();
        assert_eq!(f32_bytes, vec![24_576, 20_480, 16_384, 8_192, 10_240]);
        assert_eq!(CoopTile::of(Tile::M128N64).bytes(), 38_912);
        // WebGPU's default 16 KB: never a 128-row tile, whatever the product.
        for (m, n, k, groups) in [(1 << 20, 64, 576, 1), (1 << 20, 32, 288, 1), (4, 64, 65_536, 1), (50_176, 64, 64, 36), (147, 64, 1 << 18, 1), (33, 70, 10, 1)] {
            let t = Tile::choose_grouped(m, n, k, groups, 16 << 10);
            assert!(t.workgroup_bytes() <= 16 << 10, "{m}x{n}x{k}: {t:?}");
            assert_eq!(Tile::choose_grouped(m, n, k, groups, usize::MAX) == t, !matches!(Tile::choose_grouped(m, n, k, groups, usize::MAX), Tile::M128N64 | Tile::M128N32));
        }
    }

    /// The tensor-core tile each kind of product gets within 48 KB (an H100's limit), and
    /// the smaller ones a tighter limit leaves.
    #[test]
    fn tensor_core_tiles_follow_the_products_shape_and_the_limit() {
        let shape = |a, m, n, limit| {
            let t = CoopTile::choose(Tile::M128N64, a, (m, n, 576), false, limit);
            assert!(t.bytes() <= limit, "{t:?}: {} bytes over {limit}", t.bytes());
            (t.bm, t.bn, t.sg_m, t.sg_n, t.threads())
        };
        let h100 = 48 << 10;
        assert_eq!(shape(ALoad::Im2col, 200_704, 256, h100), (128, 256, 64, 64, 256));
        assert_eq!(shape(ALoad::Im2col, 200_704, 128, h100), (256, 128, 64, 64, 256));
        assert_eq!(shape(ALoad::Im2colT, 1_152, 128, h100), (128, 128, 64, 32, 256));
        assert_eq!(shape(ALoad::Cols, 512, 2048, h100), (128, 256, 64, 64, 256));
        assert_eq!(shape(ALoad::Cols, 64, 256, h100), (64, 64, 32, 32, 128));
        assert_eq!(shape(ALoad::Rows, 1_000, 128, h100), (128, 128, 64, 32, 256));
        assert_eq!(shape(ALoad::Im2colT, 576, 64, h100), (64, 64, 32, 32, 128));
        assert_eq!(shape(ALoad::Im2col, 802_816, 64, h100), (128, 64, 64, 32, 128));
        // K 16 a step on the tall tiles (128 x 64 at 64 x 32 for the 3x3 gathers into 64
        // columns), which a short K takes over more columns too.
        let tall = |a, m, n, k| CoopTile::choose(Tile::M128N64, a, (m, n, k), false, h100);
        assert_eq!(tall(ALoad::Im2col, 802_816, 64, 576).bk, 16);
        assert_eq!(tall(ALoad::Rows, 401_408, 64, 256), CoopTile { bm: 256, bn: 64, sg_m: 32, sg_n: 64, bufs: 1, bk: 16 });
        assert_eq!(tall(ALoad::Rows, 401_408, 256, 256), CoopTile { bm: 256, bn: 64, sg_m: 32, sg_n: 64, bufs: 1, bk: 16 });
        // 1x1 products into whole 128-column tiles: K 32 on 128 invocations where K is long
        // and above the columns, 128 x 128 at K 16 where it is below them.
        let square16 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 32, bufs: 1, bk: 16 };
        let square32 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        assert_eq!(tall(ALoad::Rows, 401_408, 256, 64), square16);
        assert_eq!(tall(ALoad::Rows, 50_176, 2048, 512), square16);
        assert_eq!(tall(ALoad::Rows, 25_088, 256, 1_024), square32);
        assert_eq!(tall(ALoad::Rows, 100_352, 128, 512), square32);
        assert_eq!(tall(ALoad::Rows, 6_272, 512, 2_048), square32);
        assert_eq!(tall(ALoad::Rows, 4_096, 4_096, 4_096).bn, 256);
        // Not on few rows (a Dense layer's batch), nor into columns that leave a partial tile.
        assert_ne!(tall(ALoad::Rows, 1_000, 256, 1_024), square32);
        assert_ne!(tall(ALoad::Rows, 100_352, 96, 576), square32);
        assert_eq!(tall(ALoad::Im2col, 50_176, 512, 4608).bn, 256);
        // A forward or input gradient on a wide tile's grid of 256 workgroups or fewer and a K
        // of 2,304 or less: 128 x 128 at K 16 (resnet18_cifar's 3x3 128 and 256; 224 px
        // keeps the wide tiles).
        assert_eq!(tall(ALoad::Im2col, 65_536, 128, 1_152), square16);
        assert_eq!(tall(ALoad::Im2col, 16_384, 256, 2_304), square16);
        assert_eq!(tall(ALoad::Im2col, 4_096, 512, 4_608).bn, 256);
        assert_eq!(tall(ALoad::Im2col, 50_176, 256, 2_304).bn, 256);
        assert_eq!(tall(ALoad::Im2col, 4_000, 256, 2_304).bn, 256);
        assert_eq!(tall(ALoad::Im2col, 25_088, 256, 2_304).bn, 256);
        assert_eq!(tall(ALoad::Im2col, 200_704, 128, 1_152), CoopTile { bm: 256, bn: 128, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 });
        // A 3x3 weight gradient into 256 columns or more: the widest tile at K 32; a 1x1 one
        // (A = Cols) keeps 128 x 128.
        let widest = CoopTile { bm: 128, bn: 256, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        let narrow16 = CoopTile { bm: 128, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 };
        assert_eq!(tall(ALoad::Im2colT, 4_096, 256, 64), widest);
        assert_eq!(tall(ALoad::Im2colT, 2_304, 256, 50_176), widest);
        assert_eq!(tall(ALoad::Cols, 1_024, 256, 50_176).bn, 128);
        // A weight gradient into 33-64 columns stages K 16 too.
        assert_eq!(tall(ALoad::Im2colT, 576, 64, 802_816), CoopTile { bm: 64, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 });
        assert_eq!(shape(ALoad::Cols, 256, 64, h100), (64, 64, 32, 32, 128));
        assert_eq!(shape(ALoad::Rows, 256, 64, h100), (128, 64, 32, 32, 256));
        // A strided input gradient's phase products (all their rows): 128 x 64 into 64
        // columns, on 32,768 rows or fewer or a K under 512, 256 x 128 at K 32 above into up
        // to 256, the product's own choice beyond.
        let phases = |m, n, k| CoopTile::choose(Tile::M128N64, ALoad::Im2col, (m, n, k), true, h100);
        let wide_tall = CoopTile { bm: 256, bn: 128, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        assert_eq!(phases(262_144, 64, 512), narrow16);
        assert_eq!(phases(802_816, 64, 512), narrow16);
        assert_eq!(phases(65_536, 128, 1_024), wide_tall);
        assert_eq!(phases(16_384, 512, 2_048), narrow16);
        assert_eq!(phases(200_704, 128, 1_024), wide_tall);
        assert_eq!(phases(50_176, 256, 2_048), wide_tall);
        assert_eq!(phases(65_536, 128, 256), narrow16);
        assert_eq!(phases(100_352, 512, 4_096), CoopTile::choose(Tile::M128N64, ALoad::Im2col, (100_352, 512, 4_096), false, h100));
        // A 1x1 downsample's phases (A = Rows) into 65-256 columns on many rows: 128 x 128, K 16.
        let pointwise_phases = |m, n, k| CoopTile::choose(Tile::M128N64, ALoad::Rows, (m, n, k), true, h100);
        assert_eq!(pointwise_phases(401_408, 256, 512), square16);
        assert_eq!(pointwise_phases(802_816, 64, 256), narrow16);
        // Over 256 columns on a longer K (the one tapped phase, alone): the plain 1x1
        // product's 128 x 128 at 64 x 64, K 32; on a K up to the columns, the narrow tile.
        let square32 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 64, bufs: 1, bk: 32 };
        assert_eq!(pointwise_phases(25_088, 1_024, 2_048), square32);
        assert_eq!(pointwise_phases(6_272, 512, 1_024), square32);
        assert_eq!(pointwise_phases(25_088, 1_024, 1_024), narrow16);
        // 36 KB: the 38 KB tiles (the wide ones, M128N64's own) do not fit; 128 x 128 (20 KB),
        // the tall tile (23 KB), 128 x 64 at 64 x 32 (13 KB) and the 64 x 64 one (10 KB) do.
        assert_eq!(shape(ALoad::Im2col, 200_704, 256, 36 << 10), (128, 128, 64, 32, 256));
        assert_eq!(shape(ALoad::Im2col, 802_816, 64, 36 << 10), (128, 64, 64, 32, 128));
        // The tall tile takes a 7x7 stem's gather (K 196), the 3x3 ones' few rows keep M128N64's.
        assert_eq!(tall(ALoad::Im2col, 1_605_632, 64, 196), CoopTile { bm: 256, bn: 64, sg_m: 32, sg_n: 64, bufs: 1, bk: 16 });
        assert_eq!(tall(ALoad::Im2col, 2_000, 64, 576), CoopTile::of(Tile::M128N64));
        assert_eq!(shape(ALoad::Im2colT, 576, 64, 36 << 10), (64, 64, 32, 32, 128));
    }

    /// f16 operands on tensor cores: A staged as f16 beside an f16 B into 64+ columns, except
    /// a 3x3 weight gradient on the 128 x 128 tile; as two words beside an f32 B, into
    /// narrower outputs, or where forced.
    #[test]
    fn the_a_staging_follows_the_tile() {
        let both = Halves { a: true, b: true, c: false };
        let square16 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 32, bufs: 1, bk: 16 };
        let small16 = CoopTile { bm: 64, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 };
        let choose = |h, a, shape, n, forced| AStage::choose(true, h, a, shape, n, forced);
        assert_eq!(choose(both, ALoad::Im2colT, small16, 64, None), Some(AStage::Halves));
        assert_eq!(choose(both, ALoad::Im2colT, square16, 128, None), Some(AStage::Words));
        assert_eq!(choose(both, ALoad::Cols, square16, 256, None), Some(AStage::Halves));
        assert_eq!(choose(both, ALoad::Im2colT, small16, 32, None), Some(AStage::Words));
        assert_eq!(choose(Halves { b: false, ..both }, ALoad::Im2col, square16, 128, None), Some(AStage::Words));
        assert_eq!(choose(both, ALoad::Im2colT, square16, 128, Some(AStage::Halves)), Some(AStage::Halves));
        assert_eq!(AStage::choose(false, both, ALoad::Im2colT, square16, 128, None), None);
        assert_eq!(choose(Halves { a: false, ..both }, ALoad::Im2colT, square16, 128, None), None);
    }

    /// Only the transposed im2col gather on the 128 x 128 tile advances through the loop.
    #[test]
    fn only_the_square_tiles_weight_gradients_advance_by_a_loop() {
        let square16 = CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 32, bufs: 1, bk: 16 };
        let small16 = CoopTile { bm: 64, bn: 64, sg_m: 32, sg_n: 32, bufs: 1, bk: 16 };
        assert!(step_loop(ALoad::Im2colT, square16));
        assert!(!step_loop(ALoad::Im2colT, small16));
        assert!(!step_loop(ALoad::Im2colT, CoopTile { bn: 256, ..square16 }));
        assert!(!step_loop(ALoad::Cols, square16));
        assert!(!step_loop(ALoad::Im2col, square16));
    }

    /// The reduction's lanes a quad: one up to 8 splits, then about 8 splits a lane, 16 at
    /// most.
    #[test]
    fn many_splits_share_their_sums_among_lanes() {
        let lanes: Vec<usize> = [1, 8, 9, 16, 17, 57, 114, 128, 1024].into_iter().map(split_lanes).collect();
        assert_eq!(lanes, [1, 1, 2, 2, 4, 8, 16, 16, 16]);
    }

    /// A forced tile the kernel cannot run is an error naming the rule it breaks.
    #[test]
    fn a_forced_tensor_core_tile_is_checked() {
        let good = CoopTile { bm: 128, bn: 64, sg_m: 64, sg_n: 32, bufs: 2, bk: 32 };
        assert!(good.check("k", 48 << 10).is_ok());
        for (bad, rule) in [
            (CoopTile { sg_m: 48, ..good }, "regions are 32 or 64"),
            (CoopTile { bm: 96, ..good }, "whole regions"),
            (CoopTile { bm: 512, bn: 128, ..good }, "whole regions"),
            (CoopTile { bufs: 3, ..good }, "buffers are 1 or 2"),
            (CoopTile { bk: 64, ..good }, "the K step 16 or 32"),
            (CoopTile { bm: 64, bn: 64, sg_m: 64, sg_n: 64, ..good }, "1-8 whole quads"),
            (CoopTile { bm: 256, bn: 256, sg_m: 64, sg_n: 64, bufs: 2, bk: 32 }, "whole regions"),
            (CoopTile { bm: 128, bn: 256, sg_m: 64, sg_n: 64, bufs: 2, bk: 32 }, "more workgroup memory"),
        ] {
            let err = bad.check("conv2d_forward", 48 << 10).unwrap_err().to_string();
            assert!(err.contains(rule) && err.contains("conv2d_forward") && err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
    }
}
