//! Per model and batch size: images/s, step time, and the GPU time of every kernel of a
//! training step (timestamp queries) beside its floor at the chip's peak.
//!
//! `cargo bench --bench step [-- MODEL.. BATCH..]`, e.g. `-- resnet18_cifar 64 256`; the device
//! is `CONVOY_BENCH_DEVICES` (default: the first adapter). On a software adapter the
//! defaults shrink to a smoke run (convnet7, batch 8, 2 steps).

use convoy::bench::{measure, BenchConfig};
use convoy::model::Peak;

fn main() -> convoy::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let selection = std::env::var("CONVOY_BENCH_DEVICES").unwrap_or_else(|_| "0".into());
    let devices = convoy::device::open(&selection)?;
    let software = devices[0].is_software();
    let mut models: Vec<String> = args.iter().filter(|a| a.parse::<usize>().is_err()).cloned().collect();
    let mut batches: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if models.is_empty() {
        models = if software { vec!["convnet7".into()] } else { ["resnet18_cifar", "resnet20", "convnet7"].map(String::from).to_vec() };
    }
    if batches.is_empty() {
        batches = if software { vec![8] } else { vec![64, 256] };
    }
    let steps = if software { 2 } else { 30 };
    let peak = Peak::for_adapter(devices[0].name());
    println!("device: {} ({})", devices[0].name(), devices[0].backend());
    for model in &models {
        for &batch_size in &batches {
            let cfg = BenchConfig { model: model.clone(), batch_size, image_size: 32, classes: None, steps, profile: true, precision: Default::default() };
            let m = measure(&cfg, &devices)?;
            let host_ms = m.host_ms();
            println!("\n{model}, batch {batch_size} x {}: {:.0} images/s, step {:.3} ms, host staging + recording {host_ms:.3} ms", devices.len(), m.images_per_sec, m.step_ms);
            if let Some(p) = &m.profile {
                print!("{}", p.table(peak.as_ref(), false));
            }
        }
    }
    Ok(())
}
