//! How far a `json_object` reply is from being a whole JSON object: the shortest text that
//! closes what has been written (an open string, escape, number, literal, key or value, then
//! the open brackets), for the grammar `json_object` compiles to (llguidance's JSON with ", "
//! and ": " between items and no other whitespace; its strings escape only `nrbtf\"` and
//! control characters as `\u00XX`).
//!
//! Why: a grammar keeps every token valid but cannot make a model stop, and a random-weight
//! model (or a real one going on) writes a key or a string until `max_tokens` cuts it. With
//! the closing text's length known, the constraint lets through only tokens after which the
//! object can still be closed, one byte a token, before the draws run out (see
//! `constrain::Guide`): the reply then ends as a whole object with `finish_reason: "stop"`.
//!
//! The closing text of a prefix p is written so that writing its first bytes leaves the rest
//! as the closing text: closing(p + c[..k]) == c[k..]. One byte of text grows the closing
//! text by at most [`MAX_GROWTH`] bytes (a `,` in an object: `}` becomes ` "": 0}`).

/// The most one byte of text can lengthen the closing text.
pub const MAX_GROWTH: usize = 6;

/// The separators `json_object`'s grammar uses (its `x-guidance` options).
pub const ITEM_SEPARATOR: &str = ", ";
pub const KEY_SEPARATOR: &str = ": ";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Number {
    /// After `-`.
    Minus,
    /// A leading `0`, or more digits after the first: may end here.
    Int,
    /// After `.`.
    Dot,
    Frac,
    /// After `e` / `E`.
    E,
    /// After the exponent's sign.
    ESign,
    Exp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lex {
    /// Nothing written yet: the object's `{` comes next.
    Start,
    /// A value comes next (after `: `, or after `, ` in an array).
    Value,
    /// After `{`: a key or `}`.
    ObjectStart,
    /// After `[`: a value or `]`.
    ArrayStart,
    /// After `, ` in an object: a key.
    Key,
    /// Inside a string (a key's where `key`).
    Str {
        key: bool,
        escape: Escape,
        /// UTF-8 continuation bytes still owed by the character being written, and the lead
        /// byte while none of them has come (it limits the first one).
        owed: u8,
        lead: u8,
    },
    /// After a key's closing quote: `:` next.
    AfterKey,
    /// After the `:` of the key separator: ` ` next.
    AfterColon,
    /// After `,`: ` ` next.
    AfterComma,
    Number(Number),
    /// Inside `true` / `false` / `null`: the bytes still to come.
    Literal(&'static [u8]),
    /// After a whole value: `, ` or the container's closer.
    AfterValue,
    /// The object is whole.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Escape {
    None,
    /// After `\`.
    Backslash,
    /// After `\u` and this many hex digits (0-3); `seven`: the third was `7` (only `\u007F`
    /// escapes a character that is not below U+0020).
    Unicode {
        digits: u8,
        seven: bool,
    },
}

/// The open containers' closers, innermost last: a `Vec`, or a borrowed one with what a
/// token would pop and push (to try a token without copying the state).
pub trait Stack {
    fn push(&mut self, b: u8);
    fn pop(&mut self) -> Option<u8>;
    fn last(&self) -> Option<u8>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Stack for Vec<u8> {
    fn push(&mut self, b: u8) {
        Vec::push(self, b)
    }
    fn pop(&mut self) -> Option<u8> {
        Vec::pop(self)
    }
    fn last(&self) -> Option<u8> {
        self.as_slice().last().copied()
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// `base` less its last `popped`, then `pushed[..n]`; `overflow`: more was pushed than fits.
struct Overlay<'a> {
    base: &'a [u8],
    popped: usize,
    pushed: [u8; 32],
    n: usize,
    overflow: bool,
}

impl Stack for Overlay<'_> {
    fn push(&mut self, b: u8) {
        if self.n == self.pushed.len() {
            self.overflow = true;
        } else {
            self.pushed[self.n] = b;
            self.n += 1;
        }
    }
    fn pop(&mut self) -> Option<u8> {
        if self.n > 0 {
            self.n -= 1;
            Some(self.pushed[self.n])
        } else if self.popped < self.base.len() {
            self.popped += 1;
            Some(self.base[self.base.len() - self.popped])
        } else {
            None
        }
    }
    fn last(&self) -> Option<u8> {
        if self.n > 0 {
            Some(self.pushed[self.n - 1])
        } else {
            self.base[..self.base.len() - self.popped].last().copied()
        }
    }
    fn len(&self) -> usize {
        self.base.len() - self.popped + self.n
    }
}

/// The state of a `json_object` reply, byte by byte.
#[derive(Clone, Debug)]
pub struct Walk<S> {
    /// The closers of the open containers, innermost last (`}` or `]`).
    stack: S,
    lex: Lex,
    /// Set by a byte this tracker does not expect (text the grammar would not have let
    /// through): the closing text is unknown from then on.
    lost: bool,
}

/// A `json_object` reply's state, owning its containers' closers.
pub type JsonCloser = Walk<Vec<u8>>;

impl Default for JsonCloser {
    fn default() -> Self {
        JsonCloser::new()
    }
}

impl JsonCloser {
    pub fn new() -> JsonCloser {
        Walk {
            stack: Vec::new(),
            lex: Lex::Start,
            lost: false,
        }
    }

    /// Whether the text is inside a string, past any escape (a key's or a value's).
    pub fn in_plain_string(&self) -> bool {
        !self.lost
            && matches!(
                self.lex,
                Lex::Str {
                    escape: Escape::None,
                    ..
                }
            )
    }

    /// The UTF-8 continuation bytes the string's last character still owes (0 outside one).
    pub fn owed(&self) -> usize {
        match self.lex {
            Lex::Str { owed, .. } => owed as usize,
            _ => 0,
        }
    }

    /// The closing text: the shortest bytes after which the text is a whole JSON object.
    pub fn closing(&self) -> Option<Vec<u8>> {
        if self.lost {
            return None;
        }
        let mut out = self.tail();
        out.extend(self.stack.iter().rev());
        Some(out)
    }

    /// The closing length of the text followed by `bytes`, without changing this state
    /// (None: the tracker would be lost). Copies nothing unless `bytes` open more than 32
    /// containers.
    pub fn closing_len_after(&self, bytes: &[u8]) -> Option<usize> {
        if self.lost {
            return None;
        }
        let mut next = Walk {
            stack: Overlay {
                base: &self.stack,
                popped: 0,
                pushed: [0; 32],
                n: 0,
                overflow: false,
            },
            lex: self.lex,
            lost: false,
        };
        next.push(bytes);
        if next.stack.overflow {
            let mut copy = self.clone();
            copy.push(bytes);
            return copy.closing_len();
        }
        next.closing_len()
    }
}

impl<S: Stack> Walk<S> {
    /// Follows the bytes written.
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.lost {
                return;
            }
            if !self.byte(b) {
                self.lost = true;
            }
        }
    }

    /// The closing text's length in bytes; None where the text so far is not the start of a
    /// JSON object this tracker follows.
    pub fn closing_len(&self) -> Option<usize> {
        if self.lost {
            return None;
        }
        Some(self.tail_len() + self.stack.len())
    }

    /// The length of [`Walk::tail`].
    fn tail_len(&self) -> usize {
        match self.lex {
            Lex::Start => 2,
            Lex::Value => 1,
            Lex::ObjectStart | Lex::ArrayStart | Lex::AfterValue | Lex::Done => 0,
            Lex::Key => 5,
            Lex::Str {
                key, escape, owed, ..
            } => {
                let escape = match escape {
                    Escape::None => 0,
                    Escape::Backslash => 1,
                    Escape::Unicode { digits, .. } => 4 - digits as usize,
                };
                owed as usize + escape + 1 + if key { 3 } else { 0 }
            }
            Lex::AfterKey => 3,
            Lex::AfterColon => 2,
            Lex::AfterComma => {
                if self.stack.last() == Some(b'}') {
                    6
                } else {
                    2
                }
            }
            Lex::Number(Number::Int | Number::Frac | Number::Exp) => 0,
            Lex::Number(_) => 1,
            Lex::Literal(rest) => rest.len(),
        }
    }

    /// What closes the current lexeme and value, before the open containers' closers.
    fn tail(&self) -> Vec<u8> {
        let mut t = Vec::new();
        match self.lex {
            Lex::Start => t.extend_from_slice(b"{}"),
            Lex::Value => t.push(b'0'),
            Lex::ObjectStart | Lex::ArrayStart | Lex::AfterValue | Lex::Done => {}
            Lex::Key => t.extend_from_slice(b"\"\": 0"),
            Lex::Str {
                key,
                escape,
                owed,
                lead,
            } => {
                if owed > 0 {
                    t.push(first_continuation(lead));
                    t.resize(t.len() + owed as usize - 1, 0x80);
                }
                match escape {
                    Escape::None => {}
                    Escape::Backslash => t.push(b'n'),
                    Escape::Unicode { digits, seven } => {
                        if digits == 3 {
                            t.push(if seven { b'F' } else { b'0' });
                        } else {
                            t.resize(t.len() + 4 - digits as usize, b'0');
                        }
                    }
                }
                t.push(b'"');
                if key {
                    t.extend_from_slice(b": 0");
                }
            }
            Lex::AfterKey => t.extend_from_slice(b": 0"),
            Lex::AfterColon => t.extend_from_slice(b" 0"),
            Lex::AfterComma => {
                if self.stack.last() == Some(b'}') {
                    t.extend_from_slice(b" \"\": 0")
                } else {
                    t.extend_from_slice(b" 0")
                }
            }
            Lex::Number(n) => match n {
                Number::Int | Number::Frac | Number::Exp => {}
                Number::Minus | Number::Dot | Number::E | Number::ESign => t.push(b'0'),
            },
            Lex::Literal(rest) => t.extend_from_slice(rest),
        }
        t
    }

    /// The kind of place the text is at (`Str`, `Number(Frac)`, `Escape`, ...): for tests
    /// that check a walk came through each.
    #[cfg(test)]
    pub(crate) fn place(&self) -> String {
        match self.lex {
            Lex::Str { escape, .. } if escape != Escape::None => "Escape".into(),
            Lex::Str { key: true, .. } => "Key".into(),
            Lex::Number(n) => format!("Number({n:?})"),
            lex => format!("{lex:?}")
                .split(['(', ' '])
                .next()
                .unwrap()
                .to_string(),
        }
    }

    /// One byte; false where it cannot come here.
    fn byte(&mut self, b: u8) -> bool {
        match self.lex {
            Lex::Start => {
                if b != b'{' {
                    return false;
                }
                self.stack.push(b'}');
                self.lex = Lex::ObjectStart;
                true
            }
            Lex::Value => self.value(b),
            Lex::ObjectStart => match b {
                b'}' => self.close(b),
                b'"' => {
                    self.lex = Lex::Str {
                        key: true,
                        escape: Escape::None,
                        owed: 0,
                        lead: 0,
                    };
                    true
                }
                _ => false,
            },
            Lex::ArrayStart => {
                if b == b']' {
                    self.close(b)
                } else {
                    self.value(b)
                }
            }
            Lex::Key => {
                if b != b'"' {
                    return false;
                }
                self.lex = Lex::Str {
                    key: true,
                    escape: Escape::None,
                    owed: 0,
                    lead: 0,
                };
                true
            }
            Lex::Str {
                key,
                escape,
                owed,
                lead,
            } => self.string(b, key, escape, owed, lead),
            Lex::AfterKey => {
                if b != KEY_SEPARATOR.as_bytes()[0] {
                    return false;
                }
                self.lex = Lex::AfterColon;
                true
            }
            Lex::AfterColon => {
                if b != KEY_SEPARATOR.as_bytes()[1] {
                    return false;
                }
                self.lex = Lex::Value;
                true
            }
            Lex::AfterComma => {
                if b != ITEM_SEPARATOR.as_bytes()[1] {
                    return false;
                }
                self.lex = if self.stack.last() == Some(b'}') {
                    Lex::Key
                } else {
                    Lex::Value
                };
                true
            }
            Lex::Number(n) => self.number(b, n),
            Lex::Literal(rest) => {
                if rest.first() != Some(&b) {
                    return false;
                }
                self.lex = if rest.len() == 1 {
                    Lex::AfterValue
                } else {
                    Lex::Literal(&rest[1..])
                };
                true
            }
            Lex::AfterValue => self.after_value(b),
            Lex::Done => false,
        }
    }

    fn close(&mut self, b: u8) -> bool {
        if self.stack.pop() != Some(b) {
            return false;
        }
        self.lex = if self.stack.is_empty() {
            Lex::Done
        } else {
            Lex::AfterValue
        };
        true
    }

    fn after_value(&mut self, b: u8) -> bool {
        match b {
            b'}' | b']' => self.close(b),
            _ if b == ITEM_SEPARATOR.as_bytes()[0] => {
                self.lex = Lex::AfterComma;
                true
            }
            _ => false,
        }
    }

    fn value(&mut self, b: u8) -> bool {
        self.lex = match b {
            b'{' => {
                self.stack.push(b'}');
                Lex::ObjectStart
            }
            b'[' => {
                self.stack.push(b']');
                Lex::ArrayStart
            }
            b'"' => Lex::Str {
                key: false,
                escape: Escape::None,
                owed: 0,
                lead: 0,
            },
            b'-' => Lex::Number(Number::Minus),
            // (A leading zero takes no digits after it: the grammar sees to that.)
            b'0'..=b'9' => Lex::Number(Number::Int),
            b't' => Lex::Literal(b"rue"),
            b'f' => Lex::Literal(b"alse"),
            b'n' => Lex::Literal(b"ull"),
            _ => return false,
        };
        true
    }

    fn number(&mut self, b: u8, n: Number) -> bool {
        let next = match (n, b) {
            (Number::Minus, b'0'..=b'9') => Number::Int,
            (Number::Int, b'0'..=b'9') => Number::Int,
            (Number::Int, b'.') => Number::Dot,
            (Number::Int | Number::Frac, b'e' | b'E') => Number::E,
            (Number::Dot | Number::Frac, b'0'..=b'9') => Number::Frac,
            (Number::E, b'+' | b'-') => Number::ESign,
            (Number::E | Number::ESign | Number::Exp, b'0'..=b'9') => Number::Exp,
            // The number ended: the byte follows a whole value.
            (Number::Int | Number::Frac | Number::Exp, _) => {
                self.lex = Lex::AfterValue;
                return self.after_value(b);
            }
            _ => return false,
        };
        self.lex = Lex::Number(next);
        true
    }

    fn string(&mut self, b: u8, key: bool, escape: Escape, owed: u8, lead: u8) -> bool {
        let str_with = |escape, owed, lead| Lex::Str {
            key,
            escape,
            owed,
            lead,
        };
        if owed > 0 {
            let (lo, hi) = if lead != 0 {
                continuation_range(lead)
            } else {
                (0x80, 0xbf)
            };
            if !(lo..=hi).contains(&b) {
                return false;
            }
            self.lex = str_with(escape, owed - 1, 0);
            return true;
        }
        self.lex = match escape {
            Escape::Backslash => match b {
                b'n' | b'r' | b'b' | b't' | b'f' | b'\\' | b'"' => str_with(Escape::None, 0, 0),
                b'u' => str_with(
                    Escape::Unicode {
                        digits: 0,
                        seven: false,
                    },
                    0,
                    0,
                ),
                _ => return false,
            },
            Escape::Unicode { digits, seven } => {
                let ok = match digits {
                    0 | 1 => b == b'0',
                    2 => b == b'0' || b == b'1' || b == b'7',
                    _ if seven => b == b'F' || b == b'f',
                    _ => b.is_ascii_hexdigit(),
                };
                if !ok {
                    return false;
                }
                if digits == 3 {
                    str_with(Escape::None, 0, 0)
                } else {
                    str_with(
                        Escape::Unicode {
                            digits: digits + 1,
                            seven: digits == 2 && b == b'7',
                        },
                        0,
                        0,
                    )
                }
            }
            Escape::None => match b {
                b'"' => {
                    if key {
                        Lex::AfterKey
                    } else {
                        Lex::AfterValue
                    }
                }
                b'\\' => str_with(Escape::Backslash, 0, 0),
                0x00..=0x1f | 0x7f => return false,
                0x20..=0x7e => str_with(Escape::None, 0, 0),
                0xc2..=0xdf => str_with(Escape::None, 1, b),
                0xe0..=0xef => str_with(Escape::None, 2, b),
                0xf0..=0xf4 => str_with(Escape::None, 3, b),
                _ => return false,
            },
        };
        true
    }
}

/// The continuation bytes UTF-8 allows right after `lead` (no overlong forms, no
/// surrogates, nothing past U+10FFFF).
fn continuation_range(lead: u8) -> (u8, u8) {
    match lead {
        0xe0 => (0xa0, 0xbf),
        0xed => (0x80, 0x9f),
        0xf0 => (0x90, 0xbf),
        0xf4 => (0x80, 0x8f),
        _ => (0x80, 0xbf),
    }
}

/// The first continuation byte the closing text writes after `lead` (0: not right after it).
fn first_continuation(lead: u8) -> u8 {
    if lead == 0 {
        0x80
    } else {
        continuation_range(lead).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closing_of(text: &[u8]) -> Option<Vec<u8>> {
        let mut j = JsonCloser::new();
        j.push(text);
        assert_eq!(j.closing_len(), j.closing().map(|c| c.len()));
        j.closing()
    }

    #[test]
    fn each_kind_of_open_text_closes_with_the_shortest_valid_tail() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"", b"{}"),
            (b"{", b"}"),
            (b"{\"ab", b"\": 0}"),
            (b"{\"a\"", b": 0}"),
            (b"{\"a\":", b" 0}"),
            (b"{\"a\": ", b"0}"),
            (b"{\"a\": [1, {\"b\": tr", b"ue}]}"),
            (b"{\"a\": [", b"]}"),
            (b"{\"a\": [1, ", b"0]}"),
            (b"{\"a\": -", b"0}"),
            (b"{\"a\": 10", b"}"),
            (b"{\"a\": 1.", b"0}"),
            (b"{\"a\": 1.5e", b"0}"),
            (b"{\"a\": 1.5E-", b"0}"),
            (b"{\"a\": 0e7", b"}"),
            (b"{\"a\": \"x\\", b"n\"}"),
            (b"{\"a\": \"x\\u", b"0000\"}"),
            (b"{\"a\": \"x\\u00", b"00\"}"),
            (b"{\"a\": \"x\\u007", b"F\"}"),
            (b"{\"a\": \"x\\u001", b"0\"}"),
            (b"{\"\xe0", b"\xa0\x80\": 0}"),
            (b"{\"a\": \"\xf0", b"\x90\x80\x80\"}"),
            (b"{\"a\": \"\xf0\x9f", b"\x80\x80\"}"),
            (b"{\"a\": \"\xed", b"\x80\x80\"}"),
            (b"{\"a\": 1, ", b"\"\": 0}"),
            (b"{\"a\": 1,", b" \"\": 0}"),
            (b"{\"a\": null, \"b\": {}", b"}"),
            (b"{\"a\": {}}", b""),
        ];
        for &(text, want) in cases {
            let got = closing_of(text).unwrap();
            assert_eq!(
                got,
                want,
                "{:?}: {:?}",
                String::from_utf8_lossy(text),
                String::from_utf8_lossy(&got)
            );
            // A judge apart from this tracker: serde_json reads the closed text as an object.
            let whole = [text, &got[..]].concat();
            let v: serde_json::Value = serde_json::from_slice(&whole)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&whole)));
            assert!(v.is_object());
            // Nothing shorter closes it: no proper prefix of the closing text does.
            for k in 0..got.len() {
                let short = [text, &got[..k]].concat();
                assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&short).is_err());
            }
            // Writing the closing text byte by byte leaves the rest of it to close.
            for k in 0..got.len() {
                assert_eq!(
                    closing_of(&[text, &got[..k]].concat()).unwrap(),
                    &got[k..],
                    "{:?} + {k} bytes",
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    #[test]
    fn text_that_is_no_compact_json_object_has_no_closing() {
        for text in [
            &b"["[..],
            b"{ ",
            b"{\"a\" :",
            b"{\"a\":1",
            b"{\"a\": 1,\"b\"",
            b"{\"a\": tx",
            b"{\"a\": \"\x01",
            b"{\"a\": \"\\x",
            b"{\"a\": \"\\u0080",
            b"{\"a\": \"\xe0\x80",
            b"{\"a\": \"\xff",
            b"{}}",
            b"{\"a\": 1]",
        ] {
            assert_eq!(
                closing_of(text),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
