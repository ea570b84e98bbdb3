//! BatchNormalization (training and inference forward, backward, fused ReLU) against an f64
//! reference: two-pass batch statistics, biased variance, Keras' moving-average update; with
//! the activations, and their gradients with them, stored as f32 and as f16.

use std::collections::BTreeSet;

use convoy::kernels::batchnorm::{self, BatchNormConfig};
use convoy::kernels::conv2d::{self, Conv2dGeometry, InputNorm, Padding};
use convoy::kernels::gemm::GemmOptions;
use convoy::kernels::gemm::Engine;
use convoy::{DType, Tensor};
use rand::rngs::StdRng;
use rand::RngExt;

use crate::common::*;

// Channel counts divisible by 4 (12, 8, 64) take the tiled passes four channels at a time
// (the first passes of the reductions too), and the CPU kernels (the others run the tiled
// ones under either engine).
const SHAPES: &[&[usize]] = &[&[1, 1, 1, 3], &[2, 5, 7, 5], &[3, 9, 9, 17], &[4, 33], &[3, 1, 3, 12], &[7, 8], &[2, 3, 3, 64]];

/// Inputs of one case: x is `offset[c] + scale[c] * u` per channel, so means sit away from
/// zero and channels differ.
pub(crate) struct Case {
    shape: Vec<usize>,
    c: usize,
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    moving_mean: Vec<f32>,
    moving_var: Vec<f32>,
    /// x, y, dy and dx are f16 tensors (`x` then holds f16 values, which the references read
    /// as they are).
    f16: bool,
}

impl Case {
    /// x as the kernels get it, in the case's storage.
    fn upload_x(&self) -> Tensor {
        if self.f16 { device().upload_f16(&self.shape, &self.x).unwrap() } else { upload(&self.x, &self.shape) }
    }

    /// A y or dx holding stale values, in the case's storage.
    fn stale_act(&self) -> Tensor {
        if self.f16 { device().upload_f16(&self.shape, &vec![-3.0; self.x.len()]).unwrap() } else { stale(&self.shape) }
    }

    /// An upstream gradient as the kernels get it: rounded to f16 where the activations are
    /// f16 (a gradient is stored as its activation), with the values the tensor holds, which
    /// the references read.
    fn upload_dy(&self, dy: &[f32]) -> (Tensor, Vec<f32>) {
        if !self.f16 {
            return (upload(dy, &self.shape), dy.to_vec());
        }
        let rounded: Vec<f32> = dy.iter().map(|&v| to_half(v)).collect();
        (upload_f16(&rounded, &self.shape), rounded)
    }
}

pub(crate) fn case(r: &mut StdRng, shape: &[usize], offset: f32) -> Case {
    let c = *shape.last().unwrap();
    let n: usize = shape.iter().product();
    let offsets: Vec<f32> = (0..c).map(|_| offset + r.random_range(-2.0f32..2.0)).collect();
    let scales: Vec<f32> = (0..c).map(|_| r.random_range(0.3f32..2.0)).collect();
    let u = random(r, n);
    let x = u.iter().enumerate().map(|(i, v)| offsets[i % c] + scales[i % c] * v).collect();
    Case {
        shape: shape.to_vec(),
        c,
        x,
        gamma: (0..c).map(|_| r.random_range(0.5f32..1.5) * if r.random_bool(0.2) { -1.0 } else { 1.0 }).collect(),
        beta: random(r, c),
        moving_mean: random(r, c),
        moving_var: (0..c).map(|_| r.random_range(0.5f32..2.0)).collect(),
        f16: false,
    }
}

/// [`case`] with x and y stored as f16: x rounded to f16 on the host, as `upload_f16` does.
pub(crate) fn case_f16(r: &mut StdRng, shape: &[usize], offset: f32) -> Case {
    let k = case(r, shape, offset);
    Case { x: k.x.iter().map(|&v| to_half(v)).collect(), f16: true, ..k }
}

/// An activation read back, f16 widened exactly.
fn read_act(t: &Tensor) -> Vec<f32> {
    if t.dtype() == DType::F16 { device().read_f16(t).unwrap() } else { read(t) }
}

/// Checks a y or a dx against f64 and returns its relative error: within [`TOL`] stored as
/// f32; stored as f16, within one f16 rounding (2^-11 relative, 2^-25 absolute below 2^-14)
/// of a value within [`TOL`].
#[track_caller]
fn assert_act_close(case: &str, t: &Tensor, want: &[f64]) -> f64 {
    if t.dtype() != DType::F16 {
        return assert_close(case, &read(t), want);
    }
    let got = read_act(t);
    assert!(got.iter().all(|g| g.is_finite()), "{case}: non-finite output");
    let half_ulp = 2f64.powi(-11);
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let bound = half_ulp * w.abs() + (1.0 + half_ulp) * TOL * scale + 2f64.powi(-25);
        assert!((*g as f64 - w).abs() <= bound, "{case}: element {i} = {g} is {:.3e} from {w}, past one f16 rounding ({bound:.3e})", (*g as f64 - w).abs());
    }
    rel_err(&got, want)
}

/// f64 two-pass mean and biased variance per channel.
fn stats(x: &[f32], c: usize) -> (Vec<f64>, Vec<f64>) {
    let rows = (x.len() / c) as f64;
    let mut mean = vec![0.0; c];
    for (i, v) in x.iter().enumerate() {
        mean[i % c] += *v as f64 / rows;
    }
    let mut var = vec![0.0; c];
    for (i, v) in x.iter().enumerate() {
        var[i % c] += (*v as f64 - mean[i % c]).powi(2) / rows;
    }
    (mean, var)
}

fn normalize(k: &Case, mean: &[f64], inv_std: &[f64], relu: bool) -> Vec<f64> {
    k.x.iter()
        .enumerate()
        .map(|(i, v)| {
            let c = i % k.c;
            let y = k.gamma[c] as f64 * (*v as f64 - mean[c]) * inv_std[c] + k.beta[c] as f64;
            if relu { y.max(0.0) } else { y }
        })
        .collect()
}

/// f64 backward: returns (dx, dgamma, dbeta); `y` is the forward output the ReLU mask reads.
fn backward_ref(k: &Case, y: &[f32], dy: &[f32], relu: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mean, var) = stats(&k.x, k.c);
    let eps = BatchNormConfig::default().epsilon as f64;
    let inv: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
    let m = (k.x.len() / k.c) as f64;
    let g: Vec<f64> = dy.iter().zip(y).map(|(g, y)| if relu && *y <= 0.0 { 0.0 } else { *g as f64 }).collect();
    let x_hat: Vec<f64> = k.x.iter().enumerate().map(|(i, v)| (*v as f64 - mean[i % k.c]) * inv[i % k.c]).collect();
    let (mut dgamma, mut dbeta) = (vec![0.0; k.c], vec![0.0; k.c]);
    for i in 0..g.len() {
        dbeta[i % k.c] += g[i];
        dgamma[i % k.c] += g[i] * x_hat[i];
    }
    let dx = (0..g.len())
        .map(|i| {
            let c = i % k.c;
            k.gamma[c] as f64 * inv[c] / m * (m * g[i] - dbeta[c] - x_hat[i] * dgamma[c])
        })
        .collect();
    (dx, dgamma, dbeta)
}

/// gamma, beta, moving_mean, moving_var as 256-byte-aligned views of one buffer, the way a
/// model lays its parameters out.
fn parameters(k: &Case) -> [Tensor; 4] {
    let stride = k.c.div_ceil(64) * 64;
    let mut flat = vec![0.0f32; 4 * stride];
    for (j, v) in [&k.gamma, &k.beta, &k.moving_mean, &k.moving_var].iter().enumerate() {
        flat[j * stride..j * stride + k.c].copy_from_slice(v);
    }
    let all = upload(&flat, &[4 * stride]);
    [0, 1, 2, 3].map(|j| all.view(j * stride, &[k.c]).unwrap())
}

/// Stale values in outputs must be overwritten, never accumulated into.
fn stale(shape: &[usize]) -> Tensor {
    upload(&vec![-3.0; shape.iter().product()], shape)
}

pub(crate) struct TrainOut {
    y: Tensor,
    saved: Tensor,
    params: [Tensor; 4],
    x: Tensor,
}

pub(crate) fn train(k: &Case, cfg: &BatchNormConfig) -> (TrainOut, Vec<convoy::kernels::Dispatch>) {
    let d = device();
    let params = parameters(k);
    let [gamma, beta, mm, mv] = &params;
    let (x, y, saved) = (k.upload_x(), k.stale_act(), stale(&[2, k.c]));
    let dispatches = batchnorm::forward_train(&d, cfg, &x, gamma, beta, mm, mv, &saved, &y).unwrap();
    (TrainOut { y, saved, params, x }, dispatches)
}

/// Checks the training forward's outputs against f64; returns the worst relative error.
pub(crate) fn check_train(name: &str, k: &Case, cfg: &BatchNormConfig, out: &TrainOut) -> f64 {
    let (mean, var) = stats(&k.x, k.c);
    let inv: Vec<f64> = var.iter().map(|v| 1.0 / (v + cfg.epsilon as f64).sqrt()).collect();
    let saved = read(&out.saved);
    let mom = cfg.momentum as f64;
    let new_mm: Vec<f64> = k.moving_mean.iter().zip(&mean).map(|(o, b)| mom * *o as f64 + (1.0 - mom) * b).collect();
    let new_mv: Vec<f64> = k.moving_var.iter().zip(&var).map(|(o, b)| mom * *o as f64 + (1.0 - mom) * b).collect();
    [
        assert_act_close(&format!("{name}: y"), &out.y, &normalize(k, &mean, &inv, cfg.relu)),
        assert_close(&format!("{name}: saved mean"), &saved[..k.c], &mean),
        assert_close(&format!("{name}: saved inv_std"), &saved[k.c..], &inv),
        assert_close(&format!("{name}: moving_mean"), &read(&out.params[2]), &new_mm),
        assert_close(&format!("{name}: moving_var"), &read(&out.params[3]), &new_mv),
    ]
    .into_iter()
    .fold(0.0, f64::max)
}

#[test]
fn train_forward_matches_f64() {
    on_each_variant(|_| {
        let mut r = rng(31);
        for shape in SHAPES {
            for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
                let k = case(&mut r, shape, 0.0);
                let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(engine), ..Default::default() };
                let (out, dispatches) = train(&k, &cfg);
                let label = match (k.c.is_multiple_of(4), engine) {
                    (false, _) => "normalize_train",
                    (true, Engine::Tiled) => "normalize_train4",
                    (true, Engine::Cpu) => "normalize_train_cpu",
                };
                assert_eq!(dispatches.last().unwrap().label, label, "{shape:?} {engine:?}");
                run(&dispatches);
                let e = check_train(&format!("train {shape:?} relu={relu} {engine:?}"), &k, &cfg, &out);
                println!("train forward {shape:?} relu={relu} {engine:?}: rel err {e:.2e}");
            }
        }
    });
}

/// Runs the inference forward of one case and checks it against f64 (the moving statistics
/// must be left alone); returns the relative error.
pub(crate) fn check_infer(name: &str, k: &Case, cfg: &BatchNormConfig) -> f64 {
    let d = device();
    let [gamma, beta, mm, mv] = &parameters(k);
    let (x, y) = (k.upload_x(), k.stale_act());
    run(&batchnorm::forward_infer(&d, cfg, &x, gamma, beta, mm, mv, &y).unwrap());
    let mean: Vec<f64> = k.moving_mean.iter().map(|v| *v as f64).collect();
    let inv: Vec<f64> = k.moving_var.iter().map(|v| 1.0 / (*v as f64 + cfg.epsilon as f64).sqrt()).collect();
    let e = assert_act_close(&format!("{name}: infer y"), &y, &normalize(k, &mean, &inv, cfg.relu));
    assert!(read(mm) == k.moving_mean && read(mv) == k.moving_var, "{name}: inference changed the moving statistics");
    e
}

#[test]
fn inference_forward_matches_f64() {
    on_each_variant(|_| {
        let mut r = rng(32);
        for shape in SHAPES {
            for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
                let k = case(&mut r, shape, 0.0);
                let e = check_infer(&format!("infer {shape:?} relu={relu} {engine:?}"), &k, &BatchNormConfig { relu, engine: Some(engine), ..Default::default() });
                println!("inference forward {shape:?} relu={relu} {engine:?}: rel err {e:.2e}");
            }
        }
    });
}

/// The joined forwards (a residual block's last BatchNorm writing the block's output):
/// `relu?(normalize(x) + addend)` against f64, training and inference, f32 and f16 storage,
/// both engines, with the addend stored as the activations (its f16 values what the
/// reference reads); the pass each engine runs is named, and channels not divisible by 4 are
/// refused.
#[test]
fn joined_forwards_match_f64() {
    on_each_variant(|_| {
        let mut r = rng(39);
        let d = device();
        let mut refused = 0;
        for shape in [&[3, 1, 3, 12][..], &[2, 3, 3, 64], &[250, 7, 7, 8], &[5, 4], &[5, 6]] {
            for (f16, relu, engine) in [false, true].into_iter().flat_map(|f| [false, true].into_iter().flat_map(move |relu| Engine::ALL.map(|e| (f, relu, e)))) {
                let k = if f16 { case_f16(&mut r, shape, 0.5) } else { case(&mut r, shape, 0.5) };
                let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(engine), ..Default::default() };
                let (addend, added) = k.upload_dy(&random(&mut r, k.x.len()));
                let params = parameters(&k);
                let [gamma, beta, mm, mv] = &params;
                let (x, y, saved) = (k.upload_x(), k.stale_act(), stale(&[2, k.c]));
                let name = format!("joined {shape:?} f16={f16} relu={relu} {engine:?}");
                let join = |y: Vec<f64>| -> Vec<f64> { y.iter().zip(&added).map(|(y, a)| if relu { (y + *a as f64).max(0.0) } else { y + *a as f64 }).collect() };
                let train = batchnorm::forward_train_joined(&d, &cfg, &x, &addend, gamma, beta, mm, mv, &saved, &y);
                if !k.c.is_multiple_of(4) {
                    let err = train.unwrap_err().to_string();
                    let quads = if f16 { "multiple of 4" } else { "divisible by 4" };
                    assert!(err.contains(quads) && err.contains("forward_train_joined"), "{name}: {err}");
                    refused += 1;
                    continue;
                }
                let dispatches = train.unwrap();
                let label = if engine == Engine::Tiled { "normalize_train_joined4" } else { "normalize_train_joined_cpu" };
                let last = dispatches.last().unwrap();
                assert_eq!((last.label, last.kernel.trim_end_matches("_cpu")), (label, "normalize_train_joined"), "{name}");
                run(&dispatches);
                let (mean, var) = stats(&k.x, k.c);
                let inv: Vec<f64> = var.iter().map(|v| 1.0 / (v + cfg.epsilon as f64).sqrt()).collect();
                let e = assert_act_close(&format!("{name}: train y"), &y, &join(normalize(&k, &mean, &inv, false)));
                // Inference, on the moving statistics the training pass just left.
                let (moving_mean, moving_var) = (read(mm), read(mv));
                let y = k.stale_act();
                run(&batchnorm::forward_infer_joined(&d, &cfg, &x, &addend, gamma, beta, mm, mv, &y).unwrap());
                let mean: Vec<f64> = moving_mean.iter().map(|v| *v as f64).collect();
                let inv: Vec<f64> = moving_var.iter().map(|v| 1.0 / (*v as f64 + cfg.epsilon as f64).sqrt()).collect();
                let e = e.max(assert_act_close(&format!("{name}: infer y"), &y, &join(normalize(&k, &mean, &inv, false))));
                println!("{name}: rel err {e:.2e}");
            }
        }
        assert_eq!(refused, 8);
        // The addend must be stored as x and y are.
        let k = case(&mut r, &[4, 8], 0.0);
        let [gamma, beta, mm, mv] = &parameters(&k);
        let half = upload_f16(&[0.0; 32], &[4, 8]);
        let err = batchnorm::forward_infer_joined(&d, &BatchNormConfig::default(), &k.upload_x(), &half, gamma, beta, mm, mv, &stale(&[4, 8])).unwrap_err().to_string();
        assert!(err.contains("addend"), "{err}");
    });
}

/// Runs the inference forward then its backward (a frozen layer's training step) and checks
/// dx against f64: `dy * gamma / sqrt(moving_var + eps)`, masked by the fused ReLU's output.
/// dy and dx are stored as the case's activations. The moving statistics must be left alone.
/// Returns the relative error.
pub(crate) fn check_infer_backward(name: &str, k: &Case, cfg: &BatchNormConfig, dy: &[f32]) -> f64 {
    let d = device();
    let [gamma, beta, mm, mv] = &parameters(k);
    let (x, y, (tdy, dy), dx) = (k.upload_x(), k.stale_act(), k.upload_dy(dy), k.stale_act());
    let mut dispatches = batchnorm::forward_infer(&d, cfg, &x, gamma, beta, mm, mv, &y).unwrap();
    dispatches.extend(batchnorm::backward_infer(&d, cfg, &y, &tdy, gamma, mv, &dx).unwrap());
    run(&dispatches);
    let y = read_act(&y);
    let want: Vec<f64> = dy
        .iter()
        .zip(&y)
        .enumerate()
        .map(|(i, (g, y))| {
            let c = i % k.c;
            let g = if cfg.relu && *y <= 0.0 { 0.0 } else { *g as f64 };
            g * k.gamma[c] as f64 / (k.moving_var[c] as f64 + cfg.epsilon as f64).sqrt()
        })
        .collect();
    let e = assert_act_close(&format!("{name}: inference dx"), &dx, &want);
    assert!(read(mm) == k.moving_mean && read(mv) == k.moving_var, "{name}: the inference backward changed the moving statistics");
    e
}

#[test]
fn inference_backward_matches_f64() {
    on_each_variant(|_| {
        let mut r = rng(37);
        // Every shape, a single row included: nothing cancels here.
        for shape in SHAPES {
            for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
                let k = case(&mut r, shape, 0.0);
                let dy = random(&mut r, k.x.len());
                let cfg = BatchNormConfig { relu, engine: Some(engine), ..Default::default() };
                let e = check_infer_backward(&format!("inference backward {shape:?} relu={relu} {engine:?}"), &k, &cfg, &dy);
                println!("inference backward {shape:?} relu={relu} {engine:?}: rel err {e:.2e}");
            }
        }
    });
}

/// Runs forward_train then backward, dy and dx stored as the case's activations; checks dx,
/// dgamma and dbeta. Returns the worst error.
pub(crate) fn check_backward(name: &str, k: &Case, cfg: &BatchNormConfig, dy: &[f32]) -> f64 {
    let d = device();
    let (out, mut dispatches) = train(k, cfg);
    let ((tdy, dy), dx, dgamma, dbeta) = (k.upload_dy(dy), k.stale_act(), stale(&[k.c]), stale(&[k.c]));
    dispatches.extend(batchnorm::backward(&d, cfg, &out.x, &tdy, &out.params[0], &out.params[1], &out.saved, &dx, &dgamma, &dbeta).unwrap());
    run(&dispatches);
    let (want_dx, want_dgamma, want_dbeta) = backward_ref(k, &read_act(&out.y), &dy, cfg.relu);
    [
        assert_act_close(&format!("{name}: dx"), &dx, &want_dx),
        assert_close(&format!("{name}: dgamma"), &read(&dgamma), &want_dgamma),
        assert_close(&format!("{name}: dbeta"), &read(&dbeta), &want_dbeta),
    ]
    .into_iter()
    .fold(0.0, f64::max)
}

#[test]
fn backward_matches_f64() {
    on_each_variant(|_| {
        let mut r = rng(33);
        // A single row has dx = 0 exactly (every x equals its mean); the robustness tests cover it.
        for shape in SHAPES.iter().filter(|s| s[..s.len() - 1].iter().product::<usize>() > 1) {
            for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
                let k = case(&mut r, shape, 0.0);
                let dy = random(&mut r, k.x.len());
                let cfg = BatchNormConfig { relu, engine: Some(engine), ..Default::default() };
                let e = check_backward(&format!("backward {shape:?} relu={relu} {engine:?}"), &k, &cfg, &dy);
                println!("backward {shape:?} relu={relu} {engine:?}: rel err {e:.2e}");
            }
        }
    });
}

// The first passes' scalar and quad forms on the tiled engine: quad tiles partly past the
// channels (12 in a tile of 4 quads, 100 in two of 16, 2052 in 33 of 16, the last holding
// one), rows that fill neither the four-row steps nor the lanes (3; 250·7·7 = 12,250 in
// chunks of 256 rows for 64 lanes or of 64 for 16, the last of 218 or 26; 98 in two chunks
// of 49, a four-row step for the first of 16 lanes alone), and 70,000 rows in 274 chunks.
// The scalar shapes (channels not a multiple of 4) are f32 alone: f16 activations need
// quads.
const QUAD_SHAPES: &[&[usize]] = &[&[3, 12], &[250, 7, 7, 12], &[7, 100, 100, 12], &[3, 100], &[250, 7, 7, 100], &[3, 2052], &[2, 7, 7, 2052]];
const SCALAR_SHAPES: &[&[usize]] = &[&[3, 13], &[250, 7, 7, 13], &[250, 7, 7, 101], &[2, 7, 7, 2051]];

#[test]
fn partial_passes_match_f64_scalar_and_quad() {
    take_paths();
    on_each_variant(|variant| {
        let mut r = rng(41);
        let cases = QUAD_SHAPES.iter().flat_map(|s| [(s, false), (s, true)]).chain(SCALAR_SHAPES.iter().map(|s| (s, false)));
        // The quad passes merging in their last workgroups (the device's choice here) and not.
        let cases = cases.flat_map(|c| [(c, None), (c, Some(false))]);
        for (((shape, f16), merge_last), relu) in cases.flat_map(|c| [(c, false), (c, true)]) {
            let name = format!("{variant} partial passes {shape:?} f16={f16} relu={relu} merge_last={merge_last:?}");
            let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(Engine::Tiled), merge_last, ..Default::default() };
            let k = if f16 { case_f16(&mut r, shape, 0.0) } else { case(&mut r, shape, 0.0) };
            let (out, dispatches) = train(&k, &cfg);
            let first = match (k.c.is_multiple_of(4), merge_last) {
                (false, _) => "stats_partial",
                (true, None) => default_quad_passes().0[0],
                (true, Some(_)) => "stats_partial4",
            };
            assert_eq!(dispatches[0].label, first, "{name}");
            run(&dispatches);
            let e = check_train(&name, &k, &cfg, &out);
            println!("train forward {name}: rel err {e:.2e}");
            let e = check_backward(&name, &k, &cfg, &random(&mut r, k.x.len()));
            println!("backward {name}: rel err {e:.2e}");
        }
    });
    let taken = take_paths();
    let partial_tokens = ["chunks=single", "chunks=multi", "rows=x4", "rows=x1", "cols=one_tile", "cols=tiled"];
    let merged = merged_passes();
    let quads = [&["stats_partial4", "backward_partial4"], merged].concat();
    let mut expected = every(&quads, &partial_tokens);
    expected.extend(every(&quads, &["vec4", "store=f32", "store=f16"]));
    expected.extend(every(merged, &["merge=last", "merge_loads=x4", "merge_loads=x1"]));
    expected.extend(every(&["stats_partial", "backward_partial"], &partial_tokens));
    expected.extend(every(&["stats_partial", "backward_partial"], &["scalar", "store=f32"]));
    expected.extend(every(&["stats_finalize", "backward_merge"], &["chunks=single", "chunks=multi"]));
    assert_paths_cover("batchnorm partial passes", &taken, &expected, &[]);
    let mut expected = every(&quads, &partial_tokens);
    expected.extend(every(merged, &["merge_loads=x4", "merge_loads=x1"]));
    expected.extend(every(&["stats_finalize", "backward_merge"], &["chunks=single", "chunks=multi"]));
    assert_paths_cover("batchnorm partial passes f16", &on_f16(taken), &expected, &[]);
}

#[test]
fn many_rows_are_merged_across_workgroups_and_stay_stable() {
    // 70,000 rows with means near 100 and unit spread: E[x²] − E[x]² in f32 would lose
    // about four digits here; the Welford/Chan merge must not. Three channels run the tiled
    // scalar kernels, four the tiled quad ones or the CPU ones.
    let d = device();
    let mut r = rng(34);
    for (channels, engine) in [(3, Engine::Tiled), (4, Engine::Tiled), (4, Engine::Cpu)] {
        let k = case(&mut r, &[7, 100, 100, channels], 100.0);
        let cfg = BatchNormConfig { momentum: 0.6, relu: true, engine: Some(engine), ..Default::default() };
        let (out, dispatches) = train(&k, &cfg);
        assert!(dispatches[0].path_tokens().any(|t| t == "chunks=multi"), "statistics ran in one chunk: {}", dispatches[0].path);
        assert_eq!(dispatches[0].label.ends_with("_cpu"), engine == Engine::Cpu, "{engine:?}: {}", dispatches[0].path);
        run(&dispatches);
        let e = check_train(&format!("70,000 x {channels} {engine:?}"), &k, &cfg, &out);
        println!("train forward 70,000 x {channels} relu {engine:?}: rel err {e:.2e}");
        let dy = random(&mut r, k.x.len());
        let e = check_backward(&format!("70,000 x {channels} {engine:?}"), &k, &cfg, &dy);
        println!("backward 70,000 x {channels} relu {engine:?}: rel err {e:.2e}");
    }
    drop(d);
}

/// Runs forward_train and backward and returns (y, saved, moving_mean, moving_var, dx, dgamma, dbeta).
fn step(k: &Case, cfg: &BatchNormConfig, dy: &[f32]) -> [Vec<f32>; 7] {
    let d = device();
    let (out, mut dispatches) = train(k, cfg);
    let (tdy, dx, dgamma, dbeta) = (upload(dy, &k.shape), stale(&k.shape), stale(&[k.c]), stale(&[k.c]));
    dispatches.extend(batchnorm::backward(&d, cfg, &out.x, &tdy, &out.params[0], &out.params[1], &out.saved, &dx, &dgamma, &dbeta).unwrap());
    run(&dispatches);
    [&out.y, &out.saved, &out.params[2], &out.params[3], &dx, &dgamma, &dbeta].map(read)
}

fn assert_finite(case: &str, named: &[(&str, &Vec<f32>)]) {
    for (name, v) in named {
        assert!(v.iter().all(|x| x.is_finite()), "{case}: {name} is not finite: {v:?}");
    }
}

#[test]
fn a_batch_of_one_pixel_is_finite() {
    on_each_variant(|_| {
        // Variance 0 over a single row: y = beta, the gradient flows only to beta.
        let mut r = rng(35);
        for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
            let k = case(&mut r, &[1, 1, 1, 8], 0.0);
            let dy = random(&mut r, 8);
            let cfg = BatchNormConfig { relu, engine: Some(engine), ..Default::default() };
            let [y, saved, mm, mv, dx, dgamma, dbeta] = step(&k, &cfg, &dy);
            assert_finite("batch of one", &[("y", &y), ("saved", &saved), ("moving_mean", &mm), ("moving_var", &mv), ("dx", &dx), ("dgamma", &dgamma), ("dbeta", &dbeta)]);
            let want_y: Vec<f64> = k.beta.iter().map(|b| if relu { (*b as f64).max(0.0) } else { *b as f64 }).collect();
            assert_close("batch of one: y", &y, &want_y);
            let want_mv: Vec<f64> = k.moving_var.iter().map(|v| 0.99 * *v as f64).collect();
            assert_close("batch of one: moving_var", &mv, &want_mv);
            let want_dbeta: Vec<f64> = dy.iter().zip(&y).map(|(g, y)| if relu && *y <= 0.0 { 0.0 } else { *g as f64 }).collect();
            assert_close("batch of one: dbeta", &dbeta, &want_dbeta);
            assert!(dx.iter().chain(&dgamma).all(|v| v.abs() < 1e-6), "batch of one: dx {dx:?} dgamma {dgamma:?} should vanish");
        }
    });
}

#[test]
fn a_constant_batch_is_finite() {
    on_each_variant(|_| {
        let mut r = rng(36);
        let values = [3.7f32, -0.25, 0.0, 1e3, -42.0, 5.0, -1e-3, 7.5];
        // Five channels run the tiled kernels under either engine, eight the CPU ones where asked.
        for (c, engine) in [(5, Engine::Tiled), (8, Engine::Tiled), (8, Engine::Cpu)] {
            let mut k = case(&mut r, &[4, 3, 3, c], 0.0);
            k.x = (0..k.x.len()).map(|i| values[i % c]).collect();
            let dy = random(&mut r, k.x.len());
            let cfg = BatchNormConfig { relu: true, engine: Some(engine), ..Default::default() };
            let [y, saved, mm, mv, dx, dgamma, dbeta] = step(&k, &cfg, &dy);
            assert_finite("constant batch", &[("y", &y), ("saved", &saved), ("moving_mean", &mm), ("moving_var", &mv), ("dx", &dx), ("dgamma", &dgamma), ("dbeta", &dbeta)]);
            let want_y: Vec<f64> = (0..y.len()).map(|i| (k.beta[i % c] as f64).max(0.0)).collect();
            assert_close("constant batch: y", &y, &want_y);
            assert_close("constant batch: saved mean", &saved[..c], &values[..c].iter().map(|v| *v as f64).collect::<Vec<_>>());
            let (want_dx, want_dgamma, want_dbeta) = backward_ref(&k, &y, &dy, true);
            assert!(dx.iter().zip(&want_dx).all(|(g, w)| (*g as f64 - w).abs() < 1e-5), "constant batch {engine:?}: dx {dx:?}");
            assert!(dgamma.iter().zip(&want_dgamma).all(|(g, w)| (*g as f64 - w).abs() < 1e-5), "constant batch {engine:?}: dgamma {dgamma:?}");
            assert_close("constant batch: dbeta", &dbeta, &want_dbeta);
        }
    });
}

/// Whether the device's tiled quad first passes merge their partials themselves
/// (`BatchNormConfig::merge_last` unset): where it keeps storage coherent between workgroups,
/// not under `CONVOY_LIMITS=webgpu`. Where it does not, the merge passes run instead.
pub fn merges_last() -> bool {
    device().features().contains(wgpu::Features::MEMORY_DECORATION_COHERENT)
}

/// The device's quad first passes of the statistics and the gradient sums with `merge_last`
/// unset (see [`merges_last`]), and the passes that merge after them (none, or the merge passes).
pub fn default_quad_passes() -> (&'static [&'static str], &'static [&'static str]) {
    if merges_last() { (merged_passes(), &[]) } else { (&["stats_partial4", "backward_partial4"], &["stats_finalize", "backward_merge"]) }
}

/// The merged first passes where the device runs them ([`merges_last`]), else none.
pub fn merged_passes() -> &'static [&'static str] {
    if merges_last() { &["stats_merged4", "backward_merged4"] } else { &[] }
}

#[test]
fn bad_shapes_and_configs_are_refused() {
    let d = device();
    let z = |s: &[usize]| d.zeros(s).unwrap();
    let (x, y, saved) = (z(&[2, 3, 3, 8]), z(&[2, 3, 3, 8]), z(&[2, 8]));
    let (g, b, mm, mv) = (z(&[8]), z(&[8]), z(&[8]), z(&[8]));
    let cfg = BatchNormConfig::default();
    assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &saved, &y).is_ok());
    let e = batchnorm::forward_train(&d, &cfg, &x, &z(&[7]), &b, &mm, &mv, &saved, &y).unwrap_err().to_string();
    assert!(e.contains("gamma") && e.contains("[7]") && e.contains("[2, 3, 3, 8]"), "message names the shapes: {e}");
    assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &z(&[8]), &y).is_err(), "saved must be [2, C]");
    assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &saved, &z(&[2, 3, 8, 3])).is_err(), "y must match x");
    assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &saved, &x).is_err(), "y may not alias x");
    assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mm, &saved, &y).is_err(), "moving stats may not alias");
    let bad = BatchNormConfig { epsilon: 0.0, ..cfg };
    assert!(batchnorm::forward_train(&d, &bad, &x, &g, &b, &mm, &mv, &saved, &y).is_err(), "epsilon 0");
    let bad = BatchNormConfig { momentum: 1.5, ..cfg };
    assert!(batchnorm::forward_infer(&d, &bad, &x, &g, &b, &mm, &mv, &y).is_err(), "momentum 1.5");
    assert!(batchnorm::forward_infer(&d, &cfg, &z(&[0, 8]), &g, &b, &mm, &mv, &z(&[0, 8])).is_err(), "no rows");
    assert!(batchnorm::backward(&d, &cfg, &x, &y, &g, &b, &saved, &z(&[2, 3, 3, 8]), &z(&[8]), &z(&[9])).is_err(), "dbeta must be [C]");
    assert!(batchnorm::backward(&d, &cfg, &x, &y, &g, &z(&[9]), &saved, &z(&[2, 3, 3, 8]), &z(&[8]), &z(&[8])).is_err(), "beta must be [C]");
    assert!(batchnorm::backward(&d, &cfg, &x, &y, &g, &b, &saved, &y, &z(&[8]), &z(&[8])).is_err(), "dx may not alias dy");
    assert!(batchnorm::backward_infer(&d, &cfg, &y, &x, &g, &mv, &z(&[2, 3, 3, 8])).is_ok());
    let e = batchnorm::backward_infer(&d, &cfg, &y, &x, &g, &z(&[9]), &z(&[2, 3, 3, 8])).unwrap_err().to_string();
    assert!(e.contains("moving_var") && e.contains("[9]"), "message names the operand: {e}");
    assert!(batchnorm::backward_infer(&d, &cfg, &y, &x, &g, &mv, &x).is_err(), "dx may not alias dy");
    assert!(batchnorm::backward_infer(&d, &cfg, &z(&[2, 3, 3, 4]), &x, &g, &mv, &z(&[2, 3, 3, 8])).is_err(), "y must match dy");
    // A merge in the first pass's last workgroups forced where it cannot run: the CPU kernels,
    // channels off quads. The error names the setting and what stood in the way.
    let forced = BatchNormConfig { merge_last: Some(true), ..cfg };
    let cpu = BatchNormConfig { engine: Some(Engine::Cpu), ..forced };
    let e = batchnorm::forward_train(&d, &cpu, &x, &g, &b, &mm, &mv, &saved, &y).unwrap_err().to_string();
    assert!(e.contains("merge_last") && e.contains("CPU") && e.contains("8 channels"), "{e}");
    let z6 = |s: &[usize]| d.zeros(s).unwrap();
    let (x6, g6) = (z6(&[2, 3, 3, 6]), z6(&[6]));
    let tiled = BatchNormConfig { engine: Some(Engine::Tiled), ..forced };
    let e = batchnorm::backward(&d, &tiled, &x6, &z6(&[2, 3, 3, 6]), &g6, &z6(&[6]), &z6(&[2, 6]), &z6(&[2, 3, 3, 6]), &z6(&[6]), &z6(&[6])).unwrap_err().to_string();
    assert!(e.contains("merge_last") && e.contains("6 channels"), "{e}");
    // Where the device can, forcing it is the device's own choice.
    if merges_last() {
        let merged = batchnorm::forward_train(&d, &tiled, &x, &g, &b, &mm, &mv, &saved, &y).unwrap();
        assert_eq!(merged[0].label, "stats_merged4");
    }
}

// f16 activations need channels divisible by 4. Between them these reach every path both
// engines take on f16: one row chunk and several (2,250 rows of 4 channels: an odd batch
// of 250), four-row and one-row loads, one column tile and several (132 channels), and the
// CPU kernels' single and multiple chunks.
const F16_SHAPES: &[&[usize]] = &[&[7, 8], &[3, 1, 3, 12], &[2, 5, 7, 8], &[2, 3, 3, 64], &[250, 3, 3, 4], &[50, 132], &[4099, 68]];

/// `(entry, token)` for each token of each entry point.
fn every<'a>(entries: &[&'a str], tokens: &[&str]) -> Vec<(&'a str, String)> {
    entries.iter().flat_map(|e| tokens.iter().map(move |t| (*e, t.to_string()))).collect()
}

/// The paths among `taken` that ran the f16 module.
fn on_f16(taken: BTreeSet<String>) -> BTreeSet<String> {
    taken.into_iter().filter(|p| p.split_whitespace().any(|t| t == "store=f16")).collect()
}

#[test]
fn f16_activations_match_f64() {
    take_paths();
    on_each_variant(|variant| {
        let mut r = rng(38);
        for shape in F16_SHAPES {
            for (relu, engine) in [false, true].into_iter().flat_map(|relu| Engine::ALL.map(|e| (relu, e))) {
                let name = format!("{variant} f16 {shape:?} relu={relu} {engine:?}");
                let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(engine), ..Default::default() };
                let k = case_f16(&mut r, shape, 0.0);
                let (out, dispatches) = train(&k, &cfg);
                assert!(dispatches.iter().all(|d| d.path_tokens().any(|t| t == "store=f16") && d.shader.ends_with("+f16")), "{name}: {dispatches:#?}");
                run(&dispatches);
                let e = check_train(&name, &k, &cfg, &out);
                println!("train forward {name}: rel err {e:.2e}");
                let dy = random(&mut r, k.x.len());
                let e = check_backward(&name, &k, &cfg, &dy);
                println!("backward {name}: rel err {e:.2e}");
                let k = case_f16(&mut r, shape, 0.0);
                let e = check_infer(&name, &k, &cfg);
                println!("inference forward {name}: rel err {e:.2e}");
                let dy = random(&mut r, k.x.len());
                let e = check_infer_backward(&name, &k, &cfg, &dy);
                println!("inference backward {name}: rel err {e:.2e}");
            }
        }
    });
    let taken = on_f16(take_paths());
    // The f16 module runs the first passes by quads only (its scalar reads would load each
    // word twice).
    let scalar: Vec<&String> = taken.iter().filter(|p| p.starts_with("stats_partial ") || p.starts_with("backward_partial ")).collect();
    assert!(scalar.is_empty(), "scalar first passes on f16: {scalar:#?}");
    let mut expected = Vec::new();
    // The tiled quad first passes, merging their partials themselves where the device lets
    // them (merge=last; otherwise the merge passes run: both on f16 in
    // partial_passes_match_f64_scalar_and_quad).
    let (quads, merges) = default_quad_passes();
    expected.extend(every(quads, &["chunks=single", "chunks=multi", "rows=x4", "rows=x1", "cols=one_tile", "cols=tiled", "vec4"]));
    expected.extend(every(merges, &["chunks=single", "chunks=multi"]));
    expected.extend(every(&["stats_partial_cpu", "stats_finalize_cpu", "backward_merge_cpu"], &["chunks=single", "chunks=multi"]));
    expected.extend(every(&["normalize_train4", "backward_dx4", "normalize_infer4", "backward_infer_dx4"], &["vec4", "grid=1d"]));
    expected.extend(every(
        &["normalize_train_cpu", "backward_partial_cpu", "backward_dx_cpu", "normalize_infer_cpu", "backward_infer_dx_cpu"],
        &["chunks=single", "chunks=multi", "relu", "no_relu"],
    ));
    assert_paths_cover("batchnorm f16", &taken, &expected, &[]);
}

#[test]
fn f16_many_rows_stay_stable() {
    // The 70,000 rows near 100 of the f32 test, x and dy rounded to f16 (x's spacing is 1/16
    // there): the merges and the sums see the same values as the reference, so only the
    // rounding of y's and dx's stores is added.
    let mut r = rng(39);
    take_paths();
    for engine in Engine::ALL {
        let k = case_f16(&mut r, &[7, 100, 100, 4], 100.0);
        let cfg = BatchNormConfig { momentum: 0.6, relu: true, engine: Some(engine), ..Default::default() };
        let (out, dispatches) = train(&k, &cfg);
        assert!(dispatches[0].path_tokens().any(|t| t == "chunks=multi"), "statistics ran in one chunk: {}", dispatches[0].path);
        assert_eq!(dispatches[0].label.ends_with("_cpu"), engine == Engine::Cpu, "{engine:?}: {}", dispatches[0].path);
        run(&dispatches);
        let e = check_train(&format!("f16 70,000 x 4 {engine:?}"), &k, &cfg, &out);
        println!("train forward f16 70,000 x 4 relu {engine:?}: rel err {e:.2e}");
        let dy = random(&mut r, k.x.len());
        let e = check_backward(&format!("f16 70,000 x 4 {engine:?}"), &k, &cfg, &dy);
        println!("backward f16 70,000 x 4 relu {engine:?}: rel err {e:.2e}");
        let dy = random(&mut r, k.x.len());
        let e = check_infer_backward(&format!("f16 70,000 x 4 {engine:?}"), &k, &cfg, &dy);
        println!("inference backward f16 70,000 x 4 relu {engine:?}: rel err {e:.2e}");
    }
    let taken = on_f16(take_paths());
    let others = ["normalize_train4", "backward_dx4", "backward_infer_dx4", "stats_partial_cpu", "normalize_train_cpu", "backward_partial_cpu", "backward_dx_cpu", "backward_infer_dx_cpu"];
    for &entry in default_quad_passes().0.iter().chain(&others) {
        assert!(taken.iter().any(|p| p.split_whitespace().next() == Some(entry)), "{entry} never ran on f16: {taken:#?}");
    }
}

#[test]
fn f16_fused_relu_gradient_keeps_nan() {
    // nan.rs's BatchNorm case with the activations and their gradients f16 (eight channels:
    // the vec4 passes or the CPU kernels): the gradient mask passes a NaN of y through, and
    // dx's rounding to f16 must keep it a NaN.
    on_each_variant(|variant| {
        let d = device();
        let (rows, c) = (12, 8);
        let shape = [rows, c];
        let mut x: Vec<f32> = (0..rows * c).map(|i| ((i * 7) % 11) as f32 / 5.0 - 1.0).collect();
        x[3 * c + 1] = f32::NAN;
        let (tx, dy) = (upload_f16(&x, &shape), upload_f16(&vec![1.0; rows * c], &shape));
        let h = || d.zeros_of(&shape, DType::F16).unwrap();
        let nan_at = |case: &str, t: &Tensor, nan: &dyn Fn(usize) -> bool| {
            let v = if t.dtype() == DType::F16 { read_f16(t) } else { read(t) };
            for (i, v) in v.iter().enumerate() {
                assert_eq!(v.is_nan(), nan(i), "{variant} {case}: element {i} is {v}");
            }
        };
        for engine in Engine::ALL {
            let cfg = BatchNormConfig { relu: true, engine: Some(engine), ..Default::default() };
            // The training forward below turns channel 1's moving statistics to NaN.
            let per_channel = |v: f32| upload(&vec![v; c], &[c]);
            let (gamma, beta, mm, mv) = (per_channel(1.0), per_channel(0.0), per_channel(0.0), per_channel(1.0));

            // inference: only the NaN element's y, and so its dx, is NaN
            let (y, dx) = (h(), h());
            let mut dispatches = batchnorm::forward_infer(&d, &cfg, &tx, &gamma, &beta, &mm, &mv, &y).unwrap();
            dispatches.extend(batchnorm::backward_infer(&d, &cfg, &y, &dy, &gamma, &mv, &dx).unwrap());
            run(&dispatches);
            nan_at(&format!("{engine:?} infer y"), &y, &|i| i == 3 * c + 1);
            nan_at(&format!("{engine:?} infer dx"), &dx, &|i| i == 3 * c + 1);

            // training: channel 1's statistics are NaN, so its y and dx are NaN in every row
            let (saved, y, dx, dgamma, dbeta) = (d.zeros(&[2, c]).unwrap(), h(), h(), d.zeros(&[c]).unwrap(), d.zeros(&[c]).unwrap());
            let mut dispatches = batchnorm::forward_train(&d, &cfg, &tx, &gamma, &beta, &mm, &mv, &saved, &y).unwrap();
            dispatches.extend(batchnorm::backward(&d, &cfg, &tx, &dy, &gamma, &beta, &saved, &dx, &dgamma, &dbeta).unwrap());
            run(&dispatches);
            nan_at(&format!("{engine:?} train y"), &y, &|i| i % c == 1);
            nan_at(&format!("{engine:?} train dx"), &dx, &|i| i % c == 1);
            nan_at(&format!("{engine:?} train dgamma"), &dgamma, &|ch| ch == 1);
            nan_at(&format!("{engine:?} train dbeta"), &dbeta, &|ch| ch == 1);
        }
    });
}

#[test]
fn f32_activations_run_the_f32_module() {
    let mut r = rng(40);
    for engine in Engine::ALL {
        let k = case(&mut r, &[3, 5, 8], 0.0);
        let cfg = BatchNormConfig { engine: Some(engine), ..Default::default() };
        let (_, dispatches) = train(&k, &cfg);
        assert!(dispatches.iter().all(|d| d.path_tokens().any(|t| t == "store=f32") && !d.shader.contains('+')), "{engine:?}: {dispatches:#?}");
    }
}

#[test]
fn f16_dtypes_and_channels_are_checked() {
    let d = device();
    let z = |s: &[usize]| d.zeros(s).unwrap();
    let h = |s: &[usize]| d.zeros_of(s, DType::F16).unwrap();
    let shape = [2, 3, 3, 8];
    let (x, y, saved, dy, dx) = (h(&shape), h(&shape), z(&[2, 8]), h(&shape), h(&shape));
    let (g, b, mm, mv, dg, db) = (z(&[8]), z(&[8]), z(&[8]), z(&[8]), z(&[8]), z(&[8]));
    // Each message names the kernel, the operand, its shape and both dtypes where two disagree.
    let says = |e: convoy::Error, words: &[&str]| {
        let e = e.to_string();
        assert!(words.iter().all(|w| e.contains(w)), "{e:?} should name {words:?}");
    };
    for engine in Engine::ALL {
        let cfg = BatchNormConfig { engine: Some(engine), ..Default::default() };
        assert!(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &saved, &y).is_ok());
        assert!(batchnorm::forward_infer(&d, &cfg, &x, &g, &b, &mm, &mv, &y).is_ok());
        assert!(batchnorm::backward(&d, &cfg, &x, &dy, &g, &b, &saved, &dx, &dg, &db).is_ok());
        assert!(batchnorm::backward_infer(&d, &cfg, &y, &dy, &g, &mv, &dx).is_ok());

        // Mixed activations, and gradients not stored as their activations (one module
        // reads them all).
        let a32 = z(&shape);
        says(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &saved, &a32).unwrap_err(), &["forward_train", "y", "x", "F32", "F16", "[2, 3, 3, 8]"]);
        says(batchnorm::forward_infer(&d, &cfg, &z(&shape), &g, &b, &mm, &mv, &y).unwrap_err(), &["forward_infer", "y", "x", "F32", "F16"]);
                says(batchnorm::backward(&d, &cfg, &x, &a32, &g, &b, &saved, &dx, &dg, &db).unwrap_err(), &["backward", "dy", "[2, 3, 3, 8]", "is F32", "expected F16 as x"]);
        says(batchnorm::backward(&d, &cfg, &x, &dy, &g, &b, &saved, &a32, &dg, &db).unwrap_err(), &["backward", "dx", "is F32", "expected F16 as x"]);
        says(batchnorm::backward_infer(&d, &cfg, &y, &a32, &g, &mv, &dx).unwrap_err(), &["backward_infer", "dy", "is F32", "expected F16 as y"]);
        says(batchnorm::backward_infer(&d, &cfg, &y, &dy, &g, &mv, &a32).unwrap_err(), &["backward_infer", "dx", "is F32", "expected F16 as y"]);
        // f32 activations take f32 gradients only.
        let (x32, y32, s32) = (z(&shape), z(&shape), z(&shape));
        assert!(batchnorm::backward(&d, &cfg, &x32, &a32, &g, &b, &saved, &s32, &dg, &db).is_ok());
        says(batchnorm::backward(&d, &cfg, &x32, &dy, &g, &b, &saved, &s32, &dg, &db).unwrap_err(), &["backward", "dy", "is F16", "expected F32 as x"]);
        says(batchnorm::backward(&d, &cfg, &x32, &a32, &g, &b, &saved, &dx, &dg, &db).unwrap_err(), &["backward", "dx", "is F16", "expected F32 as x"]);
        says(batchnorm::backward_infer(&d, &cfg, &y32, &dy, &g, &mv, &s32).unwrap_err(), &["backward_infer", "dy", "is F16", "expected F32 as y"]);
        says(batchnorm::backward_infer(&d, &cfg, &y32, &a32, &g, &mv, &dx).unwrap_err(), &["backward_infer", "dx", "is F16", "expected F32 as y"]);

        // Everything but the activations is f32.
        says(batchnorm::forward_train(&d, &cfg, &x, &h(&[8]), &b, &mm, &mv, &saved, &y).unwrap_err(), &["forward_train", "gamma", "[8]", "F16", "F32"]);
        says(batchnorm::forward_train(&d, &cfg, &x, &g, &b, &mm, &mv, &h(&[2, 8]), &y).unwrap_err(), &["forward_train", "saved", "[2, 8]", "F16"]);
        says(batchnorm::forward_infer(&d, &cfg, &x, &g, &b, &mm, &h(&[8]), &y).unwrap_err(), &["forward_infer", "moving_var", "F16"]);
        says(batchnorm::backward(&d, &cfg, &x, &dy, &g, &b, &saved, &dx, &h(&[8]), &db).unwrap_err(), &["backward", "dgamma", "F16"]);
        says(batchnorm::backward(&d, &cfg, &x, &dy, &g, &h(&[8]), &saved, &dx, &dg, &db).unwrap_err(), &["backward", "beta", "F16"]);
        says(batchnorm::backward(&d, &cfg, &x, &dy, &g, &b, &saved, &dx, &dg, &h(&[8])).unwrap_err(), &["backward", "dbeta", "F16"]);
        let u = d.zeros_of(&shape, DType::U32).unwrap();
        says(batchnorm::forward_infer(&d, &cfg, &u, &g, &b, &mm, &mv, &d.zeros_of(&shape, DType::U32).unwrap()).unwrap_err(), &["forward_infer", "x", "U32"]);

        // f16 with channels not a multiple of 4 (f32 takes them).
        let odd = [5, 6];
        let (x6, y6, s6, d6, dx6) = (h(&odd), h(&odd), z(&[2, 6]), h(&odd), h(&odd));
        let (g6, b6, mm6, mv6, dg6, db6) = (z(&[6]), z(&[6]), z(&[6]), z(&[6]), z(&[6]), z(&[6]));
        says(batchnorm::forward_train(&d, &cfg, &x6, &g6, &b6, &mm6, &mv6, &s6, &y6).unwrap_err(), &["forward_train", "x", "[5, 6]", "F16", "6 channels", "multiple of 4"]);
        says(batchnorm::forward_infer(&d, &cfg, &x6, &g6, &b6, &mm6, &mv6, &y6).unwrap_err(), &["forward_infer", "[5, 6]", "multiple of 4"]);
        says(batchnorm::backward(&d, &cfg, &x6, &d6, &g6, &b6, &s6, &dx6, &dg6, &db6).unwrap_err(), &["backward", "[5, 6]", "multiple of 4"]);
        says(batchnorm::backward_infer(&d, &cfg, &y6, &d6, &g6, &mv6, &dx6).unwrap_err(), &["backward_infer", "y", "[5, 6]", "multiple of 4"]);
        assert!(batchnorm::forward_train(&d, &cfg, &z(&odd), &g6, &b6, &mm6, &mv6, &s6, &z(&odd)).is_ok());
    }
}

/// A convolution whose input is this layer's, normalized as its products gather it
/// (`conv2d::InputNorm`, on the layer's saved statistics, `inv_std * gamma` and `beta`),
/// sees y as the training forward stored it, bit for bit: the transform is one explicit
/// fused multiply-add in every kernel (shaders/lib/affine.wgsl), so no compiler contracts
/// one kernel's and not the other's. Both engines, both storages, with and without the ReLU.
#[test]
fn the_gathers_normalize_as_the_forward_stored_bit_for_bit() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(47);
        for shape in SHAPES {
            for (f16, relu, engine) in [false, true].into_iter().flat_map(|f16| [false, true].into_iter().flat_map(move |relu| Engine::ALL.map(|e| (f16, relu, e)))) {
                if f16 && !shape.last().unwrap().is_multiple_of(4) {
                    continue;
                }
                let k = if f16 { case_f16(&mut r, shape, 1.5) } else { case(&mut r, shape, 1.5) };
                let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(engine), ..Default::default() };
                let (out, ds) = train(&k, &cfg);
                run(&ds);
                let (c, s) = (k.c, read(&out.saved));
                let norm: Vec<f32> = s[..c].iter().copied().chain((0..c).map(|j| s[c + j] * k.gamma[j])).chain(k.beta.iter().copied()).collect();
                // A 1x1 convolution by the identity into f32: each output one product by 1.
                let rows = k.x.len() / c;
                let geom = Conv2dGeometry::new(&[rows, 1, 1, c], c, (1, 1), (1, 1), Padding::Valid).unwrap();
                let identity: Vec<f32> = (0..c * c).map(|i| if i / c == i % c { 1.0 } else { 0.0 }).collect();
                let gathered = stale(&[rows, 1, 1, c]);
                let x = out.x.reshape(&[rows, 1, 1, c]).unwrap();
                let opts = GemmOptions { mixed: f16, engine: Some(engine), ..Default::default() };
                run(&conv2d::forward_normalized(&d, &geom, &x, InputNorm { params: &upload(&norm, &[3, c]), relu }, &upload(&identity, &[1, 1, c, c]), &gathered, &opts).unwrap());
                let (y, stored) = (read(&gathered), read_act(&out.y));
                let differ = y.iter().zip(&stored).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert_eq!(differ, 0, "{shape:?} f16={f16} relu={relu} {engine:?}: {differ} of {} elements of y differ from the gathers' normalization", y.len());
            }
        }
    });
}
