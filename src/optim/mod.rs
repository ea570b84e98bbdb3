//! Optimizers (the user-facing settings; the update kernels are in `kernels::optimizer`) and
//! learning-rate schedules.

mod optimizer;
mod schedule;

pub use optimizer::Optimizer;
pub use schedule::Schedule;
