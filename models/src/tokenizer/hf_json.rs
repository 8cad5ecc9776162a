//! A Hugging Face tokenizer.json, tokenizing with Hugging Face's own semantics (its normalizer,
//! pre-tokenizer, added-token matching and post-processor). For a GGUF model prefer the GGUF's
//! vocabulary: llama.cpp and Hugging Face differ in small ways (e.g. Qwen2's NFC normalization).

use super::{TokenKind, TokenizerError};
use std::path::Path;
use std::sync::OnceLock;

pub(crate) struct HfJson {
    tokenizer: tokenizers::Tokenizer,
    /// A copy that reads special-token texts as plain text (`parse_special` off), made on
    /// first use: the switch is a setting of the whole tokenizer, not of one call.
    literal: OnceLock<tokenizers::Tokenizer>,
}

impl HfJson {
    pub fn open(path: &Path) -> Result<HfJson, TokenizerError> {
        let err = |detail: String| TokenizerError::TokenizerJson {
            path: path.to_path_buf(),
            detail,
        };
        if !path.is_file() {
            return Err(err("no such file".into()));
        }
        let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(|e| err(e.to_string()))?;
        Ok(HfJson {
            tokenizer,
            literal: OnceLock::new(),
        })
    }

    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let tokenizer = if parse_special {
            &self.tokenizer
        } else {
            self.literal.get_or_init(|| {
                let mut t = self.tokenizer.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        tokenizer
            .encode(text, add_special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// Hugging Face's decoding of the ids, special tokens included; None when it fails
    /// (an id outside the vocabulary).
    pub fn decode(&self, ids: &[u32]) -> Option<String> {
        self.tokenizer.decode(ids, false).ok()
    }

    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    pub fn token_text(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.tokenizer.token_to_id(text)
    }

    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        if let Some(added) = self.tokenizer.get_added_tokens_decoder().get(&id) {
            return Some(if added.special {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            });
        }
        self.tokenizer.id_to_token(id).map(|_| TokenKind::Normal)
    }

    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.tokenizer
            .to_string(true)
            .map_err(|e| TokenizerError::Export(e.to_string()))
    }
}
