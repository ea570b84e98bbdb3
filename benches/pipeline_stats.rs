//! What the driver made of each pipeline: the statistics a Vulkan driver reports through
//! `VK_KHR_pipeline_executable_properties` (on NVIDIA: registers, shared memory, local memory
//! per thread, instruction counts; on Mesa: LLVM's) for every pipeline variant a process
//! built, and with `--ir DIR` its internal representations (assembly, where the driver gives
//! it). A timing says a tile is slow; this says whether it spills.
//!
//! `cargo bench --bench pipeline_stats -- LOG... [--filter TEXT] [--ir DIR] [--spv DIR]
//! [--shaders DIR]`: each LOG is a pipeline log (`CONVOY_PIPELINE_LOG=DIR` on any convoy run
//! writes one per process) or a directory of them; `--filter` keeps the variants whose
//! shader, entry or constants contain TEXT; `--spv` also writes each variant's SPIR-V (for
//! `spirv-val`, `spirv-dis`), and alone, without an adapter that has the extension, does only
//! that. `--shaders DIR` reports on edited shaders without a rebuild: each file of the
//! repository's `shaders/` (read from the working directory) that DIR holds under the same
//! path is swapped for DIR's text wherever the built-in sources include it, so one binary
//! can compare several variants of a kernel. The SPIR-V is naga's, written as wgpu 30 writes it for a trusted module on a
//! Vulkan 1.3 device (no bounds checks, no loop bounding, no division checks, no workgroup
//! zeroing), so the driver compiles what convoy runs. The device is the first adapter with
//! the extension (`CONVOY_BENCH_DEVICES=N` picks the Nth).
//!
//! Every `unsafe` block is a Vulkan call through ash: on handles this file created and
//! destroys only after their last use, with create-info structs that outlive the call.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

use ash::vk;
use convoy::device::pipeline_log::{self, Variant};
use convoy::kernels::ALL_SHADERS;
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn fail(msg: String) -> ! {
    eprintln!("pipeline_stats: {msg}");
    std::process::exit(2)
}

/// The variants of every log under `paths` that match `filter`.
fn read_logs(paths: &[PathBuf], filter: Option<&str>) -> BTreeSet<Variant> {
    let (variants, _) = pipeline_log::read(paths).unwrap_or_else(|e| fail(e.to_string()));
    variants.into_iter().filter(|v| filter.is_none_or(|f| label(v).contains(f))).collect()
}

fn label((shader, entry, constants): &Variant) -> String {
    let values: Vec<String> = constants.iter().map(|(k, bits)| format!("{k}={}", f64::from_bits(*bits))).collect();
    format!("{shader} {entry} {}", values.join(","))
}

/// SPIR-V for one variant, with the options wgpu 30's Vulkan backend uses for a module made
/// by `create_shader_module_trusted(.., ShaderRuntimeChecks::unchecked())` on a 1.3 device.
fn spirv(module: &naga::Module, info: &naga::valid::ModuleInfo, entry: &str, constants: &[(String, u64)]) -> Result<(Vec<u32>, naga::Module), String> {
    let stage = naga::ShaderStage::Compute;
    let values: naga::back::PipelineConstants = constants.iter().map(|(k, bits)| (k.clone(), f64::from_bits(*bits))).collect();
    let (module, info) = naga::back::pipeline_constants::process_overrides(module, info, Some((stage, entry)), &values).map_err(|e| format!("overrides: {e}"))?;
    let unchecked = naga::proc::BoundsCheckPolicy::Unchecked;
    let options = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::empty(),
        capabilities: None,
        bounds_check_policies: naga::proc::BoundsCheckPolicies { index: unchecked, buffer: unchecked, image_load: unchecked, binding_array: unchecked },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        use_storage_input_output_16: true,
        emit_int_div_checks: false,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions { entry_point: entry.to_string(), shader_stage: stage };
    let words = spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("SPIR-V: {e}"))?;
    Ok((words, module.into_owned()))
}

/// A Vulkan device with the statistics extension and every feature the adapter has (the
/// kernels need f16, 16-bit storage, subgroups and cooperative matrices where present).
struct Gpu {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    stats: ash::khr::pipeline_executable_properties::Device,
    name: String,
}

fn has_extension(instance: &ash::Instance, pd: vk::PhysicalDevice, name: &CStr) -> bool {
    let list = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
    list.iter().any(|e| e.extension_name_as_c_str() == Ok(name))
}

/// The device, or with `optional` none where no adapter has the extension.
fn open_gpu(optional: bool) -> Option<Gpu> {
    let entry = unsafe { ash::Entry::load() }.unwrap_or_else(|e| fail(format!("no Vulkan loader: {e}")));
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) }.unwrap_or_else(|e| fail(format!("vkCreateInstance: {e}")));
    let wanted = ash::khr::pipeline_executable_properties::NAME;
    let all = unsafe { instance.enumerate_physical_devices() }.unwrap_or_else(|e| fail(format!("vkEnumeratePhysicalDevices: {e}")));
    let with: Vec<_> = all.into_iter().filter(|&pd| has_extension(&instance, pd, wanted)).collect();
    let index: usize = std::env::var("CONVOY_BENCH_DEVICES").ok().and_then(|s| s.split(',').next()?.trim().parse().ok()).unwrap_or(0);
    let Some(&pd) = with.get(index) else {
        let why = format!("adapter {index}: {} adapters have {}", with.len(), wanted.to_string_lossy());
        if optional {
            println!("{why}: SPIR-V only");
            return None;
        }
        fail(why);
    };
    let props = unsafe { instance.get_physical_device_properties(pd) };
    let name = props.device_name_as_c_str().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let coop_ext = ash::khr::cooperative_matrix::NAME;
    let coop = has_extension(&instance, pd, coop_ext);
    let mut extensions: Vec<*const c_char> = vec![wanted.as_ptr()];
    if coop {
        extensions.push(coop_ext.as_ptr());
    }
    let family = unsafe { instance.get_physical_device_queue_family_properties(pd) }
        .iter()
        .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .unwrap_or_else(|| fail(format!("{name}: no compute queue"))) as u32;
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&priorities)];
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut fstats = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12).push_next(&mut f13).push_next(&mut fstats);
    if coop {
        features = features.push_next(&mut fcoop);
    }
    unsafe { instance.get_physical_device_features2(pd, &mut features) };
    let info = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&extensions).push_next(&mut features);
    let device = unsafe { instance.create_device(pd, &info, None) }.unwrap_or_else(|e| fail(format!("{name}: vkCreateDevice: {e}")));
    let stats = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
    Some(Gpu { _entry: entry, instance, device, stats, name })
}

/// The statistics of one pipeline as `(name, value)`, and its internal representations as
/// `(name, text)`.
type Report = (Vec<(String, String)>, Vec<(String, String)>);

fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Builds the pipeline with statistics captured and reads them back.
fn report(gpu: &Gpu, words: &[u32], module: &naga::Module, entry: &str, want_ir: bool) -> Result<Report, String> {
    let d = &gpu.device;
    // The layout from the module's bindings: uniform or storage buffers, as the kernels bind.
    let mut groups: BTreeMap<u32, Vec<vk::DescriptorSetLayoutBinding>> = BTreeMap::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        let kind = match var.space {
            naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
            naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
            other => return Err(format!("binding ({}, {}) in {other:?}: only buffers are bound here", rb.group, rb.binding)),
        };
        groups.entry(rb.group).or_default().push(vk::DescriptorSetLayoutBinding::default().binding(rb.binding).descriptor_type(kind).descriptor_count(1).stage_flags(vk::ShaderStageFlags::COMPUTE));
    }
    let vk_err = |what: &str, e: vk::Result| format!("{what}: {e}");
    unsafe {
        let last = groups.keys().max().map_or(0, |g| g + 1);
        let mut set_layouts = Vec::new();
        for g in 0..last {
            let bindings = groups.get(&g).cloned().unwrap_or_default();
            set_layouts.push(d.create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings), None).map_err(|e| vk_err("set layout", e))?);
        }
        let layout = d.create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts), None).map_err(|e| vk_err("pipeline layout", e))?;
        let shader = d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None).map_err(|e| vk_err("shader module", e))?;
        let name = CString::new(entry).map_err(|e| e.to_string())?;
        // As wgpu creates it on a device with subgroups.
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .flags(vk::PipelineShaderStageCreateFlags::ALLOW_VARYING_SUBGROUP_SIZE)
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(shader)
            .name(&name);
        let mut flags = vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR;
        if want_ir {
            flags |= vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR;
        }
        let create = vk::ComputePipelineCreateInfo::default().flags(flags).stage(stage).layout(layout);
        let pipeline = d.create_compute_pipelines(vk::PipelineCache::null(), &[create], None).map_err(|(_, e)| vk_err("compute pipeline", e))?[0];
        let out = read_report(gpu, pipeline, want_ir);
        d.destroy_pipeline(pipeline, None);
        d.destroy_shader_module(shader, None);
        d.destroy_pipeline_layout(layout, None);
        for l in set_layouts {
            d.destroy_descriptor_set_layout(l, None);
        }
        out
    }
}

/// # Safety
/// `pipeline` was created on `gpu.device` with `CAPTURE_STATISTICS_KHR` (and
/// `CAPTURE_INTERNAL_REPRESENTATIONS_KHR` where `want_ir`) and is still alive.
unsafe fn read_report(gpu: &Gpu, pipeline: vk::Pipeline, want_ir: bool) -> Result<Report, String> {
    let executables = unsafe { gpu.stats.get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline)) }.map_err(|e| format!("executables: {e}"))?;
    let (mut stats, mut irs) = (Vec::new(), Vec::new());
    for (i, exe) in executables.iter().enumerate() {
        let prefix = if executables.len() > 1 { format!("{}:", c_text(&exe.name)) } else { String::new() };
        let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i as u32);
        let list = unsafe { gpu.stats.get_pipeline_executable_statistics(&info) }.map_err(|e| format!("statistics: {e}"))?;
        for s in list {
            // SAFETY: `format` says which member of the union the driver wrote.
            let value = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                    _ => format!("{:.3}", s.value.f64),
                }
            };
            stats.push((format!("{prefix}{}", c_text(&s.name)), value));
        }
        if want_ir {
            irs.extend(unsafe { internal_representations(gpu, &info) }?.into_iter().map(|(n, t)| (format!("{prefix}{n}"), t)));
        }
    }
    Ok((stats, irs))
}

/// The two-call query: sizes first, then the text into buffers of those sizes.
///
/// # Safety
/// `info` names a live pipeline of `gpu.device` created with
/// `CAPTURE_INTERNAL_REPRESENTATIONS_KHR`.
unsafe fn internal_representations(gpu: &Gpu, info: &vk::PipelineExecutableInfoKHR) -> Result<Vec<(String, String)>, String> {
    let fp = gpu.stats.fp().get_pipeline_executable_internal_representations_khr;
    let handle = gpu.device.handle();
    let mut count = 0u32;
    unsafe { fp(handle, info, &mut count, std::ptr::null_mut()) }.result().map_err(|e| format!("representations: {e}"))?;
    let mut reps = vec![vk::PipelineExecutableInternalRepresentationKHR::default(); count as usize];
    unsafe { fp(handle, info, &mut count, reps.as_mut_ptr()) }.result().map_err(|e| format!("representation sizes: {e}"))?;
    let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
    for (r, b) in reps.iter_mut().zip(&mut buffers) {
        r.p_data = b.as_mut_ptr().cast();
    }
    unsafe { fp(handle, info, &mut count, reps.as_mut_ptr()) }.result().map_err(|e| format!("representations: {e}"))?;
    Ok(reps
        .iter()
        .zip(buffers)
        .map(|(r, b)| {
            let text = if r.is_text != 0 { String::from_utf8_lossy(&b).trim_end_matches('\0').to_string() } else { format!("({} bytes of binary)", b.len()) };
            (c_text(&r.name), text)
        })
        .collect())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut logs = Vec::new();
    let (mut filter, mut ir_dir, mut spv_dir, mut shader_dir) = (None, None, None, None);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--filter" => filter = Some(it.next().unwrap_or_else(|| fail("--filter needs TEXT".into()))),
            "--ir" => ir_dir = Some(PathBuf::from(it.next().unwrap_or_else(|| fail("--ir needs a directory".into())))),
            "--spv" => spv_dir = Some(PathBuf::from(it.next().unwrap_or_else(|| fail("--spv needs a directory".into())))),
            "--shaders" => shader_dir = Some(PathBuf::from(it.next().unwrap_or_else(|| fail("--shaders needs a directory".into())))),
            _ if a.starts_with("--") => fail(format!("{a}: unknown flag (LOG... [--filter TEXT] [--ir DIR] [--spv DIR] [--shaders DIR])")),
            _ => logs.push(PathBuf::from(a)),
        }
    }
    if logs.is_empty() {
        println!("usage: pipeline_stats LOG... [--filter TEXT] [--ir DIR] (LOG: a CONVOY_PIPELINE_LOG file or directory)");
        return;
    }
    let variants = read_logs(&logs, filter.as_deref());
    let swaps = shader_dir.as_deref().map(swaps_from).unwrap_or_default();
    let gpu = open_gpu(spv_dir.is_some());
    println!("device: {} ({} variants)", gpu.as_ref().map_or("none", |g| g.name.as_str()), variants.len());
    for dir in ir_dir.iter().chain(&spv_dir) {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())));
    }
    let mut parsed: BTreeMap<String, (naga::Module, naga::valid::ModuleInfo)> = BTreeMap::new();
    for (n, variant) in variants.iter().enumerate() {
        let (shader, entry, constants) = variant;
        if !parsed.contains_key(shader) {
            // The gemm bench's probe (`--probe`) is no library shader; its f16 form is the one
            // to compare with the engine's tensor-core kernel.
            let probe = (shader == "coop_shared.wgsl").then(|| concat!("enable f16;\nenable wgpu_cooperative_matrix;\nalias Quad = vec4<f16>;\n", include_str!("coop_shared.wgsl")));
            let Some(source) = probe.or_else(|| ALL_SHADERS.iter().find(|s| s.name == shader).map(|s| s.source)) else {
                println!("{n:4} {}: not one of convoy's shaders", label(variant));
                continue;
            };
            let mut text = source.to_string();
            for (file, (original, edited)) in &swaps {
                if text.contains(original.as_str()) {
                    text = text.replace(original.as_str(), edited);
                    println!("{shader}: {file} swapped");
                }
            }
            let module = naga::front::wgsl::parse_str(&text).unwrap_or_else(|e| fail(format!("{shader}: {}", e.emit_to_string(&text))));
            let info = Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module).unwrap_or_else(|e| fail(format!("{shader}: {e:?}")));
            parsed.insert(shader.clone(), (module, info));
        }
        let (module, info) = &parsed[shader];
        let result = spirv(module, info, entry, constants).and_then(|(words, processed)| {
            if let Some(dir) = &spv_dir {
                let path = dir.join(format!("{n:04}.spv"));
                std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&words)).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            match &gpu {
                Some(gpu) => report(gpu, &words, &processed, entry, ir_dir.is_some()),
                None => Ok((Vec::new(), Vec::new())),
            }
        });
        match result {
            Err(e) => println!("{n:4} {}: {e}", label(variant)),
            Ok((stats, irs)) => {
                let values: Vec<String> = stats.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("{n:4} {} | {}", label(variant), values.join(" | "));
                if let Some(dir) = &ir_dir {
                    write_irs(dir, n, variant, &irs);
                }
            }
        }
    }
    if let Some(gpu) = gpu {
        unsafe {
            gpu.device.destroy_device(None);
            gpu.instance.destroy_instance(None);
        }
    }
}

/// `(path under shaders/, (the repository's text, DIR's text))` for every file DIR edits.
fn swaps_from(dir: &Path) -> Vec<(String, (String, String))> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let here = dir.join(&rel);
        let entries = std::fs::read_dir(&here).unwrap_or_else(|e| fail(format!("{}: {e}", here.display())));
        for entry in entries.filter_map(|e| e.ok()) {
            let (path, name) = (entry.path(), rel.join(entry.file_name()));
            if path.is_dir() {
                stack.push(name);
            } else if path.extension().is_some_and(|x| x == "wgsl") {
                let original_path = Path::new("shaders").join(&name);
                let original = std::fs::read_to_string(&original_path).unwrap_or_else(|e| fail(format!("{}: {e} (run from the repository root)", original_path.display())));
                let edited = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
                if original != edited {
                    out.push((name.display().to_string(), (original, edited)));
                }
            }
        }
    }
    if out.is_empty() {
        fail(format!("{}: no .wgsl file there differs from shaders/", dir.display()));
    }
    out
}

fn write_irs(dir: &Path, n: usize, variant: &Variant, irs: &[(String, String)]) {
    for (i, (name, text)) in irs.iter().enumerate() {
        let path = dir.join(format!("{n:04}-{i}.txt"));
        let body = format!("{}\n{name}\n\n{text}\n", label(variant));
        std::fs::write(&path, body).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    }
}
