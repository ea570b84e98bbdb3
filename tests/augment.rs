//! RandomFlip, RandomCrop and RandomTranslation (issue 14) inside models: training, saving
//! and reloading to the same loss, the identity (and the centre crop) in inference, new
//! draws every step that a seed reproduces, data-parallel replicas that draw what one device
//! draws, and configs. Software adapter; the kernels are held to f64 in
//! tests/kernels/augment.rs and whole steps to the f64 reference in src/check.

use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, FitOptions, Sequential};
use convoy::optim::Optimizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

/// The software adapter (`software:N` for N replicas), or the adapter `CONVOY_TEST_DEVICE`
/// names for one.
fn devices(replicas: usize) -> Vec<Arc<convoy::Device>> {
    match std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()) {
        Some(sel) if replicas == 1 => convoy::device::open(&sel).unwrap(),
        _ if replicas == 1 => convoy::device::open("software").unwrap(),
        // The same adapter several times: two replicas on one GPU, as `--devices 0,0`.
        Some(sel) => convoy::device::open(&vec![sel; replicas].join(",")).unwrap(),
        _ => convoy::device::open(&format!("software:{replicas}")).unwrap(),
    }
}

/// Every augmentation, the first reading the input (no input gradient) and the others after
/// a convolution (their gradients reach it).
fn model(input: &[usize], classes: usize) -> Sequential {
    let mut m = Sequential::new(input);
    m.add(RandomFlip::default().seed(1));
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    m.add(RandomTranslation::new(0.125, 0.25).seed(2));
    m.add(RandomCrop::new(6, 5).seed(3));
    m.add(ReLU::new());
    m.add(RandomFlip::new(FlipMode::Horizontal));
    m.add(RandomTranslation::new(0.2, 0.2).fill_mode(FillMode::Constant).fill_value(0.25));
    m.add(Flatten::new());
    m.add(Dense::new(classes));
    m
}

fn batches(n: usize, sizes: &[usize], sample: usize) -> Vec<(Vec<u8>, Vec<u32>)> {
    let mut rng = StdRng::seed_from_u64(n as u64);
    sizes.iter().map(|&b| ((0..b * sample).map(|_| rng.random()).collect(), (0..b).map(|_| rng.random_range(0..4)).collect())).collect()
}

/// Trains `m` one step per batch; returns its parameters and the per-sample losses.
fn train(m: &mut Sequential, data: &[(Vec<u8>, Vec<u32>)]) -> (Vec<f32>, Vec<f32>) {
    let mut losses = Vec::new();
    for (images, labels) in data {
        m.train_on_batch(images, labels).unwrap();
        let (outs, _) = m.collect(0).unwrap();
        losses.extend(outs.iter().flat_map(|o| o.loss.iter().copied()));
    }
    (m.get_weights().unwrap().0, losses)
}

#[test]
fn a_model_with_augmentation_trains_saves_reloads_and_evaluates_to_the_same_loss() {
    let (train, val) = synthetic_split(64, 16, 8, 4).unwrap();
    let (train, val): (Arc<dyn Dataset>, Arc<dyn Dataset>) = (Arc::new(train), Arc::new(val));
    let mut m = model(&[8, 8, 3], 10);
    let summary = m.summary().unwrap();
    for row in ["random_flip (RandomFlip)", "random_crop (RandomCrop)", "(None, 6, 5, 5)", "random_translation_1 (RandomTranslation)"] {
        assert!(summary.contains(row), "the summary has no `{row}`:\n{summary}");
    }
    m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices(1)).seed(7).max_batch(16)).unwrap();
    let before = m.get_weights().unwrap().0;
    let history = m.fit(train, FitOptions { epochs: 2, batch_size: 16, verbose: 0, ..Default::default() }).unwrap();
    let losses = history.get("loss").unwrap();
    assert!(losses.iter().all(|l| l.is_finite()), "training losses {losses:?}");
    assert_ne!(m.get_weights().unwrap().0, before, "eight steps left the weights as they were");
    let trained = m.evaluate(val.clone(), 16).unwrap()["loss"];
    assert!(trained.is_finite(), "validation loss {trained}");

    let path = std::env::temp_dir().join(format!("convoy-augment-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, devices(1), 16).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.architecture(), m.architecture(), "the reloaded architecture differs");
    assert_eq!(loaded.evaluate(val, 16).unwrap()["loss"], trained, "the reloaded model evaluates to another loss");
}

/// Flips and translations pass the image through untouched in inference, so a model with
/// them predicts what the same model without them predicts; the crop takes the centre
/// window, so a dense layer after it predicts what one over the whole image predicts whose
/// weights are zero outside that window.
#[test]
fn augmentation_is_the_identity_in_inference_and_the_crop_takes_the_centre() {
    let (_, val) = synthetic_split(8, 12, 7, 5).unwrap();
    let val: Arc<dyn Dataset> = Arc::new(val);
    let build = |augment: bool| {
        let mut m = Sequential::new(&[7, 7, 3]);
        if augment {
            m.add(RandomFlip::default());
            m.add(RandomTranslation::new(0.5, 0.5).fill_mode(FillMode::Wrap));
        }
        m.add(Conv2D::new(4, 3).padding(Padding::Same));
        if augment {
            m.add(RandomFlip::new(FlipMode::Vertical).seed(9));
        }
        m.add(GlobalAveragePooling2D::new());
        m.add(Dense::new(10));
        m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices(1)).seed(7).max_batch(12)).unwrap();
        m
    };
    let (mut with, mut without) = (build(true), build(false));
    without.set_weights(&with.get_weights().unwrap().0).unwrap();
    assert_eq!(with.predict(val.clone(), 12).unwrap(), without.predict(val.clone(), 12).unwrap());
    assert_eq!(with.evaluate(val.clone(), 12).unwrap()["loss"], without.evaluate(val.clone(), 12).unwrap()["loss"]);

    // A 4x3 window of 7x7 images starts at row 1, column 2.
    let dense = |crop: bool| {
        let mut m = Sequential::new(&[7, 7, 3]);
        if crop {
            m.add(RandomCrop::new(4, 3));
        }
        m.add(Flatten::new());
        m.add(Dense::new(10).use_bias(false));
        m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices(1)).seed(7).max_batch(12)).unwrap();
        m
    };
    let (mut cropped, mut whole) = (dense(true), dense(false));
    let w = cropped.get_weights().unwrap().0;
    // The flat parameters are padded past the kernel's 1,470 floats.
    let mut embedded = vec![0.0f32; whole.get_weights().unwrap().0.len()];
    for (i, j, c) in (0..4).flat_map(|i| (0..3).flat_map(move |j| (0..3).map(move |c| (i, j, c)))) {
        let (from, to) = ((i * 3 + j) * 3 + c, ((i + 1) * 7 + j + 2) * 3 + c);
        embedded[to * 10..to * 10 + 10].copy_from_slice(&w[from * 10..from * 10 + 10]);
    }
    whole.set_weights(&embedded).unwrap();
    let (a, b) = (cropped.predict(val.clone(), 12).unwrap(), whole.predict(val, 12).unwrap());
    for (ra, rb) in a.iter().zip(&b) {
        for (x, y) in ra.iter().zip(rb) {
            assert!((x - y).abs() < 1e-6, "centre crop {ra:?} against the embedded window {rb:?}");
        }
    }
}

/// The same batch three times at a learning rate too small to move an f32 weight (0 is
/// refused): the weights stay, the draws change, so the losses do; a second model of the same seed draws the same and reproduces them exactly.
#[test]
fn every_step_draws_anew_and_a_seed_reproduces_the_run() {
    let data = batches(3, &[12, 12, 12], 8 * 8 * 3);
    let same: Vec<_> = vec![data[0].clone(); 3];
    let run = |seed: u64| {
        let mut m = model(&[8, 8, 3], 4);
        m.compile(CompileOptions::new(Optimizer::sgd(1e-30)).devices(devices(1)).seed(seed).max_batch(12)).unwrap();
        train(&mut m, &same).1
    };
    let losses = run(5);
    let steps: Vec<&[f32]> = losses.chunks(12).collect();
    assert!(steps[0] != steps[1] && steps[1] != steps[2], "the same batch at the same weights gave the same losses: {steps:?}");
    assert_eq!(run(5), losses, "a second run of the same seed drew differently");
}

/// Two replicas split each batch (evenly, then 3:1): every sample is drawn from its index
/// in the whole batch, so the weights are those one device reaches on the same batches.
#[test]
fn two_replicas_draw_what_one_device_draws() {
    let data = batches(1, &[16, 16, 16, 16], 8 * 8 * 3);
    let compiled = |replicas: usize| {
        let mut m = model(&[8, 8, 3], 4);
        m.compile(CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9)).devices(devices(replicas)).seed(11).max_batch(16)).unwrap();
        m
    };
    let (single, single_losses) = train(&mut compiled(1), &data);
    for speeds in [[1.0, 1.0], [3.0, 1.0]] {
        let mut m = compiled(2);
        m.set_device_speeds(&speeds).unwrap();
        let (parallel, losses) = train(&mut m, &data);
        let scale = single.iter().fold(0.0f64, |m, x| m.max(x.abs() as f64));
        let d = single.iter().zip(&parallel).fold(0.0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs())) / scale;
        assert!(d < 1e-4, "split {speeds:?}: weights differ from one device's by {d:.2e}");
        let dl = single_losses.iter().zip(&losses).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(dl < 1e-4, "split {speeds:?}: per-sample losses differ by {dl:e}");
    }
    // And through fit, which splits by measured speed.
    let (train_set, _) = synthetic_split(48, 8, 8, 2).unwrap();
    let train_set: Arc<dyn Dataset> = Arc::new(train_set);
    let mut m = model(&[8, 8, 3], 10);
    m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(devices(2)).seed(3).max_batch(16)).unwrap();
    let history = m.fit(train_set, FitOptions { epochs: 1, batch_size: 16, verbose: 0, ..Default::default() }).unwrap();
    assert!(history.get("loss").unwrap().iter().all(|l| l.is_finite()));
}

#[test]
fn configs_round_trip_keras_ones_load_and_bad_ones_are_named() {
    let layers: Vec<Box<dyn Layer>> = vec![
        Box::new(RandomFlip::new(FlipMode::Vertical).seed(8)),
        Box::new(RandomCrop::new(5, 3).seed(2)),
        Box::new(RandomTranslation::new(0.1, 0.3).height_range(-0.2, 0.4).fill_mode(FillMode::Nearest).fill_value(1.5)),
        Box::new(RandomTranslation::new(0.1, 0.3).fill_mode(FillMode::Wrap).seed(4)),
    ];
    for l in layers {
        let saved = json!({ "class_name": l.class_name(), "config": l.config() });
        assert_eq!(layer_from_config(&saved).unwrap().config(), l.config(), "{saved}");
    }
    // Keras 3's own configs (seed None, data_format resolved).
    let keras = [
        (json!({ "class_name": "RandomFlip", "config": { "name": "random_flip", "trainable": true, "dtype": "float32", "mode": "horizontal", "seed": null, "data_format": "channels_last" } }), RandomFlip::new(FlipMode::Horizontal).config()),
        (json!({ "class_name": "RandomCrop", "config": { "name": "random_crop", "height": 24, "width": 20, "seed": 1337, "data_format": "channels_last" } }), RandomCrop::new(24, 20).seed(1337).config()),
        (
            json!({ "class_name": "RandomTranslation", "config": { "height_factor": [-0.1, 0.2], "width_factor": 0.3, "fill_mode": "constant", "interpolation": "nearest", "seed": null, "fill_value": 0.0, "data_format": null } }),
            RandomTranslation::new(0.0, 0.3).height_range(-0.1, 0.2).fill_mode(FillMode::Constant).config(),
        ),
    ];
    for (v, want) in keras {
        assert_eq!(layer_from_config(&v).unwrap().config(), want, "{v}");
    }
    let bad = [
        (json!({ "class_name": "RandomTranslation", "config": { "height_factor": 0.1, "width_factor": 0.1, "interpolation": "bilinear" } }), "bilinear"),
        (json!({ "class_name": "RandomTranslation", "config": { "height_factor": 1.5, "width_factor": 0.1 } }), "1.5"),
        (json!({ "class_name": "RandomTranslation", "config": { "height_factor": [0.3, 0.1], "width_factor": 0.1 } }), "(0.3, 0.1)"),
        (json!({ "class_name": "RandomTranslation", "config": { "height_factor": 0.1, "width_factor": 0.1, "fill_mode": "mirror" } }), "mirror"),
        (json!({ "class_name": "RandomTranslation", "config": { "width_factor": 0.1 } }), "height_factor"),
        (json!({ "class_name": "RandomFlip", "config": { "mode": "diagonal" } }), "diagonal"),
        (json!({ "class_name": "RandomFlip", "config": { "mode": "vertical", "seed": -3 } }), "-3"),
        (json!({ "class_name": "RandomCrop", "config": { "height": 0, "width": 4 } }), "at least 1"),
        (json!({ "class_name": "RandomCrop", "config": { "height": 4 } }), "width"),
        (json!({ "class_name": "RandomCrop", "config": { "height": 4, "width": 4, "data_format": "channels_first" } }), "channels_first"),
    ];
    for (v, needle) in bad {
        match layer_from_config(&v) {
            Ok(l) => panic!("{v} loaded as {l:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{v}: `{e}` does not name `{needle}`"),
        }
    }
    // Shapes are checked when the model is built.
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(RandomCrop::new(9, 4));
    let err = m.output_shape().unwrap_err().to_string();
    assert!(err.contains("9x4") && err.contains("[8, 8, 3]"), "{err}");
    let mut m = Sequential::new(&[10]);
    m.add(RandomFlip::default());
    assert!(m.output_shape().unwrap_err().to_string().contains("RandomFlip"));
    let mut m = Sequential::new(&[4, 4, 1]);
    m.add(RandomTranslation::new(0.1, 0.1).fill_value(f32::INFINITY));
    assert!(m.output_shape().unwrap_err().to_string().contains("fill_value"));
}
