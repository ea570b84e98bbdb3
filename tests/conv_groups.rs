//! Conv2D's `groups` and `dilation_rate` in a model (issue 14, item 3): a ResNeXt-style block
//! (a grouped 3x3 with a stride) and a dilated convolution train on the software adapter,
//! their steps match the f64 reference of `convoy check` on one device and on two replicas,
//! the saved model reloads to the same loss, and the config round-trips with Keras' keys and
//! refuses bad values with errors that name them. Finite differences (without ReLUs) are in
//! tests/gradcheck.rs, the kernels against f64 in tests/kernels/conv_groups.rs.

use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, FitOptions, Sequential};
use convoy::optim::Optimizer;
use serde_json::json;

/// Two replicas: `software:2`, or the adapter `CONVOY_TEST_DEVICE` names twice (`0,0`).
fn two_replicas() -> Vec<std::sync::Arc<convoy::Device>> {
    match std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()) {
        Some(sel) => convoy::device::open(&format!("{sel},{sel}")).unwrap(),
        None => convoy::device::open("software:2").unwrap(),
    }
}

/// The software adapter, or the adapter `CONVOY_TEST_DEVICE` names (the GPU machine's runs).
fn devices() -> Vec<Arc<convoy::Device>> {
    convoy::device::open(std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()).as_deref().unwrap_or("software")).unwrap()
}

/// A stem, ResNeXt's grouped 3x3 (4 groups of 4 channels, stride 2) between BatchNorms and
/// ReLUs, a dilated 3x3 in 2 groups with a bias, global pooling and a classifier.
fn grouped_block() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(16, 3).padding(Padding::Same).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Conv2D::new(16, 3).strides(2).padding(Padding::Same).groups(4).use_bias(false));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Conv2D::new(8, 3).padding(Padding::Same).dilation_rate(2).groups(2));
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(10));
    m
}

#[test]
fn a_grouped_block_trains_and_reloads_to_the_same_loss() {
    let (train, val) = synthetic_split(96, 32, 8, 5).unwrap();
    let (train, val): (Arc<dyn Dataset>, Arc<dyn Dataset>) = (Arc::new(train), Arc::new(val));
    let mut m = grouped_block();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices()).seed(4).max_batch(32)).unwrap();
    // Keras' counts: 3 * 3 * 4 * 16 = 576 for the grouped kernel (no bias), 3 * 3 * 8 * 8 + 8
    // = 584 for the dilated one
    let summary = m.summary().unwrap();
    let counts: Vec<&str> = summary.lines().filter(|l| l.contains("conv2d")).filter_map(|l| l.split_whitespace().last()).collect();
    assert_eq!(counts, ["432", "576", "584"], "{summary}");
    let before = m.evaluate(train.clone(), 32).unwrap()["loss"];
    let h = m.fit(train.clone(), FitOptions { epochs: 4, batch_size: 32, verbose: 0, ..Default::default() }).unwrap();
    let losses = h.history()["loss"].clone();
    let after = m.evaluate(train.clone(), 32).unwrap()["loss"];
    println!("loss before {before:.4}, per epoch {losses:?}, after {after:.4}");
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(after < before, "12 steps of SGD did not lower the training loss: {before} -> {after}");

    let val_loss = m.evaluate(val.clone(), 16).unwrap()["loss"];
    let path = std::env::temp_dir().join(format!("convoy-conv-groups-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(), 32).unwrap();
    let _ = std::fs::remove_file(&path);
    for i in [3, 6] {
        assert_eq!(loaded.layers()[i].config(), m.layers()[i].config(), "layer {i}'s config survives the file");
    }
    assert_eq!(loaded.evaluate(val, 16).unwrap()["loss"], val_loss, "the reloaded model evaluates differently");
}

#[test]
fn config_round_trips_with_keras_keys_and_bad_values_are_named() {
    let layer = Conv2D::new(12, 3).padding(Padding::Same).dilation_rate((2, 3)).groups(3).use_bias(false);
    let cfg = layer.config();
    assert_eq!((cfg["dilation_rate"].clone(), cfg["groups"].clone()), (json!([2, 3]), json!(3)), "Keras' keys: {cfg}");
    let saved = json!({ "class_name": layer.class_name(), "config": cfg });
    let loaded = layer_from_config(&saved).unwrap();
    assert_eq!(loaded.config(), layer.config());
    assert_eq!(loaded.output_shape(&[9, 10, 6]).unwrap(), vec![9, 10, 12]);
    let shapes: Vec<Vec<usize>> = layer.params(&[9, 10, 6]).iter().map(|p| p.shape.clone()).collect();
    assert_eq!(shapes, vec![vec![3, 3, 2, 12]], "Keras' grouped kernel [kh, kw, in / groups, filters], no bias");
    assert_eq!(layer.flops(&[9, 10, 6]), 2 * 90 * 12 * 9 * 2);
    // valid: the dilated kernel spans 5 x 7 pixels
    assert_eq!(Conv2D::new(4, 3).dilation_rate((2, 3)).output_shape(&[9, 10, 6]).unwrap(), vec![5, 4, 4]);

    // A file from before groups and dilation_rate: Keras' defaults.
    let old = json!({ "class_name": "Conv2D", "config": { "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "use_bias": true } });
    let l = layer_from_config(&old).unwrap();
    assert_eq!((l.config()["dilation_rate"].clone(), l.config()["groups"].clone()), (json!([1, 1]), json!(1)));

    let with = |key: &str, value: serde_json::Value| {
        let mut v = old.clone();
        v["config"][key] = value;
        layer_from_config(&v).and_then(|l| l.output_shape(&[8, 8, 6])).unwrap_err().to_string()
    };
    let e = with("groups", json!(4));
    assert!(e.contains("groups 4") && e.contains("(6)") && e.contains("(4)"), "groups must divide 6 channels and 4 filters: {e}");
    let e = with("groups", json!(0));
    assert!(e.contains("groups 0"), "{e}");
    let e = with("groups", json!(1u64 << 40));
    assert!(e.contains("groups") && e.contains("1099511627776"), "{e}");
    let e = with("dilation_rate", json!([1, 1 << 20]));
    assert!(e.contains("dilation_rate") && e.contains("1048576"), "{e}");
    let e = with("dilation_rate", json!([0, 1]));
    assert!(e.contains("(0, 1)"), "{e}");
    let mut strided = old.clone();
    strided["config"]["strides"] = json!([2, 2]);
    strided["config"]["dilation_rate"] = json!([2, 2]);
    let e = layer_from_config(&strided).unwrap().output_shape(&[8, 8, 6]).unwrap_err().to_string();
    assert!(e.contains("stride != 1 is incompatible with any dilation_rate != 1"), "as Keras: {e}");
    let e = Conv2D::new(4, 3).dilation_rate(4).output_shape(&[8, 9, 6]).unwrap_err().to_string();
    assert!(e.contains("height 8") && e.contains("extent 9"), "{e}");

    // Building a model names the layer whose groups do not fit.
    let mut m = Sequential::new(&[8, 8, 6]);
    m.add(Conv2D::new(8, 3).groups(4));
    let e = m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices())).unwrap_err().to_string();
    assert!(e.contains("groups 4") && e.contains("(6)"), "{e}");
}

/// The block's steps against the f64 reference of `convoy check` (which takes the device's
/// ReLU decisions), on one device and on two replicas with uneven shares (each normalising
/// with its own share's statistics, as the reference does). Two steps each, so the second
/// starts from weights the first moved.
#[test]
fn the_block_matches_the_f64_reference_on_one_device_and_two_replicas() {
    let (train, _) = synthetic_split(32, 8, 8, 5).unwrap();
    let sample = train.sample_bytes();
    let batches: Vec<(Vec<u8>, Vec<u32>)> = (0..2)
        .map(|k| {
            let mut images = vec![0u8; 8 * sample];
            let labels = images.chunks_mut(sample).enumerate().map(|(i, x)| train.load(k * 8 + i, x).unwrap()).collect();
            (images, labels)
        })
        .collect();
    let mut m = grouped_block();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(devices()).seed(6).max_batch(16)).unwrap();
    let r = convoy::check::check(&mut m, &batches).unwrap();
    println!("one device: grads {:.1e} at {}, loss {:.1e}, update {:.1e}, ties {}", r.grad.error, r.grad.at, r.loss.error, r.update.error, r.ties);
    assert!(r.ok, "{r:#?}");

    let mut m = grouped_block();
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).devices(two_replicas()).seed(6).max_batch(16)).unwrap();
    m.set_device_speeds(&[3.0, 1.0]).unwrap();
    assert_eq!(m.device_shares(8), vec![6, 2]);
    let r = convoy::check::check(&mut m, &batches).unwrap();
    println!("two replicas: grads {:.1e} at {}, loss {:.1e}, update {:.1e}, ties {}", r.grad.error, r.grad.at, r.loss.error, r.update.error, r.ties);
    assert!(r.ok, "{r:#?}");
    let each = m.replica_weights().unwrap();
    assert_eq!(each[0].0, each[1].0, "the replicas hold the same weights after the steps");
}

/// Keras' `Conv2D(4, (3, 1), strides=(1, 2), groups=2, dilation_rate=1)`: oblong kernels and
/// strides through the builders, checked with the custom-layer harness (config round trip,
/// weight counts, one step) and finite differences of the layer alone.
#[test]
fn oblong_kernels_and_strides_round_trip_and_match_finite_differences() {
    let layer = Conv2D::new(4, (3, 1)).strides((1, 2)).groups(2).padding(Padding::Same);
    assert_eq!((layer.kernel_size, layer.strides), ((3, 1), (1, 2)));
    assert_eq!(layer.output_shape(&[5, 7, 2]).unwrap(), vec![5, 4, 4]);
    let config = layer.config();
    assert_eq!((config["kernel_size"].clone(), config["strides"].clone()), (json!([3, 1]), json!([1, 2])));
    let device = devices().remove(0);
    let report = convoy::testing::layer_roundtrip(&device, &layer, &[5, 7, 2]).unwrap();
    assert_eq!(report.params, 3 * 1 * 1 * 4 + 4);
    let grads = convoy::testing::gradcheck(&device, &layer, &[5, 7, 2]).unwrap();
    grads.check().unwrap_or_else(|e| panic!("{e}\n{grads}"));
}
