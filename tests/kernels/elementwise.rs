//! ReLU, add, add + ReLU, scale and dropout against f64 references.

use convoy::kernels::elementwise;

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
