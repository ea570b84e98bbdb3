// IEEE binary16 as bits in the low half of a u32, bit for bit what src/device/half.rs
// computes on the host: to nearest, ties to even; from 65520 up infinite (what loss scaling
// watches for); below 2^-14 a multiple of 2^-24; a NaN stays a quiet NaN with its sign.
// WGSL's pack2x16float leaves a value past f16's range indeterminate, so the rounding is
// done on the bits.

fn half_bits(x: f32) -> u32 {
    let bits = bitcast<u32>(x);
    let sign = (bits >> 16u) & 0x8000u;
    let magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) {
        return sign | 0x7e00u | ((magnitude >> 13u) & 0x1ffu);
    }
    if (magnitude >= 0x477ff000u) {
        return sign | 0x7c00u;
    }
    if (magnitude < 0x38800000u) {
        // Scaling by 2^24 is exact; `round` breaks ties to even.
        return sign | u32(round(bitcast<f32>(magnitude) * 16777216.0));
    }
    // Rebias the exponent (127 -> 15), keep 10 of 23 mantissa bits, ties to even; a carry
    // out of the mantissa moves the exponent up.
    let odd = (magnitude >> 13u) & 1u;
    return sign | (((magnitude + 0x0fffu + odd) >> 13u) - (112u << 10u));
}

fn half_value(h: u32) -> f32 {
    let negative = (h & 0x8000u) != 0u;
    let exponent = (h >> 10u) & 0x1fu;
    let mantissa = h & 0x3ffu;
    if (exponent == 0u) {
        // Subnormal or zero: mantissa * 2^-24, exact in f32 (and -0.0 for a signed zero).
        let v = f32(mantissa) / 16777216.0;
        return select(v, -v, negative);
    }
    let sign = select(0u, 0x80000000u, negative);
    if (exponent == 0x1fu) {
        return bitcast<f32>(sign | 0x7f800000u | (mantissa << 13u));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mantissa << 13u));
}
