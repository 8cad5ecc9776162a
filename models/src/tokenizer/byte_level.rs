//! GPT-2's byte-level alphabet: every byte is spelled by one printable character, so a
//! byte-level BPE vocabulary stores arbitrary bytes as ordinary strings. Decoding a token maps
//! its characters back to bytes.

use std::sync::OnceLock;

/// The character that spells byte `b` (GPT-2's `bytes_to_unicode`): printable Latin-1 bytes
/// stand for themselves, the other 68 bytes take U+0100.. in byte order.
pub fn byte_to_char(b: u8) -> char {
    table().0[b as usize]
}

/// The byte a character spells, or None for a character outside the alphabet.
pub fn char_to_byte(c: char) -> Option<u8> {
    let (_, reverse) = table();
    reverse.get(c as usize).copied().flatten()
}

/// Appends the bytes a byte-level token text spells. A character outside the alphabet (which
/// a well-formed vocabulary never holds) is kept as its own UTF-8 so nothing is silently lost.
pub fn decode_into(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

fn is_self_spelled(b: u8) -> bool {
    matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff)
}

type Tables = ([char; 256], Vec<Option<u8>>);

fn table() -> &'static Tables {
    static TABLE: OnceLock<Tables> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut forward = ['\0'; 256];
        let mut next_extra = 0u32;
        for b in 0..=255u8 {
            forward[b as usize] = if is_self_spelled(b) {
                b as char
            } else {
                next_extra += 1;
                char::from_u32(255 + next_extra).expect("U+0100..U+0143 are valid chars")
            };
        }
        let max = forward.iter().map(|&c| c as usize).max().unwrap_or(0);
        let mut reverse = vec![None; max + 1];
        for (b, &c) in forward.iter().enumerate() {
            reverse[c as usize] = Some(b as u8);
        }
        (forward, reverse)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_a_bijection_matching_gpt2() {
        // Closed-form facts of GPT-2's table: space is U+0120 'Ġ', newline U+010A 'Ċ',
        // byte 0 is U+0100, byte 0xAD (soft hyphen) is the last extra, U+0143.
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(0), '\u{100}');
        assert_eq!(byte_to_char(0xad), '\u{143}');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('日'), None);
    }
}
