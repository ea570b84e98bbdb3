//! A kernel flipped ahead (`conv2d::flip_kernel`, as a model writes it in its forward) gives
//! the input gradient bit for bit what the product that flips it first gives
//! (`conv2d::backward_data_flipped` against `backward_data_with` and `backward_data_joined`):
//! unit-stride 3x3 and 1x1 kernels read flipped, a downsample's 1x1 read transposed, with a
//! residual join and without, f32 and f16 gradients, and on a tensor-core device mixed
//! products too. The flipped call records no flip of its own; a flipped kernel of another
//! length or storage is refused.

use convoy::kernels::conv2d::{self, Conv2dGeometry, Join, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions};

use crate::common::*;

#[test]
fn a_kernel_flipped_ahead_gives_the_input_gradient_bit_for_bit() {
    on_sweep_variants(|variant| {
        let geometries = [
            ("3x3", Conv2dGeometry::new(&[2, 6, 7, 8], 12, (3, 3), (1, 1), Padding::Same).unwrap()),
            ("1x1", Conv2dGeometry::new(&[3, 5, 5, 12], 8, (1, 1), (1, 1), Padding::Valid).unwrap()),
            ("1x1/2", Conv2dGeometry::new(&[2, 8, 8, 8], 16, (1, 1), (2, 2), Padding::Valid).unwrap()),
        ];
        let forced = GemmOptions { flip: Some(true), ..on(Engine::Tiled) };
        let mut sets = vec![(forced, "tiled")];
        if device().has_coop16() {
            sets.push((GemmOptions { mixed: true, ..on(Engine::Tiled) }, "mixed"));
        }
        take_paths();
        let mut rng = rng(42);
        for (name, geom) in &geometries {
            let (xs, ys, ws) = (geom.input_shape(), geom.output_shape(), geom.kernel_shape());
            let n = xs.iter().product::<usize>();
            let w = upload(&random(&mut rng, ws.iter().product()), &ws);
            for f16 in [false, true] {
                let half = |v: Vec<f32>| if f16 { v.into_iter().map(to_half).collect() } else { v };
                let dy = stored(&half(random(&mut rng, ys.iter().product())), &ys, f16);
                let d = stored(&half(random(&mut rng, n)), &xs, f16);
                let y = stored(&half(random(&mut rng, n).into_iter().map(|v| v.max(0.0)).collect()), &xs, f16);
                for (opts, set) in &sets {
                    let case = format!("{variant} {name} {set} {}", if f16 { "f16" } else { "f32" });
                    assert!(conv2d::reads_flipped(&device(), geom, opts).unwrap(), "{case}: the input gradient reads no flip");
                    let flipped = upload(&vec![f32::NAN; w.len()], &[w.len()]);
                    run(&[conv2d::flip_kernel(&device(), geom, &w, &flipped).unwrap()]);
                    let strided = geom.stride_h > 1;
                    let joins: &[bool] = if strided { &[false] } else { &[false, true] };
                    for &joined in joins {
                        let join = joined.then_some(Join { d: &d, y: &y });
                        let (first, ahead) = (stored(&vec![0.0; n], &xs, f16), stored(&vec![0.0; n], &xs, f16));
                        let own = match join {
                            Some(j) => conv2d::backward_data_joined(&device(), geom, &dy, &w, &first, j, opts).unwrap().expect("joined"),
                            None => conv2d::backward_data_with(&device(), geom, &dy, &w, &first, opts).unwrap(),
                        };
                        let given = conv2d::backward_data_flipped(&device(), geom, &dy, &w, &flipped, &ahead, join, opts).unwrap().expect("recorded");
                        assert_eq!(own.iter().filter(|d| d.label == "flip_kernel").count(), 1, "{case} join={joined}: the product did not flip its kernel");
                        assert!(given.iter().all(|d| d.label != "flip_kernel"), "{case} join={joined}: a kernel flipped ahead was flipped again");
                        run(&own);
                        run(&given);
                        let (a, b) = (read_as(&first, f16), read_as(&ahead, f16));
                        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                            assert!(p.to_bits() == q.to_bits(), "{case} join={joined}: element {i} is {q} from the flip ahead, {p} from the product's own");
                        }
                    }
                }
            }
        }
        let taken = take_paths();
        for token in ["flipped", "transposed", "join"] {
            assert!(taken.iter().any(|p| p.split_whitespace().any(|t| t == token)), "no product took `{token}`: {taken:#?}");
        }
    });
}

#[test]
fn a_flipped_kernel_of_another_length_or_storage_is_refused() {
    let geom = Conv2dGeometry::new(&[2, 5, 5, 8], 8, (3, 3), (1, 1), Padding::Same).unwrap();
    let ws = geom.kernel_shape();
    let w = upload(&vec![0.5; ws.iter().product()], &ws);
    let (dy, dx) = (upload(&vec![0.0; 2 * 5 * 5 * 8], &geom.output_shape()), upload(&vec![0.0; 2 * 5 * 5 * 8], &geom.input_shape()));
    let short = upload(&vec![0.0; w.len() - 1], &[w.len() - 1]);
    let half = upload_f16(&vec![0.0; w.len()], &[w.len()]);
    let opts = GemmOptions { flip: Some(true), ..on(Engine::Tiled) };
    for (name, bad) in [("shorter", &short), ("f16", &half)] {
        let err = conv2d::flip_kernel(&device(), &geom, &w, bad).unwrap_err().to_string();
        assert!(err.contains("flipped kernel"), "{name}: {err}");
        let err = conv2d::backward_data_flipped(&device(), &geom, &dy, &w, bad, &dx, None, &opts).unwrap_err().to_string();
        assert!(err.contains("flipped kernel"), "{name}: {err}");
    }
}
