//! A graph made ready to record: the graph with its fusions, where each of its values lives
//! (activation slots), and, once prepared for a row count, each node's kernels with their
//! schedules. Nothing here records: `record_node` reads a program to emit dispatches.
//!
//! The executor keeps two programs over the same weights and KV cache:
//! - the prefill's: ubatch-sized slots, in several sets where ubatches overlap, with the
//!   fusions the session chose (tuned per device: the SwiGLU fusion wins at some ubatches
//!   and loses at others);
//! - the decode step's: one row, one set, its own fusions ([`decode_fusions`]): at one row
//!   every dispatch saved is a launch and a barrier saved, and the gate/up GEMV with the SwiGLU
//!   epilogue reads the input once.

use super::rope_kv;
use super::slots::{self, SlotPlan};
use super::ScheduleOrigin;
use crate::{Buffer, BufferRange, Context, RuntimeError};
use rocky_compiler::{Schedule, Workload};
use rocky_models::fuse::FuseOptions;
use rocky_models::graph::Graph;
use std::ops::Range;

/// One node's kernel in a prepared program: its label, workload, schedule and where the
/// schedule came from.
pub type UsedKernel = (String, Workload, Schedule, ScheduleOrigin);

pub(crate) struct Program {
    pub graph: Graph,
    pub plan: SlotPlan,
    /// The activation slots, `n_sets` sets of the plan's slots one after the other.
    pub slots: Vec<Buffer>,
    /// Sets of activation slots and split-K scratch (several when ubatches overlap).
    pub n_sets: usize,
    /// The kernels of every node, in graph order, after `Executor::prepare_program`.
    pub used: Vec<UsedKernel>,
    /// `used[kernels_of[node]]` are the kernels of graph node `node`.
    pub kernels_of: Vec<Range<usize>>,
    /// `scratch_region_of[node]`: the split-K scratch region of a split GEMM node.
    pub scratch_region_of: Vec<Option<usize>>,
    /// The decode step's projections that rotate and write the KV cache themselves
    /// ([`super::rope_kv`]; empty for the prefill), after `Executor::prepare_program`.
    pub rope_kv: rope_kv::Plan,
}

impl Program {
    /// `graph` with `n_sets` sets of activation slots for `rows` rows each; slot buffers are
    /// named with `what` ("activations", "decode activations").
    pub fn new(
        ctx: &Context,
        graph: Graph,
        rows: usize,
        n_sets: usize,
        what: &str,
    ) -> Result<Program, RuntimeError> {
        let plan = slots::plan(&graph);
        let bytes_per_slot = plan.slot_bytes(rows);
        let mut slots = Vec::new();
        for set in 0..n_sets {
            for (i, &bytes) in bytes_per_slot.iter().enumerate() {
                let name = match n_sets {
                    1 => format!("{what}[{i}]"),
                    _ => format!("{what}[{set}][{i}]"),
                };
                slots.push(Buffer::new(ctx, bytes.max(4), &name)?);
            }
        }
        Ok(Program {
            graph,
            plan,
            slots,
            n_sets,
            used: Vec::new(),
            kernels_of: Vec::new(),
            scratch_region_of: Vec::new(),
            rope_kv: rope_kv::Plan::default(),
        })
    }

    /// `rows` rows of graph value `value` from byte `offset`, in slot set `set` (the logits
    /// live in `logits`, outside the slots).
    pub fn value_range<'s>(
        &'s self,
        logits: &'s Buffer,
        value: usize,
        set: usize,
        rows: u32,
        offset: u64,
    ) -> Result<BufferRange<'s>, RuntimeError> {
        let width = self.plan.width_of[value] as u64;
        let buffer = if value == self.graph.logits {
            logits
        } else {
            let slot = self.plan.slot_of[value].expect("activation has a slot");
            &self.slots[set * self.plan.n_slots + slot]
        };
        buffer.range(offset, u64::from(rows) * width * 4)
    }
}

/// The fusions of the decode step: `ROCKY_FUSE` where set (A/B measurements of the prefill
/// and the step alike), else every fusion the weights allow. At one row the separate gate and
/// up GEMVs and the SwiGLU kernel are three launches and two barrier levels for what one GEMV
/// with the SwiGLU epilogue does (H100, 0.5B, steps recorded per token: 255 -> 337 tok/s).
pub fn decode_fusions() -> Result<FuseOptions, String> {
    Ok(FuseOptions::env_override()?.unwrap_or(FuseOptions::ALL))
}
