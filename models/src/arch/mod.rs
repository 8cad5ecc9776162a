//! Architectures: from GGUF metadata to a validated configuration and an op graph.

mod gemma3;
mod qwen2;

use crate::gguf::{GgufError, GgufFile};
use crate::graph::Graph;
use serde::Serialize;

/// Architectures rocky can run, as named by `general.architecture`.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["qwen2", "qwen3", "gemma3"];

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
                "tensor {name} has type {}, which rocky cannot compute with yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K); requantize the model, e.g. to Q4_K_M",
                t.ggml_type
            ),
        });
    }
    Ok(())
}
