//! Training throughput of a zoo model on synthetic data: what `convoy bench` and
//! `benches/step.rs` measure. Weak scaling: a fixed batch per device.

use std::sync::Arc;
use std::time::Instant;

use crate::data::{synthetic, Dataset, Loader};
use crate::model::{zoo, CompileOptions, Loss, Metric, Profile};
use crate::optim::Optimizer;
use crate::parallel::StepTiming;
use crate::{Device, Result};

/// What one measurement runs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub model: String,
    /// Samples per device per step.
    pub batch_size: usize,
    pub image_size: usize,
    /// Timed steps, after warm-up steps that compile the pipelines.
    pub steps: usize,
    /// Also time every kernel on the first device with GPU timestamps.
    pub profile: bool,
}

/// Throughput of one device set.
pub struct Measurement {
    pub devices: usize,
    pub images_per_sec: f64,
    pub step_ms: f64,
    /// Fraction of the timed wall time the loop waited for input.
    pub input_wait: f64,
    pub seconds: f64,
    /// Host timing per replica over the timed steps.
    pub timing: Vec<StepTiming>,
    /// Per-kernel GPU times (with `profile`).
    pub profile: Option<Profile>,
}

const WARMUP: usize = 3;

/// Trains `cfg.model` on `devices` for the warm-up and timed steps and measures images/s,
/// with the PyTorch reference's optimizer: SGD, lr 0.05, Nesterov momentum 0.9, weight
/// decay 5e-4 (here, as in Keras, not on BatchNorm's gamma and beta or on biases).
pub fn measure(cfg: &BenchConfig, devices: &[Arc<Device>]) -> Result<Measurement> {
    let k = devices.len();
    let global = cfg.batch_size * k;
    let data: Arc<dyn Dataset> = Arc::new(synthetic(global * 4, cfg.image_size, 7));
    let mut model = zoo::by_name(&cfg.model, &data.image_shape(), data.num_classes())?;
    model.compile(CompileOptions {
        optimizer: Optimizer::sgd(0.05).momentum(0.9).nesterov(true).weight_decay(5e-4),
        loss: Loss::SparseCategoricalCrossentropy,
        metrics: vec![Metric::Accuracy],
        devices: devices.to_vec(),
        seed: 0,
        max_batch: global,
    })?;
    let total = WARMUP + cfg.steps;
    let indices: Vec<usize> = (0..total * global).map(|i| i % data.len()).collect();
    let loader = Loader::new(data, indices, global, true, None, 0, 4)?;
    let (mut t0, mut wait) = (Instant::now(), 0.0);
    let mut t_wait = Instant::now();
    let mut last = None;
    for (s, batch) in loader.enumerate() {
        let batch = batch?;
        if s >= WARMUP {
            wait += t_wait.elapsed().as_secs_f64();
        }
        model.train_on_batch(&batch.images, &batch.labels)?;
        model.collect(1)?;
        if s + 1 == WARMUP {
            model.collect(0)?;
            model.take_timing();
            t0 = Instant::now();
        }
        t_wait = Instant::now();
        last = Some(batch);
    }
    model.collect(0)?;
    let seconds = t0.elapsed().as_secs_f64();
    let timing = model.take_timing();
    let profile = match (cfg.profile, last) {
        // One device's share: the kernels are timed on the first device alone.
        (true, Some(batch)) => {
            let n = cfg.batch_size.min(batch.labels.len());
            let sample = batch.images.len() / batch.labels.len();
            Some(model.profile(&batch.images[..n * sample], &batch.labels[..n], 5)?)
        }
        _ => None,
    };
    Ok(Measurement {
        devices: k,
        images_per_sec: (cfg.steps * global) as f64 / seconds,
        step_ms: 1e3 * seconds / cfg.steps as f64,
        input_wait: wait / seconds,
        seconds,
        timing,
        profile,
    })
}
