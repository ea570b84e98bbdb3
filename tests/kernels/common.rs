//! Shared by the kernel tests: one device per test binary, seeded random inputs, and the
//! error measure every kernel is held to.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use convoy::device::ShaderChecks;
use convoy::kernels::Dispatch;
use convoy::{Device, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Relative error every f32 kernel must stay under against its f64 reference.
pub const TOL: f64 = 1e-4;

/// The devices the tests run on, one per shader variant (checked, then the unchecked
/// shaders release builds ship): `CONVOY_TEST_DEVICE` (a selection such as `0`) or the
/// software adapter, so CI needs no GPU.
pub fn devices() -> [Arc<Device>; 2] {
    static DEVICES: OnceLock<[Arc<Device>; 2]> = OnceLock::new();
    let devices = DEVICES
        .get_or_init(|| {
            // tests/gl.rs runs a slice of these files on the GL backend (llvmpipe through EGL).
            if env!("CARGO_CRATE_NAME") == "gl" {
                convoy::device::adapters::set_backend("gl").unwrap();
            }
            // tests/portable.rs: WebGPU's default limits, as CONVOY_LIMITS=webgpu.
            if env!("CARGO_CRATE_NAME") == "portable" {
                convoy::device::use_portable_limits();
            }
            let sel = test_selection().unwrap_or_else(|| "software".into());
            [ShaderChecks::Checked, ShaderChecks::Unchecked].map(|c| convoy::device::open_with(&sel, c).expect("a test device").remove(0))
        })
        .clone();
    // On GL one test at a time: tests/gl.rs, and the software selection without lavapipe (no
    // Vulkan adapter at all), which falls back to GL (six tests panicked on the context lock
    // on a machine without mesa-vulkan-drivers, session 35).
    if devices[0].backend() == "Gl" {
        hold_the_gl_context();
    }
    devices
}

/// On the GL backend one test at a time: wgpu-hal's GL device waits at most 6 s for the
/// adapter's context lock and then panics ("Could not lock adapter context"), which two
/// tests sharing the context hit on a loaded 2-core machine (a release build beside the
/// suite, twice in session 24). The first call on a test thread takes a process-wide lock
/// and keeps it in a thread-local until the thread (the test) ends; no test of the GL slice
/// spawns threads of its own.
fn hold_the_gl_context() {
    static GL: Mutex<()> = Mutex::new(());
    thread_local! {
        static HELD: RefCell<Option<MutexGuard<'static, ()>>> = const { RefCell::new(None) };
    }
    HELD.with(|h| {
        if h.borrow().is_none() {
            // A test that panicked holding it poisons nothing this lock guards.
            *h.borrow_mut() = Some(GL.lock().unwrap_or_else(|e| e.into_inner()));
        }
    });
}

/// `CONVOY_TEST_DEVICE`, when a real adapter was asked for.
pub fn test_selection() -> Option<String> {
    std::env::var("CONVOY_TEST_DEVICE").ok().filter(|s| !s.trim().is_empty())
}

thread_local! {
    /// The device this test thread's helpers use; [`on_each_variant`] switches it.
    static CURRENT: RefCell<Option<Arc<Device>>> = const { RefCell::new(None) };
    /// Path labels of every dispatch [`run`] encoded on this thread, since [`take_paths`].
    static PATHS: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// The device of this test thread: the checked one unless [`on_each_variant`] picked.
pub fn device() -> Arc<Device> {
    CURRENT.with(|c| c.borrow().clone()).unwrap_or_else(|| devices()[0].clone())
}

/// Runs `f` once on the checked and once on the unchecked device, with every helper of
/// this module bound to that device; `f` gets the variant's name for its messages. The
/// variant is printed too: a test whose messages do not name it still shows it in the
/// captured output of its failure.
pub fn on_each_variant(mut f: impl FnMut(&str)) {
    for d in devices() {
        let name = if d.is_checked() { "checked" } else { "unchecked" };
        println!("on the {name} shaders:");
        on_device(d, || f(name));
    }
}

/// [`on_each_variant`] for the sweeps whose time is compiling pipelines (a new variant of a
/// kernel is 0.3-0.6 s of LLVM on lavapipe, and these take hundreds): both variants on a GPU,
/// the unchecked shaders alone on a software adapter. lavapipe bounds-checks every storage
/// access itself, checked or not (a read past a binding gives 0, a write past it is dropped:
/// a probe in session 15), so there the checked shaders compute what the unchecked ones do,
/// and running both only doubled these tests (the mixed-products sweep 150 s from a cold
/// shader cache). The convolution, Winograd and matmul family tests are such sweeps too
/// (every case on both engines: 150 s of a cold suite's 320 on lavapipe); the other family
/// tests run both variants everywhere.
pub fn on_sweep_variants(mut f: impl FnMut(&str)) {
    if devices()[0].is_software() {
        println!("on the unchecked shaders (the software adapter bounds-checks both alike):");
        on_device(devices()[1].clone(), || f("unchecked"));
    } else {
        on_each_variant(f);
    }
}

/// Runs `f` with this thread's helpers bound to `device` (the large sweeps use the
/// unchecked one alone: what ships, and half the time on the software adapter).
pub fn on_device(device: Arc<Device>, f: impl FnOnce()) {
    CURRENT.with(|c| *c.borrow_mut() = Some(device));
    f();
    CURRENT.with(|c| *c.borrow_mut() = None);
}

/// The path labels [`run`] saw on this thread since the last call.
pub fn take_paths() -> BTreeSet<String> {
    PATHS.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Asserts that for every `(entry, token)` of `expected` some taken path of that entry
/// point carries the token. `gpu_only` pairs are required as well on a real adapter
/// (`CONVOY_TEST_DEVICE`); on the software adapter, whose storage bindings stop at 128 MiB,
/// they are printed as skipped.
#[track_caller]
pub fn assert_paths_cover(family: &str, taken: &BTreeSet<String>, expected: &[(&str, String)], gpu_only: &[(&str, String)]) {
    let hit = |entry: &str, token: &str| {
        taken.iter().any(|p| {
            let mut t = p.split_whitespace();
            t.next() == Some(entry) && t.any(|x| x == token)
        })
    };
    let on_gpu = test_selection().is_some();
    let mut missing: Vec<String> = expected.iter().filter(|(e, t)| !hit(e, t)).map(|(e, t)| format!("{e} {t}")).collect();
    for (e, t) in gpu_only {
        if on_gpu && !hit(e, t) {
            missing.push(format!("{e} {t} (GPU sweep)"));
        } else if !on_gpu {
            println!("{family}: path `{e} {t}` needs a GPU (CONVOY_TEST_DEVICE): skipped on the software adapter");
        }
    }
    assert!(missing.is_empty(), "{family}: paths the code can take but the sweep never took: {missing:?}\ntaken: {taken:#?}");
}
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in [-1, 1).
pub fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

pub fn upload(data: &[f32], shape: &[usize]) -> Tensor {
    device().upload(shape, data).unwrap()
}

/// Runs `dispatches` on this thread's device and waits; records their path labels.
pub fn run(dispatches: &[Dispatch]) {
    PATHS.with(|p| p.borrow_mut().extend(dispatches.iter().map(|d| d.path.clone())));
    let d = device();
    d.run(dispatches);
    d.sync().unwrap();
}

pub fn read(t: &Tensor) -> Vec<f32> {
    device().read(t).unwrap()
}

/// `v` rounded to f16 and widened back: what an f16 tensor uploaded from `v` holds, so the
/// f64 references of the f16 kernels start from the very values the kernels read.
pub fn to_half(v: f32) -> f32 {
    convoy::device::half::f16_value(convoy::device::half::f16_bits(v))
}

/// [`random`] rounded to f16 ([`to_half`]).
pub fn random_half(rng: &mut StdRng, n: usize) -> Vec<f32> {
    random(rng, n).into_iter().map(to_half).collect()
}

/// An f16 tensor of `data` rounded to f16.
pub fn upload_f16(data: &[f32], shape: &[usize]) -> Tensor {
    device().upload_f16(shape, data).unwrap()
}

/// A tensor of `data` stored as f16 where `f16` (rounded), else as f32.
pub fn stored(data: &[f32], shape: &[usize], f16: bool) -> Tensor {
    if f16 { upload_f16(data, shape) } else { upload(data, shape) }
}

/// A tensor read back as [`stored`] stored it, widened to f32.
pub fn read_as(t: &Tensor, f16: bool) -> Vec<f32> {
    if f16 { read_f16(t) } else { read(t) }
}

/// An f16 tensor read back, widened to f32.
pub fn read_f16(t: &Tensor) -> Vec<f32> {
    device().read_f16(t).unwrap()
}

/// Asserts each element of an f16 result is within one f16 rounding of `want`: at most
/// 2^-11 of |want| (half an f16 ulp), widened by 2^-10 of itself for the f32 rounding the
/// kernel may do first, plus `slack` for values where the relative bound says nothing
/// (f16 subnormals, rounded to 2^-24 steps; a long f32 sum cancelling to near zero).
/// Returns the largest error in units of that bound.
#[track_caller]
pub fn assert_close_f16(case: &str, got: &[f32], want: &[f64], slack: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{case}: length mismatch");
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(g.is_finite(), "{case}: element {i} is {g}, expected {w}");
        let bound = w.abs() * (2f64.powi(-11) * (1.0 + 2f64.powi(-10))) + slack;
        let e = (g as f64 - w).abs() / bound;
        assert!(e <= 1.0, "{case}: element {i} is {g}, expected {w} (error {:.3e} > {bound:.3e})", (g as f64 - w).abs());
        worst = worst.max(e);
    }
    worst
}

/// Max-norm relative error: `max |got - want| / max |want|`. Element-wise relative error is
/// meaningless where a long sum cancels to near zero; this is the measure cuDNN's and
/// PyTorch's own kernel tests use for reductions.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs())) / scale
}

/// Asserts `got` matches `want` within [`TOL`], naming the case, and returns the error.
#[track_caller]
pub fn assert_close(case: &str, got: &[f32], want: &[f64]) -> f64 {
    assert!(got.iter().all(|g| g.is_finite()), "{case}: non-finite output");
    let e = rel_err(got, want);
    assert!(e < TOL, "{case}: relative error {e:.3e} >= {TOL:e}");
    e
}

/// Options that run `engine`'s GEMM kernel whatever the device would choose: the tests
/// reach the tiled and the CPU kernel on any adapter.
pub fn on(engine: convoy::kernels::gemm::Engine) -> convoy::kernels::gemm::GemmOptions {
    convoy::kernels::gemm::GemmOptions { engine: Some(engine), ..Default::default() }
}

/// The GEMM tiles this thread's device has the workgroup memory for: every one with the
/// adapter's own limits, the 64-row and smaller ones with WebGPU's defaults
/// (tests/portable.rs).
pub fn tiles() -> Vec<convoy::kernels::gemm::Tile> {
    let limit = device().limits().max_compute_workgroup_storage_size as usize;
    convoy::kernels::gemm::Tile::ALL.into_iter().filter(|t| t.workgroup_bytes() <= limit).collect()
}

/// The first and last of [`tiles`] (256 invocations of 8 x 4 outputs, 64 of 4 x 4): the tile
/// sweeps take two cases through every tile and their other cases, whose gathers the two
/// already take, through these ends only. Each tile beside each case is a pipeline of its
/// own, 0.3-0.6 s of LLVM on the software adapter, and every case through every tile had
/// made the two sweeps 160 s of a cold shader cache.
pub fn tile_ends() -> Vec<convoy::kernels::gemm::Tile> {
    let all = tiles();
    all.first().into_iter().chain(all.last()).copied().collect()
}

/// The tiles a sweep takes a case through: every one of [`tiles`] where `every`, else the
/// two ends ([`tile_ends`]). The GL slice (tests/gl.rs) takes the ends for every case: its one
/// GL context compiles and runs on one thread, and the GLSL of every variant the suite
/// builds is compiled by glslang in tests/translate.rs.
pub fn sweep_tiles(every: bool) -> Vec<convoy::kernels::gemm::Tile> {
    if every && env!("CARGO_CRATE_NAME") != "gl" {
        tiles()
    } else {
        tile_ends()
    }
}
