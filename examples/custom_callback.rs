//! Writing your own callback: stop as soon as validation accuracy reaches a target, and
//! print the step-time breakdown convoy measures for each epoch.
//!
//! cargo run --release --example custom_callback

use convoy::prelude::*;

struct StopAtAccuracy {
    target: f64,
}

impl Callback for StopAtAccuracy {
    fn on_epoch_end(&mut self, epoch: usize, logs: &Logs, ctx: &mut Context) -> convoy::Result<()> {
        let acc = logs.get("val_accuracy").copied().unwrap_or(0.0);
        println!(
            "epoch {epoch}: val_accuracy {acc:.3}; step time: {:.0}% waiting for input, {:.0}% compute, {:.0}% gradient exchange",
            100.0 * logs.get("input_wait").unwrap_or(&0.0),
            100.0 * logs.get("compute").unwrap_or(&0.0),
            100.0 * logs.get("exchange").unwrap_or(&0.0)
        );
        if acc >= self.target {
            println!("reached {:.0}% validation accuracy: stopping", 100.0 * self.target);
            ctx.stop_training = true;
        }
        Ok(())
    }
}

fn main() -> convoy::Result<()> {
    let (train, val) = convoy::data::from_spec("synthetic", None, 1)?;
    let mut model = convoy::model::zoo::mlp(&train.image_shape(), train.num_classes());
    model.compile(CompileOptions::new(Optimizer::adam(1e-3)).max_batch(128))?;
    model.fit(
        train,
        FitOptions { epochs: 20, batch_size: 128, validation_data: Some(val), callbacks: vec![Box::new(StopAtAccuracy { target: 0.9 })], ..Default::default() },
    )?;
    Ok(())
}
