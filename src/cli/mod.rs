//! Subcommands of `convoy`; each prints human output, or with `--json` ends standard output
//! with one JSON object.

mod bench;
mod check;
mod devices;
mod evaluate;
mod train;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use convoy::{Device, Result};

#[derive(Parser, Debug)]
#[command(name = "convoy", version, about = "Data-parallel CNN training on every GPU of the machine, through wgpu")]
pub struct Cli {
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
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Devices { json } => devices::run(json),
        Command::Train(a) => train::run(a),
        Command::Evaluate(a) => evaluate::run_evaluate(a),
        Command::Predict(a) => evaluate::run_predict(a),
        Command::Bench(a) => bench::run(a),
        Command::Check(a) => check::run(a),
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
