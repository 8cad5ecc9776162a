//! Small CPU dequantizers: the oracle the CPU references use. Plain, obviously-correct code
//! written from ggml's block layouts (see the parent module); `rocky-models` has the canonical
//! ones, but the compiler cannot depend on it.

use half::f16;
use thiserror::Error;

use super::{WeightFormat, IQ4NL_VALUES};

#[derive(Debug, Error, PartialEq)]
pub enum DequantError {
    #[error("{format}: row length {k} is not a multiple of the block size {block}")]
    RowLength {
        format: WeightFormat,
        k: usize,
        block: u32,
    },
    #[error("{format}: {rows} rows of {k} elements need {needed} bytes, got {got}")]
    TooShort {
        format: WeightFormat,
        rows: usize,
        k: usize,
        needed: usize,
        got: usize,
    },
}

fn f16_at(b: &[u8], o: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32()
}

fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for j in 0..32 {
        out[j] = f32::from(block[2 + j] as i8) * d;
    }
}

fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    for j in 0..16 {
        let lo = u32::from(qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        let hi = u32::from(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        out[j] = (lo as i32 - 16) as f32 * d;
        out[j + 16] = (hi as i32 - 16) as f32 * d;
    }
}

fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    for j in 0..16 {
        out[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qs = &block[4..20];
    for j in 0..16 {
        out[j] = f32::from(qs[j] & 0x0F) * d + m;
        out[j + 16] = f32::from(qs[j] >> 4) * d + m;
    }
}

fn q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let qs = &block[8..24];
    for j in 0..16 {
        let lo = u32::from(qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        let hi = u32::from(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        out[j] = lo as f32 * d + m;
        out[j + 16] = hi as f32 * d + m;
    }
}

fn iq4_nl(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    for j in 0..16 {
        out[j] = d * f32::from(IQ4NL_VALUES[usize::from(qs[j] & 0x0F)]);
        out[j + 16] = d * f32::from(IQ4NL_VALUES[usize::from(qs[j] >> 4)]);
    }
}

fn iq4_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let scales_l = &block[4..8];
    for ib in 0..8 {
        let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let hi = ((scales_h >> (2 * ib)) & 3) as u8;
        let ls = i32::from(lo | (hi << 4));
        let dl = d * (ls - 32) as f32;
        let qs = &block[8 + 16 * ib..8 + 16 * ib + 16];
        for j in 0..16 {
            out[32 * ib + j] = dl * f32::from(IQ4NL_VALUES[usize::from(qs[j] & 0x0F)]);
            out[32 * ib + j + 16] = dl * f32::from(IQ4NL_VALUES[usize::from(qs[j] >> 4)]);
        }
    }
}

/// ggml's get_scale_min_k4: 6-bit scale and min of sub-block `j` from the 12 packed bytes.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn q4_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for p in 0..4 {
        let (sc0, m0) = scale_min_k4(2 * p, scales);
        let (sc1, m1) = scale_min_k4(2 * p + 1, scales);
        let (d0, mm0) = (d * f32::from(sc0), dmin * f32::from(m0));
        let (d1, mm1) = (d * f32::from(sc1), dmin * f32::from(m1));
        for l in 0..32 {
            let q = qs[32 * p + l];
            out[64 * p + l] = d0 * f32::from(q & 0xF) - mm0;
            out[64 * p + 32 + l] = d1 * f32::from(q >> 4) - mm1;
        }
    }
}

fn q5_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for p in 0..4 {
        let (sc0, m0) = scale_min_k4(2 * p, scales);
        let (sc1, m1) = scale_min_k4(2 * p + 1, scales);
        let (d0, mm0) = (d * f32::from(sc0), dmin * f32::from(m0));
        let (d1, mm1) = (d * f32::from(sc1), dmin * f32::from(m1));
        for l in 0..32 {
            let q = qs[32 * p + l];
            // Bit 2p of qh[l] is sub-block 2p's bit 4, bit 2p+1 sub-block 2p+1's.
            let h0 = ((qh[l] >> (2 * p)) & 1) << 4;
            let h1 = ((qh[l] >> (2 * p + 1)) & 1) << 4;
            out[64 * p + l] = d0 * f32::from((q & 0xF) | h0) - mm0;
            out[64 * p + 32 + l] = d1 * f32::from((q >> 4) | h1) - mm1;
        }
    }
}

fn q6_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 208);
    for h in 0..2 {
        let ql = &block[64 * h..64 * h + 64];
        let qh = &block[128 + 32 * h..128 + 32 * h + 32];
        let sc = &block[192 + 8 * h..192 + 8 * h + 8];
        let y = &mut out[128 * h..128 * h + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |i: usize| d * f32::from(sc[i] as i8);
            y[l] = s(is) * q1 as f32;
            y[l + 32] = s(is + 2) * q2 as f32;
            y[l + 64] = s(is + 4) * q3 as f32;
            y[l + 96] = s(is + 6) * q4 as f32;
        }
    }
}

/// Dequantizes `rows` rows of `k` elements stored back to back in `bytes`.
pub fn dequantize(
    format: WeightFormat,
    bytes: &[u8],
    rows: usize,
    k: usize,
) -> Result<Vec<f32>, DequantError> {
    let block = format.block_elems() as usize;
    if k % block != 0 {
        return Err(DequantError::RowLength {
            format,
            k,
            block: block as u32,
        });
    }
    let row_bytes = format.row_bytes(k as u64) as usize;
    let needed = row_bytes * rows;
    if bytes.len() < needed {
        return Err(DequantError::TooShort {
            format,
            rows,
            k,
            needed,
            got: bytes.len(),
        });
    }
    let mut out = vec![0f32; rows * k];
    let bb = format.block_bytes() as usize;
    for (i, chunk) in out.chunks_mut(block).enumerate() {
        let src = &bytes[i * bb..(i + 1) * bb];
        match format {
            WeightFormat::F32 => chunk[0] = f32::from_le_bytes([src[0], src[1], src[2], src[3]]),
            WeightFormat::F16 => chunk[0] = f16_at(src, 0),
            WeightFormat::BF16 => {
                chunk[0] = f32::from_bits(u32::from(u16::from_le_bytes([src[0], src[1]])) << 16)
            }
            WeightFormat::Q8_0 => q8_0(src, chunk),
            WeightFormat::Q5_0 => q5_0(src, chunk),
            WeightFormat::Q4_0 => q4_0(src, chunk),
            WeightFormat::Q4_1 => q4_1(src, chunk),
            WeightFormat::Q5_1 => q5_1(src, chunk),
            WeightFormat::Q4K => q4_k(src, chunk),
            WeightFormat::Q5K => q5_k(src, chunk),
            WeightFormat::Q6K => q6_k(src, chunk),
            WeightFormat::IQ4NL => iq4_nl(src, chunk),
            WeightFormat::IQ4XS => iq4_xs(src, chunk),
        }
    }
    Ok(out)
}
