//! What a glue or attention kernel's output must be: the CPU reference values together with
//! the error each element may have. The references compute the allowed error from what the
//! kernel's arithmetic may lose (documented next to each), so the tests and the tuner's
//! correctness check share one comparison.

use thiserror::Error;

/// Reference output values and, per element, the largest allowed absolute error.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    pub values: Vec<f32>,
    pub allowed: Vec<f32>,
}

/// Kernel output that disagrees with the reference.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Mismatch {
    #[error("output has {got} values, the reference {want}")]
    Length { got: usize, want: usize },
    #[error("element {index} (row {row}) = {got}, reference {want} (allowed error {allowed})")]
    Value {
        index: usize,
        row: usize,
        got: f32,
        want: f32,
        allowed: f32,
    },
}

impl Expected {
    /// Checks `got` element by element; `row_len` only labels the first failure. NaN fails.
    pub fn check(&self, got: &[f32], row_len: usize) -> Result<(), Mismatch> {
        if got.len() != self.values.len() {
            return Err(Mismatch::Length {
                got: got.len(),
                want: self.values.len(),
            });
        }
        for (index, (&g, (&want, &allowed))) in got
            .iter()
            .zip(self.values.iter().zip(&self.allowed))
            .enumerate()
        {
            // `==` first so that exact infinities match; written so that NaN fails.
            let within = g == want || (g - want).abs() <= allowed;
            if !within {
                return Err(Mismatch::Value {
                    index,
                    row: index / row_len.max(1),
                    got: g,
                    want,
                    allowed,
                });
            }
        }
        Ok(())
    }

    /// The largest `|got - want| / allowed` (how close to failing the output came).
    pub fn worst_ratio(&self, got: &[f32]) -> f32 {
        got.iter()
            .zip(self.values.iter().zip(&self.allowed))
            .map(|(&g, (&w, &a))| {
                if g == w {
                    0.0
                } else {
                    (g - w).abs() / a.max(f32::MIN_POSITIVE)
                }
            })
            .fold(0.0, f32::max)
    }
}
