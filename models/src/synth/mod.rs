//! Synthetic models: random-weight GGUF files with the real Qwen2.5 shapes, tensor names,
//! metadata, vocabulary and llama-quantize's tensor types, so benchmarks and demos need no
//! download. llama.cpp loads them as ordinary qwen2 models. Small qwen3-, gemma3- and llama-
//! architecture files (same vocabulary) exercise those graphs in tests.
//!
//! - `plan`: shapes, the tensor list and each tensor's type (`tensor_plan`);
//! - `weights`: the reproducible random values, quantized in parallel (`tensor_data`);
//! - this module: the metadata (tokenizer copied from a vocabulary GGUF) and the file.

mod plan;
mod weights;

pub use plan::{
    tensor_plan, Arch, Llama3Rope, PlannedTensor, Quant, Shape, ShapeParams, TensorKind,
    QWEN2_N_VOCAB,
};
pub use weights::{fill_row, tensor_data, WEIGHT_STD};

use crate::formats::GgmlType;
use crate::gguf::{GgufFile, GgufWriter, MetaValue};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The vocabulary file lacks what a Qwen2 model needs.
    #[error("{}: {detail}", path.display())]
    Vocabulary { path: PathBuf, detail: String },
    /// Writing the output failed (nothing is left at the output path).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The tokenizer of a vocabulary GGUF (llama.cpp's `models/ggml-vocab-qwen2.gguf`, or any
/// Qwen2 model), to copy into a synthetic model.
#[derive(Clone, Debug)]
pub struct Vocabulary {
    /// Every `tokenizer.*` key, in the file's order, values untouched.
    pub metadata: Vec<(String, MetaValue)>,
    pub n_tokens: u64,
}

impl Vocabulary {
    /// Takes the tokenizer from `file`, which must hold a GPT-2-style BPE vocabulary (what
    /// Qwen2 uses): `tokenizer.ggml.model = "gpt2"` and a token list.
    pub fn from_gguf(file: &GgufFile) -> Result<Vocabulary, SynthError> {
        let error = |detail: String| SynthError::Vocabulary {
            path: file.path().to_path_buf(),
            detail,
        };
        let hint = "use llama.cpp's models/ggml-vocab-qwen2.gguf or a Qwen2/Qwen2.5 GGUF model";
        match file.get("tokenizer.ggml.model").and_then(MetaValue::as_str) {
            Some("gpt2") => {}
            Some(other) => {
                return Err(error(format!(
                "tokenizer.ggml.model is {other:?}, not \"gpt2\" (Qwen2's BPE vocabulary): {hint}"
            )))
            }
            None => {
                return Err(error(format!(
                    "no tokenizer.ggml.model key: this file has no tokenizer; {hint}"
                )))
            }
        }
        let n_tokens = match file
            .get("tokenizer.ggml.tokens")
            .and_then(MetaValue::as_array)
        {
            Some(tokens) if !tokens.is_empty() => tokens.len() as u64,
            _ => {
                return Err(error(format!(
                    "tokenizer.ggml.tokens is missing or empty; {hint}"
                )))
            }
        };
        let metadata = file
            .metadata
            .iter()
            .filter(|(key, _)| key.starts_with("tokenizer."))
            .cloned()
            .collect();
        Ok(Vocabulary { metadata, n_tokens })
    }
}

/// What to synthesize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthConfig {
    pub shape: Shape,
    pub quant: Quant,
    pub seed: u64,
}

impl SynthConfig {
    /// The shape with the vocabulary's token count.
    pub fn params(&self, vocab: &Vocabulary) -> ShapeParams {
        ShapeParams {
            n_vocab: vocab.n_tokens,
            ..self.shape.params()
        }
    }

    /// `general.name` of the file.
    pub fn model_name(&self) -> String {
        format!(
            "{}-shape random weights ({}, seed {}, std {})",
            self.shape.name(),
            self.quant.name(),
            self.seed,
            WEIGHT_STD
        )
    }
}

/// The metadata of a synthetic model, with the keys and value types llama.cpp's convert
/// script and llama-quantize write for its architecture.
pub fn model_metadata(config: &SynthConfig, vocab: &Vocabulary) -> Vec<(String, MetaValue)> {
    let p = config.params(vocab);
    let arch = p.arch.name();
    let u32_of = |v: u64| MetaValue::U32(v as u32);
    let mut kv = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String(arch.into()),
        ),
        (
            "general.name".to_string(),
            MetaValue::String(config.model_name()),
        ),
        (
            "general.file_type".to_string(),
            MetaValue::U32(config.quant.file_type()),
        ),
    ];
    if config.quant.is_quantized() {
        // GGML_QNT_VERSION, written by llama-quantize.
        kv.push(("general.quantization_version".into(), MetaValue::U32(2)));
    }
    let key = |k: &str| format!("{arch}.{k}");
    kv.extend([
        (key("context_length"), u32_of(p.n_ctx)),
        (key("embedding_length"), u32_of(p.n_embd)),
        (key("block_count"), u32_of(p.n_layer)),
        (key("feed_forward_length"), u32_of(p.n_ff)),
        (key("attention.head_count"), u32_of(p.n_head)),
        (key("attention.head_count_kv"), u32_of(p.n_head_kv)),
        (key("rope.freq_base"), MetaValue::F32(p.rope_theta)),
        (
            key("attention.layer_norm_rms_epsilon"),
            MetaValue::F32(p.rms_eps),
        ),
    ]);
    // Where the head dimension is not n_embd / n_head, llama.cpp reads it from these keys.
    if p.n_head * p.head_dim != p.n_embd {
        kv.push((key("attention.key_length"), u32_of(p.head_dim)));
        kv.push((key("attention.value_length"), u32_of(p.head_dim)));
    }
    if p.arch == Arch::Llama {
        // What llama.cpp's converter writes for a Llama 3 model (the llama3 scaling itself
        // travels as rope_freqs.weight).
        kv.push((key("rope.dimension_count"), u32_of(p.head_dim)));
        kv.push((key("vocab_size"), u32_of(p.n_vocab)));
    }
    if p.sliding_window > 0 {
        kv.push((key("attention.sliding_window"), u32_of(p.sliding_window)));
    }
    kv.extend(vocab.metadata.iter().cloned());
    kv
}

/// Progress of `write_model`, reported after each tensor.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// 0-based index of the tensor just written.
    pub index: usize,
    pub n_tensors: usize,
    pub tensor: &'a PlannedTensor,
    /// Bytes of this tensor's data.
    pub tensor_bytes: u64,
    /// Tensor data written so far and in all.
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What `write_model` wrote.
#[derive(Clone, Debug)]
pub struct Summary {
    pub n_tensors: usize,
    pub n_params: u64,
    pub file_bytes: u64,
    /// Tensors and bytes per type.
    pub by_type: BTreeMap<GgmlType, (usize, u64)>,
}

/// Writes the model `config` with the tokenizer of `vocab` to `path`, one tensor at a time
/// (memory: about one tensor), calling `progress` after each. The file appears only when
/// complete; an existing file at `path` is replaced (callers decide whether that is allowed).
pub fn write_model(
    path: &Path,
    config: &SynthConfig,
    vocab: &Vocabulary,
    mut progress: impl FnMut(&Progress),
) -> Result<Summary, SynthError> {
    let write_error = |source| SynthError::Write {
        path: path.to_path_buf(),
        source,
    };
    let plan = tensor_plan(&config.params(vocab), config.quant);
    let mut writer = GgufWriter::new();
    for (key, value) in model_metadata(config, vocab) {
        writer.set(&key, value);
    }
    let mut by_type: BTreeMap<GgmlType, (usize, u64)> = BTreeMap::new();
    for t in &plan {
        let spec = t.spec();
        let bytes = spec.byte_size().map_err(write_error)?;
        let entry = by_type.entry(t.ggml_type).or_default();
        entry.0 += 1;
        entry.1 += bytes;
        writer.add_tensor(spec);
    }
    let bytes_total = by_type.values().map(|(_, b)| b).sum();
    let mut bytes_done = 0;
    writer
        .write(path, |i, spec| {
            let tensor = &plan[i];
            let data = tensor_data(tensor, i as u64, config.seed).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("tensor {}: {e}", spec.name),
                )
            })?;
            bytes_done += data.len() as u64;
            progress(&Progress {
                index: i,
                n_tensors: plan.len(),
                tensor,
                tensor_bytes: data.len() as u64,
                bytes_done,
                bytes_total,
            });
            Ok(data)
        })
        .map_err(write_error)?;
    let file_bytes = std::fs::metadata(path).map_err(write_error)?.len();
    Ok(Summary {
        n_tensors: plan.len(),
        n_params: plan.iter().map(PlannedTensor::n_elements).sum(),
        file_bytes,
        by_type,
    })
}
