//! The optimizer's update in f64, exactly as `shaders/optimizer.wgsl` performs it, so the
//! weights after several device steps can be compared with the reference's.

use crate::model::layout::Layout;
use crate::optim::Optimizer;
use crate::{bail, Result};

/// Applies update number `step` (counted from 1, for Adam's bias corrections) of `opt`
/// with learning rate `lr` to the flat `params` (the layout of `get_weights`), from one
/// gradient per `layout.params` entry (as [`super::Step::grads`] holds them).
///
/// `state` is the optimizer's state in the flat layout, as `get_weights` returns it: none
/// for plain SGD, the velocity for SGD with momentum, Adam's `m` and `v`; zero before the
/// first step. Weight decay applies only to entries whose `spec.decay` is set (kernels),
/// as the device masks it. Padding between entries is left untouched.
///
/// The formulas (PyTorch's, see `kernels::optimizer`), with `wd` the weight decay:
/// - SGD: `g += wd·p; v = momentum·v + g; u = nesterov ? g + momentum·v : v; p -= lr·u`
///   (momentum 0: no velocity, `u = g`).
/// - Adam: `g += wd·p; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
///   p -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)`.
/// - AdamW: `p *= 1 - lr·wd` first, then the Adam step without the L2 term.
pub fn apply(opt: &Optimizer, step: u64, lr: f64, layout: &Layout, params: &mut [f64], grads: &[Vec<f64>], state: &mut [Vec<f64>]) -> Result<()> {
    if step == 0 {
        bail!(Config, "optimizer steps count from 1, got step 0");
    }
    if grads.len() != layout.params.len() {
        bail!(Shape, "{} gradients for {} parameters", grads.len(), layout.params.len());
    }
    if params.len() < layout.param_len {
        bail!(Shape, "{} flat parameters, the layout needs {}", params.len(), layout.param_len);
    }
    if state.len() != opt.state_count() || state.iter().any(|s| s.len() < layout.param_len) {
        bail!(
            Shape,
            "{opt:?} keeps {} state tensors of {} floats, got {} of lengths {:?}",
            opt.state_count(),
            layout.param_len,
            state.len(),
            state.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
    let wd_all = opt.weight_decay_value() as f64;
    for (e, g) in layout.params.iter().zip(grads) {
        if g.len() != e.spec.len() {
            bail!(Shape, "gradient of `{}` has {} values, the parameter {}", e.name, g.len(), e.spec.len());
        }
        let wd = if e.spec.decay { wd_all } else { 0.0 };
        let range = e.range();
        let p = &mut params[range.clone()];
        match *opt {
            Optimizer::Sgd { momentum, nesterov, decoupled, .. } => {
                let momentum = momentum as f64;
                for (k, (w, &grad)) in p.iter_mut().zip(g).enumerate() {
                    let mut g = grad;
                    if decoupled {
                        *w *= 1.0 - lr * wd;
                    } else {
                        g += wd * *w;
                    }
                    let u = if momentum == 0.0 {
                        g
                    } else {
                        let v = &mut state[0][range.start + k];
                        *v = momentum * *v + g;
                        if nesterov { g + momentum * *v } else { *v }
                    };
                    *w -= lr * u;
                }
            }
            Optimizer::Adam { beta_1, beta_2, epsilon, .. } | Optimizer::AdamW { beta_1, beta_2, epsilon, .. } => {
                let decoupled = matches!(opt, Optimizer::AdamW { .. });
                let (b1, b2, eps) = (beta_1 as f64, beta_2 as f64, epsilon as f64);
                let t = step.min(i32::MAX as u64) as i32;
                let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
                let (m_all, v_all) = state.split_at_mut(1);
                for (k, (w, &grad)) in p.iter_mut().zip(g).enumerate() {
                    let mut g = grad;
                    if decoupled {
                        *w *= 1.0 - lr * wd;
                    } else {
                        g += wd * *w;
                    }
                    let (m, v) = (&mut m_all[0][range.start + k], &mut v_all[0][range.start + k]);
                    *m = b1 * *m + (1.0 - b1) * g;
                    *v = b2 * *v + (1.0 - b2) * g * g;
                    *w -= lr * (*m / bc1) / ((*v / bc2).sqrt() + eps);
                }
            }
        }
    }
    Ok(())
}
