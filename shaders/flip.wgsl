// The kernel of a unit-stride convolution's input gradient as a forward convolution's:
// w [kh, kw, c, f] flipped in both spatial axes with its channel axes swapped,
// flipped[i, j, f, c] = w[kh - 1 - i, kw - 1 - j, c, f]. dx is then dy convolved with it
// (src/kernels/conv2d.rs, `flipped`), through the forward's gathers of rows of B instead of
// the transposed blocks the input gradient reads otherwise.

struct Params {
    // kh * kw: taps
    taps: u32,
    c: u32,
    f: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> flipped: array<f32>;

// A tap's [c, f] block is transposed through workgroup memory, 32 x 32 at a time, so that
// both the read of w (along f) and the write of flipped (along c) are whole lines: read one
// element an invocation straight across, the read went a line per element (w's rows are f
// floats apart) and ran at 15% of the memory floor (resnet18_cifar's 512-channel flips,
// 0.025 ms each on an H100). Workgroup (x, y, z): c's tile, f's tile, the flipped tap.
const T: u32 = 32u;
const ROWS: u32 = 8u;

var<workgroup> block: array<array<f32, 33>, 32>;

@compute @workgroup_size(32, 8)
fn flip_kernel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let c0 = wid.x * T;
    let f0 = wid.y * T;
    let tap = wid.z;
    // The tap (kh - 1 - i', kw - 1 - j') of a tap (i', j') is taps - 1 - tap in row-major
    // order.
    let src = (p.taps - 1u - tap) * p.c;
    for (var r = lid.y; r < T; r += ROWS) {
        let c = c0 + r;
        let f = f0 + lid.x;
        if (c < p.c && f < p.f) {
            block[r][lid.x] = w[(src + c) * p.f + f];
        }
    }
    workgroupBarrier();
    for (var r = lid.y; r < T; r += ROWS) {
        let f = f0 + r;
        let c = c0 + lid.x;
        if (c < p.c && f < p.f) {
            flipped[(tap * p.f + f) * p.c + c] = block[lid.x][r];
        }
    }
}
