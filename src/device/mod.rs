//! Adapters, one `Device` per adapter, device tensors, the buffer pool and staging.
pub mod adapters;
#[allow(clippy::module_inception)]
mod device;
pub mod pool;
pub mod staging;
pub mod tensor;
pub mod timestamps;

pub use adapters::{adapters, open, resolve, summarize, AdapterEntry, AdapterSummary};
pub use device::{map_and_wait, Device};
pub use staging::{Readback, StagingRing};
pub use tensor::{DType, Tensor};
pub use timestamps::Timestamps;
