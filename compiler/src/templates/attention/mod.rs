//! Causal grouped-query attention over the f16 KV cache, flash-attention style: each
//! workgroup walks the keys in blocks with an online softmax (running max and sum, f32
//! accumulation), so nothing of size m × kv is ever stored.
//!
//! - [`workload`]: what is computed, the push constants and the runtime contract;
//! - [`schedule`]: the tunables, their validity and resource estimates, the search space and
//!   the rule-based default;
//! - [`kernel`]: the IR (f32 or packed-f16 products), with the register-tiled variant in
//!   [`tiled`] and the key-split one (Mali) in [`key_split`]; [`reference`]: the CPU oracle (f64,
//!   f16-rounded K/V) and each schedule's error bound.

pub(crate) mod kernel;
pub(crate) mod key_split;
pub mod reference;
pub(crate) mod rows;
pub mod schedule;
pub(crate) mod tiled;
pub mod workload;

pub use reference::{reference, reference_for, reference_rows, ReferenceRows};
pub use schedule::{
    default_schedule, search_space, seed_schedules, AttentionSchedule, LaneReduce,
    ATTENTION_SCHEDULE_VERSION,
};
pub use workload::{dispatch_grid, AttentionPush, AttentionWorkload};

use super::compile;
use crate::caps::DeviceCaps;
use crate::ir::Module;
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

/// Instantiates the attention template for `w` and `s` on `caps`, or refuses with the reason.
pub fn instantiate(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    w.validate()?;
    s.validate(w, caps)?;
    let k = compile(&kernel::build(w, s), caps)?;
    debug_assert_eq!(k.meta.shared_bytes, s.shared_bytes(w));
    Ok(k)
}

/// The kernel's IR (for the interpreter and for inspection). The pair must validate.
pub fn kernel_ir(w: &AttentionWorkload, s: &AttentionSchedule) -> Module {
    kernel::build(w, s)
}
