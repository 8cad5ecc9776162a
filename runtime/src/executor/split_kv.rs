//! Split-KV decode attention in the executor (`rocky_compiler::templates::attention::split_kv`):
//! the combine pipeline and the partials' scratch of a split schedule, the pieces of each
//! step, and the `ROCKY_KV_SPLITS` override for A/B runs and tests.
//!
//! The scratch is one buffer per set of activation slots (every attention node of the set
//! reuses it: layer l+1's split kernel waits for layer l's combine through the stream's
//! hazard tracking), sized for the largest split attention workload at this ubatch.

use super::{ExecError, Executor};
use crate::Buffer;
use rocky_compiler::templates::attention::combine::instantiate_combine;
use rocky_compiler::templates::attention::split_kv::{
    counters_for, is_split, scratch_values, splits_for, MAX_KV_SPLITS, SPLIT_MAX_M,
};
use rocky_compiler::templates::attention::{AttentionSchedule, AttentionWorkload};
use rocky_compiler::{DeviceCaps, Schedule, Workload};

/// `ROCKY_FUSED_COMBINE=0` merges split-KV pieces with the combine kernel even where the
/// schedule merges them in its last piece, `1` in the last piece even where the schedule has
/// the combine kernel (A/B measurements and tests of the fused combine).
pub const FUSED_COMBINE_ENV: &str = "ROCKY_FUSED_COMBINE";

/// `ROCKY_SINGLE_PIECE=0` keeps a split schedule's kernel and the combine at one piece instead
/// of its un-split twin (`single_piece_twin`), for A/B measurements.
pub const SINGLE_PIECE_ENV: &str = "ROCKY_SINGLE_PIECE";

/// The environment variable that overrides split-KV decode attention.
pub const KV_SPLITS_ENV: &str = "ROCKY_KV_SPLITS";

/// `ROCKY_KV_SPLITS`: unset or empty → `None` (the schedule and the run-time rule decide);
/// `0` or `1` → `Some(1)` (no splits); `N` in 2..=64 → `Some(N)` (every decode attention
/// splits its keys into exactly N pieces, short contexts included: for tests and A/B runs).
pub fn kv_splits_override() -> Result<Option<u32>, String> {
    match std::env::var(KV_SPLITS_ENV).as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok(v) => match v.parse::<u32>() {
            Ok(n) if n <= MAX_KV_SPLITS => Ok(Some(n.max(1))),
            _ => Err(format!(
                "{KV_SPLITS_ENV}={v:?}: use 0 or 1 (no split-KV decode attention) or a piece count up to {MAX_KV_SPLITS}"
            )),
        },
    }
}

/// The attention schedule `s` with the override applied (other schedules as they are): off
/// drops the splits, a count sets the cap to it where the workload may split and the result
/// validates on `caps`.
pub(crate) fn apply_override(
    w: &Workload,
    s: Schedule,
    caps: &DeviceCaps,
) -> Result<Schedule, ExecError> {
    let (Workload::Attention(aw), Schedule::Attention(a)) = (w, s) else {
        return Ok(s);
    };
    let forced = kv_splits_override().map_err(ExecError::Unsupported)?;
    let out = match forced {
        None => a,
        Some(1) => AttentionSchedule {
            kv_splits: 0,
            fused_combine: false,
            ..a
        },
        Some(n) if aw.m <= SPLIT_MAX_M && !a.is_tiled() => {
            let split = AttentionSchedule { kv_splits: n, ..a };
            if split.validate(aw, caps).is_ok() {
                split
            } else {
                a
            }
        }
        Some(_) => a,
    };
    // `ROCKY_FUSED_COMBINE`: 0 merges the pieces with the combine kernel, 1 in their last
    // piece (where that validates), for A/B runs and tests.
    let out = match std::env::var(FUSED_COMBINE_ENV).as_deref() {
        Ok(v @ ("0" | "1")) if is_split(&out) => {
            let forced = AttentionSchedule {
                fused_combine: v == "1",
                ..out
            };
            if forced.validate(aw, caps).is_ok() {
                forced
            } else {
                out
            }
        }
        _ => out,
    };
    Ok(Schedule::Attention(out))
}

/// Pieces of one step of `w` run with `s` at `rows` rows after `pos0` cached positions: the
/// override's count where set, else the rule of `splits_for` on this device (`rocky predict`
/// costs the pieces the runtime dispatches with it).
pub fn step_splits(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    rows: u32,
    pos0: u32,
    compute_units: Option<u32>,
) -> u32 {
    if !is_split(s) {
        return 1;
    }
    let grid = rocky_compiler::templates::attention::dispatch_grid(
        &AttentionWorkload { m: rows, ..*w },
        s,
    );
    match kv_splits_override() {
        Ok(Some(n)) => n.clamp(1, s.kv_splits),
        _ => splits_for(s, pos0 + rows, grid[0] * grid[1], compute_units),
    }
}

/// The un-split twin of a split schedule whose pieces the combine kernel merges: what a step
/// that needs one piece runs instead (its output normalized in place, no partials, no combine
/// dispatch), where it validates for `w` on `caps`. A decode step at a short context (the
/// first 64 keys with the default 16-key blocks) is one piece, and there the combine's
/// dispatch and barrier cost as much as the attention itself (H100, Qwen2.5-3B: ~4.6 µs a
/// layer each). A schedule that merges in its last piece (`fused_combine`) has no combine to
/// save.
pub(crate) fn single_piece_twin(w: &Workload, s: &Schedule, caps: &DeviceCaps) -> Option<Schedule> {
    let (Workload::Attention(aw), Schedule::Attention(a)) = (w, s) else {
        return None;
    };
    if !is_split(a) || a.fused_combine || twin_turned_off() {
        return None;
    }
    let plain = AttentionSchedule {
        kv_splits: 0,
        fused_combine: false,
        ..*a
    };
    plain
        .validate(aw, caps)
        .is_ok()
        .then_some(Schedule::Attention(plain))
}

fn twin_turned_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var(SINGLE_PIECE_ENV).is_ok_and(|v| v == "0"))
}

impl Executor<'_> {
    /// For a split attention schedule: builds its combine kernel (or, where its last piece
    /// merges the pieces, makes every set's arrival counters large enough and zero) and makes
    /// every set's scratch large enough for its partials at the full ubatch.
    pub(crate) fn prepare_split_kv(
        &mut self,
        label: &str,
        w: &Workload,
        s: &Schedule,
        n_sets: usize,
    ) -> Result<(), ExecError> {
        let (Workload::Attention(aw), Schedule::Attention(a)) = (w, s) else {
            return Ok(());
        };
        if !is_split(a) {
            return Ok(());
        }
        if let Some(twin) = single_piece_twin(w, s, &self.caps) {
            self.build_pipeline(label, w, &twin)?;
        }
        let refused = |r: rocky_compiler::Refusal| ExecError::Refused {
            label: label.to_string(),
            reason: r.to_string(),
        };
        if a.fused_combine {
            let tiles = counters_for(rocky_compiler::templates::attention::dispatch_grid(aw, a));
            // Zero, always (a counter read before any kernel reset it must be 0).
            while self.attn_counters.len() < n_sets {
                let set = self.attn_counters.len();
                self.attn_counters.push(Buffer::from_slice(
                    &self.ctx,
                    &[0u32],
                    &format!("split-KV arrival counters[{set}]"),
                )?);
            }
            for set in 0..n_sets {
                if self.attn_counters[set].size() < 4 * u64::from(tiles) {
                    let name = self.attn_counters[set].label().to_string();
                    // Zero: the kernels leave their counters as they found them.
                    self.attn_counters[set] =
                        Buffer::from_slice(&self.ctx, &vec![0u32; tiles as usize], &name)?;
                }
            }
        } else if !self.reduce_pipelines.contains_key(&(*w, *s)) {
            let kernel = instantiate_combine(aw, a, &self.caps).map_err(refused)?;
            let p = crate::ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
            self.reduce_pipelines.insert((*w, *s), p);
            self.unsaved_pipelines = true;
        }
        let bytes = 4 * scratch_values(aw, a);
        let limit = u64::from(self.ctx.caps().max_storage_buffer_range);
        if bytes > limit {
            return Err(ExecError::Unsupported(format!(
                "{label}: the split-KV partials need {bytes} bytes in one binding, the device binds at most {limit}; lower the pieces (ROCKY_KV_SPLITS) or the ubatch"
            )));
        }
        while self.attn_scratch.len() < n_sets {
            let set = self.attn_scratch.len();
            self.attn_scratch.push(Buffer::new(
                &self.ctx,
                4,
                &format!("split-KV attention partials[{set}]"),
            )?);
        }
        for set in 0..n_sets {
            if self.attn_scratch[set].size() < bytes {
                let name = self.attn_scratch[set].label().to_string();
                // Free the smaller one first: peak memory is the new size, not both.
                self.attn_scratch[set] = Buffer::new(&self.ctx, 4, &name)?;
                self.attn_scratch[set] = Buffer::new(&self.ctx, bytes, &name)?;
            }
        }
        Ok(())
    }
}
