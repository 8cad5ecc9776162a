//! Causal grouped-query attention over the KV cache (f32, f16 or q8_0, K and V apart; read
//! through [`kv_load`]), flash-attention style: each
//! workgroup walks the keys in blocks with an online softmax (running max and sum, f32
//! accumulation), so nothing of size m × kv is ever stored.
//!
//! - [`workload`]: what is computed, the push constants and the runtime contract;
//! - [`schedule`]: the tunables, their validity and resource estimates, the search space and
//!   the rule-based default;
//! - [`split_kv`] and [`combine`]: decode steps split over the KV length (flash-decoding):
//!   pieces of the keys on their own workgroups, then the merge of their partials;
//! - [`kernel`]: the IR (f32 or packed-f16 products), with the register-tiled variant in
//!   [`tiled`] and the key-split one (Mali) in [`key_split`]; [`reference`]: the CPU oracle (f64,
//!   over K/V as the cache holds them) and each schedule's error bound.

pub mod combine;
pub(crate) mod kernel;
pub(crate) mod key_split;
pub(crate) mod kv_load;
pub mod reference;
pub(crate) mod rows;
pub mod schedule;
pub mod split_kv;
pub(crate) mod tiled;
pub mod workload;

pub use reference::{reference, reference_for, reference_rows, ReferenceRows};
pub use schedule::{
    search_space, seed_schedules, AttentionSchedule, LaneReduce, ATTENTION_SCHEDULE_VERSION,
};
pub use workload::{dispatch_grid, AttentionPush, AttentionWorkload};

use super::compile;

/// The rule-based default ([`schedule::default_schedule`]), with the keys of decode
/// workloads split ([`split_kv::with_default_splits`]).
pub fn default_schedule(w: &AttentionWorkload, caps: &DeviceCaps) -> AttentionSchedule {
    split_kv::with_default_splits(w, schedule::default_schedule(w, caps), caps)
}
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
