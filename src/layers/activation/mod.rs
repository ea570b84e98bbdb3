//! Activation layers: ReLU (with Keras' `max_value` and `negative_slope`), LeakyReLU, the
//! function-by-name `Activation` and Softmax.

mod function;
mod relu;
mod softmax;

pub use function::{Activation, ActivationFn};
pub use relu::{LeakyReLU, ReLU};
pub use softmax::Softmax;

use super::{Graph, Saved};
use crate::kernels::activation::{self, Function};
use crate::{Result, Tensor};

/// Records `y = f(x)`; the backward pass reads `x` (see [`backward`]). `y` is stored as x is
/// ([`Graph::like`]): between f16 BatchNorms f16, where an f32 output cost a cast each way,
/// and between f32 layers f32.
fn forward(g: &mut Graph, x: &Tensor, f: Function) -> Result<Saved> {
    let y = g.like(x)?;
    g.push(activation::activation_forward(g.device, f, x, &y)?);
    Ok(Saved::output(y))
}

/// Records `dx = dy * f'(x)`, `dx` stored as `x` ([`Graph::gradient`]).
fn backward(g: &mut Graph, x: &Tensor, dy: &Tensor, f: Function, need_dx: bool) -> Result<Option<Tensor>> {
    if !need_dx {
        return Ok(None);
    }
    let dx = g.gradient(x)?;
    g.push(activation::activation_backward(g.device, f, dy, x, &dx)?);
    Ok(Some(dx))
}
