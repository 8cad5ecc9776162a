//! CPU reference of the GEMV template. It computes what the GEMM computes, so it is the
//! GEMM's f64 reference ([`crate::templates::gemm::reference`]) for the small-M workload; the
//! comparison uses the tolerance of the schedule's arithmetic (f32, or f16 products summed in
//! f16 per unit and accumulated in f32: the GEMM's mixed-precision bound; int8 math: the
//! activations quantized as the kernel quantizes them, then f32's bound plus rounding flips).

use super::schedule::GemvSchedule;
use crate::templates::expected::Expected;
use crate::templates::gemm::reference::{Mismatch, Reference, ReferenceError};
use crate::templates::gemm::{Epilogue, GemmSchedule, GemmWorkload, Math};
use crate::templates::rope::{self, RopeWorkload};

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
        packed_w: 0,
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

/// What a GEMV with the RoPE-and-KV-write epilogue (`Epilogue::RopeKv`) must write for X's
/// first `m` rows at positions `pos0 ..`: the rotated query (m × q_heads·head_dim, in Y), and
/// the rotated key and the value rows (m × kv_heads·head_dim each, before the caches' own
/// rounding; empty where the projection has no such part).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeKvReference {
    pub q: Expected,
    pub k: Expected,
    pub v: Expected,
}

/// [`RopeKvReference`] composed from the unfused parts, the way the decode step ran before the
/// fusion: the plain projection of every row ([`reference_normed`] with no epilogue), then
/// the RoPE's CPU reference ([`rope::reference_with`]) on the query and key parts. A rotated
/// output mixes two projected values, so it may carry both of their errors (the projection's
/// tolerance of each, as `compare` allows it) on top of the RoPE's own.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv(
    w: &GemmWorkload,
    s: &GemvSchedule,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    norm_weight: Option<&[f32]>,
    freqs: Option<&[f32]>,
    pos0: u32,
) -> Result<RopeKvReference, ReferenceError> {
    rope_kv_for(
        w,
        &arithmetic_twin(s),
        x,
        weight,
        bias,
        norm_weight,
        freqs,
        pos0,
    )
}

/// [`rope_kv`] at the tolerance of GEMM schedule `twin`'s arithmetic (a GEMV's
/// [`arithmetic_twin`]: what the GEMM harness checks GEMV kernels with).
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_for(
    w: &GemmWorkload,
    twin: &GemmSchedule,
    x: &[f32],
    weight: &[u8],
    bias: Option<&[f32]>,
    norm_weight: Option<&[f32]>,
    freqs: Option<&[f32]>,
    pos0: u32,
) -> Result<RopeKvReference, ReferenceError> {
    let Epilogue::RopeKv(r) = w.epilogue else {
        panic!("rope_kv reference: the workload has no RoPE-and-KV-write epilogue");
    };
    let m = w.m as usize;
    let plain = GemmWorkload {
        n: r.rows(),
        epilogue: Epilogue::None,
        ..*w
    };
    let math = match twin.math {
        Math::Int8Dot => Math::Int8Dot,
        // Float math is checked against the exact sums at its own tolerance.
        Math::FmaF32 | Math::FmaF16Packed => Math::FmaF32,
    };
    let sums = crate::templates::gemm::reference::reference_full(
        &plain,
        math,
        x,
        weight,
        bias,
        None,
        norm_weight,
    )?;
    let rel = crate::templates::gemm::reference::relative_tolerance(twin);
    let err: Vec<f32> = sums
        .magnitude
        .iter()
        .zip(&sums.rounding_flip)
        .map(|(&mag, &flip)| rel * mag + 2.0 * flip)
        .collect();
    let rows = r.rows() as usize;
    let hd = r.head_dim as usize;
    // Columns `first .. first + heads·head_dim` of every X row.
    let part = |v: &[f32], first: u32, heads: u32| -> Vec<f32> {
        let (first, width) = (first as usize, heads as usize * hd);
        (0..m)
            .flat_map(|i| v[i * rows + first..i * rows + first + width].to_vec())
            .collect()
    };
    let rotated = |first: u32, heads: u32| -> Expected {
        if heads == 0 {
            return Expected {
                values: Vec::new(),
                allowed: Vec::new(),
            };
        }
        let rw = RopeWorkload::new(w.m, heads, r.head_dim, f32::from_bits(r.theta_bits))
            .with_pairing(r.pairing)
            .with_freq_factors(r.freq_factors);
        let mut e = rope::reference_with(&rw, m, pos0, &part(&sums.y, first, heads), freqs);
        let errs = part(&err, first, heads);
        // Both elements of a pair take both of their projections' errors.
        for i in 0..m {
            for h in 0..heads as usize {
                for p in 0..hd / 2 {
                    let (a, b) = r.pairing.offsets(p, hd);
                    let base = i * heads as usize * hd + h * hd;
                    let both = errs[base + a] + errs[base + b];
                    e.allowed[base + a] += both;
                    e.allowed[base + b] += both;
                }
            }
        }
        e
    };
    let v = if r.v_heads == 0 {
        Expected {
            values: Vec::new(),
            allowed: Vec::new(),
        }
    } else {
        Expected {
            values: part(&sums.y, r.v_row0(), r.v_heads),
            allowed: part(&err, r.v_row0(), r.v_heads)
                .into_iter()
                .map(|e| e + 1e-30)
                .collect(),
        }
    };
    Ok(RopeKvReference {
        q: rotated(0, r.q_heads),
        k: rotated(r.k_row0(), r.k_heads),
        v,
    })
}
