//! Models (stacks and functional graphs): layout, compiled plans, fit/evaluate/predict (on data sets, raw images
//! and unlabelled folders), summary, save/load, zoo.
pub mod config;
mod finite;
mod fit;
mod functional;
pub mod layout;
pub mod losses;
pub mod plan;
mod policy;
pub mod profile;
mod registry;
pub mod saving;
mod sequential;
mod transfer;
mod summary;
mod unlabelled;
pub mod zoo;

pub use finite::non_finite_warning;
pub use fit::FitOptions;
pub use functional::{call_boxed, input, Call, SymbolicTensor};
pub use losses::{Loss, Metric};
pub use policy::{DTypePolicy, LossScale};
pub use profile::{KernelTime, Peak, Profile};
pub use registry::{register_layer, FromConfig};
pub use saving::{write_atomic, write_atomic_with, TrainingState};
pub use sequential::{CompileOptions, Compiled, HostWeights, Sequential};

/// Keras' `keras.Model`: a functional model ([`Sequential::functional`]) is the same type as a
/// stack, trained, saved and loaded the same way.
pub type Model = Sequential;
pub use summary::{group, LayerSummary, Summary};
pub use unlabelled::UnlabelledFolder;
