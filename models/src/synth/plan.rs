//! What a synthetic model contains: the Qwen2.5 shapes, the tensor list llama.cpp's qwen2
//! loader expects, and the GGML type of every tensor for each quantization mix.
//!
//! The Q4_K_M mix is a port of llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp) for
//! the cases a dense, tied-embedding qwen2 model reaches, so a synthetic file has the same
//! tensor types as a real model run through `llama-quantize ... Q4_K_M`.

use crate::formats::GgmlType;
use crate::gguf::TensorSpec;

/// Tokens in the Qwen2 / Qwen2.5 vocabulary (the size of their embedding tables).
pub const QWEN2_N_VOCAB: u64 = 151936;

/// The architectures `rocky synth` can write (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Qwen2 / Qwen2.5: QKV biases.
    Qwen2,
    /// Qwen3: no QKV bias, per-head Q/K norms.
    Qwen3,
    /// Gemma 3: per-head Q/K norms, post-attention and post-FFN norms, sliding-window layers.
    Gemma3,
    /// Llama 3: no QKV bias, no Q/K norms, normal-pairing RoPE with frequency factors
    /// (`rope_freqs.weight`).
    Llama,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Llama => "llama",
        }
    }

    fn qkv_bias(self) -> bool {
        self == Arch::Qwen2
    }

    fn qk_norm(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }
}

/// The model shapes `rocky synth` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// The 4-layer test model of the golden files (256 hidden, 4/2 heads, FFN 768).
    Tiny,
    Qwen25_0_5B,
    Qwen25_1_5B,
    Qwen25_3B,
    /// A 4-layer Qwen3-style test model (Tiny's sizes, no QKV bias, Q/K norms).
    Qwen3Tiny,
    /// A 7-layer Gemma 3-style test model (256 hidden, 4 heads of 128, 1 kv head, FFN 512),
    /// whose sliding window of 32 keys short test prompts already pass; layer 5 is global.
    Gemma3Tiny,
    /// A 4-layer Llama 3-style test model (Tiny's sizes, RoPE base 500000, `llama3` frequency
    /// factors for an original context of 64 positions, so short test prompts already reach
    /// the scaled pairs).
    LlamaTiny,
}

impl Shape {
    pub const ALL: [Shape; 7] = [
        Shape::Tiny,
        Shape::Qwen25_0_5B,
        Shape::Qwen25_1_5B,
        Shape::Qwen25_3B,
        Shape::Qwen3Tiny,
        Shape::Gemma3Tiny,
        Shape::LlamaTiny,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Tiny => "tiny",
            Shape::Qwen25_0_5B => "qwen2.5-0.5b",
            Shape::Qwen25_1_5B => "qwen2.5-1.5b",
            Shape::Qwen25_3B => "qwen2.5-3b",
            Shape::Qwen3Tiny => "qwen3-tiny",
            Shape::Gemma3Tiny => "gemma3-tiny",
            Shape::LlamaTiny => "llama-tiny",
        }
    }

    pub fn arch(self) -> Arch {
        match self {
            Shape::Qwen3Tiny => Arch::Qwen3,
            Shape::Gemma3Tiny => Arch::Gemma3,
            Shape::LlamaTiny => Arch::Llama,
            _ => Arch::Qwen2,
        }
    }

    pub fn from_name(name: &str) -> Option<Shape> {
        Shape::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// The hyper-parameters, from the models' config.json (the vocabulary is the real Qwen2
    /// one; `ShapeParams::n_vocab` can be replaced by the vocabulary file's token count).
    pub fn params(self) -> ShapeParams {
        // (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx)
        let (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx) = match self {
            Shape::Tiny | Shape::Qwen3Tiny | Shape::LlamaTiny => (256, 4, 4, 2, 64, 768, 4096),
            Shape::Gemma3Tiny => (256, 7, 4, 1, 128, 512, 4096),
            Shape::Qwen25_0_5B => (896, 24, 14, 2, 64, 4864, 32768),
            Shape::Qwen25_1_5B => (1536, 28, 12, 2, 128, 8960, 32768),
            Shape::Qwen25_3B => (2048, 36, 16, 2, 128, 11008, 32768),
        };
        let llama = self.arch() == Arch::Llama;
        ShapeParams {
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_vocab: QWEN2_N_VOCAB,
            n_ctx,
            // Llama 3's base and epsilon.
            rope_theta: if llama { 5.0e5 } else { 1.0e6 },
            rms_eps: if llama { 1.0e-5 } else { 1.0e-6 },
            arch: self.arch(),
            sliding_window: if self.arch() == Arch::Gemma3 { 32 } else { 0 },
            llama3_rope: llama.then_some(Llama3Rope {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_context: 64,
            }),
        }
    }
}

/// Hyper-parameters of a dense model with tied embeddings.
///
/// llama.cpp's qwen2 graph projects attention back with a {n_embd, n_embd} matrix, so there
/// `n_head * head_dim` must equal `n_embd` (true for every Qwen2.5 size); Gemma 3's need not.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeParams {
    pub n_embd: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    pub n_ff: u64,
    pub n_vocab: u64,
    /// Trained context length (`qwen2.context_length`).
    pub n_ctx: u64,
    pub rope_theta: f32,
    pub rms_eps: f32,
    pub arch: Arch,
    /// Gemma 3's `attention.sliding_window` (0 for the others).
    pub sliding_window: u64,
    /// Llama 3's rope scaling, written as `rope_freqs.weight` (None: no such tensor).
    pub llama3_rope: Option<Llama3Rope>,
}

/// The `llama3` rope scaling of a Hugging Face config (`rope_scaling`), which llama.cpp's
/// converter turns into per-pair frequency factors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    /// `original_max_position_embeddings` (8192 for Llama 3.1).
    pub original_context: u64,
}

impl Llama3Rope {
    /// The `head_dim / 2` factors, as convert_hf_to_gguf.py's LlamaModel computes them: 1 for
    /// pairs whose wavelength is under original_context / high_freq_factor, `factor` above
    /// original_context / low_freq_factor, smoothly between (f64 here, f32 in the file, as
    /// the converter's Python floats are stored).
    pub fn factors(&self, head_dim: u64, theta: f32) -> Vec<f32> {
        let old = self.original_context as f64;
        let (factor, low, high) = (
            f64::from(self.factor),
            f64::from(self.low_freq_factor),
            f64::from(self.high_freq_factor),
        );
        let (low_wavelen, high_wavelen) = (old / low, old / high);
        (0..head_dim / 2)
            .map(|i| {
                // torch: 1 / base ** (arange(0, dim, 2, float32) / dim), in f32.
                let exponent = (2 * i) as f32 / head_dim as f32;
                let freq = 1.0 / theta.powf(exponent);
                let wavelen = 2.0 * std::f64::consts::PI / f64::from(freq);
                let f = if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                };
                f as f32
            })
            .collect()
    }
}

/// The quantization mixes `rocky synth` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Quant {
    /// Every matrix in F32 (llama.cpp then computes in f32: exact comparison targets).
    F32,
    F16,
    BF16,
    Q8_0,
    /// The legacy 32-element mixes: every matrix in that type but the output (tied
    /// embedding), which llama-quantize makes Q6_K.
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    /// llama.cpp's Q4_K_M: Q4_K with Q6_K for the embeddings and some attn_v / ffn_down.
    Q4KM,
    /// llama.cpp's Q5_K_M: the same rules over Q5_K.
    Q5KM,
    /// llama.cpp's IQ4_NL / IQ4_XS (no importance matrix): the non-linear 4-bit types, with
    /// Q5_K for attn_v (grouped-query models) and the first eighth of ffn_down.
    IQ4NL,
    IQ4XS,
}

impl Quant {
    pub const ALL: [Quant; 12] = [
        Quant::F32,
        Quant::F16,
        Quant::BF16,
        Quant::Q8_0,
        Quant::Q4_0,
        Quant::Q4_1,
        Quant::Q5_0,
        Quant::Q5_1,
        Quant::Q4KM,
        Quant::Q5KM,
        Quant::IQ4NL,
        Quant::IQ4XS,
    ];

    /// The name used on the command line (llama-quantize's, lower case).
    pub fn name(self) -> &'static str {
        match self {
            Quant::F32 => "f32",
            Quant::F16 => "f16",
            Quant::BF16 => "bf16",
            Quant::Q8_0 => "q8_0",
            Quant::Q4_0 => "q4_0",
            Quant::Q4_1 => "q4_1",
            Quant::Q5_0 => "q5_0",
            Quant::Q5_1 => "q5_1",
            Quant::Q4KM => "q4_k_m",
            Quant::Q5KM => "q5_k_m",
            Quant::IQ4NL => "iq4_nl",
            Quant::IQ4XS => "iq4_xs",
        }
    }

    pub fn from_name(name: &str) -> Option<Quant> {
        Quant::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(name))
    }

    /// `general.file_type` (llama.h `enum llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            Quant::F32 => 0,    // LLAMA_FTYPE_ALL_F32
            Quant::F16 => 1,    // LLAMA_FTYPE_MOSTLY_F16
            Quant::BF16 => 32,  // LLAMA_FTYPE_MOSTLY_BF16
            Quant::Q8_0 => 7,   // LLAMA_FTYPE_MOSTLY_Q8_0
            Quant::Q4_0 => 2,   // LLAMA_FTYPE_MOSTLY_Q4_0
            Quant::Q4_1 => 3,   // LLAMA_FTYPE_MOSTLY_Q4_1
            Quant::Q5_0 => 8,   // LLAMA_FTYPE_MOSTLY_Q5_0
            Quant::Q5_1 => 9,   // LLAMA_FTYPE_MOSTLY_Q5_1
            Quant::Q4KM => 15,  // LLAMA_FTYPE_MOSTLY_Q4_K_M
            Quant::Q5KM => 17,  // LLAMA_FTYPE_MOSTLY_Q5_K_M
            Quant::IQ4NL => 25, // LLAMA_FTYPE_MOSTLY_IQ4_NL
            Quant::IQ4XS => 30, // LLAMA_FTYPE_MOSTLY_IQ4_XS
        }
    }

    /// Whether the mix uses block-quantized types (and so writes
    /// `general.quantization_version`).
    pub fn is_quantized(self) -> bool {
        !matches!(self, Quant::F32 | Quant::F16 | Quant::BF16)
    }
}

/// How a tensor's values are drawn, which also decides whether it may be quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// A weight matrix: N(0, σ), stored in the mix's types.
    Matrix,
    /// A bias vector: N(0, σ), always F32.
    Bias,
    /// An RMS-norm weight: 1 + N(0, σ), always F32.
    Norm,
    /// Values computed from the shape (`PlannedTensor::fixed`: Llama 3's RoPE frequency
    /// factors), always F32.
    Fixed,
}

/// One tensor of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    pub kind: TensorKind,
    /// The values of a `TensorKind::Fixed` tensor.
    pub fixed: Option<Vec<f32>>,
}

impl PlannedTensor {
    pub fn spec(&self) -> TensorSpec {
        TensorSpec {
            name: self.name.clone(),
            dims: self.dims.clone(),
            ggml_type: self.ggml_type,
        }
    }

    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The tensors of a model of shape `shape` in mix `quant`, in file order (the order of
/// llama.cpp's convert script: embeddings, the blocks, the final norm), with their types.
pub fn tensor_plan(shape: &ShapeParams, quant: Quant) -> Vec<PlannedTensor> {
    let s = shape;
    let (e, q, kv, f) = (
        s.n_embd,
        s.n_head * s.head_dim,
        s.n_head_kv * s.head_dim,
        s.n_ff,
    );
    let n_layer = s.n_layer;
    // llama.cpp's n_gqa(): query heads per KV head.
    let gqa = s.n_head / s.n_head_kv.max(1);
    let mut plan = Vec::with_capacity(2 + 12 * n_layer as usize);
    let mut push = |name: String, dims: Vec<u64>, kind: TensorKind, role: Role| {
        let ggml_type = match kind {
            TensorKind::Matrix => matrix_type(quant, role, dims[0], gqa),
            TensorKind::Bias | TensorKind::Norm | TensorKind::Fixed => GgmlType::F32,
        };
        plan.push(PlannedTensor {
            name,
            dims,
            ggml_type,
            kind,
            fixed: None,
        });
    };
    use TensorKind::{Bias, Matrix, Norm};
    // llama.cpp's converter yields rope_freqs before the other tensors.
    let rope_freqs = s.llama3_rope.map(|r| PlannedTensor {
        name: "rope_freqs.weight".into(),
        dims: vec![s.head_dim / 2],
        ggml_type: GgmlType::F32,
        kind: TensorKind::Fixed,
        fixed: Some(r.factors(s.head_dim, s.rope_theta)),
    });
    push(
        "token_embd.weight".into(),
        vec![e, s.n_vocab],
        Matrix,
        Role::TiedEmbedding,
    );
    for l in 0..n_layer {
        let t = |suffix: &str| format!("blk.{l}.{suffix}");
        let plain = Role::Plain;
        let layer = Layer {
            index: l,
            count: n_layer,
        };
        let bias = s.arch.qkv_bias();
        push(t("attn_norm.weight"), vec![e], Norm, plain);
        push(t("attn_q.weight"), vec![e, q], Matrix, plain);
        if bias {
            push(t("attn_q.bias"), vec![q], Bias, plain);
        }
        push(t("attn_k.weight"), vec![e, kv], Matrix, plain);
        if bias {
            push(t("attn_k.bias"), vec![kv], Bias, plain);
        }
        push(t("attn_v.weight"), vec![e, kv], Matrix, Role::AttnV(layer));
        if bias {
            push(t("attn_v.bias"), vec![kv], Bias, plain);
        }
        if s.arch.qk_norm() {
            push(t("attn_q_norm.weight"), vec![s.head_dim], Norm, plain);
            push(t("attn_k_norm.weight"), vec![s.head_dim], Norm, plain);
        }
        push(t("attn_output.weight"), vec![q, e], Matrix, plain);
        if s.arch == Arch::Gemma3 {
            push(t("post_attention_norm.weight"), vec![e], Norm, plain);
        }
        push(t("ffn_norm.weight"), vec![e], Norm, plain);
        push(t("ffn_gate.weight"), vec![e, f], Matrix, plain);
        push(t("ffn_up.weight"), vec![e, f], Matrix, plain);
        push(
            t("ffn_down.weight"),
            vec![f, e],
            Matrix,
            Role::FfnDown(layer),
        );
        if s.arch == Arch::Gemma3 {
            push(t("post_ffw_norm.weight"), vec![e], Norm, plain);
        }
    }
    push("output_norm.weight".into(), vec![e], Norm, Role::Plain);
    if let Some(t) = rope_freqs {
        plan.insert(0, t);
    }
    plan
}

/// Position of a tensor's block, for the mixes that spend more bits on some layers.
#[derive(Clone, Copy, Debug)]
struct Layer {
    index: u64,
    count: u64,
}

/// The tensor categories llama.cpp's type selection treats differently (for a dense qwen2).
#[derive(Clone, Copy, Debug)]
enum Role {
    /// `token_embd.weight` of a model without `output.weight`: it is also the output
    /// projection, so llama-quantize gives it the output tensor's type.
    TiedEmbedding,
    AttnV(Layer),
    FfnDown(Layer),
    Plain,
}

/// The type of a weight matrix with rows of `row_len` elements.
fn matrix_type(quant: Quant, role: Role, row_len: u64, gqa: u64) -> GgmlType {
    match quant {
        // Not a quantized mix: llama-quantize skips its per-tensor rules and fallbacks.
        Quant::F32 => GgmlType::F32,
        Quant::F16 => GgmlType::F16,
        Quant::BF16 => GgmlType::BF16,
        // The output/embedding rule keeps Q8_0 (it only upgrades types other than Q8_0).
        Quant::Q8_0 => with_fallback(GgmlType::Q8_0, row_len),
        Quant::Q4_0 => with_fallback(legacy_target(GgmlType::Q4_0, role, row_len), row_len),
        Quant::Q4_1 => with_fallback(legacy_target(GgmlType::Q4_1, role, row_len), row_len),
        Quant::Q5_0 => with_fallback(legacy_target(GgmlType::Q5_0, role, row_len), row_len),
        Quant::Q5_1 => with_fallback(legacy_target(GgmlType::Q5_1, role, row_len), row_len),
        Quant::Q4KM => with_fallback(k_m_target(GgmlType::Q4K, role, row_len), row_len),
        Quant::Q5KM => with_fallback(k_m_target(GgmlType::Q5K, role, row_len), row_len),
        Quant::IQ4NL => with_fallback(iq4_target(GgmlType::IQ4NL, role, row_len, gqa), row_len),
        Quant::IQ4XS => with_fallback(iq4_target(GgmlType::IQ4XS, role, row_len, gqa), row_len),
    }
}

/// llama.cpp's output rule (`llama_tensor_get_type_impl`, also applied to a tied embedding):
/// Q8_0 when the rows are not whole blocks of the mix's default type, else Q6_K.
fn output_type(default: GgmlType, row_len: u64) -> GgmlType {
    if row_len % default.block_size() as u64 != 0 {
        GgmlType::Q8_0
    } else {
        GgmlType::Q6K
    }
}

/// `llama_tensor_get_type_impl` for LLAMA_FTYPE_MOSTLY_Q4_0/Q4_1/Q5_0/Q5_1 without an
/// importance matrix: only the output rule changes a type.
fn legacy_target(default: GgmlType, role: Role, row_len: u64) -> GgmlType {
    match role {
        Role::TiedEmbedding => output_type(default, row_len),
        _ => default,
    }
}

/// `llama_tensor_get_type_impl` for LLAMA_FTYPE_MOSTLY_Q4_K_M / Q5_K_M (default type Q4_K /
/// Q5_K), for the categories of a dense, non-Falcon model without experts.
fn k_m_target(default: GgmlType, role: Role, row_len: u64) -> GgmlType {
    match role {
        Role::TiedEmbedding => output_type(default, row_len),
        // llama.cpp counts attn_v and ffn_down tensors in layer order (its loader sorts
        // weights by block number), so its counters are the layer index.
        Role::AttnV(l) | Role::FfnDown(l) if use_more_bits(l.index, l.count) => GgmlType::Q6K,
        _ => default,
    }
}

/// `llama_tensor_get_type_impl` for LLAMA_FTYPE_MOSTLY_IQ4_NL / IQ4_XS without an importance
/// matrix, for a dense, non-Falcon model: the output rule, Q5_K for attn_v when there are 4 or
/// more query heads per KV head, Q5_K for ffn_down of the first eighth of the layers.
fn iq4_target(default: GgmlType, role: Role, row_len: u64, gqa: u64) -> GgmlType {
    match role {
        Role::TiedEmbedding => output_type(default, row_len),
        Role::AttnV(_) if gqa >= 4 => GgmlType::Q5K,
        Role::FfnDown(l) if l.index < l.count / 8 => GgmlType::Q5K,
        _ => default,
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third
/// layer in between.
fn use_more_bits(i_layer: u64, n_layers: u64) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `tensor_type_fallback`: a type whose block does not divide the row length is replaced by
/// one with 32-element blocks, and by F16 when even that does not fit.
fn with_fallback(target: GgmlType, row_len: u64) -> GgmlType {
    let fits = |t: GgmlType| row_len % t.block_size() as u64 == 0;
    if fits(target) {
        return target;
    }
    let fallback = match target {
        GgmlType::Q2K | GgmlType::Q3K => GgmlType::Q4_0,
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        GgmlType::IQ4XS => GgmlType::IQ4NL,
        // llama.cpp defines no fallback for 32-element types and refuses such a tensor; no
        // Qwen2.5 shape has rows that are not a multiple of 32, so F16 is only a safe default.
        _ => GgmlType::F16,
    };
    if fits(fallback) {
        fallback
    } else {
        GgmlType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_matches_the_formula_for_small_models() {
        // 8 layers: n/8 = 1, 7n/8 = 7 -> layers 0, 3, 6, 7.
        let picked: Vec<u64> = (0..8).filter(|&i| use_more_bits(i, 8)).collect();
        assert_eq!(picked, vec![0, 3, 6, 7]);
    }

    #[test]
    fn fallback_follows_llama_cpp_table() {
        assert_eq!(with_fallback(GgmlType::Q4K, 896), GgmlType::Q5_0);
        assert_eq!(with_fallback(GgmlType::Q6K, 896), GgmlType::Q8_0);
        assert_eq!(with_fallback(GgmlType::IQ4XS, 896), GgmlType::IQ4NL);
        assert_eq!(with_fallback(GgmlType::IQ4XS, 4864), GgmlType::IQ4XS);
        assert_eq!(with_fallback(GgmlType::Q4K, 1024), GgmlType::Q4K);
        assert_eq!(with_fallback(GgmlType::Q4K, 100), GgmlType::F16);
    }

    #[test]
    fn presets_have_consistent_heads() {
        for s in Shape::ALL {
            let p = s.params();
            if p.arch != Arch::Gemma3 {
                assert_eq!(p.n_head * p.head_dim, p.n_embd, "{}", s.name());
            }
            assert_eq!(p.n_head % p.n_head_kv, 0, "{}", s.name());
            assert_eq!(Shape::from_name(s.name()), Some(s));
        }
    }
}
