//! MaxPool2D, AveragePooling2D, GlobalAveragePooling2D and GlobalMaxPooling2D over NHWC input.

use serde_json::json;

use super::{Graph, Layer, Saved, Weights};
use crate::kernels::pool::{self, Pool2dGeometry, PoolPadding};
use crate::{bail, DType, Result, Tensor};

/// Keras' shared arguments of the two windowed pools.
#[derive(Debug, Clone)]
struct Window {
    pool_size: (usize, usize),
    strides: (usize, usize),
    padding: PoolPadding,
}

impl Window {
    fn geometry(&self, class: &str, batch: usize, input: &[usize]) -> Result<Pool2dGeometry> {
        if input.len() != 3 {
            bail!(Shape, "{class} expects (height, width, channels) input, got {input:?}");
        }
        Pool2dGeometry::new(&[batch, input[0], input[1], input[2]], [self.pool_size.0, self.pool_size.1], Some([self.strides.0, self.strides.1]), self.padding)
    }
    fn config(&self) -> serde_json::Value {
        json!({
            "pool_size": [self.pool_size.0, self.pool_size.1],
            "strides": [self.strides.0, self.strides.1],
            "padding": self.padding.to_config(),
        })
    }
}

#[derive(Debug, Clone)]
/// Max pooling over windows of each channel (Keras' `MaxPool2D`).
pub struct MaxPool2D(Window);

impl MaxPool2D {
    /// A square window; strides default to the window (Keras' default), `valid` padding.
    pub fn new(pool_size: usize) -> Self {
        MaxPool2D(Window { pool_size: (pool_size, pool_size), strides: (pool_size, pool_size), padding: PoolPadding::Valid })
    }
    /// The same stride vertically and horizontally.
    pub fn strides(mut self, s: usize) -> Self {
        self.0.strides = (s, s);
        self
    }
    /// `PoolPadding::Valid` (the default) or `Same`.
    pub fn padding(mut self, p: PoolPadding) -> Self {
        self.0.padding = p;
        self
    }
}

impl Layer for MaxPool2D {
    fn class_name(&self) -> &'static str {
        "MaxPool2D"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn stores_f16(&self) -> bool {
        true
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(self.0.geometry("MaxPool2D", 1, input)?.output_shape()[1..].to_vec())
    }
    fn config(&self) -> serde_json::Value {
        self.0.config()
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let geom = self.0.geometry("MaxPool2D", g.batch, &x.shape()[1..])?;
        let y = g.stored(&geom.output_shape()[1..])?;
        let argmax = g.device.alloc(&pool::argmax_shape(&geom), DType::U32)?;
        g.push(pool::max_pool_forward(g.device, &geom, x, &y, &argmax)?);
        Ok(Saved { output: y, extra: vec![argmax], inner: Vec::new() })
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let geom = self.0.geometry("MaxPool2D", g.batch, &x.shape()[1..])?;
        let dx = g.gradient(x)?;
        g.push(pool::max_pool_backward(g.device, &geom, dy, &saved.extra[0], &dx)?);
        Ok(Some(dx))
    }
}

#[derive(Debug, Clone)]
/// Average pooling over windows of each channel (Keras' `AveragePooling2D`).
pub struct AveragePooling2D(Window);

impl AveragePooling2D {
    /// A square window; strides default to the window (Keras' default), `valid` padding.
    pub fn new(pool_size: usize) -> Self {
        AveragePooling2D(Window { pool_size: (pool_size, pool_size), strides: (pool_size, pool_size), padding: PoolPadding::Valid })
    }
    /// The same stride vertically and horizontally.
    pub fn strides(mut self, s: usize) -> Self {
        self.0.strides = (s, s);
        self
    }
    /// `PoolPadding::Valid` (the default) or `Same`.
    pub fn padding(mut self, p: PoolPadding) -> Self {
        self.0.padding = p;
        self
    }
}

impl Layer for AveragePooling2D {
    fn class_name(&self) -> &'static str {
        "AveragePooling2D"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(self.0.geometry("AveragePooling2D", 1, input)?.output_shape()[1..].to_vec())
    }
    fn config(&self) -> serde_json::Value {
        self.0.config()
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let geom = self.0.geometry("AveragePooling2D", g.batch, &x.shape()[1..])?;
        let y = g.device.alloc(&geom.output_shape(), DType::F32)?;
        g.push(pool::avg_pool_forward(g.device, &geom, x, &y)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let geom = self.0.geometry("AveragePooling2D", g.batch, &x.shape()[1..])?;
        let dx = g.activation(&x.shape()[1..])?;
        g.push(pool::avg_pool_backward(g.device, &geom, dy, &dx)?);
        Ok(Some(dx))
    }
}

#[derive(Debug, Clone, Default)]
/// The mean of each channel over height and width (Keras' `GlobalAveragePooling2D`): `[batch, h, w,
/// c]` to `[batch, c]`.
pub struct GlobalAveragePooling2D;

impl GlobalAveragePooling2D {
    /// The layer; it has no arguments.
    pub fn new() -> Self {
        GlobalAveragePooling2D
    }
}

impl Layer for GlobalAveragePooling2D {
    fn class_name(&self) -> &'static str {
        "GlobalAveragePooling2D"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn stores_f16(&self) -> bool {
        true
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.len() != 3 {
            bail!(Shape, "GlobalAveragePooling2D expects (height, width, channels) input, got {input:?}");
        }
        Ok(vec![input[2]])
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let y = g.stored(&[x.shape()[3]])?;
        g.push(pool::global_avg_pool_forward(g.device, x, &y)?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let dx = g.gradient(x)?;
        g.push(pool::global_avg_pool_backward(g.device, dy, &dx)?);
        Ok(Some(dx))
    }
}

/// Keras' `layers.GlobalMaxPooling2D(keepdims=False)`: the maximum over height and width of
/// each channel. On ties the first maximum (row-major) takes the gradient, as in
/// [`MaxPool2D`]; a map holding NaN outputs NaN.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GlobalMaxPooling2D {
    keepdims: bool,
}

impl GlobalMaxPooling2D {
    /// Outputs `(channels,)`.
    pub fn new() -> Self {
        GlobalMaxPooling2D::default()
    }
    /// Outputs `(1, 1, channels)` instead, as Keras' `keepdims=True`.
    pub fn keepdims(mut self, keepdims: bool) -> Self {
        self.keepdims = keepdims;
        self
    }
}

impl Layer for GlobalMaxPooling2D {
    fn class_name(&self) -> &'static str {
        "GlobalMaxPooling2D"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.len() != 3 || input.contains(&0) {
            bail!(Shape, "GlobalMaxPooling2D expects a non-empty (height, width, channels) input, got {input:?}");
        }
        Ok(if self.keepdims { vec![1, 1, input[2]] } else { vec![input[2]] })
    }
    fn config(&self) -> serde_json::Value {
        json!({ "keepdims": self.keepdims })
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        let c = x.shape()[3];
        let y = g.activation(&[c])?;
        let argmax = g.device.alloc(&pool::global_argmax_shape(x.shape())?, DType::U32)?;
        g.push(pool::global_max_pool_forward(g.device, x, &y, &argmax)?);
        let y = y.reshape(&[&[g.batch][..], &self.output_shape(&x.shape()[1..])?].concat())?;
        Ok(Saved { output: y, extra: vec![argmax], inner: Vec::new() })
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        if !need_dx {
            return Ok(None);
        }
        let dx = g.activation(&x.shape()[1..])?;
        let dy = dy.reshape(&[g.batch, x.shape()[3]])?;
        g.push(pool::global_max_pool_backward(g.device, &dy, &saved.extra[0], &dx)?);
        Ok(Some(dx))
    }
}
