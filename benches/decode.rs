//! The input pipeline's speed per core: decode + augment images/s on realistic JPEGs, and
//! the same from a packed file, then the loader on every core.
//!
//! `cargo bench --bench decode [-- IMAGES]`: writes IMAGES (default 64) procedural photos of
//! 500x375 at JPEG quality 90 (about 100 KB each, ImageNet's mean file size) with the `image`
//! crate's encoder, so that nothing is downloaded, then prints one JSON object per case.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use convoy::data::{pack_folder, packed, Augment, Dataset, ImageFolder, Loader, RandomResizedCrop, resize_size};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

/// Smooth gradients and rings with fine-grained noise: the spectrum of a photo rather than of
/// a flat test card, so the encoder's output has a photo's size and the decoder a photo's work.
fn photo(w: u32, h: u32, seed: u32) -> image::RgbImage {
    let s = seed as f32;
    image::RgbImage::from_fn(w, h, |x, y| {
        let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
        let n = ((x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503) ^ seed.wrapping_mul(97)) >> 7) % 23;
        let r = 128.0 + 100.0 * (fx * (17.0 + s) + (fy * 9.0).sin() * 3.0).sin();
        let g = 128.0 + 90.0 * (fy * 23.0 + fx * fy * (30.0 + s)).cos();
        let b = 128.0 + 80.0 * ((fx - 0.5).hypot(fy - 0.5) * (60.0 + s)).sin();
        image::Rgb([(r + n as f32) as u8, (g + n as f32) as u8, (b - n as f32) as u8])
    })
}

/// DIR/{train,val}/photo/*.jpg, `n` images in each split; returns the mean file size.
fn write_photos(dir: &Path, n: u32) -> f64 {
    let mut bytes = 0;
    for split in ["train", "val"] {
        let class = dir.join(split).join("photo");
        std::fs::create_dir_all(&class).unwrap();
        for i in 0..n {
            let mut jpeg = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90).encode_image(&photo(500, 375, i)).unwrap();
            bytes += jpeg.len();
            std::fs::write(class.join(format!("{i:04}.jpg")), jpeg).unwrap();
        }
    }
    bytes as f64 / (2 * n) as f64
}

/// Images/s of `load` on this thread, over at least two passes and one second.
fn per_core(ds: &dyn Dataset, mut load: impl FnMut(usize, &mut [u8], &mut StdRng)) -> f64 {
    let mut out = vec![0u8; ds.sample_bytes()];
    let mut rng = StdRng::seed_from_u64(0);
    (0..ds.len()).for_each(|i| load(i, &mut out, &mut rng)); // warm-up: caches, thread-locals
    let (start, mut done) = (Instant::now(), 0);
    while done < 2 * ds.len() || start.elapsed().as_secs_f64() < 1.0 {
        load(done % ds.len(), &mut out, &mut rng);
        done += 1;
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn main() -> convoy::Result<()> {
    let n: u32 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(64);
    let dir = std::env::temp_dir().join(format!("convoy-bench-decode-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mean_bytes = write_photos(&dir, n);
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    let decoder = if cfg!(feature = "turbojpeg") { "libjpeg-turbo" } else { "image (zune-jpeg)" };
    let report = |case: &str, size: usize, ips: f64, threads: usize| {
        println!(
            "{}",
            json!({ "case": case, "image_size": size, "images_per_sec": ips.round(), "threads": threads,
                    "images_per_sec_per_core": (ips / threads as f64).round(), "decoder": decoder,
                    "source": format!("{n} JPEGs of 500x375, quality 90, mean {:.0} KB", mean_bytes / 1e3), "cores": cores })
        );
    };
    let flip = Augment { horizontal_flip: true, ..Default::default() };
    let crop = RandomResizedCrop::default();
    for size in [224, 160, 128] {
        let train = ImageFolder::open(&dir, "train", size)?;
        let ips = per_core(&train, |i, out, rng| {
            train.load_random_crop(i, out, &crop, rng).unwrap();
            flip.apply(out, [size, size, 3], rng).unwrap();
        });
        report("jpeg: random-resized crop + flip", size, ips, 1);
        let val = ImageFolder::open(&dir, "val", size)?.with_resize_size(resize_size(size))?;
        report("jpeg: resize + centre crop", size, per_core(&val, |i, out, _| {
            val.load(i, out).unwrap();
        }), 1);
    }
    let file = dir.join("photos.pack");
    let started = Instant::now();
    pack_folder(&dir, 256, &file)?;
    report("convoy pack at 256 (all cores)", 256, (2 * n) as f64 / started.elapsed().as_secs_f64(), cores);
    let (train, val) = packed(&file, Some(224))?;
    let ips = per_core(&train, |i, out, rng| {
        train.load_random_crop(i, out, &crop, rng).unwrap();
        flip.apply(out, [224, 224, 3], rng).unwrap();
    });
    report("packed: random-resized crop + flip", 224, ips, 1);
    report("packed: resize + centre crop", 224, per_core(&val, |i, out, _| {
            val.load(i, out).unwrap();
        }), 1);

    // The loader as `fit` runs it: batches of 64 on every core, the queue kept full.
    let train: Arc<dyn Dataset> = Arc::new(ImageFolder::open(&dir, "train", 224)?);
    let indices: Vec<usize> = (0..train.len()).cycle().take(train.len().max(512)).collect();
    let images = indices.len();
    let started = Instant::now();
    for batch in Loader::new(train, indices, 64, false, Some(Augment::imagenet()), 0, 4)? {
        batch?;
    }
    report("jpeg: loader, random-resized crop + flip (all cores)", 224, images as f64 / started.elapsed().as_secs_f64(), cores);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
