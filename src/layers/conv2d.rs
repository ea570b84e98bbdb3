//! Conv2D: a 2-D convolution over NHWC input with a `[kh, kw, in, filters]` kernel.

use serde_json::json;

use super::{Graph, Init, Layer, Pair, ParamSpec, Saved, Weights};
use crate::kernels::conv2d::{self, Conv2dGeometry, Join, Padding};
use crate::kernels::concat;
use crate::{bail, Result, Tensor};

#[derive(Debug, Clone)]
/// A 2-D convolution (Keras' `Conv2D`): `[batch, h, w, in]` input, `[kh, kw, in / groups, filters]`
/// kernel, optional `[filters]` bias.
///
/// ```
/// use convoy::layers::{Conv2D, Layer, Padding};
/// // ResNeXt's grouped 3x3 (32 groups of 4 channels), and a dilated 3x3 seeing 5x5
/// let grouped = Conv2D::new(128, 3).padding(Padding::Same).groups(32).use_bias(false);
/// assert_eq!(grouped.params(&[56, 56, 128])[0].shape, vec![3, 3, 4, 128]);
/// let dilated = Conv2D::new(16, 3).dilation_rate(2);
/// assert_eq!(dilated.output_shape(&[32, 32, 8]).unwrap(), vec![28, 28, 16]);
/// ```
pub struct Conv2D {
    /// Output channels.
    pub filters: usize,
    /// Window height and width.
    pub kernel_size: (usize, usize),
    /// Steps between windows, vertical and horizontal.
    pub strides: (usize, usize),
    /// `valid`, `same` or explicit zero padding.
    pub padding: Padding,
    /// Whether a bias is added to every output channel.
    pub use_bias: bool,
    /// `glorot_uniform` (Keras' default) or `he_normal`.
    pub kernel_initializer: &'static str,
    /// `(dh, dw)`: the taps' spacing along height and width (1: adjacent). Keras allows it
    /// above 1 only with strides of 1.
    pub dilation_rate: (usize, usize),
    /// Filter groups: filters `[j * F / g, (j + 1) * F / g)` see only the input channels
    /// `[j * C / g, (j + 1) * C / g)`; `g` must divide both.
    pub groups: usize,
}

impl Conv2D {
    /// `filters` output channels with a `kernel_size` of `3` or `(kh, kw)`, Keras' defaults
    /// otherwise: stride 1, `valid` padding, no dilation, one group, a bias, Glorot-uniform
    /// kernel.
    pub fn new(filters: usize, kernel_size: impl Into<Pair>) -> Self {
        let Pair(kh, kw) = kernel_size.into();
        Conv2D {
            filters,
            kernel_size: (kh, kw),
            strides: (1, 1),
            padding: Padding::Valid,
            use_bias: true,
            kernel_initializer: "glorot_uniform",
            dilation_rate: (1, 1),
            groups: 1,
        }
    }
    /// `2` or `(dh, dw)`: tap `i` reads the input `i * dh` rows below the window's first.
    /// Only with strides of 1, as in Keras.
    pub fn dilation_rate(mut self, d: impl Into<Pair>) -> Self {
        let Pair(h, w) = d.into();
        self.dilation_rate = (h, w);
        self
    }
    /// Splits the channels into `g` groups convolved separately (ResNeXt's grouped
    /// convolution; `g` = input channels = filters is a depthwise one).
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
    /// `2` or `(sh, sw)`: the window moves `sh` rows and `sw` columns a step.
    pub fn strides(mut self, s: impl Into<Pair>) -> Self {
        let Pair(h, w) = s.into();
        self.strides = (h, w);
        self
    }
    /// `Padding::Valid` (no padding, the default), `Padding::Same` (output `ceil(in / stride)`) or
    /// explicit.
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }
    /// Whether a bias is added (off before a BatchNormalization, whose `beta` plays its part).
    pub fn use_bias(mut self, b: bool) -> Self {
        self.use_bias = b;
        self
    }
    /// The kernel's initializer by Keras name: `glorot_uniform` (the default) or `he_normal`.
    pub fn kernel_initializer(mut self, init: &'static str) -> Self {
        self.kernel_initializer = init;
        self
    }

    fn geometry(&self, batch: usize, input: &[usize]) -> Result<Conv2dGeometry> {
        if input.len() != 3 {
            bail!(Shape, "Conv2D expects (height, width, channels) input, got {input:?}");
        }
        let mut full = vec![batch];
        full.extend_from_slice(input);
        Conv2dGeometry::new_with(&full, self.filters, self.kernel_size, self.strides, self.dilation_rate, self.groups, self.padding)
    }
}

impl Layer for Conv2D {
    fn class_name(&self) -> &'static str {
        "Conv2D"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if self.filters == 0 || self.kernel_size.0 == 0 || self.kernel_size.1 == 0 || self.strides.0 == 0 || self.strides.1 == 0 {
            bail!(Config, "Conv2D needs positive filters, kernel_size and strides, got {self:?}");
        }
        Ok(self.geometry(1, input)?.output_shape()[1..].to_vec())
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        let (kh, kw) = self.kernel_size;
        // Each filter sees its group's channels (output_shape refuses a group count that does
        // not divide them before the layout asks).
        let cin = input.get(2).copied().unwrap_or(0) / self.groups.max(1);
        // Saturating: the layout refuses a kernel this large before it is initialised.
        let fan_in = kh.saturating_mul(kw).saturating_mul(cin);
        let init = match self.kernel_initializer {
            "he_normal" => Init::HeNormal { fan_in },
            _ => Init::GlorotUniform { fan_in, fan_out: kh.saturating_mul(kw).saturating_mul(self.filters) },
        };
        let mut p = vec![ParamSpec::new("kernel", vec![kh, kw, cin, self.filters], init, true)];
        if self.use_bias {
            p.push(ParamSpec::new("bias", vec![self.filters], Init::Zeros, false));
        }
        p
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn stores_f16(&self) -> bool {
        // A grouped product scatters its rows (an f16 C is stored whole quads of whole rows).
        self.groups == 1
    }
    fn takes_f16_gradient(&self) -> bool {
        // dy is an operand of both products and of the bias's gradient, which read either.
        self.stores_f16()
    }
    fn reads_padded_channels(&self) -> bool {
        // The products multiply the zero channels by a kernel padded with zeros to match.
        self.stores_f16()
    }
    fn config(&self) -> serde_json::Value {
        json!({
            "filters": self.filters,
            "kernel_size": [self.kernel_size.0, self.kernel_size.1],
            "strides": [self.strides.0, self.strides.1],
            "padding": padding_to_config(self.padding),
            "dilation_rate": [self.dilation_rate.0, self.dilation_rate.1],
            "groups": self.groups,
            "use_bias": self.use_bias,
            "kernel_initializer": self.kernel_initializer,
        })
    }
    fn flops(&self, input: &[usize]) -> u64 {
        self.geometry(1, input).map(|g| g.flops()).unwrap_or(0)
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let geom = self.geometry(g.batch, &x.shape()[1..])?;
        // An f16 output only from an f16 input: from an f32 one the tensor-core kernel's f16
        // epilogue ran twice as slow (H100, resnet50's stem 0.82 -> 1.74 ms), more than the
        // BatchNorm's cast after it costs.
        let f16_out = self.stores_f16() && x.dtype() == crate::DType::F16;
        let y = if f16_out { g.stored(&geom.output_shape()[1..])? } else { g.activation(&geom.output_shape()[1..])? };
        // An image padded with zero channels (see `Layer::reads_padded_channels`) meets a
        // copy of the kernel padded to match, kept in the record for the backward.
        let padding = self.padding_of(x, &w.params[0])?;
        let (kernel, extra) = match padding {
            Some(Padded { taps, cin, channels }) => {
                let wide = g.device.alloc(&[taps, channels * self.filters], crate::DType::F32)?;
                g.push(concat::pad_block(g.device, &w.params[0].reshape(&[taps, cin * self.filters])?, &wide, 0)?);
                let wide = wide.reshape(&geom.kernel_shape())?;
                (wide.clone(), vec![wide])
            }
            None => (w.params[0].clone(), Vec::new()),
        };
        let bias = self.use_bias.then(|| &w.params[1]);
        let stats = std::mem::take(&mut g.want_statistics);
        let (products, partials) = conv2d::forward_statistics(g.device, &geom, x, &kernel, bias, &y, &g.gemm(), stats)?;
        g.extend(useful_flops(products, padding));
        if let Some(partials) = partials {
            g.statistics = Some((y.clone(), partials));
        }
        // The flip the input gradient reads, written with the other layers' in one dispatch
        // before the backward (Graph::flip_ahead). The padded stem's input gradient would
        // read its wide kernel (and none is taken).
        if g.training && padding.is_none() && conv2d::reads_flipped(g.device, &geom, &g.gemm())? {
            g.flip_ahead(&geom, &w.params[0]);
        }
        Ok(Saved { output: y, extra, inner: Vec::new() })
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        let dx = if need_dx { Dx::Plain } else { Dx::None };
        Ok(self.gradients(g, x, saved, dy, w, dx)?.flatten())
    }
    fn backward_joined(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, join: Join<'_>) -> Result<Option<Tensor>> {
        Ok(self.gradients(g, x, saved, dy, w, Dx::Joined(join))?.flatten())
    }
}

/// Which input gradient [`Conv2D::gradients`] records.
enum Dx<'a> {
    None,
    Plain,
    /// With a residual join finished in its store (see [`Layer::backward_joined`]).
    Joined(Join<'a>),
}

impl Conv2D {
    /// The backward: the kernel's (and bias's) gradient and the input gradient `dx` asks
    /// for. `Ok(None)` where a joined input gradient cannot be taken, with nothing recorded;
    /// else `Ok(Some(dx))`, dx `None` where none was asked for.
    fn gradients(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, dx: Dx<'_>) -> Result<Option<Option<Tensor>>> {
        let geom = self.geometry(g.batch, &x.shape()[1..])?;
        let padding = self.padding_of(x, &w.params[0])?;
        // The forward kept the padded stem's wide kernel, or asked for the flip the input
        // gradient reads (Graph::flip_ahead).
        let (kernel, flipped) = match (padding, saved.extra.first()) {
            (Some(_), Some(wide)) => (wide.clone(), None),
            (Some(_), None) => bail!(Config, "Conv2D: the forward of a padded input kept no padded kernel"),
            (None, _) => (w.params[0].clone(), g.flipped(&w.params[0])),
        };
        // The input gradient first: a join it cannot store leaves nothing recorded. dx as x
        // is stored where the product can write it: a grouped product stores its rows'
        // slices element by element, so its dx is f32 and the caller casts it.
        let (dx, products) = match dx {
            Dx::None => (None, Vec::new()),
            Dx::Plain => {
                let dx = if self.groups == 1 { g.gradient(x)? } else { g.activation(&x.shape()[1..])? };
                // Without a join every path takes the gradient.
                let products = conv2d::backward_data_flipped(g.device, &geom, dy, &kernel, flipped.as_ref(), &dx, None, &g.gemm())?.unwrap_or_default();
                (Some(dx), products)
            }
            // The padded stem's wide kernel is not the layer's; grouped products the kernel
            // call refuses itself.
            Dx::Joined(_) if padding.is_some() => return Ok(None),
            Dx::Joined(join) => {
                let dx = g.gradient(x)?;
                match conv2d::backward_data_flipped(g.device, &geom, dy, &kernel, flipped.as_ref(), &dx, Some(join), &g.gemm())? {
                    Some(products) => (Some(dx), products),
                    None => return Ok(None),
                }
            }
        };
        // The kernel's (and bias's) gradient, recorded after the input gradient and put off
        // past the next layer's first pass (Graph::defer): nothing before the optimizer reads
        // it, and that pass (a BatchNormalization's gradient sums of dx) can run beside it.
        let mut weights = Vec::new();
        let mut reads = vec![x.clone(), dy.clone()];
        match padding {
            // The padded kernel's gradient, whose zero channels' rows are dropped.
            Some(Padded { taps, cin, channels }) => {
                let wide = g.device.alloc(&[taps, channels * self.filters], crate::DType::F32)?;
                let products = conv2d::backward_weights_with(g.device, &geom, x, dy, &wide.reshape(&geom.kernel_shape())?, &g.gemm())?;
                weights.extend(useful_flops(products, padding));
                weights.push(concat::slice_block(g.device, &wide, &w.grads[0].reshape(&[taps, cin * self.filters])?, 0)?);
                reads.push(wide);
            }
            None => weights.extend(conv2d::backward_weights_with(g.device, &geom, x, dy, &w.grads[0], &g.gemm())?),
        }
        if self.use_bias {
            weights.extend(conv2d::backward_bias(g.device, dy, &w.grads[1])?);
        }
        g.extend(products);
        g.defer(weights, reads);
        Ok(Some(dx))
    }
}

/// An input wider than the kernel (an image padded with zero channels): the kernel's `taps`
/// (kh * kw), the `cin` channels it reads, the input's `channels`.
#[derive(Clone, Copy)]
struct Padded {
    taps: usize,
    cin: usize,
    channels: usize,
}

impl Conv2D {
    /// How `x` is padded past the kernel's channels, `None` where x's channels are the
    /// kernel's.
    fn padding_of(&self, x: &Tensor, kernel: &Tensor) -> Result<Option<Padded>> {
        let (xc, cin) = (x.shape().last().copied().unwrap_or(0), kernel.shape().get(2).copied().unwrap_or(0));
        if xc == cin * self.groups {
            return Ok(None);
        }
        if self.groups != 1 || xc < cin {
            bail!(Shape, "Conv2D: input {:?} does not match kernel {:?} ({} groups)", x.shape(), kernel.shape(), self.groups);
        }
        Ok(Some(Padded { taps: self.kernel_size.0 * self.kernel_size.1, cin, channels: xc }))
    }
}

/// The products' FLOPs as the kernel's channels count them, not the padded input's.
fn useful_flops(mut products: Vec<crate::kernels::Dispatch>, padding: Option<Padded>) -> Vec<crate::kernels::Dispatch> {
    if let Some(p) = padding {
        products.iter_mut().for_each(|d| d.flops *= p.cin as f64 / p.channels as f64);
    }
    products
}

/// `"valid"`, `"same"` (Keras' strings) or `[ph, pw]` (explicit, PyTorch-style).
pub fn padding_to_config(p: Padding) -> serde_json::Value {
    match p {
        Padding::Valid => json!("valid"),
        Padding::Same => json!("same"),
        Padding::Explicit(h, w) => json!([h, w]),
    }
}

/// Reads a padding saved by `padding_to_config`: `"valid"`, `"same"` or `[ph, pw]`.
pub fn padding_from_config(v: &serde_json::Value) -> Result<Padding> {
    match v {
        serde_json::Value::String(s) if s == "valid" => Ok(Padding::Valid),
        serde_json::Value::String(s) if s == "same" => Ok(Padding::Same),
        serde_json::Value::Array(a) if a.len() == 2 && a.iter().all(|x| x.as_u64().is_some()) => {
            let (h, w) = (a[0].as_u64().unwrap_or(0), a[1].as_u64().unwrap_or(0));
            let cap = crate::limits::MAX_SIDE as u64;
            if h > cap || w > cap {
                bail!(Config, "padding [{h}, {w}] is above the cap of {cap} per side");
            }
            Ok(Padding::Explicit(h as usize, w as usize))
        }
        other => bail!(Config, "padding must be \"valid\", \"same\" or [h, w], got {other}"),
    }
}
