//! Q4_1: 32 weights in 20 bytes.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..4    m: f16 minimum, little-endian
//!   bytes 4..20   qs: 16 bytes; byte j holds weight j in its low nibble and weight j + 16 in
//!                 its high nibble
//!
//! weight = nibble · d + m. The reference quantizer (ggml's `quantize_row_q4_1_ref`) takes
//! m = the block's minimum and d = (max - min) / 15, so both extremes map onto levels 0 and 15.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 20;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((q, y0), y1) in b[4..BLOCK_BYTES].iter().zip(lo).zip(hi) {
        *y0 = (q & 0x0f) as f32 * d + m;
        *y1 = (q >> 4) as f32 * d + m;
    }
}

/// The block's minimum and maximum, as ggml's loop finds them.
pub(super) fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    })
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (d_bytes, _) = encode_scale(d)?;
    let (m_bytes, _) = encode_scale(min)?;
    b[..2].copy_from_slice(&d_bytes);
    b[2..4].copy_from_slice(&m_bytes);
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for ((x0, x1), q) in lo.iter().zip(hi).zip(&mut b[4..BLOCK_BYTES]) {
        // (x - min)·id lies in [0, 15]: +0.5 and truncation round half up, 16 clamps to 15.
        let q0 = (((x0 - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (((x1 - min) * id + 0.5) as i8).min(15) as u8;
        *q = q0 | (q1 << 4);
    }
    Ok(())
}
