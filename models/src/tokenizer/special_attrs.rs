//! Which special tokens llama.cpp cuts out of raw text, in which order, and with which
//! whitespace stripping (`LSTRIP`/`RSTRIP`). llama.cpp sets the stripping from names, not from
//! the vocabulary (`llama_vocab::impl::load`, "set attributes by model/tokenizer/architecture
//! name"), the same way for every tokenizer family:
//! - `tokenizer.ggml.pre` containing jina-v2-de, jina-v2-es or jina-v2-code, or an architecture
//!   containing nomic-bert-moe or jina-bert-v3: `<mask>` strips whitespace on its left;
//! - otherwise a `general.name` containing phi-3 or phi3: every special token strips on its
//!   right except `<unk>`, `<s>` and `<|endoftext|>`;
//! - otherwise a `general.name` containing modern-bert: `[MASK]` strips on its left.

use super::special_split::Strip;
use super::TokenKind;
use crate::gguf::{GgufFile, MetaValue};

/// Control, user-defined and unknown tokens in llama.cpp's matching order (longest text first;
/// ties by id, where llama.cpp's unstable sort leaves the order unspecified), each with the
/// whitespace it strips.
pub(crate) fn special_tokens(
    file: &GgufFile,
    tokens: &[String],
    kinds: &[TokenKind],
) -> Vec<(u32, Strip)> {
    let mut specials: Vec<u32> = (0..tokens.len() as u32)
        .filter(|&id| kinds[id as usize].is_matched_in_text())
        .collect();
    specials.sort_by_key(|&id| (std::cmp::Reverse(tokens[id as usize].len()), id));
    let rule = NameRule::of(file);
    specials
        .into_iter()
        .map(|id| (id, rule.strip(tokens[id as usize].as_str())))
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NameRule {
    None,
    MaskLeft,
    Phi3,
    ModernBertMask,
}

impl NameRule {
    fn of(file: &GgufFile) -> NameRule {
        let text = |key: &str| {
            file.get(key)
                .and_then(MetaValue::as_str)
                .unwrap_or_default()
        };
        let any = |s: &str, parts: &[&str]| parts.iter().any(|p| s.contains(p));
        let pre = text("tokenizer.ggml.pre");
        let arch = text("general.architecture");
        let name = text("general.name").to_ascii_lowercase();
        if any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
            || any(arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            NameRule::MaskLeft
        } else if any(&name, &["phi-3", "phi3"]) {
            NameRule::Phi3
        } else if name.contains("modern-bert") {
            NameRule::ModernBertMask
        } else {
            NameRule::None
        }
    }

    fn strip(self, text: &str) -> Strip {
        match self {
            NameRule::MaskLeft if text == "<mask>" => Strip {
                left: true,
                right: false,
            },
            NameRule::ModernBertMask if text == "[MASK]" => Strip {
                left: true,
                right: false,
            },
            NameRule::Phi3 if !matches!(text, "<unk>" | "<s>" | "<|endoftext|>") => Strip {
                left: false,
                right: true,
            },
            _ => Strip::default(),
        }
    }
}
