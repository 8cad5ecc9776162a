//! Llama (`general.architecture = llama`: Llama 2 and 3.x, and the many models converted as
//! llama), as llama.cpp's llama loader reads the dense ones: grouped-query attention without
//! biases, RoPE with normal pairing (adjacent elements `2i`, `2i + 1`: LLAMA_ROPE_TYPE_NORM),
//! Llama 3.1+'s frequency factors (`rope_freqs.weight`, one divisor per pair, which is how
//! llama.cpp applies the `llama3` rope scaling), RMSNorm, SwiGLU FFN, tied or separate output
//! projection.

use super::{
    expect_outer_tensors, expect_tensor, read_decoder_config, Model, ModelConfig, ModelError,
};
use crate::gguf::GgufFile;
use crate::graph::{Graph, GraphBuilder, Op, RopePairing};

/// The tensor of RoPE frequency factors (llama.cpp's LLM_TENSOR_ROPE_FREQS, shared by all
/// layers).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

pub(super) fn load(file: &GgufFile) -> Result<Model, ModelError> {
    let config = read_config(file)?;
    let freq_factors = check_tensors(file, &config)?;
    let graph = build_graph(&config, freq_factors);
    Ok(Model { config, graph })
}

/// The shared decoder keys, and a refusal of what this graph does not build: mixture of
/// experts, RoPE over part of the head, and RoPE scaling other than frequency factors.
fn read_config(file: &GgufFile) -> Result<ModelConfig, ModelError> {
    let config = read_decoder_config(file, "llama", 10000.0)?;
    let invalid = |detail: String| ModelError::Invalid {
        path: file.path().display().to_string(),
        detail,
    };
    if let Some(n) = file
        .get("llama.expert_count")
        .and_then(|v| v.as_u64())
        .filter(|&n| n > 0)
    {
        return Err(invalid(format!(
            "llama.expert_count = {n}: mixture-of-experts Llama models (Mixtral) are not supported; use a dense model"
        )));
    }
    if let Some(n) = file
        .get("llama.rope.dimension_count")
        .and_then(|v| v.as_u64())
    {
        if n as usize != config.head_dim {
            return Err(invalid(format!(
                "llama.rope.dimension_count = {n} but the head dimension is {}: RoPE over part of the head is not supported",
                config.head_dim
            )));
        }
    }
    if let Some(v) = file
        .get("llama.value_length")
        .or(file.get("llama.attention.value_length"))
    {
        let v = v.as_u64().unwrap_or(0) as usize;
        if v != config.head_dim {
            return Err(invalid(format!(
                "value length {v} differs from key length {}: rocky's attention needs them equal",
                config.head_dim
            )));
        }
    }
    // Linear / YaRN scaling would change ggml's freq_scale (or more): not built. Llama 3's
    // `llama3` scaling reaches llama.cpp as rope_freqs.weight, which is.
    let scaling = file
        .get("llama.rope.scaling.type")
        .and_then(|v| v.as_str())
        .unwrap_or("none");
    let factor = file
        .get("llama.rope.scaling.factor")
        .and_then(|v| v.as_f64())
        .unwrap_or(1.0);
    if !matches!(scaling, "none" | "llama3") && factor != 1.0 {
        return Err(invalid(format!(
            "llama.rope.scaling.type = {scaling} with factor {factor}: only Llama 3's frequency factors (rope_freqs.weight) are supported"
        )));
    }
    Ok(config)
}

/// Checks every tensor's shape; returns whether the file has RoPE frequency factors.
fn check_tensors(file: &GgufFile, c: &ModelConfig) -> Result<bool, ModelError> {
    let (e, q, kv, f) = (
        c.n_embd,
        c.n_head * c.head_dim,
        c.n_head_kv * c.head_dim,
        c.n_ff,
    );
    expect_outer_tensors(file, c)?;
    let freq_factors = file.tensor(ROPE_FREQS).is_some();
    if freq_factors {
        expect_tensor(file, ROPE_FREQS, &[c.head_dim / 2])?;
    }
    for l in 0..c.n_layer {
        let t = |s: &str| format!("blk.{l}.{s}");
        expect_tensor(file, &t("attn_norm.weight"), &[e])?;
        expect_tensor(file, &t("attn_q.weight"), &[e, q])?;
        expect_tensor(file, &t("attn_k.weight"), &[e, kv])?;
        expect_tensor(file, &t("attn_v.weight"), &[e, kv])?;
        expect_tensor(file, &t("attn_output.weight"), &[q, e])?;
        expect_tensor(file, &t("ffn_norm.weight"), &[e])?;
        expect_tensor(file, &t("ffn_gate.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_up.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_down.weight"), &[f, e])?;
    }
    Ok(freq_factors)
}

fn build_graph(c: &ModelConfig, freq_factors: bool) -> Graph {
    let (e, q_w, kv_w, f) = (
        c.n_embd,
        c.n_head * c.head_dim,
        c.n_head_kv * c.head_dim,
        c.n_ff,
    );
    let (mut g, tokens) = GraphBuilder::new();
    let linear = |w: String, in_features, out_features| Op::Linear {
        weight: w,
        bias: None,
        in_features,
        out_features,
        residual: false,
    };
    let norm = |weight: String| Op::RmsNorm {
        weight,
        eps: c.rms_eps,
        width: e,
    };
    let rope = |n_heads| Op::Rope {
        n_heads,
        head_dim: c.head_dim,
        theta: c.rope_theta,
        pairing: RopePairing::Normal,
        freq_factors: freq_factors.then(|| ROPE_FREQS.to_string()),
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
        let h = g.push(p("attn_norm"), norm(p("attn_norm.weight")), &[x]);
        let q = g.push(p("attn_q"), linear(p("attn_q.weight"), e, q_w), &[h]);
        let k = g.push(p("attn_k"), linear(p("attn_k.weight"), e, kv_w), &[h]);
        let v = g.push(p("attn_v"), linear(p("attn_v.weight"), e, kv_w), &[h]);
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
            linear(p("attn_output.weight"), q_w, e),
            &[attn],
        );
        x = g.push(p("attn_residual"), Op::Add { width: e }, &[x, o]);
        let h = g.push(p("ffn_norm"), norm(p("ffn_norm.weight")), &[x]);
        let gate = g.push(p("ffn_gate"), linear(p("ffn_gate.weight"), e, f), &[h]);
        let up = g.push(p("ffn_up"), linear(p("ffn_up.weight"), e, f), &[h]);
        let act = g.push(p("ffn_swiglu"), Op::SwiGlu { width: f }, &[gate, up]);
        let down = g.push(p("ffn_down"), linear(p("ffn_down.weight"), f, e), &[act]);
        x = g.push(p("ffn_residual"), Op::Add { width: e }, &[x, down]);
    }
    let last = g.push("last_row", Op::LastRow { width: e }, &[x]);
    let h = g.push("output_norm", norm("output_norm.weight".into()), &[last]);
    let logits = g.push(
        "output",
        linear(c.output_tensor().to_string(), e, c.n_vocab),
        &[h],
    );
    g.finish(tokens, logits)
}
