//! IQ4_XS: 256 weights (8 sub-blocks of 32) in 136 bytes, IQ4_NL's levels with 6-bit
//! sub-block scales.
//!
//!   bytes 0..2     d: f16 super-block scale, little-endian
//!   bytes 2..4     scales_h: u16, bits 2s..2s+2 are the high 2 bits of sub-block s's scale
//!   bytes 4..8     scales_l: nibble s (byte s/2, low nibble for even s) is its low 4 bits
//!   bytes 8..136   qs: 16 bytes per sub-block, IQ4_NL's nibble layout
//!
//! weight in sub-block s = d·(ls - 32)·VALUES[index], ls the 6-bit scale. The quantizer is
//! ggml's `quantize_iq4_xs` without an importance matrix: see [`super::iq4_search`].

use super::half_floats::{f16_at, ScaleOverflow};
use super::iq4_search::{quantize_super_block, SubScales, VALUES};

pub(super) const BLOCK_ELEMS: usize = 256;
pub(super) const BLOCK_BYTES: usize = 136;

/// The 6-bit scale of sub-block `s` (0..64; the stored value is `ls - 32`).
pub(super) fn sub_scale(b: &[u8], s: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + s / 2] >> (4 * (s % 2))) & 0x0f;
    let hi = ((scales_h >> (2 * s)) & 3) as u8;
    i32::from(lo | (hi << 4))
}

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (s, ys) in y.chunks_exact_mut(32).enumerate() {
        let dl = d * (sub_scale(b, s) - 32) as f32;
        let qs = &b[8 + 16 * s..8 + 16 * (s + 1)];
        let (lo, hi) = ys.split_at_mut(16);
        for ((q, y0), y1) in qs.iter().zip(lo).zip(hi) {
            *y0 = dl * f32::from(VALUES[usize::from(q & 0x0f)]);
            *y1 = dl * f32::from(VALUES[usize::from(q >> 4)]);
        }
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let (head, qs) = b.split_at_mut(8);
    let mut d = [0u8; 2];
    let mut scales = SubScales::default();
    quantize_super_block(x, &mut d, qs, Some(&mut scales))?;
    head[..2].copy_from_slice(&d);
    head[2..4].copy_from_slice(&scales.high.to_le_bytes());
    head[4..8].copy_from_slice(&scales.low);
    Ok(())
}
