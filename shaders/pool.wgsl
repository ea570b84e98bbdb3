// Pooling over NHWC f32 tensors: max and average pooling with Keras "valid"/"same" padding,
// and global average pooling. One invocation per output element of each kernel; the grid may
// be folded into 2-D (see src/kernels/mod.rs).
//
// max_pool_forward4 and global_avg_pool_forward4 read x and write y through lib/act_*.wgsl's
// `act4` (x4, y4), so they serve activations stored as f32 or f16. A gradient is stored as its
// activation: max_pool_backward4 and global_avg_pool_backward4 read dy and write dx through
// `act4` too (src4, dst4), summing in f32 and rounding once when they store. The scalar
// kernels are f32 alone.
//
// Backward kernels are gathers (one invocation per input-gradient element, summing over the
// windows that cover it) because WGSL has no float atomics; they overwrite their output.

struct Params {
    batch: u32,
    in_h: u32,
    in_w: u32,
    channels: u32,
    pool_h: u32,
    pool_w: u32,
    stride_h: u32,
    stride_w: u32,
    pad_top: u32,
    pad_left: u32,
    out_h: u32,
    out_w: u32,
    // invocations that do work: the element count of the kernel's output
    n: u32,
    // 1: average pooling divides by pool_h * pool_w (PyTorch's explicit padding with
    // count_include_pad); 0: by the input positions of the window (Keras)
    count_padding: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// forward: x; backward: dy
@group(0) @binding(1) var<storage, read> src: array<f32>;
// max_pool_backward: the forward's argmax
@group(0) @binding(2) var<storage, read> arg_in: array<u32>;
// forward: y; backward: dx
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
// max_pool_forward: for each output, the input position `h * in_w + w` it took its value from
// (max_pool_forward4c: a quad's four places packed in one word; arg_in the same for
// max_pool_backward4c)
@group(0) @binding(4) var<storage, read_write> arg_out: array<u32>;

// The same operands four channels at a time, for the *4 entry points (channels divisible
// by 4): one window decode and 16-byte loads per four channels, where the scalar kernels
// spent more on index arithmetic than on memory. src4 and dst4 are the backward kernels'
// dy and dx in this module's storage (f32 or f16, as the activations they belong to).
@group(0) @binding(5) var<storage, read> src4: array<act4>;
@group(0) @binding(6) var<storage, read> arg_in4: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> dst4: array<act4>;
@group(0) @binding(8) var<storage, read_write> arg_out4: array<vec4<u32>>;
// The forward kernels' x and y four channels at a time in this module's activation storage:
// the same code is the f32 kernel bit for bit and the f16 one. Stores are whole quads, so
// two invocations never share an f16 word.
@group(0) @binding(9) var<storage, read> x4: array<act4>;
@group(0) @binding(10) var<storage, read_write> y4: array<act4>;

override WG: u32 = 256u;
// The quads of one pixel that each invocation of the packed-argmax kernels takes (1, 2 or
// MAX_QUADS, dividing the pixel's quads; the host picks the most): their index arithmetic
// (the pixel's decode, its windows) cost several times their memory traffic one quad an
// invocation. H200, ResNet-18's stem pool (floor 0.12 ms each way): forward 0.43 -> 0.34
// ms, backward 0.76 -> 0.43 at four neighbouring quads (benches/results/2026-11-28i/call3),
// 0.35 and 0.33 with the quads strided by the lanes (call7).
override QUADS: u32 = 1u;
const MAX_QUADS: u32 = 4u;

// The first quad of run i of the packed-argmax kernels: a pixel's quads / QUADS neighbouring
// invocations (its lanes) share the pixel, lane l taking quads l, l + lanes, ..., so that
// each of an invocation's loads and stores is one contiguous run across the lanes.
fn run_start(i: u32) -> u32 {
    let lanes = run_lanes();
    return (i / lanes) * (p.channels / 4u) + i % lanes;
}

// The lanes that share one pixel in the packed-argmax kernels (see run_start).
fn run_lanes() -> u32 {
    return (p.channels / 4u) / QUADS;
}

// The argmax of a window that holds no input element (cannot happen with Keras padding, but
// the kernel must not index with garbage if it did).
const NONE: u32 = 0xffffffffu;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// An output position and the input rows/columns its window covers, clipped to the input:
// padded positions take no part in max or mean.
struct Window {
    b: u32,
    oh: u32,
    ow: u32,
    c: u32,
    h_lo: u32,
    h_hi: u32,
    w_lo: u32,
    w_hi: u32,
}

fn clip(o: u32, stride: u32, pad: u32, pool: u32, size: u32) -> vec2<u32> {
    let start = i32(o * stride) - i32(pad);
    return vec2<u32>(u32(max(start, 0)), u32(clamp(start + i32(pool), 0, i32(size))));
}

fn window_of(i: u32) -> Window {
    var w: Window;
    w.c = i % p.channels;
    var r = i / p.channels;
    w.ow = r % p.out_w;
    r = r / p.out_w;
    w.oh = r % p.out_h;
    w.b = r / p.out_h;
    let hs = clip(w.oh, p.stride_h, p.pad_top, p.pool_h, p.in_h);
    let ws = clip(w.ow, p.stride_w, p.pad_left, p.pool_w, p.in_w);
    w.h_lo = hs.x;
    w.h_hi = hs.y;
    w.w_lo = ws.x;
    w.w_hi = ws.y;
    return w;
}

fn in_index(b: u32, h: u32, w: u32, c: u32) -> u32 {
    return ((b * p.in_h + h) * p.in_w + w) * p.channels + c;
}

fn out_index(b: u32, oh: u32, ow: u32, c: u32) -> u32 {
    return ((b * p.out_h + oh) * p.out_w + ow) * p.channels + c;
}

// The range of outputs whose windows cover input row (or column) `i`:
// o * stride - pad <= i < o * stride - pad + pool. Empty when x > y.
fn covering(i: u32, stride: u32, pad: u32, pool: u32, out: u32) -> vec2<u32> {
    let t = i + pad;
    let lo = select(0u, (t + 1u - pool + stride - 1u) / stride, t + 1u > pool);
    let hi = min(t / stride, out - 1u);
    return vec2<u32>(lo, hi);
}

// Input-gradient element `i` decoded as (b, h, w, c).
fn input_position(i: u32) -> vec4<u32> {
    let c = i % p.channels;
    var r = i / p.channels;
    let w = r % p.in_w;
    r = r / p.in_w;
    return vec4<u32>(r / p.in_h, r % p.in_h, w, c);
}

// is_nan comes from lib/relu.wgsl.

@compute @workgroup_size(WG)
fn max_pool_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let win = window_of(i);
    var best = 0.0;
    var arg = NONE;
    for (var h = win.h_lo; h < win.h_hi; h++) {
        for (var w = win.w_lo; w < win.w_hi; w++) {
            let v = src[in_index(win.b, h, w, win.c)];
            // strict: on ties the first maximum in row-major window order wins; the first NaN
            // wins over any number and stays (NaN compares false), so a window holding NaN
            // outputs NaN and its gradient goes to that position
            if (arg == NONE || v > best || (is_nan(v) && !is_nan(best))) {
                best = v;
                arg = h * p.in_w + w;
            }
        }
    }
    dst[i] = best;
    arg_out[i] = arg;
}

// dx at an input position is the sum of dy over the outputs whose argmax chose it.
@compute @workgroup_size(WG)
fn max_pool_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let pos = input_position(i);
    let here = pos.y * p.in_w + pos.z;
    let rows = covering(pos.y, p.stride_h, p.pad_top, p.pool_h, p.out_h);
    let cols = covering(pos.z, p.stride_w, p.pad_left, p.pool_w, p.out_w);
    var g = 0.0;
    for (var oh = rows.x; oh <= rows.y; oh++) {
        for (var ow = cols.x; ow <= cols.y; ow++) {
            let o = out_index(pos.x, oh, ow, pos.w);
            if (arg_in[o] == here) {
                g += src[o];
            }
        }
    }
    dst[i] = g;
}

// The maximum of each of four channels over a window, and where it was: the input
// position h * in_w + w of the first maximum (or first NaN), NONE for an empty window (in
// max_pool_forward4c, its place in the window, 255 for none).
struct Max4 {
    best: vec4<f32>,
    arg: vec4<u32>,
}

// One window element v, found at `here`, taken into the running maximum m whose channels
// still at `empty` have seen nothing: strict, so on ties the first maximum in row-major window
// order wins, and the first NaN wins over any number and stays.
fn max4_step(m: Max4, v: vec4<f32>, here: u32, empty: u32) -> Max4 {
    let take = (m.arg == vec4<u32>(empty)) | (v > m.best) | (is_nan4(v) & !is_nan4(m.best));
    // Scalar selects: an integer vector select becomes GLSL's integer `mix`, which desktop GL
    // before 4.5 lacks (tests/translate.rs).
    let arg = vec4<u32>(select(m.arg.x, here, take.x), select(m.arg.y, here, take.y), select(m.arg.z, here, take.z), select(m.arg.w, here, take.w));
    return Max4(select(m.best, v, take), arg);
}

fn max4_of(win: Window) -> Max4 {
    var m = Max4(vec4<f32>(0.0), vec4<u32>(NONE));
    for (var h = win.h_lo; h < win.h_hi; h++) {
        for (var w = win.w_lo; w < win.w_hi; w++) {
            m = max4_step(m, act_quad(x4[in_index(win.b, h, w, win.c) / 4u]), h * p.in_w + w, NONE);
        }
    }
    return m;
}

// max_pool_forward on four channels; i counts quads of the output.
@compute @workgroup_size(WG)
fn max_pool_forward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let m = max4_of(window_of(4u * i));
    y4[i] = act_pack(m.best);
    arg_out4[i] = m.arg;
}

// Where input row (or column) `i` sits in the window of output `o`, counted from the
// window's first row, padding included; `i` must be covered by that window.
fn in_window(i: u32, o: u32, stride: u32, pad: u32) -> u32 {
    return i + pad - o * stride;
}

// max_pool_forward4 with the argmax packed: one byte a channel, the winner's place in its
// window ((h - h0) * pool_w + w - w0, from the window's first row and column, padding
// included), 255 for an empty window; channel c of the quad in bits 8c..8c+7. A quarter of
// the words, and a sixteenth of the bytes, of positions in full: for windows of 255
// elements or fewer (the host decides, src/kernels/pool.rs). Each invocation takes QUADS
// quads of one pixel (see run_start); i counts those runs.
@compute @workgroup_size(WG)
fn max_pool_forward4c(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let first = run_start(i);
    let lanes = run_lanes();
    let win = window_of(4u * first);
    let base = in_index(win.b, 0u, 0u, win.c) / 4u;
    // Each quad's running maximum with each winner's place in the window (255: none yet),
    // the window walked once for all of them, as max_pool_backward4c walks its windows: each
    // window element's QUADS loads go out together, where a quad's own walk waited on each
    // load in turn. Each quad still takes its elements in row-major window order.
    var m: array<Max4, MAX_QUADS>;
    for (var q = 0u; q < QUADS; q++) {
        m[q] = Max4(vec4<f32>(0.0), vec4<u32>(255u));
    }
    for (var h = win.h_lo; h < win.h_hi; h++) {
        let row = in_window(h, win.oh, p.stride_h, p.pad_top) * p.pool_w;
        for (var w = win.w_lo; w < win.w_hi; w++) {
            let at = base + (h * p.in_w + w) * (p.channels / 4u);
            let here = row + in_window(w, win.ow, p.stride_w, p.pad_left);
            for (var q = 0u; q < QUADS; q++) {
                m[q] = max4_step(m[q], act_quad(x4[at + q * lanes]), here, 255u);
            }
        }
    }
    for (var q = 0u; q < QUADS; q++) {
        y4[first + q * lanes] = act_pack(m[q].best);
        arg_out[first + q * lanes] = m[q].arg.x | (m[q].arg.y << 8u) | (m[q].arg.z << 16u) | (m[q].arg.w << 24u);
    }
}

// max_pool_backward on four channels; i counts quads of dx. The sum stays in f32 until the
// store: an input that several windows chose is rounded to f16 once, not once per window.
@compute @workgroup_size(WG)
fn max_pool_backward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let pos = input_position(4u * i);
    let here = vec4<u32>(pos.y * p.in_w + pos.z);
    let rows = covering(pos.y, p.stride_h, p.pad_top, p.pool_h, p.out_h);
    let cols = covering(pos.z, p.stride_w, p.pad_left, p.pool_w, p.out_w);
    var g = vec4<f32>(0.0);
    for (var oh = rows.x; oh <= rows.y; oh++) {
        for (var ow = cols.x; ow <= cols.y; ow++) {
            let o = out_index(pos.x, oh, ow, pos.w) / 4u;
            g += select(vec4<f32>(0.0), act_quad(src4[o]), arg_in4[o] == here);
        }
    }
    dst4[i] = act_pack(g);
}

// max_pool_backward4 on max_pool_forward4c's packed argmax: a window chose this input
// where its byte for the channel is the input's place in that window. Each invocation takes
// QUADS quads of one pixel (see run_start; i counts those runs): one decode of the pixel and
// of its windows serves them all.
@compute @workgroup_size(WG)
fn max_pool_backward4c(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                       @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let first = run_start(i);
    let lanes = run_lanes();
    let pos = input_position(4u * first);
    let rows = covering(pos.y, p.stride_h, p.pad_top, p.pool_h, p.out_h);
    let cols = covering(pos.z, p.stride_w, p.pad_left, p.pool_w, p.out_w);
    var g: array<vec4<f32>, MAX_QUADS>;
    for (var oh = rows.x; oh <= rows.y; oh++) {
        let row = in_window(pos.y, oh, p.stride_h, p.pad_top) * p.pool_w;
        for (var ow = cols.x; ow <= cols.y; ow++) {
            let o = out_index(pos.x, oh, ow, pos.w) / 4u;
            let place = vec4<u32>(row + in_window(pos.z, ow, p.stride_w, p.pad_left));
            for (var q = 0u; q < QUADS; q++) {
                let bytes = (vec4<u32>(arg_in[o + q * lanes]) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u);
                g[q] += select(vec4<f32>(0.0), act_quad(src4[o + q * lanes]), bytes == place);
            }
        }
    }
    for (var q = 0u; q < QUADS; q++) {
        dst4[first + q * lanes] = act_pack(g[q]);
    }
}

// Keras (TensorFlow) semantics: the mean is over the input elements of the window only;
// with PyTorch's explicit padding (count_padding) over the whole window, padding as zeros.
@compute @workgroup_size(WG)
fn avg_pool_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let win = window_of(i);
    var s = 0.0;
    for (var h = win.h_lo; h < win.h_hi; h++) {
        for (var w = win.w_lo; w < win.w_hi; w++) {
            s += src[in_index(win.b, h, w, win.c)];
        }
    }
    let count = select((win.h_hi - win.h_lo) * (win.w_hi - win.w_lo), p.pool_h * p.pool_w, p.count_padding != 0u);
    dst[i] = select(0.0, s / f32(count), count > 0u);
}

@compute @workgroup_size(WG)
fn avg_pool_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let pos = input_position(i);
    let rows = covering(pos.y, p.stride_h, p.pad_top, p.pool_h, p.out_h);
    let cols = covering(pos.z, p.stride_w, p.pad_left, p.pool_w, p.out_w);
    var g = 0.0;
    for (var oh = rows.x; oh <= rows.y; oh++) {
        let hs = clip(oh, p.stride_h, p.pad_top, p.pool_h, p.in_h);
        for (var ow = cols.x; ow <= cols.y; ow++) {
            let ws = clip(ow, p.stride_w, p.pad_left, p.pool_w, p.in_w);
            // this window covers `i`, so its count is at least one
            let count = select((hs.y - hs.x) * (ws.y - ws.x), p.pool_h * p.pool_w, p.count_padding != 0u);
            g += src[out_index(pos.x, oh, ow, pos.w)] / f32(count);
        }
    }
    dst[i] = g;
}

// y[b, c] = mean over h, w of x[b, h, w, c]; adjacent invocations read adjacent channels.
@compute @workgroup_size(WG)
fn global_avg_pool_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let c = i % p.channels;
    let b = i / p.channels;
    let hw = p.in_h * p.in_w;
    var s = 0.0;
    for (var j = 0u; j < hw; j++) {
        s += src[(b * hw + j) * p.channels + c];
    }
    dst[i] = s / f32(hw);
}

// global_avg_pool_forward on four channels, i counting quads of y: the f16 form (scalar
// stores of f16 would race), summing each lane in the scalar kernel's order.
@compute @workgroup_size(WG)
fn global_avg_pool_forward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let quads = p.channels / 4u;
    let q = i % quads;
    let b = i / quads;
    let hw = p.in_h * p.in_w;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < hw; j++) {
        s += act_quad(x4[(b * hw + j) * quads + q]);
    }
    y4[i] = act_pack(s / f32(hw));
}

@compute @workgroup_size(WG)
fn global_avg_pool_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let hw = p.in_h * p.in_w;
    let c = i % p.channels;
    let b = i / (hw * p.channels);
    dst[i] = src[b * p.channels + c] / f32(hw);
}

// global_avg_pool_backward on four channels, i counting quads of dx: the f16 form (scalar
// stores of f16 would race), dividing in f32 as the scalar kernel does and rounding once.
@compute @workgroup_size(WG)
fn global_avg_pool_backward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                             @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let quads = p.channels / 4u;
    let hw = p.in_h * p.in_w;
    let q = i % quads;
    let b = i / (hw * quads);
    dst4[i] = act_pack(act_quad(src4[b * quads + q]) / f32(hw));
}
