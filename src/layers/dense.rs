//! Dense: `y = x · kernel + bias` on `[batch, units_in]` input.

use serde_json::json;

use super::{Graph, Init, Layer, ParamSpec, Saved, Weights};
use crate::kernels::dense;
use crate::{bail, Result, Tensor};

#[derive(Debug, Clone)]
/// A fully connected layer (Keras' `Dense`): `[batch, in]` input, `[in, units]` kernel, `[units]`
/// bias.
pub struct Dense {
    /// Output features.
    pub units: usize,
    /// Whether a bias is added.
    pub use_bias: bool,
}

impl Dense {
    /// `units` outputs with a bias and a Glorot-uniform kernel (Keras' defaults).
    pub fn new(units: usize) -> Self {
        Dense { units, use_bias: true }
    }
    /// Whether a bias is added (Keras' `use_bias`, on by default).
    pub fn use_bias(mut self, b: bool) -> Self {
        self.use_bias = b;
        self
    }
}

impl Layer for Dense {
    fn class_name(&self) -> &'static str {
        "Dense"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.len() != 1 {
            bail!(Shape, "Dense expects flat (features,) input, got {input:?}: add a Flatten or GlobalAveragePooling2D before it");
        }
        if self.units == 0 {
            bail!(Config, "Dense needs at least one unit");
        }
        Ok(vec![self.units])
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        let fan_in = input.first().copied().unwrap_or(0);
        let mut p = vec![ParamSpec::new("kernel", vec![fan_in, self.units], Init::GlorotUniform { fan_in, fan_out: self.units }, true)];
        if self.use_bias {
            p.push(ParamSpec::new("bias", vec![self.units], Init::Zeros, false));
        }
        p
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn config(&self) -> serde_json::Value {
        json!({ "units": self.units, "use_bias": self.use_bias })
    }
    fn flops(&self, input: &[usize]) -> u64 {
        2 * input.first().copied().unwrap_or(0) as u64 * self.units as u64
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let y = g.activation(&[self.units])?;
        g.extend(dense::dense_forward_with(g.device, x, &w.params[0], w.params.get(1), &y, &g.gemm())?);
        Ok(Saved::output(y))
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        let dx = if need_dx { Some(g.activation(&x.shape()[1..])?) } else { None };
        g.extend(dense::dense_backward_with(g.device, x, &w.params[0], dy, dx.as_ref(), &w.grads[0], w.grads.get(1), &g.gemm())?);
        Ok(dx)
    }
}
