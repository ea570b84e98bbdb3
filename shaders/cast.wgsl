// Casts between f32 tensors and f16 ones packed two to a word (`DType::F16`, the lower half
// first): one invocation per word. The last word of an odd count holds a zero in its upper
// half. The grid may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // elements
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> wide_in: array<f32>;
@group(0) @binding(2) var<storage, read_write> packed_out: array<u32>;
@group(0) @binding(3) var<storage, read> packed_in: array<u32>;
@group(0) @binding(4) var<storage, read_write> wide_out: array<f32>;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn to_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let w = (wid.x + wid.y * nwg.x) * WG + lid;
    if (2u * w >= p.n) { return; }
    let lo = half_bits(wide_in[2u * w]);
    var hi = 0u;
    if (2u * w + 1u < p.n) {
        hi = half_bits(wide_in[2u * w + 1u]);
    }
    packed_out[w] = lo | (hi << 16u);
}

@compute @workgroup_size(WG)
fn from_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = (wid.x + wid.y * nwg.x) * WG + lid;
    if (2u * w >= p.n) { return; }
    // The widening every kernel reading f16 activations uses.
    let v = unpack2x16float(packed_in[w]);
    wide_out[2u * w] = v.x;
    if (2u * w + 1u < p.n) {
        wide_out[2u * w + 1u] = v.y;
    }
}
