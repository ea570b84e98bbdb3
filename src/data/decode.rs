//! Decoding image files to RGB, JPEGs at a reduced DCT scale where the sample needs far fewer
//! pixels than the file holds.
//!
//! Why libjpeg-turbo (the `turbojpeg` crate, behind the default `turbojpeg` feature): among the
//! well-kept decoders it is the only one both fast and able to scale. Measured on a 500x375
//! JPEG of quality 90 (one core, this repository's 2-core machine): libjpeg-turbo 2.1 ms at
//! full size, 1.5 ms at 1/4; zune-jpeg (the `image` crate's decoder) 2.4 ms, and it has no
//! scaled decoding; jpeg-decoder's `Decoder::scale` 4.2 ms at full size and 2.9 ms at 1/2,
//! slower at 1/2 than zune-jpeg at full size. On a 2000x1500 photo libjpeg-turbo at 1/4 takes
//! 60% of zune-jpeg's time. Without the feature JPEGs go through the `image` crate at full
//! size, which needs no cmake or nasm. PNGs always do. Without the `image` feature (on by
//! default) nothing here decodes: every call returns an error naming the feature.

use std::path::Path;

use super::crop::Window;
use super::resize::{resize_short_side, resize_window};
use crate::limits::MAX_IMAGE_FILE_BYTES;
use crate::{Error, Result};

/// An RGB image decoded from a file, possibly at a reduced scale.
pub struct Decoded {
    /// u8 RGB, row after row.
    pub pixels: Vec<u8>,
    pub width: usize,
    pub height: usize,
}

/// The scales a JPEG can be decoded at: 1/1, 1/2, 1/4, 1/8 (libjpeg's DCT scaling).
const SCALES: [usize; 4] = [8, 4, 2, 1];

/// The largest scale divisor (8, 4, 2 or 1) that leaves `short` (the short side of the part of
/// the image the sample is made from) at least `needed` pixels: decoding finer than that only
/// makes pixels that the resampling to `needed` averages away. 1 when the decoder cannot
/// scale (built without the `turbojpeg` feature).
pub fn dct_scale(short: f64, needed: usize) -> usize {
    if !cfg!(feature = "turbojpeg") {
        return 1;
    }
    SCALES.into_iter().find(|&k| short / k as f64 >= needed as f64).unwrap_or(1)
}

/// Reads the file `path` (held to [`MAX_IMAGE_FILE_BYTES`]).
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    if len > MAX_IMAGE_FILE_BYTES {
        return Err(Error::format(path, format!("image file of {len} bytes, above the cap of {MAX_IMAGE_FILE_BYTES}")));
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

/// Decodes `path` and resamples the window that `pick(width, height)` chooses in the full-size
/// image into `out` (`size` x `size` x 3), decoding a JPEG at the coarsest DCT scale that keeps
/// the window's short side at least `size`.
pub fn decode_window(path: &Path, size: usize, out: &mut [u8], pick: impl FnOnce(usize, usize) -> Window) -> Result<()> {
    let bytes = read_file(path)?;
    let (w, h) = dimensions(&bytes, path)?;
    let window = pick(w, h);
    let image = decode(&bytes, path, dct_scale(window.short_side(), size))?;
    let (sx, sy) = (image.width as f64 / w as f64, image.height as f64 / h as f64);
    resize_window(&image.pixels, [image.height, image.width, 3], window.scaled(sx, sy), out, [size, size])
        .map_err(|e| Error::format(path, e.to_string()))
}

/// Decodes `path` with its short side resized to `short` (the long side in proportion); returns
/// the pixels, width and height. What `convoy pack` stores.
pub fn decode_resized(path: &Path, short: usize) -> Result<(Vec<u8>, usize, usize)> {
    let bytes = read_file(path)?;
    let (w, h) = dimensions(&bytes, path)?;
    let image = decode(&bytes, path, dct_scale(w.min(h) as f64, short))?;
    resize_short_side(&image.pixels, [image.height, image.width, 3], short).map_err(|e| Error::format(path, e.to_string()))
}

/// The width and height that the header of the image in `bytes` declares.
pub fn dimensions(bytes: &[u8], path: &Path) -> Result<(usize, usize)> {
    #[cfg(feature = "turbojpeg")]
    if is_jpeg(bytes)
        && let Ok(header) = turbo::header(bytes)
    {
        return checked_dims(path, header.width, header.height);
    }
    generic::dimensions(bytes, path)
}

/// Decodes the image in `bytes` to RGB at 1/`scale` (JPEGs only; anything else, and JPEGs that
/// libjpeg-turbo cannot decode to RGB such as CMYK, at full size through the `image` crate).
pub fn decode(bytes: &[u8], path: &Path, scale: usize) -> Result<Decoded> {
    #[cfg(feature = "turbojpeg")]
    if is_jpeg(bytes)
        && let Some(image) = turbo::decode(bytes, path, scale)?
    {
        return Ok(image);
    }
    let _ = scale;
    generic::decode(bytes, path)
}

/// The error of a reader that would decode JPEG or PNG files (`path`: the file or folder) in a
/// build without the `image` feature.
pub fn decoder_missing(path: &Path) -> Error {
    Error::format(
        path,
        "decoding JPEG and PNG images needs convoy's `image` feature, which this build does not have \
         (it is on by default; enable it with `--features image`)",
    )
}

/// Nothing where this build decodes JPEG and PNG files; else [`decoder_missing`]: what the
/// readers of image files check before they list anything.
pub fn require_decoder(path: &Path) -> Result<()> {
    if cfg!(feature = "image") { Ok(()) } else { Err(decoder_missing(path)) }
}

/// Every format through the `image` crate, at full size.
#[cfg(feature = "image")]
mod generic {
    use std::path::Path;

    use super::{Decoded, checked_dims};
    use crate::{Error, Result};

    pub fn dimensions(bytes: &[u8], path: &Path) -> Result<(usize, usize)> {
        let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| Error::io(path, e))?;
        let (w, h) = reader.into_dimensions().map_err(|e| Error::format(path, format!("cannot decode image: {e}")))?;
        checked_dims(path, w as usize, h as usize)
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<Decoded> {
        let image =
            image::load_from_memory(bytes).map_err(|e| Error::format(path, format!("cannot decode image: {e}")))?;
        let rgb = image.to_rgb8();
        let (width, height) = (rgb.width() as usize, rgb.height() as usize);
        checked_dims(path, width, height)?;
        Ok(Decoded { pixels: rgb.into_raw(), width, height })
    }
}

/// Built without the `image` feature: every decode is an error naming it.
#[cfg(not(feature = "image"))]
mod generic {
    use std::path::Path;

    use super::{Decoded, decoder_missing};
    use crate::Result;

    pub fn dimensions(_: &[u8], path: &Path) -> Result<(usize, usize)> {
        Err(decoder_missing(path))
    }

    pub fn decode(_: &[u8], path: &Path) -> Result<Decoded> {
        Err(decoder_missing(path))
    }
}

/// A JPEG's start-of-image marker and the first byte of the next marker.
#[cfg(feature = "turbojpeg")]
fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xFF, 0xD8, 0xFF])
}

/// Refuses an empty image and one whose decoded size passes
/// [`MAX_DECODED_BYTES`](crate::limits::MAX_DECODED_BYTES), before any pixel buffer is allocated
/// from the header's word.
#[cfg(feature = "image")]
fn checked_dims(path: &Path, w: usize, h: usize) -> Result<(usize, usize)> {
    if w == 0 || h == 0 {
        return Err(Error::format(path, format!("image is empty ({w}x{h})")));
    }
    crate::limits::product("decoded image (width, height, channels)", &[w, h, 3], crate::limits::MAX_DECODED_BYTES)
        .map_err(|e| Error::format(path, e.to_string()))?;
    Ok((w, h))
}

#[cfg(feature = "turbojpeg")]
mod turbo {
    use std::cell::RefCell;
    use std::path::Path;

    use turbojpeg::{DecompressHeader, Decompressor, Image, PixelFormat, ScalingFactor};

    use super::{Decoded, checked_dims};
    use crate::{Error, Result};

    /// A progressive JPEG can declare thousands of scans, each a pass over the whole image;
    /// libjpeg-turbo's documentation suggests a limit of this order against that attack.
    const SCAN_LIMIT: u32 = 500;

    thread_local! {
        // A decompressor per loader thread, created on first use.
        static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    }

    fn with<T>(f: impl FnOnce(&mut Decompressor) -> turbojpeg::Result<T>) -> turbojpeg::Result<T> {
        DECOMPRESSOR.with_borrow_mut(|slot| {
            if slot.is_none() {
                let mut d = Decompressor::new()?;
                d.set_scan_limit(SCAN_LIMIT)?;
                *slot = Some(d);
            }
            f(slot.as_mut().expect("set above"))
        })
    }

    pub fn header(bytes: &[u8]) -> turbojpeg::Result<DecompressHeader> {
        with(|d| d.read_header(bytes))
    }

    /// `None` where libjpeg-turbo cannot make RGB of this JPEG (CMYK, YCCK) and the `image`
    /// crate should try; an error for a JPEG that is corrupt.
    pub fn decode(bytes: &[u8], path: &Path, scale: usize) -> Result<Option<Decoded>> {
        let fail = |e: turbojpeg::Error| Error::format(path, format!("cannot decode JPEG: {e}"));
        let header = header(bytes).map_err(fail)?;
        if matches!(header.colorspace, turbojpeg::Colorspace::CMYK | turbojpeg::Colorspace::YCCK) {
            return Ok(None);
        }
        checked_dims(path, header.width, header.height)?;
        // Lossless JPEGs have no DCT to scale.
        let scale = if header.is_lossless { 1 } else { scale };
        let factor = ScalingFactor::new(1, scale);
        let scaled = header.scaled(factor);
        let (width, height) = (scaled.width, scaled.height);
        let mut pixels = crate::limits::zeroed("a decoded image", width * height * 3)?;
        let image = Image { pixels: pixels.as_mut_slice(), width, pitch: width * 3, height, format: PixelFormat::RGB };
        with(|d| {
            d.set_scaling_factor(factor)?;
            d.decompress(bytes, image)
        })
        .map_err(fail)?;
        Ok(Some(Decoded { pixels, width, height }))
    }
}

#[cfg(all(test, not(feature = "image")))]
mod without_decoder {
    use super::*;

    #[test]
    fn decoding_names_the_missing_feature() {
        let path = Path::new("photo.png");
        let png = b"\x89PNG";
        let errors = [
            dimensions(png, path).unwrap_err(),
            decode(png, path, 1).map(|_| ()).unwrap_err(),
            require_decoder(path).unwrap_err(),
        ];
        for e in errors {
            let e = e.to_string();
            assert!(e.contains("photo.png") && e.contains("`image` feature"), "{e}");
        }
    }
}

#[cfg(all(test, feature = "image"))]
mod tests {
    use super::*;

    /// A 400x300 JPEG of a gradient, written where `name` says.
    fn jpeg(name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("convoy-decode-{}-{name}.jpg", std::process::id()));
        image::RgbImage::from_fn(400, 300, |x, y| image::Rgb([(x / 2) as u8, (y / 2) as u8, 128])).save(&path).unwrap();
        path
    }

    #[test]
    fn dct_scale_keeps_the_short_side_at_least_the_needed_size() {
        let expected = if cfg!(feature = "turbojpeg") { [1, 1, 2, 2, 4, 8, 8] } else { [1; 7] };
        let got = [(300.0, 300), (300.0, 151), (300.0, 150), (300.0, 76), (300.0, 75), (300.0, 37), (80.0, 1)]
            .map(|(short, needed)| dct_scale(short, needed));
        assert_eq!(got, expected);
    }

    #[test]
    fn scaled_decode_gives_the_scaled_size_and_the_same_picture() {
        let path = jpeg("scaled");
        let bytes = read_file(&path).unwrap();
        assert_eq!(dimensions(&bytes, &path).unwrap(), (400, 300));
        let full = decode(&bytes, &path, 1).unwrap();
        assert_eq!((full.width, full.height, full.pixels.len()), (400, 300, 400 * 300 * 3));
        let k = dct_scale(300.0, 100);
        let small = decode(&bytes, &path, k).unwrap();
        if cfg!(feature = "turbojpeg") {
            assert_eq!((k, small.width, small.height), (2, 200, 150));
            // The pixel at (100, 50) of the half-size image is the full image's (201, 101):
            // red x/2 = 100, green y/2 = 50 (within JPEG's error).
            let px = &small.pixels[(50 * 200 + 100) * 3..][..3];
            assert!((px[0] as i32 - 100).abs() <= 4 && (px[1] as i32 - 50).abs() <= 4, "{px:?}");
        }
        // The window then gives the requested size whatever the scale.
        let mut out = vec![0u8; 64 * 64 * 3];
        decode_window(&path, 64, &mut out, Window::full).unwrap();
        let (img, w, h) = decode_resized(&path, 60).unwrap();
        assert_eq!((w, h, img.len()), (80, 60, 80 * 60 * 3));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_grey_jpeg_decodes_to_rgb() {
        let path = std::env::temp_dir().join(format!("convoy-decode-{}-grey.jpg", std::process::id()));
        image::GrayImage::from_fn(64, 48, |x, _| image::Luma([(x * 4) as u8])).save(&path).unwrap();
        let bytes = read_file(&path).unwrap();
        let image = decode(&bytes, &path, dct_scale(48.0, 24)).unwrap();
        let expected = if cfg!(feature = "turbojpeg") { (32, 24) } else { (64, 48) };
        assert_eq!((image.width, image.height), expected);
        let px = &image.pixels[(10 * image.width + image.width / 2) * 3..][..3];
        assert!(px[0] == px[1] && px[1] == px[2] && (px[0] as i32 - 128).abs() <= 6, "{px:?}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_corrupt_jpeg_names_the_file() {
        let path = jpeg("corrupt");
        let mut bytes = read_file(&path).unwrap();
        bytes.truncate(40);
        std::fs::write(&path, &bytes).unwrap();
        let e = decode_resized(&path, 32).unwrap_err().to_string();
        assert!(e.contains(&path.display().to_string()) && e.contains("decode"), "{e}");
        let _ = std::fs::remove_file(path);
    }
}
