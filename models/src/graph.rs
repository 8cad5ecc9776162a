//! The op graph of a model's prefill: what every backend (the CPU reference, the GPU executor)
//! runs. Architectures build it from GGUF metadata; backends interpret it.
//!
//! Values are activations of shape `[n_tokens, width]` (row-major, one row per position of the
//! ubatch), except after `LastRow`, where there is one row. Weights are named GGUF tensors.

pub use rocky_compiler::templates::rope::RopePairing;
use serde::Serialize;

/// Index of an activation value in the graph.
pub type ValueId = usize;

/// An RMSNorm folded into the projection that reads it (`fuse`): the projection's input is
/// the norm's input, normalized per row as `Op::RmsNorm` does with this weight and eps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FoldedNorm {
    pub weight: String,
    pub eps: f32,
}

/// The RoPEs of the query and the key folded into the attention that reads them (`fuse`, the
/// decode step only): the attention's q and k inputs arrive unrotated and are rotated at
/// their positions as `Op::Rope` would (q with the attention's `n_heads`, k with its
/// `n_kv_heads`), the key as it is written into the cache.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FoldedRope {
    pub theta: f32,
    pub pairing: RopePairing,
    pub freq_factors: Option<String>,
}

/// One projection of a [`Op::LinearStack`]: `out_features × in_features` weights, and a bias
/// where the projection has one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StackPart {
    pub weight: String,
    pub bias: Option<String>,
    pub out_features: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Op {
    /// Gather rows of an embedding table by token id (input: the token ids).
    Embedding { table: String, width: usize },
    /// y = x / sqrt(mean(x²) + eps) * weight, per row.
    RmsNorm {
        weight: String,
        eps: f32,
        width: usize,
    },
    /// y = x · Wᵀ (+ bias) (+ r); W is `out_features × in_features` in its GGUF block format.
    /// Inputs x, and with `residual` the residual r (`out_features` wide), which the fusion
    /// pass folds in from an `Add` (see `fuse`). With `norm` (also the fusion pass's) x is
    /// RMS-normalized first: the RMSNorm that fed the projection, folded into it.
    Linear {
        weight: String,
        bias: Option<String>,
        in_features: usize,
        out_features: usize,
        residual: bool,
        norm: Option<FoldedNorm>,
    },
    /// silu(x · Gᵀ) · (x · Uᵀ): the gate and up projections and their SwiGLU in one op (made
    /// by the fusion pass); G and U are `out_features × in_features` in the same block format.
    /// `norm` as for `Linear`.
    LinearSwiGlu {
        gate: String,
        up: String,
        in_features: usize,
        out_features: usize,
        norm: Option<FoldedNorm>,
    },
    /// Projections of one input side by side (made by the fusion pass, for the decode step):
    /// each output row is `[x·W₀ᵀ (+b₀) | x·W₁ᵀ (+b₁) | …]`, part i `parts[i].out_features`
    /// wide. The parts' weights share a block format and `in_features`, so the backend stacks
    /// their rows into one tensor and runs one projection (the attention's Q, K and V as one
    /// GEMV); their readers take each part through [`Op::Slice`]. Every part has a bias or none
    /// has. `norm` as for `Linear`.
    LinearStack {
        parts: Vec<StackPart>,
        in_features: usize,
        norm: Option<FoldedNorm>,
    },
    /// Columns `offset .. offset + width` of each row of the input (one part of a
    /// `LinearStack`'s output; backends may make it a view of its input).
    Slice { offset: usize, width: usize },
    /// Rotary position embedding in place per head: pairs `i` and `i + head_dim/2` (NeoX) or
    /// `2i` and `2i + 1` (normal, Llama); pair i turns by pos · theta^(-2i/head_dim), divided
    /// by `freq_factors[i]` where the model has them (a `head_dim/2` f32 tensor: Llama 3's
    /// `rope_freqs.weight`).
    Rope {
        n_heads: usize,
        head_dim: usize,
        theta: f32,
        pairing: RopePairing,
        freq_factors: Option<String>,
    },
    /// Causal grouped-query attention over the KV cache of `layer`; inputs q, k, v. The new
    /// k and v rows are appended to the cache at the ubatch's positions first. With
    /// `sliding_window = Some(w)` the query at position p sees only keys at positions
    /// p - w < j ≤ p (llama.cpp's standard sliding window, Gemma 3's local layers).
    Attention {
        layer: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        sliding_window: Option<usize>,
        /// Set by the fusion pass: q and k are rotated here (see [`FoldedRope`]).
        rope: Option<FoldedRope>,
    },
    /// RMSNorm of each head: the value is `n_heads × head_dim` wide and every `head_dim`
    /// slice is normalized on its own with the one `head_dim`-long weight (the Q and K norms
    /// of Qwen3 and Gemma 3).
    HeadRmsNorm {
        weight: String,
        eps: f32,
        n_heads: usize,
        head_dim: usize,
    },
    /// y = x · factor (Gemma's embedding scale √n_embd).
    Scale { factor: f32, width: usize },
    /// gelu(gate) * up with GELU's tanh approximation (Gemma's FFN); inputs gate, up.
    GeGlu { width: usize },
    /// silu(gate) * up; inputs gate, up.
    SwiGlu { width: usize },
    /// Elementwise sum (the residual connection); inputs a, b.
    Add { width: usize },
    /// Keeps only the last row (the last position): the logits are needed there only.
    LastRow { width: usize },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub output: ValueId,
    /// Where the node comes from, e.g. "blk.3.attn_q", for profiles and errors.
    pub label: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    pub nodes: Vec<Node>,
    /// The value holding the input token ids.
    pub tokens: ValueId,
    /// The value holding the logits of the last position.
    pub logits: ValueId,
    pub n_values: usize,
}

/// Incremental construction of a graph with fresh value ids.
pub struct GraphBuilder {
    nodes: Vec<Node>,
    n_values: usize,
}

impl GraphBuilder {
    pub fn new() -> (GraphBuilder, ValueId) {
        (
            GraphBuilder {
                nodes: Vec::new(),
                n_values: 1,
            },
            0,
        )
    }

    pub fn push(&mut self, label: impl Into<String>, op: Op, inputs: &[ValueId]) -> ValueId {
        let output = self.n_values;
        self.n_values += 1;
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            output,
            label: label.into(),
        });
        output
    }

    pub fn finish(self, tokens: ValueId, logits: ValueId) -> Graph {
        Graph {
            nodes: self.nodes,
            tokens,
            logits,
            n_values: self.n_values,
        }
    }
}
