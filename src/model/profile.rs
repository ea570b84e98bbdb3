//! Per-kernel GPU time of one training step, from timestamp queries: what `convoy bench
//! --profile` and `benches/step.rs` print. Each dispatch runs in a timed pass of its own,
//! so the sum is a little above a real step's GPU time (one barrier per pass).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::kernels::Dispatch;

/// One dispatch of a step, timed (averaged over the profiled steps).
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// What it does: `conv2d_forward`, `conv2d_backward_data`, `conv2d_backward_weights`,
    /// `dense_*`, or the shader family (`batchnorm`, `optimizer`, `pool`, ...).
    pub family: String,
    /// Shader entry point.
    pub entry: &'static str,
    /// The index of the layer whose recording added it, where one did.
    pub layer: Option<usize>,
    /// GPU time, in milliseconds.
    pub ms: f64,
    /// Floating-point operations, as the dispatch counts them.
    pub flops: f64,
    /// Bytes read and written, as the dispatch counts them.
    pub bytes: f64,
    /// Dispatches summed into this row.
    pub count: usize,
    /// Whether its products ran on tensor cores (f16 cooperative matrices), whose peak is
    /// the one its arithmetic is measured against.
    pub tensor: bool,
    /// The dispatch's path tokens ([`Dispatch::path`]: tile, gathers, storage, ...), so
    /// that a row of the per-dispatch table names the product's shape of kernel; empty in
    /// the rows by family.
    pub path: String,
}

impl KernelTime {
    /// A row for one dispatch that took `ns` nanoseconds.
    pub fn from_dispatch(d: &Dispatch, ns: f64) -> KernelTime {
        // The GEMM kernels' dispatches are named by the product (dense_forward, ...).
        // A storage variant (`batchnorm.wgsl+f16`) counts with its file.
        let file = d.shader.split('+').next().unwrap_or(d.shader);
        let gemm = [crate::kernels::CONV2D.file(), crate::kernels::GEMM_CPU.file()].contains(&file);
        let family = if gemm { d.kernel.to_string() } else { file.trim_end_matches(".wgsl").to_string() };
        let tensor = file == crate::kernels::CONV2D_COOP.file();
        KernelTime { family, entry: d.label, layer: d.layer, ms: ns * 1e-6, flops: d.flops, bytes: d.bytes, count: 1, tensor, path: path_tokens(d) }
    }

    /// The time the chip needs at least: its arithmetic at peak or its bytes at full bandwidth.
    pub fn floor_ms(&self, peak: &Peak) -> f64 {
        (self.flops / (self.peak_tflops(peak) * 1e9)).max(self.bytes / (peak.gbps * 1e6))
    }

    /// The arithmetic peak this kernel's products run against: the tensor cores' f16 one
    /// for cooperative-matrix products, else f32's.
    pub fn peak_tflops(&self, peak: &Peak) -> f64 {
        if self.tensor { peak.tensor_tflops } else { peak.tflops }
    }

    /// The fraction of that peak the kernel reached.
    pub fn of_peak(&self, peak: &Peak) -> f64 {
        self.flops / (self.ms * 1e-3).max(1e-12) * 1e-12 / self.peak_tflops(peak)
    }

    fn to_json(&self, peak: Option<&Peak>) -> Value {
        let s = self.ms * 1e-3;
        let mut j = json!({
            "kernel": self.family, "entry": self.entry, "layer": self.layer, "dispatches": self.count, "path": self.path,
            "ms": self.ms, "flops": self.flops, "bytes": self.bytes, "tflops": self.flops / s.max(1e-12) * 1e-12, "gbps": self.bytes / s.max(1e-12) * 1e-9,
        });
        if let Some(p) = peak {
            j["floor_ms"] = json!(self.floor_ms(p));
            j["of_peak_flops"] = json!(self.of_peak(p));
            j["peak_tflops"] = json!(self.peak_tflops(p));
        }
        j
    }
}

/// A dispatch's path tokens less its entry point, which the path starts with and the row
/// names already.
fn path_tokens(d: &Dispatch) -> String {
    let mut tokens = d.path.split_whitespace().peekable();
    tokens.next_if_eq(&d.label);
    tokens.collect::<Vec<_>>().join(" ")
}

/// The chip's datasheet limits, for each kernel's floor.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    /// Peak FP32 throughput, in TFLOP/s.
    pub tflops: f64,
    /// Peak dense f16 tensor-core throughput with f32 accumulation, in TFLOP/s.
    pub tensor_tflops: f64,
    /// Peak memory bandwidth, in GB/s.
    pub gbps: f64,
}

impl Peak {
    /// FP32 and f16 tensor-core peaks (dense, datasheet) and memory bandwidth of the GPUs we
    /// benchmark on, by adapter name.
    pub fn for_adapter(name: &str) -> Option<Peak> {
        let known = [("H200", 67.0, 989.4, 4800.0), ("H100 PCIe", 51.0, 756.0, 2000.0), ("H100", 67.0, 989.4, 3350.0), ("A100", 19.5, 312.0, 2039.0)];
        known.iter().find(|(n, ..)| name.contains(n)).map(|&(_, tflops, tensor_tflops, gbps)| Peak { tflops, tensor_tflops, gbps })
    }
}

/// Every dispatch of one step with its GPU time.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Samples per step on the profiled device.
    pub batch: usize,
    /// Every dispatch of the step, in execution order.
    pub kernels: Vec<KernelTime>,
}

impl Profile {
    /// Averages the per-dispatch times of several profiled steps of the same plan.
    pub fn average(batch: usize, steps: &[Vec<KernelTime>]) -> Profile {
        let mut kernels = steps[0].clone();
        for k in &mut kernels {
            k.ms = 0.0;
        }
        for step in steps {
            for (acc, k) in kernels.iter_mut().zip(step) {
                acc.ms += k.ms / steps.len() as f64;
            }
        }
        Profile { batch, kernels }
    }

    /// GPU time of the whole step, in milliseconds: the sum over its dispatches.
    pub fn gpu_ms(&self) -> f64 {
        self.kernels.iter().map(|k| k.ms).sum()
    }

    /// Rows summed by kernel family, longest first.
    pub fn by_family(&self) -> Vec<KernelTime> {
        let mut rows: BTreeMap<String, KernelTime> = BTreeMap::new();
        for k in &self.kernels {
            let row = rows.entry(k.family.clone()).or_insert_with(|| KernelTime { ms: 0.0, flops: 0.0, bytes: 0.0, count: 0, layer: None, path: String::new(), ..k.clone() });
            row.ms += k.ms;
            row.flops += k.flops;
            row.bytes += k.bytes;
            row.count += 1;
        }
        let mut rows: Vec<_> = rows.into_values().collect();
        rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        rows
    }

    /// The profile as JSON: `gpu_ms`, rows by kernel family and per dispatch, with each kernel's
    /// floor when `peak` is known.
    pub fn to_json(&self, peak: Option<&Peak>) -> Value {
        json!({
            "batch": self.batch,
            "gpu_ms": self.gpu_ms(),
            "by_kernel": self.by_family().iter().map(|k| k.to_json(peak)).collect::<Vec<_>>(),
            "dispatches": self.kernels.iter().map(|k| k.to_json(peak)).collect::<Vec<_>>(),
        })
    }

    /// A table of the families and, with `every`, of each dispatch.
    pub fn table(&self, peak: Option<&Peak>, every: bool) -> String {
        let mut out = format!("{:<34} {:>5} {:>9} {:>6} {:>8} {:>6} {:>8} {:>9} {:>7}\n", "kernel", "n", "ms/step", "share", "TFLOP/s", "peak%", "GB/s", "floor ms", "floor%");
        let total = self.gpu_ms().max(1e-12);
        let row = |name: String, k: &KernelTime| {
            let s = (k.ms * 1e-3).max(1e-12);
            let (floor, pct) = peak.map_or((String::from("-"), String::from("-")), |p| (format!("{:.3}", k.floor_ms(p)), format!("{:.0}%", 100.0 * k.floor_ms(p) / k.ms.max(1e-12))));
            // Of the tensor cores' peak for cooperative-matrix products, of f32's otherwise.
            let of_peak = peak.map_or(String::from("-"), |p| format!("{:.1}%", 100.0 * k.of_peak(p)));
            // A software adapter's GFLOP/s would show as 0.00 TFLOP/s.
            let tflops = k.flops / s * 1e-12;
            format!(
                "{:<34} {:>5} {:>9.3} {:>5.1}% {:>8.*} {:>6} {:>8.0} {:>9} {:>7}\n",
                name,
                k.count,
                k.ms,
                100.0 * k.ms / total,
                if tflops < 1.0 { 3 } else { 2 },
                tflops,
                of_peak,
                k.bytes / s * 1e-9,
                floor,
                pct
            )
        };
        for k in self.by_family() {
            out += &row(k.family.clone(), &k);
        }
        if every {
            out += "\nper dispatch:\n";
            for k in &self.kernels {
                let layer = k.layer.map_or(String::from("-"), |l| l.to_string());
                let line = row(format!("{layer:>3} {} ({})", k.family, k.entry), k);
                out += &format!("{}  {}\n", line.trim_end(), k.path);
            }
        }
        out + &format!("GPU time of the timed dispatches: {:.3} ms per step\n", self.gpu_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(family: &str, ms: f64, flops: f64, bytes: f64) -> KernelTime {
        KernelTime { family: family.into(), entry: "gemm", layer: Some(0), ms, flops, bytes, count: 1, tensor: family == "conv2d_coop", path: "tile=M128N64 coop".into() }
    }

    #[test]
    fn families_sum_and_floors_follow_the_slower_limit() {
        let steps = vec![
            vec![k("conv2d_forward", 1.0, 67e9, 1e6), k("batchnorm", 0.5, 0.0, 4.8e9), k("conv2d_forward", 2.0, 0.0, 0.0)],
            vec![k("conv2d_forward", 3.0, 67e9, 1e6), k("batchnorm", 1.5, 0.0, 4.8e9), k("conv2d_forward", 4.0, 0.0, 0.0)],
        ];
        let p = Profile::average(8, &steps);
        assert_eq!(p.kernels.iter().map(|k| k.ms).collect::<Vec<_>>(), vec![2.0, 1.0, 3.0]);
        let fam = p.by_family();
        assert_eq!((fam[0].family.as_str(), fam[0].ms, fam[0].count), ("conv2d_forward", 5.0, 2));
        assert_eq!((fam[1].family.as_str(), fam[1].ms), ("batchnorm", 1.0));
        // Each dispatch's row names its path; the families' rows sum several paths and name none.
        assert!(fam.iter().all(|f| f.path.is_empty()));
        let table = p.table(None, true);
        let (families, dispatches) = table.split_once("per dispatch:").unwrap();
        assert!(!families.contains("tile=") && dispatches.lines().filter(|l| l.ends_with("  tile=M128N64 coop")).count() == 3, "{table}");
        let h200 = Peak::for_adapter("NVIDIA H200").unwrap();
        // 67 GFLOP at 67 TFLOP/s is 1 ms; 4.8 GB at 4.8 TB/s is 1 ms.
        assert!((p.kernels[0].floor_ms(&h200) - 1.0).abs() < 1e-9);
        assert!((p.kernels[1].floor_ms(&h200) - 1.0).abs() < 1e-9);
        // Tensor-core products against the f16 peak: 989.4 GFLOP in 2 ms is half of it.
        let coop = KernelTime { ms: 2.0, ..k("conv2d_coop", 2.0, 989.4e9, 0.0) };
        assert!((coop.floor_ms(&h200) - 1.0).abs() < 1e-9 && (coop.of_peak(&h200) - 0.5).abs() < 1e-9);
        assert!((p.kernels[0].of_peak(&h200) - 0.5).abs() < 1e-9, "67 GFLOP in 2 ms is half of f32's peak");
        assert!(Peak::for_adapter("llvmpipe").is_none());
        assert_eq!(Peak::for_adapter("NVIDIA H100 PCIe").unwrap().gbps, 2000.0);
    }
}
