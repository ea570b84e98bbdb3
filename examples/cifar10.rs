//! ResNet-20 on CIFAR-10 with data augmentation, one epoch of linear warm-up and a cosine
//! decay (both step by step), and checkpoints.
//!
//! cargo run --release --example cifar10 -- path/to/cifar-10-batches-bin [EPOCHS]
//! (get the data from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz)

use convoy::callbacks::{CsvLogger, LearningRateScheduler, ModelCheckpoint};
use convoy::data::Augment;
use convoy::optim::Schedule;
use convoy::prelude::*;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> convoy::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: cifar10 DIR [EPOCHS]\nDIR holds data_batch_1.bin .. test_batch.bin from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz");
        std::process::exit(2);
    };
    let epochs: usize = args.next().and_then(|e| e.parse().ok()).unwrap_or(30);
    let (train, val) = convoy::data::from_spec(&format!("cifar10:{dir}"), None, 0)?;
    let mut model = convoy::model::zoo::resnet20(&train.image_shape(), 10);
    let base = 0.1;
    // L2 in the gradient, as torch.optim.SGD(weight_decay=5e-4) in the PyTorch reference,
    // so the figures compare (Keras 3's weight_decay is the decoupled form).
    model.compile(CompileOptions::new(Optimizer::sgd(base).momentum(0.9).nesterov(true).l2(5e-4)).max_batch(256))?;
    let schedule = Schedule::Warmup { warmup_epochs: 1.0, then: Box::new(Schedule::Cosine { epochs, min_lr: 0.0 }) };
    let callbacks: Vec<Box<dyn Callback>> = vec![
        Box::new(LearningRateScheduler::from_schedule(base, schedule)),
        Box::new(ModelCheckpoint::new("resnet20-best.safetensors").monitor("val_accuracy").save_best_only(true)),
        Box::new(CsvLogger::new("resnet20.csv")),
    ];
    let history = model.fit(
        train,
        FitOptions {
            epochs,
            batch_size: 256,
            validation_data: Some(val),
            callbacks,
            augment: Some(Augment::cifar()),
            ..Default::default()
        },
    )?;
    println!("best val_accuracy {:.4}", history.history()["val_accuracy"].iter().cloned().fold(0.0, f64::max));
    Ok(())
}
