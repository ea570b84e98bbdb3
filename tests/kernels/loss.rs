//! Softmax cross-entropy and mean squared error against f64 references: the reference
//! cross-entropy is the textbook log-sum-exp with the row maximum subtracted, its gradient
//! `scale * (softmax - onehot)`, and the rank is counted directly.

use convoy::kernels::loss;
use convoy::DType;
use rand::RngExt;

use crate::common::*;

/// (loss, dlogits, rank) of one row.
pub(crate) fn cross_entropy_ref(row: &[f32], label: usize, scale: f64) -> (f64, Vec<f64>, u32) {
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
    let loss = sum.ln() + m - row[label] as f64;
    let grad = row.iter().enumerate().map(|(k, &v)| scale * ((v as f64 - m).exp() / sum - if k == label { 1.0 } else { 0.0 })).collect();
    let rank = row.iter().filter(|&&v| v > row[label]).count() as u32;
    (loss, grad, rank)
}

/// (loss, dlogits) of one row against Keras' smoothed targets `t = (1 - a) * onehot + a / k`
/// (`keras.losses.CategoricalCrossentropy(label_smoothing=a)` on the one-hot labels):
/// `loss = -Σ_j t_j log softmax(row)_j`, `dlogits = scale * (softmax - t)`, straight from the
/// definition (the log-softmax of every class, not the kernel's rearrangement).
fn smoothed_cross_entropy_ref(row: &[f32], label: usize, scale: f64, a: f64) -> (f64, Vec<f64>) {
    let k = row.len() as f64;
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let lse = row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
    let target = |j: usize| (1.0 - a) * if j == label { 1.0 } else { 0.0 } + a / k;
    let loss = -row.iter().enumerate().map(|(j, &v)| target(j) * (v as f64 - lse)).sum::<f64>();
    let grad = row.iter().enumerate().map(|(j, &v)| scale * ((v as f64 - lse).exp() - target(j))).collect();
    (loss, grad)
}

/// (loss per row, dpred) of mean squared error over rows of `k`.
pub(crate) fn mse_ref(pred: &[f32], target: &[f32], k: usize, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let diff: Vec<f64> = pred.iter().zip(target).map(|(&p, &t)| p as f64 - t as f64).collect();
    let loss = diff.chunks(k).map(|row| row.iter().map(|d| d * d).sum::<f64>() / k as f64).collect();
    let grad = diff.iter().map(|d| scale * 2.0 * d / k as f64).collect();
    (loss, grad)
}

#[test]
fn softmax_cross_entropy_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(21);
        for (n, k, spread) in [(1, 1, 1.0), (3, 1, 80.0), (3, 3, 1.0), (5, 10, 4.0), (3, 10, 80.0), (2, 257, 2.0), (3, 257, 80.0), (1, 1000, 8.0)] {
            let mut logits: Vec<f32> = random(&mut r, n * k).iter().map(|v| v * spread).collect();
            if spread == 80.0 && k > 1 {
                // the extremes themselves, on and off the label
                logits[0] = 80.0;
                logits[1] = -80.0;
            }
            let labels: Vec<u32> = (0..n).map(|_| r.random_range(0..k as u32)).collect();
            let scale = 1.0 / (n as f32 * 2.0);
            let (tl, tlab) = (upload(&logits, &[n, k]), d.upload_u32(&[n], &labels).unwrap());
            let (tloss, tgrad, trank) = (upload(&vec![7.0; n], &[n]), upload(&vec![7.0; n * k], &[n, k]), d.zeros_of(&[n], DType::U32).unwrap());
            run(&[loss::softmax_cross_entropy(&d, &tl, &tlab, scale, &tloss, &tgrad, &trank).unwrap()]);
            let (mut want_loss, mut want_grad, mut want_rank) = (vec![], vec![], vec![]);
            for i in 0..n {
                let (l, g, rk) = cross_entropy_ref(&logits[i * k..(i + 1) * k], labels[i] as usize, scale as f64);
                want_loss.push(l);
                want_grad.extend(g);
                want_rank.push(rk);
            }
            assert_eq!(d.read_u32(&trank).unwrap(), want_rank, "rank n={n} k={k} spread={spread}");
            let e1 = assert_close(&format!("cross-entropy loss n={n} k={k} spread={spread}"), &read(&tloss), &want_loss);
            let e2 = assert_close(&format!("cross-entropy dlogits n={n} k={k} spread={spread}"), &read(&tgrad), &want_grad);
            println!("cross-entropy n={n} k={k} spread={spread}: loss {e1:.1e}, dlogits {e2:.1e}");
        }
    });
}

#[test]
fn label_smoothing_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(24);
        // one class (every target 1), a few, one short of and past a workgroup's 64 lanes,
        // strided rows, extreme logits; a = 1 spreads the target evenly
        for (n, k, spread, a) in [(2, 1, 1.0, 0.1), (3, 7, 4.0, 0.1), (5, 63, 2.0, 0.37), (3, 65, 80.0, 0.2), (2, 257, 8.0, 1.0), (1, 1000, 3.0, 0.05)] {
            let logits: Vec<f32> = random(&mut r, n * k).iter().map(|v| v * spread).collect();
            let labels: Vec<u32> = (0..n).map(|_| r.random_range(0..k as u32)).collect();
            let scale = 1.0 / (n as f32 * 3.0);
            let (tl, tlab) = (upload(&logits, &[n, k]), d.upload_u32(&[n], &labels).unwrap());
            let (tloss, tgrad, trank) = (upload(&vec![7.0; n], &[n]), upload(&vec![7.0; n * k], &[n, k]), d.zeros_of(&[n], DType::U32).unwrap());
            run(&[loss::softmax_cross_entropy_smoothed(&d, &tl, &tlab, scale, a, &tloss, &tgrad, &trank).unwrap()]);
            let (mut want_loss, mut want_grad, mut want_rank) = (vec![], vec![], vec![]);
            for i in 0..n {
                let row = &logits[i * k..(i + 1) * k];
                let (l, g) = smoothed_cross_entropy_ref(row, labels[i] as usize, scale as f64, a as f64);
                want_loss.push(l);
                want_grad.extend(g);
                want_rank.push(cross_entropy_ref(row, labels[i] as usize, 1.0).2);
            }
            assert_eq!(d.read_u32(&trank).unwrap(), want_rank, "smoothing leaves the rank alone: n={n} k={k}");
            let e1 = assert_close(&format!("smoothed loss n={n} k={k} a={a}"), &read(&tloss), &want_loss);
            let e2 = assert_close(&format!("smoothed dlogits n={n} k={k} a={a}"), &read(&tgrad), &want_grad);
            println!("smoothed cross-entropy n={n} k={k} a={a}: loss {e1:.1e}, dlogits {e2:.1e}");
        }
        // Out of [0, 1] is refused, naming the value.
        let (tl, tlab) = (upload(&[0.0; 4], &[1, 4]), d.upload_u32(&[1], &[0]).unwrap());
        let (tloss, tgrad, trank) = (d.zeros(&[1]).unwrap(), d.zeros(&[1, 4]).unwrap(), d.zeros_of(&[1], DType::U32).unwrap());
        for bad in [-0.1f32, 1.5, f32::NAN] {
            let e = loss::softmax_cross_entropy_smoothed(&d, &tl, &tlab, 1.0, bad, &tloss, &tgrad, &trank).unwrap_err().to_string();
            assert!(e.contains("label_smoothing") && e.contains(&bad.to_string()), "{e}");
        }
    });
}

#[test]
fn class_weights_scale_each_rows_loss_and_gradient() {
    // Keras' class_weight: row i's loss and gradient times w[label_i], smoothed or not.
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(25);
        for (n, k, a) in [(3, 1, 0.0), (5, 7, 0.0), (4, 65, 0.2), (3, 257, 0.1)] {
            let logits: Vec<f32> = random(&mut r, n * k).iter().map(|v| v * 4.0).collect();
            let labels: Vec<u32> = (0..n).map(|_| r.random_range(0..k as u32)).collect();
            let weights: Vec<f32> = (0..k).map(|c| [0.0, 0.5, 2.0, 3.25][c % 4]).collect();
            let scale = 1.0 / n as f32;
            let (tl, tlab, tw) = (upload(&logits, &[n, k]), d.upload_u32(&[n], &labels).unwrap(), upload(&weights, &[k]));
            let (tloss, tgrad, trank) = (upload(&vec![7.0; n], &[n]), upload(&vec![7.0; n * k], &[n, k]), d.zeros_of(&[n], DType::U32).unwrap());
            run(&[loss::softmax_cross_entropy_weighted(&d, &tl, &tlab, Some(&tw), scale, a, &tloss, &tgrad, &trank).unwrap()]);
            let (mut want_loss, mut want_grad) = (vec![], vec![]);
            for i in 0..n {
                let w = weights[labels[i] as usize] as f64;
                let (l, g) = smoothed_cross_entropy_ref(&logits[i * k..(i + 1) * k], labels[i] as usize, scale as f64, a as f64);
                want_loss.push(w * l);
                want_grad.extend(g.iter().map(|g| w * g));
            }
            let (got_loss, got_grad) = (read(&tloss), read(&tgrad));
            // a weight of 0 gives exact zeros: max-norm error over the rest
            assert_close(&format!("weighted loss n={n} k={k} a={a}"), &got_loss, &want_loss);
            assert_close(&format!("weighted dlogits n={n} k={k} a={a}"), &got_grad, &want_grad);
        }
        let (tl, tlab) = (upload(&[0.0; 8], &[2, 4]), d.upload_u32(&[2], &[0, 1]).unwrap());
        let (tloss, tgrad, trank) = (d.zeros(&[2]).unwrap(), d.zeros(&[2, 4]).unwrap(), d.zeros_of(&[2], DType::U32).unwrap());
        let e = loss::softmax_cross_entropy_weighted(&d, &tl, &tlab, Some(&upload(&[1.0; 3], &[3])), 1.0, 0.0, &tloss, &tgrad, &trank).unwrap_err().to_string();
        assert!(e.contains("class_weights"), "{e}");
    });
}

#[test]
fn rank_counts_only_strictly_greater_logits() {
    on_each_variant(|_| {
        let d = device();
        // rows: label ties with two others (rank 0), label below three (rank 3), label is the sole max
        let logits = [1.0, 2.0, 2.0, 2.0, 0.5, 3.0, 3.0, 1.0, 0.5, 2.9, 0.0, 0.0, 5.0, 0.0, 0.0];
        let labels = [1u32, 2, 2];
        let (tl, tlab) = (upload(&logits, &[3, 5]), d.upload_u32(&[3], &labels).unwrap());
        let (tloss, tgrad, trank) = (d.zeros(&[3]).unwrap(), d.zeros(&[3, 5]).unwrap(), d.zeros_of(&[3], DType::U32).unwrap());
        run(&[loss::softmax_cross_entropy(&d, &tl, &tlab, 1.0, &tloss, &tgrad, &trank).unwrap()]);
        assert_eq!(d.read_u32(&trank).unwrap(), vec![0, 3, 0]);
    });
}

#[test]
fn out_of_range_label_gives_nan_loss_without_reading_out_of_bounds() {
    on_each_variant(|_| {
        let d = device();
        let (n, k) = (3, 4);
        let logits = random(&mut rng(22), n * k);
        let labels = [2u32, 4, u32::MAX];
        let (tl, tlab) = (upload(&logits, &[n, k]), d.upload_u32(&[n], &labels).unwrap());
        let (tloss, tgrad, trank) = (d.zeros(&[n]).unwrap(), d.zeros(&[n, k]).unwrap(), d.zeros_of(&[n], DType::U32).unwrap());
        run(&[loss::softmax_cross_entropy(&d, &tl, &tlab, 1.0, &tloss, &tgrad, &trank).unwrap()]);
        let got = read(&tloss);
        let (want, _, _) = cross_entropy_ref(&logits[..k], 2, 1.0);
        assert!((got[0] as f64 - want).abs() < 1e-5 * want.abs().max(1.0), "valid row {} vs {want}", got[0]);
        assert!(got[1].is_nan() && got[2].is_nan(), "bad labels give NaN, got {got:?}");
        assert_eq!(d.read_u32(&trank).unwrap()[1..], [k as u32, k as u32]);
        assert!(read(&tgrad).iter().all(|g| g.is_finite()), "gradients stay finite");
    });
}

#[test]
fn mean_squared_error_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(23);
        for (n, k) in [(1, 1), (3, 5), (3, 17), (2, 130)] {
            let (pred, target) = (random(&mut r, n * k), random(&mut r, n * k));
            let scale = 1.0 / n as f32;
            let (tp, tt) = (upload(&pred, &[n, k]), upload(&target, &[n, k]));
            let (tloss, tgrad) = (upload(&vec![7.0; n], &[n]), upload(&vec![7.0; n * k], &[n, k]));
            run(&[loss::mean_squared_error(&d, &tp, &tt, scale, &tloss, &tgrad).unwrap()]);
            let (want_loss, want_grad) = mse_ref(&pred, &target, k, scale as f64);
            let e1 = assert_close(&format!("mse loss n={n} k={k}"), &read(&tloss), &want_loss);
            let e2 = assert_close(&format!("mse dpred n={n} k={k}"), &read(&tgrad), &want_grad);
            println!("mse n={n} k={k}: loss {e1:.1e}, dpred {e2:.1e}");
        }
    });
}

#[test]
fn class_weights_scale_each_mean_squared_error_row() {
    // Keras' class_weight under mean squared error: the targets are the label's one-hot, its
    // class the label, so row i's loss and gradient are times w[label_i]. Rows of one pass
    // and of lanes striding over the row, weighted and not (coverage of both).
    take_paths();
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(26);
        for (n, k) in [(1, 1), (5, 7), (4, 65), (3, 257)] {
            let pred = random(&mut r, n * k);
            let labels: Vec<u32> = (0..n).map(|_| r.random_range(0..k as u32)).collect();
            let target: Vec<f32> = (0..n * k).map(|i| if i % k == labels[i / k] as usize { 1.0 } else { 0.0 }).collect();
            let weights: Vec<f32> = (0..k).map(|c| [0.0, 0.5, 2.0, 3.25][c % 4]).collect();
            let scale = 1.0 / n as f32;
            let (tp, tt, tlab, tw) = (upload(&pred, &[n, k]), upload(&target, &[n, k]), d.upload_u32(&[n], &labels).unwrap(), upload(&weights, &[k]));
            let (tloss, tgrad) = (upload(&vec![7.0; n], &[n]), upload(&vec![7.0; n * k], &[n, k]));
            run(&[loss::mean_squared_error_weighted(&d, &tp, &tt, &tlab, &tw, scale, &tloss, &tgrad).unwrap()]);
            let (loss, grad) = mse_ref(&pred, &target, k, scale as f64);
            let w = |row: usize| weights[labels[row] as usize] as f64;
            let want_loss: Vec<f64> = loss.iter().enumerate().map(|(i, l)| w(i) * l).collect();
            let want_grad: Vec<f64> = grad.iter().enumerate().map(|(i, g)| w(i / k) * g).collect();
            assert_close(&format!("weighted mse loss n={n} k={k}"), &read(&tloss), &want_loss);
            assert_close(&format!("weighted mse dpred n={n} k={k}"), &read(&tgrad), &want_grad);
            run(&[loss::mean_squared_error(&d, &tp, &tt, scale, &tloss, &tgrad).unwrap()]);
            assert_close(&format!("unweighted mse loss n={n} k={k}"), &read(&tloss), &loss);
        }
        let (tp, tlab) = (d.zeros(&[2, 4]).unwrap(), d.upload_u32(&[2], &[0, 1]).unwrap());
        let (tloss, tgrad, tt) = (d.zeros(&[2]).unwrap(), d.zeros(&[2, 4]).unwrap(), d.zeros(&[2, 4]).unwrap());
        let e = loss::mean_squared_error_weighted(&d, &tp, &tt, &tlab, &upload(&[1.0; 3], &[3]), 1.0, &tloss, &tgrad).unwrap_err().to_string();
        assert!(e.contains("class_weights") && e.contains("[3]"), "{e}");
        let e = loss::mean_squared_error_weighted(&d, &tp, &tt, &d.upload_u32(&[3], &[0, 1, 2]).unwrap(), &upload(&[1.0; 4], &[4]), 1.0, &tloss, &tgrad).unwrap_err().to_string();
        assert!(e.contains("labels"), "{e}");
    });
    let weighted = ["weighted=yes", "weighted=no", "classes=one_pass", "classes=strided"].map(|t| ("mean_squared_error", t.to_string()));
    assert_paths_cover("weighted mse", &take_paths(), &weighted, &[]);
}

#[test]
fn bad_shapes_are_errors() {
    let d = device();
    let logits = d.zeros(&[3, 10]).unwrap();
    let labels = d.zeros_of(&[3], DType::U32).unwrap();
    let (l, g, rk) = (d.zeros(&[3]).unwrap(), d.zeros(&[3, 10]).unwrap(), d.zeros_of(&[3], DType::U32).unwrap());
    assert!(loss::softmax_cross_entropy(&d, &logits, &labels, 1.0, &l, &g, &rk).is_ok());
    let e = loss::softmax_cross_entropy(&d, &logits, &d.zeros_of(&[4], DType::U32).unwrap(), 1.0, &l, &g, &rk).unwrap_err().to_string();
    assert!(e.contains("[4]") && e.contains("[3]"), "names the shapes: {e}");
    assert!(loss::softmax_cross_entropy(&d, &d.zeros(&[30]).unwrap(), &labels, 1.0, &l, &g, &rk).is_err(), "1-d logits");
    assert!(loss::softmax_cross_entropy(&d, &d.zeros(&[3, 0]).unwrap(), &labels, 1.0, &l, &d.zeros(&[3, 0]).unwrap(), &rk).is_err(), "no classes");
    assert!(loss::softmax_cross_entropy(&d, &logits, &l, 1.0, &l, &g, &rk).is_err(), "f32 labels");
    assert!(loss::softmax_cross_entropy(&d, &logits, &labels, 1.0, &l, &d.zeros(&[3, 9]).unwrap(), &rk).is_err(), "dlogits shape");
    assert!(loss::softmax_cross_entropy(&d, &logits, &labels, 1.0, &l, &logits, &rk).is_err(), "in-place dlogits");
    assert!(loss::mean_squared_error(&d, &logits, &d.zeros(&[3, 9]).unwrap(), 1.0, &l, &g).is_err(), "target shape");
    assert!(loss::mean_squared_error(&d, &logits, &g, 1.0, &d.zeros(&[3, 1]).unwrap(), &g).is_err(), "loss shape");
}
