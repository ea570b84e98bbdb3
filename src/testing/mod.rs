//! Checks for the authors of custom layers: a gradient check against finite differences or
//! an f64 reference, and Keras' layer round trip. See "Writing a layer" in the README.

mod gradcheck;
mod roundtrip;

pub use gradcheck::{
    gradcheck, gradcheck_reference, gradcheck_with, GradcheckOptions, GradcheckReport, ReferenceInputs, ReferenceOutputs, TensorError,
    FINITE_DIFFERENCE_BOUND, REFERENCE_BOUND,
};
pub use roundtrip::{layer_roundtrip, RoundtripReport};
