// A BatchNormalization's transform of an element x of a channel: (x - mean) * k + b, with
// k = inv_std * gamma and b = beta of that channel, as one fused multiply-add. Spelled out,
// not left to the compiler, so that every kernel computing it on one adapter (the normalize
// passes, the training backward recomputing y for its ReLU mask, the GEMM gathers
// normalizing a convolution's input: A_NORM) gets the same bits: a compiler may contract
// `a * b + c` in one kernel and not in another, and a unit at the ReLU's kink would then be
// active in one and not in the other. Adapters differ from each other (lavapipe rounds
// `fma` twice, the H200 once), so no host code reproduces it bit for bit.
fn affine(x: f32, mean: f32, k: f32, b: f32) -> f32 {
    return fma(x - mean, k, b);
}
fn affine4(x: vec4<f32>, mean: vec4<f32>, k: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return fma(x - mean, k, b);
}
