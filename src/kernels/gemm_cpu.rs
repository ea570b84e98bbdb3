//! The GEMM engine's kernel for software adapters ([`Engine::Cpu`], `shaders/gemm_cpu.wgsl`):
//! the same products, gathers, split-K partials and stores as the tiled kernel, computed as
//! an 8 x 8 block of C per invocation in registers, which is what a CPU running the
//! invocations as SIMD lanes does fastest (the shader's header has the measurements).
//!
//! [`Engine::Cpu`]: super::gemm::Engine::Cpu

use super::batchnorm::Partials;
use super::gemm::{c_quads, operand_rounding, product_params, record_statistics, ALoad, Gemm, GemmOptions, MAX_WORKSPACE};
use super::{Dispatch, GEMM_CPU_ALL};
use crate::{Device, Result};

/// Rows and columns of C per invocation (`CPU_ROWS`, `CPU_COLS` in the shader).
const BLOCK: usize = 8;
/// K per iteration of the shader's loop.
const K_STEP: usize = 4;
/// Invocations per workgroup (`CPU_WG`): one AVX2 vector of lanes.
pub(crate) const WORKGROUP: usize = 8;
/// Invocations per CPU thread a grid should hold, so that the threads finish together.
pub(crate) const INVOCATIONS_PER_THREAD: usize = 64;
/// The least K per split: shorter ones spend more on the partials than they save.
const MIN_SPLIT_K: usize = 256;

/// Records `g` on the CPU kernel; `launch` in [`super::gemm`] has checked its operands.
/// With `stats`, where the product runs unsplit, each block's rows are a chunk of C's
/// statistics (see [`super::gemm::launch_statistics`]).
pub(crate) fn launch(device: &Device, g: &Gemm, opts: &GemmOptions, stats: bool) -> Result<(Vec<Dispatch>, Option<Partials>)> {
    let group_count = g.groups.map_or(1, |gr| gr.count);
    let tiles = (g.m.div_ceil(BLOCK), g.n.div_ceil(BLOCK));
    let blocks = tiles.0 * tiles.1 * group_count;
    let split = match opts.splits {
        Some(s) => (s, "split=forced"),
        None => choose_splits(blocks, g.m * g.n * group_count, g.k, threads()),
    };
    // Which taps of a strided stuffed gradient meet an output depends on the row and the k
    // together, so its gather is not separable (phase products are its usual form).
    let general = g.a_load == ALoad::DyStuffed && g.conv.is_some_and(|c| c.stride_h > 1 || c.stride_w > 1);
    let mut constants = vec![
        ("A_KIND", g.a_load.kind() as f64),
        ("B_KIND", g.b_load.kind() as f64),
        ("CPU_WG", WORKGROUP as f64),
    ];
    if general {
        constants.push(("A_GENERAL", 1.0));
    }
    let (round, round_token) = operand_rounding(g, opts);
    if round {
        constants.push(("ROUND_F16", 1.0));
    }
    let (p, tokens) = product_params(g, tiles, K_STEP, split, &mut constants)?;
    if c_quads(g) {
        constants.push(("C_QUADS", 1.0));
    }
    // Split, the bias goes in with the partials' sum.
    if p.splits() == 1 && g.bias.is_some() {
        constants.push(("CPU_BIAS", 1.0));
    }
    let invocations = blocks * p.splits();
    let gather = if general { "gather=general" } else { "gather=separable" };
    let path = format!("{tokens} {gather} {round_token}");
    record_statistics(device, g, stats && p.splits() == 1, (BLOCK, tiles.0), (&GEMM_CPU_ALL, "gemm_cpu"), constants, p, invocations.div_ceil(WORKGROUP), path)
}

/// The CPU threads a software adapter runs a dispatch on (lavapipe: one per core).
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// K splits for `blocks` invocations over `outputs` elements of C: enough invocations for
/// every thread, at least [`MIN_SPLIT_K`] k per split, partials within the workspace cap.
/// Returns the count and the rule that chose it, for the path label.
fn choose_splits(blocks: usize, outputs: usize, k: usize, threads: usize) -> (usize, &'static str) {
    let target = INVOCATIONS_PER_THREAD * threads;
    if blocks >= target {
        return (1, "split=auto");
    }
    let by_k = (k / MIN_SPLIT_K).max(1);
    let by_space = (MAX_WORKSPACE / (4 * outputs).max(1)).max(1);
    (target.div_ceil(blocks).min(by_k).min(by_space), "split=auto")
}
