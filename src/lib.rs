//! convoy: data-parallel CNN training on every GPU adapter of a machine, through wgpu.
pub mod callbacks;
pub mod device;
pub mod error;
pub mod kernels;

pub use device::{Device, DType, Tensor};
pub use error::{Error, Result};
