//! LayerNormalization (forward, dx, dgamma, dbeta) against a plain-Rust f64 reference:
//! two-pass mean and biased variance per row, Keras 3's defaults; many short rows and few
//! long ones, a folded grid, a NaN kept in its row, and the wrapper's path coverage.

use convoy::kernels::layernorm;
use convoy::Tensor;
use rand::RngExt;

use crate::common::*;

const EPS: f32 = 1e-3;

/// One case: x is `offset[r] + scale[r] * u` per row, so row means sit away from zero.
struct Case {
    shape: Vec<usize>,
    c: usize,
    x: Vec<f32>,
    dy: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

fn case(seed: u64, shape: &[usize]) -> Case {
    let mut r = rng(seed);
    let c = *shape.last().unwrap();
    let n: usize = shape.iter().product();
    let rows = n / c;
    let offsets: Vec<f32> = (0..rows).map(|_| 3.0 + r.random_range(-2.0f32..2.0)).collect();
    let scales: Vec<f32> = (0..rows).map(|_| r.random_range(0.3f32..2.0)).collect();
    let u = random(&mut r, n);
    let x = u.iter().enumerate().map(|(i, v)| offsets[i / c] + scales[i / c] * v).collect();
    Case {
        shape: shape.to_vec(),
        c,
        x,
        dy: random(&mut r, n),
        gamma: (0..c).map(|_| r.random_range(0.5f32..1.5) * if r.random_bool(0.2) { -1.0 } else { 1.0 }).collect(),
        beta: random(&mut r, c),
    }
}

/// f64 forward and backward: (y, mean, inv_std, dx, dgamma, dbeta).
#[allow(clippy::type_complexity)]
fn reference(k: &Case) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = k.c;
    let n = c as f64;
    let (mut y, mut dx) = (vec![0.0; k.x.len()], vec![0.0; k.x.len()]);
    let (mut means, mut invs) = (Vec::new(), Vec::new());
    let (mut dgamma, mut dbeta) = (vec![0.0; c], vec![0.0; c]);
    for (r, row) in k.x.chunks(c).enumerate() {
        let mean = row.iter().map(|v| *v as f64).sum::<f64>() / n;
        let var = row.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + EPS as f64).sqrt();
        let xh: Vec<f64> = row.iter().map(|v| (*v as f64 - mean) * inv).collect();
        let dy = &k.dy[r * c..(r + 1) * c];
        let g: Vec<f64> = (0..c).map(|j| dy[j] as f64 * k.gamma[j] as f64).collect();
        let sg: f64 = g.iter().sum();
        let sgx: f64 = g.iter().zip(&xh).map(|(a, b)| a * b).sum();
        for j in 0..c {
            y[r * c + j] = k.gamma[j] as f64 * xh[j] + k.beta[j] as f64;
            dx[r * c + j] = inv / n * (n * g[j] - sg - xh[j] * sgx);
            dgamma[j] += dy[j] as f64 * xh[j];
            dbeta[j] += dy[j] as f64;
        }
        means.push(mean);
        invs.push(inv);
    }
    (y, means, invs, dx, dgamma, dbeta)
}

/// gamma, beta, dgamma, dbeta as 256-byte-aligned views of one buffer, the way a model
/// lays out its parameters and gradients; outputs start stale so that accumulation shows.
struct Run {
    y: Tensor,
    saved: Tensor,
    dx: Tensor,
    dgamma: Tensor,
    dbeta: Tensor,
}

fn run_case(k: &Case) -> Run {
    let d = device();
    let c = k.c;
    let rows = k.x.len() / c;
    let stride = c.div_ceil(64) * 64;
    let mut flat = vec![-3.0f32; 2 * stride];
    flat[..c].copy_from_slice(&k.gamma);
    flat[stride..stride + c].copy_from_slice(&k.beta);
    let params = upload(&flat, &[2 * stride]);
    let grads = upload(&vec![-3.0f32; 2 * stride], &[2 * stride]);
    let (gamma, beta) = (params.view(0, &[c]).unwrap(), params.view(stride, &[c]).unwrap());
    let (dgamma, dbeta) = (grads.view(0, &[c]).unwrap(), grads.view(stride, &[c]).unwrap());
    let stale = |shape: &[usize]| upload(&vec![-3.0; shape.iter().product()], shape);
    let (x, dy, y, dx, saved) = (upload(&k.x, &k.shape), upload(&k.dy, &k.shape), stale(&k.shape), stale(&k.shape), stale(&[rows, 2]));
    run(&layernorm::forward(&d, EPS, &x, &gamma, &beta, &saved, &y).unwrap());
    run(&layernorm::backward(&d, &x, &dy, &gamma, &saved, &dx, &dgamma, &dbeta).unwrap());
    Run { y, saved, dx, dgamma, dbeta }
}

/// dx cancels each `inv_std * dy * gamma` against the row's sums: where the result is near
/// zero (a row of one channel, whose dx is exactly 0) its error is the rounding of those
/// terms (an adapter may fuse the product into the subtraction), so it is measured against
/// their size as well as against dx's own.
#[track_caller]
fn assert_dx(case: &str, got: &[f32], want: &[f64], k: &Case, inv: &[f64]) {
    assert!(got.iter().all(|g| g.is_finite()), "{case}: non-finite output");
    let terms = (0..want.len()).map(|i| inv[i / k.c] * (k.dy[i] as f64 * k.gamma[i % k.c] as f64).abs());
    let scale = want.iter().map(|w| w.abs()).chain(terms).fold(1e-30, f64::max);
    let e = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max) / scale;
    assert!(e < TOL, "{case}: relative error {e:.3e} >= {TOL:e} (to the scale {scale:.3e} of dx and its terms)");
}

fn check(name: &str, shape: &[usize], seed: u64) {
    let k = case(seed, shape);
    let out = run_case(&k);
    let (y, mean, inv, dx, dgamma, dbeta) = reference(&k);
    let saved = read(&out.saved);
    let (got_mean, got_inv): (Vec<f32>, Vec<f32>) = saved.chunks(2).map(|s| (s[0], s[1])).unzip();
    assert_close(&format!("{name}: y"), &read(&out.y), &y);
    assert_close(&format!("{name}: saved mean"), &got_mean, &mean);
    assert_close(&format!("{name}: saved inv_std"), &got_inv, &inv);
    assert_dx(&format!("{name}: dx"), &read(&out.dx), &dx, &k, &inv);
    assert_close(&format!("{name}: dgamma"), &read(&out.dgamma), &dgamma);
    assert_close(&format!("{name}: dbeta"), &read(&out.dbeta), &dbeta);
}

/// Rows 1 to 70,000 and channels 1 to 1024: several short rows to a workgroup, one row
/// per workgroup, lanes that walk a long row, one and several row chunks and column tiles
/// of the parameter sums; NHWC and flat inputs.
const SHAPES: &[&[usize]] = &[
    &[1, 1],
    &[1, 3],
    &[1, 1024],
    &[7, 5],
    &[7, 257],
    &[7, 1],
    &[250, 4],
    &[2, 5, 25, 64],
    &[250, 1024],
    &[4099, 3],
    &[4099, 257],
    &[70000, 1],
    &[7, 100, 100, 5],
];

#[test]
fn layernorm_matches_f64_on_awkward_shapes() {
    take_paths();
    on_each_variant(|variant| {
        for (i, shape) in SHAPES.iter().enumerate() {
            check(&format!("{variant} layernorm {shape:?}"), shape, 40 + i as u64);
        }
    });
    // More than 65,535 one-row workgroups: the grid folds into 2-D (what ships only: the
    // software adapter takes seconds per pass here).
    on_device(devices()[1].clone(), || check("unchecked layernorm folded [70000, 257]", &[70000, 257], 99));
    let mut expected = Vec::new();
    for entry in ["forward_rows", "backward_rows"] {
        for token in ["rows_per_group=many", "rows_per_group=one", "cols_per_lane=one", "cols_per_lane=many", "grid=1d", "grid=2d"] {
            expected.push((entry, token.to_string()));
        }
    }
    for entry in ["params_partial", "params_merge"] {
        for token in ["chunks=single", "chunks=multi", "cols=one_tile", "cols=tiled"] {
            expected.push((entry, token.to_string()));
        }
    }
    assert_paths_cover("layernorm", &take_paths(), &expected, &[]);
}

/// A NaN in one row's input makes that row's output and input gradient NaN and leaves
/// every other row as the reference computes it (the statistics are per row).
#[test]
fn layernorm_keeps_a_nan_in_its_row() {
    on_each_variant(|variant| {
        for (shape, bad) in [([9usize, 5usize], 4usize), ([300, 64], 0), ([5, 300], 2)] {
            let name = format!("{variant} layernorm NaN in row {bad} of {shape:?}");
            let mut k = case(7, &shape);
            let c = k.c;
            k.x[bad * c + c / 2] = f32::NAN;
            let out = run_case(&k);
            let (y, _, _, dx, _, _) = reference(&k);
            for (what, got, want) in [("y", read(&out.y), y), ("dx", read(&out.dx), dx)] {
                for r in 0..shape[0] {
                    let (g, w) = (&got[r * c..(r + 1) * c], &want[r * c..(r + 1) * c]);
                    if r == bad {
                        assert!(g.iter().all(|v| v.is_nan()), "{name}: {what} of the NaN row is {g:?}");
                    } else {
                        assert_close(&format!("{name}: {what} row {r}"), g, w);
                    }
                }
            }
        }
    });
}

/// Shapes that do not fit are refused, naming the operand and the values.
#[test]
fn layernorm_refuses_mismatched_shapes() {
    let d = device();
    let t = |shape: &[usize]| upload(&vec![0.0; shape.iter().product()], shape);
    let (x, y, g, b, saved) = (t(&[4, 3]), t(&[4, 3]), t(&[3]), t(&[3]), t(&[4, 2]));
    let err = layernorm::forward(&d, EPS, &x, &t(&[4]), &b, &saved, &y).unwrap_err().to_string();
    assert!(err.contains("gamma") && err.contains("[4]") && err.contains("[3]"), "{err}");
    let err = layernorm::forward(&d, EPS, &x, &g, &b, &t(&[2, 4]), &y).unwrap_err().to_string();
    assert!(err.contains("saved") && err.contains("[4, 2]"), "{err}");
    let err = layernorm::forward(&d, 0.0, &x, &g, &b, &saved, &y).unwrap_err().to_string();
    assert!(err.contains("epsilon") && err.contains('0'), "{err}");
    let err = layernorm::backward(&d, &x, &t(&[4, 4]), &g, &saved, &y, &t(&[3]), &t(&[3])).unwrap_err().to_string();
    assert!(err.contains("dy") && err.contains("[4, 4]"), "{err}");
}
