//! Training across processes under `mpirun`: one process per machine, each with its replicas
//! (one per local device), the whole set training one model, as Horovod does.
//!
//! Each gradient bucket is summed in two stages: the host sum over the process's replicas
//! (`crate::parallel`, as on one machine), then a sum across the processes (MPI_Iallreduce),
//! after which every local replica uploads the global sum and applies the update. The
//! second stage runs on this module's own thread, which alone calls MPI: a replica thread
//! hands it a bucket's local sum and goes on with the next bucket, so the exchange across
//! machines overlaps the rest of the backward just as the local one does.
//!
//! What holds across the ranks (the processes):
//! - rank 0's weights, moving statistics and optimizer state are broadcast when `fit` starts,
//!   so every rank starts from the same model however it was built or loaded;
//! - every rank draws the same epoch order from the seed and loads only its share of each
//!   global batch (`crate::data::Shard`), split across the ranks by their measured speed
//!   (equal shares in the first epoch) and within a rank across its replicas as on one machine;
//! - each replica's loss gradient is scaled by one over the *global* batch, so the sum across
//!   ranks is the gradient of the mean loss over the whole batch;
//! - BatchNorm's moving statistics are averaged over every replica of every rank at the end
//!   of each epoch, weighted by the samples each saw; with one replica per rank and the same
//!   shares, training matches one process with as many replicas (tests/mpi.rs);
//! - the epoch's logs (loss, metrics, validation, images/s) are summed over the ranks, so
//!   callbacks decide the same on every rank; a callback's request to stop in the middle of
//!   an epoch takes effect at its end, the next point where all ranks agree;
//! - only rank 0 prints progress and writes files (`Sequential::save`, checkpoints); each
//!   rank's `--trace` goes to a file of its own ([`trace_path`]).
//!
//! Failure: an error on one rank prints its message and calls MPI_Abort ([`abort`]), which
//! makes `mpirun` end every rank; a rank killed or exiting early ends the job the same way
//! (OpenMPI's default). A collective that waits longer than `CONVOY_MPI_TIMEOUT` seconds
//! (default 600) aborts with a message naming it: a rank that hangs cannot hang the others.
//!
//! Without the `mpi` feature [`Ranks`] has no value and [`world`] is always `None`: the
//! code that uses it compiles to the one-process path.

#[cfg(feature = "mpi")]
mod service;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[cfg(feature = "mpi")]
pub use service::Ranks;

/// The processes training together. Without the `mpi` feature there is no other process:
/// the type has no value.
#[cfg(not(feature = "mpi"))]
#[derive(Debug)]
pub enum Ranks {}

#[cfg(not(feature = "mpi"))]
impl Ranks {
    /// This process's rank, 0 to `size() - 1`.
    pub fn rank(&self) -> usize {
        match *self {}
    }
    /// How many processes train together.
    pub fn size(&self) -> usize {
        match *self {}
    }
    /// Starts the element-wise sum of `data` over all ranks; [`Pending::wait`] gives it.
    pub fn sum_f32(&self, _data: Vec<f32>) -> Arc<Pending<Vec<f32>>> {
        match *self {}
    }
    /// The element-wise sum of `data` over all ranks.
    pub fn sum_f64(&self, _data: Vec<f64>) -> crate::Result<Vec<f64>> {
        match *self {}
    }
    /// Rank 0's `data` on every rank (the others' `data` gives only the length).
    pub fn broadcast(&self, _data: Vec<f32>) -> crate::Result<Vec<f32>> {
        match *self {}
    }
}

/// The processes training together, when this one was started by `mpirun` with more than
/// one process and [`init`] has run; `None` otherwise.
pub fn world() -> Option<&'static Ranks> {
    #[cfg(feature = "mpi")]
    return service::world();
    #[cfg(not(feature = "mpi"))]
    None
}

/// Whether this process was started by an MPI launcher (`mpirun`, `srun`), from the
/// variables OpenMPI, MPICH and PMIx set, and how many processes it started.
pub fn launched_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"].iter().find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Joins the other processes when this one was started by `mpirun` (a launcher of one
/// process joins nothing); a no-op otherwise. Call it once, first thing in `main`, and end
/// with [`finalize`] (or [`abort`] on an error). Without the `mpi` feature, a launch of
/// several processes is an error: each would train a model of its own.
pub fn init() -> crate::Result<()> {
    let Some(n) = launched_size().filter(|&n| n > 1) else { return Ok(()) };
    #[cfg(feature = "mpi")]
    {
        let _ = n;
        service::init()
    }
    #[cfg(not(feature = "mpi"))]
    crate::bail!(Mpi, "started by mpirun as one of {n} processes, but this convoy was built without the `mpi` feature: each process would train a model of its own (build with --features mpi)")
}

/// Leaves the job after a successful run (MPI_Finalize, once every rank gets there). A
/// no-op when [`init`] joined nothing.
pub fn finalize() {
    #[cfg(feature = "mpi")]
    service::finalize();
}

/// Ends every rank of the job with exit code `code` (MPI_Abort): the error path of one rank,
/// after it has printed its message. Returns only when no job was joined.
pub fn abort(code: i32) {
    #[cfg(feature = "mpi")]
    service::abort(code);
    #[cfg(not(feature = "mpi"))]
    let _ = code;
}

/// The file rank `r`'s `--trace` goes to: `path` itself on rank 0 (and without MPI),
/// `NAME.rankR.EXT` beside it on the others.
pub fn trace_path(path: &std::path::Path) -> std::path::PathBuf {
    match world().map(|w| w.rank()).filter(|&r| r > 0) {
        None => path.to_path_buf(),
        Some(r) => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let name = match path.extension() {
                Some(ext) => format!("{stem}.rank{r}.{}", ext.to_string_lossy()),
                None => format!("{stem}.rank{r}"),
            };
            path.with_file_name(name)
        }
    }
}

/// The result of an operation across the ranks, filled in by the MPI thread: replica threads
/// poll it ([`Pending::get`]) between their own work, other callers block ([`Pending::wait`]).
#[derive(Debug)]
pub struct Pending<T> {
    value: Mutex<Option<Arc<T>>>,
    ready: Condvar,
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending { value: Mutex::new(None), ready: Condvar::new() }
    }
}

impl<T> Pending<T> {
    /// A result not in yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// Fills in the result and wakes the waiters.
    pub fn set(&self, v: T) {
        *self.value.lock().unwrap() = Some(Arc::new(v));
        self.ready.notify_all();
    }
    /// The result, if it is in (shared: several replica threads read one bucket's sum).
    pub fn get(&self) -> Option<Arc<T>> {
        self.value.lock().unwrap().clone()
    }
    /// Waits at most `d` for the result.
    pub fn wait_timeout(&self, d: Duration) -> Option<Arc<T>> {
        let v = self.value.lock().unwrap();
        let (v, _) = self.ready.wait_timeout_while(v, d, |v| v.is_none()).unwrap();
        v.clone()
    }
    /// Waits for the result. The MPI thread's watchdog ends the process rather than leave
    /// a result missing forever, so this needs no deadline of its own.
    pub fn wait(&self) -> Arc<T> {
        let mut v = self.value.lock().unwrap();
        loop {
            if let Some(x) = v.as_ref() {
                return x.clone();
            }
            v = self.ready.wait_timeout(v, Duration::from_millis(100)).unwrap().0;
        }
    }
}
