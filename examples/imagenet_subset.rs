//! torchvision's ImageNet ResNet-50 (or ResNet-18) on an ImageNet-style image folder (ImageNet
//! itself, Imagenette, ...) with the ImageNet recipe: random-resized crops and flips for
//! training, a resize and centre crop for validation, SGD with Nesterov momentum 0.9, a linear
//! warm-up and a cosine decay stepped per batch, top-1 and top-5 accuracy, a checkpoint every
//! epoch and `--resume` from it.
//!
//! cargo run --release --example imagenet_subset -- DIR [--model resnet50|resnet18]
//!     [--image-size 160..224] [--epochs N] [--batch-size N] [--devices SEL]
//!     [--checkpoint-dir DIR] [--resume] [--init FILE]
//!
//! `--init FILE` fine-tunes a convoy model instead of training from scratch, e.g. an ImageNet
//! ResNet-50 from `convoy import --from torchvision --model resnet50 r50.safetensors --out FILE`:
//! its classifier head is replaced for the folder's classes, and the run is a fine-tuning one
//! (a tenth of the learning rate, L2 1e-4, the same schedule).
//!
//! DIR holds DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg; `packed:FILE` (from
//! `convoy pack --image-size 256` for 224 px training) reads a packed file instead. The
//! checkpoint is `checkpoint.safetensors` in the checkpoint directory (default
//! `imagenet_subset_checkpoints`), as `convoy train --checkpoint-dir`; `--resume` continues
//! from it at the epoch it reached and ends at `--epochs`, as `convoy train --resume` does.
//! Keep `--epochs` the same when resuming: the cosine decay is laid out over it.

use std::path::PathBuf;

use convoy::callbacks::{History, LearningRateScheduler, ModelCheckpoint, TerminateOnNaN};
use convoy::data::{augment_for, from_spec};
use convoy::prelude::*;

/// What one run trains: from the command line through [`parse_args`], or built directly.
#[derive(Clone, Debug)]
pub struct Config {
    /// A `--data` spec: `folder:DIR` or `packed:FILE`.
    pub data: String,
    /// `resnet50` or `resnet18` (the ImageNet forms); a resumed run takes the checkpoint's.
    pub model: String,
    pub image_size: usize,
    pub epochs: usize,
    /// The global batch, split across the devices.
    pub batch_size: usize,
    /// A device selection, as `convoy train --devices`.
    pub devices: String,
    pub checkpoint_dir: PathBuf,
    pub resume: bool,
    /// A convoy model to fine-tune (its head replaced when the classes differ) instead of `model`.
    pub init: Option<PathBuf>,
    /// 0: silent, 1: a progress bar and a line per epoch.
    pub verbose: u8,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data: String::new(),
            model: "resnet50".into(),
            image_size: 224,
            epochs: 90,
            batch_size: 256,
            devices: "all".into(),
            checkpoint_dir: "imagenet_subset_checkpoints".into(),
            resume: false,
            init: None,
            verbose: 1,
        }
    }
}

const USAGE: &str = "usage: imagenet_subset DIR|packed:FILE [--model resnet50|resnet18] [--image-size 160..224] \
[--epochs N] [--batch-size N] [--devices SEL] [--checkpoint-dir DIR] [--resume] [--init FILE]";

/// The command line (without the program name) as a [`Config`]; a bad argument is one line
/// naming it, ending with the usage.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> convoy::Result<Config> {
    let mut cfg = Config::default();
    let mut args = args.into_iter();
    let bad = |msg: String| convoy::Error::Config(format!("{msg}; {USAGE}"));
    while let Some(arg) = args.next() {
        if arg == "--resume" {
            cfg.resume = true;
            continue;
        }
        if !arg.starts_with("--") {
            if !cfg.data.is_empty() {
                return Err(bad(format!("a second data directory '{arg}'")));
            }
            // A folder by default; `packed:FILE` and `folder:DIR` pass through as specs.
            cfg.data = if arg.starts_with("packed:") || arg.starts_with("folder:") { arg } else { format!("folder:{arg}") };
            continue;
        }
        let value = args.next().ok_or_else(|| bad(format!("{arg} needs a value")))?;
        let number = |v: &str| v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| bad(format!("{arg} takes a positive whole number, got '{v}'")));
        match arg.as_str() {
            "--model" if value == "resnet50" || value == "resnet18" => cfg.model = value,
            "--model" => return Err(bad(format!("--model is resnet50 or resnet18, got '{value}'"))),
            "--image-size" => {
                cfg.image_size = number(&value)?;
                // Below 160 the ImageNet forms' final feature map shrinks under 5x5, and the
                // recipe's crop statistics were tuned for 224.
                if !(160..=224).contains(&cfg.image_size) {
                    return Err(bad(format!("--image-size is 160..224, got {value}")));
                }
            }
            "--epochs" => cfg.epochs = number(&value)?,
            "--batch-size" => cfg.batch_size = number(&value)?,
            "--devices" => cfg.devices = value,
            "--checkpoint-dir" => cfg.checkpoint_dir = value.into(),
            "--init" => cfg.init = Some(value.into()),
            _ => return Err(bad(format!("unknown option {arg}"))),
        }
    }
    if cfg.data.is_empty() {
        return Err(bad("no data directory".into()));
    }
    Ok(cfg)
}

/// What [`train`] did: the epoch it started at (counted from 0: 0 for a fresh run, the
/// epochs trained for a resumed one) and the logs of the epochs it trained.
pub struct Run {
    pub initial_epoch: usize,
    pub history: History,
}

/// Trains `cfg.model` on `cfg.data` from scratch, or with `cfg.resume` from the checkpoint in
/// `cfg.checkpoint_dir` when there is one, up to epoch `cfg.epochs`.
pub fn train(cfg: &Config) -> convoy::Result<Run> {
    let (train, val) = from_spec(&cfg.data, Some(cfg.image_size), 0)?;
    // ImageNet's recipe from 96 px (random-resized crop + flip; validation is resized and
    // centre-cropped by the data set itself), the same choice `convoy train` makes.
    let augment = augment_for(&cfg.data, cfg.image_size);
    let devices = convoy::device::open(&cfg.devices)?;
    std::fs::create_dir_all(&cfg.checkpoint_dir).map_err(|e| convoy::Error::io(&cfg.checkpoint_dir, e))?;
    let checkpoint = cfg.checkpoint_dir.join("checkpoint.safetensors");
    // Goyal et al.'s linear scaling: 0.1 at batch 256.
    let base = 0.1 * cfg.batch_size as f32 / 256.0;
    // Fine-tuning starts from trained features: a tenth of the rate keeps them.
    let base = if cfg.init.is_some() { base / 10.0 } else { base };
    let mut model = if cfg.resume && checkpoint.exists() {
        // The optimizer (momentum included) and the epochs trained come back with the weights.
        Sequential::load_compiled(&checkpoint, devices, cfg.batch_size)?
    } else {
        let shape = train.image_shape();
        let mut m = match (&cfg.init, cfg.model.as_str()) {
            // The imported model's normalisation (ImageNet's) comes with it.
            (Some(init), _) => {
                let (m, _) = Sequential::load(init)?;
                let m = if m.input_shape() != shape { m.with_input_shape(&shape)? } else { m };
                if m.output_shape()? != [train.num_classes()] { m.with_new_head(train.num_classes(), 0)? } else { m }
            }
            (None, "resnet18") => convoy::model::zoo::resnet18(&shape, train.num_classes()),
            (None, _) => convoy::model::zoo::resnet50(&shape, train.num_classes()),
        };
        // L2 1e-4 in the gradient: torchvision's reference recipe (SGD weight_decay=1e-4).
        m.compile(CompileOptions::new(Optimizer::sgd(base).momentum(0.9).nesterov(true).l2(1e-4)).metrics(vec![Metric::Accuracy, Metric::TopKAccuracy(5)]).devices(devices).max_batch(cfg.batch_size))?;
        m
    };
    let initial_epoch = model.compiled_epoch();
    if initial_epoch >= cfg.epochs {
        convoy::bail!(Config, "{} has trained {initial_epoch} epochs already and --epochs {} (where the run ends) asks for no more", checkpoint.display(), cfg.epochs);
    }
    if cfg.verbose > 0 {
        let from = if initial_epoch > 0 { format!(", resuming {} at epoch {}", checkpoint.display(), initial_epoch + 1) } else { String::new() };
        println!("{} training images of {} classes at {} px{from}", train.len(), train.num_classes(), cfg.image_size);
    }
    // A few epochs of warm-up (at most 5, a tenth of the run) before the cosine decay.
    let warmup = (cfg.epochs / 10).clamp(1, 5);
    let schedule = Schedule::Warmup { warmup_epochs: warmup as f32, then: Box::new(Schedule::Cosine { epochs: cfg.epochs.saturating_sub(warmup).max(1), min_lr: 0.0 }) };
    let callbacks: Vec<Box<dyn Callback>> = vec![
        // Every step after a non-finite loss only spreads NaN through the weights.
        Box::new(TerminateOnNaN::new()),
        Box::new(LearningRateScheduler::from_schedule(base, schedule)),
        Box::new(ModelCheckpoint::new(checkpoint.to_string_lossy().to_string())),
        Box::new(EpochLine { epochs: cfg.epochs, verbose: cfg.verbose }),
    ];
    let history = model.fit(
        train,
        FitOptions {
            epochs: cfg.epochs,
            initial_epoch,
            batch_size: cfg.batch_size,
            validation_data: Some(val),
            callbacks,
            augment: Some(augment),
            verbose: cfg.verbose,
            ..Default::default()
        },
    )?;
    Ok(Run { initial_epoch, history })
}

/// One line per epoch on standard output: validation top-1 and top-5, and the share of the
/// step time spent waiting for decoded images.
struct EpochLine {
    epochs: usize,
    verbose: u8,
}

impl Callback for EpochLine {
    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, _ctx: &mut Context) -> convoy::Result<()> {
        if self.verbose > 0 {
            let get = |k: &str| logs.get(k).copied().unwrap_or(f64::NAN);
            println!(
                "epoch {}/{}: val top-1 {:.4}, top-5 {:.4}, train loss {:.4}, {:.0} images/s, {:.0}% waiting for input",
                epoch + 1,
                self.epochs,
                get("val_accuracy"),
                get("val_top_k_accuracy"),
                get("loss"),
                get("images_per_sec"),
                100.0 * get("input_wait")
            );
        }
        Ok(())
    }
}

#[allow(dead_code)] // tests/examples.rs includes this file as a module and calls `train` only
fn main() {
    let result = parse_args(std::env::args().skip(1)).and_then(|cfg| train(&cfg));
    match result {
        Ok(run) => {
            let best = |k: &str| run.history.get(k).unwrap_or(&[]).iter().cloned().fold(f64::NAN, f64::max);
            println!("best val top-1 {:.4}, top-5 {:.4}", best("val_accuracy"), best("val_top_k_accuracy"));
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
