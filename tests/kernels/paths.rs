//! Path-complete sweeps: shapes drawn from a seeded generator so that every branch a kernel
//! family can take is taken, each case checked against the f64 references of the family's
//! own test file on the checked and the unchecked shaders (the GEMM sweep on the unchecked
//! alone on a software adapter, which bounds-checks both alike: `on_sweep_variants`), and a
//! coverage assertion that
//! fails when a path the code can take was never taken. Every dispatch names its path
//! (`Dispatch::path`, written by the wrappers from the values that pick the branch), so
//! the coverage cannot drift from the code.
//!
//! Paths the software adapter cannot reach (its storage bindings stop at 128 MiB) run only
//! with `CONVOY_TEST_DEVICE` set and are listed as skipped otherwise.

use std::ops::Range;

use convoy::kernels::batchnorm::BatchNormConfig;
use convoy::kernels::conv2d::{Conv2dGeometry, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions, Tile};
use convoy::kernels::optimizer::{self, Hyper, OptimizerKind};
use convoy::kernels::pool::{self, Pool2dGeometry, PoolPadding};
use convoy::kernels::{dense, elementwise, image, loss, reduce};
use convoy::{DType, Tensor};
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

/// Every path of the GEMM engine, on each of its kernels: each tile (chosen by the engine,
/// not only forced), K split by the automatic rule for short and long K and by force, every
/// A and B gather, vec4 and scalar operands, the stride-2 input gradient's phase products
/// (and a phase no tap meets), bias, the split-K reduce and the column sums in one and in
/// several chunks, and a folded grid; on the CPU kernel, its separable gathers and the
/// general one of a stuffed gradient at stride 2.
#[test]
fn gemm_takes_every_path() {
    let mut r = rng(SEED);
    take_paths();
    on_sweep_variants(|variant| {
        for engine in Engine::ALL {
            gemm_sweep(&mut r, variant, engine);
        }
        // Splits enough that several lanes share each quad of the reduction (20: four), into
        // whole quads of C and not.
        for n in [40, 37] {
            check_matmul((72, 3_000, n), false, false, &GemmOptions { splits: Some(20), ..on(Engine::Tiled) }, SEED);
        }
    });

    // Every tile the device's workgroup memory fits (all of them but under CONVOY_LIMITS=webgpu).
    let mut expected: Vec<(&str, String)> = tiles().iter().map(|t| ("gemm", format!("tile={t:?}"))).collect();
    let gathers = ["a=Rows", "a=Cols", "a=Im2col", "a=Im2colT", "a=DyStuffed", "b=Rows", "b=BlockedT"];
    let operands = ["quad_a", "scalar_a", "quad_b", "scalar_b", "quad_c", "scalar_c", "phase", "taps=none", "bias", "grid=1d"];
    for entry in ["gemm", "gemm_cpu"] {
        expected.extend(want(entry, &gathers));
        expected.extend(want(entry, &operands));
        expected.extend(want(entry, &["split=none", "split=forced", "split=auto"]));
    }
    expected.extend(want("gemm", &["split=auto_long_k", "split=balance"]));
    // Fetches without edge tests where the tiles fill A's rows or B's columns and K's steps,
    // and image gathers that test only the padding where they fill M and K.
    expected.extend(want("gemm", &["inside_a", "inside_b", "whole_a"]));
    // The GPU kernel's phase products share dispatches: all four of stride 2, two of stride
    // (1, 2), and stride 3's nine as four, four and one.
    expected.extend(want("gemm", &["phases=4", "phases=2", "phases=1"]));
    expected.extend(want("gemm_cpu", &["gather=separable", "gather=general"]));
    expected.extend(want("reduce_splits", &["quad_c", "scalar_c", "bias", "lanes=one", "lanes=many"]));
    expected.extend(want("column_sums", &["chunks=single", "chunks=multi"]));
    // The GPU sweep: a split-K reduce over more than 65,535 * 256 quads of output (268 MB,
    // past the software adapter's 128 MiB bindings) folds its grid.
    if test_selection().is_some() {
        on_device(devices()[1].clone(), || {
            check_matmul((65_535 * 64 + 64, 32, 16), false, false, &GemmOptions { tile: Some(Tile::M64N16), splits: Some(2), ..Default::default() }, SEED);
        });
    }
    // A reduce over more than 65,535 * 256 quads binds more than 128 MiB of output. The
    // GEMM's own folded grid takes a few million rows: `gemm_on_a_folded_grid_matches_f64`
    // asserts that path and its result.
    let gpu_only = want("reduce_splits", &["grid=2d"]);
    assert_paths_cover("gemm", &take_paths(), &expected, &gpu_only);
}

/// One engine's share of [`gemm_takes_every_path`].
fn gemm_sweep(r: &mut StdRng, variant: &str, engine: Engine) {
    let auto = on(engine);
    // Random convolutions through the automatic choices, then forced tiles (the tiled
    // kernel's) and splits.
    for i in 0..12 {
        let g = random_conv(r);
        let case = format!("{variant} {engine:?} seed {SEED:#x} conv {i}: {g:?}");
        check(&g, &auto, &case, SEED + i);
        let tile = pick(r, &tiles());
        let splits = Some(r.random_range(1..5));
        let opts = match engine {
            Engine::Tiled => GemmOptions { tile: Some(tile), splits, ..auto },
            Engine::Cpu => GemmOptions { splits, ..auto },
        };
        check(&g, &opts, &format!("{case} {opts:?}"), SEED + i);
    }
    // The stride-2 input gradient's phase products on large row counts (batch 250: the
    // big tiles), odd sizes (phases of unequal rows), a 1x1 downsample (three phases meet
    // no tap) and a 7x7 stem with padding 3 (each phase a 3- or 4-tap window); and a 1x1
    // with padding 1, wider than its kernel, which no phase product computes (the stuffed
    // gradient at stride 2).
    for (batch, size, c, f, k, pad) in [(250, 8, 8, 16, 3, 1), (3, 9, 12, 64, 3, 1), (250, 8, 64, 128, 1, 0), (2, 15, 4, 8, 7, 3), (2, 5, 4, 8, 1, 1)] {
        let g = Conv2dGeometry::new(&[batch, size, size, c], f, (k, k), (2, 2), Padding::Explicit(pad, pad)).unwrap();
        check(&g, &auto, &format!("{variant} {engine:?} seed {SEED:#x} phases {g:?}"), SEED + batch as u64);
    }
    // Stride 3: nine phases, more than one dispatch holds (four, four and one on the GPU
    // kernels), each one tap of the kernel over a 10 x 11 input (pixels past the last
    // window get none: a phase product of zeros).
    let g = Conv2dGeometry::new(&[3, 10, 11, 8], 16, (3, 3), (3, 3), Padding::Valid).unwrap();
    check(&g, &auto, &format!("{variant} {engine:?} seed {SEED:#x} stride-3 phases {g:?}"), SEED);
    // (m, k, n, trans_a, trans_b) that make the engine pick each tile and split rule:
    // M128N64 and M128N32 over a long K (auto_long_k), M64N64 over many rows, M32N32
    // with a short-K automatic split, M64N16 for narrow outputs.
    for (mkn, ta, tb) in [((4, 65536, 64), true, false), ((4, 65536, 32), true, true), ((16384, 8, 64), false, false), ((64, 2048, 64), false, true), ((33, 70, 10), false, false)] {
        check_matmul(mkn, ta, tb, &auto, SEED);
    }
    if engine == Engine::Tiled {
        // A full grid (256 tiles of 32 x 32) over a long K splits to fill more waves.
        check_matmul((512, 4096, 512), false, false, &GemmOptions { tile: Some(Tile::M32N32), splits: None, ..auto }, SEED);
    }
    // Bias in the tile and through the split-K reduce; column sums in one and many chunks.
    dense_with_bias(r, (5, 17, 10), variant, &auto);
    dense_with_bias(r, (6, 2048, 12), variant, &auto);
    dense_bias_gradient(r, 2500, 70, variant);
    dense_bias_gradient(r, 9, 7, variant);
}

/// A grid folded into 2-D: more row tiles than one grid dimension holds (65,535 on the
/// software adapter), as a convolution over a few million output pixels has. (Folding by
/// K splits instead, 70,000 forced splits of one output, looked wrong: it is the f32 sum of
/// 70,000 partials in sequence, 1.4e-3 already at 65,535 splits on a 1-D grid; the engine
/// never chooses more than K / 256 splits or 128k invocations' worth.)
#[test]
fn gemm_on_a_folded_grid_matches_f64() {
    take_paths();
    // Both kernels fold past 65,535 workgroups: 64 rows a tile, or 8 rows a block and 8
    // blocks a workgroup.
    let folded = GemmOptions { tile: Some(Tile::M64N16), splits: Some(1), ..Default::default() };
    let cpu = GemmOptions { splits: Some(1), ..on(Engine::Cpu) };
    on_device(devices()[1].clone(), || {
        check_matmul((64 * 65_536 + 1, 4, 4), false, false, &folded, SEED);
        check_matmul((64 * 65_536 + 1, 4, 4), false, false, &cpu, SEED);
    });
    let mut expected = want("gemm", &["grid=2d"]);
    expected.extend(want("gemm_cpu", &["grid=2d"]));
    assert_paths_cover("gemm folded", &take_paths(), &expected, &[]);
}

/// `dense_forward` with bias (a long K splits, and the reduce adds the bias).
fn dense_with_bias(r: &mut StdRng, (batch, inputs, units): (usize, usize, usize), variant: &str, opts: &GemmOptions) {
    let d = device();
    let (x, w, b) = (random(r, batch * inputs), random(r, inputs * units), random(r, units));
    let (tx, tw, tb, ty) = (upload(&x, &[batch, inputs]), upload(&w, &[inputs, units]), upload(&b, &[units]), upload(&random(r, batch * units), &[batch, units]));
    run(&dense::dense_forward_with(&d, &tx, &tw, Some(&tb), &ty, opts).unwrap());
    let case = format!("{variant} {opts:?} seed {SEED:#x} dense forward {batch}x{inputs}->{units} bias");
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
/// chunks (and their merges: merge passes, and the quad passes' last workgroups, one chunk a
/// step and four), four-row and one-row loads, one column tile and
/// several (above 64 channels), each for the scalar and the quad first passes, vec4 and scalar
/// per-element passes, and a folded grid; and of the
/// inference forward and backward (vec4 and scalar, each with and without the fused ReLU,
/// folded); each shape on the tiled and the CPU kernels.
#[test]
fn batchnorm_takes_every_path() {
    let mut r = rng(SEED + 1);
    take_paths();
    on_each_variant(|variant| {
        // Row counts from 1 to 70,000, channels from 1 to 260 (on and off multiples of 4);
        // the fixed shapes take every path of the first passes, scalar and quad, whatever
        // the draws (quad tiles partly past the channels: 12 and 100; chunks long enough for
        // a quad lane's second four-row step, as a model's layers have them: 100,000 x 64).
        let mut shapes: Vec<Vec<usize>> = vec![vec![7, 3], vec![300, 3], vec![70_000, 3], vec![50, 130], vec![3000, 68], vec![3, 12], vec![12_250, 100], vec![100_000, 64]];
        for _ in 0..6 {
            // Two rows make dx a difference of near-equal terms (x_hat = ±1): f32 cannot
            // hold 1e-4 of a result that small, so the sweep starts at three.
            let rows = pick(&mut r, &[3, 5, 33, 250, 1000, 4099, 20_000]);
            shapes.push(vec![rows, pick(&mut r, &[1, 3, 4, 5, 12, 17, 64, 65, 128, 260])]);
        }
        for (shape, engine) in shapes.iter().flat_map(|s| Engine::ALL.map(|e| (s, e))) {
            let relu = r.random_bool(0.5);
            let cfg = BatchNormConfig { momentum: 0.6, relu, engine: Some(engine), ..Default::default() };
            let name = format!("{variant} seed {:#x} batchnorm {shape:?} relu={relu} {engine:?}", SEED + 1);
            batchnorm_case(&mut r, shape, &cfg, &name);
            // The quad first passes merge in their last workgroups where the device lets them
            // (here); their merge passes run too.
            if engine == Engine::Tiled && shape[1].is_multiple_of(4) {
                batchnorm_case(&mut r, shape, &BatchNormConfig { merge_last: Some(false), ..cfg }, &format!("{name} merge_last=false"));
            }
            // Inference reads only the moving statistics: both ReLU settings on every width,
            // forward and (a frozen layer training) backward.
            for relu in [false, true] {
                let k = crate::batchnorm::case(&mut r, shape, 0.0);
                let name = format!("{variant} seed {:#x} batchnorm infer {shape:?} relu={relu} {engine:?}", SEED + 1);
                let cfg = BatchNormConfig { relu, engine: Some(engine), ..Default::default() };
                crate::batchnorm::check_infer(&name, &k, &cfg);
                let dy = random(&mut r, shape.iter().product());
                crate::batchnorm::check_infer_backward(&name, &k, &cfg, &dy);
            }
        }
    });
    // A folded per-element grid: more than 65,535 * 256 elements, channels not a multiple of 4.
    on_device(devices()[1].clone(), || {
        let cfg = BatchNormConfig { relu: true, ..Default::default() };
        let shape = [(65_535 * 256) / 3 + 5, 3];
        let name = format!("unchecked seed {:#x} batchnorm folded {shape:?}", SEED + 1);
        batchnorm_case(&mut r, &shape, &cfg, &name);
        crate::batchnorm::check_infer(&name, &crate::batchnorm::case(&mut r, &shape, 0.0), &cfg);
        crate::batchnorm::check_infer_backward(&name, &crate::batchnorm::case(&mut r, &shape, 0.0), &cfg, &random(&mut r, shape.iter().product()));
    });
    // The vec4 passes fold only past 65,535 * 256 invocations of four rows of a quad: a
    // 1 GiB tensor, for a GPU.
    if test_selection().is_some() {
        on_device(devices()[1].clone(), || {
            let cfg = BatchNormConfig { relu: true, ..Default::default() };
            let shape = [65_535 * 256 + 3, 16];
            let name = format!("unchecked seed {:#x} batchnorm vec4 folded {shape:?}", SEED + 1);
            batchnorm_case(&mut r, &shape, &cfg, &name);
            crate::batchnorm::check_infer(&name, &crate::batchnorm::case(&mut r, &shape, 0.0), &cfg);
            crate::batchnorm::check_infer_backward(&name, &crate::batchnorm::case(&mut r, &shape, 0.0), &cfg, &random(&mut r, shape.iter().product()));
        });
    }

    let mut expected = Vec::new();
    for entry in ["stats_partial", "backward_partial"] {
        expected.extend(want(entry, &["scalar", "chunks=single", "chunks=multi", "rows=x4", "rows=x1", "cols=one_tile", "cols=tiled"]));
    }
    // The merged passes where the device runs them (not under CONVOY_LIMITS=webgpu).
    let merged = crate::batchnorm::merged_passes();
    for &entry in ["stats_partial4", "backward_partial4"].iter().chain(merged) {
        expected.extend(want(entry, &["vec4", "chunks=single", "chunks=multi", "rows=x4", "rows=x1", "cols=one_tile", "cols=tiled", "prefetch"]));
    }
    for &entry in merged {
        expected.extend(want(entry, &["merge=last", "merge_loads=x4", "merge_loads=x1"]));
    }
    for entry in ["stats_finalize", "backward_merge"] {
        expected.extend(want(entry, &["chunks=single", "chunks=multi"]));
    }
    for entry in ["normalize_train", "backward_dx", "normalize_infer", "backward_infer_dx"] {
        expected.extend(want(entry, &["scalar", "grid=1d", "grid=2d"]));
    }
    for entry in ["normalize_train4", "backward_dx4", "normalize_infer4", "backward_infer_dx4"] {
        expected.extend(want(entry, &["vec4", "grid=1d"]));
    }
    // The CPU kernels: one chunk and several, the fused ReLU on and off where it is read.
    for entry in ["stats_partial_cpu", "stats_finalize_cpu", "backward_merge_cpu"] {
        expected.extend(want(entry, &["chunks=single", "chunks=multi"]));
    }
    for entry in ["normalize_train_cpu", "backward_partial_cpu", "backward_dx_cpu", "normalize_infer_cpu", "backward_infer_dx_cpu"] {
        expected.extend(want(entry, &["chunks=single", "chunks=multi", "relu", "no_relu"]));
    }
    let gpu_only: Vec<_> = ["normalize_train4", "backward_dx4", "normalize_infer4", "backward_infer_dx4"].iter().flat_map(|e| want(e, &["grid=2d"])).collect();
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

/// Elements past which a linear grid of 256-wide workgroups folds into 2-D (65,535 groups on
/// the software adapter and the usual GPU limit).
const FOLD: usize = 65_535 * 256;

/// A random pooling geometry: odd and even maps, square and oblong windows from 1 to 4,
/// strides below, at and above the window (inputs no window covers) or the default, the
/// three paddings (explicit ones from 0 to half the window on each axis, PyTorch's limit).
fn random_pool(r: &mut StdRng) -> Pool2dGeometry {
    loop {
        let shape = [pick(r, &[1, 2, 3]), r.random_range(1..12), r.random_range(1..12), pick(r, &[1, 3, 4, 5, 8, 17, 16, 24])];
        let size = [r.random_range(1..5), r.random_range(1..5)];
        let strides = if r.random_bool(0.25) { None } else { Some([r.random_range(1..4), r.random_range(1..4)]) };
        let explicit = PoolPadding::Explicit(r.random_range(0..=size[0] / 2), r.random_range(0..=size[1] / 2));
        // "valid" and explicit padding refuse a window larger than the (padded) map: draw again.
        if let Ok(g) = Pool2dGeometry::new(&shape, size, strides, pick(r, &[PoolPadding::Valid, PoolPadding::Same, explicit])) {
            return g;
        }
    }
}

/// Every pooling kernel forward and backward on windows of every shape and padding, and on
/// folded grids: a stride-1 "same" pool keeps the output as large as the input, so both
/// passes fold at 16.8M elements (67 MB, within the software adapter's 128 MiB bindings).
#[test]
fn pool_takes_every_path() {
    let seed = SEED + 4;
    let mut r = rng(seed);
    take_paths();
    on_each_variant(|variant| {
        for i in 0..16 {
            let g = random_pool(&mut r);
            pool_case(&mut r, &g, &format!("{variant} seed {seed:#x} pool {i}: {g:?}"));
        }
        for i in 0..4 {
            let shape = [pick(&mut r, &[1, 3]), r.random_range(1..9), r.random_range(1..9), pick(&mut r, &[1, 4, 17, 64])];
            global_pool_case(&mut r, shape, &format!("{variant} seed {seed:#x} global pool {i}: {shape:?}"));
        }
        // The packed kernels' runs of 4 and 2 quads of a pixel an invocation (16 and 24
        // channels), on ResNet's stem pool.
        for channels in [16, 24] {
            let g = Pool2dGeometry::new(&[2, 9, 7, channels], [3, 3], Some([2, 2]), PoolPadding::Explicit(1, 1)).unwrap();
            pool_case(&mut r, &g, &format!("{variant} seed {seed:#x} pool runs of {channels} channels: {g:?}"));
        }
        // Quads over a window of 256 elements, past what the packed argmax holds.
        let g = Pool2dGeometry::new(&[2, 18, 17, 8], [16, 16], Some([2, 1]), PoolPadding::Valid).unwrap();
        pool_case(&mut r, &g, &format!("{variant} seed {seed:#x} pool of 256: {g:?}"));
    });
    on_device(devices()[1].clone(), || {
        // A two-tap window keeps lavapipe's time down; its last row reaches into the padding.
        // Nine channels: max pooling's vec4 kernels (channels % 4 == 0) fold only past 67M
        // elements, so the folded case is the scalar one.
        let g = Pool2dGeometry::new(&[2, 1025, 1025, 9], [2, 1], Some([1, 1]), PoolPadding::Same).unwrap();
        pool_case(&mut r, &g, &format!("unchecked seed {seed:#x} pool folded: {g:?}"));
        let shape = [FOLD / 3 + 5, 1, 1, 3];
        global_pool_case(&mut r, shape, &format!("unchecked seed {seed:#x} global pool folded: {shape:?}"));
    });

    let entries = ["max_pool_forward", "max_pool_backward", "avg_pool_forward", "avg_pool_backward", "global_avg_pool_forward", "global_avg_pool_backward"];
    let mut expected: Vec<_> = entries.iter().flat_map(|e| want(e, &["grid=1d", "grid=2d"])).collect();
    for entry in ["max_pool_forward", "max_pool_backward"] {
        expected.extend(want(entry, &["scalar"]));
    }
    for entry in ["max_pool_forward4", "max_pool_backward4", "max_pool_forward4c", "max_pool_backward4c"] {
        expected.extend(want(entry, &["vec4", "grid=1d"]));
    }
    // The packed kernels take 4, 2 or 1 quads of a pixel an invocation (16, 24 and 8 channels).
    for entry in ["max_pool_forward4c", "max_pool_backward4c"] {
        expected.extend(want(entry, &["quads=1", "quads=2", "quads=4"]));
    }
    assert_paths_cover("pool", &take_paths(), &expected, &[]);
}

/// Max pooling (argmax exactly) and average pooling, forward and backward, against f64;
/// outputs start as garbage so a kernel that accumulates or skips an element fails.
fn pool_case(r: &mut StdRng, g: &Pool2dGeometry, case: &str) {
    let d = device();
    let (xs, ys) = (g.input_shape(), g.output_shape());
    // Nine distinct values, so windows hold ties and the first-maximum rule is tested.
    let x: Vec<f32> = random(r, xs.iter().product()).iter().map(|v| (v * 4.0).round() / 4.0).collect();
    let dy = random(r, ys.iter().product());
    let (tx, tdy) = (upload(&x, &xs), upload(&dy, &ys));
    let (ty, targ, tdx) = (garbage(&ys), d.zeros_of(&pool::argmax_shape(g), DType::U32).unwrap(), garbage(&xs));
    run(&[pool::max_pool_forward(&d, g, &tx, &ty, &targ).unwrap(), pool::max_pool_backward(&d, g, &tdy, &targ, &tdx).unwrap()]);
    let (want_y, want_arg, want_dx) = crate::pool::max_pool_ref(g, &x, &dy);
    let arg = pool::argmax_positions(g, &d.read_u32(&targ).unwrap()).unwrap();
    // The first difference, not two vectors of millions.
    if let Some(i) = (0..arg.len()).find(|&i| arg[i] != want_arg[i]) {
        panic!("{case}: max pool argmax[{i}] is {}, expected {} ({} outputs)", arg[i], want_arg[i], arg.len());
    }
    assert_close(&format!("{case} max pool forward"), &read(&ty), &want_y);
    assert_close(&format!("{case} max pool backward"), &read(&tdx), &want_dx);

    let (ty, tdx) = (garbage(&ys), garbage(&xs));
    run(&[pool::avg_pool_forward(&d, g, &tx, &ty).unwrap(), pool::avg_pool_backward(&d, g, &tdy, &tdx).unwrap()]);
    let (want_y, want_dx) = crate::pool::avg_pool_ref(g, &x, &dy);
    assert_close(&format!("{case} avg pool forward"), &read(&ty), &want_y);
    assert_close(&format!("{case} avg pool backward"), &read(&tdx), &want_dx);
}

/// Global average pooling of `[n, h, w, c]`, forward and backward, against f64.
fn global_pool_case(r: &mut StdRng, shape: [usize; 4], case: &str) {
    let d = device();
    let [n, _, _, c] = shape;
    let (x, dy) = (random(r, shape.iter().product()), random(r, n * c));
    let (tx, tdy, ty, tdx) = (upload(&x, &shape), upload(&dy, &[n, c]), garbage(&[n, c]), garbage(&shape));
    run(&[pool::global_avg_pool_forward(&d, &tx, &ty).unwrap(), pool::global_avg_pool_backward(&d, &tdy, &tdx).unwrap()]);
    let (want_y, want_dx) = crate::pool::global_avg_pool_ref(shape, &x, &dy);
    assert_close(&format!("{case} forward"), &read(&ty), &want_y);
    assert_close(&format!("{case} backward"), &read(&tdx), &want_dx);
}

/// Both losses with class counts below, at and above the 64-lane row (one pass or lanes
/// striding over the row), logits up to ±80, and more than 65,535 rows so the row grid folds.
#[test]
fn loss_takes_every_path() {
    let seed = SEED + 5;
    let mut r = rng(seed);
    take_paths();
    on_each_variant(|variant| {
        let mut shapes = vec![(3, 64), (2, 65)];
        for _ in 0..8 {
            shapes.push((pick(&mut r, &[1, 3, 17, 250]), pick(&mut r, &[1, 2, 10, 63, 100, 128, 129, 1000])));
        }
        for (rows, k) in shapes {
            loss_case(&mut r, rows, k, &format!("{variant} seed {seed:#x} loss rows={rows} classes={k}"));
        }
    });
    on_device(devices()[1].clone(), || {
        for k in [5, 70] {
            loss_case(&mut r, 65_536 + 7, k, &format!("unchecked seed {seed:#x} loss folded rows=65543 classes={k}"));
        }
    });

    let expected: Vec<_> = ["softmax_cross_entropy", "mean_squared_error"]
        .iter()
        .flat_map(|e| want(e, &["classes=one_pass", "classes=strided", "grid=1d", "grid=2d"]))
        .collect();
    assert_paths_cover("loss", &take_paths(), &expected, &[]);
}

/// Softmax cross-entropy (loss, gradient, exact rank) and mean squared error of one shape.
fn loss_case(r: &mut StdRng, rows: usize, k: usize, case: &str) {
    let d = device();
    let spread = pick(r, &[1.0f32, 8.0, 80.0]);
    let logits: Vec<f32> = random(r, rows * k).iter().map(|v| v * spread).collect();
    let labels: Vec<u32> = (0..rows).map(|_| r.random_range(0..k as u32)).collect();
    let scale = 1.0 / (2 * rows) as f32;
    let (tl, tlab) = (upload(&logits, &[rows, k]), d.upload_u32(&[rows], &labels).unwrap());
    let (tloss, tgrad, trank) = (upload(&vec![7.0; rows], &[rows]), upload(&vec![7.0; rows * k], &[rows, k]), d.zeros_of(&[rows], DType::U32).unwrap());
    run(&[loss::softmax_cross_entropy(&d, &tl, &tlab, scale, &tloss, &tgrad, &trank).unwrap()]);
    let (mut want_loss, mut want_grad, mut want_rank) = (vec![], vec![], vec![]);
    for (row, &label) in logits.chunks(k).zip(&labels) {
        let (l, g, rank) = crate::loss::cross_entropy_ref(row, label as usize, scale as f64);
        want_loss.push(l);
        want_grad.extend(g);
        want_rank.push(rank);
    }
    let rank = d.read_u32(&trank).unwrap();
    if let Some(i) = (0..rows).find(|&i| rank[i] != want_rank[i]) {
        panic!("{case} spread={spread}: rank of row {i} is {}, expected {}", rank[i], want_rank[i]);
    }
    assert_close(&format!("{case} spread={spread} cross-entropy loss"), &read(&tloss), &want_loss);
    assert_close(&format!("{case} spread={spread} cross-entropy dlogits"), &read(&tgrad), &want_grad);

    let target = random(r, rows * k);
    let tt = upload(&target, &[rows, k]);
    let (tloss, tgrad) = (upload(&vec![7.0; rows], &[rows]), upload(&vec![7.0; rows * k], &[rows, k]));
    run(&[loss::mean_squared_error(&d, &tl, &tt, scale, &tloss, &tgrad).unwrap()]);
    let (want_loss, want_grad) = crate::loss::mse_ref(&logits, &target, k, scale as f64);
    assert_close(&format!("{case} spread={spread} mse loss"), &read(&tloss), &want_loss);
    assert_close(&format!("{case} spread={spread} mse dpred"), &read(&tgrad), &want_grad);
}

/// u8 image normalisation on pixel counts of every remainder modulo 4 (a whole last word
/// or a partial one). Its folded grid needs more than 16.8M words: a 256 MiB f32 output,
/// past the software adapter's bindings, so it runs on a GPU only.
#[test]
fn image_takes_every_path() {
    let seed = SEED + 6;
    let mut r = rng(seed);
    take_paths();
    on_each_variant(|variant| {
        for _ in 0..8 {
            let shape = [pick(&mut r, &[1, 2, 3]), r.random_range(1..10), r.random_range(1..10), pick(&mut r, &[1, 3, 4, 5, 13])];
            image_case(&mut r, shape, &format!("{variant} seed {seed:#x} normalize_u8 {shape:?}"));
        }
        // Both word paths whatever the draw: 36 and 45 bytes.
        for shape in [[1, 3, 4, 3], [1, 3, 5, 3]] {
            image_case(&mut r, shape, &format!("{variant} seed {seed:#x} normalize_u8 {shape:?}"));
        }
        // f16, padded to a quad (mixed_float16's RGB input) and as it is.
        for shape in [[pick(&mut r, &[1, 2, 250]), r.random_range(1..10), r.random_range(1..10), 3], [1, 3, 5, 4]] {
            image_f16_case(&mut r, shape, &format!("{variant} seed {seed:#x} normalize_u8 f16 {shape:?}"));
        }
    });
    if test_selection().is_some() {
        on_device(devices()[1].clone(), || {
            let shape = [1, 8193, 8193, 1];
            image_case(&mut r, shape, &format!("unchecked seed {seed:#x} normalize_u8 folded {shape:?}"));
        });
    }
    let mut expected = want("normalize_u8", &["words=whole", "words=tail", "grid=1d"]);
    expected.extend(want("normalize_u8_f16", &["f16", "padded", "grid=1d"]));
    assert_paths_cover("image", &take_paths(), &expected, &want("normalize_u8", &["grid=2d"]));
}

fn image_case(r: &mut StdRng, shape: [usize; 4], case: &str) {
    let d = device();
    let (n, c) = (shape.iter().product::<usize>(), shape[3]);
    let x: Vec<u8> = (0..n).map(|_| r.random()).collect();
    let mean: Vec<f32> = (0..c).map(|_| r.random_range(0.0..1.0)).collect();
    let std: Vec<f32> = (0..c).map(|_| r.random_range(0.1..0.5)).collect();
    let (tx, ty) = (d.upload_u8(&shape, &x).unwrap(), upload(&vec![7.0; n], &shape));
    run(&[image::normalize_u8(&d, &tx, &mean, &std, &ty).unwrap()]);
    assert_close(case, &read(&ty), &crate::image::reference(&x, &mean, &std));
}

fn image_f16_case(r: &mut StdRng, shape: [usize; 4], case: &str) {
    let d = device();
    let (n, c) = (shape.iter().product::<usize>(), shape[3]);
    let padded = c.next_multiple_of(4);
    let x: Vec<u8> = (0..n).map(|_| r.random()).collect();
    let mean: Vec<f32> = (0..c).map(|_| r.random_range(0.0..1.0)).collect();
    let std: Vec<f32> = (0..c).map(|_| r.random_range(0.1..0.5)).collect();
    let out = [shape[0], shape[1], shape[2], padded];
    let (tx, ty) = (d.upload_u8(&shape, &x).unwrap(), upload_f16(&vec![f32::NAN; n / c * padded], &out));
    run(&[image::normalize_u8(&d, &tx, &mean, &std, &ty).unwrap()]);
    assert_close_f16(case, &read_f16(&ty), &crate::image::padded_reference(&x, &mean, &std, padded), 2f64.powi(-25));
}

/// Every optimizer entry and branch: SGD, SGD with momentum with and without Nesterov,
/// Adam and AdamW, each with one weight decay for all elements and with a per-element mask
/// (random unaligned ranges excluded), on sizes on and off the 256-wide workgroup, over a
/// few steps of a decaying learning rate; and each entry on a folded grid (16.8M elements,
/// one step: the fold changes only which invocation takes which element).
#[test]
fn optimizer_takes_every_path() {
    let seed = SEED + 7;
    let mut r = rng(seed);
    take_paths();
    let kinds = [
        OptimizerKind::sgd(0.0, false),
        OptimizerKind::sgd(0.9, false),
        OptimizerKind::sgd(0.9, true),
        OptimizerKind::sgd_decoupled(0.0, false),
        OptimizerKind::sgd_decoupled(0.9, false),
        OptimizerKind::adam(),
        OptimizerKind::adamw(),
    ];
    on_each_variant(|variant| {
        for kind in kinds {
            for masked in [false, true] {
                let n = pick(&mut r, &[8, 63, 256, 257, 1000, 4097]);
                let no_decay = if masked { random_ranges(&mut r, n) } else { vec![] };
                let wd = if masked { 0.1 } else { pick(&mut r, &[0.0, 0.05]) };
                // Loss-scaled gradients (mixed_float16) on one of the two.
                let scale = if masked { Some(1024.0) } else { None };
                optimizer_case(&mut r, &kind, wd, n, &no_decay, scale, 3, &format!("{variant} seed {seed:#x} {kind:?} wd={wd} n={n} no_decay={no_decay:?} scale={scale:?}"));
            }
        }
    });
    on_device(devices()[1].clone(), || {
        let n = FOLD + 5;
        for kind in [OptimizerKind::sgd(0.0, false), OptimizerKind::sgd(0.9, true), OptimizerKind::adamw()] {
            let no_decay = [7..1000, n - 300..n - 1];
            optimizer_case(&mut r, &kind, 0.1, n, &no_decay, None, 1, &format!("unchecked seed {seed:#x} {kind:?} folded n={n} no_decay={no_decay:?}"));
        }
    });

    let mut expected = want("sgd", &["decoupled=no", "decoupled=yes", "decay_mask=no", "decay_mask=yes", "scaled=no", "scaled=yes", "grid=1d", "grid=2d"]);
    expected.extend(want("sgd_momentum", &["nesterov=no", "nesterov=yes", "decoupled=no", "decoupled=yes", "decay_mask=no", "decay_mask=yes", "scaled=no", "scaled=yes", "grid=1d", "grid=2d"]));
    expected.extend(want("adam", &["decoupled=no", "decoupled=yes", "decay_mask=no", "decay_mask=yes", "scaled=no", "scaled=yes", "grid=1d", "grid=2d"]));
    assert_paths_cover("optimizer", &take_paths(), &expected, &[]);
}

/// One to three disjoint, unaligned ranges of `0..n`, some maybe adjacent, in descending
/// order, never covering every element (so decay stays mixed and the mask is used).
fn random_ranges(r: &mut StdRng, n: usize) -> Vec<Range<usize>> {
    loop {
        let mut cuts: Vec<usize> = (0..6).map(|_| r.random_range(0..=n)).collect();
        cuts.sort();
        let ranges: Vec<_> = cuts.chunks(2).rev().map(|c| c[0]..c[1]).filter(|c| !c.is_empty()).collect();
        if !ranges.is_empty() && ranges.iter().map(|c| c.len()).sum::<usize>() < n {
            return ranges;
        }
    }
}

/// `steps` updates of one dispatch (built once; gradients and learning rate rewritten before
/// each), with weight decay `wd` off on `no_decay`, against PyTorch's formulas in f64. With
/// `scale`, the gradients arrive multiplied by it, as the loss scale leaves them.
#[allow(clippy::too_many_arguments)]
fn optimizer_case(r: &mut StdRng, kind: &OptimizerKind, wd: f32, n: usize, no_decay: &[Range<usize>], scale: Option<f32>, steps: u64, case: &str) {
    let d = device();
    let base_lr = if matches!(kind, OptimizerKind::Sgd { .. }) { 0.1 } else { 0.01 };
    let p0 = random(r, n);
    let (params, grads) = (upload(&p0, &[n]), d.zeros(&[n]).unwrap());
    let state = crate::optimizer::zero_state(kind, n);
    let state_refs: Vec<&Tensor> = state.iter().collect();
    let hyper = Hyper::for_step(base_lr, kind, 1).unwrap().upload(&d).unwrap();
    let loss_scale = scale.map(|s| d.upload_u32(&[4], &convoy::kernels::loss_scale::initial_state(s)).unwrap());
    let step = if loss_scale.is_some() {
        optimizer::update_scaled(&d, kind, wd, &params, &grads, &state_refs, &hyper, no_decay, loss_scale.as_ref())
    } else if no_decay.is_empty() {
        optimizer::update(&d, kind, wd, &params, &grads, &state_refs, &hyper)
    } else {
        optimizer::update_masked(&d, kind, wd, &params, &grads, &state_refs, &hyper, no_decay)
    }
    .unwrap();
    let mut wd_of = vec![wd as f64; n];
    for range in no_decay {
        wd_of[range.clone()].fill(0.0);
    }
    let mut model = crate::optimizer::Model { p: p0.iter().map(|&v| v as f64).collect(), s0: vec![0.0; n], s1: vec![0.0; n] };
    for t in 1..=steps {
        let g = random(r, n);
        // A power of two: the scaled gradient and its division back are exact.
        let scaled: Vec<f32> = g.iter().map(|&v| v * scale.unwrap_or(1.0)).collect();
        d.write(&grads, &scaled).unwrap();
        let lr = crate::optimizer::lr_at(t, base_lr);
        Hyper::for_step(lr, kind, t).unwrap().write(&d, &hyper).unwrap();
        run(std::slice::from_ref(&step));
        crate::optimizer::reference_step(kind, &wd_of, &mut model, &g, lr, t);
    }
    assert_close(&format!("{case}: params after {steps} steps"), &read(&params), &model.p);
    for (i, (s, want)) in state.iter().zip([&model.s0, &model.s1]).enumerate() {
        assert_close(&format!("{case}: state {i} after {steps} steps"), &read(s), want);
    }
}

use crate::conv2d::check;
use crate::pool::garbage;
use crate::dense::{check_matmul, dense_forward_ref};
use crate::reduce::column_sums;


