//! The data pipeline: file formats against hand-written bytes, image folders written with the
//! `image` crate, synthetic data, augmentation, the prefetching loader and `from_spec`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy::data::*;
use convoy::{Error, Result};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("convoy-data-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn err_text<T>(r: Result<T>) -> (Error, String) {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => {
            let text = e.to_string();
            (e, text)
        }
    }
}

// ---------------------------------------------------------------- CIFAR

/// The byte at plane `c`, pixel `p` of record `r` in file `f`: distinct enough to catch any mix-up.
fn cifar_byte(f: usize, r: usize, c: usize, p: usize) -> u8 {
    ((c * 97 + p * 3 + r * 11 + f * 29) % 256) as u8
}

/// A CIFAR file of `labels.len()` records; `label_bytes` leading bytes each (the last is `labels[r]`).
fn write_cifar(path: &Path, f: usize, labels: &[u8], label_bytes: usize) {
    let mut bytes = Vec::new();
    for (r, &label) in labels.iter().enumerate() {
        bytes.extend(std::iter::repeat_n(7, label_bytes - 1)); // CIFAR-100 coarse label, ignored
        bytes.push(label);
        for c in 0..3 {
            for p in 0..1024 {
                bytes.push(cifar_byte(f, r, c, p));
            }
        }
    }
    std::fs::write(path, bytes).unwrap();
}

fn write_cifar10(dir: &Path) {
    for f in 1..=5 {
        let labels: Vec<u8> = (0..3).map(|r| ((f * 3 + r) % 10) as u8).collect();
        write_cifar(&dir.join(format!("data_batch_{f}.bin")), f, &labels, 1);
    }
    write_cifar(&dir.join("test_batch.bin"), 0, &[9, 0], 1);
}

#[test]
fn cifar10_reads_all_batches_and_converts_chw_to_hwc() {
    let tmp = TempDir::new("cifar10");
    write_cifar10(tmp.path());
    let (train, val) = cifar10(tmp.path()).unwrap();
    assert_eq!((train.len(), val.len()), (15, 2));
    assert_eq!(train.image_shape(), [32, 32, 3]);
    assert_eq!(train.num_classes(), 10);
    assert_eq!(train.class_names()[0], "airplane");
    assert_eq!(train.class_names()[9], "truck");
    let mut out = vec![0u8; 3072];
    for f in 1..=5 {
        for r in 0..3 {
            let i = (f - 1) * 3 + r;
            assert_eq!(train.load(i, &mut out).unwrap(), ((f * 3 + r) % 10) as u32);
            for p in 0..1024 {
                for c in 0..3 {
                    assert_eq!(out[p * 3 + c], cifar_byte(f, r, c, p), "sample {i} pixel {p} channel {c}");
                }
            }
        }
    }
    assert_eq!(val.labels(), &[9, 0]);
    assert_eq!(val.image(1)[5 * 3 + 2], cifar_byte(0, 1, 2, 5));
    assert!(val.source().ends_with("test_batch.bin"));
}

#[test]
fn cifar100_uses_fine_labels() {
    let tmp = TempDir::new("cifar100");
    write_cifar(&tmp.path().join("train.bin"), 1, &[99, 0, 57], 2);
    write_cifar(&tmp.path().join("test.bin"), 2, &[42], 2);
    let (train, val) = cifar100(tmp.path()).unwrap();
    assert_eq!(train.labels(), &[99, 0, 57]);
    assert_eq!(val.labels(), &[42]);
    let names = train.class_names();
    assert_eq!(names.len(), 100);
    assert!(names.windows(2).all(|w| w[0] < w[1]), "fine label names are alphabetical");
    assert_eq!((names[0].as_str(), names[99].as_str()), ("apple", "worm"));
    assert_eq!(train.image(2)[1000 * 3 + 1], cifar_byte(1, 2, 1, 1000));

    write_cifar(&tmp.path().join("test.bin"), 2, &[100], 2);
    let (_, text) = err_text(cifar100(tmp.path()));
    assert!(text.contains("test.bin") && text.contains("label 100"), "{text}");
}

#[test]
fn cifar_size_not_a_multiple_of_the_record_is_an_error() {
    let tmp = TempDir::new("cifar-size");
    write_cifar10(tmp.path());
    let file = tmp.path().join("data_batch_3.bin");
    let bytes = std::fs::read(&file).unwrap();
    for len in [bytes.len() - 5, bytes.len() + 1, 0] {
        let mut b = bytes.clone();
        b.resize(len, 0);
        std::fs::write(&file, b).unwrap();
        let (e, text) = err_text(cifar10(tmp.path()));
        assert!(matches!(e, Error::Format { .. }), "{text}");
        assert!(
            text.contains("data_batch_3.bin") && text.contains("3073") && text.contains(&len.to_string()),
            "{text}"
        );
    }
}

#[test]
fn cifar_label_out_of_range_names_file_and_record() {
    let tmp = TempDir::new("cifar-label");
    write_cifar10(tmp.path());
    write_cifar(&tmp.path().join("test_batch.bin"), 0, &[3, 10], 1);
    let (e, text) = err_text(cifar10(tmp.path()));
    assert!(matches!(e, Error::Format { .. }));
    assert!(text.contains("test_batch.bin") && text.contains("label 10") && text.contains("record 1"), "{text}");
}

#[test]
fn cifar_missing_directory_or_file() {
    let tmp = TempDir::new("cifar-missing");
    let missing = tmp.path().join("nowhere");
    let (e, text) = err_text(cifar10(&missing));
    assert!(matches!(e, Error::Io { .. }));
    assert!(text.contains("nowhere") && text.contains(CIFAR10_URL), "{text}");

    write_cifar10(tmp.path());
    std::fs::remove_file(tmp.path().join("data_batch_4.bin")).unwrap();
    let (e, text) = err_text(cifar10(tmp.path()));
    assert!(matches!(e, Error::Io { .. }));
    assert!(text.contains("data_batch_4.bin") && text.contains(CIFAR10_URL), "{text}");
}

// ---------------------------------------------------------------- image folder

fn solid(w: u32, h: u32, rgb: [u8; 3]) -> image::RgbImage {
    image::RgbImage::from_pixel(w, h, image::Rgb(rgb))
}

/// Three vertical stripes (red, green, blue), each `w / 3` wide.
fn stripes(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, _| match 3 * x / w {
        0 => image::Rgb([255, 0, 0]),
        1 => image::Rgb([0, 255, 0]),
        _ => image::Rgb([0, 0, 255]),
    })
}

/// train: ant (2 images), bee (1), cat (1); val: the same classes, one image each.
fn write_folder(root: &Path, val_classes: &[&str]) {
    for class in ["cat", "ant", "bee"] {
        std::fs::create_dir_all(root.join("train").join(class)).unwrap();
    }
    let train = root.join("train");
    solid(8, 8, [255, 0, 0]).save(train.join("ant/a.png")).unwrap();
    solid(16, 8, [0, 0, 255]).save_with_format(train.join("ant/b.JPG"), image::ImageFormat::Jpeg).unwrap();
    solid(5, 9, [0, 255, 0]).save(train.join("bee/x.png")).unwrap();
    solid(10, 10, [200, 200, 200]).save(train.join("cat/y.jpeg")).unwrap();
    std::fs::write(train.join("cat/notes.txt"), "not an image").unwrap();
    std::fs::write(train.join("cat/.DS_Store"), "hidden").unwrap();
    std::fs::write(train.join("README"), "a file beside the classes").unwrap();
    for class in val_classes {
        std::fs::create_dir_all(root.join("val").join(class)).unwrap();
        solid(4, 4, [1, 2, 3]).save(root.join("val").join(class).join("v.png")).unwrap();
    }
}

#[test]
fn image_folder_lists_sorted_classes_and_decodes_to_size() {
    let tmp = TempDir::new("folder");
    write_folder(tmp.path(), &["ant", "bee", "cat"]);
    let (train, val) = ImageFolder::open_splits(tmp.path(), 6).unwrap();
    assert_eq!(train.class_names(), ["ant", "bee", "cat"]);
    assert_eq!((train.len(), val.len()), (4, 3));
    assert_eq!(train.image_shape(), [6, 6, 3]);
    let mut out = vec![0u8; 6 * 6 * 3];
    let expected = [(0, [255, 0, 0]), (0, [0, 0, 255]), (1, [0, 255, 0]), (2, [200, 200, 200])];
    for (i, (label, rgb)) in expected.into_iter().enumerate() {
        assert_eq!(train.load(i, &mut out).unwrap(), label, "{}", train.path(i).display());
        for px in out.chunks_exact(3) {
            // JPEG is lossy; PNG is exact, and resizing a solid colour keeps it.
            for (a, b) in px.iter().zip(rgb) {
                assert!((*a as i32 - b).abs() <= 3, "sample {i}: {px:?} vs {rgb:?}");
            }
        }
    }
    assert_eq!(val.load(2, &mut out).unwrap(), 2);
    assert_eq!(&out[..3], &[1, 2, 3]);
}

#[test]
fn image_folder_resizes_short_side_then_centre_crops() {
    let tmp = TempDir::new("folder-crop");
    let dir = tmp.path().join("train/only");
    std::fs::create_dir_all(&dir).unwrap();
    stripes(12, 6).save(dir.join("wide.png")).unwrap();
    image::imageops::rotate90(&stripes(12, 6)).save(dir.join("zz_tall.png")).unwrap();

    // Short side already 6: no resampling, the centre columns 3..9 of the stripes (4 px wide each).
    let ds = ImageFolder::open(tmp.path(), "train", 6).unwrap();
    let mut out = vec![0u8; 6 * 6 * 3];
    ds.load(0, &mut out).unwrap();
    for y in 0..6 {
        let row: Vec<[u8; 3]> = (0..6).map(|x| out[(y * 6 + x) * 3..][..3].try_into().unwrap()).collect();
        let (r, g, b) = ([255, 0, 0], [0, 255, 0], [0, 0, 255]);
        assert_eq!(row, [r, g, g, g, g, b], "row {y}");
    }
    // Tall (6 wide, 12 high, stripes now horizontal): centre rows 3..9.
    ds.load(1, &mut out).unwrap();
    let column: Vec<u8> = (0..6).map(|y| out[(y * 6 + 2) * 3 + 1]).collect();
    assert_eq!(column, [0, 255, 255, 255, 255, 0]);

    // Halving: 12x6 -> 6x3, crop columns 1..4; the middle pixel is mostly green after bilinear.
    let ds = ImageFolder::open(tmp.path(), "train", 3).unwrap();
    let mut out = vec![0u8; 3 * 3 * 3];
    ds.load(0, &mut out).unwrap();
    let centre = &out[(3 + 1) * 3..][..3];
    assert!(centre[1] > 180 && centre[0] < 80 && centre[2] < 30, "{centre:?}");
    assert!(out[(3) * 3] > 150, "left column leans red: {out:?}");
}

#[test]
fn image_folder_corrupt_image_names_the_file() {
    let tmp = TempDir::new("folder-corrupt");
    let dir = tmp.path().join("train/a");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("broken.png"), b"\x89PNG\r\n\x1a\n this is not a png body").unwrap();
    std::fs::write(dir.join("noise.jpg"), [0x13u8; 100]).unwrap();
    let ds = ImageFolder::open(tmp.path(), "train", 4).unwrap();
    let mut out = vec![0u8; 48];
    for i in 0..2 {
        let (e, text) = err_text(ds.load(i, &mut out));
        assert!(matches!(e, Error::Format { .. }), "{text}");
        assert!(text.contains(ds.path(i).file_name().unwrap().to_str().unwrap()), "{text}");
    }
    let (_, text) = err_text(ds.load(2, &mut out));
    assert!(text.contains("out of range"), "{text}");
    let (_, text) = err_text(ds.load(0, &mut [0u8; 47]));
    assert!(text.contains("47"), "{text}");
}

#[test]
fn image_folder_structure_errors() {
    let tmp = TempDir::new("folder-structure");
    let (_, text) = err_text(ImageFolder::open(tmp.path().join("none"), "train", 8));
    assert!(text.contains("none") && text.contains("DIR/train/<class>"), "{text}");
    let (_, text) = err_text(ImageFolder::open(tmp.path(), "train", 8));
    assert!(text.contains("train"), "{text}");
    std::fs::create_dir_all(tmp.path().join("train")).unwrap();
    let (_, text) = err_text(ImageFolder::open(tmp.path(), "train", 8));
    assert!(text.contains("no class directories"), "{text}");
    std::fs::create_dir_all(tmp.path().join("train/a")).unwrap();
    std::fs::write(tmp.path().join("train/a/x.txt"), "").unwrap();
    let (_, text) = err_text(ImageFolder::open(tmp.path(), "train", 8));
    assert!(text.contains("no .jpg"), "{text}");
    let (_, text) = err_text(ImageFolder::open(tmp.path(), "train", 0));
    assert!(text.contains("image size"), "{text}");
}

#[test]
fn image_folder_val_classes_must_match_train() {
    let tmp = TempDir::new("folder-mismatch");
    write_folder(tmp.path(), &["ant", "bee", "dog"]);
    let (e, text) = err_text(ImageFolder::open_splits(tmp.path(), 4));
    assert!(matches!(e, Error::Format { .. }));
    assert!(text.contains("val") && text.contains("cat") && text.contains("dog"), "{text}");
}

// ---------------------------------------------------------------- synthetic

#[test]
fn synthetic_is_deterministic_balanced_and_split() {
    let a = synthetic(500, 16, 7).unwrap();
    assert_eq!(a.images(), synthetic(500, 16, 7).unwrap().images());
    assert_ne!(a.images(), synthetic(500, 16, 8).unwrap().images());
    assert_eq!(a.image_shape(), [16, 16, 3]);
    assert_eq!(a.class_names(), SYNTHETIC_CLASSES);
    let mut counts = [0; 10];
    a.labels().iter().for_each(|&l| counts[l as usize] += 1);
    assert_eq!(counts, [50; 10]);

    let (train, val) = synthetic_split(100, 100, 16, 7).unwrap();
    assert_eq!((train.len(), val.len()), (100, 100));
    assert!((0..100).all(|i| train.image(i) != val.image(i)), "train and val share an image");
}

/// Nearest class centroid on images normalised per image (shape, not colour): far above the 10 %
/// of chance if the classes are learnable.
#[test]
fn synthetic_classes_are_separable() {
    let (train, val) = synthetic_split(2000, 500, 16, 3).unwrap();
    let features = |img: &[u8]| -> Vec<f32> {
        let grey: Vec<f32> = img.chunks_exact(3).map(|p| p.iter().map(|&v| v as f32).sum()).collect();
        let mean = grey.iter().sum::<f32>() / grey.len() as f32;
        let std = (grey.iter().map(|g| (g - mean).powi(2)).sum::<f32>() / grey.len() as f32).sqrt().max(1.0);
        grey.iter().map(|g| (g - mean) / std).collect()
    };
    let mut centroids = vec![vec![0f32; 256]; 10];
    for i in 0..train.len() {
        let c = &mut centroids[train.labels()[i] as usize];
        c.iter_mut().zip(features(train.image(i))).for_each(|(a, b)| *a += b);
    }
    let correct = (0..val.len())
        .filter(|&i| {
            let f = features(val.image(i));
            let dist = |c: &Vec<f32>| {
                let n = c.iter().map(|v| v * v).sum::<f32>().sqrt();
                -c.iter().zip(&f).map(|(a, b)| a * b).sum::<f32>() / n
            };
            let best = (0..10).min_by(|&a, &b| dist(&centroids[a]).total_cmp(&dist(&centroids[b]))).unwrap();
            best as u32 == val.labels()[i]
        })
        .count();
    let accuracy = correct as f32 / val.len() as f32;
    assert!(accuracy > 0.5, "nearest-centroid accuracy {accuracy}");
}

// ---------------------------------------------------------------- augmentation

/// Output (y, x) = input (y + oy, x + ox), zero outside.
fn shifted(img: &[u8], [h, w, c]: [usize; 3], oy: isize, ox: isize) -> Vec<u8> {
    let mut out = vec![0u8; img.len()];
    for y in 0..h as isize {
        for x in 0..w as isize {
            let (sy, sx) = (y + oy, x + ox);
            if (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx) {
                for k in 0..c {
                    out[(y as usize * w + x as usize) * c + k] = img[(sy as usize * w + sx as usize) * c + k];
                }
            }
        }
    }
    out
}

fn mirrored(img: &[u8], [h, w, c]: [usize; 3]) -> Vec<u8> {
    let mut out = img.to_vec();
    for y in 0..h {
        for x in 0..w {
            for k in 0..c {
                out[(y * w + x) * c + k] = img[(y * w + (w - 1 - x)) * c + k];
            }
        }
    }
    out
}

#[test]
fn augment_flip_is_an_exact_mirror_half_the_time() {
    let shape = [3, 5, 2];
    let img: Vec<u8> = (1..=30).collect();
    let flip = Augment { random_crop_padding: 0, horizontal_flip: true, ..Default::default() };
    let mut rng = StdRng::seed_from_u64(1);
    let mut flipped = 0;
    for _ in 0..200 {
        let mut x = img.clone();
        flip.apply(&mut x, shape, &mut rng).unwrap();
        if x == mirrored(&img, shape) {
            flipped += 1;
        } else {
            assert_eq!(x, img);
        }
    }
    assert!((60..140).contains(&flipped), "flipped {flipped} of 200");
}

#[test]
fn augment_crop_stays_in_bounds_and_keeps_shape() {
    let shape = [4, 6, 3];
    let img: Vec<u8> = (1..=72).collect();
    let crop = Augment { random_crop_padding: 2, horizontal_flip: false, ..Default::default() };
    let mut rng = StdRng::seed_from_u64(2);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..300 {
        let mut x = img.clone();
        crop.apply(&mut x, shape, &mut rng).unwrap();
        assert_eq!(x.len(), img.len());
        let offset = (-2..=2)
            .flat_map(|oy| (-2..=2).map(move |ox| (oy, ox)))
            .find(|&(oy, ox)| shifted(&img, shape, oy, ox) == x)
            .expect("crop is a shifted window with zero padding");
        seen.insert(offset);
    }
    assert_eq!(seen.len(), 25, "every window of the padded image is reachable");
    // Padding larger than the image: all-zero windows are possible and nothing panics.
    let wide = Augment { random_crop_padding: 9, horizontal_flip: true, ..Default::default() };
    for _ in 0..50 {
        let mut x = img.clone();
        wide.apply(&mut x, shape, &mut rng).unwrap();
    }
    assert!(crop.apply(&mut [0u8; 5], shape, &mut rng).is_err());
}

// ---------------------------------------------------------------- loader

/// 2x2x1 images whose bytes and label are the sample index, so pairing mistakes show.
fn indexed(n: usize) -> Arc<InMemory> {
    let images = (0..n).flat_map(|i| [(i % 256) as u8; 4]).collect();
    let labels = (0..n as u32).collect();
    let names = (0..n).map(|i| i.to_string()).collect();
    Arc::new(InMemory::new(images, labels, [2, 2, 1], names, "indexed").unwrap())
}

#[test]
fn loader_yields_every_index_once_with_short_last_batch() {
    let ds = indexed(103);
    let order = epoch_indices(103, true, 5, 0);
    let loader = Loader::new(ds.clone(), order.clone(), 10, false, None, 0, 2).unwrap();
    assert_eq!(loader.num_batches(), 11);
    let batches: Vec<Batch> = loader.map(|b| b.unwrap()).collect();
    let sizes: Vec<usize> = batches.iter().map(Batch::len).collect();
    assert_eq!(sizes, [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 3]);
    let labels: Vec<usize> = batches.iter().flat_map(|b| b.labels.iter().map(|&l| l as usize)).collect();
    assert_eq!(labels, order, "batches follow the given order");
    for b in &batches {
        for (img, &l) in b.images.chunks_exact(4).zip(&b.labels) {
            assert_eq!(img, [(l % 256) as u8; 4]);
        }
    }

    let kept: Vec<Batch> = Loader::new(ds, order, 10, true, None, 0, 1).unwrap().map(|b| b.unwrap()).collect();
    assert_eq!(kept.len(), 10);
    assert!(kept.iter().all(|b| b.len() == 10 && b.images.len() == 40));
}

#[test]
fn loader_augments_deterministically() {
    let ds: Arc<dyn Dataset> = Arc::new(synthetic(40, 8, 1).unwrap());
    let run = |seed| -> Vec<Batch> {
        let aug = Some(Augment::cifar());
        Loader::new(ds.clone(), (0..40).collect(), 16, false, aug, seed, 2).unwrap().map(|b| b.unwrap()).collect()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn loader_validates_arguments() {
    let ds = indexed(5);
    assert!(Loader::new(ds.clone(), vec![0, 1], 0, false, None, 0, 1).is_err());
    let (_, text) = err_text(Loader::new(ds, vec![0, 5], 2, false, None, 0, 1));
    assert!(text.contains("index 5"), "{text}");
}

/// Sleeps on every sample and fails on one: for early drops and error propagation.
struct Slow {
    len: usize,
    fail_at: Option<usize>,
}

impl Dataset for Slow {
    fn len(&self) -> usize {
        self.len
    }
    fn image_shape(&self) -> [usize; 3] {
        [1, 1, 1]
    }
    fn num_classes(&self) -> usize {
        1
    }
    fn class_names(&self) -> Vec<String> {
        vec!["x".into()]
    }
    fn source(&self) -> String {
        "slow".into()
    }
    fn load(&self, i: usize, out: &mut [u8]) -> Result<u32> {
        std::thread::sleep(Duration::from_millis(2));
        if self.fail_at == Some(i) {
            return Err(Error::format(format!("sample{i}.png"), "corrupt"));
        }
        out[0] = 1;
        Ok(0)
    }
}

#[test]
fn loader_early_drop_does_not_hang() {
    let ds: Arc<dyn Dataset> = Arc::new(Slow { len: 100_000, fail_at: None });
    let start = Instant::now();
    let mut loader = Loader::new(ds.clone(), (0..100_000).collect(), 64, false, None, 0, 2).unwrap();
    assert_eq!(loader.next().unwrap().unwrap().len(), 64);
    drop(loader);
    // A first batch that would take minutes: the stop flag must cut it short.
    drop(Loader::new(ds, (0..100_000).collect(), 100_000, false, None, 0, 2).unwrap());
    assert!(start.elapsed() < Duration::from_secs(10), "drop took {:?}", start.elapsed());
}

#[test]
fn loader_sample_error_ends_the_stream() {
    let ds: Arc<dyn Dataset> = Arc::new(Slow { len: 40, fail_at: Some(25) });
    let items: Vec<Result<Batch>> = Loader::new(ds, (0..40).collect(), 10, false, None, 0, 4).unwrap().collect();
    assert_eq!(items.len(), 3);
    assert!(items[0].is_ok() && items[1].is_ok());
    let text = items[2].as_ref().unwrap_err().to_string();
    assert!(text.contains("sample25.png"), "{text}");
}

#[test]
fn epoch_indices_and_batch_count() {
    let a = epoch_indices(50, true, 9, 2);
    assert_eq!(a, epoch_indices(50, true, 9, 2));
    assert_ne!(a, epoch_indices(50, true, 9, 3));
    assert_ne!(a, epoch_indices(50, true, 10, 2));
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    assert_eq!(epoch_indices(4, false, 9, 2), [0, 1, 2, 3]);
    assert_eq!(batch_count(103, 10, false), 11);
    assert_eq!(batch_count(103, 10, true), 10);
    assert_eq!(batch_count(100, 10, false), 10);
    assert_eq!(batch_count(5, 10, true), 0);
    assert_eq!(batch_count(5, 0, false), 0);
}

// ---------------------------------------------------------------- stats, in-memory, spec

#[test]
fn channel_stats_mean_and_floored_std() {
    // Two 1x2 images, two channels: channel 0 takes 0 and 255 equally, channel 1 is constant 51.
    let images = vec![0, 51, 255, 51, 255, 51, 0, 51];
    let ds = InMemory::new(images, vec![0, 0], [1, 2, 2], vec!["a".into()], "stats").unwrap();
    let (mean, std) = channel_stats(&ds, 100).unwrap();
    assert!((mean[0] - 0.5).abs() < 1e-6 && (mean[1] - 0.2).abs() < 1e-6, "{mean:?}");
    assert!((std[0] - 0.5).abs() < 1e-6 && std[1] == 1e-3, "{std:?}");
    let (mean, _) = channel_stats(&ds, 1).unwrap();
    assert!((mean[0] - 0.5).abs() < 1e-6);
    assert!(channel_stats(&ds, 0).is_err());
}

#[test]
fn in_memory_rejects_bad_labels_and_sizes() {
    let (_, text) =
        err_text(InMemory::new(vec![0; 8], vec![0, 1, 2, 3], [1, 1, 2], vec!["a".into(), "b".into()], "f.bin"));
    assert!(text.contains("f.bin") && text.contains("label 2") && text.contains("sample 2"), "{text}");
    let (_, text) = err_text(InMemory::new(vec![0; 7], vec![0; 4], [1, 1, 2], vec!["a".into()], "f.bin"));
    assert!(text.contains("7 bytes"), "{text}");
}

#[test]
fn from_spec_forms_and_errors() {
    let (train, val) = from_spec("synthetic:50,20", Some(16), 1).unwrap();
    assert_eq!((train.len(), val.len(), train.image_shape()), (50, 20, [16, 16, 3]));
    let (train, _) = from_spec("synthetic:30", None, 1).unwrap();
    assert_eq!((train.len(), train.image_shape()), (30, [32, 32, 3]));
    assert_eq!(train.source(), "synthetic");

    let tmp = TempDir::new("spec");
    write_cifar10(tmp.path());
    let spec = format!("cifar10:{}", tmp.path().display());
    assert_eq!(from_spec(&spec, None, 0).unwrap().0.len(), 15);
    assert_eq!(from_spec(&spec, Some(32), 0).unwrap().1.len(), 2);
    let (_, text) = err_text(from_spec(&spec, Some(64), 0));
    assert!(text.contains("32x32"), "{text}");
    let (_, text) = err_text(from_spec(&format!("cifar10:{}/missing", tmp.path().display()), None, 0));
    assert!(text.contains(CIFAR10_URL), "{text}");
    let (_, text) = err_text(from_spec(&format!("cifar100:{}", tmp.path().display()), None, 0));
    assert!(text.contains("train.bin"), "{text}");

    let folder = tmp.path().join("folder");
    write_folder(&folder, &["ant", "bee", "cat"]);
    let (train, val) = from_spec(&format!("folder:{}", folder.display()), None, 0).unwrap();
    assert_eq!((train.len(), val.len(), train.image_shape()), (4, 3, [32, 32, 3]));

    for (spec, needle) in [
        ("mnist", "cifar10:DIR"),
        ("cifar10", "needs a directory"),
        ("folder:", "needs a directory"),
        ("synthetic:abc", "synthetic:TRAIN"),
        ("synthetic:10,0", "synthetic:TRAIN"),
    ] {
        let (e, text) = err_text(from_spec(spec, None, 0));
        assert!(matches!(e, Error::Config(_)), "{spec}: {text}");
        assert!(text.contains(needle), "{spec}: {text}");
    }
    assert!(from_spec("synthetic", Some(0), 0).is_err());
}

#[test]
fn an_image_removed_or_corrupted_during_an_epoch_names_the_file() {
    use convoy::model::{zoo, CompileOptions, FitOptions};
    // The folder is listed when opened; files that change afterwards are met mid-epoch.
    let tmp = TempDir::new("folder-vanish");
    write_folder(tmp.path(), &["ant", "bee", "cat"]);
    let (train, _) = ImageFolder::open_splits(tmp.path(), 6).unwrap();
    let train: std::sync::Arc<dyn Dataset> = std::sync::Arc::new(train);
    let mut out = vec![0u8; 6 * 6 * 3];
    std::fs::remove_file(tmp.path().join("train/ant/a.png")).unwrap();
    std::fs::write(tmp.path().join("train/bee/x.png"), b"\x89PNG\r\n\x1a\n truncated").unwrap();
    let (_, text) = err_text(train.load(0, &mut out));
    assert!(text.contains("a.png"), "{text}");
    let (_, text) = err_text(train.load(2, &mut out));
    assert!(text.contains("x.png"), "{text}");
    // Training over it stops with the file named, not a panic or a silently skipped image.
    let mut m = zoo::mlp(&[6, 6, 3], 3);
    m.compile(CompileOptions::new(convoy::optim::Optimizer::sgd(0.1)).devices(convoy::device::open("software").unwrap()).max_batch(4))
    .unwrap();
    let e = m.fit(train, FitOptions { epochs: 1, batch_size: 4, shuffle: false, verbose: 0, ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("a.png") || e.contains("x.png"), "{e}");
}

// ---------------------------------------------------------------- ImageNet pipeline

#[test]
fn random_resized_crop_stays_within_its_area_and_ratio_bounds() {
    let crop = RandomResizedCrop::default();
    let (w, h) = (500usize, 375usize);
    let area = (w * h) as f64;
    let mut rng = StdRng::seed_from_u64(7);
    let (mut smallest, mut largest, mut wide, mut tall, mut fallbacks) = (1.0f64, 0.0f64, 0, 0, 0);
    for _ in 0..4000 {
        let win = crop.window(w, h, &mut rng);
        // Integer windows inside the image.
        for v in [win.left, win.top, win.width, win.height] {
            assert_eq!(v, v.round(), "{win:?}");
        }
        assert!(win.width >= 1.0 && win.height >= 1.0, "{win:?}");
        assert!(win.left + win.width <= w as f64 && win.top + win.height <= h as f64, "{win:?}");
        if win == crop.fallback(w, h) {
            fallbacks += 1;
            continue;
        }
        // Within the bounds up to the rounding of each side to whole pixels (under 1% here).
        let frac = win.width * win.height / area;
        let ratio = win.width / win.height;
        assert!((0.08 * 0.98..=1.0).contains(&frac), "area fraction {frac} of {win:?}");
        assert!((0.75 * 0.98..=4.0 / 3.0 * 1.02).contains(&ratio), "ratio {ratio} of {win:?}");
        (smallest, largest) = (smallest.min(frac), largest.max(frac));
        if ratio > 1.2 { wide += 1 }
        if ratio < 0.8 { tall += 1 }
    }
    // The draws cover the range: small and large crops, both orientations; whole-image draws
    // that do not fit (a 4:3 image with ratio 3:4 at scale 1) are redrawn, rarely all ten times.
    assert!(smallest < 0.1 && largest > 0.9, "area fractions {smallest}..{largest}");
    assert!(wide > 200 && tall > 200, "{wide} wide, {tall} tall");
    assert!(fallbacks < 10, "{fallbacks} fallbacks");
    // The same generator state draws the same window (a resumed epoch replays its crops).
    let a = crop.window(w, h, &mut StdRng::seed_from_u64(3));
    assert_eq!(a, crop.window(w, h, &mut StdRng::seed_from_u64(3)));
}

#[test]
fn random_resized_crop_falls_back_to_the_centre_after_ten_misses() {
    // No window of 90-100% of a 1000x10 strip has a ratio within 3/4..4/3: torchvision then
    // takes the centre crop of the largest window within the ratio bounds.
    let crop = RandomResizedCrop { scale: (0.9, 1.0), ..Default::default() };
    let mut rng = StdRng::seed_from_u64(1);
    let wide = crop.window(1000, 10, &mut rng);
    assert_eq!(wide, Window { left: 493.0, top: 0.0, width: 13.0, height: 10.0 });
    let tall = crop.window(10, 1000, &mut rng);
    assert_eq!(tall, Window { left: 0.0, top: 493.0, width: 10.0, height: 13.0 });
    // An image whose own ratio is within bounds falls back to all of itself; one wider than the
    // bounds to the centre of the widest window within them.
    let within = RandomResizedCrop { scale: (1.0, 1.0), ratio: (1.0, 1.5) };
    assert_eq!(within.fallback(120, 100), Window { left: 0.0, top: 0.0, width: 120.0, height: 100.0 });
    let narrow = RandomResizedCrop { scale: (1.0, 1.0), ratio: (0.5, 0.5) };
    assert_eq!(narrow.fallback(120, 100), Window { left: 35.0, top: 0.0, width: 50.0, height: 100.0 });
    assert!(RandomResizedCrop { scale: (0.5, 0.1), ..Default::default() }.validate().is_err());
}

#[test]
fn imagenet_augment_loads_a_crop_then_flips_half_the_time() {
    // 4x4 RGB samples, asymmetric left to right. A crop of the whole square resamples to the
    // same pixels, so each output is the sample or its mirror.
    let shape = [4, 4, 3];
    let images: Vec<u8> = (0..8 * 48).map(|i| (i * 7 % 251) as u8).collect();
    let ds = Arc::new(InMemory::new(images.clone(), vec![0; 8], shape, vec!["a".into()], "mem").unwrap());
    let whole = RandomResizedCrop { scale: (1.0, 1.0), ratio: (1.0, 1.0) };
    let aug = Augment { random_resized_crop: Some(whole), ..Augment::imagenet() };
    let mut flipped = 0;
    for seed in 0..25 {
        for b in Loader::new(ds.clone(), (0..8).collect(), 8, false, Some(aug), seed, 1).unwrap() {
            for (i, img) in b.unwrap().images.chunks_exact(48).enumerate() {
                let original = &images[i * 48..][..48];
                if img == mirrored(original, shape) {
                    flipped += 1;
                } else {
                    assert_eq!(img, original, "sample {i}, seed {seed}");
                }
            }
        }
    }
    assert!((60..140).contains(&flipped), "flipped {flipped} of 200");
    // Without the flip, the default crop still changes the pixels: a window of the sample
    // resampled to its size.
    let crop_only = Augment { horizontal_flip: false, ..Augment::imagenet() };
    let loaded: Vec<u8> = Loader::new(ds, (0..8).collect(), 8, false, Some(crop_only), 1, 1)
        .unwrap()
        .flat_map(|b| b.unwrap().images)
        .collect();
    assert_eq!(loaded.len(), images.len());
    let changed = loaded.chunks_exact(48).zip(images.chunks_exact(48)).filter(|(a, b)| a != b).count();
    assert!(changed >= 6, "{changed} of 8 samples cropped");
}

/// A `w` x `h` grey image with a red frame `border` pixels wide.
fn framed(w: u32, h: u32, border: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        let edge = x < border || y < border || x >= w - border || y >= h - border;
        image::Rgb(if edge { [255, 0, 0] } else { [128, 128, 128] })
    })
}

#[test]
fn from_96_px_folders_resize_to_256_224ths_then_centre_crop() {
    let tmp = TempDir::new("folder-imagenet");
    for split in ["train", "val"] {
        let dir = tmp.path().join(split).join("only");
        std::fs::create_dir_all(&dir).unwrap();
        // Short side 200 -> 128 (the resize for 112 px): the 10 px frame becomes 6.4 px, and
        // the 112 px centre crop starts 8 px in, so no red is left. At 112 the frame shows.
        framed(300, 200, 10).save(dir.join("a.png")).unwrap();
    }
    let red_pixels = |img: &[u8]| img.chunks_exact(3).filter(|p| p[0] > 160 && p[1] < 100).count();
    let (_, val) = from_spec(&format!("folder:{}", tmp.path().display()), Some(112), 0).unwrap();
    assert_eq!(val.image_shape(), [112, 112, 3]);
    let mut out = vec![0u8; 112 * 112 * 3];
    val.load(0, &mut out).unwrap();
    assert_eq!(red_pixels(&out), 0);
    let plain = ImageFolder::open(tmp.path(), "val", 112).unwrap();
    plain.load(0, &mut out).unwrap();
    assert!(red_pixels(&out) > 112 * 4, "{} red pixels", red_pixels(&out));
    assert_eq!(augment_for(&format!("folder:{}", tmp.path().display()), 112), Augment::imagenet());
    assert_eq!(augment_for("folder:x", 32).random_resized_crop, None);
    assert_eq!(augment_for("synthetic", 128).random_resized_crop, None);
    // A training load through the random-resized crop has the sample's size and varies.
    let ds = ImageFolder::open(tmp.path(), "train", 112).unwrap();
    let crops: Vec<Vec<u8>> = (0..4)
        .map(|seed| {
            let mut out = vec![0u8; 112 * 112 * 3];
            ds.load_random_crop(0, &mut out, &RandomResizedCrop::default(), &mut StdRng::seed_from_u64(seed)).unwrap();
            out
        })
        .collect();
    assert!(crops.windows(2).any(|w| w[0] != w[1]));
}

// ---------------------------------------------------------------- packed

/// A `w` x `h` image of distinct, seeded bytes.
fn noise(w: u32, h: u32, seed: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        let v = (x * 31 + y * 17 + seed * 101).wrapping_mul(2_654_435_761) >> 24;
        image::Rgb([v as u8, (v >> 1) as u8 ^ 0x55, (v * 3) as u8])
    })
}

/// train: ant (8x12 and 10x8 PNGs), bee (a 16x16 PNG and a 24x16 JPEG); val: one 9x8 PNG each.
fn write_pack_folder(root: &Path) -> Vec<(String, image::RgbImage)> {
    let files = [
        ("train/ant/a.png", noise(8, 12, 1)),
        ("train/ant/b.png", noise(10, 8, 2)),
        ("train/bee/c.png", noise(16, 16, 3)),
        ("train/bee/d.jpg", noise(24, 16, 4)),
        ("val/ant/e.png", noise(9, 8, 5)),
        ("val/bee/f.png", noise(8, 8, 6)),
    ];
    for (name, img) in &files {
        std::fs::create_dir_all(root.join(name).parent().unwrap()).unwrap();
        img.save(root.join(name)).unwrap();
    }
    files.into_iter().map(|(n, i)| (n.to_string(), i)).collect()
}

#[test]
fn packed_round_trip_keeps_every_pixel_label_and_name() {
    let tmp = TempDir::new("pack");
    let folder = tmp.path().join("folder");
    let files = write_pack_folder(&folder);
    let out = tmp.path().join("data.pack");
    let report = pack_folder(&folder, 8, &out).unwrap();
    assert_eq!((report.train, report.val, report.classes), (4, 2, 2));
    assert_eq!(report.bytes, std::fs::metadata(&out).unwrap().len());
    let (train, val) = packed(&out, None).unwrap();
    assert_eq!((train.len(), val.len(), train.image_shape()), (4, 2, [8, 8, 3]));
    assert_eq!(train.class_names(), ["ant", "bee"]);
    assert_eq!(train.source(), format!("{} (train)", out.display()));
    // Images whose short side is already 8 are stored byte for byte.
    let stored = |ds: &Packed, i| {
        let (px, w, h) = ds.stored(i).unwrap();
        (px.to_vec(), w, h)
    };
    for (ds, i, file) in [(&train, 0, 0), (&train, 1, 1), (&val, 0, 4), (&val, 1, 5)] {
        let img = &files[file].1;
        assert_eq!(stored(ds, i), (img.as_raw().clone(), img.width() as usize, img.height() as usize), "{}", files[file].0);
    }
    // The others with their short side resized to 8: 16x16 -> 8x8, 24x16 -> 12x8.
    assert_eq!((stored(&train, 2).1, stored(&train, 2).2, stored(&train, 3).1, stored(&train, 3).2), (8, 8, 12, 8));
    // Samples match what the folder gives and carry its labels.
    let (ftrain, fval) = ImageFolder::open_splits(&folder, 8).unwrap();
    let (mut a, mut b) = (vec![0u8; 8 * 8 * 3], vec![0u8; 8 * 8 * 3]);
    for (p, f) in [(&train as &dyn Dataset, &ftrain), (&val, &fval)] {
        for i in 0..p.len() {
            assert_eq!(p.load(i, &mut a).unwrap(), f.load(i, &mut b).unwrap());
            if f.path(i).extension().unwrap() == "png" && i != 2 {
                assert_eq!(a, b, "sample {i} of {}", p.source());
            }
        }
    }
    // Another training size crops and resamples the stored images; a random-resized crop too.
    let (small, _) = packed(&out, Some(4)).unwrap();
    let mut four = vec![0u8; 4 * 4 * 3];
    assert_eq!(small.load(3, &mut four).unwrap(), 1);
    small.load_random_crop(0, &mut four, &RandomResizedCrop::default(), &mut StdRng::seed_from_u64(0)).unwrap();
    // Through the data spec, with the packed size as the default image size.
    let (t, v) = from_spec(&format!("packed:{}", out.display()), None, 0).unwrap();
    assert_eq!((t.len(), v.len(), t.image_shape()), (4, 2, [8, 8, 3]));
    // Packing again over the file replaces it whole.
    pack_folder(&folder, 6, &out).unwrap();
    assert_eq!(packed(&out, None).unwrap().0.packed_size(), 6);
}

/// The bytes of a freshly packed copy of `write_pack_folder`, and where it is.
fn packed_bytes(tmp: &TempDir) -> (Vec<u8>, PathBuf) {
    let folder = tmp.path().join("folder");
    write_pack_folder(&folder);
    let out = tmp.path().join("good.pack");
    pack_folder(&folder, 8, &out).unwrap();
    (std::fs::read(&out).unwrap(), out)
}

#[test]
fn bad_packed_files_are_one_error_naming_the_file_and_the_cause() {
    let tmp = TempDir::new("pack-bad");
    let (good, _) = packed_bytes(&tmp);
    let u64_at = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let u32_at = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let names_len = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
    let index = 64 + names_len;
    let data_start = u64::from_le_bytes(good[48..56].try_into().unwrap()) as usize;
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "shorter than the 64-byte header"),
        ("short", good[..40].to_vec(), "shorter than the 64-byte header"),
        ("mid-names", good[..70].to_vec(), "class names"),
        ("mid-index", good[..index + 30].to_vec(), "index of 6 images"),
        ("mid-data", good[..data_start + 100].to_vec(), "truncated"),
        ("last-byte", good[..good.len() - 1].to_vec(), "truncated"),
    ];
    let mut edit = |name, f: &dyn Fn(&mut Vec<u8>), needle| {
        let mut b = good.clone();
        f(&mut b);
        cases.push((name, b, needle));
    };
    edit("magic", &|b| b[..8].copy_from_slice(b"GIF89a\0\0"), "not a convoy packed file");
    edit("version", &|b| u32_at(b, 8, 2), "format version 2");
    edit("no-size", &|b| u32_at(b, 12, 0), "image size 0");
    edit("classes", &|b| u32_at(b, 16, 3), "class");
    edit("count", &|b| u64_at(b, 24, 1 << 40), "training and");
    edit("count-past-end", &|b| u64_at(b, 24, 1 << 20), "runs past the end of the file");
    edit("names", &|b| u64_at(b, 40, u64::MAX - 10), "class names of");
    edit("data-len", &|b| u64_at(b, 56, 1 << 50), "pixel data declared");
    edit("offset", &|b| u64_at(b, index, 1 << 40), "image 0 (8x12) at offset 1099511627776 runs past");
    edit("width", &|b| u32_at(b, index + 8, 1 << 30), "image 0 is 1073741824x12");
    edit("label", &|b| u32_at(b, index + 24 + 16, 9), "image 1 has label 9");
    edit("name-utf8", &|b| b[68] = 0xFF, "not UTF-8");
    for (name, bytes, needle) in cases {
        let path = tmp.path().join(format!("{name}.pack"));
        std::fs::write(&path, &bytes).unwrap();
        let (e, text) = err_text(packed(&path, None));
        assert!(matches!(e, Error::Format { .. }), "{name}: {text}");
        assert!(text.contains(&path.display().to_string()) && text.contains(needle), "{name}: {text}");
        assert!(!text.contains('\n'), "{name}: {text}");
        let (_, from_bytes) = err_text(packed_from_bytes(bytes, &path, None));
        assert_eq!(from_bytes, text);
    }
    let (e, text) = err_text(packed(tmp.path().join("missing.pack"), None));
    assert!(matches!(e, Error::Io { .. }) && text.contains("missing.pack"), "{text}");
    let (_, text) = err_text(from_spec("packed:", None, 0));
    assert!(text.contains("packed:FILE"), "{text}");
}

#[test]
fn packed_reader_survives_every_truncation_and_seeded_bit_flips() {
    use rand::RngExt;
    let tmp = TempDir::new("pack-flips");
    let (good, path) = packed_bytes(&tmp);
    // Whatever the bytes, the reader answers Ok or Err; when Ok, every sample loads.
    let check = |bytes: Vec<u8>| {
        if let Ok((train, val)) = packed_from_bytes(bytes, &path, Some(4)) {
            let mut out = vec![0u8; 4 * 4 * 3];
            let mut rng = StdRng::seed_from_u64(0);
            for ds in [&train, &val] {
                for i in 0..ds.len() {
                    ds.load(i, &mut out).unwrap();
                    ds.load_random_crop(i, &mut out, &RandomResizedCrop::default(), &mut rng).unwrap();
                }
            }
        }
    };
    for len in 0..good.len() {
        assert!(packed_from_bytes(good[..len].to_vec(), &path, None).is_err(), "truncated to {len} bytes");
    }
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..bytes.len());
            bytes[at] ^= 1 << rng.random_range(0..8);
        }
        check(bytes);
    }
}
