//! The device's piecewise choices, which the reference follows instead of taking its own.

use super::net::{Act, Node};
use crate::{bail, Result};

/// The device's piecewise choices for one node of the forward pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nodes without a kink (conv, dense, BatchNorm without ReLU, pools other than max,
    /// flatten, identity).
    None,
    /// The device's f32 output of a ReLU (standalone, or fused into BatchNorm): a unit is
    /// active where y > 0. For a capped or leaky ReLU the output shows the piece: the cap
    /// where y reached it, the identity where y > 0, the slope elsewhere.
    Relu(Vec<f32>),
    /// The device's max-pool choice per output element: the input position `h * in_w + w`
    /// its window took (for global max pooling, the window is the whole map).
    MaxPool(Vec<u32>),
    /// An augmentation's draws per sample, `(a_y, t_y, a_x, t_x)` back to back: output index
    /// `y` of an axis reads input index `a * y + t`.
    Augment(Vec<i32>),
    /// A residual block: one decision per sub-layer of each chain, and the fused join ReLU's
    /// output if any.
    Residual {
        /// One decision per sub-layer of the block's chain, in order.
        main: Vec<Decision>,
        /// One decision per sub-layer of the shortcut.
        shortcut: Vec<Decision>,
        /// The fused join ReLU's f32 output, if the block has one.
        join: Option<Vec<f32>>,
    },
}

impl Decision {
    /// What kind of decision `node` takes, for error messages.
    fn expected(node: &Node) -> &'static str {
        match node {
            Node::BatchNorm { relu: true, .. } | Node::ReLU | Node::Add { relu: true } | Node::Activation(Act::Rectifier { .. }) => "Relu",
            Node::MaxPool { .. } | Node::GlobalMaxPool { .. } => "MaxPool",
            Node::Residual { .. } => "Residual",
            Node::Augment { .. } => "Augment",
            _ => "None",
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Decision::None => "None",
            Decision::Relu(_) => "Relu",
            Decision::MaxPool(_) => "MaxPool",
            Decision::Residual { .. } => "Residual",
            Decision::Augment(_) => "Augment",
        }
    }
}

/// Checks that `decisions` has the node tree's structure (one per node, of the right kind,
/// recursively), so that a device side pairing records wrongly fails with a message naming
/// the node instead of silently following another layer's mask. Lengths are checked where
/// the decision is used, when the tensor sizes are known.
pub fn check_structure(nodes: &[Node], decisions: &[Decision], at: &str) -> Result<()> {
    if nodes.len() != decisions.len() {
        bail!(Config, "{at}: {} nodes but {} decisions", nodes.len(), decisions.len());
    }
    for (i, (n, d)) in nodes.iter().zip(decisions).enumerate() {
        let fits = match (n, d) {
            (Node::Residual { main, shortcut, relu }, Decision::Residual { main: dm, shortcut: ds, join }) => {
                check_structure(main, dm, &format!("{at}[{i}].main"))?;
                check_structure(shortcut, ds, &format!("{at}[{i}].shortcut"))?;
                if *relu != join.is_some() {
                    bail!(Config, "{at}[{i}]: the residual block's join ReLU is {}fused but its decision has {} join output", if *relu { "" } else { "not " }, if join.is_some() { "a" } else { "no" });
                }
                true
            }
            _ => Decision::expected(n) == d.kind(),
        };
        if !fits {
            bail!(Config, "{at}[{i}]: node {n:?} takes a {} decision, got {}", Decision::expected(n), d.kind());
        }
    }
    Ok(())
}
