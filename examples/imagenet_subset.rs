//! The CIFAR ResNet-18 (`resnet18_cifar`) on an ImageNet-style image folder (e.g. Imagenette) at 64
//! or 128 pixels.
//!
//! cargo run --release --example imagenet_subset -- DIR [IMAGE_SIZE] [EPOCHS]
//! DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg

use convoy::data::Augment;
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
        eprintln!("usage: imagenet_subset DIR [IMAGE_SIZE] [EPOCHS]");
        std::process::exit(2);
    };
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let epochs: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let (train, val) = convoy::data::from_spec(&format!("folder:{dir}"), Some(size), 0)?;
    println!("{} training images of {} classes at {size}px", train.len(), train.num_classes());
    let mut model = convoy::model::zoo::resnet18_cifar(&train.image_shape(), train.num_classes());
    model.compile(CompileOptions {
        optimizer: Optimizer::sgd(0.1).momentum(0.9).l2(5e-4),
        loss: Loss::SparseCategoricalCrossentropy,
        metrics: vec![Metric::Accuracy, Metric::TopKAccuracy(5)],
        devices: convoy::device::open("all")?,
        seed: 0,
        max_batch: 128,
    })?;
    model.fit(
        train,
        FitOptions {
            epochs,
            batch_size: 128,
            validation_data: Some(val),
            augment: Some(Augment { random_crop_padding: size / 8, horizontal_flip: true, ..Default::default() }),
            ..Default::default()
        },
    )?;
    model.save("imagenet_subset.safetensors".as_ref())?;
    Ok(())
}
