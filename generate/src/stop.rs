//! When generation ends: an end-of-generation token as the vocabulary says (EOS, end of turn,
//! …, as llama.cpp collects them), or a stop string in the generated text.

use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::{Tokenizer, END_OF_GENERATION};
use std::collections::BTreeSet;

/// The tokens that end generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndOfGeneration {
    ids: BTreeSet<u32>,
}

/// Metadata keys naming end-of-generation tokens.
const EOG_KEYS: &[&str] = &[
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
];

impl EndOfGeneration {
    /// From the file's metadata and the vocabulary's texts, as llama.cpp 0c1e57098's
    /// vocabulary loader collects its end-of-generation set (its `print_info: EOG token` lines:
    /// tests/generate_stop.rs).
    pub fn from_vocabulary(file: &GgufFile, tokenizer: &Tokenizer) -> EndOfGeneration {
        let n = tokenizer.vocab_size() as u64;
        let mut ids: BTreeSet<u32> = EOG_KEYS
            .iter()
            .filter_map(|k| file.get(k).and_then(|v| v.as_u64()))
            .filter(|&id| id < n)
            .map(|id| id as u32)
            .collect();
        ids.extend(tokenizer.eos_id());
        ids.extend(
            END_OF_GENERATION
                .iter()
                .filter_map(|t| tokenizer.token_id(t)),
        );
        EndOfGeneration { ids }
    }

    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> EndOfGeneration {
        EndOfGeneration {
            ids: ids.into_iter().collect(),
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        self.ids.contains(&id)
    }

    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids.iter().copied()
    }
}

/// Stop strings over streamed text: text that could be the start of a stop string is held
/// back until it is clear whether it is one, so a stop string never reaches the output.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    strings: Vec<String>,
    /// Text received but not yet released.
    held: String,
}

/// What [`StopStrings::push`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopCheck {
    /// Text safe to emit now.
    pub emit: String,
    /// The stop string found (the text from it on is dropped).
    pub stopped: Option<String>,
}

impl StopStrings {
    /// Empty strings are ignored (they would stop before the first character).
    pub fn new(strings: impl IntoIterator<Item = String>) -> StopStrings {
        StopStrings {
            strings: strings.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopCheck {
        self.held.push_str(text);
        // The earliest stop string wins.
        let found = self
            .strings
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at);
        if let Some((at, s)) = found {
            let emit = self.held[..at].to_string();
            let s = s.clone();
            self.held.clear();
            return StopCheck {
                emit,
                stopped: Some(s),
            };
        }
        // Hold the longest tail that begins some stop string.
        let keep = self
            .strings
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopCheck {
            emit,
            stopped: None,
        }
    }

    /// Generation ended without a stop string: the held text is output after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Bytes of the longest suffix of `text` that is a proper prefix of `pattern`, on character
/// boundaries.
fn longest_suffix_prefix(text: &str, pattern: &str) -> usize {
    let max = text.len().min(pattern.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && pattern.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut s = StopStrings::new(stops.iter().map(|s| s.to_string()));
        let mut out = String::new();
        for p in pieces {
            let c = s.push(p);
            out += &c.emit;
            if c.stopped.is_some() {
                return (out, c.stopped);
            }
        }
        out += &s.finish();
        (out, None)
    }

    #[test]
    fn a_stop_string_split_over_pieces_is_caught_and_not_emitted() {
        let (out, stop) = feed(&["\n\n"], &["Hello", " world", "\n", "\nmore"]);
        assert_eq!(out, "Hello world");
        assert_eq!(stop.as_deref(), Some("\n\n"));
        let (out, stop) = feed(&["STOP"], &["aS", "T", "OPb"]);
        assert_eq!((out.as_str(), stop.as_deref()), ("a", Some("STOP")));
    }

    #[test]
    fn a_false_start_is_released() {
        let mut s = StopStrings::new(["</end>".to_string()]);
        let c = s.push("a </e");
        assert_eq!(c.emit, "a ");
        let c = s.push("x");
        assert_eq!((c.emit.as_str(), c.stopped), ("</ex", None));
        let (out, stop) = feed(&["</end>"], &["a </e", "n"]);
        assert_eq!((out.as_str(), stop), ("a </en", None));
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let (out, stop) = feed(&["cd", "b"], &["abcd"]);
        assert_eq!((out.as_str(), stop.as_deref()), ("a", Some("b")));
    }

    #[test]
    fn held_text_respects_character_boundaries() {
        // "é" is two bytes: the held tail is whole characters, never half of "é".
        let (out, stop) = feed(&["éx"], &["aé", "y"]);
        assert_eq!((out.as_str(), stop), ("aéy", None));
        let (out, stop) = feed(&["éx"], &["aé", "x"]);
        assert_eq!((out.as_str(), stop.as_deref()), ("a", Some("éx")));
    }

    #[test]
    fn no_stop_strings_emit_everything_at_once() {
        let mut s = StopStrings::new(["".to_string()]);
        assert_eq!(s.push("abc").emit, "abc");
    }

    #[test]
    fn end_of_generation_ids() {
        let e = EndOfGeneration::from_ids([1, 106]);
        assert!(e.contains(106) && e.contains(1) && !e.contains(2));
    }
}
