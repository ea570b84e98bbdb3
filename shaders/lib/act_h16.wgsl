// Activations stored as f16 and read as f16 (see act_f32.wgsl for the names): the tensor-core
// GEMM's A, in a module that enables f16 (src/kernels/mod.rs). A quad is one 8-byte vec4<f16>
// and is staged as it is, so that it reaches the tensor cores' tiles with neither widening
// nor rounding (act_f16.wgsl, for modules without f16, stages the two words in a vec4<f32>
// and the product's tile took four conversions and four 2-byte stores per quad).
alias act = f16;
alias act4 = vec4<f16>;
alias a_stage = vec4<f16>;
const A_STAGED_F16: bool = true;

fn act_elem(w: act, i: u32) -> f32 {
    return f32(w);
}

fn act_quad(q: act4) -> vec4<f32> {
    return vec4<f32>(q);
}

fn act_lane(r: u32) -> u32 {
    return r;
}

fn act_raw(q: act4) -> a_stage {
    return q;
}

// Exact: the values were read from f16 elements.
fn raw_of(v: vec4<f32>) -> a_stage {
    return vec4<f16>(v);
}

fn raw_value(v: a_stage) -> vec4<f32> {
    return vec4<f32>(v);
}
