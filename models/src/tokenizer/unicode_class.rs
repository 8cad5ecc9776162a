//! Character classes exactly as llama.cpp's `unicode.cpp` sees them (its tables, generated into
//! `unicode_tables.rs`): the WordPiece pre-processing splits and normalizes by these, and Rust's
//! own Unicode tables follow another Unicode version, so they could class a rare character
//! differently.

#[rustfmt::skip]
#[path = "unicode_tables.rs"]
mod tables;

/// llama.cpp's `unicode_cpt_flags` category bits for one code point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CharClass(u16);

impl CharClass {
    const ACCENT_MARK: u16 = 0x10;
    const PUNCTUATION: u16 = 0x20;
    const SYMBOL: u16 = 0x40;
    const CONTROL: u16 = 0x80;

    pub fn of(c: char) -> CharClass {
        let cp = c as u32;
        let at = tables::FLAG_RANGES.partition_point(|&(first, _)| first <= cp);
        // The table starts at code point 0, so at >= 1.
        CharClass(tables::FLAG_RANGES[at.saturating_sub(1)].1)
    }

    pub fn is_accent_mark(self) -> bool {
        self.0 & Self::ACCENT_MARK != 0
    }
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
}

/// llama.cpp's whitespace set (Unicode White_Space).
pub(crate) fn is_whitespace(c: char) -> bool {
    tables::WHITESPACE.binary_search(&(c as u32)).is_ok()
}

/// llama.cpp's `unicode_tolower`: one code point to one code point.
pub(crate) fn to_lower(c: char) -> char {
    let cp = c as u32;
    match tables::LOWERCASE.binary_search_by_key(&cp, |&(from, _)| from) {
        Ok(i) => char::from_u32(tables::LOWERCASE[i].1).unwrap_or(c),
        Err(_) => c,
    }
}

/// llama.cpp's `unicode_cpts_normalize_nfd`: each code point replaced by the first character of
/// its canonical decomposition (the base letter of an accented one); the combining marks are
/// not added, so with accent stripping the result is the same as NFD then dropping marks.
pub(crate) fn nfd_base(c: char) -> char {
    let cp = c as u32;
    let at = tables::NFD_RANGES.partition_point(|&(first, _, _)| first <= cp);
    match at.checked_sub(1).map(|i| tables::NFD_RANGES[i]) {
        Some((first, last, base)) if first <= cp && cp <= last => char::from_u32(base).unwrap_or(c),
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_known_characters() {
        // Letters and digits have none of the classes WordPiece looks at.
        assert_eq!(CharClass::of('a').0, 0x04);
        assert_eq!(CharClass::of('Ж').0, 0x04);
        assert_eq!(CharClass::of('٣').0, 0x02);
        assert!(CharClass::of('!').is_punctuation());
        assert!(CharClass::of('$').is_symbol());
        assert!(CharClass::of('\u{301}').is_accent_mark());
        assert!(CharClass::of('\u{7}').is_control());
        assert!(is_whitespace('\u{3000}') && is_whitespace('\t') && !is_whitespace('x'));
        assert_eq!(to_lower('Ä'), 'ä');
        assert_eq!(to_lower('x'), 'x');
        assert_eq!(nfd_base('Ä'), 'A');
        assert_eq!(nfd_base('é'), 'e');
        assert_eq!(nfd_base('x'), 'x');
    }
}
