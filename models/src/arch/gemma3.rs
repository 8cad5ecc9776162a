//! Gemma 3 (`general.architecture = gemma3`), as llama.cpp 0c1e57098 builds it: the embedding
//! scaled by √n_embd; per layer an RMSNorm before and after attention and before and after the
//! FFN (the GGUF converter has already added Gemma's `1 + w` to the norm weights, so they are
//! plain RMSNorms here); per-head RMSNorm of Q and K before NeoX RoPE; GELU(tanh)-gated FFN;
//! grouped-query attention whose local layers see a sliding window of
//! `gemma3.attention.sliding_window` keys, every sixth layer global; RoPE base 10000 on the
//! local layers and `gemma3.rope.freq_base` on the global ones; queries scaled by
//! 1/√head_dim (1/√(n_embd/n_head) on the 27B); tied output projection.

use super::decoder::{Decoder, Gate, LayerAttention};
use super::{read_decoder_config, Model, ModelConfig, ModelError};
use crate::gguf::GgufFile;
use crate::graph::{Graph, RopePairing};

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
    decoder(c).check_tensors(file, c)
}

/// The block with Q/K head norms, post-norms and a GELU gate; NeoX RoPE; the embedding
/// scaled by √n_embd.
fn decoder(c: &ModelConfig) -> Decoder {
    Decoder {
        embd_scale: Some((c.n_embd as f32).sqrt()),
        qkv_bias: false,
        qk_norm: true,
        rope_pairing: RopePairing::Neox,
        rope_freq_factors: None,
        post_norms: true,
        gate: Gate::GeGlu,
    }
}

/// Whether layer `l` attends through the sliding window.
fn is_local(l: usize) -> bool {
    l % SWA_PATTERN < SWA_PATTERN - 1
}

fn build_graph(c: &ModelConfig, g3: &Gemma3) -> Graph {
    // The attention op scales scores by 1/√head_dim; a different query scale (the 27B) is
    // the ratio applied to Q first.
    let extra = g3.query_scale * (c.head_dim as f32).sqrt();
    let query_scale = ((extra - 1.0).abs() > 1e-6).then_some(extra);
    decoder(c).build_graph(c, |l| {
        let local = is_local(l);
        LayerAttention {
            rope_theta: if local { LOCAL_ROPE_BASE } else { c.rope_theta },
            sliding_window: local.then_some(g3.sliding_window),
            query_scale,
        }
    })
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
