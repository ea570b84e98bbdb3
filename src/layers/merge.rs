//! Merge layers of the functional API: `Add` and `Concatenate` join the outputs of several
//! branches (Keras' `layers.Add()([a, b])`, `layers.Concatenate()([a, b])`).

use serde_json::json;

use super::{Graph, Layer, Saved, Weights};
use crate::kernels::{concat, elementwise};
use crate::{bail, Result, Tensor};

/// The element-wise sum of two or more inputs of one shape (a residual join). A ReLU that
/// directly follows it is fused into the sum, as in a `Residual` block.
#[derive(Debug, Default, Clone)]
pub struct Add {
    /// Set when the model fuses the following ReLU into the sum.
    fused_relu: bool,
}

impl Add {
    /// A sum of the inputs it is called on.
    pub fn new() -> Self {
        Add::default()
    }
}

/// A merge layer's refusal of a single input, named as Keras names it.
fn needs_several(class: &str) -> crate::Error {
    crate::Error::Shape(format!("{class} merges two or more inputs: call it on a list of tensors in a functional model"))
}

impl Layer for Add {
    fn class_name(&self) -> &'static str {
        "Add"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn stores_f16(&self) -> bool {
        true
    }
    fn output_shape(&self, _: &[usize]) -> Result<Vec<usize>> {
        Err(needs_several("Add"))
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn forward(&self, _: &mut Graph, _: &Tensor, _: &Weights) -> Result<Saved> {
        Err(needs_several("Add"))
    }
    fn backward(&self, _: &mut Graph, _: &Tensor, _: &Saved, _: &Tensor, _: &Weights, _: bool) -> Result<Option<Tensor>> {
        Err(needs_several("Add"))
    }
    fn fuse_relu(&mut self) -> bool {
        self.fused_relu = true;
        true
    }
    fn is_merge(&self) -> bool {
        true
    }
    fn output_shape_of(&self, inputs: &[Vec<usize>]) -> Result<Vec<usize>> {
        if inputs.len() < 2 {
            return Err(needs_several("Add"));
        }
        if let Some(other) = inputs.iter().find(|s| **s != inputs[0]) {
            bail!(Shape, "Add needs inputs of one shape, got {:?} and {other:?}", inputs[0]);
        }
        Ok(inputs[0].clone())
    }
    fn forward_all(&self, g: &mut Graph, xs: &[Tensor], _: &Weights) -> Result<Saved> {
        if xs.len() < 2 {
            return Err(needs_several("Add"));
        }
        // A running sum: each partial sum is a fresh tensor (a kernel may not read and write
        // one buffer), the last one with the fused ReLU.
        let mut sum = xs[0].clone();
        for (k, x) in xs.iter().enumerate().skip(1) {
            let out = g.stored(&x.shape()[1..])?;
            let last = k + 1 == xs.len();
            let op = if last && self.fused_relu { elementwise::add_relu } else { elementwise::add };
            g.push(op(g.device, &sum, x, &out)?);
            sum = out;
        }
        Ok(Saved::output(sum))
    }
    fn backward_all(&self, g: &mut Graph, xs: &[Tensor], saved: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Vec<Option<Tensor>>> {
        if !need_dx {
            return Ok(vec![None; xs.len()]);
        }
        // The sum passes its gradient to every input unchanged (after the fused ReLU's mask).
        let dy = if self.fused_relu {
            // dy is stored as the output it is the gradient of (Graph::gradient).
            let masked = g.gradient(dy)?;
            g.push(elementwise::relu_backward(g.device, dy, &saved.output, &masked)?);
            masked
        } else {
            dy.clone()
        };
        Ok(vec![Some(dy); xs.len()])
    }
}

/// The concatenation of two or more inputs along the channel (last) axis, their other
/// dimensions equal (Keras' `Concatenate(axis=-1)`, the only axis convoy supports).
#[derive(Debug, Default, Clone)]
pub struct Concatenate;

impl Concatenate {
    /// A concatenation along the last axis.
    pub fn new() -> Self {
        Concatenate
    }
}

impl Layer for Concatenate {
    fn class_name(&self) -> &'static str {
        "Concatenate"
    }
    fn output_shape(&self, _: &[usize]) -> Result<Vec<usize>> {
        Err(needs_several("Concatenate"))
    }
    fn config(&self) -> serde_json::Value {
        json!({ "axis": -1 })
    }
    fn forward(&self, _: &mut Graph, _: &Tensor, _: &Weights) -> Result<Saved> {
        Err(needs_several("Concatenate"))
    }
    fn backward(&self, _: &mut Graph, _: &Tensor, _: &Saved, _: &Tensor, _: &Weights, _: bool) -> Result<Option<Tensor>> {
        Err(needs_several("Concatenate"))
    }
    fn is_merge(&self) -> bool {
        true
    }
    fn output_shape_of(&self, inputs: &[Vec<usize>]) -> Result<Vec<usize>> {
        if inputs.len() < 2 {
            return Err(needs_several("Concatenate"));
        }
        let lead = |s: &[usize]| s[..s.len().saturating_sub(1)].to_vec();
        if let Some(other) = inputs.iter().find(|s| s.is_empty() || lead(s) != lead(&inputs[0])) {
            bail!(Shape, "Concatenate joins along the last axis inputs whose other dimensions agree, got {:?} and {other:?}", inputs[0]);
        }
        let mut out = inputs[0].clone();
        let total = inputs.iter().try_fold(0usize, |t, s| t.checked_add(*s.last().unwrap()));
        *out.last_mut().unwrap() = total.ok_or_else(|| crate::Error::Shape(format!("Concatenate: channels of {inputs:?} overflow")))?;
        crate::limits::product("Concatenate output", &out, crate::limits::MAX_ACTIVATION)?;
        Ok(out)
    }
    fn forward_all(&self, g: &mut Graph, xs: &[Tensor], _: &Weights) -> Result<Saved> {
        let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape()[1..].to_vec()).collect();
        let y = g.activation(&self.output_shape_of(&shapes)?)?;
        let mut offset = 0;
        for x in xs {
            g.push(concat::concat_block(g.device, x, &y, offset)?);
            offset += x.shape().last().copied().unwrap_or(0);
        }
        Ok(Saved::output(y))
    }
    fn backward_all(&self, g: &mut Graph, xs: &[Tensor], _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Vec<Option<Tensor>>> {
        if !need_dx {
            return Ok(vec![None; xs.len()]);
        }
        let mut offset = 0;
        let mut out = Vec::with_capacity(xs.len());
        for x in xs {
            let dx = g.activation(&x.shape()[1..])?;
            g.push(concat::slice_block(g.device, dy, &dx, offset)?);
            offset += x.shape().last().copied().unwrap_or(0);
            out.push(Some(dx));
        }
        Ok(out)
    }
}
