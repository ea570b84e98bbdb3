//! Adapters, one `Device` per adapter, device tensors, the buffer pool and staging.
pub mod adapters;
mod checks;
#[allow(clippy::module_inception)]
mod device;
pub mod half;
pub mod pipeline_log;
pub mod pool;
pub mod staging;
pub mod tensor;
pub mod timestamps;

pub use adapters::{adapters, open, open_with, resolve, summarize, AdapterEntry, AdapterSummary};
pub use checks::ShaderChecks;
pub use device::{map_and_wait, use_portable_limits, Device, LIMITS_ENV};
pub use staging::{Readback, StagingRing};
pub use tensor::{DType, Tensor};
pub use timestamps::Timestamps;
