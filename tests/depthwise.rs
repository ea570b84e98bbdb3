//! DepthwiseConv2D in a model (issue 14, item 3): a MobileNet-style block trains on the
//! software adapter, its steps match the f64 reference of `convoy check`, its saved model
//! reloads to the same loss, and its config round-trips and refuses bad values with errors
//! that name them. Finite differences (without ReLUs) are in tests/gradcheck.rs, the
//! kernels against f64 in tests/kernels/depthwise.rs.

use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, FitOptions, Sequential};
use convoy::optim::Optimizer;
use serde_json::json;

/// The software adapter, or the adapter `CONVOY_TEST_DEVICE` names (the GPU machine's runs).
fn devices() -> Vec<Arc<convoy::Device>> {
    convoy::device::open(std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()).as_deref().unwrap_or("software")).unwrap()
}

/// Conv2D, BatchNormalization, ReLU, then MobileNetV2's depthwise step (3x3, stride 2, same
/// padding, no bias) with BatchNormalization and ReLU, global pooling and a classifier.
fn mobile_block() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(DepthwiseConv2D::new(3).strides(2).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(10));
    m
}

#[test]
fn a_depthwise_block_trains_and_reloads_to_the_same_loss() {
    let (train, val) = synthetic_split(96, 32, 8, 5).unwrap();
    let (train, val): (Arc<dyn Dataset>, Arc<dyn Dataset>) = (Arc::new(train), Arc::new(val));
    let mut m = mobile_block();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices()).seed(4).max_batch(32))
        .unwrap();
    // Keras' count: a 3x3 kernel per channel, no bias
    let summary = m.summary().unwrap();
    assert!(summary.contains("depthwise_conv2d") && summary.contains("72"), "{summary}");
    let before = m.evaluate(train.clone(), 32).unwrap()["loss"];
    let h = m.fit(train.clone(), FitOptions { epochs: 4, batch_size: 32, verbose: 0, ..Default::default() }).unwrap();
    let losses = h.history()["loss"].clone();
    let after = m.evaluate(train.clone(), 32).unwrap()["loss"];
    println!("loss before {before:.4}, per epoch {losses:?}, after {after:.4}");
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(after < before, "12 steps of SGD did not lower the training loss: {before} -> {after}");

    let val_loss = m.evaluate(val.clone(), 16).unwrap()["loss"];
    let path = std::env::temp_dir().join(format!("convoy-depthwise-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(), 32).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.layers()[3].config(), m.layers()[3].config(), "the layer's config survives the file");
    assert_eq!(loaded.evaluate(val, 16).unwrap()["loss"], val_loss, "the reloaded model evaluates differently");
}

#[test]
fn config_round_trips_and_bad_values_are_named() {
    let layer = DepthwiseConv2D::new((2, 3))
        .strides((1, 2))
        .padding(Padding::Explicit(1, 0))
        .depth_multiplier(2)
        .dilation_rate((2, 1))
        .use_bias(false)
        .depthwise_initializer("he_normal");
    let saved = json!({ "class_name": layer.class_name(), "config": layer.config() });
    let loaded = layer_from_config(&saved).unwrap();
    assert_eq!(loaded.config(), layer.config());
    assert_eq!(loaded.output_shape(&[9, 9, 3]).unwrap(), layer.output_shape(&[9, 9, 3]).unwrap());
    assert_eq!(layer.output_shape(&[9, 9, 3]).unwrap(), vec![9, 4, 6], "(9 + 2 - 3) / 1 + 1 rows, (9 - 3) / 2 + 1 columns, 3 * 2 channels");
    assert_eq!(layer.flops(&[9, 9, 3]), 2 * 9 * 4 * 6 * 6);
    let shapes: Vec<Vec<usize>> = layer.params(&[9, 9, 3]).iter().map(|p| p.shape.clone()).collect();
    assert_eq!(shapes, vec![vec![2, 3, 3, 2]], "Keras' kernel layout, no bias");
    assert_eq!(DepthwiseConv2D::new(3).params(&[5, 5, 4]).iter().map(|p| p.shape.clone()).collect::<Vec<_>>(), vec![vec![3, 3, 4, 1], vec![4]]);

    // Keras' defaults where a field is missing
    let minimal = json!({ "class_name": "DepthwiseConv2D", "config": { "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "depth_multiplier": 1 } });
    let l = layer_from_config(&minimal).unwrap();
    assert_eq!(l.config()["dilation_rate"], json!([1, 1]));
    assert_eq!(l.config()["use_bias"], json!(true));
    assert_eq!(l.config()["depthwise_initializer"], json!("glorot_uniform"));

    let with = |key: &str, value: serde_json::Value| {
        let mut v = minimal.clone();
        v["config"][key] = value;
        layer_from_config(&v).and_then(|l| l.output_shape(&[8, 8, 3])).unwrap_err().to_string()
    };
    let e = with("depth_multiplier", json!(1u64 << 40));
    assert!(e.contains("depth_multiplier") && e.contains("1099511627776"), "{e}");
    let e = with("depth_multiplier", json!(-1));
    assert!(e.contains("depth_multiplier"), "{e}");
    let e = with("kernel_size", json!([3, 1 << 20]));
    assert!(e.contains("kernel_size") && e.contains("1048576"), "{e}");
    let e = with("dilation_rate", json!([1, 1 << 20]));
    assert!(e.contains("dilation_rate") && e.contains("1048576"), "{e}");
    let e = with("dilation_rate", json!([0, 1]));
    assert!(e.contains("(0, 1)"), "a zero dilation is refused when the layer is built: {e}");
    let e = with("depthwise_initializer", json!("orthogonal"));
    assert!(e.contains("orthogonal"), "{e}");
    let e = with("padding", json!("full"));
    assert!(e.contains("full"), "{e}");
    let e = with("strides", json!([1]));
    assert!(e.contains("strides"), "{e}");
    let mut big = minimal.clone();
    big["config"]["kernel_size"] = json!([9, 9]);
    big["config"]["padding"] = json!("valid");
    let e = layer_from_config(&big).unwrap().output_shape(&[8, 8, 3]).unwrap_err().to_string();
    assert!(e.contains("height 8") && e.contains("extent 9"), "a kernel over an 8 px image with valid padding: {e}");

    let e = DepthwiseConv2D::new(3).output_shape(&[8, 8]).unwrap_err().to_string();
    assert!(e.contains("[8, 8]"), "{e}");
    let e = DepthwiseConv2D::new(3).depthwise_initializer("zeros").output_shape(&[8, 8, 3]).unwrap_err().to_string();
    assert!(e.contains("zeros"), "{e}");
}

/// The block with its ReLUs, where finite differences cross kinks (tests/gradcheck.rs): the
/// device's step against the f64 reference of `convoy check`, which takes the device's ReLU
/// decisions. Two steps, so the second starts from weights the first moved.
#[test]
fn the_block_matches_the_f64_reference() {
    let mut m = mobile_block();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices()).seed(6).max_batch(16))
        .unwrap();
    let (train, _) = synthetic_split(32, 8, 8, 5).unwrap();
    let sample = train.sample_bytes();
    let batches: Vec<(Vec<u8>, Vec<u32>)> = (0..2)
        .map(|k| {
            let mut images = vec![0u8; 8 * sample];
            let labels = images.chunks_mut(sample).enumerate().map(|(i, x)| train.load(k * 8 + i, x).unwrap()).collect();
            (images, labels)
        })
        .collect();
    let r = convoy::check::check(&mut m, &batches).unwrap();
    println!("grads {:.1e} at {}, loss {:.1e}, update {:.1e}, ties {}", r.grad.error, r.grad.at, r.loss.error, r.update.error, r.ties);
    assert!(r.ok, "{r:#?}");
}
