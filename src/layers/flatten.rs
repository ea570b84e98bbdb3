//! Flatten: in NHWC a reshape, so it records no kernel at all.

use serde_json::json;

use super::{Graph, Layer, Saved, Weights};
use crate::{Result, Tensor};

#[derive(Debug, Default, Clone)]
/// Flattens each sample to one axis (Keras' `Flatten`): `[batch, h, w, c]` to `[batch, h * w * c]`.
pub struct Flatten;

impl Flatten {
    /// The layer; it has no arguments.
    pub fn new() -> Self {
        Flatten
    }
}

impl Layer for Flatten {
    fn class_name(&self) -> &'static str {
        "Flatten"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        Ok(vec![crate::limits::product("Flatten input", input, crate::limits::MAX_ACTIVATION)?])
    }
    fn config(&self) -> serde_json::Value {
        json!({})
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, _: &Weights) -> Result<Saved> {
        Ok(Saved::output(x.reshape(&[g.batch, x.len() / g.batch.max(1)])?))
    }
    fn backward(&self, _: &mut Graph, x: &Tensor, _: &Saved, dy: &Tensor, _: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        Ok(if need_dx { Some(dy.reshape(x.shape())?) } else { None })
    }
}
