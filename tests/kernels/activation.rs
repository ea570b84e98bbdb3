//! Activations (ReLU with max_value and slope, sigmoid, tanh, SiLU, GELU in both forms),
//! softmax, the per-channel affine map and global max pooling against f64 references, on the
//! checked and the unchecked shaders; and a coverage assertion over every path token these
//! wrappers emit.

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use convoy::kernels::activation::{self, Function};
use convoy::kernels::pool;
use convoy::{DType, Tensor};
use rand::rngs::StdRng;
use rand::RngExt;

use crate::common::*;

/// Counts divisible by 4 take the vec4 entry points, the others the scalar ones.
const SIZES: &[usize] = &[1, 7, 12, 255, 256, 257, 4099, 4100];

/// The functions under test, ReLU in its plain, ReLU6, leaky and capped-leaky forms.
fn functions() -> Vec<Function> {
    let relu = |max_value: f32, negative_slope: f32| Function::Relu { max_value, negative_slope };
    let mut all = vec![relu(f32::INFINITY, 0.0), relu(6.0, 0.0), relu(f32::INFINITY, 0.3), relu(0.5, 0.01)];
    all.extend(Function::ALL.iter().skip(1));
    all
}

// ---- f64 references -------------------------------------------------------------------

/// erfc in f64: the series of erf, all of whose terms are positive, below 2; Laplace's
/// continued fraction above, where 1 - erf would lose the tail's digits.
fn erfc(z: f64) -> f64 {
    if z < 0.0 {
        return 2.0 - erfc(-z);
    }
    if z < 2.0 {
        // erf(z) = 2/sqrt(pi) exp(-z^2) sum (2 z^2)^n z / (1 * 3 * ... * (2n + 1))
        let (mut term, mut sum) = (z, z);
        for n in 1..200 {
            term *= 2.0 * z * z / (2 * n + 1) as f64;
            sum += term;
        }
        return 1.0 - 2.0 / PI.sqrt() * (-z * z).exp() * sum;
    }
    let mut k = z;
    for n in (1..200).rev() {
        k = z + (n as f64 / 2.0) / k;
    }
    (-z * z).exp() / (PI.sqrt() * k)
}

fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x * FRAC_1_SQRT_2)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// 1 - tanh(x)^2 without the cancellation near |tanh| = 1 (tanh(20) is 1.0 in f64).
fn sech2(x: f64) -> f64 {
    1.0 / x.cosh().powi(2)
}

const GELU_C: f64 = 0.797_884_560_802_865_4;

/// `(f(x), f'(x))` in f64, with the kernels' choices at ReLU's kinks (TensorFlow's).
fn reference(f: Function, x: f64) -> (f64, f64) {
    match f {
        Function::Relu { max_value, negative_slope } => {
            let (m, s) = (max_value as f64, negative_slope as f64);
            if x > 0.0 { (x.min(m), if x < m { 1.0 } else { 0.0 }) } else { (s * x, s) }
        }
        Function::Sigmoid => (sigmoid(x), sigmoid(x) * sigmoid(-x)),
        Function::Tanh => (x.tanh(), sech2(x)),
        Function::Silu => (x * sigmoid(x), sigmoid(x) * (1.0 + x * sigmoid(-x))),
        Function::Gelu => (x * normal_cdf(x), normal_cdf(x) + x * (-0.5 * x * x).exp() / (2.0 * PI).sqrt()),
        Function::GeluTanh => {
            let u = GELU_C * (x + 0.044715 * x.powi(3));
            let t = u.tanh();
            (0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * sech2(u) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x))
        }
    }
}

/// `n` values uniform in [-4, 4): into the saturation of sigmoid and tanh and across GELU's
/// bend; for a capped ReLU in [-2 cap, 2 cap), both sides of the cap.
fn inputs(r: &mut StdRng, n: usize, f: Function) -> Vec<f32> {
    let scale = match f {
        // ReLU6 and the capped leaky ReLU see values on both sides of their caps.
        Function::Relu { max_value, .. } if max_value.is_finite() => 2.0 * max_value,
        _ => 4.0,
    };
    random(r, n).iter().map(|v| v * scale).collect()
}

/// Runs forward and backward of `f` on `x` and checks both against f64.
fn check_function(r: &mut StdRng, f: Function, x: &[f32], case: &str) {
    let d = device();
    let n = x.len();
    let dy = random(r, n);
    let (tx, ty, tdy, tdx) = (upload(x, &[n]), d.zeros(&[n]).unwrap(), upload(&dy, &[n]), d.zeros(&[n]).unwrap());
    run(&[activation::activation_forward(&d, f, &tx, &ty).unwrap(), activation::activation_backward(&d, f, &tdy, &tx, &tdx).unwrap()]);
    let want: Vec<(f64, f64)> = x.iter().map(|&v| reference(f, v as f64)).collect();
    let want_y: Vec<f64> = want.iter().map(|w| w.0).collect();
    let want_dx: Vec<f64> = want.iter().zip(&dy).map(|(w, &g)| w.1 * g as f64).collect();
    assert_close(&format!("{case} forward"), &read(&ty), &want_y);
    assert_close(&format!("{case} backward"), &read(&tdx), &want_dx);
}

fn softmax_ref(x: &[f32], k: usize) -> Vec<f64> {
    x.chunks(k)
        .flat_map(|row| {
            let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

/// Softmax forward and backward over `rows` rows of `k` against f64; the backward's `y` is
/// the device's own forward output, as in a model.
fn check_softmax(r: &mut StdRng, rows: usize, k: usize, case: &str) {
    let d = device();
    let n = rows * k;
    let x: Vec<f32> = random(r, n).iter().map(|v| v * 8.0).collect();
    let dy = random(r, n);
    let (tx, ty, tdy, tdx) = (upload(&x, &[rows, k]), d.zeros(&[rows, k]).unwrap(), upload(&dy, &[rows, k]), d.zeros(&[rows, k]).unwrap());
    run(&[activation::softmax_forward(&d, &tx, &ty).unwrap(), activation::softmax_backward(&d, &tdy, &ty, &tdx).unwrap()]);
    let y = softmax_ref(&x, k);
    // Per row: each y within TOL of its row's largest, as the row is what sums to one.
    let got = read(&ty);
    for (i, (g, w)) in got.chunks(k).zip(y.chunks(k)).enumerate().step_by((rows / 64).max(1)) {
        assert_close(&format!("{case} forward row {i}"), g, w);
    }
    let dx: Vec<f64> = y
        .chunks(k)
        .zip(dy.chunks(k))
        .flat_map(|(y, g)| {
            let dot: f64 = y.iter().zip(g).map(|(y, g)| y * *g as f64).sum();
            y.iter().zip(g).map(move |(y, g)| y * (*g as f64 - dot))
        })
        .collect();
    assert_close(&format!("{case} backward"), &read(&tdx), &dx);
}

/// The channel map and its gradient on `[rows, c]` with a table of `len` (1 or c) entries.
fn check_affine(r: &mut StdRng, rows: usize, c: usize, len: usize, case: &str) {
    let d = device();
    let n = rows * c;
    let (x, dy, scale, offset) = (random(r, n), random(r, n), random(r, len), random(r, len));
    let (tx, ty, tdy, tdx) = (upload(&x, &[rows, c]), d.zeros(&[rows, c]).unwrap(), upload(&dy, &[rows, c]), d.zeros(&[rows, c]).unwrap());
    run(&[activation::channel_affine(&d, &tx, &scale, &offset, &ty).unwrap(), activation::channel_scale(&d, &tdy, &scale, &tdx).unwrap()]);
    let t = |i: usize| i % c % len;
    let want_y: Vec<f64> = (0..n).map(|i| x[i] as f64 * scale[t(i)] as f64 + offset[t(i)] as f64).collect();
    let want_dx: Vec<f64> = (0..n).map(|i| dy[i] as f64 * scale[t(i)] as f64).collect();
    assert_close(&format!("{case} forward"), &read(&ty), &want_y);
    assert_close(&format!("{case} backward"), &read(&tdx), &want_dx);
}

/// Global max pooling of `[b, h, w, c]` against the first maximum of each map, and its
/// gradient to that position. `ties` draws from few values so that most maps have ties.
fn check_global_max(r: &mut StdRng, [b, h, w, c]: [usize; 4], ties: bool, case: &str) {
    let d = device();
    let x: Vec<f32> = if ties { (0..b * h * w * c).map(|_| r.random_range(0..3) as f32).collect() } else { random(r, b * h * w * c) };
    let dy = random(r, b * c);
    let (tx, ty, targ) = (upload(&x, &[b, h, w, c]), d.zeros(&[b, c]).unwrap(), d.zeros_of(&pool::global_argmax_shape(&[b, h, w, c]).unwrap(), DType::U32).unwrap());
    let (tdy, tdx) = (upload(&dy, &[b, c]), d.zeros(&[b, h, w, c]).unwrap());
    run(&[pool::global_max_pool_forward(&d, &tx, &ty, &targ).unwrap(), pool::global_max_pool_backward(&d, &tdy, &targ, &tdx).unwrap()]);
    let (mut want_y, mut want_dx) = (vec![0.0; b * c], vec![0.0; b * h * w * c]);
    for bi in 0..b {
        for ci in 0..c {
            let at = |p: usize| ((bi * h * w) + p) * c + ci;
            let best = (0..h * w).fold(0, |best, p| if x[at(p)] > x[at(best)] { p } else { best });
            want_y[bi * c + ci] = x[at(best)] as f64;
            want_dx[at(best)] = dy[bi * c + ci] as f64;
        }
    }
    assert_close(&format!("{case} forward"), &read(&ty), &want_y);
    // Exact: the gradient goes to one position, the first maximum, or the test fails by a
    // whole dy.
    assert_close(&format!("{case} backward"), &read(&tdx), &want_dx);
}

fn want(entry: &'static str, tokens: &[&str]) -> Vec<(&'static str, String)> {
    tokens.iter().map(|t| (entry, t.to_string())).collect()
}

/// Every forward and backward against f64 on awkward sizes, on both shader variants, then
/// the coverage of every path token the wrappers emit: each function's vec4 and scalar
/// forms, softmax rows in one pass and strided, on a 1-d and a folded grid, the channel
/// maps with one entry and per channel, and global max pooling on four and on odd channels.
#[test]
fn every_path_matches_f64() {
    let mut r = rng(0xac7);
    take_paths();
    on_each_variant(|variant| {
        for f in functions() {
            for &n in SIZES {
                let x = inputs(&mut r, n, f);
                check_function(&mut r, f, &x, &format!("{variant} {f:?} n={n}"));
            }
        }
        for (rows, k) in [(1, 1), (3, 7), (5, 64), (2, 65), (4, 255), (2, 256), (3, 257), (2, 4099), (1, 4100), (1, 70_000)] {
            check_softmax(&mut r, rows, k, &format!("{variant} softmax {rows}x{k}"));
        }
        for (rows, c, len) in [(1, 1, 1), (7, 1, 1), (3, 4, 4), (64, 4, 1), (5, 3, 3), (85, 3, 1), (33, 8, 8), (1025, 4, 4), (4099, 1, 1)] {
            check_affine(&mut r, rows, c, len, &format!("{variant} channel map {rows}x{c} table {len}"));
        }
        for (shape, ties) in [([1, 1, 1, 1], false), ([2, 3, 5, 7], false), ([3, 4, 4, 8], false), ([2, 7, 9, 4], true), ([3, 5, 5, 3], true), ([1, 32, 32, 16], false)] {
            check_global_max(&mut r, shape, ties, &format!("{variant} global max pool {shape:?} ties={ties}"));
        }
    });
    // Folded grids: more rows than one grid dimension holds (65,535 on the software adapter).
    on_device(devices()[1].clone(), || {
        check_softmax(&mut r, 65_600, 2, "unchecked softmax folded grid");
        let n = 65_535 * 256 + 301;
        let x: Vec<f32> = random(&mut r, n).iter().map(|v| v * 4.0).collect();
        check_function(&mut r, Function::Silu, &x, "unchecked silu folded grid");
    });

    let mut expected = Vec::new();
    for entry in ["activation_forward", "activation_backward"] {
        expected.extend(Function::ALL.iter().map(|f| (entry, f.token().to_string())));
        expected.extend(want(entry, &["vec4", "scalar", "grid=1d", "grid=2d"]));
    }
    for entry in ["softmax_forward", "softmax_backward"] {
        expected.extend(want(entry, &["row=one_pass", "row=strided", "grid=1d", "grid=2d"]));
    }
    for entry in ["channel_affine", "channel_scale"] {
        expected.extend(want(entry, &["vec4", "scalar", "table=broadcast", "table=per_channel", "grid=1d"]));
    }
    for entry in ["max_pool_forward", "max_pool_backward"] {
        expected.extend(want(entry, &["vec4", "scalar", "global", "positions", "grid=1d"]));
    }
    // The packed argmax's entry points keep their own names (maps of 255 pixels or fewer).
    for entry in ["max_pool_forward4c", "max_pool_backward4c"] {
        expected.extend(want(entry, &["packed", "global"]));
    }
    // Branches that only a combination of tokens names: each function in each width (a
    // function that only ever ran in one would hide a typo in the other entry point's
    // branch), and each channel table in each width.
    let taken = take_paths();
    let mut combos: Vec<(&str, Vec<&str>)> = Vec::new();
    for width in ["vec4", "scalar"] {
        for entry in ["activation_forward", "activation_backward"] {
            combos.extend(Function::ALL.iter().map(|f| (entry, vec![f.token(), width])));
        }
        for entry in ["channel_affine", "channel_scale"] {
            combos.extend(["table=broadcast", "table=per_channel"].map(|t| (entry, vec![t, width])));
        }
        // Max pooling keeps whole positions on every scalar path and on quads over windows
        // too large to pack.
        for entry in ["max_pool_forward", "max_pool_backward"] {
            combos.push((entry, vec!["positions", width]));
        }
    }
    let missing: Vec<String> = combos
        .iter()
        .filter(|(entry, tokens)| {
            !taken.iter().any(|p| {
                let t: Vec<&str> = p.split_whitespace().collect();
                t[0].trim_end_matches('4') == *entry && tokens.iter().all(|x| t.contains(x))
            })
        })
        .map(|(entry, tokens)| format!("{entry} {}", tokens.join(" ")))
        .collect();
    assert!(missing.is_empty(), "activation: token combinations never taken: {missing:?}");
    // The vec4 entry points (`activation_forward4`) count as their scalar twins here; the
    // width token tells them apart.
    let labels: std::collections::BTreeSet<String> = taken
        .iter()
        .map(|p| match p.split_once(' ') {
            Some((entry, rest)) => format!("{} {rest}", entry.trim_end_matches('4')),
            None => p.clone(),
        })
        .collect();
    assert_paths_cover("activation", &labels, &expected, &[]);
}

/// Every function on values exactly at its kinks and far in its tails: finite where the
/// function is, each value within 1e-5 of its own magnitude (relative, not max-norm), and
/// ReLU's derivative at 0 and at the cap as TensorFlow takes it.
#[test]
fn kinks_and_tails_elementwise() {
    on_each_variant(|variant| {
        let d = device();
        let x: Vec<f32> = vec![0.0, -0.0, 6.0, 0.5, -1e-30, 1e-30, 1e-6, -1e-6, 0.05, -0.05, 20.0, -20.0, 100.0, -100.0, 1e10, -1e10];
        let n = x.len();
        for f in functions() {
            let dy = vec![1.0f32; n];
            let (tx, ty, tdy, tdx) = (upload(&x, &[n]), d.zeros(&[n]).unwrap(), upload(&dy, &[n]), d.zeros(&[n]).unwrap());
            run(&[activation::activation_forward(&d, f, &tx, &ty).unwrap(), activation::activation_backward(&d, f, &tdy, &tx, &tdx).unwrap()]);
            for (what, got, pick) in [("forward", read(&ty), 0), ("derivative", read(&tdx), 1)] {
                for (i, &v) in x.iter().enumerate() {
                    let r = reference(f, v as f64);
                    let want = if pick == 0 { r.0 } else { r.1 };
                    let g = got[i] as f64;
                    assert!(g.is_finite() && (g - want).abs() <= 1e-5 * want.abs() + 1e-30, "{variant} {f:?} {what} at x = {v:e}: got {g:e}, want {want:e}");
                }
            }
        }
    });
}

/// GELU's erf form and tanh across [-9, 9] in steps of 1/128, each value against f64
/// relative to itself, in units of 2^-23 (the claims in `Function::Gelu`'s and the
/// shader's docs). GELU is allowed 6 + x^2 ulp: in the tail its error is that of `exp` at
/// the argument -x^2 / 2, to which Vulkan grants 3 + 2|arg| ulp (lavapipe: 3.3 ulp below
/// |x| = 1, 5.4 at x = -1.1, 27 at x = -9, where gelu(x) is -1e-18).
#[test]
fn gelu_and_tanh_are_accurate_to_a_few_ulps_of_f32() {
    let d = device();
    let x: Vec<f32> = (-9 * 128..=9 * 128).map(|i| i as f32 / 128.0).collect();
    let n = x.len();
    let gelu = |x: f64| 6.0 + x * x;
    let tanh = |_: f64| 8.0;
    for (f, allowed) in [(Function::Gelu, &gelu as &dyn Fn(f64) -> f64), (Function::Tanh, &tanh)] {
        let (tx, ty) = (upload(&x, &[n]), d.zeros(&[n]).unwrap());
        run(&[activation::activation_forward(&d, f, &tx, &ty).unwrap()]);
        let got = read(&ty);
        let ulps: Vec<(f64, f64)> = x
            .iter()
            .zip(&got)
            .map(|(&v, &g)| (v as f64, reference(f, v as f64).0, g as f64))
            .filter(|(_, w, _)| w.abs() > 1e-30)
            .map(|(v, w, g)| (v, ((g - w) / w).abs() * 8_388_608.0))
            .collect();
        let worst = ulps.iter().fold((0.0, 0.0), |a, b| if b.1 > a.1 { *b } else { a });
        let below_one = ulps.iter().filter(|(v, _)| v.abs() < 1.0).fold(0.0f64, |m, u| m.max(u.1));
        println!("{f:?}: {below_one:.1} ulp below |x| = 1, worst {:.1} ulp at x = {}", worst.1, worst.0);
        let over: Vec<&(f64, f64)> = ulps.iter().filter(|(v, u)| *u > allowed(*v)).collect();
        assert!(over.is_empty(), "{f:?}: (x, ulp) beyond the allowance: {:?}", &over[..over.len().min(8)]);
    }
}

/// NaN in, NaN out, forward and backward, for every function, softmax row and pooled map: a
/// diverged value must never turn finite.
#[test]
fn nan_propagates_everywhere() {
    on_each_variant(|variant| {
        let d = device();
        let nan = f32::NAN;
        for n in [5, 8] {
            let mut x = vec![0.5f32; n];
            x[1] = nan;
            for f in functions() {
                let (tx, ty, tdy, tdx) = (upload(&x, &[n]), d.zeros(&[n]).unwrap(), upload(&vec![1.0; n], &[n]), d.zeros(&[n]).unwrap());
                run(&[activation::activation_forward(&d, f, &tx, &ty).unwrap(), activation::activation_backward(&d, f, &tdy, &tx, &tdx).unwrap()]);
                let (y, dx) = (read(&ty), read(&tdx));
                assert!(y[1].is_nan() && dx[1].is_nan(), "{variant} {f:?} n={n}: NaN became {} / {}", y[1], dx[1]);
                assert!(y[0].is_finite() && dx[0].is_finite(), "{variant} {f:?} n={n}: a finite neighbour became {} / {}", y[0], dx[0]);
            }
        }
        // softmax: the row holding NaN is NaN, the other row is not
        let x = [1.0, nan, 2.0, 1.0, 2.0, 3.0];
        let (tx, ty) = (upload(&x, &[2, 3]), d.zeros(&[2, 3]).unwrap());
        run(&[activation::softmax_forward(&d, &tx, &ty).unwrap()]);
        let y = read(&ty);
        assert!(y[..3].iter().all(|v| v.is_nan()) && y[3..].iter().all(|v| v.is_finite()), "{variant} softmax: {y:?}");
        // global max pool: NaN wins its map wherever it lies, and takes the gradient
        let x = [1.0, 5.0, nan, 2.0, 7.0, 3.0];
        let (tx, ty, targ, tdx) = (upload(&x, &[1, 3, 1, 2]), d.zeros(&[1, 2]).unwrap(), d.zeros_of(&[1, 2], DType::U32).unwrap(), d.zeros(&[1, 3, 1, 2]).unwrap());
        run(&[pool::global_max_pool_forward(&d, &tx, &ty, &targ).unwrap(), pool::global_max_pool_backward(&d, &upload(&[1.0, 1.0], &[1, 2]), &targ, &tdx).unwrap()]);
        let (y, dx) = (read(&ty), read(&tdx));
        // channel 0 holds 1, NaN, 7: NaN wins over the later 7; channel 1 holds 5, 2, 3
        assert!(y[0].is_nan() && y[1] == 5.0, "{variant} global max pool: {y:?}");
        assert_eq!(dx.iter().map(|v| *v as i32).collect::<Vec<_>>(), [0, 1, 1, 0, 0, 0], "{variant}: the gradient goes to the NaN");
    });
}

/// Wrong shapes and constants are errors naming the values, never a dispatch.
#[test]
fn bad_arguments_are_refused_with_their_values() {
    let d = device();
    let (a, b, m) = (d.zeros(&[6]).unwrap(), d.zeros(&[5]).unwrap(), d.zeros(&[2, 3]).unwrap());
    let err = |r: convoy::Result<convoy::kernels::Dispatch>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(activation::activation_forward(&d, Function::Sigmoid, &a, &b)).contains("[5]"));
    let bad = Function::Relu { max_value: -1.0, negative_slope: 0.0 };
    assert!(err(activation::activation_forward(&d, bad, &a, &m)).contains("-1"));
    let bad = Function::Relu { max_value: f32::INFINITY, negative_slope: f32::NAN };
    assert!(err(activation::activation_backward(&d, bad, &a, &a.clone(), &m)).contains("NaN"));
    assert!(err(activation::activation_forward(&d, Function::Tanh, &a, &a)).contains("shares a buffer"));
    assert!(err(activation::softmax_forward(&d, &m, &a)).contains("[6]"));
    assert!(err(activation::softmax_forward(&d, &d.zeros(&[2, 0]).unwrap(), &d.zeros(&[2, 0]).unwrap())).contains("[2, 0]"));
    assert!(err(activation::channel_affine(&d, &m, &[1.0, 2.0], &[0.0, 0.0], &d.zeros(&[2, 3]).unwrap())).contains("2 scales"));
    assert!(err(activation::channel_affine(&d, &m, &[f32::INFINITY], &[0.0], &d.zeros(&[2, 3]).unwrap())).contains("inf"));
    let x4: Tensor = d.zeros(&[1, 2, 2, 3]).unwrap();
    assert!(err(pool::global_max_pool_forward(&d, &x4, &d.zeros(&[1, 4]).unwrap(), &d.zeros_of(&[1, 3], DType::U32).unwrap())).contains("[1, 4]"));
}

// ---- f16 storage ----------------------------------------------------------------------

/// f16 runs the vec4 kernels alone, so its counts are whole quads: one, a few, several
/// workgroups, and a large one (2^18 + 4, past any one workgroup's tail).
const SIZES_F16: &[usize] = &[4, 12, 1000, 4100, (1 << 18) + 4];

/// The f32 kernel's own error, which the f16 result carries into its rounding: relative,
/// and absolute per unit of |dy| (`scale`). The ReLUs round once in f32 (slope * x, dy *
/// slope); the smooth functions are allowed 2^-16 (128 ulp of f32: GELU's 6 + x^2 ulp for
/// |x| < 4, tanh's 8), and 2^-20 absolute where a derivative crosses zero (GELU's, SiLU's),
/// as f32 terms of order 1 cancel there and only an absolute bound holds.
fn kernel_err(f: Function, scale: f64) -> (f64, f64) {
    match f {
        Function::Relu { .. } => (2f64.powi(-24), 0.0),
        _ => (2f64.powi(-16), 2f64.powi(-20) * scale),
    }
}

/// Asserts an f16 result is within one f16 rounding of `want`, the f64 value on the same
/// f16 inputs: half an f16 ulp (2^-11 of |want|, 2^-25 among the subnormals) plus the f32
/// kernel's own error `(rel, abs)`. A value past f16's range must be infinite (loss scaling
/// watches for it), NaN NaN. Returns the largest error in units of the bound.
#[track_caller]
fn assert_within_f16(case: &str, got: &[f32], want: &[f64], (rel, abs): (f64, f64)) -> f64 {
    assert_eq!(got.len(), want.len(), "{case}: length mismatch");
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{case}: element {i} is {g}, expected NaN");
            continue;
        }
        // 65520 is the midpoint between f16's largest value and the next step: it and
        // everything past it round to infinity
        if w.abs() * (1.0 - rel) >= 65520.0 {
            assert!(g.is_infinite() && (g > 0.0) == (w > 0.0), "{case}: element {i} is {g}, expected {w} (past f16's range: infinite)");
            continue;
        }
        assert!(g.is_finite(), "{case}: element {i} is {g}, expected {w}");
        let bound = w.abs() * (2f64.powi(-11) * (1.0 + rel) + rel) + abs + 2f64.powi(-25);
        let e = (g as f64 - w).abs() / bound;
        assert!(e <= 1.0, "{case}: element {i} is {g}, expected {w} (error {:.3e} > {bound:.3e})", (g as f64 - w).abs());
        worst = worst.max(e);
    }
    worst
}

/// Forward and backward of `f` with x, y, dy and dx all f16, against f64 on the f16 inputs.
fn check_function_f16(r: &mut StdRng, f: Function, n: usize, case: &str) {
    let d = device();
    let x: Vec<f32> = inputs(r, n, f).into_iter().map(to_half).collect();
    let dy = random_half(r, n);
    let shape = [n / 4, 4];
    // y and dx start as garbage: the kernels must overwrite every element
    let (tx, tdy) = (upload_f16(&x, &shape), upload_f16(&dy, &shape));
    let (ty, tdx) = (upload_f16(&vec![1234.5; n], &shape), upload_f16(&vec![1234.5; n], &shape));
    let forward = activation::activation_forward(&d, f, &tx, &ty).unwrap();
    let backward = activation::activation_backward(&d, f, &tdy, &tx, &tdx).unwrap();
    for dispatch in [&forward, &backward] {
        assert!(dispatch.path_tokens().any(|t| t == "store=f16") && dispatch.label.ends_with('4'), "{case}: path {}", dispatch.path);
    }
    run(&[forward, backward]);
    let want: Vec<(f64, f64)> = x.iter().map(|&v| reference(f, v as f64)).collect();
    let want_y: Vec<f64> = want.iter().map(|w| w.0).collect();
    let want_dx: Vec<f64> = want.iter().zip(&dy).map(|(w, &g)| w.1 * g as f64).collect();
    let ey = assert_within_f16(&format!("{case} forward"), &read_f16(&ty), &want_y, kernel_err(f, 1.0));
    let edx = assert_within_f16(&format!("{case} backward"), &read_f16(&tdx), &want_dx, kernel_err(f, 1.0));
    if n > 4096 {
        println!("{case}: worst error {ey:.2} (forward), {edx:.2} (backward) of one f16 rounding");
    }
}

/// Every function with its operands stored as f16, on whole quads from one to 2^18 + 4,
/// both shader variants: each value within one f16 rounding of f64 on the same f16 inputs.
#[test]
fn f16_storage_matches_f64_within_one_rounding() {
    let mut r = rng(0xf16);
    take_paths();
    on_each_variant(|variant| {
        for f in functions() {
            for &n in SIZES_F16 {
                check_function_f16(&mut r, f, n, &format!("{variant} f16 {f:?} n={n}"));
            }
        }
    });
    let mut expected = Vec::new();
    for entry in ["activation_forward", "activation_backward"] {
        expected.extend(Function::ALL.iter().map(|f| (entry, f.token().to_string())));
        expected.extend(want(entry, &["store=f16", "vec4"]));
    }
    let labels: std::collections::BTreeSet<String> = take_paths().iter().map(|p| p.replacen("4 ", " ", 1)).collect();
    assert_paths_cover("f16 activation", &labels, &expected, &[]);
}

/// NaN, ±inf, f16's extremes and subnormals through every function with f16 storage: each
/// result is the f32 kernel's on the same values, rounded once to f16. NaN stays NaN, an
/// infinity stays one of the same sign, and a gradient past f16's range (65504 times a
/// derivative above 1) becomes infinite, never 65504 or NaN.
#[test]
fn f16_storage_keeps_nan_and_infinity_and_overflows_to_infinity() {
    on_each_variant(|variant| {
        let d = device();
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        let x = [nan, inf, -inf, 0.0, -0.0, 6.0, 65504.0, -65504.0, 6e-8, -2.0, 0.5, 2.0];
        let dy = [1.0, -1.0, 0.5, nan, inf, -inf, 1.0, 1.0, 65504.0, -65504.0, 2.0, 65504.0];
        let n = x.len();
        let mut overflowed = false;
        for f in functions() {
            let (tx, tdy) = (upload_f16(&x, &[n]), upload_f16(&dy, &[n]));
            let (ty, tdx) = (d.zeros_of(&[n], DType::F16).unwrap(), d.zeros_of(&[n], DType::F16).unwrap());
            // the f32 kernel on the very values the f16 one reads
            let (x32, dy32): (Vec<f32>, Vec<f32>) = (x.iter().map(|&v| to_half(v)).collect(), dy.iter().map(|&v| to_half(v)).collect());
            let (tx32, tdy32, ty32, tdx32) = (upload(&x32, &[n]), upload(&dy32, &[n]), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap());
            run(&[
                activation::activation_forward(&d, f, &tx, &ty).unwrap(),
                activation::activation_backward(&d, f, &tdy, &tx, &tdx).unwrap(),
                activation::activation_forward(&d, f, &tx32, &ty32).unwrap(),
                activation::activation_backward(&d, f, &tdy32, &tx32, &tdx32).unwrap(),
            ]);
            for (what, got, want) in [("forward", read_f16(&ty), read(&ty32)), ("backward", read_f16(&tdx), read(&tdx32))] {
                let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                overflowed |= want.iter().zip(&got).any(|(w, g)| w.is_finite() && g.is_infinite());
                // one f16 rounding of the f32 value, give or take an f32 ulp of its own
                assert_within_f16(&format!("{variant} f16 {f:?} {what} on {x:?}, dy {dy:?}"), &got, &want, (2f64.powi(-23), 0.0));
            }
        }
        assert!(overflowed, "{variant}: no gradient overflowed f16: the pattern must reach past 65504");
    });
}

/// Mixed storages, f16 off whole quads, and f16 into the f32-only kernels are errors naming
/// the kernel, the operands, their shapes and dtypes.
#[test]
fn f16_operands_are_checked() {
    let d = device();
    let h = |n: usize| d.zeros_of(&[n], DType::F16).unwrap();
    let f = |n: usize| d.zeros(&[n]).unwrap();
    let err = |r: convoy::Result<convoy::kernels::Dispatch>| r.map(|_| ()).unwrap_err().to_string();
    let silu = Function::Silu;
    let relu6 = Function::Relu { max_value: 6.0, negative_slope: 0.0 };
    let cases = [
        (err(activation::activation_forward(&d, silu, &h(8), &f(8))), "activation_forward: y [8] is F32, expected F16 as x [8]"),
        (err(activation::activation_forward(&d, relu6, &f(8), &h(8))), "activation_forward: y [8] is F16, expected F32 as x [8]"),
        // a gradient is stored as its activation: dy, x and dx share one storage
        (err(activation::activation_backward(&d, silu, &f(8), &h(8), &h(8))), "activation_backward: dy [8] is F32, expected F16 as x [8]"),
        (err(activation::activation_backward(&d, relu6, &h(8), &h(8), &f(8))), "activation_backward: dx [8] is F32, expected F16 as x [8]"),
        (err(activation::activation_backward(&d, silu, &h(8), &f(8), &h(8))), "activation_backward: dy [8] is F16, expected F32 as x [8]"),
        // f16 is stored four at a time: no scalar path
        (err(activation::activation_forward(&d, silu, &h(6), &h(6))), "activation_forward: x [6] is F16 with 6 elements, expected a multiple of 4"),
        (err(activation::activation_backward(&d, relu6, &h(10), &h(10), &h(10))), "activation_backward: x [10] is F16 with 10 elements, expected a multiple of 4"),
        (err(activation::activation_forward(&d, silu, &d.zeros_of(&[8], DType::U32).unwrap(), &f(8))), "activation_forward: x [8] is U32, expected F32 or F16"),
        // softmax and the channel maps run on f32 alone
        (err(activation::softmax_forward(&d, &h(8), &f(8))), "softmax_forward: x [8] is F16, expected F32 (only activation_forward and activation_backward"),
        (err(activation::softmax_backward(&d, &f(8), &f(8), &h(8))), "softmax_backward: dx [8] is F16, expected F32"),
        (err(activation::channel_affine(&d, &h(8), &[2.0], &[0.0], &f(8))), "channel_affine: x [8] is F16, expected F32"),
        (err(activation::channel_scale(&d, &f(8), &[2.0], &h(8))), "channel_scale: dx [8] is F16, expected F32"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "expected an error containing {want:?}, got {got:?}");
    }
}
