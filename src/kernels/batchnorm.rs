//! BatchNormalization over the last dimension with an optional fused ReLU
//! (`shaders/batchnorm.wgsl`).
//!
//! The same kernels serve a BatchNormalization after a convolution (NHWC, statistics over
//! N*H*W rows) and after a Dense layer (`[N, units]`): every tensor is seen as `[rows, C]`.
//! Statistics use the biased batch variance, for normalising and for the moving variance
//! alike, as Keras 3 does; it stays finite for a batch of one row (see the shader's header).

use bytemuck::{Pod, Zeroable};

use super::reduce::{launch, scratch, Bind, Split};
use super::{expect_channels, grid_for, width_token, Dispatch, BATCHNORM};
use crate::{bail, Device, Result, Tensor};

/// The layer's hyper-parameters, with Keras' names and defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Weight of the old moving statistics: `moving = momentum * moving + (1 - momentum) * batch`.
    pub momentum: f32,
    /// Added to the variance before the square root.
    pub epsilon: f32,
    /// Apply `max(0, ·)` to the output (forward) and mask the gradient by `y > 0` (backward).
    pub relu: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { momentum: 0.99, epsilon: 1e-3, relu: false }
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
}

/// Training forward: batch statistics per channel into `saved` (`[mean; 1/sqrt(var + eps)]`),
/// moving statistics updated in place, then `y = gamma * x_hat + beta` (ReLU'd if
/// `cfg.relu`). Three dispatches: partial statistics, merge, normalise.
///
/// # Shapes
/// x, y: `[..., C]`; gamma, beta, moving_mean, moving_var: `[C]`; saved: `[2, C]`.
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
    const K: &str = "batchnorm forward_train";
    let split = check(K, cfg, x, &[("y", y)], &[("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)], saved)?;
    disjoint(K, &[("y", y), ("saved", saved), ("moving_mean", moving_mean), ("moving_var", moving_var)], &[("x", x), ("gamma", gamma), ("beta", beta)])?;
    let params = Params::new(&split, cfg);
    let partials = scratch(device, "batchnorm statistics", 2 * split.chunks as usize * split.cols as usize);
    let t = Bind::Tensor;
    Ok(vec![
        launch(device, &BATCHNORM, "stats_partial", &params, &[(1, t(x)), (12, Bind::Scratch(&partials))], split.groups(device, K)?)
            .tagged(partial_tokens(&split)),
        launch(
            device,
            &BATCHNORM,
            "stats_finalize",
            &params.for_merge(&split),
            &[(9, Bind::Scratch(&partials)), (13, t(saved)), (14, t(moving_mean)), (15, t(moving_var))],
            split.merge_groups(device, K)?,
        )
        .tagged(split.tokens()),
        per_element(device, "normalize_train", "normalize_train4", &params, &[(1, t(x)), (4, t(gamma)), (5, t(beta)), (6, t(saved)), (16, t(y))])?,
    ])
}

/// Inference forward: `y = gamma * (x - moving_mean) / sqrt(moving_var + eps) + beta`
/// (ReLU'd if `cfg.relu`); the moving statistics are only read.
///
/// # Shapes
/// x, y: `[..., C]`; gamma, beta, moving_mean, moving_var: `[C]`.
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
    const K: &str = "batchnorm forward_infer";
    let per_channel = [("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)];
    let split = check(K, cfg, x, &[("y", y)], &per_channel, None)?;
    disjoint(K, &[("y", y)], &[("x", x), ("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)])?;
    let t = Bind::Tensor;
    Ok(vec![per_element(
        device,
        "normalize_infer",
        "normalize_infer4",
        &Params::new(&split, cfg),
        &[(1, t(x)), (4, t(gamma)), (5, t(beta)), (7, t(moving_mean)), (8, t(moving_var)), (16, t(y))],
    )?])
}

/// Backward of [`forward_train`]: `dgamma = Σ dy·x_hat`, `dbeta = Σ dy`,
/// `dx = gamma·inv_std/M · (M·dy − dbeta − x_hat·dgamma)` with M the number of rows; all
/// three overwritten. With `cfg.relu`, `dy` is first masked by `y > 0`, `y` being the
/// forward's (ReLU'd) output, and NaN where `y` is NaN (the fused ReLU keeps NaN); without it `y` is bound but not read.
///
/// # Shapes
/// x, y, dy, dx: `[..., C]`; gamma, dgamma, dbeta: `[C]`; saved: `[2, C]`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    device: &Device,
    cfg: &BatchNormConfig,
    x: &Tensor,
    y: &Tensor,
    dy: &Tensor,
    gamma: &Tensor,
    saved: &Tensor,
    dx: &Tensor,
    dgamma: &Tensor,
    dbeta: &Tensor,
) -> Result<Vec<Dispatch>> {
    const K: &str = "batchnorm backward";
    let split = check(K, cfg, x, &[("y", y), ("dy", dy), ("dx", dx)], &[("gamma", gamma), ("dgamma", dgamma), ("dbeta", dbeta)], saved)?;
    disjoint(K, &[("dx", dx), ("dgamma", dgamma), ("dbeta", dbeta)], &[("x", x), ("y", y), ("dy", dy), ("gamma", gamma), ("saved", saved)])?;
    let params = Params::new(&split, cfg);
    let partials = scratch(device, "batchnorm gradient sums", 2 * split.chunks as usize * split.cols as usize);
    let t = Bind::Tensor;
    Ok(vec![
        launch(
            device,
            &BATCHNORM,
            "backward_partial",
            &params,
            &[(1, t(x)), (2, t(y)), (3, t(dy)), (6, t(saved)), (12, Bind::Scratch(&partials))],
            split.groups(device, K)?,
        )
        .tagged(partial_tokens(&split)),
        launch(
            device,
            &BATCHNORM,
            "backward_merge",
            &params.for_merge(&split),
            &[(6, t(saved)), (9, Bind::Scratch(&partials)), (17, t(dgamma)), (18, t(dbeta))],
            split.merge_groups(device, K)?,
        )
        .tagged(split.tokens()),
        per_element(
            device,
            "backward_dx",
            "backward_dx4",
            &params,
            &[(1, t(x)), (2, t(y)), (3, t(dy)), (4, t(gamma)), (6, t(saved)), (10, t(dgamma)), (11, t(dbeta)), (16, t(dx))],
        )?,
    ])
}

/// Backward of [`forward_infer`], for a layer that trains in inference mode (Keras 3 runs a
/// BatchNormalization set `trainable = False` so, in training too): the moving statistics
/// are constants there, so `dx = dy * gamma / sqrt(moving_var + eps)` and gamma and beta get
/// no gradient. With `cfg.relu`, `dy` is first masked by `y > 0` as in [`backward`]; without
/// it `y` is bound but not read. One per-element dispatch.
///
/// # Shapes
/// y, dy, dx: `[..., C]`; gamma, moving_var: `[C]`.
pub fn backward_infer(device: &Device, cfg: &BatchNormConfig, y: &Tensor, dy: &Tensor, gamma: &Tensor, moving_var: &Tensor, dx: &Tensor) -> Result<Vec<Dispatch>> {
    const K: &str = "batchnorm backward_infer";
    let split = check(K, cfg, dy, &[("y", y), ("dx", dx)], &[("gamma", gamma), ("moving_var", moving_var)], None)?;
    disjoint(K, &[("dx", dx)], &[("y", y), ("dy", dy), ("gamma", gamma), ("moving_var", moving_var)])?;
    let t = Bind::Tensor;
    Ok(vec![per_element(
        device,
        "backward_infer_dx",
        "backward_infer_dx4",
        &Params::new(&split, cfg),
        &[(2, t(y)), (3, t(dy)), (4, t(gamma)), (8, t(moving_var)), (16, t(dx))],
    )?])
}

/// The path tokens of a first (partial) pass: the split's, and whether its lanes read four
/// rows per step.
fn partial_tokens(split: &Split) -> String {
    format!("{} rows={}", split.tokens(), if split.four_row_loads() { "x4" } else { "x1" })
}

/// A pass with one invocation per element of x, or per four channels (`entry4`, x, y, dy
/// and the output bound as vec4 arrays) where the channel count is divisible by 4.
fn per_element(device: &Device, entry: &'static str, entry4: &'static str, params: &Params, binds: &[(u32, Bind<'_>)]) -> Result<Dispatch> {
    let n = params.rows as usize * params.cols as usize;
    if !params.cols.is_multiple_of(4) {
        return Ok(launch(device, &BATCHNORM, entry, params, binds, grid_for(device, n)?).tagged(width_token(false)));
    }
    let wide = |i: u32| match i {
        1..=3 => i + 18,
        16 => 22,
        _ => i,
    };
    let binds: Vec<(u32, Bind<'_>)> = binds.iter().map(|(i, b)| (wide(*i), *b)).collect();
    Ok(launch(device, &BATCHNORM, entry4, params, &binds, grid_for(device, n / 4)?).named(entry, 0.0).tagged(width_token(true)))
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
