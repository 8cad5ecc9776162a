//! Random weights for synthetic models: reproducible from a seed, generated and quantized row
//! by row on all rayon threads.
//!
//! Every row has its own ChaCha generator keyed by (seed, tensor index, row index), so the
//! values depend only on those three numbers: not on the thread count, the scheduling, or the
//! quantization (the same seed gives the same underlying weights in every mix).

use super::plan::{PlannedTensor, TensorKind};
use crate::formats::{quantize_into, FormatError};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use rayon::prelude::*;

/// Standard deviation of the random weights (the usual initializer scale of Qwen/LLaMA).
pub const WEIGHT_STD: f32 = 0.02;

/// Rows per rayon task: enough work per task to amortize scheduling for short rows.
const MIN_ROWS_PER_TASK: usize = 8;

/// The bytes of tensor `index` of a plan, as stored in the GGUF file: rows of N(0, σ) (or
/// 1 + N(0, σ) for norms, or the values of a fixed tensor) encoded in the tensor's type.
pub fn tensor_data(tensor: &PlannedTensor, index: u64, seed: u64) -> Result<Vec<u8>, FormatError> {
    let ty = tensor.ggml_type;
    let row_len = tensor.dims[0] as usize;
    let n_rows = tensor.dims[1..].iter().product::<u64>() as usize;
    let row_bytes = ty
        .row_bytes(row_len as u64)
        .ok_or(FormatError::PartialBlock {
            ty,
            n_elements: row_len as u64,
            block_size: ty.block_size(),
        })? as usize;
    let mut out = vec![0u8; n_rows * row_bytes];
    if let Some(values) = &tensor.fixed {
        quantize_into(ty, values, &mut out)?;
        return Ok(out);
    }
    out.par_chunks_mut(row_bytes)
        .with_min_len(MIN_ROWS_PER_TASK)
        .enumerate()
        .try_for_each_init(
            || vec![0.0f32; row_len],
            |row, (r, dst)| {
                fill_row(row, tensor.kind, seed, index, r as u64);
                quantize_into(ty, row, dst)
            },
        )?;
    Ok(out)
}

/// The f32 values of row `row` of tensor `index` (before any quantization).
pub fn fill_row(out: &mut [f32], kind: TensorKind, seed: u64, index: u64, row: u64) {
    let mut rng = row_rng(seed, index, row);
    fill_standard_normal(&mut rng, out);
    let offset = match kind {
        TensorKind::Norm => 1.0,
        TensorKind::Matrix | TensorKind::Bias | TensorKind::Fixed => 0.0,
    };
    for v in out.iter_mut() {
        *v = offset + WEIGHT_STD * *v;
    }
}

/// A generator for one row. The 256-bit ChaCha key holds the three coordinates and a tag, so
/// distinct rows get unrelated streams. `StdRng` is ChaCha12 throughout rand 0.8.
fn row_rng(seed: u64, index: u64, row: u64) -> StdRng {
    let mut key = [0u8; 32];
    key[0..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&index.to_le_bytes());
    key[16..24].copy_from_slice(&row.to_le_bytes());
    key[24..32].copy_from_slice(b"rockysyn");
    StdRng::from_seed(key)
}

/// Fills `out` with independent N(0, 1) samples by Marsaglia's polar method (Box-Muller
/// without the sine and cosine: about twice as fast, and generation is a large share of the
/// time for models whose matrices quantize quickly).
///
/// Each candidate pair uses one 64-bit draw split into two 32-bit uniforms centred in (-1, 1),
/// so s = u² + v² is never 0. The transform runs in f64 and is rounded once to f32, so libm's
/// last-bit differences between platforms almost never change a stored value.
fn fill_standard_normal(rng: &mut impl RngCore, out: &mut [f32]) {
    const SCALE: f64 = 1.0 / 2147483648.0; // 2^-31
    let centred = |bits: u64| (bits as f64 + 0.5) * SCALE - 1.0;
    for pair in out.chunks_mut(2) {
        // Accepts with probability π/4 (points inside the unit circle).
        let (u, v, s) = loop {
            let bits = rng.next_u64();
            let (u, v) = (centred(bits >> 32), centred(bits & 0xFFFF_FFFF));
            let s = u * u + v * v;
            if s < 1.0 {
                break (u, v, s);
            }
        };
        let m = (-2.0 * s.ln() / s).sqrt();
        pair[0] = (u * m) as f32;
        if let Some(second) = pair.get_mut(1) {
            *second = (v * m) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_differ_and_repeat() {
        let mut a = vec![0.0; 64];
        let mut b = vec![0.0; 64];
        fill_row(&mut a, TensorKind::Matrix, 1, 2, 3);
        fill_row(&mut b, TensorKind::Matrix, 1, 2, 3);
        assert_eq!(a, b);
        for (seed, index, row) in [(2, 2, 3), (1, 3, 3), (1, 2, 4)] {
            fill_row(&mut b, TensorKind::Matrix, seed, index, row);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x != y),
                "{seed} {index} {row}"
            );
        }
    }

    #[test]
    fn odd_lengths_are_filled() {
        let mut a = vec![f32::NAN; 7];
        fill_row(&mut a, TensorKind::Norm, 0, 0, 0);
        assert!(a.iter().all(|v| (v - 1.0).abs() < 0.2));
    }
}
