//! f32 <-> f16 casts (`kernels::cast`) against the host's conversion (`device::half`), bit
//! for bit: every f16 pattern widened, f32 values of every range rounded (ties, the overflow
//! boundary, subnormals, NaNs of both signs), odd counts whose last word is half empty.

use convoy::device::half::{f16_bits, f16_value};
use convoy::kernels::cast;
use convoy::DType;

use crate::common::*;

/// Whether `got` is `want`'s value bit for bit, or both are NaN.
fn same(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

#[test]
fn every_f16_widens_exactly() {
    let values: Vec<f32> = (0..=u16::MAX).map(f16_value).collect();
    on_sweep_variants(|_| {
        let d = device();
        let x = d.upload_f16(&[values.len()], &values).unwrap();
        let out = upload(&vec![0.5; values.len()], &[values.len()]);
        run(&[cast::from_f16(&d, &x, &out).unwrap()]);
        let got = read(&out);
        for (bits, (&g, &w)) in got.iter().zip(&values).enumerate() {
            assert!(same(g, w), "{bits:#06x}: {g:e}, expected {w:e}");
        }
    });
}

#[test]
fn f32_values_round_to_nearest_even_as_on_the_host() {
    let mut values = vec![
        0.0, -0.0, 1.0, -1.0, 1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e9,
        f32::INFINITY, f32::NEG_INFINITY, 6.1e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-10, f32::MIN_POSITIVE / 4.0,
        f32::from_bits(0x7fff_ffff), f32::from_bits(0xffff_ffff), f32::from_bits(0x7f80_0001), f32::NAN,
    ];
    // Halfway and quarter way between neighbouring f16 values across the whole range.
    for bits in (0..0x7c00u16).step_by(13) {
        let (lo, hi) = (f16_value(bits) as f64, f16_value(bits + 1) as f64);
        for t in [0.25, 0.5, 0.75] {
            let x = (lo + t * (hi - lo)) as f32;
            values.extend([x, -x]);
        }
    }
    let mut r = rng(5);
    values.extend(random(&mut r, 4001).iter().map(|v| v * 70_000.0));
    for n in [values.len(), values.len() - 1, 1] {
        on_sweep_variants(|_| {
            let d = device();
            let x = upload(&values[..n], &[n]);
            let out = d.zeros_of(&[n], DType::F16).unwrap();
            let back = upload(&vec![0.5; n], &[n]);
            run(&[cast::to_f16(&d, &x, &out).unwrap(), cast::from_f16(&d, &out, &back).unwrap()]);
            let (stored, widened) = (d.read_f16(&out).unwrap(), read(&back));
            for (i, &v) in values[..n].iter().enumerate() {
                let want = f16_value(f16_bits(v));
                assert!(same(stored[i], want), "{v:e} (element {i} of {n}): stored {:e}, expected {want:e}", stored[i]);
                assert!(same(widened[i], want), "{v:e} (element {i} of {n}): widened {:e}, expected {want:e}", widened[i]);
            }
        });
    }
}

#[test]
fn bad_operands_are_errors_naming_them() {
    let d = device();
    let (x, h) = (upload(&[1.0; 6], &[6]), d.zeros_of(&[6], DType::F16).unwrap());
    let err = cast::to_f16(&d, &h, &x).unwrap_err().to_string();
    assert!(err.contains("to_f16") && err.contains("F16") && err.contains("F32"), "{err}");
    let short = d.zeros_of(&[5], DType::F16).unwrap();
    let err = cast::to_f16(&d, &x, &short).unwrap_err().to_string();
    assert!(err.contains("[6]") && err.contains("[5]"), "{err}");
    let err = cast::from_f16(&d, &x, &x).unwrap_err().to_string();
    assert!(err.contains("from_f16"), "{err}");
    assert!(d.read_f16(&x).is_err() && d.read(&h).is_err());
}
