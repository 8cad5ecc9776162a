//! Q5_1: 32 weights in 24 bytes.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..4    m: f16 minimum, little-endian
//!   bytes 4..8    qh: u32, little-endian; bit j is the 5th (high) bit of weight j
//!   bytes 8..24   qs: 16 bytes; byte j holds the low 4 bits of weight j in its low nibble and
//!                 of weight j + 16 in its high nibble
//!
//! weight = q · d + m with q in 0..32. The reference quantizer (ggml's `quantize_row_q5_1_ref`)
//! takes m = the block's minimum and d = (max - min) / 31.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};
use super::q4_1::min_max;

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 24;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for (j, ((q, y0), y1)) in b[8..BLOCK_BYTES].iter().zip(lo).zip(hi).enumerate() {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        *y0 = ((q & 0x0f) as u32 | h0) as f32 * d + m;
        *y1 = ((q >> 4) as u32 | h1) as f32 * d + m;
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (d_bytes, _) = encode_scale(d)?;
    let (m_bytes, _) = encode_scale(min)?;
    b[..2].copy_from_slice(&d_bytes);
    b[2..4].copy_from_slice(&m_bytes);
    let mut qh = 0u32;
    let (lo, hi) = x.split_at(BLOCK_ELEMS / 2);
    for (j, ((x0, x1), q)) in lo.iter().zip(hi).zip(&mut b[8..BLOCK_BYTES]).enumerate() {
        // (x - min)·id lies in [0, 31] up to rounding: +0.5 and truncation round half up (ggml
        // has no clamp here; the min keeps a level of 32 out of reach of its f32 rounding).
        let q0 = (((x0 - min) * id + 0.5) as u8).min(31) as u32;
        let q1 = (((x1 - min) * id + 0.5) as u8).min(31) as u32;
        *q = ((q0 & 0x0f) | ((q1 & 0x0f) << 4)) as u8;
        qh |= ((q0 >> 4) & 1) << j;
        qh |= ((q1 >> 4) & 1) << (j + 16);
    }
    b[4..8].copy_from_slice(&qh.to_le_bytes());
    Ok(())
}
