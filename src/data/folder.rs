//! ImageNet-style folders: `DIR/<split>/<class>/*.{jpg,jpeg,png}`, decoded lazily on each `load`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rand::Rng;

use super::crop::{RandomResizedCrop, centre_window};
use super::decode::{decode_window, require_decoder};
use super::{Dataset, check_load};
use crate::{Error, Result};

const LAYOUT: &str = "expected DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg, JPEG or PNG";

/// One split of an image folder. Classes are the sub-directories sorted by name (label = position);
/// images within a class are sorted by file name. Each image is converted to RGB, resized so its
/// short side is the resize size (bilinear; `image_size` unless [`ImageFolder::with_resize_size`]
/// says otherwise), then centre-cropped to `image_size` x `image_size`; a training load with a
/// random-resized crop resamples the crop's window of the whole image instead. JPEGs are decoded
/// at a reduced DCT scale where the window allows (see `decode.rs`).
#[derive(Clone, Debug)]
pub struct ImageFolder {
    root: PathBuf,
    classes: Vec<String>,
    samples: Vec<(PathBuf, u32)>,
    image_size: usize,
    resize_size: usize,
}

impl ImageFolder {
    /// Lists `dir/<split>` (`split` is "train" or "val"); decodes nothing yet.
    pub fn open(dir: impl AsRef<Path>, split: &str, image_size: usize) -> Result<Self> {
        let dir = dir.as_ref();
        require_decoder(dir)?;
        check_image_size(dir, image_size)?;
        let root = dir.join(split);
        for d in [dir, root.as_path()] {
            if !d.is_dir() {
                let msg = format!("image folder directory not found ({LAYOUT})");
                return Err(Error::io(d, std::io::Error::new(ErrorKind::NotFound, msg)));
            }
        }
        let classes: Vec<String> = sorted_entries(&root)?
            .into_iter()
            .filter(|(_, is_dir)| *is_dir)
            .map(|(p, _)| p.file_name().unwrap_or_default().to_string_lossy().into_owned())
            .collect();
        if classes.is_empty() {
            return Err(Error::format(&root, format!("no class directories ({LAYOUT})")));
        }
        let mut samples = Vec::new();
        for (label, class) in classes.iter().enumerate() {
            let files = sorted_entries(&root.join(class))?;
            samples
                .extend(files.into_iter().filter(|(p, is_dir)| !is_dir && is_image(p)).map(|(p, _)| (p, label as u32)));
        }
        if samples.is_empty() {
            let msg = format!("no .jpg, .jpeg or .png files in its {} class directories", classes.len());
            return Err(Error::format(&root, msg));
        }
        Ok(Self { root, classes, samples, image_size, resize_size: image_size })
    }

    /// The JPEG and PNG files directly in `dir` (no class directories; sub-directories and
    /// hidden files left out), sorted by name, as one class without a name: new photos for
    /// `predict`, decoded as a split's validation images are.
    pub fn flat(dir: impl AsRef<Path>, image_size: usize) -> Result<Self> {
        let dir = dir.as_ref();
        require_decoder(dir)?;
        check_image_size(dir, image_size)?;
        if !dir.is_dir() {
            return Err(Error::io(dir, std::io::Error::new(ErrorKind::NotADirectory, "expected a folder of .jpg or .png images")));
        }
        let samples: Vec<(PathBuf, u32)> =
            sorted_entries(dir)?.into_iter().filter(|(p, is_dir)| !is_dir && is_image(p)).map(|(p, _)| (p, 0)).collect();
        if samples.is_empty() {
            return Err(Error::format(dir, "no .jpg, .jpeg or .png images in the folder (sub-folders are not read)"));
        }
        Ok(Self { root: dir.to_path_buf(), classes: vec![String::new()], samples, image_size, resize_size: image_size })
    }

    /// Resize the short side to `resize_size` (at least the image size) before the centre crop,
    /// as torchvision's `Resize(256)` before `CenterCrop(224)`; see [`super::resize_size`].
    pub fn with_resize_size(mut self, resize_size: usize) -> Result<Self> {
        check_resize_size(&self.root, self.image_size, resize_size)?;
        self.resize_size = resize_size;
        Ok(self)
    }

    /// The `train` and `val` splits of `dir`, which must have the same class names.
    pub fn open_splits(dir: impl AsRef<Path>, image_size: usize) -> Result<(Self, Self)> {
        let train = Self::open(dir.as_ref(), "train", image_size)?;
        let val = Self::open(dir.as_ref(), "val", image_size)?;
        if val.classes != train.classes {
            let missing: Vec<&str> =
                train.classes.iter().filter(|c| !val.classes.contains(c)).map(String::as_str).collect();
            let extra: Vec<&str> =
                val.classes.iter().filter(|c| !train.classes.contains(c)).map(String::as_str).collect();
            let msg = format!(
                "class directories differ from train's ({} in train, {} here; missing here: {}; not in train: {})",
                train.classes.len(),
                val.classes.len(),
                preview(&missing),
                preview(&extra)
            );
            return Err(Error::format(&val.root, msg));
        }
        Ok((train, val))
    }

    /// The file of sample `i`.
    pub fn path(&self, i: usize) -> &Path {
        &self.samples[i].0
    }

    /// The label of sample `i`, without decoding it.
    pub fn label(&self, i: usize) -> u32 {
        self.samples[i].1
    }
}

impl Dataset for ImageFolder {
    fn len(&self) -> usize {
        self.samples.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        [self.image_size, self.image_size, 3]
    }
    fn num_classes(&self) -> usize {
        self.classes.len()
    }
    fn class_names(&self) -> Vec<String> {
        self.classes.clone()
    }
    fn source(&self) -> String {
        self.root.display().to_string()
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        check_load(self, i, out)?;
        let (path, label) = &self.samples[i];
        decode_window(path, self.image_size, out, |w, h| centre_window(w, h, self.resize_size, self.image_size))?;
        Ok(*label)
    }
    fn load_random_crop(&self, i: usize, out: &mut [u8], crop: &RandomResizedCrop, rng: &mut dyn Rng) -> Result<u32> {
        check_load(self, i, out)?;
        let (path, label) = &self.samples[i];
        decode_window(path, self.image_size, out, |w, h| crop.window(w, h, rng))?;
        Ok(*label)
    }
}

/// Refuses an image size of 0 or past the caps; the size often comes from a model file
/// (`evaluate` resizes to the model's input), so the error names the folder.
fn check_image_size(dir: &Path, image_size: usize) -> Result<()> {
    if image_size == 0 {
        crate::bail!(Config, "image size must be positive for the image folder {}", dir.display());
    }
    let at = |e: Error| Error::Config(format!("image folder {}: {e}", dir.display()));
    crate::limits::at_most("image size", image_size, crate::limits::MAX_SIDE).map_err(at)?;
    crate::limits::product("sample shape", &[image_size, image_size, 3], crate::limits::MAX_SAMPLE_BYTES).map_err(at)?;
    Ok(())
}

/// Holds a resize size to the image size (below it the centre crop would not fit) and to
/// [`crate::limits::MAX_SIDE`]; `source` names the data in the error.
pub(crate) fn check_resize_size(source: &Path, image_size: usize, resize_size: usize) -> Result<()> {
    if resize_size < image_size || resize_size > crate::limits::MAX_SIDE {
        let msg = format!("resize size {resize_size} must be between the image size {image_size} and {}", crate::limits::MAX_SIDE);
        return Err(Error::Config(format!("{}: {msg}", source.display())));
    }
    Ok(())
}

/// Entries of `dir` sorted by name, with whether each is a directory; hidden ones (".DS_Store",
/// ".git") left out. Only symbolic links cost an extra `stat`: ImageNet has 1.3 M files.
fn sorted_entries(dir: &Path) -> Result<Vec<(PathBuf, bool)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        let is_dir = if kind.is_symlink() { entry.path().is_dir() } else { kind.is_dir() };
        entries.push((entry.path(), is_dir));
    }
    entries.sort();
    Ok(entries)
}

fn is_image(path: &Path) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    matches!(ext.as_deref(), Some("jpg" | "jpeg" | "png"))
}

/// At most five names, then a count, so a 1000-class mismatch stays one readable line.
fn preview(names: &[&str]) -> String {
    match names.len() {
        0 => "none".into(),
        n if n <= 5 => names.join(", "),
        n => format!("{}, ... ({} more)", names[..5].join(", "), n - 5),
    }
}
