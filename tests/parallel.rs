//! Data parallelism on `software:2`: two replicas on a global batch B must end with the
//! weights one device reaches on the same batches, whatever the split.

use std::sync::Arc;

use convoy::layers::*;
use convoy::model::{CompileOptions, Sequential};
use convoy::optim::Optimizer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

fn model(batch_norm: bool) -> Sequential {
    let mut m = Sequential::new(&[6, 6, 3]);
    m.add(Conv2D::new(5, 3).padding(Padding::Same));
    if batch_norm {
        m.add(BatchNormalization::new());
    }
    m.add(ReLU::new());
    m.add(MaxPool2D::new(2));
    m.add(Flatten::new());
    m.add(Dense::new(8));
    m.add(ReLU::new());
    m.add(Dense::new(4));
    m
}

fn compiled(batch_norm: bool, devices: Vec<Arc<convoy::Device>>) -> Sequential {
    let mut m = model(batch_norm);
    m.compile(CompileOptions::new(Optimizer::sgd(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3)).devices(devices).seed(11).max_batch(16))
    .unwrap();
    m
}

fn batches(n: usize, sizes: &[usize]) -> Vec<(Vec<u8>, Vec<u32>)> {
    let mut rng = StdRng::seed_from_u64(n as u64);
    sizes.iter().map(|&b| ((0..b * 108).map(|_| rng.random()).collect(), (0..b).map(|_| rng.random_range(0..4)).collect())).collect()
}

/// Trains `m` on `data` and returns its parameters and the per-sample losses.
fn train(m: &mut Sequential, data: &[(Vec<u8>, Vec<u32>)]) -> (Vec<f32>, Vec<f32>) {
    let mut losses = Vec::new();
    for (images, labels) in data {
        m.train_on_batch(images, labels).unwrap();
        let (outs, _) = m.collect(0).unwrap();
        losses.extend(outs.iter().flat_map(|o| o.loss.iter().copied()));
    }
    (m.get_weights().unwrap().0, losses)
}

fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs() as f64));
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs())) / scale
}

fn two() -> Vec<Arc<convoy::Device>> {
    // Tiny gradient buckets, so these small models exchange in several overlapped pieces.
    // SAFETY: every test of this binary sets the same value; nothing reads it concurrently
    // with a different expectation.
    unsafe { std::env::set_var("CONVOY_BUCKET_BYTES", "512") };
    convoy::device::open("software:2").unwrap()
}
fn one() -> Vec<Arc<convoy::Device>> {
    convoy::device::open("software").unwrap()
}

#[test]
fn two_replicas_match_one_device_without_batch_norm() {
    let data = batches(1, &[16, 16, 16, 16, 16]);
    let (single, _) = train(&mut compiled(false, one()), &data);
    for speeds in [[1.0, 1.0], [3.0, 1.0]] {
        let mut m = compiled(false, two());
        m.set_device_speeds(&speeds).unwrap();
        assert_eq!(m.device_shares(16), if speeds[0] == 1.0 { vec![8, 8] } else { vec![12, 4] });
        assert!(m.definition().layout.param_len * 4 > 4 * 512, "the model must span several buckets");
        let (parallel, _) = train(&mut m, &data);
        let d = rel_diff(&single, &parallel);
        eprintln!("speeds {speeds:?}: relative difference {d:.2e}");
        assert!(d < 1e-4, "split {speeds:?}: relative difference {d:.2e}");
        assert_eq!(m.replica_samples().iter().sum::<usize>(), 80);
    }
}

#[test]
fn with_batch_norm_each_replica_matches_the_reference_with_its_own_statistics() {
    // Each replica normalises with its own share's statistics (no SyncBatchNorm), so two
    // replicas do not reproduce one device; the f64 reference computes every share with its
    // own statistics and holds gradients, moving statistics and updates to 1e-4.
    let data = batches(2, &[16, 16, 16, 16, 16]);
    for speeds in [[1.0, 1.0], [3.0, 1.0]] {
        let mut m = compiled(true, two());
        m.set_device_speeds(&speeds).unwrap();
        let r = convoy::check::check(&mut m, &data).unwrap();
        eprintln!("with BatchNorm, split {speeds:?}: gradients {:.1e} ({}), moving statistics {:.1e}, updates {:.1e}", r.grad.error, r.grad.at, r.moving_stats.error, r.update.error);
        assert!(r.ok, "split {speeds:?}: {r:#?}");
        assert_eq!(r.steps, 5);
    }
}

#[test]
fn short_batches_give_every_replica_a_valid_share_or_leave_it_idle() {
    // 3 samples split 2 + 1; 1 sample leaves the second replica idle for the step (it still
    // applies the update, so the replicas stay identical).
    let data = batches(3, &[16, 3, 1, 16]);
    let mut m = compiled(true, two());
    let (params, losses) = train(&mut m, &data);
    assert!(params.iter().all(|p| p.is_finite()), "non-finite weights");
    assert!(losses.iter().all(|l| l.is_finite()), "non-finite loss");
    assert_eq!(losses.len(), 36);
    let (single, _) = train(&mut compiled(false, one()), &batches(4, &[1, 2, 3]));
    let (parallel, _) = train(&mut compiled(false, two()), &batches(4, &[1, 2, 3]));
    assert!(rel_diff(&single, &parallel) < 1e-4);
}


#[test]
fn three_replicas_match_one_device_with_uneven_and_idle_shares() {
    // Three threads split each bucket's sum in slices (one of them empty for the 512-byte
    // buckets); a batch of 2 leaves the third replica idle, a batch of 16 splits 8 + 4 + 4.
    let data = batches(5, &[16, 2, 16, 5]);
    let (single, _) = train(&mut compiled(false, one()), &data);
    two();
    let mut m = compiled(false, convoy::device::open("software:3").unwrap());
    m.set_device_speeds(&[2.0, 1.0, 1.0]).unwrap();
    assert_eq!(m.device_shares(16), vec![8, 4, 4]);
    assert_eq!(m.device_shares(2).iter().filter(|&&s| s == 0).count(), 1, "{:?}", m.device_shares(2));
    let (parallel, _) = train(&mut m, &data);
    let d = rel_diff(&single, &parallel);
    assert!(d < 1e-4, "relative difference {d:.2e}");
}

/// Trains `m` with `fit` on `data` (one epoch, batch 16, no shuffling) and returns its
/// parameters and moving statistics.
fn fit_one(m: &mut Sequential, data: &[(Vec<u8>, Vec<u32>)]) -> (Vec<f32>, Vec<f32>) {
    for (images, labels) in data {
        m.train_on_batch(images, labels).unwrap();
    }
    m.collect(0).unwrap();
    let (params, states, _) = m.get_weights().unwrap();
    (params, states)
}

#[test]
fn a_replica_left_out_gets_nothing_and_keeps_the_weights_and_statistics_of_one_device() {
    // A device with speed 0 is set aside (no samples, no exchange: the other trains alone),
    // and so is one 1000x slower (under 1/64 of the fastest); either way the replicas end
    // with one device's weights, and the moving statistics (weighted by the samples each
    // replica saw) are the single device's, not diluted by the idle replica's.
    let data = batches(6, &[16, 16, 16, 16, 16]);
    let (single, single_states) = fit_one(&mut compiled(true, one()), &data);
    for speeds in [[1.0, 0.0], [0.0, 1.0], [1.0, 0.001]] {
        let mut m = compiled(true, two());
        m.set_device_speeds(&speeds).unwrap();
        let shares = m.device_shares(16);
        assert_eq!(shares, if speeds[0] == 1.0 { vec![16, 0] } else { vec![0, 16] });
        assert_eq!(m.device_shares(128), if speeds[0] == 1.0 { vec![128, 0] } else { vec![0, 128] });
        let (params, states) = fit_one(&mut m, &data);
        let samples = m.replica_samples();
        assert_eq!(samples.iter().sum::<usize>(), 80);
        assert_eq!(samples.iter().filter(|&&s| s == 0).count(), 1, "{samples:?}");
        let (dp, ds) = (rel_diff(&single, &params), rel_diff(&single_states, &states));
        eprintln!("speeds {speeds:?}: weights {dp:.2e}, moving statistics {ds:.2e} from one device");
        assert!(dp < 1e-5, "weights differ from one device's by {dp:.2e}");
        assert!(ds < 1e-5, "moving statistics differ from one device's by {ds:.2e}");
        // Every replica holds the same weights afterwards, the one set aside included.
        let each = m.replica_weights().unwrap();
        assert_eq!(each[0].0, each[1].0, "the replica set aside did not take the trained weights");
        assert_eq!(each[0].1, each[1].1);
        // It rejoins with them: an even split from here matches one device without BatchNorm.
    }
    let data = batches(7, &[16, 16, 16, 16]);
    let (single, _) = train(&mut compiled(false, one()), &data);
    let mut m = compiled(false, two());
    m.set_device_speeds(&[1.0, 0.0]).unwrap();
    let (_, _) = train(&mut m, &data[..2]);
    m.set_device_speeds(&[1.0, 1.0]).unwrap();
    let (parallel, _) = train(&mut m, &data[2..]);
    assert_eq!(m.replica_samples(), vec![48, 16]);
    let d = rel_diff(&single, &parallel);
    assert!(d < 1e-4, "rejoined replica: relative difference {d:.2e}");

    // 1:20 stays in: only the ratio is known, and it may help.
    let mut m = compiled(true, two());
    m.set_device_speeds(&[1.0, 0.05]).unwrap();
    assert_eq!(m.device_shares(128), vec![112, 16]);
    assert!(m.set_device_speeds(&[0.0, 0.0]).is_err(), "every device left out");
    assert!(m.set_device_speeds(&[1.0, -1.0]).is_err());
}

#[test]
fn fit_decides_the_split_before_training_and_never_runs_slower_than_one_device() {
    // Two replicas on one lavapipe, unfixed: `fit` measures the adapter before its first
    // step; replicas sharing an adapter are kept or left out together, split evenly.
    use convoy::model::FitOptions;
    let mut m = compiled(true, two());
    let b = batches(8, &[64]);
    let data = Arc::new(convoy::data::InMemory::new(b[0].0.clone(), b[0].1.clone(), [6, 6, 3], (0..4).map(|c| c.to_string()).collect(), "test").unwrap());
    assert!(!m.split_decided());
    let h = m.fit(data, FitOptions { epochs: 1, batch_size: 16, verbose: 0, ..Default::default() }).unwrap();
    assert!(m.split_decided());
    let shares = m.device_shares(16);
    eprintln!("fit chose {shares:?}, samples {:?}", m.replica_samples());
    assert_eq!(shares, vec![8, 8]);
    assert_eq!(m.replica_samples().iter().sum::<usize>(), 64);
    assert!(h.history().values().all(|v| v.iter().all(|x| x.is_finite())));
    let each = m.replica_weights().unwrap();
    assert_eq!(each[0].0, each[1].0);
    assert_eq!(each[0].1, each[1].1);
}

#[test]
fn fit_sets_aside_a_device_too_slow_to_help_and_says_so() {
    // Replica 1 made an adapter of its own, 0.3 s slower a step when fit times it: it cannot
    // make a step of a few milliseconds faster, so it gets nothing, there is no exchange, and
    // the run ends as one device's would, the idle replica holding the same weights.
    use convoy::model::FitOptions;
    let b = batches(9, &[64]);
    let data = || Arc::new(convoy::data::InMemory::new(b[0].0.clone(), b[0].1.clone(), [6, 6, 3], (0..4).map(|c| c.to_string()).collect(), "test").unwrap());
    let opts = || FitOptions { epochs: 1, batch_size: 16, verbose: 0, shuffle: false, ..Default::default() };
    let mut single = compiled(true, one());
    single.fit(data(), opts()).unwrap();
    let (p1, s1, _) = single.get_weights().unwrap();
    let mut m = compiled(true, two());
    m.simulate_slow_device(1, 0.3).unwrap();
    m.fit(data(), opts()).unwrap();
    assert_eq!(m.device_shares(16), vec![16, 0]);
    assert_eq!(m.replica_samples(), vec![64, 0]);
    let notes = m.devices_left_out();
    eprintln!("{notes:?}");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("x slower than") && notes[0].ends_with("left out (choose with --devices)"), "{notes:?}");
    let (p2, s2, _) = m.get_weights().unwrap();
    assert!(rel_diff(&p1, &p2) < 1e-5, "weights {:.2e} from one device", rel_diff(&p1, &p2));
    assert!(rel_diff(&s1, &s2) < 1e-5, "moving statistics {:.2e} from one device", rel_diff(&s1, &s2));
    let each = m.replica_weights().unwrap();
    assert_eq!(each[0], each[1]);
}
