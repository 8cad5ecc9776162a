//! Graph fusion: rewrites a prefill graph so that fewer, larger ops run, whatever the
//! architecture that built it.
//!
//! - `SwiGlu(Linear(h, gate), Linear(h, up))` → `LinearSwiGlu(h)`: one GEMM over the gate and
//!   up weights with silu(gate)·up in its epilogue (one read of h, no SwiGLU dispatch). Only
//!   where both projections have no bias, the same shape and the same block format (the
//!   backend combines the two tensors into one), and nothing else reads their outputs.
//! - `Linear(h, W₀), Linear(h, W₁), …` → `LinearStack(h) → Slice, Slice, …`: projections of
//!   one input (the attention's Q, K and V) as one projection over their stacked rows, each
//!   reader taking its columns through a `Slice`. Only runs of projections (in graph order)
//!   whose tensors the backend holds as one row-stacked tensor (same block format and K; the
//!   backend also checks that each part can be bound where it starts), without residual, all
//!   with a bias or none. At one row a slice is a view: the decode step saves two launches and
//!   reads the input once; only the decode step's program asks for it.
//! - `Add(r, Linear(x))` → `Linear(x)` with `residual: true` and inputs `[x, r]`: the residual
//!   add in the GEMM's epilogue. Only where nothing else reads the projection's output.
//! - `Linear(RmsNorm(x))` → `Linear(x)` with `norm: Some(..)` (and the same for `LinearSwiGlu`):
//!   the norm folded into every projection that reads it (the decode step's Q, K and V, gate/up,
//!   the output projection). Only where every reader of the norm is such a projection; only the
//!   GEMV template computes it, so only the decode step's program asks for it.
//! - `Attention(Rope(q), Rope(k), v)` → `Attention(q, k, v)` with `rope: Some(..)`: the query's
//!   and the key's RoPE done where the key is written into the cache (one kernel for two RoPEs
//!   and two KV writes). Only where both RoPEs have the same parameters, the attention's head
//!   counts, and no other reader; only the decode step's program asks for it.
//!
//! The fused graph computes the same values as the unfused one: the CPU reference evaluates
//! the fused ops as the unfused ops composed (see `reference.rs` and the tests).

use crate::graph::{FoldedNorm, FoldedRope, Graph, Node, Op, StackPart, ValueId};

/// Which fusions to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuseOptions {
    pub swiglu: bool,
    pub residual: bool,
    /// RMSNorm folded into the projections that read it (GEMV only: executors apply it to
    /// the decode step's program alone).
    pub norm: bool,
    /// The query's and key's RoPE folded into the attention (its KV write: executors apply it
    /// to the decode step's program alone).
    pub rope: bool,
    /// Projections of one input stacked into one (`LinearStack` with `Slice`s: executors apply
    /// it to the decode step's program alone, where a slice of one row is a view).
    pub stack: bool,
}

impl FuseOptions {
    pub const ALL: FuseOptions = FuseOptions {
        swiglu: true,
        residual: true,
        norm: true,
        rope: true,
        stack: true,
    };
    pub const NONE: FuseOptions = FuseOptions {
        swiglu: false,
        residual: false,
        norm: false,
        rope: false,
        stack: false,
    };

    /// The default: the residual fusion only. The SwiGLU fusion is correct but whether it is
    /// faster depends on the device and the ubatch (on lavapipe the fastest unfused rule tile
    /// has tn = 1, which cannot pair gate and up; on the H200 tuned it wins at ubatch 512 and
    /// loses at 64), so `rocky tune`'s graph step times both and stores the winner.
    pub const DEFAULT: FuseOptions = FuseOptions {
        swiglu: false,
        residual: true,
        norm: false,
        rope: false,
        stack: false,
    };

    /// The setting of `ROCKY_FUSE`, which overrides the tuned choice (for A/B measurements):
    /// `None` when unset or empty, `1` fuses everything, `0` nothing, else a comma-separated
    /// list of `swiglu`, `residual`, `norm`, `rope`, `stack`: only those. Anything else is an error.
    pub fn env_override() -> Result<Option<FuseOptions>, String> {
        let Ok(v) = std::env::var("ROCKY_FUSE") else {
            return Ok(None);
        };
        Self::parse(&v)
    }

    /// [`FuseOptions::env_override`]'s reading of a value.
    pub fn parse(v: &str) -> Result<Option<FuseOptions>, String> {
        Ok(Some(match v {
            "" => return Ok(None),
            "1" | "all" => FuseOptions::ALL,
            "0" | "none" => FuseOptions::NONE,
            list => {
                let mut f = FuseOptions::NONE;
                for name in list.split(',') {
                    match name.trim() {
                        "swiglu" => f.swiglu = true,
                        "residual" => f.residual = true,
                        "norm" => f.norm = true,
                        "rope" => f.rope = true,
                        "stack" => f.stack = true,
                        _ => {
                            return Err(format!(
                                "ROCKY_FUSE={list:?}: use 1 (fuse), 0 (do not), or a \
                                 comma-separated list of swiglu, residual, norm, rope, stack"
                            ))
                        }
                    }
                }
                f
            }
        }))
    }

    /// [`FuseOptions::env_override`], else `tuned` (the graph-level choice of `rocky tune`:
    /// whether gate and up fuse), else [`FuseOptions::DEFAULT`].
    pub fn resolve(tuned_swiglu: Option<bool>) -> Result<FuseOptions, String> {
        Ok(Self::env_override()?.unwrap_or(FuseOptions {
            swiglu: tuned_swiglu.unwrap_or(FuseOptions::DEFAULT.swiglu),
            ..FuseOptions::DEFAULT
        }))
    }
}

/// What the backend holds (or can hold) as one tensor of several tensors' rows: what decides
/// whether ops that read those tensors can fuse.
pub trait Combined {
    /// Gate and up as one tensor (the gate rows, then the up rows).
    fn gate_up(&self, gate: &str, up: &str) -> bool;
    /// A stack's weights as one tensor (their rows in order) and, where the parts have biases,
    /// their biases as one vector; the backend may also require each part's output columns to
    /// start where it can view them.
    fn stack(&self, weights: &[&str], biases: &[&str]) -> bool;
}

/// A closure answering for any list of tensors (tests; rules that need nothing else).
impl<F: Fn(&[&str]) -> bool> Combined for F {
    fn gate_up(&self, gate: &str, up: &str) -> bool {
        self(&[gate, up])
    }

    fn stack(&self, weights: &[&str], biases: &[&str]) -> bool {
        self(weights) && (biases.is_empty() || self(biases))
    }
}

/// The fused graph, fusing only tensors that `combined` says are (or can be) one.
pub fn fuse(graph: &Graph, options: FuseOptions, combined: &dyn Combined) -> Graph {
    let mut nodes: Vec<Option<Node>> = graph.nodes.iter().cloned().map(Some).collect();
    for i in 0..nodes.len() {
        let Some(node) = nodes[i].clone() else {
            continue;
        };
        match node.op {
            Op::SwiGlu { width } if options.swiglu => {
                let (g, u) = (node.inputs[0], node.inputs[1]);
                let (Some(gi), Some(ui)) = (producer(&nodes, g), producer(&nodes, u)) else {
                    continue;
                };
                let (gn, un) = (nodes[gi].clone().unwrap(), nodes[ui].clone().unwrap());
                let (
                    Op::Linear {
                        weight: gw,
                        bias: None,
                        in_features: gk,
                        out_features: gnf,
                        residual: false,
                        norm: gnorm,
                    },
                    Op::Linear {
                        weight: uw,
                        bias: None,
                        in_features: uk,
                        out_features: unf,
                        residual: false,
                        norm: unorm,
                    },
                ) = (&gn.op, &un.op)
                else {
                    continue;
                };
                let fits = g != u
                    && gn.inputs == un.inputs
                    && gnorm == unorm
                    && (gk, gnf) == (uk, unf)
                    && *gnf == width
                    && uses(&nodes, g, graph.logits) == 1
                    && uses(&nodes, u, graph.logits) == 1
                    && combined.gate_up(gw, uw);
                if !fits {
                    continue;
                }
                nodes[i] = Some(Node {
                    op: Op::LinearSwiGlu {
                        gate: gw.clone(),
                        up: uw.clone(),
                        in_features: *gk,
                        out_features: width,
                        norm: gnorm.clone(),
                    },
                    inputs: gn.inputs.clone(),
                    output: node.output,
                    label: fused_label(&gn.label, &un.label),
                });
                nodes[gi] = None;
                nodes[ui] = None;
            }
            Op::Add { width } if options.residual => {
                // The operand that is a projection read only here takes the add.
                let candidate = [1usize, 0].into_iter().find_map(|side| {
                    let v = node.inputs[side];
                    let pi = producer(&nodes, v)?;
                    let p = nodes[pi].as_ref()?;
                    let plain = matches!(
                        p.op,
                        Op::Linear { residual: false, out_features, .. } if out_features == width
                    );
                    (plain && uses(&nodes, v, graph.logits) == 1 && node.inputs[1 - side] != v)
                        .then_some((side, pi))
                });
                let Some((side, pi)) = candidate else {
                    continue;
                };
                let mut p = nodes[pi].take().unwrap();
                if let Op::Linear { residual, .. } = &mut p.op {
                    *residual = true;
                }
                // At the add's place: the residual is computed by then.
                p.inputs.push(node.inputs[1 - side]);
                p.output = node.output;
                nodes[i] = Some(p);
            }
            _ => {}
        }
    }
    let mut n_values = graph.n_values;
    if options.stack {
        nodes = stack_projections(nodes, graph.logits, combined, &mut n_values);
    }
    if options.norm {
        fold_norms(&mut nodes, graph.logits);
    }
    if options.rope {
        fold_ropes(&mut nodes, graph.logits);
    }
    Graph {
        nodes: nodes.into_iter().flatten().collect(),
        tokens: graph.tokens,
        logits: graph.logits,
        n_values,
    }
}

/// How often `v` is read: by the remaining nodes' inputs, and once more if it is the result.
fn uses(nodes: &[Option<Node>], v: ValueId, logits: ValueId) -> usize {
    let reads = nodes
        .iter()
        .flatten()
        .map(|n| n.inputs.iter().filter(|&&i| i == v).count())
        .sum::<usize>();
    reads + usize::from(v == logits)
}

/// The index of the remaining node that computes `v`.
fn producer(nodes: &[Option<Node>], v: ValueId) -> Option<usize> {
    nodes
        .iter()
        .position(|n| n.as_ref().is_some_and(|n| n.output == v))
}

/// Folds each `RmsNorm` whose every reader is a projection without a folded norm into those
/// readers (after the other fusions, so the fused gate/up takes it too): they read the norm's
/// input and normalize it themselves. A norm whose output is also read by anything else (or is
/// the graph's result) stays.
fn fold_norms(nodes: &mut [Option<Node>], logits: ValueId) {
    for i in 0..nodes.len() {
        let Some(Node {
            op: Op::RmsNorm { weight, eps, width },
            inputs,
            output,
            ..
        }) = nodes[i].clone()
        else {
            continue;
        };
        let readers: Vec<usize> = (0..nodes.len())
            .filter(|&j| {
                nodes[j]
                    .as_ref()
                    .is_some_and(|n| n.inputs.contains(&output))
            })
            .collect();
        let foldable = |n: &Node| {
            n.inputs[0] == output
                && n.inputs[1..].iter().all(|&v| v != output)
                && match &n.op {
                    Op::Linear {
                        in_features, norm, ..
                    }
                    | Op::LinearSwiGlu {
                        in_features, norm, ..
                    }
                    | Op::LinearStack {
                        in_features, norm, ..
                    } => norm.is_none() && *in_features == width,
                    _ => false,
                }
        };
        let all_fold = !readers.is_empty()
            && output != logits
            && readers
                .iter()
                .all(|&j| nodes[j].as_ref().is_some_and(foldable));
        if !all_fold {
            continue;
        }
        for j in readers {
            let n = nodes[j].as_mut().expect("a reader");
            n.inputs[0] = inputs[0];
            if let Op::Linear { norm, .. }
            | Op::LinearSwiGlu { norm, .. }
            | Op::LinearStack { norm, .. } = &mut n.op
            {
                *norm = Some(FoldedNorm {
                    weight: weight.clone(),
                    eps,
                });
            }
        }
        nodes[i] = None;
    }
}

/// Folds the query's and the key's `Rope` into the `Attention` that reads them, where both
/// are RoPEs of that attention's head counts with the same parameters and nothing else reads
/// their outputs (Gemma's query scale between RoPE and attention, say, keeps them apart).
fn fold_ropes(nodes: &mut [Option<Node>], logits: ValueId) {
    for i in 0..nodes.len() {
        let Some(Node {
            op:
                Op::Attention {
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    rope: None,
                    ..
                },
            inputs,
            ..
        }) = nodes[i].clone()
        else {
            continue;
        };
        let (Some(qi), Some(ki)) = (producer(nodes, inputs[0]), producer(nodes, inputs[1])) else {
            continue;
        };
        let (qn, kn) = (nodes[qi].clone().unwrap(), nodes[ki].clone().unwrap());
        let (
            Op::Rope {
                n_heads: qh,
                head_dim: qd,
                theta,
                pairing,
                freq_factors,
            },
            Op::Rope {
                n_heads: kh,
                head_dim: kd,
                theta: k_theta,
                pairing: k_pairing,
                freq_factors: k_factors,
            },
        ) = (&qn.op, &kn.op)
        else {
            continue;
        };
        let same = (*qh, *qd, *kh, *kd) == (n_heads, head_dim, n_kv_heads, head_dim)
            && theta.to_bits() == k_theta.to_bits()
            && pairing == k_pairing
            && freq_factors == k_factors;
        if !same || uses(nodes, qn.output, logits) != 1 || uses(nodes, kn.output, logits) != 1 {
            continue;
        }
        let node = nodes[i].as_mut().expect("the attention");
        node.inputs[0] = qn.inputs[0];
        node.inputs[1] = kn.inputs[0];
        if let Op::Attention { rope, .. } = &mut node.op {
            *rope = Some(FoldedRope {
                theta: *theta,
                pairing: *pairing,
                freq_factors: freq_factors.clone(),
            });
        }
        nodes[qi] = None;
        nodes[ki] = None;
    }
}

/// What a file's tensors allow to combine into one tensor of their rows: gate and up of the
/// same block format and shape; a stack's weights of one block format and row length, and its
/// biases f32 vectors; each combined tensor at most `max_bytes` (a device's largest binding,
/// as the upload sees it; `u64::MAX` for the CPU reference).
pub struct CombinableInFile<'f> {
    pub file: &'f crate::gguf::GgufFile,
    pub max_bytes: u64,
}

impl CombinableInFile<'_> {
    fn same_rows(&self, names: &[&str], same_shape: bool) -> bool {
        let Some(tensors) = names
            .iter()
            .map(|n| self.file.tensor(n))
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        let bytes: u64 = tensors.iter().map(|t| t.size).sum();
        tensors.windows(2).all(|p| {
            p[0].ggml_type == p[1].ggml_type
                && p[0].dims.first() == p[1].dims.first()
                && (!same_shape || (p[0].dims == p[1].dims && p[0].size == p[1].size))
        }) && bytes.next_multiple_of(4) <= self.max_bytes
    }
}

impl Combined for CombinableInFile<'_> {
    fn gate_up(&self, gate: &str, up: &str) -> bool {
        self.same_rows(&[gate, up], true)
    }

    fn stack(&self, weights: &[&str], biases: &[&str]) -> bool {
        let vectors = biases.iter().all(|b| {
            self.file
                .tensor(b)
                .is_some_and(|t| t.ggml_type == crate::formats::GgmlType::F32 && t.dims.len() == 1)
        });
        self.same_rows(weights, false) && vectors
    }
}

/// [`fuse`] for the tensors of `file` ([`CombinableInFile`], no size limit).
pub fn fuse_for_file(graph: &Graph, file: &crate::gguf::GgufFile, options: FuseOptions) -> Graph {
    let combinable = CombinableInFile {
        file,
        max_bytes: u64::MAX,
    };
    fuse(graph, options, &combinable)
}

/// The projections of one input that run as one (see the module's `LinearStack`): for each
/// value, its plain projections (no residual, no folded norm yet) in graph order, cut into
/// runs that `combined` accepts whole (the longest one from the first projection on, then the
/// same for the rest); each run of two or more becomes a `LinearStack` at its first projection's place,
/// followed by one `Slice` per part that keeps the part's output value, so readers are
/// untouched. New values (the stacks' outputs) are numbered from `n_values` on.
fn stack_projections(
    nodes: Vec<Option<Node>>,
    logits: ValueId,
    combined: &dyn Combined,
    n_values: &mut usize,
) -> Vec<Option<Node>> {
    let plain = |n: &Node| match &n.op {
        Op::Linear {
            residual: false,
            norm: None,
            in_features,
            bias,
            ..
        } if n.inputs.len() == 1 && n.output != logits => Some((*in_features, bias.is_some())),
        _ => None,
    };
    let part = |n: &Node| match &n.op {
        Op::Linear {
            weight,
            bias,
            out_features,
            ..
        } => StackPart {
            weight: weight.clone(),
            bias: bias.clone(),
            out_features: *out_features,
        },
        _ => unreachable!("a plain projection"),
    };
    // Runs of node indices, each to become one stack.
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut done = vec![false; nodes.len()];
    for i in 0..nodes.len() {
        let Some(first) = nodes[i].as_ref() else {
            continue;
        };
        let Some(shape) = plain(first) else {
            continue;
        };
        if done[i] {
            continue;
        }
        let group: Vec<usize> = (i..nodes.len())
            .filter(|&j| {
                nodes[j]
                    .as_ref()
                    .is_some_and(|n| n.inputs == first.inputs && plain(n) == Some(shape))
            })
            .collect();
        for &j in &group {
            done[j] = true;
        }
        // The longest prefix the backend holds as one, then the same for what is left: the
        // backend's combined buffers are whole runs (Q+K+V, not Q+K inside it).
        let mut rest = &group[..];
        while rest.len() >= 2 {
            let holds = |run: &[usize]| {
                let parts: Vec<StackPart> = run
                    .iter()
                    .map(|&r| part(nodes[r].as_ref().unwrap()))
                    .collect();
                let weights: Vec<&str> = parts.iter().map(|p| p.weight.as_str()).collect();
                let biases: Vec<&str> = parts.iter().filter_map(|p| p.bias.as_deref()).collect();
                combined.stack(&weights, &biases)
            };
            match (2..=rest.len()).rev().find(|&len| holds(&rest[..len])) {
                Some(len) => {
                    runs.push(rest[..len].to_vec());
                    rest = &rest[len..];
                }
                None => rest = &rest[1..],
            }
        }
    }
    let mut nodes = nodes;
    // The first part's place → the stack and its slices (every part's readers come after it).
    let mut replacement: std::collections::HashMap<usize, Vec<Node>> = Default::default();
    for run in runs {
        let parts_nodes: Vec<Node> = run.iter().map(|&j| nodes[j].take().unwrap()).collect();
        let in_features = match &parts_nodes[0].op {
            Op::Linear { in_features, .. } => *in_features,
            _ => unreachable!("a plain projection"),
        };
        let parts: Vec<StackPart> = parts_nodes.iter().map(part).collect();
        let stacked = *n_values;
        *n_values += 1;
        let labels: Vec<&str> = parts_nodes.iter().map(|n| n.label.as_str()).collect();
        let mut at = vec![Node {
            op: Op::LinearStack {
                parts: parts.clone(),
                in_features,
                norm: None,
            },
            inputs: parts_nodes[0].inputs.clone(),
            output: stacked,
            label: stacked_label(&labels),
        }];
        let mut offset = 0;
        for (part, node) in parts.iter().zip(&parts_nodes) {
            at.push(Node {
                op: Op::Slice {
                    offset,
                    width: part.out_features,
                },
                inputs: vec![stacked],
                output: node.output,
                label: node.label.clone(),
            });
            offset += part.out_features;
        }
        replacement.insert(run[0], at);
    }
    let mut out = Vec::with_capacity(nodes.len() + replacement.len());
    for (i, node) in nodes.into_iter().enumerate() {
        match replacement.remove(&i) {
            Some(at) => out.extend(at.into_iter().map(Some)),
            None => out.push(node),
        }
    }
    out
}

/// `blk.0.attn_q`, `blk.0.attn_k`, `blk.0.attn_v` → `blk.0.attn_qkv`: the labels' common
/// prefix, then what follows it in each.
fn stacked_label(labels: &[&str]) -> String {
    let first = labels[0];
    let common = labels[1..].iter().fold(first.len(), |len, l| {
        first
            .bytes()
            .zip(l.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count()
    });
    let common = first[..common].rfind(['.', '_']).map_or(0, |i| i + 1);
    let mut label = first[..common].to_string();
    for l in labels {
        label.push_str(&l[common..]);
    }
    label
}

/// `blk.3.ffn_gate` + `blk.3.ffn_up` → `blk.3.ffn_gate_up`.
fn fused_label(gate: &str, up: &str) -> String {
    let suffix = up.rsplit('.').next().unwrap_or(up);
    match suffix.strip_prefix("ffn_") {
        Some(rest) => format!("{gate}_{rest}"),
        None => format!("{gate}+{suffix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;

    fn linear(w: &str, residual: bool) -> Op {
        Op::Linear {
            weight: w.into(),
            bias: None,
            in_features: 16,
            out_features: 16,
            residual,
            norm: None,
        }
    }

    /// One FFN block: norm, gate, up, swiglu, down, residual add.
    fn ffn(extra_gate_reader: bool) -> Graph {
        let (mut g, tokens) = GraphBuilder::new();
        let x = g.push(
            "emb",
            Op::Embedding {
                table: "t".into(),
                width: 16,
            },
            &[tokens],
        );
        let h = g.push(
            "norm",
            Op::RmsNorm {
                weight: "n".into(),
                eps: 1e-6,
                width: 16,
            },
            &[x],
        );
        let gate = g.push("blk.0.ffn_gate", linear("gate", false), &[h]);
        let up = g.push("blk.0.ffn_up", linear("up", false), &[h]);
        let act = g.push("blk.0.ffn_swiglu", Op::SwiGlu { width: 16 }, &[gate, up]);
        let down = g.push("blk.0.ffn_down", linear("down", false), &[act]);
        let mut y = g.push("blk.0.ffn_residual", Op::Add { width: 16 }, &[x, down]);
        if extra_gate_reader {
            y = g.push("extra", Op::Add { width: 16 }, &[y, gate]);
        }
        g.finish(tokens, y)
    }

    /// Combining rules for the tests: everything combines, nothing does.
    fn any(_: &[&str]) -> bool {
        true
    }

    fn never(_: &[&str]) -> bool {
        false
    }

    const GEMM_FUSIONS: FuseOptions = FuseOptions {
        norm: false,
        rope: false,
        stack: false,
        ..FuseOptions::ALL
    };

    #[test]
    fn gate_up_and_residual_fuse_into_two_gemms() {
        let g = ffn(false);
        let f = fuse(&g, GEMM_FUSIONS, &any);
        let ops: Vec<&Op> = f.nodes.iter().map(|n| &n.op).collect();
        assert_eq!(f.nodes.len(), 4, "{ops:?}");
        let gu = &f.nodes[2];
        assert_eq!(gu.label, "blk.0.ffn_gate_up");
        assert!(
            matches!(&gu.op, Op::LinearSwiGlu { gate, up, .. } if gate == "gate" && up == "up")
        );
        assert_eq!(gu.inputs, vec![g.nodes[1].output]);
        let down = &f.nodes[3];
        assert!(matches!(down.op, Op::Linear { residual: true, .. }));
        // x·W_downᵀ + x: the activation, then the residual (the embedding).
        assert_eq!(down.inputs, vec![gu.output, g.nodes[0].output]);
        assert_eq!(down.output, f.logits);
    }

    #[test]
    fn the_norm_folds_into_every_projection_that_reads_it() {
        let g = ffn(false);
        let f = fuse(&g, FuseOptions::ALL, &any);
        // embedding, gate/up (the norm folded in), down with the residual.
        assert_eq!(f.nodes.len(), 3, "{:?}", f.nodes);
        let gu = &f.nodes[1];
        let want = Some(FoldedNorm {
            weight: "n".into(),
            eps: 1e-6,
        });
        assert!(
            matches!(&gu.op, Op::LinearSwiGlu { norm, .. } if *norm == want),
            "{gu:?}"
        );
        // It reads the norm's input, the embedding.
        assert_eq!(gu.inputs, vec![g.nodes[0].output]);
        // Unfused gate and up take it each.
        let f = fuse(
            &g,
            FuseOptions {
                swiglu: false,
                stack: false,
                ..FuseOptions::ALL
            },
            &any,
        );
        let normed = f
            .nodes
            .iter()
            .filter(|n| matches!(&n.op, Op::Linear { norm, .. } if *norm == want))
            .count();
        assert_eq!(normed, 2);
        assert!(!f.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })));
        // A norm something else reads too stays, and no projection takes it.
        let (mut b, tokens) = GraphBuilder::new();
        let x = b.push(
            "emb",
            Op::Embedding {
                table: "t".into(),
                width: 16,
            },
            &[tokens],
        );
        let norm = Op::RmsNorm {
            weight: "n".into(),
            eps: 1e-6,
            width: 16,
        };
        let h = b.push("norm", norm, &[x]);
        let q = b.push("q", linear("q", false), &[h]);
        let y = b.push("add", Op::Add { width: 16 }, &[q, h]);
        let f = fuse(&b.finish(tokens, y), FuseOptions::ALL, &any);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })));
        assert!(f
            .nodes
            .iter()
            .all(|n| !matches!(&n.op, Op::Linear { norm: Some(_), .. })));
        // Off: nothing folds.
        let f = fuse(&g, GEMM_FUSIONS, &any);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })));
    }

    #[test]
    fn rocky_fuse_lists_fusions_by_name() {
        assert_eq!(FuseOptions::parse(""), Ok(None));
        assert_eq!(FuseOptions::parse("1"), Ok(Some(FuseOptions::ALL)));
        assert_eq!(FuseOptions::parse("none"), Ok(Some(FuseOptions::NONE)));
        assert_eq!(
            FuseOptions::parse("swiglu,residual"),
            Ok(Some(GEMM_FUSIONS))
        );
        assert_eq!(
            FuseOptions::parse("norm"),
            Ok(Some(FuseOptions {
                norm: true,
                ..FuseOptions::NONE
            }))
        );
        assert_eq!(
            FuseOptions::parse("rope, norm"),
            Ok(Some(FuseOptions {
                norm: true,
                rope: true,
                ..FuseOptions::NONE
            }))
        );
        assert_eq!(
            FuseOptions::parse("stack"),
            Ok(Some(FuseOptions {
                stack: true,
                ..FuseOptions::NONE
            }))
        );
        assert!(FuseOptions::parse("swiglu,nrom").is_err());
    }

    #[test]
    fn no_fusion_where_formats_differ_an_output_is_shared_or_it_is_off() {
        let g = ffn(false);
        let f = fuse(&g, GEMM_FUSIONS, &never);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::SwiGlu { .. })));
        assert!(!f.nodes.iter().any(|n| matches!(n.op, Op::Add { .. })));
        // The gate is read by another op too: the SwiGLU stays; the first add still fuses.
        let g = ffn(true);
        let f = fuse(&g, GEMM_FUSIONS, &any);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::SwiGlu { .. })));
        assert_eq!(
            f.nodes
                .iter()
                .filter(|n| matches!(n.op, Op::Add { .. }))
                .count(),
            1
        );
        let f = fuse(&ffn(false), FuseOptions::NONE, &any);
        assert_eq!(f.nodes.len(), ffn(false).nodes.len());
    }

    /// An attention block's projections: norm, then Q (16 wide), K and V (8 wide each, with
    /// biases where `biases`) of the norm, into the attention.
    fn qkv(biases: [bool; 3]) -> Graph {
        let (mut g, tokens) = GraphBuilder::new();
        let x = g.push(
            "emb",
            Op::Embedding {
                table: "t".into(),
                width: 16,
            },
            &[tokens],
        );
        let norm = Op::RmsNorm {
            weight: "n".into(),
            eps: 1e-6,
            width: 16,
        };
        let h = g.push("blk.0.attn_norm", norm, &[x]);
        let proj = |name: &str, out_features, bias: bool| Op::Linear {
            weight: name.into(),
            bias: bias.then(|| format!("{name}.bias")),
            in_features: 16,
            out_features,
            residual: false,
            norm: None,
        };
        let q = g.push("blk.0.attn_q", proj("q", 16, biases[0]), &[h]);
        let k = g.push("blk.0.attn_k", proj("k", 8, biases[1]), &[h]);
        let v = g.push("blk.0.attn_v", proj("v", 8, biases[2]), &[h]);
        let attention = Op::Attention {
            layer: 0,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 4,
            sliding_window: None,
            rope: None,
        };
        let y = g.push("blk.0.attn", attention, &[q, k, v]);
        g.finish(tokens, y)
    }

    fn stack_only() -> FuseOptions {
        FuseOptions {
            stack: true,
            ..FuseOptions::NONE
        }
    }

    #[test]
    fn projections_of_one_input_stack_into_one_with_a_slice_per_part() {
        let g = qkv([true; 3]);
        let f = fuse(&g, stack_only(), &any);
        let ops: Vec<&Op> = f.nodes.iter().map(|n| &n.op).collect();
        // embedding, norm, the stack, three slices, the attention.
        assert_eq!(f.nodes.len(), 7, "{ops:?}");
        let stack = &f.nodes[2];
        assert_eq!(stack.label, "blk.0.attn_qkv");
        let Op::LinearStack {
            parts,
            in_features: 16,
            norm: None,
        } = &stack.op
        else {
            panic!("{stack:?}")
        };
        let got: Vec<(&str, Option<&str>, usize)> = parts
            .iter()
            .map(|p| (p.weight.as_str(), p.bias.as_deref(), p.out_features))
            .collect();
        assert_eq!(
            got,
            [
                ("q", Some("q.bias"), 16),
                ("k", Some("k.bias"), 8),
                ("v", Some("v.bias"), 8)
            ]
        );
        assert_eq!(stack.inputs, vec![g.nodes[1].output]);
        // A new value for the stack; the slices keep the parts' values, so the attention
        // reads what it read.
        assert_eq!(f.n_values, g.n_values + 1);
        assert_eq!(stack.output, g.n_values);
        let slices: Vec<(usize, usize, usize, &str)> = f.nodes[3..6]
            .iter()
            .map(|n| match n.op {
                Op::Slice { offset, width } => {
                    assert_eq!(n.inputs, vec![stack.output]);
                    (offset, width, n.output, n.label.as_str())
                }
                _ => panic!("{n:?}"),
            })
            .collect();
        let (q, k, v) = (g.nodes[2].output, g.nodes[3].output, g.nodes[4].output);
        assert_eq!(
            slices,
            [
                (0, 16, q, "blk.0.attn_q"),
                (16, 8, k, "blk.0.attn_k"),
                (24, 8, v, "blk.0.attn_v")
            ]
        );
        assert_eq!(f.nodes[6].inputs, vec![q, k, v]);
        // With the norm fold, the stack takes the norm.
        let f = fuse(
            &g,
            FuseOptions {
                norm: true,
                ..stack_only()
            },
            &any,
        );
        assert!(!f.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })));
        assert!(f.nodes.iter().any(|n| matches!(
            &n.op,
            Op::LinearStack { norm: Some(FoldedNorm { weight, .. }), .. } if weight == "n"
        )));
    }

    #[test]
    fn a_stack_takes_only_the_runs_the_backend_holds_as_one_tensor() {
        let g = qkv([true; 3]);
        // V in another format: Q and K stack, V stays a projection.
        let f = fuse(&g, stack_only(), &|names: &[&str]| !names.contains(&"v"));
        let stacks: Vec<Vec<&str>> = f
            .nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::LinearStack { parts, .. } => {
                    Some(parts.iter().map(|p| p.weight.as_str()).collect())
                }
                _ => None,
            })
            .collect();
        assert_eq!(stacks, [vec!["q", "k"]]);
        assert!(f
            .nodes
            .iter()
            .any(|n| matches!(&n.op, Op::Linear { weight, .. } if weight == "v")));
        // Only the whole run is one tensor (as the upload combines it): it stacks whole.
        let f = fuse(&g, stack_only(), &|names: &[&str]| names.len() == 3);
        assert!(f.nodes.iter().any(|n| matches!(
            &n.op,
            Op::LinearStack { parts, .. } if parts.len() == 3
        )));
        // Nothing combines: nothing changes; some parts with a bias and some without: the
        // biased ones stack apart from the others (here Q alone, so only K and V).
        let f = fuse(&g, stack_only(), &never);
        assert_eq!(f.nodes, g.nodes);
        let f = fuse(&qkv([true, false, false]), stack_only(), &any);
        assert!(f.nodes.iter().any(|n| matches!(
            &n.op,
            Op::LinearStack { parts, .. } if parts.len() == 2 && parts[0].weight == "k"
        )));
        // Off: nothing stacks.
        let f = fuse(&g, FuseOptions::NONE, &any);
        assert_eq!(f.nodes, g.nodes);
    }

    #[test]
    fn stacked_labels_keep_the_common_prefix_once() {
        assert_eq!(
            stacked_label(&["blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"]),
            "blk.0.attn_qkv"
        );
        assert_eq!(
            stacked_label(&["blk.1.ffn_gate", "blk.1.ffn_up"]),
            "blk.1.ffn_gateup"
        );
        assert_eq!(stacked_label(&["a", "b"]), "ab");
    }
}
