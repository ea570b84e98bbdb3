//! The tensor-core GEMM (`GemmOptions::mixed`, shaders/conv2d_coop.wgsl) against the f64
//! references, with bounds for f16 operands: every element within twice f16's unit
//! roundoff of the sum of |a| |b| over its K (the rounding of both operands, rigorous), and
//! the whole output within 1e-3 max-norm relative error (what random rounding gives is near
//! 1e-4; a dropped K step of a long K is 4e-3). Runs where the device has cooperative
//! matrices (`CONVOY_TEST_DEVICE` on an NVIDIA GPU); says so and passes elsewhere, where
//! `mixed` runs the f32 product (tested by the other files).

use convoy::kernels::conv2d::{self, Conv2dGeometry, Padding};
use convoy::kernels::dense;
use convoy::kernels::gemm::GemmOptions;

use crate::common::*;
use crate::conv2d::{backward_data_ref, backward_weights_ref, forward_ref};
use crate::dense::{matmul_ref, shapes};

/// f16's unit roundoff, 2^-11: a product of two rounded operands is within 2u of exact.
const F16_U: f64 = 1.0 / 2048.0;
const MIXED_TOL: f64 = 1e-3;

const MIXED: GemmOptions = GemmOptions { tile: None, splits: None, mixed: true };

fn abs(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

/// Asserts `got` is within the f16 bounds of `want`, `bound` the f64 sums of |a| |b|.
#[track_caller]
fn assert_mixed(case: &str, got: &[f32], want: &[f64], bound: &[f64]) -> f64 {
    assert!(got.iter().all(|g| g.is_finite()), "{case}: non-finite output");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    for (i, ((g, w), b)) in got.iter().zip(want).zip(bound).enumerate() {
        let limit = 2.0 * F16_U * b * (1.0 + 1e-3) + 1e-6 * scale;
        assert!((*g as f64 - w).abs() <= limit, "{case}: element {i} is {g}, f64 {w}, beyond the f16 bound {limit:.3e}");
    }
    let e = rel_err(got, want);
    assert!(e < MIXED_TOL, "{case}: relative error {e:.3e} >= {MIXED_TOL:e}");
    e
}

fn matmul_case(mkn: (usize, usize, usize), ta: bool, tb: bool, opts: &GemmOptions, seed: u64) -> f64 {
    let d = device();
    let (m, k, n) = mkn;
    let mut r = rng(seed);
    let (a, b) = (random(&mut r, m * k), random(&mut r, k * n));
    let (sa, sb) = shapes(m, k, n, ta, tb);
    let (ta_, tb_, tc) = (upload(&a, &sa), upload(&b, &sb), upload(&random(&mut r, m * n), &[m, n]));
    run(&dense::matmul_with(&d, &ta_, &tb_, &tc, ta, tb, opts).unwrap());
    let case = format!("mixed matmul {mkn:?} ta={ta} tb={tb} {opts:?}");
    assert_mixed(&case, &read(&tc), &matmul_ref(&a, &b, mkn, ta, tb), &matmul_ref(&abs(&a), &abs(&b), mkn, ta, tb))
}

fn conv_case(g: &Conv2dGeometry, opts: &GemmOptions, seed: u64) -> [f64; 3] {
    let d = device();
    let mut r = rng(seed);
    let (xs, ws, ys) = (g.input_shape(), g.kernel_shape(), g.output_shape());
    let (xl, wl, yl) = (xs.iter().product(), ws.iter().product(), ys.iter().product());
    let (x, w, dy) = (random(&mut r, xl), random(&mut r, wl), random(&mut r, yl));
    let (tx, tw, tdy) = (upload(&x, &xs), upload(&w, &ws), upload(&dy, &ys));
    let (ty, tdx, tdw) = (upload(&random(&mut r, yl), &ys), upload(&random(&mut r, xl), &xs), upload(&random(&mut r, wl), &ws));
    let mut all = conv2d::forward_with(&d, g, &tx, &tw, &ty, opts).unwrap();
    all.extend(conv2d::backward_data_with(&d, g, &tdy, &tw, &tdx, opts).unwrap());
    all.extend(conv2d::backward_weights_with(&d, g, &tx, &tdy, &tdw, opts).unwrap());
    run(&all);
    let (ax, aw, ady) = (abs(&x), abs(&w), abs(&dy));
    let case = format!("mixed conv {g:?} {opts:?}");
    [
        assert_mixed(&format!("{case} forward"), &read(&ty), &forward_ref(g, &x, &w), &forward_ref(g, &ax, &aw)),
        assert_mixed(&format!("{case} backward_data"), &read(&tdx), &backward_data_ref(g, &dy, &w), &backward_data_ref(g, &ady, &aw)),
        assert_mixed(&format!("{case} backward_weights"), &read(&tdw), &backward_weights_ref(g, &x, &dy), &backward_weights_ref(g, &ax, &ady)),
    ]
}

/// Every gather the f32 engine has, through the cooperative kernel: plain and transposed
/// operands, the convolution's three products (vec4 and scalar images, phase products of a
/// stride-2 input gradient, a 1x1 downsample whose odd phases meet no tap), both tiles it
/// runs (wide and 17-32 columns), edges of every tile size, K split automatically and by
/// force; narrow outputs fall back to the f32 product. The coverage assertion fails when a
/// cooperative path went untested.
#[test]
fn mixed_products_match_f64_within_f16_bounds() {
    if !device().has_coop16() {
        println!("mixed: {} has no 16x16x16 f16 cooperative matrices; the f32 products stand in (tested elsewhere)", device().name());
        return;
    }
    take_paths();
    on_each_variant(|_| {
        let mut worst = 0.0f64;
        for (s, &mkn) in [(65, 70, 67), (300, 64, 64), (129, 33, 31), (4, 65536, 64), (1000, 576, 128), (7, 13, 10)].iter().enumerate() {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                worst = worst.max(matmul_case(mkn, ta, tb, &MIXED, 40 + s as u64));
            }
        }
        for splits in [2, 5] {
            worst = worst.max(matmul_case((132, 300, 68), false, false, &GemmOptions { splits: Some(splits), ..MIXED }, 50));
        }
        let convs = [
            Conv2dGeometry::new(&[8, 16, 16, 64], 64, (3, 3), (1, 1), Padding::Explicit(1, 1)).unwrap(),
            Conv2dGeometry::new(&[4, 29, 29, 3], 64, (7, 7), (2, 2), Padding::Explicit(3, 3)).unwrap(),
            Conv2dGeometry::new(&[6, 14, 14, 64], 128, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(),
            Conv2dGeometry::new(&[5, 9, 9, 12], 32, (3, 3), (2, 2), Padding::Same).unwrap(),
            Conv2dGeometry::new(&[3, 7, 7, 5], 33, (3, 3), (1, 1), Padding::Valid).unwrap(),
        ];
        for (i, g) in convs.iter().enumerate() {
            for e in conv_case(g, &MIXED, 60 + i as u64) {
                worst = worst.max(e);
            }
        }
        println!("mixed products: worst max-norm relative error {worst:.1e}");
    });
    let taken = take_paths();
    let mut expected = Vec::new();
    for a in ["a=Rows", "a=Cols", "a=Im2col", "a=Im2colT", "a=DyStuffed"] {
        expected.push(("gemm_coop", a.to_string()));
    }
    for t in ["tile=M128N64", "tile=M128N32", "b=Rows", "b=BlockedT", "phase", "taps=none", "split=none", "split=forced", "quad_a", "scalar_a", "quad_c", "scalar_c"] {
        expected.push(("gemm_coop", t.to_string()));
    }
    assert_paths_cover("mixed gemm", &taken, &expected, &[]);
}
