//! What the architectures' name tables share: reading a width from a file's tensor, and walking
//! a model's units while naming them.

use std::collections::HashMap;
use std::path::Path;

use super::units::{Kind, Unit};
use crate::{Error, Result};

/// The shapes of a file's tensors by PyTorch name, to read a network's widths from.
pub(crate) struct Shapes<'a> {
    pub shapes: HashMap<String, Vec<usize>>,
    /// The file, named in errors.
    pub path: &'a Path,
    /// `torchvision's resnet50`, for errors.
    pub what: String,
}

impl Shapes<'_> {
    /// Axis `axis` of tensor `name`, which must have `rank` axes, none of them 0.
    pub fn dim(&self, name: &str, rank: usize, axis: usize) -> Result<usize> {
        let shape = self.shapes.get(name).ok_or_else(|| Error::format(self.path, format!("missing tensor {name} (of {})", self.what)))?;
        if shape.len() != rank || shape.contains(&0) {
            return Err(Error::format(self.path, format!("tensor {name} has shape {shape:?}, expected {rank} non-zero axes (of {})", self.what)));
        }
        Ok(shape[axis])
    }
}

/// Names units in order, checking each against the module the architecture expects there.
pub(crate) struct Cursor<'a> {
    units: &'a [Unit],
    at: usize,
    names: Vec<String>,
}

impl<'a> Cursor<'a> {
    pub fn new(units: &'a [Unit]) -> Self {
        Cursor { units, at: 0, names: Vec::new() }
    }

    /// The next unit, not taken.
    pub fn peek(&self) -> Option<&'a Unit> {
        self.units.get(self.at)
    }

    /// Names the next unit `name`; it must be a `kind` outside any residual block, or inside
    /// one when `in_block`.
    pub fn take(&mut self, kind: Kind, name: &str, in_block: bool) -> std::result::Result<(), String> {
        let u = self.peek().ok_or_else(|| format!("the model ends where {name} would be"))?;
        if u.kind != kind || u.in_block != in_block {
            return Err(format!("{name} would be a {kind:?}{} but the model has a {:?}{} there", if in_block { " in a block" } else { "" }, u.kind, if u.in_block { " in a block" } else { "" }));
        }
        self.names.push(name.to_string());
        self.at += 1;
        Ok(())
    }

    /// The layer of the residual block starting at the next unit, named `block` in errors.
    pub fn block_start(&self, block: &str) -> std::result::Result<usize, String> {
        match self.peek() {
            Some(u) if u.in_block && !u.shortcut => Ok(u.layer),
            _ => Err(format!("{block} would be a residual block but the model has none there")),
        }
    }

    /// [`Cursor::take`] for a unit of the block at `layer`, on its shortcut or main path.
    pub fn take_in(&mut self, kind: Kind, name: &str, layer: usize, shortcut: bool) -> std::result::Result<(), String> {
        match self.peek() {
            Some(u) if u.layer == layer && u.shortcut == shortcut => self.take(kind, name, true),
            _ => Err(format!("{name} would be in the block of layer {layer}{} but the model has no such layer there", if shortcut { " (its shortcut)" } else { "" })),
        }
    }

    /// The names, once every unit has one.
    pub fn finish(self) -> std::result::Result<Vec<String>, String> {
        if self.at != self.units.len() {
            return Err(format!("the model has {} more layers with weights after {}", self.units.len() - self.at, self.names.last().map_or("the start", String::as_str)));
        }
        Ok(self.names)
    }
}
