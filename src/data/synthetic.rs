//! A built-in image task, so that training works with no download: ten procedurally drawn shapes.
//!
//! About as hard as MNIST: a small CNN, and also a plain MLP, learn it well within a few epochs.
//! Every image comes from its own seed (the dataset seed mixed with the image index), so the set is
//! the same whatever the number of threads, and is drawn in parallel.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;

use super::{InMemory, mix};
use crate::Result;
use crate::limits::{self, MAX_DATASET_BYTES, MAX_SAMPLE_BYTES, MAX_SIDE};

/// Class names, in label order.
pub const SYNTHETIC_CLASSES: [&str; 10] = [
    "circle",
    "square",
    "triangle",
    "plus",
    "cross",
    "horizontal_bar",
    "vertical_bar",
    "ring",
    "hollow_square",
    "diamond",
];

/// `samples` RGB images of `image_size` x `image_size`, labels cycling through the ten classes (so
/// classes are balanced to within one image); the same seed gives the same bytes.
///
/// The side is held to [`MAX_SIDE`], a sample to [`MAX_SAMPLE_BYTES`] and the whole set (images
/// and labels) to [`MAX_DATASET_BYTES`]: the size often comes from a model file (`evaluate`
/// draws the data at the model's input size), which must not be able to abort the process.
pub fn synthetic(samples: usize, image_size: usize, seed: u64) -> Result<InMemory> {
    let size = limits::at_most("synthetic image size", image_size.max(1), MAX_SIDE)?;
    let sample = limits::product("synthetic sample shape", &[size, size, 3], MAX_SAMPLE_BYTES)?;
    let bytes = limits::product("synthetic data bytes (samples, sample bytes + label)", &[samples, sample + 4], MAX_DATASET_BYTES)?;
    let mut images: Vec<u8> = limits::zeroed(&format!("{bytes} bytes of synthetic data"), samples * sample)?;
    images.par_chunks_mut(sample).enumerate().for_each(|(i, out)| {
        let mut rng = StdRng::seed_from_u64(mix(seed, i as u64));
        draw((i % 10) as u32, size, &mut rng, out);
    });
    let mut labels: Vec<u32> = limits::zeroed("synthetic labels", samples)?;
    labels.iter_mut().enumerate().for_each(|(i, l)| *l = (i % 10) as u32);
    let names = SYNTHETIC_CLASSES.iter().map(|s| s.to_string()).collect();
    InMemory::new(images, labels, [size, size, 3], names, "synthetic")
}

/// A training and a validation set drawn from disjoint seed streams.
pub fn synthetic_split(train: usize, val: usize, image_size: usize, seed: u64) -> Result<(InMemory, InMemory)> {
    // Different stream tags keep the per-image seeds of the two sets apart.
    let train_set = synthetic(train, image_size, mix(seed, 0x7261_696E))?;
    let val_set = synthetic(val, image_size, mix(seed, 0x7661_6C00))?;
    Ok((train_set, val_set))
}

/// Whether the point (u, v), in units of the shape's half extent around its centre, is inside `class`.
fn inside(class: u32, u: f32, v: f32) -> bool {
    let (au, av) = (u.abs(), v.abs());
    let r2 = u * u + v * v;
    match class {
        0 => r2 <= 1.0,
        1 => au <= 0.85 && av <= 0.85,
        // Apex up: the half width grows linearly from the top (v = -1) to the base (v = 1).
        2 => (-1.0..=1.0).contains(&v) && au <= (v + 1.0) * 0.5,
        3 => (au <= 0.25 && av <= 1.0) || (av <= 0.25 && au <= 1.0),
        // Distance to a diagonal is |u -+ v| / sqrt(2); half thickness 0.22.
        4 => au <= 0.9 && av <= 0.9 && ((u - v).abs() <= 0.31 || (u + v).abs() <= 0.31),
        5 => au <= 1.0 && av <= 0.3,
        6 => au <= 0.3 && av <= 1.0,
        7 => (0.36..=1.0).contains(&r2),
        8 => {
            let m = au.max(av);
            (0.6..=0.9).contains(&m)
        }
        _ => au + av <= 1.0,
    }
}

fn draw(class: u32, size: usize, rng: &mut StdRng, out: &mut [u8]) {
    let s = size as f32;
    let half = rng.random_range(0.4f32..0.8) * s * 0.5;
    let jitter = (s * 0.08).max(1.0);
    let cx = s * 0.5 + rng.random_range(-jitter..=jitter);
    let cy = s * 0.5 + rng.random_range(-jitter..=jitter);
    let fg: [i32; 3] = std::array::from_fn(|_| rng.random_range(140..=255));
    let bg: [i32; 3] = std::array::from_fn(|_| rng.random_range(0..=70));
    // Per-pixel noise from a xorshift, one draw for the three channels: a CSPRNG per byte would
    // dominate the drawing time.
    let mut state = rng.random::<u64>() | 1;
    for (y, row) in out.chunks_exact_mut(size * 3).enumerate() {
        let v = (y as f32 + 0.5 - cy) / half;
        for (x, px) in row.chunks_exact_mut(3).enumerate() {
            let u = (x as f32 + 0.5 - cx) / half;
            let colour = if inside(class, u, v) { &fg } else { &bg };
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            for (k, (p, &c)) in px.iter_mut().zip(colour).enumerate() {
                // A byte of the draw scaled to -12..=12.
                let noise = ((state >> (8 * k)) & 0xFF) as i32 * 25 / 256 - 12;
                *p = (c + noise).clamp(0, 255) as u8;
            }
        }
    }
}
