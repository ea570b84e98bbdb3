//! The GL slice: a part of the kernel tests and one model-level check on wgpu's GL backend
//! (Mesa's llvmpipe through EGL, which `.ci/run` installs), so the path users reach only
//! through GL is tested as Vulkan is. The kernel files are the Vulkan suite's own, included
//! here; their shared rig opens its devices on the GL backend in this binary.

#[allow(dead_code)]
#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/dense.rs"]
mod dense;
#[path = "kernels/elementwise.rs"]
mod elementwise;
#[path = "kernels/pool.rs"]
mod pool;
#[path = "kernels/batchnorm.rs"]
mod batchnorm;
#[path = "kernels/conv2d.rs"]
mod conv2d;
// Its reflect fill once took `%` of a negative number, which GLSL leaves undefined.
#[path = "kernels/augment.rs"]
mod augment;

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod cli;

#[test]
fn the_model_level_reference_passes_on_gl() {
    let out = cli::convoy(&["--backend", "gl", "check", "--model", "resnet20", "--devices", "software", "--batch-size", "4", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr: {stderr}");
    let v = cli::json(&out);
    assert_eq!(v["ok"], true, "{v}");
    let devices = cli::convoy(&["--backend", "gl", "devices", "--json"]);
    assert!(String::from_utf8_lossy(&devices.stdout).contains("Gl"), "{}", String::from_utf8_lossy(&devices.stdout));
}
