//! A dataset held entirely in host memory: CIFAR and the synthetic task.

use super::{Dataset, check_load};
use crate::{Error, Result};

/// Decoded u8 HWC images back to back, with one label per image.
#[derive(Clone, Debug)]
pub struct InMemory {
    images: Vec<u8>,
    labels: Vec<u32>,
    shape: [usize; 3],
    class_names: Vec<String>,
    source: String,
}

impl InMemory {
    /// Checks that `images` holds exactly `labels.len()` images of `shape` and that every label
    /// names a class; errors name `source` (the file the data came from).
    pub fn new(
        images: Vec<u8>,
        labels: Vec<u32>,
        shape: [usize; 3],
        class_names: Vec<String>,
        source: impl Into<String>,
    ) -> Result<Self> {
        let source = source.into();
        let sample = crate::limits::product("image shape", &shape, crate::limits::MAX_SAMPLE_BYTES)
            .map_err(|e| Error::format(&source, e.to_string()))?;
        if sample == 0 {
            return Err(Error::format(&source, format!("image shape {shape:?} has a zero dimension")));
        }
        if labels.len().checked_mul(sample) != Some(images.len()) {
            return Err(Error::format(
                &source,
                format!(
                    "{} bytes of images for {} labels of shape {shape:?} (expected {})",
                    images.len(),
                    labels.len(),
                    labels.len() as u128 * sample as u128
                ),
            ));
        }
        let classes = class_names.len();
        if let Some((i, &label)) = labels.iter().enumerate().find(|&(_, &l)| l as usize >= classes) {
            return Err(Error::format(
                &source,
                format!("label {label} of sample {i} is out of range for {classes} classes"),
            ));
        }
        Ok(Self { images, labels, shape, class_names, source })
    }

    /// All images, u8 HWC, back to back.
    pub fn images(&self) -> &[u8] {
        &self.images
    }

    /// The label of every image, in the order of [`images`](Self::images).
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// Image `i`, u8 HWC (panics when `i` is out of range, like slice indexing).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.sample_bytes();
        &self.images[i * n..(i + 1) * n]
    }
}

impl Dataset for InMemory {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        self.shape
    }
    fn num_classes(&self) -> usize {
        self.class_names.len()
    }
    fn class_names(&self) -> Vec<String> {
        self.class_names.clone()
    }
    fn source(&self) -> String {
        self.source.clone()
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        check_load(self, i, out)?;
        out.copy_from_slice(self.image(i));
        Ok(self.labels[i])
    }
}
