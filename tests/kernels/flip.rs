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
                        let given = conv2d::backward_data_flipped(&device(), geom, &dy, &w, Some(&flipped), &ahead, join, opts).unwrap().expect("recorded");
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
        let err = conv2d::backward_data_flipped(&device(), &geom, &dy, &w, Some(bad), &dx, None, &opts).unwrap_err().to_string();
        assert!(err.contains("flipped kernel"), "{name}: {err}");
    }
}

/// Many kernels flipped in one dispatch (`conv2d::flip_kernels`, as a model records them
/// before its backward): views of one flat tensor into views of another, each flip the same
/// bits as `flip_kernel`'s; more kernels than one dispatch holds, and kernels of another
/// buffer, take dispatches of their own.
#[test]
fn kernels_flipped_together_are_each_kernel_flipped() {
    let mut rng = rng(43);
    // Kernels of several shapes and block counts (edges of 32 both ways, 1x1, 3x3, 7x7).
    let mut geoms = vec![
        Conv2dGeometry::new(&[1, 8, 8, 40], 36, (3, 3), (1, 1), Padding::Same).unwrap(),
        Conv2dGeometry::new(&[1, 8, 8, 8], 70, (1, 1), (1, 1), Padding::Valid).unwrap(),
        Conv2dGeometry::new(&[1, 9, 9, 5], 33, (7, 7), (1, 1), Padding::Same).unwrap(),
        Conv2dGeometry::new(&[1, 8, 8, 64], 16, (1, 1), (2, 2), Padding::Valid).unwrap(),
    ];
    // Past one dispatch's 64 kernels.
    geoms.extend((0..64).map(|i| Conv2dGeometry::new(&[1, 4, 4, 4 + i % 3], 8 + i % 5, (1 + 2 * (i % 2), 1 + 2 * (i % 2)), (1, 1), Padding::Same).unwrap()));
    let slot = |len: usize| len.div_ceil(64) * 64;
    let lens: Vec<usize> = geoms.iter().map(|g| g.kernel_shape().iter().product()).collect();
    let total: usize = lens.iter().map(|&l| slot(l)).sum();
    let params = upload(&random(&mut rng, total), &[total]);
    let arena = upload(&vec![f32::NAN; total], &[total]);
    let (mut ws, mut flips, mut at) = (Vec::new(), Vec::new(), 0);
    for (g, &len) in geoms.iter().zip(&lens) {
        ws.push(params.view(at, &g.kernel_shape()).unwrap());
        flips.push(arena.view(at, &[len]).unwrap());
        at += slot(len);
    }
    // One kernel in a buffer of its own.
    let lone = upload(&random(&mut rng, lens[0]), &geoms[0].kernel_shape());
    let lone_flip = upload(&vec![f32::NAN; lens[0]], &[lens[0]]);
    let mut entries: Vec<conv2d::KernelFlip> = geoms.iter().zip(ws.iter().zip(&flips)).map(|(geom, (w, flipped))| conv2d::KernelFlip { geom, w, flipped }).collect();
    entries.insert(2, conv2d::KernelFlip { geom: &geoms[0], w: &lone, flipped: &lone_flip });
    let dispatches = conv2d::flip_kernels(&device(), &entries).unwrap();
    // The first two, the lone one, the next 64, the last one.
    let counts: Vec<&str> = dispatches.iter().map(|d| d.path.split_whitespace().find(|t| t.starts_with("kernels=")).unwrap()).collect();
    assert_eq!(counts, ["kernels=2", "kernels=1", "kernels=64", "kernels=2"], "dispatches: {counts:?}");
    run(&dispatches);
    for (i, e) in entries.iter().enumerate() {
        let one = upload(&vec![f32::NAN; e.w.len()], &[e.w.len()]);
        run(&[conv2d::flip_kernel(&device(), e.geom, e.w, &one).unwrap()]);
        let (want, got) = (read(&one), read(e.flipped));
        for (j, (a, b)) in want.iter().zip(&got).enumerate() {
            assert!(a.to_bits() == b.to_bits(), "kernel {i} {:?}: element {j} is {b} flipped together, {a} alone", e.w.shape());
        }
    }
    // The slack between flips is left alone.
    let arena_now = read(&arena);
    assert!(arena_now[lens[0]..slot(lens[0])].iter().all(|v| v.is_nan()), "a flip wrote past its kernel");
}
