//! Q4_0: 32 weights in 18 bytes.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..18   qs: 16 bytes; byte j holds weight j in its low nibble and weight j + 16 in
//!                 its high nibble
//!
//! weight = (nibble - 8) · d. The reference quantizer (ggml's `quantize_row_q4_0_ref`) takes
//! d = m / -8 where m is the value of largest magnitude, so m itself maps to level -8 exactly and
//! the opposite extreme (+8) is clamped to level 7.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 18;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((q, y0), y1) in b[2..BLOCK_BYTES].iter().zip(lo).zip(hi) {
        *y0 = ((q & 0x0f) as i32 - 8) as f32 * d;
        *y1 = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// The signed value of largest magnitude (the first one on ties), as ggml picks it.
pub(super) fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let d = signed_absmax(x) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (d_bytes, _) = encode_scale(d)?;
    b[..2].copy_from_slice(&d_bytes);
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for ((x0, x1), q) in lo.iter().zip(hi).zip(&mut b[2..BLOCK_BYTES]) {
        // x·id lies in [-8, 8]: +8.5 and truncation round half up onto 0..=16, 16 clamps to 15.
        let q0 = ((x0 * id + 8.5) as i8).min(15) as u8;
        let q1 = ((x1 * id + 8.5) as i8).min(15) as u8;
        *q = q0 | (q1 << 4);
    }
    Ok(())
}
