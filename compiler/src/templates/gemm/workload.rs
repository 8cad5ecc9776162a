//! What a GEMM computes.

use serde::{Deserialize, Serialize};

use crate::dequant::WeightFormat;

/// Element type of the activations X and the output Y.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum ActType {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
}

/// `Y[m×n] = X[m×k] · Wᵀ (+ bias[n])`, with W an n×k GGUF tensor in its block layout (row r
/// holds the k weights of output column r) and X, Y row-major. Bias is f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmWorkload {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub act: ActType,
    pub weight: WeightFormat,
    pub bias: bool,
}

impl GemmWorkload {
    /// Floating-point operations (2·m·n·k).
    pub fn flops(&self) -> u64 {
        2 * u64::from(self.m) * u64::from(self.n) * u64::from(self.k)
    }

    /// Bytes of the weight tensor.
    pub fn weight_bytes(&self) -> u64 {
        self.weight.row_bytes(u64::from(self.k)) * u64::from(self.n)
    }

    /// Bytes per element of X and Y.
    pub fn act_bytes(&self) -> u32 {
        match self.act {
            ActType::F32 => 4,
            ActType::F16 => 2,
        }
    }
}
