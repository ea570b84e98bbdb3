//! Finding adapters and turning a selection string (`all`, `0,1`, a name, a PCI bus id,
//! `software`, `software:N`) into opened devices.

use std::sync::Arc;

use serde::Serialize;

use super::{Device, ShaderChecks};
use crate::{Error, Result};

/// Optional features the kernels can use when the adapter offers them.
pub const WANTED_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
    .union(wgpu::Features::MEMORY_DECORATION_COHERENT);

/// An adapter convoy can use, as listed by `convoy devices`.
#[derive(Clone, Debug)]
pub struct AdapterEntry {
    /// Position in wgpu's enumeration: the number a `--devices 0,2` selection names.
    pub index: usize,
    /// The adapter, not yet opened.
    pub adapter: wgpu::Adapter,
    /// Name, vendor, backend and type, as the driver reports them.
    pub info: wgpu::AdapterInfo,
}

impl AdapterEntry {
    /// A software adapter (lavapipe), used only when no GPU is present.
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Whether wgpu can run compute shaders on it. Not so on NVIDIA's GL driver: wgpu's GL
    /// backend asks EGL for OpenGL 3.3 wherever desktop GL exists, and NVIDIA gives exactly
    /// that (`3.3.0 NVIDIA 580.159.04`); wgpu counts its compute-shader extension as support,
    /// but naga writes compute shaders only for GLSL 4.30 and ES 3.10 up, so creating the
    /// device (wgpu's own validation pipelines) and every pipeline fail ("Parent device is
    /// lost").
    pub fn computes(&self) -> bool {
        let listed = self.adapter.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS);
        listed && (self.info.backend != wgpu::Backend::Gl || gl_version_computes(&self.info.driver_info))
    }

    /// Why it cannot be opened, if it cannot: the one-line error [`Device::open`] gives.
    ///
    /// [`Device::open`]: crate::Device::open
    pub fn unusable(&self) -> Option<String> {
        (!self.computes()).then(|| {
            format!(
                "adapter {} ({}, {:?}) cannot run compute shaders through wgpu: its context is OpenGL `{}` (wgpu asks for 3.3 where desktop GL exists), and wgpu's shader translation needs 4.3 or ES 3.1; use the GPU's Vulkan adapter",
                self.index, self.info.name, self.info.backend, self.info.driver_info
            )
        })
    }
}

/// What `convoy devices --json` prints for one adapter.
#[derive(Serialize, Debug)]
pub struct AdapterSummary {
    /// Position in wgpu's enumeration: the number a `--devices` selection names.
    pub index: usize,
    /// The adapter's name, as the driver reports it.
    pub name: String,
    /// The vendor's name, from the PCI vendor id ([`vendor_name`]).
    pub vendor: String,
    /// The wgpu backend (`Vulkan`, `Metal`, `Dx12`, `Gl`).
    pub backend: String,
    #[serde(rename = "type")]
    /// wgpu's device type (`DiscreteGpu`, `IntegratedGpu`, `Cpu` for software adapters).
    pub device_type: String,
    /// The PCI bus id, empty where the backend does not report one.
    pub pci_bus_id: String,
    /// The driver's name and version.
    pub driver: String,
    /// Whether the default selection (`all`) trains on it: every hardware adapter, or the first
    /// software one when there is none.
    pub default: bool,
    /// Whether wgpu can run compute shaders on it ([`AdapterEntry::computes`]): convoy opens
    /// only adapters that can.
    pub compute_shaders: bool,
    /// Largest storage buffer binding, in bytes: bounds the largest tensor.
    pub max_storage_buffer_binding_size: u64,
    /// Largest buffer, in bytes.
    pub max_buffer_size: u64,
    /// Workgroup shared memory, in bytes: bounds the GEMM tiles.
    pub max_compute_workgroup_storage_size: u32,
    /// Most invocations in one workgroup.
    pub max_compute_invocations_per_workgroup: u32,
    /// Most workgroups along one dispatch dimension.
    pub max_compute_workgroups_per_dimension: u32,
    /// The optional features convoy uses that the adapter has (timestamps, f16, subgroups,
    /// cooperative matrices).
    pub features: Vec<String>,
}

/// The vendor's name for a PCI vendor id (`0x10de`: NVIDIA), or "unknown".
pub fn vendor_name(id: u32) -> &'static str {
    match id {
        0x10de => "NVIDIA",
        0x1002 | 0x1022 => "AMD",
        0x8086 => "Intel",
        0x106b => "Apple",
        0x13b5 => "ARM",
        0x5143 => "Qualcomm",
        0x10005 => "Mesa",
        _ => "unknown",
    }
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// The environment variable that picks the graphics API (`vulkan`, `metal`, `dx12`, `gl`),
/// as the command line's `--backend` does.
pub const BACKEND_ENV: &str = "CONVOY_BACKEND";

static CHOSEN_BACKEND: std::sync::Mutex<Option<wgpu::Backends>> = std::sync::Mutex::new(None);

/// The backend a name selects: `vulkan`, `metal`, `dx12` or `gl` (case-insensitive).
pub fn parse_backend(name: &str) -> Result<wgpu::Backends> {
    Ok(match name.trim().to_ascii_lowercase().as_str() {
        "vulkan" => wgpu::Backends::VULKAN,
        "metal" => wgpu::Backends::METAL,
        "dx12" => wgpu::Backends::DX12,
        "gl" => wgpu::Backends::GL,
        _ => return Err(Error::Config(format!("backend `{name}`: expected vulkan, metal, dx12 or gl"))),
    })
}

/// Makes [`adapters`] (and so every selection this process opens) use only the API `name`
/// names, over [`BACKEND_ENV`]; what the command line's `--backend` calls.
pub fn set_backend(name: &str) -> Result<()> {
    *CHOSEN_BACKEND.lock().unwrap_or_else(|e| e.into_inner()) = Some(parse_backend(name)?);
    Ok(())
}

/// The API chosen by [`set_backend`] or [`BACKEND_ENV`], if any; a bad variable is an error.
pub fn chosen_backend() -> Result<Option<wgpu::Backends>> {
    if let Some(b) = *CHOSEN_BACKEND.lock().unwrap_or_else(|e| e.into_inner()) {
        return Ok(Some(b));
    }
    match std::env::var(BACKEND_ENV) {
        Ok(v) if !v.trim().is_empty() => match parse_backend(&v) {
            Ok(b) => Ok(Some(b)),
            Err(_) => Err(Error::Config(format!("{BACKEND_ENV}=`{v}`: expected vulkan, metal, dx12 or gl"))),
        },
        _ => Ok(None),
    }
}

/// Every adapter convoy would consider, hardware first, then software. Unless an API is
/// chosen ([`set_backend`], [`BACKEND_ENV`]), GL adapters are only taken when no
/// Vulkan/Metal/DX12 adapter exists: the same GPU shows up under both, and the GL path lacks
/// the compute features the kernels want. Opens no device; a bad [`BACKEND_ENV`] counts as
/// unset here and is reported by [`open`].
pub fn adapters() -> Vec<AdapterEntry> {
    let mut found = match chosen_backend().ok().flatten() {
        Some(b) => pollster::block_on(instance(b).enumerate_adapters(b)),
        None => pollster::block_on(instance(wgpu::Backends::PRIMARY).enumerate_adapters(wgpu::Backends::PRIMARY)),
    };
    if found.is_empty() && chosen_backend().ok().flatten().is_none() {
        found = pollster::block_on(instance(wgpu::Backends::GL).enumerate_adapters(wgpu::Backends::GL));
    }
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu | wgpu::DeviceType::Other => 2,
        wgpu::DeviceType::Cpu => 3,
    };
    // Stable order: by kind, then PCI bus id, so indices match `nvidia-smi` order on one vendor.
    found.sort_by_key(|a| (rank(a), a.get_info().device_pci_bus_id.clone()));
    found
        .into_iter()
        .enumerate()
        .map(|(index, adapter)| {
            let info = adapter.get_info();
            AdapterEntry { index, adapter, info }
        })
        .collect()
}

fn default_set(all: &[AdapterEntry]) -> Vec<AdapterEntry> {
    let hardware: Vec<_> = all.iter().filter(|a| !a.is_software() && a.computes()).cloned().collect();
    if hardware.is_empty() { all.iter().filter(|a| a.is_software() && a.computes()).take(1).cloned().collect() } else { hardware }
}

/// Whether a GL context whose `GL_VERSION` reads `version` (`4.5 (Core Profile) Mesa 23.2.1`,
/// `OpenGL ES 3.2 NVIDIA 580.159.04`) is one naga writes compute shaders for: desktop 4.3 or
/// ES 3.1 up. A string without a version leaves the decision to wgpu.
fn gl_version_computes(version: &str) -> bool {
    let es = version.contains("OpenGL ES");
    let parsed = version.split_whitespace().find_map(|word| {
        let mut parts = word.split('.');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next()?.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
        Some((major, minor))
    });
    parsed.is_none_or(|v| v >= if es { (3, 1) } else { (4, 3) })
}

/// The `convoy devices --json` record of every adapter, marking the default selection.
pub fn summarize(all: &[AdapterEntry]) -> Vec<AdapterSummary> {
    let defaults: Vec<usize> = default_set(all).iter().map(|a| a.index).collect();
    all.iter()
        .map(|a| {
            let l = a.adapter.limits();
            let f = a.adapter.features() & WANTED_FEATURES;
            AdapterSummary {
                index: a.index,
                name: a.info.name.clone(),
                vendor: vendor_name(a.info.vendor).to_string(),
                backend: format!("{:?}", a.info.backend),
                device_type: format!("{:?}", a.info.device_type),
                pci_bus_id: a.info.device_pci_bus_id.clone(),
                driver: format!("{} {}", a.info.driver, a.info.driver_info).trim().to_string(),
                default: defaults.contains(&a.index),
                compute_shaders: a.computes(),
                max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
                max_buffer_size: l.max_buffer_size,
                max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
                max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
                max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
                features: f.iter_names().map(|(n, _)| n.to_string()).collect(),
            }
        })
        .collect()
}

/// Resolves a selection to adapters (with repetition for `software:N`), without opening them.
pub fn resolve(selection: &str, all: &[AdapterEntry]) -> Result<Vec<AdapterEntry>> {
    let sel = selection.trim();
    if all.is_empty() {
        if let Ok(Some(b)) = chosen_backend() {
            return Err(Error::Device(format!("no adapter found on the {b:?} backend (chosen with --backend or {BACKEND_ENV})")));
        }
        return Err(Error::Device("no GPU or software adapter found (install a Vulkan driver, e.g. mesa-vulkan-drivers)".into()));
    }
    if sel.is_empty() || sel == "all" {
        let set = default_set(all);
        if set.is_empty() {
            let why: Vec<String> = all.iter().filter_map(AdapterEntry::unusable).collect();
            return Err(Error::Device(why.join("; ")));
        }
        return Ok(set);
    }
    let mut chosen = Vec::new();
    for part in sel.split(',').map(str::trim) {
        // `software` and `software:N` anywhere in a list (`0,software`).
        if let Some(rest) = part.strip_prefix("software") {
            let n = match rest.strip_prefix(':') {
                None if rest.is_empty() => 1,
                Some(n) => n.parse::<usize>().ok().filter(|&n| (1..=64).contains(&n)).ok_or_else(|| {
                    Error::Device(format!("`{part}`: expected software:N with N from 1 to 64"))
                })?,
                _ => return Err(Error::Device(format!("`{part}`: expected `software` or `software:N`"))),
            };
            let soft = all.iter().find(|a| a.is_software()).ok_or_else(|| {
                Error::Device(format!("`{part}`: no software adapter found (install mesa-vulkan-drivers for lavapipe)"))
            })?;
            chosen.extend(std::iter::repeat_n(soft.clone(), n));
            continue;
        }
        let hit: Vec<_> = if let Ok(i) = part.parse::<usize>() {
            all.iter().filter(|a| a.index == i).cloned().collect()
        } else {
            let lower = part.to_lowercase();
            let by_bus: Vec<_> = all.iter().filter(|a| a.info.device_pci_bus_id.eq_ignore_ascii_case(part)).cloned().collect();
            if by_bus.is_empty() {
                all.iter().filter(|a| a.info.name.to_lowercase().contains(&lower)).cloned().collect()
            } else {
                by_bus
            }
        };
        if hit.is_empty() {
            let names: Vec<String> = all.iter().map(|a| format!("{}: {}", a.index, a.info.name)).collect();
            return Err(Error::Device(format!("`{part}` matches no adapter (found: {})", names.join("; "))));
        }
        chosen.extend(hit);
    }
    Ok(chosen)
}

/// Opens one device per selected adapter (N for `software:N`), with the build's default
/// shader checks ([`ShaderChecks::from_env`]: checked in debug, unchecked in release,
/// `CONVOY_CHECKED` overriding either).
pub fn open(selection: &str) -> Result<Vec<Arc<Device>>> {
    open_with(selection, ShaderChecks::from_env()?)
}

/// Opens one device per selected adapter with an explicit shader-check choice, so a test
/// can run the unchecked shaders that release builds ship whatever the build profile.
pub fn open_with(selection: &str, checks: ShaderChecks) -> Result<Vec<Arc<Device>>> {
    chosen_backend()?;
    let all = adapters();
    let picked = resolve(selection, &all)?;
    picked.iter().enumerate().map(|(ordinal, entry)| Device::open(entry, ordinal, checks).map(Arc::new)).collect()
}

#[cfg(test)]
mod tests {
    use super::gl_version_computes;

    #[test]
    fn gl_contexts_without_compute_shaders_are_recognised() {
        // NVIDIA's EGL as wgpu opens it, Mesa's llvmpipe, and GLES contexts.
        assert!(!gl_version_computes("3.3.0 NVIDIA 580.159.04"));
        assert!(gl_version_computes("4.5 (Core Profile) Mesa 23.2.1-1ubuntu3.1~22.04.3"));
        assert!(gl_version_computes("4.6.0 NVIDIA 580.159.04"));
        assert!(gl_version_computes("OpenGL ES 3.2 NVIDIA 580.159.04"));
        assert!(!gl_version_computes("OpenGL ES 3.0 Mesa 22.0"));
        assert!(gl_version_computes("unknown"));
    }
}
