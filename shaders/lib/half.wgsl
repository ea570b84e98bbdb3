// IEEE binary16 as bits in the low half of a u32, bit for bit what src/device/half.rs
// computes on the host: to nearest, ties to even; from 65520 up infinite (what loss scaling
// watches for); below 2^-14 a multiple of 2^-24; a NaN stays a quiet NaN with its sign.
// WGSL's pack2x16float leaves a value past f16's range indeterminate, so NaN and overflow
// are set on the bits and only in-range values go through it. Widening is unpack2x16float, exact on every f16 (tests/kernels/cast.rs
// checks all 65,536 patterns on each device).

fn half_bits(x: f32) -> u32 {
    let bits = bitcast<u32>(x);
    let sign = (bits >> 16u) & 0x8000u;
    let magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) {
        return sign | 0x7e00u | ((magnitude >> 13u) & 0x1ffu);
    }
    if (magnitude >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    // In range: the hardware's conversion, to nearest even with f16's subnormals (the cast
    // tests hold it to the host's rounding bit for bit on each device).
    return pack2x16float(vec2<f32>(x, 0.0)) & 0xffffu;
}

// A quad of f16 activations as stored (two words, the lower half first) widened to f32.
fn half4_value(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

// A quad rounded to f16 and packed into two words, as `half4_value` reads them: two
// conversions where all four are in f16's range (the bit compare also catches NaN), the
// element-wise rounding otherwise. (The first f16 tree, which rounded with four
// `half_bits` and widened A in the GEMM's gathers, ran its products slower on the H100;
// the two fixes went in together: session 19, calls 1 and 3.)
fn half4_bits(v: vec4<f32>) -> vec2<u32> {
    let magnitude = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
    if (all(magnitude < vec4<u32>(0x477ff000u))) {
        return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
    }
    return vec2<u32>(half_bits(v.x) | (half_bits(v.y) << 16u), half_bits(v.z) | (half_bits(v.w) << 16u));
}

// A quad of f16 as staged by the GEMM's gathers (shaders/conv2d.wgsl's `a_reg`, `b_reg`):
// its two stored words carried in x and y of a vec4<f32> (naga 30 has no bitcast from a word
// to two halves), so a quad goes from memory to workgroup memory without widening and
// narrowing in between. `half_staged_of` stages values built from single elements (exact
// for values that were f16), `half_staged_value` widens a staged quad.
fn half_staged(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(w.x), bitcast<f32>(w.y), 0.0, 0.0);
}

fn half_staged_of(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(pack2x16float(v.xy)), bitcast<f32>(pack2x16float(v.zw)), 0.0, 0.0);
}

fn half_staged_value(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(bitcast<u32>(v.x)), unpack2x16float(bitcast<u32>(v.y)));
}
