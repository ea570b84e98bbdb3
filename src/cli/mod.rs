//! Subcommands of `convoy`; each prints human output, or with `--json` ends standard output
//! with one JSON object.

mod bench;
mod check;
mod devices;
mod evaluate;
mod import;
mod logger;
mod summary;
mod pack;
mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use convoy::{Device, Result};

#[derive(Parser, Debug)]
#[command(name = "convoy", version, about = "Data-parallel CNN training on every GPU of the machine, through wgpu")]
pub struct Cli {
    /// The graphics API: vulkan, metal, dx12 or gl (default: Vulkan, Metal or DX12, GL only
    /// where none of them has an adapter; also CONVOY_BACKEND).
    #[arg(long, global = true, value_name = "API")]
    pub backend: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List the adapters convoy can use.
    Devices {
        #[arg(long)]
        json: bool,
    },
    /// Train a model (by default on the built-in synthetic task).
    Train(train::TrainArgs),
    /// Evaluate a saved model.
    Evaluate(evaluate::EvaluateArgs),
    /// Predict classes with a saved model.
    Predict(evaluate::PredictArgs),
    /// Measure training images/s on 1..N devices and the scaling efficiency.
    Bench(bench::BenchArgs),
    /// Check a few training steps of the zoo models on these devices against an f64 reference.
    Check(check::CheckArgs),
    /// Print a zoo model's Keras-style summary: layers, output shapes, parameters, FLOPs.
    Summary(summary::SummaryArgs),
    /// Decode an image folder once into a packed file for --data packed:FILE.
    Pack(pack::PackArgs),
    /// Import a PyTorch state dict (torchvision's or timm's names, as safetensors) as a convoy model.
    Import(import::ImportArgs),
    /// Export a zoo model to a PyTorch state dict (safetensors) under torchvision's or timm's names.
    Export(import::ExportArgs),
}

/// Runs the subcommand; `Ok` carries the exit code (`train` ends with
/// [`EXIT_NON_FINITE`] when the loss diverged, everything else with 0).
pub fn run(cli: Cli) -> Result<ExitCode> {
    let done = |r: Result<()>| r.map(|()| ExitCode::SUCCESS);
    logger::init()?;
    if let Some(b) = &cli.backend {
        convoy::device::adapters::set_backend(b)?;
    }
    match cli.command {
        Command::Devices { json } => done(devices::run(json)),
        Command::Train(a) => train::run(a),
        Command::Evaluate(a) => done(evaluate::run_evaluate(a)),
        Command::Predict(a) => done(evaluate::run_predict(a)),
        Command::Bench(a) => done(bench::run(a)),
        Command::Check(a) => done(check::run(a)),
        Command::Summary(a) => done(summary::run(a)),
        Command::Pack(a) => done(pack::run(a)),
        Command::Import(a) => done(import::run_import(a)),
        Command::Export(a) => done(import::run_export(a)),
    }
}

/// The exit code of `convoy train` when the loss became non-finite (design.md): scripts can
/// tell a diverged run from a failed one (1).
pub const EXIT_NON_FINITE: u8 = 3;

/// The numbers of a `--json` object. JSON has no NaN or infinity (serde_json writes `null`),
/// so each non-finite number is written as `null` and its key listed in `"non_finite"`
/// (design.md): a script can then tell a diverged loss from a missing value.
#[derive(Default)]
pub struct JsonNumbers {
    non_finite: Vec<String>,
}

impl JsonNumbers {
    /// `v` as a JSON number, or `null` with `key` recorded when it is NaN or infinite.
    pub fn num(&mut self, key: &str, v: f64) -> Value {
        if v.is_finite() {
            json!(v)
        } else {
            self.non_finite.push(key.to_string());
            Value::Null
        }
    }
    /// Adds `"non_finite": [keys]` to the object `out` (an empty list when all were finite).
    pub fn finish(self, mut out: Value) -> Value {
        out["non_finite"] = json!(self.non_finite);
        out
    }
}

/// A device as the JSON outputs list it.
pub fn device_json(d: &Device, samples: usize) -> Value {
    json!({ "name": d.name(), "backend": d.backend(), "vendor": d.vendor(), "type": format!("{:?}", d.info().device_type), "samples": samples })
}

/// Refuses an output path whose directory does not exist before any work starts.
pub fn check_output(path: &Option<PathBuf>) -> Result<()> {
    if let Some(p) = path {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(convoy::Error::io(p, std::io::Error::new(std::io::ErrorKind::NotFound, "the directory does not exist")));
        }
        if p.is_dir() {
            return Err(convoy::Error::io(p, std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory, expected a file path")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_numbers_are_null_and_listed() {
        let mut n = JsonNumbers::default();
        let out = json!({ "loss": n.num("loss", f64::NAN), "accuracy": n.num("accuracy", 0.5), "rate": n.num("rate", f64::INFINITY) });
        assert_eq!(n.finish(out).to_string(), r#"{"accuracy":0.5,"loss":null,"non_finite":["loss","rate"],"rate":null}"#);
        let n = JsonNumbers::default();
        assert_eq!(n.finish(json!({})).to_string(), r#"{"non_finite":[]}"#);
    }
}
