//! The augmentation kernels (RandomFlip, RandomCrop, RandomTranslation): the device's draws
//! against their host twin, the gather against a plain-Rust copy through those draws under
//! each fill rule, the input gradient against the plain scatter-add that transposes it
//! (in f64), the fairness of the draws, and the wrappers' path coverage.

use convoy::kernels::augment::{self, AxisDraw, FillMode};
use convoy::{DType, Tensor};
use rand::rngs::StdRng;
use rand::RngExt;

use crate::common::*;

/// One augmentation of one input shape.
#[derive(Clone, Copy, Debug)]
struct Case {
    /// `[batch, h, w, c]` of the input.
    input: [usize; 4],
    /// The output's height and width.
    out: (usize, usize),
    y: AxisDraw,
    x: AxisDraw,
    fill: FillMode,
    fill_value: f32,
}

fn flip(input: [usize; 4], v: bool, h: bool) -> Case {
    let axis = |on| if on { AxisDraw::Flip } else { AxisDraw::Keep };
    Case { input, out: (input[1], input[2]), y: axis(v), x: axis(h), fill: FillMode::Constant, fill_value: 0.0 }
}

fn crop(input: [usize; 4], out: (usize, usize)) -> Case {
    let count = |n: usize, k: usize| AxisDraw::Offset { count: (n - k + 1) as u32 };
    Case { input, out, y: count(input[1], out.0), x: count(input[2], out.1), fill: FillMode::Constant, fill_value: 0.0 }
}

fn translate(input: [usize; 4], height: (f32, f32), width: (f32, f32), fill: FillMode) -> Case {
    let y = AxisDraw::shift(height.0, height.1, input[1]).unwrap();
    let x = AxisDraw::shift(width.0, width.1, input[2]).unwrap();
    Case { input, out: (input[1], input[2]), y, x, fill, fill_value: -0.75 }
}

/// A step tensor: the step counter and the first sample's index in the whole batch.
fn step_tensor(step: u32, first: u32) -> Tensor {
    device().upload_u32(&[4], &[step, first, 0, 0]).unwrap()
}

/// The device's draws of `case` at `(step, first)`, held to the host twin.
fn draws(case: &Case, seed: u32, step: u32, first: u32, name: &str) -> (Tensor, Vec<i32>) {
    let d = device();
    let batch = case.input[0];
    let t = d.zeros_of(&[batch, 4], DType::U32).unwrap();
    run(&[augment::draw(&d, case.y, case.x, (case.input[1], case.input[2]), seed, &step_tensor(step, first), &t).unwrap()]);
    let got: Vec<i32> = d.read_u32(&t).unwrap().into_iter().map(|v| v as i32).collect();
    let want: Vec<i32> = augment::host_draws(case.y, case.x, (case.input[1], case.input[2]), seed, step, first, batch).concat();
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{name}: draw {} of sample {} is {} on the device, {} on the host", i % 4, i / 4, got[i], want[i]);
    }
    (t, got)
}

/// The input index that index `i` of an `n`-pixel axis reads (Keras' definitions).
fn fill_index(i: i64, n: i64, fill: FillMode) -> Option<usize> {
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    match fill {
        FillMode::Constant => None,
        FillMode::Reflect => {
            let m = i.rem_euclid(2 * n);
            Some(if m < n { m } else { 2 * n - 1 - m } as usize)
        }
        FillMode::Wrap => Some(i.rem_euclid(n) as usize),
        FillMode::Nearest => Some(i.clamp(0, n - 1) as usize),
    }
}

/// Per output element, the input element it copies (`None`: the fill value).
fn sources(case: &Case, draws: &[i32]) -> Vec<Option<usize>> {
    let [batch, h, w, c] = case.input;
    let (oh, ow) = case.out;
    let mut src = Vec::with_capacity(batch * oh * ow * c);
    for b in 0..batch {
        let d = &draws[b * 4..b * 4 + 4];
        for i in 0..oh {
            let sy = fill_index(d[0] as i64 * i as i64 + d[1] as i64, h as i64, case.fill);
            for j in 0..ow {
                let sx = fill_index(d[2] as i64 * j as i64 + d[3] as i64, w as i64, case.fill);
                for ch in 0..c {
                    src.push(sy.zip(sx).map(|(sy, sx)| ((b * h + sy) * w + sx) * c + ch));
                }
            }
        }
    }
    src
}

/// Forward and backward of `case` on this thread's device against the copy and the
/// scatter-add in f64; returns the draws.
fn check(r: &mut StdRng, case: &Case, seed: u32, name: &str) -> Vec<i32> {
    let d = device();
    let [batch, h, w, c] = case.input;
    let (oh, ow) = case.out;
    let (step, first) = (r.random_range(0..1000), r.random_range(0..100_000));
    let name = format!("{name} {case:?} seed {seed} step {step} first {first}");
    let (tdraws, dr) = draws(case, seed, step, first, &name);
    let x = random(r, batch * h * w * c);
    let dy = random(r, batch * oh * ow * c);
    // Outputs start stale, so that an element the kernel skips shows.
    let (tx, tdy) = (upload(&x, &case.input), upload(&dy, &[batch, oh, ow, c]));
    let ty = upload(&vec![7.0; dy.len()], &[batch, oh, ow, c]);
    let tdx = upload(&vec![7.0; x.len()], &case.input);
    run(&[
        augment::forward(&d, &tx, &tdraws, case.fill, case.fill_value, &ty).unwrap(),
        augment::backward(&d, &tdy, &tdraws, case.fill, &tdx).unwrap(),
    ]);
    let src = sources(case, &dr);
    let want_y: Vec<f64> = src.iter().map(|s| s.map_or(case.fill_value as f64, |k| x[k] as f64)).collect();
    let mut want_dx = vec![0.0f64; x.len()];
    for (s, g) in src.iter().zip(&dy) {
        if let Some(k) = *s {
            want_dx[k] += *g as f64;
        }
    }
    // A copy is exact.
    let got_y = read(&ty);
    if let Some(i) = (0..got_y.len()).find(|&i| got_y[i] as f64 != want_y[i]) {
        panic!("{name}: y[{i}] = {} but the copy gives {}", got_y[i], want_y[i]);
    }
    assert_close(&format!("{name}: dx"), &read(&tdx), &want_dx);
    dr
}

/// Odd and even sides, one and many channels, a batch of 250, windows from 1x1 to the whole
/// image, every flip mode, translations by nothing, part of the side and the whole side,
/// symmetric and one-sided, under every fill rule.
fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for input in [[1, 1, 1, 1], [3, 5, 7, 1], [2, 9, 4, 3], [250, 5, 3, 5], [4, 33, 17, 3]] {
        for (fv, fh) in [(false, true), (true, false), (true, true)] {
            v.push(flip(input, fv, fh));
        }
        let [_, h, w, _] = input;
        for out in [(h, w), (1, 1), (h.div_ceil(2), w), (h, w.div_ceil(2)), (h.div_ceil(3), w.saturating_sub(1).max(1))] {
            v.push(crop(input, out));
        }
        for fill in FillMode::ALL {
            v.push(translate(input, (-0.3, 0.3), (-0.5, 0.5), fill));
            v.push(translate(input, (-1.0, 1.0), (0.2, 0.7), fill));
            v.push(translate(input, (0.0, 0.0), (-1.0, -0.4), fill));
        }
    }
    v
}

#[test]
fn augmentation_matches_its_copy_and_scatter_on_awkward_shapes() {
    let mut r = rng(0xa09);
    take_paths();
    on_each_variant(|variant| {
        for (i, case) in cases().iter().enumerate() {
            check(&mut r, case, 17 + i as u32, &format!("{variant} case {i}"));
        }
    });
    // More than 65,535 workgroups of 256 elements: the grids fold into 2-D (what ships only).
    on_device(devices()[1].clone(), || {
        check(&mut r, &translate([1, 4100, 4100, 1], (-0.2, 0.2), (-0.1, 0.3), FillMode::Reflect), 5, "unchecked folded");
    });
    let mut expected = Vec::new();
    for axis in ["y", "x"] {
        for kind in ["keep", "flip", "offset", "shift"] {
            expected.push(("augment_draw", format!("{axis}={kind}")));
        }
    }
    for entry in ["augment_forward", "augment_backward"] {
        for fill in FillMode::ALL {
            expected.push((entry, format!("fill={}", fill.name())));
        }
        expected.extend([(entry, "grid=1d".to_string()), (entry, "grid=2d".to_string())]);
    }
    assert_paths_cover("augment", &take_paths(), &expected, &[]);
}

/// The draws of `batch` samples of a `(h, w)` input under `(y, x)`, on the device.
fn sample(y: AxisDraw, x: AxisDraw, (h, w): (usize, usize), batch: usize, seed: u32, step: u32) -> Vec<[i32; 4]> {
    let case = Case { input: [batch, h, w, 1], out: (h, w), y, x, fill: FillMode::Constant, fill_value: 0.0 };
    draws(&case, seed, step, 0, "statistics").1.chunks(4).map(|d| [d[0], d[1], d[2], d[3]]).collect()
}

/// Flips are fair coins per axis and independent of each other; draws change from step to
/// step and from seed to seed (a layer's seed mixes in its position).
#[test]
fn flips_are_fair_and_new_every_step_and_layer() {
    let n = 4000;
    let d = sample(AxisDraw::Flip, AxisDraw::Flip, (6, 5), n, 3, 11);
    let frac = |f: &dyn Fn(&[i32; 4]) -> bool| d.iter().filter(|s| f(s)).count() as f64 / n as f64;
    // 5 standard deviations of a fair coin over 4000 draws: 0.040.
    let (v, h, both) = (frac(&|s| s[0] == -1), frac(&|s| s[2] == -1), frac(&|s| s[0] == -1 && s[2] == -1));
    assert!((v - 0.5).abs() < 0.04 && (h - 0.5).abs() < 0.04, "flipped fractions {v} (vertical) and {h} (horizontal)");
    assert!((both - 0.25).abs() < 0.035, "both axes flipped in {both} of the samples");
    assert!(d.iter().all(|s| (s[0], s[1]) == (1, 0) || (s[0], s[1]) == (-1, 5)), "a vertical flip of 6 rows is (-1, 5) or (1, 0)");
    for (other, what) in [(sample(AxisDraw::Flip, AxisDraw::Flip, (6, 5), n, 3, 12), "the next step"), (sample(AxisDraw::Flip, AxisDraw::Flip, (6, 5), n, 4, 11), "another seed")] {
        let same = d.iter().zip(&other).filter(|(a, b)| a[0] == b[0]).count() as f64 / n as f64;
        assert!((same - 0.5).abs() < 0.04, "{what}: {same} of the vertical flips agree (independent draws agree on half)");
    }
}

/// Crop starts cover `0..=in - out` evenly; shifts cover the factor's range, with the
/// rounded ends at half weight as Keras' round of a uniform draw.
#[test]
fn crop_starts_and_shifts_cover_their_ranges() {
    let n = 6000;
    let d = sample(AxisDraw::Offset { count: 5 }, AxisDraw::Offset { count: 1 }, (9, 4), n, 1, 2);
    let mut counts = [0usize; 5];
    for s in &d {
        assert_eq!((s[0], s[2], s[3]), (1, 1, 0), "a crop neither flips nor moves an axis with one start");
        counts[s[1] as usize] += 1;
    }
    // 1200 expected each; 5 standard deviations: 155.
    assert!(counts.iter().all(|&k| k.abs_diff(n / 5) < 155), "crop starts {counts:?}");

    let (lower, upper) = (-0.5, 0.5);
    let d = sample(AxisDraw::shift(lower, upper, 10).unwrap(), AxisDraw::shift(0.2, 0.3, 10).unwrap(), (10, 10), n, 9, 4);
    let mut counts = [0usize; 11];
    for s in &d {
        let (shift_y, shift_x) = (-s[1], -s[3]);
        assert!((-5..=5).contains(&shift_y), "a shift of {shift_y} rows is outside [-5, 5]");
        assert!((2..=3).contains(&shift_x), "a shift of {shift_x} columns is outside [2, 3]");
        counts[(shift_y + 5) as usize] += 1;
    }
    // Interior shifts 600 each, the two ends 300.
    for (k, &c) in counts.iter().enumerate() {
        let want = if k == 0 || k == 10 { n / 20 } else { n / 10 };
        assert!(c.abs_diff(want) < 5 * (want as f64).sqrt() as usize + 10, "shift {} drawn {c} times, expected about {want}: {counts:?}", k as i32 - 5);
    }
    let mean = d.iter().map(|s| -s[1] as f64).sum::<f64>() / n as f64;
    assert!(mean.abs() < 0.2, "mean shift {mean}");
}

/// A sample draws the same whichever replica runs it: the draws of a share that starts at
/// sample `first` are those of the whole batch from `first` on.
#[test]
fn a_share_draws_what_the_whole_batch_draws_for_it() {
    let case = translate([12, 7, 6, 2], (-0.4, 0.4), (-0.4, 0.4), FillMode::Reflect);
    let whole = draws(&case, 8, 21, 0, "whole").1;
    let share = Case { input: [5, 7, 6, 2], ..case };
    let part = draws(&share, 8, 21, 7, "share").1;
    assert_eq!(part, whole[7 * 4..], "samples 7..12 drawn as a share starting at 7");
}

#[test]
fn bad_operands_are_refused_naming_them() {
    let d = device();
    let (x, y, draws) = (d.zeros(&[2, 5, 5, 3]).unwrap(), d.zeros(&[2, 6, 5, 3]).unwrap(), d.zeros_of(&[2, 4], DType::U32).unwrap());
    let err = augment::forward(&d, &x, &draws, FillMode::Constant, 0.0, &y).unwrap_err().to_string();
    assert!(err.contains("[2, 6, 5, 3]") && err.contains("[2, 5, 5, 3]"), "{err}");
    let wrong = d.zeros_of(&[3, 4], DType::U32).unwrap();
    let small = d.zeros(&[2, 3, 3, 3]).unwrap();
    let err = augment::backward(&d, &small, &wrong, FillMode::Reflect, &x).unwrap_err().to_string();
    assert!(err.contains("draws") && err.contains("[3, 4]"), "{err}");
    let err = augment::draw(&d, AxisDraw::Offset { count: 9 }, AxisDraw::Keep, (5, 5), 0, &step_tensor(0, 0), &draws).unwrap_err().to_string();
    assert!(err.contains("9 starts"), "{err}");
    assert!(AxisDraw::shift(0.5, 0.2, 10).unwrap_err().to_string().contains("(0.5, 0.2)"));
    assert!(AxisDraw::shift(-1.5, 0.2, 10).is_err());
}
