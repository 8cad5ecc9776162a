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
pub(crate) fn partition<'t, 's>(
    text: &'t str,
    specials: impl IntoIterator<Item = (u32, &'s str)>,
) -> Vec<Fragment<'t>> {
    let mut fragments = Vec::new();
    if !text.is_empty() {
        fragments.push(Fragment::Text(text));
    }
    for (id, needle) in specials {
        let occurs = |f: &Fragment| matches!(f, Fragment::Text(t) if t.contains(needle));
        if needle.is_empty() || !fragments.iter().any(occurs) {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            let Fragment::Text(t) = fragment else {
                next.push(fragment);
                continue;
            };
            let mut rest = 0;
            for (at, _) in t.match_indices(needle) {
                if at > rest {
                    next.push(Fragment::Text(&t[rest..at]));
                }
                next.push(Fragment::Token(id));
                rest = at + needle.len();
            }
            if rest < t.len() {
                next.push(Fragment::Text(&t[rest..]));
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
    fn empty_text_has_no_fragments() {
        assert!(partition("", [(1, "x")]).is_empty());
        assert_eq!(partition("plain", [(1, "")]), vec![Text("plain")]);
    }
}
