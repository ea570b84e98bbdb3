//! `convoy check`: trains zoo models a few steps on the selected devices and holds every
//! gradient, loss, moving statistic and update against the f64 reference
//! (`convoy::check`), which takes ReLU masks and max-pool choices from the device.

use clap::Args;
use serde_json::{json, Value};

use convoy::check::{check_zoo, CheckConfig, Report, BOUND, ROUNDING_SLACK};
use convoy::model::{zoo, DTypePolicy};
use convoy::optim::Optimizer;
use convoy::{bail, Result};

use super::{device_json, JsonNumbers};

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A zoo model, or `all` (the default) for every one.
    #[arg(long, default_value = "all")]
    pub model: String,
    /// all, indices like 0,1, software, software:N: one replica per entry.
    #[arg(long, default_value = "all")]
    pub devices: String,
    /// The global batch, split across the devices; 32 by default (8 on a software adapter).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Image side in pixels; 32 by default (12 on a software adapter).
    #[arg(long)]
    pub image_size: Option<usize>,
    /// Training steps checked, each from convoy's weights after the one before.
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    /// sgd (momentum 0.9, Nesterov, weight decay 5e-4), adam or adamw.
    #[arg(long, default_value = "sgd")]
    pub optimizer: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// float32, or mixed: the model trains under mixed_float16 and is held to a plain
    /// implementation of that policy (f16 operands in every product) instead of plain f32.
    #[arg(long, default_value = "float32")]
    pub precision: String,
    #[arg(long)]
    pub json: bool,
}

/// One model's report; `at` prefixes the keys of non-finite errors (`models[1].`).
fn report_json(model: &str, r: &Report, nums: &mut JsonNumbers, at: &str) -> Value {
    let mut num = |k: &str, v: f64| nums.num(&format!("{at}{k}"), v);
    json!({
        "model": model,
        "ok": r.ok,
        "grad_bound": r.grad_bound,
        "loss_bound": r.loss_bound,
        "drift_bound": r.drift_bound,
        "moving_stats_bound": r.moving_stats_bound,
        "f32_moving_stats_error": num("f32_moving_stats_error", r.f32_moving_stats.error),
        "f32_grad_error": num("f32_grad_error", r.f32_grad.error),
        "f32_loss_error": num("f32_loss_error", r.f32_loss.error),
        "f32_drift": num("f32_drift", r.f32_drift.error),
        "max_grad_error": num("max_grad_error", r.grad.error),
        "worst_tensor": r.grad.at,
        "max_loss_error": num("max_loss_error", r.loss.error),
        "max_update_error": num("max_update_error", r.update.error),
        "worst_update": r.update.at,
        "max_optimizer_state_error": num("max_optimizer_state_error", r.optimizer_state.error),
        "max_moving_stats_error": num("max_moving_stats_error", r.moving_stats.error),
        "worst_moving_stats": r.moving_stats.at,
        "ties": r.ties,
        "flipped": r.flipped,
        "max_drift": num("max_drift", r.drift.error),
        "worst_drift": r.drift.at,
        "wrong_decisions": r.mismatch_count,
        "mismatches": r.mismatches,
        "steps": r.steps,
        "shares": r.shares,
        "skipped_steps": r.skipped_steps,
    })
}

pub fn run(a: CheckArgs) -> Result<()> {
    let precision = DTypePolicy::from_name(&a.precision)?;
    let devices = convoy::device::open(&a.devices)?;
    let software = devices.iter().all(|d| d.is_software());
    let batch_size = a.batch_size.unwrap_or(if software { 8 } else { 32 });
    let image_size = a.image_size.unwrap_or(if software { 12 } else { 32 });
    let optimizer = Optimizer::from_name(&a.optimizer, if a.optimizer == "sgd" { 0.05 } else { 1e-3 })?;
    let models: Vec<String> = if a.model == "all" { zoo::MODELS.iter().map(|s| s.to_string()).collect() } else { vec![a.model.clone()] };
    if batch_size < devices.len() {
        bail!(Config, "--batch-size {batch_size} leaves some of the {} devices without samples", devices.len());
    }
    let mut results = Vec::new();
    for model in &models {
        let cfg = CheckConfig { steps: a.steps, optimizer: optimizer.clone(), seed: a.seed, precision, ..CheckConfig::new(model, batch_size, image_size) };
        let t0 = std::time::Instant::now();
        let r = check_zoo(&cfg, devices.clone())?;
        let plain = if precision.is_mixed() { "mixed_float16 (f16 operands and activations)" } else { "f32" };
        if !a.json {
            let verdict = if r.ok { "ok" } else { "MISMATCH" };
            eprintln!(
                "{model} (batch {batch_size}, {image_size} px, {} steps, shares {:?}): {verdict}; gradients {:.1e} (bound {:.1e}, worst {}), losses {:.1e} (bound {:.1e}), updates {:.1e}, moving statistics {:.1e} (bound {:.1e}); forward drift {:.1e} (bound {:.1e}, worst {}); plain {}: gradients {:.1e}, losses {:.1e}, drift {:.1e}, moving statistics {:.1e}; {} ties ({} decided the other way), {} wrong decisions, {} steps skipped for an overflow [{:.1} s]",
                r.steps, r.shares, r.grad.error, r.grad_bound, r.grad.at, r.loss.error, r.loss_bound, r.update.error, r.moving_stats.error, r.moving_stats_bound, r.drift.error, r.drift_bound, r.drift.at, plain, r.f32_grad.error, r.f32_loss.error, r.f32_drift.error, r.f32_moving_stats.error, r.ties, r.flipped, r.mismatch_count, r.skipped_steps, t0.elapsed().as_secs_f64()
            );
            for m in r.mismatches.iter().take(10) {
                eprintln!("  wrong decision: {m}");
            }
        }
        results.push((model.clone(), r));
    }
    let worst = results.iter().max_by(|a, b| a.1.grad.error.total_cmp(&b.1.grad.error)).expect("at least one model");
    let ok = results.iter().all(|(_, r)| r.ok);
    let mut nums = JsonNumbers::default();
    let models: Vec<Value> = results.iter().enumerate().map(|(i, (m, r))| report_json(m, r, &mut nums, &format!("models[{i}]."))).collect();
    let out = json!({
        "commit": env!("CONVOY_COMMIT"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "steps": a.steps,
        "precision": precision.name(),
        "ok": ok,
        "max_grad_error": nums.num("max_grad_error", worst.1.grad.error),
        "worst_tensor": format!("{}: {}", worst.0, worst.1.grad.at),
        "ties": results.iter().map(|(_, r)| r.ties).sum::<usize>(),
        "bound": BOUND,
        "grad_bound": results.iter().map(|(_, r)| r.grad_bound).fold(BOUND, f64::max),
        "batch_size": batch_size,
        "image_size": image_size,
        "devices": devices.iter().map(|d| device_json(d, 0)).collect::<Vec<_>>(),
        "shaders": if devices[0].is_checked() { "checked" } else { "unchecked" },
        "models": models,
    });
    let out = nums.finish(out);
    if a.json {
        println!("{out}");
    } else {
        println!("{}", if ok { format!("check passed: every error under {BOUND:e}, gradients, losses, drift and moving statistics under {ROUNDING_SLACK}x plain {}'s where larger", precision.name()) } else { "check FAILED".to_string() });
    }
    if !ok {
        let bad: Vec<&str> = results.iter().filter(|(_, r)| !r.ok).map(|(m, _)| m.as_str()).collect();
        bail!(Mismatch, "failed for {}: convoy's training step differs from the f64 reference beyond its bounds", bad.join(", "));
    }
    Ok(())
}
