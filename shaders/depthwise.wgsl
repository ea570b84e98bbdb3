// Depthwise 2-D convolution over NHWC f32 tensors (Keras' DepthwiseConv2D): input channel ci
// is convolved with its own `multiplier` kernels, giving output channels ci * multiplier + m.
// The kernel is [kh, kw, channels, multiplier], so w[tap, o] with o = ci * multiplier + m is
// w[tap * cm + o] (cm = channels * multiplier): flat over output channels, like y.
//
// Forward and input gradient are gathers, one invocation per output element (or per four
// adjacent channels in the *4 entry points); no float atomics, so the input gradient sums
// over the taps that reach its pixel. The kernel gradient is a reduction over batch and space
// per (tap, output channel): see `depthwise_backward_weights` and src/kernels/depthwise.rs.
//
// The *4 entry points need four adjacent channels in every quad of their output: the forward
// and the kernel gradient need cm % 4 == 0, the input gradient channels % 4 == 0. With
// multiplier 1 the other operand's quads line up too (one 16-byte load); otherwise its four
// lanes come from up to four channels and are read one by one.

struct Params {
    batch: u32,
    in_h: u32,
    in_w: u32,
    channels: u32,
    multiplier: u32,
    out_h: u32,
    out_w: u32,
    kh: u32,
    kw: u32,
    stride_h: u32,
    stride_w: u32,
    dil_h: u32,
    dil_w: u32,
    pad_top: u32,
    pad_left: u32,
    // invocations that do work (linear entry points): output elements, or quads of them
    n: u32,
    // forward: 1 adds bias[o]
    has_bias: u32,
    // kernel gradient: rows = batch * out_h * out_w, reduced in chunks of chunk_rows; cols =
    // output channels, or quads of them in the *4 entry point; a workgroup covers
    // 2^col_log2 columns
    rows: u32,
    cols: u32,
    chunk_rows: u32,
    chunks: u32,
    col_log2: u32,
    _p0: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> wk: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> dy: array<f32>;
// forward: y; input gradient: dx; kernel gradient: dw, or the partial sums of its chunks
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
// The same operands as quads, for the *4 entry points.
@group(0) @binding(6) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> wk4: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> bias4: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> dy4: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read_write> out4: array<vec4<f32>>;
// depthwise_merge: the [chunks, kh * kw * cm] partial sums of the kernel gradient
@group(0) @binding(11) var<storage, read> part: array<f32>;

override WG: u32 = 256u;

var<workgroup> acc: array<f32, WG>;
var<workgroup> acc4: array<vec4<f32>, WG>;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// An output pixel (b, oh, ow) from its row b * out_h * out_w + oh * out_w + ow.
fn pixel(r: u32) -> vec3<u32> {
    let ow = r % p.out_w;
    let t = r / p.out_w;
    return vec3<u32>(t / p.out_h, t % p.out_h, ow);
}

// The input row (column) under tap k of output o, as i32: negative or >= size in the padding.
fn tap_at(o: u32, stride: u32, pad: u32, k: u32, dil: u32) -> i32 {
    return i32(o * stride) - i32(pad) + i32(k * dil);
}

fn inside(v: i32, size: u32) -> bool {
    return v >= 0 && v < i32(size);
}

// x at input pixel `pix` (b * in_h * in_w + h * in_w + w) for the four output channels
// o..o+3: one quad with multiplier 1, else channel (o + l) / multiplier for each lane.
fn x_quad(pix: u32, o: u32) -> vec4<f32> {
    if (p.multiplier == 1u) {
        return x4[(pix * p.channels + o) / 4u];
    }
    let base = pix * p.channels;
    let m = p.multiplier;
    return vec4<f32>(x[base + o / m], x[base + (o + 1u) / m], x[base + (o + 2u) / m], x[base + (o + 3u) / m]);
}

// y[b, oh, ow, o] = bias[o] + sum over taps (i, j) of
// x[b, oh * s_h - pad_top + i * d_h, ow * s_w - pad_left + j * d_w, o / multiplier] * w[i, j, o],
// zero outside the image.
@compute @workgroup_size(WG)
fn depthwise_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let cm = p.channels * p.multiplier;
    let o = i % cm;
    let q = pixel(i / cm);
    let ci = o / p.multiplier;
    var s = 0.0;
    for (var ki = 0u; ki < p.kh; ki++) {
        let h = tap_at(q.y, p.stride_h, p.pad_top, ki, p.dil_h);
        if (!inside(h, p.in_h)) { continue; }
        let row = (q.x * p.in_h + u32(h)) * p.in_w;
        for (var kj = 0u; kj < p.kw; kj++) {
            let w = tap_at(q.z, p.stride_w, p.pad_left, kj, p.dil_w);
            if (!inside(w, p.in_w)) { continue; }
            s += x[(row + u32(w)) * p.channels + ci] * wk[(ki * p.kw + kj) * cm + o];
        }
    }
    if (p.has_bias != 0u) {
        s += bias[o];
    }
    out[i] = s;
}

// depthwise_forward on four output channels; i counts quads of y.
@compute @workgroup_size(WG)
fn depthwise_forward4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let cm = p.channels * p.multiplier;
    let quads = cm / 4u;
    let o = 4u * (i % quads);
    let q = pixel(i / quads);
    var s = vec4<f32>(0.0);
    for (var ki = 0u; ki < p.kh; ki++) {
        let h = tap_at(q.y, p.stride_h, p.pad_top, ki, p.dil_h);
        if (!inside(h, p.in_h)) { continue; }
        let row = (q.x * p.in_h + u32(h)) * p.in_w;
        for (var kj = 0u; kj < p.kw; kj++) {
            let w = tap_at(q.z, p.stride_w, p.pad_left, kj, p.dil_w);
            if (!inside(w, p.in_w)) { continue; }
            s += x_quad(row + u32(w), o) * wk4[((ki * p.kw + kj) * cm + o) / 4u];
        }
    }
    if (p.has_bias != 0u) {
        s += bias4[o / 4u];
    }
    out4[i] = s;
}

// The output row (column) that tap k of input position `v` comes from, or -1 when none does:
// o * stride - pad + k * dil = v needs v + pad - k * dil >= 0, divisible by the stride and
// below `size` outputs.
fn source(v: u32, pad: u32, k: u32, dil: u32, stride: u32, size: u32) -> i32 {
    let t = i32(v + pad) - i32(k * dil);
    if (t < 0 || u32(t) % stride != 0u || u32(t) / stride >= size) {
        return -1;
    }
    return t / i32(stride);
}

// dx[b, ih, iw, ci] = sum over taps (i, j) and m of dy[b, oh, ow, ci * multiplier + m] * w[i, j, ci, m]
// over the outputs (oh, ow) whose tap (i, j) lies on (ih, iw). Overwrites dx.
@compute @workgroup_size(WG)
fn depthwise_backward_data(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                           @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let ci = i % p.channels;
    var r = i / p.channels;
    let iw = r % p.in_w;
    r = r / p.in_w;
    let ih = r % p.in_h;
    let b = r / p.in_h;
    let m = p.multiplier;
    let cm = p.channels * m;
    var g = 0.0;
    for (var ki = 0u; ki < p.kh; ki++) {
        let oh = source(ih, p.pad_top, ki, p.dil_h, p.stride_h, p.out_h);
        if (oh < 0) { continue; }
        for (var kj = 0u; kj < p.kw; kj++) {
            let ow = source(iw, p.pad_left, kj, p.dil_w, p.stride_w, p.out_w);
            if (ow < 0) { continue; }
            let d = ((b * p.out_h + u32(oh)) * p.out_w + u32(ow)) * cm + ci * m;
            let k = (ki * p.kw + kj) * cm + ci * m;
            for (var mi = 0u; mi < m; mi++) {
                g += dy[d + mi] * wk[k + mi];
            }
        }
    }
    out[i] = g;
}

// depthwise_backward_data on four input channels; i counts quads of dx.
@compute @workgroup_size(WG)
fn depthwise_backward_data4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                            @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let quads = p.channels / 4u;
    let ci = 4u * (i % quads);
    var r = i / quads;
    let iw = r % p.in_w;
    r = r / p.in_w;
    let ih = r % p.in_h;
    let b = r / p.in_h;
    let m = p.multiplier;
    let cm = p.channels * m;
    var g = vec4<f32>(0.0);
    for (var ki = 0u; ki < p.kh; ki++) {
        let oh = source(ih, p.pad_top, ki, p.dil_h, p.stride_h, p.out_h);
        if (oh < 0) { continue; }
        for (var kj = 0u; kj < p.kw; kj++) {
            let ow = source(iw, p.pad_left, kj, p.dil_w, p.stride_w, p.out_w);
            if (ow < 0) { continue; }
            let d = ((b * p.out_h + u32(oh)) * p.out_w + u32(ow)) * cm + ci * m;
            let k = (ki * p.kw + kj) * cm + ci * m;
            if (m == 1u) {
                g += dy4[d / 4u] * wk4[k / 4u];
            } else {
                // lane l is channel ci + l: its m-th output sits m apart from lane l - 1's
                for (var mi = 0u; mi < m; mi++) {
                    let dv = vec4<f32>(dy[d + mi], dy[d + m + mi], dy[d + 2u * m + mi], dy[d + 3u * m + mi]);
                    let wv = vec4<f32>(wk[k + mi], wk[k + m + mi], wk[k + 2u * m + mi], wk[k + 3u * m + mi]);
                    g += dv * wv;
                }
            }
        }
    }
    out4[i] = g;
}

// The first pass of the kernel gradient dw[tap, o] = sum over rows r = (b, oh, ow) of
// x[b, oh * s_h - pad_top + i * d_h, ow * s_w - pad_left + j * d_w, o / multiplier] * dy[r, o].
// Workgroup (tile, chunk, tap) owns 2^col_log2 adjacent output channels, a chunk of rows and
// one tap: its invocations are lanes x columns with the column fastest, so neighbours read
// neighbouring floats of x and dy; each lane sums every lanes-th row of the chunk, a tree in
// workgroup memory folds the lanes in a fixed order, and lane 0 writes
// out[(chunk * taps + tap) * cols + col]: dw itself when there is one chunk, else the partials
// that depthwise_merge sums.
@compute @workgroup_size(WG)
fn depthwise_backward_weights(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let width = 1u << p.col_log2;
    let lanes = WG >> p.col_log2;
    let lane = lid >> p.col_log2;
    let col = wid.x * width + (lid & (width - 1u));
    let chunk = wid.y;
    let tap = wid.z;
    let ki = tap / p.kw;
    let kj = tap % p.kw;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    var s = 0.0;
    if (col < p.cols) {
        let ci = col / p.multiplier;
        for (var r = start + lane; r < end; r += lanes) {
            let q = pixel(r);
            let h = tap_at(q.y, p.stride_h, p.pad_top, ki, p.dil_h);
            let w = tap_at(q.z, p.stride_w, p.pad_left, kj, p.dil_w);
            if (!inside(h, p.in_h) || !inside(w, p.in_w)) { continue; }
            s += x[((q.x * p.in_h + u32(h)) * p.in_w + u32(w)) * p.channels + ci] * dy[r * p.cols + col];
        }
    }
    acc[lid] = s;
    workgroupBarrier();
    // lanes is uniform, so every invocation reaches every barrier
    for (var half = lanes >> 1u; half > 0u; half >>= 1u) {
        if (lane < half) {
            acc[lid] += acc[lid + half * width];
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < p.cols) {
        out[(chunk * p.kh * p.kw + tap) * p.cols + col] = acc[lid];
    }
}

// depthwise_backward_weights on four output channels: cols counts quads.
@compute @workgroup_size(WG)
fn depthwise_backward_weights4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let width = 1u << p.col_log2;
    let lanes = WG >> p.col_log2;
    let lane = lid >> p.col_log2;
    let col = wid.x * width + (lid & (width - 1u));
    let chunk = wid.y;
    let tap = wid.z;
    let ki = tap / p.kw;
    let kj = tap % p.kw;
    let start = chunk * p.chunk_rows;
    let end = min(start + p.chunk_rows, p.rows);
    var s = vec4<f32>(0.0);
    if (col < p.cols) {
        for (var r = start + lane; r < end; r += lanes) {
            let q = pixel(r);
            let h = tap_at(q.y, p.stride_h, p.pad_top, ki, p.dil_h);
            let w = tap_at(q.z, p.stride_w, p.pad_left, kj, p.dil_w);
            if (!inside(h, p.in_h) || !inside(w, p.in_w)) { continue; }
            s += x_quad((q.x * p.in_h + u32(h)) * p.in_w + u32(w), 4u * col) * dy4[r * p.cols + col];
        }
    }
    acc4[lid] = s;
    workgroupBarrier();
    for (var half = lanes >> 1u; half > 0u; half >>= 1u) {
        if (lane < half) {
            acc4[lid] += acc4[lid + half * width];
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < p.cols) {
        out4[(chunk * p.kh * p.kw + tap) * p.cols + col] = acc4[lid];
    }
}

// dw[i] = sum over chunks of part[chunk * n + i], the chunks in order: the same sum on every
// run.
@compute @workgroup_size(WG)
fn depthwise_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    var s = 0.0;
    for (var c = 0u; c < p.chunks; c++) {
        s += part[c * p.n + i];
    }
    out[i] = s;
}
