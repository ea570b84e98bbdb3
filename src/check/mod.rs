//! A float64 reference of a whole model's training step, independent of the GPU kernels,
//! for proving the device's step correct at every shape.
//!
//! Comparing a device's f32 step with an f64 one that takes its own piecewise decisions
//! does not work at ordinary shapes (issue 25): a few ReLU inputs lie within f32 rounding
//! of zero, a few max-pool windows hold two near-equal maxima, and f32 and f64 then take
//! different sides of the kink. The whole upstream gradient of such a unit moves, and a
//! correct model differs from the reference by up to 5e-2. So the reference here takes
//! every piecewise decision from the device's own forward pass ([`Decision`]: ReLU outputs,
//! max-pool choices), computes everything else in f64 ([`train_step`]), and reports how
//! many units were within a tie threshold and whether any device decision is clearly wrong
//! ([`KinkReport`]) — a wrong kernel cannot hide behind a followed decision, because a
//! decision against a clear f64 margin is a mismatch.
//!
//! The model is read from the layers' class names and saved configurations ([`Net`]), not
//! from their Rust fields, and none of `crate::kernels`' arithmetic is used (only its
//! geometry types, which are checked by their own tests against Keras' output shapes).
//! [`optimizer::apply`] performs the optimizer's update in f64.

mod activation;
mod decisions;
mod net;
mod ops;
pub mod optimizer;
mod reference;
mod run;
mod winograd;

#[cfg(test)]
mod tests;


pub use decisions::{check_structure, Decision};
pub use net::{Act, AxisKind, Net, Node};
pub use reference::{own_decisions, predict, train_step, train_step_pair, train_step_pair_for, KinkReport, Step, TIE_MARGIN, TIE_THRESHOLD};
pub use run::{check, check_zoo, decisions, rel_err, CheckConfig, Report, Worst, BOUND, GRAD_FLOOR, MIN_BATCHNORM_ROWS, ROUNDING_SLACK};
