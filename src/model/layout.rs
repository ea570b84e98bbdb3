//! Where every parameter lives in the model's flat tensors, and how it starts.
//!
//! Parameters, their gradients and the optimizer state are one flat f32 tensor each, with
//! every parameter at a 64-float (256-byte) boundary so it can be bound as a view. The
//! optimizer then updates the whole model in a few dispatches and the gradient exchange
//! moves contiguous ranges. BatchNorm's moving statistics live in a second flat tensor.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::layers::{Init, Layer, ParamSpec};
use crate::limits::{self, MAX_ACTIVATION, MAX_PARAMS, MAX_SAMPLE_BYTES};
use crate::Result;

/// Floats per alignment unit: 256 bytes, the binding offset alignment of every adapter.
pub const ALIGN: usize = 64;

#[derive(Clone, Debug)]
/// Where one parameter or state tensor sits in the model's flat tensor.
pub struct Entry {
    /// `conv2d_3/kernel`, `residual_2/batch_normalization_1/gamma`
    pub name: String,
    /// The name files written before sub-layers were named carry: the same for a plain layer,
    /// `residual_2/4_gamma` (the position in the block's list) for a sub-layer's. Loading
    /// falls back to it.
    pub legacy_name: String,
    /// The index of the layer that owns it.
    pub layer: usize,
    /// Its name, shape, initializer and weight decay, as the layer declared it.
    pub spec: ParamSpec,
    /// Offset in floats.
    pub offset: usize,
}

impl Entry {
    /// Where the tensor's values sit in the flat tensor (its padding excluded).
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.spec.len()
    }
}

#[derive(Clone, Debug, Default)]
/// Every parameter and state tensor of a model in one flat f32 tensor each, each tensor aligned to
/// [`ALIGN`] floats so it can be bound on its own.
pub struct Layout {
    /// The trainable parameters, in layer order.
    pub params: Vec<Entry>,
    /// The state tensors (moving statistics), in layer order.
    pub states: Vec<Entry>,
    /// Total floats, padding included.
    pub param_len: usize,
    /// Total floats of the state tensor, padding included.
    pub state_len: usize,
    /// Per layer: (first param, count, first state, count).
    pub per_layer: Vec<(usize, usize, usize, usize)>,
    /// Keras-style layer names (`conv2d`, `conv2d_1`, ...).
    pub layer_names: Vec<String>,
    /// Per-sample output shape of each layer.
    pub shapes: Vec<Vec<usize>>,
    /// Per layer, the nodes it reads: 0 is the model's input, `j > 0` the output of layer
    /// `j - 1` (see [`inbound_of`]).
    pub inbound: Vec<Vec<usize>>,
}

/// The nodes layer `i` reads, from a model's `inbound` lists: node 0 is the model's input and
/// node `j > 0` the output of layer `j - 1`. A layer past the end of the lists reads the
/// layer before it, so a `Sequential` keeps them empty and a layer added to a functional
/// model reads its output.
pub fn inbound_of(inbound: &[Vec<usize>], i: usize) -> Vec<usize> {
    inbound.get(i).cloned().unwrap_or_else(|| vec![i])
}

/// Keras' snake-case naming: `BatchNormalization` -> `batch_normalization`.
pub fn snake(class: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = class.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 && (chars[i - 1].is_lowercase() || chars.get(i + 1).is_some_and(|n| n.is_lowercase())) && chars[i - 1] != '2' {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

impl Layout {
    /// Places every parameter and state of `layers` on `input`. Each declared size is
    /// multiplied with checked arithmetic and held to the caps of [`crate::limits`]: the
    /// input's per-sample bytes, each layer's per-sample output, each tensor and the totals,
    /// so that nothing is allocated from a size no real model has.
    pub fn new(input: &[usize], layers: &[Box<dyn Layer>]) -> Result<Layout> {
        Self::graph(input, layers, &[])
    }

    /// [`Layout::new`] for a model whose layers read the nodes `inbound` names (a functional
    /// model; see [`inbound_of`]). Each layer must read only the input or layers before it,
    /// one node unless it merges several, and every layer but the last must be read by
    /// another: the last layer's output is the model's.
    pub fn graph(input: &[usize], layers: &[Box<dyn Layer>], inbound: &[Vec<usize>]) -> Result<Layout> {
        limits::product("input shape", input, MAX_SAMPLE_BYTES)?;
        let mut l = Layout::default();
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let mut read = vec![false; layers.len() + 1];
        for (i, layer) in layers.iter().enumerate() {
            let from = inbound_of(inbound, i);
            if let Some(&j) = from.iter().find(|&&j| j > i) {
                crate::bail!(Config, "layer {i} ({}) reads node {j}, which is not the input (0) or a layer before it (1..={i})", layer.class_name());
            }
            let arity_ok = if layer.is_merge() { from.len() >= 2 } else { from.len() == 1 };
            if !arity_ok {
                crate::bail!(Config, "layer {i} ({}) reads {} nodes {from:?}: {}", layer.class_name(), from.len(), if layer.is_merge() { "a merge layer takes two or more" } else { "it takes one" });
            }
            from.iter().for_each(|&j| read[j] = true);
            let inputs: Vec<Vec<usize>> = from.iter().map(|&j| if j == 0 { input.to_vec() } else { l.shapes[j - 1].clone() }).collect();
            let shape = inputs[0].clone();
            let base = snake(layer.class_name());
            let n = seen.entry(base.clone()).or_insert(0);
            let name = if *n == 0 { base.clone() } else { format!("{base}_{n}") };
            *n += 1;
            let (p0, s0) = (l.params.len(), l.states.len());
            let (params, states) = (layer.params(&shape), layer.states(&shape));
            let (param_names, state_names) = (layer.tensor_names(&shape, false), layer.tensor_names(&shape, true));
            let at = |e: crate::Error| crate::Error::Config(format!("layer {i} ({name}): {e}"));
            for (k, spec) in params.iter().enumerate() {
                let len = limits::product(&format!("parameter `{}` of shape", spec.name), &spec.shape, MAX_PARAMS).map_err(at)?;
                let entry = Entry { name: format!("{name}/{}", param_names[k]), legacy_name: legacy_name(&name, &params, k), layer: i, spec: spec.clone(), offset: l.param_len };
                l.params.push(entry);
                l.param_len = total("parameters", l.param_len, len).map_err(at)?;
            }
            for (k, spec) in states.iter().enumerate() {
                let len = limits::product(&format!("state `{}` of shape", spec.name), &spec.shape, MAX_PARAMS).map_err(at)?;
                let entry = Entry { name: format!("{name}/{}", state_names[k]), legacy_name: legacy_name(&name, &states, k), layer: i, spec: spec.clone(), offset: l.state_len };
                l.states.push(entry);
                l.state_len = total("moving statistics", l.state_len, len).map_err(at)?;
            }
            l.per_layer.push((p0, l.params.len() - p0, s0, l.states.len() - s0));
            let out = layer.output_shape_of(&inputs).map_err(|e| crate::Error::Shape(format!("layer {i} ({name}): {e}")))?;
            limits::product("output shape", &out, MAX_ACTIVATION).map_err(at)?;
            l.layer_names.push(name);
            l.shapes.push(out);
            l.inbound.push(from);
        }
        if let Some(i) = (1..layers.len()).find(|&j| !read[j]) {
            crate::bail!(Config, "the output of layer {} ({}) is read by no layer and is not the model's output (the last layer's)", i - 1, l.layer_names[i - 1]);
        }
        l.param_len = l.param_len.max(ALIGN);
        l.state_len = l.state_len.max(ALIGN);
        Ok(l)
    }

    /// Trainable parameter count (no padding).
    pub fn trainable_count(&self) -> usize {
        self.params.iter().map(|e| e.spec.len()).sum()
    }
    /// State count (moving statistics; no padding).
    pub fn state_count(&self) -> usize {
        self.states.iter().map(|e| e.spec.len()).sum()
    }

    /// Initial values of every parameter and state, drawn from `seed`.
    pub fn initial_values(&self, seed: u64) -> (Vec<f32>, Vec<f32>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut params = vec![0.0f32; self.param_len];
        for e in &self.params {
            fill(&mut params[e.range()], e.spec.init, &mut rng);
        }
        let mut states = vec![0.0f32; self.state_len];
        for e in &self.states {
            fill(&mut states[e.range()], e.spec.init, &mut rng);
        }
        (params, states)
    }

    /// Ranges (offset, len in floats, both 64-aligned) that weight decay does and does not
    /// apply to, merged where neighbours agree, covering the whole flat tensor.
    pub fn decay_ranges(&self) -> Vec<(usize, usize, bool)> {
        let mut out: Vec<(usize, usize, bool)> = Vec::new();
        for e in &self.params {
            let len = e.spec.len().div_ceil(ALIGN) * ALIGN;
            match out.last_mut() {
                Some(last) if last.2 == e.spec.decay && last.0 + last.1 == e.offset => last.1 += len,
                _ => out.push((e.offset, len, e.spec.decay)),
            }
        }
        if out.is_empty() {
            out.push((0, self.param_len, false));
        }
        out
    }
}

/// `sum` plus a tensor of `len` floats padded to [`ALIGN`], held to [`MAX_PARAMS`].
fn total(what: &str, sum: usize, len: usize) -> Result<usize> {
    // Both terms are at most MAX_PARAMS (2^31), so neither the padding nor the sum overflows.
    let next = sum + len.div_ceil(ALIGN) * ALIGN;
    if next > MAX_PARAMS {
        crate::bail!(Config, "the model has more than {MAX_PARAMS} {what} (the cap): {next} with this layer's");
    }
    Ok(next)
}

/// The checkpoint name before sub-layers were named: `conv2d/kernel`, and for a layer holding
/// several sub-layers' parameters (a residual block) their position: `residual/3_gamma`.
fn legacy_name(layer: &str, specs: &[ParamSpec], k: usize) -> String {
    let unique = specs.iter().filter(|s| s.name == specs[k].name).count() == 1;
    if unique { format!("{layer}/{}", specs[k].name) } else { format!("{layer}/{k}_{}", specs[k].name) }
}

/// Fills `out` with values drawn from `init` (Keras' initialisers).
pub(crate) fn fill(out: &mut [f32], init: Init, rng: &mut StdRng) {
    match init {
        Init::Zeros => out.fill(0.0),
        Init::Ones => out.fill(1.0),
        Init::GlorotUniform { fan_in, fan_out } => {
            let limit = (6.0 / (fan_in + fan_out).max(1) as f32).sqrt();
            out.iter_mut().for_each(|v| *v = rng.random_range(-limit..limit));
        }
        Init::HeNormal { fan_in } => {
            let std = (2.0 / fan_in.max(1) as f32).sqrt();
            // Box-Muller; truncated at two standard deviations like Keras' he_normal.
            for v in out.iter_mut() {
                *v = loop {
                    let (u1, u2): (f32, f32) = (rng.random_range(f32::EPSILON..1.0), rng.random());
                    let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
                    if z.abs() <= 2.0 {
                        break z * std / 0.879_625_7;
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::snake;
    #[test]
    fn keras_names() {
        assert_eq!(snake("Conv2D"), "conv2d");
        assert_eq!(snake("BatchNormalization"), "batch_normalization");
        assert_eq!(snake("GlobalAveragePooling2D"), "global_average_pooling2d");
        assert_eq!(snake("MaxPool2D"), "max_pool2d");
        assert_eq!(snake("ReLU"), "re_lu");
        assert_eq!(snake("Dense"), "dense");
    }
}
