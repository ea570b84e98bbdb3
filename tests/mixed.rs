//! The mixed_float16 policy (issue 13) on the software adapter, which has no cooperative
//! matrices: its products are the f16-rounded ones on the f32 units, with a notice. Dynamic
//! loss scaling as Keras' LossScaleOptimizer: an overflowing step is skipped on every
//! replica and halves the scale, finite steps double it, and mixed training reaches f32's
//! accuracy. (The tensor-core kernels are tested on a GPU: tests/kernels/coop.rs.)

use std::sync::Arc;

use convoy::data::{Dataset, synthetic_split};
use convoy::layers::*;
use convoy::model::{CompileOptions, DTypePolicy, FitOptions, LossScale, Sequential};
use convoy::optim::Optimizer;

fn data(train: usize, val: usize) -> (Arc<dyn Dataset>, Arc<dyn Dataset>) {
    let (t, v) = synthetic_split(train, val, 8, 5).unwrap();
    (Arc::new(t), Arc::new(v))
}

fn model(policy: DTypePolicy, scale: Option<LossScale>, selection: &str) -> Sequential {
    let mut m = Sequential::new(&[8, 8, 3]);
    m.add(Conv2D::new(8, 3).padding(Padding::Same));
    m.add(BatchNormalization::new());
    m.add(ReLU::new());
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dense::new(10));
    m.set_dtype_policy(policy);
    if let Some(s) = scale {
        m.set_loss_scale(s).unwrap();
    }
    m.compile(CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9)).devices(convoy::device::open(selection).unwrap()).seed(3))
    .unwrap();
    m
}

fn batch(data: &dyn Dataset, n: usize) -> (Vec<u8>, Vec<u32>) {
    let sample = data.sample_bytes();
    let mut images = vec![0u8; n * sample];
    let labels = images
        .chunks_mut(sample)
        .enumerate()
        .map(|(i, x)| data.load(i, x).unwrap())
        .collect();
    (images, labels)
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

#[test]
fn mixed_gradients_are_f16_products_near_the_f32_ones() {
    let (train, _) = data(32, 8);
    let (images, labels) = batch(train.as_ref(), 32);
    let mut f32_model = model(DTypePolicy::Float32, None, "software");
    let mut mixed = model(DTypePolicy::MixedFloat16, None, "software");
    assert_eq!(mixed.dtype_policy(), DTypePolicy::MixedFloat16);
    assert_eq!(
        mixed.get_weights().unwrap().0,
        f32_model.get_weights().unwrap().0,
        "same seed, same weights"
    );
    let (loss32, g32) = f32_model.compute_gradients(&images, &labels).unwrap();
    let (loss16, g16) = mixed.compute_gradients(&images, &labels).unwrap();
    // Unscaled on the way out: the same magnitude as f32's, not 32768 times it.
    // Relative in the 2-norm: f16 operands (2^-11 relative) through a BatchNorm, a ReLU and
    // a max pool, whose choices f16 moves for a few units: 9.4e-3 here (2.4e-2 in the
    // max-norm), 2.1e-3 without the BatchNorm and the pool.
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let diff: Vec<f32> = g32.iter().zip(&g16).map(|(a, b)| a - b).collect();
    let rel = norm(&diff) / norm(&g32);
    println!(
        "mixed vs f32 gradients: {rel:.1e} (2-norm), {:.1e} (max-norm)",
        max_abs(&diff) / max_abs(&g32)
    );
    assert!(
        rel > 1e-6,
        "mixed gradients equal the f32 ones ({rel:e}): were the products rounded to f16?"
    );
    assert!(rel < 3e-2, "mixed gradients {rel:e} from the f32 ones");
    assert!(
        (loss32 - loss16).abs() < 1e-2 * loss32.abs(),
        "loss {loss16} vs f32 {loss32}"
    );
    assert_eq!(
        mixed.loss_scale().unwrap(),
        Some((32768.0, 0)),
        "Keras' initial scale"
    );
    assert_eq!(f32_model.loss_scale().unwrap(), None);
}

#[test]
fn an_overflowing_step_is_skipped_on_every_replica_and_halves_the_scale() {
    let (train, _) = data(32, 8);
    let (images, labels) = batch(train.as_ref(), 32);
    for selection in ["software", "software:2"] {
        // 2^100 times the loss gradient is past f16's range in the first product it meets.
        let huge = LossScale {
            initial_scale: 2f32.powi(100),
            dynamic_growth_steps: 2000,
        };
        let mut m = model(DTypePolicy::MixedFloat16, Some(huge), selection);
        let before = m.get_weights().unwrap().0;
        let logs = m.train_on_batch(&images, &labels).unwrap();
        assert!(
            logs["loss"].is_finite(),
            "{selection}: the loss itself is not scaled: {logs:?}"
        );
        assert_eq!(
            m.get_weights().unwrap().0,
            before,
            "{selection}: a skipped step moved the weights"
        );
        assert_eq!(
            m.loss_scale().unwrap(),
            Some((2f32.powi(99), 1)),
            "{selection}"
        );
        m.train_on_batch(&images, &labels).unwrap();
        assert_eq!(
            m.get_weights().unwrap().0,
            before,
            "{selection}: second skipped step"
        );
        assert_eq!(
            m.loss_scale().unwrap(),
            Some((2f32.powi(98), 2)),
            "{selection}"
        );
        // A scale that fits: steps apply, and two finite steps in a row double it.
        let fits = LossScale {
            initial_scale: 256.0,
            dynamic_growth_steps: 2,
        };
        let mut m = model(DTypePolicy::MixedFloat16, Some(fits), selection);
        let mut last = m.get_weights().unwrap().0;
        for i in 0..4 {
            m.train_on_batch(&images, &labels).unwrap();
            let now = m.get_weights().unwrap().0;
            assert_ne!(now, last, "{selection}: finite step {i} did not update");
            last = now;
        }
        assert_eq!(
            m.loss_scale().unwrap(),
            Some((1024.0, 0)),
            "{selection}: doubled after steps 2 and 4"
        );
    }
}

#[test]
fn mixed_training_reaches_the_f32_accuracy() {
    let (train, val) = data(512, 256);
    let mut accuracy = Vec::new();
    for policy in [DTypePolicy::Float32, DTypePolicy::MixedFloat16] {
        let mut m = model(policy, None, "software");
        let opts = FitOptions {
            epochs: 3,
            batch_size: 32,
            verbose: 0,
            validation_data: Some(val.clone()),
            ..Default::default()
        };
        let history = m.fit(train.clone(), opts).unwrap();
        let last = |key: &str| history.get(key).and_then(|v| v.last().copied());
        if policy.is_mixed() {
            // The scale's history is in the logs, one value per epoch.
            assert_eq!(
                history.get("loss_scale").map(|v| v.len()),
                Some(3),
                "{:?}",
                history.history()
            );
            assert_eq!(last("loss_scale"), Some(32768.0));
            assert_eq!(last("skipped_steps"), Some(0.0));
        } else {
            assert_eq!(last("loss_scale"), None);
        }
        accuracy.push(last("val_accuracy").unwrap());
    }
    assert!(
        accuracy[0] > 0.5,
        "f32 learnt too little to compare: {accuracy:?}"
    );
    assert!(
        (accuracy[0] - accuracy[1]).abs() <= 0.01,
        "validation accuracy f32 vs mixed: {accuracy:?}"
    );
}

#[test]
fn a_replica_set_aside_rejoins_with_the_current_loss_scale() {
    // Replica 1 takes no samples while replica 0's scale doubles at every finite step and
    // skips the overflowing ones; rejoining, it takes replica 0's scale and skip count with
    // the weights, so both scale the next losses alike and agree on the next growth.
    let (train, _) = data(32, 8);
    let (images, labels) = batch(train.as_ref(), 32);
    let grows = LossScale { initial_scale: 256.0, dynamic_growth_steps: 1 };
    let mut m = model(DTypePolicy::MixedFloat16, Some(grows), "software:2");
    m.set_device_speeds(&[1.0, 0.0]).unwrap();
    for _ in 0..3 {
        m.train_on_batch(&images, &labels).unwrap();
    }
    m.collect(0).unwrap();
    let lead = m.loss_scale().unwrap().unwrap();
    assert_eq!(lead, (2048.0, 0), "three finite steps double 256 three times");
    m.set_device_speeds(&[1.0, 1.0]).unwrap();
    assert_eq!(m.replica_loss_scales().unwrap(), vec![Some(lead); 2], "the replica set aside kept its old scale");
    m.train_on_batch(&images, &labels).unwrap();
    m.collect(0).unwrap();
    assert_eq!(m.replica_loss_scales().unwrap(), vec![Some((4096.0, 0)); 2], "the replicas' scales parted after rejoining");
}

#[test]
fn bad_loss_scales_and_policies_are_named() {
    let mut m = Sequential::new(&[8, 8, 3]);
    let e = m
        .set_loss_scale(LossScale {
            initial_scale: 0.0,
            dynamic_growth_steps: 10,
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("initial_scale") && e.contains('0'), "{e}");
    let e = DTypePolicy::from_name("float16").unwrap_err().to_string();
    assert!(e.contains("float16") && e.contains("mixed_float16"), "{e}");
}

/// Convolutions with a bias (Keras' default) under mixed_float16: the bias added as the
/// product stores its f16 output, its gradient summed from the f16 dy, the image padded to
/// four f16 channels for the first, and the BatchNorm after the second normalising by the
/// statistics its epilogue wrote (bias included), all against the f64 reference of `convoy
/// check`, two steps, as under float32.
#[test]
fn biased_convolutions_match_the_reference_in_both_policies() {
    let (train, _) = data(16, 4);
    let batches = vec![batch(train.as_ref(), 8), batch(train.as_ref(), 8)];
    for policy in [DTypePolicy::Float32, DTypePolicy::MixedFloat16] {
        let mut m = Sequential::new(&[8, 8, 3]);
        m.add(Conv2D::new(8, 3).padding(Padding::Same));
        m.add(ReLU::new());
        m.add(Conv2D::new(12, 3).padding(Padding::Same));
        m.add(BatchNormalization::new());
        m.add(ReLU::new());
        m.add(GlobalAveragePooling2D::new());
        m.add(Dense::new(10));
        m.set_dtype_policy(policy);
        m.compile(CompileOptions::new(Optimizer::sgd(0.05)).devices(convoy::device::open("software").unwrap()).seed(4)).unwrap();
        let r = convoy::check::check(&mut m, &batches).unwrap();
        println!("{policy:?}: grads {:.1e} at {}, loss {:.1e}, update {:.1e}", r.grad.error, r.grad.at, r.loss.error, r.update.error);
        assert!(r.ok, "{policy:?}: {r:#?}");
    }
}
