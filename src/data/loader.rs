//! Background prefetching: a thread decodes and augments the next batches (the samples of one batch
//! in parallel on [`decode_pool`], one thread per core) while the GPUs work on the current one.
//!
//! Memory stays bounded whatever the data set's size: at most `depth` finished batches wait in
//! the queue, one is being filled, and each decoding thread holds one decoded image while it
//! resamples it (a JPEG decoded at a reduced DCT scale where the crop allows; see `decode.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

use super::{Augment, Dataset, mix};
use crate::limits::MAX_BATCH_BYTES;
use crate::{Error, Result};

/// The threads that decode and augment samples: a rayon pool of their own, one thread per core.
/// Not rayon's global pool, because the host all-reduce runs there: a busy rayon thread drains
/// its own queue (a batch of decode tasks) before it takes injected work, so a gradient sum
/// queued behind a batch of JPEGs would wait tens of milliseconds. In separate pools the two
/// only share the cores, as the operating system schedules them.
pub(crate) fn decode_pool() -> Result<&'static rayon::ThreadPool> {
    static POOL: OnceLock<std::result::Result<rayon::ThreadPool, String>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new().thread_name(|i| format!("convoy-decode-{i}")).build().map_err(|e| e.to_string())
    });
    pool.as_ref().map_err(|e| Error::Config(format!("cannot start the image decoding threads: {e}")))
}

/// One batch of decoded samples: `labels.len()` u8 HWC images back to back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The images, u8 HWC, back to back.
    pub images: Vec<u8>,
    /// One class index per image.
    pub labels: Vec<u32>,
}

impl Batch {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// `true` for a batch of no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// The sample order of one epoch: `0..len`, shuffled when asked. The same (seed, epoch) always gives
/// the same order, so a resumed run replays it.
pub fn epoch_indices(len: usize, shuffle: bool, seed: u64, epoch: usize) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..len).collect();
    if shuffle {
        indices.shuffle(&mut StdRng::seed_from_u64(mix(seed, epoch as u64)));
    }
    indices
}

/// Batches in an epoch of `len` samples: the last one is short unless `drop_remainder` (0 when
/// `batch_size` is 0).
pub fn batch_count(len: usize, batch_size: usize, drop_remainder: bool) -> usize {
    match batch_size {
        0 => 0,
        b if drop_remainder => len / b,
        b => len.div_ceil(b),
    }
}

/// One rank's part of every batch when several processes train together under `mpirun`
/// (`crate::distributed`): batch `b` of the epoch's order is the global batch, split across
/// the ranks in rank order in proportion to `speeds` (as `crate::parallel::split` splits a
/// batch across devices), and this rank loads only its part of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    /// Relative speed of each rank.
    pub speeds: Vec<f64>,
    /// This process's rank.
    pub rank: usize,
}

impl Shard {
    /// The positions in a global batch of `n` samples that are this rank's.
    pub fn range(&self, n: usize) -> std::ops::Range<usize> {
        let counts = crate::parallel::split(n, &self.speeds);
        let start: usize = counts[..self.rank].iter().sum();
        start..start + counts[self.rank]
    }
}

/// An iterator over the batches of one epoch, filled by a background thread through a queue of
/// `depth` batches.
///
/// The last batch is short unless `drop_remainder`; convoy keeps it by default (every sample is
/// seen each epoch) and the layers handle any batch size, BatchNorm included. A failed sample ends
/// the stream with its error. Dropping the loader stops the thread within one sample per worker.
pub struct Loader {
    rx: Option<Receiver<Result<Batch>>>,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    batches: usize,
    source: String,
}

impl Loader {
    /// `indices` is the epoch's order (see `epoch_indices`). Augmentation draws from a generator
    /// seeded by (`seed`, position in `indices`): pass a different seed each epoch.
    pub fn new(
        dataset: Arc<dyn Dataset>,
        indices: Vec<usize>,
        batch_size: usize,
        drop_remainder: bool,
        augment: Option<Augment>,
        seed: u64,
        depth: usize,
    ) -> Result<Self> {
        Self::sharded(dataset, indices, batch_size, drop_remainder, augment, seed, depth, None)
    }

    /// [`Loader::new`] yielding only `shard`'s part of each batch (an empty batch where the
    /// part is empty); its samples draw their augmentation at their place in the whole batch,
    /// so a sample is augmented the same whichever rank loads it.
    #[allow(clippy::too_many_arguments)]
    pub fn sharded(
        dataset: Arc<dyn Dataset>,
        indices: Vec<usize>,
        batch_size: usize,
        drop_remainder: bool,
        augment: Option<Augment>,
        seed: u64,
        depth: usize,
        shard: Option<Shard>,
    ) -> Result<Self> {
        let source = dataset.source();
        if batch_size == 0 {
            crate::bail!(Config, "batch size must be positive, got 0 (data: {source})");
        }
        if let Some(&bad) = indices.iter().find(|&&i| i >= dataset.len()) {
            crate::bail!(Config, "sample index {bad} out of range for {source} ({} samples)", dataset.len());
        }
        let sample = super::checked_sample_bytes(&*dataset)?;
        crate::limits::product(&format!("batch bytes (batch size, sample bytes) of {source}:"), &[batch_size, sample], MAX_BATCH_BYTES)?;
        let batches = batch_count(indices.len(), batch_size, drop_remainder);
        let augment = augment.filter(|a| !a.is_identity());
        if let Some(crop) = augment.and_then(|a| a.random_resized_crop) {
            crop.validate()?;
        }
        let (tx, rx) = sync_channel(depth);
        let stop = Arc::new(AtomicBool::new(false));
        let job = Job { dataset, indices, batch_size, batches, augment, seed, stop: stop.clone(), shard };
        let worker = std::thread::Builder::new()
            .name("convoy-loader".into())
            .spawn(move || job.run(tx))
            .map_err(|e| Error::Config(format!("cannot start the data loader thread: {e}")))?;
        Ok(Self { rx: Some(rx), stop, worker: Some(worker), batches, source })
    }

    /// Batches this epoch will yield when no sample fails.
    pub fn num_batches(&self) -> usize {
        self.batches
    }

    /// The next item if the thread has it ready, without waiting: `None` while it is still
    /// filling the batch (`next` then waits for it), `Some(None)` at the end.
    pub fn try_next(&mut self) -> Option<Option<Result<Batch>>> {
        match self.rx.as_ref().map(|rx| rx.try_recv()) {
            Some(Ok(item)) => Some(Some(item)),
            Some(Err(TryRecvError::Empty)) => None,
            Some(Err(TryRecvError::Disconnected)) | None => Some(self.next()),
        }
    }
}

impl Iterator for Loader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if let Ok(item) = self.rx.as_ref()?.recv() {
            return Some(item);
        }
        // The sender is gone: the epoch ended, or the thread panicked, which must not look like
        // a short epoch.
        self.rx = None;
        let panic = self.worker.take()?.join().err()?;
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Some(Err(Error::format(&self.source, format!("data loader thread panicked: {why}"))))
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver first unblocks a thread waiting on a full queue.
        self.rx = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// What the background thread owns.
struct Job {
    dataset: Arc<dyn Dataset>,
    indices: Vec<usize>,
    batch_size: usize,
    batches: usize,
    augment: Option<Augment>,
    seed: u64,
    stop: Arc<AtomicBool>,
    shard: Option<Shard>,
}

impl Job {
    fn run(self, tx: SyncSender<Result<Batch>>) {
        for (b, chunk) in self.indices.chunks(self.batch_size).take(self.batches).enumerate() {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let part = self.shard.as_ref().map_or(0..chunk.len(), |s| s.range(chunk.len()));
            let batch = self.fill(b * self.batch_size + part.start, &chunk[part]);
            let failed = batch.is_err();
            if self.stop.load(Ordering::Relaxed) || tx.send(batch).is_err() || failed {
                return;
            }
        }
    }

    /// Decodes the samples `chunk` (which start at position `first` of the epoch) in parallel.
    fn fill(&self, first: usize, chunk: &[usize]) -> Result<Batch> {
        let ds = &*self.dataset;
        let (sample, shape) = (ds.sample_bytes(), ds.image_shape());
        // `Loader::new` held batch_size x sample to the cap; a chunk is never longer.
        let bytes = crate::limits::product("batch bytes (samples, sample bytes)", &[chunk.len(), sample], MAX_BATCH_BYTES)?;
        let mut batch = Batch { images: crate::limits::zeroed("a batch of images", bytes)?, labels: vec![0; chunk.len()] };
        let (images, labels) = (&mut batch.images, &mut batch.labels);
        decode_pool()?.install(|| {
            images
                .par_chunks_mut(sample)
                .zip(labels.par_iter_mut())
                .zip(chunk.par_iter())
                .enumerate()
                .try_for_each(|(k, ((image, label), &i))| {
                    // Skip the remaining work of an abandoned batch; its result is never sent.
                    if self.stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    let Some(a) = &self.augment else {
                        *label = ds.load(i, image)?;
                        return Ok(());
                    };
                    let mut rng = StdRng::seed_from_u64(mix(self.seed, (first + k) as u64));
                    *label = match &a.random_resized_crop {
                        Some(crop) => ds.load_random_crop(i, image, crop, &mut rng)?,
                        None => ds.load(i, image)?,
                    };
                    a.apply(image, shape, &mut rng)
                })
        })?;
        Ok(batch)
    }
}
