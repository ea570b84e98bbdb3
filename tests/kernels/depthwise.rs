//! Depthwise convolution forward (with and without bias), input gradient, kernel gradient
//! and bias gradient against direct f64 loops over Keras' definition (output channel
//! `c * depth_multiplier + m` is input channel `c` convolved with kernel `[:, :, c, m]`;
//! tap `i` reads row `oh * stride - pad_top + i * dilation`), on both shader variants, with
//! a coverage assertion over every path token the wrappers emit.

use convoy::kernels::conv2d::{Conv2dGeometry, Padding};
use convoy::kernels::depthwise::{self, DepthwiseGeometry};
use convoy::DType;

use crate::common::*;
use crate::pool::garbage;

/// Calls `f(n, oh, ow, i, j, ih, iw)` for every tap that lands inside the image.
fn taps(g: &DepthwiseGeometry, mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize)) {
    for n in 0..g.batch {
        for oh in 0..g.out_h {
            for ow in 0..g.out_w {
                for i in 0..g.kh {
                    for j in 0..g.kw {
                        let ih = (oh * g.stride_h + i * g.dilation_h) as isize - g.pad_top as isize;
                        let iw = (ow * g.stride_w + j * g.dilation_w) as isize - g.pad_left as isize;
                        if ih >= 0 && iw >= 0 && (ih as usize) < g.in_h && (iw as usize) < g.in_w {
                            f(n, oh, ow, i, j, ih as usize, iw as usize);
                        }
                    }
                }
            }
        }
    }
}

struct Idx<'a>(&'a DepthwiseGeometry);
impl Idx<'_> {
    fn x(&self, n: usize, h: usize, w: usize, c: usize) -> usize {
        ((n * self.0.in_h + h) * self.0.in_w + w) * self.0.channels + c
    }
    fn y(&self, n: usize, h: usize, w: usize, c: usize, m: usize) -> usize {
        ((n * self.0.out_h + h) * self.0.out_w + w) * self.0.out_channels() + c * self.0.multiplier + m
    }
    fn w(&self, i: usize, j: usize, c: usize, m: usize) -> usize {
        ((i * self.0.kw + j) * self.0.channels + c) * self.0.multiplier + m
    }
}

/// y of the forward pass, plus `bias` when given.
pub(crate) fn forward_ref(g: &DepthwiseGeometry, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<f64> {
    let ix = Idx(g);
    let mut y = vec![0.0f64; g.output_shape().iter().product()];
    if let Some(b) = bias {
        for (k, v) in y.iter_mut().enumerate() {
            *v = b[k % g.out_channels()] as f64;
        }
    }
    taps(g, |n, oh, ow, i, j, ih, iw| {
        for c in 0..g.channels {
            for m in 0..g.multiplier {
                y[ix.y(n, oh, ow, c, m)] += x[ix.x(n, ih, iw, c)] as f64 * w[ix.w(i, j, c, m)] as f64;
            }
        }
    });
    y
}

/// (dx, dw, db) for the output gradient `dy`.
pub(crate) fn backward_ref(g: &DepthwiseGeometry, x: &[f32], w: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let ix = Idx(g);
    let mut dx = vec![0.0f64; x.len()];
    let mut dw = vec![0.0f64; w.len()];
    taps(g, |n, oh, ow, i, j, ih, iw| {
        for c in 0..g.channels {
            for m in 0..g.multiplier {
                let d = dy[ix.y(n, oh, ow, c, m)] as f64;
                dx[ix.x(n, ih, iw, c)] += d * w[ix.w(i, j, c, m)] as f64;
                dw[ix.w(i, j, c, m)] += d * x[ix.x(n, ih, iw, c)] as f64;
            }
        }
    });
    let cm = g.out_channels();
    let mut db = vec![0.0f64; cm];
    for (k, v) in dy.iter().enumerate() {
        db[k % cm] += *v as f64;
    }
    (dx, dw, db)
}

/// (batch, h, w, channels, multiplier, kernel, strides, dilation, padding)
type Case = (usize, usize, usize, usize, usize, (usize, usize), (usize, usize), (usize, usize), Padding);

/// Odd and even maps, batches 1-3 and 250, channels 1 to 160 on and off multiples of 4,
/// multipliers 1 to 4, kernels 1x1 to 5x5, strides 1, 2 and (1, 2) / (2, 1), every padding,
/// dilation 1 and 2; together they take every path the coverage assertion lists (vec4 and
/// scalar, one and several row chunks, one and several column tiles, one and several taps).
const CASES: &[Case] = &[
    (1, 7, 5, 1, 1, (3, 3), (1, 1), (1, 1), Padding::Same),
    (2, 9, 8, 3, 2, (2, 3), (2, 2), (1, 1), Padding::Valid),
    (3, 6, 7, 4, 1, (5, 5), (1, 2), (1, 1), Padding::Same),
    (1, 8, 8, 5, 1, (3, 3), (2, 2), (2, 2), Padding::Explicit(1, 2)),
    (2, 5, 9, 8, 2, (1, 1), (2, 1), (1, 1), Padding::Valid),
    (3, 11, 10, 32, 1, (3, 3), (2, 2), (1, 1), Padding::Same),
    (2, 7, 7, 3, 2, (3, 3), (1, 1), (2, 1), Padding::Same),
    // cm = 4 (vec4 forward and kernel gradient, multiplier lanes) but 2 input channels
    // (scalar input gradient)
    (1, 9, 9, 2, 2, (3, 3), (1, 1), (1, 1), Padding::Explicit(2, 0)),
    // multipliers 3 and 4: a quad of outputs spans input channels unevenly (3) or is one
    // channel (4); with 2 a lane reading its neighbour's channel would go unnoticed
    (2, 6, 5, 4, 3, (3, 3), (2, 1), (1, 2), Padding::Same),
    (1, 5, 5, 1, 4, (2, 2), (1, 1), (1, 1), Padding::Same),
    // a padding wider than the kernel: whole rows of outputs see only padding
    (2, 6, 6, 5, 2, (5, 5), (1, 1), (2, 2), Padding::Explicit(4, 4)),
    (1, 3, 3, 3, 1, (3, 3), (1, 1), (1, 1), Padding::Valid),
    (1, 4, 4, 3, 1, (1, 1), (1, 1), (1, 1), Padding::Valid),
    (1, 3, 3, 4, 1, (1, 1), (1, 1), (1, 1), Padding::Same),
    // batch 250: many row chunks in both widths
    (250, 8, 8, 4, 1, (3, 3), (1, 1), (1, 1), Padding::Same),
    (250, 7, 7, 3, 1, (3, 3), (2, 2), (1, 1), Padding::Same),
    // more than 64 columns: several column tiles, scalar (67) and vec4 (320 / 4 = 80 quads)
    (2, 12, 12, 67, 1, (3, 3), (1, 1), (1, 1), Padding::Same),
    (2, 16, 16, 160, 2, (2, 2), (2, 2), (1, 1), Padding::Valid),
    // MobileNetV2's stride-2 block at a small size
    (2, 14, 14, 24, 1, (3, 3), (2, 2), (1, 1), Padding::Same),
];

fn geometry(c: &Case) -> DepthwiseGeometry {
    let &(batch, h, w, ch, m, kernel, strides, dilation, padding) = c;
    DepthwiseGeometry::new(&[batch, h, w, ch], m, kernel, strides, dilation, padding).unwrap()
}

/// Runs every pass of `g` on random data (outputs start as garbage) and compares with f64;
/// the kernel gradient must also be the same bits on a second run.
fn check(g: &DepthwiseGeometry, seed: u64, case: &str) {
    let d = device();
    let mut r = rng(seed);
    let (xs, ys, ws) = (g.input_shape(), g.output_shape(), g.kernel_shape());
    let x = random(&mut r, xs.iter().product());
    let w = random(&mut r, ws.iter().product());
    let b = random(&mut r, g.out_channels());
    let dy = random(&mut r, ys.iter().product());
    let (tx, tw, tb, tdy) = (upload(&x, &xs), upload(&w, &ws), upload(&b, &[g.out_channels()]), upload(&dy, &ys));
    let (ty, ty_bias, tdx, tdw, tdb) = (garbage(&ys), garbage(&ys), garbage(&xs), garbage(&ws), garbage(&[g.out_channels()]));
    let mut dispatches = vec![
        depthwise::forward(&d, g, &tx, &tw, None, &ty).unwrap(),
        depthwise::forward(&d, g, &tx, &tw, Some(&tb), &ty_bias).unwrap(),
        depthwise::backward_data(&d, g, &tdy, &tw, &tdx).unwrap(),
    ];
    dispatches.extend(depthwise::backward_weights(&d, g, &tx, &tdy, &tdw).unwrap());
    dispatches.extend(depthwise::backward_bias(&d, g, &tdy, &tdb).unwrap());
    run(&dispatches);
    let (want_dx, want_dw, want_db) = backward_ref(g, &x, &w, &dy);
    let e = [
        assert_close(&format!("{case} forward"), &read(&ty), &forward_ref(g, &x, &w, None)),
        assert_close(&format!("{case} forward + bias"), &read(&ty_bias), &forward_ref(g, &x, &w, Some(&b))),
        assert_close(&format!("{case} input gradient"), &read(&tdx), &want_dx),
        assert_close(&format!("{case} kernel gradient"), &read(&tdw), &want_dw),
        assert_close(&format!("{case} bias gradient"), &read(&tdb), &want_db),
    ];
    let first = read(&tdw);
    run(&depthwise::backward_weights(&d, g, &tx, &tdy, &tdw).unwrap());
    assert!(first.iter().zip(read(&tdw)).all(|(a, b)| a.to_bits() == b.to_bits()), "{case}: the kernel gradient changed between two runs");
    println!("{case}: forward {:.1e} {:.1e}, dx {:.1e}, dw {:.1e}, db {:.1e}", e[0], e[1], e[2], e[3], e[4]);
}

/// Every case on the checked and the unchecked shaders, a folded grid on the unchecked ones,
/// and the coverage assertion: every path token the wrappers emit was taken (it fails, naming
/// the path, when a case that reaches it is removed).
#[test]
fn depthwise_matches_f64_on_every_path() {
    take_paths();
    on_each_variant(|variant| {
        for (i, c) in CASES.iter().enumerate() {
            check(&geometry(c), 0xd3_0000 + i as u64, &format!("{variant} case {i} {c:?}"));
        }
    });
    // More than 65,535 * 256 outputs and input-gradient elements fold the linear grids
    // (nine channels: the scalar kernels; the vec4 ones fold only past 67M elements, more
    // than the software adapter's 128 MiB bindings hold).
    on_device(devices()[1].clone(), || {
        let g = DepthwiseGeometry::new(&[2, 1025, 1025, 9], 1, (1, 2), (1, 1), (1, 1), Padding::Same).unwrap();
        check(&g, 0xd3_f01d, &format!("unchecked folded {g:?}"));
    });

    let want = |entry: &'static str, tokens: &[&str]| tokens.iter().map(move |t| (entry, t.to_string())).collect::<Vec<_>>();
    let mut expected = Vec::new();
    expected.extend(want("depthwise_forward", &["scalar", "multiplier=one", "multiplier=many", "bias", "grid=1d", "grid=2d"]));
    expected.extend(want("depthwise_forward4", &["vec4", "multiplier=one", "multiplier=many", "bias", "grid=1d"]));
    expected.extend(want("depthwise_backward_data", &["scalar", "multiplier=one", "multiplier=many", "grid=1d", "grid=2d"]));
    expected.extend(want("depthwise_backward_data4", &["vec4", "multiplier=one", "multiplier=many", "grid=1d"]));
    for entry in ["depthwise_backward_weights", "depthwise_backward_weights4"] {
        let width = if entry.ends_with('4') { "vec4" } else { "scalar" };
        expected.extend(want(entry, &[width, "multiplier=one", "multiplier=many", "pass=only", "pass=partial"]));
        expected.extend(want(entry, &["chunks=single", "chunks=multi", "cols=one_tile", "cols=tiled", "grid=1d", "grid=2d"]));
    }
    expected.extend(want("depthwise_merge", &["pass=merge", "chunks=multi", "cols=one_tile", "cols=tiled", "grid=1d"]));
    assert_paths_cover("depthwise", &take_paths(), &expected, &[]);
}

#[test]
fn geometry_matches_keras_and_conv2d() {
    // (input, kernel, stride, dilation, padding) -> (out, pad before), as TensorFlow computes
    // them on the dilated extent (k - 1) * d + 1
    let cases = [
        (224, 3, 2, 1, Padding::Same, (112, 0)),
        (112, 3, 1, 1, Padding::Same, (112, 1)),
        (7, 3, 2, 1, Padding::Same, (4, 1)),
        (8, 3, 2, 1, Padding::Same, (4, 0)),
        (7, 3, 1, 2, Padding::Same, (7, 2)),
        (8, 5, 3, 2, Padding::Same, (3, 3)),
        (7, 3, 1, 2, Padding::Valid, (3, 0)),
        (9, 2, 2, 3, Padding::Valid, (3, 0)),
        (5, 3, 2, 2, Padding::Explicit(2, 2), (3, 2)),
    ];
    for (size, k, s, d, padding, want) in cases {
        let g = DepthwiseGeometry::new(&[1, size, size, 3], 2, (k, k), (s, s), (d, d), padding).unwrap();
        assert_eq!((g.out_h, g.pad_top), want, "{size} px, kernel {k}, stride {s}, dilation {d}, {padding:?}");
        assert_eq!((g.out_w, g.pad_left), want, "width of {size} px, kernel {k}, stride {s}, dilation {d}, {padding:?}");
        assert_eq!(g.output_shape(), vec![1, g.out_h, g.out_w, 6]);
    }
    // without dilation, Conv2D's sizes and pads, oblong kernels and strides included
    for padding in [Padding::Valid, Padding::Same, Padding::Explicit(1, 2)] {
        for (h, w, k, s) in [(7, 9, (3, 3), (2, 2)), (8, 5, (2, 3), (1, 2)), (13, 13, (5, 5), (2, 1)), (6, 6, (1, 1), (3, 3))] {
            let dw = DepthwiseGeometry::new(&[2, h, w, 4], 1, k, s, (1, 1), padding).unwrap();
            let conv = Conv2dGeometry::new(&[2, h, w, 4], 4, k, s, padding).unwrap();
            assert_eq!((dw.out_h, dw.out_w, dw.pad_top, dw.pad_left), (conv.out_h, conv.out_w, conv.pad_top, conv.pad_left), "{h}x{w} kernel {k:?} stride {s:?} {padding:?}");
        }
    }
}

#[test]
fn bad_shapes_are_errors_naming_the_values() {
    let d = device();
    let err = |r: convoy::Result<DepthwiseGeometry>| r.unwrap_err().to_string();
    let e = err(DepthwiseGeometry::new(&[1, 5, 5], 1, (3, 3), (1, 1), (1, 1), Padding::Same));
    assert!(e.contains("[1, 5, 5]"), "3-d input: {e}");
    let e = err(DepthwiseGeometry::new(&[1, 5, 5, 3], 0, (3, 3), (1, 1), (1, 1), Padding::Same));
    assert!(e.contains("depth_multiplier (0)"), "zero multiplier: {e}");
    let e = err(DepthwiseGeometry::new(&[1, 5, 5, 3], 1, (3, 3), (1, 0), (1, 1), Padding::Same));
    assert!(e.contains("(1, 0)"), "zero stride: {e}");
    let e = err(DepthwiseGeometry::new(&[1, 5, 5, 3], 1, (3, 3), (1, 1), (0, 2), Padding::Same));
    assert!(e.contains("(0, 2)"), "zero dilation: {e}");
    let e = err(DepthwiseGeometry::new(&[1, 5, 6, 3], 1, (3, 3), (1, 1), (3, 1), Padding::Valid));
    assert!(e.contains("height 5") && e.contains("extent 7") && e.contains("dilation 3"), "dilated kernel over the image: {e}");
    assert!(DepthwiseGeometry::new(&[1, 5, 6, 3], 1, (3, 3), (1, 1), (3, 1), Padding::Explicit(1, 0)).is_ok(), "padding makes room");
    let e = err(DepthwiseGeometry::new(&[1, 1 << 30, 1, 1], 1, (1, 1), (1, 1), (1, 1), Padding::Same));
    assert!(e.contains("1073741824"), "huge side: {e}");

    let g = DepthwiseGeometry::new(&[2, 5, 7, 3], 2, (3, 3), (2, 2), (1, 1), Padding::Same).unwrap();
    let (x, w, y) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap(), d.zeros(&g.output_shape()).unwrap());
    let wrong_y = d.zeros(&[2, 5, 7, 6]).unwrap();
    let e = depthwise::forward(&d, &g, &x, &w, None, &wrong_y).unwrap_err().to_string();
    assert!(e.contains("depthwise_forward") && e.contains("[2, 5, 7, 6]") && e.contains("[2, 3, 4, 6]"), "message names the kernel and both shapes: {e}");
    let e = depthwise::forward(&d, &g, &x, &d.zeros(&[3, 3, 3, 1]).unwrap(), None, &y).unwrap_err().to_string();
    assert!(e.contains("kernel") && e.contains("[3, 3, 3, 1]") && e.contains("[3, 3, 3, 2]"), "wrong multiplier: {e}");
    let e = depthwise::forward(&d, &g, &x, &w, Some(&d.zeros(&[3]).unwrap()), &y).unwrap_err().to_string();
    assert!(e.contains("bias") && e.contains("[3]") && e.contains("[6]"), "bias per input channel: {e}");
    assert!(depthwise::forward(&d, &g, &x, &w, None, &d.zeros_of(&g.output_shape(), DType::U32).unwrap()).is_err(), "u32 output");
    assert!(depthwise::backward_data(&d, &g, &y, &w, &y).is_err(), "dx shaped like dy");
    assert!(depthwise::backward_weights(&d, &g, &x, &y, &y).is_err(), "dw shaped like dy");
    assert!(depthwise::backward_bias(&d, &g, &y, &d.zeros(&[3]).unwrap()).is_err(), "bias gradient per input channel");
    // an output sharing an input's buffer would race (and wgpu refuses it)
    let whole = d.zeros(&[4096]).unwrap();
    let (xv, yv) = (whole.view(0, &g.input_shape()).unwrap(), whole.view(256, &g.output_shape()).unwrap());
    let e = depthwise::forward(&d, &g, &xv, &w, None, &yv).unwrap_err().to_string();
    assert!(e.contains("shares a buffer"), "{e}");
}
