// Activations beyond the plain ReLU, over flat tensors: Keras' ReLU with max_value and
// negative_slope (LeakyReLU, ReLU6), sigmoid, tanh, SiLU, GELU (erf and tanh forms); a
// softmax over the last axis; and a per-channel affine map (Rescaling, Normalization).
// The element-wise functions' vec4 entry points also take activations stored as f16 (the
// module is compiled once per lib/act_*.wgsl): they sit between f16 BatchNorms in
// mixed_float16 models, where f32 alone cost a cast on each side, both passes. They compute
// in f32 and round once on the store. Softmax and the channel maps stay f32.
// Element-wise kernels run one invocation per element (per vec4 in the *4 entry points);
// the grid may be folded into 2-D (see src/kernels/mod.rs). Softmax runs one workgroup per row.
//
// Backward passes read the forward's input x, not its output: the derivative of every
// function here is best conditioned in x (the sigmoid's 1 - y loses its digits near y = 1),
// and x is kept for the backward pass anyway.

struct Params {
    // element-wise: elements (vec4s in the *4 entry points); softmax: rows
    n: u32,
    // relu: max_value (+inf when none)
    alpha: f32,
    // relu: negative_slope
    beta: f32,
    // softmax: the row length; channel_affine: the table length (1 or the channels)
    c: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// forward: x; backward: dy
@group(0) @binding(1) var<storage, read> a: array<f32>;
// backward: the forward's x (softmax: its y)
@group(0) @binding(2) var<storage, read> b: array<f32>;
// forward: y; backward: dx
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// The same operands four elements at a time, for the channel maps' *4 entry points
// (element counts divisible by 4; views are 256-byte aligned).
@group(0) @binding(5) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> out4: array<vec4<f32>>;

// channel_affine: (scale, offset) per channel, element i taking entry i % p.c.
@group(0) @binding(8) var<storage, read> table: array<vec2<f32>>;

// The element-wise functions' operands four at a time in this module's storage (f32 or f16
// by the act_*.wgsl prepended): in the f32 module `act_quad` and `act_pack` are the identity,
// so activation_forward4 and activation_backward4 compute there exactly what they did on
// a4/b4/out4. Stores are whole quads, so two invocations never share an f16 word.
@group(0) @binding(9) var<storage, read> a4h: array<act4>;
@group(0) @binding(10) var<storage, read> b4h: array<act4>;
@group(0) @binding(11) var<storage, read_write> out4h: array<act4>;

override WG: u32 = 256u;

// Which function the element-wise entry points compute: a pipeline constant, so each
// pipeline compiles only its own branch. Shared with `Function::op` in
// src/kernels/activation.rs.
override OP: u32 = 0u;
const RELU: u32 = 0u;
const SIGMOID: u32 = 1u;
const TANH: u32 = 2u;
const SILU: u32 = 3u;
const GELU: u32 = 4u;
const GELU_TANH: u32 = 5u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// is_nan4 comes from lib/relu.wgsl. Every function is written once, on vec4s; the scalar
// entry points use lane x (they run only where the count is not a multiple of 4).

// Keras 3's ReLU (threshold 0): slope * x below 0, x up to max_value, max_value above. NaN
// stays NaN (a select, not max/min, whose NaN results the implementation picks).
fn relu_f(x: vec4<f32>) -> vec4<f32> {
    // a zero slope gives 0 at -inf, where 0 * x would be NaN
    let below = select(p.beta * x, vec4<f32>(0.0), p.beta == 0.0);
    let r = select(below, min(x, vec4<f32>(p.alpha)), x > vec4<f32>(0.0));
    return select(r, x, is_nan4(x));
}
// 1 on (0, max_value), 0 from max_value up, slope at and below 0 (TensorFlow's choices at
// the kinks: Relu6Grad takes 0 < x < 6, LeakyReluGrad x > 0).
fn relu_d(x: vec4<f32>) -> vec4<f32> {
    return select(vec4<f32>(p.beta), select(vec4<f32>(0.0), vec4<f32>(1.0), x < vec4<f32>(p.alpha)), x > vec4<f32>(0.0));
}

// sigmoid(|x|) from t = exp(-|x|), which cannot overflow: 1 / (1 + t), and the other side
// t / (1 + t) without the cancellation of 1 - sigmoid.
struct Logistic {
    s: vec4<f32>,
    // 1 - s
    r: vec4<f32>,
}
fn logistic(x: vec4<f32>) -> Logistic {
    let t = exp(-abs(x));
    let hi = 1.0 / (1.0 + t);
    let lo = t * hi;
    let pos = x >= vec4<f32>(0.0);
    return Logistic(select(lo, hi, pos), select(hi, lo, pos));
}

// tanh from t = exp(-2|x|): sign(x) (1 - t) / (1 + t), and its Taylor series below |x| =
// 0.125 where 1 - t cancels (the next term, 62 x^9 / 2835, is 1.3e-9 of the value there).
// The builtin is avoided: Vulkan leaves its precision to the driver, and some return NaN for
// large |x| (an inf / inf).
fn tanh_f(x: vec4<f32>) -> vec4<f32> {
    let t = exp(-2.0 * abs(x));
    let big = (1.0 - t) / (1.0 + t);
    let x2 = x * x;
    let small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    let r = select(select(-big, big, x >= vec4<f32>(0.0)), small, abs(x) < vec4<f32>(0.125));
    return select(r, x, is_nan4(x));
}
// 1 - tanh(x)^2 = 4 t / (1 + t)^2 with t = exp(-2|x|): no cancellation near |tanh| = 1.
fn sech2(x: vec4<f32>) -> vec4<f32> {
    let t = exp(-2.0 * abs(x));
    return 4.0 * t / ((1.0 + t) * (1.0 + t));
}

// erfc(|x| / sqrt 2): Numerical Recipes' erfcc (a Chebyshev fit, fractional error below
// 1.2e-7 for every argument), so the Gaussian CDF keeps its relative accuracy far into the
// tail where GELU's values are tiny. WGSL has no erf. Out there a rounded exponent -x^2 / 2
// would cost about x^2 / 2 ulp (3e-6 at x = -8), so exp(-x^2 / 2) is taken from the exact
// x * x = hi + lo: exp of the exact -hi / 2, times 1 - lo / 2 (lo is 0 where fma is not
// fused, and the error that of the rounded exponent again).
fn erfc_half(x: vec4<f32>) -> vec4<f32> {
    let z = abs(x) * 0.70710678118654752;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let hi = x * x;
    let lo = fma(x, x, -hi);
    return t * exp(poly) * (exp(-0.5 * hi) * (1.0 - 0.5 * lo));
}
// The standard normal CDF: erfc(-x / sqrt 2) / 2, from the side where erfc is small.
fn normal_cdf(x: vec4<f32>) -> vec4<f32> {
    let half_tail = 0.5 * erfc_half(x);
    return select(half_tail, 1.0 - half_tail, x >= vec4<f32>(0.0));
}
fn normal_pdf(x: vec4<f32>) -> vec4<f32> {
    return 0.39894228040143268 * exp(-0.5 * x * x);
}

// GELU's tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
const GELU_C: f32 = 0.79788456080286536;
fn gelu_u(x: vec4<f32>) -> vec4<f32> {
    return GELU_C * (x + 0.044715 * x * x * x);
}

fn forward_f(x: vec4<f32>) -> vec4<f32> {
    if (OP == SIGMOID) {
        return logistic(x).s;
    } else if (OP == TANH) {
        return tanh_f(x);
    } else if (OP == SILU) {
        return x * logistic(x).s;
    } else if (OP == GELU) {
        return x * normal_cdf(x);
    } else if (OP == GELU_TANH) {
        return 0.5 * x * (1.0 + tanh_f(gelu_u(x)));
    }
    return relu_f(x);
}

// The derivative at x; NaN where x is NaN (a diverged unit must not look dead).
fn derivative(x: vec4<f32>) -> vec4<f32> {
    var d: vec4<f32>;
    if (OP == SIGMOID) {
        let l = logistic(x);
        d = l.s * l.r;
    } else if (OP == TANH) {
        d = sech2(x);
    } else if (OP == SILU) {
        let l = logistic(x);
        d = l.s * (1.0 + x * l.r);
    } else if (OP == GELU) {
        d = normal_cdf(x) + x * normal_pdf(x);
    } else if (OP == GELU_TANH) {
        let u = gelu_u(x);
        let s2 = sech2(u);
        // where sech^2 is 0 the second term is too, even once x^2 overflows (0 * inf)
        let tail = select(0.5 * x * s2 * GELU_C * (1.0 + 3.0 * 0.044715 * x * x), vec4<f32>(0.0), s2 == vec4<f32>(0.0));
        d = 0.5 * (1.0 + tanh_f(u)) + tail;
    } else {
        d = relu_d(x);
    }
    return select(d, x, is_nan4(x));
}

// out = f(a)
@compute @workgroup_size(WG)
fn activation_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = forward_f(vec4<f32>(a[i])).x;
}

@compute @workgroup_size(WG)
fn activation_forward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(forward_f(act_quad(a4h[i])));
}

// out = a (the upstream gradient) * f'(b) (b: the forward's input)
@compute @workgroup_size(WG)
fn activation_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = a[i] * derivative(vec4<f32>(b[i])).x;
}

@compute @workgroup_size(WG)
fn activation_backward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out4h[i] = act_pack(act_quad(a4h[i]) * derivative(act_quad(b4h[i])));
}

// out = a * scale[c] + offset[c], c = i % p.c (Rescaling, Normalization).
@compute @workgroup_size(WG)
fn channel_affine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let t = table[i % p.c];
    out[i] = a[i] * t.x + t.y;
}

// Four elements: p.c is 1 or a multiple of 4, so the quad's channels are c0 .. c0 + 3 or all 0.
@compute @workgroup_size(WG)
fn channel_affine4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let c0 = (4u * i) % p.c;
    let step = select(1u, 0u, p.c == 1u);
    let t0 = table[c0];
    let t1 = table[c0 + step];
    let t2 = table[c0 + 2u * step];
    let t3 = table[c0 + 3u * step];
    out4[i] = a4[i] * vec4<f32>(t0.x, t1.x, t2.x, t3.x) + vec4<f32>(t0.y, t1.y, t2.y, t3.y);
}

// The gradient of channel_affine: out = a * scale[c].
@compute @workgroup_size(WG)
fn channel_scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = a[i] * table[i % p.c].x;
}

@compute @workgroup_size(WG)
fn channel_scale4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let c0 = (4u * i) % p.c;
    let step = select(1u, 0u, p.c == 1u);
    out4[i] = a4[i] * vec4<f32>(table[c0].x, table[c0 + step].x, table[c0 + 2u * step].x, table[c0 + 3u * step].x);
}

// Invocations per softmax row, shared with `ROW_THREADS` in src/kernels/activation.rs.
const ROW: u32 = 64u;

var<workgroup> red: array<f32, ROW>;

fn reduce(lid: u32, v: f32, is_max: bool) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = ROW / 2u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] = select(red[lid] + red[lid + s], max(red[lid], red[lid + s]), is_max); }
        workgroupBarrier();
    }
    let r = red[0];
    // the next reduction must not overwrite red[0] before everyone has read it
    workgroupBarrier();
    return r;
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// y = exp(x - max) / sum exp(x - max) over each row of p.c. A NaN in the row makes the sum,
// and so the whole row, NaN, whether or not max dropped it.
@compute @workgroup_size(ROW)
fn softmax_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let row = row_of(wid, nwg);
    // uniform across the workgroup, so no barrier is skipped by part of it
    if (row >= p.n) { return; }
    let base = row * p.c;
    var m = a[base];
    for (var j = lid; j < p.c; j += ROW) {
        m = max(m, a[base + j]);
    }
    m = reduce(lid, m, true);
    var s = 0.0;
    for (var j = lid; j < p.c; j += ROW) {
        s += exp(a[base + j] - m);
    }
    let inv = 1.0 / reduce(lid, s, false);
    for (var j = lid; j < p.c; j += ROW) {
        out[base + j] = exp(a[base + j] - m) * inv;
    }
}

// dx = y * (dy - sum(dy * y)) over each row (a: dy, b: y).
@compute @workgroup_size(ROW)
fn softmax_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let row = row_of(wid, nwg);
    if (row >= p.n) { return; }
    let base = row * p.c;
    var s = 0.0;
    for (var j = lid; j < p.c; j += ROW) {
        s += a[base + j] * b[base + j];
    }
    let dot = reduce(lid, s, false);
    for (var j = lid; j < p.c; j += ROW) {
        out[base + j] = b[base + j] * (a[base + j] - dot);
    }
}
