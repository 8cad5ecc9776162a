//! CPU reference of the GEMV template. It computes what the GEMM computes, so it is the
//! GEMM's f64 reference ([`crate::templates::gemm::reference`]) for the small-M workload; the
//! comparison uses the tolerance of the schedule's arithmetic (f32, or f16 products summed in
//! f16 per unit and accumulated in f32: the GEMM's mixed-precision bound; int8 math: the
//! activations quantized as the kernel quantizes them, then f32's bound plus rounding flips).

use super::schedule::GemvSchedule;
use crate::templates::gemm::reference::{Mismatch, Reference, ReferenceError};
use crate::templates::gemm::{GemmSchedule, GemmWorkload, Math};

/// Computes the workload on the CPU for `s`'s arithmetic (see
/// `gemm::reference::reference_with_epilogue`): the activations as they are, or with int8
/// math quantized per 32-element unit as the kernel quantizes them.
pub fn reference(
    w: &GemmWorkload,
    s: &GemvSchedule,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    reference_normed(w, s, x, weight, bias, residual, None)
}

/// [`reference`] with a folded RMSNorm's weight (`gemm::reference::reference_full`), for
/// workloads with `rms_norm_eps_bits`.
pub fn reference_normed(
    w: &GemmWorkload,
    s: &GemvSchedule,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    norm_weight: Option<&[f32]>,
) -> Result<Reference, ReferenceError> {
    let math = match s.math {
        Math::Int8Dot => Math::Int8Dot,
        // Float math is checked against the exact sums at its own tolerance.
        Math::FmaF32 | Math::FmaF16Packed => Math::FmaF32,
    };
    crate::templates::gemm::reference::reference_full(
        w,
        math,
        x,
        weight,
        bias,
        residual,
        norm_weight,
    )
}

/// The GEMM schedule whose arithmetic (and so tolerance) matches `s` (no split-K, no
/// staging): what a GEMM harness needs to check a GEMV kernel's output.
pub fn arithmetic_twin(s: &GemvSchedule) -> GemmSchedule {
    GemmSchedule {
        bm: 1,
        bn: 1,
        bk: 32,
        tm: 1,
        tn: 1,
        split_k: 1,
        vector_width: s.vector_width,
        stage_a: false,
        stage_b: false,
        shuffle_a: false,
        k_groups: 1,
        wide_loads: false,
        k_unroll: 1,
        share_headers: false,
        last_group_reduces: false,
        fold_per_slab: false,
        pack_a_f16: false,
        half_units: false,
        accumulate: s.accumulate,
        math: s.math,
    }
}

/// Allowed error relative to an output's magnitude for `s`'s arithmetic.
pub fn relative_tolerance(s: &GemvSchedule) -> f32 {
    crate::templates::gemm::reference::relative_tolerance(&arithmetic_twin(s))
}

/// Compares kernel output with the reference (the GEMM's comparison, at `s`'s tolerance).
pub fn compare(
    w: &GemmWorkload,
    s: &GemvSchedule,
    got: &[f32],
    r: &Reference,
) -> Result<(), Mismatch> {
    crate::templates::gemm::reference::compare(w, &arithmetic_twin(s), got, r)
}
