//! Q4_K: 256 weights (8 sub-blocks of 32) in 144 bytes.
//!
//!   bytes   0..2     d: f16 super-block scale of the sub-block scales, little-endian
//!   bytes   2..4     dmin: f16 super-block scale of the sub-block mins, little-endian
//!   bytes   4..16    8 × (6-bit scale, 6-bit min), packed as in `k_quant_scales`
//!   bytes  16..144   qs: 128 bytes in 4 groups of 32; byte l of group g holds weight 64g + l in
//!                    its low nibble and weight 64g + 32 + l in its high nibble
//!
//! weight in sub-block j = d·scale[j]·q - dmin·min[j], q in 0..16. The reference quantizer
//! (ggml's `quantize_row_q4_K_ref`) fits (scale, min) per sub-block with `make_qkx2_quants`,
//! quantizes them to 6 bits relative to the largest, then re-rounds every weight against the
//! stored (rounded) scale and min.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};
use super::k_quant_scales::{self, SCALES_BYTES};
use super::scale_search::{make_qkx2_quants, nearest_int, Qkx2Search};

pub(super) const BLOCK_ELEMS: usize = 256;
pub(super) const BLOCK_BYTES: usize = 144;
const SUB: usize = 32;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..4 + SCALES_BYTES];
    let qs = &b[16..BLOCK_BYTES];
    for (g, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = k_quant_scales::scale_min(scales, 2 * g);
        let (sc2, m2) = k_quant_scales::scale_min(scales, 2 * g + 1);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let (lo, hi) = y.split_at_mut(32);
        for ((q, y0), y1) in q.iter().zip(lo).zip(hi) {
            *y0 = d1 * (q & 0x0f) as f32 - min1;
            *y1 = d2 * (q >> 4) as f32 - min2;
        }
    }
}

/// What Q4_K and Q5_K share: a super-block of 8 sub-blocks, each `x ≈ d·scale·q - dmin·min`.
pub(super) struct MinScaleFit {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; SCALES_BYTES],
    /// The level of every weight, 0..=nmax.
    pub levels: [u8; BLOCK_ELEMS],
}

/// The reference fit of ggml's `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref` (they differ only
/// in `search`).
pub(super) fn fit_min_scale(x: &[f32], search: &Qkx2Search) -> Result<MinScaleFit, ScaleOverflow> {
    let mut levels = [0u8; BLOCK_ELEMS];
    let mut aux = [0u8; SUB];
    let mut weights = [0.0f32; SUB];
    let mut scales = [0.0f32; 8];
    let mut mins = [0.0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs = &x[SUB * j..SUB * (j + 1)];
        let mut sum_x2 = 0.0f32;
        for v in xs {
            sum_x2 += v * v;
        }
        // Weights favour large values, with a floor of the sub-block's RMS.
        let av_x = (sum_x2 / SUB as f32).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let l = &mut levels[SUB * j..SUB * (j + 1)];
        (scales[j], mins[j]) = make_qkx2_quants(search, xs, &weights, l, &mut aux);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        // ggml stores nearest_int into a uint8_t before clamping: keep its wrap-around.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let (d_bytes, d) = encode_scale(max_scale / 63.0)?;
    let (dmin_bytes, dmin) = encode_scale(max_min / 63.0)?;

    // Re-round every weight against the scale and min as they will be decoded.
    let nmax = search.nmax;
    for j in 0..8 {
        let dj = d * ls[j] as f32;
        if dj == 0.0 {
            continue; // keep the fit's levels; they all decode to -dmin·min anyway
        }
        let mj = dmin * lm[j] as f32;
        for (l, v) in levels[SUB * j..SUB * (j + 1)]
            .iter_mut()
            .zip(&x[SUB * j..SUB * (j + 1)])
        {
            *l = nearest_int((v + mj) / dj).clamp(0, nmax) as u8;
        }
    }
    Ok(MinScaleFit {
        d: d_bytes,
        dmin: dmin_bytes,
        scales: k_quant_scales::pack(&ls, &lm),
        levels,
    })
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    let search = Qkx2Search {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
    };
    let fit = fit_min_scale(x, &search)?;
    b[0..2].copy_from_slice(&fit.d);
    b[2..4].copy_from_slice(&fit.dmin);
    b[4..16].copy_from_slice(&fit.scales);
    for (g, q) in b[16..BLOCK_BYTES].chunks_exact_mut(32).enumerate() {
        let l = &fit.levels[64 * g..64 * (g + 1)];
        for (i, q) in q.iter_mut().enumerate() {
            *q = l[i] | (l[i + 32] << 4);
        }
    }
    Ok(())
}
