//! The CIFAR-10 and CIFAR-100 binary formats: fixed-size records of label bytes then a 32x32 image
//! stored as three planes (R, G, B), which we turn into HWC.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::InMemory;
use crate::limits::MAX_CIFAR_FILE_BYTES;
use crate::{Error, Result};

/// Where the CIFAR-10 binary version is downloaded from (the Toronto page's archive).
pub const CIFAR10_URL: &str = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
/// Where the CIFAR-100 binary version is downloaded from (the Toronto page's archive).
pub const CIFAR100_URL: &str = "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz";

const SIDE: usize = 32;
const PIXELS: usize = SIDE * SIDE;
const IMAGE: usize = PIXELS * 3;

const CIFAR10_CLASSES: [&str; 10] =
    ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"];

// The fine labels of CIFAR-100, in label order (alphabetical, as in fine_label_names.txt).
#[rustfmt::skip]
const CIFAR100_CLASSES: [&str; 100] = [
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
    "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
    "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup",
    "dinosaur", "dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house",
    "kangaroo", "keyboard", "lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man",
    "maple_tree", "motorcycle", "mountain", "mouse", "mushroom", "oak_tree", "orange", "orchid",
    "otter", "palm_tree", "pear", "pickup_truck", "pine_tree", "plain", "plate", "poppy",
    "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket", "rose", "sea", "seal",
    "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider", "squirrel", "streetcar",
    "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger", "tractor",
    "train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
];

/// One binary layout: how many label bytes lead each record, which of them is the label, where the
/// files come from (for messages).
struct Format {
    name: &'static str,
    label_bytes: usize,
    label_at: usize,
    classes: &'static [&'static str],
    url: &'static str,
}

const CIFAR10: Format =
    Format { name: "CIFAR-10", label_bytes: 1, label_at: 0, classes: &CIFAR10_CLASSES, url: CIFAR10_URL };
// Records carry (coarse, fine); we train on the 100 fine labels.
const CIFAR100: Format =
    Format { name: "CIFAR-100", label_bytes: 2, label_at: 1, classes: &CIFAR100_CLASSES, url: CIFAR100_URL };

/// Reads `data_batch_1.bin` .. `data_batch_5.bin` (training) and `test_batch.bin` (validation).
pub fn cifar10(dir: impl AsRef<Path>) -> Result<(InMemory, InMemory)> {
    let train: Vec<String> = (1..=5).map(|i| format!("data_batch_{i}.bin")).collect();
    let train: Vec<&str> = train.iter().map(String::as_str).collect();
    read_split(dir.as_ref(), &CIFAR10, &train, "test_batch.bin")
}

/// Reads `train.bin` and `test.bin` (validation), with the 100 fine labels.
pub fn cifar100(dir: impl AsRef<Path>) -> Result<(InMemory, InMemory)> {
    read_split(dir.as_ref(), &CIFAR100, &["train.bin"], "test.bin")
}

fn read_split(dir: &Path, fmt: &Format, train: &[&str], val: &str) -> Result<(InMemory, InMemory)> {
    if !dir.is_dir() {
        return Err(Error::io(
            dir,
            std::io::Error::new(
                ErrorKind::NotFound,
                format!(
                    "{} directory not found (expected {} and {val}; the binary version is at {})",
                    fmt.name,
                    train.join(", "),
                    fmt.url
                ),
            ),
        ));
    }
    let train_files: Vec<PathBuf> = train.iter().map(|f| dir.join(f)).collect();
    let val_file = dir.join(val);
    // Check every file exists before reading 180 MB, so a missing one is reported at once.
    for path in train_files.iter().chain([&val_file]) {
        if !path.is_file() {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    ErrorKind::NotFound,
                    format!("{} file not found (get the binary version at {})", fmt.name, fmt.url),
                ),
            ));
        }
    }
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    for path in &train_files {
        read_file(path, fmt, &mut images, &mut labels)?;
    }
    let train_set = dataset(images, labels, fmt, dir)?;
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    read_file(&val_file, fmt, &mut images, &mut labels)?;
    Ok((train_set, dataset(images, labels, fmt, &val_file)?))
}

fn dataset(images: Vec<u8>, labels: Vec<u32>, fmt: &Format, source: &Path) -> Result<InMemory> {
    let names = fmt.classes.iter().map(|s| s.to_string()).collect();
    InMemory::new(images, labels, [SIDE, SIDE, 3], names, source.display().to_string())
}

/// Decodes one CIFAR-10 binary file already in memory (`data_batch_1.bin`'s content);
/// `source` names it in errors.
pub fn cifar10_from_bytes(bytes: &[u8], source: &Path) -> Result<InMemory> {
    from_bytes(bytes, &CIFAR10, source)
}

/// Decodes one CIFAR-100 binary file already in memory (`train.bin`'s content), with the
/// 100 fine labels; `source` names it in errors.
pub fn cifar100_from_bytes(bytes: &[u8], source: &Path) -> Result<InMemory> {
    from_bytes(bytes, &CIFAR100, source)
}

fn from_bytes(bytes: &[u8], fmt: &Format, source: &Path) -> Result<InMemory> {
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    parse(bytes, source, fmt, &mut images, &mut labels)?;
    dataset(images, labels, fmt, source)
}

/// Appends the records of one file, converted to HWC, to `images` and `labels`. The file's
/// size is checked against [`MAX_CIFAR_FILE_BYTES`] before it is read.
fn read_file(path: &Path, fmt: &Format, images: &mut Vec<u8>, labels: &mut Vec<u32>) -> Result<()> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    if len > MAX_CIFAR_FILE_BYTES {
        return Err(Error::format(
            path,
            format!("size {len} bytes is above the cap of {MAX_CIFAR_FILE_BYTES} for a {} binary file", fmt.name),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse(&bytes, path, fmt, images, labels)
}

/// [`read_file`] of the file's content.
fn parse(bytes: &[u8], path: &Path, fmt: &Format, images: &mut Vec<u8>, labels: &mut Vec<u32>) -> Result<()> {
    let record = fmt.label_bytes + IMAGE;
    if bytes.is_empty() || !bytes.len().is_multiple_of(record) {
        return Err(Error::format(
            path,
            format!(
                "size {} bytes is not a positive multiple of the {} record size {record} bytes \
                 (truncated, or not a {} binary file)",
                bytes.len(),
                fmt.name,
                fmt.name
            ),
        ));
    }
    let count = bytes.len() / record;
    let first_label = labels.len();
    labels.extend(bytes.chunks_exact(record).map(|r| r[fmt.label_at] as u32));
    if let Some((i, &label)) = labels[first_label..].iter().enumerate().find(|&(_, &l)| l as usize >= fmt.classes.len())
    {
        return Err(Error::format(
            path,
            format!("label {label} of record {i} is out of range for {} classes", fmt.classes.len()),
        ));
    }
    let start = images.len();
    // count * IMAGE is less than the file's size, which is in memory already.
    images.try_reserve_exact(count * IMAGE).map_err(|e| Error::format(path, format!("cannot allocate {count} images: {e}")))?;
    images.resize(start + count * IMAGE, 0);
    images[start..].par_chunks_mut(IMAGE).zip(bytes.par_chunks_exact(record)).for_each(|(hwc, rec)| {
        let chw = &rec[fmt.label_bytes..];
        for p in 0..PIXELS {
            for c in 0..3 {
                hwc[p * 3 + c] = chw[c * PIXELS + p];
            }
        }
    });
    Ok(())
}
