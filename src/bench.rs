//! Training throughput of a zoo model on synthetic data: what `convoy bench` and
//! `benches/step.rs` measure. Weak scaling: a fixed batch per device.

use std::sync::Arc;
use std::time::Instant;

use crate::data::{synthetic, Dataset, Loader};
use crate::model::{zoo, CompileOptions, DTypePolicy, Profile};
use crate::optim::Optimizer;
use crate::parallel::StepTiming;
use crate::{Device, Result};

/// What one measurement runs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The zoo model to build, by its [`zoo::MODELS`] name.
    pub model: String,
    /// Samples per device per step.
    pub batch_size: usize,
    /// Side of the square synthetic images, in pixels.
    pub image_size: usize,
    /// The model's classes; None: the synthetic data's ten. (PyTorch's ImageNet reference
    /// has 1000, whose dense layer is 0.1% of ResNet-50's work.)
    pub classes: Option<usize>,
    /// Timed steps, after warm-up steps that compile the pipelines.
    pub steps: usize,
    /// Also time every kernel on the first device with GPU timestamps.
    pub profile: bool,
    /// The precision policy the model trains under.
    pub precision: DTypePolicy,
}

/// Throughput of one device set.
pub struct Measurement {
    /// Devices the step was split across, one replica each.
    pub devices: usize,
    /// Training images per second over all devices (the global batch times the timed steps, over
    /// `seconds`).
    pub images_per_sec: f64,
    /// Mean wall time of one timed step, in milliseconds.
    pub step_ms: f64,
    /// Fraction of the timed wall time the loop waited for input.
    pub input_wait: f64,
    /// Wall time of the timed steps, in seconds.
    pub seconds: f64,
    /// Timed steps.
    pub steps: usize,
    /// Host timing per replica over the timed steps.
    pub timing: Vec<StepTiming>,
    /// Per-kernel GPU times (with `profile`).
    pub profile: Option<Profile>,
}

impl Measurement {
    /// Host time per timed step on the first device: staging the inputs and recording the step.
    pub fn host_ms(&self) -> f64 {
        1e3 * self.timing.first().map_or(0.0, |t| t.upload) / self.steps.max(1) as f64
    }
}

/// Warm-up: at least this many steps (they compile the pipelines) and this long, so the
/// GPUs have left their idle clocks (a cold H200 ran the first 30 steps of convnet7 at 64k
/// images/s, the next run at 85k), but no more than `MAX_WARMUP` steps.
const MIN_WARMUP: usize = 5;
const WARMUP_SECONDS: f64 = 1.5;
const MAX_WARMUP: usize = 2000;

/// Trains `cfg.model` on `devices` for the warm-up and timed steps and measures images/s,
/// with the PyTorch reference's optimizer: SGD, lr 0.05, Nesterov momentum 0.9, weight
/// decay 5e-4 (here, as in Keras, not on BatchNorm's gamma and beta or on biases).
pub fn measure(cfg: &BenchConfig, devices: &[Arc<Device>]) -> Result<Measurement> {
    let k = devices.len();
    let global = cfg.batch_size.saturating_mul(k);
    let data: Arc<dyn Dataset> = Arc::new(synthetic(global.saturating_mul(4), cfg.image_size, 7)?);
    let classes = cfg.classes.unwrap_or(data.num_classes());
    if classes < data.num_classes() {
        crate::bail!(Config, "--classes {classes}: the synthetic data has labels up to {}", data.num_classes() - 1);
    }
    let mut model = zoo::by_name(&cfg.model, &data.image_shape(), classes)?;
    model.set_dtype_policy(cfg.precision);
    model.compile(CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9).nesterov(true).l2(5e-4)).devices(devices.to_vec()).max_batch(global))?;
    let total = MAX_WARMUP + cfg.steps;
    let indices: Vec<usize> = (0..total * global).map(|i| i % data.len()).collect();
    let loader = Loader::new(data, indices, global, true, None, 0, 4)?;
    let t_start = Instant::now();
    let (mut t0, mut wait, mut timed) = (None, 0.0, 0);
    let mut t_wait = Instant::now();
    let mut last = None;
    for (s, batch) in loader.enumerate() {
        let batch = batch?;
        if t0.is_some() {
            wait += t_wait.elapsed().as_secs_f64();
        }
        model.train_on_batch_async(&batch.images, &batch.labels)?;
        model.collect(1)?;
        match t0 {
            Some(_) => timed += 1,
            None if s + 1 >= MIN_WARMUP && (t_start.elapsed().as_secs_f64() >= WARMUP_SECONDS || s + 1 >= MAX_WARMUP) => {
                model.collect(0)?;
                model.take_timing();
                t0 = Some(Instant::now());
            }
            None => {}
        }
        t_wait = Instant::now();
        last = Some(batch);
        if timed == cfg.steps {
            break;
        }
    }
    let t0 = t0.expect("the warm-up ends within MAX_WARMUP steps");
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
        steps: cfg.steps,
        timing,
        profile,
    })
}
