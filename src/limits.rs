//! Caps on every size that a file, a model or a command line declares.
//!
//! A model file or a data file states sizes (input dimensions, units, filters, kernel sides,
//! tensor shapes, record counts) that the program then allocates from. Unchecked, a Dense
//! `units` of 1e12 asks for 12 PB and aborts the process, and 1e30 overflows. Every declared
//! size is therefore multiplied with checked arithmetic and compared with one of these caps
//! before anything is allocated from it, and the error names the field, the value and the
//! cap. Each cap is far above any real model or data set, so that only a corrupt or hostile
//! file meets it.

use crate::{Error, Result};

/// Trainable parameters of a model, and floats of its moving statistics: 2^31 (8 GiB of
/// f32, about 80 times ResNet-152). The flat tensors also have to fit one GPU binding.
pub const MAX_PARAMS: usize = 1 << 31;

/// Height and width of an input image, and every kernel, stride, pool and padding side:
/// 65,536 px (a 16-bit side, sixteen times a 4K frame).
pub const MAX_SIDE: usize = 1 << 16;

/// Channels of an input, filters of a convolution and units of a dense layer: 2^24
/// (16,777,216; the widest real layers have tens of thousands).
pub const MAX_UNITS: usize = 1 << 24;

/// Bytes of one decoded u8 sample (height x width x channels): 2^31 (a 26,000 px RGB square;
/// an ImageNet sample at 224 px is 150 KB).
pub const MAX_SAMPLE_BYTES: usize = 1 << 31;

/// Floats of one layer's output for one sample: 2^31 (ResNet-50's largest at 224 px is 800 K).
pub const MAX_ACTIVATION: usize = 1 << 31;

/// Nesting depth of residual blocks in an architecture: 8 (real networks nest one). Shapes
/// of a nested block are walked once per level, so the work grows exponentially with depth.
pub const MAX_NESTING: usize = 8;

/// Bytes of one host batch of decoded samples: 2^34 (16 GiB; a batch of 2,048 ImageNet
/// samples at 224 px is 308 MB).
pub const MAX_BATCH_BYTES: usize = 1 << 34;

/// Bytes of a data set generated in memory (the synthetic task): 2^36 (64 GiB; its default
/// 22,000 samples at 32 px are 68 MB).
pub const MAX_DATASET_BYTES: usize = 1 << 36;

/// Bytes of one CIFAR binary file: 2^31 (the real files are 30 MB and 150 MB).
pub const MAX_CIFAR_FILE_BYTES: u64 = 1 << 31;

/// Bytes of a model file: 2^37 (128 GiB; a model at [`MAX_PARAMS`] with two optimizer slots
/// is 24 GiB).
pub const MAX_MODEL_FILE_BYTES: u64 = 1 << 37;

/// Bytes of an image resized whole to a short side (what `convoy pack` stores, and so the
/// largest image a packed file may declare): 2^31 (a 1 x 60,000 px strip resized to a 1,024 px
/// short side would need 188 GB). Samples resample only their crop's window and need no such
/// image.
pub const MAX_RESIZED_BYTES: usize = 1 << 31;

/// Bytes of one image file read for decoding: 2^30 (1 GiB; a 100-megapixel JPEG is about
/// 50 MB).
pub const MAX_IMAGE_FILE_BYTES: u64 = 1 << 30;

/// Bytes of one decoded RGB image before it is resized: 2^31 (a 26,000 px square; the
/// `image` crate's own default allocation limit is 512 MiB).
pub const MAX_DECODED_BYTES: usize = 1 << 31;

/// Images in a packed data set (train and val together): 2^32 (ImageNet-21k has 14 million).
pub const MAX_PACKED_IMAGES: usize = 1 << 32;

/// Classes in a packed data set, and bytes of one class name: 2^20 each.
pub const MAX_PACKED_CLASSES: usize = 1 << 20;

/// `a * b * ...` with every step checked, compared with `cap`; the error names `what`, the
/// factors and the cap.
pub fn product(what: &str, factors: &[usize], cap: usize) -> Result<usize> {
    let total = factors.iter().try_fold(1usize, |acc, &f| acc.checked_mul(f));
    match total {
        Some(t) if t <= cap => Ok(t),
        Some(t) => Err(Error::Config(format!("{what} {factors:?} is {t}, above the cap of {cap}"))),
        None => Err(Error::Config(format!("{what} {factors:?} overflows (the cap is {cap})"))),
    }
}

/// `value` itself, or an error naming `what`, the value and the cap when it is above `cap`.
pub fn at_most(what: &str, value: usize, cap: usize) -> Result<usize> {
    if value > cap {
        return Err(Error::Config(format!("{what} is {value}, above the cap of {cap}")));
    }
    Ok(value)
}

/// A zeroed vector of `len` elements, or an error naming `what` when the allocator refuses
/// it (rather than the abort of `vec![0; len]`).
pub fn zeroed<T: Clone + Default>(what: &str, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| {
        Error::Config(format!("cannot allocate {what} ({len} x {} bytes): {e}", std::mem::size_of::<T>()))
    })?;
    v.resize(len, T::default());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_checks_overflow_and_cap() {
        assert_eq!(product("x", &[2, 3, 4], 24).unwrap(), 24);
        let e = product("input shape", &[2, 3, 4], 23).unwrap_err().to_string();
        assert!(e.contains("input shape [2, 3, 4] is 24, above the cap of 23"), "{e}");
        let e = product("shape", &[1 << 40, 1 << 40], usize::MAX).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        assert_eq!(product("empty", &[], 1).unwrap(), 1);
    }

    #[test]
    fn zeroed_reports_a_refused_allocation() {
        assert_eq!(zeroed::<f32>("x", 3).unwrap(), vec![0.0; 3]);
        let e = zeroed::<f32>("the parameters", usize::MAX / 2).unwrap_err().to_string();
        assert!(e.contains("cannot allocate the parameters"), "{e}");
    }
}
