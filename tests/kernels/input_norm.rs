//! A convolution's input normalized as its products gather it (`conv2d::forward_normalized`
//! and `backward_weights_normalized`, `A_NORM` in shaders/conv2d.wgsl and gemm_cpu.wgsl):
//! the f32 products against the f64 convolution and kernel gradient of the input as a
//! BatchNormalization would have stored it, and every engine and storage against the same
//! products of that stored input on the device; padded and strided 3x3 (A = Im2col and
//! Im2colT), 1x1 (A = Rows and Cols), channels in quads and not, with and without the ReLU.
//! The padding stays zero rather than becoming the normalization of zero.

use convoy::kernels::conv2d::{self, Conv2dGeometry, InputNorm, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions};

use crate::common::*;
use crate::conv2d::{backward_weights_ref, forward_ref};

/// (geometry, channels in quads): a padded 3x3, a strided padded 3x3, a 1x1 of whole quads;
/// a 3x3 and a 1x1 of 6 and 5 channels (the scalar gathers, f32 storage only).
fn geometries() -> Vec<(Conv2dGeometry, bool)> {
    vec![
        (Conv2dGeometry::new(&[2, 7, 9, 8], 12, (3, 3), (1, 1), Padding::Same).unwrap(), true),
        (Conv2dGeometry::new(&[3, 8, 8, 16], 20, (3, 3), (2, 2), Padding::Same).unwrap(), true),
        (Conv2dGeometry::new(&[2, 6, 5, 8], 16, (1, 1), (1, 1), Padding::Valid).unwrap(), true),
        (Conv2dGeometry::new(&[2, 5, 5, 6], 8, (3, 3), (1, 1), Padding::Same).unwrap(), false),
        (Conv2dGeometry::new(&[2, 9, 9, 5], 7, (1, 1), (1, 1), Padding::Valid).unwrap(), false),
    ]
}

/// x normalized per channel in f32, then rounded as stored (f16 where `f16`): the BatchNorm's
/// forward and the gathers fuse the multiply-add (shaders/lib/affine.wgsl) where this rounds
/// twice, so the two may differ in the last f32 bit.
fn normalized(x: &[f32], c: usize, params: &[f32], relu: bool, f16: bool) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = i % c;
            let y = (v - params[ch]) * params[c + ch] + params[2 * c + ch];
            let y = if relu { y.max(0.0) } else { y };
            if f16 { to_half(y) } else { y }
        })
        .collect()
}

#[test]
fn a_normalized_input_convolves_as_the_stored_normalization() {
    // The first case through every tile, the others through the two ends (sweep_tiles).
    let sets = |every: bool| {
        let mut sets: Vec<(GemmOptions, String)> = vec![(on(Engine::Cpu), "cpu".into())];
        for tile in sweep_tiles(every) {
            sets.push((GemmOptions { tile: Some(tile), ..on(Engine::Tiled) }, format!("{tile:?}")));
        }
        // Mixed: the tensor cores where the device has them, the rounding f32 kernel elsewhere.
        sets.push((GemmOptions { mixed: true, ..on(Engine::Tiled) }, "mixed tiled".into()));
        sets.push((GemmOptions { mixed: true, ..on(Engine::Cpu) }, "mixed cpu".into()));
        sets
    };
    take_paths();
    on_sweep_variants(|variant| {
        let d = device();
        for (i, (g, quads)) in geometries().iter().enumerate() {
            let c = g.in_c;
            let mut r = rng(70 + i as u64);
            // An offset and a spread per channel, so that the normalization moves every
            // value and the ReLU cuts some of them.
            let x: Vec<f32> = random(&mut r, g.input_shape().iter().product()).iter().map(|v| 2.0 * v + 0.3).collect();
            let mut params = random(&mut r, 3 * c);
            for ch in 0..c {
                params[c + ch] = 0.5 + params[c + ch].abs();
            }
            let w = random(&mut r, g.kernel_shape().iter().product());
            let (tp, tw) = (upload(&params, &[3, c]), upload(&w, &g.kernel_shape()));
            for (opts, name) in &sets(i == 0) {
                for (f16, relu) in [(false, false), (false, true), (true, true)] {
                    if f16 && !quads {
                        continue;
                    }
                    let case = format!("{:?} -> {} on {name}, f16 {f16}, relu {relu} ({variant})", g.input_shape(), g.filters);
                    let fed = normalized(&x, c, &params, relu, f16);
                    let alloc = || d.alloc(&g.output_shape(), if f16 { convoy::DType::F16 } else { convoy::DType::F32 }).unwrap();
                    let (fused, plain) = (alloc(), alloc());
                    let norm = InputNorm { params: &tp, relu };
                    run(&conv2d::forward_normalized(&d, g, &stored(&x, &g.input_shape(), f16), norm, &tw, &fused, opts).unwrap());
                    run(&conv2d::forward_with(&d, g, &stored(&fed, &g.input_shape(), f16), &tw, &plain, opts).unwrap());
                    let (got, want) = (read_as(&fused, f16), read_as(&plain, f16));
                    // Normalized values that differ in their last f32 bit (a fused
                    // multiply-add on one side) may round to neighbouring f16 values.
                    let e = rel_err(&got, &want.iter().map(|&v| v as f64).collect::<Vec<_>>());
                    let bound = if f16 || opts.mixed { 2e-3 } else { 1e-5 };
                    assert!(e < bound, "{case}: the fused gather's output differs from the stored normalization's by {e:.2e}");
                    if !f16 && !opts.mixed {
                        assert_close(&case, &got, &forward_ref(g, &fed, &w));
                    }
                    // The kernel's gradient, A the normalized input transposed (with the
                    // ReLU only: its pipelines are the test's slowest to build on a CPU).
                    if !relu {
                        continue;
                    }
                    let dy = random(&mut rng(90 + i as u64), g.output_shape().iter().product());
                    let tdy = stored(&dy, &g.output_shape(), f16);
                    let (dw_fused, dw_plain) = (d.zeros(&g.kernel_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap());
                    run(&conv2d::backward_weights_normalized(&d, g, &stored(&x, &g.input_shape(), f16), norm, &tdy, &dw_fused, opts).unwrap());
                    run(&conv2d::backward_weights_with(&d, g, &stored(&fed, &g.input_shape(), f16), &tdy, &dw_plain, opts).unwrap());
                    let (got, want) = (read(&dw_fused), read(&dw_plain));
                    let e = rel_err(&got, &want.iter().map(|&v| v as f64).collect::<Vec<_>>());
                    assert!(e < bound, "{case}: the fused kernel gradient differs from the stored normalization's by {e:.2e}");
                    if !f16 && !opts.mixed {
                        assert_close(&format!("{case}, kernel gradient"), &got, &backward_weights_ref(g, &fed, &dy));
                    }
                }
            }
        }
    });
    let mut expected: Vec<(&str, String)> = vec![("gemm_cpu", "a_norm".into()), ("gemm", "a_norm".into())];
    for t in ["a=Rows", "a=Im2col", "a=Cols", "a=Im2colT", "quad_a", "scalar_a"] {
        expected.push(("gemm", t.into()));
    }
    let gpu_only = if device().has_coop16() { vec![("gemm_coop", "a_norm".to_string())] } else { Vec::new() };
    assert_paths_cover("normalized input", &take_paths(), &expected, &gpu_only);
}

#[test]
fn a_normalization_of_another_shape_or_kind_is_refused() {
    let d = device();
    let g = &geometries()[0].0;
    let (x, w) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap());
    let y = d.zeros(&g.output_shape()).unwrap();
    let wrong = d.zeros(&[3, g.in_c + 1]).unwrap();
    let e = conv2d::forward_normalized(&d, g, &x, InputNorm { params: &wrong, relu: true }, &w, &y, &GemmOptions::default()).unwrap_err().to_string();
    assert!(e.contains("[3, 9]") && e.contains("[3, 8]"), "names both shapes: {e}");
    // A grouped convolution gathers group slices: refused by name.
    let grouped = Conv2dGeometry::new_with(&[2, 7, 9, 8], 12, (3, 3), (1, 1), (1, 1), 2, Padding::Same).unwrap();
    let (wg, yg, p) = (d.zeros(&grouped.kernel_shape()).unwrap(), d.zeros(&grouped.output_shape()).unwrap(), d.zeros(&[3, 8]).unwrap());
    let e = conv2d::forward_normalized(&d, &grouped, &x, InputNorm { params: &p, relu: false }, &wg, &yg, &GemmOptions::default()).unwrap_err().to_string();
    assert!(e.contains("ungrouped"), "{e}");
}
