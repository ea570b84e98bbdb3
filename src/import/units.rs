//! A model's weights as PyTorch sees them: one unit per module with weights (a convolution, a
//! BatchNorm, a linear layer), in the order of the flat layout, each with its tensors and the
//! permutation between convoy's layout and PyTorch's.

use crate::model::layout::Layout;
use crate::model::Sequential;
use crate::{bail, Result};

/// What kind of PyTorch module a unit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `nn.Conv2d`: convoy's `[kh, kw, in, filters]` kernel is PyTorch's `[filters, in, kh, kw]`.
    Conv,
    /// `nn.Conv2d` with `groups = channels`: convoy's `[kh, kw, c, m]` is PyTorch's `[c * m, 1, kh, kw]`.
    Depthwise,
    /// `nn.BatchNorm2d`: gamma, beta and the moving statistics, copied.
    BatchNorm,
    /// `nn.Linear`: convoy's `[in, out]` kernel is PyTorch's `[out, in]`.
    Linear,
}

/// The weights of one module, as indices into the layout's params and states.
#[derive(Clone, Debug)]
pub(crate) struct Unit {
    pub kind: Kind,
    /// The top-level layer that holds it.
    pub layer: usize,
    /// Whether it sits inside a residual block, and on its shortcut.
    pub in_block: bool,
    pub shortcut: bool,
    pub params: Vec<usize>,
    pub states: Vec<usize>,
}

/// Weighted classes a residual block's config may list, as they appear in the layout.
const WEIGHTED: [&str; 4] = ["Conv2D", "DepthwiseConv2D", "BatchNormalization", "Dense"];

/// The model's units in layout order. A layer whose weights have no PyTorch module here (a
/// LayerNormalization, a custom layer) is refused, naming it.
pub(crate) fn units(model: &Sequential, layout: &Layout) -> Result<Vec<Unit>> {
    let prefix = |name: &str| name.rsplit_once('/').map_or(String::new(), |(p, _)| p.to_string());
    let mut out: Vec<Unit> = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    for (i, e) in layout.params.iter().enumerate() {
        let p = prefix(&e.name);
        if prefixes.last() != Some(&p) {
            // `residual_3/conv2d_1` -> `conv2d`: the class of the (sub-)layer.
            let seg = p.rsplit('/').next().unwrap_or("");
            let base = seg.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches('_');
            let base = if base.is_empty() { seg } else { base };
            let kind = match base {
                "conv2d" => Kind::Conv,
                "depthwise_conv2d" => Kind::Depthwise,
                "batch_normalization" => Kind::BatchNorm,
                "dense" => Kind::Linear,
                _ => bail!(Config, "layer {p} ({}) has no PyTorch counterpart in the import's names", model.def.layers[e.layer].class_name()),
            };
            let layer = &model.def.layers[e.layer];
            let in_block = layer.class_name() == "Residual";
            // A block lists its main chain first: units past its weighted layers are the shortcut's.
            let main = layer.config()["main"].as_array().map_or(0, |m| m.iter().filter(|l| WEIGHTED.contains(&l["class_name"].as_str().unwrap_or(""))).count());
            let before = out.iter().filter(|u| u.layer == e.layer).count();
            out.push(Unit { kind, layer: e.layer, in_block, shortcut: in_block && before >= main, params: Vec::new(), states: Vec::new() });
            prefixes.push(p);
        }
        out.last_mut().expect("a unit was pushed").params.push(i);
    }
    for (i, e) in layout.states.iter().enumerate() {
        let p = prefix(&e.name);
        let Some(k) = prefixes.iter().position(|q| *q == p) else { bail!(Config, "moving statistic {} belongs to no layer with weights", e.name) };
        out[k].states.push(i);
    }
    Ok(out)
}

/// One tensor of a unit under its PyTorch name.
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub torch: String,
    /// An index into the layout's states (else its params).
    pub state: bool,
    pub index: usize,
    pub kind: Kind,
    /// Whether it is the unit's kernel (permuted) rather than a vector (copied).
    pub kernel: bool,
}

/// Every tensor of `units` under the module names `names` (one per unit): `.weight` and
/// `.bias`, and a BatchNorm's `.running_mean` and `.running_var`.
pub(crate) fn pairs(units: &[Unit], names: &[String]) -> Vec<Pair> {
    let mut out = Vec::new();
    for (u, name) in units.iter().zip(names) {
        let (param_names, state_names): (&[&str], &[&str]) = match u.kind {
            Kind::BatchNorm => (&["weight", "bias"], &["running_mean", "running_var"]),
            _ => (&["weight", "bias"], &[]),
        };
        for (k, &i) in u.params.iter().enumerate() {
            out.push(Pair { torch: format!("{name}.{}", param_names[k.min(1)]), state: false, index: i, kind: u.kind, kernel: k == 0 && u.kind != Kind::BatchNorm });
        }
        for (k, &i) in u.states.iter().enumerate() {
            out.push(Pair { torch: format!("{name}.{}", state_names.get(k).copied().unwrap_or("state")), state: true, index: i, kind: u.kind, kernel: false });
        }
    }
    out
}

impl Pair {
    /// PyTorch's shape of a tensor convoy holds as `shape`.
    pub fn torch_shape(&self, shape: &[usize]) -> Vec<usize> {
        match (self.kernel, self.kind, shape) {
            (true, Kind::Conv, &[kh, kw, i, o]) => vec![o, i, kh, kw],
            (true, Kind::Depthwise, &[kh, kw, c, m]) => vec![c * m, 1, kh, kw],
            (true, Kind::Linear, &[i, o]) => vec![o, i],
            _ => shape.to_vec(),
        }
    }

    /// The index in PyTorch's layout of each element of convoy's, for a tensor of convoy shape
    /// `shape`: `torch[perm[k]] = convoy[k]`.
    pub fn permutation(&self, shape: &[usize]) -> Vec<usize> {
        match (self.kernel, self.kind, shape) {
            (true, Kind::Conv, &[kh, kw, ci, co]) => index_map(&[kh, kw, ci, co], |[y, x, i, o]| ((o * ci + i) * kh + y) * kw + x),
            (true, Kind::Depthwise, &[kh, kw, c, m]) => index_map(&[kh, kw, c, m], |[y, x, ch, j]| ((ch * m + j) * kh + y) * kw + x),
            (true, Kind::Linear, &[i, o]) => index_map(&[i, o, 1, 1], |[a, b, _, _]| b * i + a),
            _ => (0..shape.iter().product()).collect(),
        }
    }
}

/// `f` of every index of a row-major 4-d `shape`, in order.
fn index_map(shape: &[usize; 4], f: impl Fn([usize; 4]) -> usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for a in 0..shape[0] {
        for b in 0..shape[1] {
            for c in 0..shape[2] {
                for d in 0..shape[3] {
                    out.push(f([a, b, c, d]));
                }
            }
        }
    }
    out
}
