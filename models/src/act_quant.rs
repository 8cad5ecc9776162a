//! Rounding of a projection's activations as an integer-dot backend performs it before the
//! dot products, for the CPU reference ([`crate::reference::ReferenceOptions::activations`]).
//!
//! Integer-dot matrix products quantize the activations to 8 bits: their output differs from
//! the exact product of the same weights by that rounding alone (the integer sums are exact and
//! the scales are applied in f32). Emulating the rounding on the CPU gives two figures:
//!
//! - [`ActivationQuant::RockyInt8`]: what rocky's int8 GEMM kernels compute (per row and 32
//!   elements, `d = amax/127` in f32, `q = roundEven(x · (1/d))`, the scale kept in f32;
//!   `rocky_compiler`'s `quantize_activations_q8`, also the GEMM template's own reference);
//! - [`ActivationQuant::LlamaCpp`]: what llama.cpp's CPU backend computes (ggml's
//!   `vec_dot_type` of the weight's type, `type_traits_cpu` in ggml-cpu.c): Q8_K blocks of 256
//!   for the K-quants and IQ4_XS (`quantize_row_q8_K_ref`: `iscale = -127/max` of the signed
//!   value of largest magnitude, `q = min(127, nearest_int(iscale·x))`, `d = 1/iscale` in
//!   f32), Q8_0 blocks of 32 for Q4_0, Q5_0, Q8_0 and IQ4_NL (`d = amax/127` stored as f16,
//!   `q = round(x/d)`), Q8_1 for Q4_1 and Q5_1 (Q8_0's quants and scale; its f16 `d·Σq` for
//!   the min term is not modelled: at most one f16 rounding of that term), f16 activations
//!   for F16 weights, bf16 for BF16, none for F32.
//!
//! Both dequantize the 8-bit values back to f32 (`q · d`), so the reference's f32 dot with the
//! dequantized weights computes what the integer sums compute, up to f32 summation order.

use crate::formats::GgmlType;
use half::{bf16, f16};
use std::borrow::Cow;

/// How a projection's activations are rounded before the product (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActivationQuant {
    /// Unrounded f32 activations (what rocky's f32 math and the plain reference compute).
    #[default]
    Exact,
    /// rocky's int8 dot-product GEMMs: every projection with quantized weights.
    RockyInt8,
    /// llama.cpp's CPU backend: the weight type's `vec_dot_type`.
    LlamaCpp,
    /// rocky's rounding (per row, `d = amax/127` in f32, ties to even) in blocks of this many
    /// values instead of 32: what a finer activation granularity would buy, for measurements
    /// only (no kernel computes it).
    RockyInt8Blocks(u32),
}

impl ActivationQuant {
    /// `x` (rows of `k`) as the dot products of a projection with `weight` weights see them.
    pub fn apply(self, weight: GgmlType, x: &[f32], k: usize) -> Cow<'_, [f32]> {
        Cow::Owned(match self {
            ActivationQuant::RockyInt8 if is_block_quantized(weight) => rows(x, k, rocky_q8),
            ActivationQuant::RockyInt8Blocks(n) if is_block_quantized(weight) => x
                .chunks(k)
                .flat_map(|row| q8_blocks(row, n as usize))
                .collect(),
            ActivationQuant::LlamaCpp => match llama_cpp_vec_dot_type(weight) {
                GgmlType::Q8K => rows(x, k, ggml_q8_k),
                GgmlType::Q8_0 | GgmlType::Q8_1 => rows(x, k, ggml_q8_0),
                GgmlType::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
                GgmlType::BF16 => x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect(),
                _ => return Cow::Borrowed(x),
            },
            _ => return Cow::Borrowed(x),
        })
    }
}

/// Whether rocky's int8 math applies to weights of type `t` (its int8 path needs integer
/// weights; unquantized weights keep their f32/f16 schedule).
fn is_block_quantized(t: GgmlType) -> bool {
    !matches!(
        t,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::F64
    )
}

/// ggml's `vec_dot_type` for weights of type `t` on the CPU backend (`type_traits_cpu`).
pub fn llama_cpp_vec_dot_type(t: GgmlType) -> GgmlType {
    match t {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4NL => GgmlType::Q8_0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
        GgmlType::Q2K
        | GgmlType::Q3K
        | GgmlType::Q4K
        | GgmlType::Q5K
        | GgmlType::Q6K
        | GgmlType::IQ4XS => GgmlType::Q8K,
        GgmlType::F16 => GgmlType::F16,
        GgmlType::BF16 => GgmlType::BF16,
        _ => GgmlType::F32,
    }
}

/// `quantize` applied to each row of `k` values.
fn rows(x: &[f32], k: usize, quantize: fn(&[f32]) -> Vec<f32>) -> Vec<f32> {
    x.chunks(k).flat_map(quantize).collect()
}

/// rocky's int8 kernels (`quantize_unit_q8`): blocks of 32, f32 scale, ties to even.
pub fn rocky_q8(row: &[f32]) -> Vec<f32> {
    rocky_compiler::templates::gemm::reference::quantize_activations_q8(row)
}

/// rocky's rounding in blocks of `n` values: `d = amax/127` in f32, `q = roundEven(x · (1/d))`
/// (n = 32 is [`rocky_q8`]).
pub fn q8_blocks(row: &[f32], n: usize) -> Vec<f32> {
    row.chunks(n)
        .flat_map(|block| {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            block.iter().map(move |&v| (v * id).round_ties_even() * d)
        })
        .collect()
}

/// ggml's Q8_0 (and Q8_1's quants) quantize-dequantized: blocks of 32, `d = amax/127` stored
/// as f16, `q = round(x · (1/d))` (ties to even as the AVX2 `quantize_row_q8_0`; the scalar
/// reference's `roundf` differs on exact ties only).
pub fn ggml_q8_0(row: &[f32]) -> Vec<f32> {
    row.chunks(32)
        .flat_map(|block| {
            let (d_bits, q) = rocky_compiler::kv_type::quantize_block_q8_0(block);
            let d = f16::from_bits(d_bits).to_f32();
            q.into_iter()
                .take(block.len())
                .map(move |q| f32::from(q) * d)
        })
        .collect()
}

/// ggml's Q8_K quantize-dequantized (`quantize_row_q8_K_ref`): blocks of 256, scale from the
/// signed value of largest magnitude, `iscale = -127/max`, `q = min(127, nearest_int(iscale·x))`
/// (ties to even), `d = 1/iscale` in f32. A row whose length is not a multiple of 256 cannot be
/// Q8_K in ggml (its K-quant weights would not exist either); its tail is quantized as a
/// shorter block.
pub fn ggml_q8_k(row: &[f32]) -> Vec<f32> {
    row.chunks(256)
        .flat_map(|block| {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in block {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let (iscale, d) = if amax == 0.0 {
                (0.0, 0.0)
            } else {
                let iscale = -127.0 / max;
                (iscale, 1.0 / iscale)
            };
            block
                .iter()
                .map(move |&v| (iscale * v).round_ties_even().min(127.0) * d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Vec<f32> {
        (0..512)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 97.0 + if i == 300 { 40.0 } else { 0.0 })
            .collect()
    }

    #[test]
    fn q8_k_rounds_each_value_within_half_a_step_of_its_256_block() {
        let x = row();
        let q = ggml_q8_k(&x);
        for (b, (xb, qb)) in x.chunks(256).zip(q.chunks(256)).enumerate() {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let step = amax / 127.0;
            for (v, w) in xb.iter().zip(qb) {
                assert!(
                    (v - w).abs() <= 0.5 * step * (1.0 + 1e-5),
                    "block {b}: {v} {w}"
                );
            }
        }
        // The outlier (block 1) coarsens its whole block of 256, not just 32.
        let err = |r: std::ops::Range<usize>| -> f32 {
            r.map(|i| (x[i] - q[i]).abs()).fold(0.0, f32::max)
        };
        assert!(err(256..288) > 4.0 * err(0..32));
    }

    #[test]
    fn q8_0_keeps_its_scale_in_f16_and_rocky_in_f32() {
        let x: Vec<f32> = (0..32).map(|i| 0.1 + i as f32 * 0.013).collect();
        let (g, r) = (ggml_q8_0(&x), rocky_q8(&x));
        let d = x[31] / 127.0;
        let dh = f16::from_f32(d).to_f32();
        assert_ne!(d, dh);
        for i in 0..32 {
            let q = (x[i] / d).round_ties_even();
            assert!((g[i] - q * dh).abs() <= 1e-6, "{i}");
            assert!((r[i] - q * d).abs() <= 1e-6, "{i}");
        }
    }

    #[test]
    fn blocks_of_32_are_rockys_rounding_and_finer_blocks_err_less_on_outliers() {
        let x = row();
        assert_eq!(q8_blocks(&x, 32), rocky_q8(&x));
        let err = |q: &[f32]| -> f32 { x.iter().zip(q).map(|(a, b)| (a - b).powi(2)).sum() };
        assert!(err(&q8_blocks(&x, 16)) < err(&rocky_q8(&x)));
        // The outlier (at 300) coarsens only its own block of 16, not 304..320 beside it.
        let at = |q: &[f32], r: std::ops::Range<usize>| -> f32 {
            r.map(|i| (x[i] - q[i]).abs()).fold(0.0, f32::max)
        };
        let q16 = q8_blocks(&x, 16);
        assert!(at(&q16, 304..320) * 4.0 < at(&rocky_q8(&x), 304..320));
    }

    #[test]
    fn unquantized_weights_keep_rockys_activations_exact() {
        let x = row();
        let apply = |a: ActivationQuant, t| a.apply(t, &x, 256).into_owned();
        assert_eq!(apply(ActivationQuant::RockyInt8, GgmlType::F16), x);
        assert_eq!(
            apply(ActivationQuant::RockyInt8, GgmlType::Q4K),
            rocky_q8(&x)
        );
        assert_eq!(
            apply(ActivationQuant::LlamaCpp, GgmlType::Q4K),
            ggml_q8_k(&x)
        );
        assert_eq!(
            apply(ActivationQuant::LlamaCpp, GgmlType::Q5_0),
            ggml_q8_0(&x)
        );
        assert_eq!(apply(ActivationQuant::LlamaCpp, GgmlType::F32), x);
    }
}
