//! Device tensors: a pooled GPU buffer, a shape and an element type.
//!
//! Layout is NHWC everywhere (`[batch, height, width, channels]`), row-major, densely packed;
//! convolution kernels are `[kh, kw, in_channels, filters]` and dense kernels `[in, out]`,
//! as in Keras. No layer ever transposes between layers.

use std::sync::{Arc, Weak};

use super::pool::Pool;
use crate::{bail, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// The element type of a tensor.
pub enum DType {
    /// 32-bit float: activations, parameters, gradients.
    F32,
    /// 32-bit unsigned integer: labels and indices.
    U32,
    /// Bytes packed four to a 32-bit word (images on their way to the GPU).
    U8,
    /// IEEE binary16 packed two to a 32-bit word, the lower half first (activations under
    /// mixed precision; see [`super::half`]).
    F16,
}

impl DType {
    /// Bytes a tensor of `len` elements occupies, padded to whole 32-bit words.
    pub fn bytes(self, len: usize) -> u64 {
        match self {
            DType::F32 | DType::U32 => 4 * len as u64,
            DType::U8 => len.div_ceil(4) as u64 * 4,
            DType::F16 => len.div_ceil(2) as u64 * 4,
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
/// A view of a pooled GPU buffer with a shape and an element type; cloning shares the buffer. The
/// buffer goes back to the device's pool when the last view of it is dropped.
pub struct Tensor {
    lease: Arc<Lease>,
    /// Byte offset into the buffer: parameters and gradients of a model are views into one
    /// flat buffer each, so the optimizer and the gradient exchange see one contiguous range.
    offset: u64,
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
        Tensor { lease: Arc::new(lease), offset: 0, shape, dtype }
    }
    /// The dimensions, NHWC for images.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Elements: the product of the shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes the elements occupy, padded to whole 32-bit words.
    pub fn bytes(&self) -> u64 {
        self.dtype.bytes(self.len())
    }
    /// The whole pooled buffer; the tensor starts at [`offset`](Self::offset) in it.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.lease.buffer
    }
    /// Byte offset of this tensor in its buffer.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// What a bind group entry binds: exactly this tensor's bytes.
    pub fn binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding { buffer: &self.lease.buffer, offset: self.offset, size: std::num::NonZeroU64::new(self.bytes().max(4)) }
    }
    /// A view of `shape` starting `start` elements into this tensor. The byte offset must be
    /// a multiple of 256 (the binding offset alignment every adapter accepts).
    pub fn view(&self, start: usize, shape: &[usize]) -> Result<Tensor> {
        let len: usize = shape.iter().product();
        if start + len > self.len() {
            bail!(Shape, "view of {shape:?} at element {start} exceeds tensor {:?}", self.shape);
        }
        let offset = self.offset + self.dtype.bytes(start);
        if !offset.is_multiple_of(256) {
            bail!(Shape, "view at byte offset {offset} is not 256-byte aligned");
        }
        Ok(Tensor { lease: self.lease.clone(), offset, shape: shape.to_vec(), dtype: self.dtype })
    }
    /// The same storage seen with another shape of the same element count (Flatten is this).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if shape.iter().product::<usize>() != self.len() {
            bail!(Shape, "cannot reshape {:?} ({} elements) to {:?}", self.shape, self.len(), shape);
        }
        Ok(Tensor { lease: self.lease.clone(), offset: self.offset, shape: shape.to_vec(), dtype: self.dtype })
    }
    /// True when both tensors view the same buffer.
    pub fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.lease, &other.lease)
    }
    /// True when the two tensors' byte ranges overlap (an in-place hazard for a kernel that
    /// binds one as read and the other as read_write).
    pub fn overlaps(&self, other: &Tensor) -> bool {
        self.same_storage(other) && self.offset < other.offset + other.bytes() && other.offset < self.offset + self.bytes()
    }
}
