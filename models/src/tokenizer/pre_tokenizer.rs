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

/// Llama 3's split, as llama.cpp writes it for `LLAMA_VOCAB_PRE_TYPE_LLAMA3` (the same
/// case-spelled contractions as Qwen2's), with digits in runs of up to three.
const LLAMA3_SPLIT: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// llama.cpp's QWEN2 pre-tokenizer: no normalization (llama.cpp, unlike the Hugging Face
    /// tokenizer.json, applies no NFC), the split above, byte-level BPE without ignore_merges.
    Qwen2,
    /// llama.cpp's LLAMA3 pre-tokenizer (Llama 3.x and the names llama.cpp maps to it): the
    /// split above, BOS added by default, and `ignore_merges`: a word that is itself a
    /// vocabulary token is that token, whatever the merges would make of it.
    Llama3,
}

impl PreTokenizer {
    /// `tokenizer.ggml.pre` values llama.cpp maps to its QWEN2 branch (clean_spaces off, no
    /// forced BOS).
    const QWEN2_NAMES: &'static [&'static str] = &["qwen2", "deepseek-r1-qwen", "kormo"];
    /// `tokenizer.ggml.pre` values llama.cpp maps to its LLAMA3 branch (ignore_merges, BOS).
    const LLAMA3_NAMES: &'static [&'static str] = &[
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
    ];

    /// Every `tokenizer.ggml.pre` value rocky implements (for error messages).
    pub fn supported() -> impl Iterator<Item = &'static str> {
        Self::QWEN2_NAMES.iter().chain(Self::LLAMA3_NAMES).copied()
    }

    pub fn from_gguf_name(name: &str) -> Option<PreTokenizer> {
        if Self::QWEN2_NAMES.contains(&name) {
            Some(PreTokenizer::Qwen2)
        } else if Self::LLAMA3_NAMES.contains(&name) {
            Some(PreTokenizer::Llama3)
        } else {
            None
        }
    }

    pub fn split_regex(self) -> &'static str {
        match self {
            PreTokenizer::Qwen2 => QWEN2_SPLIT,
            PreTokenizer::Llama3 => LLAMA3_SPLIT,
        }
    }

    /// Whether a word that is a vocabulary token as a whole skips the merges (llama.cpp's
    /// `ignore_merges`).
    pub fn ignore_merges(self) -> bool {
        match self {
            PreTokenizer::Qwen2 => false,
            PreTokenizer::Llama3 => true,
        }
    }

    /// Whether a BOS is added when the GGUF has no `tokenizer.ggml.add_bos_token`
    /// (llama.cpp's per-pre default; false for Qwen2).
    pub fn default_add_bos(self) -> bool {
        match self {
            PreTokenizer::Qwen2 => false,
            PreTokenizer::Llama3 => true,
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
