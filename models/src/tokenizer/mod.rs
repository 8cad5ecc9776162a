//! Text ↔ token ids, producing exactly the ids llama.cpp produces for the same GGUF.
//!
//! Supported, as llama.cpp 0c1e57098 tokenizes them:
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE, with every `tokenizer.ggml.pre` split rule
//!   llama.cpp has except a few written as hand-made code there (`pre_tokenizer`); a file
//!   without a pre name, or with one llama.cpp does not know, gets llama.cpp's default rule and
//!   a warning ([`Tokenizer::warnings`]);
//! - `tokenizer.ggml.model = "gemma4"` (and the Sarvam-MoE / Granite-embed-multi-311m pre
//!   names): BPE over raw UTF-8 with spaces escaped as U+2581;
//! - `tokenizer.ggml.model = "llama"`: SentencePiece-style (Llama 1/2, Gemma, Mistral; `spm`);
//! - `tokenizer.ggml.model = "bert"`: WordPiece (BERT-style embedders; `wpm`);
//! - `tokenizer.ggml.model = "t5"`: Unigram (T5, XLM-RoBERTa embedders; `ugm`).
//!
//! Anything else is refused with an error naming the value, never tokenized by a guess. A
//! Hugging Face tokenizer.json can be loaded instead ([`Tokenizer::from_tokenizer_json`]);
//! it then tokenizes with Hugging Face's semantics.

mod byte_level;
mod gguf_bpe;
mod gguf_vocab;
mod hf_json;
mod pre_tokenizer;
mod special_attrs;
mod special_split;
mod spm;
mod ugm;
mod unicode_class;
mod wpm;

pub use gguf_vocab::END_OF_GENERATION;
pub use pre_tokenizer::{PreTokenizer, SplitRule};

use crate::gguf::GgufFile;
use gguf_bpe::GgufBpe;
use hf_json::HfJson;
use spm::GgufSpm;
use std::path::{Path, PathBuf};
use ugm::GgufUgm;
use wpm::GgufWpm;

/// A token's kind, from GGUF `tokenizer.ggml.token_type` (after llama.cpp's fix-ups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// An ordinary BPE token (type 1).
    Normal,
    /// Type 2.
    Unknown,
    /// Type 3: chat/EOS markers such as `<|im_start|>`; matched in text only with
    /// `parse_special`.
    Control,
    /// Type 4: added tokens, always matched in text before BPE.
    UserDefined,
    /// Type 5.
    Unused,
    /// Type 6 (SentencePiece byte tokens).
    Byte,
    /// Type 0 or an unknown type number.
    Undefined,
}

impl TokenKind {
    fn from_gguf(token_type: i64) -> TokenKind {
        match token_type {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Whether the token's text is looked for in raw text before BPE (llama.cpp's special
    /// token cache).
    fn is_matched_in_text(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "{}: tokenizer model \"{model}\" ({}) is not supported: rocky tokenizes \"gpt2\" (byte-level BPE), \"llama\" (SentencePiece), \"bert\" (WordPiece) and \"t5\" (Unigram) vocabularies",
        path.display(), describe_model(model)
    )]
    UnsupportedModel { path: PathBuf, model: String },
    #[error(
        "{}: gpt2 pre-tokenizer \"{pre}\" is not supported: {why}; another split would give wrong token ids",
        path.display()
    )]
    UnsupportedPreTokenizer {
        path: PathBuf,
        pre: String,
        why: String,
    },
    #[error("{}: tokenizer metadata {key} {detail}", path.display())]
    Metadata {
        path: PathBuf,
        key: String,
        detail: String,
    },
    #[error("{}: cannot build the tokenizer: {detail}", path.display())]
    Build { path: PathBuf, detail: String },
    #[error("{}: cannot load the tokenizer.json: {detail}", path.display())]
    TokenizerJson { path: PathBuf, detail: String },
    #[error("tokenization failed: {0}")]
    Encode(String),
    #[error("cannot express the tokenizer as tokenizer.json: {0}")]
    Export(String),
}

fn describe_model(model: &str) -> &'static str {
    match model {
        "llama" => "SentencePiece, as in Llama 1/2, Gemma and Mistral",
        "bert" => "WordPiece",
        "rwkv" => "RWKV's trie tokenizer, which rocky does not implement",
        "plamo2" => "PLaMo-2's tokenizer, which rocky does not implement",
        "no_vocab" | "none" => "no vocabulary in the file",
        _ => "unknown to rocky",
    }
}

/// A loaded tokenizer.
pub struct Tokenizer {
    backend: Backend,
}

enum Backend {
    Gguf(Box<GgufBpe>),
    Spm(Box<GgufSpm>),
    Wpm(Box<GgufWpm>),
    Ugm(Box<GgufUgm>),
    HfJson(Box<HfJson>),
}

impl Tokenizer {
    /// The tokenizer of a GGUF file's `tokenizer.ggml.*` metadata (a model or a
    /// vocabulary-only file).
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let backend = match gguf_vocab::tokenizer_model(file)? {
            "gpt2" | "gemma4" => Backend::Gguf(Box::new(GgufBpe::from_gguf(file)?)),
            "llama" => Backend::Spm(Box::new(GgufSpm::from_gguf(file)?)),
            "bert" => Backend::Wpm(Box::new(GgufWpm::from_gguf(file)?)),
            "t5" => Backend::Ugm(Box::new(GgufUgm::from_gguf(file)?)),
            model => {
                return Err(TokenizerError::UnsupportedModel {
                    path: file.path().to_path_buf(),
                    model: model.to_string(),
                })
            }
        };
        Ok(Tokenizer { backend })
    }

    /// A Hugging Face tokenizer.json (e.g. the one beside the original model).
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
        Ok(Tokenizer {
            backend: Backend::HfJson(Box::new(HfJson::open(path.as_ref())?)),
        })
    }

    /// Token ids of `text`. `add_special` adds the BOS/EOS the vocabulary asks for
    /// (`tokenizer.ggml.add_bos_token`, absent = no BOS for Qwen2); `parse_special` turns
    /// control-token texts such as `<|im_start|>` into their ids (otherwise they are tokenized
    /// as plain text). User-defined tokens are matched either way, as in llama.cpp.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        match &self.backend {
            Backend::Gguf(t) => t.encode(text, add_special, parse_special),
            Backend::Spm(t) => t.encode(text, add_special, parse_special),
            Backend::Wpm(t) => t.encode(text, add_special, parse_special),
            Backend::Ugm(t) => t.encode(text, add_special, parse_special),
            Backend::HfJson(t) => t.encode(text, add_special, parse_special),
        }
    }

    /// The text of `ids`, special tokens written out. Bytes that do not form UTF-8 (a
    /// character split across the ends of the list) and ids outside the vocabulary become
    /// U+FFFD. A SentencePiece vocabulary that adds a space prefix loses it again, as in
    /// llama.cpp's detokenizer.
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.backend {
            Backend::Gguf(t) => {
                let mut bytes = Vec::with_capacity(ids.len() * 4);
                for &id in ids {
                    if !t.token_bytes(id, &mut bytes) {
                        bytes.extend_from_slice(char::REPLACEMENT_CHARACTER.to_string().as_bytes());
                    }
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Backend::Spm(t) => t.decode(ids),
            Backend::Wpm(t) => t.decode(ids),
            Backend::Ugm(t) => t.decode(ids),
            Backend::HfJson(t) => t.decode(ids).unwrap_or_else(|| {
                // Decode the valid ids; mark the invalid ones.
                ids.iter()
                    .map(|&id| {
                        t.decode(&[id])
                            .unwrap_or_else(|| char::REPLACEMENT_CHARACTER.to_string())
                    })
                    .collect()
            }),
        }
    }

    /// The exact bytes of one token (part of a UTF-8 character for some tokens); None for an
    /// id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        match &self.backend {
            Backend::Gguf(t) => {
                let mut bytes = Vec::new();
                t.token_bytes(id, &mut bytes).then_some(bytes)
            }
            Backend::Spm(t) => {
                let mut bytes = Vec::new();
                t.token_bytes(id, &mut bytes).then_some(bytes)
            }
            Backend::Wpm(t) => {
                let mut bytes = Vec::new();
                t.token_bytes(id, &mut bytes).then_some(bytes)
            }
            Backend::Ugm(t) => {
                let mut bytes = Vec::new();
                t.token_bytes(id, &mut bytes).then_some(bytes)
            }
            Backend::HfJson(t) => {
                t.token_text(id)?;
                t.decode(&[id]).map(String::into_bytes)
            }
        }
    }

    /// One token's text for display. A token holding part of a UTF-8 character shows those
    /// bytes as `\xNN` escapes (Python's `backslashreplace`, as llama.cpp's Python tools print
    /// pieces); an id outside the vocabulary gives U+FFFD.
    pub fn token_piece(&self, id: u32) -> String {
        match self.token_bytes(id) {
            Some(bytes) => escape_invalid_utf8(&bytes),
            None => char::REPLACEMENT_CHARACTER.to_string(),
        }
    }

    /// The token's text as stored in the vocabulary (byte-level spelling: 'Ġ' for a space;
    /// SentencePiece: '▁').
    pub fn token_text(&self, id: u32) -> Option<String> {
        match &self.backend {
            Backend::Gguf(t) => t.token_text(id).map(str::to_string),
            Backend::Spm(t) => t.token_text(id).map(str::to_string),
            Backend::Wpm(t) => t.token_text(id).map(str::to_string),
            Backend::Ugm(t) => t.token_text(id).map(str::to_string),
            Backend::HfJson(t) => t.token_text(id),
        }
    }

    /// The id of a vocabulary entry given its stored text (byte-level spelling for ordinary
    /// tokens, e.g. "Ġcapital" or SentencePiece's "▁capital"; literal text for special ones,
    /// e.g. "<|im_start|>").
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(t) => t.token_id(text),
            Backend::Spm(t) => t.token_id(text),
            Backend::Wpm(t) => t.token_id(text),
            Backend::Ugm(t) => t.token_id(text),
            Backend::HfJson(t) => t.token_id(text),
        }
    }

    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        match &self.backend {
            Backend::Gguf(t) => t.token_kind(id),
            Backend::Spm(t) => t.token_kind(id),
            Backend::Wpm(t) => t.token_kind(id),
            Backend::Ugm(t) => t.token_kind(id),
            Backend::HfJson(t) => t.token_kind(id),
        }
    }

    /// Number of token ids (the GGUF list, or a tokenizer.json's vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        match &self.backend {
            Backend::Gguf(t) => t.vocab_size(),
            Backend::Spm(t) => t.vocab_size(),
            Backend::Wpm(t) => t.vocab_size(),
            Backend::Ugm(t) => t.vocab_size(),
            Backend::HfJson(t) => t.vocab_size(),
        }
    }

    /// BOS id from the GGUF metadata (None for a tokenizer.json).
    pub fn bos_id(&self) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(t) => t.bos(),
            Backend::Spm(t) => t.bos(),
            Backend::Wpm(t) => t.bos(),
            Backend::Ugm(t) => t.bos(),
            Backend::HfJson(_) => None,
        }
    }

    /// EOS id from the GGUF metadata (None for a tokenizer.json).
    pub fn eos_id(&self) -> Option<u32> {
        match &self.backend {
            Backend::Gguf(t) => t.eos(),
            Backend::Spm(t) => t.eos(),
            Backend::Wpm(t) => t.eos(),
            Backend::Ugm(t) => t.eos(),
            Backend::HfJson(_) => None,
        }
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS (GGUF tokenizers).
    pub fn adds_bos(&self) -> bool {
        match &self.backend {
            Backend::Gguf(t) => t.add_bos(),
            Backend::Spm(t) => t.add_bos(),
            Backend::Wpm(t) => t.add_bos(),
            Backend::Ugm(t) => t.add_bos(),
            Backend::HfJson(_) => false,
        }
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS (GGUF tokenizers).
    pub fn adds_eos(&self) -> bool {
        match &self.backend {
            Backend::Gguf(t) => t.add_eos(),
            Backend::Spm(t) => t.add_eos(),
            Backend::Ugm(t) => t.add_eos(),
            Backend::Wpm(_) | Backend::HfJson(_) => false,
        }
    }

    /// What the tokenizer was told to tolerate when it was loaded (e.g. a BPE vocabulary
    /// without a pre-tokenizer name, tokenized with llama.cpp's default split): one sentence
    /// each, for the commands to print.
    pub fn warnings(&self) -> Vec<String> {
        match &self.backend {
            Backend::Gguf(t) => t.warnings().to_vec(),
            _ => Vec::new(),
        }
    }

    /// How this tokenizer tokenizes, for `rocky info`.
    pub fn info(&self) -> TokenizerInfo {
        let mut info = TokenizerInfo {
            family: "",
            pre: None,
            split_rule: None,
            ignore_merges: None,
            clean_spaces: None,
            add_space_prefix: None,
            normalizer: None,
            vocab_size: self.vocab_size(),
            bos: self.bos_id(),
            eos: self.eos_id(),
            adds_bos: self.adds_bos(),
            adds_eos: self.adds_eos(),
            warnings: self.warnings(),
        };
        match &self.backend {
            Backend::Gguf(t) => {
                let pre = t.pre();
                info.family = if pre.rule.byte_level() {
                    "BPE (GPT-2 byte-level)"
                } else {
                    "BPE (raw UTF-8, spaces as U+2581, <0xXX> byte fallback)"
                };
                info.pre = Some(pre.name.to_string());
                info.split_rule = Some(format!("{:?}", pre.rule));
                info.ignore_merges = Some(pre.ignore_merges);
                info.clean_spaces = Some(pre.clean_spaces);
            }
            Backend::Spm(t) => {
                info.family = "SPM (SentencePiece-style, merges by score, byte fallback)";
                info.add_space_prefix = Some(t.add_space_prefix());
            }
            Backend::Wpm(t) => {
                let (lowercase, strip_accents) = t.normalizer();
                info.family = "WPM (WordPiece, longest match)";
                info.normalizer = Some(format!(
                    "lowercase {lowercase}, strip accents {strip_accents}"
                ));
            }
            Backend::Ugm(t) => {
                info.family = "UGM (Unigram, Viterbi over token scores)";
                info.add_space_prefix = Some(t.add_space_prefix());
                info.normalizer = Some(if t.has_charsmap() {
                    "SentencePiece precompiled charsmap".into()
                } else {
                    "none".into()
                });
            }
            Backend::HfJson(_) => info.family = "Hugging Face tokenizer.json",
        }
        info
    }

    /// The tokenizer as a Hugging Face tokenizer.json document (pretty-printed). For a GGUF
    /// vocabulary: the same BPE and split, control tokens as special added tokens,
    /// user-defined ones as ordinary added tokens, no normalizer. Not available for a
    /// SentencePiece vocabulary: Hugging Face would need a merge list it does not carry.
    pub fn to_tokenizer_json(&self) -> Result<String, TokenizerError> {
        match &self.backend {
            Backend::Gguf(t) => t.to_tokenizer_json(),
            Backend::Spm(_) => Err(TokenizerError::Export(
                "a SentencePiece (llama) GGUF vocabulary merges by token score, which tokenizer.json's BPE cannot express".into(),
            )),
            Backend::Wpm(_) => Err(TokenizerError::Export(
                "exporting a WordPiece (bert) GGUF vocabulary is not implemented".into(),
            )),
            Backend::Ugm(_) => Err(TokenizerError::Export(
                "exporting a Unigram (t5) GGUF vocabulary is not implemented".into(),
            )),
            Backend::HfJson(t) => t.to_json(),
        }
    }
}

/// How a loaded tokenizer tokenizes (`rocky info`); fields that do not apply to its family are
/// None.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenizerInfo {
    /// BPE, SPM, WPM or a tokenizer.json, in words.
    pub family: &'static str,
    /// The `tokenizer.ggml.pre` name in effect ("default" when the file has none or an unknown
    /// one; see `warnings`).
    pub pre: Option<String>,
    /// llama.cpp's split rule that name selects.
    pub split_rule: Option<String>,
    pub ignore_merges: Option<bool>,
    /// Whether llama.cpp's detokenizer cleans up spaces before punctuation for this vocabulary
    /// (rocky's decoding stays lossless).
    pub clean_spaces: Option<bool>,
    pub add_space_prefix: Option<bool>,
    pub normalizer: Option<String>,
    pub vocab_size: usize,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub adds_bos: bool,
    pub adds_eos: bool,
    pub warnings: Vec<String>,
}

/// `bytes` as text, each byte that is not part of a valid UTF-8 character written as `\xNN`.
fn escape_invalid_utf8(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len());
                for b in &rest[..bad] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                bytes = &rest[bad..];
            }
        }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.backend {
            Backend::Gguf(_) => "gguf byte-level BPE",
            Backend::Spm(_) => "gguf SentencePiece",
            Backend::Wpm(_) => "gguf WordPiece",
            Backend::Ugm(_) => "gguf Unigram",
            Backend::HfJson(_) => "tokenizer.json",
        };
        f.debug_struct("Tokenizer")
            .field("kind", &kind)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::escape_invalid_utf8;

    #[test]
    fn invalid_utf8_bytes_are_escaped_one_by_one() {
        assert_eq!(escape_invalid_utf8(b"ab"), "ab");
        assert_eq!(escape_invalid_utf8(b" \xe2\x89"), " \\xe2\\x89");
        assert_eq!(
            escape_invalid_utf8(b"\xffok\xe6\x97\xa5"),
            "\\xffok\u{65e5}"
        );
    }
}
