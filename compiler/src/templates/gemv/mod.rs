//! The GEMV / small-M GEMM template: `Y = X · Wᵀ (+ bias)` for M = 1 … 8 rows (decode, and
//! prefill ubatches that small), W in its GGUF block layout or the aligned one, used in place.
//!
//! At these M every weight is used by at most 8 rows, so the kernel is bound by reading W:
//! each workgroup computes a few output columns, all its threads split the K reduction
//! (neighbouring threads read neighbouring bytes of a row, wide), dequantize in registers
//! through the same `dequant::ir` fragments as the GEMM (so every weight format the GEMM
//! has comes for free), and add their partial sums up through subgroup adds or shared
//! memory. The GEMM template's tiles, by contrast, make a workgroup own a block of rows and
//! columns and would leave most of it idle at M = 1.
//!
//! The workload type is the GEMM's ([`GemmWorkload`]; m ≤ [`MAX_M`]), and so are the
//! bindings, push constants ([`crate::templates::gemm::GemmPush`]) and N-slicing
//! ([`crate::templates::gemm::n_slices`]); the kernel reads the push constant `k` but uses
//! the workload's. Only the grid differs ([`dispatch_grid_for`]), and there is no split-K
//! across the grid (no scratch). As a [`crate::Workload::Gemv`] it is tuned and stored
//! under keys of its own, apart from the GEMM's.
//!
//! Only the GEMV folds an RMSNorm into its input (`GemmWorkload::rms_norm_eps_bits`): every
//! workgroup reads all of each X row anyway, so it sums the squares as it goes (one more sum
//! in the reduction), multiplies X by the norm weight (binding `norm_weight`) as it loads it,
//! and scales its sums by `1 / sqrt(mean(x²) + eps)` before the bias and epilogue. A decode
//! step so drops the norm's dispatch and its barrier before the Q/K/V and gate/up GEMVs.
//!
//! - [`schedule`]: tunables and validity; [`space`]: candidates and the default;
//! - `kernel`: the IR; [`reference`]: the CPU oracle.

pub(crate) mod kernel;
pub mod reference;
pub mod schedule;
pub mod space;

pub use schedule::{GemvSchedule, Reduce, GEMV_SCHEDULE_VERSION, MAX_M};
pub use space::{default_schedule, search_space};

use crate::caps::DeviceCaps;
use crate::kernel::CompiledKernel;
use crate::kv_type::KvType;
use crate::refusal::Refusal;
use crate::templates::gemm::{ActType, Epilogue, GemmPush, GemmWorkload, RopeKv};

/// Checks that the template can compute `w` at all: what the GEMM accepts, with m ≤ 8.
pub fn validate_workload(w: &GemmWorkload) -> Result<(), Refusal> {
    crate::templates::gemm::validate_shape(w)?;
    if w.m > MAX_M {
        return Err(Refusal::Workload(format!(
            "the GEMV template computes at most {MAX_M} rows, not {} (use the GEMM)",
            w.m
        )));
    }
    if let Epilogue::RopeKv(r) = w.epilogue {
        validate_rope_kv(w, &r)?;
    }
    if let Some(eps) = w.rms_norm_eps() {
        if w.act != crate::templates::gemm::ActType::F32 {
            return Err(Refusal::Workload(
                "a folded RMSNorm reads f32 activations (the decode step's), not f16".into(),
            ));
        }
        if !eps.is_finite() || eps < 0.0 {
            return Err(Refusal::Workload(format!(
                "the folded RMSNorm's eps {eps} must be finite and non-negative"
            )));
        }
    }
    Ok(())
}

/// What the RoPE-and-KV-write epilogue needs: f32 activations, heads of a multiple of 4
/// values, the output columns the rows' quads, whole key and value parts, caches it can write
/// a quad into (f32 or f16) and no N-slicing (the runtime never slices so few rows).
fn validate_rope_kv(w: &GemmWorkload, r: &RopeKv) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.act != ActType::F32 {
        return bad("the RoPE-and-KV-write epilogue stores f32 queries (a decode step's)".into());
    }
    if r.head_dim == 0 || r.head_dim % 4 != 0 {
        return bad(format!(
            "the RoPE-and-KV-write epilogue needs heads of a multiple of 4 values, not {}",
            r.head_dim
        ));
    }
    if r.rows() != 4 * w.n {
        return bad(format!(
            "{} rows of heads are not the {} quads (output columns) of the workload",
            r.rows(),
            w.n
        ));
    }
    for (part, heads) in [("key", r.k_heads), ("value", r.v_heads)] {
        if heads != 0 && heads != r.kv_heads {
            return bad(format!(
                "the {part} part has {heads} heads, not the cache's {}",
                r.kv_heads
            ));
        }
    }
    for ty in [r.kv.k, r.kv.v] {
        if !matches!(ty, KvType::F16 | KvType::F32) {
            return bad(format!(
                "the RoPE-and-KV-write epilogue writes f32 and f16 caches, not {}",
                ty.name()
            ));
        }
    }
    Ok(())
}

/// The kernel's IR (for the IR interpreter and for inspection). The pair must validate.
pub fn kernel_ir(w: &GemmWorkload, s: &GemvSchedule) -> crate::ir::Module {
    kernel::build(w, s)
}

/// Instantiates the GEMV template for `w` and `s` on `caps`, or refuses with the reason.
pub fn instantiate(
    w: &GemmWorkload,
    s: &GemvSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    let kernel = super::compile(&kernel::build(w, s), caps)?;
    debug_assert_eq!(kernel.meta.push_constant_bytes, GemmPush::BYTES);
    Ok(kernel)
}

/// Workgroups for an N-slice of `n` output columns: one per `cols · column_groups` columns, on a
/// two-dimensional grid where they exceed one dimension's guaranteed 65535 (the kernel
/// numbers them `wg.y · numWorkgroups.x + wg.x`; the excess ones compute clamped columns
/// and store nothing).
pub fn dispatch_grid_for(n: u32, s: &GemvSchedule) -> [u32; 3] {
    let groups = n.div_ceil(s.columns_per_workgroup()).max(1);
    let y = groups.div_ceil(super::MAX_GRID_DIM);
    [groups.div_ceil(y), y, 1]
}

/// Workgroups for the whole workload in one dispatch.
pub fn dispatch_grid(w: &GemmWorkload, s: &GemvSchedule) -> [u32; 3] {
    dispatch_grid_for(w.n, s)
}
