//! convoy: data-parallel CNN training on every GPU adapter of a machine, through wgpu.
//!
//! ```no_run
//! use convoy::prelude::*;
//! # fn main() -> convoy::Result<()> {
//! let (train, val) = convoy::data::from_spec("synthetic", None, 0)?;
//! let mut model = Sequential::new(&train.image_shape());
//! model.add(Conv2D::new(16, 3).padding(Padding::Same)).add(BatchNormalization::new()).add(ReLU::new());
//! model.add(GlobalAveragePooling2D::new()).add(Dense::new(train.num_classes()));
//! model.compile(CompileOptions::new(Optimizer::sgd(0.1).momentum(0.9)).max_batch(128))?;
//! let history = model.fit(train, FitOptions { epochs: 5, batch_size: 128, validation_data: Some(val), ..Default::default() })?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod bench;
pub mod callbacks;
pub mod check;
pub mod data;
pub mod device;
pub mod distributed;
pub mod error;
pub mod import;
pub mod kernels;
pub mod layers;
pub mod limits;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod testing;
pub mod trace;

pub use device::{DType, Device, Tensor};
pub use error::{Error, Result};
pub use model::register_layer;

/// The names a training script needs.
pub mod prelude {
    pub use crate::callbacks::{Callback, Context, Logs};
    pub use crate::data::Dataset;
    pub use crate::layers::*;
    pub use crate::model::{input, Call, CompileOptions, DTypePolicy, FitOptions, Loss, LossScale, Metric, Model, Sequential, SymbolicTensor};
    pub use crate::optim::{Optimizer, Schedule};
}
