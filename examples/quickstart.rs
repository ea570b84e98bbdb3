//! Train a small CNN on the built-in synthetic task: no download needed.
//!
//! cargo run --release --example quickstart [-- DEVICES]

use convoy::prelude::*;

fn main() -> convoy::Result<()> {
    let devices = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let (train, val) = convoy::data::from_spec("synthetic", None, 0)?;
    let mut model = convoy::model::zoo::convnet7(&train.image_shape(), train.num_classes());
    print!("{}", model.summary()?);
    model.compile(CompileOptions {
        optimizer: Optimizer::sgd(0.05).momentum(0.9).nesterov(true),
        loss: Loss::SparseCategoricalCrossentropy,
        metrics: vec![Metric::Accuracy],
        devices: convoy::device::open(&devices)?,
        seed: 0,
        max_batch: 128,
    })?;
    let history = model.fit(train, FitOptions { epochs: 3, batch_size: 128, validation_data: Some(val), ..Default::default() })?;
    let acc = history.history().get("val_accuracy").and_then(|v| v.last().copied()).unwrap_or(0.0);
    println!("validation accuracy after {} epochs: {acc:.3}", history.epochs().len());
    Ok(())
}
