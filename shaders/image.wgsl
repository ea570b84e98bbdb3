// Image input: u8 NHWC pixels, four to a 32-bit word (little-endian), turned into normalised
// f32 on the GPU so uploads carry a quarter of the bytes; or, under mixed_float16, into f16
// packed two to a word with the channels padded by zeros to a whole quad, so that the stem's
// gathers read a pixel's channels as one 8-byte quad. One invocation per word (of the input,
// or of the f16 output); the grid may be folded into 2-D (see src/kernels/mod.rs).

struct Params {
    // normalize_u8: pixels (elements), not words; normalize_u8_f16: output words
    n: u32,
    channels: u32,
    // normalize_u8_f16: channels of the output, the input's padded by zeros
    out_channels: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
// per channel (a, b) with y = a * byte + b, i.e. a = 1 / (255 std), b = -mean / std
@group(0) @binding(2) var<storage, read> affine: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> y16: array<u32>;

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

// The normalised value of channel `ch` of pixel `pix` as f16 bits, zero past the input's
// channels.
fn half_at(pix: u32, ch: u32) -> u32 {
    if (ch >= p.channels) {
        return 0u;
    }
    let i = pix * p.channels + ch;
    let t = affine[ch];
    return half_bits(t.x * f32((x[i / 4u] >> (8u * (i % 4u))) & 0xffu) + t.y);
}

@compute @workgroup_size(WG)
fn normalize_u8_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let w = (wid.x + wid.y * nwg.x) * WG + lid;
    if (w >= p.n) { return; }
    let pairs = p.out_channels / 2u;
    let pix = w / pairs;
    let ch = (w % pairs) * 2u;
    y16[w] = half_at(pix, ch) | (half_at(pix, ch + 1u) << 16u);
}
