//! Qwen2 / Qwen2.5 (`general.architecture = qwen2`), as llama.cpp's qwen2 loader reads it:
//! QKV biases, grouped-query attention, NeoX RoPE, RMSNorm, SwiGLU FFN, tied or separate
//! output projection. Qwen3 (`qwen3`) is the same graph without the QKV biases and with a
//! per-head RMSNorm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).

use super::{
    expect_outer_tensors, expect_tensor, read_decoder_config, Model, ModelConfig, ModelError,
};
use crate::gguf::GgufFile;
use crate::graph::{GraphBuilder, Op, RopePairing};

/// The two members of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Variant {
    Qwen2,
    Qwen3,
}

impl Variant {
    fn arch(self) -> &'static str {
        match self {
            Variant::Qwen2 => "qwen2",
            Variant::Qwen3 => "qwen3",
        }
    }

    fn qkv_bias(self) -> bool {
        self == Variant::Qwen2
    }

    fn qk_norm(self) -> bool {
        self == Variant::Qwen3
    }
}

pub(super) fn load(file: &GgufFile, variant: Variant) -> Result<Model, ModelError> {
    let config = read_config(file, variant)?;
    check_tensors(file, &config, variant)?;
    let graph = build_graph(&config, variant);
    Ok(Model { config, graph })
}

fn read_config(file: &GgufFile, variant: Variant) -> Result<ModelConfig, ModelError> {
    read_decoder_config(file, variant.arch(), 10000.0)
}

fn check_tensors(file: &GgufFile, c: &ModelConfig, variant: Variant) -> Result<(), ModelError> {
    let (e, q, kv, f) = (
        c.n_embd,
        c.n_head * c.head_dim,
        c.n_head_kv * c.head_dim,
        c.n_ff,
    );
    expect_outer_tensors(file, c)?;
    for l in 0..c.n_layer {
        let t = |s: &str| format!("blk.{l}.{s}");
        expect_tensor(file, &t("attn_norm.weight"), &[e])?;
        expect_tensor(file, &t("attn_q.weight"), &[e, q])?;
        expect_tensor(file, &t("attn_k.weight"), &[e, kv])?;
        expect_tensor(file, &t("attn_v.weight"), &[e, kv])?;
        if variant.qkv_bias() {
            expect_tensor(file, &t("attn_q.bias"), &[q])?;
            expect_tensor(file, &t("attn_k.bias"), &[kv])?;
            expect_tensor(file, &t("attn_v.bias"), &[kv])?;
        }
        if variant.qk_norm() {
            expect_tensor(file, &t("attn_q_norm.weight"), &[c.head_dim])?;
            expect_tensor(file, &t("attn_k_norm.weight"), &[c.head_dim])?;
        }
        expect_tensor(file, &t("attn_output.weight"), &[q, e])?;
        expect_tensor(file, &t("ffn_norm.weight"), &[e])?;
        expect_tensor(file, &t("ffn_gate.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_up.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_down.weight"), &[f, e])?;
    }
    Ok(())
}

fn build_graph(c: &ModelConfig, variant: Variant) -> crate::graph::Graph {
    let (e, q_w, kv_w, f) = (
        c.n_embd,
        c.n_head * c.head_dim,
        c.n_head_kv * c.head_dim,
        c.n_ff,
    );
    let (mut g, tokens) = GraphBuilder::new();
    let linear = |w: String, bias: bool, in_features, out_features| Op::Linear {
        bias: bias.then(|| w.replace(".weight", ".bias")),
        weight: w,
        in_features,
        out_features,
        residual: false,
    };
    let mut x = g.push(
        "token_embd",
        Op::Embedding {
            table: "token_embd.weight".into(),
            width: e,
        },
        &[tokens],
    );
    for l in 0..c.n_layer {
        let p = |s: &str| format!("blk.{l}.{s}");
        let h = g.push(
            p("attn_norm"),
            Op::RmsNorm {
                weight: p("attn_norm.weight"),
                eps: c.rms_eps,
                width: e,
            },
            &[x],
        );
        let bias = variant.qkv_bias();
        let mut q = g.push(p("attn_q"), linear(p("attn_q.weight"), bias, e, q_w), &[h]);
        let mut k = g.push(p("attn_k"), linear(p("attn_k.weight"), bias, e, kv_w), &[h]);
        let v = g.push(p("attn_v"), linear(p("attn_v.weight"), bias, e, kv_w), &[h]);
        if variant.qk_norm() {
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
            theta: c.rope_theta,
            pairing: RopePairing::Neox,
            freq_factors: None,
        };
        let q = g.push(p("rope_q"), rope(c.n_head), &[q]);
        let k = g.push(p("rope_k"), rope(c.n_head_kv), &[k]);
        let attn = g.push(
            p("attn"),
            Op::Attention {
                layer: l,
                n_heads: c.n_head,
                n_kv_heads: c.n_head_kv,
                head_dim: c.head_dim,
                sliding_window: None,
            },
            &[q, k, v],
        );
        let o = g.push(
            p("attn_output"),
            linear(p("attn_output.weight"), false, q_w, e),
            &[attn],
        );
        x = g.push(p("attn_residual"), Op::Add { width: e }, &[x, o]);
        let h = g.push(
            p("ffn_norm"),
            Op::RmsNorm {
                weight: p("ffn_norm.weight"),
                eps: c.rms_eps,
                width: e,
            },
            &[x],
        );
        let gate = g.push(
            p("ffn_gate"),
            linear(p("ffn_gate.weight"), false, e, f),
            &[h],
        );
        let up = g.push(p("ffn_up"), linear(p("ffn_up.weight"), false, e, f), &[h]);
        let act = g.push(p("ffn_swiglu"), Op::SwiGlu { width: f }, &[gate, up]);
        let down = g.push(
            p("ffn_down"),
            linear(p("ffn_down.weight"), false, f, e),
            &[act],
        );
        x = g.push(p("ffn_residual"), Op::Add { width: e }, &[x, down]);
    }
    let last = g.push("last_row", Op::LastRow { width: e }, &[x]);
    let h = g.push(
        "output_norm",
        Op::RmsNorm {
            weight: "output_norm.weight".into(),
            eps: c.rms_eps,
            width: e,
        },
        &[last],
    );
    let logits = g.push(
        "output",
        linear(c.output_tensor().to_string(), false, e, c.n_vocab),
        &[h],
    );
    g.finish(tokens, logits)
}
