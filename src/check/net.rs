//! The reference's own description of a model, read from each layer's class name and saved
//! configuration (the JSON a saved model carries) rather than from the layers' Rust fields,
//! so that a wrong field in a layer cannot make the reference agree with it.

use serde_json::Value;

use crate::kernels::augment::FillMode;
use crate::kernels::conv2d::{Conv2dGeometry, Padding};
use crate::kernels::depthwise::DepthwiseGeometry;
use crate::kernels::pool::{Pool2dGeometry, PoolPadding};
use crate::layers::padding_from_config;
use crate::model::losses::Loss;
use crate::model::layout::inbound_of;
use crate::model::plan::Definition;
use crate::{bail, Result};

/// One layer as the reference computes it (fused ReLUs folded into BatchNorm / Residual).
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A 2-D convolution of NHWC input with a `[kh, kw, in / groups, filters]` kernel: filter
    /// `f` of group `f / (filters / groups)` reads only that group's input channels, taps
    /// `dilation` apart.
    Conv2D {
        /// Output channels.
        filters: usize,
        /// Window height and width.
        kernel: (usize, usize),
        /// Steps between windows, vertical and horizontal.
        strides: (usize, usize),
        /// `valid`, `same` or explicit zero padding.
        padding: Padding,
        /// Whether a bias is added to every output channel.
        use_bias: bool,
        /// Distance between kernel taps, vertical and horizontal (1: adjacent).
        dilation: (usize, usize),
        /// Channel groups convolved separately.
        groups: usize,
    },
    /// A depthwise convolution of NHWC input with a `[kh, kw, in, depth_multiplier]` kernel:
    /// output channel `c * depth_multiplier + m` is input channel `c` convolved with
    /// `kernel[:, :, c, m]`, taps `dilation` apart.
    DepthwiseConv2D {
        /// Window height and width.
        kernel: (usize, usize),
        /// Steps between windows, vertical and horizontal.
        strides: (usize, usize),
        /// `valid`, `same` or explicit zero padding.
        padding: Padding,
        /// Output channels per input channel.
        depth_multiplier: usize,
        /// Distance between kernel taps, vertical and horizontal (1: adjacent).
        dilation: (usize, usize),
        /// Whether a bias is added to every output channel.
        use_bias: bool,
    },
    /// `y = x · kernel + bias` with an `[in, units]` kernel.
    Dense {
        /// Output features.
        units: usize,
        /// Whether a bias is added.
        use_bias: bool,
    },
    /// Training-mode BatchNorm over the last axis; `relu` when the model fused the ReLU that
    /// followed it (the device then only ever exposes the rectified output).
    BatchNorm {
        /// Weight of the old moving statistics in each update.
        momentum: f64,
        /// Added to the variance before its square root.
        epsilon: f64,
        /// The ReLU that followed is applied to the output.
        relu: bool,
        /// Frozen (Keras' `trainable = False`, on the layer or on the residual block around
        /// it): inference mode in training too, as Keras 3 runs it. The moving statistics
        /// normalise and stay as they are; gamma and beta get no gradient.
        frozen: bool,
    },
    /// LayerNormalization over the last axis: each row normalised by its own mean and
    /// biased variance, in training and inference alike.
    LayerNorm {
        /// Added to the variance before its square root.
        epsilon: f64,
    },
    /// A standalone ReLU (one the model could not fuse, e.g. inside a residual chain).
    ReLU,
    /// Max pooling (padded positions never win).
    MaxPool {
        /// Window height and width.
        pool: (usize, usize),
        /// Steps between windows, vertical and horizontal.
        strides: (usize, usize),
        /// `valid`, `same` or explicit padding.
        padding: PoolPadding,
    },
    /// Average pooling over the input positions of each window (padding not counted), or
    /// with explicit padding over the whole window, padding as zeros (PyTorch's default).
    AvgPool {
        /// Window height and width.
        pool: (usize, usize),
        /// Steps between windows, vertical and horizontal.
        strides: (usize, usize),
        /// `valid`, `same` or explicit padding.
        padding: PoolPadding,
    },
    /// The mean over height and width.
    GlobalAvgPool,
    /// A reshape to `[batch, h*w*c]` (NHWC order is kept).
    Flatten,
    /// A layer the device records but that computes the identity in training: Dropout with
    /// rate 0. Kept as a node so node `i` still pairs with the device's `i`-th record.
    Identity,
    /// `main(x) + shortcut(x)` (an empty chain is the identity), then the fused ReLU if `relu`.
    Residual {
        /// The block's layers, in order.
        main: Vec<Node>,
        /// The shortcut's layers; empty: the identity.
        shortcut: Vec<Node>,
        /// The ReLU after the join is applied to the sum.
        relu: bool,
    },
    /// The sum of a functional model's branches (left to right, as the device adds them),
    /// then the fused ReLU if `relu`.
    Add {
        /// The ReLU after the sum is applied to it.
        relu: bool,
    },
    /// The branches side by side along the last axis.
    Concatenate,
    /// An element-wise activation other than the plain ReLU.
    Activation(Act),
    /// A softmax over the last axis.
    Softmax,
    /// The maximum over height and width: `(channels,)`, or `(1, 1, channels)` with `keepdims`.
    GlobalMaxPool {
        /// Keep height and width as 1 (Keras' `keepdims`).
        keepdims: bool,
    },
    /// RandomFlip, RandomCrop or RandomTranslation. While training, output index `y` of each
    /// axis of a sample reads input index `a * y + t` (`a = ±1`), an index outside the input
    /// reading what `fill` says; `(a_y, t_y, a_x, t_x)` are the device's draws. In inference:
    /// the identity, or a crop's centre window.
    Augment {
        /// A crop's output height and width; `None`: the input's.
        crop: Option<(usize, usize)>,
        /// How the vertical axis is drawn.
        y: AxisKind,
        /// How the horizontal axis is drawn.
        x: AxisKind,
        /// What an index outside the input reads.
        fill: FillMode,
        /// The value of the constant fill.
        fill_value: f64,
    },
    /// `x * scale[c] + offset[c]` along the last axis, each table of 1 or `channels` values:
    /// Rescaling, and Normalization as `(x - mean) / std` (or `mean + x * std` inverted).
    ChannelMap {
        /// The multiplier, one value or one per channel.
        scale: Vec<f64>,
        /// The addend, one value or one per channel.
        offset: Vec<f64>,
    },
}

/// How an augmentation draws one axis (the device's draws are followed; this says what the
/// reference draws when it decides itself, for finite differences).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AxisKind {
    /// Never moved.
    Keep,
    /// Reversed or not.
    Flip,
    /// A crop's start.
    Offset,
    /// Moved by a fraction of the side drawn from `[lower, upper]`.
    Shift {
        /// The smallest fraction (negative: up or left).
        lower: f64,
        /// The largest fraction.
        upper: f64,
    },
}

/// An element-wise activation as the reference computes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// `negative_slope * x` at and below 0, `x` up to `max_value` (infinite: no cap),
    /// `max_value` from there: a capped or leaky ReLU, ReLU6, LeakyReLU. Its pieces are taken
    /// from the device's output.
    Rectifier {
        /// The cap (infinite: none; 6 for ReLU6).
        max_value: f64,
        /// The slope below 0 (0: plain ReLU).
        negative_slope: f64,
    },
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// GELU's erf form.
    Gelu,
    /// GELU's tanh form.
    GeluTanh,
}

/// A whole model as the reference sees it.
///
/// `nodes[i]` corresponds to the `i`-th layer of `def.layers` that is not a fused ReLU,
/// which is also the order in which the device records its forward pass
/// (`model::plan::Plan::build` skips exactly the fused layers): the device side pairs its
/// records (and the [`super::Decision`]s it reads back) with these nodes by position.
#[derive(Clone, Debug)]
pub struct Net {
    /// The layers, in the device's recording order.
    pub nodes: Vec<Node>,
    /// The per-sample input shape: height, width, channels.
    pub input_shape: Vec<usize>,
    /// Output classes: the last layer's width.
    pub classes: usize,
    /// The loss the model was compiled with.
    pub loss: Loss,
    /// The cross-entropy's label smoothing (Keras' `label_smoothing`), as the exact f64 value
    /// of the device's f32 setting.
    pub label_smoothing: f64,
    /// Per-channel normalisation of the u8 input, `(x / 255 - mean) / std`, as the exact
    /// f64 values of the device's f32 settings.
    pub mean: Vec<f64>,
    /// Per-channel divisor of the normalisation (see `mean`).
    pub std: Vec<f64>,
    /// Per node, the layout's name of its layer (`batch_normalization_3`), for reports.
    pub names: Vec<String>,
    /// Per node, the nodes it reads: 0 the input, `k + 1` node `k`'s output (a stack reads
    /// its predecessor; a functional model's merges read several).
    pub inbound: Vec<Vec<usize>>,
}

/// A required non-negative integer field of a layer's config.
impl Node {
    /// Whether the device keeps this node's input and output as f16 under mixed_float16
    /// (where their channels are whole quads): the layers that say so of themselves
    /// (`Layer::stores_f16`), restated here from the saved configuration: a convolution
    /// without groups (its output only from an f16 input), BatchNorm, the residual
    /// block, max and global average pooling. (Add is rounded where the reference joins a
    /// graph's branches.)
    pub fn stores_f16(&self) -> bool {
        match self {
            Node::Conv2D { groups, .. } => *groups == 1,
            Node::BatchNorm { .. } | Node::Residual { .. } | Node::MaxPool { .. } | Node::GlobalAvgPool => true,
            _ => false,
        }
    }
    /// Whether the device keeps this node's output (and its input's gradient) stored as its
    /// input is (`Layer::keeps_input_storage`): the element-wise activations, ReLU in every
    /// form, LeakyReLU and `Activation`'s functions (not softmax, nor the identity).
    pub fn keeps_input_storage(&self) -> bool {
        matches!(self, Node::ReLU | Node::Activation(_))
    }
}

fn usize_of(class: &str, cfg: &Value, key: &str) -> Result<usize> {
    match cfg.get(key).and_then(Value::as_u64) {
        Some(v) => Ok(v as usize),
        None => bail!(Config, "{class} config: `{key}` must be a non-negative integer, got {:?} in {cfg}", cfg.get(key)),
    }
}

/// A `[a, b]` field (kernel sizes, strides); a single integer means a square one, as Keras allows.
fn pair_of(class: &str, cfg: &Value, key: &str) -> Result<(usize, usize)> {
    match cfg.get(key) {
        Some(Value::Array(a)) if a.len() == 2 && a.iter().all(|v| v.as_u64().is_some()) => {
            Ok((a[0].as_u64().unwrap() as usize, a[1].as_u64().unwrap() as usize))
        }
        Some(v) if v.as_u64().is_some() => {
            let s = v.as_u64().unwrap() as usize;
            Ok((s, s))
        }
        other => bail!(Config, "{class} config: `{key}` must be [a, b], got {other:?} in {cfg}"),
    }
}

fn bool_of(class: &str, cfg: &Value, key: &str) -> Result<bool> {
    match cfg.get(key).and_then(Value::as_bool) {
        Some(b) => Ok(b),
        None => bail!(Config, "{class} config: `{key}` must be a boolean, got {:?} in {cfg}", cfg.get(key)),
    }
}

fn f64_of(class: &str, cfg: &Value, key: &str) -> Result<f64> {
    match cfg.get(key).and_then(Value::as_f64) {
        Some(v) => Ok(v),
        None => bail!(Config, "{class} config: `{key}` must be a number, got {:?} in {cfg}", cfg.get(key)),
    }
}

/// A number or a list of numbers (a per-channel constant).
fn floats_of(class: &str, cfg: &Value, key: &str) -> Result<Vec<f64>> {
    let items = match cfg.get(key) {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => vec![v],
        None => Vec::new(),
    };
    match items.iter().map(|v| v.as_f64()).collect::<Option<Vec<f64>>>() {
        Some(v) if !v.is_empty() => Ok(v),
        _ => bail!(Config, "{class} config: `{key}` must be a number or a list of numbers, got {:?} in {cfg}", cfg.get(key)),
    }
}

fn pool_padding(class: &str, cfg: &Value) -> Result<PoolPadding> {
    match cfg.get("padding") {
        Some(v) => PoolPadding::from_config(v).map_err(|e| crate::Error::Config(format!("{class} config: {e}"))),
        None => bail!(Config, "{class} config: `padding` is missing in {cfg}"),
    }
}

/// The node of one layer from its class name and config; `relu` is whether the model fused
/// the following ReLU into it.
fn node_of(class: &str, cfg: &Value, relu: bool) -> Result<Node> {
    let node = match class {
        "Conv2D" => Node::Conv2D {
            filters: usize_of(class, cfg, "filters")?,
            kernel: pair_of(class, cfg, "kernel_size")?,
            strides: pair_of(class, cfg, "strides")?,
            padding: padding_from_config(cfg.get("padding").unwrap_or(&Value::Null))?,
            use_bias: bool_of(class, cfg, "use_bias")?,
            // Keras' defaults in a file from before them
            dilation: if cfg.get("dilation_rate").is_some() { pair_of(class, cfg, "dilation_rate")? } else { (1, 1) },
            groups: if cfg.get("groups").is_some() { usize_of(class, cfg, "groups")? } else { 1 },
        },
        "DepthwiseConv2D" => Node::DepthwiseConv2D {
            kernel: pair_of(class, cfg, "kernel_size")?,
            strides: pair_of(class, cfg, "strides")?,
            padding: padding_from_config(cfg.get("padding").unwrap_or(&Value::Null))?,
            depth_multiplier: usize_of(class, cfg, "depth_multiplier")?,
            dilation: pair_of(class, cfg, "dilation_rate")?,
            use_bias: bool_of(class, cfg, "use_bias")?,
        },
        "Dense" => Node::Dense { units: usize_of(class, cfg, "units")?, use_bias: bool_of(class, cfg, "use_bias")? },
        "BatchNormalization" => {
            Node::BatchNorm { momentum: f64_of(class, cfg, "momentum")?, epsilon: f64_of(class, cfg, "epsilon")?, relu, frozen: false }
        }
        "LayerNormalization" => Node::LayerNorm { epsilon: f64_of(class, cfg, "epsilon")? },
        "ReLU" => {
            // A file from before max_value and negative_slope holds `{}`: a plain ReLU.
            let max_value = match cfg.get("max_value") {
                None | Some(Value::Null) => f64::INFINITY,
                Some(_) => f64_of(class, cfg, "max_value")?,
            };
            let negative_slope = if cfg.get("negative_slope").is_some() { f64_of(class, cfg, "negative_slope")? } else { 0.0 };
            if max_value == f64::INFINITY && negative_slope == 0.0 { Node::ReLU } else { Node::Activation(Act::Rectifier { max_value, negative_slope }) }
        }
        "LeakyReLU" => Node::Activation(Act::Rectifier { max_value: f64::INFINITY, negative_slope: f64_of(class, cfg, "negative_slope")? }),
        "Activation" => {
            let approximate = cfg.get("approximate").and_then(Value::as_bool).unwrap_or(false);
            match cfg.get("activation").and_then(Value::as_str) {
                Some("linear") => Node::Identity,
                Some("relu") => Node::ReLU,
                Some("relu6") => Node::Activation(Act::Rectifier { max_value: 6.0, negative_slope: 0.0 }),
                Some("sigmoid") => Node::Activation(Act::Sigmoid),
                Some("tanh") => Node::Activation(Act::Tanh),
                Some("silu" | "swish") => Node::Activation(Act::Silu),
                Some("gelu") => Node::Activation(if approximate { Act::GeluTanh } else { Act::Gelu }),
                Some("softmax") => Node::Softmax,
                other => bail!(Config, "the f64 check does not know activation {other:?} (config {cfg})"),
            }
        }
        "Softmax" => Node::Softmax,
        "GlobalMaxPooling2D" => Node::GlobalMaxPool { keepdims: cfg.get("keepdims").and_then(Value::as_bool).unwrap_or(false) },
        "Rescaling" => Node::ChannelMap { scale: floats_of(class, cfg, "scale")?, offset: floats_of(class, cfg, "offset")? },
        "Normalization" => {
            let (mean, variance) = (floats_of(class, cfg, "mean")?, floats_of(class, cfg, "variance")?);
            if mean.len() != variance.len() {
                bail!(Config, "Normalization config: {} means but {} variances in {cfg}", mean.len(), variance.len());
            }
            // Keras' floor on the standard deviation, backend.epsilon().
            let std: Vec<f64> = variance.iter().map(|v| v.sqrt().max(1e-7)).collect();
            if cfg.get("invert").and_then(Value::as_bool).unwrap_or(false) {
                Node::ChannelMap { scale: std, offset: mean }
            } else {
                Node::ChannelMap { offset: mean.iter().zip(&std).map(|(m, s)| -m / s).collect(), scale: std.iter().map(|s| 1.0 / s).collect() }
            }
        }
        "RandomFlip" => {
            let (v, h) = match cfg.get("mode").and_then(Value::as_str) {
                Some("horizontal") => (false, true),
                Some("vertical") => (true, false),
                Some("horizontal_and_vertical") => (true, true),
                other => bail!(Config, "RandomFlip config: `mode` {other:?} is not one of horizontal, vertical, horizontal_and_vertical"),
            };
            let axis = |on: bool| if on { AxisKind::Flip } else { AxisKind::Keep };
            Node::Augment { crop: None, y: axis(v), x: axis(h), fill: FillMode::Constant, fill_value: 0.0 }
        }
        "RandomCrop" => Node::Augment {
            crop: Some((usize_of(class, cfg, "height")?, usize_of(class, cfg, "width")?)),
            y: AxisKind::Offset,
            x: AxisKind::Offset,
            fill: FillMode::Constant,
            fill_value: 0.0,
        },
        "RandomTranslation" => {
            let range = |key: &str| -> Result<AxisKind> {
                let (lower, upper) = match cfg.get(key) {
                    Some(Value::Array(a)) if a.len() == 2 => (a[0].as_f64(), a[1].as_f64()),
                    Some(v) => (v.as_f64().map(|f| -f), v.as_f64()),
                    None => (None, None),
                };
                match (lower, upper) {
                    (Some(lower), Some(upper)) => Ok(AxisKind::Shift { lower, upper }),
                    _ => bail!(Config, "RandomTranslation config: `{key}` must be a number or two, got {:?}", cfg.get(key)),
                }
            };
            let fill = match cfg.get("fill_mode").and_then(Value::as_str) {
                Some(m) => m.parse()?,
                None => bail!(Config, "RandomTranslation config: `fill_mode` is missing in {cfg}"),
            };
            Node::Augment { crop: None, y: range("height_factor")?, x: range("width_factor")?, fill, fill_value: f64_of(class, cfg, "fill_value")? }
        }
        "MaxPool2D" => {
            Node::MaxPool { pool: pair_of(class, cfg, "pool_size")?, strides: pair_of(class, cfg, "strides")?, padding: pool_padding(class, cfg)? }
        }
        "AveragePooling2D" => {
            Node::AvgPool { pool: pair_of(class, cfg, "pool_size")?, strides: pair_of(class, cfg, "strides")?, padding: pool_padding(class, cfg)? }
        }
        "GlobalAveragePooling2D" => Node::GlobalAvgPool,
        "Add" => Node::Add { relu },
        "Concatenate" => Node::Concatenate,
        "Flatten" => Node::Flatten,
        "Dropout" => {
            let rate = f64_of(class, cfg, "rate")?;
            if rate != 0.0 {
                bail!(Config, "the f64 check does not support Dropout with rate > 0: its mask is drawn on the device (got rate {rate})");
            }
            Node::Identity
        }
        "Residual" => {
            let chain = |key: &str| -> Result<Vec<Node>> {
                let Some(Value::Array(items)) = cfg.get(key) else {
                    bail!(Config, "Residual config: `{key}` must be a list of layers, got {:?}", cfg.get(key));
                };
                // A chain's ReLU stays a node: fused into the BatchNorm before it or not, the
                // block records it as a sub-layer whose output is the device's ReLU output.
                items
                    .iter()
                    .map(|item| match (item.get("class_name").and_then(Value::as_str), item.get("config")) {
                        (Some(c), Some(sub)) => node_of(c, sub, false),
                        _ => bail!(Config, "Residual config: a `{key}` entry needs `class_name` and `config`, got {item}"),
                    })
                    .collect()
            };
            Node::Residual { main: chain("main")?, shortcut: chain("shortcut")?, relu }
        }
        other => bail!(Config, "the f64 check does not know layer class `{other}` (config {cfg})"),
    };
    if relu && !matches!(node, Node::BatchNorm { .. } | Node::Residual { .. } | Node::Add { .. }) {
        bail!(Config, "a ReLU is marked fused into a {class}, but only BatchNormalization, Residual and Add fuse one");
    }
    Ok(node)
}

/// Marks every BatchNorm of a frozen layer (a residual block's too) as running in inference
/// mode; nothing else computes differently when frozen.
fn freeze(node: &mut Node) {
    match node {
        Node::BatchNorm { frozen, .. } => *frozen = true,
        Node::Residual { main, shortcut, .. } => main.iter_mut().chain(shortcut.iter_mut()).for_each(freeze),
        _ => {}
    }
}

/// The per-sample output shape of `node` for the per-sample `input` shape.
pub(crate) fn output_shape(node: &Node, input: &[usize]) -> Result<Vec<usize>> {
    Ok(match node {
        Node::Conv2D { .. } => conv_geometry(node, 1, input)?.output_shape()[1..].to_vec(),
        Node::DepthwiseConv2D { .. } => depthwise_geometry(node, 1, input)?.output_shape()[1..].to_vec(),
        Node::Dense { units, .. } => {
            if input.len() != 1 {
                bail!(Shape, "Dense expects a flat (features,) input, got {input:?}");
            }
            vec![*units]
        }
        Node::MaxPool { pool, strides, padding } | Node::AvgPool { pool, strides, padding } => {
            pool_geometry(1, input, *pool, *strides, *padding)?.output_shape()[1..].to_vec()
        }
        Node::GlobalAvgPool => vec![spatial("GlobalAveragePooling2D", input)?[2]],
        Node::Flatten => vec![input.iter().product()],
        Node::Add { .. } | Node::Concatenate => bail!(Shape, "a merge node has several inputs: its shape comes from Net::shapes"),
        Node::BatchNorm { .. } | Node::LayerNorm { .. } | Node::ReLU | Node::Identity | Node::Activation(_) | Node::Softmax => input.to_vec(),
        Node::GlobalMaxPool { keepdims } => {
            let c = spatial("GlobalMaxPooling2D", input)?[2];
            if *keepdims { vec![1, 1, c] } else { vec![c] }
        }
        Node::Augment { crop, .. } => {
            let [h, w, c] = spatial("an augmentation", input)?;
            match *crop {
                Some((ch, cw)) if ch == 0 || cw == 0 || ch > h || cw > w => bail!(Shape, "a {ch}x{cw} crop does not fit input {input:?}"),
                Some((ch, cw)) => vec![ch, cw, c],
                None => input.to_vec(),
            }
        }
        Node::ChannelMap { scale, offset } => {
            let c = *input.last().unwrap_or(&0);
            if [scale.len(), offset.len()].iter().any(|&n| n != 1 && n != c) {
                bail!(Shape, "a channel map of {} scales and {} offsets does not fit input {input:?}", scale.len(), offset.len());
            }
            input.to_vec()
        }
        Node::Residual { main, shortcut, .. } => {
            let (m, s) = (chain_shape(main, input)?, chain_shape(shortcut, input)?);
            if m != s {
                bail!(Shape, "residual block: main path gives {m:?} but the shortcut gives {s:?} for input {input:?}");
            }
            m
        }
    })
}

pub(crate) fn chain_shape(nodes: &[Node], input: &[usize]) -> Result<Vec<usize>> {
    nodes.iter().try_fold(input.to_vec(), |s, n| output_shape(n, &s))
}

pub(crate) fn spatial(class: &str, input: &[usize]) -> Result<[usize; 3]> {
    match *input {
        [h, w, c] => Ok([h, w, c]),
        _ => bail!(Shape, "{class} expects (height, width, channels) input, got {input:?}"),
    }
}

/// The geometry of a [`Node::Conv2D`] over `batch` samples of the per-sample `input`.
pub(crate) fn conv_geometry(node: &Node, batch: usize, input: &[usize]) -> Result<Conv2dGeometry> {
    let Node::Conv2D { filters, kernel, strides, padding, dilation, groups, .. } = node else {
        bail!(Config, "conv_geometry of a {node:?}");
    };
    let [h, w, c] = spatial("Conv2D", input)?;
    Conv2dGeometry::new_with(&[batch, h, w, c], *filters, *kernel, *strides, *dilation, *groups, *padding)
}

/// The geometry of a [`Node::DepthwiseConv2D`] over `batch` samples of the per-sample `input`.
pub(crate) fn depthwise_geometry(node: &Node, batch: usize, input: &[usize]) -> Result<DepthwiseGeometry> {
    let Node::DepthwiseConv2D { kernel, strides, padding, depth_multiplier, dilation, .. } = node else {
        bail!(Config, "depthwise_geometry of a {node:?}");
    };
    let [h, w, c] = spatial("DepthwiseConv2D", input)?;
    DepthwiseGeometry::new(&[batch, h, w, c], *depth_multiplier, *kernel, *strides, *dilation, *padding)
}

pub(crate) fn pool_geometry(batch: usize, input: &[usize], pool: (usize, usize), strides: (usize, usize), padding: PoolPadding) -> Result<Pool2dGeometry> {
    let [h, w, c] = spatial("pooling", input)?;
    Pool2dGeometry::new(&[batch, h, w, c], [pool.0, pool.1], Some([strides.0, strides.1]), padding)
}

/// The shapes of the parameters (`params == true`) or states a node owns for `input`, in
/// the order of the layer's `params()` / `states()`; a residual block lists its main chain's
/// then its shortcut's, as `Residual::walk` does.
pub(crate) fn tensor_shapes(node: &Node, input: &[usize], params: bool, out: &mut Vec<Vec<usize>>) -> Result<()> {
    match node {
        Node::Conv2D { filters, kernel, use_bias, groups, .. } if params => {
            let c = spatial("Conv2D", input)?[2];
            out.push(vec![kernel.0, kernel.1, c / (*groups).max(1), *filters]);
            if *use_bias {
                out.push(vec![*filters]);
            }
        }
        Node::DepthwiseConv2D { kernel, depth_multiplier, use_bias, .. } if params => {
            let c = spatial("DepthwiseConv2D", input)?[2];
            out.push(vec![kernel.0, kernel.1, c, *depth_multiplier]);
            if *use_bias {
                out.push(vec![c * depth_multiplier]);
            }
        }
        Node::Dense { units, use_bias } if params => {
            out.push(vec![input.first().copied().unwrap_or(0), *units]);
            if *use_bias {
                out.push(vec![*units]);
            }
        }
        Node::BatchNorm { .. } => {
            let c = *input.last().unwrap_or(&0);
            out.extend([vec![c], vec![c]]);
        }
        Node::LayerNorm { .. } if params => {
            let c = *input.last().unwrap_or(&0);
            out.extend([vec![c], vec![c]]);
        }
        Node::Residual { main, shortcut, .. } => {
            for chain in [main, shortcut] {
                let mut shape = input.to_vec();
                for n in chain {
                    tensor_shapes(n, &shape, params, out)?;
                    shape = output_shape(n, &shape)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

impl Net {
    /// The reference's view of `def`, which must be compiled (its `fused` flags set).
    pub fn from_definition(def: &Definition) -> Result<Net> {
        if def.fused.len() != def.layers.len() {
            bail!(Config, "the f64 check needs a compiled model: {} layers but {} fused flags", def.layers.len(), def.fused.len());
        }
        if def.input_shape.len() != 3 {
            bail!(Shape, "the f64 check needs a (height, width, channels) input, got {:?}", def.input_shape);
        }
        let n = def.layers.len();
        let from: Vec<Vec<usize>> = (0..n).map(|i| inbound_of(&def.inbound, i)).collect();
        // The node whose output each model node (0: the input, i + 1: layer i) stands for: a
        // fused ReLU's is the layer that applied it.
        let mut slot = vec![0usize; n + 1];
        let mut nodes = Vec::new();
        let mut names = Vec::new();
        let mut inbound = Vec::new();
        for (i, layer) in def.layers.iter().enumerate() {
            if def.fused[i] {
                match from[i][..] {
                    [j] if j > 0 && def.layers[i].is_plain_relu() => slot[i + 1] = slot[j],
                    _ => bail!(Config, "layer {i} ({}) is marked fused, but only a ReLU reading another layer can be", def.layers[i].class_name()),
                }
                continue;
            }
            let relu = (0..n).any(|k| def.fused[k] && from[k] == [i + 1]);
            let mut node = node_of(layer.class_name(), &layer.config(), relu).map_err(|e| crate::Error::Config(format!("layer {i}: {e}")))?;
            if def.frozen.contains(&i) {
                freeze(&mut node);
            }
            nodes.push(node);
            names.push(def.layout.layer_names.get(i).cloned().unwrap_or_else(|| format!("{}_{i}", layer.class_name())));
            inbound.push(from[i].iter().map(|&j| slot[j]).collect());
            slot[i + 1] = nodes.len();
        }
        let channels = def.input_shape[2];
        if def.mean.len() != channels || def.std.len() != channels {
            bail!(Config, "normalisation needs {channels} means and stds, got {:?} and {:?}", def.mean, def.std);
        }
        let net = Net {
            nodes,
            input_shape: def.input_shape.clone(),
            classes: def.classes,
            loss: def.loss,
            label_smoothing: def.label_smoothing as f64,
            mean: def.mean.iter().map(|&v| v as f64).collect(),
            std: def.std.iter().map(|&v| v as f64).collect(),
            names,
            inbound,
        };
        let out = net.output_shape()?;
        if out != [def.classes] {
            bail!(Shape, "the model outputs {out:?} per sample but has {} classes", def.classes);
        }
        Ok(net)
    }

    /// The per-sample output shape (the logits'), checking every node against its input.
    pub fn output_shape(&self) -> Result<Vec<usize>> {
        Ok(self.node_shapes()?.pop().unwrap_or_default())
    }

    /// The nodes node `k` reads (0: the input, `j + 1`: node `j`); a node the inbound lists
    /// do not cover reads the one before it, as in a stack.
    pub fn inputs_of(&self, k: usize) -> Vec<usize> {
        inbound_of(&self.inbound, k)
    }

    /// Whether, under mixed_float16, the device normalises the image into f16 padded by zero
    /// channels to whole quads (see `Layer::reads_padded_channels`): its channels are not
    /// whole quads and every node reading it is a convolution that stores f16.
    pub fn image_padded(&self) -> bool {
        let mut readers = (0..self.nodes.len()).filter(|&k| self.inputs_of(k).contains(&0)).peekable();
        self.input_shape.last().is_some_and(|c| c % 4 != 0) && readers.peek().is_some() && readers.all(|k| matches!(self.nodes[k], Node::Conv2D { .. }) && self.nodes[k].stores_f16())
    }

    /// The per-sample shape of the input (first) and of every node's output.
    pub(crate) fn node_shapes(&self) -> Result<Vec<Vec<usize>>> {
        let mut shapes = vec![self.input_shape.clone()];
        for (k, n) in self.nodes.iter().enumerate() {
            let ins: Vec<&Vec<usize>> = self.inputs_of(k).iter().map(|&j| &shapes[j]).collect();
            let out = match n {
                Node::Add { .. } => {
                    if ins.iter().any(|s| *s != ins[0]) {
                        bail!(Shape, "{}: Add of shapes {ins:?}", self.names[k]);
                    }
                    ins[0].clone()
                }
                Node::Concatenate => {
                    let mut out = ins[0].clone();
                    *out.last_mut().unwrap_or(&mut 0) = ins.iter().map(|s| s.last().copied().unwrap_or(0)).sum();
                    out
                }
                _ => output_shape(n, ins[0])?,
            };
            shapes.push(out);
        }
        Ok(shapes)
    }

    /// The shapes of every parameter the reference expects, in the layout's order: what
    /// `layout.params` must list for a given set of flat weights to fit this net.
    pub fn param_shapes(&self) -> Result<Vec<Vec<usize>>> {
        self.shapes(true)
    }

    /// The shapes of every state (moving mean and variance), in the layout's order.
    pub fn state_shapes(&self) -> Result<Vec<Vec<usize>>> {
        self.shapes(false)
    }

    fn shapes(&self, params: bool) -> Result<Vec<Vec<usize>>> {
        let mut out = Vec::new();
        let shapes = self.node_shapes()?;
        for (k, n) in self.nodes.iter().enumerate() {
            tensor_shapes(n, &shapes[self.inputs_of(k)[0]], params, &mut out)?;
        }
        Ok(out)
    }
}
