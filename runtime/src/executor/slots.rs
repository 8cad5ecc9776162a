//! Activation storage for one ubatch: graph values are mapped onto a few reusable buffers
//! ("slots") by liveness, so a 36-layer model needs about as many activation buffers as one
//! layer has live values at once.

use rocky_models::graph::{Graph, Op, ValueId};

/// Where each value lives.
#[derive(Clone, Debug)]
pub struct SlotPlan {
    /// `slot_of[value]`: the slot holding the value (`None` for the token ids).
    pub slot_of: Vec<Option<usize>>,
    pub n_slots: usize,
    /// Row width of each value.
    pub width_of: Vec<usize>,
    /// Values of one row whatever the ubatch: the last row and what is computed from it
    /// (the logits).
    pub one_row: Vec<bool>,
}

impl SlotPlan {
    /// Bytes of each slot at `ubatch` rows: the largest value it ever holds, so a slot of
    /// logits holds one row of the vocabulary, not `ubatch` rows.
    pub fn slot_bytes(&self, ubatch: usize) -> Vec<u64> {
        let mut bytes = vec![0u64; self.n_slots];
        for (v, slot) in self.slot_of.iter().enumerate() {
            if let Some(s) = *slot {
                let rows = if self.one_row[v] { 1 } else { ubatch };
                bytes[s] = bytes[s].max((rows * self.width_of[v] * 4) as u64);
            }
        }
        bytes
    }
}

/// Ops that rewrite or view their input instead of producing a new buffer.
fn aliases_input(op: &Op) -> bool {
    matches!(op, Op::RopeNeox { .. } | Op::LastRow { .. })
}

pub fn output_width(op: &Op) -> usize {
    match op {
        Op::Embedding { width, .. }
        | Op::RmsNorm { width, .. }
        | Op::SwiGlu { width }
        | Op::Add { width }
        | Op::LastRow { width } => *width,
        Op::Linear { out_features, .. } => *out_features,
        Op::RopeNeox {
            n_heads, head_dim, ..
        } => n_heads * head_dim,
        Op::Attention {
            n_heads, head_dim, ..
        } => n_heads * head_dim,
    }
}

pub fn plan(graph: &Graph) -> SlotPlan {
    let n = graph.n_values;
    let mut last_use = vec![0usize; n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for &v in &node.inputs {
            last_use[v] = i;
        }
    }
    last_use[graph.logits] = usize::MAX;
    let mut width_of = vec![0usize; n];
    let mut one_row = vec![false; n];
    let mut slot_of: Vec<Option<usize>> = vec![None; n];
    // Values still alive per slot; a slot is free when it reaches zero.
    let mut live_in_slot: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        width_of[node.output] = output_width(&node.op);
        one_row[node.output] =
            matches!(node.op, Op::LastRow { .. }) || node.inputs.iter().any(|&v| one_row[v]);
        let slot = if aliases_input(&node.op) {
            slot_of[node.inputs[0]].expect("aliased input has a slot")
        } else if let Some(s) = free.pop() {
            s
        } else {
            live_in_slot.push(0);
            live_in_slot.len() - 1
        };
        slot_of[node.output] = Some(slot);
        live_in_slot[slot] += 1;
        // Inputs whose last reader is this node die now (after the output was placed, so an
        // op never writes into a buffer it reads, except the in-place aliases).
        let mut seen: Vec<ValueId> = Vec::new();
        for &v in &node.inputs {
            if last_use[v] == i && !seen.contains(&v) {
                seen.push(v);
                if let Some(s) = slot_of[v] {
                    live_in_slot[s] -= 1;
                    if live_in_slot[s] == 0 {
                        free.push(s);
                    }
                }
            }
        }
    }
    SlotPlan {
        n_slots: live_in_slot.len(),
        slot_of,
        width_of,
        one_row,
    }
}
