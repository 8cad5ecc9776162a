//! The tokenizer of a GGUF SentencePiece-style vocabulary (`tokenizer.ggml.model = "llama"`:
//! Llama 1/2, Gemma, Mistral), tokenizing exactly as llama.cpp's `llm_tokenizer_spm` does,
//! which is not what the `sentencepiece` library does (no normalization, no unigram lattice):
//!
//! 1. special tokens are cut out of the raw text first (`special_split`, as for BPE);
//! 2. each remaining fragment gets a leading space when `add_space_prefix` is on and it starts
//!    the text or follows a special token, then every space becomes U+2581 ("▁");
//! 3. the fragment is split into characters and adjacent symbols are merged greedily: the pair
//!    whose joined text is a vocabulary token with the highest score first, ties to the leftmost;
//! 4. a symbol left that is no token (a single character the vocabulary lacks) is spelled by its
//!    UTF-8 bytes' `<0xXX>` tokens (byte fallback).
//!
//! Hugging Face's tokenizers crate is not used here: its SentencePiece BPE merges by merge rank
//! and would need the merge list these vocabularies do not carry.

use super::gguf_vocab::{
    force_control_looking_tokens, index_tokens, metadata_error, read_flag, read_kinds,
    read_token_id, read_tokens, ErrFn, KEY_ADD_BOS, KEY_ADD_EOS, KEY_BOS, KEY_EOS, KEY_TOKENS,
    KEY_TOKEN_TYPE,
};
use super::special_attrs::special_tokens;
use super::special_split::{partition_stripping, Fragment, Strip};
use super::{TokenKind, TokenizerError};
use crate::gguf::{GgufFile, MetaValue, ValueType};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// SentencePiece's escape for a space inside token texts.
const SPACE: char = '\u{2581}';

pub(crate) struct GgufSpm {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    scores: Vec<f32>,
    ids: HashMap<String, u32>,
    /// The token that spells each byte in byte fallback.
    byte_tokens: [u32; 256],
    /// Control, user-defined and unknown tokens in llama.cpp's matching order, with the
    /// whitespace each strips beside it (`special_attrs`).
    specials: Vec<(u32, Strip)>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

impl GgufSpm {
    pub fn from_gguf(file: &GgufFile) -> Result<GgufSpm, TokenizerError> {
        let err = metadata_error(file);
        let tokens = read_tokens(file, &err)?;
        let n = tokens.len();
        let mut kinds = read_kinds(file, n, &err)?;
        let scores = read_scores(file, n, &err)?;
        let borrowed_ids = index_tokens(&tokens, &err)?;
        force_control_looking_tokens(file, &borrowed_ids, &mut kinds);
        let ids: HashMap<String, u32> = borrowed_ids
            .into_iter()
            .map(|(t, id)| (t.to_string(), id))
            .collect();
        let byte_tokens = byte_fallback_tokens(&ids, &err)?;
        check_byte_tokens(&tokens, &kinds, &err)?;

        // llama.cpp's SentencePiece defaults: <s> = 1, </s> = 2, BOS added, EOS not, a space
        // prefix; the metadata overrides each.
        let default_id = |id: u32| ((id as usize) < n).then_some(id);
        let bos = read_token_id(file, KEY_BOS, n, &err)?.or(default_id(1));
        let eos = read_token_id(file, KEY_EOS, n, &err)?.or(default_id(2));
        let add_bos = read_flag(file, KEY_ADD_BOS, true, &err)?;
        let add_eos = read_flag(file, KEY_ADD_EOS, false, &err)?;
        let add_space_prefix = read_flag(file, KEY_ADD_SPACE_PREFIX, true, &err)?;
        if add_bos && bos.is_none() {
            return Err(err(
                KEY_BOS,
                format!("is missing (and the default id 1 is outside the {n}-token vocabulary) but {KEY_ADD_BOS} asks for a BOS token"),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(err(
                KEY_EOS,
                format!("is missing (and the default id 2 is outside the {n}-token vocabulary) but {KEY_ADD_EOS} asks for an EOS token"),
            ));
        }

        let specials = special_tokens(file, &tokens, &kinds);

        Ok(GgufSpm {
            tokens,
            kinds,
            scores,
            ids,
            byte_tokens,
            specials,
            bos,
            eos,
            add_bos,
            add_eos,
            add_space_prefix,
        })
    }

    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        // As for BPE: user-defined tokens are always cut out (Gemma's runs of spaces and
        // newlines are such tokens), control and unknown ones only with parse_special.
        let specials = self
            .specials
            .iter()
            .filter(|(id, _)| parse_special || self.kinds[*id as usize] == TokenKind::UserDefined)
            .map(|&(id, strip)| (id, self.tokens[id as usize].as_str(), strip));
        // llama.cpp adds the space prefix to the first fragment and to every fragment that
        // follows a special token, never after text.
        let mut after_special = true;
        let mut escaped = String::new();
        for fragment in partition_stripping(text, specials) {
            match fragment {
                Fragment::Token(id) => {
                    ids.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    escaped.clear();
                    if self.add_space_prefix && after_special {
                        escaped.push(SPACE);
                    }
                    escaped.extend(t.chars().map(|c| if c == ' ' { SPACE } else { c }));
                    self.merge(&escaped, &mut ids);
                    after_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// Tokens of one escaped fragment: llama.cpp's `llm_tokenizer_spm_session::tokenize`.
    fn merge(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .map(|(start, c)| Symbol {
                start,
                len: c.len_utf8(),
                prev: None,
                next: None,
            })
            .collect();
        let count = symbols.len();
        for (i, s) in symbols.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < count).then_some(i + 1);
        }

        let mut queue = BinaryHeap::new();
        for right in 1..count {
            self.push_pair(text, &symbols, Some(right - 1), Some(right), &mut queue);
        }
        while let Some(pair) = queue.pop() {
            let (left, right) = (symbols[pair.left], symbols[pair.right]);
            // A pair queued before one of its symbols changed is stale: its symbol was merged
            // away (length 0) or grew, and lengths only grow, so a stale pair stays stale.
            if left.len == 0 || right.len == 0 || left.len + right.len != pair.size {
                continue;
            }
            symbols[pair.left].len += right.len;
            symbols[pair.right].len = 0;
            symbols[pair.left].next = right.next;
            if let Some(next) = right.next {
                symbols[next].prev = Some(pair.left);
            }
            self.push_pair(text, &symbols, left.prev, Some(pair.left), &mut queue);
            self.push_pair(text, &symbols, Some(pair.left), right.next, &mut queue);
        }

        // Symbol 0 is never merged away (only right-hand symbols are).
        let mut at = (count > 0).then_some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                // Only a single character can fail to be a token: merges make tokens.
                None => out.extend(piece.bytes().map(|b| self.byte_tokens[b as usize])),
            }
            at = s.next;
        }
    }

    /// Queues the merge of two adjacent symbols when their joined text is a token (of any
    /// kind, as in llama.cpp), ranked by that token's score.
    fn push_pair(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: Option<usize>,
        right: Option<usize>,
        queue: &mut BinaryHeap<Pair>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = symbols[left].start;
        let size = symbols[left].len + symbols[right].len;
        if let Some(&id) = self.ids.get(&text[start..start + size]) {
            queue.push(Pair {
                score: self.scores[id as usize],
                left,
                right,
                size,
            });
        }
    }

    /// The bytes token `id` stands for, as llama.cpp's `token_to_piece(special = true)`:
    /// ordinary tokens with "▁" turned back into spaces, control/user-defined/unknown tokens as
    /// their literal text, byte tokens as their byte, unused/undefined tokens as nothing.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) -> bool {
        let Some(text) = self.tokens.get(id as usize) else {
            return false;
        };
        match self.kinds[id as usize] {
            TokenKind::Normal => {
                for c in text.chars() {
                    let c = if c == SPACE { ' ' } else { c };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
            }
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                out.extend_from_slice(text.as_bytes())
            }
            // Checked at load: every byte token spells its byte.
            TokenKind::Byte => out.extend(byte_token_value(text)),
            TokenKind::Unused | TokenKind::Undefined => {}
        }
        true
    }

    /// llama.cpp's detokenizer drops the leading space of the first piece when the vocabulary
    /// adds a space prefix, so that decoding gives back the text that was encoded.
    pub fn decode(&self, ids: &[u32]) -> String {
        decode_pieces(ids, self.add_space_prefix, |id, out| {
            self.token_bytes(id, out)
        })
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

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }
}

/// One symbol of the fragment being merged: a byte range of the escaped text, linked to its
/// neighbours (a symbol merged into its left neighbour keeps its place with length 0).
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` with `right`; `size` is their joined byte length when queued.
struct Pair {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// llama.cpp's queue order: higher score first, then the leftmost pair. Scores are never NaN
/// (refused at load), so the float comparison is total here.
impl Ord for Pair {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pair {}

/// `tokenizer.ggml.scores`: one f32 per token (or i32, which llama.cpp converts to float). The
/// scores are the merge priorities, so a vocabulary without them (llama.cpp would silently use
/// 0 for all) is refused.
pub(super) fn read_scores(
    file: &GgufFile,
    n: usize,
    err: &ErrFn,
) -> Result<Vec<f32>, TokenizerError> {
    let values = file.get(KEY_SCORES).ok_or_else(|| {
        err(
            KEY_SCORES,
            "is missing: a SentencePiece (llama) vocabulary needs its token scores to merge".into(),
        )
    })?;
    let (list, integers) = match values {
        MetaValue::Array(ValueType::F32, list) => (list, false),
        MetaValue::Array(ValueType::I32, list) => (list, true),
        _ => {
            return Err(err(
                KEY_SCORES,
                format!("is {values}, expected an array of f32 (or i32)"),
            ))
        }
    };
    if list.len() != n {
        return Err(err(
            KEY_SCORES,
            format!(
                "has {} entries but {KEY_TOKENS} has {n}: the vocabulary is inconsistent",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match (v, integers) {
            (MetaValue::F32(s), false) if !s.is_nan() => Ok(*s),
            (MetaValue::F32(_), false) => Err(err(
                KEY_SCORES,
                format!("entry {i} is NaN: tokens could not be ranked"),
            )),
            (MetaValue::I32(s), true) => Ok(*s as f32),
            _ => Err(err(
                KEY_SCORES,
                format!(
                    "entry {i} is {v}, but the array holds {}",
                    if integers { "i32" } else { "f32" }
                ),
            )),
        })
        .collect()
}

/// The token of each byte for byte fallback, found as llama.cpp's `byte_to_token` finds it:
/// `<0xXX>` (upper-case hex), else the one-character token of an ASCII byte. llama.cpp only
/// fails when a text needs a missing one; rocky refuses the vocabulary up front.
fn byte_fallback_tokens(
    ids: &HashMap<String, u32>,
    err: &ErrFn,
) -> Result<[u32; 256], TokenizerError> {
    let mut tokens = [0u32; 256];
    for (b, slot) in tokens.iter_mut().enumerate() {
        let hex = format!("<0x{b:02X}>");
        let plain = (b < 0x80).then(|| char::from(b as u8).to_string());
        *slot = ids
            .get(&hex)
            .or_else(|| plain.and_then(|p| ids.get(&p)))
            .copied()
            .ok_or_else(|| {
                err(
                    KEY_TOKENS,
                    format!("lacks the byte token {hex:?}: a SentencePiece vocabulary spells characters it has no token for by their bytes, so it needs all 256"),
                )
            })?;
    }
    Ok(tokens)
}

/// Every token typed byte (6) must be spelled `<0xXX>`: decoding turns it into that byte.
fn check_byte_tokens(
    tokens: &[String],
    kinds: &[TokenKind],
    err: &ErrFn,
) -> Result<(), TokenizerError> {
    match (0..tokens.len())
        .find(|&i| kinds[i] == TokenKind::Byte && byte_token_value(&tokens[i]).is_none())
    {
        Some(i) => Err(err(
            KEY_TOKEN_TYPE,
            format!(
                "types token {i} {:?} as a byte token, but it is not spelled <0xXX>",
                tokens[i]
            ),
        )),
        None => Ok(()),
    }
}

/// The byte of a `<0xXX>` token text.
/// The text of `ids` from each token's bytes (`token_bytes` appends them, false for an id it
/// does not know, which decodes as U+FFFD), as llama.cpp's detokenizer gives it for a
/// vocabulary that adds a space prefix: the first piece's leading space dropped, so decoding
/// gives back the text that was encoded. Shared by the SentencePiece and Unigram tokenizers.
pub(super) fn decode_pieces(
    ids: &[u32],
    add_space_prefix: bool,
    mut token_bytes: impl FnMut(u32, &mut Vec<u8>) -> bool,
) -> String {
    let mut bytes = Vec::with_capacity(ids.len() * 4);
    for (i, &id) in ids.iter().enumerate() {
        let start = bytes.len();
        if !token_bytes(id, &mut bytes) {
            bytes.extend_from_slice(char::REPLACEMENT_CHARACTER.to_string().as_bytes());
        }
        if i == 0 && add_space_prefix && bytes.get(start) == Some(&b' ') {
            bytes.remove(start);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    // from_str_radix alone would also take "+A".
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::byte_token_value;

    #[test]
    fn byte_token_texts() {
        assert_eq!(byte_token_value("<0x0A>"), Some(10));
        assert_eq!(byte_token_value("<0xff>"), Some(255));
        assert_eq!(byte_token_value("<0x+A>"), None);
        assert_eq!(byte_token_value("<0xA>"), None);
        assert_eq!(byte_token_value("<0x0A0>"), None);
        assert_eq!(byte_token_value("0x0A"), None);
    }
}
