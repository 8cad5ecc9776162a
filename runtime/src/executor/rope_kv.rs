//! The decode step's RoPE and KV write done by the Q/K/V projections themselves.
//!
//! With the RoPEs folded into the attention (`fuse::fold_ropes`) a layer of the decode step
//! runs its Q/K/V GEMV, then one kernel that rotates q and k and writes k and v into the cache,
//! then attention: three dependent dispatches. The GEMV's `Epilogue::RopeKv` rotates and
//! stores as it writes its outputs, so the middle dispatch and its dependency level go (one
//! launch and one barrier or counter wait per layer fewer; ~36 on a Qwen2.5-3B step).
//!
//! This module decides where that applies, from the step's graph: an `Attention` with a folded
//! RoPE whose q, k and v come straight from projections (`Slice`s of one `LinearStack`, or
//! `Linear`s: the 3B's layers with a Q6_K value tensor stack q and k and project v alone), each
//! projection read by nothing else, its parts in the order q, k, v and covering its output.
//! The executor then prepares those projections with the epilogue (`node_workloads`), binds
//! the layer's caches, the frequency factors and the step's position to them
//! (`record/linear.rs`) and records no RoPE-and-KV-write kernel for the attention.

use std::collections::{HashMap, HashSet};

use rocky_compiler::kv_type::{KvType, KvTypes};
use rocky_compiler::templates::gemm::RopeKv;
use rocky_models::graph::{FoldedRope, Graph, Op, ValueId};

/// `ROCKY_ROPE_IN_PROJECTION=1` has the projections take the RoPE and the KV write, `=0`
/// (the default) keeps the separate RoPE-and-KV-write kernel.
pub const ENV: &str = "ROCKY_ROPE_IN_PROJECTION";

/// Whether the step's projections take the RoPE and the KV write: only where the environment
/// asks for it. Measured on an NVIDIA H100 (2026-12-07d-device-greedy.md, two interleaved
/// rounds, same greedy tokens): the step with one dispatch and level fewer per layer decodes
/// 2-3 % slower (3B 321 against 330-331 tok/s, 0.5B 709-711 against 728-731): the quad columns'
/// Q/K/V GEMVs lose more than the kernel they remove. On panvk (64 registers) a quad fits only
/// with a lighter schedule, and the Mali cost model PREDICTS the 0.5B's decode 59.3 -> 53.7
/// tok/s with it (2026-12-07b-rope-in-projection.md). So it stays off by default everywhere,
/// kept for A/B runs and for devices where it may win.
pub fn enabled() -> bool {
    std::env::var(ENV).as_deref() == Ok("1")
}

/// A projection that writes its attention's rotated query and its K/V cache rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub epilogue: RopeKv,
    /// The attention's layer (whose caches the projection writes).
    pub layer: usize,
    /// The RoPE's frequency-factor tensor, where the model has one.
    pub freqs: Option<String>,
}

/// Where the step's projections take the RoPE and the KV write.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Graph node index of each such projection.
    pub projections: HashMap<usize, Site>,
    /// Graph node indices of the attentions whose RoPE and KV write their projections do.
    pub attentions: HashSet<usize>,
}

/// The plan for `graph` with caches of `kv` (f32 and f16 only: a q8_0 cache's block scale
/// needs a whole block, and its rotation is not folded anyway).
pub fn plan(graph: &Graph, kv: KvTypes) -> Plan {
    let mut out = Plan::default();
    if ![kv.k, kv.v]
        .iter()
        .all(|t| matches!(t, KvType::F16 | KvType::F32))
    {
        return out;
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let Op::Attention {
            layer,
            n_heads,
            n_kv_heads,
            head_dim,
            rope: Some(rope),
            ..
        } = &node.op
        else {
            continue;
        };
        if head_dim % 4 != 0 {
            continue;
        }
        let heads = [*n_heads, *n_kv_heads, *n_kv_heads];
        let Some(sites) = sources(graph, i, &heads, *head_dim) else {
            continue;
        };
        for (projection, roles) in sites {
            let count = |role: usize| {
                if roles.contains(&role) {
                    heads[role] as u32
                } else {
                    0
                }
            };
            out.projections.insert(
                projection,
                Site {
                    epilogue: epilogue(rope, *head_dim, *n_kv_heads, kv, count),
                    layer: *layer,
                    freqs: rope.freq_factors.clone(),
                },
            );
        }
        out.attentions.insert(i);
    }
    out
}

fn epilogue(
    rope: &FoldedRope,
    head_dim: usize,
    n_kv_heads: usize,
    kv: KvTypes,
    count: impl Fn(usize) -> u32,
) -> RopeKv {
    RopeKv {
        head_dim: head_dim as u32,
        q_heads: count(0),
        k_heads: count(1),
        v_heads: count(2),
        kv_heads: n_kv_heads as u32,
        theta_bits: rope.theta.to_bits(),
        pairing: rope.pairing,
        freq_factors: rope.freq_factors.is_some(),
        kv,
    }
}

/// The projections feeding attention node `at`'s q, k and v (roles 0, 1, 2), each with the
/// roles it computes, or `None` where one input is not a projection's output (or a part of
/// one) that only this attention reads, in role order from column 0 and covering it.
fn sources(
    graph: &Graph,
    at: usize,
    heads: &[usize; 3],
    head_dim: usize,
) -> Option<Vec<(usize, Vec<usize>)>> {
    let inputs = &graph.nodes[at].inputs;
    // (projection node, output column of the part, role) for q, k, v.
    let mut parts: Vec<(usize, usize, usize)> = Vec::new();
    for (role, heads_of_role) in heads.iter().enumerate() {
        let value = *inputs.get(role)?;
        if readers(graph, value) != [at] {
            return None;
        }
        let p = producer(graph, value)?;
        let width = heads_of_role * head_dim;
        match &graph.nodes[p].op {
            Op::Slice { offset, width: w } if *w == width => {
                let stack = producer(graph, graph.nodes[p].inputs[0])?;
                if !matches!(graph.nodes[stack].op, Op::LinearStack { .. }) {
                    return None;
                }
                parts.push((stack, *offset, role));
            }
            Op::Linear {
                out_features,
                residual: false,
                ..
            } if *out_features == width => parts.push((p, 0, role)),
            _ => return None,
        }
    }
    let mut sites: Vec<(usize, Vec<usize>)> = Vec::new();
    for &(projection, _, _) in &parts {
        if sites.iter().any(|(p, _)| *p == projection) {
            continue;
        }
        let mut mine: Vec<(usize, usize)> = parts
            .iter()
            .filter(|(p, _, _)| *p == projection)
            .map(|&(_, offset, role)| (offset, role))
            .collect();
        mine.sort();
        // The parts in role order, each starting where the one before ends, from column 0
        // to the projection's whole width; every reader of the stack one of these slices.
        let mut column = 0;
        for (k, &(offset, role)) in mine.iter().enumerate() {
            if offset != column || (k > 0 && role <= mine[k - 1].1) {
                return None;
            }
            column += heads[role] * head_dim;
        }
        let node = &graph.nodes[projection];
        let whole = match &node.op {
            Op::LinearStack { parts, .. } => parts.iter().map(|p| p.out_features).sum(),
            Op::Linear { out_features, .. } => *out_features,
            _ => return None,
        };
        if column != whole {
            return None;
        }
        if matches!(node.op, Op::LinearStack { .. })
            && readers(graph, node.output).len() != mine.len()
        {
            return None;
        }
        sites.push((projection, mine.iter().map(|&(_, role)| role).collect()));
    }
    Some(sites)
}

/// The nodes that read `v` (once per input that names it).
fn readers(graph: &Graph, v: ValueId) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        for &input in &n.inputs {
            if input == v {
                out.push(i);
            }
        }
    }
    if v == graph.logits {
        out.push(usize::MAX);
    }
    out
}

fn producer(graph: &Graph, v: ValueId) -> Option<usize> {
    graph.nodes.iter().position(|n| n.output == v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_models::fuse::{fuse, FuseOptions};
    use rocky_models::graph::{Node, RopePairing};

    /// A decode step's attention block as the decoder builds it: q, k, v projections (with
    /// biases) of one input, their RoPEs, attention.
    fn layer(v_alone: bool) -> Graph {
        let mut nodes = Vec::new();
        let linear = |name: &str, out: usize, input: usize, output: usize| Node {
            op: Op::Linear {
                weight: format!("{name}.weight"),
                bias: Some(format!("{name}.bias")),
                in_features: 64,
                out_features: out,
                residual: false,
                norm: None,
            },
            inputs: vec![input],
            output,
            label: name.into(),
        };
        let rope = |heads: usize, input: usize, output: usize| Node {
            op: Op::Rope {
                n_heads: heads,
                head_dim: 16,
                theta: 1e6,
                pairing: RopePairing::Neox,
                freq_factors: None,
            },
            inputs: vec![input],
            output,
            label: "rope".into(),
        };
        nodes.push(linear("q", 64, 0, 1));
        nodes.push(linear("k", 32, 0, 2));
        nodes.push(linear(if v_alone { "v6" } else { "v" }, 32, 0, 3));
        nodes.push(rope(4, 1, 4));
        nodes.push(rope(2, 2, 5));
        nodes.push(Node {
            op: Op::Attention {
                layer: 0,
                n_heads: 4,
                n_kv_heads: 2,
                head_dim: 16,
                sliding_window: None,
                rope: None,
            },
            inputs: vec![4, 5, 3],
            output: 6,
            label: "attn".into(),
        });
        Graph {
            nodes,
            tokens: 0,
            logits: 6,
            n_values: 7,
        }
    }

    /// The step's fusions, where the v6 tensor cannot be stacked with the others (another
    /// block format, as the 3B's Q6_K value layers).
    fn fused(v_alone: bool) -> Graph {
        let combinable = |names: &[&str]| !names.iter().any(|n| n.starts_with("v6"));
        fuse(&layer(v_alone), FuseOptions::ALL, &combinable)
    }

    #[test]
    fn a_stacked_qkv_projection_takes_the_rope_and_the_kv_write() {
        let g = fused(false);
        let p = plan(&g, KvTypes::default());
        assert_eq!(p.attentions.len(), 1);
        assert_eq!(p.projections.len(), 1);
        let (&at, site) = p.projections.iter().next().unwrap();
        assert!(matches!(g.nodes[at].op, Op::LinearStack { .. }));
        let e = site.epilogue;
        assert_eq!((e.q_heads, e.k_heads, e.v_heads, e.kv_heads), (4, 2, 2, 2));
        assert_eq!(e.rows(), 128);
    }

    #[test]
    fn a_value_projection_of_its_own_writes_the_v_cache() {
        let g = fused(true);
        let p = plan(&g, KvTypes::default());
        assert_eq!(p.projections.len(), 2);
        let mut parts: Vec<(u32, u32, u32)> = p
            .projections
            .values()
            .map(|s| (s.epilogue.q_heads, s.epilogue.k_heads, s.epilogue.v_heads))
            .collect();
        parts.sort();
        assert_eq!(parts, vec![(0, 0, 2), (4, 2, 0)]);
    }

    #[test]
    fn nothing_is_planned_where_it_cannot_apply() {
        // A q8_0 cache.
        let q8 = KvTypes {
            k: KvType::Q8_0,
            v: KvType::F16,
        };
        assert_eq!(plan(&fused(false), q8), Plan::default());
        // RoPEs not folded (the prefill's graph).
        let unfolded = fuse(
            &layer(false),
            FuseOptions {
                rope: false,
                ..FuseOptions::ALL
            },
            &|_: &[&str]| true,
        );
        assert_eq!(plan(&unfolded, KvTypes::default()), Plan::default());
        // The key projection's output also read elsewhere.
        let mut g = fused(true);
        let stack_out = g
            .nodes
            .iter()
            .find(|n| matches!(n.op, Op::LinearStack { .. }))
            .unwrap()
            .output;
        g.nodes.push(Node {
            op: Op::Slice {
                offset: 0,
                width: 8,
            },
            inputs: vec![stack_out],
            output: g.n_values,
            label: "extra reader".into(),
        });
        g.n_values += 1;
        let p = plan(&g, KvTypes::default());
        assert!(p.attentions.is_empty() && p.projections.is_empty(), "{p:?}");
    }
}
