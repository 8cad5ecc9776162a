//! Dequantization as IR fragments, shared by all templates.
//!
//! A template opens a [`Unit`] (32 consecutive elements of one weight row) with [`open_unit`],
//! which loads the unit's scales once, then asks for its 8 chunks of 4 elements as floats
//! ([`Unit::chunk_f32`], [`Unit::chunk_f16`]) or as packed signed 8-bit words for dot products
//! ([`Unit::word_i8`] with [`Unit::int8_scales`]). The f32 results are bit-exact to the CPU
//! dequantizers (products and differences are marked precise, so no driver contracts them).

use super::layout::{AlignedGeometry, GROUP};
use super::words::{
    bytes_to_unit_floats, load_f16_as_f32, load_u16, load_u32, load_word, quad_lane,
    signed_bytes_to_ivec4, unsigned_bytes_to_uvec4, Align, WordRun,
};
use super::{WeightFormat, WeightLayout, IQ4NL_VALUES, UNIT};
use crate::ir::{Buffer, DotSign, KernelBuilder, Scalar, Type, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A weight tensor bound as u32 words: row `r` starts at byte `r * layout.row_bytes(k)`.
///
/// The `row_off` that [`open_unit`] and [`open_units`] take is that byte offset in the GGUF
/// layout, and the offset **in 16-byte units** in the aligned layout (its rows are multiples
/// of 16 bytes): word indices are then built as `4·row_off + ...` without a shift of a byte
/// sum, so drivers can read the 16-byte alignment off the address (Mesa's vectorizer takes it
/// from the constant factors of the offset's terms, and `(a + b) >> 2` hides them).
#[derive(Clone, Copy, Debug)]
pub struct WeightRows {
    pub buffer: Buffer,
    pub format: WeightFormat,
    pub layout: WeightLayout,
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
    /// f32 scale: d (Q8_0, Q5_0, Q4_0), d*sc (Q4_K), d*sc of elements 0..16 (Q6_K).
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
    /// Q5_0 opened by [`open_units`]: `qh` with its bits rearranged by [`q5_0_qh_by_byte`],
    /// so that each chunk's 4 high bits take one shift-and (for [`Unit::chunk_f32_at`]).
    qh_by_byte: Option<Value>,
    /// Byte offset of the unit's quant bytes (chunk c at +4c) and the shift selecting its
    /// nibble; for Q6_K also the qh bytes and their 2-bit shift.
    q_off: Option<Value>,
    q_shift: Option<Value>,
    qh_off: Option<Value>,
    qh_shift: Option<Value>,
    /// Alignment of `q_off` and `qh_off` (Q8_0, Q5_0, Q6_K: 2 in the GGUF layout).
    q_align: Align,
    /// Opened by [`open_units`]: the run holding the quant bytes (chunk c's word at region
    /// offset `r + 4c`) and, for Q6_K, the run of the qh bytes.
    qs_run: Option<(Rc<WordRun>, u32)>,
    qh_run: Option<(Rc<WordRun>, u32)>,
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
    if rows.layout == WeightLayout::Aligned {
        return open_unit_aligned(b, rows, row_off, unit, want_f16);
    }
    let buf = rows.buffer;
    let mut u = Unit::blank(rows.format, buf, row_off, Align::Two);
    match rows.format {
        WeightFormat::F32 => u.base = b.add(row_off, b.muli(unit, UNIT * 4)),
        WeightFormat::F16 | WeightFormat::BF16 => u.base = b.add(row_off, b.muli(unit, UNIT * 2)),
        WeightFormat::Q8_0 => {
            u.base = b.add(row_off, b.muli(unit, 34));
            u.scale = Some(load_f16_as_f32(b, buf, u.base));
            u.q_off = Some(b.addi(u.base, 2));
        }
        WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
            // 20- and 24-byte blocks: word aligned (rows are whole blocks).
            let bytes = rows.format.block_bytes();
            u.base = b.add(row_off, b.muli(unit, bytes));
            let w = b.shri(u.base, 2);
            let dm = b.unpack_half2x16(b.load(buf, w));
            u.scale = Some(b.extract(dm, 0));
            u.min = Some(b.neg(b.extract(dm, 1)));
            u.q_align = Align::Four;
            if rows.format == WeightFormat::Q5_1 {
                u.qh = Some(b.load(buf, b.addi(w, 1)));
            }
            u.q_off = Some(b.addi(u.base, bytes - 16));
        }
        WeightFormat::Q4_0 => {
            u.base = b.add(row_off, b.muli(unit, 18));
            u.scale = Some(load_f16_as_f32(b, buf, u.base));
            u.q_off = Some(b.addi(u.base, 2));
        }
        WeightFormat::IQ4NL => {
            u.base = b.add(row_off, b.muli(unit, 18));
            u.scale = Some(load_f16_as_f32(b, buf, u.base));
            u.q_off = Some(b.addi(u.base, 2));
        }
        WeightFormat::IQ4XS => {
            // 136-byte super-blocks: 8-byte aligned (rows are whole super-blocks).
            let sub = b.andi(unit, 7);
            u.base = b.add(row_off, b.muli(b.shri(unit, 3), 136));
            let w = b.shri(u.base, 2);
            let (head, scales_l) = (b.load(buf, w), b.load(buf, b.addi(w, 1)));
            u.scale = Some(iq4xs_scale(b, head, scales_l, sub));
            u.q_off = Some(b.add(b.addi(u.base, 8), b.shli(sub, 4)));
            u.q_align = Align::Four;
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
            let (scale, min) = k_quant_scale_min(b, buf, u.base, sub);
            (u.scale, u.min) = (Some(scale), Some(min));
            // Sub-blocks 2p and 2p+1 share qs[32p..32p+32] (low / high nibbles).
            u.q_off = Some(b.add(b.addi(u.base, 16), b.muli(b.shri(sub, 1), 32)));
            u.q_shift = Some(b.shli(b.andi(sub, 1), 2));
        }
        WeightFormat::Q5K => {
            // Q4_K's header and nibbles (qs 32 bytes further on), plus bit `sub` of qh[l].
            let sub = b.andi(unit, 7);
            u.base = b.add(row_off, b.muli(b.shri(unit, 3), 176));
            let (scale, min) = k_quant_scale_min(b, buf, u.base, sub);
            (u.scale, u.min) = (Some(scale), Some(min));
            u.q_off = Some(b.add(b.addi(u.base, 48), b.muli(b.shri(sub, 1), 32)));
            u.q_shift = Some(b.shli(b.andi(sub, 1), 2));
            u.qh_off = Some(b.addi(u.base, 16));
            u.qh_shift = Some(sub);
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
    with_f16_scales(b, u, want_f16)
}

fn with_f16_scales(b: &KernelBuilder, mut u: Unit, want_f16: bool) -> Unit {
    if want_f16 {
        let h = |v: Option<Value>| v.map(|v| b.convert(v, Type::F16));
        u.scale_h = h(u.scale);
        u.scale_hi_h = h(u.scale_hi);
        u.min_h = h(u.min);
    }
    u
}

/// The f32 scale and min of sub-block `sub` of the Q4_K/Q5_K super-block at byte `base`
/// (4-byte aligned): its f16 d and dmin, then the 6-bit pair of the 12 scale bytes.
fn k_quant_scale_min(b: &KernelBuilder, buf: Buffer, base: Value, sub: Value) -> (Value, Value) {
    let w = b.shri(base, 2);
    let dm = b.unpack_half2x16(b.load(buf, w));
    let (d, dmin) = (b.extract(dm, 0), b.extract(dm, 1));
    let w0 = b.load(buf, b.addi(w, 1));
    let w1 = b.load(buf, b.addi(w, 2));
    let w2 = b.load(buf, b.addi(w, 3));
    let (sc, m) = q4k_scale_min(b, sub, w0, w1, w2);
    let f32_of_u32 = |v: Value| b.convert(v, Type::F32);
    (b.mul(d, f32_of_u32(sc)), b.mul(dmin, f32_of_u32(m)))
}

/// get_scale_min_k4 of Q4_K sub-block `sub` (u32 in 0..8) from the 3 scale words of its
/// super-block: (scale, min) as u32.
fn q4k_scale_min(b: &KernelBuilder, sub: Value, w0: Value, w1: Value, w2: Value) -> (Value, Value) {
    // i = s & 3 selects the byte of each word.
    let sh = b.shli(b.andi(sub, 3), 3);
    let byte = |word: Value| b.andi(b.shr(word, sh), 0xFF);
    let (b0, b1, b2) = (byte(w0), byte(w1), byte(w2));
    let sc_lo = b.andi(b0, 63);
    let m_lo = b.andi(b1, 63);
    let sc_hi = b.or(b.andi(b2, 0xF), b.shli(b.shri(b0, 6), 4));
    let m_hi = b.or(b.shri(b2, 4), b.shli(b.shri(b1, 6), 4));
    let low = b.lt(sub, b.c_u32(4));
    (b.select(low, sc_lo, sc_hi), b.select(low, m_lo, m_hi))
}

/// IQ4_XS sub-block `sub`'s f32 scale `d * (ls - 32)` from its super-block's first two
/// words: `head` = f16 d | scales_h << 16 and the 4 scales_l bytes. The low 4 bits of ls
/// are nibble `sub` of scales_l (byte sub/2, nibble sub%2), the high 2 bits are bits
/// 2·sub.. of scales_h.
fn iq4xs_scale(b: &KernelBuilder, head: Value, scales_l: Value, sub: Value) -> Value {
    let d = b.extract(b.unpack_half2x16(head), 0);
    let lo = b.andi(b.shr(scales_l, b.shli(sub, 2)), 0xF);
    let hi = b.andi(b.shr(head, b.addi(b.shli(sub, 1), 16)), 3);
    let ls = b.bitcast(b.or(lo, b.shli(hi, 4)), Type::I32);
    let signed = b.sub(ls, b.c_i32(32));
    b.mul(d, b.convert(signed, Type::F32))
}

/// Opens the `count` consecutive units `first, first + 1, ...` of the row starting at byte
/// `row_off` with wide loads: every byte range the units read is loaded once as a run of
/// consecutive words ([`WordRun`]; drivers merge them into 16-byte loads where they can prove
/// the alignment) and shared by the units that read it (a Q4_K super-block's header and the quant bytes of its sub-block pairs;
/// a Q6_K super-block's d, scales, qh bytes and ql bytes). `count` is a power of two and
/// `first` a multiple of it. The units' chunks must be asked for by constant index
/// ([`Unit::chunk_f32_at`], [`Unit::chunk_f16_at`], [`Unit::word_i8_at`]); they compute
/// exactly what [`open_unit`]'s do. Quantized formats only.
pub fn open_units(
    b: &KernelBuilder,
    rows: WeightRows,
    row_off: Value,
    first: Value,
    count: u32,
    want_f16: bool,
) -> Vec<Unit> {
    assert!(count.is_power_of_two(), "a group of {count} units");
    if rows.layout == WeightLayout::Aligned {
        return open_units_aligned(b, rows, row_off, first, count, want_f16, None);
    }
    let fmt = rows.format;
    let per_block = fmt.block_elems() / UNIT;
    if count > per_block && per_block > 1 {
        // Whole super-blocks, one group each.
        return (0..count / per_block)
            .flat_map(|j| {
                open_units(
                    b,
                    rows,
                    row_off,
                    b.addi(first, j * per_block),
                    per_block,
                    want_f16,
                )
            })
            .collect();
    }
    let buf = rows.buffer;
    let blank = |base: Value| Unit::blank(fmt, buf, base, Align::Two);
    // Runs already loaded, by (base word, region offset, length).
    let runs: std::cell::RefCell<HashMap<(u32, u32, u32), Rc<WordRun>>> = Default::default();
    let run = |base: Value, phase: Option<Value>, r0: u32, len: u32| -> Rc<WordRun> {
        runs.borrow_mut()
            .entry((base.id(), r0, len))
            .or_insert_with(|| Rc::new(WordRun::load(b, buf, base, phase, r0, len)))
            .clone()
    };
    // Word index and phase (8 * (offset & 2)) of a 2-aligned byte offset.
    let split = |off: Value| (b.shri(off, 2), b.shli(b.andi(off, 2), 3));
    let mut out = Vec::new();
    match fmt {
        WeightFormat::Q8_0 | WeightFormat::Q5_0 | WeightFormat::Q4_0 | WeightFormat::IQ4NL => {
            // One run per block (its 34, 22 or 18 bytes end 2 bytes into a word, see
            // WordRun).
            let bytes = fmt.block_bytes();
            for ul in 0..count {
                let mut u = blank(b.add(row_off, b.muli(b.addi(first, ul), bytes)));
                let (w, ph) = split(u.base);
                let r = run(w, Some(ph), 0, bytes);
                u.scale = Some(r.f16_as_f32_at(b, 0));
                if fmt == WeightFormat::Q5_0 {
                    let qh = r.u32_at(b, 2);
                    u.qh = Some(qh);
                    u.qh_by_byte = Some(q5_0_qh_by_byte(b, qh));
                    u.qs_run = Some((r, 6));
                } else {
                    u.qs_run = Some((r, 2));
                }
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
            // One aligned run per block (20 or 24 bytes, word aligned).
            let bytes = fmt.block_bytes();
            for ul in 0..count {
                let mut u = blank(b.add(row_off, b.muli(b.addi(first, ul), bytes)));
                let r = run(b.shri(u.base, 2), None, 0, bytes);
                let dm = b.unpack_half2x16(r.u32_at(b, 0));
                u.scale = Some(b.extract(dm, 0));
                u.min = Some(b.neg(b.extract(dm, 1)));
                if fmt == WeightFormat::Q5_1 {
                    u.qh = Some(r.u32_at(b, 4));
                }
                u.qs_run = Some((r, bytes - 16));
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        WeightFormat::Q4K | WeightFormat::Q5K => {
            // Super-blocks start on 16 bytes (144- or 176-byte blocks, rows of whole blocks),
            // and every run below is 16-aligned: bound as quads, they are read as 16-byte
            // loads, which no driver has to prove aligned.
            let run = |base: Value, phase: Option<Value>, r0: u32, len: u32| -> Rc<WordRun> {
                if buf.elem != super::words::quad_type() {
                    return run(base, phase, r0, len);
                }
                runs.borrow_mut()
                    .entry((base.id(), r0, len))
                    .or_insert_with(|| {
                        Rc::new(WordRun::load_quads(b, buf, b.shri(base, 2), r0, len))
                    })
                    .clone()
            };
            let q5 = fmt == WeightFormat::Q5K;
            let base = b.add(row_off, b.muli(b.shri(first, 3), fmt.block_bytes()));
            let w = b.shri(base, 2);
            let head = run(w, None, 0, 16);
            let dm = b.unpack_half2x16(head.u32_at(b, 0));
            let (d, dmin) = (b.extract(dm, 0), b.extract(dm, 1));
            let (w0, w1, w2) = (head.u32_at(b, 4), head.u32_at(b, 8), head.u32_at(b, 12));
            let s0 = b.andi(first, 7);
            // Sub-blocks 2p and 2p+1 share qs[32p..32p+32]; from the group's first pair on.
            // Q5_K's qs follow its 32 qh bytes, which every sub-block reads (its own bit).
            let qs_word = if q5 { 12 } else { 4 };
            let qs_base = b.add(b.addi(w, qs_word), b.shli(b.shri(s0, 1), 3));
            for ul in 0..count {
                let mut u = blank(base);
                let sub = b.addi(s0, ul);
                if q5 {
                    u.qh_run = Some((run(b.addi(w, 4), None, 0, 32), 0));
                    u.qh_shift = Some(sub);
                }
                let (sc, m) = q4k_scale_min(b, sub, w0, w1, w2);
                u.scale = Some(b.mul(d, b.convert(sc, Type::F32)));
                u.min = Some(b.mul(dmin, b.convert(m, Type::F32)));
                if count == 1 {
                    u.qs_run = Some((run(qs_base, None, 0, 32), 0));
                    u.q_shift = Some(b.shli(b.andi(sub, 1), 2));
                } else {
                    // first is even: pair p of the group is the group's (ul >> 1)-th.
                    u.qs_run = Some((run(qs_base, None, 32 * (ul >> 1), 32), 32 * (ul >> 1)));
                    u.q_shift = Some(b.c_u32(4 * (ul & 1)));
                }
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        WeightFormat::IQ4XS => {
            // Super-blocks start on 8 bytes: the 8-byte header (d, scales_h, scales_l) is
            // one run, the qs of the group's sub-blocks (16 bytes each, from sub-block s0 on)
            // another.
            let base = b.add(row_off, b.muli(b.shri(first, 3), 136));
            let w = b.shri(base, 2);
            let head = run(w, None, 0, 8);
            let (h0, sl) = (head.u32_at(b, 0), head.u32_at(b, 4));
            let s0 = b.andi(first, 7);
            let qs_base = b.add(b.addi(w, 2), b.shli(s0, 2));
            let qs = run(qs_base, None, 0, 16 * count);
            for ul in 0..count {
                let mut u = blank(base);
                u.scale = Some(iq4xs_scale(b, h0, sl, b.addi(s0, ul)));
                u.qs_run = Some((qs.clone(), 16 * ul));
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        WeightFormat::Q6K => {
            let base = b.add(row_off, b.muli(b.shri(first, 3), 210));
            let (w, ph) = split(base);
            let d = run(w, Some(ph), 208, 2).f16_as_f32_at(b, 208);
            let s0 = b.andi(first, 7);
            let scale_of = |pair: Value| {
                let pair = b.bitcast(pair, Type::I32);
                let lo = b.bitfield_extract(pair, 0, 8);
                let hi = b.bitfield_extract(pair, 8, 8);
                (
                    b.mul(d, b.convert(lo, Type::F32)),
                    b.mul(d, b.convert(hi, Type::F32)),
                )
            };
            // One half h (unless the group is the whole super-block); groups t0 + ul, t0 =
            // s0 & 3 even unless count is 1.
            let (h, t0) = (b.shri(s0, 2), b.andi(s0, 3));
            let wh = b.add(w, b.shli(h, 4));
            let wqh = b.add(b.addi(w, 32), b.shli(h, 3));
            // sc[8h + 2t0 ..]: an even t0 keeps the phase.
            let wsc = b.add(b.add(b.addi(w, 48), b.shli(h, 1)), b.shri(t0, 1));
            for ul in 0..count {
                let mut u = blank(base);
                if count == 8 {
                    // The whole super-block: half h and group t are constants.
                    let (h, t) = (ul >> 2, ul & 3);
                    let sc = run(w, Some(ph), 192, 16);
                    let (lo, hi) = scale_of(sc.u16_at(b, 192 + 8 * h + 2 * t));
                    (u.scale, u.scale_hi) = (Some(lo), Some(hi));
                    let ql = 64 * h + 32 * (t & 1);
                    u.qs_run = Some((run(w, Some(ph), ql, 32), ql));
                    u.q_shift = Some(b.c_u32(4 * (t >> 1)));
                    let qh = 128 + 32 * h;
                    u.qh_run = Some((run(w, Some(ph), qh, 32), qh));
                    u.qh_shift = Some(b.c_u32(2 * t));
                } else {
                    let t = b.addi(t0, ul);
                    if count == 1 {
                        let pair = load_u16(
                            b,
                            buf,
                            b.add(b.addi(base, 192), b.add(b.muli(h, 8), b.muli(t, 2))),
                        );
                        let (lo, hi) = scale_of(pair);
                        (u.scale, u.scale_hi) = (Some(lo), Some(hi));
                        let wq = b.add(wh, b.shli(b.andi(t, 1), 3));
                        u.qs_run = Some((run(wq, Some(ph), 0, 32), 0));
                    } else {
                        let sc = run(wsc, Some(ph), 0, 2 * count);
                        let (lo, hi) = scale_of(sc.u16_at(b, 2 * ul));
                        (u.scale, u.scale_hi) = (Some(lo), Some(hi));
                        let ql = 32 * (ul & 1);
                        u.qs_run = Some((run(wh, Some(ph), ql, 32), ql));
                    }
                    u.q_shift = Some(b.shli(b.shri(t, 1), 2));
                    u.qh_run = Some((run(wqh, Some(ph), 0, 32), 0));
                    u.qh_shift = Some(b.shli(t, 1));
                }
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        f => panic!("open_units on unquantized format {f}"),
    }
    out
}

/// The group headers of the units one iteration of a K loop opens in one weight row, in the
/// aligned layout: the iteration opens units `first + o` (`o` constant, below `step`) and
/// each group header it touches is loaded once, as one quad, on first use, and shared by all
/// the units of the iteration that read it, instead of once per [`open_units`] call. Q8_0's
/// 16-byte header holds the 8 f16 `d`s of its group, so 4 slabs of 2 units (one group) load
/// one header quad instead of 4 (docs/measurements/2026-12-03-mali-shim26-q8.md).
pub struct SharedHeaders {
    rows: WeightRows,
    row_off: Value,
    first: Value,
    step: u32,
    /// Header quads by group offset from the group of `first` (constant).
    quads: RefCell<HashMap<u32, Value>>,
}

impl SharedHeaders {
    /// Headers shared by the units `first .. first + step` of the row at `row_off` (16-byte
    /// units), where `first` is a multiple of `step`; `None` where they are not shared: only
    /// Q8_0 in the aligned layout (whose header holds nothing but the `d`s), and `step` a
    /// multiple or an even divisor of the group ([`GROUP`] blocks).
    pub fn new(rows: WeightRows, row_off: Value, first: Value, step: u32) -> Option<Self> {
        let fits = step >= 2 && (step % GROUP == 0 || GROUP % step == 0);
        (rows.layout == WeightLayout::Aligned && rows.format == WeightFormat::Q8_0 && fits).then(
            || SharedHeaders {
                rows,
                row_off,
                first,
                step,
                quads: Default::default(),
            },
        )
    }

    /// The header quad of group `g` (the first unit's group plus `go`), loaded once.
    fn quad(&self, b: &KernelBuilder, g: Value, go: u32) -> Value {
        *self.quads.borrow_mut().entry(go).or_insert_with(|| {
            let geo = aligned_geometry(self.rows.format);
            let hq = b.add(self.row_off, b.muli(g, geo.group_bytes() / 16));
            b.load(self.rows.buffer, hq)
        })
    }

    /// The f16 `d` of unit `o` of the iteration (constant `o < step`) as f32.
    fn d(&self, b: &KernelBuilder, o: u32) -> Value {
        debug_assert!(o < self.step);
        let g0 = b.shri(self.first, GROUP.trailing_zeros());
        if self.step % GROUP == 0 {
            // first is a multiple of the group: unit o is block o % 8 of group g0 + o / 8.
            let go = o / GROUP;
            let g = if go == 0 { g0 } else { b.addi(g0, go) };
            let j = o % GROUP;
            let word = b.extract(self.quad(b, g, go), j / 2);
            return b.extract(b.unpack_half2x16(word), j % 2);
        }
        // The iteration lies inside group g0, from its even block j0 = first & 7 on.
        let j0 = b.andi(self.first, GROUP - 1);
        let word = quad_lane(b, self.quad(b, g0, 0), b.addi(b.shri(j0, 1), o / 2));
        b.extract(b.unpack_half2x16(word), o % 2)
    }
}

/// [`open_units`] of the units `first + offset ..` of an iteration whose headers are
/// `headers` (`offset` constant, `offset + count` up to its step).
pub fn open_units_shared(
    b: &KernelBuilder,
    headers: &SharedHeaders,
    offset: u32,
    count: u32,
    want_f16: bool,
) -> Vec<Unit> {
    assert!(count.is_power_of_two() && offset % count == 0 && offset + count <= headers.step);
    let first = if offset == 0 {
        headers.first
    } else {
        b.addi(headers.first, offset)
    };
    open_units_aligned(
        b,
        headers.rows,
        headers.row_off,
        first,
        count,
        want_f16,
        Some((headers, offset)),
    )
}

impl Unit {
    /// A unit with nothing loaded yet, its data at byte `base`.
    fn blank(format: WeightFormat, buffer: Buffer, base: Value, q_align: Align) -> Unit {
        Unit {
            format,
            buffer,
            base,
            scale: None,
            scale_hi: None,
            min: None,
            scale_h: None,
            scale_hi_h: None,
            min_h: None,
            qh: None,
            qh_by_byte: None,
            q_off: None,
            q_shift: None,
            qh_off: None,
            qh_shift: None,
            q_align,
            qs_run: None,
            qh_run: None,
        }
    }
}

fn aligned_geometry(format: WeightFormat) -> AlignedGeometry {
    AlignedGeometry::of(format)
        .unwrap_or_else(|| panic!("{format} has no aligned layout (validate_workload refuses it)"))
}

/// Q6_K scales of elements 0..16 and 16..32 from their byte pair (low 16 bits of `pair`).
fn q6k_scales(b: &KernelBuilder, d: Value, pair: Value) -> (Value, Value) {
    let pair = b.bitcast(pair, Type::I32);
    let lo = b.bitfield_extract(pair, 0, 8);
    let hi = b.bitfield_extract(pair, 8, 8);
    (
        b.mul(d, b.convert(lo, Type::F32)),
        b.mul(d, b.convert(hi, Type::F32)),
    )
}

/// [`open_unit`] in the aligned layout (`dequant::layout`): block `i` of a row has its
/// header at `(i / 8) · group_bytes` and its body `header + (i % 8) · body` after it; every
/// field is word aligned.
fn open_unit_aligned(
    b: &KernelBuilder,
    rows: WeightRows,
    row_off: Value,
    unit: Value,
    want_f16: bool,
) -> Unit {
    let (fmt, buf) = (rows.format, rows.buffer);
    let geo = aligned_geometry(fmt);
    let block = b.shri(unit, (fmt.block_elems() / UNIT).trailing_zeros());
    let (g, j) = (b.shri(block, 3), b.andi(block, GROUP - 1));
    // row_off is in 16-byte units (see WeightRows).
    let head = b.add(b.shli(row_off, 4), b.muli(g, geo.group_bytes()));
    let body = b.add(b.addi(head, geo.header), b.muli(j, geo.body));
    let d = load_f16_as_f32(b, buf, b.add(head, b.shli(j, 1)));
    let mut u = Unit::blank(fmt, buf, body, Align::Four);
    match fmt {
        WeightFormat::Q8_0 => {
            u.scale = Some(d);
            u.q_off = Some(body);
        }
        WeightFormat::Q5_0 => {
            u.scale = Some(d);
            let qh = b.add(b.addi(head, 16), b.shli(j, 2));
            u.qh = Some(load_u32(b, buf, qh, Align::Four));
            u.q_off = Some(body);
        }
        WeightFormat::Q6K => {
            let sub = b.andi(unit, 7);
            let (h, t) = (b.shri(sub, 2), b.andi(sub, 3));
            // The body is the GGUF super-block without d: ql at 0, qh at 128, scales at 192.
            let pair = load_u16(
                b,
                buf,
                b.add(b.addi(body, 192), b.add(b.muli(h, 8), b.muli(t, 2))),
            );
            let (lo, hi) = q6k_scales(b, d, pair);
            (u.scale, u.scale_hi) = (Some(lo), Some(hi));
            u.q_off = Some(b.add(body, b.add(b.muli(h, 64), b.muli(b.andi(t, 1), 32))));
            u.q_shift = Some(b.shli(b.shri(t, 1), 2));
            u.qh_off = Some(b.add(b.addi(body, 128), b.muli(h, 32)));
            u.qh_shift = Some(b.shli(t, 1));
        }
        f => unreachable!("aligned layout of {f}"),
    }
    with_f16_scales(b, u, want_f16)
}

/// [`open_units`] in the aligned layout: the same runs as the GGUF layout's, every one from a
/// word-aligned base without a phase, and the bodies' runs 16-byte aligned (Q8_0 32-byte
/// bodies, Q6_K 208-byte bodies; drivers merge them into 16-byte loads).
fn open_units_aligned(
    b: &KernelBuilder,
    rows: WeightRows,
    row_off: Value,
    first: Value,
    count: u32,
    want_f16: bool,
    shared: Option<(&SharedHeaders, u32)>,
) -> Vec<Unit> {
    let (fmt, buf) = (rows.format, rows.buffer);
    let geo = aligned_geometry(fmt);
    let per_block = fmt.block_elems() / UNIT;
    // Units opened together stay inside one block (K-quants) or one group (Q8_0, Q5_0).
    let span = if per_block > 1 { per_block } else { GROUP };
    if count > span {
        return (0..count / span)
            .flat_map(|j| {
                let shared = shared.map(|(h, o)| (h, o + j * span));
                open_units_aligned(
                    b,
                    rows,
                    row_off,
                    b.addi(first, j * span),
                    span,
                    want_f16,
                    shared,
                )
            })
            .collect();
    }
    // Runs of whole quads, by (base quad, region offset, length).
    let runs: std::cell::RefCell<HashMap<(u32, u32, u32), Rc<WordRun>>> = Default::default();
    let run = |base: Value, r0: u32, len: u32| -> Rc<WordRun> {
        runs.borrow_mut()
            .entry((base.id(), r0, len))
            .or_insert_with(|| Rc::new(WordRun::load_quads(b, buf, base, r0, len)))
            .clone()
    };
    let block = b.shri(first, per_block.trailing_zeros());
    let (g, j) = (b.shri(block, 3), b.andi(block, GROUP - 1));
    // row_off is in 16-byte units (see WeightRows): the group's header quad, and the quad of
    // the first unit's body.
    let hq = b.add(row_off, b.muli(g, geo.group_bytes() / 16));
    let hw = b.shli(hq, 2);
    let bq = b.add(b.addi(hq, geo.header / 16), b.muli(j, geo.body / 16));
    // The f16 d of block j + i of the group (one word of the header quad). Where j is even
    // (Q8_0/Q5_0 groups of 2 or more units), blocks j + 2p and j + 2p + 1 share word
    // j/2 + p, loaded once; a K-quant's units share one block, whose j is any.
    let d_words: std::cell::RefCell<HashMap<u32, Value>> = Default::default();
    let d_of = |i: u32| {
        if let Some((h, o)) = shared {
            return h.d(b, o + i);
        }
        if count == 1 || per_block > 1 {
            let word = load_word(b, buf, b.add(hw, b.shri(j, 1)));
            let w = b.shr(word, b.shli(b.andi(j, 1), 4));
            return b.extract(b.unpack_half2x16(w), 0);
        }
        let word = *d_words
            .borrow_mut()
            .entry(i / 2)
            .or_insert_with(|| load_word(b, buf, b.add(hw, b.addi(b.shri(j, 1), i / 2))));
        b.extract(b.unpack_half2x16(word), i % 2)
    };
    let mut out = Vec::new();
    match fmt {
        WeightFormat::Q8_0 | WeightFormat::Q5_0 => {
            // Blocks j .. j + count of group g (first is a multiple of count, count <= 8).
            let bodies = run(bq, 0, geo.body * count);
            for ul in 0..count {
                let mut u = Unit::blank(fmt, buf, bq, Align::Four);
                u.scale = Some(d_of(ul));
                if fmt == WeightFormat::Q5_0 {
                    let qh = load_word(b, buf, b.add(b.addi(hw, 4), b.addi(j, ul)));
                    u.qh = Some(qh);
                    u.qh_by_byte = Some(q5_0_qh_by_byte(b, qh));
                }
                u.qs_run = Some((bodies.clone(), geo.body * ul));
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        WeightFormat::Q6K => {
            let d = d_of(0);
            let s0 = b.andi(first, 7);
            // As in the GGUF layout: one half h unless the group is the whole super-block.
            let (h, t0) = (b.shri(s0, 2), b.andi(s0, 3));
            let wh = b.add(bq, b.shli(h, 2));
            let wqh = b.add(b.addi(bq, 8), b.shli(h, 1));
            for ul in 0..count {
                let mut u = Unit::blank(fmt, buf, bq, Align::Four);
                if count == 8 {
                    let (h, t) = (ul >> 2, ul & 3);
                    let sc = run(bq, 192, 16);
                    let (lo, hi) = q6k_scales(b, d, sc.u16_at(b, 192 + 8 * h + 2 * t));
                    (u.scale, u.scale_hi) = (Some(lo), Some(hi));
                    let ql = 64 * h + 32 * (t & 1);
                    u.qs_run = Some((run(bq, ql, 32), ql));
                    u.q_shift = Some(b.c_u32(4 * (t >> 1)));
                    let qh = 128 + 32 * h;
                    u.qh_run = Some((run(bq, qh, 32), qh));
                    u.qh_shift = Some(b.c_u32(2 * t));
                } else {
                    let t = b.addi(t0, ul);
                    // Scales sc[8h + 2t], sc[8h + 2t + 1]: word 48 + 2h + t/2 of the body
                    // (t0 even with count 2 or 4: word 48 + 2h + t0/2 + ul/2, shared).
                    let sc_word =
                        |half: Value| b.add(b.addi(b.shli(bq, 2), 48), b.add(b.shli(h, 1), half));
                    let pair = if count == 1 {
                        let word = load_word(b, buf, sc_word(b.shri(t, 1)));
                        b.shr(word, b.shli(b.andi(t, 1), 4))
                    } else {
                        let word = *d_words.borrow_mut().entry(100 + ul / 2).or_insert_with(|| {
                            load_word(b, buf, sc_word(b.addi(b.shri(t0, 1), ul / 2)))
                        });
                        b.shri(word, 16 * (ul % 2))
                    };
                    let (lo, hi) = q6k_scales(b, d, pair);
                    (u.scale, u.scale_hi) = (Some(lo), Some(hi));
                    if count == 1 {
                        let wq = b.add(wh, b.shli(b.andi(t, 1), 1));
                        u.qs_run = Some((run(wq, 0, 32), 0));
                    } else {
                        let ql = 32 * (ul & 1);
                        u.qs_run = Some((run(wh, ql, 32), ql));
                    }
                    u.q_shift = Some(b.shli(b.shri(t, 1), 2));
                    u.qh_run = Some((run(wqh, 0, 32), 0));
                    u.qh_shift = Some(b.shli(t, 1));
                }
                out.push(with_f16_scales(b, u, want_f16));
            }
        }
        f => unreachable!("aligned layout of {f}"),
    }
    out
}

/// Bits 0..4 of `hb` spread to bit 0 of each of 4 bytes (Q5_1's high bits of 4 elements).
fn spread_high_bits(b: &KernelBuilder, hb: Value) -> Value {
    let hb = b.andi(hb, 0xF);
    b.or(
        b.or(b.andi(hb, 1), b.shli(b.andi(hb, 2), 7)),
        b.or(b.shli(b.andi(hb, 4), 14), b.shli(b.andi(hb, 8), 21)),
    )
}

/// Q5_K's 4 values (0..32, so already valid signed bytes): the nibbles of `qs` at `q_shift`
/// with bit `qh_shift` of each `qh` byte as bit 4.
fn q5k_bytes(b: &KernelBuilder, qs: Value, qh: Value, q_shift: Value, qh_shift: Value) -> Value {
    let low = b.andi(b.shr(qs, q_shift), 0x0F0F_0F0F);
    let high = b.andi(b.shr(qh, qh_shift), 0x0101_0101);
    b.or(low, b.shli(high, 4))
}

/// Looks 4 packed nibbles (one per byte, 0..16) up in [`IQ4NL_VALUES`], giving 4 packed
/// signed bytes. The IR has no arrays, so the lookup is a multiplexer tree run on all 4 bytes
/// at once: bit k of every byte becomes a byte mask (0 or 0xFF; `* 0xFF` cannot carry across
/// bytes), level 0 picks between the table's neighbouring entries by bit 0 (`a ^ ((a ^ b) &
/// m)`, a constant `a ^ b`), each further level between the previous level's pairs by the
/// next bit: 15 selections of 4 bytes, about 48 integer operations per word (a constant array
/// indexed per byte would take 4 loads plus the byte packing).
fn iq4nl_bytes(b: &KernelBuilder, nib: Value) -> Value {
    let splat = |v: i8| u32::from(v as u8) * 0x0101_0101;
    let mask = |k: u32| {
        let bits = if k == 0 { nib } else { b.shri(nib, k) };
        b.muli(b.andi(bits, 0x0101_0101), 0xFF)
    };
    let m0 = mask(0);
    let mut level: Vec<Value> = IQ4NL_VALUES
        .chunks_exact(2)
        .map(|p| {
            let (a, c) = (splat(p[0]), splat(p[1]));
            b.xor(b.c_u32(a), b.andi(m0, a ^ c))
        })
        .collect();
    for k in 1..4 {
        let m = mask(k);
        level = level
            .chunks_exact(2)
            .map(|p| b.xor(p[0], b.and(b.xor(p[0], p[1]), m)))
            .collect();
    }
    level[0]
}

/// Q5_0's high bits rearranged so that bit `4c + k` of `qh` (element k of chunk c) lands on
/// bit `8k + chunk_bit(c)` ([`q5_0_chunk_bit`]): two delta swaps of the bit index (its bits 1
/// and 4, then 0 and 3), 8 bitwise operations per unit. Each chunk's high bits are then one
/// shift-and away from bit 4 of their bytes, instead of being spread one by one (4 masks, 3
/// shifts, 3 ors per chunk): every bitwise operation and shift runs on Valhall's SFU.
fn q5_0_qh_by_byte(b: &KernelBuilder, qh: Value) -> Value {
    let delta_swap = |x: Value, delta: u32, mask: u32| {
        let t = b.andi(b.xor(b.shri(x, delta), x), mask);
        b.xor(b.xor(x, t), b.shli(t, delta))
    };
    delta_swap(delta_swap(qh, 14, 0x0000_CCCC), 7, 0x00AA_00AA)
}

/// The bit of each byte of [`q5_0_qh_by_byte`] that holds chunk `c`'s high bits.
fn q5_0_chunk_bit(c: u32) -> u32 {
    ((c & 1) << 2) | ((c >> 2) << 1) | ((c >> 1) & 1)
}

/// Bit 4 of byte k: the high bit of element k of chunk `c`, from [`q5_0_qh_by_byte`].
fn q5_0_high_bits(b: &KernelBuilder, by_byte: Value, c: u32) -> Value {
    let f = q5_0_chunk_bit(c);
    let moved = match f.cmp(&4) {
        std::cmp::Ordering::Less => b.shli(by_byte, 4 - f),
        std::cmp::Ordering::Equal => by_byte,
        std::cmp::Ordering::Greater => b.shri(by_byte, f - 4),
    };
    b.andi(moved, 0x1010_1010)
}

/// Re-centres 4 packed bytes holding `bits`-bit unsigned values q to the signed bytes q - 2^(bits-1).
fn center_bytes(b: &KernelBuilder, q: Value, bits: u32) -> Value {
    // For each byte: q + 0x80 - half stays in 0..0x100 (q < 2^bits <= 0x80), so the word add
    // carries into no other byte; flipping bit 7 then subtracts 0x80 modulo 256, leaving the
    // two's-complement byte q - half. Two integer operations per word, and no multiply: the
    // former fill `x | ((x & top) * fill)` took an IMUL per word, which Valhall issues on
    // its SFU (Mesa 25.0.7 and 26.1.6: 32 of the Q5_0 decode GEMV's 38 IMULs, SFU 41 cycles
    // against load/store 45; docs/measurements/2026-12-06b-mali-decode-gemv.md).
    debug_assert!((1..=7).contains(&bits));
    let half = 1u32 << (bits - 1);
    let biased = b.add(q, b.c_u32((0x80 - half) * 0x0101_0101));
    b.xor(biased, b.c_u32(0x8080_8080))
}

impl Unit {
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Elements 4c..4c+4 (`c`: u32 in 0..8) as 4 packed signed bytes `q` (see [`Int8Scales`]).
    /// Only for quantized formats.
    pub fn word_i8(&self, b: &KernelBuilder, c: Value) -> Value {
        // Q4_0-style nibble formats: chunk c is nibble (c >> 2) of qs word (c & 3).
        self.word_i8_in(b, c, || b.andi(c, 3), || b.shli(b.shri(c, 2), 2))
    }

    /// [`Unit::word_i8`] of chunk `4 · half + c` (`half`: 0 or 1, `c` in 0..4), with the
    /// indices split so the driver sees a half's 4 qs words at constant offsets of one base
    /// (one wide load) in the nibble formats, where both halves share the words.
    pub fn word_i8_half(&self, b: &KernelBuilder, half: Value, c: u32) -> Value {
        let chunk = b.addi(b.shli(half, 2), c);
        self.word_i8_in(b, chunk, || b.c_u32(c), || b.shli(half, 2))
    }

    /// `word_i8` with `qs_word()` and `nib()` giving the nibble formats' qs word index and
    /// nibble shift.
    fn word_i8_in(
        &self,
        b: &KernelBuilder,
        c: Value,
        qs_word: impl Fn() -> Value,
        nib: impl Fn() -> Value,
    ) -> Value {
        assert!(
            self.qs_run.is_none(),
            "a unit opened by open_units takes constant chunk indices (word_i8_at)"
        );
        let buf = self.buffer;
        let c4 = b.shli(c, 2);
        match self.format {
            WeightFormat::Q8_0 => load_u32(b, buf, b.add(self.q_off.unwrap(), c4), self.q_align),
            WeightFormat::Q5_0 => {
                // Elements j = 4c..4c+4: nibble (c >> 2) of qs[4(c & 3) ..], bit j of qh.
                let word = load_u32(
                    b,
                    buf,
                    b.add(self.q_off.unwrap(), b.shli(qs_word(), 2)),
                    self.q_align,
                );
                let nib = b.andi(b.shr(word, nib()), 0x0F0F_0F0F);
                let hb = b.andi(b.shr(self.qh.unwrap(), c4), 0xF);
                // Spread the 4 high bits to bit 4 of each byte.
                let spread = b.or(
                    b.or(b.andi(hb, 1), b.shli(b.andi(hb, 2), 7)),
                    b.or(b.shli(b.andi(hb, 4), 14), b.shli(b.andi(hb, 8), 21)),
                );
                center_bytes(b, b.or(nib, b.shli(spread, 4)), 5)
            }
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                let word = load_u32(
                    b,
                    buf,
                    b.add(self.q_off.unwrap(), b.shli(qs_word(), 2)),
                    Align::Four,
                );
                let nib = b.andi(b.shr(word, nib()), 0x0F0F_0F0F);
                match self.qh {
                    Some(qh) => b.or(nib, b.shli(spread_high_bits(b, b.shr(qh, c4)), 4)),
                    None => nib,
                }
            }
            WeightFormat::Q4_0 => {
                // Elements 4c..4c+4: nibble (c >> 2) of qs[4(c & 3) ..].
                let word = load_u32(
                    b,
                    buf,
                    b.add(self.q_off.unwrap(), b.shli(qs_word(), 2)),
                    self.q_align,
                );
                let nib = b.andi(b.shr(word, nib()), 0x0F0F_0F0F);
                center_bytes(b, nib, 4)
            }
            WeightFormat::IQ4NL | WeightFormat::IQ4XS => {
                // Q4_0's nibbles, looked up in the value table instead of re-centred.
                let word = load_u32(
                    b,
                    buf,
                    b.add(self.q_off.unwrap(), b.shli(qs_word(), 2)),
                    self.q_align,
                );
                let nib = b.andi(b.shr(word, nib()), 0x0F0F_0F0F);
                iq4nl_bytes(b, nib)
            }
            WeightFormat::Q4K => {
                let word = load_u32(b, buf, b.add(self.q_off.unwrap(), c4), Align::Four);
                b.andi(b.shr(word, self.q_shift.unwrap()), 0x0F0F_0F0F)
            }
            WeightFormat::Q5K => {
                let word = load_u32(b, buf, b.add(self.q_off.unwrap(), c4), Align::Four);
                let qh = load_u32(b, buf, b.add(self.qh_off.unwrap(), c4), Align::Four);
                q5k_bytes(b, word, qh, self.q_shift.unwrap(), self.qh_shift.unwrap())
            }
            WeightFormat::Q6K => {
                let ql = load_u32(b, buf, b.add(self.q_off.unwrap(), c4), self.q_align);
                let qh = load_u32(b, buf, b.add(self.qh_off.unwrap(), c4), self.q_align);
                let low = b.andi(b.shr(ql, self.q_shift.unwrap()), 0x0F0F_0F0F);
                let high = b.andi(b.shr(qh, self.qh_shift.unwrap()), 0x0303_0303);
                center_bytes(b, b.or(low, b.shli(high, 4)), 6)
            }
            f => panic!("word_i8 on unquantized format {f}"),
        }
    }

    /// [`Unit::word_i8`]'s 4 quants as the floats `1 + u · 2^-bits` by bit operations alone
    /// ([`bytes_to_unit_floats`]), with `(bits, offset)` = [`unit_float_form`] of the format and
    /// `q = 2^bits · (f - 1) - offset` the quant the word held (signed quants biased by 128,
    /// flipping each byte's top bit).
    pub fn unit_floats(&self, b: &KernelBuilder, word_i8: Value) -> Value {
        let (bits, offset) = unit_float_form(self.format);
        let word = if offset == 0.0 {
            word_i8
        } else {
            b.xor(word_i8, b.c_u32(0x8080_8080))
        };
        bytes_to_unit_floats(b, word, bits)
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
            WeightFormat::BF16 => {
                // Each word holds elements 2i (low half) and 2i+1 (high half): a bf16 is the
                // high half of its f32, so shifting the low one up and masking the high one
                // gives the f32 bits exactly.
                let w = b.add(b.shri(self.base, 2), b.shli(c, 1));
                let w0 = b.load(self.buffer, w);
                let w1 = b.load(self.buffer, b.addi(w, 1));
                let bits = [
                    b.shli(w0, 16),
                    b.andi(w0, 0xFFFF_0000),
                    b.shli(w1, 16),
                    b.andi(w1, 0xFFFF_0000),
                ];
                b.bitcast(b.construct(&bits), v4)
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
            // bf16's 8-bit exponent does not fit f16's: through f32, one rounding (as F32).
            WeightFormat::F32 | WeightFormat::BF16 => b.convert(self.chunk_f32(b, c), h4),
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

    /// [`Unit::word_i8`] of a constant chunk `c`; from the loaded runs for units opened by
    /// [`open_units`].
    pub fn word_i8_at(&self, b: &KernelBuilder, c: u32) -> Value {
        assert!(c < 8, "chunk {c} of a unit");
        let Some((qs, r)) = &self.qs_run else {
            return self.word_i8(b, b.c_u32(c));
        };
        match self.format {
            WeightFormat::Q8_0 => qs.u32_at(b, r + 4 * c),
            WeightFormat::Q5_0 => {
                let word = qs.u32_at(b, r + 4 * (c & 3));
                let nib = b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F);
                let hb = b.andi(b.shri(self.qh.unwrap(), 4 * c), 0xF);
                let spread = b.or(
                    b.or(b.andi(hb, 1), b.shli(b.andi(hb, 2), 7)),
                    b.or(b.shli(b.andi(hb, 4), 14), b.shli(b.andi(hb, 8), 21)),
                );
                center_bytes(b, b.or(nib, b.shli(spread, 4)), 5)
            }
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                // Unsigned 0..32: valid signed bytes as they are (the min term is -m).
                let word = qs.u32_at(b, r + 4 * (c & 3));
                let nib = b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F);
                match self.qh {
                    Some(qh) => b.or(nib, b.shli(spread_high_bits(b, b.shri(qh, 4 * c)), 4)),
                    None => nib,
                }
            }
            WeightFormat::Q4_0 => {
                let word = qs.u32_at(b, r + 4 * (c & 3));
                let nib = b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F);
                center_bytes(b, nib, 4)
            }
            WeightFormat::IQ4NL | WeightFormat::IQ4XS => {
                let word = qs.u32_at(b, r + 4 * (c & 3));
                let nib = b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F);
                iq4nl_bytes(b, nib)
            }
            WeightFormat::Q4K => {
                let word = qs.u32_at(b, r + 4 * c);
                b.andi(b.shr(word, self.q_shift.unwrap()), 0x0F0F_0F0F)
            }
            WeightFormat::Q5K => {
                let (qh, rh) = self.qh_run.as_ref().expect("Q5_K units have a qh run");
                let word = qs.u32_at(b, r + 4 * c);
                let qh = qh.u32_at(b, rh + 4 * c);
                q5k_bytes(b, word, qh, self.q_shift.unwrap(), self.qh_shift.unwrap())
            }
            WeightFormat::Q6K => {
                let (qh, rh) = self.qh_run.as_ref().expect("Q6_K units have a qh run");
                let ql = qs.u32_at(b, r + 4 * c);
                let qh = qh.u32_at(b, rh + 4 * c);
                let low = b.andi(b.shr(ql, self.q_shift.unwrap()), 0x0F0F_0F0F);
                let high = b.andi(b.shr(qh, self.qh_shift.unwrap()), 0x0303_0303);
                center_bytes(b, b.or(low, b.shli(high, 4)), 6)
            }
            f => panic!("word_i8_at on unquantized format {f}"),
        }
    }

    /// Chunk `c`'s 4 quants as unsigned packed bytes and the offset that centres them (q -
    /// offset is the signed quant), for the formats that store them offset (Q5_0, Q6_K,
    /// Q4_0) and were opened by [`open_units`]; `None` for the others. The f32 path converts
    /// these bytes and subtracts the offset as floats (exact for small integers, so the
    /// product with the scale is the CPU dequantizer's), which takes the centring's
    /// bitwise operations off Valhall's SFU; Q5_0's high bits come from
    /// [`q5_0_qh_by_byte`] with one shift-and and join the nibbles with an add.
    fn word_u8_at(&self, b: &KernelBuilder, c: u32) -> Option<(Value, f32)> {
        let (qs, r) = self.qs_run.as_ref()?;
        match self.format {
            WeightFormat::Q5_0 => {
                let by_byte = self.qh_by_byte?;
                let word = qs.u32_at(b, r + 4 * (c & 3));
                let nib = b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F);
                Some((b.add(nib, q5_0_high_bits(b, by_byte, c)), 16.0))
            }
            WeightFormat::Q4_0 => {
                let word = qs.u32_at(b, r + 4 * (c & 3));
                Some((b.andi(b.shri(word, 4 * (c >> 2)), 0x0F0F_0F0F), 8.0))
            }
            WeightFormat::Q6K => {
                let (qh, rh) = self.qh_run.as_ref()?;
                let ql = qs.u32_at(b, r + 4 * c);
                let qh = qh.u32_at(b, rh + 4 * c);
                let low = b.andi(b.shr(ql, self.q_shift.unwrap()), 0x0F0F_0F0F);
                let high = b.andi(b.shr(qh, self.qh_shift.unwrap()), 0x0303_0303);
                Some((b.or(low, b.shli(high, 4)), 32.0))
            }
            _ => None,
        }
    }

    /// [`Unit::chunk_f32`] of a constant chunk `c` (any unit).
    pub fn chunk_f32_at(&self, b: &KernelBuilder, c: u32) -> Value {
        if self.qs_run.is_none() {
            return self.chunk_f32(b, b.c_u32(c));
        }
        let v4 = Type::vec(Scalar::F32, 4);
        let scale = self.chunk_scale_at(c, self.scale.unwrap(), self.scale_hi);
        if let Some((word, offset)) = self.word_u8_at(b, c) {
            let q = b.convert(unsigned_bytes_to_uvec4(b, word), v4);
            return b.precise(|| {
                let centred = b.sub(q, b.splat(b.c_f32(offset), 4));
                b.mul(b.splat(scale, 4), centred)
            });
        }
        let q = b.convert(signed_bytes_to_ivec4(b, self.word_i8_at(b, c)), v4);
        b.precise(|| {
            let v = b.mul(b.splat(scale, 4), q);
            match self.min {
                Some(m) => b.sub(v, b.splat(m, 4)),
                None => v,
            }
        })
    }

    /// [`Unit::chunk_f16`] of a constant chunk `c` (any unit).
    pub fn chunk_f16_at(&self, b: &KernelBuilder, c: u32) -> Value {
        if self.qs_run.is_none() {
            return self.chunk_f16(b, b.c_u32(c));
        }
        let h4 = Type::vec(Scalar::F16, 4);
        let scale_h = self
            .scale_h
            .expect("chunk_f16_at needs a unit opened with want_f16");
        let q = b.convert(signed_bytes_to_ivec4(b, self.word_i8_at(b, c)), h4);
        let scale = self.chunk_scale_at(c, scale_h, self.scale_hi_h);
        match self.min_h {
            Some(m) => b.fma(b.splat(scale, 4), q, b.neg(b.splat(m, 4))),
            None => b.mul(b.splat(scale, 4), q),
        }
    }

    fn chunk_scale_at(&self, c: u32, lo: Value, hi: Option<Value>) -> Value {
        match hi {
            Some(hi) if c >= 4 => hi,
            _ => lo,
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

// ---- the activations' side of the int8 dot-product path ----------------------------------

/// The `(bits, offset)` of [`Unit::unit_floats`] for a format: formats that store unsigned
/// quants (those with a min) keep their width and no offset; signed ones are biased by 128
/// into 8 bits.
pub fn unit_float_form(format: WeightFormat) -> (u32, f32) {
    match format {
        WeightFormat::Q4K | WeightFormat::Q4_1 => (4, 0.0),
        WeightFormat::Q5K | WeightFormat::Q5_1 => (5, 0.0),
        _ => (8, 128.0),
    }
}

/// Quantizes 32 activations (8 vec4<f32>) like ggml's Q8_0 (Q8_1 with `with_sum`): returns
/// the 8 packed signed words, the scale d and, if `with_sum`, d * Σq (for formats with a min
/// term). The CPU reference quantizes the same way (`gemm::reference`'s int8 math).
pub fn quantize_unit_q8(
    b: &KernelBuilder,
    chunks: &[Value],
    with_sum: bool,
) -> (Vec<Value>, Value, Value) {
    let amax4 = chunks[1..]
        .iter()
        .fold(b.abs(chunks[0]), |a, &c| b.max(a, b.abs(c)));
    let amax = b.max(
        b.max(b.extract(amax4, 0), b.extract(amax4, 1)),
        b.max(b.extract(amax4, 2), b.extract(amax4, 3)),
    );
    let (words, d) = quantize_chunks_q8(b, chunks, amax);
    let sum = if with_sum {
        b.mul(d, b.convert(quants_sum(b, &words), Type::F32))
    } else {
        b.c_f32(0.0)
    };
    (words, d, sum)
}

/// The quantization of [`quantize_unit_q8`] with the chunks' `amax` already known (the GEMM's
/// half-unit staging meets two threads' maxima first): the packed signed words and d.
pub fn quantize_chunks_q8(b: &KernelBuilder, chunks: &[Value], amax: Value) -> (Vec<Value>, Value) {
    let d = b.div(amax, b.c_f32(127.0));
    let id = b.select(b.ne(d, b.c_f32(0.0)), b.div(b.c_f32(1.0), d), b.c_f32(0.0));
    let idv = b.splat(id, 4);
    let uv4 = Type::vec(Scalar::U32, 4);
    let shifts = b.construct(&[b.c_u32(0), b.c_u32(8), b.c_u32(16), b.c_u32(24)]);
    let words: Vec<Value> = chunks
        .iter()
        .map(|&c| {
            let q = b.convert(b.round_even(b.mul(c, idv)), Type::vec(Scalar::I32, 4));
            let u = b.shl(b.and(b.bitcast(q, uv4), b.const_bits(uv4, 0xFF)), shifts);
            let (l0, l1, l2, l3) = (
                b.extract(u, 0),
                b.extract(u, 1),
                b.extract(u, 2),
                b.extract(u, 3),
            );
            b.or(b.or(l0, l1), b.or(l2, l3))
        })
        .collect();
    (words, d)
}

/// Σq of packed signed words (i32): dot products with all-ones bytes.
pub fn quants_sum(b: &KernelBuilder, words: &[Value]) -> Value {
    let ones = b.c_u32(0x0101_0101);
    words[1..]
        .iter()
        .fold(b.dot4x8(words[0], ones, DotSign::Signed), |s, &w| {
            b.add(s, b.dot4x8(w, ones, DotSign::Signed))
        })
}

/// `acc` plus one unit's contribution to a dot product of int8 activations (`xw`, scale `dx`,
/// `sx` = dx·Σq from [`quantize_unit_q8`]) with a weight unit's packed words `ww` and scales:
/// `dx·(lo·dot(x[0..16], q[0..16]) + hi·dot(x[16..32], q[16..32])) - min·sx` (see
/// [`Int8Scales`]).
pub fn int8_unit_fma(
    b: &KernelBuilder,
    acc: Value,
    xw: &[Value],
    dx: Value,
    sx: Value,
    ww: &[Value],
    scales: Int8Scales,
) -> Value {
    let dot = |range: std::ops::Range<usize>| {
        range
            .map(|c| b.dot4x8(xw[c], ww[c], DotSign::Signed))
            .reduce(|a, d| b.add(a, d))
            .expect("a non-empty range of chunks")
    };
    let (d_lo, d_hi) = (dot(0..4), dot(4..8));
    let t = match scales.hi {
        Some(hi) => {
            let lo_part = b.mul(scales.lo, b.convert(d_lo, Type::F32));
            b.fma(hi, b.convert(d_hi, Type::F32), lo_part)
        }
        None => b.mul(scales.lo, b.convert(b.add(d_lo, d_hi), Type::F32)),
    };
    let a = b.fma(dx, t, acc);
    match scales.min {
        Some(min) => b.fma(b.neg(min), sx, a),
        None => a,
    }
}
