//! KV-cache write: the ubatch's K (or V) rows, f32, stored at their positions in the cache
//! in its element type (`crate::kv_type`: f32, f16 or q8_0).
//!
//! Cache layout (shared with [`super::attention`]): u32 words, position-major, each position
//! `ty.row_words(kv_width)` words (see [`KvType`]): f32 bits; f16 pairs (element `e` of
//! position `p` at half index `p·kv_width + e`, low half of a word first), so the cache
//! needs no 16-bit storage feature; or Q8_0's quants then its f16 scales.
//!
//! Contract with the runtime:
//! - bindings: 0 `src` f32 [m × kv_width] (read), 1 `cache` u32 words (written; rows
//!   `pos0 .. pos0+m`; positions past the bound range are skipped, never written);
//! - push constants ([`KvWritePush`], 8 bytes): `m`, `pos0`;
//! - grid `[ceil(units / threads), m, 1]`, a unit being `vector_width` words of f16 pairs,
//!   `2·vector_width` f32 words, or (q8_0) a pair of blocks: one thread owns a whole f16
//!   scale word, so no two threads write the same word.
//!
//! f16 rounding is round-to-nearest-even with subnormals, infinities and NaN handled exactly
//! as `half::f16::from_f32` does, computed with integer operations ([`f32_to_f16_bits`]): the
//! rounding of `packHalf2x16`/`OpFConvert` to f16 is implementation-defined in Vulkan (some
//! drivers truncate or flush subnormals), and the cache contents must not depend on the GPU.
//! Q8_0 quantizes as ggml does (`dequant::ir::quantize_unit_q8`, the GEMV's X quantizer);
//! its `1/d` is a division, correctly rounded on lavapipe, within Vulkan's 2.5 ulp elsewhere.
//!
//! A q8_0 write may rotate first (`rotation` = n > 0, llama.cpp's Walsh-Hadamard rotation
//! around a quantized cache, [`super::hadamard`]): each run of n values of the row is
//! multiplied by the orthonormal Hadamard matrix of size n before its blocks are quantized.
//! Then [`super::hadamard::lanes`]`(n)` threads share a run through workgroup memory (16 or
//! 32 values each: a whole run in one thread's registers spills on Mali) and its first n/64
//! lanes quantize a block pair each; the grid counts runs, `threads / lanes` a workgroup.

use half::f16;
use serde::{Deserialize, Serialize};

use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::dequant::ir::quantize_unit_q8;
use crate::ir::{Access, Buffer, Builtin, KernelBuilder, Module, PushField, Scalar, Type, Value};
use crate::kernel::CompiledKernel;
use crate::kv_type::{KvType, Q8_0_BLOCK};
use crate::refusal::Refusal;

pub const BINDING_SRC: u32 = 0;
pub const BINDING_CACHE: u32 = 1;

/// Writes `m` rows of `kv_width` values into a cache of type `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvWriteWorkload {
    pub m: u32,
    pub kv_width: u32,
    /// The cache's element type; omitted from the serialization at f16 (the only type before
    /// it existed), so stored keys stay valid.
    #[serde(default, skip_serializing_if = "is_f16")]
    pub ty: KvType,
    /// q8_0 only: the Hadamard run size each row is rotated by before it is quantized (see the
    /// module documentation); 0, no rotation, is left out of the serialization.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rotation: u32,
}

fn is_f16(t: &KvType) -> bool {
    *t == KvType::F16
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl KvWriteWorkload {
    /// An f16 cache's write (the default type).
    pub fn f16(m: u32, kv_width: u32) -> Self {
        KvWriteWorkload {
            m,
            kv_width,
            ty: KvType::F16,
            rotation: 0,
        }
    }

    /// A write into a cache of `ty`, unrotated.
    pub fn new(m: u32, kv_width: u32, ty: KvType) -> Self {
        KvWriteWorkload {
            m,
            kv_width,
            ty,
            rotation: 0,
        }
    }

    /// This write with each run of `n` values rotated before it is quantized (0: none).
    pub fn with_rotation(self, n: u32) -> Self {
        KvWriteWorkload {
            rotation: n,
            ..self
        }
    }

    /// Bytes of the cache for `positions` positions.
    pub fn cache_bytes(&self, positions: u64) -> u64 {
        positions * u64::from(self.ty.row_bytes(self.kv_width))
    }

    /// Q8_0 blocks per row.
    fn blocks(&self) -> u32 {
        self.kv_width / Q8_0_BLOCK as u32
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
        let ty = match w.ty {
            KvType::F16 => String::new(),
            t => format!("_{t}"),
        };
        let ty = match w.rotation {
            0 => ty,
            n => format!("{ty}_r{n}"),
        };
        format!(
            "kv_write{ty}_w{}_t{}_v{}",
            w.kv_width, self.threads, self.vector_width
        )
    }

    /// Units of one row (see the module documentation).
    fn row_vectors(&self, w: &KvWriteWorkload) -> u32 {
        match w.ty {
            KvType::Q8_0 if w.rotation > 0 => w.kv_width / w.rotation,
            KvType::Q8_0 => w.blocks().div_ceil(2),
            _ => w.kv_width / 2 / self.vector_width,
        }
    }

    /// Workgroups per row: a rotated write's runs take [`super::hadamard::lanes`] threads each.
    fn row_groups(&self, w: &KvWriteWorkload) -> u32 {
        match w.ty {
            KvType::Q8_0 if w.rotation > 0 => {
                self.row_vectors(w)
                    .div_ceil(super::hadamard::Split::runs_per_group(
                        w.rotation,
                        self.threads,
                    ))
            }
            _ => self.row_vectors(w).div_ceil(self.threads),
        }
    }

    pub fn validate(&self, w: &KvWriteWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if ![1, 2].contains(&self.vector_width) {
            return bad(format!("vector_width {} is not 1 or 2", self.vector_width));
        }
        if w.ty == KvType::Q8_0 && self.vector_width != 1 {
            return bad("a q8_0 write takes two whole blocks per thread: vector_width 1".into());
        }
        if w.kv_width % (2 * self.vector_width) != 0 {
            return bad(format!(
                "kv_width {} is not a multiple of {}",
                w.kv_width,
                2 * self.vector_width
            ));
        }
        check_threads(self.threads, caps)?;
        if w.rotation > 0 {
            let n = w.rotation;
            if self.threads % super::hadamard::lanes(n) != 0 {
                return bad(format!(
                    "{} threads are not whole runs of {} lanes",
                    self.threads,
                    super::hadamard::lanes(n)
                ));
            }
            let bytes = super::hadamard::split_shared_bytes(n, self.threads, self.row_vectors(w));
            if bytes > caps.max_shared_memory_bytes {
                return bad("the runs exceed the workgroup memory".into());
            }
        }
        if self.row_groups(w) > MAX_GRID_DIM {
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
    if w.ty == KvType::Q8_0 && w.kv_width % Q8_0_BLOCK as u32 != 0 {
        return bad(format!(
            "kv_width {} is not whole q8_0 blocks of {Q8_0_BLOCK}",
            w.kv_width
        ));
    }
    if w.rotation > 0 {
        if w.ty != KvType::Q8_0 {
            return bad(format!(
                "a rotated write is for a q8_0 cache, not {}: unquantized caches stay as they are",
                w.ty
            ));
        }
        if !super::hadamard::valid_run(w.rotation) || w.rotation < 64 {
            return bad(format!(
                "a Hadamard rotation of {} values: a power of two from 64 to {} (whole \
                 scale words per thread)",
                w.rotation,
                super::hadamard::MAX_RUN
            ));
        }
        if w.kv_width % w.rotation != 0 {
            return bad(format!(
                "kv_width {} is not whole Hadamard runs of {}",
                w.kv_width, w.rotation
            ));
        }
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
    [s.row_groups(w), w.m, 1]
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

/// 16-byte loads where the width allows (q8_0: a block pair per thread); 64 threads.
pub fn default_schedule(w: &KvWriteWorkload, caps: &DeviceCaps) -> KvWriteSchedule {
    let s = KvWriteSchedule {
        threads: 64,
        vector_width: if w.kv_width % 4 == 0 && w.ty != KvType::Q8_0 {
            2
        } else {
            1
        },
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
    match w.ty {
        KvType::F16 => f16_kernel(w, s),
        KvType::F32 => f32_kernel(w, s),
        KvType::Q8_0 if w.rotation > 0 => q8_0_rotated_kernel(w, s),
        KvType::Q8_0 => q8_0_kernel(w, s),
    }
}

/// f32: the values' bits, `2·vector_width` per thread.
fn f32_kernel(w: &KvWriteWorkload, s: &KvWriteSchedule) -> Module {
    let lanes = 2 * s.vector_width;
    row_copy_kernel(
        w,
        s,
        lanes,
        |_, v| v,
        |b, v| b.bitcast(*v, Type::vec(Scalar::U32, lanes)),
    )
}

/// q8_0: each thread quantizes two blocks (the second absent at the end of an odd count)
/// and writes their quants and the one word of their two f16 scales.
fn q8_0_kernel(w: &KvWriteWorkload, s: &KvWriteSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let Q8Io {
        src,
        cache,
        p_m,
        p_pos0,
    } = Q8Io::declare(&b);
    let pairs = s.row_vectors(w);
    let blocks = w.blocks();
    let row_words = w.ty.row_words(w.kv_width);
    let row = b.builtin(Builtin::WorkgroupId(1));
    let pair = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), s.threads),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let inside = b.logical_and(b.lt(row, b.push(p_m)), b.lt(pair, b.c_u32(pairs)));
    b.if_(inside, || {
        let pos = b.add(b.push(p_pos0), row);
        // A cache bound shorter than pos0 + m loses the rows past its end.
        let fits = b.lt(pos, b.div(b.array_length(cache), b.c_u32(row_words)));
        b.if_(fits, || {
            let base = b.muli(pos, row_words);
            let src_row = b.muli(row, w.kv_width / 4);
            let d_bits: Vec<Value> = (0..2u32)
                .map(|i| {
                    let block = b.addi(b.shli(pair, 1), i);
                    // The last pair of an odd count has no second block: its scale half is 0.
                    let present = b.lt(block, b.c_u32(blocks));
                    let d = b.var_init("d", b.c_u32(0));
                    b.if_(present, || {
                        let at = b.add(src_row, b.muli(block, 8));
                        let chunks: Vec<Value> =
                            (0..8).map(|c| b.load(src, b.addi(at, c))).collect();
                        let d_block =
                            store_q8_0_block(&b, cache, &chunks, || b.add(base, b.muli(block, 8)));
                        b.store_var(d, d_block);
                    });
                    b.load_var(d)
                })
                .collect();
            let scale_at = b.add(b.addi(base, w.kv_width / 4), pair);
            b.store(cache, scale_at, b.or(d_bits[0], b.shli(d_bits[1], 16)));
        });
    });
    b.finish()
}

/// The bindings and push constants both q8_0 writes declare.
struct Q8Io {
    src: Buffer,
    cache: Buffer,
    p_m: PushField,
    p_pos0: PushField,
}

impl Q8Io {
    fn declare(b: &KernelBuilder) -> Q8Io {
        Q8Io {
            src: b.buffer(
                BINDING_SRC,
                "src",
                Type::vec(Scalar::F32, 4),
                Access::ReadOnly,
            ),
            cache: b.buffer(BINDING_CACHE, "cache", Type::U32, Access::WriteOnly),
            p_m: b.push_field("m", Type::U32),
            p_pos0: b.push_field("pos0", Type::U32),
        }
    }
}

/// Quantizes one 32-value block (`chunks`, its eight vec4s) as q8_0, stores its eight quant
/// words from word `at()` of the cache (`at` is called after the quantization, where the
/// kernels have always computed it) and returns its scale as f16 bits.
fn store_q8_0_block(
    b: &KernelBuilder,
    cache: Buffer,
    chunks: &[Value],
    at: impl FnOnce() -> Value,
) -> Value {
    let (words, scale, _) = quantize_unit_q8(b, chunks, false);
    let at = at();
    for (c, &word) in words.iter().enumerate() {
        b.store(cache, b.addi(at, c as u32), word);
    }
    f32_to_f16_bits(b, scale)
}

/// q8_0 with the rotation: the [`super::hadamard::lanes`] threads of a run rotate it together
/// ([`super::hadamard::Split`], ggml's order, bit for bit the reference's), store it back to
/// workgroup memory and, after a barrier, lane `l < n/64` quantizes the run's block pair `l`
/// as [`q8_0_kernel`] does, storing its quants and its scale word.
fn q8_0_rotated_kernel(w: &KvWriteWorkload, s: &KvWriteSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let Q8Io {
        src,
        cache,
        p_m,
        p_pos0,
    } = Q8Io::declare(&b);
    let n = w.rotation;
    let runs = s.row_vectors(w);
    let row_words = w.ty.row_words(w.kv_width);
    let split = super::hadamard::Split::new(&b, n, s.threads, runs);
    let row = b.builtin(Builtin::WorkgroupId(1));
    let run = split.run(&b);
    let pos = b.add(b.push(p_pos0), row);
    // A cache bound shorter than pos0 + m loses the rows past its end. Every thread reaches
    // the barriers; `active` only guards the memory accesses.
    let fits = b.lt(pos, b.div(b.array_length(cache), b.c_u32(row_words)));
    let active = b.logical_and(
        b.logical_and(b.lt(row, b.push(p_m)), fits),
        b.lt(run, b.c_u32(runs)),
    );
    let at = b.add(b.muli(row, w.kv_width / 4), b.muli(run, n / 4));
    let (stage, stage_run) = split.stage(&b);
    split.rotate(
        &b,
        active,
        |c| b.load(src, b.add(at, c)),
        |c, v| b.store_shared(stage, b.add(stage_run, c), v),
    );
    b.barrier();
    let pair = split.lane();
    b.if_(b.logical_and(active, b.lt(pair, b.c_u32(n / 64))), || {
        let base = b.muli(pos, row_words);
        // Quants of block k of the run at word (run·n/32 + k)·8 of the position.
        let q_at = b.add(base, b.muli(run, n / 4));
        let d_bits: Vec<Value> = (0..2u32)
            .map(|i| {
                let block = b.addi(b.shli(pair, 1), i);
                let chunks: Vec<Value> = (0..8)
                    .map(|c| b.load_shared(stage, b.add(stage_run, b.addi(b.muli(block, 8), c))))
                    .collect();
                store_q8_0_block(&b, cache, &chunks, || b.add(q_at, b.muli(block, 8)))
            })
            .collect();
        let scale_at = b.add(b.addi(base, w.kv_width / 4), b.muli(run, n / 64));
        b.store(
            cache,
            b.add(scale_at, pair),
            b.or(d_bits[0], b.shli(d_bits[1], 16)),
        );
    });
    b.finish()
}

/// f16: pairs rounded in integer arithmetic ([`f32_to_f16_bits`]).
fn f16_kernel(w: &KvWriteWorkload, s: &KvWriteSchedule) -> Module {
    let vw = s.vector_width;
    row_copy_kernel(
        w,
        s,
        vw,
        |b, v| -> Vec<Value> {
            (0..vw)
                .map(|i| {
                    let lo = f32_to_f16_bits(b, b.extract(v, 2 * i));
                    let hi = f32_to_f16_bits(b, b.extract(v, 2 * i + 1));
                    b.or(lo, b.shli(hi, 16))
                })
                .collect()
        },
        |b, words| b.construct(words),
    )
}

/// The f32 and f16 writes: thread `col` of row `row` loads `2·vector_width` values of the new
/// row, `convert`s them, and stores them `pack`ed as `cache_lanes` words at row `pos0 + row`
/// of the cache (packed inside the bounds check, where the store is). A cache bound shorter
/// than pos0 + m loses the rows past its end instead of writing out of bounds.
fn row_copy_kernel<T>(
    w: &KvWriteWorkload,
    s: &KvWriteSchedule,
    cache_lanes: u32,
    convert: impl Fn(&KernelBuilder, Value) -> T,
    pack: impl Fn(&KernelBuilder, &T) -> Value,
) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let src = b.buffer(
        BINDING_SRC,
        "src",
        Type::vec(Scalar::F32, 2 * s.vector_width),
        Access::ReadOnly,
    );
    let cache = b.buffer(
        BINDING_CACHE,
        "cache",
        Type::vec(Scalar::U32, cache_lanes),
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
        let converted = convert(&b, b.load(src, b.add(b.muli(row, n), col)));
        let dst = b.add(b.muli(b.add(b.push(p_pos0), row), n), col);
        b.if_(b.lt(dst, b.array_length(cache)), || {
            b.store(cache, dst, pack(&b, &converted))
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
/// first `m` rows of `src` (rotated first where the workload rotates,
/// [`super::hadamard::reference`]) in the cache's type ([`KvType::encode_row`]); rows past
/// the end of `cache` are dropped, as the kernel drops them. The kernel must match bit for bit (q8_0:
/// where the device's division is correctly rounded, see the module documentation).
pub fn reference(w: &KvWriteWorkload, m: usize, pos0: u32, src: &[f32], cache: &mut [u32]) {
    let kw = w.kv_width as usize;
    assert!(
        src.len() >= m * kw,
        "kv_write reference: src needs {m} rows"
    );
    let rw = w.ty.row_words(w.kv_width) as usize;
    for (i, row) in src[..m * kw].chunks(kw).enumerate() {
        let start = (pos0 as usize + i) * rw;
        if let Some(slot) = cache.get_mut(start..start + rw) {
            let mut row = row.to_vec();
            if w.rotation > 0 {
                super::hadamard::reference(&mut row, w.rotation as usize);
            }
            slot.copy_from_slice(&w.ty.encode_row(&row));
        }
    }
}
