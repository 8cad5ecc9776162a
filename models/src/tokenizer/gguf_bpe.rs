//! The tokenizer of a GGUF byte-level BPE vocabulary, tokenizing as llama.cpp does: special
//! tokens are cut out of the text first (`special_split`), every remaining fragment goes through
//! a Hugging Face `tokenizers` pipeline holding only the pre-tokenizer and the BPE model (no
//! normalizer, no added tokens: those steps are llama.cpp's, done here).

use super::gguf_vocab::GgufVocab;
use super::pre_tokenizer::{PreTokenizer, SplitRule};
use super::special_attrs::special_tokens;
use super::special_split::{partition_stripping, Fragment, Strip};
use super::{byte_level, TokenKind, TokenizerError};
use crate::gguf::GgufFile;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::AddedToken;

pub(crate) struct GgufBpe {
    bpe: tokenizers::Tokenizer,
    tokens: Vec<String>,
    kinds: Vec<TokenKind>,
    /// Control, user-defined and unknown tokens in llama.cpp's matching order, with the
    /// whitespace each strips (`special_attrs`).
    specials: Vec<(u32, Strip)>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    pre: PreTokenizer,
    warnings: Vec<String>,
}

impl GgufBpe {
    pub fn from_gguf(file: &GgufFile) -> Result<GgufBpe, TokenizerError> {
        let vocab = GgufVocab::read(file)?;
        let build_err = |detail: String| TokenizerError::Build {
            path: file.path().to_path_buf(),
            detail,
        };
        let ids: Vocab = vocab
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let byte_level = vocab.pre.rule.byte_level();
        let model = BPE::builder()
            .vocab_and_merges(ids, vocab.merges)
            .ignore_merges(vocab.pre.ignore_merges)
            // Raw UTF-8 BPE spells a character without a token by its bytes' <0xXX> tokens.
            .byte_fallback(!byte_level)
            .build()
            .map_err(|e| build_err(e.to_string()))?;
        let mut bpe = tokenizers::Tokenizer::new(model);
        if byte_level {
            let pre_tokenizer = vocab.pre.hf_pre_tokenizer().map_err(build_err)?;
            bpe.with_pre_tokenizer(Some(pre_tokenizer));
        }
        // Raw UTF-8 BPE is cut into newline runs here (`raw_words`): each call is one word.

        let specials = special_tokens(file, &vocab.tokens, &vocab.kinds);

        Ok(GgufBpe {
            bpe,
            tokens: vocab.tokens,
            kinds: vocab.kinds,
            specials,
            bos: vocab.bos,
            eos: vocab.eos,
            add_bos: vocab.add_bos,
            add_eos: vocab.add_eos,
            pre: vocab.pre,
            warnings: vocab.warnings,
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
        // With parse_special off llama.cpp still cuts user-defined tokens out first (as
        // Hugging Face does with non-special added tokens); control and unknown ones stay text.
        let specials = self
            .specials
            .iter()
            .filter(|(id, _)| parse_special || self.kinds[*id as usize] == TokenKind::UserDefined)
            .map(|&(id, strip)| (id, self.tokens[id as usize].as_str(), strip));
        for fragment in partition_stripping(text, specials) {
            match fragment {
                Fragment::Token(id) => ids.push(id),
                Fragment::Text(t) if self.pre.rule.byte_level() => self.bpe_into(t, &mut ids)?,
                Fragment::Text(t) => {
                    let escaped = t.replace(' ', "\u{2581}");
                    for word in raw_words(&escaped) {
                        // llama.cpp's Gemma 4 rule: a run of newlines that is a token is that
                        // token, whatever the merges would make of it.
                        let whole = (self.pre.rule == SplitRule::Gemma4 && word.starts_with('\n'))
                            .then(|| self.bpe.token_to_id(word))
                            .flatten();
                        match whole {
                            Some(id) => ids.push(id),
                            None => self.bpe_into(word, &mut ids)?,
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }

    fn bpe_into(&self, text: &str, ids: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let encoding = self
            .bpe
            .encode(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        ids.extend_from_slice(encoding.get_ids());
        Ok(())
    }

    /// The bytes token `id` stands for, as llama.cpp's `token_to_piece(special = true)`:
    /// ordinary tokens through the byte-level alphabet, control and user-defined tokens as
    /// their literal text, byte tokens as their byte, unused/undefined tokens as nothing.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) -> bool {
        let Some(text) = self.tokens.get(id as usize) else {
            return false;
        };
        match self.kinds[id as usize] {
            TokenKind::Normal if self.pre.rule.byte_level() => byte_level::decode_into(text, out),
            TokenKind::Normal => out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes()),
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                out.extend_from_slice(text.as_bytes())
            }
            // llama.cpp reads a BPE byte token as <0xXX>; any other spelling shows nothing.
            TokenKind::Byte => out.extend(super::spm::byte_token_value(text)),
            TokenKind::Unused | TokenKind::Undefined => {}
        }
        true
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.bpe.token_to_id(text)
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

    pub fn pre(&self) -> &PreTokenizer {
        &self.pre
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The same tokenizer as a Hugging Face tokenizer.json: control/unknown tokens become
    /// special added tokens, user-defined ones non-special added tokens.
    pub fn to_tokenizer_json(&self) -> Result<String, TokenizerError> {
        if !self.pre.rule.byte_level() {
            return Err(TokenizerError::Export(format!(
                "exporting a raw UTF-8 BPE vocabulary (pre-tokenizer \"{}\") is not implemented",
                self.pre.name
            )));
        }
        let mut hf = self.bpe.clone();
        let added: Vec<AddedToken> = self
            .specials
            .iter()
            .map(|&(id, strip)| {
                let special = self.kinds[id as usize] != TokenKind::UserDefined;
                AddedToken::from(self.tokens[id as usize].clone(), special)
                    .normalized(false)
                    .lstrip(strip.left)
                    .rstrip(strip.right)
            })
            .collect();
        hf.add_tokens(&added);
        hf.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
        hf.to_string(true)
            .map_err(|e| TokenizerError::Export(e.to_string()))
    }
}

/// Runs of newlines and runs of other characters (llama.cpp's `[^\n]+|[\n]+` splitter).
fn raw_words(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let newline = first == '\n';
        let end = rest
            .find(|c: char| (c == '\n') != newline)
            .unwrap_or(rest.len());
        let (word, tail) = rest.split_at(end);
        rest = tail;
        Some(word)
    })
}

#[cfg(test)]
mod tests {
    use super::raw_words;

    #[test]
    fn raw_words_are_newline_runs_and_the_rest() {
        let words: Vec<&str> = raw_words("a b\n\nc\n").collect();
        assert_eq!(words, vec!["a b", "\n\n", "c", "\n"]);
        assert_eq!(raw_words("").count(), 0);
    }
}
