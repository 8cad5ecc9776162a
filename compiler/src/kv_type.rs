//! The KV cache's element types, as llama.cpp offers them (`--cache-type-k`/`-v`): f32, f16
//! and q8_0, chosen for K and V apart; how one cache position is laid out in each; and the
//! CPU encoding and decoding that every path's reference uses.
//!
//! One position of a layer's K (or V) cache holds `kv_width` = n_kv_heads·head_dim values
//! in u32 words, position-major, each position a whole number of 16-byte units (the kernels
//! read 16-byte vectors and bind whole positions):
//! - `f32`: the values' bits, one per word;
//! - `f16`: f16 pairs, value 2i in the low half of word i (IEEE round to nearest even);
//! - `q8_0`: ggml's Q8_0 blocks of 32 values, split into their parts so every load is
//!   aligned: the `kv_width` int8 quants first (value e at byte e), then the f16 scales `d`
//!   of the `kv_width / 32` blocks (block b at half index b), padded to 16 bytes.
//!
//! Q8_0 rounds as ggml's `quantize_row_q8_0` does on Arm (NEON, the boards rocky is for):
//! `d = amax / 127` in f32, `id = 1/d` (0 for an all-zero block), `q = round_to_nearest_even
//! (x·id)`, `d` stored as f16. (The x86 AVX2 path multiplies by `127/amax` instead, which
//! moves a quant by one in rare ties; the reference C code rounds half away from zero.)

use half::f16;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One element type of the KV cache.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
pub enum KvType {
    #[serde(rename = "f32")]
    F32,
    /// llama.cpp's default and rocky's.
    #[default]
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// Values per Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;

impl KvType {
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8_0];

    /// llama.cpp's name of the type (`-ctk` / `-ctv` values).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// The type named `s` (llama.cpp's names, any case), or an error naming the value and the
    /// types rocky has.
    pub fn parse(s: &str) -> Result<KvType, String> {
        let lower = s.to_ascii_lowercase();
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == lower)
            .ok_or_else(|| {
                format!(
                    "cache type '{s}' is not one rocky has: use f32, f16 or q8_0 \
                     (llama.cpp's bf16, q4_0, q4_1, iq4_nl, q5_0 and q5_1 are not implemented)"
                )
            })
    }

    /// Bytes of one cache position of `kv_width` values (a multiple of 16 when the width
    /// passes [`KvType::check_width`]).
    pub fn row_bytes(self, kv_width: u32) -> u32 {
        match self {
            KvType::F32 => 4 * kv_width,
            KvType::F16 => 2 * kv_width,
            KvType::Q8_0 => kv_width + (kv_width / 16).next_multiple_of(16),
        }
    }

    /// u32 words of one cache position.
    pub fn row_words(self, kv_width: u32) -> u32 {
        self.row_bytes(kv_width) / 4
    }

    /// Whether a cache of this type can hold heads of `head_dim` values (`kv_width` in all),
    /// or why not. Every type needs whole 16-byte units per head (the kernels' loads); Q8_0
    /// also whole blocks of 32 per head, as ggml does.
    pub fn check_width(self, head_dim: u32, kv_width: u32) -> Result<(), String> {
        let unit = match self {
            KvType::F32 => 4,
            KvType::F16 => 8,
            KvType::Q8_0 => Q8_0_BLOCK as u32,
        };
        if head_dim == 0 || head_dim % unit != 0 || kv_width % head_dim != 0 {
            return Err(format!(
                "a {} KV cache needs head_dim to be a multiple of {unit} (this model's is \
                 {head_dim})",
                self.name()
            ));
        }
        Ok(())
    }

    /// The words of one position holding `values` (`kv_width` of them, a width that passes
    /// [`KvType::check_width`]).
    pub fn encode_row(self, values: &[f32]) -> Vec<u32> {
        let kw = values.len() as u32;
        match self {
            KvType::F32 => values.iter().map(|v| v.to_bits()).collect(),
            KvType::F16 => values
                .chunks(2)
                .map(|p| {
                    let hi = p.get(1).map_or(0, |&x| f16::from_f32(x).to_bits());
                    u32::from(f16::from_f32(p[0]).to_bits()) | (u32::from(hi) << 16)
                })
                .collect(),
            KvType::Q8_0 => {
                let mut words = vec![0u32; self.row_words(kw) as usize];
                let quant_words = kw as usize / 4;
                for (b, block) in values.chunks(Q8_0_BLOCK).enumerate() {
                    let (d, q) = quantize_block_q8_0(block);
                    for (e, &qe) in q.iter().enumerate() {
                        let at = b * Q8_0_BLOCK + e;
                        words[at / 4] |= u32::from(qe as u8) << (8 * (at % 4));
                    }
                    words[quant_words + b / 2] |= u32::from(d) << (16 * (b % 2));
                }
                words
            }
        }
    }

    /// Value `e` of the position starting at word `row` of `words`.
    pub fn value_at(self, words: &[u32], kv_width: u32, row: usize, e: usize) -> f32 {
        let half = |i: usize| {
            let w = words[row + i / 2];
            f16::from_bits((w >> (16 * (i % 2))) as u16).to_f32()
        };
        match self {
            KvType::F32 => f32::from_bits(words[row + e]),
            KvType::F16 => half(e),
            KvType::Q8_0 => {
                let q = (words[row + e / 4] >> (8 * (e % 4))) as u8 as i8;
                let d = half(2 * (kv_width as usize / 4) + e / Q8_0_BLOCK);
                f32::from(q) * d
            }
        }
    }

    /// Value `e` of position `pos` of a whole cache of this type (`kv_width` values each).
    pub fn cache_value(self, cache: &[u32], kv_width: u32, pos: usize, e: usize) -> f32 {
        self.value_at(cache, kv_width, pos * self.row_words(kv_width) as usize, e)
    }

    /// The values of one encoded position (the inverse of [`KvType::encode_row`] up to its
    /// rounding).
    pub fn decode_row(self, words: &[u32], kv_width: u32) -> Vec<f32> {
        (0..kv_width as usize)
            .map(|e| self.value_at(words, kv_width, 0, e))
            .collect()
    }

    /// What the cache gives back for `values` (one or more positions of `kv_width`): the
    /// rounding of this type, on the CPU.
    pub fn round_trip(self, values: &[f32], kv_width: usize) -> Vec<f32> {
        match self {
            KvType::F32 => values.to_vec(),
            _ => values
                .chunks(kv_width)
                .flat_map(|row| self.decode_row(&self.encode_row(row), kv_width as u32))
                .collect(),
        }
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's Q8_0 block (see the module documentation for the rounding): the f16 bits of `d`
/// and the quants. A short block (fewer than 32 values) is padded with zeros.
pub fn quantize_block_q8_0(x: &[f32]) -> (u16, [i8; Q8_0_BLOCK]) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0i8; Q8_0_BLOCK];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
    (f16::from_f32(d).to_bits(), q)
}

/// The cache types of K and V. Serialized only where not both f16 (`is_default`), so tuning
/// records written before cache types existed keep their keys.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
#[serde(deny_unknown_fields)]
pub struct KvTypes {
    #[serde(default)]
    pub k: KvType,
    #[serde(default)]
    pub v: KvType,
}

impl KvTypes {
    pub const F32: KvTypes = KvTypes {
        k: KvType::F32,
        v: KvType::F32,
    };
    pub const F16: KvTypes = KvTypes {
        k: KvType::F16,
        v: KvType::F16,
    };
    pub const Q8_0: KvTypes = KvTypes {
        k: KvType::Q8_0,
        v: KvType::Q8_0,
    };

    pub fn new(k: KvType, v: KvType) -> KvTypes {
        KvTypes { k, v }
    }

    pub fn is_default(&self) -> bool {
        *self == KvTypes::default()
    }

    /// Bytes of K and V of one position of one layer.
    pub fn position_bytes(&self, kv_width: u32) -> u64 {
        u64::from(self.k.row_bytes(kv_width)) + u64::from(self.v.row_bytes(kv_width))
    }

    /// [`KvType::check_width`] of both.
    pub fn check_width(&self, head_dim: u32, kv_width: u32) -> Result<(), String> {
        self.k.check_width(head_dim, kv_width)?;
        self.v.check_width(head_dim, kv_width)
    }
}

impl fmt::Display for KvTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "K {}, V {}", self.k, self.v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_others_are_refused_by_name() {
        for t in KvType::ALL {
            assert_eq!(KvType::parse(t.name()), Ok(t));
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
        }
        assert_eq!(KvType::parse("Q8_0"), Ok(KvType::Q8_0));
        let e = KvType::parse("q4_0").unwrap_err();
        assert!(
            e.contains("'q4_0'") && e.contains("f32, f16 or q8_0"),
            "{e}"
        );
    }

    #[test]
    fn row_bytes_are_whole_16_byte_units() {
        // Qwen2.5-0.5B (2 kv heads of 64), 3B (2 of 128), and one head of 32.
        for kw in [128u32, 256, 32] {
            assert_eq!(KvType::F32.row_bytes(kw), 4 * kw);
            assert_eq!(KvType::F16.row_bytes(kw), 2 * kw);
            assert_eq!(KvType::Q8_0.row_bytes(kw) % 16, 0);
        }
        // ggml's 34 bytes per 32 values, padded: 128 → 136 → 144; 256 → 272 exactly.
        assert_eq!(KvType::Q8_0.row_bytes(128), 144);
        assert_eq!(KvType::Q8_0.row_bytes(256), 272);
        assert!(KvType::Q8_0.check_width(48, 96).is_err());
        assert!(KvType::F16.check_width(48, 96).is_ok());
    }

    #[test]
    fn q8_0_rounds_as_ggml_does() {
        // amax 127 → d = 1, quants are the values rounded to nearest even.
        let mut x = [0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.49;
        let (d, q) = quantize_block_q8_0(&x);
        assert_eq!(f16::from_bits(d).to_f32(), 1.0);
        assert_eq!(&q[..4], &[127, 2, -4, 0]);
        // An all-zero block: d = 0 and every quant 0, no NaN.
        assert_eq!(quantize_block_q8_0(&[0.0; 32]), (0, [0; 32]));
        // Round trip of a row of two blocks: within half a step d/2 of each value, plus what
        // rounding d to f16 moves the largest quant (127·d·2⁻¹¹).
        let row: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let back = KvType::Q8_0.round_trip(&row, 64);
        for (b, block) in row.chunks(32).enumerate() {
            let d = block.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            for (i, &v) in block.iter().enumerate() {
                assert!(
                    (back[b * 32 + i] - v).abs() <= d * (0.5 + 127.0 / 2048.0),
                    "{i}"
                );
            }
        }
    }

    #[test]
    fn f32_and_f16_round_trips() {
        let row: Vec<f32> = (0..16).map(|i| i as f32 / 3.0).collect();
        assert_eq!(KvType::F32.round_trip(&row, 16), row);
        let h = KvType::F16.round_trip(&row, 16);
        for (a, b) in h.iter().zip(&row) {
            assert_eq!(*a, f16::from_f32(*b).to_f32());
        }
    }

    #[test]
    fn default_types_are_not_serialized_into_keys() {
        assert!(KvTypes::default().is_default());
        assert_eq!(KvTypes::default(), KvTypes::F16);
        let s = serde_json::to_string(&KvTypes::new(KvType::Q8_0, KvType::F32)).unwrap();
        assert_eq!(s, r#"{"k":"q8_0","v":"f32"}"#);
    }
}
