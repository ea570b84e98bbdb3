//! The activation and simple layers of issue 14 (ReLU's max_value and negative_slope,
//! LeakyReLU, Activation, Softmax, GlobalMaxPooling2D, Rescaling, Normalization) inside a
//! model: training, saving and reloading, their configs, the ReLU fusion rule and the
//! summary. Software adapter; the kernels themselves are held to f64 in
//! tests/kernels/activation.rs.

use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, FitOptions, Sequential};
use convoy::optim::Optimizer;
use serde_json::json;

/// The software adapter, or the adapter `CONVOY_TEST_DEVICE` names (the GPU machine's runs).
fn devices() -> Vec<std::sync::Arc<convoy::Device>> {
    convoy::device::open(std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()).as_deref().unwrap_or("software")).unwrap()
}

fn compile(m: &mut Sequential) {
    m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices()).seed(7).max_batch(16)).unwrap();
}

/// Every new layer once, and a plain ReLU after BatchNorm (fused) beside a ReLU6 after
/// BatchNorm (not fused), on 8x8 images of 10 classes.
fn model() -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Normalization::new(vec![0.1, -0.2, 0.3], vec![0.5, 1.5, 2.0]));
    m.add(Rescaling::new(2.0, -0.5));
    m.add(Conv2D::new(8, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(Conv2D::new(8, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new().max_value(6.0));
    m.add(Conv2D::new(8, 3).padding(Padding::Same));
    m.add(LeakyReLU::new());
    m.add(Activation::new("gelu").unwrap());
    m.add(GlobalMaxPooling2D::new());
    m.add(Dense::new(16));
    m.add(Activation::new("swish").unwrap());
    m.add(Activation::of(ActivationFn::Gelu { approximate: true }));
    m.add(Activation::new("tanh").unwrap());
    m.add(Dense::new(12));
    m.add(Softmax::new());
    m.add(Activation::new("sigmoid").unwrap());
    m.add(Activation::new("relu6").unwrap());
    m.add(Activation::new("linear").unwrap());
    m.add(Dense::new(10));
    m
}

fn data(train: usize, val: usize) -> (Arc<dyn Dataset>, Arc<dyn Dataset>) {
    let (t, v) = synthetic_split(train, val, 8, 5).unwrap();
    (Arc::new(t), Arc::new(v))
}

#[test]
fn a_model_of_the_new_layers_trains_saves_reloads_and_evaluates_to_the_same_loss() {
    let (train, val) = data(64, 16);
    let mut m = model();
    compile(&mut m);
    let before = m.get_weights().unwrap().0;
    let initial = m.evaluate(val.clone(), 16).unwrap()["loss"];
    let history = m.fit(train, FitOptions { epochs: 2, batch_size: 16, verbose: 0, ..Default::default() }).unwrap();
    let losses = history.get("loss").unwrap();
    assert!(losses.iter().all(|l| l.is_finite()), "training losses {losses:?}");
    assert_ne!(m.get_weights().unwrap().0, before, "eight steps left the weights as they were");
    let trained = m.evaluate(val.clone(), 16).unwrap()["loss"];
    println!("validation loss {initial} before, {trained} after 2 epochs; training losses {losses:?}");
    assert!(trained.is_finite());

    let path = std::env::temp_dir().join(format!("convoy-layers-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(), 16).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.architecture(), m.architecture(), "the reloaded architecture differs");
    assert_eq!(loaded.evaluate(val, 16).unwrap()["loss"], trained, "the reloaded model evaluates to another loss");
}

#[test]
fn only_a_plain_relu_is_fused_into_the_batch_norm_before_it() {
    let mut m = model();
    compile(&mut m);
    let def = m.definition();
    let fused: Vec<usize> = def.fused.iter().enumerate().filter(|(_, f)| **f).map(|(i, _)| i).collect();
    assert_eq!(fused, [4], "layers fused: {fused:?} (4 is the plain ReLU after a BatchNorm; 7, a ReLU6 after one, must run its own kernel)");
    assert!(ReLU::new().is_plain_relu() && !ReLU::new().max_value(6.0).is_plain_relu() && !ReLU::new().negative_slope(0.1).is_plain_relu());
    assert!(!LeakyReLU::new().is_plain_relu() && !Activation::new("relu").unwrap().is_plain_relu());
}

/// The same rule by behaviour, at the top level and inside a residual chain: a ReLU capped
/// at 0 after a BatchNorm outputs zeros, so both models' logits are all 0 and their class
/// probabilities exactly 1/4; a BatchNorm that applied a plain ReLU in its place would pass
/// positive values.
#[test]
fn a_capped_relu_after_batch_norm_is_applied_by_its_own_kernel() {
    let capped = || ReLU::new().max_value(0.0);
    let mut top = Sequential::new(&[2, 2, 3]);
    top.add(Flatten::new());
    top.add(Dense::new(4));
    top.add(BatchNormalization::new());
    top.add(capped());
    let mut nested = Sequential::new(&[2, 2, 3]);
    nested.add(Flatten::new());
    nested.add(Dense::new(4));
    let chain = || -> Vec<Box<dyn Layer>> { vec![Box::new(BatchNormalization::new()), Box::new(capped())] };
    nested.add(Residual::new(chain(), chain()));
    let images: Vec<u8> = (0..8 * 12).map(|i| (i * 37 % 256) as u8).collect();
    for (name, mut m) in [("top level", top), ("residual chain", nested)] {
        compile(&mut m);
        let p = m.predict_images(&images, 8).unwrap();
        assert!(p.iter().flatten().all(|&v| v == 0.25), "{name}: probabilities {p:?}");
    }
}

/// Each layer's config rebuilds the same layer; files from before `max_value` existed
/// (`{}`) load as a plain ReLU.
#[test]
fn configs_round_trip_and_old_relu_files_load_as_plain() {
    let layers: Vec<Box<dyn Layer>> = vec![
        Box::new(ReLU::new()),
        Box::new(ReLU::new().max_value(6.0)),
        Box::new(ReLU::new().negative_slope(0.2).max_value(2.5)),
        Box::new(LeakyReLU::new()),
        Box::new(LeakyReLU::new().negative_slope(0.01)),
        Box::new(Softmax::new()),
        Box::new(GlobalMaxPooling2D::new()),
        Box::new(GlobalMaxPooling2D::new().keepdims(true)),
        Box::new(Rescaling::new(1.0 / 255.0, 0.0)),
        Box::new(Rescaling::per_channel(vec![1.0, 2.0, 3.0], vec![0.5])),
        Box::new(Normalization::new(vec![0.5, 0.4, 0.3], vec![0.1, 0.2, 0.0])),
        Box::new(Normalization::new(vec![0.5], vec![4.0]).invert(true)),
    ];
    let names = ["linear", "relu", "relu6", "sigmoid", "tanh", "silu", "swish", "gelu", "softmax"];
    let activations = names.iter().map(|n| Box::new(Activation::new(n).unwrap()) as Box<dyn Layer>);
    let approximate: Box<dyn Layer> = Box::new(Activation::of(ActivationFn::Gelu { approximate: true }));
    for layer in layers.into_iter().chain(activations).chain([approximate]) {
        let saved = json!({ "class_name": layer.class_name(), "config": layer.config() });
        let loaded = layer_from_config(&saved).unwrap_or_else(|e| panic!("{saved}: {e}"));
        assert_eq!((loaded.class_name(), loaded.config()), (layer.class_name(), layer.config()), "{saved}");
        assert_eq!(loaded.is_plain_relu(), layer.is_plain_relu(), "{saved}");
    }
    assert_eq!(Activation::new("swish").unwrap().config(), json!({ "activation": "silu" }), "swish is saved under Keras 3's name");
    let old = layer_from_config(&json!({ "class_name": "ReLU", "config": {} })).unwrap();
    assert!(old.is_plain_relu(), "an old `{{}}` ReLU must load plain (and fuse): {}", old.config());
    // Keras' own config of ReLU6, and Keras 2's LeakyReLU `alpha`.
    let keras = layer_from_config(&json!({ "class_name": "ReLU", "config": { "max_value": 6.0, "negative_slope": 0.0, "threshold": 0.0, "name": "re_lu" } })).unwrap();
    assert_eq!(keras.config()["max_value"], json!(6.0));
    let keras2 = layer_from_config(&json!({ "class_name": "LeakyReLU", "config": { "alpha": 0.1 } })).unwrap();
    assert_eq!(keras2.config()["negative_slope"], json!(0.1f32));
}

/// Every number read from a file is checked, and the error names the layer, the field and
/// the value received.
#[test]
fn bad_configs_are_named_errors() {
    let cases = [
        (json!({ "class_name": "Activation", "config": { "activation": "gelux" } }), "\"gelux\""),
        (json!({ "class_name": "Activation", "config": { "activation": 3 } }), "activation"),
        (json!({ "class_name": "Activation", "config": { "activation": "tanh", "approximate": true } }), "gelu only"),
        (json!({ "class_name": "Activation", "config": { "activation": "gelu", "approximate": "yes" } }), "\"yes\""),
        (json!({ "class_name": "ReLU", "config": { "max_value": -1.0 } }), "-1"),
        (json!({ "class_name": "ReLU", "config": { "max_value": "6" } }), "\"6\""),
        (json!({ "class_name": "ReLU", "config": { "negative_slope": -0.5 } }), "-0.5"),
        (json!({ "class_name": "ReLU", "config": { "negative_slope": 1e300 } }), "1e+300"),
        (json!({ "class_name": "ReLU", "config": { "threshold": 0.5 } }), "threshold"),
        (json!({ "class_name": "LeakyReLU", "config": { "negative_slope": -2 } }), "-2"),
        (json!({ "class_name": "Softmax", "config": { "axis": 1 } }), "axis"),
        (json!({ "class_name": "GlobalMaxPooling2D", "config": { "keepdims": 1 } }), "keepdims"),
        (json!({ "class_name": "GlobalMaxPooling2D", "config": { "data_format": "channels_first" } }), "channels_first"),
        (json!({ "class_name": "Rescaling", "config": { "scale": [1.0, null] } }), "null"),
        (json!({ "class_name": "Rescaling", "config": { "offset": 1.0 } }), "scale"),
        (json!({ "class_name": "Rescaling", "config": { "scale": [] } }), "empty"),
        (json!({ "class_name": "Normalization", "config": { "mean": [0.0], "variance": [-1.0] } }), "-1"),
        (json!({ "class_name": "Normalization", "config": { "mean": [0.0, 1.0], "variance": [1.0] } }), "2 means but 1 variances"),
        (json!({ "class_name": "Normalization", "config": { "mean": 0.0, "variance": 1.0, "axis": 1 } }), "axis"),
    ];
    for (cfg, needle) in cases {
        match layer_from_config(&cfg) {
            Ok(l) => panic!("{cfg} loaded as {l:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{cfg}: `{e}` does not name `{needle}`"),
        }
    }
    // Checked when the model is built, too: a per-channel table that does not fit the input.
    let mut m = Sequential::new(&[4, 4, 3]);
    m.add(Rescaling::per_channel(vec![1.0, 2.0], vec![0.0]));
    let e = m.output_shape().unwrap_err().to_string();
    assert!(e.contains("2 values of scale") && e.contains("[4, 4, 3]"), "{e}");
    let mut m = Sequential::new(&[4, 4, 3]);
    m.add(ReLU::new().max_value(f32::NAN));
    assert!(m.output_shape().unwrap_err().to_string().contains("NaN"));
    let e = Activation::new("Sigmoid").unwrap_err().to_string();
    assert!(e.contains("\"Sigmoid\"") && e.contains("sigmoid"), "{e}");
}

#[test]
fn the_summary_lists_every_new_layer() {
    let m = model();
    let s = m.summarize().unwrap();
    let classes: Vec<&str> = s.layers.iter().map(|l| l.class_name.as_str()).collect();
    for c in ["Normalization", "Rescaling", "LeakyReLU", "Activation", "GlobalMaxPooling2D", "Softmax"] {
        assert!(classes.contains(&c), "{c} missing from {classes:?}");
    }
    let pool = s.layers.iter().find(|l| l.class_name == "GlobalMaxPooling2D").unwrap();
    assert_eq!(pool.output_shape, [8]);
    // Element-wise layers add no FLOPs (summary.rs counts convolutions and dense layers).
    let conv_dense: u64 = s.layers.iter().filter(|l| l.class_name == "Conv2D" || l.class_name == "Dense").map(|l| l.flops).sum();
    assert_eq!(s.flops, conv_dense);
    let table = m.summary().unwrap();
    assert!(table.contains("global_max_pooling2d") && table.contains("normalization"), "{table}");
}
