//! The CPU dequantizers against blocks packed here, independently, from the ggml block layouts
//! (this file packs known values; the dequantizer must unpack exactly them).

use half::f16;
use rocky_compiler::dequant::cpu::{dequantize, DequantError};
use rocky_compiler::WeightFormat;

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

#[test]
fn f32_and_f16_rows() {
    let vals = [1.5f32, -2.25, 0.0, 65504.0];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(dequantize(WeightFormat::F32, &bytes, 1, 4).unwrap(), vals);
    let bytes: Vec<u8> = vals.iter().flat_map(|&v| h(v)).collect();
    assert_eq!(dequantize(WeightFormat::F16, &bytes, 2, 2).unwrap(), vals);
}

#[test]
fn q8_0_block() {
    let mut block = h(0.25).to_vec();
    block.extend((0..32).map(|j| (j as i8 - 16) as u8));
    let y = dequantize(WeightFormat::Q8_0, &block, 1, 32).unwrap();
    let want: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.25).collect();
    assert_eq!(y, want);
}

#[test]
fn q5_0_block() {
    let q: Vec<u8> = (0..32).map(|j| (j * 7 % 32) as u8).collect();
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for j in 0..16 {
        qs[j] = (q[j] & 15) | ((q[j + 16] & 15) << 4);
    }
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from(v >> 4) << j;
    }
    let mut block = h(0.5).to_vec();
    block.extend(qh.to_le_bytes());
    block.extend(qs);
    let y = dequantize(WeightFormat::Q5_0, &block, 1, 32).unwrap();
    let want: Vec<f32> = q.iter().map(|&v| (f32::from(v) - 16.0) * 0.5).collect();
    assert_eq!(y, want);
}

#[test]
fn q4_0_block() {
    let q: Vec<u8> = (0..32).map(|j| (j * 7 % 16) as u8).collect();
    let qs: Vec<u8> = (0..16).map(|j| q[j] | (q[j + 16] << 4)).collect();
    let mut block = h(-0.75).to_vec();
    block.extend(qs);
    let y = dequantize(WeightFormat::Q4_0, &block, 1, 32).unwrap();
    let want: Vec<f32> = q.iter().map(|&v| (f32::from(v) - 8.0) * -0.75).collect();
    assert_eq!(y, want);
}

#[test]
fn q4_1_and_q5_1_blocks() {
    let (d, m) = (0.375f32, -1.5f32);
    // Q4_1: nibbles as Q4_0, no offset, plus m.
    let q: Vec<u8> = (0..32).map(|j| (j * 5 % 16) as u8).collect();
    let mut block = h(d).to_vec();
    block.extend(h(m));
    block.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
    let y = dequantize(WeightFormat::Q4_1, &block, 1, 32).unwrap();
    let want: Vec<f32> = q.iter().map(|&v| f32::from(v) * d + m).collect();
    assert_eq!(y, want);
    // Q5_1: bits as Q5_0 after d and m, no offset, plus m.
    let q: Vec<u8> = (0..32).map(|j| (j * 11 % 32) as u8).collect();
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |a, (j, &v)| a | (u32::from(v >> 4) << j));
    let mut block = h(d).to_vec();
    block.extend(h(m));
    block.extend(qh.to_le_bytes());
    block.extend((0..16).map(|j| (q[j] & 15) | ((q[j + 16] & 15) << 4)));
    let y = dequantize(WeightFormat::Q5_1, &block, 1, 32).unwrap();
    let want: Vec<f32> = q.iter().map(|&v| f32::from(v) * d + m).collect();
    assert_eq!(y, want);
}

/// Packs 8 six-bit scales and mins the way ggml's Q4_K stores them (inverse of get_scale_min_k4).
fn pack_scales_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..4 {
        out[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    out
}

#[test]
fn q4_k_block() {
    let (d, dmin) = (0.5f32, 0.25f32);
    let sc: [u8; 8] = [1, 63, 17, 32, 5, 48, 63, 30];
    let m: [u8; 8] = [0, 9, 63, 40, 21, 2, 33, 63];
    let q: Vec<u8> = (0..256).map(|e| ((e * 5 + e / 32) % 16) as u8).collect();
    let mut qs = [0u8; 128];
    for (e, &v) in q.iter().enumerate() {
        let (s, l) = (e / 32, e % 32);
        qs[32 * (s / 2) + l] |= v << (4 * (s % 2));
    }
    let mut block = h(d).to_vec();
    block.extend(h(dmin));
    block.extend(pack_scales_k4(&sc, &m));
    block.extend(qs);
    assert_eq!(block.len(), 144);
    let y = dequantize(WeightFormat::Q4K, &block, 1, 256).unwrap();
    for (e, &v) in q.iter().enumerate() {
        let s = e / 32;
        let want = d * f32::from(sc[s]) * f32::from(v) - dmin * f32::from(m[s]);
        assert_eq!(y[e], want, "element {e}");
    }
}

#[test]
fn q5_k_block() {
    let (d, dmin) = (0.5f32, 0.25f32);
    let sc: [u8; 8] = [1, 63, 17, 32, 5, 48, 63, 30];
    let m: [u8; 8] = [0, 9, 63, 40, 21, 2, 33, 63];
    let q: Vec<u8> = (0..256).map(|e| ((e * 7 + e / 32) % 32) as u8).collect();
    let (mut qh, mut qs) = ([0u8; 32], [0u8; 128]);
    for (e, &v) in q.iter().enumerate() {
        let (s, l) = (e / 32, e % 32);
        qs[32 * (s / 2) + l] |= (v & 15) << (4 * (s % 2));
        qh[l] |= (v >> 4) << s;
    }
    let mut block = h(d).to_vec();
    block.extend(h(dmin));
    block.extend(pack_scales_k4(&sc, &m));
    block.extend(qh);
    block.extend(qs);
    assert_eq!(block.len(), 176);
    let y = dequantize(WeightFormat::Q5K, &block, 1, 256).unwrap();
    for (e, &v) in q.iter().enumerate() {
        let s = e / 32;
        let want = d * f32::from(sc[s]) * f32::from(v) - dmin * f32::from(m[s]);
        assert_eq!(y[e], want, "element {e}");
    }
}

#[test]
fn q6_k_block() {
    let d = 0.125f32;
    let scales: Vec<i8> = (0..16).map(|i| (i * 11 % 29) as i8 - 14).collect();
    let q: Vec<u8> = (0..256).map(|e| ((e * 13 + 7) % 64) as u8).collect();
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for (e, &v) in q.iter().enumerate() {
        let (half, r) = (e / 128, e % 128);
        let (t, l) = (r / 32, r % 32);
        ql[64 * half + l + 32 * (t & 1)] |= (v & 15) << (4 * (t >> 1));
        qh[32 * half + l] |= (v >> 4) << (2 * t);
    }
    let mut block = ql.to_vec();
    block.extend(qh);
    block.extend(scales.iter().map(|&s| s as u8));
    block.extend(h(d));
    assert_eq!(block.len(), 210);
    let y = dequantize(WeightFormat::Q6K, &block, 1, 256).unwrap();
    for (e, &v) in q.iter().enumerate() {
        let (half, r) = (e / 128, e % 128);
        let sc = scales[8 * half + (r % 32) / 16 + 2 * (r / 32)];
        let want = d * f32::from(sc) * (f32::from(v) - 32.0);
        assert_eq!(y[e], want, "element {e}");
    }
}

#[test]
fn bad_shapes_are_errors_not_panics() {
    assert_eq!(
        dequantize(WeightFormat::Q4K, &[0u8; 144], 1, 200),
        Err(DequantError::RowLength {
            format: WeightFormat::Q4K,
            k: 200,
            block: 256
        })
    );
    assert!(matches!(
        dequantize(WeightFormat::Q8_0, &[0u8; 60], 2, 32),
        Err(DequantError::TooShort { needed: 68, .. })
    ));
}

/// ggml's kvalues_iq4nl, written out here again (independent of the crate's table).
const IQ4NL: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

#[test]
fn iq4_nl_block() {
    // Every index appears twice, in both nibble halves.
    let q: Vec<u8> = (0..32).map(|j| (j * 7 % 16) as u8).collect();
    let mut block = h(-0.375).to_vec();
    block.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
    let y = dequantize(WeightFormat::IQ4NL, &block, 1, 32).unwrap();
    let want: Vec<f32> = q.iter().map(|&v| -0.375 * IQ4NL[v as usize]).collect();
    assert_eq!(y, want);
}

#[test]
fn iq4_xs_block() {
    // 6-bit sub-block scales covering both ends (0 -> -32, 63 -> +31) and 32 (a zero scale).
    let ls: [u8; 8] = [0, 63, 32, 17, 45, 1, 50, 33];
    let d = 0.125f32;
    let q: Vec<u8> = (0..256).map(|j| (j * 5 % 16) as u8).collect();
    let mut scales_h = 0u16;
    let mut scales_l = [0u8; 4];
    for (s, &l) in ls.iter().enumerate() {
        scales_l[s / 2] |= (l & 15) << (4 * (s % 2));
        scales_h |= u16::from(l >> 4) << (2 * s);
    }
    let mut block = h(d).to_vec();
    block.extend(scales_h.to_le_bytes());
    block.extend(scales_l);
    for s in 0..8 {
        block.extend((0..16).map(|j| q[32 * s + j] | (q[32 * s + 16 + j] << 4)));
    }
    assert_eq!(block.len(), 136);
    let y = dequantize(WeightFormat::IQ4XS, &block, 1, 256).unwrap();
    let want: Vec<f32> = (0..256)
        .map(|i| d * (f32::from(ls[i / 32]) - 32.0) * IQ4NL[q[i] as usize])
        .collect();
    assert_eq!(y, want);
}
