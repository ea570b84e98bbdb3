//! LayerNormalization (issue 14) inside a model: training, saving and reloading to the same
//! loss, its config and the errors of a bad one, and the compiled backward pass against
//! central differences of the loss. Software adapter; the kernels themselves are held to
//! f64 in tests/kernels/layernorm.rs.

use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::layers::*;
use convoy::model::config::layer_from_config;
use convoy::model::{CompileOptions, FitOptions, Loss, Sequential};
use convoy::optim::Optimizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

/// The software adapter, or the adapter `CONVOY_TEST_DEVICE` names (the GPU machine's runs).
fn software() -> Vec<Arc<convoy::Device>> {
    convoy::device::open(std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty()).as_deref().unwrap_or("software")).unwrap()
}

/// LayerNormalization after a convolution (each pixel over its channels) and after a Dense
/// layer (each sample over its units), with a non-default epsilon on the second.
fn model(input: &[usize], classes: usize) -> Sequential {
    let mut m = Sequential::new(input);
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    m.add(LayerNormalization::new());
    m.add(Activation::new("gelu").unwrap());
    m.add(GlobalAveragePooling2D::new());
    m.add(Dense::new(7));
    m.add(LayerNormalization::new().epsilon(1e-2));
    m.add(Dense::new(classes));
    m
}

#[test]
fn a_model_with_layer_norm_trains_saves_reloads_and_evaluates_to_the_same_loss() {
    let (train, val) = synthetic_split(64, 16, 8, 4).unwrap();
    let (train, val): (Arc<dyn Dataset>, Arc<dyn Dataset>) = (Arc::new(train), Arc::new(val));
    let mut m = model(&[8, 8, 3], 10);
    m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(software()).seed(7).max_batch(16)).unwrap();
    let before = m.get_weights().unwrap().0;
    let history = m.fit(train, FitOptions { epochs: 2, batch_size: 16, verbose: 0, ..Default::default() }).unwrap();
    let losses = history.get("loss").unwrap();
    assert!(losses.iter().all(|l| l.is_finite()), "training losses {losses:?}");
    assert_ne!(m.get_weights().unwrap().0, before, "eight steps left the weights as they were");
    let trained = m.evaluate(val.clone(), 16).unwrap()["loss"];
    assert!(trained.is_finite(), "validation loss {trained}");

    let path = std::env::temp_dir().join(format!("convoy-layer-norm-{}.safetensors", std::process::id()));
    m.save(&path).unwrap();
    let mut loaded = Sequential::load_compiled(&path, software(), 16).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(loaded.architecture(), m.architecture(), "the reloaded architecture differs");
    assert_eq!(loaded.evaluate(val, 16).unwrap()["loss"], trained, "the reloaded model evaluates to another loss");
}

#[test]
fn layer_norm_configs_round_trip_and_bad_ones_are_named() {
    let l = LayerNormalization::new().epsilon(0.25);
    let saved = json!({ "class_name": l.class_name(), "config": l.config() });
    let back = layer_from_config(&saved).unwrap();
    assert_eq!(back.config(), l.config());
    // Keras 3's own config, axis as a list.
    let keras = json!({ "class_name": "LayerNormalization", "config": { "axis": [-1], "epsilon": 0.001, "center": true, "scale": true } });
    assert_eq!(layer_from_config(&keras).unwrap().config(), LayerNormalization::new().config());
    let cases = [
        (json!({ "axis": 1 }), "axis 1"),
        (json!({ "axis": [1, 2] }), "[1,2]"),
        (json!({ "epsilon": -1.0 }), "-1"),
        (json!({ "epsilon": 0 }), "0"),
        (json!({ "epsilon": "small" }), "\"small\""),
        (json!({ "epsilon": 1e300 }), "1e+300"),
        (json!({ "center": false }), "center"),
        (json!({ "scale": false }), "scale"),
    ];
    for (cfg, needle) in cases {
        let v = json!({ "class_name": "LayerNormalization", "config": cfg });
        match layer_from_config(&v) {
            Ok(l) => panic!("{v} loaded as {l:?}"),
            Err(e) => assert!(e.to_string().contains(needle), "{v}: `{e}` does not name `{needle}`"),
        }
    }
    let mut m = Sequential::new(&[4, 3]);
    m.add(LayerNormalization::new().epsilon(f32::NAN));
    assert!(m.output_shape().unwrap_err().to_string().contains("NaN"));
}

/// The analytic gradient along random directions and on the largest coordinates against
/// central differences of the loss (as tests/gradcheck.rs).
#[test]
fn layer_norm_gradients_match_finite_differences() {
    let mut m = model(&[5, 4, 3], 4);
    m.compile(CompileOptions::new(Optimizer::sgd(0.1)).loss(Loss::SparseCategoricalCrossentropy).devices(software()).seed(3).max_batch(8)).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let images: Vec<u8> = (0..5 * 5 * 4 * 3).map(|_| rng.random()).collect();
    let labels: Vec<u32> = (0..5).map(|_| rng.random_range(0..4)).collect();
    let (params, _, _) = m.get_weights().unwrap();
    let (_, grads) = m.compute_gradients(&images, &labels).unwrap();
    assert!(grads.iter().all(|g| g.is_finite()), "non-finite gradient");
    let mut loss_at = |p: &[f32]| -> f64 {
        m.set_weights(p).unwrap();
        m.compute_gradients(&images, &labels).unwrap().0
    };
    let eps = 2e-3f64;
    let mut worst = 0.0f64;
    let mut directions: Vec<Vec<f64>> = (0..3).map(|_| params.iter().map(|_| rng.random_range(-1.0f64..1.0)).collect()).collect();
    let mut order: Vec<usize> = (0..grads.len()).collect();
    order.sort_by(|&a, &b| grads[b].abs().total_cmp(&grads[a].abs()));
    directions.extend(order.iter().take(4).map(|&i| (0..params.len()).map(|j| if j == i { 1.0 } else { 0.0 }).collect()));
    for v in directions {
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let shifted = |s: f64| -> Vec<f32> { params.iter().zip(&v).map(|(p, d)| (*p as f64 + s * d / norm) as f32).collect() };
        let numeric = (loss_at(&shifted(eps)) - loss_at(&shifted(-eps))) / (2.0 * eps);
        let analytic: f64 = grads.iter().zip(&v).map(|(g, d)| *g as f64 * d / norm).sum();
        let err = (numeric - analytic).abs() / analytic.abs().max(numeric.abs()).max(1e-3);
        eprintln!("numeric {numeric:.6} analytic {analytic:.6} error {err:.2e}");
        worst = worst.max(err);
    }
    assert!(worst < 5e-3, "relative error {worst:.3e}");
}
