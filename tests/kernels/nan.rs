//! NaN is never hidden: every kernel that selects or clamps (ReLU and its gradient, the
//! residual add + ReLU, BatchNorm's fused ReLU and variance clamp, max pooling, the loss's
//! label rank) passes a NaN input through, on the checked and the unchecked shaders. These
//! are the places where `max(x, 0.0)` (SPIR-V FMax: lavapipe returns the number) or a
//! comparison (false against NaN) turned a diverged network into finite output. The kernels
//! that take f16 activations (the residual join, ReLU and its gradient, max pooling) are held to
//! the same with f16 inputs, and those whose gradients are then f16 (ReLU's, the pools')
//! keep NaN and infinity in them, and overflow to infinity, never to NaN or 65504.

use convoy::kernels::batchnorm::{self, BatchNormConfig};
use convoy::kernels::gemm::Engine;
use convoy::kernels::pool::{Pool2dGeometry, PoolPadding};
use convoy::kernels::{elementwise, loss, pool};
use convoy::DType;

use crate::common::*;

const INF: f32 = f32::INFINITY;

/// Element `i` of an input holding NaN, ±inf and ordinary values in a repeating pattern, so
/// every lane of a vec4 meets each.
fn special(n: usize) -> Vec<f32> {
    let pattern = [f32::NAN, -1.5, 2.0, INF, -INF, 0.0, f32::NAN, 0.25, -0.0];
    (0..n).map(|i| pattern[i % pattern.len()]).collect()
}

/// `max(v, 0)` as the kernels must compute it: NaN kept.
fn relu_ref(v: f32) -> f32 {
    if v.is_nan() || v > 0.0 { v } else { 0.0 }
}

/// Equal as values, with NaN equal to NaN and -0 to 0.
#[track_caller]
fn assert_same(case: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{case}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{case}: element {i} is {g}, expected {w}\n got {got:?}\nwant {want:?}");
    }
}

#[test]
fn relu_add_relu_and_relu_backward_keep_nan() {
    // 9 and 13 take the scalar entry points, 12 and 36 the vec4 ones.
    on_each_variant(|variant| {
        let d = device();
        for n in [9, 12, 13, 36] {
            let x = special(n);
            let ones = vec![1.0f32; n];
            let zero = vec![0.0f32; n];
            let (tx, ty, tz, tr, tdy, tdx) = (upload(&x, &[n]), d.zeros(&[n]).unwrap(), upload(&zero, &[n]), d.zeros(&[n]).unwrap(), upload(&ones, &[n]), d.zeros(&[n]).unwrap());
            run(&[
                elementwise::relu_forward(&d, &tx, &ty).unwrap(),
                elementwise::add_relu(&d, &tx, &tz, &tr).unwrap(),
                elementwise::relu_backward(&d, &tdy, &ty, &tdx).unwrap(),
            ]);
            let want: Vec<f32> = x.iter().map(|&v| relu_ref(v)).collect();
            assert_same(&format!("{variant} relu_forward n={n}"), &read(&ty), &want);
            assert_same(&format!("{variant} add_relu n={n}"), &read(&tr), &want);
            // the gradient passes where the output is positive, is NaN where it is NaN
            let want_dx: Vec<f32> = want.iter().map(|&y| if y.is_nan() { f32::NAN } else if y > 0.0 { 1.0 } else { 0.0 }).collect();
            assert_same(&format!("{variant} relu_backward n={n}"), &read(&tdx), &want_dx);
        }
    });
}

#[test]
fn f16_join_and_relu_backward_keep_nan() {
    // The vec4 entry points alone (f16 is stored four at a time); NaN and ±inf are exact in
    // f16, as is every other value of the pattern. dy repeats every 5 elements against the
    // pattern's 9, so that NaN and ±inf in dy meet positive, zero and NaN outputs.
    on_each_variant(|variant| {
        let d = device();
        for n in [12, 36] {
            let x = special(n);
            let dy: Vec<f32> = (0..n).map(|i| [0.75, INF, f32::NAN, -INF, -2.0][i % 5]).collect();
            let zero = vec![0.0f32; n];
            let (tx, tz) = (upload_f16(&x, &[n]), upload_f16(&zero, &[n]));
            let (ts, tr) = (d.zeros_of(&[n], DType::F16).unwrap(), d.zeros_of(&[n], DType::F16).unwrap());
            let (tdy, tdx) = (upload_f16(&dy, &[n]), upload_f16(&vec![1234.5; n], &[n]));
            let ty = upload_f16(&vec![1234.5; n], &[n]);
            // the same gradient in f32 from the same y, which the f16 one must match
            let (ty32, tdy32, tdx32) = (upload(&x.iter().map(|&v| relu_ref(v)).collect::<Vec<_>>(), &[n]), upload(&dy, &[n]), d.zeros(&[n]).unwrap());
            run(&[
                elementwise::add(&d, &tx, &tz, &ts).unwrap(),
                elementwise::add_relu(&d, &tx, &tz, &tr).unwrap(),
                elementwise::relu_backward(&d, &tdy, &tr, &tdx).unwrap(),
                elementwise::relu_backward(&d, &tdy32, &ty32, &tdx32).unwrap(),
                elementwise::relu_forward(&d, &tx, &ty).unwrap(),
            ]);
            assert_same(&format!("{variant} f16 add n={n}"), &read_f16(&ts), &x);
            let want: Vec<f32> = x.iter().map(|&v| relu_ref(v)).collect();
            assert_same(&format!("{variant} f16 relu_forward n={n}"), &read_f16(&ty), &want);
            assert_same(&format!("{variant} f16 add_relu n={n}"), &read_f16(&tr), &want);
            // dy passes where y is positive (NaN and ±inf included), NaN where y is NaN, 0
            // elsewhere (a NaN dy included, as in f32)
            let want_dx: Vec<f32> = want.iter().zip(&dy).map(|(&y, &g)| if y.is_nan() { f32::NAN } else if y > 0.0 { g } else { 0.0 }).collect();
            let passed = |keep: fn(f32) -> bool| (0..n).any(|i| want[i] > 0.0 && keep(dy[i]));
            assert!(passed(f32::is_nan) && passed(|g| g == INF) && passed(|g| g == -INF), "the pattern passes NaN and ±inf in dy: {dy:?}");
            assert_same(&format!("{variant} relu_backward on f16 dy, y and dx n={n}"), &read_f16(&tdx), &want_dx);
            assert_same(&format!("{variant} relu_backward in f32 n={n}"), &read(&tdx32), &want_dx);
        }
    });
}

#[test]
fn batchnorm_fused_relu_keeps_nan() {
    // 5 channels take the scalar entry points, 8 the vec4 ones or the CPU kernels; channel 1
    // holds a NaN.
    on_each_variant(|variant| {
        let d = device();
        for (c, engine) in [(5, Engine::Tiled), (8, Engine::Tiled), (8, Engine::Cpu)] {
            let rows = 12;
            let shape = [rows, c];
            let mut x: Vec<f32> = (0..rows * c).map(|i| ((i * 7) % 11) as f32 / 5.0 - 1.0).collect();
            x[3 * c + 1] = f32::NAN;
            let cfg = BatchNormConfig { relu: true, engine: Some(engine), ..Default::default() };
            let per_channel = |v: f32| upload(&vec![v; c], &[c]);
            let (gamma, beta, mm, mv) = (per_channel(1.0), per_channel(0.0), per_channel(0.0), per_channel(1.0));
            let (tx, y) = (upload(&x, &shape), d.zeros(&shape).unwrap());

            // inference: only the NaN element itself is NaN
            run(&batchnorm::forward_infer(&d, &cfg, &tx, &gamma, &beta, &mm, &mv, &y).unwrap());
            let got = read(&y);
            for (i, v) in got.iter().enumerate() {
                assert_eq!(v.is_nan(), i == 3 * c + 1, "{variant} {engine:?} infer c={c}: element {i} is {v}");
            }

            // training: channel 1's batch statistics are NaN, so its whole column and its
            // moving statistics are NaN (the variance clamp must not turn NaN into 0)
            let (saved, yt) = (d.zeros(&[2, c]).unwrap(), d.zeros(&shape).unwrap());
            let mut dispatches = batchnorm::forward_train(&d, &cfg, &tx, &gamma, &beta, &mm, &mv, &saved, &yt).unwrap();
            let dy = upload(&vec![1.0; rows * c], &shape);
            let (dx, dgamma, dbeta) = (d.zeros(&shape).unwrap(), d.zeros(&[c]).unwrap(), d.zeros(&[c]).unwrap());
            dispatches.extend(batchnorm::backward(&d, &cfg, &tx, &dy, &gamma, &beta, &saved, &dx, &dgamma, &dbeta).unwrap());
            run(&dispatches);
            let got = read(&yt);
            for (i, v) in got.iter().enumerate() {
                assert_eq!(v.is_nan(), i % c == 1, "{variant} {engine:?} train c={c}: element {i} is {v}");
            }
            for (name, t) in [("moving_mean", &mm), ("moving_var", &mv), ("dgamma", &dgamma), ("dbeta", &dbeta)] {
                let v = read(t);
                for (ch, v) in v.iter().enumerate() {
                    assert_eq!(v.is_nan(), ch == 1, "{variant} {engine:?} train c={c}: {name}[{ch}] is {v}");
                }
            }
            // the fused ReLU's gradient mask passes NaN through in channel 1
            let dxv = read(&dx);
            for r in 0..rows {
                assert!(dxv[r * c + 1].is_nan(), "{variant} {engine:?} backward c={c}: dx row {r} of the NaN channel is {}", dxv[r * c + 1]);
            }
        }
    });
}

#[test]
fn max_pool_window_with_nan_outputs_nan() {
    on_each_variant(|variant| {
        let d = device();
        // one 4x4 map, 2x2 windows: NaN after a larger value, NaN first before larger
        // values, no NaN, and -inf next to NaN
        #[rustfmt::skip]
        let map = [
            5.0, f32::NAN,   f32::NAN, 1.0,
            -1.0, 2.0,       7.0, 9.0,
            0.5, 0.25,       -INF, -INF,
            3.0, -2.0,       f32::NAN, -INF,
        ];
        // One channel (the scalar kernels) and four (the vec4 ones), where channel 2 has
        // its NaNs replaced by -5: a NaN in one lane must not leak into its neighbours. Four
        // channels once more with x and y in f16 (every value here is exact in f16).
        for (channels, f16) in [(1usize, false), (4, false), (4, true)] {
            let lane = |v: f32, c: usize| if c == 2 && v.is_nan() { -5.0 } else { v };
            let x: Vec<f32> = map.iter().flat_map(|&v| (0..channels).map(move |c| lane(v, c))).collect();
            let g = Pool2dGeometry::new(&[1, 4, 4, channels], [2, 2], None, PoolPadding::Valid).unwrap();
            let (xs, ys) = ([1, 4, 4, channels], [1, 2, 2, channels]);
            let (tx, ty) = if f16 { (upload_f16(&x, &xs), d.zeros_of(&ys, DType::F16).unwrap()) } else { (upload(&x, &xs), d.zeros(&ys).unwrap()) };
            let targ = d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap();
            // the gradients stored as the activations
            let (tdy, tdx) = if f16 { (upload_f16(&vec![1.0; 4 * channels], &ys), d.zeros_of(&xs, DType::F16).unwrap()) } else { (upload(&vec![1.0; 4 * channels], &ys), d.zeros(&xs).unwrap()) };
            let forward = pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap();
            assert_eq!(forward.path_tokens().any(|t| t == "store=f16"), f16, "{variant}: path {}", forward.path);
            run(&[forward, pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap()]);
            let channels_name = if f16 { format!("{channels} f16") } else { format!("{channels}") };
            let y = if f16 { read_f16(&ty) } else { read(&ty) };
            let (arg, dx) = (pool::argmax_positions(&g, &d.read_u32(&targ).unwrap()).unwrap(), if f16 { read_f16(&tdx) } else { read(&tdx) });
            for c in 0..channels {
                let (want_y, want_arg) = if c == 2 { ([5.0, 9.0, 3.0, -5.0], [0, 7, 12, 14]) } else { ([f32::NAN, f32::NAN, 3.0, f32::NAN], [1, 2, 12, 14]) };
                let of = |v: &[f32]| -> Vec<f32> { v.iter().skip(c).step_by(channels).copied().collect() };
                assert_same(&format!("{variant} max pool, {channels_name} channels, channel {c}"), &of(&y), &want_y);
                // the gradient goes to the first NaN of each window
                let arg_c: Vec<u32> = arg.iter().skip(c).step_by(channels).copied().collect();
                assert_eq!(arg_c, want_arg, "{variant} argmax, {channels_name} channels, channel {c}");
                let hit: Vec<u32> = of(&dx).iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(i, _)| i as u32).collect();
                assert_eq!(hit, want_arg, "{variant} max pool backward, {channels_name} channels, channel {c}: {dx:?}");
            }
        }
    });
}

#[test]
fn f16_pool_gradients_keep_nan_and_overflow_to_infinity() {
    const NAN: f32 = f32::NAN;
    let tiny = 2f32.powi(-24);
    let half_ulp = 2f32.powi(-11);
    // One 3x3 map, 2x2 windows at stride 1: the four windows overlap at the centre, which
    // wins all four where it holds the maximum (channels 0-10), so its gradient is the sum of
    // the four dy, in window order. In channel 11 the map is flat and each window's first
    // position wins: four positions get one dy each, and a NaN must stay at its own.
    #[rustfmt::skip]
    let lanes: [([f32; 4], f32); 11] = [
        ([1.0, 2.0, 3.0, 4.0], 10.0),
        ([40000.0, 40000.0, -1.0, 0.0], INF),            // past f16's range: infinite
        ([65504.0, 16.0, 0.0, 0.0], INF),                // 65520 rounds to infinity
        ([65504.0, 8.0, 0.0, 0.0], 65504.0),             // 65512 to the largest finite
        ([-40000.0, -40000.0, 0.0, 0.0], -INF),
        ([60000.0, 60000.0, -60000.0, -60000.0], 0.0),   // summed in f32: no overflow on the way
        ([INF, 1.0, 2.0, 3.0], INF),
        ([INF, -INF, 0.0, 0.0], NAN),
        ([NAN, 1.0, 1.0, 1.0], NAN),
        ([1.0, half_ulp, half_ulp, 0.0], 1.0 + 2.0 * half_ulp), // rounded once (per window, 1)
        ([tiny, tiny, tiny, tiny], 4.0 * tiny),          // subnormals
    ];
    let flat = [NAN, INF, -INF, 5.0];
    let c = 12;
    on_each_variant(|variant| {
        let d = device();
        let g = Pool2dGeometry::new(&[1, 3, 3, c], [2, 2], Some([1, 1]), PoolPadding::Valid).unwrap();
        let (xs, ys) = (g.input_shape(), g.output_shape());
        let x: Vec<f32> = (0..9 * c).map(|i| if i / c == 4 && i % c < 11 { 1.0 } else { 0.0 }).collect();
        let dy: Vec<f32> = (0..4 * c).map(|i| if i % c < 11 { lanes[i % c].0[i / c] } else { flat[i / c] }).collect();
        let (tx, ty, targ) = (upload_f16(&x, &xs), d.zeros_of(&ys, DType::F16).unwrap(), d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap());
        let (tdy, tdx) = (upload_f16(&dy, &ys), upload_f16(&vec![1234.5; 9 * c], &xs));
        run(&[pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap(), pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap()]);
        let dx = read_f16(&tdx);
        let of = |ch: usize| -> Vec<f32> { dx.iter().skip(ch).step_by(c).copied().collect() };
        for (ch, (dys, sum)) in lanes.iter().enumerate() {
            let want: Vec<f32> = (0..9).map(|p| if p == 4 { *sum } else { 0.0 }).collect();
            assert_same(&format!("{variant} f16 max pool backward, channel {ch}: dy {dys:?}"), &of(ch), &want);
        }
        assert_same(&format!("{variant} f16 max pool backward, flat channel"), &of(11), &[NAN, INF, 0.0, -INF, 5.0, 0.0, 0.0, 0.0, 0.0]);

        // Global average pooling's gradient divides in f32 and rounds once: NaN and ±inf
        // stay, a quarter of 2^-24 rounds to 0, and 65504 over one position stays finite.
        for (hw, dy, want) in [
            (4usize, vec![INF, -INF, NAN, 65504.0, 4.0 * tiny, tiny, 3.0, -0.0], vec![INF, -INF, NAN, 16376.0, tiny, 0.0, 0.75, -0.0]),
            (1, vec![65504.0, -65504.0, INF, NAN], vec![65504.0, -65504.0, INF, NAN]),
        ] {
            let ch = dy.len();
            let side = if hw == 4 { 2 } else { 1 };
            let (tdy, tdx) = (upload_f16(&dy, &[1, ch]), upload_f16(&vec![1234.5; hw * ch], &[1, side, side, ch]));
            run(&[pool::global_avg_pool_backward(&d, &tdy, &tdx).unwrap()]);
            let got = read_f16(&tdx);
            for p in 0..hw {
                assert_same(&format!("{variant} f16 global avg pool backward over {hw}, position {p}"), &got[p * ch..(p + 1) * ch], &want);
            }
        }
    });
}

#[test]
fn a_row_with_a_non_finite_logit_ranks_last_with_a_nan_loss() {
    on_each_variant(|variant| {
        let d = device();
        // 3 classes (one pass per row) and 100 (strided over the row's invocations)
        for k in [3usize, 100] {
            // row 0: finite, label the top class (rank 0); row 1: NaN away from the label,
            // which tops the finite ones; row 2: NaN at the label; row 3: +inf away from it;
            // row 4: -inf away from it; row 5: all NaN
            let rows = 6;
            let mut logits = vec![0.0f32; rows * k];
            for r in 0..rows {
                logits[r * k] = 4.0;
            }
            logits[k + k - 1] = f32::NAN;
            logits[2 * k] = f32::NAN;
            logits[3 * k + k - 1] = INF;
            logits[4 * k + k - 1] = -INF;
            logits[5 * k..6 * k].fill(f32::NAN);
            let labels = vec![0u32; rows];
            let (tl, tlab) = (upload(&logits, &[rows, k]), d.upload_u32(&[rows], &labels).unwrap());
            let (tloss, tgrad, trank) = (d.zeros(&[rows]).unwrap(), d.zeros(&[rows, k]).unwrap(), d.zeros_of(&[rows], DType::U32).unwrap());
            run(&[loss::softmax_cross_entropy(&d, &tl, &tlab, 1.0, &tloss, &tgrad, &trank).unwrap()]);
            let kk = k as u32;
            assert_eq!(d.read_u32(&trank).unwrap(), vec![0, kk, kk, kk, kk, kk], "{variant} k={k}: ranks");
            let l = read(&tloss);
            assert!(l[0].is_finite(), "{variant} k={k}: the finite row's loss is {}", l[0]);
            for (r, v) in l.iter().enumerate().skip(1) {
                assert!(v.is_nan(), "{variant} k={k}: row {r}'s loss is {v}, expected NaN");
            }
        }
    });
}
