//! u8 -> f32 image normalisation against `(x / 255 - mean[c]) / std[c]` in f64, on element
//! counts that leave a partial last word; and u8 -> f16 with the channels padded by zeros.

use convoy::kernels::image;
use convoy::DType;
use rand::RngExt;

use crate::common::*;

pub(crate) fn reference(x: &[u8], mean: &[f32], std: &[f32]) -> Vec<f64> {
    let c = mean.len();
    x.iter().enumerate().map(|(i, &v)| (v as f64 / 255.0 - mean[i % c] as f64) / std[i % c] as f64).collect()
}

#[test]
fn normalize_u8_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(31);
        // 45, 3, 90, 252 and 1001 bytes: every remainder modulo 4
        for shape in [[1, 3, 5, 3], [3, 1, 1, 1], [2, 3, 3, 5], [1, 7, 9, 4], [1, 7, 11, 13]] {
            let n: usize = shape.iter().product();
            let c = shape[3];
            let x: Vec<u8> = (0..n).map(|i| if i < 2 { [0, 255][i] } else { r.random() }).collect();
            let mean: Vec<f32> = (0..c).map(|_| r.random_range(0.0..1.0)).collect();
            let std: Vec<f32> = (0..c).map(|_| r.random_range(0.1..0.5)).collect();
            let (tx, ty) = (d.upload_u8(&shape, &x).unwrap(), upload(&vec![7.0; n], &shape));
            run(&[image::normalize_u8(&d, &tx, &mean, &std, &ty).unwrap()]);
            let e = assert_close(&format!("normalize_u8 {shape:?}"), &read(&ty), &reference(&x, &mean, &std));
            println!("normalize_u8 {shape:?}: {e:.1e}");
        }
    });
}

/// `reference` laid out with `padded` channels a pixel, zero past the image's.
pub(crate) fn padded_reference(x: &[u8], mean: &[f32], std: &[f32], padded: usize) -> Vec<f64> {
    let c = mean.len();
    reference(x, mean, std).chunks(c).flat_map(|px| px.iter().copied().chain(std::iter::repeat_n(0.0, padded - c))).collect()
}

/// The f16 output within one f16 rounding of the f64 values, its zero channels exactly zero
/// over a stale buffer, on channel counts padded to 4 and 8 and left as they are.
#[test]
fn normalize_u8_to_padded_f16_matches_reference() {
    on_each_variant(|_| {
        let d = device();
        let mut r = rng(37);
        for (shape, padded) in [([1, 3, 5, 3], 4), ([3, 1, 1, 1], 2), ([2, 3, 3, 5], 8), ([1, 7, 9, 4], 4), ([1, 7, 11, 3], 8), ([250, 2, 3, 3], 4)] {
            let n: usize = shape.iter().product();
            let c = shape[3];
            let x: Vec<u8> = (0..n).map(|i| if i < 2 { [0, 255][i] } else { r.random() }).collect();
            let mean: Vec<f32> = (0..c).map(|_| r.random_range(0.0..1.0)).collect();
            let std: Vec<f32> = (0..c).map(|_| r.random_range(0.1..0.5)).collect();
            let out = [shape[0], shape[1], shape[2], padded];
            let tx = d.upload_u8(&shape, &x).unwrap();
            let ty = upload_f16(&vec![f32::NAN; out.iter().product()], &out);
            run(&[image::normalize_u8(&d, &tx, &mean, &std, &ty).unwrap()]);
            let (got, want) = (read_f16(&ty), padded_reference(&x, &mean, &std, padded));
            let e = assert_close_f16(&format!("normalize_u8 f16 {shape:?} -> {padded}"), &got, &want, 2f64.powi(-25));
            assert!(got.iter().zip(&want).all(|(g, w)| *w != 0.0 || *g == 0.0), "{shape:?}: a padding channel is not zero");
            println!("normalize_u8 f16 {shape:?} -> {padded}: {e:.2} of the f16 bound");
        }
    });
}

#[test]
fn normalize_u8_reads_a_view_at_its_offset() {
    on_each_variant(|_| {
        let d = device();
        let shape = [1, 3, 5, 3];
        let bytes: Vec<u8> = (0..300 + 45).map(|i| (i * 7 % 256) as u8).collect();
        let whole = d.upload_u8(&[bytes.len()], &bytes).unwrap();
        let x = whole.view(256, &shape).unwrap();
        let y = d.zeros(&shape).unwrap();
        let (mean, std) = ([0.4914, 0.4822, 0.4465], [0.247, 0.243, 0.261]);
        run(&[image::normalize_u8(&d, &x, &mean, &std, &y).unwrap()]);
        assert_close("normalize_u8 of a view", &read(&y), &reference(&bytes[256..256 + 45], &mean, &std));
    });
}

#[test]
fn bad_shapes_are_errors() {
    let d = device();
    let x = d.zeros_of(&[1, 3, 5, 3], DType::U8).unwrap();
    let y = d.zeros(&[1, 3, 5, 3]).unwrap();
    let (m, s) = ([0.5; 3], [0.25; 3]);
    assert!(image::normalize_u8(&d, &x, &m, &s, &y).is_ok());
    let e = image::normalize_u8(&d, &x, &m, &s, &d.zeros(&[1, 5, 3, 3]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("[1, 5, 3, 3]") && e.contains("[1, 3, 5, 3]"), "names the shapes: {e}");
    assert!(image::normalize_u8(&d, &x, &m[..2], &s, &y).is_err(), "two means for three channels");
    assert!(image::normalize_u8(&d, &x, &m, &[0.25, 0.0, 0.25], &y).is_err(), "zero std");
    assert!(image::normalize_u8(&d, &y, &m, &s, &y).is_err(), "f32 input");
    assert!(image::normalize_u8(&d, &x.reshape(&[15, 3]).unwrap(), &m, &s, &y.reshape(&[15, 3]).unwrap()).is_err(), "2-d input");
    assert!(image::normalize_u8(&d, &x, &m, &s, &d.zeros_of(&[1, 3, 5, 4], DType::F16).unwrap()).is_ok(), "f16 padded to a quad");
    let e = image::normalize_u8(&d, &x, &m, &s, &d.zeros(&[1, 3, 5, 4]).unwrap()).unwrap_err().to_string();
    assert!(e.contains("[1, 3, 5, 4]") && e.contains("[1, 3, 5, 3]"), "only an f16 y is padded: {e}");
    for narrow in [[1, 3, 5, 2], [1, 3, 5, 5]] {
        assert!(image::normalize_u8(&d, &x, &m, &s, &d.zeros_of(&narrow, DType::F16).unwrap()).is_err(), "f16 y {narrow:?}: fewer or an odd count of channels");
    }
}
