// The GEMM's B operand stored as f16 and read as f16 (see b_f32.wgsl for the names): the
// tensor-core GEMM's dy in weight gradients under mixed_float16, staged as loaded (as
// act_h16.wgsl stages A).
alias b4 = vec4<f16>;
alias b_stage = vec4<f16>;

fn b_value(q: u32) -> vec4<f32> {
    return vec4<f32>(b[q]);
}

fn b_elem(i: u32) -> f32 {
    return f32(b[i / 4u][i % 4u]);
}

fn b_staged(q: u32) -> b_stage {
    return b[q];
}

// Exact: the values were read from f16 elements.
fn b_staged_of(v: vec4<f32>) -> b_stage {
    return vec4<f16>(v);
}

fn b_staged_value(v: b_stage) -> vec4<f32> {
    return vec4<f32>(v);
}
