//! BatchNormalization over the last (channel) axis, with Keras' defaults (momentum 0.99,
//! epsilon 1e-3). A ReLU that directly follows is fused into its kernels.

use serde_json::json;

use super::{Graph, Init, Layer, ParamSpec, Saved, Weights};
use crate::kernels::batchnorm::{self, BatchNormConfig};
use crate::{bail, Result, Tensor};

#[derive(Debug, Clone)]
/// Batch normalization over the channel axis (Keras' `BatchNormalization`): normalizes with the
/// batch's statistics while training and with the moving ones in evaluation, then scales by `gamma`
/// and shifts by `beta`. Frozen (`Sequential::set_trainable(i, false)`, here or on the residual
/// block around it), it runs in inference mode in training too, as in Keras 3: the moving
/// statistics normalise and are not updated, and gamma and beta get no gradient.
///
/// The moving variance is fed the biased batch variance (divided by the rows, as Keras 3);
/// PyTorch feeds its running variance the unbiased one. Statistics imported from PyTorch
/// ([`crate::import`]) follow convoy's rule from the first training step on.
pub struct BatchNormalization {
    /// Weight of the old moving statistics in each update: `moving = momentum * moving + (1 -
    /// momentum) * batch`.
    pub momentum: f32,
    /// Added to the variance before its square root.
    pub epsilon: f32,
    /// Set when the model fuses the following ReLU into this layer.
    pub fused_relu: bool,
}

impl Default for BatchNormalization {
    fn default() -> Self {
        BatchNormalization { momentum: 0.99, epsilon: 1e-3, fused_relu: false }
    }
}

impl BatchNormalization {
    /// Keras' defaults: momentum 0.99, epsilon 1e-3.
    pub fn new() -> Self {
        Self::default()
    }
    /// The moving statistics' momentum (Keras' `momentum`).
    pub fn momentum(mut self, m: f32) -> Self {
        self.momentum = m;
        self
    }
    /// The variance's epsilon (Keras' `epsilon`).
    pub fn epsilon(mut self, e: f32) -> Self {
        self.epsilon = e;
        self
    }
    fn cfg(&self) -> BatchNormConfig {
        BatchNormConfig { momentum: self.momentum, epsilon: self.epsilon, relu: self.fused_relu, engine: None, merge_last: None }
    }
}

impl Layer for BatchNormalization {
    fn class_name(&self) -> &'static str {
        "BatchNormalization"
    }
    fn supports_mixed_precision(&self) -> bool {
        true
    }
    fn stores_f16(&self) -> bool {
        true
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        if input.is_empty() {
            bail!(Shape, "BatchNormalization needs at least a channel axis, got {input:?}");
        }
        if !(0.0..=1.0).contains(&self.momentum) || self.epsilon <= 0.0 {
            bail!(Config, "BatchNormalization needs momentum in [0, 1] and epsilon > 0, got {} and {}", self.momentum, self.epsilon);
        }
        Ok(input.to_vec())
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        let c = *input.last().unwrap_or(&0);
        vec![ParamSpec::new("gamma", vec![c], Init::Ones, false), ParamSpec::new("beta", vec![c], Init::Zeros, false)]
    }
    fn states(&self, input: &[usize]) -> Vec<ParamSpec> {
        let c = *input.last().unwrap_or(&0);
        vec![ParamSpec::new("moving_mean", vec![c], Init::Zeros, false), ParamSpec::new("moving_variance", vec![c], Init::Ones, false)]
    }
    fn config(&self) -> serde_json::Value {
        json!({ "momentum": self.momentum, "epsilon": self.epsilon })
    }
    fn fuse_relu(&mut self) -> bool {
        self.fused_relu = true;
        true
    }
    fn takes_statistics(&self) -> bool {
        true
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let y = g.stored(&x.shape()[1..])?;
        let (gamma, beta, mean, var) = (&w.params[0], &w.params[1], &w.states[0], &w.states[1]);
        // Keras 3: a frozen BatchNormalization runs in inference mode, in training too.
        if g.training && !g.frozen {
            let c = *x.shape().last().unwrap();
            let saved = g.device.alloc(&[2, c], crate::DType::F32)?;
            let mut extra = vec![saved.clone()];
            match g.take_statistics(x) {
                Some(partials) => {
                    g.extend(batchnorm::forward_train_with(g.device, &self.cfg(), x, None, &partials, gamma, beta, mean, var, &saved, &y)?);
                    // Held as long as the step's records: the merge binds it.
                    extra.push(partials.tensor);
                }
                None => g.extend(batchnorm::forward_train(g.device, &self.cfg(), x, gamma, beta, mean, var, &saved, &y)?),
            }
            Ok(Saved { output: y, extra, inner: Vec::new() })
        } else {
            g.extend(batchnorm::forward_infer(g.device, &self.cfg(), x, gamma, beta, mean, var, &y)?);
            Ok(Saved::output(y))
        }
    }
    fn forward_joined(&self, g: &mut Graph, x: &Tensor, w: &Weights, addend: &Tensor, relu: bool, out: &Tensor) -> Result<Option<Saved>> {
        // Its own ReLU would come before the join; the joined passes take whole quads only.
        let quads = x.shape().last().is_some_and(|c| c % 4 == 0);
        if self.fused_relu || !quads || x.dtype() != out.dtype() || addend.dtype() != out.dtype() {
            return Ok(None);
        }
        let (gamma, beta, mean, var) = (&w.params[0], &w.params[1], &w.states[0], &w.states[1]);
        let cfg = BatchNormConfig { relu, ..self.cfg() };
        // The record's output is the block's: the training backward does not read it, and
        // the frozen one binds it, unread, as y (this layer has no ReLU of its own).
        if g.training && !g.frozen {
            let saved = g.device.alloc(&[2, *x.shape().last().unwrap()], crate::DType::F32)?;
            let mut extra = vec![saved.clone()];
            match g.take_statistics(x) {
                Some(partials) => {
                    g.extend(batchnorm::forward_train_with(g.device, &cfg, x, Some(addend), &partials, gamma, beta, mean, var, &saved, out)?);
                    extra.push(partials.tensor);
                }
                None => g.extend(batchnorm::forward_train_joined(g.device, &cfg, x, addend, gamma, beta, mean, var, &saved, out)?),
            }
            Ok(Some(Saved { output: out.clone(), extra, inner: Vec::new() }))
        } else {
            g.extend(batchnorm::forward_infer_joined(g.device, &cfg, x, addend, gamma, beta, mean, var, out)?);
            Ok(Some(Saved::output(out.clone())))
        }
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, _need_dx: bool) -> Result<Option<Tensor>> {
        let dx = g.gradient(x)?;
        if g.frozen {
            // The inference transform's gradient; gamma's and beta's stay as they are (zero:
            // nothing writes them), as Keras computes none for a frozen layer.
            g.extend(batchnorm::backward_infer(g.device, &self.cfg(), &saved.output, dy, &w.params[0], &w.states[1], &dx)?);
            return Ok(Some(dx));
        }
        let stats = saved.extra.first().ok_or_else(|| crate::Error::Config("BatchNormalization backward without a training forward".into()))?;
        g.extend(batchnorm::backward(g.device, &self.cfg(), x, dy, &w.params[0], &w.params[1], stats, &dx, &w.grads[0], &w.grads[1])?);
        Ok(Some(dx))
    }
}
