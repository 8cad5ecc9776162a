//! Reading the KV cache in its element type (`crate::kv_type`): every attention kernel takes
//! K and V through these, 8 values (one "chunk", two vec4<f32>) at a time.
//!
//! - f16: one uvec4 of f16 pairs per chunk, unpacked;
//! - f32: two uvec4 per chunk, bitcast;
//! - q8_0: one 8-byte load of a chunk's int8 quants and one of the word pair holding its
//!   block's f16 scale (the cache is then bound as uvec2: a chunk's quants are 8-byte aligned;
//!   positions are whole 16-byte units, and so are the quant and scale parts).
//!
//! Kernels that stage K or V in workgroup memory keep f16 chunks as their words (one 16-byte
//! element) and every other type as its f32 values (two elements): a staged q8_0 chunk is
//! dequantized once by the thread that stages it, and f32 stays exact.

use crate::ir::{Buffer, KernelBuilder, Scalar, SharedArray, Type, Value};
use crate::kv_type::{KvType, Q8_0_BLOCK};

/// How a kernel reads one of the caches (K or V) of a workload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvRead {
    pub ty: KvType,
    kv_width: u32,
    head_dim: u32,
}

impl KvRead {
    pub(crate) fn new(ty: KvType, kv_width: u32, head_dim: u32) -> KvRead {
        KvRead {
            ty,
            kv_width,
            head_dim,
        }
    }

    /// The element type the cache is bound as.
    pub(crate) fn binding_type(&self) -> Type {
        match self.ty {
            KvType::Q8_0 => Type::vec(Scalar::U32, 2),
            _ => Type::vec(Scalar::U32, 4),
        }
    }

    /// Bound elements per cache position.
    pub(crate) fn row_elems(&self) -> u32 {
        match self.ty {
            KvType::Q8_0 => self.ty.row_words(self.kv_width) / 2,
            t => t.row_bytes(self.kv_width) / 16,
        }
    }

    /// Whole positions in the bound cache.
    pub(crate) fn positions(&self, b: &KernelBuilder, cache: Buffer) -> Value {
        b.div(b.array_length(cache), b.c_u32(self.row_elems()))
    }

    /// The reader of kv head `kvh`, its offsets computed here once (not per load).
    pub(crate) fn head(&self, b: &KernelBuilder, kvh: Value) -> KvHead {
        let per_head = match self.ty {
            KvType::F16 => self.head_dim / 8,
            KvType::F32 => self.head_dim / 4,
            KvType::Q8_0 => self.head_dim / 8,
        };
        KvHead {
            read: *self,
            base: b.muli(kvh, per_head),
            first_block: (self.ty == KvType::Q8_0)
                .then(|| b.muli(kvh, self.head_dim / Q8_0_BLOCK as u32)),
        }
    }

    /// 16-byte shared elements of one staged chunk: its f16 words, or its f32 values.
    pub(crate) fn staged_elems(&self) -> u32 {
        match self.ty {
            KvType::F16 => 1,
            _ => 2,
        }
    }

    /// The staged chunk at element `at` of `tile`, as two vec4<f32>.
    pub(crate) fn staged(&self, b: &KernelBuilder, tile: SharedArray, at: Value) -> (Value, Value) {
        if self.ty == KvType::F16 {
            return unpack_f16(b, b.load_shared(tile, at));
        }
        let f4 = Type::vec(Scalar::F32, 4);
        (
            b.bitcast(b.load_shared(tile, at), f4),
            b.bitcast(b.load_shared(tile, b.addi(at, 1)), f4),
        )
    }
}

/// The readers of K's and V's kv head `kvh`: one head offset where both types share it.
pub(crate) fn heads(b: &KernelBuilder, k: KvRead, v: KvRead, kvh: Value) -> (KvHead, KvHead) {
    let kh = k.head(b, kvh);
    let vh = if v.ty == k.ty {
        KvHead { read: v, ..kh }
    } else {
        v.head(b, kvh)
    };
    (kh, vh)
}

/// One kv head of one cache: where its values sit in every position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvHead {
    pub read: KvRead,
    /// The head's offset within a position, in bound elements.
    base: Value,
    /// q8_0: the head's first block within a position.
    first_block: Option<Value>,
}

/// Where one position's values of a kv head start: the position's first element and the
/// head's (in bound elements). Computed once per key, read chunk by chunk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvRow {
    start: Value,
    head: Value,
}

impl KvHead {
    /// The row of position `key`.
    pub(crate) fn row(&self, b: &KernelBuilder, key: Value) -> KvRow {
        let start = b.muli(key, self.read.row_elems());
        KvRow {
            start,
            head: b.add(start, self.base),
        }
    }

    /// Chunk `c` (values 8c .. 8c+8 of the head) of position `key`, as two vec4<f32>.
    pub(crate) fn chunk(
        &self,
        b: &KernelBuilder,
        cache: Buffer,
        key: Value,
        c: Value,
    ) -> (Value, Value) {
        self.chunk_at(b, cache, self.row(b, key), c)
    }

    /// Chunk `c` of the position whose row is `row`, as two vec4<f32>.
    pub(crate) fn chunk_at(
        &self,
        b: &KernelBuilder,
        cache: Buffer,
        row: KvRow,
        c: Value,
    ) -> (Value, Value) {
        let r = self.read;
        let f4 = Type::vec(Scalar::F32, 4);
        match r.ty {
            KvType::F16 => unpack_f16(b, b.load(cache, b.add(row.head, c))),
            KvType::F32 => {
                let at = b.add(row.head, b.shli(c, 1));
                (
                    b.bitcast(b.load(cache, at), f4),
                    b.bitcast(b.load(cache, b.addi(at, 1)), f4),
                )
            }
            KvType::Q8_0 => {
                let quants = b.load(cache, b.add(row.head, c));
                let first = self.first_block.expect("a q8_0 head knows its first block");
                let block = b.add(first, b.shri(c, 2));
                // The scales follow the kv_width quant bytes: block b's f16 is half b % 2 of
                // word b / 2, component (b / 2) % 2 of uvec2 b / 4.
                let words = b.load(
                    cache,
                    b.add(b.addi(row.start, r.kv_width / 8), b.shri(block, 2)),
                );
                let high_word = b.eq(b.andi(b.shri(block, 1), 1), b.c_u32(1));
                let scale_word = b.select(high_word, b.extract(words, 1), b.extract(words, 0));
                let pair = b.unpack_half2x16(scale_word);
                let odd = b.eq(b.andi(block, 1), b.c_u32(1));
                let d = b.splat(b.select(odd, b.extract(pair, 1), b.extract(pair, 0)), 4);
                let dequant = |word: Value| {
                    let s = b.bitcast(word, Type::I32);
                    let q: Vec<Value> = (0..4).map(|i| b.bitfield_extract(s, 8 * i, 8)).collect();
                    b.mul(b.convert(b.construct(&q), f4), d)
                };
                (dequant(b.extract(quants, 0)), dequant(b.extract(quants, 1)))
            }
        }
    }

    /// The uvec4 index of an f16 chunk (its words, for the packed-f16 products and staging).
    pub(crate) fn f16_index(&self, b: &KernelBuilder, key: Value, c: Value) -> Value {
        debug_assert_eq!(self.read.ty, KvType::F16);
        b.add(self.row(b, key).head, c)
    }
}

impl KvRow {
    /// The head's first element in this position (f16: a chunk's uvec4 is this + c).
    pub(crate) fn head(&self) -> Value {
        self.head
    }
}

/// Stages chunk `c` of position `key` of K and of V into their tiles (uvec4 arrays) at
/// elements `k_at` and `v_at`: f16 as its words (K and V from one index where both are f16),
/// other types as f32 values (two elements).
pub(crate) fn stage_pair(
    b: &KernelBuilder,
    (k, k_cache, k_tile, k_at): (KvHead, Buffer, SharedArray, Value),
    (v, v_cache, v_tile, v_at): (KvHead, Buffer, SharedArray, Value),
    key: Value,
    c: Value,
) {
    if k.read.ty == KvType::F16 && v.read.ty == KvType::F16 {
        let src = k.f16_index(b, key, c);
        b.store_shared(k_tile, k_at, b.load(k_cache, src));
        b.store_shared(v_tile, v_at, b.load(v_cache, src));
        return;
    }
    for (h, cache, tile, at) in [(k, k_cache, k_tile, k_at), (v, v_cache, v_tile, v_at)] {
        if h.read.ty == KvType::F16 {
            b.store_shared(tile, at, b.load(cache, h.f16_index(b, key, c)));
            continue;
        }
        let u4 = Type::vec(Scalar::U32, 4);
        let (lo, hi) = h.chunk(b, cache, key, c);
        b.store_shared(tile, at, b.bitcast(lo, u4));
        b.store_shared(tile, b.addi(at, 1), b.bitcast(hi, u4));
    }
}

/// `v · k`, with no instruction where k is 1 (the f16 tiles' element per chunk).
pub(crate) fn times(b: &KernelBuilder, v: Value, k: u32) -> Value {
    if k == 1 {
        v
    } else {
        b.muli(v, k)
    }
}

/// The 8 halves of a uvec4 as two vec4<f32>.
pub(crate) fn unpack_f16(b: &KernelBuilder, words: Value) -> (Value, Value) {
    let half = |i: u32| b.unpack_half2x16(b.extract(words, i));
    (
        b.construct(&[half(0), half(1)]),
        b.construct(&[half(2), half(3)]),
    )
}
