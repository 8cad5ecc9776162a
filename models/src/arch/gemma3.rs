//! Gemma 3 (`general.architecture = gemma3`), as llama.cpp 0c1e57098 builds it: the embedding
//! scaled by √n_embd; per layer an RMSNorm before and after attention and before and after the
//! FFN (the GGUF converter has already added Gemma's `1 + w` to the norm weights, so they are
//! plain RMSNorms here); per-head RMSNorm of Q and K before NeoX RoPE; GELU(tanh)-gated FFN;
//! grouped-query attention whose local layers see a sliding window of
//! `gemma3.attention.sliding_window` keys, every sixth layer global; RoPE base 10000 on the
//! local layers and `gemma3.rope.freq_base` on the global ones; queries scaled by
//! 1/√head_dim (1/√(n_embd/n_head) on the 27B); tied output projection.

use super::{
    expect_outer_tensors, expect_tensor, read_decoder_config, Model, ModelConfig, ModelError,
};
use crate::gguf::GgufFile;
use crate::graph::{GraphBuilder, Op, RopePairing};

/// Every `SWA_PATTERN`-th layer (index `SWA_PATTERN - 1`, `2·SWA_PATTERN - 1`, …) attends
/// globally; the others through the sliding window (llama.cpp: `set_swa_pattern(6)`).
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers (llama.cpp: `rope_freq_base_train_swa`, not in the
/// GGUF).
const LOCAL_ROPE_BASE: f32 = 10000.0;
/// Layers of the 27B model, the one whose query scale is 1/√(n_embd/n_head).
const LAYERS_27B: usize = 62;

/// What Gemma 3 adds to [`ModelConfig`].
#[derive(Clone, Debug, PartialEq)]
struct Gemma3 {
    sliding_window: usize,
    query_scale: f32,
}

pub(super) fn load(file: &GgufFile) -> Result<Model, ModelError> {
    let (config, g3) = read_config(file)?;
    check_tensors(file, &config)?;
    let graph = build_graph(&config, &g3);
    Ok(Model { config, graph })
}

fn read_config(file: &GgufFile) -> Result<(ModelConfig, Gemma3), ModelError> {
    let config = read_decoder_config(file, "gemma3", 1_000_000.0)?;
    let invalid = |detail: String| ModelError::Invalid {
        path: file.path().display().to_string(),
        detail,
    };
    if let Some(v) = file.get("gemma3.attention.value_length") {
        let v = v.as_u64().unwrap_or(0) as usize;
        if v != config.head_dim {
            return Err(invalid(format!(
                "value length {v} differs from key length {}: rocky's attention needs them equal",
                config.head_dim
            )));
        }
    }
    // Linear RoPE scaling (the 4B-27B files) changes the global layers' positions: not built.
    if let Some(f) = file
        .get("gemma3.rope.scaling.factor")
        .and_then(|v| v.as_f64())
        .filter(|&f| f != 1.0)
    {
        return Err(invalid(format!(
            "gemma3.rope.scaling.factor = {f}: RoPE scaling is not supported yet (Gemma 3 270M and 1B have none)"
        )));
    }
    let sliding_window = match file.get_u64("gemma3.attention.sliding_window")? {
        0 => return Err(invalid("gemma3.attention.sliding_window is 0".into())),
        w => w as usize,
    };
    let query_scale = if config.n_layer == LAYERS_27B {
        1.0 / ((config.n_embd / config.n_head) as f32).sqrt()
    } else {
        1.0 / (config.head_dim as f32).sqrt()
    };
    Ok((
        config,
        Gemma3 {
            sliding_window,
            query_scale,
        },
    ))
}

fn check_tensors(file: &GgufFile, c: &ModelConfig) -> Result<(), ModelError> {
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
        expect_tensor(file, &t("attn_q_norm.weight"), &[d])?;
        expect_tensor(file, &t("attn_k_norm.weight"), &[d])?;
        expect_tensor(file, &t("attn_output.weight"), &[q, e])?;
        expect_tensor(file, &t("post_attention_norm.weight"), &[e])?;
        expect_tensor(file, &t("ffn_norm.weight"), &[e])?;
        expect_tensor(file, &t("ffn_gate.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_up.weight"), &[e, f])?;
        expect_tensor(file, &t("ffn_down.weight"), &[f, e])?;
        expect_tensor(file, &t("post_ffw_norm.weight"), &[e])?;
    }
    Ok(())
}

/// Whether layer `l` attends through the sliding window.
fn is_local(l: usize) -> bool {
    l % SWA_PATTERN < SWA_PATTERN - 1
}

fn build_graph(c: &ModelConfig, g3: &Gemma3) -> crate::graph::Graph {
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
    let x = g.push(
        "token_embd",
        Op::Embedding {
            table: "token_embd.weight".into(),
            width: e,
        },
        &[tokens],
    );
    let mut x = g.push(
        "token_embd_scale",
        Op::Scale {
            factor: (e as f32).sqrt(),
            width: e,
        },
        &[x],
    );
    for l in 0..c.n_layer {
        let p = |s: &str| format!("blk.{l}.{s}");
        let local = is_local(l);
        let h = g.push(p("attn_norm"), norm(p("attn_norm.weight")), &[x]);
        let q = g.push(p("attn_q"), linear(p("attn_q.weight"), e, q_w), &[h]);
        let k = g.push(p("attn_k"), linear(p("attn_k.weight"), e, kv_w), &[h]);
        let v = g.push(p("attn_v"), linear(p("attn_v.weight"), e, kv_w), &[h]);
        let head_norm = |w: String, n_heads| Op::HeadRmsNorm {
            weight: w,
            eps: c.rms_eps,
            n_heads,
            head_dim: c.head_dim,
        };
        let q = g.push(
            p("attn_q_norm"),
            head_norm(p("attn_q_norm.weight"), c.n_head),
            &[q],
        );
        let k = g.push(
            p("attn_k_norm"),
            head_norm(p("attn_k_norm.weight"), c.n_head_kv),
            &[k],
        );
        let rope = |n_heads| Op::Rope {
            n_heads,
            head_dim: c.head_dim,
            theta: if local { LOCAL_ROPE_BASE } else { c.rope_theta },
            pairing: RopePairing::Neox,
            freq_factors: None,
        };
        let mut q = g.push(p("rope_q"), rope(c.n_head), &[q]);
        let k = g.push(p("rope_k"), rope(c.n_head_kv), &[k]);
        // The attention op scales scores by 1/√head_dim; a different query scale (the 27B)
        // is the ratio applied to Q first.
        let extra = g3.query_scale * (c.head_dim as f32).sqrt();
        if (extra - 1.0).abs() > 1e-6 {
            q = g.push(
                p("attn_q_scale"),
                Op::Scale {
                    factor: extra,
                    width: q_w,
                },
                &[q],
            );
        }
        let attn = g.push(
            p("attn"),
            Op::Attention {
                layer: l,
                n_heads: c.n_head,
                n_kv_heads: c.n_head_kv,
                head_dim: c.head_dim,
                sliding_window: local.then_some(g3.sliding_window),
            },
            &[q, k, v],
        );
        let o = g.push(
            p("attn_output"),
            linear(p("attn_output.weight"), q_w, e),
            &[attn],
        );
        let o = g.push(
            p("post_attention_norm"),
            norm(p("post_attention_norm.weight")),
            &[o],
        );
        x = g.push(p("attn_residual"), Op::Add { width: e }, &[x, o]);
        let h = g.push(p("ffn_norm"), norm(p("ffn_norm.weight")), &[x]);
        let gate = g.push(p("ffn_gate"), linear(p("ffn_gate.weight"), e, f), &[h]);
        let up = g.push(p("ffn_up"), linear(p("ffn_up.weight"), e, f), &[h]);
        let act = g.push(p("ffn_geglu"), Op::GeGlu { width: f }, &[gate, up]);
        let down = g.push(p("ffn_down"), linear(p("ffn_down.weight"), f, e), &[act]);
        let down = g.push(p("post_ffw_norm"), norm(p("post_ffw_norm.weight")), &[down]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sixth_layer_is_global() {
        let global: Vec<usize> = (0..18).filter(|&l| !is_local(l)).collect();
        assert_eq!(global, vec![5, 11, 17]);
    }
}
