// The GEMM's output C stored as f32 (conv2d.wgsl binds `c: array<c_quad>`); c_f16.wgsl
// stores it as f16. The split partials, the bias gradient's sums and every gradient are
// f32.
alias c_quad = vec4<f32>;

fn c_put4(q: u32, v: vec4<f32>) {
    c[q] = v;
}

fn c_put1(i: u32, v: f32) {
    c[i / 4u][i % 4u] = v;
}

// A value of C as it is stored.
fn c_stored(v: f32) -> f32 {
    return v;
}

fn c_stored4(v: vec4<f32>) -> vec4<f32> {
    return v;
}

// A stored quad of C's storage (C itself, or what JOIN reads beside it) as f32.
fn c_value4(w: c_quad) -> vec4<f32> {
    return w;
}
