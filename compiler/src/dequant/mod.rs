//! GGUF weight block formats: their geometry, tiny CPU dequantizers (the oracle for the CPU
//! references) and the IR fragments every template uses to dequantize in a kernel.
//!
//! Semantics follow ggml's `dequantize_row_*` (evaluated without FMA contraction):
//! - Q8_0 (34 B / 32): f16 d, 32 × i8 q; `y = q * d`.
//! - Q4_0 (18 B / 32): f16 d, 16 B qs; element j < 16 is the low nibble of qs[j], element
//!   j ≥ 16 the high nibble of qs[j-16]; `y = (q - 8) * d`.
//! - Q4_1 (20 B / 32): f16 d, f16 m, 16 B qs (nibbles as Q4_0); `y = q * d + m`.
//! - Q5_1 (24 B / 32): f16 d, f16 m, u32 qh, 16 B qs (bits as Q5_0); `y = q * d + m`.
//!   Units hold the min term as `-m` (`d * q - (-m)` is bit-exact to `q * d + m`).
//! - Q5_0 (22 B / 32): f16 d, u32 qh, 16 B qs; element j < 16 is the low nibble of qs[j] with
//!   bit j of qh as bit 4, element j ≥ 16 the high nibble of qs[j-16] with bit j of qh;
//!   `y = (q - 16) * d`.
//! - Q4_K (144 B / 256): f16 d, f16 dmin, 12 B of 6-bit scales and mins (get_scale_min_k4),
//!   128 B qs; 8 sub-blocks of 32, sub-block 2p/2p+1 = low/high nibbles of qs[32p..32p+32];
//!   `y = (d * sc) * q - (dmin * m)`.
//! - Q5_K (176 B / 256): f16 d, f16 dmin, 12 B of 6-bit scales and mins (as Q4_K), 32 B qh,
//!   128 B qs; sub-block s takes the nibbles of Q4_K's sub-block s with bit s of qh[l] as
//!   bit 4; `y = (d * sc) * q - (dmin * m)`.
//! - Q6_K (210 B / 256): 128 B ql, 64 B qh, 16 × i8 scales, f16 d; two halves of 128, each
//!   four groups of 32 (ql low nibbles, ql[+32] low, ql high, ql[+32] high, with 2 bits of qh
//!   each), one scale per 16; `y = (d * sc) * (q - 32)`.
//!
//! - IQ4_NL (18 B / 32): f16 d, 16 B qs (nibbles as Q4_0); `y = d * K[q]` with ggml's
//!   16-entry signed table `K = kvalues_iq4nl` ([`IQ4NL_VALUES`]). Units look the nibbles up
//!   as signed bytes, so every path (f32, f16, int8 dot) takes them like Q4_0's `q - 8`.
//! - IQ4_XS (136 B / 256): f16 d, u16 scales_h, 4 B scales_l, 128 B qs; sub-block s (32
//!   elements) has the 6-bit scale `ls = (scales_l[s/2] >> 4(s%2) & 15) | (scales_h >> 2s & 3) << 4`
//!   and IQ4_NL's nibble layout in qs[16s..16s+16]; `y = (d * (ls - 32)) * K[q]`.
//!
//! - BF16 (2 B / 1): the high half of an f32; `y = bits << 16`, exact.
//!
//! Every format is handled in *units* of 32 consecutive elements of a row (a Q8_0/Q5_0 block,
//! a K-quant sub-block, or 32 plain floats); templates iterate over units.

pub mod cpu;
pub mod ir;
pub mod layout;
pub mod words;

pub use layout::WeightLayout;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Elements per dequantization unit (see the module docs).
pub const UNIT: u32 = 32;

/// Storage format of a weight tensor, as GGUF stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum WeightFormat {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "q5_k")]
    Q5K,
    #[serde(rename = "q4_1")]
    Q4_1,
    #[serde(rename = "q5_1")]
    Q5_1,
    #[serde(rename = "q4_k")]
    Q4K,
    #[serde(rename = "q6_k")]
    Q6K,
    #[serde(rename = "bf16")]
    BF16,
    #[serde(rename = "iq4_nl")]
    IQ4NL,
    #[serde(rename = "iq4_xs")]
    IQ4XS,
}

/// ggml's `kvalues_iq4nl`: the values IQ4_NL and IQ4_XS nibbles stand for (before the scale).
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl WeightFormat {
    pub const ALL: [WeightFormat; 13] = [
        WeightFormat::F32,
        WeightFormat::F16,
        WeightFormat::Q8_0,
        WeightFormat::Q5_0,
        WeightFormat::Q4K,
        WeightFormat::Q6K,
        WeightFormat::Q4_0,
        WeightFormat::Q5K,
        WeightFormat::Q4_1,
        WeightFormat::Q5_1,
        WeightFormat::BF16,
        WeightFormat::IQ4NL,
        WeightFormat::IQ4XS,
    ];

    /// Elements per block (1 for plain floats).
    pub fn block_elems(self) -> u32 {
        match self {
            WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16 => 1,
            WeightFormat::Q8_0
            | WeightFormat::Q5_0
            | WeightFormat::Q4_0
            | WeightFormat::Q4_1
            | WeightFormat::Q5_1
            | WeightFormat::IQ4NL => 32,
            WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K | WeightFormat::IQ4XS => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u32 {
        match self {
            WeightFormat::F32 => 4,
            WeightFormat::F16 | WeightFormat::BF16 => 2,
            WeightFormat::Q8_0 => 34,
            WeightFormat::Q5_0 => 22,
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q5_1 => 24,
            WeightFormat::Q4K => 144,
            WeightFormat::Q5K => 176,
            WeightFormat::Q6K => 210,
            WeightFormat::IQ4NL => 18,
            WeightFormat::IQ4XS => 136,
        }
    }

    /// Bytes of one row of `k` elements (`k` must be a multiple of `block_elems`).
    pub fn row_bytes(self, k: u64) -> u64 {
        k / u64::from(self.block_elems()) * u64::from(self.block_bytes())
    }

    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
        )
    }

    /// Whether a unit's values carry an additive term beside the scale (`y = s*q - min`):
    /// the int8 dot-product path then needs the activations' sums (see `dequant::ir`).
    pub fn has_min(self) -> bool {
        matches!(
            self,
            WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q4_1 | WeightFormat::Q5_1
        )
    }

    /// Whether a unit has a second scale for its elements 16..32 (Q6_K's scale per 16).
    pub fn has_hi_scale(self) -> bool {
        matches!(self, WeightFormat::Q6K)
    }

    /// ggml's name of the type.
    pub fn ggml_name(self) -> &'static str {
        match self {
            WeightFormat::F32 => "F32",
            WeightFormat::F16 => "F16",
            WeightFormat::BF16 => "BF16",
            WeightFormat::Q8_0 => "Q8_0",
            WeightFormat::Q5_0 => "Q5_0",
            WeightFormat::Q4_0 => "Q4_0",
            WeightFormat::Q4_1 => "Q4_1",
            WeightFormat::Q5_1 => "Q5_1",
            WeightFormat::Q4K => "Q4_K",
            WeightFormat::Q5K => "Q5_K",
            WeightFormat::Q6K => "Q6_K",
            WeightFormat::IQ4NL => "IQ4_NL",
            WeightFormat::IQ4XS => "IQ4_XS",
        }
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ggml_name())
    }
}
