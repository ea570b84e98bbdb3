//! The bandwidth of the sum across ranks that training uses (`convoy::distributed`: the MPI
//! thread's MPI_Iallreduce, polled), per message size, for the scaling model of BENCHMARKS.md.
//!
//! ```text
//! mpirun -np 2 cargo run --release --features mpi --example mpi_allreduce
//! ```
//! Rank 0 prints one JSON line per size: `bytes`, `ms` (median of the repeats), `algbw_gbps`
//! (bytes / time) and `busbw_gbps` (what each link carried: algbw x 2(n-1)/n, NCCL's measure,
//! which a ring all-reduce needs of the network).

use std::time::Instant;

fn main() -> convoy::Result<()> {
    convoy::distributed::init()?;
    let Some(ranks) = convoy::distributed::world() else {
        eprintln!("run under mpirun with at least 2 processes");
        std::process::exit(1);
    };
    let n = ranks.size() as f64;
    for bytes in [4usize << 10, 64 << 10, 1 << 20, 4 << 20, 8 << 20, 32 << 20, 64 << 20] {
        let data = vec![1.0f32; bytes / 4];
        // The first call sets up the connections; the median of the rest is the figure.
        let repeats = if bytes >= 32 << 20 { 6 } else { 16 };
        let mut times = Vec::new();
        for _ in 0..=repeats {
            let t0 = Instant::now();
            let sum = ranks.sum_f32(data.clone()).wait();
            times.push(t0.elapsed().as_secs_f64());
            assert_eq!(sum[0], n as f32, "the sum across {n} ranks");
        }
        times.remove(0);
        times.sort_by(f64::total_cmp);
        let t = times[times.len() / 2];
        let algbw = bytes as f64 / t / 1e9;
        if ranks.rank() == 0 {
            println!("{}", serde_json::json!({ "ranks": ranks.size(), "bytes": bytes, "ms": t * 1e3, "algbw_gbps": algbw, "busbw_gbps": algbw * 2.0 * (n - 1.0) / n }));
        }
    }
    convoy::distributed::finalize();
    Ok(())
}
