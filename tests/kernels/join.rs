//! A residual block's join finished in its first convolution's input gradient
//! (`conv2d::backward_data_joined`, `JOIN` in shaders/conv2d.wgsl and gemm_cpu.wgsl): the
//! stored dx is `relu_grad(dx + d, y)`. Against the f64 input gradient through the same
//! join, and bit for bit against the product followed by the join's own pass
//! (`elementwise::add_relu_backward`), which it replaces in a model: on every engine, f32
//! and f16 storage, unsplit and split along K (the join then in the split sum's store),
//! flipped and not, with y's zeros, negatives and NaN. Products that cannot store it
//! (strided, grouped, channels off quads, tensors of another storage) are refused with
//! nothing recorded.

use convoy::kernels::conv2d::{self, Conv2dGeometry, Join, Padding};
use convoy::kernels::elementwise;
use convoy::kernels::gemm::{Engine, GemmOptions};

use crate::common::*;
use crate::conv2d::backward_data_ref;

/// The join's mask input: a ReLU's output, so mostly positives and zeros, with a few
/// negatives (which mask as zeros do) and one NaN (which the gradient carries).
fn relu_output(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<f32> {
    let mut y: Vec<f32> = random(rng, n).into_iter().enumerate().map(|(i, v)| if i % 7 == 3 { -v.abs() } else { v.max(0.0) }).collect();
    y[n / 2] = f32::NAN;
    y
}

/// The f64 join of the f64 input gradient `dx`: (dx + d) where y > 0, y where y is NaN, else 0.
fn joined_ref(dx: &[f64], d: &[f32], y: &[f32]) -> Vec<f64> {
    dx.iter().zip(d).zip(y).map(|((&g, &d), &y)| if y.is_nan() { f64::NAN } else if y > 0.0 { g + d as f64 } else { 0.0 }).collect()
}

#[test]
fn a_joined_input_gradient_is_the_product_and_the_join_pass_bit_for_bit() {
    on_sweep_variants(|variant| {
        let geometries = [
            ("1x1", Conv2dGeometry::new(&[2, 7, 9, 8], 12, (1, 1), (1, 1), Padding::Valid).unwrap()),
            ("3x3", Conv2dGeometry::new(&[3, 6, 5, 12], 8, (3, 3), (1, 1), Padding::Same).unwrap()),
        ];
        let mut sets: Vec<(GemmOptions, String)> = vec![(on(Engine::Cpu), "cpu".into()), (GemmOptions { splits: Some(3), ..on(Engine::Cpu) }, "cpu split".into())];
        // Each tile, flipped and not, is a pipeline of its own beside each storage: on the
        // software adapter, whose LLVM makes each one 0.3-0.6 s, one end unflipped and the
        // other flipped take the same stores.
        let software = devices()[0].is_software();
        for (i, tile) in tile_ends().into_iter().enumerate() {
            if !software || i == 0 {
                sets.push((GemmOptions { tile: Some(tile), ..on(Engine::Tiled) }, format!("{tile:?}")));
            }
            if !software || i == 1 {
                sets.push((GemmOptions { tile: Some(tile), flip: Some(true), ..on(Engine::Tiled) }, format!("{tile:?} flipped")));
            }
        }
        sets.push((GemmOptions { splits: Some(4), ..on(Engine::Tiled) }, "tiled split".into()));
        // Mixed: the tensor cores where the device has them, unsplit and split.
        sets.push((GemmOptions { mixed: true, ..on(Engine::Tiled) }, "mixed".into()));
        sets.push((GemmOptions { mixed: true, splits: Some(3), ..on(Engine::Tiled) }, "mixed split".into()));
        take_paths();
        let mut rng = rng(41);
        for (name, geom) in &geometries {
            let (xs, ys, ws) = (geom.input_shape(), geom.output_shape(), geom.kernel_shape());
            let n = xs.iter().product::<usize>();
            for f16 in [false, true] {
                let half = |v: Vec<f32>| if f16 { v.into_iter().map(to_half).collect() } else { v };
                let dy_v = half(random(&mut rng, ys.iter().product()));
                let w_v = random(&mut rng, ws.iter().product());
                let d_v = half(random(&mut rng, n));
                let y_v = half(relu_output(&mut rng, n));
                let (dy, w) = (stored(&dy_v, &ys, f16), upload(&w_v, &ws));
                let (d, y) = (stored(&d_v, &xs, f16), stored(&y_v, &xs, f16));
                let want = joined_ref(&backward_data_ref(geom, &dy_v, &w_v), &d_v, &y_v);
                for (opts, set) in &sets {
                    let case = format!("{variant} {name} {set} {}", if f16 { "f16" } else { "f32" });
                    let dx = stored(&vec![0.0; n], &xs, f16);
                    let joined = conv2d::backward_data_joined(&device(), geom, &dy, &w, &dx, Join { d: &d, y: &y }, opts).unwrap().unwrap_or_else(|| panic!("{case}: refused"));
                    run(&joined);
                    let got = read_as(&dx, f16);
                    // The product, then the join's own pass.
                    let apart = stored(&vec![0.0; n], &xs, f16);
                    let sum = stored(&vec![0.0; n], &xs, f16);
                    let mut passes = conv2d::backward_data_with(&device(), geom, &dy, &w, &apart, opts).unwrap();
                    passes.push(elementwise::add_relu_backward(&device(), &apart, &d, &y, &sum).unwrap());
                    run(&passes);
                    let expected = read_as(&sum, f16);
                    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                        assert!(g.to_bits() == e.to_bits() || g.is_nan() && e.is_nan(), "{case}: element {i} is {g}, the passes apart give {e}");
                    }
                    // Against f64, NaN where y is NaN; mixed products and f16 stores round.
                    assert!(got[n / 2].is_nan(), "{case}: y's NaN did not reach dx");
                    let finite: Vec<usize> = (0..n).filter(|&i| !want[i].is_nan()).collect();
                    let (g, e): (Vec<f32>, Vec<f64>) = finite.iter().map(|&i| (got[i], want[i])).unzip();
                    let err = rel_err(&g, &e);
                    let bound = if opts.mixed || f16 { 4e-3 } else { TOL };
                    assert!(err < bound, "{case}: relative error {err:.3e} >= {bound:e}");
                }
            }
        }
        let expected = [("gemm_cpu", "join".to_string()), ("gemm", "join".to_string()), ("reduce_splits", "join".to_string())];
        let gpu_only = [("gemm_coop", "join".to_string())];
        assert_paths_cover("join", &take_paths(), &expected, &gpu_only);
    });
}

#[test]
fn a_join_the_product_cannot_store_is_refused_with_nothing_recorded() {
    let strided = Conv2dGeometry::new(&[2, 8, 8, 8], 8, (3, 3), (2, 2), Padding::Same).unwrap();
    let grouped = Conv2dGeometry::new_with(&[2, 6, 6, 8], 8, (3, 3), (1, 1), (1, 1), 2, Padding::Same).unwrap();
    let odd = Conv2dGeometry::new(&[2, 6, 6, 6], 8, (1, 1), (1, 1), Padding::Valid).unwrap();
    let mut rng = rng(7);
    for (name, geom) in [("strided", strided), ("grouped", grouped), ("channels off quads", odd)] {
        let (xs, ys, ws) = (geom.input_shape(), geom.output_shape(), geom.kernel_shape());
        let n = xs.iter().product::<usize>();
        let (dy, w) = (upload(&random(&mut rng, ys.iter().product()), &ys), upload(&random(&mut rng, ws.iter().product()), &ws));
        let (d, y, dx) = (upload(&random(&mut rng, n), &xs), upload(&random(&mut rng, n), &xs), upload(&vec![0.0; n], &xs));
        for opts in [on(Engine::Cpu), on(Engine::Tiled)] {
            let got = conv2d::backward_data_joined(&device(), &geom, &dy, &w, &dx, Join { d: &d, y: &y }, &opts).unwrap();
            assert!(got.is_none(), "{name}: a join was recorded");
        }
    }
    // Tensors of another storage or size than dx, or dx's own buffer.
    let geom = Conv2dGeometry::new(&[2, 5, 5, 8], 8, (1, 1), (1, 1), Padding::Valid).unwrap();
    let (xs, ys, ws) = (geom.input_shape(), geom.output_shape(), geom.kernel_shape());
    let n = xs.iter().product::<usize>();
    let (dy, w) = (upload(&random(&mut rng, ys.iter().product()), &ys), upload(&random(&mut rng, ws.iter().product()), &ws));
    let (d, dx) = (upload(&random(&mut rng, n), &xs), upload(&vec![0.0; n], &xs));
    let half = upload_f16(&vec![0.0; n], &xs);
    let short = upload(&vec![0.0; n - 8], &[n - 8]);
    for (name, y) in [("an f16 y beside an f32 dx", &half), ("a shorter y", &short), ("dx itself as y", &dx)] {
        let got = conv2d::backward_data_joined(&device(), &geom, &dy, &w, &dx, Join { d: &d, y }, &on(Engine::Tiled)).unwrap();
        assert!(got.is_none(), "{name}: a join was recorded");
    }
}
