//! Whether NVIDIA's VK_NV_cooperative_matrix2 would lift the tensor-core products past what
//! WGSL's cooperative matrices reach: f16 products (f32 accumulation) on workgroup-scope
//! matrices, written as SPIR-V here and run through wgpu's passthrough shaders on a device
//! opened with the extension. The driver stages those matrices through shared memory itself;
//! WGSL (VK_KHR_cooperative_matrix, subgroup scope, 16x16x16) reached 223 TFLOP/s on 4096^3 on
//! an H200 (`cargo bench --bench gemm -- --probe`, BENCHMARKS.md session 45). The answer, on
//! the H200 (BENCHMARKS.md session 49, benches/results/2026-12-04): 271-306 TFLOP/s on plain
//! products, 1.1-1.3x the engine on ResNet-50's 1x1 products, and no faster than the engine on
//! 3x3 convolutions by either way of gathering A.
//!
//! `cargo bench --bench coop2_probe -- [--size N | --mnk MxNxK | --conv N,H,W,C,F] [--reps R]
//! [--invocations I] [--tile MxNxK] [--a-col] [--b-col] [--split S] [--prefetch] [--tensor]
//! [--patch RxC] [--stage] [--double] [--spv FILE]`:
//! - the product is the cube of `--size` (4096), `--mnk`'s, or a 3x3 convolution's (stride 1,
//!   padding 1; NHWC images, taps' weights 9 C x F, M = N H W, K = 9 C);
//! - `--a-col` reads A stored K x M, `--b-col` B stored N x K (a weight's and a data
//!   gradient's layouts), `--split S` cuts K in S parts summed afterwards (a weight gradient's
//!   split K), `--prefetch` loads the next step's operands before this step's product,
//!   `--tensor` reads A through a 2-D tensor layout (SPV_NV_tensor_addressing);
//! - a convolution's A is gathered through a clamped 4-D tensor layout over a patch of `--patch`
//!   output pixels (8x16), or with `--stage` by the workgroup into shared memory (flat output
//!   pixels; `--double` two shared tiles, the next step's gather in flight during the product).
//!
//! It prints the extension's flexible dimensions and properties, then, on the workgroup-scope
//! configuration with I invocations (the largest otherwise), for each tile the driver accepts
//! (M, N, K a step; `--tile` one alone) the time and TFLOP/s, checked against f64 on sampled
//! entries (the operands are small multiples of 1/4, so every sum is exact in f32). A lost
//! device or a failed read is reported and ends the run with status 2. On an adapter without
//! the extension it says so and exits with status 0: nothing to measure. `--spv FILE` writes
//! the 128 x 128 x 32 module (256 invocations) for spirv-dis and spirv-val and runs nothing. A
//! probe, not an engine path: nothing in the library uses it.
//!
//! Every `unsafe` block is either a Vulkan query through ash on the adapter wgpu opened, the
//! device creation with one more extension and its feature struct (both outliving the call),
//! or the passthrough module, whose SPIR-V this file writes and whose layout it states.

use std::borrow::Cow;
use std::ffi::{c_void, CStr};

use ash::vk;
use convoy::device::half::f16_bits;
use spirv::{Capability, Op};
use wgpu::hal::api::Vulkan;

const EXTENSION: &CStr = c"VK_NV_cooperative_matrix2";

/// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV` (not in ash 0.38).
#[repr(C)]
struct Coop2Features {
    s_type: i32,
    p_next: *const c_void,
    workgroup_scope: u32,
    flexible_dimensions: u32,
    reductions: u32,
    conversions: u32,
    per_element_operations: u32,
    tensor_addressing: u32,
    block_loads: u32,
}
const FEATURES_S_TYPE: i32 = 1_000_593_000;

/// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Flexible {
    s_type: i32,
    p_next: *mut c_void,
    m_granularity: u32,
    n_granularity: u32,
    k_granularity: u32,
    a_type: i32,
    b_type: i32,
    c_type: i32,
    result_type: i32,
    saturating: u32,
    scope: i32,
    workgroup_invocations: u32,
}
const FLEXIBLE_S_TYPE: i32 = 1_000_593_001;

/// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
#[repr(C)]
struct Coop2Properties {
    s_type: i32,
    p_next: *mut c_void,
    workgroup_scope_max_workgroup_size: u32,
    flexible_dimensions_max_dimension: u32,
    workgroup_scope_reserved_shared_memory: u32,
}
const PROPERTIES_S_TYPE: i32 = 1_000_593_002;
type FlexibleFn = unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut Flexible) -> vk::Result;

/// `VkComponentTypeKHR` 0 and 1.
const F16: i32 = 0;
const F32: i32 = 1;
/// `VkScopeKHR`'s workgroup.
const WORKGROUP: i32 = 2;

fn fail(msg: String) -> ! {
    eprintln!("coop2_probe: {msg}");
    std::process::exit(2)
}

/// A SPIR-V module under construction: the header (capabilities to decorations), the
/// declarations (types, constants, globals) and the one function's code kept apart, so that a
/// constant the code asks for late still lands among the declarations.
struct Module {
    next_id: u32,
    header: Vec<u32>,
    decls: Vec<u32>,
    code: Vec<u32>,
    constants: std::collections::HashMap<(u32, u32), u32>,
}

/// Which words an instruction goes to.
#[derive(Clone, Copy)]
enum Part {
    Header,
    Decls,
    Code,
}

impl Module {
    fn new() -> Self {
        Module { next_id: 0, header: Vec::new(), decls: Vec::new(), code: Vec::new(), constants: Default::default() }
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn op(&mut self, part: Part, op: Op, operands: &[u32]) {
        let words = match part {
            Part::Header => &mut self.header,
            Part::Decls => &mut self.decls,
            Part::Code => &mut self.code,
        };
        words.push(((operands.len() as u32 + 1) << 16) | op as u32);
        words.extend_from_slice(operands);
    }

    /// An instruction of the code with a result type: its new result id.
    fn value(&mut self, op: Op, ty: u32, operands: &[u32]) -> u32 {
        let id = self.id();
        let mut all = vec![ty, id];
        all.extend_from_slice(operands);
        self.op(Part::Code, op, &all);
        id
    }

    /// A 32-bit constant of `ty`, declared once.
    fn constant(&mut self, ty: u32, bits: u32) -> u32 {
        if let Some(&id) = self.constants.get(&(ty, bits)) {
            return id;
        }
        let id = self.id();
        self.op(Part::Decls, Op::Constant, &[ty, id, bits]);
        self.constants.insert((ty, bits), id);
        id
    }

    /// A literal string's words: UTF-8, nul-terminated, padded to whole words.
    fn string(s: &str) -> Vec<u32> {
        let mut bytes = s.as_bytes().to_vec();
        bytes.push(0);
        bytes.resize(bytes.len().div_ceil(4) * 4, 0);
        bytes.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    fn finish(self) -> Vec<u32> {
        let mut words = vec![spirv::MAGIC_NUMBER, 0x0001_0600, 0, self.next_id + 1, 0];
        words.extend(self.header);
        words.extend(self.decls);
        words.extend(self.code);
        words
    }
}

/// One product's shape and how its module reads the operands.
#[derive(Clone, Copy, Debug)]
struct Product {
    m: u32,
    n: u32,
    k: u32,
    /// M, N, K a workgroup's step.
    tile: (u32, u32, u32),
    /// The workgroup size the driver's configuration asks for.
    threads: u32,
    /// A stored K x M (a weight gradient's activations read transposed), else M x K.
    a_col: bool,
    /// B stored N x K (a data gradient's weights read transposed), else K x N.
    b_col: bool,
    /// The next step's A and B loaded before this step's product.
    prefetch: bool,
    /// K cut in this many parts, one workgroup layer (and one C) each, summed afterwards.
    split: u32,
    /// A read through a tensor layout (SPV_NV_tensor_addressing) rather than a pointer and a stride.
    tensor: bool,
    /// A 3x3 convolution (stride 1, padding 1) instead: A the NHWC images gathered through a
    /// clamped 4-D tensor layout, B the taps' weights (9 C x F, rows tap-major), C the NHWC
    /// outputs stored through the same kind of layout; M = N H W, K = 9 C, N = F.
    conv: Option<Conv>,
    /// The convolution's A gathered by the workgroup into shared memory (8 halves a thread a
    /// load, zeros for the padding), M the flat output pixels, C stored with a stride.
    stage: bool,
    /// Two shared tiles: the next step's quads fetched before this step's product and
    /// written after it, one barrier a step.
    double: bool,
}

/// A 3x3 convolution's sizes and the patch of output pixels one workgroup takes.
#[derive(Clone, Copy, Debug)]
struct Conv {
    images: u32,
    height: u32,
    width: u32,
    channels: u32,
    filters: u32,
    /// Output rows and columns of a workgroup's M tile (their product is the tile's M).
    patch: (u32, u32),
}

impl Product {
    /// Where element (i, l) of A and (l, j) of B sit in their buffers (plain products).
    fn a_at(&self, i: u32, l: u32) -> usize {
        if self.a_col { (l as usize) * self.m as usize + i as usize } else { (i as usize) * self.k as usize + l as usize }
    }
    fn b_at(&self, l: u32, j: u32) -> usize {
        if self.b_col { (j as usize) * self.k as usize + l as usize } else { (l as usize) * self.n as usize + j as usize }
    }
}

/// The product C (f32, M x N, row-major) = A (f16) B (f16), or a 3x3 convolution as one, one
/// workgroup per tile of C, K a tile's depth a step, on workgroup-scope matrices.
fn gemm_module(p: Product) -> Vec<u32> {
    let (tm, tn, tk) = p.tile;
    let mut s = Module::new();
    let staged = p.stage && p.conv.is_some();
    let addressing = p.tensor || (p.conv.is_some() && !staged);
    let [void, fn_void, u32_t, f16_t, f32_t, bool_t, v3u, p_in_v3u] = std::array::from_fn(|_| s.id());
    let [rt_f16, st_f16, p_sb_st_f16, p_sb_f16, rt_f32, st_f32, p_sb_st_f32, p_sb_f32] = std::array::from_fn(|_| s.id());
    let [buf_a, buf_b, buf_c, wg_id, mat_a, mat_b, mat_c, main] = std::array::from_fn(|_| s.id());
    let [p_fn_c, p_fn_u32, p_fn_a, p_fn_b, zero_c, zero_a, entry, layout4] = std::array::from_fn(|_| s.id());
    let [layout2, v4u, rt_v4, st_v4, p_sb_st_v4, p_sb_v4, shared_t, p_wg_shared] = std::array::from_fn(|_| s.id());
    let [p_wg_v4, shared, lid, p_in_u32] = std::array::from_fn(|_| s.id());
    // The staged tile: tm rows of tk halves, as quads of words.
    let quads_per_row = tk / 8;

    let mut caps = vec![Capability::Shader, Capability::Float16, Capability::StorageBuffer16BitAccess, Capability::CooperativeMatrixKHR];
    let mut exts = vec!["SPV_KHR_cooperative_matrix", "SPV_NV_cooperative_matrix2"];
    if addressing {
        caps.extend([Capability::CooperativeMatrixTensorAddressingNV, Capability::TensorAddressingNV]);
        exts.push("SPV_NV_tensor_addressing");
    }
    for cap in caps {
        s.op(Part::Header, Op::Capability, &[cap as u32]);
    }
    for ext in exts {
        s.op(Part::Header, Op::Extension, &Module::string(ext));
    }
    s.op(Part::Header, Op::MemoryModel, &[spirv::AddressingModel::Logical as u32, spirv::MemoryModel::GLSL450 as u32]);
    let mut entry_point = vec![spirv::ExecutionModel::GLCompute as u32, main];
    entry_point.extend(Module::string("main"));
    entry_point.extend([wg_id, buf_a, buf_b, buf_c]);
    if staged {
        entry_point.extend([shared, lid]);
    }
    s.op(Part::Header, Op::EntryPoint, &entry_point);
    s.op(Part::Header, Op::ExecutionMode, &[main, spirv::ExecutionMode::LocalSize as u32, p.threads, 1, 1]);
    use spirv::Decoration as D;
    s.op(Part::Header, Op::Decorate, &[rt_f16, D::ArrayStride as u32, 2]);
    s.op(Part::Header, Op::Decorate, &[rt_f32, D::ArrayStride as u32, 4]);
    for st in [st_f16, st_f32] {
        s.op(Part::Header, Op::Decorate, &[st, D::Block as u32]);
        s.op(Part::Header, Op::MemberDecorate, &[st, 0, D::Offset as u32, 0]);
    }
    for (binding, buf) in [buf_a, buf_b, buf_c].into_iter().enumerate() {
        s.op(Part::Header, Op::Decorate, &[buf, D::DescriptorSet as u32, 0]);
        s.op(Part::Header, Op::Decorate, &[buf, D::Binding as u32, binding as u32]);
    }
    s.op(Part::Header, Op::Decorate, &[wg_id, D::BuiltIn as u32, spirv::BuiltIn::WorkgroupId as u32]);
    if staged {
        s.op(Part::Header, Op::Decorate, &[rt_v4, D::ArrayStride as u32, 16]);
        s.op(Part::Header, Op::Decorate, &[st_v4, D::Block as u32]);
        s.op(Part::Header, Op::MemberDecorate, &[st_v4, 0, D::Offset as u32, 0]);
        s.op(Part::Header, Op::Decorate, &[lid, D::BuiltIn as u32, spirv::BuiltIn::LocalInvocationIndex as u32]);
    }

    use spirv::StorageClass as Sc;
    let g = Part::Decls;
    s.op(g, Op::TypeVoid, &[void]);
    s.op(g, Op::TypeFunction, &[fn_void, void]);
    s.op(g, Op::TypeInt, &[u32_t, 32, 0]);
    s.op(g, Op::TypeFloat, &[f16_t, 16]);
    s.op(g, Op::TypeFloat, &[f32_t, 32]);
    s.op(g, Op::TypeBool, &[bool_t]);
    s.op(g, Op::TypeVector, &[v3u, u32_t, 3]);
    s.op(g, Op::TypePointer, &[p_in_v3u, Sc::Input as u32, v3u]);
    s.op(g, Op::TypeRuntimeArray, &[rt_f16, f16_t]);
    s.op(g, Op::TypeStruct, &[st_f16, rt_f16]);
    s.op(g, Op::TypePointer, &[p_sb_st_f16, Sc::StorageBuffer as u32, st_f16]);
    s.op(g, Op::TypePointer, &[p_sb_f16, Sc::StorageBuffer as u32, f16_t]);
    s.op(g, Op::TypeRuntimeArray, &[rt_f32, f32_t]);
    s.op(g, Op::TypeStruct, &[st_f32, rt_f32]);
    s.op(g, Op::TypePointer, &[p_sb_st_f32, Sc::StorageBuffer as u32, st_f32]);
    s.op(g, Op::TypePointer, &[p_sb_f32, Sc::StorageBuffer as u32, f32_t]);
    use spirv::CooperativeMatrixLayout as L;
    use spirv::CooperativeMatrixUse as U;
    let k = |s: &mut Module, v: u32| s.constant(u32_t, v);
    let (scope, c_tm, c_tn, c_tk) = (k(&mut s, spirv::Scope::Workgroup as u32), k(&mut s, tm), k(&mut s, tn), k(&mut s, tk));
    let (use_a, use_b, use_c) = (k(&mut s, U::MatrixAKHR as u32), k(&mut s, U::MatrixBKHR as u32), k(&mut s, U::MatrixAccumulatorKHR as u32));
    s.op(g, Op::TypeCooperativeMatrixKHR, &[mat_a, f16_t, scope, c_tm, c_tk, use_a]);
    s.op(g, Op::TypeCooperativeMatrixKHR, &[mat_b, f16_t, scope, c_tk, c_tn, use_b]);
    s.op(g, Op::TypeCooperativeMatrixKHR, &[mat_c, f32_t, scope, c_tm, c_tn, use_c]);
    s.op(g, Op::TypePointer, &[p_fn_c, Sc::Function as u32, mat_c]);
    s.op(g, Op::TypePointer, &[p_fn_a, Sc::Function as u32, mat_a]);
    s.op(g, Op::TypePointer, &[p_fn_b, Sc::Function as u32, mat_b]);
    s.op(g, Op::TypePointer, &[p_fn_u32, Sc::Function as u32, u32_t]);
    let f32_zero = s.constant(f32_t, 0);
    s.op(g, Op::ConstantComposite, &[mat_c, zero_c, f32_zero]);
    let f16_zero = s.constant(f16_t, 0);
    s.op(g, Op::ConstantComposite, &[mat_a, zero_a, f16_zero]);
    if addressing {
        // Out-of-range coordinates read as the clamp value (0) and are not written: the
        // convolution's padding and the patches past an image's edge.
        let (four, two, constant_mode) = (k(&mut s, 4), k(&mut s, 2), k(&mut s, 1));
        s.op(g, Op::TypeTensorLayoutNV, &[layout4, four, constant_mode]);
        s.op(g, Op::TypeTensorLayoutNV, &[layout2, two, constant_mode]);
    }
    if staged {
        s.op(g, Op::TypeVector, &[v4u, u32_t, 4]);
        s.op(g, Op::TypeRuntimeArray, &[rt_v4, v4u]);
        s.op(g, Op::TypeStruct, &[st_v4, rt_v4]);
        s.op(g, Op::TypePointer, &[p_sb_st_v4, Sc::StorageBuffer as u32, st_v4]);
        s.op(g, Op::TypePointer, &[p_sb_v4, Sc::StorageBuffer as u32, v4u]);
        let len = k(&mut s, tm * quads_per_row * if p.double { 2 } else { 1 });
        s.op(g, Op::TypeArray, &[shared_t, v4u, len]);
        s.op(g, Op::TypePointer, &[p_wg_shared, Sc::Workgroup as u32, shared_t]);
        s.op(g, Op::TypePointer, &[p_wg_v4, Sc::Workgroup as u32, v4u]);
        s.op(g, Op::TypePointer, &[p_in_u32, Sc::Input as u32, u32_t]);
        s.op(g, Op::Variable, &[p_sb_st_v4, buf_a, Sc::StorageBuffer as u32]);
        s.op(g, Op::Variable, &[p_wg_shared, shared, Sc::Workgroup as u32]);
        s.op(g, Op::Variable, &[p_in_u32, lid, Sc::Input as u32]);
    } else {
        s.op(g, Op::Variable, &[p_sb_st_f16, buf_a, Sc::StorageBuffer as u32]);
    }
    s.op(g, Op::Variable, &[p_sb_st_f16, buf_b, Sc::StorageBuffer as u32]);
    s.op(g, Op::Variable, &[p_sb_st_f32, buf_c, Sc::StorageBuffer as u32]);
    s.op(g, Op::Variable, &[p_in_v3u, wg_id, Sc::Input as u32]);

    let c = Part::Code;
    s.op(c, Op::Function, &[void, main, 0, fn_void]);
    s.op(c, Op::Label, &[entry]);
    let [acc, k_var, a_var, b_var] = std::array::from_fn(|_| s.id());
    s.op(c, Op::Variable, &[p_fn_c, acc, Sc::Function as u32, zero_c]);
    s.op(c, Op::Variable, &[p_fn_u32, k_var, Sc::Function as u32]);
    s.op(c, Op::Variable, &[p_fn_a, a_var, Sc::Function as u32]);
    s.op(c, Op::Variable, &[p_fn_b, b_var, Sc::Function as u32]);
    let id3 = s.value(Op::Load, v3u, &[wg_id]);
    let wx = s.value(Op::CompositeExtract, u32_t, &[id3, 0]);
    let wy = s.value(Op::CompositeExtract, u32_t, &[id3, 1]);
    let wz = s.value(Op::CompositeExtract, u32_t, &[id3, 2]);
    let zero = k(&mut s, 0);
    let (row_major, col_major) = (k(&mut s, L::RowMajorKHR as u32), k(&mut s, L::ColumnMajorKHR as u32));
    let n0 = s.value(Op::IMul, u32_t, &[wx, c_tn]);
    let (c_m, c_n, c_k) = (k(&mut s, p.m), k(&mut s, p.n), k(&mut s, p.k));
    let a_base = if staged { 0 } else { s.value(Op::AccessChain, p_sb_f16, &[buf_a, zero, zero]) };
    let thread = if staged { s.value(Op::Load, u32_t, &[lid]) } else { 0 };

    // What a workgroup covers: rows m0.. of C, or for a convolution image wz's patch wy; and
    // K from k_begin to k_end (a split's layer).
    let (m0, k_begin, k_end, patch_y, patch_x) = match p.conv {
        Some(_) if staged => (s.value(Op::IMul, u32_t, &[wy, c_tm]), zero, c_k, 0, 0),
        None => {
            let m0 = s.value(Op::IMul, u32_t, &[wy, c_tm]);
            let chunk = k(&mut s, p.k / p.split);
            let k_begin = s.value(Op::IMul, u32_t, &[wz, chunk]);
            let k_end = s.value(Op::IAdd, u32_t, &[k_begin, chunk]);
            (m0, k_begin, k_end, 0, 0)
        }
        Some(v) => {
            let across = k(&mut s, v.width.div_ceil(v.patch.1));
            let py = s.value(Op::UDiv, u32_t, &[wy, across]);
            let px = s.value(Op::UMod, u32_t, &[wy, across]);
            let (rows, cols) = (k(&mut s, v.patch.0), k(&mut s, v.patch.1));
            let y0 = s.value(Op::IMul, u32_t, &[py, rows]);
            let x0 = s.value(Op::IMul, u32_t, &[px, cols]);
            (0, zero, c_k, y0, x0)
        }
    };
    // The layouts: A as an M x K tensor (plain products) or the NHWC images; C likewise.
    let (a_layout, c_layout) = match p.conv {
        Some(_) if staged => (0, 0),
        None if p.tensor => {
            let l = s.value(Op::CreateTensorLayoutNV, layout2, &[]);
            let l = s.value(Op::TensorLayoutSetDimensionNV, layout2, &[l, c_m, c_k]);
            (l, 0)
        }
        None => (0, 0),
        Some(v) => {
            let dims = [v.images, v.height, v.width, v.channels].map(|d| k(&mut s, d));
            let l = s.value(Op::CreateTensorLayoutNV, layout4, &[]);
            let a = s.value(Op::TensorLayoutSetDimensionNV, layout4, &[l, dims[0], dims[1], dims[2], dims[3]]);
            let out = [v.images, v.height, v.width, v.filters].map(|d| k(&mut s, d));
            let o = s.value(Op::TensorLayoutSetDimensionNV, layout4, &[l, out[0], out[1], out[2], out[3]]);
            let (one, rows, cols) = (k(&mut s, 1), k(&mut s, v.patch.0), k(&mut s, v.patch.1));
            let o = s.value(Op::TensorLayoutSliceNV, layout4, &[o, wz, one, patch_y, rows, patch_x, cols, n0, c_tn]);
            (a, o)
        }
    };
    // A convolution's K runs tap by tap, C channels each: depth `kk`'s channel and tap (row,
    // column).
    let tap_of = |s: &mut Module, kk: u32| -> (u32, u32, u32) {
        let ch = k(s, p.conv.map_or(1, |v| v.channels));
        let tap = s.value(Op::UDiv, u32_t, &[kk, ch]);
        let c0 = s.value(Op::UMod, u32_t, &[kk, ch]);
        let three = k(s, 3);
        (c0, s.value(Op::UDiv, u32_t, &[tap, three]), s.value(Op::UMod, u32_t, &[tap, three]))
    };
    // A source row or column: `at` moved by a tap's offset (0, 1 or 2) less the padding (`one`).
    let shift = |s: &mut Module, at: u32, tap: u32, one: u32| -> u32 {
        let moved = s.value(Op::IAdd, u32_t, &[at, tap]);
        s.value(Op::ISub, u32_t, &[moved, one])
    };
    // A staged convolution's A tile at depth `kk`: every thread's quads of it, read from the
    // images (row r is output pixel m0 + r; its tap's source pixel read if inside the image,
    // from an address clamped to 0 otherwise and then replaced by zeros), with where each goes.
    let gather = |s: &mut Module, kk: u32| -> Vec<(u32, u32)> {
        let v = p.conv.expect("a staged convolution");
        let (c0, ky, kx) = tap_of(s, kk);
        let eight = k(s, 8);
        let q0 = s.value(Op::UDiv, u32_t, &[c0, eight]);
        let (hw, h, w, c8, qpr, one) = (k(s, v.height * v.width), k(s, v.height), k(s, v.width), k(s, v.channels / 8), k(s, quads_per_row), k(s, 1));
        let zero_v4 = s.id();
        s.op(Part::Decls, Op::ConstantNull, &[v4u, zero_v4]);
        let mut quads = Vec::new();
        for i in 0..tm * quads_per_row / p.threads {
            let first = k(s, i * p.threads);
            let chunk = s.value(Op::IAdd, u32_t, &[thread, first]);
            let r = s.value(Op::UDiv, u32_t, &[chunk, qpr]);
            let q = s.value(Op::UMod, u32_t, &[chunk, qpr]);
            let m = s.value(Op::IAdd, u32_t, &[m0, r]);
            let img = s.value(Op::UDiv, u32_t, &[m, hw]);
            let rem = s.value(Op::UMod, u32_t, &[m, hw]);
            let y = s.value(Op::UDiv, u32_t, &[rem, w]);
            let x = s.value(Op::UMod, u32_t, &[rem, w]);
            let (yy, xx) = (shift(s, y, ky, one), shift(s, x, kx, one));
            let in_y = s.value(Op::ULessThan, bool_t, &[yy, h]);
            let in_x = s.value(Op::ULessThan, bool_t, &[xx, w]);
            let inside = s.value(Op::LogicalAnd, bool_t, &[in_y, in_x]);
            let yy = s.value(Op::Select, u32_t, &[inside, yy, zero]);
            let xx = s.value(Op::Select, u32_t, &[inside, xx, zero]);
            let row = s.value(Op::IMul, u32_t, &[img, h]);
            let row = s.value(Op::IAdd, u32_t, &[row, yy]);
            let pixel = s.value(Op::IMul, u32_t, &[row, w]);
            let pixel = s.value(Op::IAdd, u32_t, &[pixel, xx]);
            let src = s.value(Op::IMul, u32_t, &[pixel, c8]);
            let src = s.value(Op::IAdd, u32_t, &[src, q0]);
            let src = s.value(Op::IAdd, u32_t, &[src, q]);
            let ptr = s.value(Op::AccessChain, p_sb_v4, &[buf_a, zero, src]);
            let quad = s.value(Op::Load, v4u, &[ptr]);
            let quad = s.value(Op::Select, v4u, &[inside, quad, zero_v4]);
            quads.push((chunk, quad));
        }
        quads
    };
    // The gathered quads written to the shared tile starting at quad `base`.
    let put = |s: &mut Module, base: u32, quads: &[(u32, u32)]| {
        for &(chunk, quad) in quads {
            let at = s.value(Op::IAdd, u32_t, &[base, chunk]);
            let dst = s.value(Op::AccessChain, p_wg_v4, &[shared, at]);
            s.op(Part::Code, Op::Store, &[dst, quad]);
        }
    };
    // The `mat` tile at (row, col) of a `rows` x `cols` operand in `buf`, stored row-major or
    // transposed (`col_major`).
    let operand = |s: &mut Module, (buf, mat, col_major_stored): (u32, u32, bool), (row, col): (u32, u32), (rows, cols): (u32, u32)| -> u32 {
        let (outer, inner, stride, layout) = if col_major_stored { (col, row, rows, col_major) } else { (row, col, cols, row_major) };
        let x = s.value(Op::IMul, u32_t, &[outer, stride]);
        let at = s.value(Op::IAdd, u32_t, &[x, inner]);
        let ptr = s.value(Op::AccessChain, p_sb_f16, &[buf, zero, at]);
        s.value(Op::CooperativeMatrixLoadKHR, mat, &[ptr, layout, stride])
    };
    // B's tile at depth `kk`.
    let load_b = |s: &mut Module, kk: u32| -> u32 { operand(s, (buf_b, mat_b, p.b_col), (kk, n0), (c_k, c_n)) };
    // A's and B's tiles at depth `kk`.
    let load = |s: &mut Module, kk: u32| -> (u32, u32) {
        let a = match p.conv {
            Some(_) if staged => {
                // One stage: the tile gathered, then loaded by the workgroup; barriers keep
                // the previous step's load before the writes and the writes before the load.
                let (wg, sem) = (k(s, spirv::Scope::Workgroup as u32), k(s, 0x108));
                s.op(Part::Code, Op::ControlBarrier, &[wg, wg, sem]);
                let quads = gather(s, kk);
                put(s, zero, &quads);
                s.op(Part::Code, Op::ControlBarrier, &[wg, wg, sem]);
                let tile = s.value(Op::AccessChain, p_wg_v4, &[shared, zero]);
                let qpr = k(s, quads_per_row);
                s.value(Op::CooperativeMatrixLoadKHR, mat_a, &[tile, row_major, qpr])
            }
            Some(v) => {
                // The tap's shift of the patch, clamped to zero outside the image.
                let (c0, ky, kx) = tap_of(s, kk);
                let one = k(s, 1);
                let (y, x) = (shift(s, patch_y, ky, one), shift(s, patch_x, kx, one));
                let (rows, cols) = (k(s, v.patch.0), k(s, v.patch.1));
                let l = s.value(Op::TensorLayoutSliceNV, layout4, &[a_layout, wz, one, y, rows, x, cols, c0, c_tk]);
                s.value(Op::CooperativeMatrixLoadTensorNV, mat_a, &[a_base, zero_a, l, 0, 0])
            }
            None if p.tensor => {
                let l = s.value(Op::TensorLayoutSliceNV, layout2, &[a_layout, m0, c_tm, kk, c_tk]);
                s.value(Op::CooperativeMatrixLoadTensorNV, mat_a, &[a_base, zero_a, l, 0, 0])
            }
            None => operand(s, (buf_a, mat_a, p.a_col), (m0, kk), (c_m, c_k)),
        };
        (a, load_b(s, kk))
    };
    s.op(c, Op::Store, &[k_var, k_begin]);
    let double = staged && p.double;
    let (wg, sem) = (k(&mut s, spirv::Scope::Workgroup as u32), k(&mut s, 0x108));
    let tile_quads = k(&mut s, tm * quads_per_row);
    if double {
        let quads = gather(&mut s, k_begin);
        put(&mut s, zero, &quads);
        s.op(c, Op::ControlBarrier, &[wg, wg, sem]);
    }
    if p.prefetch {
        let (a, b) = load(&mut s, k_begin);
        s.op(c, Op::Store, &[a_var, a]);
        s.op(c, Op::Store, &[b_var, b]);
    }
    let [header, cond, body, cont, merge] = std::array::from_fn(|_| s.id());
    s.op(c, Op::Branch, &[header]);
    s.op(c, Op::Label, &[header]);
    s.op(c, Op::LoopMerge, &[merge, cont, 0]);
    s.op(c, Op::Branch, &[cond]);
    s.op(c, Op::Label, &[cond]);
    let k_now = s.value(Op::Load, u32_t, &[k_var]);
    let more = s.value(Op::ULessThan, bool_t, &[k_now, k_end]);
    s.op(c, Op::BranchConditional, &[more, body, merge]);
    s.op(c, Op::Label, &[body]);
    let k_next = s.value(Op::IAdd, u32_t, &[k_now, c_tk]);
    let mut after: Vec<(u32, u32)> = Vec::new();
    let mut next_base = 0;
    let (a, b) = if double {
        // This step's tile from one half of shared memory while the next step's quads are
        // in flight to registers, written to the other half after the product.
        let more_next = s.value(Op::ULessThan, bool_t, &[k_next, k_end]);
        let k_load = s.value(Op::Select, u32_t, &[more_next, k_next, k_now]);
        after = gather(&mut s, k_load);
        let step = s.value(Op::UDiv, u32_t, &[k_now, c_tk]);
        let one = k(&mut s, 1);
        let parity = s.value(Op::BitwiseAnd, u32_t, &[step, one]);
        let base = s.value(Op::IMul, u32_t, &[parity, tile_quads]);
        let other = s.value(Op::BitwiseXor, u32_t, &[parity, one]);
        next_base = s.value(Op::IMul, u32_t, &[other, tile_quads]);
        let tile = s.value(Op::AccessChain, p_wg_v4, &[shared, base]);
        let qpr = k(&mut s, quads_per_row);
        let a = s.value(Op::CooperativeMatrixLoadKHR, mat_a, &[tile, row_major, qpr]);
        (a, load_b(&mut s, k_now))
    } else if p.prefetch {
        // The next step's operands, the last step's again on the last step: no branch
        // around a workgroup-wide load.
        let a = s.value(Op::Load, mat_a, &[a_var]);
        let b = s.value(Op::Load, mat_b, &[b_var]);
        let last = s.value(Op::ULessThan, bool_t, &[k_next, k_end]);
        let k_last = s.value(Op::ISub, u32_t, &[k_end, c_tk]);
        let k_load = s.value(Op::Select, u32_t, &[last, k_next, k_last]);
        let (a_next, b_next) = load(&mut s, k_load);
        s.op(c, Op::Store, &[a_var, a_next]);
        s.op(c, Op::Store, &[b_var, b_next]);
        (a, b)
    } else {
        load(&mut s, k_now)
    };
    let acc_now = s.value(Op::Load, mat_c, &[acc]);
    let product = s.value(Op::CooperativeMatrixMulAddKHR, mat_c, &[a, b, acc_now]);
    s.op(c, Op::Store, &[acc, product]);
    if double {
        put(&mut s, next_base, &after);
        s.op(c, Op::ControlBarrier, &[wg, wg, sem]);
    }
    s.op(c, Op::Branch, &[cont]);
    s.op(c, Op::Label, &[cont]);
    s.op(c, Op::Store, &[k_var, k_next]);
    s.op(c, Op::Branch, &[header]);
    s.op(c, Op::Label, &[merge]);
    let result = s.value(Op::Load, mat_c, &[acc]);
    if p.conv.is_some() && !staged {
        let c_base = s.value(Op::AccessChain, p_sb_f32, &[buf_c, zero, zero]);
        s.op(c, Op::CooperativeMatrixStoreTensorNV, &[c_base, result, c_layout, 0, 0]);
    } else {
        let m0_n = s.value(Op::IMul, u32_t, &[m0, c_n]);
        let tile = s.value(Op::IAdd, u32_t, &[m0_n, n0]);
        let mn = k(&mut s, p.m * p.n);
        let layer = s.value(Op::IMul, u32_t, &[wz, mn]);
        let c_off = s.value(Op::IAdd, u32_t, &[tile, layer]);
        let p_c = s.value(Op::AccessChain, p_sb_f32, &[buf_c, zero, c_off]);
        s.op(c, Op::CooperativeMatrixStoreKHR, &[p_c, result, row_major, c_n]);
    }
    s.op(c, Op::Return, &[]);
    s.op(c, Op::FunctionEnd, &[]);
    s.finish()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(|v| v.parse::<u32>().unwrap_or_else(|_| fail(format!("{flag} {v}: expected a whole number"))));
    let three = |flag: &str| -> Option<(u32, u32, u32)> {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(|t| {
            let d: Vec<u32> = t.split('x').filter_map(|v| v.parse().ok()).collect();
            match d[..] {
                [a, b, c] if a > 0 && b > 0 && c > 0 => (a, b, c),
                _ => fail(format!("{flag} {t}: expected AxBxC, three whole numbers above 0")),
            }
        })
    };
    let flag = |name: &str| args.iter().any(|a| a == name);
    let size = value("--size").unwrap_or(4096);
    // `--conv N,H,W,C,F` a 3x3 convolution of N images H x W x C into F channels, `--patch RxC`
    // the output pixels of a workgroup's tile (8x16 unless given).
    let conv: Option<Conv> = args.iter().position(|a| a == "--conv").and_then(|i| args.get(i + 1)).map(|t| {
        let d: Vec<u32> = t.split(',').filter_map(|v| v.parse().ok()).collect();
        let patch = args.iter().position(|a| a == "--patch").and_then(|i| args.get(i + 1)).map_or((8, 16), |t| {
            match t.split('x').filter_map(|v| v.parse().ok()).collect::<Vec<u32>>()[..] {
                [r, c] if r > 0 && c > 0 => (r, c),
                _ => fail(format!("--patch {t}: expected RxC, two whole numbers above 0")),
            }
        });
        match d[..] {
            [images, height, width, channels, filters] if d.iter().all(|&v| v > 0) && channels % 16 == 0 && filters % 16 == 0 => {
                Conv { images, height, width, channels, filters, patch }
            }
            _ => fail(format!("--conv {t}: expected N,H,W,C,F, C and F multiples of 16")),
        }
    });
    // `--mnk MxNxK` for a product of another shape, the cube of --size otherwise; a
    // convolution's is N H W x F x 9 C.
    let (m, n, k) = match conv {
        Some(v) => (v.images * v.height * v.width, v.filters, 9 * v.channels),
        None => three("--mnk").unwrap_or((size, size, size)),
    };
    let reps = value("--reps").unwrap_or(20);
    // `--split S`: K in S parts, each its own layer of workgroups and its own C (a weight
    // gradient's split K), summed here.
    let split = value("--split").unwrap_or(1);
    if split == 0 || k % split != 0 {
        fail(format!("--split {split}: expected a divisor of K = {k}"));
    }
    // Every tile tried divides the sides; the elements of each operand stay below 2^31 so the
    // module's u32 offsets and C's bytes stay in range.
    let elements = [m as u64 * k as u64, k as u64 * n as u64, m as u64 * n as u64 * split as u64];
    if (conv.is_none() && [m, n, k].iter().any(|&d| d < 64 || d % 64 != 0)) || elements.iter().any(|&e| e >= 1 << 29) {
        fail(format!("--mnk {m}x{n}x{k}: expected multiples of 64, each operand below 2^29 elements"));
    }
    if reps == 0 {
        fail("--reps 0: expected 1 or more".into());
    }
    let shape = |tile: (u32, u32, u32), threads: u32| Product { m, n, k, tile, threads, a_col: flag("--a-col"), b_col: flag("--b-col"), prefetch: flag("--prefetch"), split, tensor: flag("--tensor"), conv, stage: flag("--stage"), double: flag("--double") };
    // `--spv FILE`: the 128 x 128 x 32 module for 256 invocations written out (for spirv-dis and
    // spirv-val), nothing run.
    if let Some(path) = args.iter().position(|a| a == "--spv").and_then(|i| args.get(i + 1)) {
        let words = gemm_module(shape((128, 128, 32), 256));
        std::fs::write(path, bytemuck::cast_slice::<u32, u8>(&words)).unwrap_or_else(|e| fail(format!("{path}: {e}")));
        return;
    }

    let mut instance_desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    instance_desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(instance_desc);
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() }))
        .unwrap_or_else(|e| fail(format!("no Vulkan adapter: {e}")));
    println!("adapter: {}", adapter.get_info().name);
    let wanted = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::PASSTHROUGH_SHADERS;
    if !adapter.features().contains(wanted) {
        println!("the adapter lacks {:?}: nothing to measure", wanted - adapter.features());
        return;
    }
    // SAFETY: the hal adapter is only read (queries) and used to open the device below, while
    // `adapter` lives.
    let hal = unsafe { adapter.as_hal::<Vulkan>() }.unwrap_or_else(|| fail("not a Vulkan adapter".into()));
    let shared = hal.shared_instance();
    let physical = hal.raw_physical_device();
    // SAFETY: a query on the adapter's physical device.
    let extensions = unsafe { shared.raw_instance().enumerate_device_extension_properties(physical) }.unwrap_or_else(|e| fail(format!("extensions: {e}")));
    if !extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(EXTENSION)) {
        println!("the driver has no {}: nothing to measure", EXTENSION.to_string_lossy());
        return;
    }
    // SAFETY: the entry point is the extension's, which the driver lists; the count and then
    // the array it fills are the Vulkan enumeration idiom.
    let flexible: Vec<Flexible> = unsafe {
        let f = shared
            .entry()
            .get_instance_proc_addr(shared.raw_instance().handle(), c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV".as_ptr())
            .unwrap_or_else(|| fail("no vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV".into()));
        let f: FlexibleFn = std::mem::transmute(f);
        let mut count = 0u32;
        let counted = f(physical, &mut count, std::ptr::null_mut());
        if counted != vk::Result::SUCCESS {
            fail(format!("counting the flexible dimensions: {counted:?}"));
        }
        let blank = Flexible { s_type: FLEXIBLE_S_TYPE, p_next: std::ptr::null_mut(), m_granularity: 0, n_granularity: 0, k_granularity: 0, a_type: 0, b_type: 0, c_type: 0, result_type: 0, saturating: 0, scope: 0, workgroup_invocations: 0 };
        let mut list = vec![blank; count as usize];
        let listed = f(physical, &mut count, list.as_mut_ptr());
        if listed != vk::Result::SUCCESS && listed != vk::Result::INCOMPLETE {
            fail(format!("listing the flexible dimensions: {listed:?}"));
        }
        list.truncate(count as usize);
        list
    };
    for f in &flexible {
        println!(
            "flexible: granularity {}x{}x{} A {} B {} C {} result {} scope {} invocations {}",
            f.m_granularity, f.n_granularity, f.k_granularity, f.a_type, f.b_type, f.c_type, f.result_type, f.scope, f.workgroup_invocations
        );
    }
    let mut props2 = Coop2Properties { s_type: PROPERTIES_S_TYPE, p_next: std::ptr::null_mut(), workgroup_scope_max_workgroup_size: 0, flexible_dimensions_max_dimension: 0, workgroup_scope_reserved_shared_memory: 0 };
    let mut props = vk::PhysicalDeviceProperties2::default();
    props.p_next = (&mut props2 as *mut Coop2Properties).cast();
    // SAFETY: a query on the adapter's physical device, its chain one struct of the extension's.
    unsafe { shared.raw_instance().get_physical_device_properties2(physical, &mut props) };
    println!(
        "properties: workgroup scope at most {} invocations, flexible dimensions at most {}, {} bytes of shared memory reserved",
        props2.workgroup_scope_max_workgroup_size, props2.flexible_dimensions_max_dimension, props2.workgroup_scope_reserved_shared_memory
    );
    // `--invocations N` picks the configuration; the largest workgroup otherwise.
    let invocations = value("--invocations");
    let Some(config) = flexible
        .iter()
        .filter(|f| f.scope == WORKGROUP && f.a_type == F16 && f.b_type == F16 && f.c_type == F32 && f.result_type == F32)
        .filter(|f| invocations.is_none_or(|n| f.workgroup_invocations == n))
        .max_by_key(|f| f.workgroup_invocations)
        .copied()
    else {
        println!("no workgroup-scope f16 x f16 + f32 configuration{}: nothing to measure", invocations.map(|n| format!(" on {n} invocations")).unwrap_or_default());
        return;
    };
    println!("configuration: granularity {}x{}x{} on {} invocations", config.m_granularity, config.n_granularity, config.k_granularity, config.workgroup_invocations);

    let limits = adapter.limits();
    // Leaked: the device keeps the create info's chain only for the call, and this probe
    // creates one device.
    let features2: &'static mut Coop2Features = Box::leak(Box::new(Coop2Features {
        s_type: FEATURES_S_TYPE,
        p_next: std::ptr::null(),
        workgroup_scope: 1,
        flexible_dimensions: 1,
        reductions: 0,
        conversions: 0,
        per_element_operations: 0,
        tensor_addressing: 1,
        block_loads: 0,
    }));
    // One extension the driver lists and its feature struct, chained in front of what
    // wgpu-hal put there; nothing removed.
    let callback: Box<wgpu::hal::vulkan::CreateDeviceCallback> = Box::new(move |args| {
        args.extensions.push(EXTENSION);
        features2.p_next = args.create_info.p_next;
        args.create_info.p_next = (&*features2 as *const Coop2Features).cast();
    });
    // SAFETY: the callback only adds (above); the features are the adapter's.
    let open = unsafe { hal.open_with_callback(wanted, &limits, &wgpu::MemoryHints::Performance, Some(callback)) }
    .unwrap_or_else(|e| fail(format!("opening the device with {}: {e}", EXTENSION.to_string_lossy())));
    drop(hal);
    let desc = wgpu::DeviceDescriptor {
        label: Some("coop2_probe"),
        required_features: wanted,
        required_limits: limits,
        // SAFETY: only this probe's passthrough module uses the device's cooperative matrices.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    // SAFETY: `open` came from this adapter's hal adapter with the features asked for here.
    let (device, queue) = unsafe { adapter.create_device_from_hal(open, &desc) }.unwrap_or_else(|e| fail(format!("device: {e}")));
    // A shader the driver accepts may still fault; say so instead of failing later on a buffer.
    device.set_device_lost_callback(|reason, msg| eprintln!("coop2_probe: device lost ({reason:?}): {msg}"));
    device.on_uncaptured_error(std::sync::Arc::new(|e| eprintln!("coop2_probe: uncaptured error: {e}")));

    // A holds the images for a convolution (N H W C), else M x K.
    let a_len = conv.map_or(m * k, |v| v.images * v.height * v.width * v.channels);
    let a_q: Vec<i32> = (0..a_len).map(|i| ((i.wrapping_mul(2_654_435_761) >> 13) % 9) as i32 - 4).collect();
    let b_q: Vec<i32> = (0..k * n).map(|i| ((i.wrapping_mul(2_246_822_519) >> 11) % 9) as i32 - 4).collect();
    // q / 4 for |q| <= 4: exact in f16.
    let a16: Vec<u16> = a_q.iter().map(|&q| f16_bits(q as f32 / 4.0)).collect();
    let b16: Vec<u16> = b_q.iter().map(|&q| f16_bits(q as f32 / 4.0)).collect();
    use wgpu::util::DeviceExt;
    let storage = wgpu::BufferUsages::STORAGE;
    let buf_a = device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some("a"), contents: bytemuck::cast_slice(&a16), usage: storage });
    let buf_b = device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some("b"), contents: bytemuck::cast_slice(&b16), usage: storage });
    let c_bytes = m as u64 * n as u64 * split as u64 * 4;
    let buf_c = device.create_buffer(&wgpu::BufferDescriptor { label: Some("c"), size: c_bytes, usage: storage | wgpu::BufferUsages::COPY_SRC, mapped_at_creation: false });
    let readback = device.create_buffer(&wgpu::BufferDescriptor { label: Some("readback"), size: c_bytes, usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ, mapped_at_creation: false });
    let entry = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Storage { read_only }, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    };
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: None, entries: &[entry(0, true), entry(1, true), entry(2, false)] });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &[
            wgpu::BindGroupEntry { binding: 0, resource: buf_a.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 1, resource: buf_b.as_entire_binding() },
            wgpu::BindGroupEntry { binding: 2, resource: buf_c.as_entire_binding() },
        ],
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor { label: None, bind_group_layouts: &[Some(&layout)], immediate_size: 0 });

    let g = |x: u32, step: u32| x.div_ceil(step) * step;
    let (gm, gn, gk) = (config.m_granularity.max(1), config.n_granularity.max(1), config.k_granularity.max(1));
    // `--tile MxNxK` tries that tile alone.
    let forced = three("--tile");
    let candidates: Vec<(u32, u32, u32)> = match forced {
        Some(t) => vec![t],
        None => vec![(128, 128, 32), (128, 128, 64), (128, 256, 32), (256, 128, 32), (256, 256, 32), (64, 64, 32), (128, 64, 32)],
    };
    let mut tiles: Vec<(u32, u32, u32)> = Vec::new();
    for (tm, tn, tk) in candidates {
        let t = (g(tm, gm), g(tn, gn), g(tk, gk));
        let rows_fit = match conv {
            Some(v) if flag("--stage") => m % t.0 == 0 && v.channels % t.2 == 0 && t.2 % 8 == 0 && (t.0 * t.2 / 8) % config.workgroup_invocations == 0,
            Some(v) => v.patch.0 * v.patch.1 == t.0 && v.channels % t.2 == 0,
            None => m % t.0 == 0 && (k / split) % t.2 == 0,
        };
        if !tiles.contains(&t) && rows_fit && n % t.1 == 0 {
            tiles.push(t);
        }
    }
    if tiles.is_empty() {
        fail(format!("{m}x{n}x{k}: no tile at the driver's granularity {gm}x{gn}x{gk} divides it"));
    }
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    for tile in tiles {
        let product = shape(tile, config.workgroup_invocations);
        let words = gemm_module(product);
        let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
        // SAFETY: the module is the SPIR-V above, whose three bindings and entry point match
        // `pipeline_layout` and the dispatch below.
        let module = unsafe {
            device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                label: Some("coop2 gemm"),
                entry_points: Cow::Owned(vec![wgpu::PassthroughShaderEntryPoint { name: "main".into(), workgroup_size: (config.workgroup_invocations, 1, 1) }]),
                spirv: Some(Cow::Owned(words)),
                ..Default::default()
            })
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("coop2 gemm"),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(invalid.pop()) {
            println!("tile {tile:?}: the driver refused it: {e}");
            continue;
        }
        let run = |count: u32| {
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                for _ in 0..count {
                    match conv {
                        Some(_) if product.stage => pass.dispatch_workgroups(n / tile.1, m / tile.0, 1),
                        Some(v) => pass.dispatch_workgroups(n / tile.1, v.height.div_ceil(v.patch.0) * v.width.div_ceil(v.patch.1), v.images),
                        None => pass.dispatch_workgroups(n / tile.1, m / tile.0, split),
                    }
                }
            }
            queue.submit([encoder.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely()).unwrap_or_else(|e| fail(format!("poll: {e}")));
        };
        run(3);
        let start = std::time::Instant::now();
        run(reps);
        let ms = start.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let mut encoder = device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&buf_c, 0, &readback, 0, c_bytes);
        queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        readback.slice(..).map_async(wgpu::MapMode::Read, move |r| tx.send(r).unwrap_or(()));
        device.poll(wgpu::PollType::wait_indefinitely()).unwrap_or_else(|e| fail(format!("poll: {e}")));
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => fail(format!("tile {tile:?}: mapping C: {e}")),
            Err(_) => fail(format!("tile {tile:?}: mapping C never answered")),
        }
        let view = readback.get_mapped_range(0..c_bytes).unwrap_or_else(|e| fail(format!("reading C back: {e:?}")));
        let c: Vec<f32> = bytemuck::cast_slice(&view).to_vec();
        drop(view);
        readback.unmap();
        // Sampled entries against an exact f64 sum (each product is a multiple of 1/16).
        let mut worst = 0.0f64;
        for s in 0..64u32 {
            let (i, j) = (s.wrapping_mul(2_654_435_761).wrapping_add(s) % m, (s * 40_503 + 7) % n);
            let want: f64 = match conv {
                // Output pixel i (image, row, column) against the taps inside the image.
                Some(v) => {
                    let (img, y, x) = (i / (v.height * v.width), i / v.width % v.height, i % v.width);
                    let mut sum = 0.0;
                    for tap in 0..9 {
                        let (yy, xx) = ((y + tap / 3) as i64 - 1, (x + tap % 3) as i64 - 1);
                        if yy < 0 || xx < 0 || yy >= v.height as i64 || xx >= v.width as i64 {
                            continue;
                        }
                        let pixel = ((img * v.height + yy as u32) * v.width + xx as u32) as usize * v.channels as usize;
                        for ch in 0..v.channels as usize {
                            sum += a_q[pixel + ch] as f64 * b_q[(tap as usize * v.channels as usize + ch) * n as usize + j as usize] as f64 / 16.0;
                        }
                    }
                    sum
                }
                None => (0..k).map(|l| a_q[product.a_at(i, l)] as f64 * b_q[product.b_at(l, j)] as f64 / 16.0).sum(),
            };
            let got: f64 = (0..split as usize).map(|z| c[z * (m * n) as usize + (i * n + j) as usize] as f64).sum();
            worst = worst.max(if got.is_nan() { f64::INFINITY } else { (got - want).abs() });
        }
        println!(
            "{m}x{n}x{k}{}{}{}{}{}{} tile {}x{}x{} on {} invocations: {ms:.3} ms, {:.1} TFLOP/s, worst sampled error {worst:.2e}{}",
            if product.a_col { " A^T" } else { "" },
            if product.b_col { " B^T" } else { "" },
            if product.prefetch { " prefetch" } else { "" },
            if product.tensor { " tensor" } else { "" },
            match conv {
                Some(v) if product.stage => format!(" conv3x3 {}x{}x{}x{}>{} staged{}", v.images, v.height, v.width, v.channels, v.filters, if product.double { " double" } else { "" }),
                Some(v) => format!(" conv3x3 {}x{}x{}x{}>{} patch {}x{}", v.images, v.height, v.width, v.channels, v.filters, v.patch.0, v.patch.1),
                None => String::new(),
            },
            if split > 1 { format!(" split {split}") } else { String::new() },
            tile.0,
            tile.1,
            tile.2,
            config.workgroup_invocations,
            flops / ms / 1e9,
            if worst == 0.0 { "" } else { " (WRONG)" }
        );
    }
}
