//! Path-complete sweeps: shapes drawn from a seeded generator so that every branch a kernel
//! family can take is taken, each case checked against the f64 references of the family's
//! own test file on the checked and the unchecked shaders, and a coverage assertion that
//! fails when a path the code can take was never taken. Every dispatch names its path
//! (`Dispatch::path`, written by the wrappers from the values that pick the branch), so
//! the coverage cannot drift from the code.
//!
//! Paths the software adapter cannot reach (its storage bindings stop at 128 MiB) run only
//! with `CONVOY_TEST_DEVICE` set and are listed as skipped otherwise.

use convoy::kernels::batchnorm::BatchNormConfig;
use convoy::kernels::conv2d::{Conv2dGeometry, Padding};
use convoy::kernels::gemm::{GemmOptions, Tile};
use convoy::kernels::{dense, elementwise, reduce};
use rand::rngs::StdRng;
use rand::RngExt;

use crate::common::*;

/// The seed every sweep derives its shapes and data from; printed in each failure message.
const SEED: u64 = 0x5eed_2025;

/// `(entry, token)` pairs, for the coverage lists.
fn want(entry: &'static str, tokens: &[&str]) -> Vec<(&'static str, String)> {
    tokens.iter().map(|t| (entry, t.to_string())).collect()
}

fn pick<T: Copy>(r: &mut StdRng, from: &[T]) -> T {
    from[r.random_range(0..from.len())]
}

/// A random convolution: odd and even sizes, channel counts on and off multiples of 4 and
/// 16, strides 1 and 2, every padding, square and oblong kernels.
fn random_conv(r: &mut StdRng) -> Conv2dGeometry {
    let batch = pick(r, &[1, 2, 3, 4]);
    let (h, w) = (r.random_range(3..11), r.random_range(3..11));
    let in_c = pick(r, &[1, 3, 4, 5, 8, 16]);
    let filters = pick(r, &[1, 6, 12, 16, 32, 33, 64]);
    let kernel = pick(r, &[(1, 1), (3, 3), (2, 3), (3, 3)]);
    let strides = pick(r, &[(1, 1), (2, 2), (1, 2), (2, 2)]);
    let padding = pick(r, &[Padding::Same, Padding::Valid, Padding::Explicit(1, 1)]);
    Conv2dGeometry::new(&[batch, h.max(kernel.0), w.max(kernel.1), in_c], filters, kernel, strides, padding).unwrap()
}

/// Every path of the GEMM engine: each tile (chosen by the engine, not only forced), K
/// split by the automatic rule for short and long K and by force, every A and B gather,
/// vec4 and scalar operands, the phased stride-2 input gradient, bias, the split-K reduce
/// and the column sums in one and in several chunks, and a folded grid.
#[test]
fn gemm_takes_every_path() {
    let mut r = rng(SEED);
    take_paths();
    on_each_variant(|variant| {
        // Random convolutions through the automatic choices, then forced tiles and splits.
        for i in 0..12 {
            let g = random_conv(&mut r);
            let case = format!("{variant} seed {SEED:#x} conv {i}: {g:?}");
            check(&g, &GemmOptions::default(), &case, SEED + i);
            let opts = GemmOptions { tile: Some(pick(&mut r, &Tile::ALL)), splits: Some(r.random_range(1..5)) };
            check(&g, &opts, &format!("{case} {opts:?}"), SEED + i);
        }
        // The stride-2 input gradient in phase order (batch 4: a phase is whole 64-row
        // tiles), and at batch 250, where it is not.
        for batch in [4, 250] {
            let g = Conv2dGeometry::new(&[batch, 8, 8, 8], 16, (3, 3), (2, 2), Padding::Same).unwrap();
            check(&g, &GemmOptions::default(), &format!("{variant} seed {SEED:#x} phased? {g:?}"), SEED + batch as u64);
        }
        // (m, k, n, trans_a, trans_b) that make the engine pick each tile and split rule:
        // M128N64 and M128N32 over a long K (auto_long_k), M64N64 over many rows, M32N32
        // with a short-K automatic split, M64N16 for narrow outputs.
        for (mkn, ta, tb) in [((4, 65536, 64), true, false), ((4, 65536, 32), true, true), ((16384, 8, 64), false, false), ((64, 2048, 64), false, true), ((33, 70, 10), false, false)] {
            check_matmul(mkn, ta, tb, &GemmOptions::default(), SEED);
        }
        // Bias in the tile and through the split-K reduce; column sums in one and many chunks.
        dense_with_bias(&mut r, (5, 17, 10), variant);
        dense_with_bias(&mut r, (6, 2048, 12), variant);
        dense_bias_gradient(&mut r, 2500, 70, variant);
        dense_bias_gradient(&mut r, 9, 7, variant);
    });

    let mut expected: Vec<(&str, String)> = Tile::ALL.iter().map(|t| ("gemm", format!("tile={t:?}"))).collect();
    expected.extend(want("gemm", &["a=Rows", "a=Cols", "a=Im2col", "a=Im2colT", "a=DyStuffed", "b=Rows", "b=BlockedT"]));
    expected.extend(want("gemm", &["split=none", "split=forced", "split=auto", "split=auto_long_k"]));
    expected.extend(want("gemm", &["quad_a", "scalar_a", "quad_b", "scalar_b", "quad_c", "scalar_c", "phased", "bias", "grid=1d"]));
    expected.extend(want("reduce_splits", &["quad_c", "scalar_c", "bias"]));
    expected.extend(want("column_sums", &["chunks=single", "chunks=multi"]));
    // The GPU sweep: a split-K reduce over more than 65,535 * 256 quads of output (268 MB,
    // past the software adapter's 128 MiB bindings) folds its grid.
    if test_selection().is_some() {
        on_device(devices()[1].clone(), || {
            check_matmul((65_535 * 64 + 64, 32, 16), false, false, &GemmOptions { tile: Some(Tile::M64N16), splits: Some(2) }, SEED);
        });
    }
    // A reduce over more than 65,535 * 256 quads binds more than 128 MiB of output. The
    // GEMM's own folded grid takes a few million rows: `gemm_on_a_folded_grid_matches_f64`
    // asserts that path and its result.
    let gpu_only = want("reduce_splits", &["grid=2d"]);
    assert_paths_cover("gemm", &take_paths(), &expected, &gpu_only);
}

/// A grid folded into 2-D: more row tiles than one grid dimension holds (65,535 on the
/// software adapter), as a convolution over a few million output pixels has. (Folding by
/// K splits instead, 70,000 forced splits of one output, looked wrong: it is the f32 sum of
/// 70,000 partials in sequence, 1.4e-3 already at 65,535 splits on a 1-D grid; the engine
/// never chooses more than K / 256 splits or 128k invocations' worth.)
#[test]
fn gemm_on_a_folded_grid_matches_f64() {
    take_paths();
    let folded = GemmOptions { tile: Some(Tile::M64N16), splits: Some(1) };
    on_device(devices()[1].clone(), || {
        check_matmul((64 * 65_536 + 1, 4, 4), false, false, &folded, SEED);
    });
    assert_paths_cover("gemm folded", &take_paths(), &want("gemm", &["grid=2d"]), &[]);
}

/// `dense_forward` with bias (a long K splits, and the reduce adds the bias).
fn dense_with_bias(r: &mut StdRng, (batch, inputs, units): (usize, usize, usize), variant: &str) {
    let d = device();
    let (x, w, b) = (random(r, batch * inputs), random(r, inputs * units), random(r, units));
    let (tx, tw, tb, ty) = (upload(&x, &[batch, inputs]), upload(&w, &[inputs, units]), upload(&b, &[units]), upload(&random(r, batch * units), &[batch, units]));
    run(&dense::dense_forward(&d, &tx, &tw, Some(&tb), &ty).unwrap());
    let case = format!("{variant} seed {SEED:#x} dense forward {batch}x{inputs}->{units} bias");
    assert_close(&case, &read(&ty), &dense_forward_ref(&x, &w, Some(&b), (batch, inputs, units)));
}

/// The bias gradient of a dense layer: column sums over `batch` rows.
fn dense_bias_gradient(r: &mut StdRng, batch: usize, units: usize, variant: &str) {
    let d = device();
    let (x, dy) = (random(r, batch * 3), random(r, batch * units));
    let (tx, tw, tdy) = (upload(&x, &[batch, 3]), upload(&random(r, 3 * units), &[3, units]), upload(&dy, &[batch, units]));
    let (tdw, tdb) = (upload(&random(r, 3 * units), &[3, units]), upload(&random(r, units), &[units]));
    run(&dense::dense_backward(&d, &tx, &tw, &tdy, None, &tdw, Some(&tdb)).unwrap());
    let db: Vec<f64> = (0..units).map(|j| (0..batch).map(|i| dy[i * units + j] as f64).sum()).collect();
    assert_close(&format!("{variant} seed {SEED:#x} dense db {batch}x{units}"), &read(&tdb), &db);
}

/// Every path of BatchNormalization's training forward and backward: one and several row
/// chunks (and their merges), four-row and one-row loads, one column tile and several
/// (above 64 channels), vec4 and scalar per-element passes, and a folded grid.
#[test]
fn batchnorm_takes_every_path() {
    let mut r = rng(SEED + 1);
    take_paths();
    on_each_variant(|variant| {
        // Row counts from 1 to 70,000, channels from 1 to 260 (on and off multiples of 4).
        let mut shapes: Vec<Vec<usize>> = vec![vec![7, 3], vec![300, 3], vec![70_000, 3], vec![50, 130], vec![3000, 68]];
        for _ in 0..6 {
            // Two rows make dx a difference of near-equal terms (x_hat = ±1): f32 cannot
            // hold 1e-4 of a result that small, so the sweep starts at three.
            let rows = pick(&mut r, &[3, 5, 33, 250, 1000, 4099, 20_000]);
            shapes.push(vec![rows, pick(&mut r, &[1, 3, 4, 5, 12, 17, 64, 65, 128, 260])]);
        }
        for shape in shapes {
            let relu = r.random_bool(0.5);
            let cfg = BatchNormConfig { momentum: 0.6, relu, ..Default::default() };
            let name = format!("{variant} seed {:#x} batchnorm {shape:?} relu={relu}", SEED + 1);
            batchnorm_case(&mut r, &shape, &cfg, &name);
        }
    });
    // A folded per-element grid: more than 65,535 * 256 elements, channels not a multiple of 4.
    on_device(devices()[1].clone(), || {
        let cfg = BatchNormConfig { relu: true, ..Default::default() };
        batchnorm_case(&mut r, &[(65_535 * 256) / 3 + 5, 3], &cfg, &format!("unchecked seed {:#x} batchnorm folded", SEED + 1));
    });

    let mut expected = Vec::new();
    for entry in ["stats_partial", "backward_partial"] {
        expected.extend(want(entry, &["chunks=single", "chunks=multi", "rows=x4", "rows=x1", "cols=one_tile", "cols=tiled"]));
    }
    for entry in ["stats_finalize", "backward_merge"] {
        expected.extend(want(entry, &["chunks=single", "chunks=multi"]));
    }
    for entry in ["normalize_train", "backward_dx"] {
        expected.extend(want(entry, &["scalar", "grid=1d", "grid=2d"]));
    }
    for entry in ["normalize_train4", "backward_dx4"] {
        expected.extend(want(entry, &["vec4", "grid=1d"]));
    }
    // The vec4 passes fold only past 65,535 * 256 vec4s: a 256 MiB tensor, the GPU sweep.
    if test_selection().is_some() {
        on_device(devices()[1].clone(), || {
            let cfg = BatchNormConfig { relu: true, ..Default::default() };
            batchnorm_case(&mut r, &[(65_535 * 256 * 4) / 16 + 64, 16], &cfg, &format!("unchecked seed {:#x} batchnorm vec4 folded", SEED + 1));
        });
    }
    let gpu_only = [want("normalize_train4", &["grid=2d"]), want("backward_dx4", &["grid=2d"])].concat();
    assert_paths_cover("batchnorm", &take_paths(), &expected, &gpu_only);
}

/// Training forward and backward of one shape against f64.
fn batchnorm_case(r: &mut StdRng, shape: &[usize], cfg: &BatchNormConfig, name: &str) {
    let k = crate::batchnorm::case(r, shape, 0.0);
    let (out, dispatches) = crate::batchnorm::train(&k, cfg);
    run(&dispatches);
    crate::batchnorm::check_train(name, &k, cfg, &out);
    let dy = random(r, shape.iter().product());
    crate::batchnorm::check_backward(name, &k, cfg, &dy);
}

/// Element-wise kernels in vec4 and scalar form, and a folded scalar grid.
#[test]
fn elementwise_takes_every_path() {
    let mut r = rng(SEED + 2);
    take_paths();
    on_each_variant(|variant| {
        for _ in 0..6 {
            let n = pick(&mut r, &[1, 3, 4, 255, 256, 1001, 4100]);
            relu_and_add(&mut r, n, variant);
        }
    });
    on_device(devices()[1].clone(), || relu_and_add(&mut r, 65_535 * 256 + 5, "unchecked"));
    if test_selection().is_some() {
        // The GPU sweep: vec4 passes over more than 65,535 * 256 vec4s.
        on_device(devices()[1].clone(), || relu_and_add(&mut r, 65_535 * 256 * 4 + 8, "unchecked"));
    }

    let mut expected = Vec::new();
    for entry in ["relu_forward", "relu_backward", "add", "add_relu"] {
        expected.extend(want(entry, &["scalar", "grid=1d", "grid=2d"]));
    }
    for entry in ["relu_forward4", "relu_backward4", "add4", "add_relu4"] {
        expected.extend(want(entry, &["vec4", "grid=1d"]));
    }
    let gpu_only: Vec<_> = ["relu_forward4", "relu_backward4", "add4", "add_relu4"].iter().flat_map(|e| want(e, &["grid=2d"])).collect();
    assert_paths_cover("elementwise", &take_paths(), &expected, &gpu_only);
}

fn relu_and_add(r: &mut StdRng, n: usize, variant: &str) {
    let d = device();
    let (a, b) = (random(r, n), random(r, n));
    let (ta, tb) = (upload(&a, &[n]), upload(&b, &[n]));
    let (y, dx, s, sr) = (d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap());
    run(&[
        elementwise::relu_forward(&d, &ta, &y).unwrap(),
        elementwise::relu_backward(&d, &tb, &y, &dx).unwrap(),
        elementwise::add(&d, &ta, &tb, &s).unwrap(),
        elementwise::add_relu(&d, &ta, &tb, &sr).unwrap(),
    ]);
    let case = format!("{variant} seed {:#x} n={n}", SEED + 2);
    let relu: Vec<f64> = a.iter().map(|&v| (v as f64).max(0.0)).collect();
    assert_close(&format!("{case} relu_forward"), &read(&y), &relu);
    let masked: Vec<f64> = a.iter().zip(&b).map(|(&v, &g)| if v > 0.0 { g as f64 } else { 0.0 }).collect();
    assert_close(&format!("{case} relu_backward"), &read(&dx), &masked);
    let sum: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| x as f64 + y as f64).collect();
    assert_close(&format!("{case} add"), &read(&s), &sum);
    assert_close(&format!("{case} add_relu"), &read(&sr), &sum.iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
}

/// Column and vector sums: one pass, or partials and a merge; one column tile or several.
#[test]
fn reduce_takes_every_path() {
    let mut r = rng(SEED + 3);
    take_paths();
    on_each_variant(|variant| {
        for shape in [[7, 3], [5000, 3], [40, 130], [3000, 200], [pick(&mut r, &[1, 9, 250]), pick(&mut r, &[1, 5, 64, 65])]] {
            let d = device();
            let x = random(&mut r, shape[0] * shape[1]);
            let (tx, out) = (upload(&x, &shape), upload(&vec![7.0; shape[1]], &[shape[1]]));
            run(&reduce::sum_rows(&d, &tx, &out).unwrap());
            assert_close(&format!("{variant} seed {:#x} sum_rows {shape:?}", SEED + 3), &read(&out), &column_sums(&x, shape[1]));
        }
    });
    let expected = want("sum_columns", &["pass=only", "pass=partial", "pass=merge", "chunks=single", "chunks=multi", "cols=one_tile", "cols=tiled"]);
    assert_paths_cover("reduce", &take_paths(), &expected, &[]);
}

use crate::conv2d::check;
use crate::dense::{check_matmul, dense_forward_ref};
use crate::reduce::column_sums;


