//! Q5_K: 256 weights (8 sub-blocks of 32) in 176 bytes.
//!
//!   bytes   0..2     d: f16 super-block scale of the sub-block scales, little-endian
//!   bytes   2..4     dmin: f16 super-block scale of the sub-block mins, little-endian
//!   bytes   4..16    8 × (6-bit scale, 6-bit min), packed as in `k_quant_scales`
//!   bytes  16..48    qh: 32 bytes; bit 2g of byte l is the high bit of weight 64g + l, bit 2g+1
//!                    that of weight 64g + 32 + l (g = 0..4)
//!   bytes  48..176   qs: low 4 bits, laid out as Q4_K's qs
//!
//! weight in sub-block j = d·scale[j]·q - dmin·min[j], q in 0..32. Quantized like Q4_K (ggml's
//! `quantize_row_q5_K_ref`) with 31 levels and its own search range.

use super::half_floats::{f16_at, ScaleOverflow};
use super::k_quant_scales::{self, SCALES_BYTES};
use super::q4_k::fit_min_scale;
use super::scale_search::Qkx2Search;

pub(super) const BLOCK_ELEMS: usize = 256;
pub(super) const BLOCK_BYTES: usize = 176;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..4 + SCALES_BYTES];
    let qh = &b[16..48];
    let qs = &b[48..BLOCK_BYTES];
    for (g, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = k_quant_scales::scale_min(scales, 2 * g);
        let (sc2, m2) = k_quant_scales::scale_min(scales, 2 * g + 1);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (lo, hi) = y.split_at_mut(32);
        for (((q, h), y0), y1) in q.iter().zip(qh).zip(lo).zip(hi) {
            // Bits 2g and 2g+1 of qh are the 5th bits (value 16) of the two weights.
            let q0 = (q & 0x0f) | (((h >> (2 * g)) & 1) << 4);
            let q1 = (q >> 4) | (((h >> (2 * g + 1)) & 1) << 4);
            *y0 = d1 * q0 as f32 - min1;
            *y1 = d2 * q1 as f32 - min2;
        }
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let search = Qkx2Search {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
    };
    let fit = fit_min_scale(x, &search)?;
    b[0..2].copy_from_slice(&fit.d);
    b[2..4].copy_from_slice(&fit.dmin);
    b[4..16].copy_from_slice(&fit.scales);
    let (qh, qs) = b[16..BLOCK_BYTES].split_at_mut(32);
    qh.fill(0);
    for (g, q) in qs.chunks_exact_mut(32).enumerate() {
        let l = &fit.levels[64 * g..64 * (g + 1)];
        let (m1, m2) = (1u8 << (2 * g), 2u8 << (2 * g));
        for (i, q) in q.iter_mut().enumerate() {
            let (mut l1, mut l2) = (l[i], l[i + 32]);
            if l1 > 15 {
                l1 -= 16;
                qh[i] |= m1;
            }
            if l2 > 15 {
                l2 -= 16;
                qh[i] |= m2;
            }
            *q = l1 | (l2 << 4);
        }
    }
    Ok(())
}
