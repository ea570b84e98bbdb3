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

// The 32 x 32 block (c0, f0) of tap `tap` of the kernel [taps, c, f] at element `src` of w,
// flipped into its place in the flip at element `dst` of flipped. Every invocation of the
// workgroup must call it (a barrier).
fn flip_block(src: u32, dst: u32, taps: u32, c_dim: u32, f_dim: u32, tap: u32, c0: u32, f0: u32, lid: vec3<u32>) {
    // The tap (kh - 1 - i', kw - 1 - j') of a tap (i', j') is taps - 1 - tap in row-major
    // order.
    let source_tap = (taps - 1u - tap) * c_dim;
    for (var r = lid.y; r < T; r += ROWS) {
        let c = c0 + r;
        let f = f0 + lid.x;
        if (c < c_dim && f < f_dim) {
            block[r][lid.x] = w[src + (source_tap + c) * f_dim + f];
        }
    }
    workgroupBarrier();
    for (var r = lid.y; r < T; r += ROWS) {
        let f = f0 + r;
        let c = c0 + lid.x;
        if (c < c_dim && f < f_dim) {
            flipped[dst + (tap * f_dim + f) * c_dim + c] = block[lid.x][r];
        }
    }
}

@compute @workgroup_size(32, 8)
fn flip_kernel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    flip_block(0u, 0u, p.taps, p.c, p.f, wid.z, wid.x * T, wid.y * T, lid);
}

// Many kernels' flips in one dispatch (src/kernels/conv2d.rs, `flip_kernels`): a model's
// kernels are views of its flat parameters and their flips views of one buffer, so that one
// dispatch flips them all where a dispatch each, 49 of them in a ResNet-50 step, cost 0.28 ms
// of 35 (H200): wgpu bars each dispatch that writes from running beside the one before.
// Kernel k's entries: at[2k] = (its first element in w, its flip's first in flipped, taps,
// its first workgroup), at[2k + 1] = (c, f, c's 32-blocks, f's 32-blocks). Its workgroups
// take its taps' 32 x 32 blocks as flip_kernel's grid does, tap-major.
const MAX_FLIPS: u32 = 64u;

struct FlipTable {
    // x: the kernels
    count: vec4<u32>,
    at: array<vec4<u32>, 128>,
}

@group(0) @binding(4) var<uniform> table: FlipTable;

@compute @workgroup_size(32, 8)
fn flip_kernels(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let index = wid.x + wid.y * nwg.x;
    var k = 0u;
    for (var i = 1u; i < min(table.count.x, MAX_FLIPS); i++) {
        if (table.at[2u * i].w <= index) {
            k = i;
        }
    }
    let head = table.at[2u * k];
    let dims = table.at[2u * k + 1u];
    let src = head.x;
    let dst = head.y;
    let taps = head.z;
    let first = head.w;
    let c_dim = dims.x;
    let f_dim = dims.y;
    let per_tap = dims.z * dims.w;
    let local = index - first;
    // The folded grid's last workgroups, past the last kernel's.
    if (local >= per_tap * taps) {
        return; // uniform: the table is
    }
    let tap = local / per_tap;
    flip_block(src, dst, taps, c_dim, f_dim, tap, (local % dims.z) * T, ((local % per_tap) / dims.z) * T, lid);
}
