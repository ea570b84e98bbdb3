// Image input: u8 NHWC pixels, four to a 32-bit word (little-endian), turned into normalised
// f32 on the GPU so uploads carry a quarter of the bytes. One invocation per word; the grid
// may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // pixels (elements), not words
    n: u32,
    channels: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
// per channel (a, b) with y = a * byte + b, i.e. a = 1 / (255 std), b = -mean / std
@group(0) @binding(2) var<storage, read> affine: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

override WG: u32 = 256u;

@compute @workgroup_size(WG)
fn normalize_u8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = (wid.x + wid.y * nwg.x) * WG + lid;
    // compare words, not w * 4, which could wrap
    if (w >= (p.n + 3u) / 4u) { return; }
    let word = x[w];
    for (var j = 0u; j < 4u; j++) {
        let i = w * 4u + j;
        if (i < p.n) {
            let t = affine[i % p.channels];
            y[i] = t.x * f32((word >> (8u * j)) & 0xffu) + t.y;
        }
    }
}
