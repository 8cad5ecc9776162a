//! The tokenizer of a GGUF Unigram vocabulary (`tokenizer.ggml.model = "t5"`: T5, XLM-RoBERTa
//! embedders such as nomic-bert-moe), tokenizing as llama.cpp's `llm_tokenizer_ugm_session`:
//!
//! 1. special tokens are cut out of the raw text first (`special_split`);
//! 2. each fragment is normalized: user-defined tokens pass through, otherwise the longest
//!    prefix the SentencePiece `precompiled_charsmap` knows is replaced by its string (NFKC and
//!    the like, compiled into a XOR-compressed double array); spaces become U+2581, runs of them
//!    merged into one when `remove_extra_whitespaces`, one put in front when `add_space_prefix`;
//! 3. Viterbi over the normalized bytes: the tokenization with the highest sum of token scores
//!    (user-defined tokens score 0), a code point no token covers costing the lowest score minus
//!    10 as `<unk>`; consecutive unknowns are one `<unk>`.

use super::gguf_vocab::{
    force_control_looking_tokens, index_tokens, metadata_error, read_flag, read_kinds,
    read_token_id, read_tokens, ErrFn, KEY_ADD_BOS, KEY_ADD_EOS, KEY_BOS, KEY_EOS,
};
use super::special_attrs::special_tokens;
use super::special_split::{partition_stripping, Fragment, Strip};
use super::spm::{byte_token_value, decode_pieces, read_scores};
use super::{TokenKind, TokenizerError};
use crate::gguf::{GgufFile, MetaValue};
use std::collections::HashMap;

const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_CHARSMAP: &str = "tokenizer.ggml.precompiled_charsmap";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_REMOVE_EXTRA_WS: &str = "tokenizer.ggml.remove_extra_whitespaces";

const SPACE: &str = "\u{2581}";

pub(crate) struct GgufUgm {
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    scores: Vec<f32>,
    /// Normal, user-defined and unused tokens by their bytes: the pieces Viterbi may use.
    pieces: HashMap<Vec<u8>, u32>,
    max_piece_len: usize,
    /// User-defined token texts, which normalization leaves alone.
    user_defined: HashMap<Vec<u8>, u32>,
    max_user_defined_len: usize,
    charsmap: Option<Charsmap>,
    unknown_score: f64,
    specials: Vec<(u32, Strip)>,
    ids: HashMap<String, u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: u32,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
}

impl GgufUgm {
    pub fn from_gguf(file: &GgufFile) -> Result<GgufUgm, TokenizerError> {
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

        // llama.cpp's Unigram defaults: no BOS, </s> = 1, <unk> = 2; EOS added, BOS not.
        let default_id = |id: u32| ((id as usize) < n).then_some(id);
        let bos = read_token_id(file, KEY_BOS, n, &err)?;
        let eos = read_token_id(file, KEY_EOS, n, &err)?.or(default_id(1));
        let unk = read_token_id(file, KEY_UNK, n, &err)?
            .or(default_id(2))
            .ok_or_else(|| err(KEY_UNK, "is missing and the vocabulary is too small for the default <unk> id 2: a Unigram vocabulary needs an unknown token".into()))?;
        let add_bos = read_flag(file, KEY_ADD_BOS, false, &err)?;
        let add_eos = read_flag(file, KEY_ADD_EOS, true, &err)?;
        if add_bos && bos.is_none() {
            return Err(err(
                KEY_BOS,
                format!("is missing but {KEY_ADD_BOS} asks for a BOS token"),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(err(
                KEY_EOS,
                format!("is missing but {KEY_ADD_EOS} asks for an EOS token"),
            ));
        }
        let add_space_prefix = read_flag(file, KEY_ADD_SPACE_PREFIX, false, &err)?;
        let remove_extra_whitespaces = read_flag(file, KEY_REMOVE_EXTRA_WS, false, &err)?;
        let charsmap = read_charsmap(file, &err)?;

        let mut pieces = HashMap::new();
        let mut user_defined = HashMap::new();
        let mut min_score = f32::MAX;
        for (id, (text, kind)) in tokens.iter().zip(&kinds).enumerate() {
            let id = id as u32;
            if *kind == TokenKind::Normal {
                min_score = min_score.min(scores[id as usize]);
            }
            if matches!(
                kind,
                TokenKind::Normal | TokenKind::UserDefined | TokenKind::Unused
            ) {
                pieces.insert(text.as_bytes().to_vec(), id);
            }
            if *kind == TokenKind::UserDefined {
                user_defined.insert(text.as_bytes().to_vec(), id);
            }
        }
        let max_piece_len = pieces.keys().map(Vec::len).max().unwrap_or(0);
        let max_user_defined_len = user_defined.keys().map(Vec::len).max().unwrap_or(0);
        let specials = special_tokens(file, &tokens, &kinds);
        Ok(GgufUgm {
            tokens,
            kinds,
            scores,
            pieces,
            max_piece_len,
            user_defined,
            max_user_defined_len,
            charsmap,
            unknown_score: min_score as f64 - 10.0,
            specials,
            ids,
            bos,
            eos,
            unk,
            add_bos,
            add_eos,
            add_space_prefix,
            remove_extra_whitespaces,
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
        let specials = self
            .specials
            .iter()
            .filter(|(id, _)| parse_special || self.kinds[*id as usize] == TokenKind::UserDefined)
            .map(|&(id, strip)| (id, self.tokens[id as usize].as_str(), strip));
        for fragment in partition_stripping(text, specials) {
            match fragment {
                Fragment::Token(id) => ids.push(id),
                Fragment::Text(t) => self.viterbi(&self.normalize(t.as_bytes()), &mut ids),
            }
        }
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    /// llama.cpp's `normalize`: the charsmap's replacements, spaces escaped and merged.
    fn normalize(&self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() * 3);
        let mut space_prepended = false;
        let mut in_word = false;
        let mut at = 0;
        while at < input.len() {
            let (piece, consumed) = self.normalize_prefix(input, at);
            for &c in piece.iter() {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (self.add_space_prefix && !space_prepended)
                            || self.remove_extra_whitespaces
                        {
                            out.extend_from_slice(SPACE.as_bytes());
                            space_prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !self.remove_extra_whitespaces {
                        out.extend_from_slice(SPACE.as_bytes());
                    }
                }
            }
            at += consumed;
        }
        out
    }

    /// The normalized form of the longest known prefix of `input[at..]` and how many input
    /// bytes it stands for.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], at: usize) -> (&'a [u8], usize) {
        let rest = &input[at..];
        let longest_user = (1..=self.max_user_defined_len.min(rest.len()))
            .rev()
            .find(|&len| self.user_defined.contains_key(&rest[..len]));
        if let Some(len) = longest_user {
            return (&rest[..len], len);
        }
        if let Some((replacement, consumed)) = self.charsmap.as_ref().and_then(|c| c.longest(rest))
        {
            return (replacement, consumed);
        }
        // Input is a Rust string, so a whole UTF-8 character is always there.
        let len = utf8_len(rest[0]).min(rest.len());
        (&rest[..len], len)
    }

    /// llama.cpp's Viterbi over the normalized bytes.
    fn viterbi(&self, text: &[u8], out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        #[derive(Clone, Copy)]
        struct Best {
            id: u32,
            from: usize,
            score: f64,
        }
        let n = text.len();
        let mut best = vec![
            Best {
                id: self.unk,
                from: 0,
                score: f64::MIN,
            };
            n + 1
        ];
        best[0].score = 0.0;
        let mut at = 0;
        while at < n {
            let char_len = utf8_len(text[at]).min(n - at);
            let here = best[at];
            let mut whole_char_token = false;
            for len in 1..=self.max_piece_len.min(n - at) {
                let Some(&id) = self.pieces.get(&text[at..at + len]) else {
                    continue;
                };
                whole_char_token |= len == char_len;
                // User-defined tokens score 0 so that they win (normal scores are log
                // probabilities); sums in f64 as llama.cpp (and SentencePiece) do.
                let score = if self.kinds[id as usize] == TokenKind::UserDefined {
                    0.0
                } else {
                    self.scores[id as usize] as f64
                };
                let challenger = here.score + score;
                if challenger > best[at + len].score {
                    best[at + len] = Best {
                        id,
                        from: at,
                        score: challenger,
                    };
                }
            }
            if !whole_char_token {
                let challenger = here.score + self.unknown_score;
                if challenger > best[at + char_len].score {
                    best[at + char_len] = Best {
                        id: self.unk,
                        from: at,
                        score: challenger,
                    };
                }
            }
            at += char_len;
        }
        // Back from the end; consecutive unknowns become one.
        let start = out.len();
        let mut at = n;
        let mut previous_unknown = false;
        loop {
            let b = best[at];
            let unknown = b.id == self.unk;
            if !(previous_unknown && unknown) {
                out.push(b.id);
            }
            if b.from == 0 {
                break;
            }
            previous_unknown = unknown;
            at = b.from;
        }
        out[start..].reverse();
    }

    /// As llama.cpp's `token_to_piece(special = true)`: ordinary tokens with "▁" turned back
    /// into spaces, control/user-defined/unknown tokens as their text, byte tokens as their
    /// byte, unused/undefined tokens as nothing.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) -> bool {
        let Some(text) = self.tokens.get(id as usize) else {
            return false;
        };
        match self.kinds[id as usize] {
            TokenKind::Normal => out.extend_from_slice(text.replace(SPACE, " ").as_bytes()),
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                out.extend_from_slice(text.as_bytes())
            }
            TokenKind::Byte => out.extend(byte_token_value(text)),
            TokenKind::Unused | TokenKind::Undefined => {}
        }
        true
    }

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

    pub fn has_charsmap(&self) -> bool {
        self.charsmap.is_some()
    }
}

fn utf8_len(first: u8) -> usize {
    match first >> 4 {
        0xc | 0xd => 2,
        0xe => 3,
        0xf => 4,
        _ => 1,
    }
}

/// SentencePiece's precompiled normalization map: a XOR-compressed compact double array (XCDA,
/// Kanda 2018) over the input bytes whose leaves index NUL-terminated replacement strings.
struct Charsmap {
    xcda: Vec<u32>,
    replacements: Vec<u8>,
}

fn read_charsmap(file: &GgufFile, err: &ErrFn) -> Result<Option<Charsmap>, TokenizerError> {
    let Some(value) = file.get(KEY_CHARSMAP) else {
        return Ok(None);
    };
    let bytes: Option<Vec<u8>> = value.as_array().and_then(|list| {
        list.iter()
            .map(|v| match v {
                MetaValue::U8(b) => Some(*b),
                MetaValue::I8(b) => Some(*b as u8),
                _ => None,
            })
            .collect()
    });
    let bytes = bytes.ok_or_else(|| err(KEY_CHARSMAP, "is not an array of bytes".into()))?;
    if bytes.is_empty() {
        return Ok(None);
    }
    let bad = |detail: &str| err(KEY_CHARSMAP, format!("{detail}: convert the model again"));
    let blob = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| bad("is shorter than its 4-byte header"))?;
    if blob % 4 != 0 || 4 + blob >= bytes.len() {
        return Err(bad("has a double-array size that does not fit the array"));
    }
    let xcda = bytes[4..4 + blob]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(Some(Charsmap {
        xcda,
        replacements: bytes[4 + blob..].to_vec(),
    }))
}

impl Charsmap {
    fn node(&self, index: usize) -> Option<u32> {
        self.xcda.get(index).copied()
    }

    fn base(node: u32) -> u32 {
        (node >> 10) << ((node & (1 << 9)) >> 6)
    }

    fn lcheck(node: u32) -> u32 {
        node & ((1 << 31) | 0xff)
    }

    fn leaf(node: u32) -> bool {
        (node >> 8) & 1 == 1
    }

    fn value(node: u32) -> u32 {
        node & ((1 << 31) - 1)
    }

    /// The replacement of the longest prefix of `input` the map knows, with that prefix's
    /// length; None when none is known, or when the map is damaged (an index outside it, an
    /// unterminated string), where llama.cpp would throw: the text is then left as it is.
    fn longest(&self, input: &[u8]) -> Option<(&[u8], usize)> {
        let mut index = Self::base(self.node(0)?) as usize;
        let mut found = None;
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= c as usize;
            let node = self.node(index)?;
            if Self::lcheck(node) != c as u32 {
                break;
            }
            let is_leaf = Self::leaf(node);
            index ^= Self::base(node) as usize;
            if is_leaf {
                found = Some((Self::value(self.node(index)?) as usize, i + 1));
            }
        }
        let (offset, consumed) = found?;
        let tail = self.replacements.get(offset..)?;
        let end = tail.iter().position(|&b| b == 0)?;
        Some((&tail[..end], consumed))
    }
}
