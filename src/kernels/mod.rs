//! The Rust side of each WGSL kernel family: parameters, shape validation and dispatch.
//!
//! Conventions shared by every kernel (and written down once, here):
//! - Tensors are NHWC f32, densely packed; conv kernels are `[kh, kw, in, filters]`, dense
//!   kernels `[in, out]`; labels are u32; images arrive as u8 NHWC.
//! - Group 0 holds the bindings: `@binding(0)` is the kernel's uniform parameters, inputs
//!   follow, outputs come last.
//! - Element-wise kernels run `WG` invocations per workgroup over a linear index; grids larger
//!   than the per-dimension limit are folded into 2-D by [`grid`], and the shader rebuilds the
//!   linear workgroup index as `wid.x + wid.y * nwg.x`.
//! - Every wrapper validates shapes on the host and returns [`Dispatch`]es; nothing runs
//!   until a plan (or `Device::run`) encodes them, so a compiled step replays without
//!   allocating.

pub mod activation;
pub mod cast;
pub mod augment;
pub mod batchnorm;
pub mod concat;
pub mod conv2d;
pub mod dense;
pub mod depthwise;
pub mod elementwise;
pub mod gemm;
pub(crate) mod gemm_cpu;
pub mod image;
pub mod layernorm;
pub mod loss;
pub mod loss_scale;
pub mod optimizer;
pub mod pool;
pub mod reduce;
pub mod winograd;

use crate::device::Device;
use crate::{bail, Result};

/// Invocations per workgroup of the linear (element-wise and reduction) kernels; passed to
/// every shader as the override constant `WG`.
pub const WG: u32 = 256;

/// A WGSL source, compiled once per device and content.
///
/// Devices cache modules and pipelines by the source text, not the name, so a user's shader
/// named like a built-in one still runs its own code. A shader built with [`Shader::new`]
/// keeps wgpu's runtime bounds checks on every device; only convoy's own shaders, and those
/// a caller vouches for with the `unsafe` [`Shader::new_unchecked`], compile without them in
/// release builds (see [`crate::device::ShaderChecks`]).
#[derive(Clone, Copy, Debug)]
pub struct Shader {
    /// A name for labels, profiles and messages (convoy's own: the file under `shaders/`,
    /// then `+f16`, `+a16`, `+c16` for a variant storing activations as f16).
    pub name: &'static str,
    /// The WGSL text.
    pub source: &'static str,
    /// Whether the source's indexing was validated on the host, so release builds may drop
    /// the runtime bounds checks.
    trusted: bool,
}

impl Shader {
    /// A user's shader: compiled with wgpu's runtime bounds checks on every device, so an
    /// indexing bug reads zeros or is discarded instead of touching memory it does not own.
    pub const fn new(name: &'static str, source: &'static str) -> Shader {
        Shader { name, source, trusted: false }
    }

    /// A shader compiled without runtime bounds checks wherever the device compiles convoy's
    /// own that way (release builds, unless `CONVOY_CHECKED=1`): up to 8.6x faster on
    /// indexing-heavy kernels (shared/gpu-facts.md).
    ///
    /// # Safety
    /// Every index the shader computes into a storage or workgroup array must be in range for
    /// every dispatch it is given: its wrapper validates the shapes and grid on the host, and
    /// the shader guards each invocation against the sizes it receives. An out-of-range access
    /// in such a shader is undefined behaviour on the GPU (wrong results elsewhere, a lost
    /// device), which no safe API of convoy can then contain.
    pub const unsafe fn new_unchecked(name: &'static str, source: &'static str) -> Shader {
        Shader { name, source, trusted: true }
    }

    /// The file under `shaders/` the module is built from: the name without a storage
    /// variant's suffix (`conv2d.wgsl+a16` is `conv2d.wgsl`).
    pub fn file(&self) -> &'static str {
        self.name.split('+').next().unwrap_or(self.name)
    }

    /// Whether the source may compile without runtime bounds checks.
    pub fn is_trusted(&self) -> bool {
        self.trusted
    }
}

/// `shaders/lib/NAME` for each name: WGSL has no includes, so a file's helpers are
/// prepended to it.
macro_rules! libs {
    ($($lib:literal),*) => { concat!($(include_str!(concat!("../../shaders/lib/", $lib))),*) };
}

macro_rules! shader {
    ($ident:ident, $file:literal) => {
        shader!($ident, $file, []);
    };
    // A file with helper files of shaders/lib/ prepended, in order.
    ($ident:ident, $file:literal, [$($lib:literal),*]) => {
        #[doc = concat!("`shaders/", $file, "`", $(" with `shaders/lib/", $lib, "`",)* ".")]
        pub const $ident: Shader = Shader { name: $file, source: concat!(libs!($($lib),*), include_str!(concat!("../../shaders/", $file))), trusted: true };
    };
}

/// A kernel file that binds activations through `shaders/lib/act_f32.wgsl`'s names, compiled
/// for both storages: `[f32, f16]` (see [`Storage`]).
macro_rules! storage_pair {
    ($ident:ident, $name:literal, [$($lib:literal),*], [$($file:literal),+]) => {
        #[doc = concat!($(" `shaders/", $file, "`",)+ " for activations stored as f32 and as f16 (`shaders/lib/act_f32.wgsl`, `act_f16.wgsl`).")]
        pub const $ident: [Shader; 2] = [
            Shader { name: $name, source: concat!(libs!("half.wgsl", "act_f32.wgsl" $(, $lib)*) $(, include_str!(concat!("../../shaders/", $file)))+), trusted: true },
            Shader { name: concat!($name, "+f16"), source: concat!(libs!("half.wgsl", "act_f16.wgsl" $(, $lib)*) $(, include_str!(concat!("../../shaders/", $file)))+), trusted: true },
        ];
    };
}

/// A GEMM module (conv2d.wgsl and what follows it) for each storage of A, C and B, indexed
/// `[a_f16 as usize + 2 * c_f16 as usize + 4 * b_f16 as usize]`: A through
/// `shaders/lib/act_*.wgsl`, B through `shaders/lib/b_*.wgsl`, C through
/// `shaders/lib/c_*.wgsl`; the bias and the split partials are always f32.
macro_rules! gemm_family {
    ($ident:ident, $name:literal, $prefix:literal $(, $tail:literal)?) => {
        gemm_family!($ident, $name, $prefix, "act_f16.wgsl", "b_f16.wgsl" $(, $tail)?);
    };
    // The f16 operands' files, A's (`$a16`) and B's (`$b16`); see CONV2D_COOP_ALL.
    ($ident:ident, $name:literal, $prefix:literal, $a16:literal, $b16:literal $(, $tail:literal)?) => {
        #[doc = concat!("`shaders/conv2d.wgsl`", $(" + `shaders/", $tail, "`",)? " for each storage of A, B and C.")]
        pub const $ident: [Shader; 8] = [
            gemm_family!(@one $name, $prefix, "act_f32.wgsl", "b_f32.wgsl", "c_f32.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+a16"), $prefix, $a16, "b_f32.wgsl", "c_f32.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+c16"), $prefix, "act_f32.wgsl", "b_f32.wgsl", "c_f16.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+a16+c16"), $prefix, $a16, "b_f32.wgsl", "c_f16.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+b16"), $prefix, "act_f32.wgsl", $b16, "c_f32.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+a16+b16"), $prefix, $a16, $b16, "c_f32.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+b16+c16"), $prefix, "act_f32.wgsl", $b16, "c_f16.wgsl" $(, $tail)?),
            gemm_family!(@one concat!($name, "+a16+b16+c16"), $prefix, $a16, $b16, "c_f16.wgsl" $(, $tail)?),
        ];
    };
    (@one $name:expr, $prefix:literal, $a:literal, $b:literal, $c:literal $(, $tail:literal)?) => {
        Shader {
            name: $name,
            source: concat!($prefix, libs!("half.wgsl", "relu.wgsl", "affine.wgsl", $a, $b, $c), include_str!("../../shaders/conv2d.wgsl") $(, include_str!(concat!("../../shaders/", $tail)))?),
            trusted: true,
        }
    };
}

/// How a kernel's activation tensors are stored: the variant of a storage-pair shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// f32, four bytes an element.
    F32,
    /// f16 packed two to a word ([`crate::DType::F16`]).
    F16,
}

impl Storage {
    /// This storage's shader of a pair.
    pub fn pick(self, pair: &'static [Shader; 2]) -> &'static Shader {
        &pair[self as usize]
    }

    /// The path token: `store=f32` or `store=f16`.
    pub fn token(self) -> &'static str {
        match self {
            Storage::F32 => "store=f32",
            Storage::F16 => "store=f16",
        }
    }
}

gemm_family!(CONV2D_ALL, "conv2d.wgsl", "");
// The tensor-core GEMM: conv2d.wgsl's gathers and stores with cooperative-matrix products,
// a module of its own because its `enable` directives fail to compile where the adapter
// lacks f16 or cooperative matrices. An f16 B (dy, in weight gradients) is read and staged
// as f16 (b_h16.wgsl: B as f16 alone changed no product's time, and the kernel's tiles take
// an f32 B or an f16 one, never its two words); an f16 A is staged as its two words
// (act_f16.wgsl), or as f16 in CONV2D_COOP_HALVES.
gemm_family!(CONV2D_COOP_ALL, "conv2d_coop.wgsl", "enable f16;\nenable wgpu_cooperative_matrix;\n", "act_f16.wgsl", "b_h16.wgsl", "conv2d_coop.wgsl");
// CONV2D_COOP_ALL with an f16 A read and staged as f16 (act_h16.wgsl; only its four +a16
// modules differ, and only they are used). The engine takes it for the weight gradients (an
// f16 B) into 64 columns or more (`gemm::AStage`). H100, `cargo bench --bench gemm --
// --store f16`, ms (benches/results/2026-11-27h/call2 and call7): A as f16 took the weight
// gradients of the stem 1.47 -> 1.22, of 3x3 64 channels 0.825 -> 0.693, of ResNet-50's 1x1
// ones 0.39 -> 0.34 and 0.22 -> 0.19 (3x3 128 and 256: 0.58 -> 0.64); the forwards and input
// gradients lost 5-20% (3x3 64 forward 0.512 -> 0.562), and MobileNetV2's 1x1 weight
// gradients into 16-32 filters ran 2-3x slower (0.309 -> 0.857, 0.173 -> 0.442).
gemm_family!(CONV2D_COOP_HALVES, "conv2d_coop.wgsl+halves", "enable f16;\nenable wgpu_cooperative_matrix;\n", "act_h16.wgsl", "b_h16.wgsl", "conv2d_coop.wgsl");
// The GEMM engine's kernel for software adapters: conv2d.wgsl's parameters, gathers and
// stores with register-blocked products (see [`gemm::Engine::Cpu`]).
gemm_family!(GEMM_CPU_ALL, "gemm_cpu.wgsl", "", "gemm_cpu.wgsl");
/// `shaders/conv2d.wgsl` on f32 operands.
pub const CONV2D: Shader = CONV2D_ALL[0];
/// The tensor-core GEMM on f32 operands in memory (see [`CONV2D_COOP_ALL`]).
pub const CONV2D_COOP: Shader = CONV2D_COOP_ALL[0];
/// The software adapters' GEMM on f32 operands in memory (see [`GEMM_CPU_ALL`]).
pub const GEMM_CPU: Shader = GEMM_CPU_ALL[0];
storage_pair!(ELEMENTWISE_ALL, "elementwise.wgsl", ["relu.wgsl"], ["elementwise.wgsl"]);
storage_pair!(BATCHNORM_ALL, "batchnorm.wgsl", ["relu.wgsl", "affine.wgsl"], ["batchnorm.wgsl"]);
// BatchNormalization's kernels for software adapters: batchnorm.wgsl's parameters,
// bindings and merges with passes laid out for CPU threads (see [`batchnorm`]'s `Plan`).
storage_pair!(BATCHNORM_CPU_ALL, "batchnorm_cpu.wgsl", ["relu.wgsl", "affine.wgsl"], ["batchnorm.wgsl", "batchnorm_cpu.wgsl"]);
// BatchNormalization's quad first passes that merge their partials in each column tile's
// last workgroup: batchnorm.wgsl with batchnorm_merge.wgsl's entry points, whose coherent
// binding needs MEMORY_DECORATION_COHERENT of the device (see [`batchnorm`]).
storage_pair!(BATCHNORM_MERGE_ALL, "batchnorm_merge.wgsl", ["relu.wgsl", "affine.wgsl"], ["batchnorm.wgsl", "batchnorm_merge.wgsl"]);
storage_pair!(POOL_ALL, "pool.wgsl", ["relu.wgsl"], ["pool.wgsl"]);
// The element-wise activations' vec4 entry points read and write either storage; softmax
// and the channel maps run the f32 module alone (see [`activation`]).
storage_pair!(ACTIVATION_ALL, "activation.wgsl", ["relu.wgsl"], ["activation.wgsl"]);
/// `shaders/elementwise.wgsl` on f32 activations.
pub const ELEMENTWISE: Shader = ELEMENTWISE_ALL[0];
/// `shaders/batchnorm.wgsl` on f32 activations.
pub const BATCHNORM: Shader = BATCHNORM_ALL[0];
/// `shaders/batchnorm.wgsl` + `batchnorm_cpu.wgsl` on f32 activations.
pub const BATCHNORM_CPU: Shader = BATCHNORM_CPU_ALL[0];
/// `shaders/pool.wgsl` on f32 activations.
pub const POOL: Shader = POOL_ALL[0];
/// `shaders/activation.wgsl` on f32 activations (softmax and the channel maps: always).
pub const ACTIVATION: Shader = ACTIVATION_ALL[0];
shader!(REDUCE, "reduce.wgsl");
shader!(DEPTHWISE, "depthwise.wgsl");
shader!(LOSS, "loss.wgsl");
shader!(IMAGE, "image.wgsl", ["half.wgsl"]);
shader!(OPTIMIZER, "optimizer.wgsl");
shader!(LOSS_SCALE, "loss_scale.wgsl");
shader!(CONCAT, "concat.wgsl");
shader!(LAYERNORM, "layernorm.wgsl");
shader!(AUGMENT, "augment.wgsl");
shader!(WINOGRAD, "winograd.wgsl");
shader!(FLIP, "flip.wgsl");
shader!(CAST, "cast.wgsl", ["half.wgsl"]);

/// Every shader module (each storage variant), for validation tests.
pub const ALL_SHADERS: &[&Shader] = &[
    &CONV2D_ALL[0], &CONV2D_ALL[1], &CONV2D_ALL[2], &CONV2D_ALL[3],
    &CONV2D_ALL[4], &CONV2D_ALL[5], &CONV2D_ALL[6], &CONV2D_ALL[7],
    &CONV2D_COOP_ALL[0], &CONV2D_COOP_ALL[1], &CONV2D_COOP_ALL[2], &CONV2D_COOP_ALL[3],
    &CONV2D_COOP_ALL[4], &CONV2D_COOP_ALL[5], &CONV2D_COOP_ALL[6], &CONV2D_COOP_ALL[7],
    &CONV2D_COOP_HALVES[1], &CONV2D_COOP_HALVES[3], &CONV2D_COOP_HALVES[5], &CONV2D_COOP_HALVES[7],
    &GEMM_CPU_ALL[0], &GEMM_CPU_ALL[1], &GEMM_CPU_ALL[2], &GEMM_CPU_ALL[3],
    &GEMM_CPU_ALL[4], &GEMM_CPU_ALL[5], &GEMM_CPU_ALL[6], &GEMM_CPU_ALL[7],
    &ELEMENTWISE_ALL[0], &ELEMENTWISE_ALL[1], &BATCHNORM_ALL[0], &BATCHNORM_ALL[1],
    &BATCHNORM_CPU_ALL[0], &BATCHNORM_CPU_ALL[1], &BATCHNORM_MERGE_ALL[0], &BATCHNORM_MERGE_ALL[1], &POOL_ALL[0], &POOL_ALL[1],
    &ACTIVATION_ALL[0], &ACTIVATION_ALL[1],
    &REDUCE, &DEPTHWISE, &LOSS, &IMAGE, &OPTIMIZER, &LOSS_SCALE, &CONCAT, &LAYERNORM, &AUGMENT, &WINOGRAD, &FLIP, &CAST,
];

/// One recorded kernel launch: pipeline, bindings and grid, ready to replay.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The shader entry point.
    pub label: &'static str,
    /// What the launch does, for per-kernel timings (`conv2d_forward`, `batchnorm`, ...):
    /// the entry point unless the wrapper names it.
    pub kernel: &'static str,
    /// The WGSL file it runs.
    pub shader: &'static str,
    /// The model layer that recorded it, for per-layer timings.
    pub layer: Option<usize>,
    /// Useful floating-point operations (multiply-adds count two); zero for memory-bound kernels.
    pub flops: f64,
    /// Bytes of the bound tensors: what the kernel must move at least once.
    pub bytes: f64,
    /// The code path the launch takes, as space-separated tokens after the entry point
    /// (`gemm tile=M64N16 a=Im2col b=BlockedT split=none quad_a quad_b quad_c phase grid=1d`).
    /// Each wrapper writes its tokens from the very values that pick its branches, so the
    /// kernel tests can count which paths their shapes reached; `grid=2d` marks a grid with
    /// more than one row of workgroups (a folded linear grid, or chunks of a reduction).
    pub path: String,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
}

impl Dispatch {
    /// Builds the pipeline (cached) and bind group for `entry` of `shader`. Kernels that
    /// declare `override WG` get it from `constants` (see [`WG_CONST`]).
    pub fn new(
        device: &Device,
        shader: &Shader,
        entry: &'static str,
        constants: &[(&'static str, f64)],
        bindings: &[(u32, wgpu::BufferBinding<'_>)],
        groups: [u32; 3],
    ) -> Dispatch {
        let pipeline = device.pipeline(shader, entry, constants);
        let bind_group = device.bind_group(&pipeline, bindings);
        // Binding 0 is the kernel's uniform parameters, not data it moves.
        let bytes = bindings.iter().filter(|(i, _)| *i != 0).map(|(_, b)| b.size.map_or(b.buffer.size() - b.offset, |s| s.get()) as f64).sum();
        let path = format!("{entry} {}", grid_token(groups));
        Dispatch { label: entry, kernel: entry, shader: shader.name, layer: None, flops: 0.0, bytes, path, pipeline, bind_group, groups }
    }

    /// Adds the tokens that name the branches this launch takes (see [`Dispatch::path`]).
    pub fn tagged(mut self, tokens: impl AsRef<str>) -> Dispatch {
        let tokens = tokens.as_ref().trim();
        if !tokens.is_empty() {
            self.path.push(' ');
            self.path.push_str(tokens);
        }
        self
    }

    /// The path's tokens after the entry point.
    pub fn path_tokens(&self) -> impl Iterator<Item = &str> {
        self.path.split_whitespace().skip(1)
    }

    /// Names the launch and its arithmetic for per-kernel timings.
    pub fn named(mut self, kernel: &'static str, flops: f64) -> Dispatch {
        self.kernel = kernel;
        self.flops = flops;
        self
    }

    /// The common case: a uniform `params` struct at binding 0, then tensors at their
    /// bindings. The uniform buffer lives as long as the bind group, i.e. the dispatch.
    pub fn with_params<P: bytemuck::Pod>(
        device: &Device,
        shader: &Shader,
        entry: &'static str,
        constants: &[(&'static str, f64)],
        params: &P,
        tensors: &[(u32, &crate::Tensor)],
        groups: [u32; 3],
    ) -> Dispatch {
        let uniform = device.uniform(params);
        let mut bindings = vec![(0, uniform.as_entire_buffer_binding())];
        bindings.extend(tensors.iter().map(|(i, t)| (*i, t.binding())));
        Dispatch::new(device, shader, entry, constants, &bindings, groups)
    }

    /// Records the dispatch into `pass`; a dispatch of no workgroups records nothing.
    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        if self.groups.contains(&0) {
            return;
        }
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups[0], self.groups[1], self.groups[2]);
    }

    /// The workgroup counts along x, y and z.
    pub fn groups(&self) -> [u32; 3] {
        self.groups
    }
}

/// A grid of `workgroups` linear workgroups, folded into 2-D when one dimension cannot hold
/// them. Shaders rebuild the index as `wid.x + wid.y * nwg.x` and guard the tail.
pub fn grid(device: &Device, workgroups: u64) -> Result<[u32; 3]> {
    let max = device.limits().max_compute_workgroups_per_dimension as u64;
    if workgroups <= max {
        return Ok([workgroups as u32, 1, 1]);
    }
    let y = workgroups.div_ceil(max);
    if y > max {
        bail!(Shape, "{workgroups} workgroups exceed a {max} x {max} grid");
    }
    Ok([max as u32, y as u32, 1])
}

/// A grid laid out by its kernel (`groups` along x, y and z), checked against the device's
/// per-dimension limit: the error names the kernel, what needs the grid (`what`) and the grid.
pub fn grid_3d(device: &Device, kernel: &str, what: &str, groups: [usize; 3]) -> Result<[u32; 3]> {
    let max = device.limits().max_compute_workgroups_per_dimension as usize;
    if groups.iter().any(|&g| g > max) {
        bail!(Shape, "{kernel}: {what} need a grid of {groups:?} workgroups, more than {max} in one dimension");
    }
    Ok(groups.map(|g| g as u32))
}

/// The path token of a grid: `grid=2d` when the launch has more than one row of
/// workgroups, which for a grid from [`grid`] means it was folded.
pub fn grid_token(groups: [u32; 3]) -> &'static str {
    if groups[1] > 1 || groups[2] > 1 { "grid=2d" } else { "grid=1d" }
}

/// The path token of a pass that has a vec4 and a scalar form.
pub fn width_token(vec4: bool) -> &'static str {
    if vec4 { "vec4" } else { "scalar" }
}

/// The grid for `n` elements at `WG` per workgroup.
pub fn grid_for(device: &Device, n: usize) -> Result<[u32; 3]> {
    grid(device, (n as u64).div_ceil(WG as u64))
}

/// The `("WG", 256)` override every linear kernel takes.
pub const WG_CONST: (&str, f64) = ("WG", WG as f64);

/// Checks that `t` has exactly `shape`, naming the kernel and operand in the error.
pub fn expect_shape(kernel: &str, operand: &str, t: &crate::Tensor, shape: &[usize]) -> Result<()> {
    if t.shape() != shape {
        bail!(Shape, "{kernel}: {operand} has shape {:?}, expected {:?}", t.shape(), shape);
    }
    Ok(())
}

/// The channels of `x: [..., C]` (a normalisation's input), checking that every `like_x`
/// tensor has x's shape and every `per_channel` one is `[C]`; errors name the kernel, the
/// operand and both shapes.
pub fn expect_channels(kernel: &str, x: &crate::Tensor, like_x: &[(&str, &crate::Tensor)], per_channel: &[(&str, &crate::Tensor)]) -> Result<usize> {
    let c = match x.shape().last() {
        Some(&c) if c > 0 && !x.is_empty() => c,
        _ => bail!(Shape, "{kernel}: x has shape {:?}, expected [..., channels] with no zero dimension", x.shape()),
    };
    for (name, t) in like_x {
        if t.shape() != x.shape() {
            bail!(Shape, "{kernel}: {name} has shape {:?}, expected x's shape {:?}", t.shape(), x.shape());
        }
    }
    for (name, t) in per_channel {
        if t.shape() != [c] {
            bail!(Shape, "{kernel}: {name} has shape {:?}, expected [{c}] for x {:?}", t.shape(), x.shape());
        }
    }
    Ok(c)
}

/// Checks that two tensors have the same number of elements.
pub fn expect_same_len(kernel: &str, a: (&str, &crate::Tensor), b: (&str, &crate::Tensor)) -> Result<()> {
    if a.1.len() != b.1.len() {
        bail!(Shape, "{kernel}: {} {:?} and {} {:?} differ in size", a.0, a.1.shape(), b.0, b.1.shape());
    }
    Ok(())
}

/// Checks a tensor's element type, naming the kernel and operand in the error.
pub fn expect_dtype(kernel: &str, operand: &str, t: &crate::Tensor, dtype: crate::DType) -> Result<()> {
    if t.dtype() != dtype {
        bail!(Shape, "{kernel}: {operand} {:?} is {:?}, expected {dtype:?}", t.shape(), t.dtype());
    }
    Ok(())
}

/// The storage of activation `t`: F32 or F16, any other element type an error naming the
/// kernel and operand (a u32 tensor read as activations would be garbage, not a failure).
fn expect_activation(kernel: &str, operand: &str, t: &crate::Tensor) -> Result<Storage> {
    match t.dtype() {
        crate::DType::F32 => Ok(Storage::F32),
        crate::DType::F16 => Ok(Storage::F16),
        other => bail!(Shape, "{kernel}: {operand} {:?} is {other:?}, expected F32 or F16", t.shape()),
    }
}

/// The storage of a kernel's activations `acts`: the first one's (F32 or F16), which the
/// others must share (one module reads them all), and F16 only where `count`, what the
/// kernel's vec4 passes step over (`what`: elements or channels), is a multiple of 4: the
/// scalar passes cannot store f16 without two invocations racing on one word.
pub fn expect_activations(kernel: &str, acts: &[(&str, &crate::Tensor)], (what, count): (&str, usize)) -> Result<Storage> {
    let (first, a) = acts[0];
    let storage = expect_activation(kernel, first, a)?;
    for (name, t) in &acts[1..] {
        expect_dtype_as(kernel, name, t, (first, a))?;
    }
    if storage == Storage::F16 && !count.is_multiple_of(4) {
        bail!(Shape, "{kernel}: {first} {:?} is F16 with {count} {what}, expected a multiple of 4 (f16 is stored four at a time)", a.shape());
    }
    Ok(storage)
}

/// Checks that `t` has the dtype of the operand named `like`, which fixed the kernel's
/// storage: one module reads all of them, so mixing f32 and f16 cannot be served.
fn expect_dtype_as(kernel: &str, operand: &str, t: &crate::Tensor, like: (&str, &crate::Tensor)) -> Result<()> {
    if t.dtype() != like.1.dtype() {
        bail!(Shape, "{kernel}: {operand} {:?} is {:?}, expected {:?} as {} {:?}", t.shape(), t.dtype(), like.1.dtype(), like.0, like.1.shape());
    }
    Ok(())
}

/// wgpu refuses a buffer bound read-only and read-write in one dispatch (views of one buffer
/// included), and overlapping outputs would race: refuse both on the host.
pub fn expect_separate(kernel: &str, outputs: &[(&str, &crate::Tensor)], inputs: &[(&str, &crate::Tensor)]) -> Result<()> {
    for (i, (out, o)) in outputs.iter().enumerate() {
        for (name, t) in inputs {
            if o.same_storage(t) {
                bail!(Shape, "{kernel}: output {out} {:?} shares a buffer with input {name} {:?}", o.shape(), t.shape());
            }
        }
        for (name, t) in &outputs[i + 1..] {
            if o.overlaps(t) {
                bail!(Shape, "{kernel}: outputs {out} {:?} and {name} {:?} overlap", o.shape(), t.shape());
            }
        }
    }
    Ok(())
}

/// Converts a size to the u32 the shaders index with, refusing sizes they cannot address.
pub fn u32_of(kernel: &str, what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| crate::Error::Shape(format!("{kernel}: {what} = {n} exceeds 2^32")))
}
