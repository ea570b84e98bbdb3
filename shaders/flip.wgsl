// The kernel of a unit-stride convolution's input gradient as a forward convolution's:
// w [kh, kw, c, f] flipped in both spatial axes with its channel axes swapped,
// flipped[i, j, f, c] = w[kh - 1 - i, kw - 1 - j, c, f]. dx is then dy convolved with it
// (src/kernels/conv2d.rs, `flipped`), through the forward's gathers of rows of B instead of
// the transposed blocks the input gradient reads otherwise. One invocation per element of
// the flipped kernel; the grid may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // kh * kw: taps
    taps: u32,
    c: u32,
    f: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> flipped: array<f32>;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn flip_kernel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    if (i >= p.taps * p.c * p.f) { return; }
    // i = (tap * f + f_i) * c + c_i; the tap (kh - 1 - i', kw - 1 - j') of a tap (i', j')
    // is taps - 1 - tap in row-major order.
    let c = i % p.c;
    let t = i / p.c;
    let f = t % p.f;
    let tap = t / p.f;
    flipped[i] = w[((p.taps - 1u - tap) * p.c + c) * p.f + f];
}
