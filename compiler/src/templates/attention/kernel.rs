//! The attention kernel as IR, for a validated (workload, schedule) pair.
//!
//! ```text
//! slot = tid / L, lane = tid % L                   // L = threads_per_row
//! (query, head) of the slot; rows past m compute row m-1 again and store nothing, so every
//! lane takes part in every shuffle and barrier
//! q chunks of this lane, pre-scaled by 1/sqrt(head_dim); o = 0, l = 0, mx = -1e30
//! n_keys = pos0 + min(last row of the workgroup + 1, m), capped by the bound cache length
//! for kb in (0..n_keys).step_by(kv_block):          // uniform: barriers are legal
//!     [stage_kv: K, V rows kb..kb+kv_block → shared (f16 words); barrier]
//!     s[j] = Σ_lanes q·k[kb+j]  (key past the row's position, or with a sliding window w
//!            at or before pos - w → masked)
//!     mx' = max(mx, max_j s[j]); c = exp(mx - mx'); l = l·c; o = o·c
//!     p[j] = exp(s[j] - mx'); l += Σ p[j]; o += Σ p[j]·v[kb+j]; mx = mx'
//!     [barrier before the shared tiles / reduction slots are rewritten]
//! out = o / l for rows < m
//! ```
//! With `f16_qk` the lane's q chunks are held as f16vec2 and each key's partial dot product
//! is an f16vec2 FMA chain on the cache words bitcast to f16vec2 (no unpacking), folded to f32
//! before the lane sum. With `f16_pv` the block's weights p[j] are rounded to f16 and
//! Σ_j p[j]·v[kb+j] is summed in f16vec2, then added to the f32 output once per block.
//! Keys of the last block past n_keys load the last valid key (clamped, so every read stays
//! in bounds) and are masked. The running max starts at -1e30 rather than -∞ so no lane ever
//! computes ∞ - ∞. Without a window every row's first block holds key 0, which is always
//! visible; with one, a block before the row's window is all masked: its weights are
//! exp(-1e30 + 1e30) = 1, and the first block with a visible key rescales them, with the
//! output and the sum, by exp(-1e30 - max) = 0 (the row's own key is always visible).

use super::kv_load::{heads, stage_pair, times, KvHead, KvRead};
use super::schedule::{AttentionSchedule, LaneReduce};
use super::split_kv;
use super::workload::{
    AttentionWorkload, BINDING_K_CACHE, BINDING_OUT, BINDING_Q, BINDING_V_CACHE,
};
use crate::ir::{
    Access, Buffer, Builtin, KernelBuilder, Module, Scalar, SharedArray, Type, Unroll, Value, Var,
};

/// The running max before any key: far below any score, yet finite.
pub(crate) const NEG_BIG: f32 = -1.0e30;

struct Attn<'a> {
    b: &'a KernelBuilder,
    s: &'a AttentionSchedule,
    k_cache: Buffer,
    v_cache: Buffer,
    /// How this lane's kv head of K and V is read (their cache types).
    k_head: KvHead,
    v_head: KvHead,
    /// Chunks (8 values) per head_dim.
    head_u4: u32,
    threads: u32,
    lane: Value,
    slot: Value,
    tid: Value,
    n_keys: Value,
    /// Keys this row may see: min(pos + 1, n_keys).
    row_keys: Value,
    /// The row's position, and the sliding window when the workload has one.
    pos: Value,
    window: Option<u32>,
    k_tile: Option<SharedArray>,
    v_tile: Option<SharedArray>,
    red: Option<SharedArray>,
}

/// The bindings and push constants of every attention kernel (see `workload.rs`).
pub(crate) struct Interface {
    pub q: Buffer,
    pub k_cache: Buffer,
    pub v_cache: Buffer,
    pub out: Buffer,
    /// Push constants: rows of this dispatch, cached positions before them.
    pub m: Value,
    pub pos0: Value,
}

/// The readers of the workload's K and V caches.
pub(crate) fn kv_reads(w: &AttentionWorkload) -> (KvRead, KvRead) {
    (
        KvRead::new(w.kv.k, w.kv_width(), w.head_dim),
        KvRead::new(w.kv.v, w.kv_width(), w.head_dim),
    )
}

impl Interface {
    /// The interface with binding 3 the output.
    pub(crate) fn declare(b: &KernelBuilder, w: &AttentionWorkload) -> Interface {
        Self::declare_out(b, w, |b, v4| {
            b.buffer(BINDING_OUT, "out", v4, Access::WriteOnly)
        })
    }

    /// The interface of the row-wise and key-split kernels under `s`: binding 3 is the output,
    /// or with split keys the partials (coherent where the last piece merges them itself).
    pub(crate) fn declare_as(
        b: &KernelBuilder,
        w: &AttentionWorkload,
        s: &AttentionSchedule,
    ) -> Interface {
        Self::declare_out(b, w, |b, v4| {
            if s.fused_combine {
                b.coherent_buffer(BINDING_OUT, "partials", v4)
            } else if split_kv::is_split(s) {
                b.buffer(BINDING_OUT, "partials", v4, Access::WriteOnly)
            } else {
                b.buffer(BINDING_OUT, "out", v4, Access::WriteOnly)
            }
        })
    }

    fn declare_out(
        b: &KernelBuilder,
        w: &AttentionWorkload,
        binding_3: impl Fn(&KernelBuilder, Type) -> Buffer,
    ) -> Interface {
        let v4 = Type::vec(Scalar::F32, 4);
        let (kr, vr) = kv_reads(w);
        let q = b.buffer(BINDING_Q, "q", v4, Access::ReadOnly);
        let k_cache = b.buffer(
            BINDING_K_CACHE,
            "k_cache",
            kr.binding_type(),
            Access::ReadOnly,
        );
        let v_cache = b.buffer(
            BINDING_V_CACHE,
            "v_cache",
            vr.binding_type(),
            Access::ReadOnly,
        );
        let out = binding_3(b, v4);
        let p_m = b.push_field("m", Type::U32);
        let p_pos0 = b.push_field("pos0", Type::U32);
        Interface {
            q,
            k_cache,
            v_cache,
            out,
            m: b.push(p_m),
            pos0: b.push(p_pos0),
        }
    }
}

/// Keys the workgroup whose first query row is `first_row` visits (the same for all its
/// threads): pos0 + min(first_row + rows, m), capped by the bound cache length.
#[allow(clippy::too_many_arguments)]
pub(crate) fn workgroup_keys(
    b: &KernelBuilder,
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    first_row: Value,
    m: Value,
    pos0: Value,
    k_cache: Buffer,
    v_cache: Buffer,
) -> Value {
    let rows_end = b.min(b.addi(first_row, s.rows), m);
    let (kr, vr) = kv_reads(w);
    let cap = if kr.ty == vr.ty {
        // One division where both caches have one layout.
        let len = b.min(b.array_length(k_cache), b.array_length(v_cache));
        b.div(len, b.c_u32(kr.row_elems()))
    } else {
        b.min(kr.positions(b, k_cache), vr.positions(b, v_cache))
    };
    b.min(b.add(pos0, rows_end), cap)
}

/// Builds the IR of the kernel. The pair must have passed validation.
pub(crate) fn build(w: &AttentionWorkload, s: &AttentionSchedule) -> Module {
    if s.is_tiled() {
        return super::tiled::build(w, s);
    }
    if s.is_key_split() {
        return super::key_split::build(w, s);
    }
    let b = KernelBuilder::new(s.name(w), [s.threads(w), 1, 1]);
    let v4 = Type::vec(Scalar::F32, 4);
    let u4 = Type::vec(Scalar::U32, 4);
    let split = split_kv::is_split(s);
    let Interface {
        q,
        k_cache,
        v_cache,
        out,
        m,
        pos0,
    } = Interface::declare_as(&b, w, s);
    let (k_read, v_read) = kv_reads(w);

    let tpr = s.threads_per_row;
    let hg = s.heads_per_workgroup(w);
    let head_u4 = w.head_dim / 8;
    let kv_block = s.kv_block;

    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let lane = b.andi(tid, tpr - 1);
    let slot = b.shri(tid, tpr.trailing_zeros());
    let (qi, hh) = if hg > 1 {
        (b.div(slot, b.c_u32(hg)), b.rem(slot, b.c_u32(hg)))
    } else {
        (slot, b.c_u32(0))
    };
    let q_block = b.builtin(Builtin::WorkgroupId(0));
    let head_y = b.builtin(Builtin::WorkgroupId(1));
    let first_row = b.muli(q_block, s.rows);
    let query = b.add(first_row, qi);
    let query_c = b.min(query, b.sub(m, b.c_u32(1)));
    let (head, kvh) = if s.group_heads {
        (b.add(b.muli(head_y, w.group()), hh), head_y)
    } else {
        (head_y, b.div(head_y, b.c_u32(w.group())))
    };
    let pos = b.add(pos0, query_c);
    // Keys the workgroup visits (the same for all its threads), within the bound caches.
    let n_keys = workgroup_keys(&b, w, s, first_row, m, pos0, k_cache, v_cache);
    let row_keys = b.min(b.addi(pos, 1), n_keys);

    let k_tile = s
        .stage_kv
        .then(|| b.shared_array("k_tile", u4, kv_block * head_u4 * k_read.staged_elems()));
    let v_tile = s
        .stage_kv
        .then(|| b.shared_array("v_tile", u4, kv_block * head_u4 * v_read.staged_elems()));
    let red = s
        .reduces_in_shared()
        .then(|| b.shared_array("partials", Type::F32, s.threads(w) * kv_block));

    let (k_head, v_head) = heads(&b, k_read, v_read, kvh);
    let a = Attn {
        b: &b,
        s,
        k_cache,
        v_cache,
        k_head,
        v_head,
        head_u4,
        threads: s.threads(w),
        lane,
        slot,
        tid,
        n_keys,
        row_keys,
        pos,
        window: w.is_windowed().then_some(w.window),
        k_tile,
        v_tile,
        red,
    };

    // This lane's q chunks, pre-scaled by 1/sqrt(head_dim).
    let chunks = s.chunks_per_lane(w);
    let scale = b.splat(b.c_f32(1.0 / (w.head_dim as f32).sqrt()), 4);
    let q_base = b.add(
        b.muli(query_c, w.q_width() / 4),
        b.muli(head, w.head_dim / 4),
    );
    let chunk_of = |t: u32| b.add(lane, b.c_u32(t * tpr));
    let qv: Vec<(Value, Value)> = (0..chunks)
        .map(|t| {
            let at = b.add(q_base, b.shli(chunk_of(t), 1));
            (
                b.mul(b.load(q, at), scale),
                b.mul(b.load(q, b.addi(at, 1)), scale),
            )
        })
        .collect();
    // f16_qk: the same q chunks as f16vec2 pairs (elements 2i, 2i+1 of the chunk).
    let h2 = Type::vec(Scalar::F16, 2);
    let q16: Vec<Vec<Value>> = if s.f16_qk {
        let h4 = Type::vec(Scalar::F16, 4);
        qv.iter()
            .map(|&(qa, qb)| {
                let (a, c) = (b.convert(qa, h4), b.convert(qb, h4));
                let pair = |v: Value, i: u32| b.construct(&[b.extract(v, i), b.extract(v, i + 1)]);
                vec![pair(a, 0), pair(a, 2), pair(c, 0), pair(c, 2)]
            })
            .collect()
    } else {
        Vec::new()
    };
    let zero4 = b.lit(v4, 0.0);
    let acc: Vec<(Var, Var)> = (0..chunks)
        .map(|t| {
            (
                b.var_init(&format!("o{t}_lo"), zero4),
                b.var_init(&format!("o{t}_hi"), zero4),
            )
        })
        .collect();
    let run_max = b.var_init("run_max", b.c_f32(NEG_BIG));
    let run_sum = b.var_init("run_sum", b.c_f32(0.0));

    // Split-KV: this workgroup's piece of the keys (whole blocks; see `split_kv.rs`).
    let (key_lo, key_hi) = if split {
        split_kv::key_range(&b, n_keys, kv_block)
    } else {
        (b.c_u32(0), n_keys)
    };
    b.for_range(key_lo, key_hi, kv_block, Unroll::Never, |kb| {
        if s.stage_kv {
            a.stage(kb);
            b.barrier();
        }
        // Scores of the block (masked keys at NEG_BIG) and their validity.
        let partials: Vec<Value> = (0..kv_block)
            .map(|j| {
                if s.f16_qk {
                    let mut acc = b.lit(h2, 0.0);
                    for (t, q) in q16.iter().enumerate() {
                        let words = a.kv_words(a.k_tile, a.k_cache, a.k_head, kb, j, t as u32);
                        for (i, &qp) in q.iter().enumerate() {
                            acc = b.fma(qp, b.bitcast(b.extract(words, i as u32), h2), acc);
                        }
                    }
                    let f = b.convert(acc, Type::vec(Scalar::F32, 2));
                    return b.add(b.extract(f, 0), b.extract(f, 1));
                }
                let mut sum: Option<Value> = None;
                for (t, &(qa, qb)) in qv.iter().enumerate() {
                    let (klo, khi) = a.kv_chunk(a.k_tile, a.k_cache, a.k_head, kb, j, t as u32);
                    let d = b.add(b.dot(qa, klo), b.dot(qb, khi));
                    sum = Some(match sum {
                        Some(x) => b.add(x, d),
                        None => d,
                    });
                }
                sum.expect("at least one chunk per lane")
            })
            .collect();
        let full = a.lane_sums(&partials);
        let valid: Vec<Value> = (0..kv_block)
            .map(|j| {
                let key = b.addi(kb, j);
                let causal = b.lt(key, a.row_keys);
                match a.window {
                    // Sliding window: also pos < key + window.
                    Some(window) => b.logical_and(causal, b.lt(a.pos, b.addi(key, window))),
                    None => causal,
                }
            })
            .collect();
        let scores: Vec<Value> = full
            .iter()
            .zip(&valid)
            .map(|(&x, &ok)| b.select(ok, x, b.c_f32(NEG_BIG)))
            .collect();
        let block_max = scores[1..].iter().fold(scores[0], |m, &x| b.max(m, x));
        let old_max = b.load_var(run_max);
        let new_max = b.max(old_max, block_max);
        let correction = b.exp(b.sub(old_max, new_max));
        let corr4 = b.splat(correction, 4);
        let mut lo_hi: Vec<(Value, Value)> = acc
            .iter()
            .map(|&(lo, hi)| (b.mul(b.load_var(lo), corr4), b.mul(b.load_var(hi), corr4)))
            .collect();
        let mut sum = b.mul(b.load_var(run_sum), correction);
        // f16_pv: the block's Σ p·v per chunk, four f16vec2 each.
        let mut pv16: Vec<Vec<Value>> = if s.f16_pv {
            (0..chunks).map(|_| vec![b.lit(h2, 0.0); 4]).collect()
        } else {
            Vec::new()
        };
        for j in 0..kv_block {
            let e = b.exp(b.sub(scores[j as usize], new_max));
            let p = b.select(valid[j as usize], e, b.c_f32(0.0));
            sum = b.add(sum, p);
            if s.f16_pv {
                let p2 = b.splat(b.convert(p, Type::F16), 2);
                for (t, acc) in pv16.iter_mut().enumerate() {
                    let words = a.kv_words(a.v_tile, a.v_cache, a.v_head, kb, j, t as u32);
                    for (i, x) in acc.iter_mut().enumerate() {
                        *x = b.fma(p2, b.bitcast(b.extract(words, i as u32), h2), *x);
                    }
                }
                continue;
            }
            let p4 = b.splat(p, 4);
            for (t, (lo, hi)) in lo_hi.iter_mut().enumerate() {
                let (vlo, vhi) = a.kv_chunk(a.v_tile, a.v_cache, a.v_head, kb, j, t as u32);
                *lo = b.fma(p4, vlo, *lo);
                *hi = b.fma(p4, vhi, *hi);
            }
        }
        for ((lo, hi), acc) in lo_hi.iter_mut().zip(&pv16) {
            let f4 = |x: Value, y: Value| b.convert(b.construct(&[x, y]), v4);
            *lo = b.add(*lo, f4(acc[0], acc[1]));
            *hi = b.add(*hi, f4(acc[2], acc[3]));
        }
        for (&(lo, hi), &(vlo, vhi)) in acc.iter().zip(&lo_hi) {
            b.store_var(lo, vlo);
            b.store_var(hi, vhi);
        }
        b.store_var(run_sum, sum);
        b.store_var(run_max, new_max);
        if s.stage_kv || a.red.is_some() {
            b.barrier();
        }
    });

    if split {
        split_kv::PartialStore {
            w,
            s,
            partials: out,
            query,
            head,
            lane,
            m,
            acc: &acc,
            chunk_of: &chunk_of,
            run_max,
            run_sum,
        }
        .emit(&b);
        if s.fused_combine {
            split_kv::combine_in_last_piece(&b, w, s, out, m);
        }
        return b.finish();
    }
    b.if_(b.lt(query, m), || {
        let l = b.load_var(run_sum);
        // l > 0 whenever a key was visible; an empty cache binding yields zeros, not NaN.
        let inv = b.select(b.gt(l, b.c_f32(0.0)), b.div(b.c_f32(1.0), l), b.c_f32(0.0));
        let inv4 = b.splat(inv, 4);
        let o_base = b.add(b.muli(query, w.q_width() / 4), b.muli(head, w.head_dim / 4));
        for (t, &(lo, hi)) in acc.iter().enumerate() {
            let at = b.add(o_base, b.shli(chunk_of(t as u32), 1));
            b.store(out, at, b.mul(b.load_var(lo), inv4));
            b.store(out, b.addi(at, 1), b.mul(b.load_var(hi), inv4));
        }
    });
    b.finish()
}

impl Attn<'_> {
    /// Copies the K and V rows of keys kb .. kb+kv_block (clamped to the last valid key)
    /// into the shared tiles, all threads together.
    fn stage(&self, kb: Value) {
        let b = self.b;
        let total = self.s.kv_block * self.head_u4;
        let n = self.threads;
        b.for_range(
            b.c_u32(0),
            b.c_u32(total.div_ceil(n)),
            1,
            Unroll::Hint,
            |it| {
                let idx = b.add(self.tid, b.muli(it, n));
                let body = || {
                    let j = b.div(idx, b.c_u32(self.head_u4));
                    let c = b.rem(idx, b.c_u32(self.head_u4));
                    let key = b.min(b.add(kb, j), b.sub(self.n_keys, b.c_u32(1)));
                    let (kt, vt) = (self.k_tile.unwrap(), self.v_tile.unwrap());
                    let (kh, vh) = (self.k_head, self.v_head);
                    let k_at = times(b, idx, kh.read.staged_elems());
                    let v_at = times(b, idx, vh.read.staged_elems());
                    stage_pair(
                        b,
                        (kh, self.k_cache, kt, k_at),
                        (vh, self.v_cache, vt, v_at),
                        key,
                        c,
                    );
                };
                if total % n == 0 {
                    body();
                } else {
                    b.if_(b.lt(idx, b.c_u32(total)), body);
                }
            },
        );
    }

    /// This lane's chunk `t` (8 elements, as two vec4<f32>) of key `kb + j`, from the shared
    /// tile when staged, else from the cache (key clamped to the last valid one).
    fn kv_chunk(
        &self,
        tile: Option<SharedArray>,
        cache: Buffer,
        head: KvHead,
        kb: Value,
        j: u32,
        t: u32,
    ) -> (Value, Value) {
        let b = self.b;
        let c = b.add(self.lane, b.c_u32(t * self.s.threads_per_row));
        match tile {
            Some(tile) => {
                let at = b.add(b.c_u32(j * self.head_u4), c);
                head.read
                    .staged(b, tile, times(b, at, head.read.staged_elems()))
            }
            None => {
                let key = b.min(b.addi(kb, j), b.sub(self.n_keys, b.c_u32(1)));
                head.chunk(b, cache, key, c)
            }
        }
    }

    /// The cache words (uvec4: 8 halves) of this lane's chunk `t` of key `kb + j`, for the
    /// packed-f16 products (an f16 cache only: the schedule's validation sees to it).
    fn kv_words(
        &self,
        tile: Option<SharedArray>,
        cache: Buffer,
        head: KvHead,
        kb: Value,
        j: u32,
        t: u32,
    ) -> Value {
        let b = self.b;
        let c = b.add(self.lane, b.c_u32(t * self.s.threads_per_row));
        match tile {
            Some(tile) => b.load_shared(tile, b.add(b.c_u32(j * self.head_u4), c)),
            None => {
                let key = b.min(b.addi(kb, j), b.sub(self.n_keys, b.c_u32(1)));
                b.load(cache, head.f16_index(b, key, c))
            }
        }
    }

    /// Sums each partial dot product over the lanes of its row; every lane gets the same
    /// bits (xor butterflies add the same pairs in every lane; the shared path reads the
    /// slots in one order).
    fn lane_sums(&self, partials: &[Value]) -> Vec<Value> {
        let b = self.b;
        let tpr = self.s.threads_per_row;
        if tpr == 1 {
            return partials.to_vec();
        }
        match (self.s.lane_reduce, self.red) {
            (LaneReduce::Shared, Some(red)) => {
                let kvb = self.s.kv_block;
                // Slot of (row slot, key j, lane): ((slot·kv_block + j)·tpr + lane).
                let row_base = b.muli(self.slot, kvb * tpr);
                for (j, &p) in partials.iter().enumerate() {
                    let at = b.add(b.add(row_base, b.c_u32(j as u32 * tpr)), self.lane);
                    b.store_shared(red, at, p);
                }
                b.barrier();
                (0..kvb)
                    .map(|j| {
                        let first = b.add(row_base, b.c_u32(j * tpr));
                        (1..tpr).fold(b.load_shared(red, first), |acc, l| {
                            b.add(acc, b.load_shared(red, b.addi(first, l)))
                        })
                    })
                    .collect()
            }
            _ => partials
                .iter()
                .map(|&p| {
                    let mut v = p;
                    let mut step = 1;
                    while step < tpr {
                        v = b.add(v, b.subgroup_shuffle_xor(v, b.c_u32(step)));
                        step *= 2;
                    }
                    v
                })
                .collect(),
        }
    }
}
