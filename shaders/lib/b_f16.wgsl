// The GEMM's B operand stored as f16, two to a word (see b_f32.wgsl for the names): the
// weight gradient's dy under mixed_float16. A staged quad is its two words (half.wgsl's
// `half_staged`).
alias b4 = vec2<u32>;
alias b_stage = vec4<f32>;

fn b_value(q: u32) -> vec4<f32> {
    return half4_value(b[q]);
}

fn b_elem(i: u32) -> f32 {
    return unpack2x16float(b[i / 4u][(i % 4u) / 2u])[i % 2u];
}

fn b_staged(q: u32) -> vec4<f32> {
    return half_staged(b[q]);
}

fn b_staged_of(v: vec4<f32>) -> vec4<f32> {
    return half_staged_of(v);
}

fn b_staged_value(v: vec4<f32>) -> vec4<f32> {
    return half_staged_value(v);
}
