//! A contiguous range of another data set: how `fit`'s `validation_split` sets the last
//! samples aside (Keras takes them before shuffling).

use std::ops::Range;
use std::sync::Arc;

use rand::Rng;

use super::{check_load, Dataset, RandomResizedCrop};
use crate::{bail, Result};

/// Samples `range` of `inner`, renumbered from 0.
pub struct Subset {
    inner: Arc<dyn Dataset>,
    range: Range<usize>,
}

impl Subset {
    /// Samples `range` of `inner`; a range past its end is an error naming both.
    pub fn new(inner: Arc<dyn Dataset>, range: Range<usize>) -> Result<Subset> {
        if range.start > range.end || range.end > inner.len() {
            bail!(Config, "{}: samples {range:?} are not within its {} samples", inner.source(), inner.len());
        }
        Ok(Subset { inner, range })
    }
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.range.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        self.inner.image_shape()
    }
    fn num_classes(&self) -> usize {
        self.inner.num_classes()
    }
    fn class_names(&self) -> Vec<String> {
        self.inner.class_names()
    }
    fn source(&self) -> String {
        format!("{} (samples {}..{})", self.inner.source(), self.range.start, self.range.end)
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        check_load(self, i, out)?;
        self.inner.load(self.range.start + i, out)
    }
    fn load_random_crop(&self, i: usize, out: &mut [u8], crop: &RandomResizedCrop, rng: &mut dyn Rng) -> Result<u32> {
        check_load(self, i, out)?;
        self.inner.load_random_crop(self.range.start + i, out, crop, rng)
    }
}
