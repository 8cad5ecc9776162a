//! Cutting special tokens out of raw text before BPE, the way llama.cpp's
//! `tokenizer_st_partition` does (which differs from Hugging Face's leftmost-longest match when
//! special texts overlap): special tokens are taken one at a time, longest text first, and each
//! cuts every non-overlapping occurrence, left to right, out of the fragments still raw.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// `specials` must come in matching order (longest text first); empty texts are skipped.
/// (The tokenizers all use [`partition_stripping`]; this is its no-stripping case.)
#[cfg(test)]
pub(crate) fn partition<'t, 's>(
    text: &'t str,
    specials: impl IntoIterator<Item = (u32, &'s str)>,
) -> Vec<Fragment<'t>> {
    partition_stripping(
        text,
        specials
            .into_iter()
            .map(|(id, needle)| (id, needle, Strip::default())),
    )
}

/// llama.cpp's per-token `LSTRIP`/`RSTRIP` attributes: ASCII whitespace (C `isspace`) just
/// before/after each occurrence of the token is dropped. llama.cpp sets them from the model's
/// name, not from the vocabulary (Phi-3's special tokens strip on the right).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Strip {
    pub left: bool,
    pub right: bool,
}

/// [`partition`] with whitespace stripping around tokens that ask for it. As in llama.cpp, the
/// text after an occurrence is stripped before the next occurrence is looked for in it.
pub(crate) fn partition_stripping<'t, 's>(
    text: &'t str,
    specials: impl IntoIterator<Item = (u32, &'s str, Strip)>,
) -> Vec<Fragment<'t>> {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let mut fragments = Vec::new();
    if !text.is_empty() {
        fragments.push(Fragment::Text(text));
    }
    for (id, needle, strip) in specials {
        let occurs = |f: &Fragment| matches!(f, Fragment::Text(t) if t.contains(needle));
        if needle.is_empty() || !fragments.iter().any(occurs) {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(mut rest) = fragment else {
                next.push(fragment);
                continue;
            };
            while let Some(at) = rest.find(needle) {
                let mut left = &rest[..at];
                if strip.left {
                    left = left.trim_end_matches(is_space);
                }
                if !left.is_empty() {
                    next.push(Fragment::Text(left));
                }
                next.push(Fragment::Token(id));
                rest = &rest[at + needle.len()..];
                if strip.right {
                    rest = rest.trim_start_matches(is_space);
                }
            }
            if !rest.is_empty() {
                next.push(Fragment::Text(rest));
            }
        }
        fragments = next;
    }
    fragments
}

#[cfg(test)]
mod tests {
    use super::Fragment::{Text, Token};
    use super::*;

    #[test]
    fn cuts_every_occurrence_and_keeps_text_between() {
        let got = partition("<a>x<a><a>", [(7, "<a>")]);
        assert_eq!(got, vec![Token(7), Text("x"), Token(7), Token(7)]);
    }

    #[test]
    fn longer_special_is_cut_first_even_when_a_shorter_one_starts_earlier() {
        // llama.cpp takes "bcd" (longer) before "ab", so "ab" no longer matches; a leftmost
        // matcher would have produced [ab] "cd" instead.
        let got = partition("abcd", [(2, "bcd"), (1, "ab")]);
        assert_eq!(got, vec![Text("a"), Token(2)]);
    }

    #[test]
    fn stripping_drops_ascii_whitespace_beside_the_token_only() {
        let both = Strip {
            left: true,
            right: true,
        };
        let got = partition_stripping("a \t<x>\n b<x>  \u{a0}", [(7, "<x>", both)]);
        assert_eq!(
            got,
            vec![Text("a"), Token(7), Text("b"), Token(7), Text("\u{a0}")]
        );
        // Text that is only whitespace vanishes; the next occurrence is found after it.
        let right = Strip {
            left: false,
            right: true,
        };
        let got = partition_stripping("<x> <x> ", [(7, "<x>", right)]);
        assert_eq!(got, vec![Token(7), Token(7)]);
    }

    #[test]
    fn empty_text_has_no_fragments() {
        assert!(partition("", [(1, "x")]).is_empty());
        assert_eq!(partition("plain", [(1, "")]), vec![Text("plain")]);
    }
}
