// Shared by the kernels that apply or differentiate ReLU (prepended to their files by
// `src/kernels/mod.rs`). NaN tests on the bits, and a ReLU that keeps NaN: `max(x, 0.0)`
// becomes SPIR-V FMax, whose result for a NaN operand the implementation chooses (lavapipe
// returns 0, so a diverged network would look finite), and `x != x` may be folded to false
// where the compiler assumes finite math (WGSL allows it); integer compares of the bits
// cannot be.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
fn is_nan4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}
// x where x > 0 or x is NaN, else 0.
fn relu(x: f32) -> f32 {
    return select(0.0, x, x > 0.0 || is_nan(x));
}
fn relu4(x: vec4<f32>) -> vec4<f32> {
    return select(vec4<f32>(0.0), x, (x > vec4<f32>(0.0)) | is_nan4(x));
}
// The gradient through a ReLU whose output was y: dy where y > 0, NaN where y is NaN.
fn relu_grad(dy: f32, y: f32) -> f32 {
    return select(select(0.0, dy, y > 0.0), y, is_nan(y));
}
fn relu_grad4(dy: vec4<f32>, y: vec4<f32>) -> vec4<f32> {
    return select(select(vec4<f32>(0.0), dy, y > vec4<f32>(0.0)), y, is_nan4(y));
}

