//! Reading a packed file: a memory map, checked once, shared by its two splits.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::Rng;

use super::{Entry, Layout};
use crate::data::crop::{RandomResizedCrop, centre_window, resize_size};
use crate::data::folder::check_resize_size;
use crate::data::resize::resize_window;
use crate::data::{Dataset, check_load};
use crate::{Error, Result};

/// The bytes of a packed file: mapped from disk, or owned (tests and fuzzing).
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A packed file whose layout has been checked.
struct PackedFile {
    path: PathBuf,
    storage: Storage,
    layout: Layout,
}

/// One split (train or val) of a packed file, as a [`Dataset`] of `image_size` x `image_size` RGB
/// samples. `load` resizes the stored image's short side to the resize size and takes the
/// centre crop (mapped back to one resampling of the stored pixels); `load_random_crop` resamples
/// the crop's window of the stored image. No image is decoded.
#[derive(Clone)]
pub struct Packed {
    file: Arc<PackedFile>,
    range: Range<usize>,
    split: &'static str,
    image_size: usize,
    resize_size: usize,
}

/// Opens the packed file `path` and returns its (train, val) splits at `image_size` (default: the
/// short side it was packed at), resized to [`resize_size`] of it before the centre crop.
pub fn packed(path: impl AsRef<Path>, image_size: Option<usize>) -> Result<(Packed, Packed)> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: the map is read-only and private to this process. Were another process to
    // truncate the file while it is mapped, reads past the new end would fault (the accepted
    // hazard of any memory map); overwriting it in place would only change pixels. `convoy
    // pack` never does either: it writes a new file and renames it over the old.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    open(path, Storage::Mapped(map), image_size)
}

/// [`packed`] over the bytes of a packed file held in memory; `source` names it in errors.
pub fn packed_from_bytes(bytes: Vec<u8>, source: &Path, image_size: Option<usize>) -> Result<(Packed, Packed)> {
    open(source, Storage::Owned(bytes), image_size)
}

fn open(path: &Path, storage: Storage, image_size: Option<usize>) -> Result<(Packed, Packed)> {
    let layout = Layout::parse(storage.bytes(), path)?;
    let image_size = image_size.unwrap_or(layout.short_side);
    if image_size == 0 {
        crate::bail!(Config, "image size must be positive for the packed file {}", path.display());
    }
    // The size often comes from a model file (`evaluate` resizes to the model's input).
    let at = |e: Error| Error::Config(format!("packed file {}: {e}", path.display()));
    crate::limits::at_most("image size", image_size, crate::limits::MAX_SIDE).map_err(at)?;
    crate::limits::product("sample shape", &[image_size, image_size, 3], crate::limits::MAX_SAMPLE_BYTES).map_err(at)?;
    let resize = resize_size(image_size);
    check_resize_size(path, image_size, resize)?;
    let (train, all) = (layout.train, layout.entries.len());
    let file = Arc::new(PackedFile { path: path.to_path_buf(), storage, layout });
    let split = |range, split| Packed { file: file.clone(), range, split, image_size, resize_size: resize };
    Ok((split(0..train, "train"), split(train..all, "val")))
}

impl Packed {
    /// The short side the images were stored at (`convoy pack --image-size`).
    pub fn packed_size(&self) -> usize {
        self.file.layout.short_side
    }

    /// The stored pixels (u8 HWC), width and height of sample `i`, as packed.
    pub fn stored(&self, i: usize) -> Result<(&[u8], usize, usize)> {
        if i >= self.range.len() {
            crate::bail!(Config, "sample index {i} out of range for {} ({} samples)", self.source(), self.range.len());
        }
        let e: &Entry = &self.file.layout.entries[self.range.start + i];
        // `Layout::parse` held offset + bytes to the pixel data, which ends at the file's end.
        let start = self.file.layout.data_start + e.offset as usize;
        Ok((&self.file.storage.bytes()[start..start + e.bytes()], e.width as usize, e.height as usize))
    }

    fn label(&self, i: usize) -> u32 {
        self.file.layout.entries[self.range.start + i].label
    }

    /// Resamples `window(width, height)` of stored sample `i` into `out`.
    fn load_window(&self, i: usize, out: &mut [u8], window: impl FnOnce(usize, usize) -> crate::data::Window) -> Result<u32> {
        check_load(self, i, out)?;
        let (pixels, w, h) = self.stored(i)?;
        let size = self.image_size;
        resize_window(pixels, [h, w, 3], window(w, h), out, [size, size])
            .map_err(|e| Error::format(&self.file.path, format!("{} image {i}: {e}", self.split)))?;
        Ok(self.label(i))
    }
}

impl Dataset for Packed {
    fn len(&self) -> usize {
        self.range.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        [self.image_size, self.image_size, 3]
    }
    fn num_classes(&self) -> usize {
        self.file.layout.classes.len()
    }
    fn class_names(&self) -> Vec<String> {
        self.file.layout.classes.clone()
    }
    fn source(&self) -> String {
        format!("{} ({})", self.file.path.display(), self.split)
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        self.load_window(i, out, |w, h| centre_window(w, h, self.resize_size, self.image_size))
    }
    fn load_random_crop(&self, i: usize, out: &mut [u8], crop: &RandomResizedCrop, rng: &mut dyn Rng) -> Result<u32> {
        self.load_window(i, out, |w, h| crop.window(w, h, rng))
    }
}
