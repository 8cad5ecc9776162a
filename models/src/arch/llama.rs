//! Llama (`general.architecture = llama`: Llama 2 and 3.x, and the many models converted as
//! llama), as llama.cpp's llama loader reads the dense ones: grouped-query attention without
//! biases, RoPE with normal pairing (adjacent elements `2i`, `2i + 1`: LLAMA_ROPE_TYPE_NORM),
//! Llama 3.1+'s frequency factors (`rope_freqs.weight`, one divisor per pair, which is how
//! llama.cpp applies the `llama3` rope scaling), RMSNorm, SwiGLU FFN, tied or separate output
//! projection.

use super::decoder::{Decoder, Gate, LayerAttention};
use super::{expect_tensor, read_decoder_config, Model, ModelConfig, ModelError};
use crate::gguf::GgufFile;
use crate::graph::{Graph, RopePairing};

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
    let freq_factors = file.tensor(ROPE_FREQS).is_some();
    if freq_factors {
        expect_tensor(file, ROPE_FREQS, &[c.head_dim / 2])?;
    }
    decoder(freq_factors).check_tensors(file, c)?;
    Ok(freq_factors)
}

/// The plain block: no biases, no head or post norms, normal-pairing RoPE, SwiGLU.
fn decoder(freq_factors: bool) -> Decoder {
    Decoder {
        embd_scale: None,
        qkv_bias: false,
        qk_norm: false,
        rope_pairing: RopePairing::Normal,
        rope_freq_factors: freq_factors.then_some(ROPE_FREQS),
        post_norms: false,
        gate: Gate::SwiGlu,
    }
}

fn build_graph(c: &ModelConfig, freq_factors: bool) -> Graph {
    decoder(freq_factors).build_graph(c, |_| LayerAttention::plain(c))
}
