//! Whole training steps of every zoo model against the f64 model-level reference
//! (`convoy::check`), on the software adapter with the shaders a release build ships
//! (unchecked): gradients, losses, BatchNorm's moving statistics and the optimizer's update,
//! one step at a time from convoy's weights, on 1, 2 and 3 replicas with uneven splits.
//! ReLU masks and max-pool choices come from the device's own forward pass (see
//! `src/check/mod.rs` for why an f64 model that decides them itself cannot be the measure).

use convoy::check::{check_zoo, CheckConfig, Report};
use convoy::device::{open_with, ShaderChecks};
use convoy::optim::Optimizer;

fn run(cfg: &CheckConfig, selection: &str, checks: ShaderChecks) -> Report {
    let devices = open_with(selection, checks).expect("the software adapter");
    let t0 = std::time::Instant::now();
    let r = check_zoo(cfg, devices).unwrap_or_else(|e| panic!("{} b{} {}px on {selection}: {e}", cfg.model, cfg.batch_size, cfg.image_size));
    eprintln!(
        "{} b{} {}px {selection} {checks:?}: grads {:.1e} ({}), loss {:.1e}, update {:.1e}, moving {:.1e}, ties {} flipped {} [{:.1} s]",
        cfg.model,
        cfg.batch_size,
        cfg.image_size,
        r.grad.error,
        r.grad.at,
        r.loss.error,
        r.update.error,
        r.moving_stats.error,
        r.ties,
        r.flipped,
        t0.elapsed().as_secs_f64()
    );
    assert!(r.ok, "{} b{} {}px on {selection}: {r:#?}", cfg.model, cfg.batch_size, cfg.image_size);
    assert_eq!(r.steps, cfg.steps);
    r
}

#[test]
fn every_zoo_model_matches_the_reference_at_odd_shapes() {
    // Odd batches and image sizes: stride-2 stages of 9 -> 5 -> 3 px, max pools that drop
    // a row (10 -> 5 -> 2), a batch of one (BatchNorm over one sample's 3x3 pixels).
    let cases = [("resnet20", 5, 9), ("resnet20", 1, 12), ("resnet18_cifar", 3, 13), ("convnet7", 7, 10), ("convnet7", 2, 13), ("mlp", 6, 5), ("mlp", 9, 7)];
    for (model, batch, size) in cases {
        run(&CheckConfig::new(model, batch, size), "software", ShaderChecks::Unchecked);
    }
}

#[test]
fn imagenet_resnet18_matches_the_reference() {
    // 32 px: the 7x7 stride-2 stem gives 16, the padded 3x3 stride-2 max pool 8 (its edge
    // windows a third padding), the stages 8 -> 4 -> 2 -> 1; a batch of 8 keeps the last
    // stage's BatchNorms at the 8 rows per channel a checkable step needs.
    run(&CheckConfig::new("resnet18", 8, 32), "software", ShaderChecks::Unchecked);
}

#[test]
fn checked_shaders_give_the_same_verdict() {
    run(&CheckConfig::new("resnet20", 4, 8), "software", ShaderChecks::Checked);
}

#[test]
fn mixed_float16_steps_match_a_plain_mixed_reference() {
    // The device's products take f16 operands (rounded by the f32 kernel here, no tensor
    // cores) and its activations are stored as f16 where their channels are whole quads;
    // the bounds come from a plain implementation of the same policy, and the loss
    // scale is divided back out of the gradients before they are compared. (Held to plain
    // f32's bounds instead, the same steps fail: seen with the reference's f16 rounding
    // turned off.)
    let mixed = |model: &str, batch, size| CheckConfig { precision: convoy::model::DTypePolicy::MixedFloat16, ..CheckConfig::new(model, batch, size) };
    let r = run(&mixed("convnet7", 4, 8), "software", ShaderChecks::Unchecked);
    assert!(r.grad.error > 1e-4, "f16 operands leave more than f32 rounding: {r:#?}");
    run(&mixed("resnet20", 8, 8), "software:2", ShaderChecks::Unchecked);
    // Activations stored as f16 through the stem (an f32 image into an f16 output), the max
    // pool, every residual join and the global pool, cast to f32 for the classifier.
    run(&mixed("resnet18", 8, 32), "software", ShaderChecks::Unchecked);
    // ReLU6 keeps its input's f16 between BatchNorms and the depthwise convolutions cast both
    // ways; the MLP's ReLUs stay f32 between its Dense layers.
    run(&mixed("mobilenet_v2", 8, 32), "software", ShaderChecks::Unchecked);
    run(&mixed("mlp", 6, 5), "software", ShaderChecks::Unchecked);
}

#[test]
fn adam_and_adamw_steps_match() {
    for optimizer in [Optimizer::adam(1e-3), Optimizer::adamw(1e-3).weight_decay(1e-2)] {
        run(&CheckConfig { optimizer, ..CheckConfig::new("convnet7", 4, 8) }, "software", ShaderChecks::Unchecked);
    }
}

#[test]
fn label_smoothing_steps_match() {
    // Keras' label_smoothing in the loss kernel against the reference's smoothed targets
    // (1 - a) * onehot + a / classes: the loss and every gradient after it.
    let r = run(&CheckConfig { label_smoothing: 0.3, ..CheckConfig::new("mlp", 6, 5) }, "software", ShaderChecks::Unchecked);
    assert!(r.loss.error < 1e-5, "{r:#?}");
}

#[test]
fn two_and_three_replicas_with_uneven_and_idle_shares_match() {
    // Each replica normalises with its own share's BatchNorm statistics; the reference does
    // the same per share, so the bound is the same as on one device.
    let r = run(&CheckConfig { speeds: Some(vec![3.0, 1.0]), ..CheckConfig::new("resnet20", 8, 8) }, "software:2", ShaderChecks::Unchecked);
    assert_eq!(r.shares, vec![6, 2]);
    let r = run(&CheckConfig { speeds: Some(vec![2.0, 1.0, 1.0]), ..CheckConfig::new("convnet7", 7, 9) }, "software:3", ShaderChecks::Unchecked);
    assert_eq!(r.shares.iter().sum::<usize>(), 7);
    assert!(r.shares.iter().all(|&s| s > 0), "{:?}", r.shares);
    // A batch of two on three replicas leaves one idle: its moving statistics still enter
    // the average.
    let r = run(&CheckConfig { speeds: Some(vec![1.0, 1.0, 1.0]), ..CheckConfig::new("resnet20", 2, 12) }, "software:3", ShaderChecks::Unchecked);
    assert_eq!(r.shares.iter().filter(|&&s| s == 0).count(), 1, "{:?}", r.shares);
}

#[test]
fn batch_norm_over_too_few_rows_is_refused_with_the_layer_named() {
    // ResNet-20 at 8 px ends at 2x2 from its third stage (residual_6) on: a batch of one
    // gives those BatchNorms 4 rows.
    let devices = open_with("software", ShaderChecks::Unchecked).unwrap();
    let e = check_zoo(&CheckConfig::new("resnet20", 1, 8), devices).unwrap_err().to_string();
    assert!(e.contains("only 4 rows") && e.contains("residual_6") && e.contains("larger batch"), "{e}");
}
