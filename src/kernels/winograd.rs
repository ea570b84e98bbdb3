//! Winograd convolution F(m x m, 3 x 3) (`shaders/winograd.wgsl`): the forward and the input
//! gradient of a unit-stride 3x3 convolution with a quarter (m = 4) or 4/9 (m = 2) of the
//! direct convolution's multiplies, as cuDNN computes PyTorch's float32 ResNets.
//!
//! Four dispatches: the kernel and the image are transformed into (m + 2)^2 matrices each,
//! the engine's grouped GEMM multiplies the matching pairs (one product per point of the
//! transformed tile, summing over the input channels), and the output transform turns each
//! tile's products back into m x m pixels. The transformed tiles live in the device's shared
//! scratch (`Device::scratch`), not in the plan: every Winograd convolution of every plan on a
//! device reuses the same memory.
//!
//! The input gradient of a 3x3 unit-stride convolution is itself one: dx is dy convolved with
//! the kernel flipped in both axes and its channels swapped, over a padding of `2 - pad`
//! (`conv2d::flipped_geometry`).

use super::conv2d::{flipped_geometry, Conv2dGeometry};
use super::gemm::{self, ALoad, BLoad, Gemm, GemmOptions, Groups};
use super::{grid_for, u32_of, Dispatch, WG_CONST, WINOGRAD};
use crate::{bail, Device, Result, Tensor};

/// Channels (input and output) from which the engine prefers Winograd to the direct GEMM:
/// below, the transformed GEMMs are too short in K to run at the direct one's rate.
const MIN_CHANNELS: usize = 32;

/// The tile the engine uses: F(4x4, 3x3).
const DEFAULT_M: usize = 4;

/// Lavin and Gray's matrices of F(m, 3), row-major: B^T (alpha x alpha), G (alpha x 3) and
/// A^T (m x alpha), alpha = m + 2. `shaders/winograd.wgsl` holds the same numbers.
pub(crate) fn matrices(m: usize) -> (&'static [f64], &'static [f64], &'static [f64]) {
    const BT2: [f64; 16] = [1., 0., -1., 0., 0., 1., 1., 0., 0., -1., 1., 0., 0., 1., 0., -1.];
    const G2: [f64; 12] = [1., 0., 0., 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0., 0., 1.];
    const AT2: [f64; 8] = [1., 1., 1., 0., 0., 1., -1., -1.];
    const BT4: [f64; 36] = [
        4., 0., -5., 0., 1., 0.,
        0., -4., -4., 1., 1., 0.,
        0., 4., -4., -1., 1., 0.,
        0., -2., -1., 2., 1., 0.,
        0., 2., -1., -2., 1., 0.,
        0., 4., 0., -5., 0., 1.,
    ];
    const G4: [f64; 18] = [
        0.25, 0., 0.,
        -1. / 6., -1. / 6., -1. / 6.,
        -1. / 6., 1. / 6., -1. / 6.,
        1. / 24., 1. / 12., 1. / 6.,
        1. / 24., -1. / 12., 1. / 6.,
        0., 0., 1.,
    ];
    const AT4: [f64; 24] = [
        1., 1., 1., 1., 1., 0.,
        0., 1., -1., 2., -2., 0.,
        0., 1., 1., 4., 4., 0.,
        0., 1., -1., 8., -8., 1.,
    ];
    if m == 2 { (&BT2, &G2, &AT2) } else { (&BT4, &G4, &AT4) }
}

/// Scratch slots of `Device::scratch`: transformed image, transformed kernel, products.
const SLOT_INPUT: usize = 0;
const SLOT_KERNEL: usize = 1;
const SLOT_PRODUCTS: usize = 2;

/// Which direction of the convolution a plan computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// y from x and w.
    Forward,
    /// dx from dy and w.
    BackwardData,
}

/// One Winograd convolution: the image it reads, the image it writes and where the written
/// image's windows start over the read one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub batch: usize,
    /// (height, width, channels) of the source and of the destination.
    pub src: (usize, usize, usize),
    pub dst: (usize, usize, usize),
    pub pad: (usize, usize),
    pub m: usize,
}

impl Plan {
    pub fn new(geom: &Conv2dGeometry, pass: Pass, m: usize) -> Plan {
        match pass {
            Pass::Forward => Plan {
                batch: geom.batch,
                src: (geom.in_h, geom.in_w, geom.in_c),
                dst: (geom.out_h, geom.out_w, geom.filters),
                pad: (geom.pad_top, geom.pad_left),
                m,
            },
            // Only for `computable` convolutions, whose input gradient has a flipped geometry.
            Pass::BackwardData => Plan::new(&flipped_geometry(geom).expect("Winograd plans computable convolutions"), Pass::Forward, m),
        }
    }
    fn alpha2(&self) -> usize {
        (self.m + 2) * (self.m + 2)
    }
    /// Tiles along the destination's height and width, and in all.
    pub fn tiles(&self) -> (usize, usize, usize) {
        let (th, tw) = (self.dst.0.div_ceil(self.m), self.dst.1.div_ceil(self.m));
        (th, tw, self.batch * th * tw)
    }
    /// Floats of the transformed image, kernel and products.
    fn scratch_floats(&self) -> [usize; 3] {
        let (t, k, n) = (self.tiles().2, self.src.2, self.dst.2);
        [self.alpha2() * t * k, self.alpha2() * k * n, self.alpha2() * t * n]
    }
}

/// Whether Winograd can compute `geom`'s forward and input gradient: a 3x3 kernel whose
/// input gradient is again a forward convolution (stride 1, undilated, one group, padding at
/// most 2: see `conv2d::flipped_geometry`).
fn computable(geom: &Conv2dGeometry) -> bool {
    (geom.kh, geom.kw) == (3, 3) && flipped_geometry(geom).is_some()
}

/// The tile size m to compute `pass` of `geom` with, or None for the direct GEMM. The engine
/// takes F(4x4, 3x3) for float32 products of at least [`MIN_CHANNELS`] channels (a multiple
/// of 4, for the GEMM's vec4 loads) whose scratch fits in a binding; `opts.winograd` forces
/// either way. The mixed_float16 policy keeps the direct product: the transforms' growth
/// (up to 100x for F(4x4)) would cost f16 operands their precision.
pub(crate) fn choose(device: &Device, geom: &Conv2dGeometry, pass: Pass, opts: &GemmOptions) -> Result<Option<usize>> {
    let fits = |m: usize| {
        let max = device.limits().max_storage_buffer_binding_size;
        Plan::new(geom, pass, m).scratch_floats().iter().all(|&f| (f as u64).saturating_mul(4) <= max && f <= u32::MAX as usize)
    };
    match opts.winograd {
        Some(0) => Ok(None),
        Some(m) => {
            if m != 2 && m != 4 {
                bail!(Config, "conv2d: Winograd tile {m} is not one of 2 and 4");
            }
            if opts.mixed || !computable(geom) {
                bail!(Config, "conv2d: Winograd F({m}x{m}, 3x3) cannot compute {geom:?} (mixed={}): it takes float32 3x3 unit-stride convolutions, undilated, ungrouped, padding at most 2", opts.mixed);
            }
            if !fits(m) {
                bail!(Shape, "conv2d: Winograd F({m}x{m}, 3x3) of {geom:?} needs more working memory than one binding of {} holds", device.name());
            }
            Ok(Some(m))
        }
        None => Ok(automatic(geom, opts.mixed)?.filter(|&m| fits(m))),
    }
}

/// The engine's own choice before the device's binding size is consulted: F(4x4, 3x3) for a
/// float32 convolution Winograd can compute with at least [`MIN_CHANNELS`] input and output
/// channels, each a multiple of 4 (the GEMM's vec4 loads); `CONVOY_WINOGRAD` may say otherwise. The
/// f64 check's plain-f32 model follows it too.
pub(crate) fn automatic(geom: &Conv2dGeometry, mixed: bool) -> Result<Option<usize>> {
    let wide = |c: usize| c >= MIN_CHANNELS && c.is_multiple_of(4);
    let on = !mixed && computable(geom) && wide(geom.in_c) && wide(geom.filters);
    Ok(if on { env_tile()? } else { None })
}

/// `CONVOY_WINOGRAD`: `off` keeps every convolution on the direct GEMM (as
/// `torch.backends.cudnn` flags do for cuDNN's algorithms), for comparing results or speed;
/// `2` or `4` picks the tile where the engine takes Winograd; unset or `on`, F(4x4).
fn env_tile() -> Result<Option<usize>> {
    match std::env::var("CONVOY_WINOGRAD").as_deref() {
        Err(_) | Ok("") | Ok("on") | Ok("4") => Ok(Some(DEFAULT_M)),
        Ok("2") => Ok(Some(2)),
        Ok("off") => Ok(None),
        Ok(other) => bail!(Config, "CONVOY_WINOGRAD={other:?}: expected `on`, `off`, `2` or `4`"),
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    src_h: u32,
    src_w: u32,
    src_c: u32,
    dst_h: u32,
    dst_w: u32,
    dst_c: u32,
    pad_top: u32,
    pad_left: u32,
    tiles_h: u32,
    tiles_w: u32,
    tiles: u32,
    k: u32,
    n: u32,
    flip: u32,
    _pad: u32,
}

/// Records `pass` of `geom` with F(m x m, 3 x 3): `src` is x (forward) or dy, `w` the
/// kernel `[3, 3, in_c, filters]`, `dst` y or dx (overwritten). The GEMM is labelled
/// `kernel` and carries the direct convolution's useful flops; the transforms count none.
pub(crate) fn convolve(device: &Device, kernel: &'static str, geom: &Conv2dGeometry, pass: Pass, m: usize, src: &Tensor, w: &Tensor, dst: &Tensor, opts: &GemmOptions) -> Result<Vec<Dispatch>> {
    let plan = Plan::new(geom, pass, m);
    let (tiles_h, tiles_w, tiles) = plan.tiles();
    let (k, n) = (plan.src.2, plan.dst.2);
    let u = |what, v| u32_of(kernel, what, v);
    let p = Params {
        batch: u("batch", plan.batch)?,
        src_h: u("source height", plan.src.0)?,
        src_w: u("source width", plan.src.1)?,
        src_c: u("source channels", k)?,
        dst_h: u("destination height", plan.dst.0)?,
        dst_w: u("destination width", plan.dst.1)?,
        dst_c: u("destination channels", n)?,
        pad_top: plan.pad.0 as u32,
        pad_left: plan.pad.1 as u32,
        tiles_h: u("tile rows", tiles_h)?,
        tiles_w: u("tile columns", tiles_w)?,
        tiles: u("tiles", tiles)?,
        k: u("k", k)?,
        n: u("n", n)?,
        flip: (pass == Pass::BackwardData) as u32,
        _pad: 0,
    };
    // The source and destination images index up to every element (u32 in the shader).
    u("source elements", plan.batch * plan.src.0 * plan.src.1 * k)?;
    u("destination elements", plan.batch * plan.dst.0 * plan.dst.1 * n)?;
    let [v_len, u_len, m_len] = plan.scratch_floats();
    let (v, uw, mm) = (device.scratch(SLOT_INPUT, v_len)?, device.scratch(SLOT_KERNEL, u_len)?, device.scratch(SLOT_PRODUCTS, m_len)?);
    let constants = [("M_OUT", m as f64), WG_CONST];
    let token = format!("m={m} {}", if pass == Pass::BackwardData { "flip" } else { "" });
    let transform = |entry: &'static str, from: &Tensor, to: &Tensor, count: usize| -> Result<Dispatch> {
        let groups = grid_for(device, count)?;
        Ok(Dispatch::with_params(device, &WINOGRAD, entry, &constants, &p, &[(1, from), (2, to)], groups).named(kernel, 0.0).tagged(&token))
    };
    // The CPU engine's F(4x4) transforms take four channels an invocation where they divide
    // by 4 (see the shader's `input4`).
    let quads = m == 4 && gemm::Engine::of(device, opts, kernel)? == gemm::Engine::Cpu;
    let per_pixel = |entry: &'static str, entry4: &'static str, from: &Tensor, to: &Tensor, channels: usize| -> Result<Dispatch> {
        if !(quads && channels.is_multiple_of(4)) {
            return Ok(transform(entry, from, to, tiles * channels)?.tagged("scalar"));
        }
        let groups = grid_for(device, tiles * channels / 4)?;
        Ok(Dispatch::with_params(device, &WINOGRAD, entry4, &constants, &p, &[(3, from), (4, to)], groups).named(kernel, 0.0).tagged(format!("{token} vec4")))
    };
    let mut all = vec![transform("weights", w, &uw, k * n)?, per_pixel("input", "input4", src, &v, k)?];
    let a2 = plan.alpha2();
    let g = Gemm {
        label: kernel,
        m: tiles,
        n,
        k,
        a_load: ALoad::Rows,
        b_load: BLoad::Rows,
        conv: None,
        phase: None,
        // Point j of the transformed tile: V[j] [tiles, k], U[j] [k, n], M[j] [tiles, n].
        groups: Some(Groups { count: a2, a: (k, tiles * k), b: (n, k * n), c: (n, tiles * n) }),
        a: &v,
        b: &uw,
        bias: None,
        c: &mm,
        stats: None,
        a_norm: None,
        join: None,
        flops: geom.flops() as f64,
    };
    let product = GemmOptions { winograd: None, ..*opts };
    all.extend(gemm::launch(device, &g, &product)?.into_iter().map(|d| d.tagged("winograd")));
    all.push(per_pixel("output", "output4", &mm, dst, n)?);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::matrices;

    /// F(m, 3) in one dimension, in f64: A^T [(G g) . (B^T d)] is the correlation of d with g.
    #[test]
    fn matrices_compute_the_correlation() {
        for m in [2, 4] {
            let a = m + 2;
            let (bt, g, at) = matrices(m);
            let d: Vec<f64> = (0..a).map(|i| (i as f64 * 0.37 - 0.5).sin()).collect();
            let k = [0.3, -1.1, 0.7];
            let gk: Vec<f64> = (0..a).map(|x| (0..3).map(|r| g[x * 3 + r] * k[r]).sum()).collect();
            let bd: Vec<f64> = (0..a).map(|x| (0..a).map(|r| bt[x * a + r] * d[r]).sum()).collect();
            for i in 0..m {
                let y: f64 = (0..a).map(|x| at[i * a + x] * gk[x] * bd[x]).sum();
                let want: f64 = (0..3).map(|r| d[i + r] * k[r]).sum();
                assert!((y - want).abs() < 1e-12, "F({m}, 3) output {i}: {y} vs {want}");
            }
        }
    }
}
