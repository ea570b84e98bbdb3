//! A residual block: `main(x) + shortcut(x)`, where the shortcut is the identity or a short
//! chain (ResNet's 1x1 projection + BatchNorm). The ReLU after the join is a separate layer,
//! which the model fuses into the join (one pass instead of two over the block's output),
//! and a main chain ending in a BatchNorm writes the join itself (`Layer::forward_joined`:
//! the normalize, the sum and the ReLU in one pass).

use serde_json::json;

use super::{Graph, Layer, ParamSpec, Saved, Weights};
use crate::kernels::conv2d::Join;
use crate::kernels::elementwise;
use crate::{bail, Result, Tensor};

/// A sub-layer as `Residual::walk` visits it.
type Step<'a> = (&'a dyn Layer, Vec<usize>, usize, usize, bool);

#[derive(Debug)]
/// A residual block: `main(x) + shortcut(x)`, the shortcut empty for the identity.
pub struct Residual {
    /// The block's layers, in order.
    pub main: Vec<Box<dyn Layer>>,
    /// The shortcut's layers; empty: the identity.
    pub shortcut: Vec<Box<dyn Layer>>,
    /// Set when the model fuses the following ReLU into the join.
    pub fused_relu: bool,
    /// Per sub-layer in `walk` order: a ReLU fused into the BatchNorm before it (see
    /// `fuse_inner`); empty until the model is compiled.
    fused: Vec<bool>,
}

impl Residual {
    /// A block adding `main(x)` to `shortcut(x)` (`x` itself when `shortcut` is empty).
    pub fn new(main: Vec<Box<dyn Layer>>, shortcut: Vec<Box<dyn Layer>>) -> Self {
        Residual { main, shortcut, fused_relu: false, fused: Vec::new() }
    }

    /// Each sub-layer with its input shape, the index of its first param and state, and
    /// whether it is on the main path.
    fn walk<'a>(&'a self, input: &[usize]) -> Result<Vec<Step<'a>>> {
        let mut out = Vec::new();
        let (mut p, mut s) = (0, 0);
        for (chain, is_main) in [(&self.main, true), (&self.shortcut, false)] {
            let mut shape = input.to_vec();
            for layer in chain.iter() {
                out.push((layer.as_ref(), shape.clone(), p, s, is_main));
                p += layer.params(&shape).len();
                s += layer.states(&shape).len();
                shape = layer.output_shape(&shape)?;
                crate::limits::product("output shape", &shape, crate::limits::MAX_ACTIVATION)?;
            }
        }
        Ok(out)
    }

    fn is_fused(&self, i: usize) -> bool {
        self.fused.get(i).copied().unwrap_or(false)
    }

    fn chain_shape(chain: &[Box<dyn Layer>], input: &[usize]) -> Result<Vec<usize>> {
        // Each sub-layer's output is held to the cap, as the layout does for top-level layers,
        // so that a Flatten inside the block multiplies only bounded sides.
        chain.iter().try_fold(input.to_vec(), |shape, l| {
            let out = l.output_shape(&shape)?;
            crate::limits::product("output shape", &out, crate::limits::MAX_ACTIVATION)?;
            Ok(out)
        })
    }
}

impl Layer for Residual {
    fn class_name(&self) -> &'static str {
        "Residual"
    }
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>> {
        let main = Self::chain_shape(&self.main, input)?;
        let short = Self::chain_shape(&self.shortcut, input)?;
        if main != short {
            bail!(Shape, "residual block: main path gives {main:?} but the shortcut gives {short:?} for input {input:?}");
        }
        Ok(main)
    }
    fn params(&self, input: &[usize]) -> Vec<ParamSpec> {
        self.walk(input).map(|w| w.iter().flat_map(|(l, shape, ..)| l.params(shape)).collect()).unwrap_or_default()
    }
    fn states(&self, input: &[usize]) -> Vec<ParamSpec> {
        self.walk(input).map(|w| w.iter().flat_map(|(l, shape, ..)| l.states(shape)).collect()).unwrap_or_default()
    }
    fn config(&self) -> serde_json::Value {
        let chain = |c: &[Box<dyn Layer>]| -> Vec<serde_json::Value> {
            c.iter().map(|l| json!({ "class_name": l.class_name(), "config": l.config() })).collect()
        };
        json!({ "main": chain(&self.main), "shortcut": chain(&self.shortcut) })
    }
    fn flops(&self, input: &[usize]) -> u64 {
        self.walk(input).map(|w| w.iter().map(|(l, shape, ..)| l.flops(shape)).sum()).unwrap_or(0)
    }
    fn supports_mixed_precision(&self) -> bool {
        // Each inner layer follows the policy as it declares.
        true
    }
    fn stores_f16(&self) -> bool {
        true
    }
    fn fuse_relu(&mut self) -> bool {
        self.fused_relu = true;
        true
    }
    fn tensor_names(&self, input: &[usize], states: bool) -> Vec<String> {
        // Sub-layers are named as Keras names layers, numbered per class across both chains
        // in walk order: `conv2d`, `conv2d_1`, `batch_normalization`, ...
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let mut out = Vec::new();
        for (layer, shape, ..) in self.walk(input).unwrap_or_default() {
            let base = crate::model::layout::snake(layer.class_name());
            let n = seen.entry(base.clone()).or_insert(0);
            let name = if *n == 0 { base } else { format!("{base}_{n}") };
            *n += 1;
            out.extend(layer.tensor_names(&shape, states).into_iter().map(|t| format!("{name}/{t}")));
        }
        out
    }
    fn fuse_inner(&mut self) {
        // A ReLU after a BatchNorm in a chain (ResNet's conv, BN, ReLU) is applied by the
        // BatchNorm's own pass: one pass over the activation instead of two, each way.
        self.fused.clear();
        for chain in [&mut self.main, &mut self.shortcut] {
            let mut prev_fused = true;
            for i in 0..chain.len() {
                let fuse = i > 0 && chain[i].is_plain_relu() && !prev_fused && chain[i - 1].fuse_relu();
                self.fused.push(fuse);
                prev_fused = fuse;
            }
        }
    }
    fn forward(&self, g: &mut Graph, x: &Tensor, w: &Weights) -> Result<Saved> {
        let walk = self.walk(&x.shape()[1..])?;
        let y = g.stored(&self.output_shape(&x.shape()[1..])?)?;
        // The shortcut first, so that the main chain's last layer may write the join itself
        // (Layer::forward_joined); the records stay in walk order, main then shortcut.
        let last_main = walk.iter().rposition(|w| w.4);
        let order = (0..walk.len()).filter(|&i| !walk[i].4).chain((0..walk.len()).filter(|&i| walk[i].4));
        let mut inner: Vec<Option<(Tensor, Saved)>> = vec![None; walk.len()];
        let mut ends = [x.clone(), x.clone()];
        let mut joined = false;
        for i in order {
            let (layer, shape, p, s, is_main) = &walk[i];
            let sub = w.slice(*p, layer.params(shape).len(), *s, layer.states(shape).len());
            let input = ends[!is_main as usize].clone();
            if self.is_fused(i) {
                // The BatchNorm before it wrote relu(y): its record is that output, as a
                // standalone ReLU's would be.
                inner[i] = Some((input.clone(), Saved { output: input, extra: Vec::new(), inner: Vec::new() }));
                continue;
            }
            let input = g.input_for(*layer, &input)?;
            // The next layer of this chain normalises this one's output by its statistics.
            let feeds_statistics = g.training && !g.frozen && walk.get(i + 1).is_some_and(|next| next.4 == *is_main && !self.is_fused(i + 1) && next.0.takes_statistics());
            let saved = g.feeding_statistics(feeds_statistics, |g| -> Result<Saved> {
                if Some(i) != last_main {
                    return g.under_policy_of(*layer, |g| layer.forward(g, &input, &sub));
                }
                // The shortcut's end in the join's storage, for either way of joining.
                ends[1] = g.cast_to(&ends[1], y.dtype())?;
                match g.under_policy_of(*layer, |g| layer.forward_joined(g, &input, &sub, &ends[1], self.fused_relu, &y))? {
                    Some(saved) => {
                        joined = true;
                        Ok(saved)
                    }
                    None => g.under_policy_of(*layer, |g| layer.forward(g, &input, &sub)),
                }
            })?;
            ends[!is_main as usize] = saved.output.clone();
            inner[i] = Some((input, saved));
        }
        if !joined {
            // Both ends in the join's storage: a chain may end in a layer that stores f32.
            let ends = [g.cast_to(&ends[0], y.dtype())?, g.cast_to(&ends[1], y.dtype())?];
            let join = if self.fused_relu { elementwise::add_relu } else { elementwise::add };
            g.push(join(g.device, &ends[0], &ends[1], &y)?);
        }
        Ok(Saved { output: y, extra: Vec::new(), inner: inner.into_iter().flatten().collect() })
    }
    fn masks_dy_by_output(&self) -> bool {
        self.fused_relu
    }
    fn masks_dx_by_input(&self) -> bool {
        true
    }
    fn backward(&self, g: &mut Graph, x: &Tensor, saved: &Saved, dy: &Tensor, w: &Weights, need_dx: bool) -> Result<Option<Tensor>> {
        let walk = self.walk(&x.shape()[1..])?;
        // The flags are the plan's for this block, not for the layers inside it.
        let (dy_masked, mask_dx) = (std::mem::take(&mut g.dy_masked), std::mem::take(&mut g.mask_dx));
        let dy = if self.fused_relu && !dy_masked {
            // dy is stored as the output it is the gradient of (Graph::gradient).
            let masked = g.gradient(dy)?;
            g.push(elementwise::relu_backward(g.device, dy, &saved.output, &masked)?);
            masked
        } else {
            dy.clone()
        };
        // The join's gradient reaches both paths unchanged; walk each chain backwards.
        let mut grads = [dy.clone(), dy];
        let mut joined = None;
        let first_main = walk.iter().position(|w| w.4);
        let first_short = walk.iter().position(|w| !w.4);
        for (i, ((layer, shape, p, s, is_main), (input, rec))) in walk.iter().zip(&saved.inner).enumerate().rev() {
            let sub = w.slice(*p, layer.params(shape).len(), *s, layer.states(shape).len());
            let path = !*is_main as usize;
            if self.is_fused(i) {
                // The BatchNorm before it masks the gradient with its own output.
                continue;
            }
            // Only the first layer of a chain may skip its input gradient.
            let first_of_chain = Some(i) == first_main || Some(i) == first_short;
            let need = need_dx || !first_of_chain;
            // Each gradient stored as the output it belongs to: the join's storage may differ
            // from a chain end's, and a layer that read a cast copy returns the copy's.
            let dy = g.cast_to(&grads[path], rec.output.dtype())?;
            // The main chain's first layer may finish the block's input gradient in its own
            // backward (Layer::backward_joined), the shortcut's gradient complete by then: the
            // shortcut chain follows the main one in the walk, so its layers went first.
            let joins = need_dx && mask_dx && Some(i) == first_main && first_short.is_none_or(|s| s > i) && input.dtype() == x.dtype();
            if joins {
                let d = g.cast_to(&grads[1], x.dtype())?;
                if let Some(dx) = g.under_policy_of(*layer, |g| layer.backward_joined(g, input, rec, &dy, &sub, Join { d: &d, y: x }))? {
                    joined = Some(dx);
                    continue;
                }
            }
            if let Some(d) = g.under_policy_of(*layer, |g| layer.backward(g, input, rec, &dy, &sub, need))? {
                grads[path] = d;
            }
        }
        if !need_dx {
            return Ok(None);
        }
        if joined.is_some() {
            return Ok(joined);
        }
        let ends = [g.cast_to(&grads[0], x.dtype())?, g.cast_to(&grads[1], x.dtype())?];
        let dx = g.gradient(x)?;
        g.push(match mask_dx {
            // x is the block before's ReLU'd output: its mask, applied here.
            true => elementwise::add_relu_backward(g.device, &ends[0], &ends[1], x, &dx)?,
            false => elementwise::add(g.device, &ends[0], &ends[1], &dx)?,
        });
        Ok(Some(dx))
    }
}
