//! Random training-time augmentation of u8 HWC images: random-resized crop, pad-and-crop and
//! horizontal flip.

use rand::{Rng, RngExt};

use super::RandomResizedCrop;
use crate::Result;

/// What to apply to each training image. The default does nothing; `Augment::cifar()` is the usual
/// CIFAR recipe (4 pixels of zero padding, random crop back to size, random flip) and
/// `Augment::imagenet()` torchvision's ImageNet one (random-resized crop, random flip).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Augment {
    /// Load each image as a random-resized crop of the whole source image (the loader asks the
    /// data set, through `Dataset::load_random_crop`); the rest applies to the crop.
    pub random_resized_crop: Option<RandomResizedCrop>,
    /// Pad with zeros by this many pixels on each side, then take a random window of the original size.
    pub random_crop_padding: usize,
    /// Mirror left-right with probability one half.
    pub horizontal_flip: bool,
}

impl Augment {
    /// 4 pixels of zero padding, a random window of the original size, a random flip.
    pub fn cifar() -> Self {
        Self { random_resized_crop: None, random_crop_padding: 4, horizontal_flip: true }
    }

    /// torchvision's `RandomResizedCrop(size)` (scale 0.08-1, ratio 3/4-4/3) and `RandomHorizontalFlip()`.
    pub fn imagenet() -> Self {
        Self { random_resized_crop: Some(RandomResizedCrop::default()), random_crop_padding: 0, horizontal_flip: true }
    }

    /// Whether it changes nothing (the loader then skips it).
    pub fn is_identity(&self) -> bool {
        self.random_resized_crop.is_none() && self.random_crop_padding == 0 && !self.horizontal_flip
    }

    /// Augments `image` (u8, `shape` = [height, width, channels]) in place: the padded crop and the
    /// flip (the random-resized crop happens when the image is loaded).
    pub fn apply<R: Rng + ?Sized>(&self, image: &mut [u8], shape: [usize; 3], rng: &mut R) -> Result<()> {
        let [h, w, c] = shape;
        if image.len() != h * w * c {
            crate::bail!(Shape, "augment: image of {} bytes for shape {shape:?}", image.len());
        }
        let p = self.random_crop_padding;
        if p > 0 {
            let dy = rng.random_range(0..=2 * p);
            let dx = rng.random_range(0..=2 * p);
            // (dy, dx) = (p, p) is the identity window.
            if (dy, dx) != (p, p) {
                crop(image, [h, w, c], dy as isize - p as isize, dx as isize - p as isize);
            }
        }
        if self.horizontal_flip && rng.random_bool(0.5) {
            flip(image, [h, w, c]);
        }
        Ok(())
    }
}

/// Output pixel (y, x) takes input pixel (y + oy, x + ox), or zero where that falls outside.
fn crop(image: &mut [u8], [h, w, c]: [usize; 3], oy: isize, ox: isize) {
    let src = image.to_vec();
    image.fill(0);
    let row = w * c;
    // Columns of the output that map inside the input.
    let x_lo = (-ox).clamp(0, w as isize) as usize;
    let x_hi = (w as isize - ox).clamp(0, w as isize) as usize;
    if x_lo >= x_hi {
        return;
    }
    for y in 0..h {
        let sy = y as isize + oy;
        if sy < 0 || sy >= h as isize {
            continue;
        }
        let sx = (x_lo as isize + ox) as usize;
        let dst = &mut image[y * row + x_lo * c..y * row + x_hi * c];
        dst.copy_from_slice(&src[sy as usize * row + sx * c..][..(x_hi - x_lo) * c]);
    }
}

fn flip(image: &mut [u8], [_, w, c]: [usize; 3]) {
    for row in image.chunks_exact_mut(w * c) {
        for x in 0..w / 2 {
            let (a, b) = (x * c, (w - 1 - x) * c);
            for k in 0..c {
                row.swap(a + k, b + k);
            }
        }
    }
}
