// Concatenation along the last axis (channels in NHWC), as column blocks of row-major
// matrices: a `[rows, width]` operand is the block at column `offset` of a `[rows, total]`
// one. The forward copies each input into its block; the backward copies each block of the
// output's gradient back out. One invocation per element of the narrow operand; the grid may
// be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // rows * width: elements of the narrow operand
    n: u32,
    width: u32,
    total: u32,
    offset: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// dst[r, offset + c] = src[r, c] for a narrow src and a wide dst.
@compute @workgroup_size(WG)
fn concat_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let r = i / p.width;
    dst[r * p.total + p.offset + (i - r * p.width)] = src[i];
}

// dst[r, c] = src[r, offset + c] for a wide src and a narrow dst.
@compute @workgroup_size(WG)
fn slice_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let r = i / p.width;
    dst[i] = src[r * p.total + p.offset + (i - r * p.width)];
}

// dst[r, c] = src[r, c - offset] inside the block, zero outside it: a narrow src into a wide
// dst written whole (one invocation per element of dst), so that no stale value of a reused
// buffer survives beside the block.
@compute @workgroup_size(WG)
fn pad_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    let r = i / p.total;
    if (r * p.width >= p.n) { return; }
    let c = i - r * p.total;
    var v = 0.0;
    if (c >= p.offset && c - p.offset < p.width) {
        v = src[r * p.width + c - p.offset];
    }
    dst[i] = v;
}
