//! The decoder every architecture here is: an embedding, `n_layer` pre-norm blocks (attention
//! then a gated FFN, each added back to the residual stream), a final RMSNorm of the last row
//! and the output projection. Llama, Qwen2/3 and Gemma 3 differ only in the options of
//! [`Decoder`] (biases, Q/K head norms, post-norms, the FFN's gate, the RoPE pairing) and in
//! what [`LayerAttention`] says per layer (RoPE base, sliding window, query scale), so the
//! tensors a file must hold and the graph built from it both come from this one description.

use super::{expect_outer_tensors, expect_tensor, ModelConfig, ModelError};
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder, Op, RopePairing, ValueId};

/// The gated activation of the FFN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gate {
    /// silu(gate) · up (Llama, Qwen).
    SwiGlu,
    /// gelu_tanh(gate) · up (Gemma).
    GeGlu,
}

/// What an architecture's blocks have beyond the plain Llama block.
#[derive(Clone, Debug)]
pub(super) struct Decoder {
    /// The embedding rows are multiplied by this before the first block (Gemma: √n_embd).
    pub embd_scale: Option<f32>,
    /// Q, K and V projections add `attn_{q,k,v}.bias` (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of Q and K before RoPE, `attn_{q,k}_norm.weight` (Qwen3, Gemma 3).
    pub qk_norm: bool,
    pub rope_pairing: RopePairing,
    /// Tensor of RoPE frequency factors shared by all layers (Llama 3.1+).
    pub rope_freq_factors: Option<&'static str>,
    /// RMSNorm of the attention and FFN outputs before they join the residual stream,
    /// `post_attention_norm.weight` and `post_ffw_norm.weight` (Gemma 3).
    pub post_norms: bool,
    pub gate: Gate,
}

/// What may change from one layer's attention to the next.
#[derive(Clone, Copy, Debug)]
pub(super) struct LayerAttention {
    pub rope_theta: f32,
    pub sliding_window: Option<usize>,
    /// Q is multiplied by this after RoPE (on top of the attention op's 1/√head_dim).
    pub query_scale: Option<f32>,
}

impl LayerAttention {
    /// Full attention with the model's RoPE base and no extra scale.
    pub fn plain(c: &ModelConfig) -> LayerAttention {
        LayerAttention {
            rope_theta: c.rope_theta,
            sliding_window: None,
            query_scale: None,
        }
    }
}

impl Decoder {
    /// Checks the shape of every block tensor these options need (the outer ones too).
    pub fn check_tensors(&self, file: &GgufFile, c: &ModelConfig) -> Result<(), ModelError> {
        let (e, q, kv, f, d) = (
            c.n_embd,
            c.n_head * c.head_dim,
            c.n_head_kv * c.head_dim,
            c.n_ff,
            c.head_dim,
        );
        expect_outer_tensors(file, c)?;
        for l in 0..c.n_layer {
            let t = |s: &str| format!("blk.{l}.{s}");
            expect_tensor(file, &t("attn_norm.weight"), &[e])?;
            expect_tensor(file, &t("attn_q.weight"), &[e, q])?;
            expect_tensor(file, &t("attn_k.weight"), &[e, kv])?;
            expect_tensor(file, &t("attn_v.weight"), &[e, kv])?;
            if self.qkv_bias {
                expect_tensor(file, &t("attn_q.bias"), &[q])?;
                expect_tensor(file, &t("attn_k.bias"), &[kv])?;
                expect_tensor(file, &t("attn_v.bias"), &[kv])?;
            }
            if self.qk_norm {
                expect_tensor(file, &t("attn_q_norm.weight"), &[d])?;
                expect_tensor(file, &t("attn_k_norm.weight"), &[d])?;
            }
            expect_tensor(file, &t("attn_output.weight"), &[q, e])?;
            if self.post_norms {
                expect_tensor(file, &t("post_attention_norm.weight"), &[e])?;
            }
            expect_tensor(file, &t("ffn_norm.weight"), &[e])?;
            expect_tensor(file, &t("ffn_gate.weight"), &[e, f])?;
            expect_tensor(file, &t("ffn_up.weight"), &[e, f])?;
            expect_tensor(file, &t("ffn_down.weight"), &[f, e])?;
            if self.post_norms {
                expect_tensor(file, &t("post_ffw_norm.weight"), &[e])?;
            }
        }
        Ok(())
    }

    /// The prefill graph; `attention(l)` gives layer `l`'s RoPE base, window and query scale.
    pub fn build_graph(
        &self,
        c: &ModelConfig,
        attention: impl Fn(usize) -> LayerAttention,
    ) -> Graph {
        let e = c.n_embd;
        let (mut g, tokens) = GraphBuilder::new();
        let mut x = g.push(
            "token_embd",
            Op::Embedding {
                table: "token_embd.weight".into(),
                width: e,
            },
            &[tokens],
        );
        if let Some(factor) = self.embd_scale {
            x = g.push("token_embd_scale", Op::Scale { factor, width: e }, &[x]);
        }
        let b = Blocks { d: self, c };
        for l in 0..c.n_layer {
            let p = |s: &str| format!("blk.{l}.{s}");
            let o = b.attention(&mut g, l, &attention(l), x);
            x = g.push(p("attn_residual"), Op::Add { width: e }, &[x, o]);
            let down = b.ffn(&mut g, l, x);
            x = g.push(p("ffn_residual"), Op::Add { width: e }, &[x, down]);
        }
        let last = g.push("last_row", Op::LastRow { width: e }, &[x]);
        let h = g.push("output_norm", b.norm("output_norm.weight".into()), &[last]);
        let logits = g.push(
            "output",
            linear(c.output_tensor().to_string(), false, e, c.n_vocab),
            &[h],
        );
        g.finish(tokens, logits)
    }
}

/// The options and the configuration, for building one block's sub-graphs.
struct Blocks<'a> {
    d: &'a Decoder,
    c: &'a ModelConfig,
}

impl Blocks<'_> {
    fn norm(&self, weight: String) -> Op {
        Op::RmsNorm {
            weight,
            eps: self.c.rms_eps,
            width: self.c.n_embd,
        }
    }

    /// Norm, Q/K/V, [head norms], RoPE, [query scale], attention, output projection,
    /// [post-norm]: the value to add to the residual stream `x`.
    fn attention(&self, g: &mut GraphBuilder, l: usize, a: &LayerAttention, x: ValueId) -> ValueId {
        let (c, d) = (self.c, self.d);
        let (e, q_w, kv_w) = (c.n_embd, c.n_head * c.head_dim, c.n_head_kv * c.head_dim);
        let p = |s: &str| format!("blk.{l}.{s}");
        let h = g.push(p("attn_norm"), self.norm(p("attn_norm.weight")), &[x]);
        let bias = d.qkv_bias;
        let mut q = g.push(p("attn_q"), linear(p("attn_q.weight"), bias, e, q_w), &[h]);
        let mut k = g.push(p("attn_k"), linear(p("attn_k.weight"), bias, e, kv_w), &[h]);
        let v = g.push(p("attn_v"), linear(p("attn_v.weight"), bias, e, kv_w), &[h]);
        if d.qk_norm {
            let head_norm = |w: String, n_heads| Op::HeadRmsNorm {
                weight: w,
                eps: c.rms_eps,
                n_heads,
                head_dim: c.head_dim,
            };
            q = g.push(
                p("attn_q_norm"),
                head_norm(p("attn_q_norm.weight"), c.n_head),
                &[q],
            );
            k = g.push(
                p("attn_k_norm"),
                head_norm(p("attn_k_norm.weight"), c.n_head_kv),
                &[k],
            );
        }
        let rope = |n_heads| Op::Rope {
            n_heads,
            head_dim: c.head_dim,
            theta: a.rope_theta,
            pairing: d.rope_pairing,
            freq_factors: d.rope_freq_factors.map(str::to_string),
        };
        let mut q = g.push(p("rope_q"), rope(c.n_head), &[q]);
        let k = g.push(p("rope_k"), rope(c.n_head_kv), &[k]);
        if let Some(factor) = a.query_scale {
            let scale = Op::Scale { factor, width: q_w };
            q = g.push(p("attn_q_scale"), scale, &[q]);
        }
        let attn = g.push(
            p("attn"),
            Op::Attention {
                layer: l,
                n_heads: c.n_head,
                n_kv_heads: c.n_head_kv,
                head_dim: c.head_dim,
                sliding_window: a.sliding_window,
                rope: None,
            },
            &[q, k, v],
        );
        let wo = linear(p("attn_output.weight"), false, q_w, e);
        let o = g.push(p("attn_output"), wo, &[attn]);
        if d.post_norms {
            let post = self.norm(p("post_attention_norm.weight"));
            return g.push(p("post_attention_norm"), post, &[o]);
        }
        o
    }

    /// Norm, gate and up, the gated activation, down, [post-norm]: the value to add to the
    /// residual stream `x`.
    fn ffn(&self, g: &mut GraphBuilder, l: usize, x: ValueId) -> ValueId {
        let (e, f) = (self.c.n_embd, self.c.n_ff);
        let p = |s: &str| format!("blk.{l}.{s}");
        let h = g.push(p("ffn_norm"), self.norm(p("ffn_norm.weight")), &[x]);
        let gate = g.push(
            p("ffn_gate"),
            linear(p("ffn_gate.weight"), false, e, f),
            &[h],
        );
        let up = g.push(p("ffn_up"), linear(p("ffn_up.weight"), false, e, f), &[h]);
        let (label, op) = match self.d.gate {
            Gate::SwiGlu => ("ffn_swiglu", Op::SwiGlu { width: f }),
            Gate::GeGlu => ("ffn_geglu", Op::GeGlu { width: f }),
        };
        let act = g.push(p(label), op, &[gate, up]);
        let down = g.push(
            p("ffn_down"),
            linear(p("ffn_down.weight"), false, f, e),
            &[act],
        );
        if self.d.post_norms {
            let post = self.norm(p("post_ffw_norm.weight"));
            return g.push(p("post_ffw_norm"), post, &[down]);
        }
        down
    }
}

/// A projection by GGUF tensor `weight`, with its `.bias` tensor when `bias`.
fn linear(weight: String, bias: bool, in_features: usize, out_features: usize) -> Op {
    Op::Linear {
        bias: bias.then(|| weight.replace(".weight", ".bias")),
        weight,
        in_features,
        out_features,
        residual: false,
        norm: None,
    }
}
