//! Device tensors: a pooled GPU buffer, a shape and an element type.
//!
//! Layout is NHWC everywhere (`[batch, height, width, channels]`), row-major, densely packed;
//! convolution kernels are `[kh, kw, in_channels, filters]` and dense kernels `[in, out]`,
//! as in Keras. No layer ever transposes between layers.

use std::sync::{Arc, Weak};

use super::pool::Pool;
use crate::{bail, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    F32,
    U32,
    /// Bytes packed four to a 32-bit word (images on their way to the GPU).
    U8,
}

impl DType {
    /// Bytes a tensor of `len` elements occupies, padded to whole 32-bit words.
    pub fn bytes(self, len: usize) -> u64 {
        match self {
            DType::F32 | DType::U32 => 4 * len as u64,
            DType::U8 => len.div_ceil(4) as u64 * 4,
        }
    }
}

/// A buffer on loan from a device's pool; it goes back to the pool when the last tensor
/// viewing it is dropped.
pub(crate) struct Lease {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) pool: Weak<Pool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(self.buffer.clone());
        }
    }
}

#[derive(Clone)]
pub struct Tensor {
    lease: Arc<Lease>,
    shape: Vec<usize>,
    dtype: DType,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {:?})", self.shape, self.dtype)
    }
}

impl Tensor {
    pub(crate) fn from_lease(lease: Lease, shape: Vec<usize>, dtype: DType) -> Self {
        Tensor { lease: Arc::new(lease), shape, dtype }
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn bytes(&self) -> u64 {
        self.dtype.bytes(self.len())
    }
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.lease.buffer
    }
    /// The same storage seen with another shape of the same element count (Flatten is this).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if shape.iter().product::<usize>() != self.len() {
            bail!(Shape, "cannot reshape {:?} ({} elements) to {:?}", self.shape, self.len(), shape);
        }
        Ok(Tensor { lease: self.lease.clone(), shape: shape.to_vec(), dtype: self.dtype })
    }
    /// True when both tensors view the same buffer.
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.lease, &other.lease)
    }
}
