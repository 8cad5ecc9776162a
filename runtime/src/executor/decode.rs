//! What generation needs of the executor beyond the prefill: the cache position, and one
//! token at a time with kernels built for one row, recorded once and replayed.
//!
//! The decode step is a prefill of one token whose pipelines are prepared at m = 1, so the
//! default rule picks the small-M schedules (a prefill's ubatch-sized tiles would compute 63 of
//! 64 rows for nothing), and tuned ones where the database has them for m = 1.
//!
//! Its dispatches are the same for every token but for three kernels per layer that read the
//! token's position (RoPE, the KV write, attention). Those run in their args form
//! (`rocky_compiler::templates::instantiate_with_args`): `m` and the position come from the
//! small host-visible buffer `step_args`, not from push constants. So the step is recorded once
//! ([`RecordedStep`]) and per token the host writes the token id and the position, submits the
//! recorded command buffers, waits and reads the logits back.
//!
//! A recording stays valid until the executor prepares again (a prefill, another budget: its
//! buffers or schedules may change) or the split-KV rule picks another piece count for the
//! longer cache (split attention's pieces are its grid: a few times per thousand tokens).
//! `ROCKY_DECODE_REPLAY=0` records every step anew (the path before replay, for A/B runs); a
//! profiled executor does too (its timestamps are per recorded dispatch).

use super::split_kv::step_splits;
use super::{ExecError, Executor, PrefillStats, ProgramKind, ScheduleSource, UbatchCursor};
use crate::replay::{DispatchSink, Replay, ReplayRecorder};
use crate::stream::StreamStats;
use crate::{BufferRange, ComputePipeline};
use rocky_compiler::templates::{instantiate_with_args, reads_position};
use rocky_compiler::{AttentionSchedule, AttentionWorkload, Schedule, Workload};
use std::collections::HashMap;
use std::time::Instant;

/// The environment variable that turns decode replay off (`0`) for A/B measurements.
pub const DECODE_REPLAY_ENV: &str = "ROCKY_DECODE_REPLAY";

/// The environment variable that orders a replayed step's dispatches by counters (`1`) or
/// by barriers (`0`) whatever the device's default (see [`Executor::decode_chain_off`]).
pub const DECODE_CHAIN_ENV: &str = "ROCKY_DECODE_CHAIN";

/// Counters of a counter-ordered step: two fixed words and one per level (a 3B step has
/// ~260 levels).
pub(crate) const CHAIN_COUNTERS: u64 = 4096;

fn chain_env() -> Option<bool> {
    static ON: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var(DECODE_CHAIN_ENV).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    })
}

/// A decode step recorded for replay, with what it was recorded for.
pub(crate) struct RecordedStep {
    pub(super) replay: Replay,
    /// Each distinct attention kernel of the step with the pieces it was recorded with (every
    /// layer shares one or two attention workloads).
    pieces: Vec<(AttentionWorkload, AttentionSchedule, u32)>,
    /// Ordered by counters (`chain_counters` bound) rather than barriers.
    pub(super) chained: bool,
}

impl RecordedStep {
    /// Whether the split-KV rule picks the recorded piece counts at `pos0` too.
    pub(super) fn serves(&self, pos0: u32, compute_units: Option<u32>) -> bool {
        self.pieces
            .iter()
            .all(|(w, s, pieces)| step_splits(w, s, 1, pos0, compute_units) == *pieces)
    }
}

fn replay_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(DECODE_REPLAY_ENV).map_or(true, |v| v != "0"))
}

impl Executor<'_> {
    /// Positions in the KV cache: the next token goes to this position.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Positions the KV cache holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Forgets the positions from `n_past` on, so the next prefill starts there (prefix reuse
    /// by a server: a prompt sharing its start with the cached tokens prefills only the rest).
    /// Nothing needs clearing: a prefill writes its own positions' K and V before attention
    /// reads them, and attention reads no position past the row's own (`max_kv = pos0 + rows`).
    pub fn truncate(&mut self, n_past: usize) {
        self.n_past = self.n_past.min(n_past);
    }

    /// Whether a replayed step's dispatches wait for each other through counters on the GPU
    /// (`None`) instead of behind pipeline barriers, or why not. Off by default on every
    /// device: on an NVIDIA H100 the counter-ordered step decoded 2-5× slower than the
    /// barrier-ordered one (0.5B 91-288 against 714-718 tok/s, 3B 64-140 against 321; the
    /// barrier-free bound, wrong results, 1553 and 578: docs/measurements/
    /// 2026-12-07d-device-greedy.md), a CPU driver runs dispatches one after another and gains
    /// nothing, and whether panvk starts a dispatch's workgroups before the next one's is
    /// unknown. [`DECODE_CHAIN_ENV`]`=1/0`
    /// or [`Executor::set_decode_chain`] force it. Once a wait gives up (a driver that started
    /// a dispatch's workgroups before all of the previous one's), it stays off for this
    /// executor.
    pub fn decode_chain_off(&self) -> Option<String> {
        if let Some(why) = &self.chain_off {
            return Some(why.clone());
        }
        // Only a replayed step is ever ordered by counters.
        if let Some(why) = self.decode_replay_off() {
            return Some(format!("decode steps are recorded every token ({why})"));
        }
        match self.chain_asked.or(chain_env()) {
            Some(true) => None,
            Some(false) => Some(format!("barriers asked for ({DECODE_CHAIN_ENV}=0)")),
            None => Some(format!(
                "off by default: slower than barriers where measured ({DECODE_CHAIN_ENV}=1 \
                 turns it on)"
            )),
        }
    }

    /// After a run of a counter-ordered step: whether any of its waits gave up (`gave_up`,
    /// word 0 of the counters it waited on). Then its results may be wrong, and counters stay
    /// off for this executor (a driver that started a dispatch's workgroups before all of the
    /// previous one's).
    pub(super) fn chain_gave_up(&mut self, gave_up: u32) -> bool {
        if gave_up == 0 {
            return false;
        }
        self.chain_off = Some(format!(
            "{gave_up} waits of a counter-ordered step gave up: the device does not start \
             dispatches in order"
        ));
        eprintln!(
            "warning: {}; decode steps use barriers from now on",
            self.chain_off.as_deref().unwrap_or_default()
        );
        true
    }

    /// Orders replayed steps by counters (`Some(true)`), by barriers (`Some(false)`) or as the
    /// environment and device choose (`None`); the next step is recorded anew.
    pub fn set_decode_chain(&mut self, on: Option<bool>) {
        self.chain_asked = on;
        self.drop_recordings();
    }

    /// Whether decode steps replay a recording (`None`), or why not.
    pub fn decode_replay_off(&self) -> Option<String> {
        if !replay_enabled() {
            return Some(format!("{DECODE_REPLAY_ENV}=0"));
        }
        if self.options.profile {
            return Some("profiling records every dispatch with timestamps".into());
        }
        self.replay_off.clone()
    }

    /// Runs `token` at position `n_past()` and returns its logits; the token stays in the
    /// cache. The step's command buffers are recorded at the first decode after a prefill
    /// (and when the split-KV pieces change) and replayed for the tokens after it.
    pub fn decode(
        &mut self,
        token: u32,
        schedules: &dyn ScheduleSource,
    ) -> Result<Vec<f32>, ExecError> {
        if self.decode_replay_off().is_some() {
            return self.decode_recording_each_step(token, schedules);
        }
        let start = Instant::now();
        let n_vocab = self.model.config.n_vocab;
        self.check_tokens(&[token])?;
        let pos0 = self.n_past as u32;
        let valid = self
            .replay
            .as_ref()
            .is_some_and(|r| r.serves(pos0, self.compute_units));
        if !valid {
            if let Err(e) = self.record_step(schedules, pos0) {
                // A driver that cannot keep this recording (out of memory closing it, say)
                // still decodes: every step recorded anew, as before replay existed.
                self.drop_recordings();
                self.replay_off = Some(format!("recording the decode step failed: {e}"));
                return self.decode_recording_each_step(token, schedules);
            }
        }
        self.ids.upload_u32(0, &[token])?;
        self.step_args.upload_u32(0, &[1, pos0])?;
        let setup = start.elapsed();
        let step = self.replay.as_mut().expect("recorded above");
        let mut run = step.replay.run(self.options.timeout)?;
        if step.chained {
            let gave_up = self.chain_counters.download_u32(0, 1)?[0];
            if self.chain_gave_up(gave_up) {
                // The results of this run may be wrong: run the step again behind barriers
                // (it rewrites the same cache position); barriers from now on.
                self.drop_recordings();
                self.record_step(schedules, pos0)?;
                let step = self.replay.as_mut().expect("recorded above");
                run = step.replay.run(self.options.timeout)?;
            }
        }
        let step = self.replay.as_mut().expect("recorded above");
        let (dispatches, command_buffers) = (
            step.replay.dispatches(),
            step.replay.command_buffers() as u64,
        );
        self.n_past += 1;
        let readback = Instant::now();
        let logits = self.logits.download_f32(0, n_vocab)?;
        let readback = readback.elapsed();
        self.last_stats = Some(PrefillStats {
            wall: start.elapsed(),
            ubatches: 1,
            setup,
            readback,
            stream: StreamStats {
                dispatches,
                command_buffers,
                host_busy: run.submit,
                host_wait: run.wait,
                gpu_busy: None,
                split_command_buffers: 0,
            },
        });
        Ok(logits)
    }

    /// The decode step prepared and recorded anew for this token (as a stream, like a
    /// prefill of one row).
    fn decode_recording_each_step(
        &mut self,
        token: u32,
        schedules: &dyn ScheduleSource,
    ) -> Result<Vec<f32>, ExecError> {
        self.check_tokens(&[token])?;
        self.prepare_decode(schedules)?;
        // Projections that write the KV cache (`rope_kv`) read the position from the step's
        // args whether or not the step is replayed.
        self.step_args.upload_u32(0, &[1, self.n_past as u32])?;
        self.run_recording(ProgramKind::Step, &[token], 1)
    }

    /// Prepares the one-row pipelines (and their args forms) and records the step at `pos0`.
    fn record_step(&mut self, schedules: &dyn ScheduleSource, pos0: u32) -> Result<(), ExecError> {
        self.prepare_decode(schedules)?;
        let step = self.record_prepared_step(pos0, None, &self.chain_counters)?;
        self.replay = Some(step);
        self.save_pipeline_cache();
        Ok(())
    }

    /// Records the prepared one-row step at `pos0`: its dispatches, then, with `pick`, the
    /// greedy pick (`greedy.rs`) that turns its logits into the next step's token and
    /// position. A counter-ordered recording waits on `counters` (one buffer per recording
    /// that may run while another is queued behind it).
    pub(super) fn record_prepared_step(
        &self,
        pos0: u32,
        pick: Option<(&ComputePipeline, &crate::Buffer)>,
        counters: &crate::Buffer,
    ) -> Result<RecordedStep, ExecError> {
        let pieces = self.split_pieces(pos0);
        let chained = self.decode_chain_off().is_none();
        let mut recorder = if chained {
            ReplayRecorder::ordered_by_counters(
                &self.ctx,
                self.options.budget,
                counters.whole(),
                self.cache.as_ref(),
            )?
        } else {
            ReplayRecorder::new(&self.ctx, self.options.budget)?
        };
        let mut cursor = UbatchCursor {
            index: 0,
            pos0,
            last: true,
            set: 0,
            rows: 1,
            row_offset_of: HashMap::new(),
            done: false,
            replayed: true,
        };
        let mut log = Vec::new();
        let prog = &self.step_program;
        for node_index in 0..prog.graph.nodes.len() {
            if cursor.done {
                break;
            }
            self.record_node(prog, &mut recorder, &mut cursor, node_index, &mut log)?;
        }
        if let Some((pipeline, picks)) = pick {
            let n_vocab = self.model.config.n_vocab as u32;
            recorder.dispatch(
                pipeline,
                &[
                    self.logits.whole(),
                    self.ids.whole(),
                    self.step_args.whole(),
                    picks.whole(),
                ],
                &rocky_compiler::templates::greedy::push_constants(
                    n_vocab,
                    super::greedy::PICK_CAPACITY,
                ),
                [1, 1, 1],
            )?;
        }
        // SAFETY: the recording binds this executor's pipelines (kept in maps that only
        // grow; the greedy pick's is kept until the executor drops), its weights (shared,
        // never replaced), activation slots, KV cache, ids, logits, step args, picks and
        // counters (allocated once), and split scratch (reallocated only by `prepare`, which
        // drops every recording first). The recordings are dropped before any of them, and
        // each run is waited for before the next submit of the same recording.
        let replay = unsafe { recorder.finish() }?;
        Ok(RecordedStep {
            replay,
            pieces,
            chained,
        })
    }

    /// Builds the args form of every position-reading kernel the prepared step uses.
    fn build_args_pipelines(&mut self) -> Result<(), ExecError> {
        let keys: Vec<(String, Workload, Schedule)> = self
            .step_program
            .used
            .iter()
            .filter(|(_, w, _, _)| reads_position(w))
            .flat_map(|(label, w, s, _)| {
                // A split attention's un-split twin too: the steps of one piece run it.
                let twin = super::split_kv::single_piece_twin(w, s, &self.caps);
                std::iter::once((label.clone(), *w, *s)).chain(twin.map(|t| (label.clone(), *w, t)))
            })
            .collect();
        for (label, w, s) in keys {
            if self.args_pipelines.contains_key(&(w, s)) {
                continue;
            }
            let kernel =
                instantiate_with_args(&w, &s, &self.caps).map_err(|r| ExecError::Refused {
                    label: label.clone(),
                    reason: r.to_string(),
                })?;
            let p = ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
            self.args_pipelines.insert((w, s), p);
            self.unsaved_pipelines = true;
        }
        Ok(())
    }

    /// Each distinct attention kernel of the prepared one-row step with the pieces it takes
    /// at `pos0` (what a recording at `pos0` is valid for).
    fn split_pieces(&self, pos0: u32) -> Vec<(AttentionWorkload, AttentionSchedule, u32)> {
        let mut pieces: Vec<(AttentionWorkload, AttentionSchedule, u32)> = Vec::new();
        for (_, w, s, _) in &self.step_program.used {
            if let (Workload::Attention(aw), Schedule::Attention(a)) = (w, s) {
                if !pieces.iter().any(|(pw, ps, _)| pw == aw && ps == a) {
                    pieces.push((*aw, *a, step_splits(aw, a, 1, pos0, self.compute_units)));
                }
            }
        }
        pieces
    }

    /// For a recording that will be replayed, the args form of a position-reading kernel
    /// (`pipeline`'s twin, bound to the step's args, without push constants); otherwise
    /// `pipeline` with `push` as they are.
    pub(super) fn position_reader<'s>(
        &'s self,
        replayed: bool,
        key: (&Workload, &Schedule),
        pipeline: &'s ComputePipeline,
        push: Vec<u8>,
        named: &mut Vec<(&'static str, BufferRange<'s>)>,
    ) -> (&'s ComputePipeline, Vec<u8>) {
        if !replayed {
            return (pipeline, push);
        }
        named.push((
            rocky_compiler::ir::args_buffer::ARGS_BINDING_NAME,
            self.step_args.whole(),
        ));
        (&self.args_pipelines[&(*key.0, *key.1)], Vec::new())
    }

    /// Builds the one-row pipelines of [`Executor::decode`] ahead, so the first decode step
    /// is not timed with pipeline compilation in it; `used` then lists the step's kernels.
    pub fn prepare_decode(&mut self, schedules: &dyn ScheduleSource) -> Result<(), ExecError> {
        self.prepare_program(ProgramKind::Step, 1, schedules)?;
        // The replayed step's args forms too, so the first step pays only its recording.
        if self.decode_replay_off().is_none() {
            self.build_args_pipelines()?;
        }
        Ok(())
    }
}
