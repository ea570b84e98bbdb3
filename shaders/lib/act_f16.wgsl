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

fn act_quad_elem(q: act4, r: u32) -> f32 {
    return unpack2x16float(q[r / 2u])[r % 2u];
}
