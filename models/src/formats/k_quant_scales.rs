//! The 12-byte field in which Q4_K and Q5_K store the eight 6-bit (scale, min) pairs of their
//! 32-element sub-blocks (ggml's `get_scale_min_k4`):
//!
//!   byte  0..4   bits 0-5: scale[j] (j = 0..4)    bits 6-7: bits 4-5 of scale[j + 4]
//!   byte  4..8   bits 0-5: min[j]   (j = 0..4)    bits 6-7: bits 4-5 of min[j + 4]
//!   byte  8..12  bits 0-3: bits 0-3 of scale[j + 4]   bits 4-7: bits 0-3 of min[j + 4]

pub(super) const SCALES_BYTES: usize = 12;

/// The (scale, min) pair of sub-block `j` (0..8), each 0..=63.
#[inline]
pub(super) fn scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Packs eight (scale, min) pairs, each 0..=63, into the 12-byte field.
pub(super) fn pack(scale: &[u8; 8], min: &[u8; 8]) -> [u8; SCALES_BYTES] {
    let mut out = [0u8; SCALES_BYTES];
    for j in 0..8 {
        let (ls, lm) = (scale[j], min[j]);
        debug_assert!(ls < 64 && lm < 64);
        if j < 4 {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            out[j - 4] |= (ls >> 4) << 6;
            out[j] |= (lm >> 4) << 6;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_survives_pack_then_unpack() {
        // Distinct values in every bit position, sub-blocks 4..8 included.
        let scale = [0, 63, 17, 42, 63, 1, 48, 21];
        let min = [63, 0, 33, 5, 16, 62, 7, 40];
        let packed = pack(&scale, &min);
        for j in 0..8 {
            assert_eq!(scale_min(&packed, j), (scale[j], min[j]), "sub-block {j}");
        }
    }

    #[test]
    fn layout_matches_the_documented_bits() {
        // scale[4] = 0b11_0101: low nibble 0101 in byte 8, high bits 11 in the top of byte 0.
        let mut scale = [0u8; 8];
        scale[4] = 0b11_0101;
        let packed = pack(&scale, &[0; 8]);
        assert_eq!(packed[0], 0b1100_0000);
        assert_eq!(packed[8], 0b0000_0101);
        assert!(packed
            .iter()
            .enumerate()
            .all(|(i, &b)| b == 0 || i == 0 || i == 8));
    }
}
