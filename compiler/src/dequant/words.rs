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

/// The 4 bytes at byte offset `off` as a little-endian u32.
pub fn load_u32(b: &KernelBuilder, buf: Buffer, off: Value, align: Align) -> Value {
    debug_assert_eq!(buf.elem, Type::U32);
    let lo_idx = b.shri(off, 2);
    let lo = b.load(buf, lo_idx);
    if align == Align::Four {
        return lo;
    }
    // s = 8 * (off & 3); hi word index = (off + 3) / 4 (== lo index when aligned);
    // value = (lo >> s) | ((hi << 1) << (31 - s)): both shifts stay below 32 for every s.
    let s = b.shli(b.andi(off, 3), 3);
    let hi = b.load(buf, b.shri(b.addi(off, 3), 2));
    let hi_part = b.shl(b.shli(hi, 1), b.sub(b.c_u32(31), s));
    b.or(b.shr(lo, s), hi_part)
}

/// The 2 bytes at an even byte offset, in the low 16 bits of a u32.
pub fn load_u16(b: &KernelBuilder, buf: Buffer, off: Value) -> Value {
    let w = b.load(buf, b.shri(off, 2));
    let s = b.shli(b.andi(off, 2), 3);
    b.andi(b.shr(w, s), 0xFFFF)
}

/// The f16 at an even byte offset, widened to f32 (needs no Float16 capability).
pub fn load_f16_as_f32(b: &KernelBuilder, buf: Buffer, off: Value) -> Value {
    let w = b.load(buf, b.shri(off, 2));
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
