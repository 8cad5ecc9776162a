//! The GEMM template: `Y = X · Wᵀ (+ bias)` with W in its GGUF block layout, used in place.
//!
//! - [`workload`]: what is computed; [`schedule`]: how (tunables, validity, estimates);
//! - [`space`]: candidates for the tuner; [`default`]: rule-based defaults; [`family`]: the
//!   schedule of a forced arithmetic family;
//! - [`kernel`]: the IR; [`interface`]: bindings, push constants, dispatch, N-slicing;
//! - [`split_k`]: the reduce kernel of split-K across the grid (`k_groups`);
//! - [`reference`]: the CPU oracle.

pub mod default;
pub mod family;
pub mod interface;
pub(crate) mod kernel;
pub mod reference;
pub mod schedule;
pub mod space;
pub mod split_k;
pub mod workload;

pub use default::{default_layout, default_schedule};
pub use family::{family_schedule, Arithmetic};
pub use interface::{dispatch_grid, dispatch_grid_for, n_slices, GemmPush, NSlice};
pub use schedule::{GemmSchedule, Math, Precision, GEMM_SCHEDULE_VERSION};
pub use space::search_space;
pub use workload::{combine_gate_up, ActType, Epilogue, GemmWorkload, RopeKv};

use crate::caps::DeviceCaps;
use crate::dequant::UNIT;
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

/// Checks that the template can compute `w` at all.
pub fn validate_workload(w: &GemmWorkload) -> Result<(), Refusal> {
    validate_shape(w)?;
    if w.rms_norm_eps_bits.is_some() {
        return Err(Refusal::Workload(
            "the GEMM template folds no RMSNorm (the GEMV template does, at most 8 rows)".into(),
        ));
    }
    if let Epilogue::RopeKv(_) = w.epilogue {
        return Err(Refusal::Workload(
            "the GEMM template has no RoPE-and-KV-write epilogue (the GEMV template does, for \
             a decode step)"
                .into(),
        ));
    }
    Ok(())
}

/// What the GEMM and GEMV templates both require of a workload: sizes, block alignment,
/// 32-bit indexing, a layout the format has.
pub(crate) fn validate_shape(w: &GemmWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.n == 0 || w.k == 0 {
        return bad(format!(
            "m, n and k must be at least 1 (got {}×{}×{})",
            w.m, w.n, w.k
        ));
    }
    let block = w.weight.block_elems().max(UNIT);
    if w.k % block != 0 {
        return bad(format!(
            "k = {} is not a multiple of {block} (the {} block / 32-element unit)",
            w.k, w.weight
        ));
    }
    let x_vec4s = u64::from(w.m) * u64::from(w.k) / 4;
    let y_elems = u64::from(w.m) * u64::from(w.n);
    if x_vec4s > u64::from(u32::MAX) || y_elems > u64::from(u32::MAX) {
        return bad(format!(
            "{}×{}×{} is too large for 32-bit indexing",
            w.m, w.n, w.k
        ));
    }
    if w.epilogue == Epilogue::SwiGlu && w.bias {
        return bad("the SwiGLU epilogue takes no bias (gate and up have none in Qwen2)".into());
    }
    if !w.layout.supports(w.weight) {
        return bad(format!(
            "{} weights have no {} layout (it applies to Q8_0, Q5_0 and Q6_K)",
            w.weight, w.layout
        ));
    }
    if w.weight_bytes() > u64::from(u32::MAX) {
        return bad(format!(
            "a weight tensor of {} bytes is too large for 32-bit addressing",
            w.weight_bytes()
        ));
    }
    if w.weight_row_bytes() > u64::from(u32::MAX) / 2 {
        return bad(format!("a weight row of k = {} is too large", w.k));
    }
    Ok(())
}

/// The kernel's IR (for the IR interpreter and for inspection). The pair must validate.
pub fn kernel_ir(w: &GemmWorkload, s: &GemmSchedule) -> crate::ir::Module {
    kernel::build(w, s)
}

/// Instantiates the GEMM template for `w` and `s` on `caps`, or refuses with the reason.
pub fn instantiate(
    w: &GemmWorkload,
    s: &GemmSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    let kernel = super::compile(&kernel::build(w, s), caps)?;
    let meta = &kernel.meta;
    debug_assert_eq!(meta.push_constant_bytes, GemmPush::BYTES);
    debug_assert_eq!(meta.shared_bytes, s.shared_bytes(w));
    Ok(kernel)
}
