//! BatchNormalization over the last dimension with an optional fused ReLU
//! (`shaders/batchnorm.wgsl`).
//!
//! The same kernels serve a BatchNormalization after a convolution (NHWC, statistics over
//! N*H*W rows) and after a Dense layer (`[N, units]`): every tensor is seen as `[rows, C]`.
//! Statistics use the biased batch variance, for normalising and for the moving variance
//! alike, as Keras 3 does; it stays finite for a batch of one row (see the shader's header).
//!
//! The activations x and y may be stored as f16 ([`DType::F16`], as `mixed_float16` keeps
//! them), both or neither, with the channels a multiple of 4, and their gradients dy and dx
//! are stored as they are (a gradient is stored as its activation): the kernels compute and
//! sum in f32, and only the stores of y and dx round, four channels at a time. Everything
//! else (the parameters, the statistics and their gradients) is f32 in either case.
//!
//! On the tiled engine, every pass whose channels divide by 4 runs its quad form (the `*4`
//! entry points, tagged `vec4`): the per-element passes and the first passes of the two
//! column reductions (`stats_partial4`, `backward_partial4`) read x, y and dy four channels
//! a load (16 bytes, or 8 as f16) through their vec4 bindings; the scalar forms (tagged
//! `scalar`) take the other channel counts, on f32 only. The reductions' quad passes keep
//! the scalar ones' row chunks and partials, so one merge pass serves both; where the device
//! keeps storage coherent between workgroups, the quad passes merge instead in the last
//! workgroup of each column tile to finish (`stats_merged4`, `backward_merged4`, tagged
//! `merge=last`: see [`BatchNormConfig::merge_last`]).
//!
//! The joined forwards ([`forward_train_joined`], [`forward_infer_joined`]) add a residual
//! block's shortcut to y before the ReLU, so the block's end is one pass over its output.

use bytemuck::{Pod, Zeroable};

use super::gemm::Engine;
use super::gemm_cpu::{threads, INVOCATIONS_PER_THREAD, WORKGROUP};
use super::reduce::{launch, launch_with, scratch, Bind, Split};
use super::{expect_activations, expect_channels, expect_dtype, grid_for, u32_of, width_token, Dispatch, Shader, Storage, BATCHNORM_ALL, BATCHNORM_CPU_ALL, BATCHNORM_MERGE_ALL};
use crate::{bail, DType, Device, Result, Tensor};

/// The layer's hyper-parameters, with Keras' names and defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Weight of the old moving statistics: `moving = momentum * moving + (1 - momentum) * batch`.
    pub momentum: f32,
    /// Added to the variance before the square root.
    pub epsilon: f32,
    /// Apply `max(0, ·)` to the output (forward) and mask the gradient by `y > 0` (backward).
    pub relu: bool,
    /// Which kernels run: `None` picks by the device (the CPU kernels on a software adapter),
    /// `Some` forces one, as tests do to run both. The CPU kernels take channel counts
    /// divisible by 4; others run the tiled ones whatever is asked.
    pub engine: Option<Engine>,
    /// Whether the tiled kernels' quad first passes merge their partials themselves, in each
    /// column tile's last workgroup (one dispatch, tagged `merge=last`), rather than leave
    /// them to a merge pass: `None` wherever the device has
    /// [`wgpu::Features::MEMORY_DECORATION_COHERENT`] and the channels make at most 256
    /// column tiles; `Some` forces either, as tests do (`Some(true)` is an error where
    /// `None` would not merge so).
    pub merge_last: Option<bool>,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { momentum: 0.99, epsilon: 1e-3, relu: false, engine: None, merge_last: None }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    relu: u32,
    momentum: f32,
    epsilon: f32,
}

impl Params {
    fn new(split: &Split, cfg: &BatchNormConfig) -> Params {
        Params {
            rows: split.rows,
            cols: split.cols,
            chunk_rows: split.chunk_rows,
            chunks: split.chunks,
            col_log2: split.col_log2,
            relu: cfg.relu as u32,
            momentum: cfg.momentum,
            epsilon: cfg.epsilon,
        }
    }
    /// The same problem seen by a merge pass, which tiles columns more narrowly.
    fn for_merge(self, split: &Split) -> Params {
        Params { col_log2: split.merge_log2(), ..self }
    }
    /// The same problem seen by a quad first pass: its tile counts quads (`quads` from
    /// [`Split::quads`]), while `cols` stays the channels that index the partials.
    fn for_quads(self, quads: &Split) -> Params {
        Params { col_log2: quads.col_log2, ..self }
    }
}

/// Training forward: batch statistics per channel into `saved` (`[mean; 1/sqrt(var + eps)]`),
/// moving statistics updated in place, then `y = gamma * x_hat + beta` (ReLU'd if
/// `cfg.relu`). Three dispatches, partial statistics, merge and normalise, or two where the
/// first pass merges (channels divisible by 4 on the tiled kernels).
///
/// # Shapes
/// x, y: `[..., C]`; gamma, beta, moving_mean, moving_var: `[C]`; saved: `[2, C]`.
///
/// # Dtypes
/// x and y both F32, or both F16 with C a multiple of 4; the rest F32.
#[allow(clippy::too_many_arguments)]
pub fn forward_train(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    moving_mean: &Tensor,
    moving_var: &Tensor,
    saved: &Tensor,
    y: &Tensor,
) -> Result<Vec<Dispatch>> {
    train("batchnorm forward_train", device, cfg, x, None, [gamma, beta, moving_mean, moving_var, saved], y)
}

/// Per-channel statistics of a tensor that the kernel writing it computed as it stored it (a
/// convolution's epilogue: [`super::conv2d::forward_statistics`]): each chunk's mean and sum
/// of squared deviations per channel, the training forward's first pass, which
/// [`forward_train_with`] merges instead of reading x for them.
#[derive(Clone, Debug)]
pub struct Partials {
    /// f32 `[2, chunks, C]`: the chunks' means, then their sums of squared deviations.
    pub tensor: Tensor,
    /// Rows per chunk, the last chunk holding the rest.
    pub chunk_rows: usize,
    /// Chunks of rows: `ceil(rows / chunk_rows)`.
    pub chunks: usize,
}

/// [`forward_train`] (with `addend`, [`forward_train_joined`]) on x's statistics as x's
/// producer computed them ([`Partials`]): their merge, then the normalize, one pass over x
/// fewer. The partials must be of x: their chunks must cover its rows, none empty.
///
/// # Shapes and dtypes
/// As [`forward_train`]; `partials.tensor` F32 `[2, chunks, C]`.
#[allow(clippy::too_many_arguments)]
pub fn forward_train_with(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    addend: Option<&Tensor>,
    partials: &Partials,
    gamma: &Tensor,
    beta: &Tensor,
    moving_mean: &Tensor,
    moving_var: &Tensor,
    saved: &Tensor,
    y: &Tensor,
) -> Result<Vec<Dispatch>> {
    let kernel = if addend.is_some() { "batchnorm forward_train_joined" } else { "batchnorm forward_train" };
    train_from(kernel, device, cfg, x, addend, Some(partials), [gamma, beta, moving_mean, moving_var, saved], y)
}

/// [`forward_train`] joined with `addend` as a residual block ends:
/// `y = gamma * x_hat + beta + addend`, ReLU'd if `cfg.relu`, in one pass over y instead of a
/// normalize and a join (the sum is rounded once where y is F16). `cfg.relu` is the join's
/// ReLU here; the backward is [`backward`] without one, on the gradient the join passes down.
///
/// # Shapes and dtypes
/// As [`forward_train`], `addend` like x; the channels a multiple of 4.
#[allow(clippy::too_many_arguments)]
pub fn forward_train_joined(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    addend: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    moving_mean: &Tensor,
    moving_var: &Tensor,
    saved: &Tensor,
    y: &Tensor,
) -> Result<Vec<Dispatch>> {
    train("batchnorm forward_train_joined", device, cfg, x, Some(addend), [gamma, beta, moving_mean, moving_var, saved], y)
}

/// [`forward_train`] and [`forward_train_joined`]: `per_channel` is gamma, beta,
/// moving_mean, moving_var and saved.
fn train(kernel: &'static str, device: &Device, cfg: &BatchNormConfig, x: &Tensor, addend: Option<&Tensor>, per_channel: [&Tensor; 5], y: &Tensor) -> Result<Vec<Dispatch>> {
    train_from(kernel, device, cfg, x, addend, None, per_channel, y)
}

/// [`train`] from x's statistics as its producer computed them (`given`), or from its own first
/// pass.
#[allow(clippy::too_many_arguments)]
fn train_from(kernel: &'static str, device: &Device, cfg: &BatchNormConfig, x: &Tensor, addend: Option<&Tensor>, given: Option<&Partials>, per_channel: [&Tensor; 5], y: &Tensor) -> Result<Vec<Dispatch>> {
    let [gamma, beta, moving_mean, moving_var, saved] = per_channel;
    let params_in = [("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)];
    let split = check(kernel, cfg, x, &with_addend(addend, &[("y", y)]), &params_in, saved)?;
    let storage = activations(kernel, &split, &with_addend(addend, &[("x", x), ("y", y)]), &[&params_in[..], &[("saved", saved)]].concat())?;
    let mut inputs = with_addend(addend, &[("x", x), ("gamma", gamma), ("beta", beta)]);
    inputs.extend(given.map(|g| ("partials", &g.tensor)));
    disjoint(kernel, &[("y", y), ("saved", saved), ("moving_mean", moving_mean), ("moving_var", moving_var)], &inputs)?;
    let plan = Plan::new(device, cfg, split, storage, kernel)?;
    let params = Params::new(plan.split(), cfg);
    let t = Bind::Tensor;
    let stores = [(13, t(saved)), (14, t(moving_mean)), (15, t(moving_var))];
    let mut dispatches = match given {
        Some(given) => {
            let chunked = plan.with_chunks(kernel, given, x)?;
            let binds = [&[(9, t(&given.tensor))], &stores[..]].concat();
            vec![chunked.merge(device, STATISTICS.merge, &Params::new(chunked.split(), cfg), &binds)?.tagged("stats=given")]
        }
        None => plan.reduction(device, "batchnorm statistics", STATISTICS, &params, &[(1, t(x))], &stores)?,
    };
    let normalize = [(1, t(x)), (4, t(gamma)), (5, t(beta)), (6, t(saved)), (16, t(y))];
    dispatches.push(match addend {
        None => plan.per_element(device, ["normalize_train", "normalize_train4", "normalize_train_cpu"], &params, &normalize)?,
        Some(a) => plan.joined(device, ["normalize_train_joined", "normalize_train_joined4", "normalize_train_joined_cpu"], &params, &[&normalize[..], &[(23, t(a))]].concat())?,
    });
    Ok(dispatches)
}

/// `named` (tensors with the names errors give them) and the addend where there is one: it
/// is shaped and stored like x, and no output may overlap it.
fn with_addend<'a>(addend: Option<&'a Tensor>, named: &[(&'static str, &'a Tensor)]) -> Vec<(&'static str, &'a Tensor)> {
    named.iter().copied().chain(addend.map(|a| ("addend", a))).collect()
}

/// Inference forward: `y = gamma * (x - moving_mean) / sqrt(moving_var + eps) + beta`
/// (ReLU'd if `cfg.relu`); the moving statistics are only read.
///
/// # Shapes
/// x, y: `[..., C]`; gamma, beta, moving_mean, moving_var: `[C]`.
///
/// # Dtypes
/// x and y both F32, or both F16 with C a multiple of 4; the rest F32.
#[allow(clippy::too_many_arguments)]
pub fn forward_infer(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    moving_mean: &Tensor,
    moving_var: &Tensor,
    y: &Tensor,
) -> Result<Vec<Dispatch>> {
    infer("batchnorm forward_infer", device, cfg, x, None, [gamma, beta, moving_mean, moving_var], y)
}

/// [`forward_infer`] joined with `addend` as [`forward_train_joined`] is with
/// [`forward_train`]: `y = gamma * x_hat + beta + addend`, ReLU'd if `cfg.relu`, in one pass.
///
/// # Shapes and dtypes
/// As [`forward_infer`], `addend` like x; the channels a multiple of 4.
#[allow(clippy::too_many_arguments)]
pub fn forward_infer_joined(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    addend: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    moving_mean: &Tensor,
    moving_var: &Tensor,
    y: &Tensor,
) -> Result<Vec<Dispatch>> {
    infer("batchnorm forward_infer_joined", device, cfg, x, Some(addend), [gamma, beta, moving_mean, moving_var], y)
}

/// [`forward_infer`] and [`forward_infer_joined`]: `per_channel` is gamma, beta,
/// moving_mean and moving_var.
fn infer(kernel: &'static str, device: &Device, cfg: &BatchNormConfig, x: &Tensor, addend: Option<&Tensor>, per_channel: [&Tensor; 4], y: &Tensor) -> Result<Vec<Dispatch>> {
    let [gamma, beta, moving_mean, moving_var] = per_channel;
    let params_in = [("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)];
    let split = check(kernel, cfg, x, &with_addend(addend, &[("y", y)]), &params_in, None)?;
    let storage = activations(kernel, &split, &with_addend(addend, &[("x", x), ("y", y)]), &params_in)?;
    disjoint(kernel, &[("y", y)], &with_addend(addend, &[&[("x", x)], &params_in[..]].concat()))?;
    let plan = Plan::new(device, cfg, split, storage, kernel)?;
    let t = Bind::Tensor;
    let params = Params::new(plan.split(), cfg);
    let normalize = [(1, t(x)), (4, t(gamma)), (5, t(beta)), (7, t(moving_mean)), (8, t(moving_var)), (16, t(y))];
    Ok(vec![match addend {
        None => plan.per_element(device, ["normalize_infer", "normalize_infer4", "normalize_infer_cpu"], &params, &normalize)?,
        Some(a) => plan.joined(device, ["normalize_infer_joined", "normalize_infer_joined4", "normalize_infer_joined_cpu"], &params, &[&normalize[..], &[(23, t(a))]].concat())?,
    }])
}

/// Backward of [`forward_train`]: `dgamma = Σ dy·x_hat`, `dbeta = Σ dy`,
/// `dx = gamma·inv_std/M · (M·dy − dbeta − x_hat·dgamma)` with M the number of rows; all
/// three overwritten. With `cfg.relu`, `dy` is first masked by `y > 0`, `y` being the
/// forward's (ReLU'd) output, and NaN where `y` is NaN (the fused ReLU keeps NaN). `y` is
/// not read: it is recomputed from `x`, `saved`, `gamma` and `beta` by the forward's own
/// expression and rounded as the forward stored it, so the mask is the forward's; that
/// spares the passes a third of the first one's reads and a quarter of the last one's
/// traffic. `beta` is read only for that.
///
/// # Shapes
/// x, dy, dx: `[..., C]`; gamma, beta, dgamma, dbeta: `[C]`; saved: `[2, C]`.
///
/// # Dtypes
/// x as the forward had it, and dy and dx stored as they are: all three F32, or all three
/// F16 with C a multiple of 4; the rest F32.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    dy: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
    saved: &Tensor,
    dx: &Tensor,
    dgamma: &Tensor,
    dbeta: &Tensor,
) -> Result<Vec<Dispatch>> {
    const K: &str = "batchnorm backward";
    let per_channel = [("gamma", gamma), ("beta", beta), ("dgamma", dgamma), ("dbeta", dbeta)];
    let split = check(K, cfg, x, &[("dy", dy), ("dx", dx)], &per_channel, saved)?;
    let storage = activations(K, &split, &[("x", x), ("dy", dy), ("dx", dx)], &[&per_channel[..], &[("saved", saved)]].concat())?;
    disjoint(K, &[("dx", dx), ("dgamma", dgamma), ("dbeta", dbeta)], &[("x", x), ("dy", dy), ("gamma", gamma), ("beta", beta), ("saved", saved)])?;
    let plan = Plan::new(device, cfg, split, storage, K)?;
    let params = Params::new(plan.split(), cfg);
    let t = Bind::Tensor;
    let read = [(1, t(x)), (3, t(dy)), (4, t(gamma)), (5, t(beta)), (6, t(saved))];
    let mut dispatches = plan.reduction(device, "batchnorm gradient sums", GRADIENT_SUMS, &params, &read, &[(17, t(dgamma)), (18, t(dbeta))])?;
    dispatches.push(plan.per_element(device, ["backward_dx", "backward_dx4", "backward_dx_cpu"], &params, &[&read[..], &[(10, t(dgamma)), (11, t(dbeta)), (16, t(dx))]].concat())?);
    Ok(dispatches)
}

/// The entry points of one per-column reduction: its first pass (tiled scalar, tiled quad,
/// CPU), its merge (tiled, CPU) and its quad first pass that merges (see
/// [`Plan::reduction`]), and the bindings of the first pass's reads that the merge reads too.
struct Reduction {
    first: [&'static str; 3],
    merge: [&'static str; 2],
    merged: &'static str,
    merge_reads: &'static [u32],
}

/// Column tiles a first pass that merges may have (`MAX_TILES` in
/// shaders/batchnorm_merge.wgsl: its counters precede the partials in their buffer).
const MAX_TILES: usize = 256;

/// Chunks a merging lane loads at once (`MERGE_STEP` in shaders/batchnorm_merge.wgsl).
const MERGE_STEP: u32 = 4;

/// The training forward's batch statistics.
const STATISTICS: Reduction = Reduction { first: ["stats_partial", "stats_partial4", "stats_partial_cpu"], merge: ["stats_finalize", "stats_finalize_cpu"], merged: "stats_merged4", merge_reads: &[] };

/// The training backward's Σ dy and Σ dy·(x - mean), into dbeta and dgamma (which takes
/// inv_std from saved).
const GRADIENT_SUMS: Reduction = Reduction { first: ["backward_partial", "backward_partial4", "backward_partial_cpu"], merge: ["backward_merge", "backward_merge_cpu"], merged: "backward_merged4", merge_reads: &[6] };

/// Backward of [`forward_infer`], for a layer that trains in inference mode (Keras 3 runs a
/// BatchNormalization set `trainable = False` so, in training too): the moving statistics
/// are constants there, so `dx = dy * gamma / sqrt(moving_var + eps)` and gamma and beta get
/// no gradient. With `cfg.relu`, `dy` is first masked by `y > 0` as in [`backward`]; without
/// it `y` is bound but not read. One per-element dispatch.
///
/// # Shapes
/// y, dy, dx: `[..., C]`; gamma, moving_var: `[C]`.
///
/// # Dtypes
/// y, dy and dx all F32, or all F16 with C a multiple of 4; the rest F32.
pub fn backward_infer(device: &Device, cfg: &BatchNormConfig, y: &Tensor, dy: &Tensor, gamma: &Tensor, moving_var: &Tensor, dx: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "batchnorm backward_infer";
    let split = check(K, cfg, dy, &[("y", y), ("dx", dx)], &[("gamma", gamma), ("moving_var", moving_var)], None)?;
    let storage = activations(K, &split, &[("y", y), ("dy", dy), ("dx", dx)], &[("gamma", gamma), ("moving_var", moving_var)])?;
    disjoint(K, &[("dx", dx)], &[("y", y), ("dy", dy), ("gamma", gamma), ("moving_var", moving_var)])?;
    let plan = Plan::new(device, cfg, split, storage, K)?;
    let t = Bind::Tensor;
    Ok(vec![plan.per_element(
        device,
        ["backward_infer_dx", "backward_infer_dx4", "backward_infer_dx_cpu"],
        &Params::new(plan.split(), cfg),
        &[(2, t(y)), (3, t(dy)), (4, t(gamma)), (8, t(moving_var)), (16, t(dx))],
    )?])
}

/// The path tokens of a first (partial) pass: the split's (of quads for a quad pass),
/// whether its lanes read four rows per step, its width, and for a quad pass whether a lane
/// takes a second four-row step (`prefetch`: the loop that loads the next step's rows
/// before this step's sums only then reads what it prefetched).
fn partial_tokens(split: &Split, quads: bool) -> String {
    let prefetch = if quads && split.second_four_row_step() { " prefetch" } else { "" };
    format!("{} rows={} {}{prefetch}", split.tokens(), if split.four_row_loads() { "x4" } else { "x1" }, width_token(quads))
}

/// Rows the CPU kernels give an invocation at least: fewer cost more in merging than they
/// spread.
const MIN_CPU_CHUNK_ROWS: usize = 64;

/// How one call's passes are laid out, and the module of the activations' storage that runs
/// them.
struct Plan {
    layout: Layout,
    storage: Storage,
    kernel: &'static str,
    /// [`BatchNormConfig::merge_last`].
    merge_last: Option<bool>,
}

/// The GPU kernels' workgroup tiles, or the CPU kernels' invocations of four channels over a
/// chunk of rows (`shaders/batchnorm_cpu.wgsl`).
enum Layout {
    Tiled(Split),
    Cpu(Split),
}

impl Plan {
    /// The CPU layout where the engine (forced, else the device's) is [`Engine::Cpu`] and the
    /// channels divide by 4: enough invocations for every CPU thread, each at least
    /// [`MIN_CPU_CHUNK_ROWS`] rows.
    fn new(device: &Device, cfg: &BatchNormConfig, split: Split, storage: Storage, kernel: &'static str) -> Result<Plan> {
        let engine = cfg.engine.unwrap_or_else(|| Engine::for_device(device));
        if engine == Engine::Tiled || !split.cols.is_multiple_of(4) {
            return Ok(Plan { layout: Layout::Tiled(split), storage, kernel, merge_last: cfg.merge_last });
        }
        let (rows, quads) = (split.rows as usize, split.cols as usize / 4);
        let want = (INVOCATIONS_PER_THREAD * threads() / quads).clamp(1, rows.div_ceil(MIN_CPU_CHUNK_ROWS).max(1));
        let chunk_rows = rows.div_ceil(want).max(1);
        let chunks = rows.div_ceil(chunk_rows).max(1);
        let cpu = Split { chunk_rows: chunk_rows as u32, chunks: chunks as u32, col_log2: 0, ..split };
        let max = device.limits().max_compute_workgroups_per_dimension as usize;
        if (quads * chunks).div_ceil(WORKGROUP) > max || (split.cols as usize).div_ceil(WORKGROUP) > max {
            bail!(Shape, "{kernel}: {} columns need more than {max} workgroups of {WORKGROUP}", split.cols);
        }
        Ok(Plan { layout: Layout::Cpu(cpu), storage, kernel, merge_last: cfg.merge_last })
    }

    fn split(&self) -> &Split {
        match &self.layout {
            Layout::Tiled(s) | Layout::Cpu(s) => s,
        }
    }

    /// The same passes over the rows chunked as `given` says (a merge of partials that x's
    /// producer computed), checked against x's rows: every chunk within them, none empty.
    fn with_chunks(&self, kernel: &str, given: &Partials, x: &Tensor) -> Result<Plan> {
        let split = self.split();
        let (rows, cols) = (split.rows as usize, split.cols as usize);
        let covers = given.chunk_rows > 0 && given.chunks == rows.div_ceil(given.chunk_rows).max(1);
        if !covers || given.tensor.shape() != [2, given.chunks, cols] || given.tensor.dtype() != DType::F32 {
            bail!(
                Shape,
                "{kernel}: partial statistics {:?} ({:?}) in {} chunks of {} rows do not describe x {:?} ({rows} rows of {cols} channels)",
                given.tensor.shape(),
                given.tensor.dtype(),
                given.chunks,
                given.chunk_rows,
                x.shape()
            );
        }
        let (chunk_rows, chunks) = (u32_of(kernel, "rows per chunk", given.chunk_rows)?, u32_of(kernel, "chunks", given.chunks)?);
        let chunked = Split { chunk_rows, chunks, ..*split };
        let layout = match self.layout {
            Layout::Tiled(_) => Layout::Tiled(chunked),
            Layout::Cpu(_) => Layout::Cpu(chunked),
        };
        Ok(Plan { layout, storage: self.storage, kernel: self.kernel, merge_last: self.merge_last })
    }

    /// The tiled kernels' module for the activations' storage.
    fn tiled(&self) -> &'static Shader {
        self.storage.pick(&BATCHNORM_ALL)
    }

    /// The CPU kernels' module for the activations' storage.
    fn cpu(&self) -> &'static Shader {
        self.storage.pick(&BATCHNORM_CPU_ALL)
    }

    /// The CPU kernels' pipeline constants and the path tokens they choose.
    fn cpu_constants(params: &Params) -> ([(&'static str, f64); 2], &'static str) {
        let relu = if params.relu != 0 { "relu" } else { "no_relu" };
        ([("CPU_WG", WORKGROUP as f64), ("CPU_RELU", params.relu as f64)], relu)
    }

    /// A CPU pass over (chunk, four channels) spans, x, y, dy and the output bound as vec4s.
    fn cpu_span(&self, device: &Device, entry: &'static str, split: &Split, params: &Params, binds: &[(u32, Bind<'_>)]) -> Dispatch {
        let (constants, relu) = Self::cpu_constants(params);
        let binds = vec4_binds(binds);
        let groups = [(split.cols / 4 * split.chunks).div_ceil(WORKGROUP as u32), 1, 1];
        launch_with(device, self.cpu(), entry, &constants, params, &binds, groups).tagged(format!("{} {relu}", split.chunks_token()))
    }

    /// The first pass of a reduction: per-chunk partials of each column. `entries`: the
    /// tiled kernel's scalar form, its quad form (where [`Plan::by_quads`]: x, y and dy
    /// bound as vec4s, tiled as [`Split::quads`], named as the scalar form for timings),
    /// the CPU kernel's.
    fn partial(&self, device: &Device, entries: [&'static str; 3], params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
        let store = self.storage.token();
        let split = match &self.layout {
            Layout::Tiled(split) => split,
            Layout::Cpu(split) => return Ok(self.cpu_span(device, entries[2], split, params, binds).tagged(store)),
        };
        if !self.by_quads(entries[0])? {
            return Ok(launch(device, self.tiled(), entries[0], params, binds, split.groups(device, entries[0])?).tagged(partial_tokens(split, false)).tagged(store));
        }
        let quads = split.quads();
        let dispatch = launch(device, self.tiled(), entries[1], &params.for_quads(&quads), &vec4_binds(binds), quads.groups(device, entries[1])?);
        Ok(dispatch.named(entries[0], 0.0).tagged(partial_tokens(&quads, true)).tagged(store))
    }

    /// A per-column reduction over `reads`, its results stored through `stores`, the
    /// bindings its merge writes (any it reads are among `reads`). Where [`Plan::merges_last`],
    /// one dispatch of the quad first pass whose column tiles' last workgroups merge
    /// (`shaders/batchnorm_merge.wgsl`; tagged `merge=last`, and `merge_loads=x4` where a lane
    /// of the first tile merges four chunks a step), its tiles' counters and partials in one
    /// zeroed scratch buffer. Otherwise the first pass writes partials (binding 12) for a merge
    /// pass of their own (binding 9).
    fn reduction(&self, device: &Device, label: &'static str, entries: Reduction, params: &Params, reads: &[(u32, Bind<'_>)], stores: &[(u32, Bind<'_>)]) -> Result<Vec<Dispatch>> {
        let split = self.split();
        let partials = 2 * split.chunks as usize * split.cols as usize;
        if self.merges_last(device)? {
            let quads = split.quads();
            let sync = scratch(device, label, MAX_TILES + partials);
            let binds = vec4_binds(&[reads, stores, &[(24, Bind::Scratch(&sync))]].concat());
            let merge = launch(device, self.storage.pick(&BATCHNORM_MERGE_ALL), entries.merged, &params.for_quads(&quads), &binds, quads.groups(device, entries.merged)?);
            let loads = if split.chunks > (MERGE_STEP - 1) * quads.lanes() { "x4" } else { "x1" };
            let tokens = format!("{} merge=last merge_loads={loads} {}", partial_tokens(&quads, true), self.storage.token());
            return Ok(vec![merge.named(entries.first[0], 0.0).tagged(tokens)]);
        }
        let own = scratch(device, label, partials);
        let merge_reads: Vec<_> = reads.iter().copied().filter(|(i, _)| entries.merge_reads.contains(i)).collect();
        Ok(vec![
            self.partial(device, entries.first, params, &[reads, &[(12, Bind::Scratch(&own))]].concat())?,
            self.merge(device, entries.merge, params, &[&merge_reads[..], &[(9, Bind::Scratch(&own))], stores].concat())?,
        ])
    }

    /// Whether a reduction's quad first pass merges in its column tiles' last workgroups
    /// (see [`BatchNormConfig::merge_last`]): the tiled kernels on channels divisible by 4, at
    /// most [`MAX_TILES`] column tiles, and a device whose storage can be coherent between
    /// workgroups (the last one reads what the others wrote).
    fn merges_last(&self, device: &Device) -> Result<bool> {
        let split = self.split();
        let can = matches!(self.layout, Layout::Tiled(_))
            && split.cols.is_multiple_of(4)
            && split.tiles() as usize <= MAX_TILES
            && device.features().contains(wgpu::Features::MEMORY_DECORATION_COHERENT);
        match self.merge_last {
            None => Ok(can),
            Some(false) => Ok(false),
            Some(true) if can => Ok(true),
            Some(true) => bail!(
                Config,
                "{}: the first pass cannot merge in its last workgroups here ({} channels on the {} kernels, {} column tiles of at most {MAX_TILES}, coherent storage {}): leave merge_last unset",
                self.kernel,
                split.cols,
                if matches!(self.layout, Layout::Tiled(_)) { "tiled" } else { "CPU" },
                split.tiles(),
                if device.features().contains(wgpu::Features::MEMORY_DECORATION_COHERENT) { "available" } else { "unavailable" }
            ),
        }
    }

    /// The merge of the partials per column.
    fn merge(&self, device: &Device, entries: [&'static str; 2], params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
        Ok(match &self.layout {
            Layout::Tiled(split) => launch(device, self.tiled(), entries[0], &params.for_merge(split), binds, split.merge_groups(device, entries[0])?).tagged(split.tokens()),
            Layout::Cpu(split) => {
                let (constants, _) = Self::cpu_constants(params);
                let groups = [split.cols.div_ceil(WORKGROUP as u32), 1, 1];
                launch_with(device, self.cpu(), entries[1], &constants, params, binds, groups).tagged(split.chunks_token())
            }
        }
        .tagged(self.storage.token()))
    }

    /// A per-element pass. Tiled: one invocation per element (`entries[0]`), or per four
    /// channels (`entries[1]`, x, y, dy and the output bound as vec4 arrays) where the
    /// channel count is divisible by 4. CPU: `entries[2]` over spans. The scalar entry
    /// stores single elements to an f32 binding, so it is refused on f16 storage.
    fn per_element(&self, device: &Device, entries: [&'static str; 3], params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
        let store = self.storage.token();
        if let Layout::Cpu(split) = &self.layout {
            return Ok(self.cpu_span(device, entries[2], split, params, binds).named(entries[0], 0.0).tagged(store));
        }
        let n = params.rows as usize * params.cols as usize;
        if !self.by_quads(entries[0])? {
            return Ok(launch(device, self.tiled(), entries[0], params, binds, grid_for(device, n)?).tagged(width_token(false)).tagged(store));
        }
        let invocations = (params.rows as usize).div_ceil(QUAD_ROWS) * (params.cols as usize / 4);
        Ok(launch(device, self.tiled(), entries[1], params, &vec4_binds(binds), grid_for(device, invocations)?).named(entries[0], 0.0).tagged(width_token(true)).tagged(store))
    }

    /// Whether a tiled pass runs its quad form: wherever the channels divide by 4. `scalar`,
    /// the scalar form, is refused on F16 storage, whose check asks for such channels
    /// already; were it ever loosened, an f16 y or dx written one element at a time would
    /// race on shared words and be read as f32.
    fn by_quads(&self, scalar: &str) -> Result<bool> {
        let cols = self.split().cols;
        if cols.is_multiple_of(4) {
            return Ok(true);
        }
        if self.storage == Storage::F16 {
            bail!(Shape, "{}: {cols} channels stored as F16 would need the scalar {scalar}, which the f16 module never runs; expected a multiple of 4", self.kernel);
        }
        Ok(false)
    }

    /// A joined normalize, [`Plan::per_element`] where there is no scalar entry (`entries[0]`
    /// only names the pass): the channels must divide by 4.
    fn joined(&self, device: &Device, entries: [&'static str; 3], params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
        if !params.cols.is_multiple_of(4) {
            bail!(Shape, "{}: joining an addend needs channels divisible by 4, got {}", self.kernel, params.cols);
        }
        self.per_element(device, entries, params, binds)
    }
}

/// Rows of one quad of channels a vec4 per-element invocation takes (`QUAD_ROWS` in
/// shaders/batchnorm.wgsl).
const QUAD_ROWS: usize = 4;

/// The binding of a tensor the quad and CPU passes read or write as vec4s: x, y, dy and
/// the output (y or dx, `out` at 16) have vec4 twins at 19-22, the only ones an f16 binding
/// may be stored through, and the per-channel arrays they read (gamma, beta, saved, the
/// moving statistics, dgamma and dbeta, at 4-8, 10 and 11) at 25-31, one load a quad.
fn vec4_binding(i: u32) -> u32 {
    match i {
        1..=3 => i + 18,
        16 => 22,
        4..=8 => i + 21,
        10 | 11 => i + 20,
        _ => i,
    }
}

/// `binds` with each tensor at its [`vec4_binding`].
fn vec4_binds<'a>(binds: &[(u32, Bind<'a>)]) -> Vec<(u32, Bind<'a>)> {
    binds.iter().map(|(i, b)| (vec4_binding(*i), *b)).collect()
}

/// The activations' storage, checking the dtypes: `acts` (x, y, dy and dx, those the call
/// binds: a gradient is stored as its activation) share one, F32 or F16, and every tensor of
/// `f32s` is F32. F16 activations need channels divisible by 4 on either engine: only the
/// vec4 passes store y and dx as f16, and the CPU kernels take no other channel counts.
fn activations(kernel: &str, split: &Split, acts: &[(&str, &Tensor)], f32s: &[(&str, &Tensor)]) -> Result<Storage> {
    let storage = expect_activations(kernel, acts, ("channels", split.cols as usize))?;
    for (name, t) in f32s {
        expect_dtype(kernel, name, t, DType::F32)?;
    }
    Ok(storage)
}

/// Validates the configuration and every shape against `x: [..., C]`, and splits the rows.
fn check<'a>(
    kernel: &str,
    cfg: &BatchNormConfig,
    x: &Tensor,
    like_x: &[(&str, &Tensor)],
    per_channel: &[(&str, &Tensor)],
    saved: impl Into<Option<&'a Tensor>>,
) -> Result<Split> {
    if !(cfg.epsilon > 0.0 && cfg.epsilon.is_finite()) {
        bail!(Config, "{kernel}: epsilon must be positive and finite, got {}", cfg.epsilon);
    }
    if !(0.0..=1.0).contains(&cfg.momentum) {
        bail!(Config, "{kernel}: momentum must be in [0, 1], got {}", cfg.momentum);
    }
    let c = expect_channels(kernel, x, like_x, per_channel)?;
    if let Some(s) = saved.into()
        && s.shape() != [2, c]
    {
        bail!(Shape, "{kernel}: saved has shape {:?}, expected [2, {c}] for x {:?}", s.shape(), x.shape());
    }
    Split::new(kernel, x.len() / c, c)
}

/// Refuses outputs that overlap each other or an input: a dispatch cannot bind one buffer
/// range as both read and read_write.
fn disjoint(kernel: &str, outputs: &[(&str, &Tensor)], inputs: &[(&str, &Tensor)]) -> Result<()> {
    for (i, (name, o)) in outputs.iter().enumerate() {
        for (other, t) in outputs[i + 1..].iter().chain(inputs) {
            if o.overlaps(t) {
                bail!(Shape, "{kernel}: {name} {:?} overlaps {other} {:?}", o.shape(), t.shape());
            }
        }
    }
    Ok(())
}
