//! Dequantization as IR fragments, shared by all templates.
//!
//! A template opens a [`Unit`] (32 consecutive elements of one weight row) with [`open_unit`],
//! which loads the unit's scales once, then asks for its 8 chunks of 4 elements as floats
//! ([`Unit::chunk_f32`], [`Unit::chunk_f16`]) or as packed signed 8-bit words for dot products
//! ([`Unit::word_i8`] with [`Unit::int8_scales`]). The f32 results are bit-exact to the CPU
//! dequantizers (products and differences are marked precise, so no driver contracts them).

use super::words::{load_f16_as_f32, load_u16, load_u32, signed_bytes_to_ivec4, Align};
use super::{WeightFormat, UNIT};
use crate::ir::{Buffer, KernelBuilder, Scalar, Type, Value};

/// A weight tensor bound as u32 words: row `r` starts at byte `r * row_bytes(k)`.
#[derive(Clone, Copy, Debug)]
pub struct WeightRows {
    pub buffer: Buffer,
    pub format: WeightFormat,
}

/// Scales of a unit for the int8 dot-product path: the unit's contribution to a dot product
/// with int8 activations `xq` (scale `dx`) is
/// `dx * (lo * dot(xq[0..16], q[0..16]) + hi * dot(xq[16..32], q[16..32])) - min * dx * sum(xq)`
/// where `q` are the bytes of [`Unit::word_i8`]; `hi` is `lo` and `min` zero unless present.
#[derive(Clone, Copy, Debug)]
pub struct Int8Scales {
    pub lo: Value,
    pub hi: Option<Value>,
    pub min: Option<Value>,
}

/// One open unit of a weight row (see the module docs).
pub struct Unit {
    format: WeightFormat,
    buffer: Buffer,
    /// Byte offset of the unit's data: first element (floats), block (Q8_0/Q5_0) or
    /// super-block (K-quants).
    base: Value,
    /// f32 scale: d (Q8_0, Q5_0), d*sc (Q4_K), d*sc of elements 0..16 (Q6_K).
    scale: Option<Value>,
    /// f32: d*sc of elements 16..32 (Q6_K).
    scale_hi: Option<Value>,
    /// f32: dmin*m (Q4_K).
    min: Option<Value>,
    /// f16 copies of the scales, when asked for.
    scale_h: Option<Value>,
    scale_hi_h: Option<Value>,
    min_h: Option<Value>,
    /// Q5_0: the 32 high bits.
    qh: Option<Value>,
    /// Byte offset of the unit's quant bytes (chunk c at +4c) and the shift selecting its
    /// nibble; for Q6_K also the qh bytes and their 2-bit shift.
    q_off: Option<Value>,
    q_shift: Option<Value>,
    qh_off: Option<Value>,
    qh_shift: Option<Value>,
}

/// Opens unit `unit` (u32: element index / 32) of the row starting at byte `row_off`.
/// With `want_f16` the scales are also converted to f16 once (for [`Unit::chunk_f16`]).
pub fn open_unit(
    b: &KernelBuilder,
    rows: WeightRows,
    row_off: Value,
    unit: Value,
    want_f16: bool,
) -> Unit {
    let buf = rows.buffer;
    let mut u = Unit {
        format: rows.format,
        buffer: buf,
        base: row_off,
        scale: None,
        scale_hi: None,
        min: None,
        scale_h: None,
        scale_hi_h: None,
        min_h: None,
        qh: None,
        q_off: None,
        q_shift: None,
        qh_off: None,
        qh_shift: None,
    };
    let f32_of_u32 = |v: Value| b.convert(v, Type::F32);
    match rows.format {
        WeightFormat::F32 => u.base = b.add(row_off, b.muli(unit, UNIT * 4)),
        WeightFormat::F16 => u.base = b.add(row_off, b.muli(unit, UNIT * 2)),
        WeightFormat::Q8_0 => {
            u.base = b.add(row_off, b.muli(unit, 34));
            u.scale = Some(load_f16_as_f32(b, buf, u.base));
            u.q_off = Some(b.addi(u.base, 2));
        }
        WeightFormat::Q5_0 => {
            u.base = b.add(row_off, b.muli(unit, 22));
            u.scale = Some(load_f16_as_f32(b, buf, u.base));
            u.qh = Some(load_u32(b, buf, b.addi(u.base, 2), Align::Two));
            u.q_off = Some(b.addi(u.base, 6));
        }
        WeightFormat::Q4K => {
            let sub = b.andi(unit, 7);
            u.base = b.add(row_off, b.muli(b.shri(unit, 3), 144));
            let w = b.shri(u.base, 2);
            let dm = b.unpack_half2x16(b.load(buf, w));
            let (d, dmin) = (b.extract(dm, 0), b.extract(dm, 1));
            let w0 = b.load(buf, b.addi(w, 1));
            let w1 = b.load(buf, b.addi(w, 2));
            let w2 = b.load(buf, b.addi(w, 3));
            // get_scale_min_k4 for sub-block s, with i = s & 3 selecting the byte of each word.
            let sh = b.shli(b.andi(sub, 3), 3);
            let byte = |word: Value| b.andi(b.shr(word, sh), 0xFF);
            let (b0, b1, b2) = (byte(w0), byte(w1), byte(w2));
            let sc_lo = b.andi(b0, 63);
            let m_lo = b.andi(b1, 63);
            let sc_hi = b.or(b.andi(b2, 0xF), b.shli(b.shri(b0, 6), 4));
            let m_hi = b.or(b.shri(b2, 4), b.shli(b.shri(b1, 6), 4));
            let low = b.lt(sub, b.c_u32(4));
            let sc = b.select(low, sc_lo, sc_hi);
            let m = b.select(low, m_lo, m_hi);
            u.scale = Some(b.mul(d, f32_of_u32(sc)));
            u.min = Some(b.mul(dmin, f32_of_u32(m)));
            // Sub-blocks 2p and 2p+1 share qs[32p..32p+32] (low / high nibbles).
            u.q_off = Some(b.add(b.addi(u.base, 16), b.muli(b.shri(sub, 1), 32)));
            u.q_shift = Some(b.shli(b.andi(sub, 1), 2));
        }
        WeightFormat::Q6K => {
            let sub = b.andi(unit, 7);
            let (h, t) = (b.shri(sub, 2), b.andi(sub, 3));
            u.base = b.add(row_off, b.muli(b.shri(unit, 3), 210));
            let d = load_f16_as_f32(b, buf, b.addi(u.base, 208));
            // Scales of elements 0..16 and 16..32 of group t in half h: sc[8h + 2t + {0,1}].
            let pair = load_u16(
                b,
                buf,
                b.add(b.addi(u.base, 192), b.add(b.muli(h, 8), b.muli(t, 2))),
            );
            let pair = b.bitcast(pair, Type::I32);
            let sc_lo = b.bitfield_extract(pair, 0, 8);
            let sc_hi = b.bitfield_extract(pair, 8, 8);
            u.scale = Some(b.mul(d, b.convert(sc_lo, Type::F32)));
            u.scale_hi = Some(b.mul(d, b.convert(sc_hi, Type::F32)));
            // Group t: ql[64h + 32(t&1) + l], nibble (t>>1); qh[32h + l], bits 2t..2t+2.
            u.q_off = Some(b.add(u.base, b.add(b.muli(h, 64), b.muli(b.andi(t, 1), 32))));
            u.q_shift = Some(b.shli(b.shri(t, 1), 2));
            u.qh_off = Some(b.add(b.addi(u.base, 128), b.muli(h, 32)));
            u.qh_shift = Some(b.shli(t, 1));
        }
    }
    if want_f16 {
        let h = |v: Option<Value>| v.map(|v| b.convert(v, Type::F16));
        u.scale_h = h(u.scale);
        u.scale_hi_h = h(u.scale_hi);
        u.min_h = h(u.min);
    }
    u
}

/// Re-centres 4 packed bytes holding `bits`-bit unsigned values q to the signed bytes q - 2^(bits-1).
fn center_bytes(b: &KernelBuilder, q: Value, bits: u32) -> Value {
    // For each byte: x = q ^ half flips the top bit; a set top bit means q < half, whose
    // two's-complement byte also needs all bits above it: x | (top * (0xFF >> bits << 1)).
    let top = 1u32 << (bits - 1);
    let top4 = top * 0x0101_0101;
    let x = b.xor(q, b.c_u32(top4));
    let fill = (0xFFu32 << bits & 0xFF) / top;
    b.or(x, b.muli(b.andi(x, top4), fill))
}

impl Unit {
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Elements 4c..4c+4 (`c`: u32 in 0..8) as 4 packed signed bytes `q` (see [`Int8Scales`]).
    /// Only for quantized formats.
    pub fn word_i8(&self, b: &KernelBuilder, c: Value) -> Value {
        let buf = self.buffer;
        let c4 = b.shli(c, 2);
        match self.format {
            WeightFormat::Q8_0 => load_u32(b, buf, b.add(self.q_off.unwrap(), c4), Align::Two),
            WeightFormat::Q5_0 => {
                // Elements j = 4c..4c+4: nibble (c >> 2) of qs[4(c & 3) ..], bit j of qh.
                let word = load_u32(
                    b,
                    buf,
                    b.add(self.q_off.unwrap(), b.shli(b.andi(c, 3), 2)),
                    Align::Two,
                );
                let nib = b.andi(b.shr(word, b.shli(b.shri(c, 2), 2)), 0x0F0F_0F0F);
                let hb = b.andi(b.shr(self.qh.unwrap(), c4), 0xF);
                // Spread the 4 high bits to bit 4 of each byte.
                let spread = b.or(
                    b.or(b.andi(hb, 1), b.shli(b.andi(hb, 2), 7)),
                    b.or(b.shli(b.andi(hb, 4), 14), b.shli(b.andi(hb, 8), 21)),
                );
                center_bytes(b, b.or(nib, b.shli(spread, 4)), 5)
            }
            WeightFormat::Q4K => {
                let word = load_u32(b, buf, b.add(self.q_off.unwrap(), c4), Align::Four);
                b.andi(b.shr(word, self.q_shift.unwrap()), 0x0F0F_0F0F)
            }
            WeightFormat::Q6K => {
                let ql = load_u32(b, buf, b.add(self.q_off.unwrap(), c4), Align::Two);
                let qh = load_u32(b, buf, b.add(self.qh_off.unwrap(), c4), Align::Two);
                let low = b.andi(b.shr(ql, self.q_shift.unwrap()), 0x0F0F_0F0F);
                let high = b.andi(b.shr(qh, self.qh_shift.unwrap()), 0x0303_0303);
                center_bytes(b, b.or(low, b.shli(high, 4)), 6)
            }
            f => panic!("word_i8 on unquantized format {f}"),
        }
    }

    /// The scales that go with [`Unit::word_i8`].
    pub fn int8_scales(&self) -> Int8Scales {
        Int8Scales {
            lo: self.scale.expect("int8_scales on unquantized format"),
            hi: self.scale_hi,
            min: self.min,
        }
    }

    /// Elements 4c..4c+4 (`c`: u32 in 0..8) as a vec4<f32>, bit-exact to the CPU dequantizer.
    pub fn chunk_f32(&self, b: &KernelBuilder, c: Value) -> Value {
        let v4 = Type::vec(Scalar::F32, 4);
        match self.format {
            WeightFormat::F32 => {
                let w = b.add(b.shri(self.base, 2), b.shli(c, 2));
                let words: Vec<Value> = (0..4).map(|i| b.load(self.buffer, b.addi(w, i))).collect();
                b.bitcast(b.construct(&words), v4)
            }
            WeightFormat::F16 => {
                let w = b.add(b.shri(self.base, 2), b.shli(c, 1));
                let lo = b.unpack_half2x16(b.load(self.buffer, w));
                let hi = b.unpack_half2x16(b.load(self.buffer, b.addi(w, 1)));
                b.construct(&[lo, hi])
            }
            _ => {
                let q = b.convert(signed_bytes_to_ivec4(b, self.word_i8(b, c)), v4);
                let scale = self.chunk_scale(b, c, self.scale.unwrap(), self.scale_hi);
                b.precise(|| {
                    let v = b.mul(b.splat(scale, 4), q);
                    match self.min {
                        Some(m) => b.sub(v, b.splat(m, 4)),
                        None => v,
                    }
                })
            }
        }
    }

    /// Elements 4c..4c+4 as a vec4<f16> (needs Float16; open the unit with `want_f16`).
    /// Exact for F16 weights; quantized ones are scaled in f16 (one rounding per product).
    pub fn chunk_f16(&self, b: &KernelBuilder, c: Value) -> Value {
        let h4 = Type::vec(Scalar::F16, 4);
        let h2 = Type::vec(Scalar::F16, 2);
        match self.format {
            WeightFormat::F32 => b.convert(self.chunk_f32(b, c), h4),
            WeightFormat::F16 => {
                let w = b.add(b.shri(self.base, 2), b.shli(c, 1));
                let lo = b.bitcast(b.load(self.buffer, w), h2);
                let hi = b.bitcast(b.load(self.buffer, b.addi(w, 1)), h2);
                b.construct(&[lo, hi])
            }
            _ => {
                let scale_h = self
                    .scale_h
                    .expect("chunk_f16 needs a unit opened with want_f16");
                let q = b.convert(signed_bytes_to_ivec4(b, self.word_i8(b, c)), h4);
                let scale = self.chunk_scale(b, c, scale_h, self.scale_hi_h);
                match self.min_h {
                    Some(m) => b.fma(b.splat(scale, 4), q, b.neg(b.splat(m, 4))),
                    None => b.mul(b.splat(scale, 4), q),
                }
            }
        }
    }

    /// The scale of chunk c: Q6_K switches scales at element 16 (chunk 4).
    fn chunk_scale(&self, b: &KernelBuilder, c: Value, lo: Value, hi: Option<Value>) -> Value {
        match hi {
            Some(hi) => b.select(b.lt(c, b.c_u32(4)), lo, hi),
            None => lo,
        }
    }
}
