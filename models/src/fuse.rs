//! Graph fusion: rewrites a prefill graph so that fewer, larger ops run, whatever the
//! architecture that built it.
//!
//! - `SwiGlu(Linear(h, gate), Linear(h, up))` → `LinearSwiGlu(h)`: one GEMM over the gate and
//!   up weights with silu(gate)·up in its epilogue (one read of h, no SwiGLU dispatch). Only
//!   where both projections have no bias, the same shape and the same block format (the
//!   backend combines the two tensors into one), and nothing else reads their outputs.
//! - `Add(r, Linear(x))` → `Linear(x)` with `residual: true` and inputs `[x, r]`: the residual
//!   add in the GEMM's epilogue. Only where nothing else reads the projection's output.
//!
//! The fused graph computes the same values as the unfused one: the CPU reference evaluates
//! the fused ops as the unfused ops composed (see `reference.rs` and the tests).

use crate::graph::{Graph, Node, Op, ValueId};

/// Which fusions to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuseOptions {
    pub swiglu: bool,
    pub residual: bool,
}

impl FuseOptions {
    pub const ALL: FuseOptions = FuseOptions {
        swiglu: true,
        residual: true,
    };
    pub const NONE: FuseOptions = FuseOptions {
        swiglu: false,
        residual: false,
    };

    /// The default: the residual fusion only. The SwiGLU fusion is correct but whether it is
    /// faster depends on the device and the ubatch (on lavapipe the fastest unfused rule tile
    /// has tn = 1, which cannot pair gate and up; on the H200 tuned it wins at ubatch 512 and
    /// loses at 64), so `rocky tune`'s graph step times both and stores the winner.
    pub const DEFAULT: FuseOptions = FuseOptions {
        swiglu: false,
        residual: true,
    };

    /// The setting of `ROCKY_FUSE`, which overrides the tuned choice (for A/B measurements):
    /// `None` when unset or empty, `1` fuses everything, `0` nothing, `swiglu` or `residual`
    /// only that fusion. Anything else is an error.
    pub fn env_override() -> Result<Option<FuseOptions>, String> {
        let Ok(v) = std::env::var("ROCKY_FUSE") else {
            return Ok(None);
        };
        Ok(Some(match v.as_str() {
            "" => return Ok(None),
            "1" | "all" => FuseOptions::ALL,
            "0" | "none" => FuseOptions::NONE,
            "swiglu" => FuseOptions {
                swiglu: true,
                residual: false,
            },
            "residual" => FuseOptions {
                swiglu: false,
                residual: true,
            },
            other => {
                return Err(format!(
                    "ROCKY_FUSE={other:?}: use 1 (fuse), 0 (do not), swiglu or residual"
                ))
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

/// The fused graph. `same_format(a, b)`: whether weight tensors `a` and `b` have the same
/// block format and byte size (so one combined tensor can hold both).
pub fn fuse(
    graph: &Graph,
    options: FuseOptions,
    same_format: &dyn Fn(&str, &str) -> bool,
) -> Graph {
    let mut nodes: Vec<Option<Node>> = graph.nodes.iter().cloned().map(Some).collect();
    let uses = |nodes: &[Option<Node>], v: ValueId| -> usize {
        let reads = nodes
            .iter()
            .flatten()
            .map(|n| n.inputs.iter().filter(|&&i| i == v).count())
            .sum::<usize>();
        reads + usize::from(v == graph.logits)
    };
    let producer = |nodes: &[Option<Node>], v: ValueId| -> Option<usize> {
        nodes
            .iter()
            .position(|n| n.as_ref().is_some_and(|n| n.output == v))
    };
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
                    },
                    Op::Linear {
                        weight: uw,
                        bias: None,
                        in_features: uk,
                        out_features: unf,
                        residual: false,
                    },
                ) = (&gn.op, &un.op)
                else {
                    continue;
                };
                let fits = g != u
                    && gn.inputs == un.inputs
                    && (gk, gnf) == (uk, unf)
                    && *gnf == width
                    && uses(&nodes, g) == 1
                    && uses(&nodes, u) == 1
                    && same_format(gw, uw);
                if !fits {
                    continue;
                }
                nodes[i] = Some(Node {
                    op: Op::LinearSwiGlu {
                        gate: gw.clone(),
                        up: uw.clone(),
                        in_features: *gk,
                        out_features: width,
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
                    (plain && uses(&nodes, v) == 1 && node.inputs[1 - side] != v)
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
    Graph {
        nodes: nodes.into_iter().flatten().collect(),
        tokens: graph.tokens,
        logits: graph.logits,
        n_values: graph.n_values,
    }
}

/// [`fuse`] for the tensors of `file`: gate and up fuse where their GGUF types and sizes match.
pub fn fuse_for_file(graph: &Graph, file: &crate::gguf::GgufFile, options: FuseOptions) -> Graph {
    let same = |a: &str, b: &str| match (file.tensor(a), file.tensor(b)) {
        (Some(a), Some(b)) => a.ggml_type == b.ggml_type && a.size == b.size && a.dims == b.dims,
        _ => false,
    };
    fuse(graph, options, &same)
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
            in_features: 8,
            out_features: 16,
            residual,
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

    #[test]
    fn gate_up_and_residual_fuse_into_two_gemms() {
        let g = ffn(false);
        let f = fuse(&g, FuseOptions::ALL, &|_, _| true);
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
    fn no_fusion_where_formats_differ_an_output_is_shared_or_it_is_off() {
        let g = ffn(false);
        let f = fuse(&g, FuseOptions::ALL, &|_, _| false);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::SwiGlu { .. })));
        assert!(!f.nodes.iter().any(|n| matches!(n.op, Op::Add { .. })));
        // The gate is read by another op too: the SwiGLU stays; the first add still fuses.
        let g = ffn(true);
        let f = fuse(&g, FuseOptions::ALL, &|_, _| true);
        assert!(f.nodes.iter().any(|n| matches!(n.op, Op::SwiGlu { .. })));
        assert_eq!(
            f.nodes
                .iter()
                .filter(|n| matches!(n.op, Op::Add { .. }))
                .count(),
            1
        );
        let f = fuse(&ffn(false), FuseOptions::NONE, &|_, _| true);
        assert_eq!(f.nodes.len(), ffn(false).nodes.len());
    }
}
