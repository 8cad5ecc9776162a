//! The greedy pick on the device: the index of the largest logit, written where the next
//! decode step reads its token, so a greedy generation's steps follow each other on the GPU
//! without the host in between.
//!
//! A replayed decode step (runtime `executor::decode`) reads its token from `ids[0]` and its
//! position from word 1 of the step's args buffer. Appended to that step, this kernel picks
//! the next token from the step's logits, writes it to `ids[0]`, advances the position by one
//! and appends the pick to a host-readable list. The host can then submit the next step
//! before the previous one finished (it needs nothing from it) and read the picks as they
//! come: no logits read back (600 KB a token at a 152k vocabulary), no argmax on the host,
//! and no idle GPU while the host turns one step's result into the next step's input.
//!
//! The pick is the first index holding the largest logit; a NaN is never the largest; where
//! every logit is NaN it is 0 (generate's `sampler::argmax`, llama.cpp's greedy sampler).
//!
//! Contract with the runtime:
//! - bindings: 0 `logits` f32 [n] (read), 1 `ids` u32 (word 0 written), 2 `step_args` u32
//!   (word [`POSITION_WORD`] incremented), 3 `picks` u32 [1 + capacity] (word 0: picks so
//!   far, read and incremented; pick `c` goes to word `1 + c % capacity`);
//! - push constants ([`push_constants`], 8 bytes): `n` (logits), `capacity` (≥ 1);
//! - grid: one workgroup, `[1, 1, 1]`. One workgroup scans all logits (a few microseconds
//!   for 152k on a desktop GPU: less than the host round trip it replaces).

use super::{check_shared, check_threads, compile, push_bytes};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Type, Unroll};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_LOGITS: u32 = 0;
pub const BINDING_IDS: u32 = 1;
pub const BINDING_STEP_ARGS: u32 = 2;
pub const BINDING_PICKS: u32 = 3;

/// The word of the decode step's args buffer that holds the position (word 0 holds `m`).
pub const POSITION_WORD: u32 = 1;

/// The most threads the kernel asks for (fewer where the device allows fewer).
pub const MAX_THREADS: u32 = 256;

/// Threads of the workgroup on `caps`: a power of two, at most [`MAX_THREADS`].
pub fn threads(caps: &DeviceCaps) -> u32 {
    let max = caps
        .max_workgroup_invocations
        .min(caps.max_workgroup_size[0])
        .clamp(1, MAX_THREADS);
    1 << (31 - max.leading_zeros())
}

/// Builds the kernel for `caps`, or refuses it.
pub fn instantiate(caps: &DeviceCaps) -> Result<CompiledKernel, Refusal> {
    let t = threads(caps);
    check_threads(t, caps)?;
    let module = kernel_ir(t);
    check_shared(module.shared_bytes(), caps)?;
    compile(&module, caps)
}

/// The push constants: `n` logits, a pick list of `capacity` words.
pub fn push_constants(n: u32, capacity: u32) -> Vec<u8> {
    push_bytes(&[n, capacity.max(1)])
}

/// The kernel's IR with `threads` threads (a power of two).
pub fn kernel_ir(threads: u32) -> Module {
    assert!(threads.is_power_of_two(), "greedy pick: {threads} threads");
    let b = KernelBuilder::new(format!("greedy_pick_t{threads}"), [threads, 1, 1]);
    let logits = b.buffer(BINDING_LOGITS, "logits", Type::F32, Access::ReadOnly);
    let ids = b.buffer(BINDING_IDS, "ids", Type::U32, Access::ReadWrite);
    let args = b.buffer(BINDING_STEP_ARGS, "step_args", Type::U32, Access::ReadWrite);
    let picks = b.buffer(BINDING_PICKS, "picks", Type::U32, Access::ReadWrite);
    let p_n = b.push_field("n", Type::U32);
    let p_capacity = b.push_field("capacity", Type::U32);
    let values = b.shared_array("best_value", Type::F32, threads);
    let indices = b.shared_array("best_index", Type::U32, threads);
    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let n = b.push(p_n);

    // `candidate` beats `(value, index)` when larger, or equal at a smaller index. Both
    // comparisons are false for a NaN candidate, so a NaN never wins; the starting index
    // u32::MAX loses every tie, so a -inf logit still beats the empty start.
    let beats = |cv, ci, value, index| {
        b.logical_or(
            b.gt(cv, value),
            b.logical_and(b.eq(cv, value), b.lt(ci, index)),
        )
    };

    let best_value = b.var_init("value", b.c_f32(f32::NEG_INFINITY));
    let best_index = b.var_init("index", b.c_u32(u32::MAX));
    let iterations = b.div(b.addi(n, threads - 1), b.c_u32(threads));
    b.for_range(b.c_u32(0), iterations, 1, Unroll::Never, |it| {
        let i = b.add(b.muli(it, threads), tid);
        b.if_(b.lt(i, n), || {
            let v = b.load(logits, i);
            let take = beats(v, i, b.load_var(best_value), b.load_var(best_index));
            b.store_var(best_value, b.select(take, v, b.load_var(best_value)));
            b.store_var(best_index, b.select(take, i, b.load_var(best_index)));
        });
    });

    // A shared-memory tree over the threads' bests (log2(threads) barriers; one workgroup
    // per step, so no subgroup features are needed for it to be cheap).
    b.store_shared(values, tid, b.load_var(best_value));
    b.store_shared(indices, tid, b.load_var(best_index));
    b.barrier();
    let mut stride = threads / 2;
    while stride > 0 {
        b.if_(b.lt(tid, b.c_u32(stride)), || {
            let other = b.addi(tid, stride);
            let (ov, oi) = (b.load_shared(values, other), b.load_shared(indices, other));
            let (v, i) = (b.load_shared(values, tid), b.load_shared(indices, tid));
            let take = beats(ov, oi, v, i);
            b.store_shared(values, tid, b.select(take, ov, v));
            b.store_shared(indices, tid, b.select(take, oi, i));
        });
        b.barrier();
        stride /= 2;
    }

    b.if_(b.eq(tid, b.c_u32(0)), || {
        let index = b.load_shared(indices, b.c_u32(0));
        // Every logit NaN (or no logits): token 0, as the host's argmax.
        let pick = b.select(b.eq(index, b.c_u32(u32::MAX)), b.c_u32(0), index);
        b.store(ids, b.c_u32(0), pick);
        let position = b.c_u32(POSITION_WORD);
        b.store(args, position, b.addi(b.load(args, position), 1));
        let count = b.load(picks, b.c_u32(0));
        let slot = b.addi(b.rem(count, b.push(p_capacity)), 1);
        b.store(picks, slot, pick);
        b.store(picks, b.c_u32(0), b.addi(count, 1));
    });
    b.finish()
}

// ---- CPU reference ------------------------------------------------------------------------

/// The first index of the largest logit, never a NaN; 0 where there is none.
pub fn reference(logits: &[f32]) -> u32 {
    let mut best: Option<(f32, usize)> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if best.map_or(true, |(b, _)| v > b) {
            best = Some((v, i));
        }
    }
    best.map_or(0, |(_, i)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_takes_the_first_largest_and_skips_nans() {
        assert_eq!(reference(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(reference(&[f32::NAN, -1.0, f32::NAN, 0.5]), 3);
        assert_eq!(reference(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(reference(&[f32::NAN, f32::NEG_INFINITY]), 1);
        assert_eq!(reference(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(reference(&[]), 0);
    }

    #[test]
    fn threads_are_a_power_of_two_within_the_device() {
        let mut caps = DeviceCaps::desktop_all_features();
        assert_eq!(threads(&caps), 256);
        caps.max_workgroup_invocations = 200;
        assert_eq!(threads(&caps), 128);
        assert_eq!(kernel_ir(128).workgroup_size, [128, 1, 1]);
    }
}
