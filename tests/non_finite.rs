//! NaN is never hidden (issue 19): a diverging run reports its first non-finite loss and never
//! shows an accuracy above chance; `convoy train` stops with exit code 3 and leaves the
//! existing `--save` file and checkpoint alone; a model with NaN weights evaluates to a NaN
//! loss with a warning naming the tensor. On the software adapter.

use std::path::Path;
use std::sync::Arc;

use convoy::data::{synthetic_split, Dataset};
use convoy::model::{zoo, CompileOptions, FitOptions, Metric, Sequential};
use convoy::optim::Optimizer;

/// Ten balanced classes: a model that learned nothing is right a tenth of the time. A NaN
/// row counted as correct gave 1.0; the bound leaves room for the finite rows before the
/// loss diverged.
const ABOVE_CHANCE: f64 = 0.3;

mod common;
use common::{convoy, json, tmp};

fn data() -> (Arc<dyn Dataset>, Arc<dyn Dataset>) {
    let (t, v) = synthetic_split(300, 60, 8, 5).unwrap();
    (Arc::new(t), Arc::new(v))
}

fn mlp(lr: f32) -> Sequential {
    let mut m = zoo::mlp(&[8, 8, 3], 10);
    m.compile(CompileOptions::new(Optimizer::sgd(lr)).metrics(vec![Metric::Accuracy, Metric::TopKAccuracy(5)]).devices(convoy::device::open("software").unwrap()).seed(1))
    .unwrap();
    m
}

/// An accuracy from the logs or JSON: `None` for NaN/`null`, else at most [`ABOVE_CHANCE`].
#[track_caller]
fn at_chance(name: &str, v: Option<f64>) {
    if let Some(v) = v.filter(|v| !v.is_nan()) {
        assert!(v <= ABOVE_CHANCE, "{name} is {v}: a diverged model scored above chance");
    }
}

#[test]
fn library_fit_continues_past_a_non_finite_loss_and_scores_no_nan_row_as_correct() {
    let (train, val) = data();
    let mut m = mlp(1e4);
    let history = m
        .fit(train, FitOptions { epochs: 2, batch_size: 32, validation_data: Some(val.clone()), verbose: 0, ..Default::default() })
        .unwrap();
    let h = history.history();
    // Keras' default: no TerminateOnNaN, so both epochs run
    assert_eq!(h["loss"].len(), 2, "{h:?}");
    assert!(h["loss"][1].is_nan() && h["val_loss"][1].is_nan(), "the run did not diverge: {h:?}");
    for key in ["accuracy", "val_accuracy", "top_k_accuracy", "val_top_k_accuracy"] {
        // top-5 of ten classes is right half the time by chance; NaN rows made it 1.0
        let bound = if key.contains("top_k") { 0.7 } else { ABOVE_CHANCE };
        let v = h[key][1];
        assert!(v <= bound, "{key} is {v} after divergence: {h:?}");
    }
    let e = m.evaluate(val, 32).unwrap();
    assert!(e["loss"].is_nan() && e["accuracy"] == 0.0, "{e:?}");
    assert!(!m.non_finite_tensors().unwrap().is_empty(), "diverged weights were not found");
}

#[test]
fn train_stops_with_exit_code_3_and_keeps_the_existing_files() {
    let dir = tmp("train");
    let save = dir.join("model.safetensors");
    let ck_dir = dir.join("ck");
    std::fs::create_dir_all(&ck_dir).unwrap();
    let ck = ck_dir.join("checkpoint.safetensors");
    // stand-ins for a good model and the last finite checkpoint of an earlier run
    std::fs::write(&save, b"the previous model").unwrap();
    std::fs::write(&ck, b"the last finite checkpoint").unwrap();
    let out = convoy(&[
        "train", "--model", "mlp", "--lr", "1e4", "--data", "synthetic:300,60", "--image-size", "8", "--batch-size", "32", "--epochs", "3",
        "--devices", "software", "--json", "--save", save.to_str().unwrap(), "--checkpoint-dir", ck_dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let first = stderr.lines().find(|l| l.contains("the loss became non-finite")).unwrap_or_else(|| panic!("no divergence report: {stderr}"));
    assert!(first.contains("epoch 1") && first.contains("learning rate 10000") && first.contains("try a lower learning rate"), "{first}");
    assert_eq!(stderr.matches("the loss became non-finite").count(), 1, "reported more than once: {stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("error: training diverged")), "{stderr}");

    let v = json(&out);
    // TerminateOnNaN stopped the first epoch
    assert_eq!(v["epochs"], 1, "{v}");
    assert!(v["train_loss"].is_null(), "{v}");
    let listed: Vec<&str> = v["non_finite"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(listed.contains(&"train_loss") && listed.contains(&"val_loss"), "{v}");
    for key in ["train_accuracy", "val_accuracy"] {
        at_chance(key, v[key].as_f64());
        assert_eq!(v[key].is_null(), listed.contains(&key), "{key}: {v}");
    }
    assert_eq!(std::fs::read(&save).unwrap(), b"the previous model", "--save was overwritten");
    assert_eq!(std::fs::read(&ck).unwrap(), b"the last finite checkpoint", "the checkpoint was overwritten");
}

/// Writes an MLP whose first Dense bias is all NaN, through the library.
fn nan_bias_model(path: &Path) -> usize {
    let mut m = mlp(0.01);
    let (mut params, _, _) = m.get_weights().unwrap();
    let e = m.definition().layout.params.iter().find(|e| e.name == "dense/bias").expect("the first Dense bias").clone();
    let len = e.spec.len();
    params[e.offset..e.offset + len].fill(f32::NAN);
    m.set_weights(&params).unwrap();
    assert_eq!(m.non_finite_tensors().unwrap(), vec![("dense/bias".to_string(), len, len)]);
    m.save(path).unwrap();
    len
}

#[test]
fn a_model_with_nan_weights_evaluates_to_nan_with_a_warning() {
    let dir = tmp("weights");
    let path = dir.join("nan.safetensors");
    let len = nan_bias_model(&path);
    let warning = format!("warning: {}: non-finite weights in dense/bias ({len} of {len} values)", path.display());

    let out = convoy(&["evaluate", "--load", path.to_str().unwrap(), "--data", "synthetic:300,60", "--json", "--devices", "software"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.lines().any(|l| l == warning), "no `{warning}` in: {stderr}");
    let v = json(&out);
    assert!(v["loss"].is_null() && v["non_finite"] == serde_json::json!(["loss"]), "{v}");
    assert_eq!(v["accuracy"], 0.0, "NaN rows counted as correct: {v}");

    let out = convoy(&["evaluate", "--load", path.to_str().unwrap(), "--data", "synthetic:300,60", "--devices", "software"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("loss NaN"), "{}", String::from_utf8_lossy(&out.stdout));

    let out = convoy(&["predict", "--load", path.to_str().unwrap(), "--data", "synthetic:300,60", "--json", "--devices", "software"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.lines().any(|l| l == warning), "no `{warning}` in: {stderr}");
    let preds = json(&out)["predictions"].as_array().unwrap().clone();
    assert_eq!(preds.len(), 60);
    assert!(preds.iter().all(|p| p["class"].is_null() && p["probability"].is_null()), "a NaN row predicted a class: {:?}", preds[0]);

    // a finite model gets no warning
    let good = dir.join("good.safetensors");
    mlp(0.01).save(&good).unwrap();
    let out = convoy(&["evaluate", "--load", good.to_str().unwrap(), "--data", "synthetic:300,60", "--json", "--devices", "software"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("non-finite"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["non_finite"], serde_json::json!([]));
}
