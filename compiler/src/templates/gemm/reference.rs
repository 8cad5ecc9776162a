//! CPU reference of the GEMM template: the oracle for tests and for the tuner's correctness
//! check. Plain f64 accumulation over the dequantized weights (the compiler's own CPU
//! dequantizers), with the inputs rounded exactly as the kernel sees them.

use half::f16;
use thiserror::Error;

use super::schedule::{GemmSchedule, Math, Precision};
use super::workload::{ActType, GemmWorkload};
use crate::dequant::cpu::{dequantize, DequantError};

#[derive(Debug, Error, PartialEq)]
pub enum ReferenceError {
    #[error("x has {got} values, the workload needs m*k = {want}")]
    XLength { got: usize, want: usize },
    #[error("bias has {got} values, the workload needs n = {want}")]
    BiasLength { got: usize, want: usize },
    #[error(
        "the workload has a bias but none was given (or one was given for a workload without)"
    )]
    BiasPresence,
    #[error("weights: {0}")]
    Weights(#[from] DequantError),
}

/// Reference outputs with, per output, the magnitude `Σ|x·w| + |bias|` that scales the
/// rounding error any implementation may make, and for int8 math the largest change one
/// activation rounding flip can cause, `max_k d_x(k)·|w_k|`: Vulkan's division is only
/// accurate to 2.5 ulp, so a GPU's `x·(1/d)` may land on the other side of a .5 from the
/// exact value and round one step away from the emulated quantization.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub y: Vec<f32>,
    pub magnitude: Vec<f32>,
    pub rounding_flip: Vec<f32>,
}

/// Kernel output that disagrees with the reference.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Mismatch {
    #[error("output has {got} values, the reference {want}")]
    Length { got: usize, want: usize },
    #[error("y[{row}][{col}] = {got}, reference {want} (allowed error {allowed})")]
    Value {
        row: u32,
        col: u32,
        got: f32,
        want: f32,
        allowed: f32,
    },
}

/// Activations as the kernel reads them: rounded to f16 for f16 activations.
fn as_stored(act: ActType, x: &[f32]) -> Vec<f32> {
    match act {
        ActType::F32 => x.to_vec(),
        ActType::F16 => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
    }
}

/// ggml-Q8_0-style quantize-dequantize of activations, per row and 32 elements, in the exact
/// f32 arithmetic the int8 kernels use (`d = amax/127`, `q = roundEven(x · (1/d))`).
pub fn quantize_activations_q8(x: &[f32]) -> Vec<f32> {
    quantize_q8_with_steps(x).0
}

/// The quantize-dequantized activations and the scale `d` of each 32-element block.
fn quantize_q8_with_steps(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut out = Vec::with_capacity(x.len());
    let mut steps = Vec::with_capacity(x.len() / 32);
    for block in x.chunks(32) {
        let amax = block.iter().fold(0f32, |a, &v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend(block.iter().map(|&v| (v * id).round_ties_even() * d));
        steps.push(d);
    }
    (out, steps)
}

/// Computes the workload on the CPU. `x` is m×k (f32; rounded to f16 first for f16
/// activations), `weight` the raw GGUF bytes of the n×k tensor, `bias` n values.
/// With `math == Int8Dot` the activations are quantized like the kernel does, so the
/// comparison can stay tight.
pub fn reference(
    w: &GemmWorkload,
    math: Math,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    let (m, n, k) = (w.m as usize, w.n as usize, w.k as usize);
    if x.len() != m * k {
        return Err(ReferenceError::XLength {
            got: x.len(),
            want: m * k,
        });
    }
    if bias.is_some() != w.bias {
        return Err(ReferenceError::BiasPresence);
    }
    if let Some(b) = bias {
        if b.len() != n {
            return Err(ReferenceError::BiasLength {
                got: b.len(),
                want: n,
            });
        }
    }
    let wd = dequantize(w.weight, weight, n, k)?;
    let mut xs = as_stored(w.act, x);
    // Quantization step of each activation (0 unless int8 math quantizes them).
    let mut steps = vec![0f32; m * k / 32];
    if math == Math::Int8Dot {
        (xs, steps) = quantize_q8_with_steps(&xs);
    }
    let mut y = vec![0f32; m * n];
    let mut magnitude = vec![0f32; m * n];
    let mut rounding_flip = vec![0f32; m * n];
    for r in 0..m {
        let xr = &xs[r * k..(r + 1) * k];
        let sr = &steps[r * k / 32..(r + 1) * k / 32];
        for c in 0..n {
            let wr = &wd[c * k..(c + 1) * k];
            let (mut acc, mut mag, mut flip) = (0f64, 0f64, 0f32);
            for (i, (&a, &b)) in xr.iter().zip(wr).enumerate() {
                let p = f64::from(a) * f64::from(b);
                acc += p;
                mag += p.abs();
                flip = flip.max(sr[i / 32] * b.abs());
            }
            rounding_flip[r * n + c] = flip;
            if let Some(b) = bias {
                acc += f64::from(b[c]);
                mag += f64::from(b[c]).abs();
            }
            let v = acc as f32;
            y[r * n + c] = match w.act {
                ActType::F32 => v,
                ActType::F16 => f16::from_f32(v).to_f32(),
            };
            magnitude[r * n + c] = mag as f32;
        }
    }
    Ok(Reference {
        y,
        magnitude,
        rounding_flip,
    })
}

/// Allowed error relative to an output's magnitude, for what the schedule's arithmetic can
/// lose: f32 accumulation in any order, f16 products and partial sums, f16 accumulation.
pub fn relative_tolerance(s: &GemmSchedule) -> f32 {
    match (s.math, s.accumulate) {
        (Math::FmaF32, _) | (Math::Int8Dot, _) => 1e-4,
        (Math::FmaF16Packed, Precision::F32) => 2e-3,
        (Math::FmaF16Packed, Precision::F16) => 1e-2,
    }
}

/// Compares kernel output with the reference: within [`relative_tolerance`] of the magnitude,
/// plus two activation rounding flips for int8 math and half an f16 ulp for f16 outputs.
pub fn compare(
    w: &GemmWorkload,
    s: &GemmSchedule,
    got: &[f32],
    r: &Reference,
) -> Result<(), Mismatch> {
    if got.len() != r.y.len() {
        return Err(Mismatch::Length {
            got: got.len(),
            want: r.y.len(),
        });
    }
    let rel = relative_tolerance(s);
    for (i, (&g, (&want, &mag))) in got.iter().zip(r.y.iter().zip(&r.magnitude)).enumerate() {
        let mut allowed = rel * mag + 2.0 * r.rounding_flip[i] + 1e-30;
        if w.act == ActType::F16 {
            allowed += want.abs() * 2f32.powi(-11) + 6e-8;
        }
        // Written so that NaN fails.
        let within = (g - want).abs() <= allowed;
        if !within {
            return Err(Mismatch::Value {
                row: (i / w.n as usize) as u32,
                col: (i % w.n as usize) as u32,
                got: g,
                want,
                allowed,
            });
        }
    }
    Ok(())
}
