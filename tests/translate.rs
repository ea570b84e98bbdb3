//! Every shader variant the code picks translates, through naga, to what wgpu's other
//! backends compile: MSL (Metal), HLSL (DX12) and GLSL (desktop GL 4.3 and GLES 3.1), with and
//! without bounds-check policies. Metal and DX12 cannot run on these machines, so this is
//! the evidence that the kernels are portable to them.
//!
//! The variants are each shader's entry points with their default constants, plus every
//! set of override constants a process built when run with `CONVOY_PIPELINE_LOG=DIR` (the
//! device records them): `.ci/run` runs the whole suite that way, then this test with
//! `CONVOY_TRANSLATE_REQUIRE_LOG=1`, so the sets come from the kernel sweeps and models that
//! pick them. Cooperative-matrix variants (conv2d_coop.wgsl: f16 and subgroup matrices)
//! are checked for MSL and SPIR-V only: naga's HLSL writer has no cooperative stores, and
//! wgpu's GL backend offers neither f16 nor cooperative matrices, so neither can select them.

use std::collections::{BTreeMap, BTreeSet};

use convoy::device::pipeline_log::{self, Variant};
use convoy::kernels::ALL_SHADERS;
use naga::back::{glsl, hlsl, msl, spv};
use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use rayon::prelude::*;

/// The tensor-core variants an H100 built in the kernel tests (logged there with
/// `CONVOY_PIPELINE_LOG`): no adapter here offers cooperative matrices, so CI reads them.
/// Recorded in sessions 17 and 18 (the forced tensor-core tiles' variants too), joined with
/// those session 16 derived by hand for shapes the sweep does not reach (each M128N64
/// variant's widest and tall twins, which models' products pick), and in session 44 on an
/// H200 (results 2026-12-03 call 12), with each of those plain variants also taken with
/// PERSIST (the walk a product of many tiles takes), and in session 46 the tensor-core tests'
/// variants on an H200 (results 2026-12-03 call 21: the f16 stagings' shader variants and
/// the weight gradients' 128 x 256 tile at K 32), and in session 47 the full GPU suite's and
/// the tensor-core tests' on the H200 (results 2026-12-03 calls 23-24: the 3x3 gathers into
/// 64 columns on 128 x 64 at 64 x 32).
const COOP_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coop_pipelines.jsonl");

/// The fixture's variants and those of the pipeline logs under `CONVOY_PIPELINE_LOG`, and
/// how many log files there were.
fn logged_variants() -> (BTreeSet<Variant>, usize) {
    let read = |path: std::path::PathBuf| pipeline_log::read(&[path]).unwrap_or_else(|e| panic!("{e}"));
    let (mut out, _) = read(COOP_FIXTURE.into());
    let mut files = 0;
    if let Some(dir) = std::env::var_os(pipeline_log::ENV) {
        let (logged, n) = read(dir.into());
        out.extend(logged);
        files = n;
    }
    (out, files)
}

fn policies(checked: bool) -> BoundsCheckPolicies {
    let p = if checked { BoundsCheckPolicy::Restrict } else { BoundsCheckPolicy::Unchecked };
    BoundsCheckPolicies { index: p, buffer: p, image_load: p, binding_array: p }
}

/// Translates one variant to every target it can be selected on; the error names the
/// target and what failed.
fn translate(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    constants: &naga::back::PipelineConstants,
    coop: bool,
    glsl_out: &mut Vec<(String, String)>,
) -> Result<(), String> {
    let stage = naga::ShaderStage::Compute;
    let (module, info) = naga::back::pipeline_constants::process_overrides(module, info, Some((stage, entry)), constants).map_err(|e| format!("overrides: {e}"))?;
    for checked in [false, true] {
        let bounds = policies(checked);
        let options = msl::Options { lang_version: if coop { (3, 0) } else { (2, 4) }, bounds_check_policies: bounds, ..Default::default() };
        let pipeline = msl::PipelineOptions { entry_point: Some((stage, entry.to_string())), ..Default::default() };
        msl::write_string(&module, &info, &options, &pipeline).map_err(|e| format!("MSL (checked {checked}): {e}"))?;
        if coop {
            // And to what Vulkan runs: no adapter here compiles these, so naga's SPIR-V
            // writer is checked here before a GPU meets them.
            let options = spv::Options { lang_version: (1, 6), bounds_check_policies: bounds, ..Default::default() };
            let pipeline = spv::PipelineOptions { shader_stage: stage, entry_point: entry.to_string() };
            spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("SPIR-V (checked {checked}): {e}"))?;
            continue;
        }
        for shader_model in [hlsl::ShaderModel::V5_1, hlsl::ShaderModel::V6_0] {
            let options = hlsl::Options { shader_model, restrict_indexing: checked, ..Default::default() };
            let pipeline = hlsl::PipelineOptions { entry_point: Some((stage, entry.to_string())) };
            let mut out = String::new();
            hlsl::Writer::new(&mut out, &options, &pipeline).write(&module, &info, None).map_err(|e| format!("HLSL {shader_model:?} (checked {checked}): {e}"))?;
        }
        for version in [glsl::Version::Desktop(430), glsl::Version::Embedded { version: 310, is_webgl: false }] {
            let options = glsl::Options { version, ..Default::default() };
            let pipeline = glsl::PipelineOptions { shader_stage: stage, entry_point: entry.to_string(), multiview: None };
            let mut out = String::new();
            glsl::Writer::new(&mut out, &module, &info, &options, &pipeline, bounds)
                .and_then(|mut w| w.write())
                .map_err(|e| format!("GLSL {version} (checked {checked}): {e}"))?;
            let tag = match version {
                glsl::Version::Embedded { .. } => "es",
                _ => "desktop",
            };
            glsl_out.push((format!("{tag}-{}", checked as u8), out));
        }
    }
    Ok(())
}

#[test]
fn every_shader_variant_translates_to_msl_hlsl_and_glsl() {
    let (logged, files) = logged_variants();
    if std::env::var_os("CONVOY_TRANSLATE_REQUIRE_LOG").is_some() {
        assert!(files > 0 && !logged.is_empty(), "{} names no pipeline logs: run the suite with it set first", pipeline_log::ENV);
    }
    let mut variants: BTreeSet<Variant> = logged.clone();
    let mut parsed = BTreeMap::new();
    for shader in ALL_SHADERS {
        let module = naga::front::wgsl::parse_str(shader.source).unwrap_or_else(|e| panic!("{}: {}", shader.name, e.emit_to_string(shader.source)));
        let info = Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module).unwrap_or_else(|e| panic!("{}: {e:?}", shader.name));
        for ep in &module.entry_points {
            variants.insert((shader.name.to_string(), ep.name.clone(), Vec::new()));
        }
        parsed.insert(shader.name.to_string(), (module, info));
    }
    // The variants translate in parallel (CI's two cores halve the test's minute); each
    // GLSL file is named by its variant's place in the sorted set.
    let ordered: Vec<&Variant> = variants.iter().collect();
    let outcomes: Vec<Result<Vec<(String, String)>, String>> = ordered
        .par_iter()
        .enumerate()
        .map(|(i, (shader, entry, constants))| {
            let Some((module, info)) = parsed.get(shader) else {
                return Err(format!("{shader}: logged but not in ALL_SHADERS"));
            };
            let values: naga::back::PipelineConstants = constants.iter().map(|(k, bits)| (k.clone(), f64::from_bits(*bits))).collect();
            let coop = shader.starts_with("conv2d_coop.wgsl");
            let mut glsl_out = Vec::new();
            translate(module, info, entry, &values, coop, &mut glsl_out).map_err(|e| format!("{shader} {entry} {values:?}: {e}"))?;
            Ok(glsl_out.into_iter().map(|(tag, text)| (format!("{}-{entry}-{i}-{tag}.comp", shader.trim_end_matches(".wgsl")), text)).collect())
        })
        .collect();
    let mut failures = Vec::new();
    let mut glsl_files: Vec<(String, String)> = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(files) => glsl_files.extend(files),
            Err(e) => failures.push(e),
        }
    }
    let mut per_shader: BTreeMap<&str, usize> = BTreeMap::new();
    for (shader, _, _) in &variants {
        *per_shader.entry(shader.as_str()).or_default() += 1;
    }
    println!("{} variants ({} from {files} pipeline logs): {per_shader:?}", variants.len(), logged.len());
    assert!(failures.is_empty(), "{} of {} variants fail to translate:\n{}", failures.len(), variants.len(), failures.join("\n"));
    validate_glsl(&glsl_files);
}

/// Runs Khronos' reference compiler on every GLSL translation, where it is installed
/// (`glslang-tools`; `.ci/run` installs it and sets `CONVOY_REQUIRE_GLSLANG`): naga writing
/// GLSL is not the same as a GL driver accepting it.
fn validate_glsl(files: &[(String, String)]) {
    let found = std::process::Command::new("glslangValidator").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("CONVOY_REQUIRE_GLSLANG").is_none(), "CONVOY_REQUIRE_GLSLANG is set but glslangValidator is not on PATH");
        println!("glslangValidator not found: the GLSL translations were not compiled");
        return;
    }
    let dir = std::env::temp_dir().join(format!("convoy-translate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad: Vec<String> = files
        .par_chunks(64)
        .flat_map_iter(|chunk| {
            let paths: Vec<_> = chunk
                .iter()
                .map(|(name, text)| {
                    let p = dir.join(name);
                    std::fs::write(&p, text).unwrap();
                    p
                })
                .collect();
            let out = std::process::Command::new("glslangValidator").args(&paths).output().unwrap();
            let mut bad = Vec::new();
            if !out.status.success() {
                let text = String::from_utf8_lossy(&out.stdout);
                bad.extend(text.lines().filter(|l| l.contains("ERROR") || l.ends_with(".comp")).map(str::to_string));
            }
            bad
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    println!("glslangValidator compiled {} GLSL translations", files.len());
    assert!(bad.is_empty(), "glslangValidator refuses {} lines:\n{}", bad.len(), bad.join("\n"));
}
