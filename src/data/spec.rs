//! The `--data SPEC` argument of the command line.

use std::sync::Arc;

use super::{Augment, Dataset, IMAGENET_MIN_SIZE, ImageFolder, cifar10, cifar100, packed, resize_size, synthetic_split};
use crate::Result;

/// The forms `from_spec` accepts, for help texts and error messages.
pub const SPEC_FORMS: &str =
    "synthetic, synthetic:TRAIN[,VAL] (sample counts), cifar10:DIR, cifar100:DIR, folder:DIR, packed:FILE (from convoy pack)";

const SYNTHETIC_TRAIN: usize = 20_000;
const SYNTHETIC_VAL: usize = 2_000;
const DEFAULT_IMAGE_SIZE: usize = 32;

/// Opens the (training, validation) pair that `spec` names. `image_size` applies to `synthetic`,
/// `folder` (default 32) and `packed` (default: the size it was packed at); CIFAR images are 32x32
/// only. Folder and packed images are resized to [`resize_size`] of the image size, then
/// centre-cropped (the random-resized crop of training is the loader's: see [`augment_for`]).
/// `seed` draws the synthetic images.
pub fn from_spec(spec: &str, image_size: Option<usize>, seed: u64) -> Result<(Arc<dyn Dataset>, Arc<dyn Dataset>)> {
    if image_size == Some(0) {
        crate::bail!(Config, "image size must be positive, got 0");
    }
    let (kind, arg) = match spec.split_once(':') {
        Some((kind, arg)) => (kind, Some(arg)),
        None => (spec, None),
    };
    let size = image_size.unwrap_or(DEFAULT_IMAGE_SIZE);
    let dir = |arg: Option<&str>| match arg {
        Some(d) if !d.is_empty() => Ok(d.to_string()),
        _ => Err(crate::Error::Config(format!("data spec '{spec}' needs a directory: {kind}:DIR"))),
    };
    let cifar_size = || match image_size {
        Some(s) if s != 32 => Err(crate::Error::Config(format!(
            "{kind} images are 32x32; --image-size {s} is not supported for '{spec}'"
        ))),
        _ => Ok(()),
    };
    match kind {
        "synthetic" => {
            let (train, val) = synthetic_counts(spec, arg)?;
            let (train, val) = synthetic_split(train, val, size, seed)?;
            Ok((Arc::new(train), Arc::new(val)))
        }
        "cifar10" => {
            let dir = dir(arg)?;
            cifar_size()?;
            let (train, val) = cifar10(dir)?;
            Ok((Arc::new(train), Arc::new(val)))
        }
        "cifar100" => {
            let dir = dir(arg)?;
            cifar_size()?;
            let (train, val) = cifar100(dir)?;
            Ok((Arc::new(train), Arc::new(val)))
        }
        "folder" => {
            let (train, val) = ImageFolder::open_splits(dir(arg)?, size)?;
            let resize = resize_size(size);
            Ok((Arc::new(train.with_resize_size(resize)?), Arc::new(val.with_resize_size(resize)?)))
        }
        "packed" => {
            let file = arg.filter(|f| !f.is_empty()).ok_or_else(|| {
                crate::Error::Config(format!("data spec '{spec}' needs a file: packed:FILE (written by convoy pack)"))
            })?;
            let (train, val) = packed(file, image_size)?;
            Ok((Arc::new(train), Arc::new(val)))
        }
        _ => crate::bail!(Config, "unknown data spec '{spec}'; expected one of: {SPEC_FORMS}"),
    }
}

/// The training augmentation `convoy train` uses for `spec` at `image_size`: torchvision's ImageNet
/// recipe ([`Augment::imagenet`]) for image files (`folder`, `packed`) from [`IMAGENET_MIN_SIZE`]
/// px, where validation is resized to [`resize_size`] too; otherwise the light augmentation
/// `convoy train` has always used (a 2-pixel padded crop, no flip), which at 32 px keeps more of
/// each image than a random-resized crop would.
/// By size rather than by model, so that `evaluate` and `predict`, which may not know how a
/// model was trained, resize validation images the same way.
pub fn augment_for(spec: &str, image_size: usize) -> Augment {
    let files = matches!(spec.split_once(':'), Some(("folder" | "packed", _)));
    if files && image_size >= IMAGENET_MIN_SIZE {
        Augment::imagenet()
    } else {
        Augment { random_crop_padding: 2, ..Default::default() }
    }
}

/// `None` -> the defaults; `Some("N")` -> N training samples, `Some("N,M")` -> N and M.
fn synthetic_counts(spec: &str, arg: Option<&str>) -> Result<(usize, usize)> {
    let Some(arg) = arg else { return Ok((SYNTHETIC_TRAIN, SYNTHETIC_VAL)) };
    let parse = |s: &str| s.trim().parse::<usize>().ok().filter(|&n| n > 0);
    let counts = match arg.split_once(',') {
        None => parse(arg).map(|t| (t, SYNTHETIC_VAL)),
        Some((t, v)) => parse(t).zip(parse(v)),
    };
    counts.ok_or_else(|| {
        crate::Error::Config(format!(
            "data spec '{spec}': expected synthetic:TRAIN or synthetic:TRAIN,VAL with positive sample counts"
        ))
    })
}
