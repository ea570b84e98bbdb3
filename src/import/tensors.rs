//! A tensor's values as f32, whatever float type PyTorch saved it in: F32 as it is, F16 and
//! BF16 widened (exactly), F64 rounded to the nearest f32.

use safetensors::tensor::{Dtype, TensorView};

use crate::device::half::f16_value;

/// The values of `t`, or `None` when it does not hold floats.
pub(crate) fn widen(t: &TensorView) -> Option<Vec<f32>> {
    let d = t.data();
    Some(match t.dtype() {
        Dtype::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        // bfloat16 is the top half of an f32.
        Dtype::BF16 => d.chunks_exact(2).map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)).collect(),
        Dtype::F16 => d.chunks_exact(2).map(|c| f16_value(u16::from_le_bytes([c[0], c[1]]))).collect(),
        Dtype::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use crate::device::half::f16_value;

    #[test]
    fn half_precision_widens_exactly() {
        for (bits, v) in [(0x3c00u16, 1.0f32), (0xc000, -2.0), (0x3555, 0.333_251_95), (0x0001, 5.960_464_5e-8), (0x7bff, 65504.0), (0x8000, -0.0)] {
            assert_eq!(f16_value(bits).to_bits(), v.to_bits(), "{bits:#06x}");
        }
        assert_eq!(f16_value(0x7c00), f32::INFINITY);
        assert!(f16_value(0x7e00).is_nan());
    }
}
