//! Keras' `groups` and `dilation_rate` of Conv2D: forward, input gradient and kernel gradient
//! against the direct f64 loops of tests/kernels/conv2d.rs (which read only the group's own
//! channels and put tap `i` at `i * dilation`), on awkward shapes, through every tile and K
//! split, and at batch 250 where the engine picks the large tiles and splits K itself. The
//! coverage assertions name combinations (a grouped product *and* a split, say), so a path
//! that only the ungrouped products took does not count.

use std::collections::BTreeSet;

use convoy::kernels::conv2d::{self, Conv2dGeometry, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions};

use crate::common::*;
use crate::conv2d::check;

/// (input, filters, kernel, strides, dilation, groups, padding)
type Case = ([usize; 4], usize, (usize, usize), (usize, usize), (usize, usize), usize, Padding);

/// Groups 1, 2, 4 and C (one input channel a group, as a depthwise convolution with a
/// multiplier), dilations 1, 2, 3 and oblong ones, odd images, `same`, `valid` and explicit
/// padding, group widths on and off multiples of 4 (vec4 and scalar loads), stride 2 with
/// groups (the input gradient's phase products, and a 1x1 whose odd phases meet no tap),
/// grouped 1x1 kernels (the plain-matrix loads).
const CASES: &[Case] = &[
    ([1, 7, 9, 4], 8, (3, 3), (1, 1), (1, 1), 2, Padding::Same),
    ([3, 9, 7, 8], 12, (3, 3), (2, 2), (1, 1), 2, Padding::Same),
    ([2, 8, 8, 16], 16, (3, 3), (1, 1), (1, 1), 4, Padding::Valid),
    ([1, 9, 9, 6], 6, (3, 3), (1, 1), (1, 1), 6, Padding::Same),
    ([2, 7, 7, 5], 10, (3, 3), (2, 2), (1, 1), 5, Padding::Explicit(1, 1)),
    ([1, 9, 11, 3], 4, (3, 3), (1, 1), (2, 2), 1, Padding::Same),
    ([3, 11, 9, 8], 8, (3, 2), (1, 1), (3, 2), 1, Padding::Valid),
    ([1, 10, 9, 4], 12, (2, 3), (1, 1), (2, 3), 2, Padding::Same),
    ([2, 13, 12, 8], 16, (3, 3), (1, 1), (3, 3), 4, Padding::Same),
    ([1, 9, 9, 4], 4, (3, 3), (1, 1), (2, 1), 4, Padding::Valid),
    ([1, 8, 8, 4], 4, (3, 3), (1, 1), (2, 2), 2, Padding::Explicit(1, 2)),
    ([2, 6, 7, 8], 8, (1, 1), (1, 1), (1, 1), 2, Padding::Valid),
    ([2, 6, 7, 6], 9, (1, 1), (1, 1), (1, 1), 3, Padding::Valid),
    ([1, 5, 5, 8], 8, (1, 1), (2, 2), (1, 1), 4, Padding::Valid),
    ([2, 5, 9, 4], 6, (1, 3), (1, 1), (1, 3), 2, Padding::Same),
];

fn geometry(&(shape, filters, kernel, strides, dilation, groups, padding): &Case) -> Conv2dGeometry {
    Conv2dGeometry::new_with(&shape, filters, kernel, strides, dilation, groups, padding).unwrap()
}

/// Asserts that for each combination some taken path of `entry` carries every one of its
/// tokens.
#[track_caller]
fn assert_combinations(family: &str, taken: &BTreeSet<String>, entry: &str, combinations: &[Vec<&str>]) {
    let hit = |tokens: &[&str]| {
        taken.iter().any(|p| {
            let mut t = p.split_whitespace();
            t.next() == Some(entry) && {
                let rest: Vec<&str> = t.collect();
                tokens.iter().all(|want| rest.contains(want))
            }
        })
    };
    let missing: Vec<String> = combinations.iter().filter(|c| !hit(c)).map(|c| format!("{entry} {}", c.join(" "))).collect();
    assert!(missing.is_empty(), "{family}: combinations the code can take but the tests never took: {missing:?}\ntaken: {taken:#?}");
}

#[test]
fn grouped_and_dilated_convolutions_match_direct_loops() {
    take_paths();
    on_sweep_variants(|variant| {
        for engine in Engine::ALL {
            let mut worst = [0.0f64; 3];
            for (n, case) in CASES.iter().enumerate() {
                let geom = geometry(case);
                let e = check(&geom, &on(engine), &format!("{variant} {engine:?} {case:?}"), 300 + n as u64);
                for (w, e) in worst.iter_mut().zip(e) {
                    *w = w.max(e);
                }
            }
            println!("grouped / dilated conv2d {engine:?} worst relative errors: forward {:.1e}, data {:.1e}, weights {:.1e}", worst[0], worst[1], worst[2]);
        }
    });
    let taken = take_paths();
    let mut grouped = Vec::new();
    for a in ["a=Im2col", "a=Im2colT", "a=DyStuffed", "a=Rows", "a=Cols"] {
        for q in ["quad_a", "scalar_a"] {
            grouped.push(vec!["grouped", a, q]);
        }
    }
    for b in ["b=Rows", "b=BlockedT"] {
        for q in ["quad_b", "scalar_b"] {
            grouped.push(vec!["grouped", b, q]);
        }
    }
    grouped.extend([vec!["grouped", "quad_c"], vec!["grouped", "scalar_c"], vec!["grouped", "phase"], vec!["grouped", "taps=none"], vec!["grouped", "dilated"]]);
    let mut dilated = Vec::new();
    for a in ["a=Im2col", "a=Im2colT", "a=DyStuffed"] {
        for q in ["quad_a", "scalar_a"] {
            dilated.push(vec!["dilated", a, q]);
        }
    }
    for entry in ["gemm", "gemm_cpu"] {
        assert_combinations("grouped conv2d", &taken, entry, &grouped);
        assert_combinations("dilated conv2d", &taken, entry, &dilated);
    }
}

#[test]
fn every_tile_and_k_split_gives_the_same_grouped_and_dilated_result() {
    // Grouped with vec4 and with scalar loads (the second at stride 2: phase products),
    // dilated with both, a grouped 1x1 and a grouped dilated one, K whole and split into
    // uneven parts (the split-K reduce stores each group's partials into its columns). The
    // first grouped and the first dilated case go through every tile, the others through
    // the two ends (`tile_ends`).
    let cases: [Case; 6] = [
        ([2, 8, 8, 8], 16, (3, 3), (1, 1), (1, 1), 2, Padding::Same),
        ([3, 9, 9, 6], 24, (3, 3), (2, 2), (1, 1), 3, Padding::Same),
        ([2, 9, 9, 8], 12, (3, 3), (1, 1), (2, 2), 1, Padding::Same),
        ([1, 9, 10, 5], 6, (2, 3), (1, 1), (3, 2), 1, Padding::Valid),
        ([2, 6, 6, 8], 8, (1, 1), (1, 1), (1, 1), 2, Padding::Valid),
        ([2, 8, 8, 8], 8, (3, 3), (1, 1), (2, 2), 4, Padding::Same),
    ];
    take_paths();
    on_device(devices()[1].clone(), || {
        for (c, case) in cases.iter().enumerate() {
            let geom = geometry(case);
            for tile in sweep_tiles(c == 0 || c == 2) {
                for splits in [1, 3] {
                    let opts = GemmOptions { tile: Some(tile), splits: Some(splits), ..Default::default() };
                    check(&geom, &opts, &format!("{case:?} {tile:?} splits {splits}"), 400 + c as u64);
                }
            }
        }
    });
    let taken = take_paths();
    let mut combinations: Vec<Vec<&str>> = Vec::new();
    let tiles: Vec<String> = tiles().iter().map(|t| format!("tile={t:?}")).collect();
    for t in &tiles {
        combinations.push(vec!["grouped", t]);
        combinations.push(vec!["dilated", t]);
    }
    for s in ["split=none", "split=forced"] {
        combinations.extend([vec!["grouped", s], vec!["dilated", s], vec!["grouped", "phase", s]]);
    }
    assert_combinations("grouped / dilated tiles", &taken, "gemm", &combinations);
    assert_combinations("grouped / dilated tiles", &taken, "reduce_splits", &[vec!["grouped", "quad_c"], vec!["grouped", "scalar_c"]]);
}

#[test]
fn batch_250_reaches_the_large_tiles_and_splits_k() {
    // The engine's own choices: 20,250 output pixels in two groups of 64 filters take the
    // 128 x 64 tile, their kernel gradient (K = 20,250) splits K; the stride-2 grouped one
    // takes 128 x 32 tiles over its phases (20,250 rows of 20 channels each, two groups);
    // groups = C (a filter pair per channel) the narrow tile.
    let cases: [Case; 3] = [
        ([250, 9, 9, 8], 128, (3, 3), (1, 1), (2, 2), 2, Padding::Same),
        ([250, 18, 18, 40], 40, (3, 3), (2, 2), (1, 1), 2, Padding::Explicit(1, 1)),
        ([250, 8, 8, 16], 32, (3, 3), (1, 1), (3, 3), 16, Padding::Same),
    ];
    take_paths();
    on_device(devices()[1].clone(), || {
        for (c, case) in cases.iter().enumerate() {
            for engine in Engine::ALL {
                check(&geometry(case), &on(engine), &format!("{engine:?} {case:?}"), 500 + c as u64);
            }
        }
    });
    let taken = take_paths();
    // The CPU kernel splits the grouped kernel gradients' long K itself.
    assert_combinations("batch 250", &taken, "gemm_cpu", &[vec!["grouped", "dilated", "split=auto"], vec!["grouped", "phase"]]);
    let mut combinations = vec![
        vec!["grouped", "dilated", "tile=M128N64"],
        vec!["grouped", "dilated", "split=auto_long_k"],
        vec!["grouped", "phase", "tile=M128N32"],
        vec!["grouped", "dilated", "tile=M64N16"],
    ];
    // Under WebGPU's 16 KB of workgroup memory (CONVOY_LIMITS=webgpu) the 128-row tiles
    // cannot be taken.
    let fit: Vec<String> = tiles().iter().map(|t| format!("tile={t:?}")).collect();
    combinations.retain(|c| c.iter().all(|t| !t.starts_with("tile=") || fit.iter().any(|f| f == t)));
    assert_combinations("batch 250", &taken, "gemm", &combinations);
}

#[test]
fn groups_share_one_dispatch_and_the_flops_of_their_own_channels() {
    let d = device();
    let g = Conv2dGeometry::new_with(&[2, 8, 8, 16], 32, (3, 3), (1, 1), (1, 1), 4, Padding::Same).unwrap();
    let (x, w, y) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap(), d.zeros(&g.output_shape()).unwrap());
    let (dx, dw) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap());
    assert_eq!(g.kernel_shape(), vec![3, 3, 4, 32], "Keras' grouped kernel: [kh, kw, in / groups, filters]");
    let useful = 2.0 * (2 * 8 * 8) as f64 * 32.0 * (9 * 4) as f64;
    assert_eq!(g.flops() as f64, useful);
    let unsplit = GemmOptions { splits: Some(1), ..Default::default() };
    for (pass, ds) in [
        ("forward", conv2d::forward_with(&d, &g, &x, &w, &y, &unsplit).unwrap()),
        ("backward_data", conv2d::backward_data_with(&d, &g, &y, &w, &dx, &unsplit).unwrap()),
        ("backward_weights", conv2d::backward_weights_with(&d, &g, &x, &y, &dw, &unsplit).unwrap()),
    ] {
        assert_eq!(ds.len(), 1, "{pass}: the four groups are one grid");
        assert_eq!(ds[0].flops, useful, "{pass}");
    }
}

#[test]
fn geometry_follows_keras_for_dilation_and_groups() {
    // Keras / TensorFlow: the dilated kernel spans (k - 1) * d + 1 pixels; "valid" gives
    // in - extent + 1, "same" keeps the size and pads extent - 1, the odd pixel after.
    let g = Conv2dGeometry::new_with(&[1, 10, 9, 4], 8, (3, 2), (1, 1), (2, 3), 2, Padding::Valid).unwrap();
    assert_eq!((g.out_h, g.out_w), (10 - 5 + 1, 9 - 4 + 1));
    let g = Conv2dGeometry::new_with(&[1, 10, 9, 4], 8, (3, 2), (1, 1), (2, 3), 2, Padding::Same).unwrap();
    assert_eq!((g.out_h, g.out_w, g.pad_top, g.pad_left), (10, 9, 2, 1));
    assert_eq!(g.kernel_shape(), vec![3, 2, 2, 8]);
    assert_eq!(g.flops(), 2 * 90 * 8 * 6 * 2);
    // PyTorch's explicit padding with dilation: (in + 2p - extent) / s + 1.
    let g = Conv2dGeometry::new_with(&[1, 8, 8, 4], 4, (3, 3), (1, 1), (3, 3), 1, Padding::Explicit(1, 2)).unwrap();
    assert_eq!((g.out_h, g.out_w), (8 + 2 - 7 + 1, 8 + 4 - 7 + 1));
    // The plain constructor is one group, no dilation.
    let g = Conv2dGeometry::new(&[1, 5, 5, 3], 4, (3, 3), (1, 1), Padding::Valid).unwrap();
    assert_eq!((g.dilation_h, g.dilation_w, g.groups), (1, 1, 1));
}

#[test]
fn bad_groups_and_dilations_are_errors_that_name_them() {
    let msg = |r: convoy::Result<Conv2dGeometry>| r.unwrap_err().to_string();
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 8, 6], 8, (3, 3), (1, 1), (1, 1), 4, Padding::Same));
    assert!(e.contains("groups 4") && e.contains("(6)") && e.contains("(8)"), "{e}");
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 8, 8], 6, (3, 3), (1, 1), (1, 1), 4, Padding::Same));
    assert!(e.contains("groups 4") && e.contains("(8)") && e.contains("(6)"), "{e}");
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 8, 8], 8, (3, 3), (1, 1), (1, 1), 0, Padding::Same));
    assert!(e.contains("groups 0"), "{e}");
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 8, 8], 8, (3, 3), (2, 1), (1, 2), 1, Padding::Same));
    assert!(e.contains("(2, 1)") && e.contains("(1, 2)") && e.contains("stride != 1 is incompatible with any dilation_rate != 1"), "{e}");
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 8, 8], 8, (3, 3), (1, 1), (0, 1), 1, Padding::Same));
    assert!(e.contains("dilation_rate (0, 1)"), "{e}");
    let e = msg(Conv2dGeometry::new_with(&[1, 8, 9, 8], 8, (3, 3), (1, 1), (4, 4), 1, Padding::Valid));
    assert!(e.contains("height 8") && e.contains("extent 9"), "{e}");
}
