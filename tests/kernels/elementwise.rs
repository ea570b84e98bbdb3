//! ReLU, add, add + ReLU, scale and dropout against f64 references; the residual join, the
//! gradient sums and ReLU's gradient on f16 activations too, the gradients stored as f16
//! with them.

use convoy::kernels::{elementwise, Dispatch};
use convoy::{DType, Result};

use crate::common::*;

// Counts divisible by 4 take the vec4 entry points, the others the scalar ones.
const SIZES: &[usize] = &[1, 7, 12, 255, 256, 257, 1000, 4099, 4100];

#[test]
fn relu_forward_and_backward() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(1);
        for &n in SIZES {
            let x = random(&mut r, n);
            let dy = random(&mut r, n);
            let (tx, ty, tdy, tdx) = (upload(&x, &[n]), d.zeros(&[n]).unwrap(), upload(&dy, &[n]), d.zeros(&[n]).unwrap());
            run(&[elementwise::relu_forward(&d, &tx, &ty).unwrap(), elementwise::relu_backward(&d, &tdy, &ty, &tdx).unwrap()]);
            let want_y: Vec<f64> = x.iter().map(|&v| (v as f64).max(0.0)).collect();
            let want_dx: Vec<f64> = x.iter().zip(&dy).map(|(&v, &g)| if v > 0.0 { g as f64 } else { 0.0 }).collect();
            assert_close(&format!("relu forward n={n}"), &read(&ty), &want_y);
            assert_close(&format!("relu backward n={n}"), &read(&tdx), &want_dx);
        }
    });
}

#[test]
fn counts_divisible_by_four_run_four_elements_per_invocation() {
    on_each_variant(|_| {
        let d = device();
        for (n, wide) in [(12, true), (4100, true), (7, false), (4098, false)] {
            let (a, b, c) = (d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap());
            let add = elementwise::add(&d, &a, &b, &c).unwrap();
            let relu = elementwise::relu_backward(&d, &a, &b, &c).unwrap();
            assert_eq!((add.label, relu.label), if wide { ("add4", "relu_backward4") } else { ("add", "relu_backward") }, "n={n}");
            assert_eq!((add.kernel, relu.kernel), ("add", "relu_backward"), "profiles name the operation");
            let invocations = add.groups().iter().product::<u32>() as usize * 256;
            assert!(invocations >= n.div_ceil(if wide { 4 } else { 1 }) && invocations < n + 256, "n={n}: {invocations} invocations");
        }
    });
}

#[test]
fn add_add_relu_and_scale() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(2);
        for &n in SIZES {
            let (a, b) = (random(&mut r, n), random(&mut r, n));
            let (ta, tb, tc, ts, tr) = (upload(&a, &[n]), upload(&b, &[n]), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap(), d.zeros(&[n]).unwrap());
            run(&[elementwise::add(&d, &ta, &tb, &tc).unwrap(), elementwise::scale(&d, &ta, -0.37, &ts).unwrap(), elementwise::add_relu(&d, &ta, &tb, &tr).unwrap()]);
            let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| x as f64 + y as f64).collect();
            assert_close(&format!("add n={n}"), &read(&tc), &want);
            let want_relu: Vec<f64> = want.iter().map(|v| v.max(0.0)).collect();
            assert_close(&format!("add_relu n={n}"), &read(&tr), &want_relu);
            let want: Vec<f64> = a.iter().map(|&x| -0.37 * x as f64).collect();
            assert_close(&format!("scale n={n}"), &read(&ts), &want);
        }
    });
}

#[test]
fn dropout_matches_host_mask_and_keeps_the_expected_fraction() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(3);
        let n = 10_007;
        let x = random(&mut r, n);
        let tx = upload(&x, &[n]);
        for (rate, seed, step) in [(0.0f32, 1u32, 0u32), (0.5, 7, 3), (0.9, 123, 11)] {
            let ty = d.zeros(&[n]).unwrap();
            let tstep = d.upload_u32(&[1], &[step]).unwrap();
            run(&[elementwise::dropout(&d, &tx, &ty, rate, seed, &tstep).unwrap()]);
            let want: Vec<f64> = (0..n)
                .map(|i| if elementwise::dropout_keeps(i as u32, rate, seed, step) { x[i] as f64 / (1.0 - rate as f64) } else { 0.0 })
                .collect();
            assert_close(&format!("dropout rate={rate}"), &read(&ty), &want);
            let kept = (0..n).filter(|&i| elementwise::dropout_keeps(i as u32, rate, seed, step)).count() as f64 / n as f64;
            assert!((kept - (1.0 - rate as f64)).abs() < 0.03, "rate {rate}: kept {kept}");
        }
        assert!(elementwise::dropout(&d, &tx, &tx, 1.0, 0, &tx).is_err(), "rate 1 is refused");
    });
}

#[test]
fn folded_grid_covers_more_than_one_dimension_of_workgroups() {
    // 65,535 workgroups of 256 is the most one dimension holds; one element more folds to 2-D
    // (an odd count, so one element per invocation; the vec4 entry points index alike).
    let d = device();
    let n = 65_535 * 256 + 301;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let (tx, ty) = (upload(&x, &[n]), d.zeros(&[n]).unwrap());
    let dispatch = elementwise::relu_forward(&d, &tx, &ty).unwrap();
    assert!(dispatch.groups()[1] > 1, "grid {:?} was not folded", dispatch.groups());
    run(&[dispatch]);
    let y = read(&ty);
    assert!(y.iter().zip(&x).all(|(g, v)| *g == v.max(0.0)), "folded grid missed elements");
}

#[test]
fn bias_add_broadcasts_over_the_last_dimension() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(4);
        for (rows, c) in [(1, 1), (7, 5), (33, 17)] {
            let (y, b) = (random(&mut r, rows * c), random(&mut r, c));
            let (ty, tb) = (upload(&y, &[rows, c]), upload(&b, &[c]));
            run(&[elementwise::bias_add(&d, &ty, &tb).unwrap()]);
            let want: Vec<f64> = (0..rows * c).map(|i| y[i] as f64 + b[i % c] as f64).collect();
            assert_close(&format!("bias_add {rows}x{c}"), &read(&ty), &want);
        }
        assert!(elementwise::bias_add(&d, &upload(&[0.0; 6], &[2, 3]), &upload(&[0.0; 2], &[2])).is_err());
    });
}

// f16 runs the vec4 kernels alone, so its counts are multiples of 4; 1000 and 4100 take
// several workgroups.
const SIZES_F16: &[usize] = &[4, 12, 256, 1000, 4100];

#[test]
fn f16_join_and_relu_backward() {
    on_each_variant(|variant| {
        let d = device();
        let mut r = rng(5);
        take_paths();
        for &n in SIZES_F16 {
            let (a, b, dy) = (random_half(&mut r, n), random_half(&mut r, n), random_half(&mut r, n));
            let (ta, tb, tdy) = (upload_f16(&a, &[n]), upload_f16(&b, &[n]), upload_f16(&dy, &[n]));
            // dx starts as garbage: the kernel must overwrite every element
            let (ts, tr, tdx) = (d.zeros_of(&[n], DType::F16).unwrap(), d.zeros_of(&[n], DType::F16).unwrap(), upload_f16(&vec![1234.5; n], &[n]));
            let ty = upload_f16(&vec![1234.5; n], &[n]);
            // relu_backward reads the f16 y add_relu stored and an f16 dy, as a residual
            // block's backward does once its gradients are stored as its activations
            run(&[
                elementwise::add(&d, &ta, &tb, &ts).unwrap(),
                elementwise::add_relu(&d, &ta, &tb, &tr).unwrap(),
                elementwise::relu_backward(&d, &tdy, &tr, &tdx).unwrap(),
                elementwise::relu_forward(&d, &ta, &ty).unwrap(),
            ]);
            // a plain ReLU between layers that store f16: y is x or 0, stored exactly
            let want_y: Vec<f32> = a.iter().map(|&v| v.max(0.0)).collect();
            assert_eq!(read_f16(&ty), want_y, "{variant} relu_forward on f16 x and y, n={n}");
            let sum: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| x as f64 + y as f64).collect();
            // a sum of two f16 values is a multiple of 2^-24: one f16 rounding, subnormal or not
            let tiny = 2f64.powi(-25);
            assert_close_f16(&format!("{variant} f16 add n={n}"), &read_f16(&ts), &sum, tiny);
            let relu: Vec<f64> = sum.iter().map(|v| v.max(0.0)).collect();
            assert_close_f16(&format!("{variant} f16 add_relu n={n}"), &read_f16(&tr), &relu, tiny);
            // a nonzero sum stays nonzero in f16 (see above), so the mask is the exact sum's
            // sign; dx is dy or 0, both f16 values, so it is stored exactly
            let want_dx: Vec<f32> = sum.iter().zip(&dy).map(|(&v, &g)| if v > 0.0 { g } else { 0.0 }).collect();
            assert_eq!(read_f16(&tdx), want_dx, "{variant} relu_backward on f16 dy, y and dx, n={n}");
        }
        let expected: Vec<(&str, String)> = ["add4", "add_relu4", "relu_backward4", "relu_forward4"].iter().flat_map(|&e| [(e, "store=f16".to_string()), (e, "vec4".to_string())]).collect();
        assert_paths_cover("f16 elementwise", &take_paths(), &expected, &[]);
    });
}

/// A gradient sum masked by a ReLU output in one pass gives, bit for bit, what the sum then
/// the mask give (f32 and f16, scalar and vec4), NaN where y is NaN, an f16 overflow kept
/// infinite where y > 0; and it names its operands when they disagree.
#[test]
fn add_relu_backward_is_the_sum_then_the_mask() {
    on_each_variant(|variant| {
        let d = device();
        let mut r = rng(6);
        take_paths();
        for (f16, &n) in SIZES.iter().map(|n| (false, n)).chain(SIZES_F16.iter().map(|n| (true, n))) {
            let (mut a, b) = if f16 { (random_half(&mut r, n), random_half(&mut r, n)) } else { (random(&mut r, n), random(&mut r, n)) };
            // y: positive, zero, negative and NaN; an f16 sum past the range where y > 0.
            let y: Vec<f32> = (0..n).map(|i| [1.5, 0.0, -2.0, f32::NAN][i % 4] * if i % 8 < 4 { 1.0 } else { 0.25 }).collect();
            if f16 && n > 4 {
                a[4] = 65504.0;
            }
            let b = if f16 && n > 4 { b.iter().enumerate().map(|(i, &v)| if i == 4 { 65504.0 } else { v }).collect() } else { b };
            let up = |v: &[f32]| if f16 { upload_f16(v, &[n]) } else { upload(v, &[n]) };
            let (ta, tb, ty) = (up(&a), up(&b), up(&y));
            let (fused, sum, masked) = (up(&vec![7.0; n]), up(&vec![7.0; n]), up(&vec![7.0; n]));
            run(&[
                elementwise::add_relu_backward(&d, &ta, &tb, &ty, &fused).unwrap(),
                elementwise::add(&d, &ta, &tb, &sum).unwrap(),
                elementwise::relu_backward(&d, &sum, &ty, &masked).unwrap(),
            ]);
            let get = |t| if f16 { read_f16(t) } else { read(t) };
            let (got, want) = (get(&fused), get(&masked));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{variant} add_relu_backward f16={f16} n={n}");
            for (i, g) in got.iter().enumerate() {
                let s = a[i] as f64 + b[i] as f64;
                let ok = match y[i] {
                    v if v.is_nan() => g.is_nan(),
                    v if v > 0.0 => (*g as f64 - s).abs() <= s.abs() * 1e-3 + 1e-6 || (f16 && s > 65504.0 && g.is_infinite()),
                    _ => *g == 0.0,
                };
                assert!(ok, "{variant} f16={f16} n={n} element {i}: {g} for a + b = {s}, y = {}", y[i]);
            }
        }
        let expected = [("add_relu_backward", "scalar"), ("add_relu_backward4", "vec4"), ("add_relu_backward4", "store=f16")].map(|(e, t)| (e, t.to_string()));
        assert_paths_cover("add_relu_backward", &take_paths(), &expected, &[]);
        let (h, f) = (d.zeros_of(&[8], DType::F16).unwrap(), d.zeros(&[8]).unwrap());
        let err = elementwise::add_relu_backward(&d, &h, &h, &f, &h).unwrap_err().to_string();
        assert!(err.contains("add_relu_backward") && err.contains("y [8] is F32"), "{err}");
        let err = elementwise::add_relu_backward(&d, &f, &f, &d.zeros(&[7]).unwrap(), &f).unwrap_err().to_string();
        assert!(err.contains("add_relu_backward") && err.contains("y"), "{err}");
    });
}

#[test]
fn f16_join_covers_a_folded_grid() {
    // More than 65,535 * 256 quads fold the vec4 grid into 2-D; in f16 that is 128 MiB, which
    // the software adapter's largest binding still holds. Small integers and halves: every
    // sum is exact in f16, so each element is checked for equality. ReLU's gradient runs on
    // the same grid, its dy, y and dx all f16.
    let d = device();
    let n = 65_535 * 256 * 4 + 4;
    let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 89) as f32 * 0.5 - 20.0).collect();
    let (ta, tb, tr) = (upload_f16(&a, &[n]), upload_f16(&b, &[n]), d.zeros_of(&[n], DType::F16).unwrap());
    let dispatch = elementwise::add_relu(&d, &ta, &tb, &tr).unwrap();
    assert!(dispatch.groups()[1] > 1, "grid {:?} was not folded", dispatch.groups());
    assert!(dispatch.path_tokens().any(|t| t == "store=f16"), "path {}", dispatch.path);
    run(&[dispatch]);
    let y = read_f16(&tr);
    let wrong = (0..n).filter(|&i| y[i] != (a[i] + b[i]).max(0.0)).count();
    assert_eq!(wrong, 0, "folded f16 grid: {wrong} elements wrong (first at {:?})", (0..n).find(|&i| y[i] != (a[i] + b[i]).max(0.0)));
    drop((ta, tb));

    let dy_at = |i: usize| (i % 83) as f32 * 0.25 - 10.0;
    let dy: Vec<f32> = (0..n).map(dy_at).collect();
    let tdy = upload_f16(&dy, &[n]);
    drop(dy);
    // dx starts as garbage, so an element the grid misses is seen
    let tdx = upload_f16(&vec![1234.5; n], &[n]);
    let dispatch = elementwise::relu_backward(&d, &tdy, &tr, &tdx).unwrap();
    assert!(dispatch.groups()[1] > 1, "grid {:?} was not folded", dispatch.groups());
    assert!(dispatch.path_tokens().any(|t| t == "store=f16"), "path {}", dispatch.path);
    run(&[dispatch]);
    let dx = read_f16(&tdx);
    let want = |i: usize| if y[i] > 0.0 { dy_at(i) } else { 0.0 };
    let wrong = (0..n).filter(|&i| dx[i] != want(i)).count();
    assert_eq!(wrong, 0, "folded f16 relu_backward: {wrong} elements wrong (first at {:?})", (0..n).find(|&i| dx[i] != want(i)));
}

#[test]
fn f16_gradient_sums_overflow_to_infinity_and_keep_non_finite() {
    // Two gradients of an f16 activation summed (a branch point's, a residual block's input):
    // taken in f32 and rounded once, so a sum past f16's range is infinite (loss scaling must
    // see it), never clipped to 65504 nor NaN, and an overflowed (infinite) or NaN gradient
    // stays so.
    const INF: f32 = f32::INFINITY;
    let tiny = 2f32.powi(-24);
    #[rustfmt::skip]
    let cases: &[(f32, f32, f32)] = &[
        (65504.0, 8.0, 65504.0),         // below 65520: rounds down to the largest finite
        (65504.0, 16.0, INF),            // 65520 rounds to infinity
        (65504.0, 65504.0, INF),
        (40000.0, 40000.0, INF),
        (-40000.0, -30000.0, -INF),
        (32768.0, 32768.0, INF),
        (60000.0, 5504.0, 65504.0),      // the largest finite exactly
        (INF, 1.0, INF),
        (INF, -65504.0, INF),
        (-INF, 3.0, -INF),
        (INF, INF, INF),
        (INF, -INF, f32::NAN),
        (f32::NAN, 1.0, f32::NAN),
        (0.5, f32::NAN, f32::NAN),
        (f32::NAN, INF, f32::NAN),
        (tiny, tiny, 2.0 * tiny),        // subnormals add exactly
        (-0.0, 0.0, 0.0),
        (1.0, 2f32.powi(-11), 1.0),      // a tie: to even
        (1.0, 3.0 * 2f32.powi(-11), 1.0 + 2f32.powi(-9)),
        (-65504.0, -65504.0, -INF),
    ];
    on_each_variant(|variant| {
        let d = device();
        let mut r = rng(6);
        // the table, then random gradients up to ±60,000 (a fifth of their sums overflow)
        let n = 4100;
        let mut a: Vec<f32> = cases.iter().map(|c| c.0).collect();
        let mut b: Vec<f32> = cases.iter().map(|c| c.1).collect();
        a.extend(random(&mut r, n - a.len()).iter().map(|v| to_half(v * 60000.0)));
        b.extend(random(&mut r, n - b.len()).iter().map(|v| to_half(v * 60000.0)));
        let (ta, tb, ts) = (upload_f16(&a, &[n]), upload_f16(&b, &[n]), upload_f16(&vec![1234.5; n], &[n]));
        run(&[elementwise::add(&d, &ta, &tb, &ts).unwrap()]);
        let got = read_f16(&ts);
        for (i, &(x, y, want)) in cases.iter().enumerate() {
            let g = got[i];
            assert!((g == want && g.is_sign_negative() == want.is_sign_negative()) || (g.is_nan() && want.is_nan()), "{variant} f16 {x} + {y}: got {g}, expected {want}");
        }
        // the exact sum rounded to f16 (f32 holds every sum of two f16 values to within far
        // less than the f16 rounding, so rounding it again cannot move it)
        let mut overflowed = 0;
        for i in cases.len()..n {
            let want = to_half((a[i] as f64 + b[i] as f64) as f32);
            overflowed += want.is_infinite() as usize;
            assert!(got[i] == want, "{variant} f16 {} + {}: got {}, expected {want}", a[i], b[i], got[i]);
        }
        assert!(overflowed > n / 10, "{variant}: only {overflowed} random sums overflowed");
    });
}

#[test]
fn f16_operands_are_checked() {
    let d = device();
    let h = |n: usize| d.zeros_of(&[n], DType::F16).unwrap();
    let f = |n: usize| d.zeros(&[n]).unwrap();
    let err = |r: Result<Dispatch>| r.map(|_| ()).unwrap_err().to_string();
    let step = d.upload_u32(&[1], &[0]).unwrap();
    let cases = [
        // the join's operands share one storage
        (err(elementwise::add(&d, &h(8), &f(8), &h(8))), "add: b [8] is F32, expected F16 as a [8]"),
        (err(elementwise::add_relu(&d, &h(8), &h(8), &f(8))), "add_relu: out [8] is F32, expected F16 as a [8]"),
        (err(elementwise::add(&d, &f(8), &f(8), &h(8))), "add: out [8] is F16, expected F32 as a [8]"),
        // f16 is stored four at a time: no scalar path
        (err(elementwise::add(&d, &h(6), &h(6), &h(6))), "add: a [6] is F16 with 6 elements, expected a multiple of 4"),
        (err(elementwise::relu_backward(&d, &h(6), &h(6), &h(6))), "relu_backward: y [6] is F16 with 6 elements, expected a multiple of 4"),
        // a gradient is stored as its activation: dy, y and dx share one storage
        (err(elementwise::relu_backward(&d, &f(8), &h(8), &f(8))), "relu_backward: dy [8] is F32, expected F16 as y [8]"),
        (err(elementwise::relu_backward(&d, &h(8), &h(8), &f(8))), "relu_backward: dx [8] is F32, expected F16 as y [8]"),
        (err(elementwise::relu_backward(&d, &f(8), &h(8), &h(8))), "relu_backward: dy [8] is F32, expected F16 as y [8]"),
        (err(elementwise::relu_backward(&d, &h(8), &f(8), &f(8))), "relu_backward: dy [8] is F16, expected F32 as y [8]"),
        (err(elementwise::relu_backward(&d, &f(8), &f(8), &h(8))), "relu_backward: dx [8] is F16, expected F32 as y [8]"),
        (err(elementwise::relu_backward(&d, &f(1), &step, &f(1))), "relu_backward: y [1] is U32, expected F32 or F16"),
        (err(elementwise::relu_backward(&d, &step, &f(1), &f(1))), "relu_backward: dy [1] is U32, expected F32 as y [1]"),
        (err(elementwise::add(&d, &step, &step, &f(1))), "add: a [1] is U32, expected F32 or F16"),
        // the kernels with no f16 form
        (err(elementwise::relu_forward(&d, &h(8), &f(8))), "relu_forward: y [8] is F32, expected F16 as x [8]"),
        (err(elementwise::relu_forward(&d, &f(8), &h(8))), "relu_forward: y [8] is F16, expected F32 as x [8]"),
        (err(elementwise::relu_forward(&d, &h(6), &h(6))), "relu_forward: x [6] is F16 with 6 elements, expected a multiple of 4"),
        (err(elementwise::scale(&d, &f(8), 2.0, &h(8))), "scale: out [8] is F16, expected F32"),
        (err(elementwise::dropout(&d, &h(8), &f(8), 0.5, 1, &step)), "dropout: x [8] is F16, expected F32"),
        (err(elementwise::bias_add(&d, &h(8), &f(8))), "bias_add: y [8] is F16, expected F32"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "expected an error containing {want:?}, got {got:?}");
    }
}
