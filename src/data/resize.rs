//! Resampling a window of a u8 image to a sample's size, bilinear with antialiasing when
//! shrinking (PIL's and so torchvision's `BILINEAR`), through `fast_image_resize`'s SIMD code.

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::crop::Window;
use crate::Result;

thread_local! {
    // Its scratch buffers grow to the largest resize seen and are then reused: one per loader thread.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resamples `window` of `src` (`[height, width, channels]`, u8 HWC) into `out`
/// (`[height, width, same channels]`). The window must lie inside the source.
pub fn resize_window(src: &[u8], [h, w, c]: [usize; 3], window: Window, out: &mut [u8], [oh, ow]: [usize; 2]) -> Result<()> {
    let pixel = match c {
        1 => PixelType::U8,
        2 => PixelType::U8x2,
        3 => PixelType::U8x3,
        4 => PixelType::U8x4,
        _ => crate::bail!(Shape, "resize: images of {c} channels are not supported (1 to 4)"),
    };
    let inside = window.left >= 0.0
        && window.top >= 0.0
        && window.width > 0.0
        && window.height > 0.0
        && window.left + window.width <= w as f64 + 1e-6
        && window.top + window.height <= h as f64 + 1e-6;
    if !inside || src.len() != h * w * c || out.len() != oh * ow * c || oh == 0 || ow == 0 {
        crate::bail!(
            Shape,
            "resize: window {window:?} of a {w}x{h}x{c} image ({} bytes) into {ow}x{oh} ({} bytes)",
            src.len(),
            out.len()
        );
    }
    let fail = |e: &dyn std::fmt::Display| crate::Error::Shape(format!("resize of a {w}x{h} window {window:?} to {ow}x{oh}: {e}"));
    let src = ImageRef::new(w as u32, h as u32, src, pixel).map_err(|e| fail(&e))?;
    let mut dst = Image::from_slice_u8(ow as u32, oh as u32, out, pixel).map_err(|e| fail(&e))?;
    // A crop box a rounding error past the edge is clamped rather than refused.
    let width = window.width.min(w as f64 - window.left);
    let height = window.height.min(h as f64 - window.top);
    let options = ResizeOptions::new()
        .crop(window.left, window.top, width, height)
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    RESIZER.with_borrow_mut(|r| r.resize(&src, &mut dst, &options)).map_err(|e| fail(&e))
}

/// Resizes all of `src` so that its short side is `short` ([`super::crop::resized_dims`]);
/// returns the pixels and `(width, height)`.
pub fn resize_short_side(src: &[u8], [h, w, c]: [usize; 3], short: usize) -> Result<(Vec<u8>, usize, usize)> {
    let (nw, nh) = super::crop::resized_dims(w, h, short);
    let bytes = crate::limits::product(
        &format!("image {w}x{h} resized to a short side of {short} (width, height, channels)"),
        &[nw, nh, c],
        crate::limits::MAX_RESIZED_BYTES,
    )?;
    let mut out = crate::limits::zeroed("a resized image", bytes)?;
    resize_window(src, [h, w, c], Window::full(w, h), &mut out, [nh, nw])?;
    Ok((out, nw, nh))
}
