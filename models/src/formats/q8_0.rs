//! Q8_0: 32 weights in 34 bytes.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..34   qs: 32 × i8
//!
//! weight[j] = qs[j] · d. The reference quantizer (ggml's `quantize_row_q8_0_ref`) takes
//! d = max|x| / 127 and qs = round-half-away(x / d).

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 34;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (q, y) in b[2..BLOCK_BYTES].iter().zip(y) {
        *y = (*q as i8) as f32 * d;
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    // The quants use the unrounded scale; only the stored one is rounded to f16.
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (d_bytes, _) = encode_scale(d)?;
    b[..2].copy_from_slice(&d_bytes);
    for (v, q) in x.iter().zip(&mut b[2..BLOCK_BYTES]) {
        // |v·id| ≤ 127 (up to rounding, which `round` cannot push past 127.5), so the cast is exact.
        *q = (v * id).round() as i8 as u8;
    }
    Ok(())
}
