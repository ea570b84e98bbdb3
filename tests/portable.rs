//! The portability slice: the convolution and dense kernel tests on the software adapter
//! opened with WebGPU's default limits (16 KB of workgroup memory, 8 storage buffers a stage,
//! 256 invocations a workgroup; the adapter's buffer sizes kept), the limits Metal, DX12,
//! Vulkan and GL all grant, and without any optional feature. The kernel files are the Vulkan suite's own; the shared rig opens
//! its devices with those limits in this binary. wgpu does not hold override-sized
//! workgroup arrays to the limit, so the engine itself must keep its tiles under it.

#[allow(dead_code)]
#[path = "kernels/common.rs"]
mod common;
#[path = "kernels/conv2d.rs"]
mod conv2d;
#[path = "kernels/dense.rs"]
mod dense;

use convoy::kernels::conv2d::{Conv2dGeometry, Padding};
use convoy::kernels::gemm::{Engine, GemmOptions, Tile};

#[test]
fn the_engine_keeps_its_tiles_within_webgpus_workgroup_memory() {
    let d = common::device();
    assert_eq!(d.limits().max_compute_workgroup_storage_size, 16 << 10);
    // Nor any optional feature (subgroups, f16, timestamps, cooperative matrices).
    assert_eq!(d.features(), wgpu::Features::empty());
    // 32,768 output rows of 64 filters: 256 workgroups of the 128 x 64 tile, which the engine
    // takes on a device with the adapter's own limits (tests/kernels/paths.rs reaches it).
    let g = Conv2dGeometry::new(&[32, 64, 64, 16], 64, (3, 3), (2, 2), Padding::Same).unwrap();
    let (x, w, y) = (d.zeros(&g.input_shape()).unwrap(), d.zeros(&g.kernel_shape()).unwrap(), d.zeros(&g.output_shape()).unwrap());
    // The tiled kernel's choice (a software adapter's own is the CPU kernel, which has no tiles).
    let tiled = GemmOptions { engine: Some(Engine::Tiled), ..Default::default() };
    let forward = convoy::kernels::conv2d::forward_with(&d, &g, &x, &w, &y, &tiled).unwrap();
    assert!(forward[0].path.contains("tile=M64N64"), "{}", forward[0].path);
    // Forced, a 128-row tile is an error naming its size and the limit.
    let forced = GemmOptions { tile: Some(Tile::M128N64), ..Default::default() };
    let e = convoy::kernels::conv2d::forward_with(&d, &g, &x, &w, &y, &forced).unwrap_err().to_string();
    assert!(e.contains("24576") && e.contains("16384"), "{e}");
}
