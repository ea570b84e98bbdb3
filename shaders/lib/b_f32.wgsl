// The GEMM's B operand stored as f32 (conv2d.wgsl binds `b: array<b4>`): weights, and the
// weight gradient's dy under float32. b_f16.wgsl reads it as f16 (dy under mixed_float16,
// where gradients are stored as their activations). As for A (act_f32.wgsl), a gathered quad
// is staged in its stored form: `b_staged` loads quad q so, `b_staged_of` stages a quad
// built from single elements, `b_staged_value` widens a staged quad; `b_value` and `b_elem`
// read values.
alias b4 = vec4<f32>;
alias b_stage = vec4<f32>;

fn b_value(q: u32) -> vec4<f32> {
    return b[q];
}

fn b_elem(i: u32) -> f32 {
    return b[i / 4u][i % 4u];
}

fn b_staged(q: u32) -> vec4<f32> {
    return b[q];
}

fn b_staged_of(v: vec4<f32>) -> vec4<f32> {
    return v;
}

fn b_staged_value(v: vec4<f32>) -> vec4<f32> {
    return v;
}
