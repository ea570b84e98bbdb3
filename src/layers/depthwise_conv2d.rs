//! DepthwiseConv2D: each input channel convolved with its own `depth_multiplier` kernels
//! (MobileNet's spatial filter), a `[kh, kw, channels, depth_multiplier]` kernel.

use serde_json::json;

use super::{padding_to_config, Graph, Init, Layer, ParamSpec, Saved, Weights};
use crate::kernels::conv2d::Padding;
use crate::kernels::depthwise::{self, DepthwiseGeometry};
use crate::{bail, Result, Tensor};

/// Keras' `DepthwiseConv2D`: output channel `c * depth_multiplier + m` is input channel `c`
/// convolved with kernel `[:, :, c, m]`.
///
/// ```
/// use convoy::layers::{DepthwiseConv2D, Layer, Padding};
/// // MobileNetV2's stride-2 depthwise convolution
/// let layer = DepthwiseConv2D::new(3).strides(2).padding(Padding::Same).use_bias(false);
/// assert_eq!(layer.output_shape(&[112, 112, 96]).unwrap(), vec![56, 56, 96]);
/// assert_eq!(layer.params(&[112, 112, 96])[0].shape, vec![3, 3, 96, 1]);
/// ```
#[derive(Debug, Clone)]
pub struct DepthwiseConv2D {
    /// `(kh, kw)`.
    pub kernel_size: (usize, usize),
    /// `(sh, sw)`.
    pub strides: (usize, usize),
    /// Keras' `"valid"` / `"same"` (TensorFlow's split, on the dilated kernel's extent) or
    /// PyTorch's explicit `(ph, pw)`, as Conv2D's.
    pub padding: Padding,
    /// Kernels per input channel.
    pub depth_multiplier: usize,
    /// `(dh, dw)`: the taps' spacing along height and width.
    pub dilation_rate: (usize, usize),
    /// Whether a `[channels * depth_multiplier]` bias is added.
    pub use_bias: bool,
    /// `glorot_uniform` (Keras' default) or `he_normal`, as Conv2D's `kernel_initializer`.
    pub depthwise_initializer: &'static str,
}

/// The initializers [`DepthwiseConv2D::depthwise_initializer`] accepts.
const INITIALIZERS: [&str; 2] = ["glorot_uniform", "he_normal"];

/// A `(height, width)` size: Keras' "an integer or a tuple of 2 integers" for kernel sizes,
/// strides and dilation rates (`3` is `(3, 3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair(pub usize, pub usize);

impl From<usize> for Pair {
    fn from(n: usize) -> Pair {
        Pair(n, n)
    }
}

impl From<(usize, usize)> for Pair {
    fn from((h, w): (usize, usize)) -> Pair {
        Pair(h, w)
    }
}

impl DepthwiseConv2D {
    /// A `kernel_size` of `3` or `(kh, kw)`, Keras' defaults otherwise: stride 1, `valid`
    /// padding, depth_multiplier 1, no dilation, a bias, Glorot-uniform kernel.
    pub fn new(kernel_size: impl Into<Pair>) -> Self {
        let Pair(kh, kw) = kernel_size.into();
        DepthwiseConv2D {
            kernel_size: (kh, kw),
            strides: (1, 1),
            padding: Padding::Valid,
            depth_multiplier: 1,
            dilation_rate: (1, 1),
            use_bias: true,
            depthwise_initializer: "glorot_uniform",
        }
    }
    /// `2` or `(sh, sw)`.
    pub fn strides(mut self, s: impl Into<Pair>) -> Self {
        let Pair(h, w) = s.into();
        self.strides = (h, w);
        self
    }
    /// `Padding::Valid` (the default), `Padding::Same` or `Padding::Explicit(ph, pw)`.
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }
    /// Kernels per input channel: the layer outputs `channels * m` channels.
    pub fn depth_multiplier(mut self, m: usize) -> Self {
        self.depth_multiplier = m;
        self
    }
    /// `2` or `(dh, dw)`: tap `i` reads the input `i * dh` rows below the window's first
    /// (1: adjacent taps).
    pub fn dilation_rate(mut self, d: impl Into<Pair>) -> Self {
        let Pair(h, w) = d.into();
        self.dilation_rate = (h, w);
        self
    }
    /// Whether to add a bias (Keras' default: yes; MobileNet's blocks: no, a BatchNorm follows).
    pub fn use_bias(mut self, b: bool) -> Self {
        self.use_bias = b;
        self
    }
    /// `glorot_uniform` or `he_normal`; any other name is refused when the model is built.
    pub fn depthwise_initializer(mut self, init: &'static str) -> Self {
        self.depthwise_initializer = init;
        self
    }

    fn geometry(&self, batch: usize, input: &[usize]) -> Result<DepthwiseGeometry> {
        if input.len() != 3 {
            bail!(Shape, "DepthwiseConv2D expects (height, width, channels) input, got {input:?}");
        }
        DepthwiseGeometry::new(&[batch, input[0], input[1], input[2]], self.depth_multiplier, self.kernel_size, self.strides, self.dilation_rate, self.padding)
    }
}

impl Layer for DepthwiseConv2D {
    fn class_name(&self) -> &'static str {
        "DepthwiseConv2D"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if !INITIALIZERS.contains(&self.depthwise_initializer) {
            bail!(Config, "DepthwiseConv2D: depthwise_initializer {:?} is not one of {INITIALIZERS:?}", self.depthwise_initializer);
        }
        Ok(self.geometry(1, input)?.output_shape()[1..].to_vec())
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        let (kh, kw) = self.kernel_size;
        let c = input.get(2).copied().unwrap_or(0);
        let m = self.depth_multiplier;
        // Keras' fans of a [kh, kw, c, m] kernel: receptive field times its last two axes
        // (saturating: the layout refuses a kernel this large before it is initialised).
        let field = kh.saturating_mul(kw);
        let fan_in = field.saturating_mul(c);
        let init = match self.depthwise_initializer {
            "he_normal" => Init::HeNormal { fan_in },
            _ => Init::GlorotUniform { fan_in, fan_out: field.saturating_mul(m) },
        };
        let mut p = vec![ParamSpec::new("kernel", vec![kh, kw, c, m], init, true)];
        if self.use_bias {
            p.push(ParamSpec::new("bias", vec![c.saturating_mul(m)], Init::Zeros, false));
        }
        p
    }
    fn config(&self) -> serde_json::Value {
        json!({
            "kernel_size": [self.kernel_size.0, self.kernel_size.1],
            "strides": [self.strides.0, self.strides.1],
            "padding": padding_to_config(self.padding),
            "depth_multiplier": self.depth_multiplier,
            "dilation_rate": [self.dilation_rate.0, self.dilation_rate.1],
            "use_bias": self.use_bias,
            "depthwise_initializer": self.depthwise_initializer,
        })
    }
    fn flops(&self, input: &[usize]) -> u64 {
        self.geometry(1, input).map(|g| g.flops()).unwrap_or(0)
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let geom = self.geometry(g.batch, &x.shape()[1..])?;
        let y = g.device.alloc(&geom.output_shape(), crate::DType::F32)?;
        let bias = if self.use_bias { Some(&w.params[1]) } else { None };
        g.push(depthwise::forward(g.device, &geom, x, &w.params[0], bias, &y)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        let geom = self.geometry(g.batch, &x.shape()[1..])?;
        g.extend(depthwise::backward_weights(g.device, &geom, x, dy, &w.grads[0])?);
        if self.use_bias {
            g.extend(depthwise::backward_bias(g.device, &geom, dy, &w.grads[1])?);
        }
        if !need_dx {
            return Ok(None);
        }
        let dx = g.activation(&x.shape()[1..])?;
        g.push(depthwise::backward_data(g.device, &geom, dy, &w.params[0], &dx)?);
        Ok(Some(dx))
    }
}
