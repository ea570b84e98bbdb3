//! The mixed_float16 products (`GemmOptions::mixed`) against the f64 references, with bounds
//! for f16 operands: every element within twice f16's unit roundoff of the sum of |a| |b|
//! over its K (the rounding of both operands, rigorous), and the whole output within 1e-3
//! max-norm relative error (what random rounding gives is near 1e-4; a dropped K step of a
//! long K is 4e-3). Where the device has cooperative matrices (`CONVOY_TEST_DEVICE` on an
//! NVIDIA GPU) that is the tensor-core kernel (shaders/conv2d_coop.wgsl), plus the f32
//! kernel's f16-rounding form for outputs of 8 columns or fewer; elsewhere (lavapipe) the
//! rounding form everywhere. A bound that an f32 product also meets cannot show that the
//! operands were rounded: `operands_are_rounded_to_f16` shows it (the result matches f64 on
//! f16-rounded inputs to f32 accuracy, and an operand past f16's range overflows).

use convoy::kernels::conv2d::{self, Conv2dGeometry, Padding};
use convoy::kernels::dense;
use convoy::kernels::gemm::{AStage, CoopTile, Engine, GemmOptions};
use convoy::DType;

use crate::common::*;
use crate::conv2d::{backward_data_ref, backward_weights_ref, forward_ref};
use crate::dense::{matmul_ref, shapes};

/// f16's unit roundoff, 2^-11: a product of two rounded operands is within 2u of exact.
const F16_U: f64 = 1.0 / 2048.0;
const MIXED_TOL: f64 = 1e-3;

const MIXED: GemmOptions = GemmOptions { tile: None, splits: None, mixed: true, winograd: None, flip: None, coop_tile: None, a_stage: None, engine: None, persist: false };

/// The options an f16-storage sweep runs under: both engines, and where the device has
/// tensor cores the tiled one with an f16 A staged each way by force (`GemmOptions::a_stage`;
/// the products with an f32 A ignore it).
fn storage_sweeps(coop: bool) -> Vec<GemmOptions> {
    let mut sets: Vec<GemmOptions> = Engine::ALL.iter().map(|&e| GemmOptions { engine: Some(e), ..MIXED }).collect();
    if coop {
        sets.extend([AStage::Words, AStage::Halves].map(|s| GemmOptions { engine: Some(Engine::Tiled), a_stage: Some(s), ..MIXED }));
    }
    sets
}

/// Whether a tensor-core dispatch took every one of `tokens`.
fn coop_path_with(taken: &std::collections::BTreeSet<String>, tokens: &[&str]) -> bool {
    taken.iter().any(|p| {
        let t: Vec<&str> = p.split_whitespace().collect();
        t.first() == Some(&"gemm_coop") && tokens.iter().all(|x| t.contains(x))
    })
}

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
    all.extend(conv2d::backward_weights_with(&d, g, &tx, &tdy, &tdw, opts).unwrap());
    run(&all);
    let (ax, aw, ady) = (abs(&x), abs(&w), abs(&dy));
    let case = format!("mixed conv {g:?} {opts:?}");
    let mut worst = [
        assert_mixed(&format!("{case} forward"), &read(&ty), &forward_ref(g, &x, &w), &forward_ref(g, &ax, &aw)),
        0.0,
        assert_mixed(&format!("{case} backward_weights"), &read(&tdw), &backward_weights_ref(g, &x, &dy), &backward_weights_ref(g, &ax, &ady)),
    ];
    // Both input gradients where the flipped kernel can compute one (at stride 2, a 1x1's).
    let flips: &[Option<bool>] = if conv2d::flippable(g) { &[Some(true), Some(false)] } else { &[None] };
    let (want, bound) = (backward_data_ref(g, &dy, &w), backward_data_ref(g, &ady, &aw));
    for &flip in flips {
        let opts = GemmOptions { flip, ..*opts };
        run(&conv2d::backward_data_with(&d, g, &tdy, &tw, &tdx, &opts).unwrap());
        worst[1] = worst[1].max(assert_mixed(&format!("{case} backward_data flip={flip:?}"), &read(&tdx), &want, &bound));
    }
    worst
}

/// Every gather the f32 engine has, through the cooperative kernel: plain and transposed
/// operands, the convolution's three products (vec4 and scalar images, phase products of a
/// stride-2 input gradient, a 1x1 downsample whose odd phases meet no tap), the tile shapes
/// it runs (over 128 columns; 65-128 on many rows and on few; 33-64 on many rows, on few,
/// and a weight gradient's; 9-32), edges of every tile size and a product whose tiles fill A
/// and B (fetched without edge tests), K split automatically and by force; outputs of 8 columns or fewer fall back to the f32 product. The coverage
/// assertion fails when a cooperative path went untested. Grouped and dilated convolutions
/// go through the same gathers.
#[test]
fn mixed_products_match_f64_within_f16_bounds() {
    let coop = device().has_coop16();
    take_paths();
    on_sweep_variants(|_| {
        for engine in Engine::ALL {
            let mixed = GemmOptions { engine: Some(engine), ..MIXED };
            let mut worst = 0.0f64;
            for (s, &mkn) in [(65, 70, 67), (300, 64, 64), (129, 33, 31), (4, 65536, 64), (1030, 576, 128), (7, 13, 10), (140, 100, 300), (2100, 40, 60), (2048, 64, 128), (2048, 512, 128)].iter().enumerate() {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    worst = worst.max(matmul_case(mkn, ta, tb, &mixed, 40 + s as u64));
                }
            }
            for splits in [2, 5] {
                worst = worst.max(matmul_case((132, 300, 68), false, false, &GemmOptions { splits: Some(splits), ..mixed }, 50));
            }
            let convs = [
                Conv2dGeometry::new(&[8, 16, 16, 64], 64, (3, 3), (1, 1), Padding::Explicit(1, 1)).unwrap(),
                Conv2dGeometry::new(&[4, 29, 29, 3], 64, (7, 7), (2, 2), Padding::Explicit(3, 3)).unwrap(),
                Conv2dGeometry::new(&[6, 14, 14, 64], 128, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(),
                // A 1x1 downsample's phases on over 32,768 rows into 65-256 columns with a K of
                // 512: 128 x 128 at K 16 on the tensor cores (the narrow tile below either).
                Conv2dGeometry::new(&[1, 182, 182, 68], 512, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(),
                Conv2dGeometry::new(&[5, 9, 9, 12], 32, (3, 3), (2, 2), Padding::Same).unwrap(),
                // A 1x1 downsample into over 256 channels with a longer K: its tapped phase as a
                // plain 1x1 product's (128 x 128 at 64 x 64 subgroups, K 32).
                Conv2dGeometry::new(&[1, 6, 6, 384], 512, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(),
                // Strided input gradients whose phases fill whole tiles (512 pixels a phase, K
                // whole steps): the 3x3 one's image gathers without row tests, the 1x1 one's
                // rows of dy and of w transposed fetched without edge tests.
                Conv2dGeometry::new(&[2, 32, 32, 64], 128, (3, 3), (2, 2), Padding::Explicit(1, 1)).unwrap(),
                Conv2dGeometry::new(&[2, 32, 32, 256], 128, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(),
                Conv2dGeometry::new(&[3, 7, 7, 5], 33, (3, 3), (1, 1), Padding::Valid).unwrap(),
                // Over 128 filters and channels: all three products on the widest tile.
                Conv2dGeometry::new(&[2, 9, 9, 132], 136, (3, 3), (1, 1), Padding::Same).unwrap(),
                // Keras' groups (32 filters and 32 input channels a group: the tensor cores, phase
                // products included) and dilation_rate; groups = C falls back to f32 rounding.
                Conv2dGeometry::new_with(&[4, 10, 10, 64], 64, (3, 3), (2, 2), (1, 1), 2, Padding::Same).unwrap(),
                Conv2dGeometry::new_with(&[3, 11, 11, 8], 48, (3, 3), (1, 1), (2, 2), 1, Padding::Same).unwrap(),
                Conv2dGeometry::new_with(&[2, 7, 7, 6], 12, (3, 3), (1, 1), (3, 2), 6, Padding::Same).unwrap(),
            ];
            for (i, g) in convs.iter().enumerate() {
                for e in conv_case(g, &mixed, 60 + i as u64) {
                    worst = worst.max(e);
                }
            }
            println!("mixed products on the {engine:?} kernel: worst max-norm relative error {worst:.1e}");
        }
    });
    let taken = take_paths();
    let entry = if coop { "gemm_coop" } else { "gemm" };
    let mut expected = Vec::new();
    for a in ["a=Rows", "a=Cols", "a=Im2col", "a=Im2colT", "a=DyStuffed"] {
        expected.push((entry, a.to_string()));
    }
    for t in ["b=Rows", "b=BlockedT", "phase", "phases=4", "taps=none", "split=none", "split=forced", "quad_a", "scalar_a", "quad_c", "scalar_c", "grouped", "dilated", "flipped", "transposed", "inside_a", "inside_b", "whole_a"] {
        expected.push((entry, t.to_string()));
    }
    expected.push(("flip_kernel", "grid=2d".to_string()));
    if coop {
        // The whole-column 1x1 tiles: K 16 where K is below the columns, 64 x 64 subgroups at
        // K 32 where it is long (the last two matmuls); the 3x3 64 -> 64's gathers into 64
        // columns on 128 x 64 at 64 x 32 (its 2,048 rows).
        for t in ["coop=128x64", "coop=128x256", "coop=256x128", "coop=128x128", "coop=256x64", "coop=64x64", "coop=128x32", "threads=128", "step=loop", "coop_tile=128x128/64x32/1/16", "coop_tile=128x128/64x64/1/32", "coop_tile=128x64/64x32/1/16"] {
            expected.push(("gemm_coop", t.to_string()));
        }
    }
    // Narrow outputs on a tensor-core device, every product elsewhere.
    expected.push(("gemm", "round_f16".to_string()));
    // The CPU kernel rounds its operands on every device.
    for t in ["a=Rows", "a=Cols", "a=Im2col", "a=Im2colT", "a=DyStuffed", "b=Rows", "b=BlockedT", "phase", "grouped", "dilated", "round_f16", "flipped"] {
        expected.push(("gemm_cpu", t.to_string()));
    }
    assert_paths_cover("mixed gemm", &taken, &expected, &[]);
    // Phase products whose fetches skip their edge tests.
    for t in ["inside_a", "inside_b", "whole_a"] {
        let hit = taken.iter().any(|p| {
            let tokens: Vec<&str> = p.split_whitespace().collect();
            tokens[0] == entry && tokens.contains(&"phase") && tokens.contains(&t)
        });
        assert!(hit, "no {entry} phase product took {t}");
    }
    if coop {
        let hit = taken.iter().any(|p| {
            let tokens: Vec<&str> = p.split_whitespace().collect();
            tokens[0] == "gemm_coop" && tokens.contains(&"phase") && tokens.contains(&"coop_tile=128x128/64x64/1/32")
        });
        assert!(hit, "no downsample's phase product took the 1x1 tile 128x128/64x64/1/32");
    }
}

/// Products of more tiles than the tensor-core kernel's walking grid, asked to walk
/// (`GemmOptions::persist`: each workgroup walks its tiles a grid apart, fetching the next
/// tile's first K step while it stores this one), at ResNet-50's shapes: a short-K matmul plain and
/// transposed, whose last pass leaves part of the grid idle, and a 3x3 convolution's forward
/// (its image gathered, two K steps) and flipped input gradient (16 columns, K 576). The
/// references run once, four at a time, for both shader variants. The coverage assertions
/// fail when a product did not walk.
#[test]
fn persistent_walks_match_f64_within_f16_bounds() {
    if !device().has_coop16() {
        println!("no tensor cores: only the tensor-core kernel walks its tiles");
        return;
    }
    let mut r = rng(120);
    let mkn = (18000, 64, 1030);
    let (m, k, n) = mkn;
    let (a, b) = (random(&mut r, m * k), random(&mut r, k * n));
    let g = Conv2dGeometry::new(&[64, 48, 48, 16], 64, (3, 3), (1, 1), Padding::Same).unwrap();
    let (xs, ws, ys) = (g.input_shape(), g.kernel_shape(), g.output_shape());
    let (x, w, dy) = (random(&mut r, xs.iter().product()), random(&mut r, ws.iter().product()), random(&mut r, ys.iter().product()));
    let (ax, aw, ady) = (abs(&x), abs(&w), abs(&dy));
    let (aa, ab) = (abs(&a), abs(&b));
    let transposes = [(false, false), (true, true)];
    // Each reference and its bound, computed on their own threads.
    let (matmuls, forward, backward) = std::thread::scope(|s| {
        let matmuls: Vec<_> = transposes
            .iter()
            .map(|&(ta, tb)| {
                let (a, b, aa, ab) = (&a, &b, &aa, &ab);
                (s.spawn(move || matmul_ref(a, b, mkn, ta, tb)), s.spawn(move || matmul_ref(aa, ab, mkn, ta, tb)))
            })
            .collect();
        let forward = (s.spawn(|| forward_ref(&g, &x, &w)), s.spawn(|| forward_ref(&g, &ax, &aw)));
        let backward = (s.spawn(|| backward_data_ref(&g, &dy, &w)), s.spawn(|| backward_data_ref(&g, &ady, &aw)));
        let both = |(v, b): (std::thread::ScopedJoinHandle<Vec<f64>>, std::thread::ScopedJoinHandle<Vec<f64>>)| (v.join().unwrap(), b.join().unwrap());
        (matmuls.into_iter().map(both).collect::<Vec<_>>(), both(forward), both(backward))
    });
    let walking = GemmOptions { persist: true, ..MIXED };
    // The matmul run with `opts`: its output.
    let matmul = |ta: bool, tb: bool, opts: &GemmOptions| {
        let (sa, sb) = shapes(m, k, n, ta, tb);
        let (ta_, tb_, tc) = (upload(&a, &sa), upload(&b, &sb), upload(&vec![0.0; m * n], &[m, n]));
        run(&dense::matmul_with(&device(), &ta_, &tb_, &tc, ta, tb, opts).unwrap());
        tc
    };
    take_paths();
    on_sweep_variants(|variant| {
        let d = device();
        for (&(ta, tb), (want, bound)) in transposes.iter().zip(&matmuls) {
            assert_mixed(&format!("walked matmul {mkn:?} ta={ta} tb={tb} ({variant})"), &read(&matmul(ta, tb, &walking)), want, bound);
        }
        let (tx, tw, tdy) = (upload(&x, &xs), upload(&w, &ws), upload(&dy, &ys));
        let (ty, tdx) = (upload(&vec![0.0; dy.len()], &ys), upload(&vec![0.0; x.len()], &xs));
        run(&conv2d::forward_with(&d, &g, &tx, &tw, &ty, &walking).unwrap());
        run(&conv2d::backward_data_with(&d, &g, &tdy, &tw, &tdx, &GemmOptions { flip: Some(true), ..walking }).unwrap());
        assert_mixed(&format!("walked conv {g:?} forward ({variant})"), &read(&ty), &forward.0, &forward.1);
        assert_mixed(&format!("walked conv {g:?} backward_data ({variant})"), &read(&tdx), &backward.0, &backward.1);
    });
    let taken = take_paths();
    for tokens in [["persist", "a=Rows"], ["persist", "a=Cols"], ["persist", "a=Im2col"], ["persist", "flipped"]] {
        assert!(coop_path_with(&taken, &tokens), "no tensor-core product walked with {tokens:?}; taken: {taken:?}");
    }
    // Unasked, the same product does not walk: the engine's own choice (the step ran faster so).
    matmul(false, false, &MIXED);
    let unasked = take_paths();
    assert!(coop_path_with(&unasked, &["a=Rows"]) && !coop_path_with(&unasked, &["persist"]), "the engine's own choice walked or left the tensor cores: {unasked:?}");
}

/// Tensor-core tiles the kernel can run besides the engine's own: 128-invocation tiles whose
/// subgroups own 64 rows (the narrow products' candidates), a single subgroup, and 16-deep K
/// steps. Each must give every product the same numbers within the f16 bounds.
pub(crate) const FORCED_TILES: [CoopTile; 7] = [
    CoopTile { bm: 256, bn: 64, sg_m: 32, sg_n: 64, bufs: 1, bk: 32 },
    CoopTile { bm: 128, bn: 64, sg_m: 64, sg_n: 32, bufs: 2, bk: 32 },
    CoopTile { bm: 128, bn: 64, sg_m: 64, sg_n: 64, bufs: 2, bk: 16 },
    CoopTile { bm: 256, bn: 64, sg_m: 64, sg_n: 64, bufs: 1, bk: 16 },
    CoopTile { bm: 64, bn: 64, sg_m: 32, sg_n: 32, bufs: 2, bk: 32 },
    CoopTile { bm: 64, bn: 64, sg_m: 64, sg_n: 64, bufs: 2, bk: 16 },
    CoopTile { bm: 128, bn: 128, sg_m: 64, sg_n: 64, bufs: 2, bk: 32 },
];

/// Every forced tile on plain and transposed products and the convolutions' three products
/// (edges, a scalar stem, a stride-2 input gradient's phases, a K split); a tile the kernel
/// cannot run, and any forced tile on a device without tensor cores, is an error naming it.
#[test]
fn forced_tensor_core_tiles_match_f64_within_f16_bounds() {
    let d = device();
    let bad = CoopTile { bm: 128, bn: 64, sg_m: 48, sg_n: 32, bufs: 2, bk: 32 };
    let (ta, tb, tc) = (upload(&[0.0; 64 * 40], &[64, 40]), upload(&[0.0; 40 * 48], &[40, 48]), upload(&[0.0; 64 * 48], &[64, 48]));
    let opts = GemmOptions { coop_tile: Some(bad), ..MIXED };
    let err = dense::matmul_with(&d, &ta, &tb, &tc, false, false, &opts).unwrap_err().to_string();
    assert!(err.contains("sg_m: 48"), "{err}");
    if !d.has_coop16() {
        let err = dense::matmul_with(&d, &ta, &tb, &tc, false, false, &GemmOptions { coop_tile: Some(FORCED_TILES[0]), ..MIXED }).unwrap_err().to_string();
        assert!(err.contains("without tensor cores"), "{err}");
        return;
    }
    let convs = [
        Conv2dGeometry::new(&[4, 13, 13, 64], 64, (3, 3), (1, 1), Padding::Same).unwrap(),
        Conv2dGeometry::new(&[2, 29, 29, 3], 64, (7, 7), (2, 2), Padding::Explicit(3, 3)).unwrap(),
        Conv2dGeometry::new(&[3, 9, 9, 32], 40, (3, 3), (2, 2), Padding::Same).unwrap(),
    ];
    take_paths();
    on_sweep_variants(|_| {
        for (t, &tile) in FORCED_TILES.iter().enumerate() {
            let opts = GemmOptions { coop_tile: Some(tile), ..MIXED };
            for (ta, tb) in [(false, false), (true, false), (false, true)] {
                matmul_case((300, 70, 100), ta, tb, &opts, 80 + t as u64);
            }
            matmul_case((140, 600, 68), false, false, &GemmOptions { splits: Some(3), ..opts }, 90 + t as u64);
            for (i, g) in convs.iter().enumerate() {
                conv_case(g, &opts, 100 + i as u64);
            }
        }
    });
    let expected: Vec<(&str, String)> = ["threads=128", "threads=64", "threads=32", "coop=128x64", "coop=256x64", "coop=64x64", "coop=128x128", "a=Im2colT", "a=DyStuffed", "phase", "split=forced", "scalar_a"]
        .iter()
        .map(|t| ("gemm_coop", t.to_string()))
        .collect();
    assert_paths_cover("forced tensor-core tiles", &take_paths(), &expected, &[]);
}

#[test]
fn operands_are_rounded_to_f16() {
    // f16's spacing at 1 is 2^-10.
    assert_eq!(to_half(1.0 + 3.0 / 4096.0), 1.0 + 1.0 / 1024.0);
    assert_eq!(to_half(1.0 + 2.0 / 4096.0), 1.0, "a tie goes to even");
    assert_eq!(to_half(1.0 + 6.0 / 4096.0), 1.0 + 2.0 / 1024.0, "a tie goes to even");
    assert_eq!(to_half(65519.0), 65504.0);
    assert_eq!(to_half(-65520.0), f32::NEG_INFINITY);
    let d = device();
    for (mkn, n_wide) in [((65, 70, 67), true), ((33, 40, 12), false)] {
        let (m, k, n) = mkn;
        let mut r = rng(70 + n as u64);
        let (a, b) = (random(&mut r, m * k), random(&mut r, k * n));
        let (ta, tb, tc) = (upload(&a, &[m, k]), upload(&b, &[k, n]), upload(&vec![0.0; m * n], &[m, n]));
        let rounded: (Vec<f32>, Vec<f32>) = (a.iter().map(|&x| to_half(x)).collect(), b.iter().map(|&x| to_half(x)).collect());
        let want_rounded = matmul_ref(&rounded.0, &rounded.1, mkn, false, false);
        let want_exact = matmul_ref(&a, &b, mkn, false, false);
        // Each engine rounds its operands (the tiled kernel in its loads, the CPU one in its K
        // loop), keeps f16's overflow and every NaN.
        for engine in Engine::ALL {
            let mixed = GemmOptions { engine: Some(engine), ..MIXED };
            run(&dense::matmul_with(&d, &ta, &tb, &tc, false, false, &mixed).unwrap());
            let got = read(&tc);
            let on_rounded = rel_err(&got, &want_rounded);
            let on_exact = rel_err(&got, &want_exact);
            let case = format!("mixed matmul {mkn:?} (wide: {n_wide}) on {} {engine:?}", d.name());
            println!("{case}: {on_rounded:.1e} from f64 on f16-rounded operands, {on_exact:.1e} from f64 on the exact ones");
            // Products of f16 values are exact in f32: only the f32 sum rounds (2.5e-7 seen).
            assert!(on_rounded < 1e-5, "{case}: {on_rounded:.1e} from f64 on f16-rounded operands");
            assert!(on_exact > 10.0 * on_rounded && on_exact > 5e-5, "{case}: {on_exact:.1e} from f64 on the exact operands: were they rounded?");
            // One operand past f16's range: its row of the output overflows.
            let mut big = a.clone();
            big[0] = 70000.0;
            let tbig = upload(&big, &[m, k]);
            run(&dense::matmul_with(&d, &tbig, &tb, &tc, false, false, &mixed).unwrap());
            let got = read(&tc);
            assert!(got[..n].iter().all(|v| !v.is_finite()), "{case}: 70000 became {:?} in row 0", &got[..4]);
            assert!(got[n..].iter().all(|v| v.is_finite()), "{case}: other rows must stay finite");
            // A NaN operand makes its row NaN, whatever its bits: the rounding's carry once
            // turned a mantissa of all ones (NVIDIA's NaN) into -0.0.
            for nan in [0x7fff_ffffu32, 0xffff_ffff, 0x7fc0_0000, 0x7f80_0001] {
                let mut poisoned = a.clone();
                poisoned[1] = f32::from_bits(nan);
                let tnan = upload(&poisoned, &[m, k]);
                run(&dense::matmul_with(&d, &tnan, &tb, &tc, false, false, &mixed).unwrap());
                let got = read(&tc);
                assert!(got[..n].iter().all(|v| v.is_nan()), "{case}: NaN {nan:#x} gave {:?} in row 0", &got[..4]);
                assert!(got[n..].iter().all(|v| v.is_finite()), "{case}: other rows must stay finite");
            }
        }
    }
}

/// The products of convolutions whose activations are stored as f16 (`DType::F16`, the
/// mixed_float16 policy's storage): the forward reads an f16 x and writes an f16 y (and an
/// f32 x into an f16 y, the stem), the weight gradient reads the f16 x, against the f64
/// references on the very f16 values stored, with one f16 rounding more for an f16 output.
/// Shapes reach each gather on f16 (image quads and single channels, a 1x1 product's rows
/// and columns), a split K whose sum stores the f16 quads, the widest tile and the tall one;
/// an f16 x under float32 (no operand rounding) matches to f32 accuracy. An f16 output whose
/// rows are not whole quads is an error. The coverage assertion fails when a storage path
/// went untested on an engine.
#[test]
fn f16_activations_feed_and_leave_the_products() {
    take_paths();
    on_sweep_variants(|_| {
        let d = device();
        for mixed in storage_sweeps(d.has_coop16()) {
            let convs = [
                (Conv2dGeometry::new(&[8, 16, 16, 64], 64, (3, 3), (1, 1), Padding::Explicit(1, 1)).unwrap(), mixed),
                (Conv2dGeometry::new(&[6, 14, 14, 64], 128, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(), mixed),
                (Conv2dGeometry::new(&[4, 9, 9, 32], 64, (1, 1), (1, 1), Padding::Valid).unwrap(), mixed),
                (Conv2dGeometry::new(&[3, 7, 7, 6], 36, (3, 3), (1, 1), Padding::Same).unwrap(), mixed),
                (Conv2dGeometry::new(&[2, 9, 9, 132], 136, (3, 3), (1, 1), Padding::Same).unwrap(), mixed),
                (Conv2dGeometry::new(&[8, 12, 12, 16], 96, (3, 3), (1, 1), Padding::Same).unwrap(), mixed),
                (Conv2dGeometry::new(&[4, 8, 8, 64], 64, (3, 3), (1, 1), Padding::Same).unwrap(), GemmOptions { splits: Some(3), ..mixed }),
                (Conv2dGeometry::new(&[4, 8, 8, 16], 32, (3, 3), (2, 2), Padding::Same).unwrap(), GemmOptions { mixed: false, ..mixed }),
            ];
            for (i, (g, opts)) in convs.iter().enumerate() {
                let mut r = rng(90 + i as u64);
                let (xs, ws, ys) = (g.input_shape(), g.kernel_shape(), g.output_shape());
                let (xl, wl, yl): (usize, usize, usize) = (xs.iter().product(), ws.iter().product(), ys.iter().product());
                // The values the f16 tensors hold, so that the references read them too.
                let x = random_half(&mut r, xl);
                let (w, dy) = (random(&mut r, wl), random(&mut r, yl));
                let (tx16, tx32, tw, tdy) = (d.upload_f16(&xs, &x).unwrap(), upload(&x, &xs), upload(&w, &ws), upload(&dy, &ys));
                let (ty16, ty32) = (d.zeros_of(&ys, DType::F16).unwrap(), upload(&vec![7.0; yl], &ys));
                let tdw = upload(&random(&mut r, wl), &ws);
                let mut all = conv2d::forward_with(&d, g, &tx16, &tw, &ty16, opts).unwrap();
                all.extend(conv2d::forward_with(&d, g, &tx16, &tw, &ty32, opts).unwrap());
                all.extend(conv2d::backward_weights_with(&d, g, &tx16, &tdy, &tdw, opts).unwrap());
                run(&all);
                let (want, wgrad) = (forward_ref(g, &x, &w), backward_weights_ref(g, &x, &dy));
                let case = format!("f16 storage {g:?} {opts:?}");
                let (y16, y32, dw) = (d.read_f16(&ty16).unwrap(), read(&ty32), read(&tdw));
                if opts.mixed {
                    let (ax, aw, ady) = (abs(&x), abs(&w), abs(&dy));
                    let bound = forward_ref(g, &ax, &aw);
                    // One rounding of the stored output, u |y|, on top of the operands' 2u b.
                    let stored: Vec<f64> = bound.iter().zip(&want).map(|(b, w)| b + 0.5 * (w.abs() + 2.0 * F16_U * b)).collect();
                    assert_mixed(&format!("{case} forward f16 -> f16"), &y16, &want, &stored);
                    assert_mixed(&format!("{case} forward f16 -> f32"), &y32, &want, &bound);
                    assert_mixed(&format!("{case} backward_weights f16 x"), &dw, &wgrad, &backward_weights_ref(g, &ax, &ady));
                } else {
                    assert_close(&format!("{case} forward f16 -> f32"), &y32, &want);
                    assert_close(&format!("{case} backward_weights f16 x"), &dw, &wgrad);
                    for (j, (&g16, &w)) in y16.iter().zip(&want).enumerate() {
                        let limit = F16_U * w.abs() + 1e-5;
                        assert!((g16 as f64 - w).abs() <= limit, "{case} forward f16 -> f16: element {j} is {g16}, f64 {w}, beyond one f16 rounding {limit:.2e}");
                    }
                }
                // An f32 x into an f16 y: the stem's product.
                let ty16b = d.zeros_of(&ys, DType::F16).unwrap();
                run(&conv2d::forward_with(&d, g, &tx32, &tw, &ty16b, opts).unwrap());
                assert_eq!(d.read_f16(&ty16b).unwrap(), y16, "{case}: an f32 x stores what its f16 copy does");
            }
            // Rows of C that are not whole quads cannot be stored as f16.
            let g = Conv2dGeometry::new(&[2, 5, 5, 8], 6, (3, 3), (1, 1), Padding::Same).unwrap();
            let (x, w) = (d.upload_f16(&g.input_shape(), &vec![0.5; 400]).unwrap(), upload(&vec![0.5; 432], &g.kernel_shape()));
            let y = d.zeros_of(&g.output_shape(), DType::F16).unwrap();
            let err = conv2d::forward_with(&d, &g, &x, &w, &y, &mixed).unwrap_err().to_string();
            assert!(err.contains("F16") && err.contains("6 columns"), "{err}");
            let bad_w = d.zeros_of(&g.kernel_shape(), DType::U32).unwrap();
            let y = upload(&vec![0.0; 300], &g.output_shape());
            let err = conv2d::forward_with(&d, &g, &x, &bad_w, &y, &mixed).unwrap_err().to_string();
            assert!(err.contains("b ") && err.contains("expected F32 or F16"), "{err}");
        }
    });
    let taken = take_paths();
    let coop = device().has_coop16();
    let mut expected = Vec::new();
    for entry in [if coop { "gemm_coop" } else { "gemm" }, "gemm_cpu"] {
        for t in ["store=a16c16", "store=a16", "store=c16", "a=Im2col", "a=Im2colT", "a=Rows", "a=Cols", "scalar_a", "split=forced"] {
            expected.push((entry, t.to_string()));
        }
    }
    if coop {
        for t in ["coop=128x256", "coop=256x128"] {
            expected.push(("gemm_coop", t.to_string()));
        }
    }
    expected.push(("gemm", "store=a16c16".to_string()));
    expected.push(("reduce_splits", "quad_c".to_string()));
    assert_paths_cover("f16 storage gemm", &taken, &expected, &[]);
    if coop {
        // The forward's f16 x staged both ways (the engine stages it as words).
        for stage in ["a_words", "a_halves"] {
            assert!(coop_path_with(&taken, &["a=Im2col", "store=a16c16", stage]), "f16 storage gemm: no forward on an f16 x staged as {stage}: {taken:#?}");
        }
    }
}

/// Gradients stored as f16 (mixed_float16 stores a gradient as its activation): the weight
/// gradient reads an f16 dy as B beside an f16 x or the stem's f32 one; the input gradient
/// reads it as A (the flipped kernel's image rows, the stuffed dy, a 1x1's rows, the phase
/// products of a stride-2 one) and writes dx as f32 or f16 (a phase product's quads at their
/// pixels, from its own store and from the split sum's), on both engines, K split by force. Under float32 the f16 values are read exactly (f32 accuracy). The coverage
/// assertion fails when a storage went untested on an engine.
#[test]
fn f16_gradients_feed_the_backward_products() {
    take_paths();
    on_sweep_variants(|_| {
        let d = device();
        for mixed in storage_sweeps(d.has_coop16()) {
            let convs = [
                (Conv2dGeometry::new(&[8, 16, 16, 64], 64, (3, 3), (1, 1), Padding::Explicit(1, 1)).unwrap(), GemmOptions { flip: Some(true), ..mixed }),
                (Conv2dGeometry::new(&[8, 12, 12, 16], 96, (3, 3), (1, 1), Padding::Same).unwrap(), GemmOptions { flip: Some(false), ..mixed }),
                (Conv2dGeometry::new(&[4, 9, 9, 32], 64, (1, 1), (1, 1), Padding::Valid).unwrap(), GemmOptions { flip: Some(false), ..mixed }),
                (Conv2dGeometry::new(&[6, 14, 14, 64], 128, (1, 1), (2, 2), Padding::Explicit(0, 0)).unwrap(), mixed),
                // dy's 6 channels are not whole quads: its single halves are gathered.
                (Conv2dGeometry::new(&[3, 7, 7, 8], 6, (3, 3), (1, 1), Padding::Same).unwrap(), mixed),
                (Conv2dGeometry::new(&[4, 8, 8, 64], 64, (3, 3), (1, 1), Padding::Same).unwrap(), GemmOptions { splits: Some(3), flip: Some(false), ..mixed }),
                (Conv2dGeometry::new(&[4, 8, 8, 16], 32, (3, 3), (2, 2), Padding::Same).unwrap(), GemmOptions { splits: Some(2), ..mixed }),
                (Conv2dGeometry::new(&[4, 8, 8, 16], 32, (3, 3), (2, 2), Padding::Same).unwrap(), GemmOptions { mixed: false, ..mixed }),
                (Conv2dGeometry::new(&[4, 8, 8, 16], 32, (3, 3), (1, 1), Padding::Same).unwrap(), GemmOptions { mixed: false, ..mixed }),
                // A 3x3 weight gradient into 256 columns: the widest tile staging K 32.
                (Conv2dGeometry::new(&[4, 8, 8, 32], 256, (3, 3), (1, 1), Padding::Same).unwrap(), mixed),
            ];
            for (i, (g, opts)) in convs.iter().enumerate() {
                let mut r = rng(190 + i as u64);
                let (xs, ws, ys) = (g.input_shape(), g.kernel_shape(), g.output_shape());
                let (xl, wl, yl): (usize, usize, usize) = (xs.iter().product(), ws.iter().product(), ys.iter().product());
                // The values the f16 tensors hold, so that the references read them too.
                let (x, w, dy) = (random_half(&mut r, xl), random(&mut r, wl), random_half(&mut r, yl));
                let (tx16, tx32, tw, tdy) = (d.upload_f16(&xs, &x).unwrap(), upload(&x, &xs), upload(&w, &ws), d.upload_f16(&ys, &dy).unwrap());
                let (tdw16, tdw32, tdx32) = (upload(&random(&mut r, wl), &ws), upload(&random(&mut r, wl), &ws), upload(&random(&mut r, xl), &xs));
                let tdx16 = d.zeros_of(&xs, DType::F16).unwrap();
                let mut all = conv2d::backward_weights_with(&d, g, &tx16, &tdy, &tdw16, opts).unwrap();
                all.extend(conv2d::backward_weights_with(&d, g, &tx32, &tdy, &tdw32, opts).unwrap());
                all.extend(conv2d::backward_data_with(&d, g, &tdy, &tw, &tdx32, opts).unwrap());
                all.extend(conv2d::backward_data_with(&d, g, &tdy, &tw, &tdx16, opts).unwrap());
                run(&all);
                let (wgrad, dgrad) = (backward_weights_ref(g, &x, &dy), backward_data_ref(g, &dy, &w));
                let case = format!("f16 gradients {g:?} {opts:?}");
                let (dw16, dw32, dx32, dx16) = (read(&tdw16), read(&tdw32), read(&tdx32), d.read_f16(&tdx16).unwrap());
                if opts.mixed {
                    let (ax, aw, ady) = (abs(&x), abs(&w), abs(&dy));
                    let (wbound, dbound) = (backward_weights_ref(g, &ax, &ady), backward_data_ref(g, &ady, &aw));
                    assert_mixed(&format!("{case} backward_weights f16 x, f16 dy"), &dw16, &wgrad, &wbound);
                    assert_mixed(&format!("{case} backward_weights f32 x, f16 dy"), &dw32, &wgrad, &wbound);
                    assert_mixed(&format!("{case} backward_data f16 dy -> f32"), &dx32, &dgrad, &dbound);
                    // One rounding of the stored dx, u |dx|, on top of the operands' 2u b.
                    let stored: Vec<f64> = dbound.iter().zip(&dgrad).map(|(b, w)| b + 0.5 * (w.abs() + 2.0 * F16_U * b)).collect();
                    assert_mixed(&format!("{case} backward_data f16 dy -> f16"), &dx16, &dgrad, &stored);
                } else {
                    assert_close(&format!("{case} backward_weights f16 x, f16 dy"), &dw16, &wgrad);
                    assert_close(&format!("{case} backward_weights f32 x, f16 dy"), &dw32, &wgrad);
                    assert_close(&format!("{case} backward_data f16 dy -> f32"), &dx32, &dgrad);
                    for (j, (&g16, &w)) in dx16.iter().zip(&dgrad).enumerate() {
                        let limit = F16_U * w.abs() + 1e-5;
                        assert!((g16 as f64 - w).abs() <= limit, "{case} backward_data f16 -> f16: element {j} is {g16}, f64 {w}, beyond one f16 rounding {limit:.2e}");
                    }
                }
            }
        }
    });
    let taken = take_paths();
    let coop = device().has_coop16();
    let mut expected = Vec::new();
    for entry in [if coop { "gemm_coop" } else { "gemm" }, "gemm_cpu"] {
        for t in ["store=a16b16", "store=b16", "store=a16c16", "store=a16", "a=Im2colT", "a=Cols", "a=DyStuffed", "a=Rows", "a=Im2col", "flipped", "split=forced"] {
            expected.push((entry, t.to_string()));
        }
    }
    if coop {
        // A staged as f16 into 64 columns or more, as two words into fewer (32 filters).
        for t in ["coop_tile=128x256/64x64/1/32", "a_halves", "a_words"] {
            expected.push(("gemm_coop", t.to_string()));
        }
    }
    expected.push(("gemm", "store=a16b16".to_string()));
    // Both operands f16 on an f32-unit kernel: read as stored, no rounding pass.
    expected.push(("gemm", "as_stored".to_string()));
    expected.push(("gemm_cpu", "as_stored".to_string()));
    expected.extend(["gemm", "gemm_cpu"].map(|e| (e, "scalar_b".to_string())));
    expected.push(("reduce_splits", "quad_c".to_string()));
    assert_paths_cover("f16 gradient gemm", &taken, &expected, &[]);
    if coop {
        // Both operands' stagings where the engine takes one: weight gradients into 64+
        // columns (halves) and input gradients from an f16 dy (words), each the other way too.
        for (a, store) in [("a=Im2colT", "store=a16b16"), ("a=DyStuffed", "store=a16c16"), ("a=Im2col", "store=a16c16")] {
            for stage in ["a_words", "a_halves"] {
                assert!(coop_path_with(&taken, &[a, store, stage]), "f16 gradient gemm: no {a} {store} staged as {stage}: {taken:#?}");
            }
        }
    }
}
