//! matmul in all four transpose combinations, dense forward and backward, against f64
//! triple loops.

use convoy::kernels::dense;
use convoy::kernels::gemm::{Engine, GemmOptions};

use crate::common::*;

/// `op(a) · op(b)` in f64, with a stored `[m, k]` or `[k, m]`, b `[k, n]` or `[n, k]`.
pub(crate) fn matmul_ref(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize), ta: bool, tb: bool) -> Vec<f64> {
    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] } as f64;
    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] } as f64;
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
        }
    }
    c
}

pub(crate) fn shapes(m: usize, k: usize, n: usize, ta: bool, tb: bool) -> (Vec<usize>, Vec<usize>) {
    (if ta { vec![k, m] } else { vec![m, k] }, if tb { vec![n, k] } else { vec![k, n] })
}

/// One product through `opts`, c pre-filled with garbage; returns the relative error.
pub(crate) fn check_matmul(mkn: (usize, usize, usize), ta: bool, tb: bool, opts: &GemmOptions, seed: u64) -> f64 {
    let d = device();
    let (m, k, n) = mkn;
    let mut r = rng(seed);
    let (a, b) = (random(&mut r, m * k), random(&mut r, k * n));
    let (sa, sb) = shapes(m, k, n, ta, tb);
    let (tensor_a, tensor_b, tensor_c) = (upload(&a, &sa), upload(&b, &sb), upload(&random(&mut r, m * n), &[m, n]));
    run(&dense::matmul_with(&d, &tensor_a, &tensor_b, &tensor_c, ta, tb, opts).unwrap());
    assert_close(&format!("matmul {mkn:?} ta={ta} tb={tb} {opts:?}"), &read(&tensor_c), &matmul_ref(&a, &b, mkn, ta, tb))
}

#[test]
fn matmul_in_every_transpose_combination() {
    on_sweep_variants(|_| {
        for engine in Engine::ALL {
            let mut worst = 0.0f64;
            // (m, k, n); the last two have every size a multiple of 4 (vec4 loads and stores).
            for (s, &mkn) in [(1, 1, 1), (7, 13, 5), (65, 31, 67), (36, 20, 44), (4, 300, 8)].iter().enumerate() {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    worst = worst.max(check_matmul(mkn, ta, tb, &on(engine), 10 + s as u64));
                }
            }
            println!("matmul {engine:?} worst relative error {worst:.1e}");
        }
    });
}

#[test]
fn matmul_through_every_tile_and_k_split() {
    let tiled = sweep_tiles(true).into_iter().map(|tile| GemmOptions { tile: Some(tile), ..Default::default() });
    for opts in tiled.chain([on(Engine::Cpu)]) {
        for splits in [1, 2, 5] {
            let opts = GemmOptions { splits: Some(splits), ..opts };
            for (ta, tb) in [(false, false), (true, true)] {
                check_matmul((65, 70, 67), ta, tb, &opts, 30);
                check_matmul((132, 48, 68), ta, tb, &opts, 31);
            }
        }
    }
}

#[test]
fn a_tile_forced_on_the_cpu_engine_is_an_error_naming_both() {
    let d = device();
    let z = |s: &[usize]| d.zeros(s).unwrap();
    let opts = GemmOptions { tile: Some(convoy::kernels::gemm::Tile::M32N32), ..on(Engine::Cpu) };
    let e = dense::matmul_with(&d, &z(&[3, 4]), &z(&[4, 2]), &z(&[3, 2]), false, false, &opts).unwrap_err().to_string();
    assert!(e.contains("M32N32") && e.contains("CPU engine"), "{e}");
}

#[test]
fn a_forced_split_past_a_binding_is_an_error_naming_it() {
    let d = device();
    let z = |s: &[usize]| d.zeros(s).unwrap();
    // 1024 x 1024 outputs are 4 MiB of partial sums a split: one split more than a binding
    // holds, with K long enough for every split to get a K step of the tile (the smallest,
    // which fits WebGPU's default workgroup memory in tests/portable.rs too).
    let max = d.limits().max_storage_buffer_binding_size as usize;
    let splits = max / (1024 * 1024 * 4) + 1;
    let tile = *tiles().last().unwrap();
    let k = splits * tile.bk();
    let opts = GemmOptions { tile: Some(tile), splits: Some(splits), ..Default::default() };
    let e = dense::matmul_with(&d, &z(&[1024, k]), &z(&[k, 1024]), &z(&[1024, 1024]), false, false, &opts).unwrap_err().to_string();
    assert!(e.contains(&format!("{splits} K splits")) && e.contains("binding"), "{e}");
}

pub(crate) fn dense_forward_ref(x: &[f32], w: &[f32], b: Option<&[f32]>, (batch, inputs, units): (usize, usize, usize)) -> Vec<f64> {
    let mut y = matmul_ref(x, w, (batch, inputs, units), false, false);
    if let Some(b) = b {
        for (i, v) in y.iter_mut().enumerate() {
            *v += b[i % units] as f64;
        }
    }
    y
}

#[test]
fn dense_forward_with_and_without_bias() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(40);
        for &(batch, inputs, units) in &[(1, 1, 1), (3, 17, 10), (5, 64, 12), (33, 31, 70)] {
            let (x, w, b) = (random(&mut r, batch * inputs), random(&mut r, inputs * units), random(&mut r, units));
            let (tx, tw, tb) = (upload(&x, &[batch, inputs]), upload(&w, &[inputs, units]), upload(&b, &[units]));
            for with_bias in [false, true] {
                let ty = upload(&random(&mut r, batch * units), &[batch, units]);
                run(&dense::dense_forward(&d, &tx, &tw, with_bias.then_some(&tb), &ty).unwrap());
                let want = dense_forward_ref(&x, &w, with_bias.then_some(&b[..]), (batch, inputs, units));
                assert_close(&format!("dense forward {batch}x{inputs}->{units} bias={with_bias}"), &read(&ty), &want);
            }
        }
    });
}

#[test]
fn dense_backward_gives_all_three_gradients() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(50);
        // 2500 rows take the column sums through their chunked two-pass path.
        for &(batch, inputs, units) in &[(1, 3, 1), (7, 17, 10), (6, 12, 8), (2500, 5, 70)] {
            let (x, w, dy) = (random(&mut r, batch * inputs), random(&mut r, inputs * units), random(&mut r, batch * units));
            let (tx, tw, tdy) = (upload(&x, &[batch, inputs]), upload(&w, &[inputs, units]), upload(&dy, &[batch, units]));
            let tdx = upload(&random(&mut r, batch * inputs), &[batch, inputs]);
            let tdw = upload(&random(&mut r, inputs * units), &[inputs, units]);
            let tdb = upload(&random(&mut r, units), &[units]);
            run(&dense::dense_backward(&d, &tx, &tw, &tdy, Some(&tdx), &tdw, Some(&tdb)).unwrap());
            let case = format!("dense backward {batch}x{inputs}->{units}");
            assert_close(&format!("{case} dx"), &read(&tdx), &matmul_ref(&dy, &w, (batch, units, inputs), false, true));
            assert_close(&format!("{case} dw"), &read(&tdw), &matmul_ref(&x, &dy, (inputs, batch, units), true, false));
            let db: Vec<f64> = (0..units).map(|j| (0..batch).map(|i| dy[i * units + j] as f64).sum()).collect();
            assert_close(&format!("{case} db"), &read(&tdb), &db);
        }
        // Without dx and db only dw is written.
        let (tx, tw, tdy, tdw) = (upload(&[1.0, 2.0], &[1, 2]), upload(&[0.0; 6], &[2, 3]), upload(&[1.0, 0.5, -1.0], &[1, 3]), d.zeros(&[2, 3]).unwrap());
        let dispatches = dense::dense_backward(&d, &tx, &tw, &tdy, None, &tdw, None).unwrap();
        assert_eq!(dispatches.len(), 1);
        run(&dispatches);
        assert_close("dense backward dw only", &read(&tdw), &[1.0, 0.5, -1.0, 2.0, 1.0, -2.0]);
    });
}

#[test]
fn bad_shapes_are_errors_that_name_them() {
    let d = device();
    let z = |s: &[usize]| d.zeros(s).unwrap();
    let e = dense::matmul(&d, &z(&[3, 4]), &z(&[5, 2]), &z(&[3, 2]), false, false).unwrap_err().to_string();
    assert!(e.contains("[3, 4]") && e.contains("[5, 2]"), "{e}");
    let e = dense::matmul(&d, &z(&[3, 4]), &z(&[4, 2]), &z(&[2, 3]), false, false).unwrap_err().to_string();
    assert!(e.contains("[2, 3]") && e.contains("[3, 2]"), "{e}");
    let e = dense::matmul(&d, &z(&[3, 4, 1]), &z(&[4, 2]), &z(&[3, 2]), false, false).unwrap_err().to_string();
    assert!(e.contains("[3, 4, 1]"), "{e}");
    let e = dense::dense_forward(&d, &z(&[3, 4]), &z(&[4, 2]), Some(&z(&[3])), &z(&[3, 2])).unwrap_err().to_string();
    assert!(e.contains("bias") && e.contains("[3]"), "{e}");
    let e = dense::dense_backward(&d, &z(&[3, 4]), &z(&[4, 2]), &z(&[3, 5]), None, &z(&[4, 2]), None).unwrap_err().to_string();
    assert!(e.contains("dy") && e.contains("[3, 5]"), "{e}");
    let x = z(&[3, 4]);
    let e = dense::matmul(&d, &x, &z(&[4, 4]), &x.reshape(&[3, 4]).unwrap(), false, false).unwrap_err().to_string();
    assert!(e.contains("overlaps"), "{e}");
    let labels = d.upload_u32(&[3, 4], &[0; 12]).unwrap();
    let e = dense::matmul(&d, &labels, &z(&[4, 2]), &z(&[3, 2]), false, false).unwrap_err().to_string();
    assert!(e.contains("U32"), "{e}");
}
