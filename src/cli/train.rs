//! `convoy train`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde_json::json;

use convoy::callbacks::{LearningRateScheduler, ModelCheckpoint, TerminateOnNaN};
use convoy::data::{augment_for, from_spec, Dataset};
use convoy::model::{non_finite_warning, zoo, CompileOptions, DTypePolicy, FitOptions, Sequential};
use convoy::optim::{Optimizer, Schedule};
use convoy::{bail, Result};

use super::{check_output, device_json, JsonNumbers, EXIT_NON_FINITE};

#[derive(Args, Debug)]
pub struct TrainArgs {
    /// resnet20, resnet18_cifar, convnet7 (CIFAR forms, for 32 px), resnet18, resnet34,
    /// resnet50 (torchvision's ImageNet forms), mobilenet_v2 or mlp; `auto` (the default) trains resnet20 on GPUs and
    /// the mlp on a software adapter, which runs about a GFLOP/s.
    #[arg(long, default_value = "auto")]
    pub model: String,
    /// synthetic, cifar10:DIR, cifar100:DIR, folder:DIR or packed:FILE (from convoy pack).
    #[arg(long, default_value = "synthetic")]
    pub data: String,
    /// all, indices like 0,1, software, software:N, an adapter name or PCI bus id.
    #[arg(long, default_value = "all")]
    pub devices: String,
    #[arg(long, default_value_t = 2)]
    pub epochs: usize,
    /// The global batch, split across devices.
    #[arg(long, default_value_t = 128)]
    pub batch_size: usize,
    #[arg(long)]
    pub lr: Option<f32>,
    /// constant (the rate of --lr throughout, as Keras' fit), or cosine (decayed step by step
    /// from --lr to 0 at --epochs, as torchvision's recipes: a run that ends at a high constant
    /// rate ends on whichever side of its noise the last steps left the weights and moving
    /// statistics, and its final validation accuracy can swing by tens of points an epoch).
    #[arg(long, default_value = "constant")]
    pub schedule: String,
    /// sgd (momentum 0.9, Nesterov, L2 5e-4 in the gradient: PyTorch's SGD weight_decay, as
    /// the benchmarks), adam or adamw (decoupled weight decay 0.004, Keras' default).
    #[arg(long, default_value = "sgd")]
    pub optimizer: String,
    /// Keras' label_smoothing of the cross-entropy, in [0, 1): the targets become
    /// (1 - F) * onehot + F / classes. 0 by default. A resumed run keeps its checkpoint's.
    #[arg(long, value_name = "F", default_value_t = 0.0, allow_negative_numbers = true)]
    pub label_smoothing: f32,
    /// Keras' global_clipnorm: before every update the whole gradient (the trainable layers')
    /// is scaled to L2 norm at most F, F > 0. None by default. A resumed run keeps its
    /// checkpoint's.
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    pub clipnorm: Option<f32>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Image side in pixels (folder and packed data are resized to it; from 96 px they train
    /// with random-resized crops and flips, as torchvision's ImageNet recipe); 32 by default,
    /// the packed size for packed:FILE.
    #[arg(long)]
    pub image_size: Option<usize>,
    /// Write the trained model here (safetensors).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Write `checkpoint.safetensors` here after every epoch.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue from `checkpoint.safetensors` in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
    /// float32, or mixed (Keras' mixed_float16: f16 products on tensor cores, f32 weights,
    /// dynamic loss scaling; where an adapter lacks cooperative matrices, the same f16
    /// products on its f32 units, with a notice).
    #[arg(long, default_value = "float32")]
    pub precision: String,
    /// Start from this convoy model (from `convoy import`, or a saved run): its layers, weights,
    /// normalisation and input size (the default --image-size). The classifier head is replaced
    /// by a fresh Dense when the data's class count (or --classes) differs from the model's.
    #[arg(long, value_name = "FILE")]
    pub init: Option<PathBuf>,
    /// With --init: the new head's classes (default: the data's; at least the data's).
    #[arg(long)]
    pub classes: Option<usize>,
    /// With --init: train only the classifier head for the first K of --epochs (the rest
    /// frozen, its BatchNorm layers in inference mode, as Keras' trainable = False), then
    /// every layer.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub freeze_epochs: usize,
    /// Write a Chrome trace (open in Perfetto) of the run.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// Trains; a run whose loss or weights became non-finite stops (TerminateOnNaN), writes no
/// `--save` file (an existing one is kept), keeps the last finite checkpoint (ModelCheckpoint
/// skips a non-finite epoch) and ends with [`EXIT_NON_FINITE`].
/// --lr, or the rate each optimizer is usually started at.
fn base_lr(a: &TrainArgs) -> f32 {
    a.lr.unwrap_or(if a.optimizer == "sgd" { 0.05 } else { 1e-3 })
}

/// The optimizer and compile settings of the command line.
fn compile_options(a: &TrainArgs, devices: &[Arc<convoy::Device>]) -> Result<CompileOptions> {
    let mut optimizer = Optimizer::from_name(&a.optimizer, base_lr(a))?;
    if let Some(c) = a.clipnorm {
        optimizer = optimizer.global_clipnorm(c);
    }
    Ok(CompileOptions::new(optimizer).devices(devices.to_vec()).seed(a.seed).max_batch(a.batch_size).label_smoothing(a.label_smoothing))
}

fn compile(mut m: Sequential, a: &TrainArgs, devices: &[Arc<convoy::Device>], precision: DTypePolicy) -> Result<Sequential> {
    m.set_dtype_policy(precision);
    m.compile(compile_options(a, devices)?)?;
    Ok(m)
}

/// The --init model for `train`'s images and classes: at the data's image size, with a new
/// head when the classes differ, its base frozen for a first phase of --freeze-epochs.
fn fine_tuned(m: Sequential, a: &TrainArgs, train: &dyn Dataset) -> Result<Sequential> {
    let shape = train.image_shape();
    let mut m = if m.input_shape() != shape { m.with_input_shape(&shape)? } else { m };
    let classes = a.classes.unwrap_or(train.num_classes());
    if classes < train.num_classes() {
        bail!(Config, "--classes {classes} is fewer than the {} classes of {}", train.num_classes(), a.data);
    }
    if m.output_shape()? != [classes] {
        m = m.with_new_head(classes, a.seed)?;
    }
    if a.freeze_epochs > 0 {
        freeze_base(&mut m, true)?;
    }
    Ok(m)
}

/// Freezes (or unfreezes) every layer but the last (the classifier head); whether that changed
/// anything.
fn freeze_base(m: &mut Sequential, frozen: bool) -> Result<bool> {
    let n = m.layers().len();
    let mut changed = false;
    for i in 0..n.saturating_sub(1) {
        changed |= m.is_trainable(i) == frozen;
        m.set_trainable(i, !frozen)?;
    }
    Ok(changed)
}

pub fn run(a: TrainArgs) -> Result<ExitCode> {
    let started = Instant::now();
    // Under `mpirun` only rank 0 speaks; the others train silently beside it.
    let world = convoy::distributed::world();
    let root = world.is_none_or(|w| w.rank() == 0);
    let quiet = a.json || !root;
    check_output(&a.save)?;
    check_output(&a.trace)?;
    if a.epochs == 0 || a.batch_size == 0 {
        bail!(Config, "--epochs and --batch-size must be positive (got {} and {})", a.epochs, a.batch_size);
    }
    // Checked before any data or device is opened. 1 would make every target uniform,
    // which no run means (Keras accepts it; the API does too).
    if !(0.0..1.0).contains(&a.label_smoothing) {
        bail!(Config, "--label-smoothing must be in [0, 1), got {}", a.label_smoothing);
    }
    if let Some(c) = a.clipnorm
        && !(c.is_finite() && c > 0.0)
    {
        bail!(Config, "--clipnorm must be a finite number > 0, got {c}");
    }
    if let Some(dir) = &a.checkpoint_dir
        && !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(|e| convoy::Error::io(dir, e))?;
        }
    let checkpoint = a.checkpoint_dir.as_ref().map(|d| d.join("checkpoint.safetensors"));
    if a.resume && checkpoint.is_none() {
        bail!(Config, "--resume needs --checkpoint-dir");
    }
    if a.init.is_none() && (a.classes.is_some() || a.freeze_epochs > 0) {
        bail!(Config, "--classes and --freeze-epochs need --init FILE (the model to start from)");
    }
    if a.freeze_epochs > a.epochs {
        bail!(Config, "--freeze-epochs {} is more than --epochs {} (where the run ends)", a.freeze_epochs, a.epochs);
    }
    if a.init.is_some() && a.model != "auto" {
        bail!(Config, "--init takes the model from its file; leave out --model {}", a.model);
    }
    // The model to start from is read first: its input size is the data's by default, and a
    // bad file fails before any data is decoded.
    let init = a.init.as_ref().map(Sequential::load).transpose()?.map(|(m, _)| m);
    let image_size = a.image_size.or(init.as_ref().map(|m| m.input_shape()[0]));
    let (train, val): (Arc<dyn Dataset>, Arc<dyn Dataset>) = from_spec(&a.data, image_size, a.seed)?;
    let augment = augment_for(&a.data, train.image_shape()[0]);
    let precision = DTypePolicy::from_name(&a.precision)?;
    let schedule = match a.schedule.as_str() {
        "constant" => None,
        "cosine" => Some(Schedule::Cosine { epochs: a.epochs, min_lr: 0.0 }),
        other => bail!(Config, "--schedule {other}: expected constant or cosine"),
    };
    let devices = convoy::device::open(&a.devices)?;
    let model_name = match a.model.as_str() {
        _ if a.init.is_some() => format!("init:{}", a.init.as_ref().unwrap().display()),
        "auto" if devices.iter().all(|d| d.is_software()) => "mlp".to_string(),
        "auto" => "resnet20".to_string(),
        other => other.to_string(),
    };
    let mut model = match &checkpoint {
        Some(path) if a.resume && path.exists() => {
            // Loading warns when the checkpoint's weights are not finite: resuming from
            // diverged weights would only train NaN.
            let m = Sequential::load_compiled_with(path, devices.clone(), a.batch_size, precision)?;
            if !quiet {
                eprintln!("resuming from {} at epoch {}", path.display(), m.compiled_epoch());
            }
            m
        }
        _ if init.is_some() => {
            let m = fine_tuned(init.unwrap(), &a, train.as_ref())?;
            compile(m, &a, &devices, precision)?
        }
        _ => {
            let m = zoo::by_name(&model_name, &train.image_shape(), train.num_classes())?;
            let shape = train.image_shape();
            // stderr, so that --json's stdout stays one document
            if let Some(w) = zoo::cifar_form_warning(&model_name, shape[0].max(shape[1])).filter(|_| root) {
                eprintln!("{w}");
            }
            compile(m, &a, &devices, precision)?
        }
    };
    // --epochs is where the run ends, so a resumed one starts at the epochs trained.
    let initial_epoch = model.compiled_epoch();
    if initial_epoch >= a.epochs {
        let from = checkpoint.as_ref().map_or(String::new(), |c| c.display().to_string());
        bail!(Config, "--resume: {from} has trained {initial_epoch} epochs already and --epochs {} (where the run ends) asks for no more", a.epochs);
    }
    if !quiet {
        eprint!("{}", model.summary()?);
        let names: Vec<String> = devices.iter().map(|d| format!("{} ({})", d.name(), d.backend())).collect();
        match world {
            Some(w) => eprintln!("training on {} ranks; rank 0 on {}", w.size(), names.join(", ")),
            None => eprintln!("training on {}", names.join(", ")),
        }
    }
    // With --freeze-epochs, the head alone up to epoch K, then every layer; a resumed run
    // starts in whichever phase its epoch is.
    let mut phases = Vec::new();
    if a.freeze_epochs > initial_epoch {
        phases.push((a.freeze_epochs, true));
    }
    if a.epochs > a.freeze_epochs.max(initial_epoch) {
        phases.push((a.epochs, false));
    }
    let mut history = None;
    for (end, frozen) in phases {
        let start = model.compiled_epoch();
        if start >= end {
            continue;
        }
        if a.freeze_epochs > 0 && freeze_base(&mut model, frozen)? {
            // Keras too compiles again after a change of `trainable`; the weights stay.
            model.compile(compile_options(&a, &devices)?)?;
        }
        // Every step after a non-finite loss only spreads NaN through the weights.
        let mut callbacks: Vec<Box<dyn convoy::callbacks::Callback>> = vec![Box::new(TerminateOnNaN::new())];
        if let Some(path) = &checkpoint {
            callbacks.push(Box::new(ModelCheckpoint::new(path.to_string_lossy().to_string())));
        }
        // The step counts from epoch 0, so a resumed run (and the second phase) continues the same curve.
        if let Some(schedule) = schedule.clone() {
            callbacks.push(Box::new(LearningRateScheduler::from_schedule(base_lr(&a), schedule)));
        }
        let h = model.fit(
            train.clone(),
            FitOptions {
                epochs: end,
                initial_epoch: start,
                batch_size: a.batch_size,
                seed: a.seed,
                validation_data: Some(val.clone()),
                callbacks,
                augment: Some(augment),
                verbose: 1,
                trace: a.trace.clone(),
                ..Default::default()
            },
        )?;
        let stop = h.history().get("loss").is_some_and(|l| l.last().is_some_and(|v| !v.is_finite())) || model.compiled_epoch() < end;
        history = Some(h);
        if stop {
            break;
        }
    }
    let history = history.ok_or_else(|| convoy::Error::Config("no epoch to train".into()))?;
    let h = history.history();
    let last = |k: &str| h.get(k).and_then(|v| v.last().copied()).unwrap_or(f64::NAN);
    // A finite loss can still come with diverged weights (the last update), so they are
    // checked too before anything is written.
    let bad_weights = model.non_finite_tensors()?;
    let diverged = !last("loss").is_finite() || !last("val_loss").is_finite() || !bad_weights.is_empty();
    if diverged && root {
        let trained = a.save.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "the model".into());
        if let Some(line) = non_finite_warning(std::path::Path::new(&trained), &bad_weights) {
            eprintln!("{line}");
        }
        let kept = match (&a.save, &checkpoint) {
            (Some(s), Some(c)) => format!("; {} not written, {} holds the last finite epoch", s.display(), c.display()),
            (Some(s), None) => format!("; {} not written", s.display()),
            (None, Some(c)) => format!("; {} holds the last finite epoch", c.display()),
            (None, None) => String::new(),
        };
        eprintln!(
            "error: training diverged at epoch {}: train loss {}, val loss {}{kept}; try a lower learning rate",
            model.compiled_epoch(),
            last("loss"),
            last("val_loss")
        );
    } else if let Some(path) = &a.save {
        model.save(path)?;
    }
    let samples = model.replica_samples();
    let devs: Vec<_> = model.devices().iter().zip(samples).map(|(d, s)| device_json(d, s)).collect();
    // The last epoch: the first one also pays for compiling pipelines.
    let ips = last("images_per_sec");
    let mut n = JsonNumbers::default();
    let mut out = json!({
        "model": model_name,
        "data": a.data,
        "epochs": model.compiled_epoch(),
        "train_loss": n.num("train_loss", last("loss")),
        "train_accuracy": n.num("train_accuracy", last("accuracy")),
        "val_loss": n.num("val_loss", last("val_loss")),
        "val_accuracy": n.num("val_accuracy", last("val_accuracy")),
        "images_per_sec": n.num("images_per_sec", ips),
        // Where the last epoch's host time went (fractions summing to 1): a loader that
        // cannot keep up shows as input_wait.
        "input_wait": n.num("input_wait", last("input_wait")),
        "compute": n.num("compute", last("compute")),
        "exchange": n.num("exchange", last("exchange")),
        "seconds": n.num("seconds", started.elapsed().as_secs_f64()),
        "devices": devs,
        "batch_size": a.batch_size,
        "image_size": a.image_size,
        "precision": precision.name(),
        // The rate of the last step, and how it got there.
        "learning_rate": n.num("learning_rate", last("learning_rate")),
        "schedule": a.schedule,
        // Processes under mpirun (1 alone); `devices` are rank 0's.
        "ranks": world.map_or(1, |w| w.size()),
        "commit": env!("CONVOY_COMMIT"),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
    });
    if precision.is_mixed() {
        // The dynamic loss scale at the end, and the steps it skipped for an overflow.
        out["loss_scale"] = n.num("loss_scale", last("loss_scale"));
        out["skipped_steps"] = n.num("skipped_steps", last("skipped_steps"));
    }
    let out = n.finish(out);
    if a.json && root {
        println!("{out}");
    } else if root {
        println!(
            "trained {} epochs: val_accuracy {:.4}, val_loss {:.4}, {:.0} images/s, {:.1} s",
            model.compiled_epoch(),
            last("val_accuracy"),
            last("val_loss"),
            ips,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(if diverged { ExitCode::from(EXIT_NON_FINITE) } else { ExitCode::SUCCESS })
}
