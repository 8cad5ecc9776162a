//! The tokenizer of a GGUF WordPiece vocabulary (`tokenizer.ggml.model = "bert"`: BERT, BGE,
//! Nomic/Jina BERT embedders), tokenizing as llama.cpp's `llm_tokenizer_wpm_session` does:
//!
//! 1. special tokens are cut out of the raw text first (`special_split`);
//! 2. each fragment is normalized and cut into words: whitespace ends a word; NUL, U+FFFD and
//!    control characters are dropped; with accent stripping every character is replaced by the
//!    first character of its NFD form and accent marks are dropped; characters are lower-cased
//!    when asked; punctuation, ASCII symbols and CJK ideographs are words of their own;
//! 3. each word, prefixed with U+2581 (the converter spells a word-initial piece "▁piece" and a
//!    continuation "piece", where Hugging Face writes "piece" and "##piece"), is covered from the
//!    left by the longest vocabulary tokens; a word that cannot be covered is `[UNK]`.
//!
//! Character classes come from llama.cpp's own tables (`unicode_class`).

use super::gguf_vocab::{
    force_control_looking_tokens, index_tokens, metadata_error, read_flag, read_kinds,
    read_token_id, read_tokens, KEY_BOS, KEY_EOS,
};
use super::special_attrs::special_tokens;
use super::special_split::{partition_stripping, Fragment, Strip};
use super::unicode_class::{is_whitespace, nfd_base, to_lower, CharClass};
use super::{TokenKind, TokenizerError};
use crate::gguf::GgufFile;
use std::collections::HashMap;

const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_SEP: &str = "tokenizer.ggml.seperator_token_id";
const KEY_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";
const KEY_STRIP_ACCENTS: &str = "tokenizer.ggml.normalizer.strip_accents";

/// The phantom space the converter puts in front of word-initial pieces.
const WORD_START: char = '\u{2581}';

pub(crate) struct GgufWpm {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    ids: HashMap<String, u32>,
    /// Longest token text in bytes: no match can be longer.
    max_token_len: usize,
    /// Special tokens in llama.cpp's matching order, with the whitespace each strips.
    specials: Vec<(u32, Strip)>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    sep: Option<u32>,
    lowercase: bool,
    strip_accents: bool,
}

impl GgufWpm {
    pub fn from_gguf(file: &GgufFile) -> Result<GgufWpm, TokenizerError> {
        let err = metadata_error(file);
        let tokens = read_tokens(file, &err)?;
        let n = tokens.len();
        let mut kinds = read_kinds(file, n, &err)?;
        let borrowed_ids = index_tokens(&tokens, &err)?;
        force_control_looking_tokens(file, &borrowed_ids, &mut kinds);
        let ids: HashMap<String, u32> = borrowed_ids
            .into_iter()
            .map(|(t, id)| (t.to_string(), id))
            .collect();

        // llama.cpp's WordPiece defaults ([CLS] = 101 as BOS, [UNK] = 100, [SEP] = 102; BOS and
        // SEP added), each overridden by the metadata; a default outside the vocabulary is none.
        let default_id = |id: u32| ((id as usize) < n).then_some(id);
        let bos = read_token_id(file, KEY_BOS, n, &err)?.or(default_id(101));
        let eos = read_token_id(file, KEY_EOS, n, &err)?;
        let unk = read_token_id(file, KEY_UNK, n, &err)?.or(default_id(100));
        let sep = read_token_id(file, KEY_SEP, n, &err)?.or(default_id(102));
        // llama.cpp's WordPiece session wraps a text in BOS and SEP whenever special tokens are
        // asked for, whatever tokenizer.ggml.add_bos_token/add_eos_token say.
        if bos.is_none() || sep.is_none() {
            return Err(err(
                KEY_BOS,
                format!("and {KEY_SEP} must both name tokens of the {n}-token vocabulary: a WordPiece text starts with the one and ends with the other"),
            ));
        }
        let lowercase = read_flag(file, KEY_LOWERCASE, true, &err)?;
        let strip_accents = read_flag(file, KEY_STRIP_ACCENTS, lowercase, &err)?;

        let specials = special_tokens(file, &tokens, &kinds);
        let max_token_len = tokens.iter().map(String::len).max().unwrap_or(0);
        Ok(GgufWpm {
            tokens,
            kinds,
            ids,
            max_token_len,
            specials,
            bos,
            eos,
            unk,
            sep,
            lowercase,
            strip_accents,
        })
    }

    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if add_special {
            ids.extend(self.bos);
        }
        let specials = self
            .specials
            .iter()
            .filter(|(id, _)| parse_special || self.kinds[*id as usize] == TokenKind::UserDefined)
            .map(|&(id, strip)| (id, self.tokens[id as usize].as_str(), strip));
        for fragment in partition_stripping(text, specials) {
            match fragment {
                Fragment::Token(id) => ids.push(id),
                Fragment::Text(t) => {
                    for word in self.words(t) {
                        self.cover(&word, &mut ids)?;
                    }
                }
            }
        }
        if add_special {
            ids.extend(self.sep);
        }
        Ok(ids)
    }

    /// llama.cpp's `preprocess`: the normalized words of one fragment.
    fn words(&self, text: &str) -> Vec<String> {
        let mut words = vec![String::new()];
        for c in text.chars() {
            let c = if self.strip_accents { nfd_base(c) } else { c };
            if is_whitespace(c) {
                if !words.last().is_some_and(String::is_empty) {
                    words.push(String::new());
                }
                continue;
            }
            let class = CharClass::of(c);
            if c == '\0' || c == char::REPLACEMENT_CHARACTER || class.is_control() {
                continue;
            }
            if self.strip_accents && class.is_accent_mark() {
                continue;
            }
            let shown = if self.lowercase { to_lower(c) } else { c };
            let alone = class.is_punctuation()
                || ((c as u32) < 0x7f && class.is_symbol())
                || is_chinese_char(c);
            if alone {
                if !words.last().is_some_and(String::is_empty) {
                    words.push(String::new());
                }
                if let Some(last) = words.last_mut() {
                    last.push(shown);
                }
                words.push(String::new());
            } else if let Some(last) = words.last_mut() {
                last.push(shown);
            }
        }
        words.retain(|w| !w.is_empty());
        words
    }

    /// Greedy longest-match of "▁" + word; the whole word is `[UNK]` when a position has no
    /// token.
    fn cover(&self, word: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let marked = format!("{WORD_START}{word}");
        let start_len = out.len();
        let mut i = 0;
        while i < marked.len() {
            let longest = (i + self.max_token_len).min(marked.len());
            let found = (i + 1..=longest)
                .rev()
                .filter(|&j| marked.is_char_boundary(j))
                .find_map(|j| self.ids.get(&marked[i..j]).map(|&id| (id, j)));
            match found {
                Some((id, end)) => {
                    out.push(id);
                    i = end;
                }
                None => {
                    out.truncate(start_len);
                    break;
                }
            }
        }
        if out.len() == start_len {
            let unk = self.unk.ok_or_else(|| {
                TokenizerError::Encode(format!(
                    "the word {word:?} has no WordPiece tokens and the vocabulary names no unknown token ({KEY_UNK})"
                ))
            })?;
            out.push(unk);
        }
        Ok(())
    }

    /// As llama.cpp's `token_to_piece(special = true)`: ordinary tokens with "▁" turned back
    /// into a space, control/user-defined/unknown tokens as their text, others as nothing.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) -> bool {
        let Some(text) = self.tokens.get(id as usize) else {
            return false;
        };
        match self.kinds[id as usize] {
            TokenKind::Normal => {
                for c in text.chars() {
                    let c = if c == WORD_START { ' ' } else { c };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
            }
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                out.extend_from_slice(text.as_bytes())
            }
            TokenKind::Byte | TokenKind::Unused | TokenKind::Undefined => {}
        }
        true
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if !self.token_bytes(id, &mut bytes) {
                bytes.extend_from_slice(char::REPLACEMENT_CHARACTER.to_string().as_bytes());
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Always: see `from_gguf`.
    pub fn add_bos(&self) -> bool {
        true
    }

    pub fn normalizer(&self) -> (bool, bool) {
        (self.lowercase, self.strip_accents)
    }
}

/// The CJK ideograph ranges llama.cpp (after Hugging Face's BERT, with its 0x2B920 start of
/// extension E) makes one-character words.
fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}
