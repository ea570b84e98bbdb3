//! Max, average and global average pooling against f64 references written here: windows are
//! placed as TensorFlow's `padding="valid"|"same"` or PyTorch's `padding=(h, w)` places them,
//! padded positions never win a max, average pooling divides by the window's input positions
//! (Keras) or, with explicit padding, by the whole window (PyTorch's `count_include_pad`), and
//! max-pool ties go to the first maximum in row-major window order. Max and global average
//! pooling run on f16 activations too, their gradients stored as f16 with them, from the
//! same references on the f16-rounded inputs.

use convoy::kernels::pool::{self, Pool2dGeometry, PoolPadding};
use convoy::{DType, Tensor};

use crate::common::*;

/// The clipped input rows and columns of output (oh, ow)'s window.
fn window(g: &Pool2dGeometry, oh: usize, ow: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    let clip = |o: usize, s: usize, pad: usize, k: usize, n: usize| {
        let start = (o * s) as i64 - pad as i64;
        start.max(0) as usize..((start + k as i64).min(n as i64)) as usize
    };
    (clip(oh, g.stride_h, g.pad_top, g.pool_h, g.in_h), clip(ow, g.stride_w, g.pad_left, g.pool_w, g.in_w))
}

fn at(g: &Pool2dGeometry, b: usize, h: usize, w: usize, c: usize) -> usize {
    ((b * g.in_h + h) * g.in_w + w) * g.channels + c
}

/// Every output position as (flat output index, b, oh, ow, c).
fn outputs(g: &Pool2dGeometry) -> impl Iterator<Item = (usize, usize, usize, usize, usize)> + '_ {
    let [n, oh, ow, c] = g.output_shape();
    (0..n * oh * ow * c).map(move |i| (i, i / (oh * ow * c), i / (ow * c) % oh, i / c % ow, i % c))
}

/// (y, argmax as `h * in_w + w`, dx) of max pooling.
pub(crate) fn max_pool_ref(g: &Pool2dGeometry, x: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<u32>, Vec<f64>) {
    let (mut y, mut arg, mut dx) = (vec![], vec![], vec![0.0; x.len()]);
    for (i, b, oh, ow, c) in outputs(g) {
        let (rows, cols) = window(g, oh, ow);
        let mut best: Option<(f32, usize, usize)> = None;
        for h in rows {
            for w in cols.clone() {
                let v = x[at(g, b, h, w, c)];
                if best.is_none_or(|(m, _, _)| v > m) {
                    best = Some((v, h, w));
                }
            }
        }
        let (v, h, w) = best.expect("every Keras window holds an input element");
        y.push(v as f64);
        arg.push((h * g.in_w + w) as u32);
        dx[at(g, b, h, w, c)] += dy[i] as f64;
    }
    (y, arg, dx)
}

/// (y, dx) of average pooling over the input elements of each window, divided by the whole
/// window with explicit padding.
pub(crate) fn avg_pool_ref(g: &Pool2dGeometry, x: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut dx) = (vec![], vec![0.0; x.len()]);
    for (i, b, oh, ow, c) in outputs(g) {
        let (rows, cols) = window(g, oh, ow);
        let count = if g.count_padding { (g.pool_h * g.pool_w) as f64 } else { (rows.len() * cols.len()) as f64 };
        let mut s = 0.0;
        for h in rows {
            for w in cols.clone() {
                s += x[at(g, b, h, w, c)] as f64;
                dx[at(g, b, h, w, c)] += dy[i] as f64 / count;
            }
        }
        y.push(s / count);
    }
    (y, dx)
}

/// (y, dx) of global average pooling over `[n, h, w, c]`.
pub(crate) fn global_avg_pool_ref([n, h, w, c]: [usize; 4], x: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let hw = (h * w) as f64;
    let y = (0..n * c).map(|i| (0..h * w).map(|j| x[(i / c * h * w + j) * c + i % c] as f64).sum::<f64>() / hw).collect();
    let dx = (0..n * h * w * c).map(|i| dy[i / (h * w * c) * c + i % c] as f64 / hw).collect();
    (y, dx)
}

/// Gradient buffers start full of garbage: the kernels must overwrite, not accumulate.
pub(crate) fn garbage(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    upload(&vec![1234.5; n], shape)
}

fn geometries() -> Vec<Pool2dGeometry> {
    let mut out = vec![];
    for (batch, h, w, channels) in [(1, 5, 7, 1), (3, 9, 9, 3), (1, 9, 9, 5), (3, 5, 7, 17)] {
        for (pool, stride) in [(2, 2), (3, 2)] {
            for padding in [PoolPadding::Valid, PoolPadding::Same, PoolPadding::Explicit(1, 1), PoolPadding::Explicit(1, 0)] {
                out.push(Pool2dGeometry::new(&[batch, h, w, channels], [pool, pool], Some([stride, stride]), padding).unwrap());
            }
        }
    }
    out
}

#[test]
fn geometry_matches_keras() {
    // (input, pool, stride, padding) -> (out_h, out_w, pad_top, pad_left), as TensorFlow computes them
    let cases = [
        ([5, 7], 2, 2, PoolPadding::Valid, [2, 3, 0, 0]),
        ([5, 7], 2, 2, PoolPadding::Same, [3, 4, 0, 0]),
        ([9, 9], 3, 2, PoolPadding::Valid, [4, 4, 0, 0]),
        ([9, 9], 3, 2, PoolPadding::Same, [5, 5, 1, 1]),
        ([5, 7], 3, 2, PoolPadding::Same, [3, 4, 1, 1]),
        ([8, 8], 3, 2, PoolPadding::Same, [4, 4, 0, 0]),
        ([3, 3], 3, 3, PoolPadding::Valid, [1, 1, 0, 0]),
        // PyTorch: (in + 2 * pad - pool) / stride + 1; the ResNet stem's pool at 112 and 7 px
        ([112, 112], 3, 2, PoolPadding::Explicit(1, 1), [56, 56, 1, 1]),
        ([7, 7], 3, 2, PoolPadding::Explicit(1, 1), [4, 4, 1, 1]),
        ([5, 7], 4, 2, PoolPadding::Explicit(2, 1), [3, 3, 2, 1]),
        ([1, 1], 2, 2, PoolPadding::Explicit(1, 1), [1, 1, 1, 1]),
    ];
    for (hw, pool, stride, padding, want) in cases {
        let g = Pool2dGeometry::new(&[2, hw[0], hw[1], 3], [pool, pool], Some([stride, stride]), padding).unwrap();
        assert_eq!([g.out_h, g.out_w, g.pad_top, g.pad_left], want, "{hw:?} pool {pool} stride {stride} {padding:?}");
    }
    let g = Pool2dGeometry::new(&[1, 6, 6, 1], [2, 3], None, "valid".parse().unwrap()).unwrap();
    assert_eq!((g.stride_h, g.stride_w, g.out_h, g.out_w), (2, 3, 3, 2), "strides default to pool_size");
    assert!("SAME".parse::<PoolPadding>().is_err());
    for padding in [PoolPadding::Valid, PoolPadding::Same, PoolPadding::Explicit(1, 2)] {
        assert_eq!(PoolPadding::from_config(&padding.to_config()).unwrap(), padding, "config round trip");
    }
    for bad in [serde_json::json!([1]), serde_json::json!([1, -1]), serde_json::json!("Same"), serde_json::json!([1, 1 << 20])] {
        let e = PoolPadding::from_config(&bad).unwrap_err().to_string();
        assert!(e.contains(&bad.to_string().replace('"', "")) || e.contains("1048576"), "message names {bad}: {e}");
    }
}

#[test]
fn max_pool_forward_and_backward() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(11);
        for g in geometries() {
            let (xs, ys) = (g.input_shape(), g.output_shape());
            let x = random(&mut r, xs.iter().product());
            let dy = random(&mut r, ys.iter().product());
            let (tx, ty, targ, tdy, tdx) = (upload(&x, &xs), garbage(&ys), d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap(), upload(&dy, &ys), garbage(&xs));
            run(&[pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap(), pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap()]);
            let (want_y, want_arg, want_dx) = max_pool_ref(&g, &x, &dy);
            assert_eq!(pool::argmax_positions(&g, &d.read_u32(&targ).unwrap()).unwrap(), want_arg, "argmax {g:?}");
            let e1 = assert_close(&format!("max pool forward {g:?}"), &read(&ty), &want_y);
            let e2 = assert_close(&format!("max pool backward {g:?}"), &read(&tdx), &want_dx);
            println!("max pool {xs:?} pool {} stride {} -> {ys:?}: forward {e1:.1e}, backward {e2:.1e}", g.pool_h, g.stride_h);
        }
    });
}

#[test]
fn max_pool_ties_go_to_the_first_maximum() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(12);
        for g in geometries() {
            let (xs, ys) = (g.input_shape(), g.output_shape());
            // three levels only, so most windows hold several equal maxima; one map all equal
            let x: Vec<f32> = random(&mut r, xs.iter().product()).iter().map(|v| (v * 1.5).round()).collect();
            for x in [x.clone(), vec![0.5; x.len()]] {
                let dy = random(&mut r, ys.iter().product());
                let (tx, ty, targ, tdy, tdx) = (upload(&x, &xs), garbage(&ys), d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap(), upload(&dy, &ys), garbage(&xs));
                run(&[pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap(), pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap()]);
                let (want_y, want_arg, want_dx) = max_pool_ref(&g, &x, &dy);
                assert_eq!(pool::argmax_positions(&g, &d.read_u32(&targ).unwrap()).unwrap(), want_arg, "tied argmax {g:?}");
                assert_close(&format!("tied max pool forward {g:?}"), &read(&ty), &want_y);
                assert_close(&format!("tied max pool backward {g:?}"), &read(&tdx), &want_dx);
            }
        }
    });
}

#[test]
fn avg_pool_forward_and_backward() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(13);
        for g in geometries() {
            let (xs, ys) = (g.input_shape(), g.output_shape());
            let x = random(&mut r, xs.iter().product());
            let dy = random(&mut r, ys.iter().product());
            let (tx, ty, tdy, tdx) = (upload(&x, &xs), garbage(&ys), upload(&dy, &ys), garbage(&xs));
            run(&[pool::avg_pool_forward(&d, &g, &tx, &ty).unwrap(), pool::avg_pool_backward(&d, &g, &tdy, &tdx).unwrap()]);
            let (want_y, want_dx) = avg_pool_ref(&g, &x, &dy);
            let e1 = assert_close(&format!("avg pool forward {g:?}"), &read(&ty), &want_y);
            let e2 = assert_close(&format!("avg pool backward {g:?}"), &read(&tdx), &want_dx);
            println!("avg pool {xs:?} pool {} stride {} -> {ys:?}: forward {e1:.1e}, backward {e2:.1e}", g.pool_h, g.stride_h);
        }
    });
}

#[test]
fn global_avg_pool_forward_and_backward() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(14);
        for (n, h, w, c) in [(1, 1, 1, 1), (3, 1, 1, 5), (1, 7, 5, 3), (3, 7, 5, 17), (2, 8, 8, 64)] {
            let x = random(&mut r, n * h * w * c);
            let dy = random(&mut r, n * c);
            let (tx, ty, tdy, tdx) = (upload(&x, &[n, h, w, c]), garbage(&[n, c]), upload(&dy, &[n, c]), garbage(&[n, h, w, c]));
            run(&[pool::global_avg_pool_forward(&d, &tx, &ty).unwrap(), pool::global_avg_pool_backward(&d, &tdy, &tdx).unwrap()]);
            let (want_y, want_dx) = global_avg_pool_ref([n, h, w, c], &x, &dy);
            let e1 = assert_close(&format!("global avg pool forward {:?}", [n, h, w, c]), &read(&ty), &want_y);
            let e2 = assert_close(&format!("global avg pool backward {:?}", [n, h, w, c]), &read(&tdx), &want_dx);
            println!("global avg pool {:?}: forward {e1:.1e}, backward {e2:.1e}", [n, h, w, c]);
        }
    });
}

#[test]
fn bad_shapes_are_errors() {
    let d = device();
    assert!(Pool2dGeometry::new(&[1, 2, 5, 3], [3, 3], None, PoolPadding::Valid).is_err(), "input smaller than the pool");
    assert!(Pool2dGeometry::new(&[1, 5, 5], [2, 2], None, PoolPadding::Valid).is_err(), "3-d input");
    assert!(Pool2dGeometry::new(&[1, 5, 5, 3], [2, 0], None, PoolPadding::Same).is_err(), "zero pool");
    // PyTorch refuses a pad above half the pool, and so does convoy
    for (pool, pad) in [([3, 3], (2, 1)), ([3, 3], (3, 1)), ([3, 2], (1, 2)), ([1, 1], (1, 0)), ([4, 5], (3, 0))] {
        let e = Pool2dGeometry::new(&[1, 9, 9, 3], pool, None, PoolPadding::Explicit(pad.0, pad.1)).unwrap_err().to_string();
        assert!(e.contains(&format!("[{}, {}]", pad.0, pad.1)) && e.contains(&format!("{pool:?}")), "message names the padding and the pool: {e}");
    }
    assert!(Pool2dGeometry::new(&[1, 1, 1, 3], [3, 3], Some([2, 2]), PoolPadding::Explicit(0, 1)).is_err(), "1 row + 0 padding below a 3-row pool");
    let g = Pool2dGeometry::new(&[1, 5, 7, 3], [2, 2], None, PoolPadding::Same).unwrap();
    let x = d.zeros(&g.input_shape()).unwrap();
    let y = d.zeros(&g.output_shape()).unwrap();
    let arg = d.zeros_of(&g.output_shape(), DType::U32).unwrap();
    let wrong = d.zeros(&[1, 2, 3, 3]).unwrap();
    assert!(pool::max_pool_forward(&d, &g, &x, &wrong, &arg).is_err(), "y of a valid pool");
    assert!(pool::max_pool_forward(&d, &g, &x, &y, &y).is_err(), "f32 argmax");
    // argmax read back: positions in full or packed, nothing in between
    let packed = Pool2dGeometry::new(&[1, 5, 7, 4], [2, 2], None, PoolPadding::Same).unwrap();
    assert_eq!(pool::argmax_shape(&packed), [1, 3, 4, 1]);
    let e = pool::argmax_positions(&packed, &[0; 5]).unwrap_err().to_string();
    assert!(e.contains("5 words") && e.contains("expected 12 or 48"), "{e}");
    // A place no 2x2 window has (4..254), or one in the padding ("same" pads the bottom and
    // right of 5 x 7: output (2, 3)'s window reaches row 5 and column 7), reads as no
    // position rather than as another window's input or an overflow.
    let mut words = vec![0u32; 12];
    words[0] = 0x03_02_01_00;
    words[1] = 0x00_00_00_04;
    words[11] = 0x03_02_01_00;
    let pos = pool::argmax_positions(&packed, &words).unwrap();
    assert_eq!(&pos[..4], &[0, 1, 7, 8], "output (0, 0), places 0-3");
    assert_eq!(pos[4], u32::MAX, "place 4 of a 2x2 window");
    assert_eq!(&pos[44..], &[34, u32::MAX, u32::MAX, u32::MAX], "output (2, 3): only place 0 is inside the 5 x 7 input");
    assert!(pool::max_pool_backward(&d, &g, &y, &arg, &y).is_err(), "dx shaped like dy");
    assert!(pool::avg_pool_forward(&d, &g, &x, &x).is_err(), "y shaped like x");
    assert!(pool::avg_pool_backward(&d, &g, &y, &y).is_err(), "dx shaped like dy");
    let whole = d.zeros(&[2 * g.input_shape().iter().product::<usize>()]).unwrap();
    let view = whole.view(0, &g.output_shape()).unwrap();
    let x_in_same = whole.view(0, &g.input_shape()).unwrap();
    assert!(pool::avg_pool_forward(&d, &g, &x_in_same, &view).is_err(), "y sharing x's buffer");
    assert!(pool::global_avg_pool_forward(&d, &x, &d.zeros(&[1, 3, 1]).unwrap()).is_err(), "3-d global output");
    assert!(pool::global_avg_pool_forward(&d, &x, &d.zeros(&[1, 4]).unwrap()).is_err(), "wrong channels");
    assert!(pool::global_avg_pool_backward(&d, &d.zeros(&[2, 3]).unwrap(), &x).is_err(), "wrong batch");
    let e = pool::max_pool_forward(&d, &g, &x, &wrong, &arg).unwrap_err().to_string();
    assert!(e.contains("[1, 2, 3, 3]") && e.contains("[1, 3, 4, 3]"), "message names both shapes: {e}");
}

/// [`geometries`] with channels divisible by 4 (f16's condition: its kernels store whole
/// quads) and 3x3 windows at stride 1 too (up to nine windows choose one input, so its
/// gradient is a sum of up to nine dy), and a ResNet stem's pool over a map that takes many
/// workgroups.
fn geometries_f16() -> Vec<Pool2dGeometry> {
    let mut out = vec![];
    for (batch, h, w, channels) in [(1, 5, 7, 4), (3, 9, 9, 8), (3, 5, 7, 20)] {
        for (pool, stride) in [(2, 2), (3, 2), (3, 1)] {
            for padding in [PoolPadding::Valid, PoolPadding::Same, PoolPadding::Explicit(1, 1), PoolPadding::Explicit(1, 0)] {
                out.push(Pool2dGeometry::new(&[batch, h, w, channels], [pool, pool], Some([stride, stride]), padding).unwrap());
            }
        }
    }
    out.push(Pool2dGeometry::new(&[2, 32, 32, 64], [3, 3], Some([2, 2]), PoolPadding::Explicit(1, 1)).unwrap());
    // A window of 256 elements, one past what a packed argmax's byte holds: whole positions.
    out.push(Pool2dGeometry::new(&[1, 21, 19, 4], [16, 16], Some([4, 3]), PoolPadding::Valid).unwrap());
    out
}

/// An f16 output buffer full of garbage: the forward kernels must overwrite every element.
fn garbage_f16(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    upload_f16(&vec![1234.5; n], shape)
}

/// The absolute slack [`assert_close_f16`] needs for a sum of up to `k` values below 1 in
/// magnitude taken in f32 and rounded to f16 once: the f32 sum's rounding (at most k - 1
/// additions, each off by 2^-24 of a partial sum below k) and f16's subnormal steps (half of
/// 2^-24). A sum rounded to f16 per addition is off by up to k - 1 f16 roundings instead.
fn f16_sum_slack(k: usize) -> f64 {
    (k * k) as f64 * 2f64.powi(-24) + 2f64.powi(-25)
}

#[test]
fn f16_max_pool_forward_and_backward() {
    on_each_variant(|variant| {
        let d = device();
        let mut r = rng(15);
        take_paths();
        for g in geometries_f16() {
            let (xs, ys) = (g.input_shape(), g.output_shape());
            let x = random_half(&mut r, xs.iter().product());
            // and three levels, so most windows hold tied maxima
            let tied: Vec<f32> = x.iter().map(|v| (v * 1.5).round()).collect();
            // the most windows that cover one input, and so the most dy one dx sums
            let k = g.pool_h.div_ceil(g.stride_h) * g.pool_w.div_ceil(g.stride_w);
            for x in [x, tied] {
                // dy and dx f16 as the activations; dy's magnitudes spread over f16's binades
                let dy: Vec<f32> = random(&mut r, ys.iter().product()).iter().enumerate().map(|(i, v)| to_half(v * 2f32.powi(-((i % 7) as i32)))).collect();
                let (tx, ty, targ, tdy, tdx) = (upload_f16(&x, &xs), garbage_f16(&ys), d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap(), upload_f16(&dy, &ys), garbage_f16(&xs));
                run(&[pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap(), pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap()]);
                let (want_y, want_arg, want_dx) = max_pool_ref(&g, &x, &dy);
                assert_eq!(pool::argmax_positions(&g, &d.read_u32(&targ).unwrap()).unwrap(), want_arg, "{variant} f16 argmax {g:?}");
                // the max of f16 values is one of them, stored exactly
                let want_y: Vec<f32> = want_y.iter().map(|&v| v as f32).collect();
                assert_eq!(read_f16(&ty), want_y, "{variant} f16 max pool forward {g:?}");
                let e = assert_close_f16(&format!("{variant} f16 max pool backward {g:?}"), &read_f16(&tdx), &want_dx, f16_sum_slack(k));
                println!("f16 max pool backward {xs:?} pool {} stride {}: {e:.2} of the bound", g.pool_h, g.stride_h);
            }
        }
        // the global max pool is the max pool over the whole map, its gradient too
        let shape = [2, 7, 7, 8];
        let x = random_half(&mut r, shape.iter().product());
        let dy = random_half(&mut r, 16);
        let (tx, ty, targ) = (upload_f16(&x, &shape), garbage_f16(&[2, 8]), d.zeros_of(&pool::global_argmax_shape(&shape).unwrap(), DType::U32).unwrap());
        let (tdy, tdx) = (upload_f16(&dy, &[2, 8]), garbage_f16(&shape));
        run(&[pool::global_max_pool_forward(&d, &tx, &ty, &targ).unwrap(), pool::global_max_pool_backward(&d, &tdy, &targ, &tdx).unwrap()]);
        let g = Pool2dGeometry::new(&shape, [7, 7], None, PoolPadding::Valid).unwrap();
        let (want_y, want_arg, want_dx) = max_pool_ref(&g, &x, &dy);
        assert_eq!(pool::global_argmax_positions(&shape, &d.read_u32(&targ).unwrap()).unwrap(), want_arg, "{variant} f16 global max pool argmax");
        assert_eq!(read_f16(&ty), want_y.iter().map(|&v| v as f32).collect::<Vec<_>>(), "{variant} f16 global max pool");
        // one dy per position, stored exactly
        assert_eq!(read_f16(&tdx), want_dx.iter().map(|&v| v as f32).collect::<Vec<_>>(), "{variant} f16 global max pool backward");
        let entries = ["max_pool_forward4", "max_pool_backward4", "max_pool_forward4c", "max_pool_backward4c"];
        let expected: Vec<(&str, String)> = entries.iter().flat_map(|&e| [(e, "store=f16".to_string()), (e, "vec4".to_string())]).collect();
        assert_paths_cover("f16 max pool", &take_paths(), &expected, &[]);
    });
}

#[test]
fn f16_global_avg_pool_forward_and_backward() {
    on_each_variant(|variant| {
        let d = device();
        let mut r = rng(16);
        take_paths();
        // [4, 7, 7, 512]: 512 quads of output, two workgroups; 12,544 quads of dx, 49
        for (n, h, w, c) in [(1, 1, 1, 4), (3, 7, 5, 8), (2, 8, 8, 64), (4, 7, 7, 512), (3, 3, 1, 12)] {
            let x = random_half(&mut r, n * h * w * c);
            let dy = random_half(&mut r, n * c);
            let (tx, ty, tdy, tdx) = (upload_f16(&x, &[n, h, w, c]), garbage_f16(&[n, c]), upload_f16(&dy, &[n, c]), garbage_f16(&[n, h, w, c]));
            run(&[pool::global_avg_pool_forward(&d, &tx, &ty).unwrap(), pool::global_avg_pool_backward(&d, &tdy, &tdx).unwrap()]);
            let (want, want_dx) = global_avg_pool_ref([n, h, w, c], &x, &dy);
            // the kernel sums h * w values of magnitude below 1 in f32 before rounding to f16
            let slack = (h * w) as f64 * 2f64.powi(-24);
            let e = assert_close_f16(&format!("{variant} f16 global avg pool {:?}", [n, h, w, c]), &read_f16(&ty), &want, slack);
            // one f32 division, then one f16 rounding (subnormal below 2^-14)
            let e2 = assert_close_f16(&format!("{variant} f16 global avg pool backward {:?}", [n, h, w, c]), &read_f16(&tdx), &want_dx, 2f64.powi(-25));
            println!("f16 global avg pool {:?}: forward {e:.2}, backward {e2:.2} of the bound", [n, h, w, c]);
        }
        let expected: Vec<(&str, String)> = ["global_avg_pool_forward4", "global_avg_pool_backward4"].iter().flat_map(|&e| [(e, "store=f16".to_string()), (e, "vec4".to_string())]).collect();
        assert_paths_cover("f16 global avg pool", &take_paths(), &expected, &[]);
    });
}

#[test]
fn f16_pool_gradients_cover_a_folded_grid() {
    // More than 65,535 * 256 quads of dx fold the vec4 grid into 2-D; in f16 that is 128 MiB,
    // which the software adapter's largest binding still holds. Small integers and halves:
    // every sum is exact in f16, so each element is checked for equality.
    let d = device();
    let fold = 65_535 * 256;

    // Max pooling: 3x3 maps, 2x2 windows at stride 1, so the centre may gather four dy. The
    // inputs repeat every 13 samples, whose reference is computed once; a quad the grid
    // misses keeps its garbage, one written to the wrong place meets another sample's values.
    let (period, n) = (13, 1_864_108);
    let g = Pool2dGeometry::new(&[n, 3, 3, 4], [2, 2], Some([1, 1]), PoolPadding::Valid).unwrap();
    let small = Pool2dGeometry::new(&[period, 3, 3, 4], [2, 2], Some([1, 1]), PoolPadding::Valid).unwrap();
    let (xs, ys) = (g.input_shape(), g.output_shape());
    let (per_x, per_y) = (36, 16);
    // three levels, so windows tie
    let x: Vec<f32> = (0..period * per_x).map(|i| ((i * 7 + i / 5) % 3) as f32).collect();
    let dy: Vec<f32> = (0..period * per_y).map(|i| ((i * 11) % 17) as f32 * 0.5 - 4.0).collect();
    let (_, _, want) = max_pool_ref(&small, &x, &dy);
    let tx = upload_f16(&(0..n * per_x).map(|i| x[i % x.len()]).collect::<Vec<_>>(), &xs);
    let tdy = upload_f16(&(0..n * per_y).map(|i| dy[i % dy.len()]).collect::<Vec<_>>(), &ys);
    let (ty, targ, tdx) = (d.zeros_of(&ys, DType::F16).unwrap(), d.zeros_of(&pool::argmax_shape(&g), DType::U32).unwrap(), upload_f16(&vec![1234.5; n * per_x], &xs));
    let backward = pool::max_pool_backward(&d, &g, &tdy, &targ, &tdx).unwrap();
    assert!(n * per_x / 4 > fold && backward.groups()[1] > 1, "grid {:?} was not folded", backward.groups());
    assert!(backward.path_tokens().any(|t| t == "store=f16"), "path {}", backward.path);
    run(&[pool::max_pool_forward(&d, &g, &tx, &ty, &targ).unwrap(), backward]);
    drop((tx, ty, targ, tdy));
    let dx = read_f16(&tdx);
    drop(tdx);
    let want = |i: usize| want[i % want.len()] as f32;
    let wrong = (0..dx.len()).filter(|&i| dx[i] != want(i)).count();
    assert_eq!(wrong, 0, "folded f16 max pool backward: {wrong} elements wrong (first at {:?})", (0..dx.len()).find(|&i| dx[i] != want(i)));
    drop(dx);

    // Global average pooling over 2x2 maps: dx = dy / 4, exact for these dy.
    let n = 4_194_250;
    assert!(n * 16 / 4 > fold);
    let dy_at = |i: usize| ((i % 97) as f32 - 48.0) * 0.5;
    let tdy = upload_f16(&(0..n * 4).map(dy_at).collect::<Vec<_>>(), &[n, 4]);
    let tdx = upload_f16(&vec![1234.5; n * 16], &[n, 2, 2, 4]);
    let backward = pool::global_avg_pool_backward(&d, &tdy, &tdx).unwrap();
    assert!(backward.groups()[1] > 1, "grid {:?} was not folded", backward.groups());
    assert!(backward.path_tokens().any(|t| t == "store=f16"), "path {}", backward.path);
    run(&[backward]);
    let dx = read_f16(&tdx);
    let want = |i: usize| dy_at(i / 16 * 4 + i % 4) / 4.0;
    let wrong = (0..dx.len()).filter(|&i| dx[i] != want(i)).count();
    assert_eq!(wrong, 0, "folded f16 global avg pool backward: {wrong} elements wrong (first at {:?})", (0..dx.len()).find(|&i| dx[i] != want(i)));
}

#[test]
fn f16_pooling_refuses_what_it_cannot_store() {
    let d = device();
    let h = |shape: &[usize]| d.zeros_of(shape, DType::F16).unwrap();
    let f = |shape: &[usize]| d.zeros(shape).unwrap();
    let arg = |shape: &[usize]| d.zeros_of(shape, DType::U32).unwrap();
    let err = |r: convoy::Result<convoy::kernels::Dispatch>| r.map(|_| ()).unwrap_err().to_string();
    let g3 = Pool2dGeometry::new(&[1, 5, 7, 3], [2, 2], None, PoolPadding::Same).unwrap();
    let g4 = Pool2dGeometry::new(&[1, 5, 7, 4], [2, 2], None, PoolPadding::Same).unwrap();
    let (x3, y3, x4, y4) = (h(&g3.input_shape()), h(&g3.output_shape()), h(&g4.input_shape()), h(&g4.output_shape()));
    let cases = [
        // f16 is stored four channels at a time: no scalar path
        (err(pool::max_pool_forward(&d, &g3, &x3, &y3, &arg(&g3.output_shape()))), "max_pool_forward: x [1, 5, 7, 3] is F16 with 3 channels, expected a multiple of 4"),
        (err(pool::global_avg_pool_forward(&d, &x3, &h(&[1, 3]))), "global_avg_pool_forward: x [1, 5, 7, 3] is F16 with 3 channels"),
        (err(pool::global_max_pool_forward(&d, &x3, &h(&[1, 3]), &arg(&[1, 3]))), "global_max_pool_forward: x [1, 5, 7, 3] is F16 with 3 channels"),
        // x and y share one storage
        (err(pool::max_pool_forward(&d, &g4, &x4, &d.zeros(&g4.output_shape()).unwrap(), &arg(&pool::argmax_shape(&g4)))), "max_pool_forward: y [1, 3, 4, 4] is F32, expected F16 as x [1, 5, 7, 4]"),
        (err(pool::global_avg_pool_forward(&d, &x4, &d.zeros(&[1, 4]).unwrap())), "global_avg_pool_forward: y [1, 4] is F32, expected F16 as x [1, 5, 7, 4]"),
        (err(pool::max_pool_forward(&d, &g4, &arg(&g4.input_shape()), &y4, &arg(&pool::argmax_shape(&g4)))), "max_pool_forward: x [1, 5, 7, 4] is U32, expected F32 or F16"),
        // average pooling has no f16 form, so neither have its gradients
        (err(pool::avg_pool_forward(&d, &g4, &x4, &y4)), "avg_pool_forward: x [1, 5, 7, 4] is F16, expected F32"),
        (err(pool::avg_pool_backward(&d, &g4, &y4, &x4)), "avg_pool_backward: dy [1, 3, 4, 4] is F16, expected F32"),
        // the gradients are stored as the activations: dy and dx share one storage
        (err(pool::max_pool_backward(&d, &g4, &y4, &arg(&pool::argmax_shape(&g4)), &f(&g4.input_shape()))), "max_pool_backward: dx [1, 5, 7, 4] is F32, expected F16 as dy [1, 3, 4, 4]"),
        (err(pool::max_pool_backward(&d, &g4, &f(&g4.output_shape()), &arg(&pool::argmax_shape(&g4)), &x4)), "max_pool_backward: dx [1, 5, 7, 4] is F16, expected F32 as dy [1, 3, 4, 4]"),
        (err(pool::global_avg_pool_backward(&d, &f(&[1, 4]), &x4)), "global_avg_pool_backward: dx [1, 5, 7, 4] is F16, expected F32 as dy [1, 4]"),
        (err(pool::global_avg_pool_backward(&d, &h(&[1, 4]), &f(&g4.input_shape()))), "global_avg_pool_backward: dx [1, 5, 7, 4] is F32, expected F16 as dy [1, 4]"),
        (err(pool::global_max_pool_backward(&d, &h(&[1, 4]), &arg(&[1, 1]), &f(&g4.input_shape()))), "global_max_pool_backward: dx [1, 5, 7, 4] is F32, expected F16 as dy [1, 4]"),
        // f16 gradients are stored four channels at a time too
        (err(pool::max_pool_backward(&d, &g3, &y3, &arg(&g3.output_shape()), &x3)), "max_pool_backward: dy [1, 3, 4, 3] is F16 with 3 channels, expected a multiple of 4"),
        (err(pool::global_avg_pool_backward(&d, &h(&[1, 3]), &x3)), "global_avg_pool_backward: dy [1, 3] is F16 with 3 channels, expected a multiple of 4"),
        (err(pool::global_max_pool_backward(&d, &h(&[1, 3]), &arg(&[1, 3]), &x3)), "global_max_pool_backward: dy [1, 3] is F16 with 3 channels, expected a multiple of 4"),
        // argmax stays u32, and a gradient is F32 or F16
        (err(pool::max_pool_backward(&d, &g4, &y4, &h(&pool::argmax_shape(&g4)), &x4)), "max_pool_backward: argmax [1, 3, 4, 1] is F16, expected U32"),
        (err(pool::max_pool_backward(&d, &g4, &arg(&g4.output_shape()), &arg(&pool::argmax_shape(&g4)), &x4)), "max_pool_backward: dy [1, 3, 4, 4] is U32, expected F32 or F16"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "expected an error containing {want:?}, got {got:?}");
    }
}
