//! Activation storage for one ubatch: graph values are mapped onto a few reusable buffers
//! ("slots") by liveness, so a 36-layer model needs about as many activation buffers as one
//! layer has live values at once.

use rocky_models::graph::{Graph, Op, ValueId};

/// Where each value lives.
#[derive(Clone, Debug)]
pub struct SlotPlan {
    /// `slot_of[value]`: the slot holding the value (`None` for the token ids and the logits,
    /// which the executor keeps in buffers of their own).
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
    matches!(op, Op::Rope { .. } | Op::LastRow { .. } | Op::Slice { .. })
}

pub fn output_width(op: &Op) -> usize {
    match op {
        Op::Embedding { width, .. }
        | Op::RmsNorm { width, .. }
        | Op::SwiGlu { width }
        | Op::GeGlu { width }
        | Op::Scale { width, .. }
        | Op::Add { width }
        | Op::LastRow { width }
        | Op::Slice { width, .. } => *width,
        Op::HeadRmsNorm {
            n_heads, head_dim, ..
        } => n_heads * head_dim,
        Op::Linear { out_features, .. } | Op::LinearSwiGlu { out_features, .. } => *out_features,
        Op::LinearStack { parts, .. } => parts.iter().map(|p| p.out_features).sum(),
        Op::Rope {
            n_heads, head_dim, ..
        } => n_heads * head_dim,
        Op::Attention {
            n_heads, head_dim, ..
        } => n_heads * head_dim,
    }
}

/// Which free slot (index into `free`) a value of row width `need` takes: the smallest that
/// already holds it, else the widest (growing one slot costs less than a new one). Without
/// this, every slot ends up as wide as the FFN's hidden layer (5 × 172 MiB at ubatch 4096 on
/// a Qwen2.5-3B instead of 2 wide and 3 narrow).
fn best_fit(free: &[usize], capacity: &[usize], need: usize) -> Option<usize> {
    let fits = free
        .iter()
        .enumerate()
        .filter(|&(_, &s)| capacity[s] >= need)
        .min_by_key(|&(_, &s)| capacity[s]);
    fits.or_else(|| free.iter().enumerate().max_by_key(|&(_, &s)| capacity[s]))
        .map(|(k, _)| k)
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
    // Widest row each slot has held so far (one-row values count as 0: they fit anywhere).
    let mut capacity: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        width_of[node.output] = output_width(&node.op);
        one_row[node.output] =
            matches!(node.op, Op::LastRow { .. }) || node.inputs.iter().any(|&v| one_row[v]);
        let need = if one_row[node.output] {
            0
        } else {
            width_of[node.output]
        };
        // The logits have a host-readable buffer of their own (the executor's), no slot.
        if node.output != graph.logits {
            let slot = if aliases_input(&node.op) {
                slot_of[node.inputs[0]].expect("aliased input has a slot")
            } else if let Some(k) = best_fit(&free, &capacity, need) {
                free.swap_remove(k)
            } else {
                live_in_slot.push(0);
                capacity.push(0);
                live_in_slot.len() - 1
            };
            capacity[slot] = capacity[slot].max(need);
            slot_of[node.output] = Some(slot);
            live_in_slot[slot] += 1;
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_models::arch;
    use rocky_models::gguf::GgufFile;

    /// The tiny Q8_0 model: the shared folder's (`ROCKY_SHARED`, else `../shared` beside the
    /// clone), else the byte-identical copy tools/prepare-test-assets.sh makes in the test
    /// assets' stand-in of it (tests/common/shared_folder.rs has the same rule).
    fn tiny_graph() -> Graph {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let shared = std::env::var_os("ROCKY_SHARED")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join("../shared"));
        let assets = std::env::var_os("ROCKY_TEST_ASSETS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join("target/test-assets"));
        let folder = if shared.join("golden").is_dir() {
            shared
        } else {
            assets.join("shared-standin")
        };
        let path = folder.join("models/qwen2-tiny-q8_0.gguf");
        let file = GgufFile::open(&path).unwrap_or_else(|e| {
            panic!(
                "the tiny model {}: {e} (run tools/setup.sh first)",
                path.display()
            )
        });
        arch::load(&file).expect("a qwen2 graph").graph
    }

    /// Steps during which each value is alive: from the node that makes it to its last reader.
    fn live_ranges(graph: &Graph) -> Vec<Option<(usize, usize)>> {
        let mut range = vec![None; graph.n_values];
        for (i, node) in graph.nodes.iter().enumerate() {
            range[node.output] = Some((i, i));
            for &v in &node.inputs {
                if let Some((start, _)) = range[v] {
                    range[v] = Some((start, i));
                }
            }
        }
        range[graph.logits] = range[graph.logits].map(|(s, _)| (s, usize::MAX));
        range
    }

    #[test]
    fn values_alive_together_never_share_a_slot_unless_aliased() {
        let graph = tiny_graph();
        let plan = plan(&graph);
        let live = live_ranges(&graph);
        // An in-place op's output continues its input's storage: follow it to the root.
        let mut root: Vec<usize> = (0..graph.n_values).collect();
        for node in &graph.nodes {
            if aliases_input(&node.op) {
                root[node.output] = root[node.inputs[0]];
            }
        }
        for a in 0..graph.n_values {
            for b in a + 1..graph.n_values {
                let (Some((sa, ea)), Some((sb, eb))) = (live[a], live[b]) else {
                    continue;
                };
                // Overlap beyond a hand-over step (an input dies where the output is born).
                let overlap = sa.max(sb) < ea.min(eb);
                if overlap && root[a] != root[b] {
                    assert_ne!(
                        plan.slot_of[a], plan.slot_of[b],
                        "values {a} and {b} are alive together in one slot"
                    );
                }
            }
        }
    }

    #[test]
    fn slots_are_as_big_as_their_values_and_not_all_as_wide_as_the_widest() {
        let graph = tiny_graph();
        let plan = plan(&graph);
        let ubatch = 64;
        let bytes = plan.slot_bytes(ubatch);
        for (v, slot) in plan.slot_of.iter().enumerate() {
            if let Some(s) = slot {
                let rows = if plan.one_row[v] { 1 } else { ubatch };
                assert!(
                    bytes[*s] >= (rows * plan.width_of[v] * 4) as u64,
                    "value {v}"
                );
            }
        }
        let widest = plan
            .width_of
            .iter()
            .zip(&plan.one_row)
            .filter(|(_, &one)| !one)
            .map(|(&w, _)| w as u64)
            .max()
            .unwrap()
            * ubatch as u64
            * 4;
        let total: u64 = bytes.iter().sum();
        assert!(
            total < widest * plan.n_slots as u64,
            "every slot sized for the widest value: {bytes:?}"
        );
    }
}
