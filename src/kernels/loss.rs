//! Losses with their gradients in one kernel (`shaders/loss.wgsl`): softmax cross-entropy
//! over integer labels and mean squared error. One workgroup per row.
//!
//! # Shapes
//! Predictions, targets and gradients `[batch, classes]`; labels, per-row losses and ranks
//! `[batch]`.

use bytemuck::{Pod, Zeroable};

use super::{expect_dtype, expect_separate, expect_shape, grid, u32_of, Dispatch, LOSS};
use crate::{bail, DType, Device, Result, Tensor};

/// Invocations per row; the shader's `ROW`.
pub const ROW_THREADS: u32 = 64;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    k: u32,
    scale: f32,
    /// Cross-entropy's label smoothing (0 for mean squared error).
    smoothing: f32,
    /// 1 when binding 7 holds per-class weights.
    weighted: u32,
    _pad: [u32; 3],
}

/// `[rows, k]` of a 2-d tensor with at least one column.
fn rows_and_k(kernel: &str, operand: &str, t: &Tensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [rows, k] if k > 0 => Ok((rows, k)),
        _ => bail!(Shape, "{kernel}: {operand} must be [batch, classes] with classes > 0, got {:?}", t.shape()),
    }
}

fn launch(device: &Device, entry: &'static str, rows: usize, k: usize, scale: f32, smoothing: f32, weighted: bool, bindings: &[(u32, &Tensor)]) -> Result<Dispatch> {
    let params = Params { rows: u32_of(entry, "rows", rows)?, k: u32_of(entry, "classes", k)?, scale, smoothing, weighted: weighted as u32, _pad: [0; 3] };
    u32_of(entry, "elements", rows * k)?;
    // A row's ROW_THREADS lanes stride over its classes: one pass or several.
    let classes = if k > ROW_THREADS as usize { "classes=strided" } else { "classes=one_pass" };
    Ok(Dispatch::with_params(device, &LOSS, entry, &[], &params, bindings, grid(device, rows as u64)?).tagged(classes))
}

/// Softmax cross-entropy with integer labels, forward and backward fused:
/// `loss[i] = -log softmax(logits[i])[labels[i]]`, `dlogits = scale * (softmax - onehot)`,
/// and `rank[i]` = the number of classes whose logit is strictly greater than the label's
/// (top-1 correct iff `rank == 0`, top-k iff `rank < k`). `scale` is `1 / global batch`.
/// Labels must be validated on the host; a label `>= classes` gives a NaN loss, rank
/// `classes` and `dlogits = scale * softmax`, and reads nothing out of bounds. A row with a
/// NaN or infinite logit gets a NaN loss and rank `classes`, so no accuracy metric counts a
/// diverged prediction as correct.
///
/// # Shapes
/// `logits`: `[batch, classes]` f32, `labels`: `[batch]` u32 -> `loss`: `[batch]` f32,
/// `dlogits`: `[batch, classes]` f32, `rank`: `[batch]` u32.
pub fn softmax_cross_entropy(
    device: &Device,
    logits: &Tensor,
    labels: &Tensor,
    scale: f32,
    loss: &Tensor,
    dlogits: &Tensor,
    rank: &Tensor,
) -> Result<Dispatch> {
    softmax_cross_entropy_smoothed(device, logits, labels, scale, 0.0, loss, dlogits, rank)
}

/// [`softmax_cross_entropy_smoothed`] with Keras' `class_weight`: each row's loss and
/// gradient are multiplied by `class_weights[label]` when given (an out-of-range label
/// weighs 1; its loss is NaN anyway). The rank is unweighted.
///
/// # Shapes
/// As [`softmax_cross_entropy`]; `class_weights`: `[classes]` f32.
#[allow(clippy::too_many_arguments)]
pub fn softmax_cross_entropy_weighted(
    device: &Device,
    logits: &Tensor,
    labels: &Tensor,
    class_weights: Option<&Tensor>,
    scale: f32,
    label_smoothing: f32,
    loss: &Tensor,
    dlogits: &Tensor,
    rank: &Tensor,
) -> Result<Dispatch> {
    let kn = "softmax_cross_entropy";
    let (_, k) = rows_and_k(kn, "logits", logits)?;
    if let Some(w) = class_weights {
        expect_shape(kn, "class_weights", w, &[k])?;
        expect_dtype(kn, "class_weights", w, DType::F32)?;
        expect_separate(kn, &[("loss", loss), ("dlogits", dlogits), ("rank", rank)], &[("class_weights", w)])?;
    }
    cross_entropy(device, logits, labels, class_weights, scale, label_smoothing, loss, dlogits, rank)
}

/// [`softmax_cross_entropy`] against smoothed targets (Keras' `label_smoothing` `a`):
/// `t = (1 - a) * onehot(label) + a / classes`, `loss[i] = -sum_j t_j log softmax(logits[i])_j`,
/// `dlogits = scale * (softmax - t)`; `rank` is the label's, as without smoothing. `a` 0 gives
/// exactly [`softmax_cross_entropy`]'s results.
///
/// # Shapes
/// As [`softmax_cross_entropy`].
#[allow(clippy::too_many_arguments)]
pub fn softmax_cross_entropy_smoothed(
    device: &Device,
    logits: &Tensor,
    labels: &Tensor,
    scale: f32,
    label_smoothing: f32,
    loss: &Tensor,
    dlogits: &Tensor,
    rank: &Tensor,
) -> Result<Dispatch> {
    cross_entropy(device, logits, labels, None, scale, label_smoothing, loss, dlogits, rank)
}

#[allow(clippy::too_many_arguments)]
fn cross_entropy(
    device: &Device,
    logits: &Tensor,
    labels: &Tensor,
    class_weights: Option<&Tensor>,
    scale: f32,
    label_smoothing: f32,
    loss: &Tensor,
    dlogits: &Tensor,
    rank: &Tensor,
) -> Result<Dispatch> {
    let kn = "softmax_cross_entropy";
    if !(0.0..=1.0).contains(&label_smoothing) {
        bail!(Config, "{kn}: label_smoothing must be in [0, 1], got {label_smoothing}");
    }
    let (rows, k) = rows_and_k(kn, "logits", logits)?;
    expect_shape(kn, "labels", labels, &[rows])?;
    expect_shape(kn, "loss", loss, &[rows])?;
    expect_shape(kn, "dlogits", dlogits, &[rows, k])?;
    expect_shape(kn, "rank", rank, &[rows])?;
    for (name, t, dtype) in [
        ("logits", logits, DType::F32),
        ("labels", labels, DType::U32),
        ("loss", loss, DType::F32),
        ("dlogits", dlogits, DType::F32),
        ("rank", rank, DType::U32),
    ] {
        expect_dtype(kn, name, t, dtype)?;
    }
    expect_separate(kn, &[("loss", loss), ("dlogits", dlogits), ("rank", rank)], &[("logits", logits), ("labels", labels)])?;
    // Unweighted, the kernel never reads binding 7; `logits` fills it.
    let weights = class_weights.unwrap_or(logits);
    let mut d = launch(device, kn, rows, k, scale, label_smoothing, class_weights.is_some(), &[(1, logits), (2, labels), (4, loss), (5, dlogits), (6, rank), (7, weights)])?;
    if class_weights.is_none() {
        d.bytes -= logits.bytes() as f64; // the stand-in is never read
    }
    Ok(d)
}

/// Mean squared error, forward and backward fused: `loss[i] = mean_k (pred - target)^2`,
/// `dpred = scale * 2 * (pred - target) / k`.
///
/// # Shapes
/// `pred`, `target`: `[batch, k]` -> `loss`: `[batch]`, `dpred`: `[batch, k]`.
pub fn mean_squared_error(device: &Device, pred: &Tensor, target: &Tensor, scale: f32, loss: &Tensor, dpred: &Tensor) -> Result<Dispatch> {
    mse(device, pred, target, None, scale, loss, dpred)
}

/// [`mean_squared_error`] with Keras' `class_weight`: each row's loss and gradient are
/// multiplied by `class_weights[labels[row]]`. The targets are the one-hot encoding of the
/// labels, and Keras takes the class of a one-hot target as its argmax: the label. Labels
/// must be validated on the host (one past the last class reads the last class's weight).
///
/// # Shapes
/// As [`mean_squared_error`]; `labels`: `[batch]` u32, `class_weights`: `[k]` f32.
#[allow(clippy::too_many_arguments)]
pub fn mean_squared_error_weighted(device: &Device, pred: &Tensor, target: &Tensor, labels: &Tensor, class_weights: &Tensor, scale: f32, loss: &Tensor, dpred: &Tensor) -> Result<Dispatch> {
    let kn = "mean_squared_error";
    let (rows, k) = rows_and_k(kn, "pred", pred)?;
    expect_shape(kn, "labels", labels, &[rows])?;
    expect_dtype(kn, "labels", labels, DType::U32)?;
    expect_shape(kn, "class_weights", class_weights, &[k])?;
    expect_dtype(kn, "class_weights", class_weights, DType::F32)?;
    expect_separate(kn, &[("loss", loss), ("dpred", dpred)], &[("labels", labels), ("class_weights", class_weights)])?;
    mse(device, pred, target, Some((labels, class_weights)), scale, loss, dpred)
}

fn mse(device: &Device, pred: &Tensor, target: &Tensor, weights: Option<(&Tensor, &Tensor)>, scale: f32, loss: &Tensor, dpred: &Tensor) -> Result<Dispatch> {
    let kn = "mean_squared_error";
    let (rows, k) = rows_and_k(kn, "pred", pred)?;
    expect_shape(kn, "target", target, &[rows, k])?;
    expect_shape(kn, "loss", loss, &[rows])?;
    expect_shape(kn, "dpred", dpred, &[rows, k])?;
    for (name, t) in [("pred", pred), ("target", target), ("loss", loss), ("dpred", dpred)] {
        expect_dtype(kn, name, t, DType::F32)?;
    }
    expect_separate(kn, &[("loss", loss), ("dpred", dpred)], &[("pred", pred), ("target", target)])?;
    // Unweighted, the kernel never reads bindings 2 and 7; `pred` fills them.
    let (labels, class_weights) = weights.unwrap_or((pred, pred));
    let mut d = launch(device, kn, rows, k, scale, 0.0, weights.is_some(), &[(1, pred), (2, labels), (3, target), (4, loss), (5, dpred), (7, class_weights)])?
        .tagged(if weights.is_some() { "weighted=yes" } else { "weighted=no" });
    if weights.is_none() {
        d.bytes -= 2.0 * pred.bytes() as f64; // the stand-ins are never read
    }
    Ok(d)
}
