//! Throughput of single products: a square matmul, the convolutions of ResNet-18 at 224 px
//! and ResNet-50's 1x1 ones (forward, input gradient, weight gradient, and the input gradient
//! with a residual join in its store where a block's first convolution has one), in float32 and mixed
//! precision, as useful TFLOP/s and the fraction of the chip's peak. The per-kernel view
//! that `convoy bench --profile` gives inside a step, without the step: for trying one
//! kernel's tiles and K splits.
//!
//! `cargo bench --bench gemm [-- FILTER] [--splits auto,1,4] [--flip on,off,auto]
//! [--coop auto,256x64/64x64/1/16] [--store f32,a16,a16c16,f16] [--stage auto,words,halves]
//! [--persist off,on] [--precision float32,mixed] [--reps N] [--warm MS] [--side S] [--batch B] [--stats] [--fill] [--probe] [--probe-wgrad]`; FILTER keeps the cases whose name contains it; `--side`
//! sets the 64-channel stage's image side (56, ResNet-18 at 224 px; 32 gives resnet18_cifar's
//! shapes, each later stage at half the side before), `--batch` the images (256; `convoy
//! bench` runs ResNet-50 at 128); the device is `CONVOY_BENCH_DEVICES` (default: the first adapter). Forward
//! and input-gradient products take only `auto` and `1` of `--splits` (their K is short).
//! `--precision` keeps one policy's runs (both unless given); `--warm` runs each variant this
//! long before it is timed (30 ms).
//! `--fill` gives the products' operands values instead of zeros. On a software adapter the
//! shapes shrink to a smoke run. `--probe` times plain f16 products
//! by the probe kernel instead (`benches/coop_shared.wgsl`): what cooperative matrices give here.
//! `--probe-wgrad` times the 3x3 64-channel weight gradient with a row of taps in one workgroup
//! (`benches/wgrad_halo.wgsl`), a structure the engine does not have yet.

use std::time::Instant;

use convoy::kernels::conv2d::{self, Conv2dGeometry, Join, Padding};
use convoy::kernels::dense;
use convoy::kernels::gemm::{AStage, CoopTile, GemmOptions};
use convoy::kernels::{Dispatch, Shader};
use convoy::model::Peak;
use convoy::{DType, Device, Result, Tensor};

/// How a convolution's activations are stored (`--store f32,a16,a16c16,f16`): x read as f32
/// or f16 (the forward's and the weight gradient's A), y written as f32 or f16 (the forward's
/// C); gradients f32, or with `f16` stored as their activations too (dy read and dx written
/// as f16, where x's channels are whole quads), as mixed_float16 stores them in a model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Store {
    F32,
    A16,
    A16C16,
    F16,
}

/// One product to time: its name, its useful FLOPs and how to record it.
struct Case {
    name: String,
    flops: f64,
    record: Box<dyn Fn(&Device, &GemmOptions, Store) -> Result<Vec<Dispatch>>>,
}

fn zeros(device: &Device, shape: &[usize]) -> Result<Tensor> {
    device.zeros(shape)
}

/// How the convolution cases are set up: `stats` (`--stats`), and `fill` (`--fill`): the
/// operands they read hold values in [-0.5, 0.5) rather than zeros, for the cases `filter`
/// keeps (the product's speed may depend on its data: power, clocks).
struct Setup {
    stats: bool,
    fill: bool,
    filter: Option<String>,
}

/// The `--fill` values of an operand of `shape`: a fixed pseudo-random pattern in [-0.5, 0.5).
fn pattern(shape: &[usize]) -> Vec<f32> {
    (0..shape.iter().product::<usize>()).map(|i| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect()
}

/// An f32 operand of `shape`: zeros, or with `fill` the pattern.
fn operand(device: &Device, shape: &[usize], fill: bool) -> Result<Tensor> {
    if fill { device.upload(shape, &pattern(shape)) } else { zeros(device, shape) }
}

/// An operand of `shape` stored as f32 and as f16 (`--store` picks one for each run): zeros,
/// or with `fill` the same pattern in both, computed once.
fn operand_pair(device: &Device, shape: &[usize], fill: bool) -> Result<(Tensor, Tensor)> {
    if !fill {
        return Ok((zeros(device, shape)?, device.zeros_of(shape, DType::F16)?));
    }
    let values = pattern(shape);
    Ok((device.upload(shape, &values)?, device.upload_f16(shape, &values)?))
}

fn matmul_case(device: &Device, m: usize, k: usize, n: usize) -> Result<Case> {
    let (a, b, c) = (zeros(device, &[m, k])?, zeros(device, &[k, n])?, zeros(device, &[m, n])?);
    let record = move |d: &Device, o: &GemmOptions, _: Store| dense::matmul_with(d, &a, &b, &c, false, false, o);
    Ok(Case { name: format!("matmul {m}x{k}x{n}"), flops: 2.0 * (m * k * n) as f64, record: Box::new(record) })
}

/// A convolution's three products; `x` is NHWC.
fn conv_cases(device: &Device, label: &str, x: [usize; 4], filters: usize, kernel: usize, stride: usize, setup: &Setup) -> Result<Vec<Case>> {
    // PyTorch's padding of k / 2, as the model zoo pads: at stride 2 on an even side it puts
    // a tap on each side, where "same" padding pads only the bottom and right.
    let geom = Conv2dGeometry::new(&x, filters, (kernel, kernel), (stride, stride), Padding::Explicit(kernel / 2, kernel / 2))?;
    let flops = geom.flops() as f64;
    let stats = setup.stats;
    // The three cases' names, which the filter matches: x, the kernel and y (each
    // product's dy) are filled where asked and one of them is kept.
    let [forward, input_grad, weight_grad] = ["forward", "input grad", "weight grad"].map(|product| format!("{label} {product}"));
    let fill = setup.fill && [&forward, &input_grad, &weight_grad].iter().any(|name| setup.filter.as_ref().is_none_or(|f| name.contains(f.as_str())));
    let ((xt, x16), wt, (yt, y16)) = (operand_pair(device, &geom.input_shape(), fill)?, operand(device, &geom.kernel_shape(), fill)?, operand_pair(device, &geom.output_shape(), fill)?);
    let (dx, dw) = (zeros(device, &geom.input_shape())?, zeros(device, &geom.kernel_shape())?);
    // An f16 dx needs whole quads of channels; the stem's 3 keep an f32 one (a model
    // computes none).
    let dx16 = if geom.input_shape()[3] % 4 == 0 { device.zeros_of(&geom.input_shape(), DType::F16)? } else { dx.clone() };
    let (g1, g2, g3) = (geom, geom, geom);
    let (x1, w1, y1, x16b, dy16, dy16b) = (xt.clone(), wt.clone(), yt.clone(), x16.clone(), y16.clone(), y16.clone());
    let (y2, w2) = (yt.clone(), wt.clone());
    let pick = |s: Store, f32: &Tensor, f16: &Tensor| if s == Store::F32 { f32.clone() } else { f16.clone() };
    let kept = std::cell::RefCell::new(None);
    let grads = |s: Store, f32: &Tensor, f16: &Tensor| if s == Store::F16 { f16.clone() } else { f32.clone() };
    let (y3, dy3, w3) = (yt.clone(), y16.clone(), wt.clone());
    let mut cases = vec![
        Case {
            name: forward,
            flops,
            record: Box::new(move |d, o, s| {
                let (products, partials) = conv2d::forward_statistics(d, &g1, &pick(s, &x1, &x16), &w1, None, if matches!(s, Store::A16C16 | Store::F16) { &y16 } else { &y1 }, o, stats)?;
                // The statistics' tensor stays out of the pool while its dispatches run.
                *kept.borrow_mut() = partials;
                Ok(products)
            }),
        },
        Case { name: input_grad, flops, record: Box::new(move |d, o, s| conv2d::backward_data_with(d, &g2, &grads(s, &y2, &dy16), &w2, &grads(s, &dx, &dx16), o)) },
        Case { name: weight_grad, flops, record: Box::new(move |d, o, s| conv2d::backward_weights_with(d, &g3, &pick(s, &xt, &x16b), &grads(s, &yt, &dy16b), &dw, o)) },
    ];
    // The input gradient with a residual block's join in its store, as the first convolution
    // of a block stores it (stride 1, whole quads of input channels).
    if stride == 1 && geom.input_shape()[3] % 4 == 0 {
        let ((d32, d16), (j32, j16)) = (operand_pair(device, &geom.input_shape(), fill)?, operand_pair(device, &geom.input_shape(), fill)?);
        let (dx32, dx16j) = (zeros(device, &geom.input_shape())?, device.zeros_of(&geom.input_shape(), DType::F16)?);
        let record = move |d: &Device, o: &GemmOptions, s: Store| {
            let join = Join { d: &grads(s, &d32, &d16), y: &grads(s, &j32, &j16) };
            conv2d::backward_data_joined(d, &geom, &grads(s, &y3, &dy3), &w3, &grads(s, &dx32, &dx16j), join, o)?
                .ok_or_else(|| convoy::Error::Config(format!("{}: this product cannot store the join", o.coop_tile.map_or("auto".into(), |t| format!("{t:?}")))))
        };
        cases.push(Case { name: format!("{label} joined input grad"), flops, record: Box::new(record) });
    }
    Ok(cases)
}

/// `auto,1,4`: the engine's own split (`None`) and forced ones.
fn splits(arg: &str) -> Vec<Option<usize>> {
    arg.split(',').filter_map(|s| if s.trim() == "auto" { Some(None) } else { s.trim().parse().ok().map(Some) }).collect()
}

// SAFETY: the probe indexes A, B and C only inside `m x k`, `k x n` and `m x n`, and `probe`
// gives it sizes that are multiples of its tiles and grids that cover C exactly.
const STAGED16: Shader = unsafe { Shader::new_unchecked("coop_shared.wgsl", concat!("enable f16;\nenable wgpu_cooperative_matrix;\nalias Quad = vec4<f16>;\n", include_str!("coop_shared.wgsl"))) };
const STAGED32: Shader = unsafe { Shader::new_unchecked("coop_shared.wgsl", concat!("enable f16;\nenable wgpu_cooperative_matrix;\nalias Quad = vec4<f32>;\n", include_str!("coop_shared.wgsl"))) };

/// The ceiling of WGSL cooperative matrices on this chip: a plain f16 product of
/// `size`-square row-major matrices by the probe kernel of `benches/coop_shared.wgsl`, checked on
/// sampled entries against the exact product.
fn probe(device: &Device, size: usize, reps: usize) -> Result<()> {
    let value = |i: usize| ((i * 7 + 3) % 9) as f32 / 4.0 - 1.0;
    let (va, vb): (Vec<f32>, Vec<f32>) = ((0..size * size).map(value).collect(), (0..size * size).map(|i| value(i + 5)).collect());
    let (a, b) = (device.upload_f16(&[size, size], &va)?, device.upload_f16(&[size, size], &vb)?);
    let c = device.zeros(&[size, size])?;
    let params = [size as u32, size as u32, size as u32, 0];
    let flops = 2.0 * (size * size * size) as f64;
    let mut runs: Vec<(String, Dispatch)> = Vec::new();
    let (a32, b32) = (device.upload(&[size, size], &va)?, device.upload(&[size, size], &vb)?);
    // Subgroups as 2 x 2 (128 x 128 tiles) and 2 x 4 (128 x 256), K 32 a step: K 64 ran
    // slower or hung (H100, benches/results/2026-11-26c).
    for (shader, (a, b), kind) in [(&STAGED16, (&a, &b), "f16"), (&STAGED32, (&a32, &b32), "f32")] {
        for (rows, cols) in [(2u32, 2u32), (2, 4)] {
            let constants = [("SG_ROWS", rows as f64), ("SG_COLS", cols as f64), ("BK", 32.0)];
            let groups = [(size as u32) / (64 * cols), (size as u32) / (64 * rows), 1];
            let d = Dispatch::with_params(device, shader, "staged", &constants, &params, &[(1, a), (2, b), (3, &c)], groups);
            runs.push((format!("staged {kind} {rows}x{cols} tile {}x{}", rows * 64, cols * 64), d));
        }
    }
    for (name, d) in runs {
        device.run(std::slice::from_ref(&d));
        device.sync()?;
        let got = device.read(&c)?;
        let worst = (0..16)
            .map(|s| {
                let (i, j) = ((s * 977) % size, (s * 1553 + 11) % size);
                let want: f64 = (0..size).map(|k| value(i * size + k) as f64 * value(k * size + j + 5) as f64).sum();
                (got[i * size + j] as f64 - want).abs()
            })
            .fold(0.0, f64::max);
        // The products are sixteenths and the sums stay within 4096: exact in f32, so any
        // difference is a fault.
        if worst != 0.0 {
            return Err(convoy::Error::Gpu(format!("probe {name}: sampled entries off by up to {worst:e} from the exact product")));
        }
        let all = vec![d; reps];
        let start = Instant::now();
        device.run(&all);
        device.sync()?;
        let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
        println!("probe {name:<28} {size}^3 {ms:>9.3} ms {:>9.2} TFLOP/s", flops / ms / 1e9);
    }
    Ok(())
}

// SAFETY: the halo probe indexes x, dy and its partials only inside the shapes
// `probe_wgrad` gives it (its fetches test the image's edges; the partials hold every
// workgroup's tile).
const HALO: Shader = unsafe { Shader::new_unchecked("wgrad_halo.wgsl", concat!("enable f16;\nenable wgpu_cooperative_matrix;\n", include_str!("wgrad_halo.wgsl"))) };

/// The weight gradient of the 3x3 64 -> 64 convolution (stride 1, pad 1) at `batch` images of
/// `side` pixels by the halo probe (`benches/wgrad_halo.wgsl`: a row of taps in one workgroup,
/// a K step one 16-pixel row segment), for output tiles of 64 and 32 columns, one or two
/// buffers and several splits, each checked on sampled entries against an f64 sum; compare with the engine's
/// `3x3 64 weight grad` at the same `--side` and `--batch`.
fn probe_wgrad(device: &Device, batch: usize, side: usize, reps: usize) -> Result<()> {
    let (n, h, w, c, f) = (batch, side, side, 64usize, 64usize);
    // Sixteenths within a quarter: exact in f16, and each product exact in f32.
    let value = |i: usize, salt: usize| ((i * 7 + salt) % 9) as f32 / 16.0 - 0.25;
    let values = |len: usize, salt: usize| -> Vec<f32> { (0..len).map(|i| value(i, salt)).collect() };
    let x = device.upload_f16(&[n * h * w * c], &values(n * h * w * c, 3))?;
    let dy = device.upload_f16(&[n * h * w * f], &values(n * h * w * f, 5))?;
    let row_segs = w.div_ceil(16);
    let segs = n * h * row_segs;
    let flops = 2.0 * (n * h * w * 9 * c * f) as f64;
    for (nt, bufs) in [(64usize, 1usize), (64, 2), (32, 1), (32, 2)] {
        for want in [44usize, 88, 176, 352] {
            let per_split = segs.div_ceil(want);
            let splits = segs.div_ceil(per_split);
            let out = device.zeros(&[splits, 9 * c, f])?;
            let params: [u32; 8] = [n as u32, h as u32, w as u32, f as u32, segs as u32, per_split as u32, row_segs as u32, 0];
            let d = Dispatch::with_params(device, &HALO, "wgrad", &[("NT", nt as f64), ("BUFS", bufs as f64)], &params, &[(1, &x), (2, &dy), (3, &out)], [splits as u32, (f / nt) as u32, 3]);
            device.run(std::slice::from_ref(&d));
            device.sync()?;
            let got = device.read(&out)?;
            let mut worst: f64 = 0.0;
            for sample in 0..12 {
                let (tap, ci, co) = ((sample * 5) % 9, (sample * 23 + 7) % c, (sample * 41 + 3) % f);
                let (ky, kx) = (tap / 3, tap % 3);
                let (mut want_sum, mut scale) = (0.0f64, 0.0f64);
                for img in 0..n {
                    for y in 0..h {
                        let yy = y as isize + ky as isize - 1;
                        if yy < 0 || yy >= h as isize {
                            continue;
                        }
                        for xx0 in 0..w {
                            let xx = xx0 as isize + kx as isize - 1;
                            if xx < 0 || xx >= w as isize {
                                continue;
                            }
                            let xv = value(((img * h + yy as usize) * w + xx as usize) * c + ci, 3) as f64;
                            let dv = value(((img * h + y) * w + xx0) * f + co, 5) as f64;
                            want_sum += xv * dv;
                            scale += (xv * dv).abs();
                        }
                    }
                }
                let sum: f64 = (0..splits).map(|s| got[(s * 9 * c + tap * c + ci) * f + co] as f64).sum();
                worst = worst.max((sum - want_sum).abs() / scale.max(1e-30));
            }
            let all = vec![d; reps];
            let start = Instant::now();
            device.run(&all);
            device.sync()?;
            let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
            let verdict = if worst < 1e-5 { "ok" } else { "WRONG" };
            println!("probe halo wgrad 3x3 64 nt={nt:<2} bufs={bufs} splits={splits:<5} {ms:>9.3} ms {:>9.2} TFLOP/s  worst relative error {worst:.1e} {verdict}", flops / ms / 1e9);
        }
    }
    Ok(())
}

/// The comma-separated choices given to `flag` (`given`, its value), each one of `names`, or
/// `default` alone without the flag; an unknown one is an error naming the choices.
fn named_list<T: Copy>(given: Option<String>, flag: &str, names: &[(&str, T)], default: T) -> Result<Vec<T>> {
    let Some(list) = given else { return Ok(vec![default]) };
    let keys: Vec<&str> = names.iter().map(|&(name, _)| name).collect();
    let expected = match keys.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    list.split(',')
        .map(|t| {
            let t = t.trim();
            names.iter().find(|&&(name, _)| name == t).map(|&(_, v)| v).ok_or_else(|| convoy::Error::Config(format!("{flag} {t}: expected {expected}")))
        })
        .collect()
}

/// `BMxBN/SGMxSGN/BUFS/BK` (e.g. `256x64/64x64/1/16`), or `auto` for the engine's choice.
fn coop_tile(arg: &str) -> Option<Option<CoopTile>> {
    if arg == "auto" {
        return Some(None);
    }
    let numbers: Vec<usize> = arg.split(['x', '/']).map(|v| v.parse().ok()).collect::<Option<_>>()?;
    match numbers[..] {
        [bm, bn, sg_m, sg_n, bufs, bk] => Some(Some(CoopTile { bm, bn, sg_m, sg_n, bufs, bk })),
        _ => None,
    }
}

fn coop_name(tile: Option<CoopTile>) -> String {
    tile.map_or("auto".into(), |t| format!("{}x{}/{}x{}/{}/{}", t.bm, t.bn, t.sg_m, t.sg_n, t.bufs, t.bk))
}

/// The convolutions timed, ResNet's: name, input side as `--side` times a fraction (the
/// stems' images are four times it), input channels, filters, kernel, stride.
const CONVS: [(&str, (usize, usize), usize, usize, usize, usize); 23] = [
    ("stem 7x7/2", (4, 1), 3, 64, 7, 2),
    // The stem as mixed_float16 runs it: the image padded to 4 channels (a zero fourth), so
    // that its gathers read quads.
    ("stem 7x7/2 padded", (4, 1), 4, 64, 7, 2),
    ("3x3 64", (1, 1), 64, 64, 3, 1),
    ("3x3 128", (1, 2), 128, 128, 3, 1),
    ("3x3 256", (1, 4), 256, 256, 3, 1),
    ("3x3 512", (1, 8), 512, 512, 3, 1),
    // The first convolutions of stages 2-4, at stride 2: their input gradients are phase
    // products, a quarter of the rows each.
    ("3x3/2 64>128", (1, 1), 64, 128, 3, 2),
    ("3x3/2 128>256", (1, 2), 128, 256, 3, 2),
    ("3x3/2 256>512", (1, 4), 256, 512, 3, 2),
    // ResNet-50's bottleneck ends, where most of its products are.
    ("1x1 256>64", (1, 1), 256, 64, 1, 1),
    ("1x1 64>256", (1, 1), 64, 256, 1, 1),
    ("1x1 512>128", (1, 2), 512, 128, 1, 1),
    ("1x1 128>512", (1, 2), 128, 512, 1, 1),
    ("1x1 1024>256", (1, 4), 1024, 256, 1, 1),
    ("1x1 256>1024", (1, 4), 256, 1024, 1, 1),
    ("1x1 2048>512", (1, 8), 2048, 512, 1, 1),
    ("1x1 512>2048", (1, 8), 512, 2048, 1, 1),
    // ResNet-50's downsamples: input gradients whose odd phases meet no tap.
    ("1x1/2 256>512", (1, 1), 256, 512, 1, 2),
    ("1x1/2 512>1024", (1, 2), 512, 1024, 1, 2),
    ("1x1/2 1024>2048", (1, 4), 1024, 2048, 1, 2),
    // ResNet-50's strided 3x3 convolutions (torchvision's v1.5 bottleneck).
    ("3x3/2 128>128", (1, 1), 128, 128, 3, 2),
    ("3x3/2 256>256", (1, 2), 256, 256, 3, 2),
    ("3x3/2 512>512", (1, 4), 512, 512, 3, 2),
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let filter = args.iter().enumerate().find(|(i, a)| !a.starts_with("--") && (*i == 0 || !args[i - 1].starts_with("--"))).map(|(_, a)| a.clone());
    let splits: Vec<Option<usize>> = match value("--splits") {
        Some(s) => splits(&s),
        None => vec![None],
    };
    // `--flip on,off,auto`: the input gradients with the flipped kernel forced on or off
    // (`GemmOptions::flip`), beside the engine's choice.
    let flips: Vec<Option<bool>> = value("--flip").map_or(vec![None], |s| s.split(',').map(|f| match f.trim() { "on" => Some(true), "off" => Some(false), _ => None }).collect());
    // `--coop auto,128x64/64x32/2/32`: mixed products on these tensor-core tiles
    // (`GemmOptions::coop_tile`), beside the engine's choice.
    let coops: Vec<Option<CoopTile>> = match value("--coop") {
        Some(list) => list.split(',').map(|t| coop_tile(t.trim()).ok_or_else(|| convoy::Error::Config(format!("--coop {t}: expected BMxBN/SGMxSGN/BUFS/BK or auto")))).collect::<Result<_>>()?,
        None => vec![None],
    };
    // `--persist off,on`: mixed products with the tensor-core kernel's tile walk asked for or
    // not (`GemmOptions::persist`; the engine's own choice is off).
    let persists = named_list(value("--persist"), "--persist", &[("off", false), ("on", true)], false)?;
    // `--precision mixed`: the mixed runs alone, where a tile sweep learns nothing from the
    // float32 ones (both policies unless given).
    let policies = match value("--precision") {
        None => vec![false, true],
        given => named_list(given, "--precision", &[("float32", false), ("mixed", true)], true)?,
    };
    // `--stage auto,words,halves`: mixed products reading an f16 A with it staged as two
    // words or as f16 (`GemmOptions::a_stage`), beside the engine's choice.
    let stages = named_list(value("--stage"), "--stage", &[("auto", None), ("words", Some(AStage::Words)), ("halves", Some(AStage::Halves))], None)?;
    let selection = std::env::var("CONVOY_BENCH_DEVICES").unwrap_or_else(|_| "0".into());
    let device = convoy::device::open(&selection)?.remove(0);
    let software = device.is_software();
    // `--store f32,a16,a16c16`: convolutions on f32 or f16 activations (see `Store`).
    let stores = named_list(value("--store"), "--store", &[("f32", Store::F32), ("a16", Store::A16), ("a16c16", Store::A16C16), ("f16", Store::F16)], Store::F32)?;
    // The input gradients' storages: f16 under `f16`, f32 under the others.
    let grad_stores: Vec<Store> = [Store::F32, Store::F16].into_iter().filter(|&g| stores.iter().any(|&s| (s == Store::F16) == (g == Store::F16))).collect();
    let warm_s: f64 = match value("--warm") {
        Some(w) => w.parse::<f64>().ok().filter(|w| w.is_finite() && *w >= 0.0).ok_or_else(|| convoy::Error::Config(format!("--warm {w}: expected milliseconds, 0 or more")))? / 1e3,
        None => 0.03,
    };
    let reps: usize = value("--reps").and_then(|r| r.parse().ok()).unwrap_or(if software { 1 } else { 20 });
    let side_arg: Option<usize> = value("--side").map(|s| s.parse().map_err(|_| convoy::Error::Config(format!("--side {s}: expected a whole number of pixels, 8 or more")))).transpose()?;
    let batch_arg: Option<usize> = value("--batch").map(|s| s.parse().ok().filter(|&b| b > 0).ok_or_else(|| convoy::Error::Config(format!("--batch {s}: expected a whole number of images, 1 or more")))).transpose()?;
    let (batch, side, square) = if software { (2, 16, 256) } else { (batch_arg.unwrap_or(256), side_arg.unwrap_or(56), 4096) };
    if side < 8 {
        return Err(convoy::Error::Config(format!("--side {side}: the 512-channel stage at side / 8 needs 8 pixels or more")));
    }
    // The probes time kernels of their own, before the cases' operands are allocated.
    let (probe_plain, probe_wgrad_on) = (args.iter().any(|a| a == "--probe"), args.iter().any(|a| a == "--probe-wgrad"));
    if probe_plain || probe_wgrad_on {
        if !device.has_coop16() {
            println!("{}: no 16x16 f16 cooperative matrices, nothing to probe", device.name());
            return Ok(());
        }
        return if probe_wgrad_on { probe_wgrad(&device, batch, side, reps) } else { probe(&device, 4096, reps) };
    }
    // `--stats`: the forwards also write a training BatchNorm's statistics in their epilogue
    // (`conv2d::forward_statistics`), where the product runs unsplit.
    // `--fill`: the convolutions' operands hold values, not zeros (see `Setup`).
    let setup = Setup { stats: args.iter().any(|a| a == "--stats"), fill: args.iter().any(|a| a == "--fill"), filter: filter.clone() };
    let mut cases = vec![matmul_case(&device, square, square, square)?];
    for &(name, (num, den), channels, filters, kernel, stride) in CONVS.iter() {
        let at = side * num / den;
        let mut these = conv_cases(&device, name, [batch, at, at, channels], filters, kernel, stride, &setup)?;
        // The padded stem's useful FLOPs are the 3-channel product's.
        if channels == 4 {
            these.iter_mut().for_each(|c| c.flops *= 0.75);
        }
        cases.extend(these);
    }
    let peak = Peak::for_adapter(device.name());
    println!("device: {} ({}), {reps} repetitions", device.name(), device.backend());
    println!("{:<28} {:>9} {:>17} {:>9} {:>9} {:>6}  dispatches", "product", "precision", "split", "ms", "TFLOP/s", "peak%");
    // An idle GPU takes a while to reach its clocks: the first cases of a fresh machine ran
    // up to 2.7x slower than the same cases a minute later (H100). Half a second of the
    // square product first.
    let warm = (cases[0].record)(&device, &GemmOptions::default(), Store::F32)?;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 0.5 {
        device.run(&warm);
        device.sync()?;
    }
    // Every forced split where K is long; elsewhere only the unsplit product, since a split
    // of a short K multiplies the partial sums past what a binding holds.
    let short_k_splits: Vec<Option<usize>> = splits.iter().copied().filter(|s| s.is_none_or(|v| v == 1)).collect();
    for case in cases.iter().filter(|c| filter.as_ref().is_none_or(|f| c.name.contains(f.as_str()))) {
        for &mixed in &policies {
            let precision = if mixed { "mixed" } else { "float32" };
            let long_k = case.name.contains("weight grad") || case.name.starts_with("matmul");
            let sweep = if long_k { &splits[..] } else { &short_k_splits[..] };
            let flip_sweep = if case.name.contains("input grad") { &flips[..] } else { &[None] };
            let coop_sweep = if mixed { &coops[..] } else { &[None] };
            let variants = sweep.iter().flat_map(|s| flip_sweep.iter().map(move |f| (s, f)));
            // The forward and weight gradient read (or write) activations; the input
            // gradient reads and writes gradients alone (`grad_stores`).
            let store_sweep = if case.name.contains("forward") || case.name.contains("weight grad") { &stores[..] } else if case.name.starts_with("matmul") { &[Store::F32] } else { &grad_stores[..] };
            let stage_sweep = if mixed { &stages[..] } else { &[None] };
            let persist_sweep = if mixed { &persists[..] } else { &[false] };
            let variants: Vec<_> = variants
                .flat_map(|v| coop_sweep.iter().map(move |c| (v, c)))
                .flat_map(|v| store_sweep.iter().map(move |s| (v, *s)))
                .flat_map(|v| stage_sweep.iter().map(move |a| (v, *a)))
                .flat_map(|v| persist_sweep.iter().map(move |w| (v, *w)))
                .collect();
            for (((((&split, &flip), &coop), store), stage), persist) in variants {
                let opts = GemmOptions { mixed, splits: split, flip, coop_tile: coop, a_stage: stage, persist, ..Default::default() };
                let dispatches = match (case.record)(&device, &opts, store) {
                    // A flip forced where it cannot compute the product, a tile the kernel
                    // cannot run.
                    Err(e) if flip == Some(true) || coop.is_some() || stage.is_some() => {
                        println!("{:<28} {precision:>9} {} {e}", case.name, coop_name(coop));
                        continue;
                    }
                    other => other?,
                };
                // Each variant's pipelines are built before it runs, the GPU idle meanwhile:
                // a single warm-up run left some first variants timed at a third of their
                // speed (H100, benches/results/2026-11-27g/call1). 30 ms of it first, or `--warm`:
                // a long sweep's later variants ran up to 3x slower than the same pipeline timed
                // first (H200, benches/results/2026-12-03/call19).
                let warm = Instant::now();
                while warm.elapsed().as_secs_f64() < warm_s {
                    device.run(&dispatches);
                    device.sync()?;
                }
                let all: Vec<_> = std::iter::repeat_n(dispatches.iter().cloned(), reps).flatten().collect();
                let start = Instant::now();
                device.run(&all);
                device.sync()?;
                let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
                let tflops = case.flops / ms / 1e9;
                let of_peak = peak.as_ref().map_or(f64::NAN, |p| 100.0 * tflops / if mixed { p.tensor_tflops } else { p.tflops });
                let split = match (split, flip, coop) {
                    (Some(s), _, _) => s.to_string(),
                    (None, Some(f), _) => format!("flip={}", if f { "on" } else { "off" }),
                    (None, None, Some(_)) => coop_name(coop),
                    (None, None, None) => "auto".to_string(),
                };
                let split = if stores.len() > 1 { format!("{split} {store:?}") } else { split };
                let split = if stages.len() > 1 { format!("{split} {}", stage.map_or("auto".to_string(), |s| format!("{s:?}"))) } else { split };
                let split = if mixed && persists.len() > 1 { format!("{split} {}", if persist { "walk" } else { "nowalk" }) } else { split };
                let paths: Vec<&str> = dispatches.iter().map(|d| d.path.as_str()).collect();
                println!("{:<28} {precision:>9} {split:>17} {ms:>9.3} {tflops:>9.2} {of_peak:>6.1}  {}", case.name, paths.join(" | "));
            }
        }
    }
    Ok(())
}
