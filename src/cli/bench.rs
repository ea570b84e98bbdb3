//! `convoy bench`: training images/s of a zoo model on 1..N devices of the selection, with a
//! fixed batch per device (weak scaling, as DDP benchmarks report it), and with `--profile`
//! the GPU time of every kernel of a step.

use clap::Args;
use serde_json::json;

use convoy::bench::{measure, BenchConfig};
use convoy::model::{DTypePolicy, Peak};
use convoy::{bail, Result};

use super::{device_json, JsonNumbers};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A zoo model: resnet20, resnet18_cifar, convnet7 (CIFAR forms, for 32 px), resnet18,
    /// resnet34, resnet50 (torchvision's ImageNet forms), mobilenet_v2 or mlp.
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
    /// The model's classes (at least the synthetic data's 10; torch_imagenet.py uses 1000).
    #[arg(long)]
    pub classes: Option<usize>,
    /// Only measure on all selected devices, not on 1..N.
    #[arg(long)]
    pub no_scaling: bool,
    /// Also time every kernel of a step on the first device (GPU timestamps) and print
    /// the per-kernel table (with `--json`: under "profile").
    #[arg(long)]
    pub profile: bool,
    /// With --profile: list every dispatch, not only the per-kernel sums, each with its path
    /// (tile, gathers, storage: what kernel variant the product ran).
    #[arg(long)]
    pub dispatches: bool,
    /// float32, or mixed (Keras' mixed_float16: f16 products on tensor cores, loss scaling).
    #[arg(long, default_value = "float32")]
    pub precision: String,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BenchArgs) -> Result<()> {
    if a.batch_size == 0 || a.steps == 0 {
        bail!(Config, "--batch-size and --steps must be positive");
    }
    if let Some(w) = convoy::model::zoo::cifar_form_warning(&a.model, a.image_size) {
        eprintln!("{w}");
    }
    let precision = DTypePolicy::from_name(&a.precision)?;
    let devices = convoy::device::open(&a.devices)?;
    let n = devices.len();
    let counts: Vec<usize> = if a.no_scaling { vec![n] } else { (1..=n).filter(|k| k.is_power_of_two() || *k == n).collect() };
    let mut runs = Vec::new();
    for &k in &counts {
        let cfg = BenchConfig { model: a.model.clone(), batch_size: a.batch_size, image_size: a.image_size, classes: a.classes, steps: a.steps, profile: a.profile && k == counts[0], precision };
        let m = measure(&cfg, &devices[..k])?;
        if !a.json {
            eprintln!("{} on {k} device(s), batch {}x{}: {:.0} images/s, {:.2} ms/step", a.model, k, a.batch_size, m.images_per_sec, m.step_ms);
        }
        runs.push(m);
    }
    let base = runs[0].images_per_sec / runs[0].devices as f64;
    // Nested numbers are listed in "non_finite" by their path, e.g. `scaling[1].efficiency`.
    let mut n = JsonNumbers::default();
    let scaling: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut num = |k: &str, v: f64| n.num(&format!("scaling[{i}].{k}"), v);
            json!({ "devices": m.devices, "images_per_sec": num("images_per_sec", m.images_per_sec), "step_ms": num("step_ms", m.step_ms), "efficiency": num("efficiency", m.images_per_sec / (base * m.devices as f64)) })
        })
        .collect();
    let last = runs.last().unwrap();
    let per_device: Vec<_> = devices[..last.devices]
        .iter()
        .zip(&last.timing)
        .enumerate()
        .map(|(i, (d, t))| {
            let mut j = device_json(d, a.steps * a.batch_size);
            j["input_wait"] = n.num(&format!("devices[{i}].input_wait"), last.input_wait);
            j["compute"] = n.num(&format!("devices[{i}].compute"), (t.upload + t.compute) / last.seconds);
            j["exchange"] = n.num(&format!("devices[{i}].exchange"), t.exchange / last.seconds);
            j
        })
        .collect();
    let mut out = json!({
        "commit": env!("CONVOY_COMMIT"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "steps": a.steps,
        "image_size": a.image_size,
        "precision": precision.name(),
        "classes": a.classes,
        "shaders": if devices[0].is_checked() { "checked" } else { "unchecked" },
        "model": a.model,
        "batch_size": a.batch_size,
        "global_batch": a.batch_size * last.devices,
        "images_per_sec": n.num("images_per_sec", last.images_per_sec),
        "step_ms": n.num("step_ms", last.step_ms),
        "devices": per_device,
        "scaling": scaling,
    });
    let first = &runs[0];
    if let Some(p) = &first.profile {
        let peak = Peak::for_adapter(devices[0].name());
        let host_ms = first.host_ms();
        let mut j = p.to_json(peak.as_ref());
        j["host_ms"] = json!(host_ms);
        j["step_ms"] = json!(first.step_ms);
        j["device"] = json!(devices[0].name());
        if !a.dispatches {
            j.as_object_mut().map(|o| o.remove("dispatches"));
        }
        out["profile"] = j;
        if !a.json {
            eprintln!("\n{} on {}, batch {}: step {:.3} ms, host staging + recording {host_ms:.3} ms", a.model, devices[0].name(), a.batch_size, first.step_ms);
            eprint!("{}", p.table(peak.as_ref(), a.dispatches));
        }
    }
    let out = n.finish(out);
    if a.json {
        println!("{out}");
    } else {
        for s in &scaling {
            println!("{} device(s): {:.0} images/s, efficiency {:.1}%", s["devices"], s["images_per_sec"].as_f64().unwrap_or(0.0), 100.0 * s["efficiency"].as_f64().unwrap_or(0.0));
        }
    }
    Ok(())
}
