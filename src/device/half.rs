//! IEEE binary16 on the host: the bits of an f32 rounded to f16 and back, as the device's
//! f16 tensors ([`super::DType::F16`]) and `shaders/cast.wgsl` store them.
//!
//! The rounding is to nearest, ties to even, as the tensor cores and `shaders/conv2d.wgsl`'s
//! `round_f16` make it: from 65520 up a value becomes infinite (what loss scaling watches
//! for), below 2^-14 it is a multiple of 2^-24 (f16's subnormals), and a NaN stays a NaN
//! (quiet, its sign kept).

/// The f16 bits nearest to `x`.
pub fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let magnitude = bits & 0x7fff_ffff;
    if magnitude > 0x7f80_0000 {
        // NaN: quiet, with the top of its payload.
        return sign | 0x7e00 | ((magnitude >> 13) & 0x01ff) as u16;
    }
    if magnitude >= 0x477f_f000 {
        // 65520 and up (infinity included) rounds to infinity.
        return sign | 0x7c00;
    }
    if magnitude < 0x3880_0000 {
        // Below 2^-14: a multiple of 2^-24, ties to even (the scaling is exact).
        let scaled = f32::from_bits(magnitude) * 16_777_216.0;
        return sign | scaled.round_ties_even() as u16;
    }
    // Normal: rebias the exponent (127 -> 15), keep 10 of the 23 mantissa bits, ties to
    // even; a carry out of the mantissa moves the exponent up, as it should.
    let odd = (magnitude >> 13) & 1;
    let rounded = (magnitude + 0x0fff + odd) >> 13;
    sign | (rounded - ((127 - 15) << 10)) as u16
}

/// The value of f16 `bits` (exact in f32).
pub fn f16_value(bits: u16) -> f32 {
    let sign = ((bits & 0x8000) as u32) << 16;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x03ff) as u32;
    let magnitude = match exponent {
        0 => return f32::from_bits(sign) + if sign == 0 { 1.0 } else { -1.0 } * mantissa as f32 / 16_777_216.0,
        0x1f => 0x7f80_0000 | mantissa << 13,
        _ => (exponent + 127 - 15) << 23 | mantissa << 13,
    };
    f32::from_bits(sign | magnitude)
}

#[cfg(test)]
mod tests {
    use super::{f16_bits, f16_value};

    /// `x` rounded to f16 by f64 arithmetic: the reference the bit rounding must meet.
    fn rounded(x: f32) -> f32 {
        let a = x.abs() as f64;
        if a >= 65520.0 {
            return f32::INFINITY.copysign(x);
        }
        let quantum = if a < 2f64.powi(-14) { 2f64.powi(-24) } else { 2f64.powi(a.log2().floor() as i32 - 10) };
        ((x as f64 / quantum).round_ties_even() * quantum) as f32
    }

    #[test]
    fn every_f16_survives_the_round_trip() {
        for bits in 0..=u16::MAX {
            let v = f16_value(bits);
            if v.is_nan() {
                assert!(f16_value(f16_bits(v)).is_nan(), "{bits:#06x}");
                assert_eq!(f16_bits(v) & 0x8000, bits & 0x8000, "{bits:#06x}: the sign of a NaN");
            } else {
                assert_eq!(f16_bits(v), bits, "{bits:#06x} = {v:e}");
            }
        }
    }

    #[test]
    fn values_between_round_to_nearest_even() {
        // Every f32 halfway and quarter way between neighbouring f16 values, both signs, and
        // a sweep of f32 bit patterns across f16's whole range.
        let mut checked = 0;
        for bits in (0..0x7c00u16).step_by(7) {
            let (lo, hi) = (f16_value(bits), f16_value(bits + 1));
            for t in [0.25f64, 0.5, 0.75] {
                let x = (lo as f64 + t * (hi as f64 - lo as f64)) as f32;
                for x in [x, -x] {
                    assert_eq!(f16_value(f16_bits(x)), rounded(x), "{x:e} between {lo:e} and {hi:e}");
                    checked += 1;
                }
            }
        }
        for bits in (0x3300_0000u32..0x4790_0000).step_by(4099) {
            let x = f32::from_bits(bits);
            assert_eq!(f16_value(f16_bits(x)), rounded(x), "{x:e}");
            checked += 1;
        }
        assert!(checked > 30_000, "{checked}");
        // The ties themselves: 1 + 2^-11 lies between 1 and 1 + 2^-10 and goes to even (1).
        assert_eq!(f16_value(f16_bits(1.0 + 1.0 / 2048.0)), 1.0);
        assert_eq!(f16_value(f16_bits(1.0 + 3.0 / 2048.0)), 1.0 + 2.0 / 1024.0);
        assert_eq!(f16_value(f16_bits(65519.0)), 65504.0);
        assert_eq!(f16_value(f16_bits(-65520.0)), f32::NEG_INFINITY);
        assert_eq!(f16_value(f16_bits(1e-8)), 0.0);
        assert_eq!(f16_bits(-0.0), 0x8000);
        // NVIDIA's canonical NaN, whose mantissa is all ones, stays a NaN.
        assert!(f16_value(f16_bits(f32::from_bits(0x7fff_ffff))).is_nan());
        assert!(f16_value(f16_bits(f32::from_bits(0xffff_ffff))).is_nan());
    }
}
