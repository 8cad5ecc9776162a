//! Qwen2 / Qwen2.5 (`general.architecture = qwen2`), as llama.cpp's qwen2 loader reads it:
//! QKV biases, grouped-query attention, NeoX RoPE, RMSNorm, SwiGLU FFN, tied or separate
//! output projection. Qwen3 (`qwen3`) is the same graph without the QKV biases and with a
//! per-head RMSNorm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).

use super::decoder::{Decoder, Gate, LayerAttention};
use super::{read_decoder_config, Model, ModelConfig, ModelError};
use crate::gguf::GgufFile;
use crate::graph::{Graph, RopePairing};

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
    decoder(variant).check_tensors(file, c)
}

/// The plain block with NeoX RoPE, plus Qwen2's QKV biases or Qwen3's Q/K head norms.
fn decoder(variant: Variant) -> Decoder {
    Decoder {
        embd_scale: None,
        qkv_bias: variant.qkv_bias(),
        qk_norm: variant.qk_norm(),
        rope_pairing: RopePairing::Neox,
        rope_freq_factors: None,
        post_norms: false,
        gate: Gate::SwiGlu,
    }
}

fn build_graph(c: &ModelConfig, variant: Variant) -> Graph {
    decoder(variant).build_graph(c, |_| LayerAttention::plain(c))
}
