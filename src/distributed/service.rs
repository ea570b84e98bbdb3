//! The MPI thread: the only thread of the process that calls MPI, so MPI needs no more than
//! `Threading::Funneled` (the thread that initialised it makes every call). Others hand it
//! jobs through a channel and read the results from a [`Pending`].
//!
//! Jobs run one at a time, in the order they were sent, as non-blocking MPI calls polled to
//! completion: every rank sends the same jobs in the same order (the buckets of each step
//! last layers first, then the sums of an epoch's end), so the collectives match. Polling
//! rather than blocking lets the thread notice an abort asked by another thread of its
//! process and a collective that waits past the watchdog's deadline. One bucket at a time
//! on the wire is what Horovod's background thread does too; while it runs, the replica
//! threads are already summing the next bucket on the host.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::Pending;
use crate::{Error, Result};

/// The processes training together (see the module docs of `crate::distributed`).
#[derive(Debug)]
pub struct Ranks {
    rank: usize,
    size: usize,
    jobs: Sender<Job>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
enum Job {
    SumF32(Vec<f32>, Arc<Pending<Vec<f32>>>),
    SumF64(Vec<f64>, Arc<Pending<Vec<f64>>>),
    Broadcast(Vec<f32>, Arc<Pending<Vec<f32>>>),
    Finalize,
}

static WORLD: OnceLock<Ranks> = OnceLock::new();

/// No abort asked; otherwise the exit code [`abort`] asked for.
const NO_ABORT: i32 = i32::MIN;
static ABORT: AtomicI32 = AtomicI32::new(NO_ABORT);

pub(super) fn world() -> Option<&'static Ranks> {
    WORLD.get()
}

pub(super) fn init() -> Result<()> {
    if WORLD.get().is_some() {
        return Ok(());
    }
    let timeout = match std::env::var("CONVOY_MPI_TIMEOUT") {
        Err(_) => Duration::from_secs(600),
        Ok(v) => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
            _ => crate::bail!(Mpi, "CONVOY_MPI_TIMEOUT must be a positive number of seconds, got {v:?}"),
        },
    };
    let (jobs, rx) = channel();
    let (up_tx, up_rx) = channel();
    let thread = std::thread::Builder::new()
        .name("convoy-mpi".into())
        .spawn(move || serve(rx, up_tx, timeout))
        .map_err(|e| Error::Mpi(format!("cannot start the MPI thread: {e}")))?;
    let (rank, size) = up_rx.recv().map_err(|_| Error::Mpi("the MPI thread ended while initialising MPI".into()))??;
    let _ = WORLD.set(Ranks { rank, size, jobs, thread: Mutex::new(Some(thread)) });
    Ok(())
}

pub(super) fn finalize() {
    let Some(w) = WORLD.get() else { return };
    let _ = w.jobs.send(Job::Finalize);
    if let Some(t) = w.thread.lock().unwrap().take() {
        let _ = t.join();
    }
}

pub(super) fn abort(code: i32) {
    if WORLD.get().is_none() {
        return;
    }
    ABORT.store(code, Ordering::Release);
    // The MPI thread sees the flag within milliseconds and MPI_Abort ends the process; should
    // it be gone already, leaving with the code still ends the job (mpirun's default for a
    // process that exits without MPI_Finalize).
    std::thread::sleep(Duration::from_secs(10));
    std::process::exit(code);
}

impl Ranks {
    /// This process's rank, 0 to `size() - 1`.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// How many processes train together.
    pub fn size(&self) -> usize {
        self.size
    }
    /// Starts the element-wise sum of `data` over all ranks (MPI_Iallreduce on the MPI
    /// thread, behind the jobs sent before); [`Pending::get`] or [`Pending::wait`] gives it.
    pub fn sum_f32(&self, data: Vec<f32>) -> Arc<Pending<Vec<f32>>> {
        let done = Arc::new(Pending::new());
        self.send(Job::SumF32(data, done.clone()));
        done
    }
    /// The element-wise sum of `data` over all ranks, in f64 (statistics, counts, logs).
    pub fn sum_f64(&self, data: Vec<f64>) -> Result<Vec<f64>> {
        let done = Arc::new(Pending::new());
        self.send(Job::SumF64(data, done.clone()));
        Ok(take(done.wait()))
    }
    /// Rank 0's `data` on every rank (the others' `data` gives only the length).
    pub fn broadcast(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        let done = Arc::new(Pending::new());
        self.send(Job::Broadcast(data, done.clone()));
        Ok(take(done.wait()))
    }

    fn send(&self, job: Job) {
        if self.jobs.send(job).is_err() {
            // Only a panic ends the MPI thread early; this rank cannot take part any more.
            eprintln!("error: rank {}: the MPI thread has ended; leaving the job", self.rank);
            std::process::exit(1);
        }
    }
}

/// The value of a result no one else holds, without a copy.
fn take<T: Clone>(v: Arc<T>) -> T {
    Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone())
}

fn serve(rx: Receiver<Job>, up: Sender<Result<(usize, usize)>>, timeout: Duration) {
    let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
        let _ = up.send(Err(Error::Mpi("MPI was initialised before convoy's MPI thread".into())));
        return;
    };
    if threading == mpi::Threading::Single {
        let _ = up.send(Err(Error::Mpi("the MPI library offers Threading::Single only; convoy calls MPI from a thread of its own and needs Funneled".into())));
        return;
    }
    let world = universe.world();
    let _ = up.send(Ok((world.rank() as usize, world.size() as usize)));
    let watch = Watch { world: &world, timeout };
    loop {
        let job = match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                watch.check_abort();
                continue;
            }
            // The process is ending without `finalize` (an error path that did not abort):
            // MPI_Finalize would wait for the other ranks, so leave it to mpirun to end them.
            Err(RecvTimeoutError::Disconnected) => std::process::exit(1),
        };
        match job {
            Job::SumF32(data, done) => done.set(watch.sum(&data, "gradient sum")),
            Job::SumF64(data, done) => done.set(watch.sum(&data, "sum of statistics")),
            Job::Broadcast(mut data, done) => {
                mpi::request::scope(|scope| {
                    let req = world.process_at_rank(0).immediate_broadcast_into(scope, &mut data[..]);
                    watch.complete(req, "broadcast of the weights");
                });
                done.set(data);
            }
            Job::Finalize => break,
        }
    }
    drop(universe);
}

/// Polls MPI requests to completion, ending the job on an abort asked by this process or on
/// a collective that waits past the deadline.
struct Watch<'w> {
    world: &'w SimpleCommunicator,
    timeout: Duration,
}

impl Watch<'_> {
    fn sum<T: Equivalence + Default + Clone>(&self, data: &[T], what: &str) -> Vec<T> {
        let mut out = vec![T::default(); data.len()];
        mpi::request::scope(|scope| {
            let req = self.world.immediate_all_reduce_into(scope, data, &mut out[..], SystemOperation::sum());
            self.complete(req, what);
        });
        out
    }

    fn complete<'a, D: ?Sized, S: Scope<'a>>(&self, mut req: Request<'a, D, S>, what: &str) {
        let t0 = Instant::now();
        loop {
            match req.test() {
                Ok(_) => return,
                Err(r) => req = r,
            }
            self.check_abort();
            if t0.elapsed() > self.timeout {
                eprintln!(
                    "error: rank {}: the {what} across {} ranks has not completed after {:.0} s (CONVOY_MPI_TIMEOUT): a rank stopped without ending the job; aborting every rank",
                    self.world.rank(),
                    self.world.size(),
                    self.timeout.as_secs_f64()
                );
                self.world.abort(1);
            }
            // MPI progresses a non-blocking collective only inside its calls, a fragment or
            // so a call: poll without sleeping while a sum can still be moving (an 8 MB bucket
            // between two ranks on one GPU host took 13.5 ms with a 50 us sleep between
            // polls, 0.6 GB/s), yielding the core to the replica threads between polls; only a sum
            // that has taken a second (a rank that stopped) is polled gently.
            if t0.elapsed() < Duration::from_secs(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn check_abort(&self) {
        let code = ABORT.load(Ordering::Acquire);
        if code != NO_ABORT {
            self.world.abort(code);
        }
    }
}
