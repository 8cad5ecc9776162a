//! The key-split attention kernel (`lane_rows > 0`): the lanes of a row group split each key
//! block between them instead of head_dim, for GPUs whose subgroup shuffles are slow and whose
//! shared memory costs what global memory costs (Mali under panvk).
//!
//! The row-wise kernel (`kernel.rs`) splits head_dim over a row's lanes, so every key's score
//! is a sum across lanes: on panvk each shuffle becomes a loop of its own, and the
//! shared-memory reduction costs every lane a store per key and a load per key and lane. Here
//! lane `l` of a group of L computes whole scores, for its own keys of the block, and only
//! the finished scores are exchanged, once per block (one store per g keys, then the block's
//! scores read back by every lane, g at a time). Each group serves `lane_rows` rows that share
//! a kv head (heads of a GQA group, or queries of one head), so every K and V load feeds that
//! many rows:
//!
//! ```text
//! R = rows · heads rows (row r = query r / heads, head r % heads); groups of L lanes;
//! group g serves rows g·lane_rows + i (i < lane_rows); k = kv_block / L keys per lane,
//! exchanged in vectors of g = min(k, 4)
//! [f16_qk: Q (pre-scaled by 1/sqrt(head_dim), rounded to f16) → shared once; barrier]
//! for kb in (0..n_keys).step_by(kv_block):          // uniform: barriers are legal
//!     s[i][kk] = q_i · K[kb + l·k + kk]  (whole head_dim; masked keys → NEG_BIG)
//!     s → exchange[block parity][row][key]; barrier
//!     for j0 in (0..kv_block).step_by(g):            // a loop: its body's loads stay few
//!         every lane reads its rows' scores j0..j0+g: mx' = max(mx, max_j s), c = exp(mx - mx')
//!         p[i][j] = exp(s[i][j] - mx'); l = l·c + Σ_j p; o = o·c
//!         o[i][t] += Σ_j p[i][j] · V[kb + j][chunk l + t·L]   (lane l owns chunks l + t·L)
//! out = o / l for rows < m
//! ```
//! The running max moves every g keys (online softmax within the block as across blocks), so
//! each score is read back once: no separate pass for the block's max. Unrolled, the P·V
//! loop's V loads were all hoisted and spilled beyond 16 keys per lane group (Valhall).
//! In f32, Q is read from its buffer, as K and V are, and each score scaled by
//! 1/sqrt(head_dim) once finished: a shared Q tile would cost the same load/store cycles and
//! several KiB of workgroup memory, which panvk allocates per dispatch for every workgroup
//! instance (Mesa 25.0.7: the power-of-two-rounded grid, uncapped).
//! The exchange is double-buffered by block parity: a lane writing block n + 2's scores has
//! passed block n + 1's barrier, which no lane reaches before it has read block n's scores, so
//! one barrier per block suffices. K and V are read from the cache directly (keys past n_keys
//! clamped to the last valid one, and masked): where shared memory is ordinary memory, staging
//! them would only add a store and a load per word. The f16 options are those of the other
//! kernels (`f16_qk`: the Q tile in f16 and each score an f16vec2 chain folded into f32 per
//! step of the score loop; `f16_pv`: each step's weights rounded to f16 and Σ_j p·v summed in
//! f16vec2, folded into the f32 output after the step).

use super::kernel::{kv_reads, workgroup_keys, Interface};
use super::kv_load::{heads, KvHead, KvRow};
use super::rows::WorkgroupRows;
use super::schedule::AttentionSchedule;
use super::split_kv;
use super::tiled::f16_score_pairs;
use super::workload::AttentionWorkload;
use crate::ir::{
    Buffer, Builtin, KernelBuilder, Module, Scalar, SharedArray, Type, Unroll, Value, Var,
};

/// The running max before any key: far below any score, yet finite.
const NEG_BIG: f32 = -1.0e30;

/// Shared-memory layout of a key-split schedule, in 4-byte words; also what
/// [`AttentionSchedule::shared_bytes`] counts.
pub(crate) struct KeySplitLayout {
    /// Rows of the workgroup (rows × heads).
    pub r: u32,
    /// 16-byte elements per row of the f16 Q tile (`f16_qk`; 0 without: Q is read from its
    /// buffer).
    pub q_stride: u32,
}

impl KeySplitLayout {
    pub(crate) fn of(w: &AttentionWorkload, s: &AttentionSchedule) -> KeySplitLayout {
        let head_u4 = w.head_dim / 8;
        KeySplitLayout {
            r: s.row_slots(w),
            q_stride: if s.f16_qk { head_u4 } else { 0 },
        }
    }

    /// Bytes of the f16 Q tile and of the two score-exchange buffers.
    pub(crate) fn bytes(&self, kv_block: u32) -> u32 {
        16 * self.r * self.q_stride + 4 * 2 * self.r * kv_block
    }
}

/// Builds the IR of the key-split kernel. The pair must have passed validation.
pub(crate) fn build(w: &AttentionWorkload, s: &AttentionSchedule) -> Module {
    let threads = s.threads(w);
    let b = KernelBuilder::new(s.name(w), [threads, 1, 1]);
    let f32x4 = Type::vec(Scalar::F32, 4);
    let u32x4 = Type::vec(Scalar::U32, 4);
    let h2 = Type::vec(Scalar::F16, 2);
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

    let lay = KeySplitLayout::of(w, s);
    let lanes = s.threads_per_row;
    let kvb = s.kv_block;
    let keys_per_lane = kvb / lanes;
    let rows_per_group = s.lane_rows;
    let hu = w.head_dim / 8;
    let chunks = s.chunks_per_lane(w);

    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let lane = b.andi(tid, lanes - 1);
    let group = b.shri(tid, lanes.trailing_zeros());
    let rows = WorkgroupRows::new(&b, w, s, m);
    let row_of = |r: Value| rows.row(r);
    let first_row = rows.first_row;
    let (k_head, v_head) = heads(&b, k_read, v_read, rows.kvh());
    let n_keys = workgroup_keys(&b, w, s, first_row, m, pos0, k_cache, v_cache);
    let last_key = b.sub(n_keys, b.c_u32(1));

    let q_tile = s
        .f16_qk
        .then(|| b.shared_array("q_tile", u32x4, lay.r * lay.q_stride));
    // Scores are exchanged in vectors of `g` keys (a lane's keys are contiguous), so the
    // block max and the P·V loop read them a vector at a time.
    let g = exchange_width(keys_per_lane);
    let exchange = b.shared_array("scores", score_vector(g), 2 * lay.r * kvb / g);
    let comp = |v: Value, c: u32| if g == 1 { v } else { b.extract(v, c) };

    // The f16 Q tile, pre-scaled by 1/sqrt(head_dim), copied by all threads together.
    let inv_sqrt = 1.0 / (w.head_dim as f32).sqrt();
    let scale = b.splat(b.c_f32(inv_sqrt), 4);
    let q_at = |query_c: Value, head: Value| {
        b.add(
            b.muli(query_c, w.q_width() / 4),
            b.muli(head, w.head_dim / 4),
        )
    };
    if let Some(q_tile) = q_tile {
        let total = lay.r * hu;
        b.for_range(
            b.c_u32(0),
            b.c_u32(total.div_ceil(threads)),
            1,
            Unroll::Hint,
            |it| {
                let idx = b.add(tid, b.muli(it, threads));
                let body = || {
                    let (_, query_c, head) = row_of(b.div(idx, b.c_u32(hu)));
                    let c = b.rem(idx, b.c_u32(hu));
                    let at = b.add(q_at(query_c, head), b.shli(c, 1));
                    let lo = b.mul(b.load(q, at), scale);
                    let hi = b.mul(b.load(q, b.addi(at, 1)), scale);
                    let pack = |v: Value, i: u32| {
                        b.pack_half2x16(b.construct(&[b.extract(v, i), b.extract(v, i + 1)]))
                    };
                    let words = b.construct(&[pack(lo, 0), pack(lo, 2), pack(hi, 0), pack(hi, 2)]);
                    b.store_shared(q_tile, idx, words);
                };
                if total % threads == 0 {
                    body();
                } else {
                    b.if_(b.lt(idx, b.c_u32(total)), body);
                }
            },
        );
        b.barrier();
    }

    // The group's rows: workgroup row, (query, clamped query, head), position, visible keys.
    let my_rows: Vec<Value> = (0..rows_per_group)
        .map(|i| b.addi(b.muli(group, rows_per_group), i))
        .collect();
    let my_queries: Vec<(Value, Value, Value)> = my_rows.iter().map(|&r| row_of(r)).collect();
    let positions: Vec<Value> = my_queries
        .iter()
        .map(|&(_, query_c, _)| b.add(pos0, query_c))
        .collect();
    let row_keys: Vec<Value> = positions
        .iter()
        .map(|&pos| b.min(b.addi(pos, 1), n_keys))
        .collect();
    let window = w.is_windowed().then_some(w.window);
    let visible = |i: usize, key: Value| {
        let causal = b.lt(key, row_keys[i]);
        match window {
            // Sliding window: also pos < key + window.
            Some(win) => b.logical_and(causal, b.lt(positions[i], b.addi(key, win))),
            None => causal,
        }
    };

    let zero4 = b.lit(f32x4, 0.0);
    // o[i][t]: (lo, hi) halves of this lane's output chunk t of row i.
    let acc: Vec<Vec<(Var, Var)>> = (0..rows_per_group)
        .map(|i| {
            (0..chunks)
                .map(|t| {
                    (
                        b.var_init(&format!("o{i}_{t}_lo"), zero4),
                        b.var_init(&format!("o{i}_{t}_hi"), zero4),
                    )
                })
                .collect()
        })
        .collect();
    let run_max: Vec<Var> = (0..rows_per_group)
        .map(|i| b.var_init(&format!("run_max{i}"), b.c_f32(NEG_BIG)))
        .collect();
    let run_sum: Vec<Var> = (0..rows_per_group)
        .map(|i| b.var_init(&format!("run_sum{i}"), b.c_f32(0.0)))
        .collect();
    let chunk_of = |t: u32| b.add(lane, b.c_u32(t * lanes));
    // Where each row's Q starts: in the f16 tile, or (f32) in the q buffer.
    let q_rows: Vec<Value> = match q_tile {
        Some(_) => my_rows.iter().map(|&r| b.muli(r, lay.q_stride)).collect(),
        None => my_queries
            .iter()
            .map(|&(_, query_c, head)| q_at(query_c, head))
            .collect(),
    };

    // Split-KV (decode): this workgroup's piece of the keys, whole blocks (`split_kv.rs`);
    // block parity below counts from key 0, so pieces starting on any block stay consistent.
    let (key_lo, key_hi) = if split {
        split_kv::key_range(&b, n_keys, kvb)
    } else {
        (b.c_u32(0), n_keys)
    };
    b.for_range(key_lo, key_hi, kvb, Unroll::Never, |kb| {
        // This lane's keys of the block, and where their K rows start (clamped).
        let my_keys: Vec<Value> = (0..keys_per_lane)
            .map(|kk| b.add(kb, b.addi(b.muli(lane, keys_per_lane), kk)))
            .collect();
        let k_rows: Vec<KvRow> = my_keys
            .iter()
            .map(|&key| k_head.row(&b, b.min(key, last_key)))
            .collect();
        let scores = match q_tile {
            Some(tile) => {
                // Packed-f16 products read the words of an f16 cache (validation sees to it).
                let heads: Vec<Value> = k_rows.iter().map(|r| r.head()).collect();
                f16_scores(&b, tile, k_cache, &q_rows, &heads, hu)
            }
            None => f32_scores(&b, q, (k_cache, k_head), &q_rows, &k_rows, hu)
                .into_iter()
                .map(|row| {
                    row.into_iter()
                        .map(|x| b.mul(x, b.c_f32(inv_sqrt)))
                        .collect()
                })
                .collect(),
        };

        // Exchange the finished scores (masked ones at NEG_BIG) through the parity's buffer.
        let parity = b.andi(b.shri(kb, kvb.trailing_zeros()), 1);
        let buf = b.muli(parity, lay.r * kvb / g);
        let row_at = |i: usize| b.add(buf, b.muli(my_rows[i], kvb / g));
        for (i, row_scores) in scores.iter().enumerate() {
            for kk0 in (0..keys_per_lane).step_by(g as usize) {
                let sc: Vec<Value> = (kk0..kk0 + g)
                    .map(|kk| {
                        let x = row_scores[kk as usize];
                        b.select(visible(i, my_keys[kk as usize]), x, b.c_f32(NEG_BIG))
                    })
                    .collect();
                let at = b.add(row_at(i), b.addi(b.muli(lane, keys_per_lane / g), kk0 / g));
                b.store_shared(exchange, at, if g == 1 { sc[0] } else { b.construct(&sc) });
            }
        }
        b.barrier();

        // o += Σ_j p·v over this lane's chunks, g keys (one exchanged vector per row) per step
        // of a loop: unrolled, Valhall hoists every V load of the block and spills beyond 16
        // keys per row group. The running max moves per step (online softmax within the
        // block), so the scores are read once: no separate pass for the block's max. Each V
        // word feeds every row of the group.
        b.for_range(b.c_u32(0), b.c_u32(kvb), g, Unroll::Never, |j0| {
            let mut corrections: Vec<Value> = Vec::new();
            let weights: Vec<Vec<Value>> = (0..rows_per_group as usize)
                .map(|i| {
                    let xs =
                        b.load_shared(exchange, b.add(row_at(i), b.shri(j0, g.trailing_zeros())));
                    let x: Vec<Value> = (0..g).map(|c| comp(xs, c)).collect();
                    let old_max = b.load_var(run_max[i]);
                    let new_max = x.iter().fold(old_max, |mx, &v| b.max(mx, v));
                    let correction = b.exp(b.sub(old_max, new_max));
                    b.store_var(run_max[i], new_max);
                    let mut sum = b.mul(b.load_var(run_sum[i]), correction);
                    let p: Vec<Value> = x
                        .iter()
                        .enumerate()
                        .map(|(jj, &v)| {
                            let e = b.exp(b.sub(v, new_max));
                            let key = b.add(kb, b.addi(j0, jj as u32));
                            let pj = b.select(visible(i, key), e, b.c_f32(0.0));
                            sum = b.add(sum, pj);
                            pj
                        })
                        .collect();
                    b.store_var(run_sum[i], sum);
                    corrections.push(b.splat(correction, 4));
                    p
                })
                .collect();
            let mut outs: Vec<Vec<(Value, Value)>> = acc
                .iter()
                .zip(&corrections)
                .map(|(row, &c4)| {
                    row.iter()
                        .map(|&(lo, hi)| (b.mul(b.load_var(lo), c4), b.mul(b.load_var(hi), c4)))
                        .collect()
                })
                .collect();
            // f16_pv: the step's Σ p·v in f16vec2 per row and chunk, folded into f32 after it.
            let mut sums16: Vec<Vec<Vec<Value>>> = if s.f16_pv {
                (0..rows_per_group)
                    .map(|_| (0..chunks).map(|_| vec![b.lit(h2, 0.0); 4]).collect())
                    .collect()
            } else {
                Vec::new()
            };
            for jj in 0..g {
                let key = b.min(b.add(kb, b.addi(j0, jj)), last_key);
                let v_row = v_head.row(&b, key);
                for t in 0..chunks {
                    if s.f16_pv {
                        let words = b.load(v_cache, b.add(v_row.head(), chunk_of(t)));
                        for (i, row) in sums16.iter_mut().enumerate() {
                            let p2 = b.splat(b.convert(weights[i][jj as usize], Type::F16), 2);
                            for (e, x) in row[t as usize].iter_mut().enumerate() {
                                *x = b.fma(p2, b.bitcast(b.extract(words, e as u32), h2), *x);
                            }
                        }
                        continue;
                    }
                    let (vlo, vhi) = v_head.chunk_at(&b, v_cache, v_row, chunk_of(t));
                    for (i, row) in outs.iter_mut().enumerate() {
                        let p4 = b.splat(weights[i][jj as usize], 4);
                        let (lo, hi) = &mut row[t as usize];
                        *lo = b.fma(p4, vlo, *lo);
                        *hi = b.fma(p4, vhi, *hi);
                    }
                }
            }
            let f4 = |x: Value, y: Value| b.convert(b.construct(&[x, y]), f32x4);
            for (i, (vars, vals)) in acc.iter().zip(&outs).enumerate() {
                for (t, (&(lo, hi), &(x, y))) in vars.iter().zip(vals).enumerate() {
                    let (x, y) = if s.f16_pv {
                        let c = &sums16[i][t];
                        (b.add(x, f4(c[0], c[1])), b.add(y, f4(c[2], c[3])))
                    } else {
                        (x, y)
                    };
                    b.store_var(lo, x);
                    b.store_var(hi, y);
                }
            }
        });
    });

    if split {
        // Each row's unnormalised partial, and from lane 0 of its group its (max, sum).
        for (i, &(query, _, head)) in my_queries.iter().enumerate() {
            let acc_i: Vec<(Var, Var)> = acc[i].clone();
            split_kv::PartialStore {
                w,
                s,
                partials: out,
                query,
                head,
                lane,
                m,
                acc: &acc_i,
                chunk_of: &chunk_of,
                run_max: run_max[i],
                run_sum: run_sum[i],
            }
            .emit(&b);
        }
        if s.fused_combine {
            split_kv::combine_in_last_piece(&b, w, s, out, m);
        }
        return b.finish();
    }
    for (i, &(query, _, head)) in my_queries.iter().enumerate() {
        b.if_(b.lt(query, m), || {
            let l = b.load_var(run_sum[i]);
            // l > 0 whenever a key was visible; an empty cache binding yields zeros, not NaN.
            let inv = b.select(b.gt(l, b.c_f32(0.0)), b.div(b.c_f32(1.0), l), b.c_f32(0.0));
            let inv4 = b.splat(inv, 4);
            let o_base = b.add(b.muli(query, w.q_width() / 4), b.muli(head, w.head_dim / 4));
            for (t, &(lo, hi)) in acc[i].iter().enumerate() {
                let at = b.add(o_base, b.shli(chunk_of(t as u32), 1));
                b.store(out, at, b.mul(b.load_var(lo), inv4));
                b.store(out, b.addi(at, 1), b.mul(b.load_var(hi), inv4));
            }
        });
    }
    b.finish()
}

/// Chunks of head_dim up to which the score loop of one row and at most two keys per lane is
/// unrolled whole (head_dim 64); beyond, it runs as a loop, because Valhall's compiler hoists
/// every load of an unrolled 16- or 32-chunk body and spills (head_dim 256: 5:35
/// spills:fills, Mesa 25.0.7).
const UNROLLED_CHUNKS: u32 = 8;

/// Whether the score loop over `hu` chunks is unrolled whole for `nr` rows and `nk` keys per
/// lane: up to [`UNROLLED_CHUNKS`] chunks of one row and at most two keys; else it is a loop
/// over steps of [`QK_STEP_CHUNKS`].
fn unrolled_scores(hu: u32, nr: usize, nk: usize) -> bool {
    hu <= UNROLLED_CHUNKS && nr * nk <= 2
}

/// Chunks of head_dim per step of the rolled score loop: one. A step's loads are what the
/// compiler keeps live at once, and the load/store cycles per key are the same at any step
/// (Mesa 26.1.6, head_dim 128: 81 per block of 16 keys at steps of 1, 2 and 4 chunks, with
/// 37, 43 and 45 registers; two rows and two keys per lane spill from two chunks on).
const QK_STEP_CHUNKS: u32 = 1;

/// f32 scores of each (row, key), unscaled: Σ over head_dim of q (from its buffer) times the
/// unpacked key (the K cache, its reader and the kv head), one chunk (8 elements) at a time,
/// so each Q load feeds every key and each K load every row.
fn f32_scores(
    b: &KernelBuilder,
    q: Buffer,
    (k_cache, k_head): (Buffer, KvHead),
    q_rows: &[Value],
    k_rows: &[KvRow],
    hu: u32,
) -> Vec<Vec<Value>> {
    let step = |c0: Value, chunks: u32, sums: &mut Vec<Vec<Option<Value>>>| {
        for c in 0..chunks {
            let c = b.addi(c0, c);
            let qv: Vec<(Value, Value)> = q_rows
                .iter()
                .map(|&at| {
                    let at = b.add(at, b.shli(c, 1));
                    (b.load(q, at), b.load(q, b.addi(at, 1)))
                })
                .collect();
            let kv: Vec<(Value, Value)> = k_rows
                .iter()
                .map(|&row| k_head.chunk_at(b, k_cache, row, c))
                .collect();
            for (i, &(qlo, qhi)) in qv.iter().enumerate() {
                for (kk, &(klo, khi)) in kv.iter().enumerate() {
                    let d = b.add(b.dot(qlo, klo), b.dot(qhi, khi));
                    sums[i][kk] = Some(match sums[i][kk] {
                        Some(x) => b.add(x, d),
                        None => d,
                    });
                }
            }
        }
    };
    let (nr, nk) = (q_rows.len(), k_rows.len());
    if unrolled_scores(hu, nr, nk) {
        let mut sums = vec![vec![None; nk]; nr];
        step(b.c_u32(0), hu, &mut sums);
        return sums
            .into_iter()
            .map(|row| row.into_iter().map(|x| x.expect("a chunk")).collect())
            .collect();
    }
    let vars: Vec<Vec<Var>> = (0..nr)
        .map(|i| {
            (0..nk)
                .map(|kk| b.var_init(&format!("s{i}_{kk}"), b.c_f32(0.0)))
                .collect()
        })
        .collect();
    let g = QK_STEP_CHUNKS;
    b.for_range(b.c_u32(0), b.c_u32(hu), g, Unroll::Never, |c0| {
        let mut sums = vec![vec![None; nk]; nr];
        step(c0, g, &mut sums);
        for (row, vars) in sums.iter().zip(&vars) {
            for (x, &v) in row.iter().zip(vars) {
                b.store_var(v, b.add(b.load_var(v), x.expect("a chunk")));
            }
        }
    });
    vars.iter()
        .map(|row| row.iter().map(|&v| b.load_var(v)).collect())
        .collect()
}

/// f16 scores: f16vec2 FMA chains of the f16 Q tile and the cache words (no unpacking),
/// folded into f32 every [`super::tiled::QK_FOLD_CHUNKS`] chunks when unrolled whole, else
/// once per step of the loop.
fn f16_scores(
    b: &KernelBuilder,
    q_tile: SharedArray,
    k_cache: Buffer,
    q_rows: &[Value],
    k_rows: &[Value],
    hu: u32,
) -> Vec<Vec<Value>> {
    let f32x2 = Type::vec(Scalar::F32, 2);
    let (nr, nk) = (q_rows.len(), k_rows.len());
    // Chunks c0 .. c0 + chunks, folded into f32 every QK_FOLD_CHUNKS: (lo, hi) f32 pairs.
    let step = |c0: Value, chunks: u32| -> Vec<Vec<Value>> {
        f16_score_pairs(
            b,
            chunks,
            nr,
            nk,
            |i, c| b.load_shared(q_tile, b.add(q_rows[i], b.addi(c0, c))),
            |j, c| b.load(k_cache, b.add(k_rows[j], b.addi(c0, c))),
        )
    };
    let total = |f: Value| b.add(b.extract(f, 0), b.extract(f, 1));
    if unrolled_scores(hu, nr, nk) {
        return step(b.c_u32(0), hu)
            .into_iter()
            .map(|row| row.into_iter().map(total).collect())
            .collect();
    }
    let zero2 = b.lit(f32x2, 0.0);
    let vars: Vec<Vec<Var>> = (0..nr)
        .map(|i| {
            (0..nk)
                .map(|kk| b.var_init(&format!("s{i}_{kk}"), zero2))
                .collect()
        })
        .collect();
    let g = QK_STEP_CHUNKS;
    b.for_range(b.c_u32(0), b.c_u32(hu), g, Unroll::Never, |c0| {
        for (row, vars) in step(c0, g).iter().zip(&vars) {
            for (&x, &v) in row.iter().zip(vars) {
                b.store_var(v, b.add(b.load_var(v), x));
            }
        }
    });
    vars.iter()
        .map(|row| row.iter().map(|&v| total(b.load_var(v))).collect())
        .collect()
}

/// Keys per exchanged vector, and per step of the P·V loop: a lane's keys, up to four.
const PV_KEYS: u32 = 4;

/// Keys per exchanged score vector for `keys_per_lane` (a power of two).
fn exchange_width(keys_per_lane: u32) -> u32 {
    keys_per_lane.min(PV_KEYS)
}

/// The exchange's element type: f32, or a vector of `g` of them.
fn score_vector(g: u32) -> Type {
    if g == 1 {
        Type::F32
    } else {
        Type::vec(Scalar::F32, g)
    }
}
