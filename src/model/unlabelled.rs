//! What `predict` reads besides a labelled data set: a flat folder of new photos
//! (`convoy predict --data images:DIR`) and raw u8 images already in memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::data::{Dataset, ImageFolder, InMemory};
use crate::model::Sequential;
use crate::{Error, Result};

/// The JPEG and PNG files directly in a folder (hidden files, other files and
/// sub-directories left out), sorted by name, each decoded as an image folder's validation
/// images are: resized so the short side is `image_size`, then centre-cropped, so a model
/// sees new photos as it saw its validation data. Every sample's label is 0.
pub struct UnlabelledFolder {
    dir: PathBuf,
    images: ImageFolder,
}

impl UnlabelledFolder {
    /// Lists the images of `dir` (decoding none yet) for a model taking `image_size` px.
    pub fn open(dir: impl AsRef<Path>, image_size: usize) -> Result<UnlabelledFolder> {
        let dir = dir.as_ref().to_path_buf();
        // Resized to 256 before the 224 crop from 96 px, as validation images are (it read
        // them at the crop size before: a model saw new photos framed tighter than its data).
        let images = ImageFolder::flat(&dir, image_size)?.with_resize_size(crate::data::resize_size(image_size))?;
        Ok(UnlabelledFolder { dir, images })
    }

    /// The file of sample `i`.
    pub fn file(&self, i: usize) -> PathBuf {
        self.images.path(i).to_path_buf()
    }
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
        self.images.load(i, out)?;
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
