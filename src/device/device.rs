//! One `Device` per opened adapter: the wgpu device and queue, its pipeline cache, its
//! buffer pool, and the plain (not hot-path) ways to move data in and out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use super::adapters::{vendor_name, AdapterEntry, WANTED_FEATURES};
use super::checks::ShaderChecks;
use super::half;
use super::pool::Pool;
use super::tensor::{DType, Lease, Tensor};
use crate::kernels::{Dispatch, Shader};
use crate::{bail, Error, Result};

/// What the tensor-core GEMM's module needs of the device (its epilogue syncs each subgroup
/// with `subgroupBarrier`).
const COOP16_FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER);

/// Which compiled module a shader gets: its text (by the address and length of its `'static`
/// source, which no other text can share) and whether it keeps runtime bounds checks. Keyed
/// by content rather than name, so a user's shader named like a built-in one cannot pick up
/// the built-in module.
type ModuleKey = (usize, usize, bool);
type PipelineKey = (ModuleKey, &'static str, Vec<(&'static str, u64)>);

/// One opened adapter: its wgpu device and queue, with the compiled shaders, pipelines and buffer
/// pool every tensor and plan on it shares.
pub struct Device {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    /// Position in the selection: replica number in data-parallel training.
    pub ordinal: usize,
    /// Shaders keep wgpu's bounds checks or run trusted (what release builds ship).
    checks: ShaderChecks,
    modules: Mutex<HashMap<ModuleKey, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    pool: Arc<Pool>,
    /// The first error wgpu reported outside an error scope; surfaced by `check`.
    lost: Arc<Mutex<Option<String>>>,
    /// Whether the tensor-core GEMM can run here (see [`Device::has_coop16`]).
    coop16: bool,
    /// Working memory that kernels use only between their own dispatches (the Winograd
    /// convolution's transformed tiles), one tensor per slot shared by every plan: the
    /// dispatches of all plans run in one queue's order, so no two uses overlap.
    scratch: Mutex<Vec<Option<Tensor>>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({}: {} ({:?}))", self.ordinal, self.info.name, self.info.backend)
    }
}

impl Device {
    /// Opens `entry` as replica `ordinal`, compiling every shader module as `checks` says.
    pub fn open(entry: &AdapterEntry, ordinal: usize, checks: ShaderChecks) -> Result<Device> {
        if let Some(why) = entry.unusable() {
            return Err(Error::Device(why));
        }
        let adapter = &entry.adapter;
        let mode = limits_mode()?;
        // The WebGPU test mode also leaves out every optional feature: each kernel family must
        // run without subgroups, f16, timestamps or cooperative matrices.
        let features = if mode == LimitsMode::WebGpu { wgpu::Features::empty() } else { adapter.features() & WANTED_FEATURES };
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: only the cooperative-matrix kernels use experimental features, and they
            // are validated against the adapter's reported configurations before use.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let desc = wgpu::DeviceDescriptor {
            label: Some("convoy"),
            required_features: features,
            required_limits: mode.limits(&adapter.limits()),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let coop16 = features.contains(COOP16_FEATURES)
            && entry.info.subgroup_min_size == 32
            && entry.info.subgroup_max_size == 32
            && adapter.cooperative_matrix_properties().iter().any(|c| {
                (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
                    && c.ab_type == wgpu::CooperativeScalarType::F16
                    && c.cr_type == wgpu::CooperativeScalarType::F32
            });
        let (device, queue) = match pollster::block_on(adapter.request_device(&desc)) {
            Ok(pair) => pair,
            // A driver may list limits it then refuses to create a device with: try again
            // with WebGPU's defaults, keeping the adapter's buffer sizes, and say which failed.
            Err(first) => {
                let retry = wgpu::DeviceDescriptor { required_limits: webgpu_limits(&adapter.limits()), ..desc.clone() };
                pollster::block_on(adapter.request_device(&retry)).map_err(|second| {
                    Error::Device(format!(
                        "cannot open adapter {} ({}, {:?}): {first} (with its own limits), {second} (with WebGPU's default limits)",
                        entry.index, entry.info.name, entry.info.backend
                    ))
                })?
            }
        };
        let lost = Arc::new(Mutex::new(None));
        let sink = lost.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = sink.lock().unwrap();
            if slot.is_none() {
                *slot = Some(e.to_string());
            }
        }));
        Ok(Device {
            device,
            queue,
            info: entry.info.clone(),
            ordinal,
            checks,
            modules: Mutex::default(),
            pipelines: Mutex::default(),
            scratch: Mutex::default(),
            pool: Arc::new(Pool::default()),
            lost,
            coop16,
        })
    }

    /// Name, vendor, backend and type, as the driver reports them.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }
    /// The adapter's name, for messages and `convoy devices`.
    pub fn name(&self) -> &str {
        &self.info.name
    }
    /// The wgpu backend, as text (`Vulkan`, `Metal`, ...).
    pub fn backend(&self) -> String {
        format!("{:?}", self.info.backend)
    }
    /// The vendor's name, from the PCI vendor id.
    pub fn vendor(&self) -> &'static str {
        vendor_name(self.info.vendor)
    }
    /// Whether products can run on 16x16x16 cooperative matrices (f16 operands, f32
    /// accumulation) with 32-invocation subgroups, as `shaders/conv2d_coop.wgsl` needs:
    /// NVIDIA's tensor cores through Vulkan; not lavapipe.
    pub fn has_coop16(&self) -> bool {
        self.coop16
    }
    /// The features the device was opened with.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }
    /// The limits the device was opened with (binding sizes, workgroup sizes).
    pub fn limits(&self) -> wgpu::Limits {
        self.device.limits()
    }
    /// The underlying wgpu device, for code that builds its own buffers or pipelines.
    pub fn wgpu(&self) -> &wgpu::Device {
        &self.device
    }
    /// The device's queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }
    /// A software adapter (lavapipe): its work runs on the host's own cores.
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }
    /// True when this device's shaders keep wgpu's runtime bounds checks.
    pub fn is_checked(&self) -> bool {
        self.checks.is_checked()
    }
    /// How this device compiles its shaders.
    pub fn shader_checks(&self) -> ShaderChecks {
        self.checks
    }

    /// Returns the first error the GPU reported since the device was opened, if any.
    pub fn check(&self) -> Result<()> {
        match self.lost.lock().unwrap().clone() {
            Some(e) => Err(Error::Gpu(format!("{} reported: {e}", self.info.name))),
            None => Ok(()),
        }
    }

    /// A compute pipeline for `entry` of `shader`, specialised by pipeline-overridable
    /// `constants`; built once per device and cached.
    pub fn pipeline(&self, shader: &Shader, entry: &'static str, constants: &[(&'static str, f64)]) -> wgpu::ComputePipeline {
        let key = (self.module_key(shader), entry, constants.iter().map(|(k, v)| (*k, v.to_bits())).collect::<Vec<_>>());
        if let Some(p) = self.pipelines.lock().unwrap().get(&key) {
            return p.clone();
        }
        super::pipeline_log::record(shader, entry, constants);
        let module = self.module(shader);
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                // Every kernel writes workgroup memory before reading it.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        self.pipelines.lock().unwrap().insert(key, pipeline.clone());
        pipeline
    }

    /// Whether `shader` compiles with runtime bounds checks here: always for a user's shader
    /// (see [`Shader::new`]), else as the device was opened.
    pub fn compiles_checked(&self, shader: &Shader) -> bool {
        self.checks.is_checked() || !shader.is_trusted()
    }

    fn module_key(&self, shader: &Shader) -> ModuleKey {
        (shader.source.as_ptr() as usize, shader.source.len(), self.compiles_checked(shader))
    }

    fn module(&self, shader: &Shader) -> wgpu::ShaderModule {
        let key = self.module_key(shader);
        let mut modules = self.modules.lock().unwrap();
        if let Some(m) = modules.get(&key) {
            return m.clone();
        }
        let desc = wgpu::ShaderModuleDescriptor { label: Some(shader.name), source: wgpu::ShaderSource::Wgsl(shader.source.into()) };
        let module = if key.2 {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: only trusted shaders get here: convoy's own, whose wrappers validate
            // shapes on the host before dispatch and whose every index is guarded against the
            // sizes it is given (the kernel tests' path sweeps, tests/kernels/paths.rs, run
            // every shader both ways), and those whose authors took on the same contract
            // through the `unsafe` `Shader::new_unchecked`.
            unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
        };
        modules.insert(key, module.clone());
        module
    }

    /// A bind group for group 0 of `pipeline`, binding `n` to each listed buffer range.
    pub fn bind_group(&self, pipeline: &wgpu::ComputePipeline, bindings: &[(u32, wgpu::BufferBinding<'_>)]) -> wgpu::BindGroup {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<_> = bindings
            .iter()
            .map(|(binding, buf)| wgpu::BindGroupEntry { binding: *binding, resource: wgpu::BindingResource::Buffer(buf.clone()) })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries })
    }

    /// A uniform buffer holding `params`, written once when a plan is compiled.
    pub fn uniform<T: bytemuck::Pod>(&self, params: &T) -> wgpu::Buffer {
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("params"),
            contents: bytemuck::bytes_of(params),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        })
    }

    /// Frees the pool's idle buffers and lets the driver reclaim them (see `Pool::release_idle`).
    pub fn release_idle(&self) {
        // A scratch tensor sized for a batch that did not fit would hold on to its memory.
        self.scratch.lock().unwrap().clear();
        self.pool.release_idle();
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
    }

    /// `floats` of the shared working memory of `slot` (see the `scratch` field), grown
    /// when a plan needs more: plans recorded before keep the smaller buffer they bound.
    pub(crate) fn scratch(&self, slot: usize, floats: usize) -> Result<Tensor> {
        let mut slots = self.scratch.lock().unwrap();
        if slots.len() <= slot {
            slots.resize(slot + 1, None);
        }
        if let Some(t) = &slots[slot]
            && t.len() >= floats
        {
            return t.view(0, &[floats]);
        }
        // Not from the pool: a replaced or released scratch tensor would go back there and be
        // handed to the next tensor while plans recorded with it still write it (as the
        // split-K partials, it lives as long as the last bind group that uses it). Kernel
        // tests on four threads of one H100 saw a dense output overwritten that way.
        let bytes = self.binding_bytes(&[floats], DType::F32)?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor { label: Some("convoy scratch"), size: bytes.div_ceil(16) * 16, usage: super::pool::USAGE, mapped_at_creation: false });
        let t = Tensor::from_lease(Lease { buffer, pool: std::sync::Weak::new() }, vec![floats], DType::F32);
        slots[slot] = Some(t.clone());
        Ok(t)
    }

    /// Bytes of a tensor of `shape` and `dtype`, or an error naming the shape where they do
    /// not fit one binding of this device.
    pub(crate) fn binding_bytes(&self, shape: &[usize], dtype: DType) -> Result<u64> {
        let max = self.device.limits().max_storage_buffer_binding_size;
        // The shape comes from a model's declared sizes and a batch size: an overflowing
        // product is too large for any binding, not a panic.
        let Some(len) = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= (u64::MAX / 4) as usize) else {
            bail!(Shape, "tensor {shape:?} has more elements than fit in 64 bits, more than {}'s largest binding ({max})", self.info.name);
        };
        let bytes = dtype.bytes(len);
        if bytes > max {
            bail!(Shape, "tensor {shape:?} needs {bytes} bytes, more than {}'s largest binding ({max})", self.info.name);
        }
        Ok(bytes)
    }

    /// An uninitialised tensor from the pool (contents may be stale).
    pub fn alloc(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let bytes = self.binding_bytes(shape, dtype)?;
        let (buffer, _) = self.pool.take(&self.device, bytes);
        Ok(Tensor::from_lease(Lease { buffer, pool: Arc::downgrade(&self.pool) }, shape.to_vec(), dtype))
    }

    /// A zero-filled f32 tensor.
    pub fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        self.zeros_of(shape, DType::F32)
    }

    /// A zero-filled tensor of `dtype`.
    pub fn zeros_of(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let t = self.alloc(shape, dtype)?;
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.clear_buffer(t.buffer(), t.offset(), Some(t.bytes().div_ceil(4) * 4));
        self.queue.submit([enc.finish()]);
        Ok(t)
    }

    /// A new f32 tensor holding `data`, which must have as many elements as `shape`.
    pub fn upload(&self, shape: &[usize], data: &[f32]) -> Result<Tensor> {
        self.upload_as(shape, DType::F32, bytemuck::cast_slice(data), data.len())
    }
    /// A new u32 tensor (labels, indices) holding `data`, which must have as many elements as
    /// `shape`.
    pub fn upload_u32(&self, shape: &[usize], data: &[u32]) -> Result<Tensor> {
        self.upload_as(shape, DType::U32, bytemuck::cast_slice(data), data.len())
    }
    /// A new u8 tensor (images) holding `data`, packed four to a word.
    pub fn upload_u8(&self, shape: &[usize], data: &[u8]) -> Result<Tensor> {
        self.upload_as(shape, DType::U8, data, data.len())
    }

    /// A new f16 tensor holding `data` rounded to f16 (to nearest, ties to even; see
    /// [`super::half`]), packed two to a word.
    pub fn upload_f16(&self, shape: &[usize], data: &[f32]) -> Result<Tensor> {
        let halves: Vec<u16> = data.iter().map(|&x| half::f16_bits(x)).collect();
        self.upload_as(shape, DType::F16, bytemuck::cast_slice(&halves), data.len())
    }

    fn upload_as(&self, shape: &[usize], dtype: DType, bytes: &[u8], len: usize) -> Result<Tensor> {
        if shape.iter().product::<usize>() != len {
            bail!(Shape, "upload of {len} elements into shape {shape:?}");
        }
        let t = self.alloc(shape, dtype)?;
        self.write_bytes(t.buffer(), t.offset(), bytes);
        Ok(t)
    }

    /// Overwrites a tensor's contents.
    pub fn write<T: bytemuck::Pod>(&self, t: &Tensor, data: &[T]) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() as u64 > t.buffer().size() || (!matches!(t.dtype(), DType::U8 | DType::F16) && bytes.len() as u64 != t.bytes()) {
            bail!(Shape, "write of {} bytes into tensor {:?} of {} bytes", bytes.len(), t.shape(), t.bytes());
        }
        self.write_bytes(t.buffer(), t.offset(), bytes);
        Ok(())
    }

    /// Copies bytes through a staging buffer mapped at creation. For set-up and tests; the
    /// training step uploads through its own `StagingRing`.
    pub fn write_bytes(&self, dst: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        let padded = (bytes.len() as u64).div_ceil(4) * 4;
        if padded == 0 {
            return;
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("upload"),
            size: padded,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        {
            let mut view = staging.get_mapped_range_mut(..).expect("a buffer mapped at creation is mapped");
            let mut tail = bytes.to_vec();
            tail.resize(padded as usize, 0);
            view.copy_from_slice(&tail);
        }
        staging.unmap();
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&staging, 0, dst, offset, padded);
        self.queue.submit([enc.finish()]);
    }

    /// Records `dispatches` into one compute pass and submits it; does not wait.
    pub fn run(&self, dispatches: &[Dispatch]) -> wgpu::SubmissionIndex {
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for d in dispatches {
                d.encode(&mut pass);
            }
        }
        self.queue.submit([enc.finish()])
    }

    /// Blocks until all submitted work has finished.
    pub fn sync(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("{}: waiting for the GPU failed: {e}", self.info.name)))?;
        self.check()
    }

    /// Reads back a whole tensor's bytes through a MAP_READ buffer.
    pub fn read_bytes(&self, t: &Tensor) -> Result<Vec<u8>> {
        let size = t.bytes().div_ceil(4) * 4;
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            // MAP_READ buffers may only be copy destinations.
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(t.buffer(), t.offset(), &readback, 0, size);
        self.queue.submit([enc.finish()]);
        map_and_wait(&self.device, &readback, wgpu::MapMode::Read)?;
        let mut bytes = readback.get_mapped_range(..).map_err(|e| Error::Gpu(format!("readback: {e:?}")))?.to_vec();
        bytes.truncate(t.bytes() as usize);
        readback.unmap();
        self.check()?;
        Ok(bytes)
    }

    /// Reads an f32 tensor back to the host, waiting for the GPU. For evaluation, set-up and tests;
    /// not for the training step.
    pub fn read(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.dtype() != DType::F32 {
            bail!(Shape, "read of a {:?} tensor as f32", t.dtype());
        }
        Ok(bytemuck::cast_slice(&self.read_bytes(t)?).to_vec())
    }
    /// Reads an activation back as f32 values, whichever way it is stored (F32, or F16
    /// widened exactly), waiting for the GPU.
    pub fn read_values(&self, t: &Tensor) -> Result<Vec<f32>> {
        match t.dtype() {
            DType::F16 => self.read_f16(t),
            _ => self.read(t),
        }
    }
    /// Reads an f16 tensor back to the host as the f32 values it holds (exactly), waiting
    /// for the GPU.
    pub fn read_f16(&self, t: &Tensor) -> Result<Vec<f32>> {
        if t.dtype() != DType::F16 {
            bail!(Shape, "read of a {:?} tensor as f16", t.dtype());
        }
        let bytes = self.read_bytes(t)?;
        Ok(bytes.chunks_exact(2).take(t.len()).map(|h| half::f16_value(u16::from_le_bytes([h[0], h[1]]))).collect())
    }
    /// Reads a u32 tensor back to the host, waiting for the GPU.
    pub fn read_u32(&self, t: &Tensor) -> Result<Vec<u32>> {
        if t.dtype() != DType::U32 {
            bail!(Shape, "read of a {:?} tensor as u32", t.dtype());
        }
        Ok(bytemuck::cast_slice(&self.read_bytes(t)?).to_vec())
    }

    /// Bytes held idle in this device's pool.
    pub fn pooled_bytes(&self) -> u64 {
        self.pool.idle_bytes()
    }
}

/// Maps `buffer` and blocks until the mapping is ready.
pub fn map_and_wait(device: &wgpu::Device, buffer: &wgpu::Buffer, mode: wgpu::MapMode) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    buffer.map_async(mode, .., move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(format!("waiting for a mapping: {e}")))?;
    rx.recv()
        .map_err(|_| Error::Gpu("mapping callback never ran".into()))?
        .map_err(|e| Error::Gpu(format!("mapping a buffer failed: {e}")))
}

/// The environment variable that picks the limits devices are opened with: `portable` (the
/// default) asks for WebGPU's defaults except the buffer, binding and workgroup-memory sizes,
/// which the kernels scale to; `webgpu` for WebGPU's defaults except the buffer and binding
/// sizes (16 KB of workgroup memory) and no optional feature: the portability test mode;
/// `adapter` for everything the adapter offers.
pub const LIMITS_ENV: &str = "CONVOY_LIMITS";

/// Set by [`use_portable_limits`]: devices opened after it take WebGPU's default limits.
static PORTABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Opens every later device with WebGPU's default limits and no optional feature, as
/// `CONVOY_LIMITS=webgpu` does, from code (a test binary that must not race other threads
/// over the environment).
pub fn use_portable_limits() {
    PORTABLE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// What [`LIMITS_ENV`] asks devices to be opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LimitsMode {
    /// WebGPU's defaults except the buffer, binding and workgroup-memory sizes.
    Portable,
    /// WebGPU's defaults except the buffer and binding sizes, and no optional feature.
    WebGpu,
    /// Everything the adapter offers.
    Adapter,
}

fn limits_mode() -> Result<LimitsMode> {
    if PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(LimitsMode::WebGpu);
    }
    match std::env::var(LIMITS_ENV).as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("portable") => Ok(LimitsMode::Portable),
        Ok("webgpu") => Ok(LimitsMode::WebGpu),
        Ok("adapter") => Ok(LimitsMode::Adapter),
        Ok(other) => Err(Error::Config(format!("{LIMITS_ENV}=`{other}`: expected portable, webgpu or adapter"))),
    }
}

impl LimitsMode {
    /// The limits to ask an adapter with `own` limits for.
    fn limits(self, own: &wgpu::Limits) -> wgpu::Limits {
        match self {
            LimitsMode::Portable => wgpu::Limits {
                // The GEMM tiles are chosen by the workgroup memory the device grants
                // (`Tile::workgroup_bytes`, `CoopTile`): the fast ones need 24-48 KB, which Metal and DX12
                // (32 KB) and Vulkan's GPUs (48 KB and more) offer beyond WebGPU's 16 KB.
                max_compute_workgroup_storage_size: own.max_compute_workgroup_storage_size,
                ..webgpu_limits(own)
            },
            LimitsMode::WebGpu => webgpu_limits(own),
            LimitsMode::Adapter => own.clone(),
        }
    }
}

/// WebGPU's default limits (no more than what the adapter has, for GL adapters below them),
/// with the adapter's buffer and binding sizes: large batches need them, and every backend
/// offers its own.
fn webgpu_limits(own: &wgpu::Limits) -> wgpu::Limits {
    wgpu::Limits { max_buffer_size: own.max_buffer_size, max_storage_buffer_binding_size: own.max_storage_buffer_binding_size, ..wgpu::Limits::default() }
        .or_worse_values_from(own)
}
