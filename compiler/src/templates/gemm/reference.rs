//! CPU reference of the GEMM template: the oracle for tests and for the tuner's correctness
//! check. Plain f64 accumulation over the dequantized weights (the compiler's own CPU
//! dequantizers), with the inputs rounded exactly as the kernel sees them.

use half::f16;
use thiserror::Error;

use super::schedule::{GemmSchedule, Math, Precision};
use super::workload::{ActType, Epilogue, GemmWorkload};
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
    #[error("the workload has a residual epilogue but no residual was given (or the reverse)")]
    ResidualPresence,
    #[error("residual has {got} values, the workload needs m*n = {want}")]
    ResidualLength { got: usize, want: usize },
    #[error("the workload folds an RMSNorm but no norm weight was given (or the reverse)")]
    NormWeightPresence,
    #[error("the norm weight has {got} values, the workload needs k = {want}")]
    NormWeightLength { got: usize, want: usize },
    #[error(
        "the RoPE-and-KV-write epilogue's outputs are a query and two cache rows: use \
         gemv::reference::rope_kv"
    )]
    RopeKvOutputs,
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
/// comparison can stay tight. A workload with an epilogue needs [`reference_with_epilogue`].
pub fn reference(
    w: &GemmWorkload,
    math: Math,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    reference_with_epilogue(w, math, x, weight, bias, None)
}

/// [`reference`] with the workload's epilogue, composed from the unfused parts: the plain GEMM
/// of all weight rows (for SwiGLU the 2n gate and up rows of the combined tensor, see
/// `combine_gate_up`), then silu(gate)·up in f64 or the residual `residual` (m×n) added.
/// The allowed error of a SwiGLU output carries the GEMM's error through silu and the product:
/// |d silu/dg| ≤ 1.1 and |silu(g)| ≤ |g|, so an error of ε_g in the gate sum and ε_u in the up
/// sum moves the output by at most 1.1·ε_g·(|u| + ε_u) + |g|·ε_u (magnitudes and rounding
/// flips are carried the same way), plus the kernel's own exp/div rounding.
pub fn reference_with_epilogue(
    w: &GemmWorkload,
    math: Math,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    let (m, n) = (w.m as usize, w.n as usize);
    if w.rms_norm_eps_bits.is_some() {
        return Err(ReferenceError::NormWeightPresence);
    }
    if residual.is_some() != (w.epilogue == Epilogue::Residual) {
        return Err(ReferenceError::ResidualPresence);
    }
    if w.epilogue.is_none() {
        return plain(w, math, x, weight, bias);
    }
    if let Epilogue::RopeKv(_) = w.epilogue {
        return Err(ReferenceError::RopeKvOutputs);
    }
    if let Some(r) = residual {
        if r.len() != m * n {
            return Err(ReferenceError::ResidualLength {
                got: r.len(),
                want: m * n,
            });
        }
    }
    // The sums in f32, before the epilogue (inputs rounded as the kernel reads them).
    let inner = GemmWorkload {
        n: w.weight_rows(),
        act: ActType::F32,
        epilogue: Epilogue::None,
        ..*w
    };
    let sums = plain(&inner, math, &as_stored(w.act, x), weight, bias)?;
    let rel = f64::from(match math {
        Math::FmaF32 | Math::Int8Dot => 1e-4f32,
        Math::FmaF16Packed => 2e-3,
    });
    let mut out = Reference {
        y: Vec::with_capacity(m * n),
        magnitude: Vec::with_capacity(m * n),
        rounding_flip: Vec::with_capacity(m * n),
    };
    let wr = inner.n as usize;
    for r in 0..m {
        for c in 0..n {
            let (y, mag, flip) = match w.epilogue {
                Epilogue::SwiGlu => {
                    let (gi, ui) = (r * wr + c, r * wr + n + c);
                    let (g, u) = (f64::from(sums.y[gi]), f64::from(sums.y[ui]));
                    let (mg, mu) = (f64::from(sums.magnitude[gi]), f64::from(sums.magnitude[ui]));
                    let (fg, fu) = (
                        f64::from(sums.rounding_flip[gi]),
                        f64::from(sums.rounding_flip[ui]),
                    );
                    let y = g / (1.0 + (-g).exp()) * u;
                    let own = y.abs() * (8.0 + 2.0 * g.abs()) * 2f64.powi(-23) / rel;
                    let mag = 1.1 * mg * (u.abs() + rel * mu) + g.abs() * mu + own;
                    let flip = 1.1 * fg * (u.abs() + 2.0 * fu) + g.abs() * fu;
                    (y, mag, flip)
                }
                Epilogue::Residual => {
                    let i = r * n + c;
                    let res = residual.expect("checked above");
                    let rv = f64::from(as_stored(w.act, &res[i..i + 1])[0]);
                    let y = f64::from(sums.y[i]) + rv;
                    let mag = f64::from(sums.magnitude[i]) + rv.abs();
                    (y, mag, f64::from(sums.rounding_flip[i]))
                }
                Epilogue::None | Epilogue::RopeKv(_) => unreachable!("handled above"),
            };
            out.y.push(match w.act {
                ActType::F32 => y as f32,
                ActType::F16 => f16::from_f64(y).to_f32(),
            });
            out.magnitude.push(mag as f32);
            out.rounding_flip.push(flip as f32);
        }
    }
    Ok(out)
}

/// [`reference_with_epilogue`] for any workload, a folded RMSNorm included
/// (`GemmWorkload::rms_norm_eps_bits`, f32 activations): each row of X normalized in f64 as the
/// unfused RMSNorm does, `x / sqrt(mean(x²) + eps) ⊙ norm_weight`, rounded to f32, then the
/// projection and its epilogue. The kernel normalizes after the product instead (the same
/// value up to f32 rounding, well inside the magnitude-scaled tolerance).
pub fn reference_full(
    w: &GemmWorkload,
    math: Math,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    norm_weight: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    let (eps, g) = match (w.rms_norm_eps(), norm_weight) {
        (None, None) => {
            return reference_with_epilogue(w, math, x, weight, bias, residual);
        }
        (Some(eps), Some(g)) => (eps, g),
        _ => return Err(ReferenceError::NormWeightPresence),
    };
    let (m, k) = (w.m as usize, w.k as usize);
    if g.len() != k {
        return Err(ReferenceError::NormWeightLength {
            got: g.len(),
            want: k,
        });
    }
    if x.len() != m * k {
        return Err(ReferenceError::XLength {
            got: x.len(),
            want: m * k,
        });
    }
    let normed: Vec<f32> = x
        .chunks(k)
        .flat_map(|row| {
            let squares: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            let scale = 1.0 / (squares / k as f64 + f64::from(eps)).sqrt();
            row.iter()
                .zip(g)
                .map(move |(&v, &gi)| (f64::from(v) * scale * f64::from(gi)) as f32)
        })
        .collect();
    let inner = GemmWorkload {
        rms_norm_eps_bits: None,
        ..*w
    };
    reference_with_epilogue(&inner, math, &normed, weight, bias, residual)
}

/// The GEMM without an epilogue.
fn plain(
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
    // X rounded to f16 before the broadcasts: each product off by at most 2^-11 of itself.
    if s.pack_a_f16 {
        return 1e-4 + 2f32.powi(-11);
    }
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
