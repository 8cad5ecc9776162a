//! Architectures: from GGUF metadata to a validated configuration and an op graph.

mod decoder;
mod gemma3;
mod llama;
mod qwen2;

use crate::formats::GgmlType;
use crate::gguf::{GgufError, GgufFile};
use crate::graph::Graph;
use serde::Serialize;

/// Architectures rocky can run, as named by `general.architecture`.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["qwen2", "qwen3", "llama", "gemma3"];

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: architecture {arch:?} is not supported (rocky runs: {}); use a {} model", SUPPORTED_ARCHITECTURES.join(", "), SUPPORTED_ARCHITECTURES.join(" or "))]
    UnsupportedArchitecture { path: String, arch: String },
    #[error("{path}: {detail}")]
    Invalid { path: String, detail: String },
}

/// Hyper-parameters of a decoder-only transformer, read from metadata and checked against the
/// tensors.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelConfig {
    pub architecture: String,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
    /// The output projection reuses `token_embd.weight` (no `output.weight` in the file).
    pub tied_output: bool,
}

impl ModelConfig {
    /// Name of the tensor used as the output (LM head) projection.
    pub fn output_tensor(&self) -> &'static str {
        if self.tied_output {
            "token_embd.weight"
        } else {
            "output.weight"
        }
    }

    /// Parameters of the model, counting a tied embedding once.
    pub fn n_params(&self) -> u64 {
        let (e, f, v) = (self.n_embd as u64, self.n_ff as u64, self.n_vocab as u64);
        let q = (self.n_head * self.head_dim) as u64;
        let kv = (self.n_head_kv * self.head_dim) as u64;
        let per_layer = 2 * e + e * q + q + 2 * (e * kv + kv) + q * e + 3 * e * f;
        let output = if self.tied_output { 0 } else { v * e };
        v * e + self.n_layer as u64 * per_layer + e + output
    }

    /// Multiply-adds ×2 per prompt token in the linear layers (the GEMM share of prefill):
    /// the figure used for GFLOP/s. The output projection runs for the last token only.
    pub fn gemm_flops_per_token(&self) -> f64 {
        let (e, f) = (self.n_embd as f64, self.n_ff as f64);
        let q = (self.n_head * self.head_dim) as f64;
        let kv = (self.n_head_kv * self.head_dim) as f64;
        self.n_layer as f64 * 2.0 * (e * q + 2.0 * e * kv + q * e + 3.0 * e * f)
    }
}

/// A model file opened for computation: its configuration and its prefill graph.
pub struct Model {
    pub config: ModelConfig,
    pub graph: Graph,
}

/// Reads the configuration of `file` and builds its graph, or explains why rocky can't.
pub fn load(file: &GgufFile) -> Result<Model, ModelError> {
    let arch = file.architecture()?;
    match arch {
        "qwen2" => qwen2::load(file, qwen2::Variant::Qwen2),
        "qwen3" => qwen2::load(file, qwen2::Variant::Qwen3),
        "gemma3" => gemma3::load(file),
        "llama" => llama::load(file),
        other => Err(ModelError::UnsupportedArchitecture {
            path: file.path().display().to_string(),
            arch: other.to_string(),
        }),
    }
}

/// Checks that tensor `name` exists with the given ggml-order dims.
pub(crate) fn expect_tensor(file: &GgufFile, name: &str, dims: &[usize]) -> Result<(), ModelError> {
    let path = file.path().display().to_string();
    let t = file.tensor(name).ok_or_else(|| ModelError::Invalid {
        path: path.clone(),
        detail: format!("tensor {name} is missing"),
    })?;
    let want: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    if t.dims != want {
        return Err(ModelError::Invalid {
            path,
            detail: format!(
                "tensor {name} has dims {:?}, expected {want:?} from the model's metadata",
                t.dims
            ),
        });
    }
    if !t.ggml_type.can_dequantize() {
        return Err(ModelError::Invalid {
            path,
            detail: format!(
                "tensor {name} has type {}, which rocky cannot compute with yet (supported: {}); requantize the model, e.g. to Q4_K_M",
                t.ggml_type,
                GgmlType::dequantizable_names()
            ),
        });
    }
    Ok(())
}

/// The hyper-parameters every decoder-only architecture keeps under `ARCH.*` keys (llama.cpp's
/// names), checked: sizes in range, heads a multiple of the KV heads, an even head dimension
/// (`attention.key_length`, else n_embd / n_head), a finite RoPE base (`rope.freq_base`, else
/// `default_rope_theta`) and an RMS epsilon in (0, 1). The vocabulary is token_embd's rows.
pub(crate) fn read_decoder_config(
    file: &GgufFile,
    arch: &str,
    default_rope_theta: f64,
) -> Result<ModelConfig, ModelError> {
    let path = file.path().display().to_string();
    let invalid = |detail: String| ModelError::Invalid {
        path: path.clone(),
        detail,
    };
    let n = |key: &str| -> Result<usize, ModelError> {
        let v = file.get_u64(&format!("{arch}.{key}"))?;
        if v == 0 || v > 1 << 24 {
            return Err(invalid(format!("{arch}.{key} = {v} is out of range")));
        }
        Ok(v as usize)
    };
    let n_embd = n("embedding_length")?;
    let n_head = n("attention.head_count")?;
    let n_head_kv = match file.get(&format!("{arch}.attention.head_count_kv")) {
        Some(_) => n("attention.head_count_kv")?,
        None => n_head,
    };
    let head_dim = match file.get(&format!("{arch}.attention.key_length")) {
        Some(_) => n("attention.key_length")?,
        None => n_embd / n_head,
    };
    if n_head % n_head_kv != 0 {
        return Err(invalid(format!(
            "{n_head} attention heads are not a multiple of {n_head_kv} KV heads"
        )));
    }
    if head_dim % 2 != 0 {
        return Err(invalid(format!(
            "head dimension {head_dim} is odd: RoPE needs pairs"
        )));
    }
    let token_embd = file
        .tensor("token_embd.weight")
        .ok_or_else(|| invalid("tensor token_embd.weight is missing".to_string()))?;
    let n_vocab = *token_embd.dims.get(1).unwrap_or(&0) as usize;
    let rope_theta = file
        .get(&format!("{arch}.rope.freq_base"))
        .and_then(|v| v.as_f64())
        .unwrap_or(default_rope_theta) as f32;
    let rms_eps = file.get_f64(&format!("{arch}.attention.layer_norm_rms_epsilon"))? as f32;
    let in_range = rms_eps > 0.0 && rms_eps < 1.0 && rope_theta > 0.0 && rope_theta.is_finite();
    if !in_range {
        return Err(invalid(format!(
            "rms epsilon {rms_eps} or rope theta {rope_theta} out of range"
        )));
    }
    Ok(ModelConfig {
        architecture: arch.into(),
        n_embd,
        n_layer: n("block_count")?,
        n_head,
        n_head_kv,
        head_dim,
        n_ff: n("feed_forward_length")?,
        n_vocab,
        n_ctx_train: file.get_u64(&format!("{arch}.context_length")).unwrap_or(0) as usize,
        rope_theta,
        rms_eps,
        tied_output: file.tensor("output.weight").is_none(),
    })
}

/// The tensors around the blocks that every decoder architecture has: the embedding, the
/// final norm, and the output projection unless it is tied to the embedding.
pub(crate) fn expect_outer_tensors(file: &GgufFile, c: &ModelConfig) -> Result<(), ModelError> {
    expect_tensor(file, "token_embd.weight", &[c.n_embd, c.n_vocab])?;
    expect_tensor(file, "output_norm.weight", &[c.n_embd])?;
    if !c.tied_output {
        expect_tensor(file, "output.weight", &[c.n_embd, c.n_vocab])?;
    }
    Ok(())
}
