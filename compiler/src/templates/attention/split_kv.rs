//! Split-KV ("flash-decoding") attention for decode steps, first half: the key range of each
//! (query block, head group) is cut into `splits` contiguous pieces, one workgroup each
//! (grid z), so a decode step of a model with 2 kv heads runs on `2 × splits` workgroups
//! instead of 2. Each workgroup runs the ordinary row-wise kernel (`kernel.rs`) over its
//! piece and stores its unnormalised partial instead of the output; the combine kernel
//! (`combine.rs`) merges the pieces as the online softmax does.
//!
//! Schedule: `kv_splits` ≥ 2 is the most pieces a dispatch may use (it sizes the scratch);
//! [`splits_for`] picks the count of each step at run time from the key count and the
//! device's compute units, and the runtime dispatches that many along z (the kernel reads
//! its piece count from `NumWorkgroups.z`).
//!
//! Piece z of a workgroup that sees `n` keys covers keys `[z·c, min((z+1)·c, n))` with
//! `c = ceil(ceil(n / splits) / kv_block) · kv_block`: whole key blocks, so only the last
//! piece has a partial block (masked as before); a piece past `n` is empty and stores
//! max = -1e30, sum = 0, o = 0, which the combine weighs by exp(-1e30 - max) = 0.
//!
//! Scratch (binding 3 `partials`, f32 as vec4), for the workload's `m` and `kv_splits`:
//! - o: `kv_splits × m × q_width` values, piece z row i at `(z·m + i)·q_width` (the
//!   unnormalised Σ p·v of each head, as the running rescaling left it);
//! - then (max, sum, 0, 0) per (piece, row, head): `kv_splits × m × n_heads` vec4s from
//!   [`ml_offset_vec4`].

use super::kernel::NEG_BIG;
use super::schedule::AttentionSchedule;
use super::workload::AttentionWorkload;
use crate::ir::{Access, Buffer, Builtin, KernelBuilder, Scalar, Type, Value, Var};

/// Query rows up to which a workload may split its keys: decode steps (m = 1) and small
/// batches. A prefill ubatch has m × heads workgroups already and keeps the plain kernel.
pub const SPLIT_MAX_M: u32 = 8;

/// The most pieces a schedule may ask for.
pub const MAX_KV_SPLITS: u32 = 64;

/// Key blocks a piece covers at least when the count is chosen by rule (a piece of fewer
/// blocks costs more in its partial's store and the combine than it saves).
pub const MIN_BLOCKS_PER_SPLIT: u32 = 4;

/// The `kv_splits` of the default schedule of a decode workload: the cap only; the count of
/// a step comes from [`splits_for`].
pub const DEFAULT_KV_SPLITS: u32 = 32;

/// Workgroups per compute unit the rule aims for (two, so one's memory waits overlap the
/// other's arithmetic).
const WORKGROUPS_PER_UNIT: u32 = 2;

/// A fused-combine kernel's (`fused_combine`) further bindings: the attention output (f32
/// vec4, m × q_width) and the arrival counters (u32, one per workgroup tile: x + y·grid x of
/// the dispatch; zero before the dispatch, and zero again after it).
pub const BINDING_FUSED_OUT: u32 = 4;
pub const BINDING_COUNTERS: u32 = 5;

/// Counters a fused-combine dispatch with `grid` needs.
pub fn counters_for(grid: [u32; 3]) -> u32 {
    grid[0] * grid[1]
}

/// Whether `s` splits the keys.
pub fn is_split(s: &AttentionSchedule) -> bool {
    s.kv_splits > 1
}

/// f32 values of the scratch a split schedule needs (0 without splits).
pub fn scratch_values(w: &AttentionWorkload, s: &AttentionSchedule) -> u64 {
    if !is_split(s) {
        return 0;
    }
    let per_piece = u64::from(w.m) * (u64::from(w.q_width()) + 4 * u64::from(w.n_heads));
    u64::from(s.kv_splits) * per_piece
}

/// vec4 index where the (max, sum) records start.
pub fn ml_offset_vec4(w: &AttentionWorkload, s: &AttentionSchedule) -> u32 {
    s.kv_splits * w.m * w.q_width() / 4
}

/// Pieces of a step whose workgroups see `n_keys` keys, `workgroups` of them without
/// splitting (row blocks × head groups), on a device with `compute_units` where known:
/// enough to give every unit [`WORKGROUPS_PER_UNIT`] workgroups, each piece at least
/// [`MIN_BLOCKS_PER_SPLIT`] key blocks, at most the schedule's `kv_splits`. Where the unit
/// count is unknown only the length and the cap bound it. 1 (no split) for a schedule
/// without splits.
pub fn splits_for(
    s: &AttentionSchedule,
    n_keys: u32,
    workgroups: u32,
    compute_units: Option<u32>,
) -> u32 {
    if !is_split(s) {
        return 1;
    }
    let by_length = n_keys.div_ceil(MIN_BLOCKS_PER_SPLIT * s.kv_block.max(1));
    let by_device = compute_units.map_or(u32::MAX, |cu| {
        (cu.max(1) * WORKGROUPS_PER_UNIT).div_ceil(workgroups.max(1))
    });
    by_length.min(by_device).clamp(1, s.kv_splits)
}

/// The schedule with the default split cap where `w` is a decode workload the split form
/// serves (row-wise kernel, at most [`SPLIT_MAX_M`] rows) and the result still validates.
pub fn with_default_splits(
    w: &AttentionWorkload,
    s: AttentionSchedule,
    caps: &crate::caps::DeviceCaps,
) -> AttentionSchedule {
    if w.m > SPLIT_MAX_M || s.is_tiled() || is_split(&s) {
        return s;
    }
    // The pieces are merged by the combine kernel, not in the last piece (`fused_combine`,
    // left to the tuner): on an H100 the fused merge made decode slower (Qwen2.5-3B Q4_K_M tg
    // 231 against 259 tok/s at depth 0, 206 against 245 at 2048; 0.5B 602 against 637), the
    // one last workgroup of a tile merging every head's pieces in series where the combine
    // kernel spreads them over many (docs/measurements/2026-12-06-decode-fusions.md).
    let split = AttentionSchedule {
        kv_splits: DEFAULT_KV_SPLITS,
        fused_combine: false,
        ..s
    };
    if split.validate(w, caps).is_ok() {
        split
    } else {
        s
    }
}

/// The schedule's own rules for `kv_splits` (called from `AttentionSchedule::validate`).
pub(crate) fn validate(w: &AttentionWorkload, s: &AttentionSchedule) -> Result<(), String> {
    if s.kv_splits > MAX_KV_SPLITS {
        return Err(format!(
            "kv_splits {} must be at most {MAX_KV_SPLITS}",
            s.kv_splits
        ));
    }
    if !is_split(s) {
        return Ok(());
    }
    if s.is_tiled() {
        return Err("kv_splits needs the row-wise kernel (tile_rows 0)".into());
    }
    if w.m > SPLIT_MAX_M {
        return Err(format!(
            "kv_splits is for decode: m = {} exceeds {SPLIT_MAX_M} rows",
            w.m
        ));
    }
    if scratch_values(w, s) * 4 > u64::from(u32::MAX) {
        return Err("the split partials exceed 32-bit indexing".into());
    }
    Ok(())
}

/// The key range `[lo, hi)` of this workgroup's piece, out of the `n_keys` it sees.
pub(crate) fn key_range(b: &KernelBuilder, n_keys: Value, kv_block: u32) -> (Value, Value) {
    let z = b.builtin(Builtin::WorkgroupId(2));
    let splits = b.builtin(Builtin::NumWorkgroups(2));
    let per = b.div(b.add(n_keys, b.sub(splits, b.c_u32(1))), splits);
    let blocks = b.div(b.addi(per, kv_block - 1), b.c_u32(kv_block));
    let chunk = b.muli(blocks, kv_block);
    let lo = b.min(b.mul(z, chunk), n_keys);
    let hi = b.min(b.add(lo, chunk), n_keys);
    (lo, hi)
}

/// What the end of a split workgroup stores, per row slot.
pub(crate) struct PartialStore<'a> {
    pub w: &'a AttentionWorkload,
    pub s: &'a AttentionSchedule,
    pub partials: Buffer,
    pub query: Value,
    pub head: Value,
    pub lane: Value,
    pub m: Value,
    /// The lane's output chunks (lo, hi vec4 each) and their chunk numbers within the head.
    pub acc: &'a [(Var, Var)],
    pub chunk_of: &'a dyn Fn(u32) -> Value,
    pub run_max: Var,
    pub run_sum: Var,
}

impl PartialStore<'_> {
    /// Stores the unnormalised o chunks and, from lane 0, the row's (max, sum), for rows < m.
    pub(crate) fn emit(&self, b: &KernelBuilder) {
        let (w, s) = (self.w, self.s);
        let z = b.builtin(Builtin::WorkgroupId(2));
        let ok = b.logical_and(b.lt(self.query, self.m), b.lt(z, b.c_u32(s.kv_splits)));
        b.if_(ok, || {
            let row = b.add(b.muli(z, w.m), self.query);
            let o_base = b.add(
                b.muli(row, w.q_width() / 4),
                b.muli(self.head, w.head_dim / 4),
            );
            for (t, &(lo, hi)) in self.acc.iter().enumerate() {
                let at = b.add(o_base, b.shli((self.chunk_of)(t as u32), 1));
                b.store(self.partials, at, b.load_var(lo));
                b.store(self.partials, b.addi(at, 1), b.load_var(hi));
            }
            b.if_(b.eq(self.lane, b.c_u32(0)), || {
                let at = b.add(
                    b.c_u32(ml_offset_vec4(w, s)),
                    b.add(b.muli(row, w.n_heads), self.head),
                );
                let zero = b.c_f32(0.0);
                let rec = b.construct(&[
                    b.load_var(self.run_max),
                    b.load_var(self.run_sum),
                    zero,
                    zero,
                ]);
                b.store(self.partials, at, rec);
            });
        });
    }
}

/// The fused combine (`fused_combine`): called by the whole workgroup after its piece's
/// partials are stored. The workgroup counts itself in at its tile's counter; the last of the
/// tile's `NumWorkgroups.z` pieces to arrive resets the counter and merges every piece's
/// partials of its rows and heads into `out` (`combine::merge_vec4`, the combine kernel's
/// arithmetic). Nobody waits: the last one finds the others' partials written (their device
/// barrier before counting in, its own after), so no forward-progress guarantee is needed.
pub(crate) fn combine_in_last_piece(
    b: &KernelBuilder,
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    partials: Buffer,
    m: Value,
) {
    let out = b.buffer(
        BINDING_FUSED_OUT,
        "out",
        Type::vec(Scalar::F32, 4),
        Access::WriteOnly,
    );
    let counters = b.coherent_buffer(BINDING_COUNTERS, "counters", Type::U32);
    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let threads = s.threads(w);
    // Every invocation's partials reach device scope before the workgroup counts in.
    b.device_memory_barrier();
    b.barrier();
    let flag = b.shared_array("last_piece", Type::U32, 1);
    b.if_(b.eq(tid, b.c_u32(0)), || {
        let tile = b.add(
            b.mul(
                b.builtin(Builtin::WorkgroupId(1)),
                b.builtin(Builtin::NumWorkgroups(0)),
            ),
            b.builtin(Builtin::WorkgroupId(0)),
        );
        let pieces = b.builtin(Builtin::NumWorkgroups(2));
        let arrived = b.atomic_add(counters, tile, b.c_u32(1));
        let last = b.eq(arrived, b.sub(pieces, b.c_u32(1)));
        b.if_(last, || {
            // Back to zero (adding -pieces in wrapping u32 arithmetic).
            b.atomic_add(counters, tile, b.sub(b.c_u32(0), pieces));
        });
        b.store_shared(flag, b.c_u32(0), b.select(last, b.c_u32(1), b.c_u32(0)));
    });
    b.barrier();
    b.if_(b.eq(b.load_shared(flag, b.c_u32(0)), b.c_u32(1)), || {
        // See the other pieces' partials (their release, our acquire).
        b.device_memory_barrier();
        let splits = b.min(b.builtin(Builtin::NumWorkgroups(2)), b.c_u32(s.kv_splits));
        let first_row = b.muli(b.builtin(Builtin::WorkgroupId(0)), s.rows);
        let head_y = b.builtin(Builtin::WorkgroupId(1));
        let (hg, quads) = (s.heads_per_workgroup(w), w.head_dim / 4);
        let total = s.rows * hg * quads;
        for it in 0..total.div_ceil(threads) {
            let idx = b.addi(tid, it * threads);
            b.if_(b.lt(idx, b.c_u32(total)), || {
                let r = b.div(idx, b.c_u32(hg * quads));
                let rest = b.rem(idx, b.c_u32(hg * quads));
                let hh = b.div(rest, b.c_u32(quads));
                let head = if s.group_heads {
                    b.add(b.muli(head_y, w.group()), hh)
                } else {
                    head_y
                };
                let row = b.add(first_row, r);
                let c = b.add(b.muli(head, quads), b.rem(rest, b.c_u32(quads)));
                b.if_(b.lt(row, m), || {
                    let merged =
                        super::combine::merge_vec4(b, w, s, partials, splits, row, head, c);
                    b.store(out, b.add(b.muli(row, w.q_width() / 4), c), merged);
                });
            });
        }
    });
}

/// The partials of `splits` pieces in scratch order, for tests and the combine's reference:
/// o values and (max, sum) pairs, in f64, computed on the CPU the way the split kernel
/// computes them (exact softmax over each piece's visible keys, max -1e30 and zeros where a
/// piece has none).
#[allow(clippy::too_many_arguments)]
pub fn reference_partials(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    splits: u32,
    m: usize,
    pos0: u32,
    q: &[f32],
    k_cache: &[u32],
    v_cache: &[u32],
) -> Vec<f32> {
    let (hd, qw, kw) = (
        w.head_dim as usize,
        w.q_width() as usize,
        w.kv_width() as usize,
    );
    let wm = w.m as usize;
    let mut out = vec![0f32; scratch_values(w, s) as usize];
    let ml0 = 4 * ml_offset_vec4(w, s) as usize;
    let scale = 1.0 / (hd as f64).sqrt();
    let k_at = |j: usize, e: usize| f64::from(w.kv.k.cache_value(k_cache, kw as u32, j, e));
    let v_at = |j: usize, e: usize| f64::from(w.kv.v.cache_value(v_cache, kw as u32, j, e));
    // The workgroup of row i sees the keys of its row block's last row.
    let rows = s.rows.max(1) as usize;
    for i in 0..m {
        let block_end = ((i / rows + 1) * rows).min(m);
        let n_keys = pos0 as usize + block_end;
        let per = n_keys.div_ceil(splits as usize);
        let chunk = per.div_ceil(s.kv_block as usize) * s.kv_block as usize;
        let pos = pos0 as usize + i;
        for z in 0..splits as usize {
            let lo = (z * chunk).min(n_keys);
            let hi = (lo + chunk).min(n_keys);
            for h in 0..w.n_heads as usize {
                let kvh = h / w.group() as usize;
                let visible: Vec<usize> = (lo..hi)
                    .filter(|&j| j <= pos && (w.window == 0 || pos < j + w.window as usize))
                    .collect();
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| {
                        (0..hd)
                            .map(|d| f64::from(q[i * qw + h * hd + d]) * k_at(j, kvh * hd + d))
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::from(NEG_BIG), f64::max);
                let p: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let row = z * wm + i;
                for d in 0..hd {
                    let o: f64 = visible
                        .iter()
                        .zip(&p)
                        .map(|(&j, p)| p * v_at(j, kvh * hd + d))
                        .sum();
                    out[row * qw + h * hd + d] = o as f32;
                }
                let at = ml0 + 4 * (row * w.n_heads as usize + h);
                out[at] = mx as f32;
                out[at + 1] = p.iter().sum::<f64>() as f32;
            }
        }
    }
    out
}

/// The element type both kernels declare the scratch with (vec4 of f32).
pub(crate) fn scratch_elem() -> Type {
    Type::vec(Scalar::F32, 4)
}
