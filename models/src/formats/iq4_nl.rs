//! IQ4_NL: 32 weights in 18 bytes, non-linear 4-bit levels.
//!
//!   bytes 0..2    d: f16 scale, little-endian
//!   bytes 2..18   qs: 16 bytes; byte j holds weight j's index in its low nibble and weight
//!                 j + 16's in its high nibble (Q4_0's layout)
//!
//! weight = d · VALUES[index] with ggml's signed table `kvalues_iq4nl` ([`VALUES`]). The
//! quantizer is ggml's `quantize_iq4_nl` without an importance matrix (what llama-quantize
//! runs): see [`super::iq4_search`].

use super::half_floats::{f16_at, ScaleOverflow};
use super::iq4_search::{quantize_super_block, VALUES};

pub(super) const BLOCK_ELEMS: usize = 32;
pub(super) const BLOCK_BYTES: usize = 18;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (lo, hi) = y.split_at_mut(BLOCK_ELEMS / 2);
    for ((q, y0), y1) in b[2..BLOCK_BYTES].iter().zip(lo).zip(hi) {
        *y0 = d * f32::from(VALUES[usize::from(q & 0x0f)]);
        *y1 = d * f32::from(VALUES[usize::from(q >> 4)]);
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let (head, qs) = b.split_at_mut(2);
    let mut d = [0u8; 2];
    quantize_super_block(x, &mut d, qs, None)?;
    head.copy_from_slice(&d);
    Ok(())
}
