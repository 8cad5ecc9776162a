//! KV-cache write: the ubatch's K (or V) rows, f32, rounded to f16 and stored at their
//! positions in the cache.
//!
//! Cache layout (shared with [`super::attention`]): u32 words holding f16 pairs, element `e`
//! of position `p` at half index `p·kv_width + e` (low half of a word first), so the cache
//! needs no 16-bit storage feature. `kv_width` (= n_kv_heads·head_dim) is even.
//!
//! Contract with the runtime:
//! - bindings: 0 `src` f32 [m × kv_width] (read), 1 `cache` u32 words (written; rows
//!   `pos0 .. pos0+m`; words past the bound range are skipped, never written);
//! - push constants ([`KvWritePush`], 8 bytes): `m`, `pos0`;
//! - grid `[ceil(kv_width/2 / (vector_width·threads)), m, 1]`.
//!
//! Rounding is round-to-nearest-even with subnormals, infinities and NaN handled exactly as
//! `half::f16::from_f32` does, computed with integer operations ([`f32_to_f16_bits`]): the
//! rounding of `packHalf2x16`/`OpFConvert` to f16 is implementation-defined in Vulkan (some
//! drivers truncate or flush subnormals), and the cache contents must not depend on the GPU.

use half::f16;
use serde::{Deserialize, Serialize};

use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type, Value};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_SRC: u32 = 0;
pub const BINDING_CACHE: u32 = 1;

/// Writes `m` rows of `kv_width` values into the f16 cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvWriteWorkload {
    pub m: u32,
    pub kv_width: u32,
}

impl KvWriteWorkload {
    /// Bytes of the cache for `positions` positions.
    pub fn cache_bytes(&self, positions: u64) -> u64 {
        positions * u64::from(self.kv_width) * 2
    }
}

/// Push constants: `m`, `pos0` (u32 each, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvWritePush {
    pub m: u32,
    pub pos0: u32,
}

impl KvWritePush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.pos0])
    }
}

/// Each thread converts `vector_width` words (2 or 4 values) of one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvWriteSchedule {
    pub threads: u32,
    /// Words per thread: 1 (8-byte loads) or 2 (16-byte loads; needs kv_width % 4 == 0).
    pub vector_width: u32,
}

impl KvWriteSchedule {
    pub fn name(&self, w: &KvWriteWorkload) -> String {
        format!(
            "kv_write_w{}_t{}_v{}",
            w.kv_width, self.threads, self.vector_width
        )
    }

    fn row_vectors(&self, w: &KvWriteWorkload) -> u32 {
        w.kv_width / 2 / self.vector_width
    }

    pub fn validate(&self, w: &KvWriteWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if ![1, 2].contains(&self.vector_width) {
            return bad(format!("vector_width {} is not 1 or 2", self.vector_width));
        }
        if w.kv_width % (2 * self.vector_width) != 0 {
            return bad(format!(
                "kv_width {} is not a multiple of {}",
                w.kv_width,
                2 * self.vector_width
            ));
        }
        check_threads(self.threads, caps)?;
        if self.row_vectors(w).div_ceil(self.threads) > MAX_GRID_DIM {
            return bad("too many workgroups per row".into());
        }
        Ok(())
    }
}

pub fn validate_workload(w: &KvWriteWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.kv_width == 0 {
        return bad("m and kv_width must be at least 1".into());
    }
    if w.kv_width % 2 != 0 {
        return bad(format!(
            "kv_width {} is odd: the cache packs f16 pairs",
            w.kv_width
        ));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!("m = {} exceeds the grid limit {MAX_GRID_DIM}", w.m));
    }
    if u64::from(w.m) * u64::from(w.kv_width) > u64::from(u32::MAX) {
        return bad("the source is too large for 32-bit indexing".into());
    }
    Ok(())
}

pub fn dispatch_grid(w: &KvWriteWorkload, s: &KvWriteSchedule) -> [u32; 3] {
    [s.row_vectors(w).div_ceil(s.threads), w.m, 1]
}

pub fn search_space(w: &KvWriteWorkload, caps: &DeviceCaps) -> Vec<KvWriteSchedule> {
    let mut out = Vec::new();
    for vector_width in [1, 2] {
        for threads in [32, 64, 128, 256] {
            let s = KvWriteSchedule {
                threads,
                vector_width,
            };
            if w.kv_width % (2 * vector_width) == 0
                && threads > 2 * s.row_vectors(w).next_power_of_two().max(32)
            {
                continue;
            }
            if s.validate(w, caps).is_ok() {
                out.push(s);
            }
        }
    }
    out
}

/// 16-byte loads where the width allows; 64 threads.
pub fn default_schedule(w: &KvWriteWorkload, caps: &DeviceCaps) -> KvWriteSchedule {
    let s = KvWriteSchedule {
        threads: 64,
        vector_width: if w.kv_width % 4 == 0 { 2 } else { 1 },
    };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}

pub fn instantiate(
    w: &KvWriteWorkload,
    s: &KvWriteSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(w, s), caps)
}

/// The kernel's IR. The pair must validate.
pub fn kernel_ir(w: &KvWriteWorkload, s: &KvWriteSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let vw = s.vector_width;
    let src = b.buffer(
        BINDING_SRC,
        "src",
        Type::vec(Scalar::F32, 2 * vw),
        Access::ReadOnly,
    );
    let cache = b.buffer(
        BINDING_CACHE,
        "cache",
        Type::vec(Scalar::U32, vw),
        Access::WriteOnly,
    );
    let p_m = b.push_field("m", Type::U32);
    let p_pos0 = b.push_field("pos0", Type::U32);
    let n = s.row_vectors(w);
    let row = b.builtin(Builtin::WorkgroupId(1));
    let col = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), s.threads),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let inside = b.logical_and(b.lt(row, b.push(p_m)), b.lt(col, b.c_u32(n)));
    b.if_(inside, || {
        let v = b.load(src, b.add(b.muli(row, n), col));
        let words: Vec<Value> = (0..vw)
            .map(|i| {
                let lo = f32_to_f16_bits(&b, b.extract(v, 2 * i));
                let hi = f32_to_f16_bits(&b, b.extract(v, 2 * i + 1));
                b.or(lo, b.shli(hi, 16))
            })
            .collect();
        let dst = b.add(b.muli(b.add(b.push(p_pos0), row), n), col);
        // A cache bound shorter than pos0 + m loses the rows past its end instead of
        // writing out of bounds.
        b.if_(b.lt(dst, b.array_length(cache)), || {
            b.store(cache, dst, b.construct(&words))
        });
    });
    b.finish()
}

/// The f16 bits (low 16 bits of a u32) of an f32, rounded to nearest even, in integer
/// arithmetic: bit-identical to `half::f16::from_f32` for every input, including
/// subnormal results, overflow to infinity and NaN (quiet, payload truncated).
///
/// Every path is computed and the result picked by selects, with shift amounts clamped so
/// that no lane ever shifts by 32 or more.
pub fn f32_to_f16_bits(b: &KernelBuilder, x: Value) -> Value {
    let bits = b.bitcast(x, Type::U32);
    let sign = b.andi(b.shri(bits, 16), 0x8000);
    let abs = b.andi(bits, 0x7FFF_FFFF);
    let mant = b.andi(abs, 0x007F_FFFF);
    let exp = b.shri(abs, 23);
    // Normal results: rebias the exponent (127 → 15) and round the 13 dropped mantissa bits
    // to nearest even; a carry ripples into the exponent (up to infinity) as it should.
    let odd = b.andi(b.shri(abs, 13), 1);
    let normal = b.shri(
        b.sub(b.add(abs, b.addi(odd, 0x0FFF)), b.c_u32((127 - 15) << 23)),
        13,
    );
    // Subnormal results (|x| < 2⁻¹⁴): the value in units of 2⁻²⁴ is (1.mant)·2^(exp-126),
    // i.e. the 24-bit significand shifted right by 126 - exp, rounded to nearest even.
    let sig = b.ori(mant, 0x0080_0000);
    let shift = b.sub(b.c_u32(126), b.min(b.max(exp, b.c_u32(102)), b.c_u32(125)));
    let q = b.shr(sig, shift);
    let rem = b.sub(sig, b.shl(q, shift));
    let halfway = b.shl(b.c_u32(1), b.sub(shift, b.c_u32(1)));
    let up = b.logical_or(
        b.gt(rem, halfway),
        b.logical_and(b.eq(rem, halfway), b.eq(b.andi(q, 1), b.c_u32(1))),
    );
    let subnormal = b.add(q, b.select(up, b.c_u32(1), b.c_u32(0)));
    // NaN: quiet bit set, top mantissa bits kept; infinity and overflow: 0x7C00.
    let nan = b.or(b.c_u32(0x7E00), b.shri(mant, 13));
    let out = b.select(
        b.lt(abs, b.c_u32(0x3880_0000)),
        // Below 2⁻²⁵ (and exactly 2⁻²⁵, a tie towards the even 0) the result is zero.
        b.select(b.le(abs, b.c_u32(0x3300_0000)), b.c_u32(0), subnormal),
        b.select(
            b.gt(abs, b.c_u32(0x7F80_0000)),
            nan,
            // 65520 and above (including infinity) round to infinity.
            b.select(b.ge(abs, b.c_u32(0x477F_F000)), b.c_u32(0x7C00), normal),
        ),
    );
    b.or(sign, out)
}

// ---- CPU reference ------------------------------------------------------------------------

/// f16 bits of a value as the cache stores it.
pub fn f16_bits(v: f32) -> u16 {
    f16::from_f32(v).to_bits()
}

/// Packs f32 values (an even count) into cache words: value 2i in the low half of word i.
pub fn pack_f16_words(values: &[f32]) -> Vec<u32> {
    assert!(
        values.len() % 2 == 0,
        "pack_f16_words: odd number of values"
    );
    values
        .chunks(2)
        .map(|p| u32::from(f16_bits(p[0])) | (u32::from(f16_bits(p[1])) << 16))
        .collect()
}

/// The f32 values of cache words (inverse of [`pack_f16_words`] up to the rounding).
pub fn unpack_f16_words(words: &[u32]) -> Vec<f32> {
    words
        .iter()
        .flat_map(|&w| {
            [
                f16::from_bits(w as u16).to_f32(),
                f16::from_bits((w >> 16) as u16).to_f32(),
            ]
        })
        .collect()
}

/// The reference of a KV write: `cache` (words) with rows `pos0 .. pos0+m` replaced by the
/// f16-rounded first `m` rows of `src`; rows past the end of `cache` are dropped, as the
/// kernel drops them. The kernel must match bit for bit.
pub fn reference(w: &KvWriteWorkload, m: usize, pos0: u32, src: &[f32], cache: &mut [u32]) {
    let kw = w.kv_width as usize;
    assert!(
        src.len() >= m * kw,
        "kv_write reference: src needs {m} rows"
    );
    let words = pack_f16_words(&src[..m * kw]);
    let start = pos0 as usize * kw / 2;
    for (i, word) in words.into_iter().enumerate() {
        if let Some(slot) = cache.get_mut(start + i) {
            *slot = word;
        }
    }
}
