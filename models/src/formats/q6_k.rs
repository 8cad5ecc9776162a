//! Q6_K: 256 weights (16 sub-blocks of 16) in 210 bytes.
//!
//!   bytes   0..128   ql: low 4 bits, two halves of 64 bytes; in half h, byte l holds weight
//!                    128h + l (low nibble) and 128h + 64 + l (high nibble), and byte 32 + l
//!                    holds weights 128h + 32 + l and 128h + 96 + l (l = 0..32)
//!   bytes 128..192   qh: high 2 bits, two halves of 32 bytes; byte l of half h holds, from
//!                    bit 0 up, those of weights 128h + l, +32, +64, +96
//!   bytes 192..208   scales: 16 × i8, one per sub-block of 16
//!   byte  208..210   d: f16 super-block scale, little-endian
//!
//! weight in sub-block j = d·scales[j]·(q - 32), q in 0..64. The reference quantizer (ggml's
//! `quantize_row_q6_K_ref`) fits each sub-block with `make_qx_quants`, quantizes the 16 scales
//! to i8 relative to the largest, then re-rounds every weight against the stored scale.

use super::half_floats::{encode_scale, f16_at, ScaleOverflow};
use super::scale_search::{make_qx_quants, nearest_int};

pub(super) const BLOCK_ELEMS: usize = 256;
pub(super) const BLOCK_BYTES: usize = 210;
const SUB: usize = 16;

pub(super) fn dequantize_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for h in 0..2 {
        let ql = &b[64 * h..64 * (h + 1)];
        let qh = &b[128 + 32 * h..128 + 32 * (h + 1)];
        let sc = &b[192 + 8 * h..192 + 8 * (h + 1)];
        let y = &mut y[128 * h..128 * (h + 1)];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

pub(super) fn quantize_block(x: &[f32], b: &mut [u8]) -> Result<(), ScaleOverflow> {
    // Levels are stored offset by 32, i.e. 0..64.
    let mut levels = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for (j, scale) in scales.iter_mut().enumerate() {
        let range = SUB * j..SUB * (j + 1);
        *scale = make_qx_quants(32, &x[range.clone()], &mut levels[range]);
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = *scale;
        }
    }
    if max_abs_scale < 1e-15 {
        // All sub-blocks are (numerically) zero: ggml writes an all-zero block.
        b[..BLOCK_BYTES].fill(0);
        return Ok(());
    }

    let iscale = -128.0 / max_scale;
    let (d_bytes, d) = encode_scale(1.0 / iscale)?;
    let mut sc = [0i8; 16];
    for (s, scale) in sc.iter_mut().zip(&scales) {
        // |iscale·scale| ≤ 128; only +128 needs the clamp.
        *s = nearest_int(iscale * scale).min(127) as i8;
    }
    for j in 0..16 {
        let dj = d * sc[j] as f32;
        if dj == 0.0 {
            continue;
        }
        for (l, v) in levels[SUB * j..SUB * (j + 1)]
            .iter_mut()
            .zip(&x[SUB * j..SUB * (j + 1)])
        {
            *l = (nearest_int(v / dj).clamp(-32, 31) + 32) as u8;
        }
    }

    for h in 0..2 {
        let l = &levels[128 * h..128 * (h + 1)];
        for i in 0..32 {
            let (l1, l2, l3, l4) = (l[i], l[i + 32], l[i + 64], l[i + 96]);
            b[64 * h + i] = (l1 & 0x0f) | ((l3 & 0x0f) << 4);
            b[64 * h + i + 32] = (l2 & 0x0f) | ((l4 & 0x0f) << 4);
            b[128 + 32 * h + i] =
                (l1 >> 4) | ((l2 >> 4) << 2) | ((l3 >> 4) << 4) | ((l4 >> 4) << 6);
        }
    }
    for (dst, s) in b[192..208].iter_mut().zip(&sc) {
        *dst = *s as u8;
    }
    b[208..210].copy_from_slice(&d_bytes);
    Ok(())
}
