//! Convolution forward, input gradient and kernel gradient against direct f64 loops over
//! the definition (no im2col in the reference, so a shared indexing mistake cannot hide).

use convoy::kernels::conv2d::{self, Conv2dGeometry, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions, Tile};

use crate::common::*;

/// Calls `f(n, oh, ow, i, j, ih, iw)` for every tap that lands inside the image (tap `i` of a
/// dilated kernel `i * dilation` pixels into the window).
fn taps(g: &Conv2dGeometry, mut f: impl FnMut(usize, usize, usize, usize, usize, usize, usize)) {
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

struct Idx<'a>(&'a Conv2dGeometry);
impl Idx<'_> {
    fn x(&self, n: usize, h: usize, w: usize, c: usize) -> usize {
        ((n * self.0.in_h + h) * self.0.in_w + w) * self.0.in_c + c
    }
    fn y(&self, n: usize, h: usize, w: usize, f: usize) -> usize {
        ((n * self.0.out_h + h) * self.0.out_w + w) * self.0.filters + f
    }
    /// `c` counts from the first input channel of `f`'s group.
    fn w(&self, i: usize, j: usize, c: usize, f: usize) -> usize {
        ((i * self.0.kw + j) * self.0.group_in_c() + c) * self.0.filters + f
    }
    /// Every (input channel, its index within the group, filter) the convolution pairs: all
    /// of them in one group, only a group's own in a grouped convolution.
    fn pairs(&self) -> Vec<(usize, usize, usize)> {
        let (cg, fg) = (self.0.group_in_c(), self.0.group_filters());
        (0..self.0.filters).flat_map(|f| (0..cg).map(move |cl| ((f / fg) * cg + cl, cl, f))).collect()
    }
}

pub(crate) fn forward_ref(g: &Conv2dGeometry, x: &[f32], w: &[f32]) -> Vec<f64> {
    let ix = Idx(g);
    let pairs = ix.pairs();
    let mut y = vec![0.0f64; g.output_shape().iter().product()];
    taps(g, |n, oh, ow, i, j, ih, iw| {
        for &(c, cl, f) in &pairs {
            y[ix.y(n, oh, ow, f)] += x[ix.x(n, ih, iw, c)] as f64 * w[ix.w(i, j, cl, f)] as f64;
        }
    });
    y
}

pub(crate) fn backward_data_ref(g: &Conv2dGeometry, dy: &[f32], w: &[f32]) -> Vec<f64> {
    let ix = Idx(g);
    let pairs = ix.pairs();
    let mut dx = vec![0.0f64; g.input_shape().iter().product()];
    taps(g, |n, oh, ow, i, j, ih, iw| {
        for &(c, cl, f) in &pairs {
            dx[ix.x(n, ih, iw, c)] += dy[ix.y(n, oh, ow, f)] as f64 * w[ix.w(i, j, cl, f)] as f64;
        }
    });
    dx
}

pub(crate) fn backward_weights_ref(g: &Conv2dGeometry, x: &[f32], dy: &[f32]) -> Vec<f64> {
    let ix = Idx(g);
    let pairs = ix.pairs();
    let mut dw = vec![0.0f64; g.kernel_shape().iter().product()];
    taps(g, |n, oh, ow, i, j, ih, iw| {
        for &(c, cl, f) in &pairs {
            dw[ix.w(i, j, cl, f)] += x[ix.x(n, ih, iw, c)] as f64 * dy[ix.y(n, oh, ow, f)] as f64;
        }
    });
    dw
}

type Case = ([usize; 4], usize, (usize, usize), (usize, usize), Padding);

/// Awkward shapes: batch 1 and 3, odd images, channel counts on and off multiples of 4
/// (scalar and vec4 loads), every padding, strides 1 and 2, square and oblong kernels.
const CASES: &[Case] = &[
    ([1, 5, 7, 3], 6, (3, 3), (1, 1), Padding::Same),
    ([3, 9, 9, 5], 33, (3, 3), (2, 2), Padding::Explicit(1, 1)),
    ([1, 9, 9, 17], 1, (5, 5), (1, 1), Padding::Valid),
    ([3, 5, 7, 3], 6, (2, 3), (2, 2), Padding::Same),
    ([1, 7, 5, 8], 16, (3, 3), (2, 2), Padding::Explicit(1, 1)),
    ([3, 5, 7, 17], 33, (1, 1), (1, 1), Padding::Explicit(0, 0)),
    ([1, 9, 9, 8], 12, (1, 1), (1, 1), Padding::Valid),
    ([3, 9, 9, 5], 6, (1, 1), (2, 2), Padding::Valid),
    // Whole quads of filters: the tapped phase of the input gradient reads dy's rows.
    ([3, 9, 9, 5], 8, (1, 1), (2, 2), Padding::Valid),
    ([1, 5, 7, 3], 33, (5, 5), (2, 2), Padding::Same),
    ([1, 9, 9, 16], 8, (3, 3), (1, 1), Padding::Explicit(1, 1)),
    ([3, 5, 7, 4], 6, (2, 3), (1, 2), Padding::Explicit(1, 1)),
    ([1, 5, 5, 3], 1, (5, 5), (1, 1), Padding::Valid),
    ([1, 6, 6, 3], 4, (3, 3), (2, 2), Padding::Valid),
    ([1, 7, 9, 5], 6, (3, 3), (2, 2), Padding::Explicit(2, 1)),
];

/// Runs all three passes of `geom` with `opts`, outputs pre-filled with garbage so that
/// accumulation instead of overwriting shows, and returns the three relative errors.
pub(crate) fn check(geom: &Conv2dGeometry, opts: &GemmOptions, case: &str, seed: u64) -> [f64; 3] {
    let d = device();
    let mut r = rng(seed);
    let (xs, ws, ys) = (geom.input_shape(), geom.kernel_shape(), geom.output_shape());
    let (xl, wl, yl) = (xs.iter().product(), ws.iter().product(), ys.iter().product());
    let (x, w, dy) = (random(&mut r, xl), random(&mut r, wl), random(&mut r, yl));
    let (tx, tw, tdy) = (upload(&x, &xs), upload(&w, &ws), upload(&dy, &ys));
    let (ty, tdx, tdw) = (upload(&random(&mut r, yl), &ys), upload(&random(&mut r, xl), &xs), upload(&random(&mut r, wl), &ws));
    let mut all = conv2d::forward_with(&d, geom, &tx, &tw, &ty, opts).unwrap();
    all.extend(conv2d::backward_data_with(&d, geom, &tdy, &tw, &tdx, opts).unwrap());
    all.extend(conv2d::backward_weights_with(&d, geom, &tx, &tdy, &tdw, opts).unwrap());
    run(&all);
    [
        assert_close(&format!("{case} forward"), &read(&ty), &forward_ref(geom, &x, &w)),
        assert_close(&format!("{case} backward_data"), &read(&tdx), &backward_data_ref(geom, &dy, &w)),
        assert_close(&format!("{case} backward_weights"), &read(&tdw), &backward_weights_ref(geom, &x, &dy)),
    ]
}

#[test]
fn forward_and_gradients_match_direct_loops() {
    on_sweep_variants(|_| {
        for engine in Engine::ALL {
            let mut worst = [0.0f64; 3];
            for (n, &(shape, filters, kernel, strides, padding)) in CASES.iter().enumerate() {
                let geom = Conv2dGeometry::new(&shape, filters, kernel, strides, padding).unwrap();
                let case = format!("{engine:?} {shape:?} f={filters} k={kernel:?} s={strides:?} {padding:?}");
                let e = check(&geom, &on(engine), &case, 100 + n as u64);
                for (w, e) in worst.iter_mut().zip(e) {
                    *w = w.max(e);
                }
            }
            println!("conv2d {engine:?} worst relative errors: forward {:.1e}, data {:.1e}, weights {:.1e}", worst[0], worst[1], worst[2]);
        }
    });
}

#[test]
fn every_tile_and_k_split_gives_the_same_result() {
    // One scalar-load and one vec4-load case, each through every tile (all larger than the
    // output in some direction) and with K split into uneven parts.
    // The stride-2 cases take the input gradient's phase products through every tile and
    // split (the 9 px one with phases of unequal size); the three after the first two through
    // the two ends (`tile_ends`).
    let cases = [
        Conv2dGeometry::new(&[3, 9, 9, 5], 33, (3, 3), (2, 2), Padding::Same).unwrap(),
        Conv2dGeometry::new(&[1, 9, 9, 8], 12, (3, 3), (1, 1), Padding::Explicit(1, 1)).unwrap(),
        Conv2dGeometry::new(&[4, 8, 8, 8], 16, (3, 3), (2, 2), Padding::Same).unwrap(),
        Conv2dGeometry::new(&[2, 8, 8, 4], 32, (3, 3), (2, 2), Padding::Explicit(1, 1)).unwrap(),
        Conv2dGeometry::new(&[4, 8, 8, 8], 16, (1, 1), (2, 2), Padding::Valid).unwrap(),
    ];
    for (c, geom) in cases.iter().enumerate() {
        for tile in sweep_tiles(c < 2) {
            for splits in [1, 3] {
                let opts = GemmOptions { tile: Some(tile), splits: Some(splits), ..Default::default() };
                check(geom, &opts, &format!("case {c} {tile:?} splits {splits}"), 200 + c as u64);
            }
        }
        // The CPU kernel has one block; its K splits.
        for splits in [1, 3] {
            let opts = GemmOptions { splits: Some(splits), ..on(Engine::Cpu) };
            check(geom, &opts, &format!("case {c} cpu splits {splits}"), 200 + c as u64);
        }
    }
}

#[test]
fn geometry_follows_keras_and_pytorch() {
    let g = Conv2dGeometry::new(&[2, 5, 7, 3], 4, (3, 2), (2, 2), Padding::Same).unwrap();
    // Keras: out = ceil(in / s); height pads (2*2 + 3 - 5) = 2 -> 1 on top, width
    // (3*2 + 2 - 7) = 1 -> 0 on the left (the odd pixel goes right).
    assert_eq!((g.out_h, g.out_w, g.pad_top, g.pad_left), (3, 4, 1, 0));
    let g = Conv2dGeometry::new(&[1, 9, 9, 3], 4, (3, 3), (2, 2), Padding::Explicit(1, 1)).unwrap();
    assert_eq!((g.out_h, g.out_w, g.pad_top), (5, 5, 1)); // PyTorch: (9 + 2 - 3) / 2 + 1
    let g = Conv2dGeometry::new(&[1, 6, 6, 3], 4, (3, 3), (2, 2), Padding::Valid).unwrap();
    assert_eq!((g.out_h, g.out_w), (2, 2));
    assert_eq!(g.output_shape(), vec![1, 2, 2, 4]);
    assert_eq!(g.kernel_shape(), vec![3, 3, 3, 4]);
    assert_eq!(g.flops(), 2 * 4 * 4 * 27);
    assert!(Conv2dGeometry::new(&[1, 1, 1, 3], 4, (1, 1), (1, 1), Padding::Valid).unwrap().is_pointwise());
}

#[test]
fn bad_shapes_are_errors_that_name_them() {
    let d = device();
    let msg = |r: convoy::Result<Conv2dGeometry>| r.unwrap_err().to_string();
    let e = msg(Conv2dGeometry::new(&[1, 3, 8, 2], 4, (5, 3), (1, 1), Padding::Valid));
    assert!(e.contains("height 3") && e.contains("(5)"), "{e}");
    let e = msg(Conv2dGeometry::new(&[8, 8, 2], 4, (3, 3), (1, 1), Padding::Same));
    assert!(e.contains("[8, 8, 2]"), "{e}");
    assert!(Conv2dGeometry::new(&[1, 8, 8, 2], 4, (3, 3), (0, 1), Padding::Same).is_err());
    assert!(Conv2dGeometry::new(&[1, 8, 0, 2], 4, (3, 3), (1, 1), Padding::Same).is_err());

    let g = Conv2dGeometry::new(&[1, 5, 5, 3], 4, (3, 3), (1, 1), Padding::Same).unwrap();
    let (x, w, y) = (d.zeros(&[1, 5, 5, 3]).unwrap(), d.zeros(&[3, 3, 3, 4]).unwrap(), d.zeros(&[1, 5, 5, 4]).unwrap());
    let wrong = d.zeros(&[3, 3, 4, 4]).unwrap();
    let e = conv2d::forward(&d, &g, &x, &wrong, &y).unwrap_err().to_string();
    assert!(e.contains("[3, 3, 4, 4]") && e.contains("[3, 3, 3, 4]"), "{e}");
    let e = conv2d::backward_data(&d, &g, &x, &w, &x).unwrap_err().to_string();
    assert!(e.contains("dy") && e.contains("[1, 5, 5, 3]"), "{e}");
    let e = conv2d::backward_weights(&d, &g, &x, &y, &y).unwrap_err().to_string();
    assert!(e.contains("dw") && e.contains("[1, 5, 5, 4]"), "{e}");
}

#[test]
fn every_pass_counts_the_forward_useful_flops() {
    // A 1x1 stride-2 convolution: its input gradient's GEMM runs over every input pixel
    // (m = 4x the output pixels), but only a quarter of them meet an output.
    let d = device();
    let g = Conv2dGeometry::new(&[2, 8, 8, 16], 32, (1, 1), (2, 2), Padding::Valid).unwrap();
    let (x, w, y) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap(), d.zeros(&g.output_shape()).unwrap());
    let (dx, dw) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap());
    let useful = g.flops() as f64;
    assert_eq!(useful, 2.0 * (2 * 4 * 4) as f64 * 32.0 * 16.0);
    let total = |ds: Vec<convoy::kernels::Dispatch>| ds.iter().map(|d| d.flops).sum::<f64>();
    assert_eq!(total(conv2d::forward(&d, &g, &x, &w, &y).unwrap()), useful, "forward");
    let data = conv2d::backward_data(&d, &g, &y, &w, &dx).unwrap();
    // Its one tapped phase reads dy as a plain matrix (the phases' values are checked against
    // the direct loops in forward_and_gradients_match_direct_loops).
    assert!(data.iter().any(|p| p.path.contains("a=Rows") && p.path.contains("phase")), "{:?}", data.iter().map(|p| &p.path).collect::<Vec<_>>());
    assert_eq!(total(data), useful, "backward_data");
    assert_eq!(total(conv2d::backward_weights(&d, &g, &x, &y, &dw).unwrap()), useful, "backward_weights");
    // With K split, the reduce that sums the partials counts nothing.
    let split = conv2d::backward_weights_with(&d, &g, &x, &y, &dw, &GemmOptions { tile: None, splits: Some(2), ..Default::default() }).unwrap();
    assert_eq!(split.len(), 2);
    assert_eq!((split[0].flops, split[1].flops), (useful, 0.0));
}

/// Winograd's F(2x2, 3x3) and F(4x4, 3x3), forced and as the engine chooses it, against the
/// direct f64 loops: tiles that overhang the image (odd sizes), every padding it takes (0, 1
/// and 2, whose input gradients pad 2, 1 and 0), scalar and vec4 channel counts on each GEMM
/// engine (the CPU engine's transforms take four channels at a time), the grouped GEMM
/// through each tile and a K split, and 250 images. A path-coverage assertion fails if
/// a transform, a tile size or the engine's own choice went untested.
#[test]
fn winograd_matches_direct_loops() {
    use Padding::*;
    take_paths();
    on_sweep_variants(|variant| {
        let cases: [([usize; 4], usize, Padding); 6] = [
            ([1, 5, 7, 3], 6, Same),
            ([3, 9, 9, 8], 12, Explicit(1, 1)),
            ([2, 8, 8, 16], 4, Valid),
            ([1, 6, 11, 4], 8, Explicit(2, 2)),
            ([2, 7, 7, 32], 36, Same),
            ([1, 4, 4, 5], 7, Explicit(0, 2)),
        ];
        for m in [2, 4] {
            for (engine, (n, &(shape, filters, padding))) in Engine::ALL.into_iter().flat_map(|e| cases.iter().enumerate().map(move |c| (e, c))) {
                let geom = Conv2dGeometry::new(&shape, filters, (3, 3), (1, 1), padding).unwrap();
                let opts = GemmOptions { winograd: Some(m), engine: Some(engine), ..Default::default() };
                check(&geom, &opts, &format!("{variant} winograd m={m} {shape:?} f={filters} {padding:?} {engine:?}"), 300 + n as u64);
            }
            // The grouped product through a forced tile and K split.
            let geom = Conv2dGeometry::new(&[2, 6, 6, 40], 8, (3, 3), (1, 1), Same).unwrap();
            let opts = GemmOptions { winograd: Some(m), tile: Some(Tile::M32N32), splits: Some(3), ..Default::default() };
            check(&geom, &opts, &format!("{variant} winograd m={m} split"), 310);
        }
        // The engine's own choice, over 250 images (1,000 tiles).
        let geom = Conv2dGeometry::new(&[250, 6, 6, 32], 32, (3, 3), (1, 1), Same).unwrap();
        check(&geom, &GemmOptions::default(), &format!("{variant} winograd auto 250"), 320);
    });
    let mut expected = Vec::new();
    for m in ["m=2", "m=4"] {
        for entry in ["weights", "input", "output"] {
            expected.push((entry, m.to_string()));
        }
        expected.push(("weights", "flip".to_string()));
        expected.push(("input", "scalar".to_string()));
        expected.push(("output", "scalar".to_string()));
    }
    // The CPU engine's four-channel F(4x4) transforms (it keeps the scalar ones otherwise).
    for entry in ["input4", "output4"] {
        expected.push((entry, "m=4".to_string()));
        expected.push((entry, "flip".to_string()));
    }
    expected.push(("gemm", "winograd".to_string()));
    expected.push(("gemm", "split=forced".to_string()));
    assert_paths_cover("winograd", &take_paths(), &expected, &[]);
}

#[test]
fn winograd_takes_only_what_it_can_compute() {
    let d = device();
    let forced = |m| GemmOptions { winograd: Some(m), ..Default::default() };
    let zeros = |s: &[usize]| d.zeros(s).unwrap();
    // A stride-2 convolution, a 5x5 kernel, a padding of 3, a tile of 3: errors when forced.
    for (shape, k, s, pad, m) in [([1, 8, 8, 4], 3, 2, 1, 4), ([1, 8, 8, 4], 5, 1, 2, 4), ([1, 8, 8, 4], 3, 1, 3, 2), ([1, 8, 8, 4], 3, 1, 1, 3)] {
        let g = Conv2dGeometry::new(&shape, 4, (k, k), (s, s), Padding::Explicit(pad, pad)).unwrap();
        let (x, w, y) = (zeros(&g.input_shape()), zeros(&g.kernel_shape()), zeros(&g.output_shape()));
        let e = conv2d::forward_with(&d, &g, &x, &w, &y, &forced(m)).unwrap_err().to_string();
        assert!(e.contains("Winograd"), "{e}");
    }
    // The engine leaves narrow convolutions and the mixed policy on the direct GEMM.
    let tokens = |g: &Conv2dGeometry, opts: &GemmOptions| {
        let (x, w, y) = (zeros(&g.input_shape()), zeros(&g.kernel_shape()), zeros(&g.output_shape()));
        conv2d::forward_with(&d, g, &x, &w, &y, opts).unwrap().iter().map(|d| d.path.clone()).collect::<Vec<_>>().join(" | ")
    };
    let wide = Conv2dGeometry::new(&[1, 8, 8, 32], 32, (3, 3), (1, 1), Padding::Same).unwrap();
    let narrow = Conv2dGeometry::new(&[1, 8, 8, 16], 32, (3, 3), (1, 1), Padding::Same).unwrap();
    assert!(tokens(&wide, &GemmOptions::default()).contains("winograd"));
    assert!(!tokens(&narrow, &GemmOptions::default()).contains("winograd"));
    assert!(!tokens(&wide, &GemmOptions { winograd: Some(0), ..Default::default() }).contains("winograd"));
}

/// The bias's gradient, the sum of dy over every output pixel, from an f32 and an f16 dy,
/// on one chunk of rows and on several (a second pass sums their partials).
#[test]
fn the_bias_gradient_sums_dy_stored_either_way() {
    on_each_variant(|variant| {
        let d = device();
        for (rows, filters) in [(37, 6), (2 * 1024 + 300, 8), (5000, 68)] {
            let mut r = rng(rows as u64);
            let dy = random(&mut r, rows * filters);
            for f16 in [false, true] {
                if f16 && filters % 4 != 0 {
                    continue;
                }
                let shape = [1, rows, 1, filters];
                let (tdy, values) = if f16 { (upload_f16(&dy, &shape), dy.iter().map(|&v| to_half(v)).collect::<Vec<_>>()) } else { (upload(&dy, &shape), dy.clone()) };
                let db = upload(&vec![7.0; filters], &[filters]);
                run(&conv2d::backward_bias(&d, &tdy, &db).unwrap());
                let want: Vec<f64> = (0..filters).map(|f| (0..rows).map(|i| values[i * filters + f] as f64).sum()).collect();
                assert_close(&format!("bias gradient of {rows} x {filters}, f16 {f16} ({variant})"), &read(&db), &want);
            }
        }
        let e = conv2d::backward_bias(&d, &upload(&[0.0; 12], &[1, 2, 2, 3]), &upload(&[0.0; 4], &[4])).unwrap_err().to_string();
        assert!(e.contains("[4]") && e.contains("[1, 2, 2, 3]"), "{e}");
    });
}
