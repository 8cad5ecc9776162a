//! Byte addressing over a storage buffer of u32 words.
//!
//! Weights are bound as raw u32 words (no 8/16-bit storage needed). Several GGUF blocks are
//! only 2-byte aligned (Q8_0: 34 B, Q5_0: 22 B, Q6_K: 210 B), so a 4-byte field may straddle
//! two words; [`load_u32`] stitches it without reading a word that holds none of its bytes
//! (so it never reads past the tensor when the binding is padded to a multiple of 4 bytes).

use crate::ir::{Buffer, KernelBuilder, Scalar, Type, Value};

/// Alignment (in bytes) known for a byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Four,
    Two,
}

/// The u32 element type of a weight buffer bound as 16-byte quads (the aligned layout,
/// `dequant::layout`): panvk does not merge 4-byte loads into wider ones, so a kernel that
/// wants 16-byte loads has to declare them.
pub fn quad_type() -> Type {
    Type::vec(Scalar::U32, 4)
}

/// Word `idx` of a buffer of u32 words or of 16-byte quads (one quad load and a 2-bit
/// select of its lane).
pub fn load_word(b: &KernelBuilder, buf: Buffer, idx: Value) -> Value {
    if buf.elem == Type::U32 {
        return b.load(buf, idx);
    }
    debug_assert_eq!(buf.elem, quad_type());
    let q = b.load(buf, b.shri(idx, 2));
    quad_lane(b, q, idx)
}

/// Lane `idx & 3` of the quad `q` (a 2-bit select).
pub fn quad_lane(b: &KernelBuilder, q: Value, idx: Value) -> Value {
    let odd = b.ne(b.andi(idx, 1), b.c_u32(0));
    let high = b.ne(b.andi(idx, 2), b.c_u32(0));
    let lo = b.select(odd, b.extract(q, 1), b.extract(q, 0));
    let hi = b.select(odd, b.extract(q, 3), b.extract(q, 2));
    b.select(high, hi, lo)
}

/// The 4 bytes at byte offset `off` as a little-endian u32.
pub fn load_u32(b: &KernelBuilder, buf: Buffer, off: Value, align: Align) -> Value {
    let lo_idx = b.shri(off, 2);
    let lo = load_word(b, buf, lo_idx);
    if align == Align::Four {
        return lo;
    }
    // s = 8 * (off & 3); hi word index = (off + 3) / 4 (== lo index when aligned);
    // value = (lo >> s) | ((hi << 1) << (31 - s)): both shifts stay below 32 for every s.
    let s = b.shli(b.andi(off, 3), 3);
    let hi = load_word(b, buf, b.shri(b.addi(off, 3), 2));
    let hi_part = b.shl(b.shli(hi, 1), b.sub(b.c_u32(31), s));
    b.or(b.shr(lo, s), hi_part)
}

/// The 2 bytes at an even byte offset, in the low 16 bits of a u32.
pub fn load_u16(b: &KernelBuilder, buf: Buffer, off: Value) -> Value {
    let w = load_word(b, buf, b.shri(off, 2));
    let s = b.shli(b.andi(off, 2), 3);
    b.andi(b.shr(w, s), 0xFFFF)
}

/// The f16 at an even byte offset, widened to f32 (needs no Float16 capability).
pub fn load_f16_as_f32(b: &KernelBuilder, buf: Buffer, off: Value) -> Value {
    let w = load_word(b, buf, b.shri(off, 2));
    let s = b.shli(b.andi(off, 2), 3);
    b.extract(b.unpack_half2x16(b.shr(w, s)), 0)
}

/// `(word >> (8*lane + shift)) & mask` for lanes 0..4, as a u32 vector of 4 lanes.
pub fn bytes_to_uvec4(b: &KernelBuilder, word: Value, shift: Value, mask: u32) -> Value {
    let uv4 = Type::vec(Scalar::U32, 4);
    let lanes = b.construct(&[b.c_u32(0), b.c_u32(8), b.c_u32(16), b.c_u32(24)]);
    let shifts = b.add(lanes, b.splat(shift, 4));
    let v = b.shr(b.splat(word, 4), shifts);
    b.and(v, b.const_bits(uv4, mask))
}

/// The 4 signed bytes of `word` as an i32 vector of 4 lanes.
pub fn signed_bytes_to_ivec4(b: &KernelBuilder, word: Value) -> Value {
    let iv4 = Type::vec(Scalar::I32, 4);
    let w = b.splat(b.bitcast(word, Type::I32), 4);
    let up = b.construct(&[b.c_i32(24), b.c_i32(16), b.c_i32(8), b.c_i32(0)]);
    b.shr(b.shl(w, up), b.const_bits(iv4, 24))
}

/// The 4 bytes of `word` (each below `2^bits`, byte 0 in lane 0) as the floats
/// `1 + byte · 2^-bits`, made by bit operations alone: each byte is shifted into the top
/// `bits` bits of the mantissa of 1.0 (a shift and an and-or per lane), so no conversion
/// instruction is issued. The values are exact; `2^bits · (f - 1)` is the byte again.
pub fn bytes_to_unit_floats(b: &KernelBuilder, word: Value, bits: u32) -> Value {
    assert!((1..=8).contains(&bits), "{bits}-bit bytes");
    let low = 23 - bits;
    let lanes: Vec<Value> = (0..4u32)
        .map(|lane| {
            let at = 8 * lane;
            if at <= low {
                b.shli(word, low - at)
            } else {
                b.shri(word, at - low)
            }
        })
        .collect();
    let uv4 = Type::vec(Scalar::U32, 4);
    let field = b.and(
        b.construct(&lanes),
        b.const_bits(uv4, ((1 << bits) - 1) << low),
    );
    let one = b.or(field, b.const_bits(uv4, 0x3F80_0000));
    b.bitcast(one, Type::vec(Scalar::F32, 4))
}

/// The 4 bytes of `word` as a uvec4 (byte 0 in lane 0), zero-extended: drivers turn each lane
/// into one byte-selecting conversion where it is converted to float (Valhall's
/// `U8_TO_F32`).
pub fn unsigned_bytes_to_uvec4(b: &KernelBuilder, word: Value) -> Value {
    let uv4 = Type::vec(Scalar::U32, 4);
    let w = b.splat(word, 4);
    let up = b.construct(&[b.c_u32(24), b.c_u32(16), b.c_u32(8), b.c_u32(0)]);
    b.shr(b.shl(w, up), b.const_bits(uv4, 24))
}

/// Bytes `[r0, r0 + len)` of a region starting at a 2-aligned byte offset, each loaded once
/// and read as u32 ([`WordRun::u32_at`]) or u16 ([`WordRun::u16_at`]) at any even offset,
/// where [`load_u32`] at a 2-aligned offset takes two loads that no driver can prove adjacent.
///
/// The region starts at byte `4 * base + phase / 8` of the buffer: `base` is a word index and
/// `phase` the bit shift `8 * (offset & 2)` (0 or 16), `None` where the region is known to
/// start on a word. With a phase the run holds the words covering `[r0, r0 + len + 2)`, so
/// that it has the bytes for either phase.
///
/// The words are consecutive 4-byte loads from one base: drivers merge them into 16-byte
/// loads where they can prove the alignment (Mesa does for Q4_K's 16-byte super-blocks), and
/// a 2-aligned 4-byte field costs one more shift-or instead of a second load.
pub struct WordRun {
    /// Region-relative index of `words[0]`.
    first: u32,
    words: Vec<Value>,
    phase: Option<Value>,
    r0: u32,
    len: u32,
}

impl WordRun {
    /// A run of plain 4-byte loads (words `base + j`), which drivers merge into wider loads
    /// only where they can prove the alignment (Q4_K's 16-byte super-blocks). Every word it
    /// loads holds a byte of `[r0, r0 + len + 2)`: a run that ends where the tensor ends must
    /// have `r0 + len` ≡ 2 (mod 4) when it has a phase (true of the 2-aligned block formats:
    /// 34, 22 and 210 bytes), or its last word could lie past a binding padded to 4 bytes.
    pub fn load(
        b: &KernelBuilder,
        buf: Buffer,
        base: Value,
        phase: Option<Value>,
        r0: u32,
        len: u32,
    ) -> WordRun {
        debug_assert_eq!(buf.elem, Type::U32);
        assert!(r0 % 2 == 0 && len % 2 == 0 && len > 0, "runs are 2-aligned");
        if phase.is_none() {
            assert!(r0 % 4 == 0, "an aligned run starts on a word");
        }
        let extra = if phase.is_some() { 2 } else { 0 };
        let first = r0 / 4;
        let last = (r0 + len - 1 + extra) / 4;
        // All at once, in order: loaded where first read, the run's words spilled more
        // (Mesa 26.1.6, Q6_K and Q8_0 default schedules).
        let words = (first..=last)
            .map(|j| load_word(b, buf, b.addi(base, j)))
            .collect();
        WordRun {
            first,
            words,
            phase,
            r0,
            len,
        }
    }

    /// Bytes `[r0, r0 + len)` of a region starting at quad `base` of a buffer of 16-byte
    /// quads ([`quad_type`]), loaded as `len / 16` quads (`r0` and `len` multiples of 16).
    pub fn load_quads(b: &KernelBuilder, buf: Buffer, base: Value, r0: u32, len: u32) -> WordRun {
        assert_eq!(buf.elem, quad_type());
        assert!(
            r0 % 16 == 0 && len % 16 == 0 && len > 0,
            "quad runs are 16-aligned"
        );
        let mut words = Vec::new();
        for q in r0 / 16..(r0 + len) / 16 {
            let v = b.load(buf, b.addi(base, q));
            words.extend((0..4).map(|l| b.extract(v, l)));
        }
        WordRun {
            first: r0 / 4,
            words,
            phase: None,
            r0,
            len,
        }
    }

    /// Region word `j`.
    fn word(&self, _b: &KernelBuilder, j: u32) -> Value {
        self.words[(j - self.first) as usize]
    }

    /// The 4 bytes at region offset `r` (even) as a little-endian u32.
    pub fn u32_at(&self, b: &KernelBuilder, r: u32) -> Value {
        assert!(r % 2 == 0 && r >= self.r0 && r + 4 <= self.r0 + self.len);
        let m = r / 4;
        match self.phase {
            None => {
                assert!(r % 4 == 0, "an aligned run reads whole words");
                self.word(b, m)
            }
            Some(t) if r % 4 == 0 => {
                // Bytes 4m + t/8 ..: shift s = t in {0, 16}; (hi << 1) << (31 - s) keeps both
                // shifts below 32 (and is 0 for s = 0).
                let (lo, hi) = (self.word(b, m), self.word(b, m + 1));
                let hi_part = b.shl(b.shli(hi, 1), b.sub(b.c_u32(31), t));
                b.or(b.shr(lo, t), hi_part)
            }
            Some(t) => {
                // Bytes 4m + 2 + t/8 ..: shift s = 16 + t in {16, 32}.
                let (lo, hi) = (self.word(b, m), self.word(b, m + 1));
                let lo_part = b.shri(b.shr(lo, b.addi(t, 15)), 1);
                b.or(lo_part, b.shl(hi, b.sub(b.c_u32(16), t)))
            }
        }
    }

    /// The 2 bytes at region offset `r` (even) in the low 16 bits of a u32 (the upper bits
    /// are not cleared).
    pub fn u16_at(&self, b: &KernelBuilder, r: u32) -> Value {
        assert!(r % 2 == 0 && r >= self.r0 && r + 2 <= self.r0 + self.len);
        let m = r / 4;
        match self.phase {
            None if r % 4 == 0 => self.word(b, m),
            None => b.shri(self.word(b, m), 16),
            Some(t) if r % 4 == 0 => b.shr(self.word(b, m), t),
            Some(t) => {
                let (lo, hi) = (self.word(b, m), self.word(b, m + 1));
                let lo_part = b.shri(b.shr(lo, b.addi(t, 15)), 1);
                b.or(lo_part, b.shl(hi, b.sub(b.c_u32(16), t)))
            }
        }
    }

    /// The f16 at region offset `r` (even), widened to f32.
    pub fn f16_as_f32_at(&self, b: &KernelBuilder, r: u32) -> Value {
        b.extract(b.unpack_half2x16(self.u16_at(b, r)), 0)
    }
}
