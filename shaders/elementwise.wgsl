// Element-wise kernels over flat f32 tensors: ReLU, residual add, dropout, scaling.
// One invocation per element; the grid may be folded into 2-D (see src/kernels/mod.rs).
// The residual join (add4, add_relu4), relu_forward4 and relu_backward4 also take
// activations stored as f16: those operands are bound through lib/act_*.wgsl's `act4` (a4h,
// b4h, out4h). A gradient is stored as its activation, so relu_backward4's dy and dx are f16
// with its y.

struct Params {
    n: u32,
    // dropout: rate in [0, 1); scale: the factor
    alpha: f32,
    // dropout: per-step seed
    seed: u32,
    // bias_add: channels (the bias length)
    c: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
// dropout: word 0 is the training step, so each step draws a fresh mask from one pipeline.
@group(0) @binding(4) var<storage, read> step: array<u32>;
// add_relu_backward: the ReLU output whose sign masks the sum.
@group(0) @binding(5) var<storage, read> mask_y: array<f32>;

// The same operands seen four elements at a time, for the *4 entry points (element counts
// divisible by 4; views are 256-byte aligned): a load of 16 bytes per invocation keeps
// enough bytes in flight to stream near the memory's speed, where 4 bytes do not.
// The operands are activations, in this module's storage (f32 or f16 by the act_*.wgsl
// prepended): the same code is the f32 kernel bit for bit and the f16 one, which is why
// every vec4 entry point (add4, a gradient sum too) reads and writes here. Stores are whole
// quads, so two invocations never share an f16 word.
@group(0) @binding(8) var<storage, read> a4h: array<act4>;
@group(0) @binding(9) var<storage, read> b4h: array<act4>;
@group(0) @binding(10) var<storage, read_write> out4h: array<act4>;
@group(0) @binding(12) var<storage, read> mask_y4h: array<act4>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// is_nan, relu and relu_grad (and their vec4 forms) come from lib/relu.wgsl.

// out = max(a, 0), NaN kept
@compute @workgroup_size(WG)
fn relu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = relu(a[i]);
}

// out = a (the upstream gradient) where b (the ReLU output) is positive; NaN where b is NaN
// (the derivative at a NaN input is NaN: a unit that diverged must not look dead).
@compute @workgroup_size(WG)
fn relu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = relu_grad(a[i], b[i]);
}

// out = a + b (the residual join).
@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = a[i] + b[i];
}

// relu_forward, relu_backward and add over p.n vec4s. relu_forward4's y is x or 0, and
// relu_backward4's dx is dy, y (NaN) or 0, each in its operands' storage: in f16 both stores
// are exact and keep NaN and infinity.
@compute @workgroup_size(WG)
fn relu_forward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(relu4(act_quad(a4h[i])));
}

@compute @workgroup_size(WG)
fn relu_backward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(relu_grad4(act_quad(a4h[i]), act_quad(b4h[i])));
}

@compute @workgroup_size(WG)
fn add4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(act_quad(a4h[i]) + act_quad(b4h[i]));
}

// out = relu_grad(a + b, y): a gradient sum masked by the ReLU that produced the activation
// it is the gradient of, in one pass (a residual block's input gradient, when the block
// before ends in a fused ReLU). In f16 the sum is rounded once, as add4 then relu_backward4
// would leave it.
@compute @workgroup_size(WG)
fn add_relu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = relu_grad(a[i] + b[i], mask_y[i]);
}

@compute @workgroup_size(WG)
fn add_relu_backward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(relu_grad4(act_quad(a4h[i]) + act_quad(b4h[i]), act_quad(mask_y4h[i])));
}

// out = max(a + b, 0), NaN kept: the residual join with the ReLU that follows it.
@compute @workgroup_size(WG)
fn add_relu(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = relu(a[i] + b[i]);
}

@compute @workgroup_size(WG)
fn add_relu4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(relu4(act_quad(a4h[i]) + act_quad(b4h[i])));
}

// out = alpha * a
@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = p.alpha * a[i];
}

// A stateless hash (PCG-style) so the backward pass regenerates the forward's mask from the
// seed instead of storing it.
fn keep(i: u32) -> bool {
    var h = i * 747796405u + (p.seed ^ (step[0] * 2654435769u)) * 2891336453u + 1u;
    h = ((h >> ((h >> 28u) + 4u)) ^ h) * 277803737u;
    h = (h >> 22u) ^ h;
    return f32(h >> 8u) * (1.0 / 16777216.0) >= p.alpha;
}

// Inverted dropout: kept elements are scaled by 1 / (1 - rate); used for forward and
// backward alike (the gradient passes through the same mask and scale).
@compute @workgroup_size(WG)
fn dropout(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = select(0.0, a[i] / (1.0 - p.alpha), keep(i));
}

// out += b broadcast over the last dimension (a convolution's bias). In place, so the
// output is bound once, read_write.
@compute @workgroup_size(WG)
fn bias_add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = out[i] + b[i % p.c];
}
