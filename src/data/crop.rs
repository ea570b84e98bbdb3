//! Where a sample's pixels come from in its source image: torchvision's random-resized crop
//! for training, and the window that resize-shorter-side + centre-crop sees for validation.
//!
//! Both give a [`Window`] in the source image's pixel coordinates that is then resampled to
//! the sample's size in one pass, so that the decoder (at a reduced DCT scale) and the
//! resizer only ever touch the pixels the sample needs.

use rand::{Rng, RngExt};

/// Image sides from which the ImageNet recipe applies (see [`resize_size`]): below, images
/// are CIFAR-like thumbnails that a random-resized crop of 8% would shrink to a few pixels.
pub const IMAGENET_MIN_SIZE: usize = 96;

/// A rectangle of a source image in pixel coordinates; fractional where it was mapped back
/// from a resized image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Column of the left edge.
    pub left: f64,
    /// Row of the top edge.
    pub top: f64,
    /// Columns covered.
    pub width: f64,
    /// Rows covered.
    pub height: f64,
}

impl Window {
    /// The whole of a `width` x `height` image.
    pub fn full(width: usize, height: usize) -> Self {
        Window { left: 0.0, top: 0.0, width: width as f64, height: height as f64 }
    }

    /// The shorter side, which decides how far the source may be shrunk before resampling.
    pub fn short_side(&self) -> f64 {
        self.width.min(self.height)
    }

    /// The same window in an image scaled by (`sx`, `sy`) (a decode at a reduced DCT scale).
    pub fn scaled(&self, sx: f64, sy: f64) -> Self {
        Window { left: self.left * sx, top: self.top * sy, width: self.width * sx, height: self.height * sy }
    }
}

/// torchvision's `RandomResizedCrop`: a window of `scale` times the image's area with an aspect
/// ratio (width / height) drawn log-uniformly from `ratio`, placed uniformly; after ten draws
/// that do not fit, the centre crop of the largest window within `ratio`. The loader resamples
/// the window to the sample's size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomResizedCrop {
    /// Fraction of the image's area, (low, high): torchvision's default (0.08, 1.0).
    pub scale: (f64, f64),
    /// Width / height, (low, high), drawn on a log scale: torchvision's default (3/4, 4/3).
    pub ratio: (f64, f64),
}

impl Default for RandomResizedCrop {
    fn default() -> Self {
        RandomResizedCrop { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) }
    }
}

impl RandomResizedCrop {
    /// Draws the window for a `width` x `height` image (torchvision's `get_params`, draw for draw).
    pub fn window<R: Rng + ?Sized>(&self, width: usize, height: usize, rng: &mut R) -> Window {
        let area = (width * height) as f64;
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * uniform(rng, self.scale.0, self.scale.1);
            let aspect = uniform(rng, log_lo, log_hi).exp();
            let w = (target * aspect).sqrt().round() as usize;
            let h = (target / aspect).sqrt().round() as usize;
            if 0 < w && w <= width && 0 < h && h <= height {
                let top = rng.random_range(0..=height - h);
                let left = rng.random_range(0..=width - w);
                return Window { left: left as f64, top: top as f64, width: w as f64, height: h as f64 };
            }
        }
        self.fallback(width, height)
    }

    /// The centre crop that torchvision takes when ten draws miss: the whole image, trimmed to
    /// the nearest aspect ratio inside `ratio`.
    pub fn fallback(&self, width: usize, height: usize) -> Window {
        let in_ratio = width as f64 / height as f64;
        let (w, h) = if in_ratio < self.ratio.0 {
            (width, ((width as f64 / self.ratio.0).round() as usize).clamp(1, height))
        } else if in_ratio > self.ratio.1 {
            (((height as f64 * self.ratio.1).round() as usize).clamp(1, width), height)
        } else {
            (width, height)
        };
        Window { left: ((width - w) / 2) as f64, top: ((height - h) / 2) as f64, width: w as f64, height: h as f64 }
    }

    /// Refuses bounds that torchvision would (an empty or inverted range, a non-positive ratio).
    pub fn validate(&self) -> crate::Result<()> {
        let (s, r) = (self.scale, self.ratio);
        if !(0.0 < s.0 && s.0 <= s.1 && s.1 <= 1.0 && 0.0 < r.0 && r.0 <= r.1 && r.1.is_finite()) {
            crate::bail!(Config, "random-resized crop needs 0 < scale.0 <= scale.1 <= 1 and 0 < ratio.0 <= ratio.1, got scale {s:?}, ratio {r:?}");
        }
        Ok(())
    }
}

/// A draw in [lo, hi), and lo itself where the range is empty (torch's `uniform_` does the same).
fn uniform<R: Rng + ?Sized>(rng: &mut R, lo: f64, hi: f64) -> f64 {
    if hi > lo { rng.random_range(lo..hi) } else { lo }
}

/// The short side an image is resized to before the centre crop of `image_size`: from
/// [`IMAGENET_MIN_SIZE`] torchvision's ImageNet evaluation (256 then 224), scaled to other sizes
/// as timm does, `floor(image_size / 0.875)` (160 -> 182, 224 -> 256); below, the image size
/// itself, so that the crop keeps the whole short side (CIFAR-like folders).
pub fn resize_size(image_size: usize) -> usize {
    if image_size >= IMAGENET_MIN_SIZE { image_size * 256 / 224 } else { image_size }
}

/// The window of a `width` x `height` image that torchvision's `Resize(resize)` (short side to
/// `resize`) followed by `CenterCrop(crop)` keeps, in the source's coordinates; `resize >= crop`.
/// The long side is rounded to the nearest pixel, and the crop's offset rounded down.
pub fn centre_window(width: usize, height: usize, resize: usize, crop: usize) -> Window {
    let (nw, nh) = resized_dims(width, height, resize);
    let (sx, sy) = (width as f64 / nw as f64, height as f64 / nh as f64);
    let (left, top) = ((nw - crop.min(nw)) / 2, (nh - crop.min(nh)) / 2);
    Window { left: left as f64 * sx, top: top as f64 * sy, width: crop as f64 * sx, height: crop as f64 * sy }
}

/// `width` x `height` with the short side resized to `short` and the long side in proportion
/// (rounded, at least `short`).
pub fn resized_dims(width: usize, height: usize, short: usize) -> (usize, usize) {
    let (w, h) = (width.max(1), height.max(1));
    let (nw, nh) = if w <= h { (short, (h * short + w / 2) / w) } else { ((w * short + h / 2) / h, short) };
    (nw.max(short), nh.max(short))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_size_follows_the_imagenet_ratio_from_96_px() {
        assert_eq!([32, 95, 96, 128, 160, 224, 256].map(resize_size), [32, 95, 109, 146, 182, 256, 292]);
    }

    #[test]
    fn centre_window_maps_the_crop_back_to_the_source() {
        // 500x375 -> Resize(256) = 341x256 -> CenterCrop(224) at (58, 16).
        let w = centre_window(500, 375, 256, 224);
        let s = 375.0 / 256.0;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(w.height, 224.0 * s) && close(w.top, 16.0 * s), "{w:?}");
        assert!(close(w.width, 224.0 * 500.0 / 341.0) && close(w.left, 58.0 * 500.0 / 341.0), "{w:?}");
        // Without the ImageNet ratio the crop keeps the whole short side.
        assert_eq!(centre_window(12, 6, 6, 6), Window { left: 3.0, top: 0.0, width: 6.0, height: 6.0 });
    }
}
