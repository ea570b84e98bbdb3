// Activations stored as f32 (every policy's gradients, and float32's activations). A kernel
// that may read or write activations in either precision binds them through these names and
// is compiled once with this file and once with act_f16.wgsl prepended (src/kernels/mod.rs):
//   act     one stored word (scalar reads: `act_elem(buf[act_word(i)], i)`)
//   act4    one stored quad (`act_quad(buf[q])` reads it, `act_pack(v)` makes one)
// Scalar stores stay on f32 bindings: two invocations would race on one f16 word, so the
// host refuses f16 tensors wherever a kernel stores single elements.
alias act = f32;
alias act4 = vec4<f32>;

fn act_word(i: u32) -> u32 {
    return i;
}

fn act_elem(w: act, i: u32) -> f32 {
    return w;
}

fn act_quad(q: act4) -> vec4<f32> {
    return q;
}

fn act_pack(v: vec4<f32>) -> act4 {
    return v;
}

// Element r of a stored quad is word `act_lane(r)` of it: a scalar read indexes the binding
// down to that word (`act_elem(buf[i / 4u][act_lane(i % 4u)], i)`), a 4-byte load, where
// indexing a loaded quad by value would load all 16 bytes and extract (the 3-channel stem
// gathers ran up to 2x slower that way).
fn act_lane(r: u32) -> u32 {
    return r;
}

// The GEMM's staged quads of A (`a_reg` in conv2d.wgsl) hold the stored form: an f16 quad
// stays two words between its load and workgroup memory (fewer registers, no conversions
// in the tensor-core kernel's loop). `act_raw` stages a loaded quad, `raw_of` a quad built
// from single values, `raw_value` widens a staged quad for the f32 kernels; `a_stage` is
// the staged quad's type.
alias a_stage = vec4<f32>;
// Whether `a_stage` is vec4<f16> (act_h16.wgsl): the tensor-core kernel stores it as it is.
const A_STAGED_F16: bool = false;

fn act_raw(q: act4) -> vec4<f32> {
    return q;
}

fn raw_of(v: vec4<f32>) -> vec4<f32> {
    return v;
}

fn raw_value(v: vec4<f32>) -> vec4<f32> {
    return v;
}
