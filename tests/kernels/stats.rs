//! The statistics a convolution's epilogue writes for the BatchNormalization after it
//! (`conv2d::forward_statistics`, `STATS` in shaders/conv2d.wgsl): each chunk's per-channel
//! mean and sum of squared deviations against f64 over the output as stored, on every ALU
//! GEMM kernel (the CPU one, each f32 tile; the tensor-core tiles write none),
//! f32 and f16 outputs, edge tiles of rows and columns; and BatchNorm's training forward from
//! them (`batchnorm::forward_train_with`) against the same forward from its own first pass.

use convoy::kernels::batchnorm::{self, BatchNormConfig, Partials};
use convoy::kernels::conv2d::{self, Conv2dGeometry, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions};
use convoy::Tensor;

use crate::common::*;
use crate::conv2d::forward_ref;
use crate::coop::FORCED_TILES;

/// f64 mean and sum of squared deviations of each chunk of `chunk_rows` rows of `y`
/// (`[rows, c]`), per channel, laid out as the partials are: `[2, chunks, c]`.
fn chunk_stats_ref(y: &[f32], c: usize, chunk_rows: usize) -> Vec<f64> {
    let rows = y.len() / c;
    let chunks = rows.div_ceil(chunk_rows);
    let mut out = vec![0.0; 2 * chunks * c];
    for k in 0..chunks {
        let range = k * chunk_rows..((k + 1) * chunk_rows).min(rows);
        let n = range.len() as f64;
        for ch in 0..c {
            let mean = range.clone().map(|r| y[r * c + ch] as f64).sum::<f64>() / n;
            let m2 = range.clone().map(|r| (y[r * c + ch] as f64 - mean).powi(2)).sum::<f64>();
            out[k * c + ch] = mean;
            out[(chunks + k) * c + ch] = m2;
        }
    }
    out
}

/// The output of `g` on seeded inputs, plus a bias where `biased`, stored as f16 where
/// `f16` (and read back widened), with the statistics its epilogue wrote under `opts`. An
/// f32 product's output is checked against the f64 convolution.
fn convolve(g: &Conv2dGeometry, f16: bool, biased: bool, opts: &GemmOptions, seed: u64) -> (Tensor, Vec<f32>, Option<Partials>) {
    let d = device();
    let mut r = rng(seed);
    let (xs, ws, ys) = (g.input_shape(), g.kernel_shape(), g.output_shape());
    let x = random(&mut r, xs.iter().product());
    // An offset keeps each channel's mean away from zero, where a mean's error would hide.
    let w: Vec<f32> = random(&mut r, ws.iter().product()).iter().map(|v| v + 0.05).collect();
    let b = random(&mut r, g.filters);
    let (tx, y) = if f16 {
        (upload_f16(&x, &xs), d.alloc(&ys, convoy::DType::F16).unwrap())
    } else {
        (upload(&x, &xs), d.alloc(&ys, convoy::DType::F32).unwrap())
    };
    let (tw, tb) = (upload(&w, &ws), upload(&b, &[g.filters]));
    let (products, partials) = conv2d::forward_statistics(&d, g, &tx, &tw, biased.then_some(&tb), &y, opts, true).unwrap();
    run(&products);
    let stored = if f16 { read_f16(&y) } else { read(&y) };
    if !f16 && !opts.mixed {
        let mut want = forward_ref(g, &x, &w);
        if biased {
            want.iter_mut().enumerate().for_each(|(i, v)| *v += b[i % g.filters] as f64);
        }
        assert_close(&format!("{:?} -> {} biased {biased} {opts:?}", g.input_shape(), g.filters), &stored, &want);
    }
    (y, stored, partials)
}

/// Asserts the partials are those of `stored` (`[rows, c]`) within f32 summation error.
#[track_caller]
fn assert_stats(case: &str, stored: &[f32], c: usize, partials: &Partials) {
    let rows = stored.len() / c;
    assert_eq!(partials.chunks, rows.div_ceil(partials.chunk_rows), "{case}: {} chunks of {} rows for {rows} rows", partials.chunks, partials.chunk_rows);
    assert_eq!(partials.tensor.shape(), [2, partials.chunks, c], "{case}");
    let got = read(&partials.tensor);
    let want = chunk_stats_ref(stored, c, partials.chunk_rows);
    let scale = stored.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
    let plane = partials.chunks * c;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let n = partials.chunk_rows.min(rows - (i % plane) / c * partials.chunk_rows) as f64;
        let (what, bound) = if i < plane { ("mean", 1e-5 * scale) } else { ("M2", 1e-4 * w + 1e-6 * n * scale * scale) };
        assert!((*g as f64 - w).abs() <= bound, "{case}: {what} {i} of chunk {} is {g}, f64 {w} (bound {bound:.2e})", (i % plane) / c);
    }
}

/// Convolutions whose outputs end inside a tile of rows and of columns: 189 rows of 20
/// channels, 450 of 36, a stride-2 3x3 into 64, 3,200 rows of 128 (the wide tensor-core
/// tiles), and 21 channels (f32 only: an f16 output takes whole quads).
fn geometries() -> Vec<(Conv2dGeometry, bool)> {
    vec![
        (Conv2dGeometry::new(&[3, 7, 9, 5], 20, (3, 3), (1, 1), Padding::Same).unwrap(), true),
        (Conv2dGeometry::new(&[2, 15, 15, 8], 36, (1, 1), (1, 1), Padding::Valid).unwrap(), true),
        (Conv2dGeometry::new(&[4, 16, 16, 16], 64, (3, 3), (2, 2), Padding::Same).unwrap(), true),
        (Conv2dGeometry::new(&[8, 20, 20, 16], 128, (1, 1), (1, 1), Padding::Valid).unwrap(), true),
        (Conv2dGeometry::new(&[2, 9, 9, 3], 21, (3, 3), (1, 1), Padding::Same).unwrap(), false),
    ]
}


#[test]
fn the_epilogue_writes_the_statistics_of_the_output_as_stored() {
    let d = device();
    let mut sets: Vec<(GemmOptions, String)> = vec![(on(Engine::Cpu), "cpu".into())];
    for tile in tiles() {
        sets.push((GemmOptions { tile: Some(tile), ..on(Engine::Tiled) }, format!("{tile:?}")));
    }
    sets.push((GemmOptions { mixed: true, ..on(Engine::Cpu) }, "mixed cpu".into()));
    // Mixed on the tiled engine takes the tensor cores where the device has them, whose
    // epilogue writes no statistics (see COOP_ENTRY in src/kernels/gemm.rs).
    let mut without: Vec<(GemmOptions, String)> = Vec::new();
    let mixed_tiled = (GemmOptions { mixed: true, ..on(Engine::Tiled) }, "mixed tiled".to_string());
    if d.has_coop16() {
        without.push(mixed_tiled);
        for tile in FORCED_TILES {
            without.push((GemmOptions { mixed: true, coop_tile: Some(tile), ..on(Engine::Tiled) }, format!("{tile:?}")));
        }
    } else {
        sets.push(mixed_tiled);
    }
    take_paths();
    on_sweep_variants(|variant| {
        for (i, (g, quads)) in geometries().iter().enumerate() {
            for (opts, name) in &sets {
                // A bias in the epilogue is in the statistics: on two of the shapes.
                for (f16, biased) in [(false, false), (true, false), (false, true), (true, true)] {
                    if f16 && !quads || biased && i % 2 == 1 {
                        continue;
                    }
                    let case = format!("{:?} -> {} on {name}, f16 storage {f16}, biased {biased} ({variant})", g.input_shape(), g.filters);
                    let (_, stored, partials) = convolve(g, f16, biased, opts, 10 + i as u64);
                    let partials = partials.unwrap_or_else(|| panic!("{case}: an unsplit product wrote no statistics"));
                    assert_stats(&case, &stored, g.filters, &partials);
                }
            }
        }
        for (opts, name) in &without {
            let (_, _, partials) = convolve(&geometries()[3].0, true, true, opts, 8);
            assert!(partials.is_none(), "{name}: statistics from the tensor-core kernel");
        }
        // Split along K, a product has no single epilogue: no statistics, the output right.
        let g = &geometries()[0].0;
        for engine in Engine::ALL {
            let (_, _, partials) = convolve(g, false, true, &GemmOptions { splits: Some(3), ..on(engine) }, 9);
            assert!(partials.is_none(), "{engine:?}: statistics from a product split three ways");
        }
    });
    let mut expected: Vec<(&str, String)> = vec![("gemm_cpu", "stats".into()), ("gemm", "stats".into()), ("gemm", "bias".into()), ("gemm_cpu", "bias".into()), ("reduce_splits", "bias".into())];
    for t in ["quad_c", "scalar_c", "store=a16c16"] {
        expected.push(("gemm", t.into()));
    }
    if d.has_coop16() {
        for t in ["coop=128x64", "coop=256x64", "coop=64x64", "coop=128x128"] {
            expected.push(("gemm_coop", t.into()));
        }
    }
    assert_paths_cover("epilogue statistics", &take_paths(), &expected, &[]);
}

/// Relative max-norm difference of two f32 results.
fn diff(a: &[f32], b: &[f32]) -> f64 {
    rel_err(a, &b.iter().map(|&v| v as f64).collect::<Vec<_>>())
}

#[test]
fn batchnorm_from_the_epilogues_statistics_matches_its_own_first_pass() {
    take_paths();
    on_sweep_variants(|variant| {
        let d = device();
        for (i, (g, quads)) in geometries().iter().enumerate() {
            for engine in Engine::ALL {
                for f16 in [false, true] {
                    if f16 && !quads {
                        continue;
                    }
                    let c = g.filters;
                    let (x, stored, partials) = convolve(g, f16, false, &on(engine), 30 + i as u64);
                    let partials = partials.expect("an unsplit product's statistics");
                    let mut r = rng(40 + i as u64);
                    let (gamma, beta) = (upload(&random(&mut r, c), &[c]), upload(&random(&mut r, c), &[c]));
                    let addend_values = random(&mut r, stored.len());
                    // The joined passes take whole quads of channels only.
                    for joined in [false, true].into_iter().filter(|&j| !j || c % 4 == 0) {
                        let case = format!("{:?} -> {c} on {engine:?}, f16 {f16}, joined {joined} ({variant})", g.input_shape());
                        let addend = if f16 { upload_f16(&addend_values, x.shape()) } else { upload(&addend_values, x.shape()) };
                        let addend = joined.then_some(&addend);
                        let cfg = BatchNormConfig { momentum: 0.7, relu: true, engine: Some(engine), ..Default::default() };
                        // Each way from the same moving statistics, into its own outputs.
                        let outs: Vec<[Tensor; 4]> = (0..2)
                            .map(|own| {
                                let moving = [upload(&vec![0.5; c], &[c]), upload(&vec![2.0; c], &[c])];
                                let saved = d.alloc(&[2, c], convoy::DType::F32).unwrap();
                                let y = d.alloc(x.shape(), x.dtype()).unwrap();
                                let dispatches = match (own, addend) {
                                    (0, None) => batchnorm::forward_train(&d, &cfg, &x, &gamma, &beta, &moving[0], &moving[1], &saved, &y),
                                    (0, Some(a)) => batchnorm::forward_train_joined(&d, &cfg, &x, a, &gamma, &beta, &moving[0], &moving[1], &saved, &y),
                                    _ => batchnorm::forward_train_with(&d, &cfg, &x, addend, &partials, &gamma, &beta, &moving[0], &moving[1], &saved, &y),
                                };
                                run(&dispatches.unwrap());
                                let [mean, var] = moving;
                                [saved, mean, var, y]
                            })
                            .collect();
                        for (k, what) in ["saved statistics", "moving mean", "moving variance"].iter().enumerate() {
                            let e = diff(&read(&outs[1][k]), &read(&outs[0][k]));
                            assert!(e < 1e-5, "{case}: {what} differ by {e:.2e} from the pass's own");
                        }
                        let read_y = |t: &Tensor| if f16 { read_f16(t) } else { read(t) };
                        // Statistics that differ in their last bits may round an f16 output
                        // the other way: one f16 step of the largest output.
                        let e = diff(&read_y(&outs[1][3]), &read_y(&outs[0][3]));
                        let bound = if f16 { 2e-3 } else { 1e-5 };
                        assert!(e < bound, "{case}: outputs differ by {e:.2e}");
                    }
                }
            }
        }
    });
    let expected: Vec<(&str, String)> = vec![("stats_finalize", "stats=given".into()), ("stats_finalize_cpu", "stats=given".into())];
    assert_paths_cover("batchnorm from given statistics", &take_paths(), &expected, &[]);
}

#[test]
fn statistics_of_another_tensor_are_refused() {
    let d = device();
    let g = &geometries()[1].0;
    let (x, _, partials) = convolve(g, false, false, &on(Engine::Cpu), 50);
    let partials = partials.unwrap();
    let c = g.filters;
    let per_channel: Vec<Tensor> = (0..4).map(|_| upload(&vec![1.0; c], &[c])).collect();
    let saved = d.alloc(&[2, c], convoy::DType::F32).unwrap();
    let y = d.alloc(x.shape(), x.dtype()).unwrap();
    let cfg = BatchNormConfig::default();
    let wrong = [
        Partials { chunk_rows: partials.chunk_rows * 2, ..partials.clone() },
        Partials { chunks: partials.chunks + 1, ..partials.clone() },
        Partials { chunk_rows: 0, ..partials.clone() },
        Partials { tensor: upload(&vec![0.0; 2 * partials.chunks * (c - 4)], &[2, partials.chunks, c - 4]), ..partials.clone() },
    ];
    for p in wrong {
        let e = batchnorm::forward_train_with(&d, &cfg, &x, None, &p, &per_channel[0], &per_channel[1], &per_channel[2], &per_channel[3], &saved, &y).unwrap_err().to_string();
        assert!(e.contains("partial statistics") && e.contains(&format!("{:?}", x.shape())), "{e}");
    }
}
