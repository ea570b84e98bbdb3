//! LayerNormalization over the last dimension (`shaders/layernorm.wgsl`).
//!
//! Every tensor is seen as `[rows, C]`: an NHWC activation normalises each pixel's
//! channels (rows = N*H*W), a Dense output each sample's units (rows = N). Rows run from 1
//! to millions and C from 1 to thousands, so the row passes pack several short rows into a
//! workgroup or spread one long row over all its lanes, and fold their grid past the
//! per-dimension limit. Training and inference are the same computation.

use bytemuck::{Pod, Zeroable};

use super::reduce::{launch, scratch, Bind, Split};
use super::{expect_channels, expect_separate, grid, u32_of, Dispatch, LAYERNORM, WG};
use crate::{bail, Device, Result, Tensor};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    lane_log2: u32,
    epsilon: f32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    pad: u32,
}

impl Params {
    fn new(split: &Split, epsilon: f32) -> Params {
        Params {
            rows: split.rows,
            cols: split.cols,
            // Lanes per row: the next power of two of C, at most a workgroup.
            lane_log2: split.cols.next_power_of_two().trailing_zeros().min(WG.trailing_zeros()),
            epsilon,
            chunk_rows: split.chunk_rows,
            chunks: split.chunks,
            col_log2: split.col_log2,
            pad: 0,
        }
    }
}

/// `y = gamma * (x - mean) / sqrt(var + epsilon) + beta` per row, with the row's mean and
/// biased variance; `saved` gets each row's mean and `1 / sqrt(var + epsilon)` for
/// [`backward`]. One dispatch.
///
/// # Shapes
/// x, y: `[..., C]`; gamma, beta: `[C]`; saved: `[rows, 2]`, rows the product of x's
/// leading dimensions.
pub fn forward(device: &Device, epsilon: f32, x: &Tensor, gamma: &Tensor, beta: &Tensor, saved: &Tensor, y: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "layernorm forward";
    if !(epsilon > 0.0 && epsilon.is_finite()) {
        bail!(Config, "{K}: epsilon must be positive and finite, got {epsilon}");
    }
    let split = check(K, x, &[("y", y)], &[("gamma", gamma), ("beta", beta)], saved)?;
    expect_separate(K, &[("y", y), ("saved", saved)], &[("x", x), ("gamma", gamma), ("beta", beta)])?;
    let t = Bind::Tensor;
    Ok(vec![row_pass(device, "forward_rows", &Params::new(&split, epsilon), &[(1, t(x)), (3, t(gamma)), (4, t(beta)), (7, t(saved)), (8, t(y))])?])
}

/// Backward of [`forward`]: with `g = dy * gamma`, `x_hat = (x - mean) * inv_std` and the
/// sums over each row of C, `dx = inv_std / C * (C * g - Σ g - x_hat * Σ g * x_hat)`;
/// `dgamma = Σ_rows dy * x_hat`, `dbeta = Σ_rows dy`. All three are overwritten. Three
/// dispatches: dx, then the parameter sums' partial and merge passes.
///
/// # Shapes
/// x, dy, dx: `[..., C]`; gamma, dgamma, dbeta: `[C]`; saved: `[rows, 2]`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    device: &Device,
    x: &Tensor,
    dy: &Tensor,
    gamma: &Tensor,
    saved: &Tensor,
    dx: &Tensor,
    dgamma: &Tensor,
    dbeta: &Tensor,
) -> Result<Vec<Dispatch>> {
    const K: &str = "layernorm backward";
    let split = check(K, x, &[("dy", dy), ("dx", dx)], &[("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)], saved)?;
    expect_separate(K, &[("dx", dx)], &[("x", x), ("dy", dy), ("gamma", gamma), ("saved", saved)])?;
    expect_separate(K, &[("dgamma", dgamma), ("dbeta", dbeta)], &[])?;
    // epsilon is only read by the forward: inv_std arrives in saved.
    let params = Params::new(&split, 1.0);
    let partials = scratch(device, "layernorm gradient sums", 2 * split.chunks as usize * split.cols as usize);
    let t = Bind::Tensor;
    Ok(vec![
        row_pass(device, "backward_rows", &params, &[(1, t(x)), (2, t(dy)), (3, t(gamma)), (5, t(saved)), (8, t(dx))])?,
        launch(device, &LAYERNORM, "params_partial", &params, &[(1, t(x)), (2, t(dy)), (5, t(saved)), (9, Bind::Scratch(&partials))], split.groups(device, K)?)
            .tagged(split.tokens()),
        launch(
            device,
            &LAYERNORM,
            "params_merge",
            &Params { col_log2: split.merge_log2(), ..params },
            &[(6, Bind::Scratch(&partials)), (10, t(dgamma)), (11, t(dbeta))],
            split.merge_groups(device, K)?,
        )
        .tagged(split.tokens()),
    ])
}

/// A row pass: `WG >> lane_log2` rows per workgroup, tagged with whether rows share a
/// workgroup and whether a lane walks more than one column of its row.
fn row_pass(device: &Device, entry: &'static str, params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
    let per_group = WG >> params.lane_log2;
    let groups = grid(device, params.rows.div_ceil(per_group) as u64)?;
    let rows = if per_group > 1 { "rows_per_group=many" } else { "rows_per_group=one" };
    let cols = if params.cols > 1 << params.lane_log2 { "cols_per_lane=many" } else { "cols_per_lane=one" };
    Ok(launch(device, &LAYERNORM, entry, params, binds, groups).tagged(format!("{rows} {cols}")))
}

/// Validates every shape against `x: [..., C]` and splits the rows for the column sums.
fn check(kernel: &str, x: &Tensor, like_x: &[(&str, &Tensor)], per_channel: &[(&str, &Tensor)], saved: &Tensor) -> Result<Split> {
    let c = expect_channels(kernel, x, like_x, per_channel)?;
    let rows = x.len() / c;
    if saved.shape() != [rows, 2] {
        bail!(Shape, "{kernel}: saved has shape {:?}, expected [{rows}, 2] for x {:?}", saved.shape(), x.shape());
    }
    u32_of(kernel, "saved elements", 2 * rows)?;
    Split::new(kernel, rows, c)
}
