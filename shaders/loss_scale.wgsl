// Dynamic loss scaling for the mixed_float16 policy (Keras' LossScaleOptimizer), kept on the
// device so that no step waits for the host: the loss gradient is multiplied by the scale,
// the gradients are searched for NaN and infinity, the optimizer divides by the scale or
// skips the step (optimizer.wgsl, SCALED), and `update_scale` moves the scale.
//
// The state, u32 [4]: the scale (f32 bits), finite steps since the scale last changed, the
// step's non-finite flag, and the steps skipped so far.

struct Params {
    // elements of `data`
    n: u32,
    // finite steps after which the scale doubles
    growth_steps: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> data: array<f32>;
@group(0) @binding(2) var<storage, read_write> state: array<atomic<u32>>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid;
}

// data *= scale: the loss gradient, before the backward.
@compute @workgroup_size(WG)
fn scale_gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    data[i] *= bitcast<f32>(atomicLoad(&state[0]));
}

// Sets the flag where any gradient is NaN or infinite. The exponent test is on the bits, so
// no compiler's fast-math can assume the value finite.
@compute @workgroup_size(WG)
fn find_non_finite(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    if ((bitcast<u32>(data[i]) & 0x7f800000u) == 0x7f800000u) {
        atomicOr(&state[2], 1u);
    }
}

// find_non_finite over quads, for `data` of whole quads (the host picks it where n is a
// multiple of 4): 16-byte loads, QUADS of them an invocation (strided by the grid's
// invocations, so that each load of a subgroup reads whole lines), and one atomic at most.
// One 4-byte load an invocation ran at a fifth of the memory's speed (ResNet-50's 25.5M
// gradients, 0.108 ms on the H200).
@group(0) @binding(3) var<storage, read> data4: array<vec4<f32>>;

const QUADS: u32 = 4u;

@compute @workgroup_size(WG)
fn find_non_finite4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let first = index(wid, nwg, lid);
    let stride = nwg.x * nwg.y * WG;
    let quads = p.n / 4u;
    var bad = false;
    for (var k = 0u; k < QUADS; k++) {
        let q = first + k * stride;
        if (q < quads) {
            let exponent = bitcast<vec4<u32>>(data4[q]) & vec4<u32>(0x7f800000u);
            bad = bad | any(exponent == vec4<u32>(0x7f800000u));
        }
    }
    if (bad) {
        atomicOr(&state[2], 1u);
    }
}

// After the optimizer: a skipped step halves the scale and restarts the count; the
// growth_steps-th finite step in a row doubles it. One invocation.
@compute @workgroup_size(1)
fn update_scale() {
    let scale = bitcast<f32>(atomicLoad(&state[0]));
    if (atomicLoad(&state[2]) != 0u) {
        // Not below 1: scaling is there to lift small gradients, and a scale that reached 0
        // would turn the next finite step's division into NaN weights. Steps that overflow
        // even at 1 go on being skipped, and counted (History's loss_scale, skipped_steps).
        atomicStore(&state[0], bitcast<u32>(max(scale * 0.5, 1.0)));
        atomicStore(&state[1], 0u);
        atomicStore(&state[2], 0u);
        atomicAdd(&state[3], 1u);
        return;
    }
    let good = atomicLoad(&state[1]) + 1u;
    if (good >= p.growth_steps) {
        // f32 has room for any scale a run reaches; Keras does not cap it either.
        atomicStore(&state[0], bitcast<u32>(scale * 2.0));
        atomicStore(&state[1], 0u);
    } else {
        atomicStore(&state[1], good);
    }
}
