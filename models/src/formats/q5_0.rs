//! Q5_0: 32 weights in 22 bytes.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..6    qh: u32, little-endian; bit j is the 5th (high) bit of weight j
//!   bytes 6..22   qs: 16 bytes; byte j holds the low 4 bits of weight j in its low nibble and
//!                 of weight j + 16 in its high nibble
//!
//! weight = (q - 16) · d with q in 0..32. The reference quantizer (ggml's
//! `quantize_row_q5_0_ref`) takes d = m / -16 where m is the value of largest magnitude.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};
use super::q4_0::signed_absmax;

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 22;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for (j, ((q, y0), y1)) in b[6..BLOCK_BYTES].iter().zip(lo).zip(hi).enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        *y0 = (((q & 0x0f) as u32 | h0) as i32 - 16) as f32 * d;
        *y1 = (((q >> 4) as u32 | h1) as i32 - 16) as f32 * d;
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let d = signed_absmax(x) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (d_bytes, _) = encode_scale(d)?;
    b[..2].copy_from_slice(&d_bytes);
    let mut qh = 0u32;
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for (j, ((x0, x1), q)) in lo.iter().zip(hi).zip(&mut b[6..BLOCK_BYTES]).enumerate() {
        // x·id lies in [-16, 16]: +16.5 and truncation round half up onto 0..=32, 32 clamps to 31.
        let q0 = ((x0 * id + 16.5) as i8).min(31) as u32;
        let q1 = ((x1 * id + 16.5) as i8).min(31) as u32;
        *q = ((q0 & 0x0f) | ((q1 & 0x0f) << 4)) as u8;
        qh |= (q0 >> 4) << j;
        qh |= (q1 >> 4) << (j + 16);
    }
    b[2..6].copy_from_slice(&qh.to_le_bytes());
    Ok(())
}
