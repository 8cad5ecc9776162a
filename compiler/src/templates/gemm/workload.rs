//! What a GEMM computes.

use serde::{Deserialize, Serialize};

use crate::dequant::{WeightFormat, WeightLayout};
use crate::kv_type::KvTypes;
use crate::templates::rope::RopePairing;

/// Element type of the activations X and the output Y.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum ActType {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
}

/// What the GEMM does to its sums before it stores them (after the bias). Part of the workload
/// (and of its tuning key): a fused GEMM is timed and tuned as its own workload.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
pub enum Epilogue {
    /// Y = X · Wᵀ (+ bias).
    #[default]
    #[serde(rename = "none")]
    None,
    /// Gate and up projections in one GEMM: W has 2n rows, the n gate rows then the n up rows
    /// (one tensor combined at upload, see [`combine_gate_up`]), and
    /// `Y[r][c] = silu(X·gate_c) · (X·up_c)`. No bias.
    #[serde(rename = "swiglu")]
    SwiGlu,
    /// Y = X · Wᵀ (+ bias) + R, with R (binding `residual`) m×n like Y: the residual
    /// connection of the attention-output and FFN-down projections.
    #[serde(rename = "residual")]
    Residual,
    /// A decode step's Q/K/V projection with the query's and key's RoPE and the KV write in
    /// its epilogue (the GEMV template only): the weight rows are heads of `head_dim`, the
    /// query's, then the key's, then the value's ([`RopeKv`] says how many of each; a part
    /// may be absent), and each output column is a *quad* of four rows that make two rotated
    /// pairs ([`RopeKv::quad_rows`]). The query part is rotated and stored in Y; the key part
    /// rotated and stored into the K cache, the value part stored into the V cache, at the
    /// step's position. One dispatch instead of the projection and a RoPE-and-KV-write kernel,
    /// and one dependency level fewer per layer.
    #[serde(rename = "rope_kv")]
    RopeKv(RopeKv),
}

/// The parameters of [`Epilogue::RopeKv`]: the RoPE's (as [`crate::templates::rope::RopeWorkload`]
/// has them) and the stacked parts' head counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct RopeKv {
    pub head_dim: u32,
    /// Query heads among the rows (0: the projection has no query part).
    pub q_heads: u32,
    /// Key heads among the rows: 0 or `kv_heads`.
    pub k_heads: u32,
    /// Value heads among the rows: 0 or `kv_heads`.
    pub v_heads: u32,
    /// Heads of one cache row (its width is `kv_heads · head_dim`).
    pub kv_heads: u32,
    pub theta_bits: u32,
    pub pairing: RopePairing,
    /// Pair i's angle is divided by `freqs[i]` (binding `freqs`).
    pub freq_factors: bool,
    /// The caches' element types (f32 or f16: a quad is two whole f16 words).
    pub kv: KvTypes,
}

impl RopeKv {
    /// Weight rows (= projected values of one X row): every part's heads.
    pub fn rows(&self) -> u32 {
        (self.q_heads + self.k_heads + self.v_heads) * self.head_dim
    }

    /// The first row of the key part, and of the value part.
    pub fn k_row0(&self) -> u32 {
        self.q_heads * self.head_dim
    }

    pub fn v_row0(&self) -> u32 {
        (self.q_heads + self.k_heads) * self.head_dim
    }

    /// Values of one cache row.
    pub fn kv_width(&self) -> u32 {
        self.kv_heads * self.head_dim
    }

    /// ggml's `theta_scale = powf(base, -2/head_dim)`.
    pub fn theta_scale(&self) -> f32 {
        f32::from_bits(self.theta_bits).powf(-2.0 / self.head_dim as f32)
    }

    /// The four weight rows of output column (quad) `c`, as the rotated pairs' (lo, hi)
    /// elements of pair 2u then pair 2u+1 of head `c / (head_dim/4)` (u = `c % (head_dim/4)`):
    /// NeoX rows 2u, 2u+h, 2u+1, 2u+1+h (h = head_dim/2), normal rows 4u .. 4u+3. Two
    /// neighbouring pairs make whole f16 words in either pairing, so no two columns write one
    /// cache word (the fused RoPE-and-KV-write kernel's layout, `rope::kv_kernel_ir`).
    pub fn quad_rows(&self, c: u32) -> [u32; 4] {
        let quads = self.head_dim / 4;
        let (head, u) = (c / quads, c % quads);
        let base = head * self.head_dim;
        match self.pairing {
            RopePairing::Neox => {
                let (p0, h) = (2 * u, self.head_dim / 2);
                [base + p0, base + p0 + h, base + p0 + 1, base + p0 + 1 + h]
            }
            RopePairing::Normal => [
                base + 4 * u,
                base + 4 * u + 1,
                base + 4 * u + 2,
                base + 4 * u + 3,
            ],
        }
    }
}

impl Epilogue {
    pub fn is_none(&self) -> bool {
        *self == Epilogue::None
    }

    /// Weight rows per output column (2 for SwiGLU: a gate row and an up row; 4 for RoPE-KV:
    /// a quad).
    pub fn rows_per_column(&self) -> u32 {
        match self {
            Epilogue::SwiGlu => 2,
            Epilogue::RopeKv(_) => 4,
            Epilogue::None | Epilogue::Residual => 1,
        }
    }
}

/// The weight tensor of a SwiGLU GEMM: the raw rows of `gate` then those of `up` (both n×k in
/// the same GGUF block format, so each is n equal-sized rows). The row order does not depend on
/// the schedule: every GEMM of any M reads the same combined tensor.
pub fn combine_gate_up(gate: &[u8], up: &[u8]) -> Option<Vec<u8>> {
    (gate.len() == up.len()).then(|| [gate, up].concat())
}

/// `Y[m×n] = X[m×k] · Wᵀ (+ bias[n])` then the [`Epilogue`], with W an n×k GGUF tensor in its
/// block layout (row r holds the k weights of output column r) and X, Y row-major. Bias is f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmWorkload {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub act: ActType,
    pub weight: WeightFormat,
    /// How W sits in device memory (`dequant::layout`): the same for every GEMM that reads
    /// one tensor, so the executor picks it per tensor and every workload of the tensor
    /// carries it. Omitted from the serialization when GGUF, so stored keys stay valid.
    #[serde(default, skip_serializing_if = "WeightLayout::is_gguf")]
    pub layout: WeightLayout,
    pub bias: bool,
    /// Omitted from the serialization when `None`, so unfused workloads keep their keys.
    #[serde(default, skip_serializing_if = "Epilogue::is_none")]
    pub epilogue: Epilogue,
    /// `Some(eps as f32 bits)`: each row of X is RMS-normalized before the product,
    /// `x / sqrt(mean(x²) + eps) ⊙ g` with the f32 weight g (binding `norm_weight`, k values):
    /// an RMSNorm folded into the projection that reads it (the GEMV template only, which reads
    /// all of a row of X in every workgroup anyway; see `gemv::kernel`). Omitted from the
    /// serialization when `None`, so other workloads keep their keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rms_norm_eps_bits: Option<u32>,
}

impl GemmWorkload {
    /// Floating-point operations (2·m·n·k).
    pub fn flops(&self) -> u64 {
        2 * u64::from(self.m) * u64::from(self.weight_rows()) * u64::from(self.k)
    }

    /// Rows of the weight tensor (n, or 2n for SwiGLU's gate and up rows).
    pub fn weight_rows(&self) -> u32 {
        self.n * self.epilogue.rows_per_column()
    }

    /// Values of a row of Y: n, or with `Epilogue::RopeKv` every row's (the query part is
    /// stored at its rows' own columns of the projection's output).
    pub fn y_row_width(&self) -> u32 {
        match self.epilogue {
            Epilogue::RopeKv(r) => r.rows(),
            _ => self.n,
        }
    }

    /// Bytes of the weight tensor (in its layout).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_row_bytes() * u64::from(self.weight_rows())
    }

    /// Bytes of one weight row in the workload's layout.
    pub fn weight_row_bytes(&self) -> u64 {
        self.layout.row_bytes(self.weight, u64::from(self.k))
    }

    /// The folded RMSNorm's eps, where X is normalized before the product.
    pub fn rms_norm_eps(&self) -> Option<f32> {
        self.rms_norm_eps_bits.map(f32::from_bits)
    }

    /// Bytes per element of X and Y.
    pub fn act_bytes(&self) -> u32 {
        match self.act {
            ActType::F32 => 4,
            ActType::F16 => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_and_epilogue_are_omitted_so_stored_keys_stay_valid() {
        // A key as stored before either field existed (tuning-db/presets/lavapipe.jsonl).
        let stored = r#"{"m":32,"n":896,"k":4864,"act":"f32","weight":"q4_k","bias":false}"#;
        let w: GemmWorkload = serde_json::from_str(stored).unwrap();
        assert_eq!((w.layout, w.epilogue), (WeightLayout::Gguf, Epilogue::None));
        assert_eq!(serde_json::to_string(&w).unwrap(), stored);
        // Both fields set: written, and read back.
        let fused = GemmWorkload {
            weight: WeightFormat::Q8_0,
            layout: WeightLayout::Aligned,
            epilogue: Epilogue::SwiGlu,
            ..w
        };
        let text = serde_json::to_string(&fused).unwrap();
        assert!(
            text.contains(r#""layout":"aligned""#) && text.contains(r#""epilogue":"swiglu""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<GemmWorkload>(&text).unwrap(), fused);
        // The aligned combined gate/up tensor: 2n rows of the aligned row length.
        assert_eq!(
            fused.weight_bytes(),
            2 * 896 * WeightLayout::Aligned.row_bytes(WeightFormat::Q8_0, 4864)
        );
    }
}
