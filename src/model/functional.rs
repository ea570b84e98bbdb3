//! The functional API: a model as a graph of layers called on symbolic tensors, as Keras'
//! `inputs = keras.Input(shape)`, `x = layer(inputs)`, `keras.Model(inputs, outputs)`.
//!
//! ```no_run
//! use convoy::prelude::*;
//! use convoy::model::{input, Call, Model};
//!
//! # fn main() -> convoy::Result<()> {
//! let inputs = input(&[32, 32, 3]);
//! let x = Conv2D::new(16, 3).padding(Padding::Same).call(&inputs)?;
//! let a = Conv2D::new(16, 3).padding(Padding::Same).call(&x)?;
//! let b = Conv2D::new(16, 1).call(&x)?;
//! let x = Concatenate::new().call_many(&[&a, &b])?;
//! let x = GlobalAveragePooling2D::new().call(&x)?;
//! let outputs = Dense::new(10).call(&x)?;
//! let model = Model::functional(&inputs, &outputs)?;
//! # Ok(()) }
//! ```
//!
//! The model is the same engine as a [`Sequential`] stack (one step plan, the same
//! data-parallel training, saving and loading): its layers are kept in the order they were
//! called, which orders every layer after the ones it reads, and each layer records which
//! nodes it reads ([`crate::model::layout::inbound_of`]). Each layer object is called once:
//! a layer holds its own weights, and sharing one between two calls is not supported.

use std::sync::{Arc, Mutex};

use crate::layers::Layer;
use crate::model::Sequential;
use crate::{bail, Result};

/// The graph that symbolic tensors of one input share while a model is being built.
#[derive(Debug)]
struct Builder {
    input_shape: Vec<usize>,
    /// Layer `i` is node `i + 1`; taken out when a model is built from them.
    layers: Vec<Option<Box<dyn Layer>>>,
    inbound: Vec<Vec<usize>>,
}

/// The output of a layer (or the model's input) while a functional model is being built:
/// its per-sample shape and its place in the graph (Keras' `KerasTensor`). It holds no data.
#[derive(Clone, Debug)]
pub struct SymbolicTensor {
    graph: Arc<Mutex<Builder>>,
    node: usize,
    shape: Vec<usize>,
}

impl SymbolicTensor {
    /// The per-sample shape (the batch dimension left out).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

/// The input of a functional model: `(height, width, channels)` u8 images, normalised on the
/// device as a `Sequential`'s are (Keras' `keras.Input(shape)`).
pub fn input(shape: &[usize]) -> SymbolicTensor {
    let graph = Builder { input_shape: shape.to_vec(), layers: Vec::new(), inbound: Vec::new() };
    SymbolicTensor { graph: Arc::new(Mutex::new(graph)), node: 0, shape: shape.to_vec() }
}

/// Calling a layer on symbolic tensors, which adds it to their graph (Keras' `layer(x)`).
pub trait Call {
    /// The layer applied to one tensor; its output shape is checked now, as Keras checks it
    /// when the layer is called.
    fn call(self, x: &SymbolicTensor) -> Result<SymbolicTensor>;
    /// A merge layer (`Add`, `Concatenate`) applied to several tensors of one graph.
    fn call_many(self, xs: &[&SymbolicTensor]) -> Result<SymbolicTensor>;
}

impl<L: Layer + 'static> Call for L {
    fn call(self, x: &SymbolicTensor) -> Result<SymbolicTensor> {
        call_boxed(Box::new(self), &[x])
    }
    fn call_many(self, xs: &[&SymbolicTensor]) -> Result<SymbolicTensor> {
        call_boxed(Box::new(self), xs)
    }
}

/// [`Call::call_many`] for a boxed layer (one built from a saved config, say).
pub fn call_boxed(layer: Box<dyn Layer>, xs: &[&SymbolicTensor]) -> Result<SymbolicTensor> {
    let Some(first) = xs.first() else {
        bail!(Config, "{} was called on no tensor", layer.class_name());
    };
    if let Some(other) = xs.iter().find(|x| !Arc::ptr_eq(&x.graph, &first.graph)) {
        bail!(Config, "{} was called on tensors of two different inputs ({:?} and {:?}): a model has one input", layer.class_name(), first.shape, other.shape);
    }
    let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape.clone()).collect();
    if !layer.is_merge() && xs.len() != 1 {
        bail!(Config, "{} takes one tensor, got {}", layer.class_name(), xs.len());
    }
    let shape = layer.output_shape_of(&shapes)?;
    let mut g = first.graph.lock().unwrap_or_else(|e| e.into_inner());
    g.layers.push(Some(layer));
    g.inbound.push(xs.iter().map(|x| x.node).collect());
    Ok(SymbolicTensor { graph: first.graph.clone(), node: g.layers.len(), shape })
}

impl Sequential {
    /// A model from its input and output tensors (Keras' `keras.Model(inputs, outputs)`):
    /// the layers the output depends on, in the order they were called. Layers called on
    /// the graph that do not lead to the output are left out. The output must be `(classes,)`
    /// logits by `compile`, as for a stack.
    pub fn functional(inputs: &SymbolicTensor, outputs: &SymbolicTensor) -> Result<Sequential> {
        if !Arc::ptr_eq(&inputs.graph, &outputs.graph) {
            bail!(Config, "the outputs {:?} were not computed from these inputs {:?}", outputs.shape, inputs.shape);
        }
        if inputs.node != 0 {
            bail!(Config, "the model's inputs must be the tensor `input()` returned, not a layer's output {:?}", inputs.shape);
        }
        if outputs.node == 0 {
            bail!(Config, "the model has no layers: its outputs are its inputs");
        }
        let mut g = inputs.graph.lock().unwrap_or_else(|e| e.into_inner());
        // The nodes the output depends on; each layer reads only earlier nodes, so one pass
        // from the output down finds them all.
        let mut needed = vec![false; g.layers.len() + 1];
        needed[outputs.node] = true;
        for node in (1..=outputs.node).rev() {
            if needed[node] {
                for &j in &g.inbound[node - 1] {
                    needed[j] = true;
                }
            }
        }
        if let Some(node) = (1..=outputs.node).find(|&n| needed[n] && g.layers[n - 1].is_none()) {
            bail!(Config, "layer {node} of this graph already belongs to another model: build each model from its own calls");
        }
        let mut renumber = vec![0usize; g.layers.len() + 1];
        let mut model = Sequential::new(&g.input_shape);
        let mut inbound = Vec::new();
        for node in 1..=outputs.node {
            if !needed[node] {
                continue;
            }
            let layer = g.layers[node - 1].take().expect("checked above");
            inbound.push(g.inbound[node - 1].iter().map(|&j| renumber[j]).collect::<Vec<usize>>());
            model.add_boxed(layer);
            renumber[node] = inbound.len();
        }
        model.def.inbound = inbound;
        model.def.build_layout()?;
        Ok(model)
    }
}
