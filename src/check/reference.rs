//! One training step of a whole model in f64, following the device's piecewise decisions.

use rayon::prelude::*;

use super::decisions::{check_structure, Decision};
use super::activation;
use super::net::{conv_geometry, depthwise_geometry, pool_geometry, spatial, Act, AxisKind, Net, Node};
use crate::kernels::augment::FillMode;
use super::ops::{self, Arith, Exact, Mixed, F32};
use crate::kernels::conv2d::Conv2dGeometry;
use crate::kernels::depthwise::DepthwiseGeometry;
use crate::kernels::winograd::Pass;
use crate::kernels::pool::Pool2dGeometry;
use crate::model::layout::Layout;
use crate::model::losses::Loss;
use crate::model::DTypePolicy;
use crate::{bail, Error, Result};

/// A unit whose f64 pre-activation lies within this fraction of its layer's RMS of the kink
/// is a tie: f32 rounding alone can put it on either side, so either decision is correct.
pub const TIE_THRESHOLD: f64 = 1e-5;

/// Deep models drift further from f64 than [`TIE_THRESHOLD`]: each layer's f32 rounding is
/// carried into the next, so by the fortieth layer of a ResNet-50 a pre-activation may be
/// several 1e-5 of its layer's RMS away from its f64 value. The device's output of an active
/// unit *is* its f32 pre-activation, so each layer shows its own drift (the largest
/// `|y - z|` over its active units), and a unit within `TIE_MARGIN` times that drift of
/// the kink is a tie too: rounding of the size this very layer shows could put it on
/// either side.
pub const TIE_MARGIN: f64 = 2.0;


/// Mismatches described per layer in [`KinkReport::mismatches`]; the rest are only counted,
/// so a device that is wrong everywhere yields a readable report.
const LISTED_PER_LAYER: usize = 8;

/// One step of the reference: everything the device's step produces, in f64.
#[derive(Clone, Debug)]
pub struct Step {
    /// `[batch, classes]`, row-major.
    pub logits: Vec<f64>,
    /// The loss of each sample (before the gradient scale).
    pub losses: Vec<f64>,
    /// One per `layout.params` entry, its `spec.len()` values: the gradient of
    /// `grad_scale * Σ losses`.
    pub grads: Vec<Vec<f64>>,
    /// The moving statistics after this step, one per `layout.states` entry.
    pub states: Vec<Vec<f64>>,
    /// How the device's decisions compare with the f64 pre-activations.
    pub kinks: KinkReport,
}

impl Step {
    /// The gradients in the flat layout (`layout.param_len` floats, zero padding), the
    /// layout `Sequential::compute_gradients` returns.
    pub fn flat_grads(&self, layout: &Layout) -> Vec<f64> {
        scatter(layout.param_len, &layout.params, &self.grads)
    }

    /// The moving statistics in the flat layout of `get_weights`' states.
    pub fn flat_states(&self, layout: &Layout) -> Vec<f64> {
        scatter(layout.state_len, &layout.states, &self.states)
    }
}

fn scatter(len: usize, entries: &[crate::model::layout::Entry], values: &[Vec<f64>]) -> Vec<f64> {
    let mut flat = vec![0.0; len];
    for (e, v) in entries.iter().zip(values) {
        flat[e.offset..e.offset + v.len()].copy_from_slice(v);
    }
    flat
}

/// The device's decisions against the f64 values they were taken on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KinkReport {
    /// Units within the tie threshold: ReLU inputs with `|z| <= 1e-5 · RMS`, max-pool
    /// windows whose two largest distinct values are that close.
    pub ties: usize,
    /// Ties where the device took the other side than f64 would (harmless: f32 rounding).
    pub flipped: usize,
    /// The largest drift of a ReLU layer's f32 pre-activations from f64 (over its active
    /// units, relative to its RMS; see [`TIE_MARGIN`])...
    pub drift: f64,
    /// ...and the layer it was in.
    pub drift_at: String,
    /// Decisions the device took against a clear f64 margin (a wrong kernel), counted...
    pub mismatch_count: usize,
    /// ...and the first few per layer described: layer, unit index, f64 value, layer RMS.
    pub mismatches: Vec<String>,
}

impl KinkReport {
    /// Whether every device decision was right or a tie.
    pub fn ok(&self) -> bool {
        self.mismatch_count == 0
    }

    pub(crate) fn mismatch(&mut self, listed: &mut usize, text: impl FnOnce() -> String) {
        self.mismatch_count += 1;
        if *listed < LISTED_PER_LAYER {
            self.mismatches.push(text());
        }
        *listed += 1;
    }
}

/// A batch-major f64 activation: `shape[0]` is the batch.
#[derive(Clone)]
struct T {
    shape: Vec<usize>,
    data: Vec<f64>,
}

/// What a node's forward keeps for its backward.
enum Rec {
    Conv { x: T, geom: Conv2dGeometry, p: usize, bias: bool },
    Depthwise { x: T, geom: DepthwiseGeometry, p: usize, bias: bool },
    Dense { x: T, p: usize, bias: bool },
    /// `frozen`: the inference transform's record (x_hat unused by its backward).
    BatchNorm { xhat: Vec<f64>, inv_std: Vec<f64>, mask: Option<Vec<bool>>, p: usize, frozen: bool },
    /// Per row of `c` channels, its inverse standard deviation.
    LayerNorm { xhat: Vec<f64>, inv_std: Vec<f64>, c: usize, p: usize },
    Relu { mask: Vec<bool> },
    /// Per output, the flat index into the input that its value came from.
    MaxPool { src: Vec<u32>, in_len: usize },
    /// Per output, the flat index into the input it copies, or `None` for a filled one.
    Gather { src: Vec<Option<usize>>, in_len: usize },
    AvgPool { geom: Pool2dGeometry },
    GlobalAvgPool { in_shape: Vec<usize> },
    /// Flatten and Identity: the gradient is dy unchanged.
    Pass,
    Residual { main: Vec<Rec>, shortcut: Vec<Rec>, join: Option<Vec<bool>> },
    /// A sum of `inputs` branches, masked by its fused ReLU if any.
    Add { inputs: usize, join: Option<Vec<bool>> },
    /// Per input, its width along the last axis.
    Concatenate { widths: Vec<usize> },
    /// An element-wise map: the gradient is `dy` times each unit's derivative.
    Scale { derivative: Vec<f64> },
    /// A softmax over rows of `k`, with its output.
    Softmax { y: Vec<f64>, k: usize },
    /// A node whose input (`x16`) or output (`y16`) the device stores as f16, and with them
    /// their gradients (mixed_float16 stores a gradient as its activation): the gradient
    /// arriving at the output and the one leaving for the input are rounded to f16.
    Stored { rec: Box<Rec>, x16: bool, y16: bool },
}

impl Rec {
    /// The record inside a [`Rec::Stored`], and whether its input and output are f16.
    fn stored(&self) -> (&Rec, bool, bool) {
        match self {
            Rec::Stored { rec, x16, y16 } => (rec, *x16, *y16),
            rec => (rec, false, false),
        }
    }
    /// `rec` marked with its storage, unmarked where nothing is f16.
    fn with_storage(rec: Rec, x16: bool, y16: bool) -> Rec {
        if x16 || y16 { Rec::Stored { rec: Box::new(rec), x16, y16 } } else { rec }
    }
}

/// The forward pass's mutable context: the moving statistics it updates and the report
/// (the weights are passed beside it, borrowed, while this is borrowed mutably).
struct Cx {
    states: Vec<Vec<f64>>,
    training: bool,
    next_param: usize,
    next_state: usize,
    kinks: KinkReport,
    /// The drift (absolute) of the last ReLU layer, whose output a max pool reads.
    drift: f64,
    /// The exact run's pre-activations, kept for the rounded run to measure its drift by.
    preacts: Preacts,
}

/// What `rectify` does with each ReLU layer's pre-activations besides masking them.
enum Preacts {
    /// Nothing: drift is the device's, measured on its active outputs.
    Off,
    /// Keeps them, in call order (the exact run of a pair).
    Record(Vec<Vec<f64>>),
    /// Measures drift against the exact run's (the rounded run of a pair).
    Compare { exact: Vec<Vec<f64>>, next: usize },
}

impl Cx {
    fn take_params(&mut self, n: usize) -> usize {
        self.next_param += n;
        self.next_param - n
    }
    fn take_states(&mut self, n: usize) -> usize {
        self.next_state += n;
        self.next_state - n
    }
}

/// Checks `layout` against what `net` expects and converts the flat f32 (or f64) tensors to
/// one f64 vector per entry.
fn unpack<P: Copy + Into<f64>>(what: &str, entries: &[crate::model::layout::Entry], expected: &[Vec<usize>], flat: &[P]) -> Result<Vec<Vec<f64>>> {
    if entries.len() != expected.len() {
        bail!(Config, "the net expects {} {what} tensors but the layout lists {}", expected.len(), entries.len());
    }
    entries
        .iter()
        .zip(expected)
        .map(|(e, shape)| {
            if &e.spec.shape != shape {
                bail!(Shape, "{what} `{}`: the net expects shape {shape:?}, the layout has {:?}", e.name, e.spec.shape);
            }
            let end = e.offset + e.spec.len();
            if end > flat.len() {
                bail!(Shape, "{what} `{}` ends at float {end} but the flat tensor has {}", e.name, flat.len());
            }
            Ok(flat[e.offset..end].iter().map(|&v| v.into()).collect())
        })
        .collect()
}

/// The normalised f64 input `(x / 255 - mean) / std` of u8 NHWC `images`.
fn input<A: Arith>(net: &Net, images: &[u8]) -> Result<T> {
    let sample: usize = net.input_shape.iter().product();
    if sample == 0 || images.is_empty() || !images.len().is_multiple_of(sample) {
        bail!(Shape, "{} image bytes are not a whole number of {:?} images", images.len(), net.input_shape);
    }
    let c = net.input_shape[2];
    let data = images.iter().enumerate().map(|(i, &b)| A::r(A::r(A::r(b as f64 / 255.0) - net.mean[i % c]) / net.std[i % c])).collect();
    let mut shape = vec![images.len() / sample];
    shape.extend_from_slice(&net.input_shape);
    Ok(T { shape, data })
}

/// What a forward pass leaves: the logits, the records for the backward, the weights in
/// f64, the context (moving statistics, report) and, when the reference decided itself,
/// its decisions.
struct Forward {
    logits: T,
    recs: Vec<Rec>,
    params: Vec<Vec<f64>>,
    cx: Cx,
    own: Option<Vec<Decision>>,
}

/// The forward pass in training mode (batch statistics) or inference (moving statistics);
/// with `decisions` the device's are followed, without them the reference decides itself
/// and returns what it decided.
#[allow(clippy::too_many_arguments)]
fn run_forward<A: Arith, P: Copy + Into<f64>>(
    net: &Net,
    layout: &Layout,
    params: &[P],
    states: &[P],
    images: &[u8],
    decisions: Option<&[Decision]>,
    training: bool,
    preacts: Preacts,
) -> Result<Forward> {
    let params = unpack("parameter", &layout.params, &net.param_shapes()?, params)?;
    let states = unpack("state", &layout.states, &net.state_shapes()?, states)?;
    if let Some(d) = decisions {
        check_structure(&net.nodes, d, "decisions")?;
    }
    let x = input::<A>(net, images)?;
    let mut cx = Cx { states, training, next_param: 0, next_state: 0, kinks: KinkReport::default(), drift: 0.0, preacts };
    let (logits, recs, own) = forward_graph::<A>(&params, &mut cx, net, decisions, x)?;
    Ok(Forward { logits, recs, params, cx, own })
}

/// Runs the model's nodes in order, each on the outputs it reads ([`Net::inputs_of`]); a
/// stack is the graph where each node reads the one before.
fn forward_graph<A: Arith>(w: &[Vec<f64>], cx: &mut Cx, net: &Net, decisions: Option<&[Decision]>, x: T) -> Result<(T, Vec<Rec>, Option<Vec<Decision>>)> {
    let mut slots: Vec<Option<T>> = vec![None; net.nodes.len() + 1];
    slots[0] = Some(x);
    let mut recs: Vec<Rec> = Vec::with_capacity(net.nodes.len());
    let mut own = decisions.is_none().then(Vec::new);
    for (k, node) in net.nodes.iter().enumerate() {
        let from = net.inputs_of(k);
        let mut xs: Vec<T> = Vec::with_capacity(from.len());
        for &j in &from {
            match &slots[j] {
                Some(t) if j < k + 1 => xs.push(t.clone()),
                _ => bail!(Config, "{}: node {k} reads node {j}, which is not before it", net.names[k]),
            }
        }
        let dec = decisions.map(|d| &d[k]);
        let (y, rec, taken) = match node {
            Node::Add { relu } => {
                // Each input, and each partial sum, as the device stores them.
                let x16 = xs.iter_mut().fold(false, |any, x| store::<A>(x) | any);
                let mut y = xs[0].clone();
                let mut y16 = x16;
                for b in &xs[1..] {
                    if b.shape != y.shape {
                        bail!(Shape, "{}: Add of shapes {:?} and {:?}", net.names[k], y.shape, b.shape);
                    }
                    y.data.par_iter_mut().zip(&b.data).for_each(|(a, b)| *a = A::r(*a + b));
                    y16 = store::<A>(&mut y);
                }
                let (join, taken) = if *relu {
                    let device = match dec {
                        Some(Decision::Relu(v)) => Some(&v[..]),
                        None => None,
                        Some(other) => bail!(Config, "{}: an Add with a fused ReLU needs its output, got {other:?}", net.names[k]),
                    };
                    let (mask, taken) = rectify(cx, &net.names[k], &mut y.data, device)?;
                    (Some(mask), taken)
                } else {
                    (None, decisions.is_none().then_some(Decision::None))
                };
                (y, Rec::with_storage(Rec::Add { inputs: xs.len(), join }, x16, y16), taken)
            }
            Node::Concatenate => {
                let rows = xs[0].data.len() / xs[0].shape.last().copied().unwrap_or(1).max(1);
                let widths: Vec<usize> = xs.iter().map(|t| t.shape.last().copied().unwrap_or(0)).collect();
                let mut shape = xs[0].shape.clone();
                *shape.last_mut().unwrap_or(&mut 0) = widths.iter().sum();
                let mut data = Vec::with_capacity(rows * widths.iter().sum::<usize>());
                for r in 0..rows {
                    for (t, &wd) in xs.iter().zip(&widths) {
                        data.extend_from_slice(&t.data[r * wd..(r + 1) * wd]);
                    }
                }
                (T { shape, data }, Rec::Concatenate { widths }, decisions.is_none().then_some(Decision::None))
            }
            _ => {
                let x = xs.pop().expect("a node reads one input");
                // Whether the device holds the input as f16: its producer stored it so, or
                // the plan normalised the image into padded f16.
                let x16 = if from[0] == 0 { A::F16_STORAGE && net.image_padded() } else { recs[from[0] - 1].stored().2 };
                forward_node::<A>(w, cx, node, &net.names[k], dec, x16, x)?
            }
        };
        if let (Some(own), Some(taken)) = (own.as_mut(), taken) {
            own.push(taken);
        }
        recs.push(rec);
        slots[k + 1] = Some(y);
    }
    let logits = slots.pop().flatten().ok_or_else(|| Error::Config("the net has no nodes".into()))?;
    Ok((logits, recs, own))
}

/// The graph's records backwards from the logits' gradient: each node's input gradients are
/// summed into the nodes it read (left to right, as the device sums them); the input's is
/// never formed.
fn backward_graph<A: Arith>(w: &[Vec<f64>], net: &Net, recs: &[Rec], dlogits: Vec<f64>, grads: &mut [Vec<f64>]) {
    let n = recs.len();
    let mut dys: Vec<Option<Vec<f64>>> = vec![None; n + 1];
    dys[n] = Some(dlogits);
    // Whether node j's output (slot j + 1) is stored as f16, and its gradient with it.
    let y16 = |slot: usize| slot > 0 && recs[slot - 1].stored().2;
    for k in (0..n).rev() {
        let Some(mut dy) = dys[k + 1].take() else { continue };
        let from = net.inputs_of(k);
        let need_dx = from.iter().any(|&j| j != 0);
        // A merge is run here, every other node by `backward_node`, whose `Rec::Stored` arm
        // rounds its gradients. (A merge's inputs are stored as its output: its input
        // gradients, copies of dy, round with it.)
        let dxs: Vec<Option<Vec<f64>>> = match recs[k].stored().0 {
            Rec::Add { inputs, join } => {
                if y16(k + 1) {
                    round_all(&mut dy);
                }
                if let Some(mask) = join {
                    dy.par_iter_mut().zip(mask).for_each(|(g, &m)| *g = if m { *g } else { 0.0 });
                }
                vec![Some(dy); *inputs]
            }
            Rec::Concatenate { widths } => {
                let total: usize = widths.iter().sum();
                let rows = dy.len() / total.max(1);
                let mut offset = 0;
                widths
                    .iter()
                    .map(|&wd| {
                        let part = (0..rows).flat_map(|r| dy[r * total + offset..r * total + offset + wd].iter().copied()).collect();
                        offset += wd;
                        Some(part)
                    })
                    .collect()
            }
            _ => vec![backward_node::<A>(w, &recs[k], dy, need_dx, grads)],
        };
        for (&j, dx) in from.iter().zip(dxs) {
            let (true, Some(mut dx)) = (j != 0, dx) else { continue };
            // A gradient reaching an f16 node from a reader that kept f32 is cast there.
            if y16(j) {
                round_all(&mut dx);
            }
            dys[j] = Some(match dys[j].take() {
                None => dx,
                Some(mut prev) => {
                    prev.par_iter_mut().zip(&dx).for_each(|(a, b)| *a = A::r(*a + b));
                    if y16(j) {
                        round_all(&mut prev);
                    }
                    prev
                }
            });
        }
    }
}

/// Runs `nodes` in order on `x`; `names` label them in reports.
fn forward_chain<A: Arith>(w: &[Vec<f64>], cx: &mut Cx, nodes: &[Node], names: &[String], decisions: Option<&[Decision]>, mut x16: bool, mut x: T) -> Result<(T, Vec<Rec>, Option<Vec<Decision>>)> {
    let mut recs = Vec::with_capacity(nodes.len());
    let mut own = decisions.is_none().then(Vec::new);
    for (i, node) in nodes.iter().enumerate() {
        let (y, rec, taken) = forward_node::<A>(w, cx, node, &names[i], decisions.map(|d| &d[i]), x16, x)?;
        x16 = rec.stored().2;
        if let (Some(own), Some(taken)) = (own.as_mut(), taken) {
            own.push(taken);
        }
        recs.push(rec);
        x = y;
    }
    Ok((x, recs, own))
}

/// The decisions of a residual block's main chain (or shortcut), when the device's are followed.
fn sub_decision(d: Option<&Decision>, main: bool) -> Result<Option<&[Decision]>> {
    match d {
        None => Ok(None),
        Some(Decision::Residual { main: m, shortcut: s, .. }) => Ok(Some(if main { m } else { s })),
        Some(other) => bail!(Config, "a residual block got a {other:?} decision"),
    }
}

/// The Winograd tile the device computes `geom`'s forward and input gradient with, where
/// the arithmetic `A` models it (see `Arith::WINOGRAD`).
fn winograd_tile<A: Arith>(geom: &Conv2dGeometry) -> Result<Option<usize>> {
    if !A::WINOGRAD {
        return Ok(None);
    }
    crate::kernels::winograd::automatic(geom, false)
}

/// Rounds `t` to f16 where the arithmetic stores activations so (`Arith::F16_STORAGE`) and
/// its channels are whole quads: what the device's f16 tensors hold under mixed_float16.
fn store<A: Arith>(t: &mut T) -> bool {
    let f16 = A::F16_STORAGE && t.shape.last().is_some_and(|c| c % 4 == 0);
    if f16 {
        round_all(&mut t.data);
    }
    f16
}

fn round_all(v: &mut [f64]) {
    v.par_iter_mut().for_each(|v| *v = ops::round_f16(*v));
}

/// One node's forward; returns its output, its record and (deciding itself) its decision.
/// A node that stores f16 ([`Node::stores_f16`]) reads its input and writes its output
/// rounded as the device stores them; one that keeps its input's storage
/// ([`Node::keeps_input_storage`]) rounds its output where its input (`x16`) is f16.
#[allow(clippy::too_many_arguments)]
fn forward_node<A: Arith>(w: &[Vec<f64>], cx: &mut Cx, node: &Node, name: &str, dec: Option<&Decision>, x16: bool, mut x: T) -> Result<(T, Rec, Option<Decision>)> {
    if A::F16_STORAGE && node.keeps_input_storage() {
        let (mut y, rec, taken) = forward_node_as::<A>(w, cx, node, name, dec, x)?;
        if x16 {
            round_all(&mut y.data);
        }
        return Ok((y, Rec::with_storage(rec, x16, x16), taken));
    }
    if !node.stores_f16() {
        return forward_node_as::<A>(w, cx, node, name, dec, x);
    }
    // A convolution writes f16 only from an f16 input (see `Conv2D::forward`), the image
    // padded to whole quads of f16 channels included (`x16` from the caller, see
    // `Net::image_padded`): its values rounded as the device normalises them.
    let padded = x16 && matches!(node, Node::Conv2D { .. }) && x.shape.last().is_some_and(|c| c % 4 != 0);
    if padded {
        round_all(&mut x.data);
    }
    let x16 = padded || store::<A>(&mut x);
    let (mut y, rec, taken) = forward_node_as::<A>(w, cx, node, name, dec, x)?;
    let y16 = (x16 || !matches!(node, Node::Conv2D { .. })) && store::<A>(&mut y);
    Ok((y, Rec::with_storage(rec, x16, y16), taken))
}

fn forward_node_as<A: Arith>(w: &[Vec<f64>], cx: &mut Cx, node: &Node, name: &str, dec: Option<&Decision>, x: T) -> Result<(T, Rec, Option<Decision>)> {
    let own = dec.is_none();
    let none = || own.then_some(Decision::None);
    let batch = x.shape[0];
    Ok(match node {
        Node::Conv2D { use_bias, .. } => {
            let geom = conv_geometry(node, batch, &x.shape[1..])?;
            let p = cx.take_params(1 + *use_bias as usize);
            let y = match winograd_tile::<A>(&geom)? {
                Some(m) => {
                    // The device adds the bias after the convolution.
                    let mut y = super::winograd::convolve::<A>(&geom, Pass::Forward, m, &x.data, &w[p]);
                    if *use_bias {
                        y.iter_mut().enumerate().for_each(|(i, v)| *v = A::r(*v + w[p + 1][i % geom.filters]));
                    }
                    y
                }
                None => ops::conv_forward::<A>(&geom, &x.data, &w[p], use_bias.then(|| &w[p + 1][..])),
            };
            (T { shape: geom.output_shape(), data: y }, Rec::Conv { x, geom, p, bias: *use_bias }, none())
        }
        Node::DepthwiseConv2D { use_bias, .. } => {
            let geom = depthwise_geometry(node, batch, &x.shape[1..])?;
            let p = cx.take_params(1 + *use_bias as usize);
            let y = ops::depthwise_forward::<A>(&geom, &x.data, &w[p], use_bias.then(|| &w[p + 1][..]));
            (T { shape: geom.output_shape(), data: y }, Rec::Depthwise { x, geom, p, bias: *use_bias }, none())
        }
        Node::Dense { units, use_bias } => {
            let inputs = x.shape[1..].iter().product();
            let p = cx.take_params(1 + *use_bias as usize);
            let y = ops::dense_forward::<A>(&x.data, inputs, &w[p], *units, use_bias.then(|| &w[p + 1][..]));
            (T { shape: vec![batch, *units], data: y }, Rec::Dense { x, p, bias: *use_bias }, none())
        }
        Node::BatchNorm { momentum, epsilon, relu, frozen } => {
            let p = cx.take_params(2);
            let s = cx.take_states(2);
            let c = *x.shape.last().unwrap();
            let rows = x.data.len() / c;
            let (mean, inv_std) = if cx.training && !frozen {
                let mean: Vec<f64> = ops::col_sums::<A>(rows, c, |i| x.data[i]).into_iter().map(|v| A::r(v / rows as f64)).collect();
                // Biased, as the device normalises with and feeds to the moving variance.
                let var: Vec<f64> = ops::col_sums::<A>(rows, c, |i| A::r(x.data[i] - mean[i % c]).powi(2)).into_iter().map(|v| A::r(v / rows as f64)).collect();
                for k in 0..c {
                    cx.states[s][k] = momentum * cx.states[s][k] + (1.0 - momentum) * mean[k];
                    cx.states[s + 1][k] = momentum * cx.states[s + 1][k] + (1.0 - momentum) * var[k];
                }
                (mean, var.iter().map(|v| A::r(1.0 / A::r(A::r(v + epsilon).sqrt()))).collect::<Vec<_>>())
            } else {
                (cx.states[s].clone(), cx.states[s + 1].iter().map(|v| A::r(1.0 / A::r(A::r(v + epsilon).sqrt()))).collect())
            };
            let mut xhat = x.data;
            xhat.par_iter_mut().enumerate().for_each(|(i, v)| *v = A::r(A::r(*v - mean[i % c]) * inv_std[i % c]));
            let (gamma, beta) = (&w[p], &w[p + 1]);
            let mut y: Vec<f64> = xhat.par_iter().enumerate().map(|(i, v)| A::r(A::r(gamma[i % c] * v) + beta[i % c])).collect();
            let (mask, taken) = if *relu {
                let device = match dec {
                    Some(Decision::Relu(d)) => Some(&d[..]),
                    None => None,
                    Some(other) => bail!(Config, "{name}: BatchNorm with a fused ReLU got a {other:?} decision"),
                };
                let (mask, taken) = rectify(cx, name, &mut y, device)?;
                (Some(mask), taken)
            } else {
                (None, none())
            };
            (T { shape: x.shape, data: y }, Rec::BatchNorm { xhat, inv_std, mask, p, frozen: *frozen }, taken)
        }
        Node::LayerNorm { epsilon } => {
            let p = cx.take_params(2);
            let c = *x.shape.last().unwrap();
            let (gamma, beta) = (&w[p], &w[p + 1]);
            // Two passes per row, as the device: the mean, then the squared deviations.
            let (mean, inv_std): (Vec<f64>, Vec<f64>) = x
                .data
                .par_chunks(c)
                .map(|row| {
                    let mean = A::r(row.iter().fold(0.0, |s, v| A::r(s + v)) / c as f64);
                    let var = A::r(row.iter().fold(0.0, |s, v| A::r(s + A::r(v - mean).powi(2))) / c as f64);
                    (mean, A::r(1.0 / A::r(A::r(var + epsilon).sqrt())))
                })
                .unzip();
            let mut xhat = x.data;
            xhat.par_chunks_mut(c).zip(mean.par_iter().zip(&inv_std)).for_each(|(row, (mean, inv))| {
                row.iter_mut().for_each(|v| *v = A::r(A::r(*v - mean) * inv));
            });
            let y: Vec<f64> = xhat.par_iter().enumerate().map(|(i, v)| A::r(A::r(gamma[i % c] * v) + beta[i % c])).collect();
            (T { shape: x.shape, data: y }, Rec::LayerNorm { xhat, inv_std, c, p }, none())
        }
        Node::ReLU => {
            let device = match dec {
                Some(Decision::Relu(d)) => Some(&d[..]),
                None => None,
                Some(other) => bail!(Config, "{name}: ReLU got a {other:?} decision"),
            };
            let mut y = x.data;
            let (mask, taken) = rectify(cx, name, &mut y, device)?;
            (T { shape: x.shape, data: y }, Rec::Relu { mask }, taken)
        }
        Node::MaxPool { pool, strides, padding } => {
            let geom = pool_geometry(batch, &x.shape[1..], *pool, *strides, *padding)?;
            let device = match dec {
                Some(Decision::MaxPool(d)) => Some(crate::kernels::pool::argmax_positions(&geom, d)?),
                None => None,
                Some(other) => bail!(Config, "{name}: MaxPool got a {other:?} decision"),
            };
            let (y, src, taken) = max_pool(cx, name, &geom, &x.data, device.as_deref())?;
            (T { shape: geom.output_shape().to_vec(), data: y }, Rec::MaxPool { src, in_len: x.data.len() }, taken)
        }
        Node::AvgPool { pool, strides, padding } => {
            let geom = pool_geometry(batch, &x.shape[1..], *pool, *strides, *padding)?;
            let y = avg_pool::<A>(&geom, &x.data);
            (T { shape: geom.output_shape().to_vec(), data: y }, Rec::AvgPool { geom }, none())
        }
        Node::GlobalAvgPool => {
            let [h, wd, c] = spatial("GlobalAveragePooling2D", &x.shape[1..])?;
            let hw = h * wd;
            let mut y = vec![0.0; batch * c];
            y.par_chunks_mut(c).enumerate().for_each(|(b, out)| {
                for px in x.data[b * hw * c..(b + 1) * hw * c].chunks_exact(c) {
                    ops::axpy::<A>(out, 1.0, px);
                }
                out.iter_mut().for_each(|v| *v = A::r(*v / hw as f64));
            });
            (T { shape: vec![batch, c], data: y }, Rec::GlobalAvgPool { in_shape: x.shape }, none())
        }
        Node::Flatten => {
            let n = x.data.len() / batch.max(1);
            (T { shape: vec![batch, n], data: x.data }, Rec::Pass, none())
        }
        Node::Identity => (x, Rec::Pass, none()),
        Node::Add { .. } | Node::Concatenate => bail!(Config, "{name}: a merge layer inside a residual chain (merges join a functional model's branches)"),
        Node::Activation(Act::Rectifier { max_value, negative_slope }) => {
            let device = match dec {
                Some(Decision::Relu(d)) => Some(&d[..]),
                None => None,
                Some(other) => bail!(Config, "{name}: a capped or leaky ReLU got a {other:?} decision"),
            };
            let mut y = x.data;
            let (derivative, taken) = activation::rectifier(&mut cx.kinks, &mut cx.drift, name, &mut y, (*max_value, *negative_slope), device)?;
            y.iter_mut().for_each(|v| *v = A::r(*v));
            (T { shape: x.shape, data: y }, Rec::Scale { derivative }, taken)
        }
        Node::Activation(act) => {
            let (y, derivative): (Vec<f64>, Vec<f64>) = x.data.par_iter().map(|&v| activation::smooth(*act, v).map_or((v, 1.0), |(y, d)| (A::r(y), d))).unzip();
            (T { shape: x.shape, data: y }, Rec::Scale { derivative }, none())
        }
        Node::Softmax => {
            let k = *x.shape.last().unwrap_or(&1);
            let y: Vec<f64> = activation::softmax(&x.data, k.max(1)).into_iter().map(A::r).collect();
            (T { shape: x.shape, data: y.clone() }, Rec::Softmax { y, k }, none())
        }
        Node::GlobalMaxPool { keepdims } => {
            let [h, wd, c] = spatial("GlobalMaxPooling2D", &x.shape[1..])?;
            let geom = Pool2dGeometry::new(&[batch, h, wd, c], [h, wd], None, crate::kernels::pool::PoolPadding::Valid)?;
            let device = match dec {
                Some(Decision::MaxPool(d)) => Some(crate::kernels::pool::argmax_positions(&geom, d)?),
                None => None,
                Some(other) => bail!(Config, "{name}: GlobalMaxPooling2D got a {other:?} decision"),
            };
            let (y, src, taken) = max_pool(cx, name, &geom, &x.data, device.as_deref())?;
            let shape = if *keepdims { vec![batch, 1, 1, c] } else { vec![batch, c] };
            (T { shape, data: y }, Rec::MaxPool { src, in_len: x.data.len() }, taken)
        }
        Node::Augment { crop, y: ky, x: kx, fill, fill_value } => {
            let [h, wd, c] = spatial("an augmentation", &x.shape[1..])?;
            let (oh, ow) = crop.unwrap_or((h, wd));
            let draws = match dec {
                Some(Decision::Augment(d)) if d.len() == batch * 4 => d.clone(),
                Some(Decision::Augment(d)) => bail!(Shape, "{name}: the device drew {} values for {batch} samples, not 4 each", d.len()),
                Some(other) => bail!(Config, "{name}: an augmentation got a {other:?} decision"),
                None => own_draws(batch, (h, wd), (oh, ow), *ky, *kx, cx.training),
            };
            let (y, src) = gather(&x.data, [batch, h, wd, c], (oh, ow), &draws, *fill, *fill_value);
            let taken = own.then_some(Decision::Augment(draws));
            (T { shape: vec![batch, oh, ow, c], data: y }, Rec::Gather { src, in_len: x.data.len() }, taken)
        }
        Node::ChannelMap { scale, offset } => {
            let c = *x.shape.last().unwrap_or(&1);
            let pick = |t: &[f64], i: usize| t[i % c % t.len()];
            let y = x.data.par_iter().enumerate().map(|(i, v)| A::r(A::r(v * pick(scale, i)) + pick(offset, i))).collect();
            let derivative = (0..x.data.len()).map(|i| pick(scale, i)).collect();
            (T { shape: x.shape, data: y }, Rec::Scale { derivative }, none())
        }
        Node::Residual { main, shortcut, relu } => {
            let names = |chain: &str, n: usize| (0..n).map(|i| format!("{name}/{chain}[{i}]")).collect::<Vec<_>>();
            let short_in = T { shape: x.shape.clone(), data: x.data.clone() };
            // The block reads x in its own storage (see `forward_node`).
            let x16 = A::F16_STORAGE && x.shape.last().is_some_and(|c| c % 4 == 0);
            let (mut y, main_recs, main_own) = forward_chain::<A>(w, cx, main, &names("main", main.len()), sub_decision(dec, true)?, x16, x)?;
            let (s, short_recs, short_own) = forward_chain::<A>(w, cx, shortcut, &names("shortcut", shortcut.len()), sub_decision(dec, false)?, x16, short_in)?;
            if y.shape != s.shape {
                bail!(Shape, "{name}: main path gives {:?} but the shortcut gives {:?}", y.shape, s.shape);
            }
            // The join reads both ends in its own storage.
            let mut s = s;
            store::<A>(&mut y);
            store::<A>(&mut s);
            y.data.par_iter_mut().zip(&s.data).for_each(|(a, b)| *a = A::r(*a + b));
            let (join, join_own) = if *relu {
                let device = match dec {
                    Some(Decision::Residual { join: Some(j), .. }) => Some(&j[..]),
                    None => None,
                    Some(other) => bail!(Config, "{name}: a residual block with a fused ReLU needs a join output, got {other:?}"),
                };
                let (mask, taken) = rectify(cx, &format!("{name}/join"), &mut y.data, device)?;
                let taken = match taken {
                    Some(Decision::Relu(v)) => Some(v),
                    _ => None,
                };
                (Some(mask), taken)
            } else {
                (None, None)
            };
            let taken = own.then(|| Decision::Residual { main: main_own.unwrap_or_default(), shortcut: short_own.unwrap_or_default(), join: join_own });
            (y, Rec::Residual { main: main_recs, shortcut: short_recs, join }, taken)
        }
    })
}

/// The draws the reference takes itself: in training a fixed pattern that differs between
/// samples and axes (finite differences need the same draws at every evaluation), in
/// inference the identity or a crop's centre window.
fn own_draws(batch: usize, (h, w): (usize, usize), (oh, ow): (usize, usize), ky: AxisKind, kx: AxisKind, training: bool) -> Vec<i32> {
    let axis = |kind: AxisKind, n: usize, out: usize, b: usize, k: usize| -> [i32; 2] {
        if !training {
            return [1, ((n - out) / 2) as i32];
        }
        match kind {
            AxisKind::Keep => [1, 0],
            AxisKind::Flip if (b >> k) & 1 == 1 => [-1, n as i32 - 1],
            AxisKind::Flip => [1, 0],
            AxisKind::Offset => [1, ((b * 7 + 3 * k) % (n - out + 1)) as i32],
            AxisKind::Shift { lower, upper } => {
                let (lo, hi) = ((lower * n as f64).round() as i64, (upper * n as f64).round() as i64);
                [1, -(lo + (b as i64 * 5 + k as i64).rem_euclid(hi - lo + 1)) as i32]
            }
        }
    };
    (0..batch).flat_map(|b| [axis(ky, h, oh, b, 0), axis(kx, w, ow, b, 1)].concat()).collect()
}

/// The input index that index `i` of an `n`-pixel axis reads under `fill` (Keras'
/// definitions of the modes); `None`: the fill value.
fn fill_index(i: i64, n: i64, fill: FillMode) -> Option<usize> {
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    match fill {
        FillMode::Constant => None,
        // (d c b a | a b c d | d c b a)
        FillMode::Reflect => {
            let m = i.rem_euclid(2 * n);
            Some(if m < n { m } else { 2 * n - 1 - m } as usize)
        }
        FillMode::Wrap => Some(i.rem_euclid(n) as usize),
        FillMode::Nearest => Some(i.clamp(0, n - 1) as usize),
    }
}

/// `y[b, i, j, c] = x[b, a_y * i + t_y, a_x * j + t_x, c]` under the fill rule, and per output
/// the input index it copied.
#[allow(clippy::type_complexity)]
fn gather(x: &[f64], [batch, h, w, c]: [usize; 4], (oh, ow): (usize, usize), draws: &[i32], fill: FillMode, fill_value: f64) -> (Vec<f64>, Vec<Option<usize>>) {
    let mut src = Vec::with_capacity(batch * oh * ow * c);
    for b in 0..batch {
        let d = &draws[b * 4..b * 4 + 4];
        for i in 0..oh {
            let sy = fill_index(d[0] as i64 * i as i64 + d[1] as i64, h as i64, fill);
            for j in 0..ow {
                let sx = fill_index(d[2] as i64 * j as i64 + d[3] as i64, w as i64, fill);
                for ch in 0..c {
                    src.push(sy.zip(sx).map(|(sy, sx)| ((b * h + sy) * w + sx) * c + ch));
                }
            }
        }
    }
    (src.iter().map(|s| s.map_or(fill_value, |k| x[k])).collect(), src)
}

/// Applies a ReLU to `z` in place with the device's mask (`device[i] > 0`) or, without one,
/// its own (`z > 0`), and reports ties, flips and mismatches of the device's mask.
fn rectify(cx: &mut Cx, name: &str, z: &mut [f64], device: Option<&[f32]>) -> Result<(Vec<bool>, Option<Decision>)> {
    let Some(device) = device else {
        let mask: Vec<bool> = z.iter().map(|&v| v > 0.0).collect();
        z.iter_mut().for_each(|v| *v = v.max(0.0));
        // A positive f64 below f32's range must still read as active.
        let y = z.iter().map(|&v| if v > 0.0 { (v as f32).max(f32::MIN_POSITIVE) } else { 0.0 }).collect();
        return Ok((mask, Some(Decision::Relu(y))));
    };
    if device.len() != z.len() {
        bail!(Shape, "{name}: the device's ReLU output has {} values, the layer {}", device.len(), z.len());
    }
    let rms = (z.par_iter().map(|v| v * v).sum::<f64>() / z.len().max(1) as f64).sqrt();
    // The device's output of an active unit is its f32 pre-activation; a rounded run
    // compares its own pre-activations with the exact run's instead.
    let exact = match &mut cx.preacts {
        Preacts::Off => None,
        Preacts::Record(kept) => {
            kept.push(z.to_vec());
            None
        }
        Preacts::Compare { exact, next } => {
            *next += 1;
            match exact.get(*next - 1).filter(|e| e.len() == z.len()) {
                Some(e) => Some(e),
                None => bail!(Shape, "{name}: the rounded run reached a ReLU the exact run did not"),
            }
        }
    };
    let drift = match exact {
        None => z.par_iter().zip(device).filter(|(_, d)| **d > 0.0).map(|(z, d)| (*d as f64 - z).abs()).reduce(|| 0.0, f64::max),
        Some(e) => z.par_iter().zip(e).zip(device).filter(|(_, d)| **d > 0.0).map(|((z, e), _)| (z - e).abs()).reduce(|| 0.0, f64::max),
    };
    let relative = if rms > 0.0 { drift / rms } else { 0.0 };
    if relative > cx.kinks.drift || cx.kinks.drift_at.is_empty() {
        (cx.kinks.drift, cx.kinks.drift_at) = (relative, name.to_string());
    }
    cx.drift = drift;
    let thr = (TIE_THRESHOLD * rms).max(TIE_MARGIN * drift);
    let mut listed = 0;
    let mut mask = Vec::with_capacity(z.len());
    for (i, (v, &d)) in z.iter_mut().zip(device).enumerate() {
        let (active, f64_active) = (d > 0.0, *v > 0.0);
        if v.abs() <= thr {
            cx.kinks.ties += 1;
            cx.kinks.flipped += (active != f64_active) as usize;
        } else if active != f64_active {
            let z = *v;
            cx.kinks.mismatch(&mut listed, || {
                format!("{name}: unit {i}: f64 pre-activation {z:.6e} (layer RMS {rms:.3e}) but the device's output {d:e} is {}", if active { "active" } else { "inactive" })
            });
        }
        // The device's side is followed even against a clear margin, so one wrong unit
        // does not hide how the rest of the model compares.
        if !active {
            *v = 0.0;
        }
        mask.push(active);
    }
    Ok((mask, None))
}

/// The input rows (or columns) `[lo, hi)` of pooling window `o`, clipped to the input.
fn window(o: usize, stride: usize, pad: usize, pool: usize, size: usize) -> (usize, usize) {
    let start = (o * stride) as isize - pad as isize;
    (start.max(0) as usize, (start + pool as isize).clamp(0, size as isize) as usize)
}

/// Max pooling taking each window's value from the device's chosen position; reports
/// choices against the f64 window maximum. A choice outside its window (which no correct
/// kernel makes, and whose gradient the device's backward would drop) is a mismatch, and
/// the f64 maximum is used in its place.
fn max_pool(cx: &mut Cx, name: &str, g: &Pool2dGeometry, x: &[f64], device: Option<&[u32]>) -> Result<(Vec<f64>, Vec<u32>, Option<Decision>)> {
    let n = g.batch * g.out_h * g.out_w * g.channels;
    if let Some(d) = device
        && d.len() != n
    {
        bail!(Shape, "{name}: the device's max-pool choices have {} values, the layer has {n} outputs", d.len());
    }
    let rms = (x.par_iter().map(|v| v * v).sum::<f64>() / x.len().max(1) as f64).sqrt();
    // The pool's input is the last ReLU's output, carrying that layer's drift.
    let thr = (TIE_THRESHOLD * rms).max(TIE_MARGIN * cx.drift);
    let (mut y, mut src) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut own = device.is_none().then(|| Vec::with_capacity(n));
    let mut listed = 0;
    let at = |b: usize, h: usize, w: usize, c: usize| ((b * g.in_h + h) * g.in_w + w) * g.channels + c;
    for o in 0..n {
        let c = o % g.channels;
        let ow = (o / g.channels) % g.out_w;
        let oh = (o / (g.channels * g.out_w)) % g.out_h;
        let b = o / (g.channels * g.out_w * g.out_h);
        let (h_lo, h_hi) = window(oh, g.stride_h, g.pad_top, g.pool_h, g.in_h);
        let (w_lo, w_hi) = window(ow, g.stride_w, g.pad_left, g.pool_w, g.in_w);
        // The f64 maximum (first in row-major window order, as the device breaks exact ties)
        // and the largest value strictly below it.
        let (mut best, mut arg, mut second) = (f64::NEG_INFINITY, None, f64::NEG_INFINITY);
        for h in h_lo..h_hi {
            for w in w_lo..w_hi {
                let v = x[at(b, h, w, c)];
                if arg.is_none() || v > best {
                    second = if arg.is_some() { best } else { second };
                    best = v;
                    arg = Some((h, w));
                } else if v < best && v > second {
                    second = v;
                }
            }
        }
        let Some((ah, aw)) = arg else {
            bail!(Shape, "{name}: pooling window {o} covers no input position");
        };
        let chosen = match device {
            None => (ah, aw),
            Some(d) => {
                let pos = d[o] as usize;
                let (h, w) = (pos / g.in_w, pos % g.in_w);
                if best - second <= thr {
                    cx.kinks.ties += 1;
                }
                if !(h_lo..h_hi).contains(&h) || !(w_lo..w_hi).contains(&w) {
                    cx.kinks.mismatch(&mut listed, || {
                        format!("{name}: output {o}: the device took position {pos}, outside its window rows {h_lo}..{h_hi} columns {w_lo}..{w_hi}")
                    });
                    (ah, aw)
                } else {
                    let v = x[at(b, h, w, c)];
                    // The exact maximum at another position (equal values) is agreement.
                    if v != best {
                        if best - v <= thr {
                            cx.kinks.flipped += 1;
                        } else {
                            cx.kinks.mismatch(&mut listed, || {
                                format!(
                                    "{name}: output {o}: the device took position {pos} holding {v:.6e}, the window's f64 maximum is {best:.6e} at {} (layer RMS {rms:.3e})",
                                    ah * g.in_w + aw
                                )
                            });
                        }
                    }
                    (h, w)
                }
            }
        };
        let i = at(b, chosen.0, chosen.1, c);
        y.push(x[i]);
        src.push(i as u32);
        if let Some(own) = own.as_mut() {
            own.push((chosen.0 * g.in_w + chosen.1) as u32);
        }
    }
    Ok((y, src, own.map(Decision::MaxPool)))
}

/// What average pooling divides a window of `rows x cols` input positions by: those
/// positions, or with explicit padding the whole window (padding counts as zeros).
fn pool_divisor(g: &Pool2dGeometry, rows: usize, cols: usize) -> f64 {
    if g.count_padding { (g.pool_h * g.pool_w) as f64 } else { (rows * cols) as f64 }
}

/// Average pooling over the input positions of each window (padding not counted), or over
/// the whole window with explicit padding (`count_padding`, PyTorch's `count_include_pad`).
fn avg_pool<A: Arith>(g: &Pool2dGeometry, x: &[f64]) -> Vec<f64> {
    let c = g.channels;
    let mut y = vec![0.0; g.batch * g.out_h * g.out_w * c];
    y.par_chunks_mut(g.out_w * c).enumerate().for_each(|(row, yrow)| {
        let (b, oh) = (row / g.out_h, row % g.out_h);
        let (h_lo, h_hi) = window(oh, g.stride_h, g.pad_top, g.pool_h, g.in_h);
        for ow in 0..g.out_w {
            let (w_lo, w_hi) = window(ow, g.stride_w, g.pad_left, g.pool_w, g.in_w);
            let out = &mut yrow[ow * c..(ow + 1) * c];
            for h in h_lo..h_hi {
                for w in w_lo..w_hi {
                    ops::axpy::<A>(out, 1.0, &x[((b * g.in_h + h) * g.in_w + w) * c..][..c]);
                }
            }
            let count = pool_divisor(g, h_hi - h_lo, w_hi - w_lo);
            out.iter_mut().for_each(|v| *v = A::r(*v / count));
        }
    });
    y
}

/// Per-sample losses and the gradient of `scale * Σ losses` with respect to the logits.
/// Cross-entropy with label smoothing `a` (Keras) takes the targets
/// `t = (1 - a) * onehot + a / k`: `loss = logsumexp(row) - Σ t_j row_j`, `grad = softmax - t`.
fn loss<A: Arith>(net: &Net, logits: &[f64], labels: &[u32], scale: f64) -> Result<(Vec<f64>, Vec<f64>)> {
    let k = net.classes;
    if logits.len() != labels.len() * k {
        bail!(Shape, "{} labels for {} logits of {k} classes", labels.len(), logits.len());
    }
    if let Some(bad) = labels.iter().position(|&l| l as usize >= k) {
        bail!(Shape, "label {} at index {bad} is out of range for {k} classes", labels[bad]);
    }
    let mut losses = Vec::with_capacity(labels.len());
    let mut grad = vec![0.0; logits.len()];
    for ((row, g), &label) in logits.chunks_exact(k).zip(grad.chunks_exact_mut(k)).zip(labels) {
        let label = label as usize;
        match net.loss {
            Loss::SparseCategoricalCrossentropy => {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = row.iter().fold(0.0, |t, v| A::r(t + A::r(A::r(v - m).exp())));
                let a = net.label_smoothing;
                if a == 0.0 {
                    losses.push(A::r(A::r(A::r(total.ln()) + m) - row[label]));
                } else {
                    let spread = A::r(a / k as f64);
                    let z = row.iter().fold(0.0, |z, v| A::r(z + A::r(v - m)));
                    losses.push(A::r(A::r(A::r(total.ln()) + A::r(A::r(m - row[label]) * A::r(1.0 - a))) - A::r(spread * z)));
                }
                let (on, off) = (A::r(1.0 - a + a / k as f64), A::r(a / k as f64));
                for (j, (gj, v)) in g.iter_mut().zip(row).enumerate() {
                    *gj = A::r(scale * A::r(A::r(A::r(A::r(v - m).exp()) / total) - if j == label { on } else { off }));
                }
            }
            Loss::MeanSquaredError => {
                let mut s = 0.0;
                for (j, (gj, v)) in g.iter_mut().zip(row).enumerate() {
                    let d = A::r(v - (j == label) as u8 as f64);
                    s = A::r(s + A::r(d * d));
                    *gj = A::r(A::r(scale * 2.0 * d) / k as f64);
                }
                losses.push(A::r(s / k as f64));
            }
        }
    }
    Ok((losses, grad))
}

/// Runs the records of a chain backwards from `dy`; the input gradient of the chain's
/// first node only when `need_dx`.
fn backward_chain<A: Arith>(w: &[Vec<f64>], recs: &[Rec], mut dy: Vec<f64>, need_dx: bool, grads: &mut [Vec<f64>]) -> Option<Vec<f64>> {
    for (k, rec) in recs.iter().enumerate().rev() {
        dy = backward_node::<A>(w, rec, dy, k > 0 || need_dx, grads)?;
    }
    Some(dy)
}

/// One node's backward: writes its parameter gradients, returns dx when `need_dx`.
fn backward_node<A: Arith>(w: &[Vec<f64>], rec: &Rec, mut dy: Vec<f64>, need_dx: bool, grads: &mut [Vec<f64>]) -> Option<Vec<f64>> {
    match rec {
        Rec::Stored { rec, x16, y16 } => {
            if *y16 {
                round_all(&mut dy);
            }
            let mut dx = backward_node::<A>(w, rec, dy, need_dx, grads)?;
            if *x16 {
                round_all(&mut dx);
            }
            Some(dx)
        }
        Rec::Conv { x, geom, p, bias } => {
            grads[*p] = ops::conv_weight_grad::<A>(geom, &x.data, &dy);
            if *bias {
                grads[p + 1] = ops::col_sums::<A>(dy.len() / geom.filters, geom.filters, |i| dy[i]);
            }
            need_dx.then(|| match winograd_tile::<A>(geom).ok().flatten() {
                Some(m) => super::winograd::convolve::<A>(geom, Pass::BackwardData, m, &dy, &w[*p]),
                None => ops::conv_input_grad::<A>(geom, &dy, &w[*p]),
            })
        }
        Rec::Depthwise { x, geom, p, bias } => {
            grads[*p] = ops::depthwise_weight_grad::<A>(geom, &x.data, &dy);
            if *bias {
                let cm = geom.out_channels();
                grads[p + 1] = ops::col_sums::<A>(dy.len() / cm, cm, |i| dy[i]);
            }
            need_dx.then(|| ops::depthwise_input_grad::<A>(geom, &dy, &w[*p]))
        }
        Rec::Dense { x, p, bias } => {
            let inputs = x.shape[1..].iter().product();
            let units = w[*p].len() / inputs;
            grads[*p] = ops::dense_weight_grad::<A>(&x.data, &dy, inputs, units);
            if *bias {
                grads[p + 1] = ops::col_sums::<A>(dy.len() / units, units, |i| dy[i]);
            }
            need_dx.then(|| ops::dense_input_grad::<A>(&dy, &w[*p], inputs, units))
        }
        Rec::BatchNorm { xhat, inv_std, mask, p, frozen } => {
            let c = inv_std.len();
            let rows = dy.len() / c;
            if let Some(mask) = mask {
                dy.par_iter_mut().zip(mask).for_each(|(g, &m)| *g = if m { *g } else { 0.0 });
            }
            if *frozen {
                // dx = dy * gamma * inv_std, the moving statistics being constants; gamma's and
                // beta's gradients stay 0, as the device leaves them.
                let gamma = &w[*p];
                return need_dx.then(|| dy.par_iter().enumerate().map(|(i, g)| A::r(g * A::r(gamma[i % c] * inv_std[i % c]))).collect());
            }
            let dbeta = ops::col_sums::<A>(rows, c, |i| dy[i]);
            let dgamma = ops::col_sums::<A>(rows, c, |i| dy[i] * xhat[i]);
            let gamma = &w[*p];
            let m = rows as f64;
            let dx = dy.par_iter().zip(xhat).enumerate().map(|(i, (g, xh))| {
                let k = i % c;
                A::r(A::r(gamma[k] * inv_std[k]) * A::r(g - A::r(A::r(dbeta[k] + A::r(xh * dgamma[k])) / m)))
            });
            let dx = need_dx.then(|| dx.collect());
            grads[*p] = dgamma;
            grads[p + 1] = dbeta;
            dx
        }
        Rec::LayerNorm { xhat, inv_std, c, p } => {
            let (c, gamma) = (*c, &w[*p]);
            grads[*p] = ops::col_sums::<A>(inv_std.len(), c, |i| dy[i] * xhat[i]);
            grads[p + 1] = ops::col_sums::<A>(inv_std.len(), c, |i| dy[i]);
            // dx = inv_std / c * (c * g - Σ g - x_hat * Σ g * x_hat) per row, g = dy * gamma.
            need_dx.then(|| {
                let mut dx = vec![0.0; dy.len()];
                dx.par_chunks_mut(c).enumerate().for_each(|(r, out)| {
                    let (dy, xh) = (&dy[r * c..][..c], &xhat[r * c..][..c]);
                    let g: Vec<f64> = (0..c).map(|k| A::r(dy[k] * gamma[k])).collect();
                    let sum_g = g.iter().fold(0.0, |s, v| A::r(s + v));
                    let sum_gx = g.iter().zip(xh).fold(0.0, |s, (a, b)| A::r(s + A::r(a * b)));
                    for k in 0..c {
                        out[k] = A::r(inv_std[r] * A::r(g[k] - A::r(A::r(sum_g + A::r(xh[k] * sum_gx)) / c as f64)));
                    }
                });
                dx
            })
        }
        Rec::Relu { mask } => {
            dy.par_iter_mut().zip(mask).for_each(|(g, &m)| *g = if m { *g } else { 0.0 });
            need_dx.then_some(dy)
        }
        Rec::MaxPool { src, in_len } => {
            let mut dx = vec![0.0; *in_len];
            for (&i, g) in src.iter().zip(&dy) {
                dx[i as usize] = A::r(dx[i as usize] + g);
            }
            need_dx.then_some(dx)
        }
        Rec::Gather { src, in_len } => {
            let mut dx = vec![0.0; *in_len];
            for (s, g) in src.iter().zip(&dy) {
                if let Some(k) = *s {
                    dx[k] = A::r(dx[k] + g);
                }
            }
            need_dx.then_some(dx)
        }
        Rec::AvgPool { geom: g } => {
            let c = g.channels;
            let mut dx = vec![0.0; g.batch * g.in_h * g.in_w * c];
            // Windows of one sample only touch that sample's input: one task per sample.
            dx.par_chunks_mut(g.in_h * g.in_w * c).enumerate().for_each(|(b, dxb)| {
                for oh in 0..g.out_h {
                    let (h_lo, h_hi) = window(oh, g.stride_h, g.pad_top, g.pool_h, g.in_h);
                    for ow in 0..g.out_w {
                        let (w_lo, w_hi) = window(ow, g.stride_w, g.pad_left, g.pool_w, g.in_w);
                        let count = pool_divisor(g, h_hi - h_lo, w_hi - w_lo);
                        let dys = &dy[((b * g.out_h + oh) * g.out_w + ow) * c..][..c];
                        for h in h_lo..h_hi {
                            for w in w_lo..w_hi {
                                ops::axpy::<A>(&mut dxb[(h * g.in_w + w) * c..][..c], A::r(1.0 / count), dys);
                            }
                        }
                    }
                }
            });
            need_dx.then_some(dx)
        }
        Rec::GlobalAvgPool { in_shape } => {
            let (hw, c) = (in_shape[1] * in_shape[2], in_shape[3]);
            let dx = (0..in_shape.iter().product::<usize>()).into_par_iter().map(|i| A::r(dy[(i / (hw * c)) * c + i % c] / hw as f64));
            need_dx.then(|| dx.collect())
        }
        Rec::Pass => need_dx.then_some(dy),
        Rec::Add { .. } | Rec::Concatenate { .. } => unreachable!("merges are run by backward_graph"),
        Rec::Scale { derivative } => need_dx.then(|| dy.par_iter().zip(derivative).map(|(g, d)| A::r(g * d)).collect()),
        Rec::Softmax { y, k } => need_dx.then(|| activation::softmax_backward(y, &dy, *k).into_iter().map(A::r).collect()),
        Rec::Residual { main, shortcut, join } => {
            if let Some(mask) = join {
                dy.par_iter_mut().zip(mask).for_each(|(g, &m)| *g = if m { *g } else { 0.0 });
            }
            // The join passes its gradient to both paths unchanged; an empty chain is the identity.
            let dm = if main.is_empty() { Some(dy.clone()) } else { backward_chain::<A>(w, main, dy.clone(), need_dx, grads) };
            let ds = if shortcut.is_empty() { Some(dy) } else { backward_chain::<A>(w, shortcut, dy, need_dx, grads) };
            match (dm, ds) {
                (Some(mut a), Some(b)) if need_dx => {
                    a.par_iter_mut().zip(&b).for_each(|(x, y)| *x = A::r(*x + y));
                    Some(a)
                }
                _ => None,
            }
        }
    }
}

/// One training step of `net` in f64: the training-mode forward (batch statistics, biased
/// variance, moving statistics updated), the loss, and the gradient of
/// `grad_scale * Σ losses` (`grad_scale` = one over the global batch, as the device's), all
/// following the device's `decisions` (one per node, see [`Net`]), which are also checked
/// against the f64 values ([`Step::kinks`]).
///
/// `params` and `states` are flat, as `Sequential::get_weights` returns them (f32), or in
/// f64 (a finite-difference check, or a reference that keeps its own weights). Labels index
/// the classes; mean squared error compares with their one-hot encoding, as the device does.
#[allow(clippy::too_many_arguments)]
pub fn train_step<P: Copy + Into<f64>>(
    net: &Net,
    layout: &Layout,
    params: &[P],
    states: &[P],
    images: &[u8],
    labels: &[u32],
    decisions: &[Decision],
    grad_scale: f64,
) -> Result<Step> {
    Ok(step_as::<Exact, P>(net, layout, params, states, images, labels, decisions, grad_scale, Preacts::Off)?.0)
}

/// [`train_step`], and the same step computed again with every operation rounded to f32
/// (see `ops::F32`): `(exact, rounded)`. The rounded step's errors against the exact one
/// are what rounding alone does to a correct f32 implementation of this model at this
/// batch, with these weights; its `kinks.drift` is measured against the exact run's
/// pre-activations (the device's against its own outputs).
#[allow(clippy::too_many_arguments)]
pub fn train_step_pair<P: Copy + Into<f64>>(
    net: &Net,
    layout: &Layout,
    params: &[P],
    states: &[P],
    images: &[u8],
    labels: &[u32],
    decisions: &[Decision],
    grad_scale: f64,
) -> Result<(Step, Step)> {
    train_step_pair_for(DTypePolicy::Float32, net, layout, params, states, images, labels, decisions, grad_scale)
}

/// [`train_step_pair`] for a precision policy: under `mixed_float16` the rounded step also
/// rounds the operands of every convolution and dense product to f16 (see `ops::Mixed`).
#[allow(clippy::too_many_arguments)]
pub fn train_step_pair_for<P: Copy + Into<f64>>(
    policy: DTypePolicy,
    net: &Net,
    layout: &Layout,
    params: &[P],
    states: &[P],
    images: &[u8],
    labels: &[u32],
    decisions: &[Decision],
    grad_scale: f64,
) -> Result<(Step, Step)> {
    let (exact, kept) = step_as::<Exact, P>(net, layout, params, states, images, labels, decisions, grad_scale, Preacts::Record(Vec::new()))?;
    let Preacts::Record(kept) = kept else { unreachable!("the exact run records") };
    let compare = Preacts::Compare { exact: kept, next: 0 };
    let (rounded, _) = match policy {
        DTypePolicy::Float32 => step_as::<F32, P>(net, layout, params, states, images, labels, decisions, grad_scale, compare)?,
        DTypePolicy::MixedFloat16 => step_as::<Mixed, P>(net, layout, params, states, images, labels, decisions, grad_scale, compare)?,
    };
    Ok((exact, rounded))
}

#[allow(clippy::too_many_arguments)]
fn step_as<A: Arith, P: Copy + Into<f64>>(
    net: &Net,
    layout: &Layout,
    params: &[P],
    states: &[P],
    images: &[u8],
    labels: &[u32],
    decisions: &[Decision],
    grad_scale: f64,
    preacts: Preacts,
) -> Result<(Step, Preacts)> {
    let f = run_forward::<A, P>(net, layout, params, states, images, Some(decisions), true, preacts)?;
    if f.logits.shape[0] != labels.len() {
        bail!(Shape, "{} images but {} labels", f.logits.shape[0], labels.len());
    }
    let (losses, dlogits) = loss::<A>(net, &f.logits.data, labels, grad_scale)?;
    let mut grads: Vec<Vec<f64>> = layout.params.iter().map(|e| vec![0.0; e.spec.len()]).collect();
    // The first layer's input gradient is the image's, which nothing uses.
    backward_graph::<A>(&f.params, net, &f.recs, dlogits, &mut grads);
    if f.cx.next_param != layout.params.len() {
        return Err(Error::Config(format!("the net used {} parameters of the layout's {}", f.cx.next_param, layout.params.len())));
    }
    Ok((Step { logits: f.logits.data, losses, grads, states: f.cx.states, kinks: f.cx.kinks }, f.cx.preacts))
}

/// The decisions the reference itself takes in the training-mode forward pass (ReLU
/// outputs as f32, each max-pool window's first f64 maximum), in the shape the device's
/// come in: for checking the reference on its own (finite differences need a fixed set of
/// decisions) and for testing a device side's pairing without a device.
pub fn own_decisions<P: Copy + Into<f64>>(net: &Net, layout: &Layout, params: &[P], states: &[P], images: &[u8]) -> Result<Vec<Decision>> {
    let f = run_forward::<Exact, P>(net, layout, params, states, images, None, true, Preacts::Off)?;
    f.own.ok_or_else(|| Error::Config("the forward pass without device decisions recorded none of its own".into()))
}

/// The inference forward (BatchNorm with the moving statistics): `[batch, classes]`
/// logits. The forward pass is continuous, so its own decisions serve: a tie taken on the
/// other side moves the logits by no more than the tie's size.
pub fn predict<P: Copy + Into<f64>>(net: &Net, layout: &Layout, params: &[P], states: &[P], images: &[u8]) -> Result<Vec<f64>> {
    Ok(run_forward::<Exact, P>(net, layout, params, states, images, None, false, Preacts::Off)?.logits.data)
}
