//! Incremental detokenization: token bytes in, text out, never half a UTF-8 character.
//! Byte-level BPE and SentencePiece byte tokens split a character across tokens (an emoji is
//! often three or four tokens), so a token's bytes are held until the character is complete.

use rocky_models::tokenizer::{TokenKind, Tokenizer};

/// What a generated token prints as.
pub trait Vocabulary {
    /// The bytes a generated token adds to the output (possibly part of a UTF-8 character).
    fn piece_bytes(&self, id: u32) -> Vec<u8>;
}

impl Vocabulary for Tokenizer {
    /// Control tokens print nothing, as in llama.cpp's output by default (`--special` off);
    /// every other token its bytes.
    fn piece_bytes(&self, id: u32) -> Vec<u8> {
        match self.token_kind(id) {
            Some(TokenKind::Control) => Vec::new(),
            _ => self.token_bytes(id).unwrap_or_default(),
        }
    }
}

/// Bytes in, complete UTF-8 text out.
#[derive(Default, Debug)]
pub struct Utf8Stream {
    /// The start of a character whose remaining bytes have not arrived yet (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` and returns the text that is now complete. Bytes that can never be UTF-8
    /// (a stray continuation byte, an invalid lead byte) become U+FFFD at once rather than
    /// blocking the stream.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                    match e.error_len() {
                        // Invalid: replace and go on after it.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &tail[n..];
                        }
                        // Incomplete at the end: keep it for the next token.
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Bytes held back (the start of an unfinished character).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: an unfinished character becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_over_tokens_comes_out_whole() {
        // "é😀" = c3 a9 | f0 9f 98 80, fed a byte at a time.
        let bytes = "é😀!".as_bytes();
        let mut s = Utf8Stream::new();
        let outs: Vec<String> = bytes.iter().map(|b| s.push(&[*b])).collect();
        assert_eq!(outs, vec!["", "é", "", "", "", "😀", "!"]);
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn every_split_of_a_text_gives_the_text_back() {
        let text = "Grüße, 東京 🚀👍🏽 ∑ ok";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut s = Utf8Stream::new();
            let mut out = s.push(&bytes[..cut]);
            // Nothing but whole characters out at each step.
            assert!(text.starts_with(&out));
            out += &s.push(&bytes[cut..]);
            out += &s.finish();
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn an_unfinished_character_at_the_end_is_one_replacement() {
        // llama.cpp's p3 continuation ends inside "⌧" (e2 8c a7): e2 8c.
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b" \xe2\x8c\xa6 \xe2\x8c"), " \u{2326} ");
        assert_eq!(s.pending(), b"\xe2\x8c");
        assert_eq!(s.finish(), "\u{fffd}");
    }

    #[test]
    fn invalid_bytes_do_not_block_the_stream() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"a\x80b"), "a\u{fffd}b");
        assert_eq!(s.push(b"\xff"), "\u{fffd}");
        // A lead byte followed by a non-continuation: the lead is invalid, the rest passes.
        assert_eq!(s.push(b"\xe2"), "");
        assert_eq!(s.push(b"x"), "\u{fffd}x");
    }
}
