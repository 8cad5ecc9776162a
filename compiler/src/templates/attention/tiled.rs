//! The register-tiled attention kernel (`tile_rows > 0`), for GPUs with on-chip shared memory.
//!
//! The row-wise kernel (`kernel.rs`) gives each (query, head) row a few lanes that read every
//! key and value chunk of the block for that row alone, sum the row's score across lanes by
//! shuffles per key and repeat the softmax in every lane. Here a workgroup's R = rows × heads
//! rows share staged tiles, and each thread computes a `tile_rows` × `tile_keys` block of
//! the scores, like a GEMM micro-tile, so every shared-memory load feeds several FMAs:
//!
//! ```text
//! R = rows · heads rows (row r = query r / heads, head r % heads); C = kv_block / tile_keys
//! column threads per row group; thread = (rg, cg), rg < R / tile_rows, cg < C
//! rows of the thread: rg·tile_rows + i; its keys of a block: cg + jj·C (jj < tile_keys);
//! its output chunks (8 of head_dim each): cg + t·C
//! Q (pre-scaled by 1/sqrt(head_dim)) → shared once
//! for kb in (0..n_keys).step_by(kv_block):         // uniform: barriers are legal
//!     K, V rows kb..kb+kv_block → shared (f16; K rows padded by one uvec4); barrier
//!     s[i][jj] = q_row · k_key                     (masked keys → NEG_BIG)
//!     mx' = max(mx, max over the row's C threads (xor shuffles)); c = exp(mx - mx')
//!     p = exp(s - mx'); l = l·c + Σ_jj p (per thread: the C partial sums are added at the end)
//!     o = o·c; p → shared; barrier
//!     o[i][t] += Σ_j p[i][j] · v[j][chunk t]; barrier
//! l = Σ over the row's C threads; out = o / l for rows < m
//! ```
//! With `f16_qk` the Q tile holds f16 and each score is an f16vec2 FMA chain folded into f32
//! every [`QK_FOLD_CHUNKS`] chunks (8 elements each); with `f16_pv` the block's weights are
//! rounded to f16 and Σ_j p·v is summed in f16vec2, folded into the f32 output once per
//! block, as in the row-wise kernel. Shared-memory strides are padded so that neighbouring
//! threads, which read neighbouring keys (K), rows (P) or chunks (V), hit different banks.

use super::kernel::{kv_reads, workgroup_keys, Interface};
use super::kv_load::{heads, stage_pair, times};
use super::rows::WorkgroupRows;
use super::schedule::AttentionSchedule;
use super::workload::AttentionWorkload;
use crate::ir::{Builtin, KernelBuilder, Module, Scalar, Type, Unroll, Value, Var};

/// The running max before any key: far below any score, yet finite (as in the row-wise
/// kernel: no lane computes ∞ - ∞).
const NEG_BIG: f32 = -1.0e30;

/// With `f16_qk`, a score's f16 partial sums are folded into f32 after this many 8-element
/// chunks of head_dim (16 products per f16vec2 half: the error bound of the row-wise kernel
/// with 4 lanes per row).
pub const QK_FOLD_CHUNKS: u32 = 4;

/// f16 scores of `rows` × `keys` pairs over `chunks` 8-element chunks of head_dim: per chunk
/// the rows' Q words and the keys' K words (`q_word(row, chunk)`, `k_word(key, chunk)`, uvec4
/// of 8 halves), f16vec2 FMA chains folded into f32 pairs every [`QK_FOLD_CHUNKS`] chunks and
/// at the end. The caller adds each pair's two halves. Shared by the tiled and key-split
/// kernels.
pub(crate) fn f16_score_pairs(
    b: &KernelBuilder,
    chunks: u32,
    rows: usize,
    keys: usize,
    q_word: impl Fn(usize, u32) -> Value,
    k_word: impl Fn(usize, u32) -> Value,
) -> Vec<Vec<Value>> {
    let h2 = Type::vec(Scalar::F16, 2);
    let f32x2 = Type::vec(Scalar::F32, 2);
    let mut folded: Vec<Vec<Option<Value>>> = vec![vec![None; keys]; rows];
    let mut part: Vec<Vec<Value>> = vec![vec![b.lit(h2, 0.0); keys]; rows];
    for c in 0..chunks {
        let qw: Vec<Value> = (0..rows).map(|i| q_word(i, c)).collect();
        let kw: Vec<Value> = (0..keys).map(|j| k_word(j, c)).collect();
        for (i, &qv) in qw.iter().enumerate() {
            for (j, &kv) in kw.iter().enumerate() {
                let mut a = part[i][j];
                for e in 0..4 {
                    a = b.fma(
                        b.bitcast(b.extract(qv, e), h2),
                        b.bitcast(b.extract(kv, e), h2),
                        a,
                    );
                }
                part[i][j] = a;
            }
        }
        if (c + 1) % QK_FOLD_CHUNKS == 0 || c + 1 == chunks {
            for i in 0..rows {
                for j in 0..keys {
                    let f = b.convert(part[i][j], f32x2);
                    folded[i][j] = Some(match folded[i][j] {
                        Some(x) => b.add(x, f),
                        None => f,
                    });
                    part[i][j] = b.lit(h2, 0.0);
                }
            }
        }
    }
    folded
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|f| f.expect("at least one chunk"))
                .collect()
        })
        .collect()
}

/// Shared-memory layout of a tiled schedule, in 16-byte elements; also what
/// [`AttentionSchedule::shared_bytes`] counts.
pub(crate) struct TiledLayout {
    /// Rows of the workgroup (rows × heads).
    pub r: u32,
    /// uvec4 (8 halves) per head_dim.
    pub head_u4: u32,
    /// Q tile row stride: f16 rows of `head_u4 + 1` uvec4, or f32 rows of `2·head_u4 + 1` vec4.
    pub q_stride: u32,
    /// K tile row stride (`head_u4` staged chunks + 1: the padding spreads neighbouring keys
    /// over banks; a staged chunk is 1 element in f16, 2 otherwise, see `kv_load`).
    pub k_stride: u32,
    /// 16-byte elements per staged V chunk.
    pub v_elems: u32,
    /// P tile: per key, R / 4 vec4 plus one of padding.
    pub p_stride: u32,
}

impl TiledLayout {
    pub(crate) fn of(w: &AttentionWorkload, s: &AttentionSchedule) -> TiledLayout {
        let r = s.row_slots(w);
        let head_u4 = w.head_dim / 8;
        let (k_read, v_read) = kv_reads(w);
        TiledLayout {
            r,
            head_u4,
            q_stride: if s.f16_qk {
                head_u4 + 1
            } else {
                2 * head_u4 + 1
            },
            k_stride: head_u4 * k_read.staged_elems() + 1,
            v_elems: v_read.staged_elems(),
            p_stride: r / 4 + 1,
        }
    }

    /// 16-byte elements of the Q, K, V and P tiles.
    pub(crate) fn elements(&self, kv_block: u32) -> [u32; 4] {
        [
            self.r * self.q_stride,
            kv_block * self.k_stride,
            kv_block * self.head_u4 * self.v_elems,
            kv_block * self.p_stride,
        ]
    }
}

/// Builds the IR of the tiled kernel. The pair must have passed validation.
pub(crate) fn build(w: &AttentionWorkload, s: &AttentionSchedule) -> Module {
    let threads = s.threads(w);
    let b = KernelBuilder::new(s.name(w), [threads, 1, 1]);
    let f32x4 = Type::vec(Scalar::F32, 4);
    let u32x4 = Type::vec(Scalar::U32, 4);
    let h2 = Type::vec(Scalar::F16, 2);
    let Interface {
        q,
        k_cache,
        v_cache,
        out,
        m,
        pos0,
    } = Interface::declare(&b, w);
    let (k_read, v_read) = kv_reads(w);

    let lay = TiledLayout::of(w, s);
    let (tm, tn, kvb) = (s.tile_rows, s.tile_keys, s.kv_block);
    let cols = kvb / tn;
    let hu = lay.head_u4;
    let out_chunks = hu / cols;

    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let cg = b.andi(tid, cols - 1);
    let rg = b.shri(tid, cols.trailing_zeros());
    let rows = WorkgroupRows::new(&b, w, s, m);
    let row_of = |r: Value| rows.row(r);
    let first_row = rows.first_row;
    let (k_head, v_head) = heads(&b, k_read, v_read, rows.kvh());
    let n_keys = workgroup_keys(&b, w, s, first_row, m, pos0, k_cache, v_cache);

    let [q_len, k_len, v_len, p_len] = lay.elements(kvb);
    let q_tile = if s.f16_qk {
        b.shared_array("q_tile", u32x4, q_len)
    } else {
        b.shared_array("q_tile", f32x4, q_len)
    };
    let k_tile = b.shared_array("k_tile", u32x4, k_len);
    let v_tile = b.shared_array("v_tile", u32x4, v_len);
    let p_tile = b.shared_array("p_tile", f32x4, p_len);

    // Every thread copies part of a tile: `total` items, item `idx` handled by `body`.
    let cooperative = |total: u32, body: &dyn Fn(Value)| {
        b.for_range(
            b.c_u32(0),
            b.c_u32(total.div_ceil(threads)),
            1,
            Unroll::Hint,
            |it| {
                let idx = b.add(tid, b.muli(it, threads));
                if total % threads == 0 {
                    body(idx);
                } else {
                    b.if_(b.lt(idx, b.c_u32(total)), || body(idx));
                }
            },
        );
    };

    // The Q tile, pre-scaled by 1/sqrt(head_dim) (rounded to f16 with f16_qk).
    let scale = b.splat(b.c_f32(1.0 / (w.head_dim as f32).sqrt()), 4);
    let q_at = |r: Value, e: Value| {
        let (_, query_c, head) = row_of(r);
        b.add(
            b.add(
                b.muli(query_c, w.q_width() / 4),
                b.muli(head, w.head_dim / 4),
            ),
            e,
        )
    };
    if s.f16_qk {
        cooperative(lay.r * hu, &|idx| {
            let r = b.div(idx, b.c_u32(hu));
            let c = b.rem(idx, b.c_u32(hu));
            let at = q_at(r, b.shli(c, 1));
            let lo = b.mul(b.load(q, at), scale);
            let hi = b.mul(b.load(q, b.addi(at, 1)), scale);
            let pack = |v: Value, i: u32| {
                b.pack_half2x16(b.construct(&[b.extract(v, i), b.extract(v, i + 1)]))
            };
            let words = b.construct(&[pack(lo, 0), pack(lo, 2), pack(hi, 0), pack(hi, 2)]);
            b.store_shared(q_tile, b.add(b.muli(r, lay.q_stride), c), words);
        });
    } else {
        cooperative(lay.r * 2 * hu, &|idx| {
            let r = b.div(idx, b.c_u32(2 * hu));
            let e = b.rem(idx, b.c_u32(2 * hu));
            let v = b.mul(b.load(q, q_at(r, e)), scale);
            b.store_shared(q_tile, b.add(b.muli(r, lay.q_stride), e), v);
        });
    }

    // Per thread row: its workgroup row, the keys it may see (min(pos + 1, n_keys)).
    let my_rows: Vec<Value> = (0..tm).map(|i| b.add(b.muli(rg, tm), b.c_u32(i))).collect();
    // (query, clamped query, head) of each of the thread's rows.
    let my_queries: Vec<(Value, Value, Value)> = my_rows.iter().map(|&r| row_of(r)).collect();
    let row_keys: Vec<Value> = my_queries
        .iter()
        .map(|&(_, query_c, _)| b.min(b.addi(b.add(pos0, query_c), 1), n_keys))
        .collect();

    let zero4 = b.lit(f32x4, 0.0);
    // o[i][t]: (lo, hi) halves of output chunk t of row i.
    let acc: Vec<Vec<(Var, Var)>> = (0..tm)
        .map(|i| {
            (0..out_chunks)
                .map(|t| {
                    (
                        b.var_init(&format!("o{i}_{t}_lo"), zero4),
                        b.var_init(&format!("o{i}_{t}_hi"), zero4),
                    )
                })
                .collect()
        })
        .collect();
    let run_max: Vec<Var> = (0..tm)
        .map(|i| b.var_init(&format!("run_max{i}"), b.c_f32(NEG_BIG)))
        .collect();
    let run_sum: Vec<Var> = (0..tm)
        .map(|i| b.var_init(&format!("run_sum{i}"), b.c_f32(0.0)))
        .collect();
    let key_col = |jj: u32| b.add(cg, b.c_u32(jj * cols));
    let shuffle_reduce = |v: Value, op: &dyn Fn(Value, Value) -> Value| {
        let mut v = v;
        let mut step = 1;
        while step < cols {
            v = op(v, b.subgroup_shuffle_xor(v, b.c_u32(step)));
            step *= 2;
        }
        v
    };

    b.for_range(b.c_u32(0), n_keys, kvb, Unroll::Never, |kb| {
        // K and V rows of the block (keys past n_keys clamped to the last valid one).
        cooperative(kvb * hu, &|idx| {
            let j = b.div(idx, b.c_u32(hu));
            let c = b.rem(idx, b.c_u32(hu));
            let key = b.min(b.add(kb, j), b.sub(n_keys, b.c_u32(1)));
            let k_at = b.add(b.muli(j, lay.k_stride), times(&b, c, k_read.staged_elems()));
            let v_at = times(&b, idx, v_read.staged_elems());
            stage_pair(
                &b,
                (k_head, k_cache, k_tile, k_at),
                (v_head, v_cache, v_tile, v_at),
                key,
                c,
            );
        });
        b.barrier();

        // Scores of the thread's tile.
        let q_rows: Vec<Value> = my_rows.iter().map(|&r| b.muli(r, lay.q_stride)).collect();
        let k_rows: Vec<Value> = (0..tn)
            .map(|jj| b.muli(key_col(jj), lay.k_stride))
            .collect();
        let mut scores: Vec<Vec<Value>> = Vec::new();
        if s.f16_qk {
            let folded = f16_score_pairs(
                &b,
                hu,
                tm as usize,
                tn as usize,
                |i, c| b.load_shared(q_tile, b.addi(q_rows[i], c)),
                |jj, c| b.load_shared(k_tile, b.addi(k_rows[jj], c)),
            );
            for row in folded {
                scores.push(
                    row.into_iter()
                        .map(|f| b.add(b.extract(f, 0), b.extract(f, 1)))
                        .collect(),
                );
            }
        } else {
            let mut sums: Vec<Vec<Option<Value>>> = vec![vec![None; tn as usize]; tm as usize];
            for c in 0..hu {
                let qv: Vec<(Value, Value)> = q_rows
                    .iter()
                    .map(|&at| {
                        let at = b.addi(at, 2 * c);
                        (
                            b.load_shared(q_tile, at),
                            b.load_shared(q_tile, b.addi(at, 1)),
                        )
                    })
                    .collect();
                let kv: Vec<(Value, Value)> = k_rows
                    .iter()
                    .map(|&at| k_read.staged(&b, k_tile, b.addi(at, c * k_read.staged_elems())))
                    .collect();
                for (i, &(qa, qb)) in qv.iter().enumerate() {
                    for (jj, &(ka, kb_)) in kv.iter().enumerate() {
                        let d = b.add(b.dot(qa, ka), b.dot(qb, kb_));
                        sums[i][jj] = Some(match sums[i][jj] {
                            Some(x) => b.add(x, d),
                            None => d,
                        });
                    }
                }
            }
            for row in sums {
                scores.push(row.into_iter().map(|x| x.expect("a chunk")).collect());
            }
        }

        // Masks, the online softmax and the rescaled output.
        let mut p: Vec<Vec<Value>> = Vec::new();
        for i in 0..tm as usize {
            let valid: Vec<Value> = (0..tn)
                .map(|jj| {
                    let key = b.add(kb, key_col(jj));
                    let causal = b.lt(key, row_keys[i]);
                    if w.is_windowed() {
                        // Sliding window: also pos < key + window.
                        let pos = b.add(pos0, my_queries[i].1);
                        b.logical_and(causal, b.lt(pos, b.addi(key, w.window)))
                    } else {
                        causal
                    }
                })
                .collect();
            let masked: Vec<Value> = scores[i]
                .iter()
                .zip(&valid)
                .map(|(&x, &ok)| b.select(ok, x, b.c_f32(NEG_BIG)))
                .collect();
            let local_max = masked[1..].iter().fold(masked[0], |mx, &x| b.max(mx, x));
            let block_max = shuffle_reduce(local_max, &|x, y| b.max(x, y));
            let old_max = b.load_var(run_max[i]);
            let new_max = b.max(old_max, block_max);
            let correction = b.exp(b.sub(old_max, new_max));
            let row_p: Vec<Value> = masked
                .iter()
                .zip(&valid)
                .map(|(&x, &ok)| b.select(ok, b.exp(b.sub(x, new_max)), b.c_f32(0.0)))
                .collect();
            let part = row_p[1..].iter().fold(row_p[0], |a, &x| b.add(a, x));
            let sum = b.add(b.mul(b.load_var(run_sum[i]), correction), part);
            b.store_var(run_sum[i], sum);
            b.store_var(run_max[i], new_max);
            let corr4 = b.splat(correction, 4);
            for &(lo, hi) in &acc[i] {
                b.store_var(lo, b.mul(b.load_var(lo), corr4));
                b.store_var(hi, b.mul(b.load_var(hi), corr4));
            }
            p.push(row_p);
        }
        // The weights to shared memory: per key, the thread's rows as vec4s. `jj` picks a
        // column across four rows of `p` at once, which an iterator over `p` would not say.
        #[allow(clippy::needless_range_loop)]
        for jj in 0..tn as usize {
            let key_base = b.muli(key_col(jj as u32), lay.p_stride);
            for u in 0..tm / 4 {
                let at = b.add(key_base, b.add(b.muli(rg, tm / 4), b.c_u32(u)));
                let i0 = (4 * u) as usize;
                let v = b.construct(&[p[i0][jj], p[i0 + 1][jj], p[i0 + 2][jj], p[i0 + 3][jj]]);
                b.store_shared(p_tile, at, v);
            }
        }
        b.barrier();

        // o += P·V over the block's keys.
        let mut o: Vec<Vec<(Value, Value)>> = acc
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&(lo, hi)| (b.load_var(lo), b.load_var(hi)))
                    .collect()
            })
            .collect();
        let mut pv16: Vec<Vec<Vec<Value>>> = if s.f16_pv {
            vec![vec![vec![b.lit(h2, 0.0); 4]; out_chunks as usize]; tm as usize]
        } else {
            Vec::new()
        };
        let p_row = b.muli(rg, tm / 4);
        for j in 0..kvb {
            let weights: Vec<Value> = (0..tm / 4)
                .flat_map(|u| {
                    let v = b.load_shared(p_tile, b.add(p_row, b.c_u32(j * lay.p_stride + u)));
                    (0..4).map(move |e| (v, e))
                })
                .map(|(v, e)| b.extract(v, e))
                .collect();
            // Staged element of V chunk t of key j.
            let v_at = |t: u32| {
                let c = b.add(cg, b.c_u32(t * cols));
                times(&b, b.add(b.c_u32(j * hu), c), v_read.staged_elems())
            };
            if s.f16_pv {
                let vw: Vec<Value> = (0..out_chunks)
                    .map(|t| b.load_shared(v_tile, v_at(t)))
                    .collect();
                for (i, &pi) in weights.iter().enumerate() {
                    let p2 = b.splat(b.convert(pi, Type::F16), 2);
                    for (t, &words) in vw.iter().enumerate() {
                        // The four f16 pairs of the vec4 of words, lane by lane.
                        for (e, x) in pv16[i][t].iter_mut().enumerate() {
                            *x = b.fma(p2, b.bitcast(b.extract(words, e as u32), h2), *x);
                        }
                    }
                }
            } else {
                let unpacked: Vec<(Value, Value)> = (0..out_chunks)
                    .map(|t| v_read.staged(&b, v_tile, v_at(t)))
                    .collect();
                for (i, &pi) in weights.iter().enumerate() {
                    let p4 = b.splat(pi, 4);
                    for (t, &(va, vb)) in unpacked.iter().enumerate() {
                        let (lo, hi) = o[i][t];
                        o[i][t] = (b.fma(p4, va, lo), b.fma(p4, vb, hi));
                    }
                }
            }
        }
        if s.f16_pv {
            for (row, parts) in o.iter_mut().zip(&pv16) {
                for ((lo, hi), x) in row.iter_mut().zip(parts) {
                    let f4 = |a: Value, c: Value| b.convert(b.construct(&[a, c]), f32x4);
                    *lo = b.add(*lo, f4(x[0], x[1]));
                    *hi = b.add(*hi, f4(x[2], x[3]));
                }
            }
        }
        for (row, vars) in o.iter().zip(&acc) {
            for (&(lo, hi), &(vlo, vhi)) in row.iter().zip(vars) {
                b.store_var(vlo, lo);
                b.store_var(vhi, hi);
            }
        }
        // The next block's staging overwrites K, V and P.
        b.barrier();
    });

    for i in 0..tm as usize {
        let l = shuffle_reduce(b.load_var(run_sum[i]), &|x, y| b.add(x, y));
        let (query, _, head) = my_queries[i];
        b.if_(b.lt(query, m), || {
            // l > 0 whenever a key was visible; an empty cache binding yields zeros, not NaN.
            let inv = b.select(b.gt(l, b.c_f32(0.0)), b.div(b.c_f32(1.0), l), b.c_f32(0.0));
            let inv4 = b.splat(inv, 4);
            let o_base = b.add(b.muli(query, w.q_width() / 4), b.muli(head, w.head_dim / 4));
            for (t, &(lo, hi)) in acc[i].iter().enumerate() {
                let c = b.add(cg, b.c_u32(t as u32 * cols));
                let at = b.add(o_base, b.shli(c, 1));
                b.store(out, at, b.mul(b.load_var(lo), inv4));
                b.store(out, b.addi(at, 1), b.mul(b.load_var(hi), inv4));
            }
        });
    }
    b.finish()
}
