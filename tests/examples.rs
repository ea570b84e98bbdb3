//! The examples' own logic, run through the library on tiny data: each example file is
//! included as a module, so the test calls the function its `main` calls (running the
//! example binary itself would mean a release build of it per test run).

mod common;
use common::tmp;

#[allow(dead_code)]
#[path = "../examples/imagenet_subset.rs"]
mod imagenet_subset;

use imagenet_subset::{parse_args, train, Config};

#[allow(dead_code)]
#[path = "../examples/custom_layer.rs"]
mod custom_layer;

/// The custom-layer example end to end: gradient checks within their bounds, the round trip,
/// training, and a saved model that loads (through the registry) and evaluates identically.
#[test]
fn custom_layer_example_checks_trains_saves_and_reloads() {
    custom_layer::run("software").unwrap();
}

/// `DIR/{train,val}/{dark,light}/*.jpg`: two classes of 40x30 JPEGs, textured so that they
/// are not flat colour.
fn jpeg_folder(dir: &std::path::Path) {
    for (split, count) in [("train", 4), ("val", 1)] {
        for (class, rgb) in [("dark", [40u8, 30, 50]), ("light", [210, 200, 190])] {
            let class_dir = dir.join(split).join(class);
            std::fs::create_dir_all(&class_dir).unwrap();
            for k in 0..count {
                let img = image::RgbImage::from_fn(40 + k, 30, |x, y| image::Rgb(rgb.map(|v| v.wrapping_add(((x * 3 + y * 5 + k) % 17) as u8))));
                img.save(class_dir.join(format!("{k}.jpg"))).unwrap();
            }
        }
    }
}

#[test]
fn imagenet_subset_trains_checkpoints_and_resumes_at_the_next_epoch() {
    let dir = tmp("imagenet_subset");
    jpeg_folder(&dir.join("data"));
    let mut cfg = Config {
        data: format!("folder:{}", dir.join("data").display()),
        model: "resnet18".into(),
        image_size: 32,
        epochs: 1,
        batch_size: 8,
        devices: "software".into(),
        checkpoint_dir: dir.join("ckpt"),
        resume: false,
        init: None,
        verbose: 0,
    };
    let first = train(&cfg).unwrap();
    assert_eq!((first.initial_epoch, first.history.epochs()), (0, &[0][..]));
    assert!(dir.join("ckpt/checkpoint.safetensors").exists());

    cfg.epochs = 2;
    cfg.resume = true;
    let resumed = train(&cfg).unwrap();
    // Epoch 2 (index 1) is the only one the resumed run trains.
    assert_eq!((resumed.initial_epoch, resumed.history.epochs()), (1, &[1][..]));
    // With two classes the right one is always among the top five.
    assert_eq!(resumed.history.get("val_top_k_accuracy"), Some(&[1.0][..]), "{:?}", resumed.history.history());
    assert_eq!(resumed.history.get("top_k_accuracy"), Some(&[1.0][..]));
    assert!(resumed.history.get("val_accuracy").is_some_and(|v| (0.0..=1.0).contains(&v[0])));
    // 86 MB of JPEGs and checkpoints per run otherwise stay in the temporary directory.
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn imagenet_subset_arguments() {
    let args = |s: &str| parse_args(s.split_whitespace().map(String::from));
    let cfg = args("data/imagenette").unwrap();
    assert_eq!((cfg.data.as_str(), cfg.model.as_str(), cfg.image_size, cfg.resume), ("folder:data/imagenette", "resnet50", 224, false));
    let cfg = args("packed:x.pack --model resnet18 --image-size 160 --epochs 3 --batch-size 64 --resume").unwrap();
    assert_eq!((cfg.data.as_str(), cfg.model.as_str(), cfg.image_size, cfg.epochs, cfg.batch_size, cfg.resume), ("packed:x.pack", "resnet18", 160, 3, 64, true));
    assert_eq!(args("d --init imported.safetensors").unwrap().init, Some("imported.safetensors".into()));
    for (line, needle) in [("d --image-size 96", "160..224"), ("d --model vgg", "resnet50 or resnet18"), ("d --epochs", "needs a value"), ("--epochs 0 d", "positive"), ("", "no data"), ("d --lr 1", "unknown option --lr")] {
        let err = args(line).err().unwrap_or_else(|| panic!("'{line}' was accepted")).to_string();
        assert!(err.contains(needle) && err.contains("usage:") && !err.contains('\n'), "'{line}': {err}");
    }
}
