//! `convoy pack`: an image folder decoded once into a packed file.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use rayon::prelude::*;

use super::{Entry, Layout};
use crate::data::decode::decode_resized;
use crate::data::loader::decode_pool;
use crate::data::{Dataset, ImageFolder};
use crate::model::write_atomic_with;
use crate::{Error, Result};

/// What [`pack_folder`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackReport {
    /// Images of the training split.
    pub train: usize,
    /// Images of the validation split.
    pub val: usize,
    /// Class names stored (label order).
    pub classes: usize,
    /// Bytes of the packed file.
    pub bytes: u64,
}

/// Decodes every image of the folder `dir` (`DIR/train/<class>/*`, `DIR/val/<class>/*`), resizes
/// its short side to `image_size` and writes them all to the packed file `out`, atomically: `out`
/// is either the whole new file or left as it was. Images are decoded in parallel, a few per core
/// at a time, so memory stays small whatever the folder's size.
pub fn pack_folder(dir: impl AsRef<Path>, image_size: usize, out: impl AsRef<Path>) -> Result<PackReport> {
    let (dir, out) = (dir.as_ref(), out.as_ref());
    let (train, val) = ImageFolder::open_splits(dir, image_size)?;
    let classes = train.class_names();
    let images: Vec<(&Path, u32)> =
        [&train, &val].into_iter().flat_map(|s| (0..s.len()).map(move |i| (s.path(i), s.label(i)))).collect();
    let data_start = Layout::data_start(&classes, images.len());
    write_atomic_with(out, |file| {
        let mut entries = Vec::with_capacity(images.len());
        let io = |e: std::io::Error| Error::io(out, e);
        // The index is known only once every image is resized: room for it now, filled in last.
        file.write_all(&vec![0; data_start]).map_err(io)?;
        let mut offset = 0u64;
        let pool = decode_pool()?;
        for chunk in images.chunks(4 * pool.current_num_threads()) {
            let decoded: Vec<(Vec<u8>, usize, usize)> =
                pool.install(|| chunk.par_iter().map(|&(path, _)| decode_resized(path, image_size)).collect::<Result<_>>())?;
            for ((pixels, w, h), &(_, label)) in decoded.iter().zip(chunk) {
                file.write_all(pixels).map_err(io)?;
                entries.push(Entry { offset, width: *w as u32, height: *h as u32, label });
                offset += pixels.len() as u64;
            }
        }
        let layout = Layout { short_side: image_size, classes: classes.clone(), train: train.len(), entries, data_start };
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(&layout.encode(offset)).map_err(io)
    })?;
    let bytes = std::fs::metadata(out).map_err(|e| Error::io(out, e))?.len();
    Ok(PackReport { train: train.len(), val: val.len(), classes: classes.len(), bytes })
}
