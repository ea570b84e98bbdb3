//! Column sums and vector sums (`shaders/reduce.wgsl`), and the row split that every
//! per-channel reduction shares, BatchNormalization's statistics included.
//!
//! In NHWC a per-channel statistic is a column reduction over a `[rows = N*H*W, C]` matrix:
//! rows reach 262,144 (batch 256 of 32x32 images) while C is 16..512, so the rows are
//! split across many workgroups and the partial results merged by a second, small pass.

use bytemuck::{Pod, Zeroable};

use super::{grid_3d, u32_of, Dispatch, Shader, REDUCE, WG, WG_CONST};
use crate::{bail, Device, Result, Tensor};

/// Widest column tile of a workgroup: 64 adjacent floats make two full 128-byte lines per
/// row, and with 256 invocations still leave 4 lanes down the rows.
const MAX_TILE_LOG2: u32 = 6;
/// Column tile of the merge passes: narrow, so many lanes share the few partial rows.
const MERGE_TILE_LOG2: u32 = 2;
/// Partials a merge lane takes at most, about: more chunks narrow the merge's column tile
/// further (down to one column of 256 lanes), since each lane merges its chunks in turn.
const MERGE_CHUNKS_PER_LANE: usize = 4;
/// Rows each lane reads at least before the lanes are folded.
const ROWS_PER_LANE: usize = 16;
/// Workgroups a first pass is split into at most: enough to fill a large GPU, each lane
/// walking enough rows to pay for the fold. H200, ResNet-50 mixed at batch 128, the
/// BatchNorms' first passes (benches/results/2026-11-28g/call4): 1,024 took 1.34 + 2.58 ms,
/// 512 1.18 + 2.47 ms (the step 41.8 -> 41.5 ms, resnet18_cifar 9.70 -> 9.63), 256 1.47 +
/// 3.57 ms.
const TARGET_WORKGROUPS: usize = 512;

/// How a reduction over the rows of a `[rows, cols]` matrix is split into workgroups:
/// `tiles` column tiles of `2^col_log2` columns times `chunks` chunks of `chunk_rows` rows.
/// Every chunk holds at least one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    pub rows: u32,
    pub cols: u32,
    pub chunk_rows: u32,
    pub chunks: u32,
    pub col_log2: u32,
}

impl Split {
    pub fn new(kernel: &str, rows: usize, cols: usize) -> Result<Split> {
        if cols == 0 {
            bail!(Shape, "{kernel}: cannot reduce a matrix with 0 columns ({rows} rows)");
        }
        u32_of(kernel, "elements", rows.saturating_mul(cols))?;
        let col_log2 = cols.next_power_of_two().trailing_zeros().min(MAX_TILE_LOG2);
        let lanes = (WG >> col_log2) as usize;
        let tiles = cols.div_ceil(1 << col_log2);
        let want = rows.div_ceil(lanes * ROWS_PER_LANE).clamp(1, (TARGET_WORKGROUPS / tiles).max(1));
        let chunk_rows = rows.div_ceil(want).max(1);
        // Recounted so that no chunk is empty (the merges divide by chunk sizes).
        let chunks = rows.div_ceil(chunk_rows).max(1);
        Ok(Split {
            rows: rows as u32,
            cols: cols as u32,
            chunk_rows: chunk_rows as u32,
            chunks: chunks as u32,
            col_log2,
        })
    }

    /// Lanes down the rows of a workgroup: the invocations that share one column.
    pub fn lanes(&self) -> u32 {
        WG >> self.col_log2
    }

    /// Whether a lane of the first chunk reads four rows per step, the loop that the
    /// BatchNorm partial passes run while `row + 3 * lanes < chunk end` (rows beyond the
    /// last whole step go one at a time).
    pub fn four_row_loads(&self) -> bool {
        self.chunk_rows > 3 * self.lanes()
    }

    /// Whether a lane of the first chunk takes a second four-row step: only then do the quad
    /// partial passes read the rows they loaded ahead during the first.
    pub fn second_four_row_step(&self) -> bool {
        self.chunk_rows > 7 * self.lanes()
    }

    /// The path tokens of a pass over this split: one or several row chunks (and so a
    /// merge of one partial or of many), one column tile or several (above 64 columns).
    pub fn tokens(&self) -> String {
        let tiles = if self.tiles() > 1 { "cols=tiled" } else { "cols=one_tile" };
        format!("{} {tiles}", self.chunks_token())
    }

    /// The path token of the row chunks alone: one chunk (and a merge of one partial) or
    /// several.
    pub fn chunks_token(&self) -> &'static str {
        if self.chunks > 1 { "chunks=multi" } else { "chunks=single" }
    }

    /// Workgroups across the columns.
    pub fn tiles(&self) -> u32 {
        self.cols.div_ceil(1 << self.col_log2)
    }

    /// The grid of the first pass: column tiles by row chunks.
    pub fn groups(&self, device: &Device, kernel: &str) -> Result<[u32; 3]> {
        grid_3d(device, kernel, &format!("{} columns in {} row chunks", self.cols, self.chunks), [self.tiles() as usize, self.chunks as usize, 1])
    }

    /// The column tile of the pass that merges the `[chunks, cols]` partials: four columns,
    /// or fewer where that leaves a lane more than [`MERGE_CHUNKS_PER_LANE`] chunks (a
    /// 262,144-row batch of 64 channels is 512 chunks: 8 in turn a lane on four columns,
    /// 4 on two).
    pub fn merge_log2(&self) -> u32 {
        let lanes = (self.chunks as usize).div_ceil(MERGE_CHUNKS_PER_LANE).next_power_of_two().min(WG as usize);
        let narrow = (WG as usize / lanes).trailing_zeros();
        self.col_log2.min(MERGE_TILE_LOG2).min(narrow)
    }

    /// The grid of the merge pass: one chunk, narrower column tiles.
    pub fn merge_groups(&self, device: &Device, kernel: &str) -> Result<[u32; 3]> {
        let tiles = self.cols.div_ceil(1 << self.merge_log2());
        grid_3d(device, kernel, &format!("{} columns", self.cols), [tiles as usize, 1, 1])
    }

    /// The split of a first pass whose invocations read four adjacent columns each (`cols`
    /// a multiple of 4), seen over `cols / 4` quad columns: the same column tiles and row
    /// chunks, so the merge of `self` takes its partials, each tile a quarter as many quads
    /// wide as it has columns, with four times the lanes.
    pub fn quads(&self) -> Split {
        debug_assert!(self.cols.is_multiple_of(4), "{self:?}: quads of columns not a multiple of 4");
        // cols >= 4 gives col_log2 >= 2.
        Split { cols: self.cols / 4, col_log2: self.col_log2 - 2, ..*self }
    }

    /// The split of the merge pass seen as a reduction of its own: the `[chunks, cols]`
    /// partials in one chunk.
    fn merge(&self) -> Split {
        Split { rows: self.chunks, cols: self.cols, chunk_rows: self.chunks, chunks: 1, col_log2: self.merge_log2() }
    }
}

/// Scratch memory for partial results, kept alive by the bind groups that use it.
///
/// Not taken from the pool: a pooled tensor gives its buffer back when dropped while the
/// dispatches binding it may still replay, so a later `alloc` could be handed the same
/// memory.
pub(crate) fn scratch(device: &Device, label: &'static str, floats: usize) -> wgpu::Buffer {
    device.wgpu().create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: (floats.max(1) * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    })
}

/// A binding of a kernel: a tensor view or a scratch buffer.
#[derive(Clone, Copy)]
pub(crate) enum Bind<'a> {
    Tensor(&'a Tensor),
    Scratch(&'a wgpu::Buffer),
}

/// [`Dispatch::with_params`] for kernels that also bind scratch buffers.
pub(crate) fn launch<P: Pod>(
    device: &Device,
    shader: &Shader,
    entry: &'static str,
    params: &P,
    binds: &[(u32, Bind<'_>)],
    groups: [u32; 3],
) -> Dispatch {
    launch_with(device, shader, entry, &[WG_CONST], params, binds, groups)
}

/// [`launch`] with the pipeline constants given instead of `WG`.
pub(crate) fn launch_with<P: Pod>(
    device: &Device,
    shader: &Shader,
    entry: &'static str,
    constants: &[(&'static str, f64)],
    params: &P,
    binds: &[(u32, Bind<'_>)],
    groups: [u32; 3],
) -> Dispatch {
    let uniform = device.uniform(params);
    let mut bindings = vec![(0, uniform.as_entire_buffer_binding())];
    bindings.extend(binds.iter().map(|(i, b)| {
        let binding = match b {
            Bind::Tensor(t) => t.binding(),
            Bind::Scratch(s) => s.as_entire_buffer_binding(),
        };
        (*i, binding)
    }));
    Dispatch::new(device, shader, entry, constants, &bindings, groups)
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    _pad: [u32; 3],
}

impl From<Split> for Params {
    fn from(s: Split) -> Params {
        Params { rows: s.rows, cols: s.cols, chunk_rows: s.chunk_rows, chunks: s.chunks, col_log2: s.col_log2, _pad: [0; 3] }
    }
}

/// `out[c] = Σ_r x[r, c]`: the column sums of `x` seen as `[rows, C]` (every dimension but
/// the last is a row: a Dense bias gradient, a per-channel sum of an NHWC tensor).
///
/// # Shapes
/// x: `[..., C]`, out: `[C]`.
pub fn sum_rows(device: &Device, x: &Tensor, out: &Tensor) -> Result<Vec<Dispatch>> {
    let Some(&cols) = x.shape().last() else {
        bail!(Shape, "sum_rows: x has shape {:?}, expected at least one dimension", x.shape());
    };
    if out.shape() != [cols] {
        bail!(Shape, "sum_rows: x {:?} needs out of shape [{cols}], got {:?}", x.shape(), out.shape());
    }
    columns(device, "sum_rows", x, cols, out)
}

/// `out[0] = Σ x`: the sum of every element (a loss over a batch).
///
/// # Shapes
/// x: any, out: `[1]`.
pub fn sum(device: &Device, x: &Tensor, out: &Tensor) -> Result<Vec<Dispatch>> {
    if out.len() != 1 {
        bail!(Shape, "sum: out has shape {:?}, expected [1]", out.shape());
    }
    columns(device, "sum", x, 1, out)
}

fn columns(device: &Device, kernel: &str, x: &Tensor, cols: usize, out: &Tensor) -> Result<Vec<Dispatch>> {
    if out.overlaps(x) {
        bail!(Shape, "{kernel}: out {:?} overlaps x {:?}", out.shape(), x.shape());
    }
    let split = Split::new(kernel, x.len().checked_div(cols).unwrap_or(0), cols)?;
    let first = split.groups(device, kernel)?;
    if split.chunks == 1 {
        let sums = launch(device, &REDUCE, "sum_columns", &Params::from(split), &[(1, Bind::Tensor(x)), (2, Bind::Tensor(out))], first);
        return Ok(vec![sums.tagged(format!("pass=only {}", split.tokens()))]);
    }
    let partial = scratch(device, "sum partials", split.chunks as usize * cols);
    let merge = split.merge();
    Ok(vec![
        launch(device, &REDUCE, "sum_columns", &Params::from(split), &[(1, Bind::Tensor(x)), (2, Bind::Scratch(&partial))], first)
            .tagged(format!("pass=partial {}", split.tokens())),
        launch(
            device,
            &REDUCE,
            "sum_columns",
            &Params::from(merge),
            &[(1, Bind::Scratch(&partial)), (2, Bind::Tensor(out))],
            split.merge_groups(device, kernel)?,
        )
        .tagged(format!("pass=merge {}", split.tokens())),
    ])
}

#[cfg(test)]
mod tests {
    use super::Split;

    #[test]
    fn splits_cover_every_row_with_nonempty_chunks() {
        for (rows, cols) in [(0, 1), (1, 1), (255, 1), (257, 1), (100_003, 1), (70_000, 3), (262_144, 16), (4096, 512), (33, 4)] {
            let s = Split::new("t", rows, cols).unwrap();
            assert!(s.chunks >= 1 && (s.chunks as usize) <= super::TARGET_WORKGROUPS, "{s:?}");
            assert!((s.chunks as usize * s.chunk_rows as usize) >= rows, "{s:?} misses rows");
            assert!(rows == 0 || ((s.chunks - 1) as usize * (s.chunk_rows as usize)) < rows, "{s:?} has an empty chunk");
            assert!((1usize << s.col_log2) <= cols.next_power_of_two() && s.col_log2 <= super::MAX_TILE_LOG2, "{s:?}");
        }
        assert!(Split::new("t", 5, 0).is_err());
    }

    /// Many chunks narrow the merge's tile so that each lane merges about four.
    #[test]
    fn merges_of_many_chunks_take_narrower_tiles() {
        let tile = |rows, cols| {
            let s = Split::new("t", rows, cols).unwrap();
            (s.chunks, s.merge_log2())
        };
        assert_eq!(tile(262_144, 64), (512, 1));
        assert_eq!(tile(65_536, 128), (256, 2));
        assert_eq!(tile(16_384, 256), (128, 2));
        assert_eq!(tile(4_096, 512), (64, 2));
        assert_eq!(tile(300, 2), (1, 1));
    }

    #[test]
    fn quad_splits_keep_the_tiles_and_chunks() {
        for (rows, cols) in [(1, 4), (3, 12), (12_250, 100), (70_000, 4), (4096, 64), (12_544, 2052)] {
            let s = Split::new("t", rows, cols).unwrap();
            let q = s.quads();
            assert_eq!((q.rows, q.chunk_rows, q.chunks, q.tiles()), (s.rows, s.chunk_rows, s.chunks, s.tiles()), "{s:?} {q:?}");
            assert_eq!((q.cols, q.lanes()), (s.cols / 4, 4 * s.lanes()), "{s:?} {q:?}");
        }
    }
}
