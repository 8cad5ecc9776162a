//! Element-wise float formats, one element per "block":
//!   F32:  4 bytes, little-endian IEEE-754 binary32.
//!   F16:  2 bytes, little-endian IEEE-754 binary16 (1 sign, 5 exponent, 10 mantissa bits).
//!   BF16: 2 bytes, little-endian bfloat16: the top 16 bits of a binary32.
//!
//! Also the f16 helpers the block formats use for their scales.

use half::f16;

/// f16 at `bytes[offset..offset + 2]` (little-endian), widened exactly to f32.
#[inline]
pub(super) fn f16_at(bytes: &[u8], offset: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[offset], bytes[offset + 1]])).to_f32()
}

/// Round to f16, nearest-even: what ggml's `GGML_FP32_TO_FP16` does (F16C `vcvtps2ph` with
/// rounding mode 0, or its portable fallback).
#[inline]
pub(super) fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaNs kept NaN and made quiet.
/// Spelled out rather than taken from `half` so that NaN handling provably matches ggml.
#[inline]
pub(super) fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    // No overflow: the largest non-NaN pattern, 0xff80_0000, plus 0x8000 stays below 2^32.
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// A block scale that does not fit in f16 (it would be stored as infinity).
#[derive(Debug, Clone, Copy)]
pub(super) struct ScaleOverflow(pub f32);

/// A block scale as the 2 little-endian bytes of its f16, and its value after that rounding.
#[inline]
pub(super) fn encode_scale(d: f32) -> Result<([u8; 2], f32), ScaleOverflow> {
    let h = f16::from_f32(d);
    if !h.is_finite() {
        return Err(ScaleOverflow(d));
    }
    Ok((h.to_bits().to_le_bytes(), h.to_f32()))
}

pub(super) fn dequantize_f32(data: &[u8], out: &mut [f32]) {
    for (b, y) in data.chunks_exact(4).zip(out) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(super) fn dequantize_f16(data: &[u8], out: &mut [f32]) {
    for (i, y) in out.iter_mut().enumerate() {
        *y = f16_at(data, 2 * i);
    }
}

pub(super) fn dequantize_bf16(data: &[u8], out: &mut [f32]) {
    for (b, y) in data.chunks_exact(2).zip(out) {
        *y = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    }
}

pub(super) fn quantize_f32(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

pub(super) fn quantize_f16(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_f16_bits(*x).to_le_bytes());
    }
}

pub(super) fn quantize_bf16(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16_bits(*x).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nans() {
        // 1 + 2^-8 is exactly half-way between bf16 1.0 and 1 + 2^-7: ties go to the even 1.0.
        assert_eq!(f32_to_bf16_bits(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3*2^-8 is half-way between 1 + 2^-7 (odd) and 1 + 2^-6: goes up to even.
        assert_eq!(f32_to_bf16_bits(1.0 + 3.0 / 256.0), 0x3f82);
        // A signalling NaN (quiet bit clear, payload only in the low half) stays a NaN.
        let snan = f32::from_bits(0x7f80_0001);
        assert_eq!(f32_to_bf16_bits(snan), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16_bits(-0.0), 0x8000);
    }

    #[test]
    fn scale_beyond_f16_range_is_rejected() {
        assert!(encode_scale(65504.0).is_ok());
        // 65520 is the rounding boundary: it and everything above round to infinity.
        assert!(encode_scale(65520.0).is_err());
        let (bytes, value) = encode_scale(1.0 / 3.0).unwrap();
        assert_eq!(u16::from_le_bytes(bytes), 0x3555);
        assert_eq!(value, f16::from_bits(0x3555).to_f32());
    }
}
