//! The pre-tokenizers rocky implements: how raw text is cut into words before BPE. Each entry
//! reproduces one llama.cpp `tokenizer.ggml.pre` branch exactly; any other name is refused,
//! because a different split silently changes token ids.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// Qwen2's split, as llama.cpp writes it for `LLAMA_VOCAB_PRE_TYPE_QWEN2`: the tokenizer.json
/// original with `(?i:'s|…)` spelled out case by case. Digits are split one by one (`\p{N}`, not
/// `\p{N}{1,3}` as in Llama 3).
const QWEN2_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// llama.cpp's QWEN2 pre-tokenizer: no normalization (llama.cpp, unlike the Hugging Face
    /// tokenizer.json, applies no NFC), the split above, byte-level BPE without ignore_merges.
    Qwen2,
}

impl PreTokenizer {
    /// `tokenizer.ggml.pre` values that llama.cpp maps to a pre-tokenizer rocky implements.
    /// All three take the same llama.cpp branch (QWEN2, clean_spaces off, no forced BOS).
    pub const SUPPORTED: &'static [&'static str] = &["qwen2", "deepseek-r1-qwen", "kormo"];

    pub fn from_gguf_name(name: &str) -> Option<PreTokenizer> {
        Self::SUPPORTED
            .contains(&name)
            .then_some(PreTokenizer::Qwen2)
    }

    pub fn split_regex(self) -> &'static str {
        match self {
            PreTokenizer::Qwen2 => QWEN2_SPLIT,
        }
    }

    /// Whether a BOS is added when the GGUF has no `tokenizer.ggml.add_bos_token`
    /// (llama.cpp's per-pre default; false for Qwen2).
    pub fn default_add_bos(self) -> bool {
        match self {
            PreTokenizer::Qwen2 => false,
        }
    }

    /// The Hugging Face pre-tokenizer: the regex split (matches and the gaps between them
    /// become words, as in llama.cpp's `unicode_regex_split`), then the byte-level mapping
    /// without its own GPT-2 regex.
    pub fn hf_pre_tokenizer(self) -> Result<PreTokenizerWrapper, String> {
        let split = Split::new(
            SplitPattern::Regex(self.split_regex().to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| format!("the split regex does not compile: {e}"))?;
        let byte_level = ByteLevel::new(false, false, false);
        Ok(Sequence::new(vec![split.into(), byte_level.into()]).into())
    }
}
