// C stored as f16, two to a word, rounded as shaders/lib/half.wgsl rounds (see c_f32.wgsl).
// Only whole quads are stored: the host refuses an f16 C where a row's columns are not
// whole quads (N % 4 != 0) or a row is a group's slice of a wider C, the cases where
// conv2d.wgsl stores single elements and two invocations would share a word.
alias c_quad = vec2<u32>;

fn c_put4(q: u32, v: vec4<f32>) {
    c[q] = half4_bits(v);
}

// Reached only in the cases the host refuses for an f16 C; stores one half of its word.
fn c_put1(i: u32, v: f32) {
    let w = (i % 4u) / 2u;
    let shift = (i % 2u) * 16u;
    c[i / 4u][w] = (c[i / 4u][w] & ~(0xffffu << shift)) | (half_bits(v) << shift);
}

// A value of C as it is stored: rounded to f16 as `c_put4` rounds it.
fn c_stored(v: f32) -> f32 {
    return unpack2x16float(half_bits(v)).x;
}

fn c_stored4(v: vec4<f32>) -> vec4<f32> {
    return half4_value(half4_bits(v));
}

// A stored quad of C's storage (C itself, or what JOIN reads beside it) as f32.
fn c_value4(w: c_quad) -> vec4<f32> {
    return half4_value(w);
}
