//! Shared by the kernel tests: one device per test binary, seeded random inputs, and the
//! error measure every kernel is held to.

use std::sync::{Arc, OnceLock};

use convoy::kernels::Dispatch;
use convoy::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Relative error every f32 kernel must stay under against its f64 reference.
pub const TOL: f64 = 1e-4;

/// The device the tests run on: `CONVOY_TEST_DEVICE` (a selection such as `0`) or the
/// software adapter, so CI needs no GPU.
pub fn device() -> Arc<Device> {
    static DEVICE: OnceLock<Arc<Device>> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            let sel = std::env::var("CONVOY_TEST_DEVICE").unwrap_or_else(|_| "software".into());
            convoy::device::open(&sel).expect("a test device").remove(0)
        })
        .clone()
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in [-1, 1).
pub fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

pub fn upload(data: &[f32], shape: &[usize]) -> Tensor {
    device().upload(shape, data).unwrap()
}

pub fn run(dispatches: &[Dispatch]) {
    let d = device();
    d.run(dispatches);
    d.sync().unwrap();
}

pub fn read(t: &Tensor) -> Vec<f32> {
    device().read(t).unwrap()
}

/// Max-norm relative error: `max |got - want| / max |want|`. Element-wise relative error is
/// meaningless where a long sum cancels to near zero; this is the measure cuDNN's and
/// PyTorch's own kernel tests use for reductions.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs())) / scale
}

/// Asserts `got` matches `want` within [`TOL`], naming the case, and returns the error.
#[track_caller]
pub fn assert_close(case: &str, got: &[f32], want: &[f64]) -> f64 {
    assert!(got.iter().all(|g| g.is_finite()), "{case}: non-finite output");
    let e = rel_err(got, want);
    assert!(e < TOL, "{case}: relative error {e:.3e} >= {TOL:e}");
    e
}
