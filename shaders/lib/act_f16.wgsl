// Activations stored as f16, two to a word (`DType::F16`; see act_f32.wgsl for the names):
// a quad is two words, widened exactly and rounded to nearest even as shaders/lib/half.wgsl
// does, so a kernel computes in f32 and only its loads and stores change.
alias act = u32;
alias act4 = vec2<u32>;

fn act_word(i: u32) -> u32 {
    return i / 2u;
}

fn act_elem(w: act, i: u32) -> f32 {
    return unpack2x16float(w)[i % 2u];
}

fn act_quad(q: act4) -> vec4<f32> {
    return half4_value(q);
}

fn act_pack(v: vec4<f32>) -> act4 {
    return half4_bits(v);
}

fn act_lane(r: u32) -> u32 {
    return r / 2u;
}

// A staged quad is its two words in x and y (see act_f32.wgsl and half.wgsl's
// `half_staged`); values built from single f16 elements pack back exactly.
alias a_stage = vec4<f32>;
const A_STAGED_F16: bool = false;

fn act_raw(q: act4) -> vec4<f32> {
    return half_staged(q);
}

fn raw_of(v: vec4<f32>) -> vec4<f32> {
    return half_staged_of(v);
}

fn raw_value(v: vec4<f32>) -> vec4<f32> {
    return half_staged_value(v);
}
