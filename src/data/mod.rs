//! Training data on the host: datasets of u8 HWC images, augmentation and a background prefetcher.
//!
//! Images stay u8 (height, width, channels) all the way to the GPU, which normalises them: a quarter
//! of the bytes of f32 on every copy.

mod augment;
mod cifar;
mod crop;
mod decode;
mod folder;
mod in_memory;
mod loader;
mod packed;
mod resize;
mod spec;
mod stats;
mod subset;
mod synthetic;

pub use augment::Augment;
pub use crop::{IMAGENET_MIN_SIZE, RandomResizedCrop, Window, centre_window, resize_size, resized_dims};
pub use decode::dct_scale;
pub use cifar::{CIFAR10_URL, CIFAR100_URL, cifar10, cifar10_from_bytes, cifar100, cifar100_from_bytes};
pub use folder::ImageFolder;
pub use in_memory::InMemory;
pub use loader::{Batch, Loader, Shard, batch_count, epoch_indices};
pub use packed::{PACKED_MAGIC, PACKED_VERSION, PackReport, Packed, pack_folder, packed, packed_from_bytes};
pub use spec::{SPEC_FORMS, augment_for, from_spec};
pub use stats::channel_stats;
pub use subset::Subset;
pub use synthetic::{SYNTHETIC_CLASSES, synthetic, synthetic_split};

use rand::Rng;

use crate::Result;
use crate::limits::MAX_SAMPLE_BYTES;

/// A labelled image collection that can be read from several threads at once.
pub trait Dataset: Send + Sync {
    /// Samples in the dataset.
    fn len(&self) -> usize;
    /// `true` when the dataset has no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `[height, width, channels]` of every sample.
    fn image_shape(&self) -> [usize; 3];
    /// Classes the labels index into (labels are `0..num_classes`).
    fn num_classes(&self) -> usize;
    /// A name per class, in label order (an image folder's subfolder names, CIFAR's class names).
    fn class_names(&self) -> Vec<String>;
    /// A path or "synthetic", for messages.
    fn source(&self) -> String;
    /// Decodes sample `i` into `out` (u8 HWC, exactly h*w*c bytes) and returns its label.
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32>;

    /// Like `load`, but `out` is the window that `crop` draws from `rng`, resampled to the sample's
    /// shape: a training load. Data sets that hold whole images (folders, packed files) crop
    /// those; the default crops the fixed-size sample that `load` gives.
    fn load_random_crop(&self, i: usize, out: &mut [u8], crop: &RandomResizedCrop, rng: &mut dyn Rng) -> Result<u32> {
        check_load(self, i, out)?;
        let shape = self.image_shape();
        let mut whole = crate::limits::zeroed("a sample before its crop", out.len())?;
        let label = self.load(i, &mut whole)?;
        let window = crop.window(shape[1], shape[0], rng);
        resize::resize_window(&whole, shape, window, out, [shape[0], shape[1]])?;
        Ok(label)
    }

    /// Bytes of one decoded sample (saturating: [`checked_sample_bytes`] reports a shape
    /// whose product overflows or passes the cap).
    fn sample_bytes(&self) -> usize {
        let [h, w, c] = self.image_shape();
        h.saturating_mul(w).saturating_mul(c)
    }
}

/// The bytes of one sample of `ds`, multiplied with checked arithmetic and held to
/// [`MAX_SAMPLE_BYTES`]: what every reader that sizes a buffer from a data set (or from the
/// model it is resized to) checks first.
pub fn checked_sample_bytes(ds: &dyn Dataset) -> Result<usize> {
    let shape = ds.image_shape();
    crate::limits::product("sample shape (height, width, channels)", &shape, MAX_SAMPLE_BYTES)
        .map_err(|e| crate::Error::Config(format!("{}: {e}", ds.source())))
}

/// Checks the arguments every `Dataset::load` receives, so that implementations cannot index out of bounds.
pub(crate) fn check_load<D: Dataset + ?Sized>(ds: &D, i: usize, out: &[u8]) -> Result<()> {
    if i >= ds.len() {
        crate::bail!(Config, "sample index {i} out of range for {} ({} samples)", ds.source(), ds.len());
    }
    if out.len() != ds.sample_bytes() {
        crate::bail!(
            Shape,
            "load from {} needs a buffer of {} bytes for shape {:?}, got {}",
            ds.source(),
            ds.sample_bytes(),
            ds.image_shape(),
            out.len()
        );
    }
    Ok(())
}

/// SplitMix64: turns (seed, index) pairs into well-spread independent seeds.
pub(crate) fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
