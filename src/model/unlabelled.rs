//! What `predict` reads besides a labelled data set: a flat folder of new photos
//! (`convoy predict --data images:DIR`) and raw u8 images already in memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::data::{Dataset, ImageFolder, InMemory};
use crate::model::Sequential;
use crate::{Error, Result};

/// The JPEG and PNG files directly in a folder (hidden files, other files and
/// sub-directories left out), sorted by name, each decoded as an image folder's validation
/// images are: resized so the short side is `image_size`, then centre-cropped, so a model
/// sees new photos as it saw its validation data. Every sample's label is 0.
///
/// The decoding is [`ImageFolder`]'s own, reached through a view: a temporary directory
/// whose one class is a symbolic link to the folder (unix only), removed when this is
/// dropped. Error messages name the folder's files, not the view's.
pub struct UnlabelledFolder {
    dir: PathBuf,
    view: View,
    images: ImageFolder,
}

/// The temporary `ROOT/images/DIR-link` that makes a flat folder the one class of an
/// [`ImageFolder`].
struct View {
    root: PathBuf,
    link: PathBuf,
}

impl Drop for View {
    // The link first, on its own: nothing may follow it into the user's folder.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
        let _ = std::fs::remove_dir(self.link.parent().unwrap_or(&self.root));
        let _ = std::fs::remove_dir(&self.root);
    }
}

impl UnlabelledFolder {
    /// Lists the images of `dir` (decoding none yet) for a model taking `image_size` px.
    pub fn open(dir: impl AsRef<Path>, image_size: usize) -> Result<UnlabelledFolder> {
        let dir = dir.as_ref().to_path_buf();
        let absolute = std::fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?;
        if !absolute.is_dir() {
            return Err(Error::io(&dir, std::io::Error::new(std::io::ErrorKind::NotADirectory, "expected a folder of .jpg or .png images")));
        }
        static VIEWS: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!("convoy-images-{}-{}", std::process::id(), VIEWS.fetch_add(1, Ordering::Relaxed)));
        let view = View { link: root.join("images").join("unlabelled"), root };
        std::fs::create_dir_all(view.link.parent().unwrap_or(&view.root)).map_err(|e| Error::io(&view.root, e))?;
        link(&absolute, &view.link).map_err(|e| Error::io(&dir, e))?;
        let images = match ImageFolder::open(&view.root, "images", image_size) {
            Ok(images) => images,
            // The view's one class holds nothing: say so of the folder.
            Err(Error::Format { path, .. }) if path == view.root.join("images") => {
                return Err(Error::format(&dir, "no .jpg, .jpeg or .png images in the folder (sub-folders are not read)"));
            }
            Err(e) => return Err(unview(e, &view.link, &dir)),
        };
        Ok(UnlabelledFolder { dir, view, images })
    }

    /// The file of sample `i`, under the folder as it was given.
    pub fn file(&self, i: usize) -> PathBuf {
        self.dir.join(self.images.path(i).file_name().unwrap_or_default())
    }
}

/// `e` with the view's paths turned back into the folder's.
fn unview(e: Error, link: &Path, dir: &Path) -> Error {
    let mapped = |p: &Path| p.strip_prefix(link).map(|rest| dir.join(rest)).unwrap_or_else(|_| p.to_path_buf());
    match e {
        Error::Io { path, source } => Error::Io { path: mapped(&path), source },
        Error::Format { path, msg } => Error::Format { path: mapped(&path), msg },
        other => other,
    }
}

#[cfg(unix)]
fn link(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(not(unix))]
fn link(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "a folder of unlabelled images is read through a symbolic link, which needs unix"))
}

impl Dataset for UnlabelledFolder {
    fn len(&self) -> usize {
        self.images.len()
    }
    fn image_shape(&self) -> [usize; 3] {
        self.images.image_shape()
    }
    fn num_classes(&self) -> usize {
        1
    }
    fn class_names(&self) -> Vec<String> {
        Vec::new()
    }
    fn source(&self) -> String {
        self.dir.display().to_string()
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        self.images.load(i, out).map_err(|e| unview(e, &self.view.link, &self.dir))?;
        Ok(0)
    }
}

impl Sequential {
    /// Class probabilities for raw images: u8 `[n, height, width, channels]` back to back at
    /// the model's input shape (Keras' `predict` on an array), in batches of `batch_size`.
    pub fn predict_images(&mut self, images: &[u8], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let shape: [usize; 3] = self.input_shape().try_into().map_err(|_| Error::Shape(format!("the model input {:?} is not (height, width, channels)", self.input_shape())))?;
        let sample = shape.iter().product::<usize>();
        if images.is_empty() || !images.len().is_multiple_of(sample) {
            crate::bail!(Shape, "predict_images: {} bytes are not a whole number of {shape:?} images ({sample} bytes each)", images.len());
        }
        let n = images.len() / sample;
        let data = InMemory::new(images.to_vec(), vec![0; n], shape, vec![String::new()], "predict_images")?;
        self.predict(Arc::new(data), batch_size)
    }
}
