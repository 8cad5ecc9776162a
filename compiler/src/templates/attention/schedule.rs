//! How attention is computed: the tunables, their validity and resource estimates, the search
//! space and the rule-based default.
//!
//! Thread layout: a workgroup holds `rows` query positions × `heads` q heads (all heads of one
//! kv head with `group_heads`, else one) = row slots, each served by `threads_per_row`
//! consecutive lanes that split head_dim in 8-element chunks (lane l owns chunks l,
//! l + threads_per_row, …). A query·key dot product is summed across a row's lanes by
//! subgroup shuffles (xor butterfly) or through shared memory. The workgroup walks the keys in
//! blocks of `kv_block`: scores of the block, one max/rescale, then the p·V accumulation. With
//! `stage_kv` the block's K and V (f16) are first copied to shared memory by the whole
//! workgroup; otherwise every lane loads its chunks from the cache and the caches absorb the
//! reuse across rows (the right choice where shared memory is not on-chip, as on Mali).

use serde::{Deserialize, Serialize};

use super::workload::AttentionWorkload;
use crate::caps::DeviceCaps;
use crate::kv_type::KvType;
use crate::refusal::Refusal;
use crate::templates::{check_shared, check_threads, MAX_GRID_DIM};

/// Version of the attention schedule/kernel semantics. Bump it when stored tuning results
/// for the same (workload, schedule) key become meaningless; field names never change.
pub const ATTENTION_SCHEDULE_VERSION: u32 = 1;

/// How the partial dot products of a row's lanes are summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum LaneReduce {
    /// Subgroup xor shuffles (needs subgroup shuffle and threads_per_row ≤ subgroup size).
    #[serde(rename = "shuffle")]
    Shuffle,
    /// Shared memory and a barrier per key block (works everywhere).
    #[serde(rename = "shared")]
    Shared,
}

/// An attention schedule. Serialized field names are stable (tuning-database keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionSchedule {
    /// Query positions per workgroup.
    pub rows: u32,
    /// Keys per online-softmax step.
    pub kv_block: u32,
    /// Lanes sharing one (query, head) row; a power of two dividing head_dim / 8.
    pub threads_per_row: u32,
    /// One workgroup serves all q heads of a kv head (they share every K/V load).
    pub group_heads: bool,
    /// Stage each key block's K and V in shared memory.
    pub stage_kv: bool,
    /// How a row's lanes sum their partial dot products (unused with one lane per row).
    pub lane_reduce: LaneReduce,
    /// Packed f16 q·k (f16vec2 FMAs straight on the cache words, no f16→f32 unpacking):
    /// q rounded to f16, each lane's partial dot product summed in f16, then f32 across the
    /// lanes. Needs shaderFloat16. A score partial beyond 65504 would overflow: the check on
    /// random data cannot see a model whose keys are that large. Absent in records written
    /// before it existed: f32.
    #[serde(default)]
    pub f16_qk: bool,
    /// Packed f16 p·v: the block's weights rounded to f16 and its weighted values summed in
    /// f16vec2, folded into the f32 output once per key block. Needs shaderFloat16. Absent in
    /// older records: f32.
    #[serde(default)]
    pub f16_pv: bool,
    /// Register-tiled kernel (`tiled.rs`) where non-zero: each thread computes `tile_rows`
    /// workgroup rows × `tile_keys` keys of a block's scores and `tile_rows` rows of the
    /// output, from staged Q, K, V and weight tiles (needs `stage_kv`, one lane per row in
    /// `threads_per_row` terms, and shuffles: the `kv_block / tile_keys` threads of a row
    /// reduce its max and sum by xor shuffles). 0 (absent in older records, and omitted
    /// from the JSON): the row-wise kernel.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tile_rows: u32,
    /// Keys per thread of a tiled schedule (0 with the row-wise kernel).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tile_keys: u32,
    /// Key-split kernel (`key_split.rs`) where non-zero: the `threads_per_row` lanes of a
    /// group split each key block between them (whole scores per lane, exchanged once per
    /// block through shared memory) instead of splitting head_dim, and each group serves
    /// `lane_rows` rows that share its K and V loads. For GPUs whose shuffles are slow and
    /// whose shared memory is ordinary memory (Mali): no per-key lane sums. Needs
    /// `lane_reduce = shared`, no staging, and a power-of-two `kv_block` that is a multiple of
    /// the lanes. 0 (absent in older records, and omitted from the JSON): not used.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lane_rows: u32,
    /// Split-KV decode (`split_kv.rs`) where 2 or more: the most pieces the key range of a
    /// workgroup is cut into, one workgroup each, merged by the combine kernel; the count of
    /// a step is chosen at run time (`split_kv::splits_for`). 0 or 1 (absent in older
    /// records, and omitted from the JSON at 0): one workgroup walks all keys.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kv_splits: u32,
    /// With `kv_splits`: the last piece of each workgroup's key range to finish merges the
    /// pieces itself (`split_kv::combine_in_last_piece`, counted in through an atomic counter
    /// per workgroup tile), so no combine dispatch, and no barrier before it, follows. Omitted
    /// from the JSON when false (older records: the combine kernel).
    #[serde(default, skip_serializing_if = "is_false")]
    pub fused_combine: bool,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

fn is_false(x: &bool) -> bool {
    !*x
}

impl AttentionSchedule {
    /// q heads per workgroup.
    pub fn heads_per_workgroup(&self, w: &AttentionWorkload) -> u32 {
        if self.group_heads {
            w.group()
        } else {
            1
        }
    }

    /// (query, head) rows per workgroup.
    pub fn row_slots(&self, w: &AttentionWorkload) -> u32 {
        self.rows * self.heads_per_workgroup(w)
    }

    pub fn threads(&self, w: &AttentionWorkload) -> u32 {
        if self.is_key_split() {
            return self.row_slots(w) / self.lane_rows * self.threads_per_row;
        }
        if self.is_tiled() {
            return self.row_slots(w) / self.tile_rows * self.tiled_columns();
        }
        self.row_slots(w) * self.threads_per_row
    }

    /// Whether this is a register-tiled schedule (see [`AttentionSchedule::tile_rows`]).
    pub fn is_tiled(&self) -> bool {
        self.tile_rows > 0
    }

    /// Whether this is a key-split schedule (see [`AttentionSchedule::lane_rows`]).
    pub fn is_key_split(&self) -> bool {
        self.lane_rows > 0
    }

    /// Threads sharing a row of a tiled schedule (`kv_block / tile_keys`).
    pub fn tiled_columns(&self) -> u32 {
        self.kv_block / self.tile_keys.max(1)
    }

    /// Products of head_dim summed in one f16vec2 half before a fold into f32 (`f16_qk`).
    pub fn f16_qk_terms(&self, head_dim: u32) -> u32 {
        if self.is_tiled() || self.is_key_split() {
            4 * super::tiled::QK_FOLD_CHUNKS.min(head_dim / 8)
        } else {
            head_dim / (2 * self.threads_per_row.max(1))
        }
    }

    /// 8-element chunks of head_dim per lane.
    pub fn chunks_per_lane(&self, w: &AttentionWorkload) -> u32 {
        w.head_dim / (8 * self.threads_per_row.max(1))
    }

    /// Whether partial dot products are reduced through shared memory.
    pub fn reduces_in_shared(&self) -> bool {
        self.threads_per_row > 1 && self.lane_reduce == LaneReduce::Shared && !self.is_key_split()
    }

    /// Bytes of workgroup memory: the f16 K and V tiles, and the reduction slots.
    pub fn shared_bytes(&self, w: &AttentionWorkload) -> u32 {
        // The fused combine's flag: whether this workgroup arrived last.
        let flag = if self.fused_combine { 4 } else { 0 };
        flag + self.shared_bytes_before_the_combine(w)
    }

    fn shared_bytes_before_the_combine(&self, w: &AttentionWorkload) -> u32 {
        if self.is_key_split() {
            return super::key_split::KeySplitLayout::of(w, self).bytes(self.kv_block);
        }
        if self.is_tiled() {
            let lay = super::tiled::TiledLayout::of(w, self);
            return 16 * lay.elements(self.kv_block).iter().sum::<u32>();
        }
        let mut bytes = 0;
        if self.stage_kv {
            // A staged chunk of 8 values: 16 bytes in f16, 32 (its f32 values) otherwise.
            let (k, v) = super::kernel::kv_reads(w);
            let chunks = self.kv_block * w.head_dim / 8;
            bytes += 16 * chunks * (k.staged_elems() + v.staged_elems());
        }
        if self.reduces_in_shared() {
            bytes += self.threads(w) * self.kv_block * 4;
        }
        bytes
    }

    /// Rough 32-bit registers per thread: q and output slices, the block's scores, one
    /// unpacked K/V chunk and a fixed overhead for indices and softmax state.
    pub fn register_estimate(&self, w: &AttentionWorkload) -> u32 {
        if self.is_key_split() {
            // Fitted to the registers Valhall gives the f32 kernels, which spill above 64: the
            // rows' outputs, 8 per key per lane (a K chunk, its score and the unpacking), 14
            // per further row (its Q chunk, scores and softmax state; two rows of two keys and
            // 16 outputs fit 64 registers on Mesa 26.1.6 but spill 1:2 on 25.0.7) and 19
            // for indices; 4 more for a split-KV piece's bounds. With f16_pv the f16 sums of a
            // step add half the outputs; with f16_qk a Q chunk is 4 words instead of 8.
            let r = self.lane_rows;
            let out = r * w.head_dim / self.threads_per_row;
            let pv16 = if self.f16_pv { out / 2 } else { 0 };
            let keys = self.kv_block / self.threads_per_row;
            let split = if self.kv_splits > 0 { 4 } else { 0 };
            let q16 = if self.f16_qk { 4 * r } else { 0 };
            return (19 + split + out + pv16 + 8 * keys + 14 * (r - 1)).saturating_sub(q16);
        }
        if self.is_tiled() {
            // Output (f32, plus the f16 block sums), scores (plus their f16 partials), one
            // chunk of Q and K words per row and key, indices and softmax state.
            let (tm, tn) = (self.tile_rows, self.tile_keys);
            let out = tm * w.head_dim / self.tiled_columns();
            let pv16 = if self.f16_pv { out / 2 } else { 0 };
            let scores = tm * tn * if self.f16_qk { 3 } else { 1 };
            return out + pv16 + scores + 4 * (tm + tn) + 3 * tm + 24;
        }
        2 * w.head_dim / self.threads_per_row.max(1) + self.kv_block + 24
    }

    pub fn name(&self, w: &AttentionWorkload) -> String {
        format!(
            "attention_h{}_{}_d{}_r{}_kv{}_l{}{}{}_{}{}{}",
            w.n_heads,
            w.n_kv_heads,
            w.head_dim,
            self.rows,
            self.kv_block,
            self.threads_per_row,
            if self.group_heads { "_gqa" } else { "" },
            if self.stage_kv { "_staged" } else { "" },
            match self.lane_reduce {
                LaneReduce::Shuffle => "shfl",
                LaneReduce::Shared => "smem",
            },
            match (self.f16_qk, self.f16_pv) {
                (false, false) => "",
                (true, false) => "_qk16",
                (false, true) => "_pv16",
                (true, true) => "_f16",
            },
            if self.is_tiled() {
                format!("_t{}x{}", self.tile_rows, self.tile_keys)
            } else if self.is_key_split() {
                format!("_ks{}", self.lane_rows)
            } else {
                String::new()
            }
        ) + &if super::split_kv::is_split(self) {
            format!(
                "_split{}{}",
                self.kv_splits,
                if self.fused_combine { "_fc" } else { "" }
            )
        } else {
            String::new()
        } + &if w.kv.is_default() {
            String::new()
        } else {
            format!("_k{}_v{}", w.kv.k, w.kv.v)
        }
    }

    /// Checks the schedule against the workload and the device.
    pub fn validate(&self, w: &AttentionWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if self.fused_combine && !super::split_kv::is_split(self) {
            return bad("fused_combine merges split-KV pieces: it needs kv_splits >= 2".into());
        }
        if !(1..=64).contains(&self.rows) {
            return bad(format!("rows {} must be in 1..=64", self.rows));
        }
        if !(1..=64).contains(&self.kv_block) {
            return bad(format!("kv_block {} must be in 1..=64", self.kv_block));
        }
        let tpr = self.threads_per_row;
        if !tpr.is_power_of_two() || w.head_dim % (8 * tpr) != 0 {
            return bad(format!(
                "threads_per_row {tpr} must be a power of two dividing head_dim/8 = {}",
                w.head_dim / 8
            ));
        }
        if w.m.div_ceil(self.rows) > MAX_GRID_DIM {
            return bad(format!(
                "{} row blocks exceed the grid limit {MAX_GRID_DIM}",
                w.m.div_ceil(self.rows)
            ));
        }
        if tpr > 1 && self.lane_reduce == LaneReduce::Shuffle {
            if !caps.subgroup_shuffle {
                return Err(Refusal::MissingFeature(
                    "subgroup shuffle (lane_reduce = shuffle)".into(),
                ));
            }
            if tpr > caps.subgroup_size {
                return Err(Refusal::DeviceLimit(format!(
                    "threads_per_row {tpr} exceeds the subgroup size {}: shuffles cannot reach every lane of a row",
                    caps.subgroup_size
                )));
            }
        }
        if (self.f16_qk || self.f16_pv) && !caps.float16 {
            return Err(Refusal::MissingFeature(
                "shaderFloat16 (attention f16_qk / f16_pv)".into(),
            ));
        }
        // The packed-f16 products multiply the cache's f16 words as they are.
        if self.f16_qk && w.kv.k != KvType::F16 {
            return bad(format!(
                "f16_qk reads an f16 K cache; this one is {}",
                w.kv.k
            ));
        }
        if self.f16_pv && w.kv.v != KvType::F16 {
            return bad(format!(
                "f16_pv reads an f16 V cache; this one is {}",
                w.kv.v
            ));
        }
        if self.is_tiled() || self.tile_keys > 0 {
            self.validate_tiled(w, caps)?;
        }
        if self.is_key_split() {
            self.validate_key_split(w)?;
        }
        super::split_kv::validate(w, self).map_err(Refusal::Schedule)?;
        check_threads(self.threads(w), caps)?;
        check_shared(self.shared_bytes(w), caps)?;
        let regs = self.register_estimate(w);
        if regs > caps.register_budget {
            return Err(Refusal::DeviceLimit(format!(
                "about {regs} registers per thread, the budget is {}",
                caps.register_budget
            )));
        }
        Ok(())
    }
}

impl AttentionSchedule {
    /// The key-split kernel's own rules (see [`AttentionSchedule::lane_rows`]).
    fn validate_key_split(&self, w: &AttentionWorkload) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        let (lanes, r) = (self.threads_per_row, self.lane_rows);
        if self.is_tiled() {
            return bad("a schedule is either tiled or key-split".into());
        }
        if !matches!(r, 1 | 2 | 4) {
            return bad(format!("lane_rows {r} must be 1, 2 or 4"));
        }
        if self.stage_kv || self.lane_reduce != LaneReduce::Shared {
            return bad(
                "a key-split schedule reads K and V from the cache and exchanges scores through shared memory (stage_kv false, lane_reduce shared)"
                    .into(),
            );
        }
        if !self.kv_block.is_power_of_two() || self.kv_block % lanes != 0 {
            return bad(format!(
                "kv_block {} must be a power of two and a multiple of the {lanes} lanes",
                self.kv_block
            ));
        }
        if self.row_slots(w) % r != 0 {
            return bad(format!(
                "{} rows per workgroup do not split into groups of {r}",
                self.row_slots(w)
            ));
        }
        Ok(())
    }

    /// The tiled kernel's own rules (see [`AttentionSchedule::tile_rows`]).
    fn validate_tiled(&self, w: &AttentionWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        let (tm, tn) = (self.tile_rows, self.tile_keys);
        if !matches!(tm, 4 | 8) || !matches!(tn, 1 | 2 | 4 | 8) {
            return bad(format!(
                "tile {tm}x{tn}: tile_rows must be 4 or 8 and tile_keys 1, 2, 4 or 8"
            ));
        }
        if !self.stage_kv || self.threads_per_row != 1 || self.lane_reduce != LaneReduce::Shuffle {
            return bad(
                "a tiled schedule stages K and V, has threads_per_row 1 and reduces by shuffles"
                    .into(),
            );
        }
        let cols = self.kv_block / tn;
        if self.kv_block % tn != 0 || !cols.is_power_of_two() {
            return bad(format!(
                "kv_block {} / tile_keys {tn} must be a power of two",
                self.kv_block
            ));
        }
        if (w.head_dim / 8) % cols != 0 {
            return bad(format!(
                "{cols} threads per row must divide head_dim/8 = {} (whole output chunks each)",
                w.head_dim / 8
            ));
        }
        if self.row_slots(w) % tm != 0 {
            return bad(format!(
                "{} rows per workgroup do not split into tiles of {tm}",
                self.row_slots(w)
            ));
        }
        if !caps.subgroup_shuffle {
            return Err(Refusal::MissingFeature(
                "subgroup shuffle (tiled attention)".into(),
            ));
        }
        if cols > caps.subgroup_size {
            return Err(Refusal::DeviceLimit(format!(
                "{cols} threads per row exceed the subgroup size {}",
                caps.subgroup_size
            )));
        }
        Ok(())
    }
}

/// Every candidate the tuner should try, each accepted by `validate`: rows 1..32, key
/// blocks 8..64, every lane split head_dim allows, GQA grouping on/off (when there is a group),
/// staging on/off, both reductions, f32 math, packed-f16 p·v, or packed f16 for both products
/// (where the device has f16; f16 q·k alone saves less than p·v and is left out).
/// A split schedule's twin that merges its pieces in the last one (`fused_combine`).
fn push_fused(
    out: &mut Vec<AttentionSchedule>,
    s: AttentionSchedule,
    w: &AttentionWorkload,
    caps: &DeviceCaps,
) {
    let fused = AttentionSchedule {
        fused_combine: true,
        ..s
    };
    if super::split_kv::is_split(&s) && fused.validate(w, caps).is_ok() {
        out.push(fused);
    }
}

/// Workgroups under 16 threads (they waste subgroups), rows beyond the next power of two of m
/// and 64-key blocks without staging (their unstaged loads gain nothing over 32) are left out.
/// First, where shared memory is on-chip and shuffles exist, the tiled schedules: rows 1..16,
/// key blocks 16..64, tiles 4 or 8 rows × 2, 4 or 8 keys, the same maths, at least 32 threads.
/// Decode workloads (m ≤ `split_kv::SPLIT_MAX_M`) try each row-wise schedule also with the
/// keys split (caps 8 and 32, `kv_splits`).
pub fn search_space(w: &AttentionWorkload, caps: &DeviceCaps) -> Vec<AttentionSchedule> {
    let m_cap = w.m.max(1).next_power_of_two();
    let groupings: &[bool] = if w.group() > 1 {
        &[false, true]
    } else {
        &[false]
    };
    let maths: &[(bool, bool)] = if caps.float16 {
        &[(false, false), (false, true), (true, true)]
    } else {
        &[(false, false)]
    };
    // Decode workloads also try the split-KV form (`split_kv.rs`) with two caps.
    let splits: &[u32] = if w.m <= super::split_kv::SPLIT_MAX_M {
        &[0, 8, super::split_kv::DEFAULT_KV_SPLITS]
    } else {
        &[0]
    };
    let mut out = Vec::new();
    // Register-tiled schedules, where shared memory is on-chip (they stage everything).
    if caps.subgroup_shuffle && !caps.shared_memory_is_slow {
        for &group_heads in groupings {
            for rows in [1, 2, 4, 8, 16] {
                if rows > m_cap {
                    continue;
                }
                for kv_block in [16, 32, 64] {
                    for tile_rows in [4, 8] {
                        for tile_keys in [2, 4, 8] {
                            for &(f16_qk, f16_pv) in maths {
                                let s = AttentionSchedule {
                                    rows,
                                    kv_block,
                                    threads_per_row: 1,
                                    group_heads,
                                    stage_kv: true,
                                    lane_reduce: LaneReduce::Shuffle,
                                    f16_qk,
                                    f16_pv,
                                    tile_rows,
                                    tile_keys,
                                    lane_rows: 0,
                                    kv_splits: 0,
                                    fused_combine: false,
                                };
                                if s.threads(w) >= 32.min(caps.max_workgroup_invocations)
                                    && s.validate(w, caps).is_ok()
                                {
                                    out.push(s);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // Key-split schedules, where the tiled ones are not offered or shuffles are slow (Mali):
    // 2-32 lanes with 1, 2 or 4 keys each (blocks of at most 64 keys), 1, 2 or 4 rows per
    // lane group.
    if !caps.subgroup_shuffle || caps.shared_memory_is_slow || caps.slow_subgroup_shuffle {
        for &group_heads in groupings {
            for rows in [1, 2, 4, 8] {
                if rows > m_cap {
                    continue;
                }
                for lanes in [2, 4, 8, 16, 32] {
                    for keys_per_lane in [1, 2, 4] {
                        if lanes * keys_per_lane > 64 {
                            continue;
                        }
                        for lane_rows in [1, 2, 4] {
                            for (&(f16_qk, f16_pv), &kv_splits) in maths
                                .iter()
                                .flat_map(|m| splits.iter().map(move |k| (m, k)))
                            {
                                let s = AttentionSchedule {
                                    rows,
                                    kv_block: lanes * keys_per_lane,
                                    threads_per_row: lanes,
                                    group_heads,
                                    stage_kv: false,
                                    lane_reduce: LaneReduce::Shared,
                                    f16_qk,
                                    f16_pv,
                                    tile_rows: 0,
                                    tile_keys: 0,
                                    lane_rows,
                                    kv_splits,
                                    fused_combine: false,
                                };
                                if s.threads(w) >= 16.min(caps.max_workgroup_invocations)
                                    && s.validate(w, caps).is_ok()
                                {
                                    out.push(s);
                                    push_fused(&mut out, s, w, caps);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for threads_per_row in [1, 2, 4, 8, 16, 32] {
        let reduces: &[LaneReduce] = if threads_per_row == 1 {
            &[LaneReduce::Shuffle]
        } else {
            &[LaneReduce::Shuffle, LaneReduce::Shared]
        };
        for &group_heads in groupings {
            for rows in [1, 2, 4, 8, 16, 32] {
                if rows > m_cap {
                    continue;
                }
                for kv_block in [8, 16, 32, 64] {
                    for stage_kv in [false, true] {
                        if kv_block == 64 && !stage_kv {
                            continue;
                        }
                        for &lane_reduce in reduces {
                            for &(f16_qk, f16_pv) in maths {
                                for &kv_splits in splits {
                                    let s = AttentionSchedule {
                                        rows,
                                        kv_block,
                                        threads_per_row,
                                        group_heads,
                                        stage_kv,
                                        lane_reduce,
                                        f16_qk,
                                        f16_pv,
                                        tile_rows: 0,
                                        tile_keys: 0,
                                        kv_splits,
                                        lane_rows: 0,
                                        fused_combine: false,
                                    };
                                    if s.threads(w) < 16.min(caps.max_workgroup_invocations) {
                                        continue;
                                    }
                                    if s.validate(w, caps).is_ok() {
                                        out.push(s);
                                        push_fused(&mut out, s, w, caps);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Register-tiled schedules for the tuner to try first where the space has them: 8 queries
/// per workgroup (× the heads of a kv group), 32- and 16-key blocks, 4×2 tiles, f16 products;
/// on the H200 (Qwen2.5-3B shape) 2.26x the default at KV 4096 and 1.74x at 512, which a
/// 30-trial search over the 1,575 schedules of that workload did not find
/// (docs/measurements/2026-12-03b-h200.md; the space size from the H200 tuner log of 2026-12-03c).
pub fn seed_schedules(w: &AttentionWorkload, caps: &DeviceCaps) -> Vec<AttentionSchedule> {
    if !(caps.subgroup_shuffle && !caps.shared_memory_is_slow && caps.float16) {
        return Vec::new();
    }
    let mut tiles = vec![(8, 32, 4, 2), (8, 16, 4, 2), (4, 32, 4, 2)];
    if !w.kv.is_default() {
        // f32 staged tiles (f32 and q8_0 caches) are twice the size: a smaller one fits
        // 48 KiB at head_dim 128.
        tiles.push((4, 16, 4, 2));
    }
    tiles
        .into_iter()
        .map(|(rows, kv_block, tile_rows, tile_keys)| AttentionSchedule {
            rows: rows.min(w.m.max(1).next_power_of_two()),
            kv_block,
            threads_per_row: 1,
            group_heads: w.group() > 1,
            stage_kv: true,
            lane_reduce: LaneReduce::Shuffle,
            // Packed-f16 products where the cache holds f16 (they read its words).
            f16_qk: w.kv.k == KvType::F16,
            f16_pv: w.kv.v == KvType::F16,
            tile_rows,
            tile_keys,
            lane_rows: 0,
            kv_splits: 0,
            fused_combine: false,
        })
        .filter(|s| {
            s.threads(w) >= 32.min(caps.max_workgroup_invocations) && s.validate(w, caps).is_ok()
        })
        .collect()
}

fn prev_pow2(x: u32) -> u32 {
    if x == 0 {
        0
    } else {
        1 << (31 - x.leading_zeros())
    }
}

/// A key-split default for Mali-class devices (slow shuffles, 64 registers): one 8-element
/// output chunk per lane up to 16 lanes, `keys_per_lane` keys each, `lane_rows` rows per lane
/// group, about 128 threads. Valhall's load/store cycles per (row, key) of the defaults this
/// picks, against the row-wise kernel's (Mesa 26.1.6 and 25.0.7, no spills either way):
/// head_dim 64 22.25 vs 48, 128 44.25 vs 128, 256 104.5 vs 384
/// (docs/measurements/2026-12-05-mali-key-split.md).
fn key_split_default(
    w: &AttentionWorkload,
    lane_rows: u32,
    keys_per_lane: u32,
) -> AttentionSchedule {
    let lanes = prev_pow2((w.head_dim / 8).clamp(1, 16));
    let group_heads = w.group() > 1;
    let heads = if group_heads { w.group() } else { 1 };
    let rows = prev_pow2((128 * lane_rows / (heads * lanes)).max(1))
        .min(w.m.max(1).next_power_of_two())
        .min(32);
    AttentionSchedule {
        rows,
        kv_block: keys_per_lane * lanes,
        threads_per_row: lanes,
        group_heads,
        stage_kv: false,
        lane_reduce: LaneReduce::Shared,
        f16_qk: false,
        f16_pv: false,
        tile_rows: 0,
        tile_keys: 0,
        lane_rows,
        kv_splits: 0,
        fused_combine: false,
    }
}

/// The rule-based default:
/// - 16 head_dim elements per lane (head_dim 64 → 4 lanes, 128 → 8, 256 → 16), fewer lanes
///   if the subgroup is smaller; shuffles where the device has fast ones, shared memory
///   otherwise (a row's partial sums are a few hundred bytes per key block);
/// - 8 elements per lane where registers are scarce (a budget of 64 or less): on Mali the
///   16-element row spills (18 spills with the shared-memory reduction, 67 with shuffles,
///   Valhall compiler of Mesa 26.1.6, head_dim 64 and 128), the 8-element one does not and
///   needs a quarter of the load/store cycles (48 against 196);
/// - GQA grouping whenever heads share a kv head (K/V loaded once for the group);
/// - staging only where shared memory is on-chip (never on Mali/panvk, where it is ordinary
///   memory and allocated per dispatch); key blocks of 16 (8 where registers are scarce);
/// - about 128 threads per workgroup.
///
/// The first candidate that validates wins; failing all, the first schedule of the space;
/// failing that, the first candidate, which `instantiate` then refuses with the reason.
pub fn default_schedule(w: &AttentionWorkload, caps: &DeviceCaps) -> AttentionSchedule {
    let shuffle = caps.subgroup_shuffle && !caps.slow_subgroup_shuffle;
    let lanes_max = (w.head_dim / 8).max(1);
    let mut candidates = Vec::new();
    if caps.slow_subgroup_shuffle && caps.register_budget <= 64 {
        // In order of Valhall's load/store cycles per (row, key): four keys per lane, two,
        // one; the first that fits the registers. Two rows per lane group would share every
        // K and V load, but fit only the smallest outputs (the tuner's space has them).
        for keys_per_lane in [4, 2, 1] {
            candidates.push(key_split_default(w, 1, keys_per_lane));
        }
    }
    let lane_widths = if caps.register_budget <= 64 {
        [8, 16, 32]
    } else {
        [16, 32, 8]
    };
    for elems_per_lane in lane_widths {
        let mut tpr = prev_pow2((w.head_dim / elems_per_lane).clamp(1, lanes_max));
        if shuffle {
            tpr = tpr.min(prev_pow2(caps.subgroup_size.max(1)));
        }
        let lane_reduce = if shuffle {
            LaneReduce::Shuffle
        } else {
            LaneReduce::Shared
        };
        let group_heads = w.group() > 1;
        let heads = if group_heads { w.group() } else { 1 };
        let rows = prev_pow2((128 / (heads * tpr)).max(1))
            .min(w.m.max(1).next_power_of_two())
            .min(32);
        let kv_block = if caps.register_budget <= 64 { 8 } else { 16 };
        candidates.push(AttentionSchedule {
            rows,
            kv_block,
            threads_per_row: tpr,
            group_heads,
            stage_kv: !caps.shared_memory_is_slow,
            lane_reduce,
            f16_qk: false,
            f16_pv: false,
            tile_rows: 0,
            tile_keys: 0,
            lane_rows: 0,
            kv_splits: 0,
            fused_combine: false,
        });
        candidates.push(AttentionSchedule {
            rows: 1,
            group_heads: false,
            ..candidates[candidates.len() - 1]
        });
    }
    // A decode step splits its keys where the schedule allows (split_kv.rs), and a split
    // needs a few more registers: prefer the first candidate whose split form fits too.
    let splits_fit = |s: &AttentionSchedule| {
        w.m > super::split_kv::SPLIT_MAX_M
            || s.is_tiled()
            || super::split_kv::is_split(&super::split_kv::with_default_splits(w, *s, caps))
    };
    let valid = |s: &&AttentionSchedule| s.validate(w, caps).is_ok();
    if let Some(s) = candidates.iter().filter(valid).find(|s| splits_fit(s)) {
        return *s;
    }
    if let Some(s) = candidates.iter().find(valid) {
        return *s;
    }
    search_space(w, caps)
        .into_iter()
        .next()
        .unwrap_or(candidates[0])
}
