//! `convoy bench`: training images/s of a zoo model on 1..N devices of the selection, with a
//! fixed batch per device (weak scaling, as DDP benchmarks report it).

use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde_json::json;

use convoy::data::{synthetic, Dataset, Loader};
use convoy::model::{zoo, CompileOptions, Loss, Metric};
use convoy::optim::Optimizer;
use convoy::{bail, Result};

use super::device_json;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value = "resnet20")]
    pub model: String,
    /// Samples per device per step.
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    #[arg(long, default_value = "all")]
    pub devices: String,
    /// Timed steps (after warm-up steps that compile the pipelines).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    #[arg(long, default_value_t = 32)]
    pub image_size: usize,
    /// Only measure on all selected devices, not on 1..N.
    #[arg(long)]
    pub no_scaling: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    if a.batch_size == 0 || a.steps == 0 {
        bail!(Config, "--batch-size and --steps must be positive");
    }
    let devices = convoy::device::open(&a.devices)?;
    let n = devices.len();
    let counts: Vec<usize> = if a.no_scaling { vec![n] } else { (1..=n).filter(|k| k.is_power_of_two() || *k == n).collect() };
    let warmup = 3;
    let data: Arc<dyn Dataset> = Arc::new(synthetic(a.batch_size * n * 4, a.image_size, 7));
    let mut runs = Vec::new();
    for &k in &counts {
        let mut model = zoo::by_name(&a.model, &data.image_shape(), data.num_classes())?;
        let global = a.batch_size * k;
        model.compile(CompileOptions {
            optimizer: Optimizer::sgd(0.01).momentum(0.9),
            loss: Loss::SparseCategoricalCrossentropy,
            metrics: vec![Metric::Accuracy],
            devices: devices[..k].to_vec(),
            seed: 0,
            max_batch: global,
        })?;
        let total = warmup + a.steps;
        let indices: Vec<usize> = (0..total * global).map(|i| i % data.len()).collect();
        let loader = Loader::new(data.clone(), indices, global, true, None, 0, 4)?;
        let (mut t0, mut wait) = (Instant::now(), 0.0);
        let mut t_wait = Instant::now();
        for (s, batch) in loader.enumerate() {
            let batch = batch?;
            if s >= warmup {
                wait += t_wait.elapsed().as_secs_f64();
            }
            model.train_on_batch(&batch.images, &batch.labels)?;
            model.collect(1)?;
            if s + 1 == warmup {
                model.collect(0)?;
                model.take_timing();
                t0 = Instant::now();
            }
            t_wait = Instant::now();
        }
        model.collect(0)?;
        let secs = t0.elapsed().as_secs_f64();
        let timing = model.take_timing();
        let ips = (a.steps * global) as f64 / secs;
        let per_device: Vec<_> = devices[..k]
            .iter()
            .zip(&timing)
            .map(|(d, t)| {
                let mut j = device_json(d, a.steps * a.batch_size);
                j["input_wait"] = json!(wait / secs);
                j["compute"] = json!((t.upload + t.compute) / secs);
                j["exchange"] = json!(t.exchange / secs);
                j
            })
            .collect();
        if !a.json {
            eprintln!("{} on {k} device(s), batch {}x{}: {:.0} images/s, {:.2} ms/step", a.model, k, a.batch_size, ips, 1e3 * secs / a.steps as f64);
        }
        runs.push((k, ips, 1e3 * secs / a.steps as f64, per_device));
    }
    let base = runs[0].1 / runs[0].0 as f64;
    let scaling: Vec<_> = runs.iter().map(|(k, ips, ms, _)| json!({ "devices": k, "images_per_sec": ips, "step_ms": ms, "efficiency": ips / (base * *k as f64) })).collect();
    let (k, ips, ms, per_device) = runs.last().unwrap();
    let out = json!({
        "model": a.model,
        "batch_size": a.batch_size,
        "global_batch": a.batch_size * k,
        "images_per_sec": ips,
        "step_ms": ms,
        "devices": per_device,
        "scaling": scaling,
    });
    if a.json {
        println!("{out}");
    } else {
        for s in &scaling {
            println!("{} device(s): {:.0} images/s, efficiency {:.1}%", s["devices"], s["images_per_sec"].as_f64().unwrap_or(0.0), 100.0 * s["efficiency"].as_f64().unwrap_or(0.0));
        }
    }
    Ok(())
}
