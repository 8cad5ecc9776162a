//! A model on a Vulkan device: its weights uploaded, a KV cache of `n_ctx` positions, the
//! executor with this device's tuned (or default) schedules. Prefills, decodes one token at a
//! time, and keeps or restores its KV cache; as an [`rocky_generate::Evaluator`] it runs
//! rocky-generate's loop (see `evaluator.rs`).

use crate::decode_time::DecodeTime;
use crate::error::SessionError;
use crate::model::Model;
use crate::options::{EngineOptions, DEFAULT_UBATCH, MAX_UBATCH};
use crate::profile::{self, ProfileRow};
use crate::schedules::SessionSchedules;
use rocky_compiler::{Schedule, Workload};
use rocky_generate::{GenerateOptions, Generation};
use rocky_models::fuse::FuseOptions;
use rocky_runtime::executor::{
    resolve_overlap, Executor, ExecutorOptions, GpuWeights, KvSnapshot, PrefillStats,
    ScheduleOrigin, ScheduleSource,
};
use rocky_runtime::{device_caps, host_timing_reason, CommandBudget, Context};
use rocky_tuner::graph::model_shape_key;
use rocky_tuner::DbSchedules;
use std::time::Duration;

/// Where a session's ubatch size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UbatchOrigin {
    /// [`EngineOptions::ubatch`] (a flag of the CLI).
    Requested,
    /// The graph-level choice of `rocky tune` in the database.
    Tuned,
    /// [`DEFAULT_UBATCH`].
    Default,
}

impl UbatchOrigin {
    /// The word `rocky` prints and its JSON holds: "flag", "tuned" or "default".
    pub fn as_str(self) -> &'static str {
        match self {
            UbatchOrigin::Requested => "flag",
            UbatchOrigin::Tuned => "tuned",
            UbatchOrigin::Default => "default",
        }
    }
}

/// Progress of a weight upload: bytes done of the total, to the named device.
#[derive(Clone, Copy, Debug)]
pub struct UploadProgress<'a> {
    pub device: &'a str,
    pub done: u64,
    pub total: u64,
}

/// How long a prefill may wait for the GPU before it is declared hung.
const GPU_TIMEOUT: Duration = Duration::from_secs(600);

/// A model opened on a device (see the crate's documentation for a use).
pub struct Session<'m> {
    model: &'m Model,
    executor: Executor<'m>,
    schedules: SessionSchedules,
    ubatch_origin: UbatchOrigin,
    /// Why the database's tuned graph settings do not apply at the requested ubatch.
    graph_note: Option<String>,
    no_gpu_profile: Option<String>,
    decode_time: DecodeTime,
}

impl<'m> Session<'m> {
    /// Opens `model` on the device of `options` with a KV cache of `n_ctx` positions: reads
    /// the tuned schedules, uploads the weights. Pipelines are built by the first prefill, or
    /// ahead by [`Session::prepare`].
    pub fn open(
        model: &'m Model,
        options: &EngineOptions,
        n_ctx: usize,
    ) -> Result<Session<'m>, SessionError> {
        Self::open_with_progress(model, options, n_ctx, &mut |_| {})
    }

    /// [`Session::open`] telling `progress` how the weight upload goes.
    pub fn open_with_progress(
        model: &'m Model,
        options: &EngineOptions,
        n_ctx: usize,
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<Session<'m>, SessionError> {
        if let Some(ubatch) = options.ubatch.filter(|&u| u == 0 || u > MAX_UBATCH) {
            return Err(SessionError::UbatchOutOfRange { ubatch });
        }
        if options.cb_max_dispatches == Some(0) {
            return Err(SessionError::NoDispatchesPerCommandBuffer);
        }
        let ctx = Context::new(&options.device)?;
        // A forced math family the device lacks fails here, before the upload.
        if let Some(family) = options.math {
            family
                .check_device(&device_caps(ctx.info(), ctx.caps()))
                .map_err(|reason| SessionError::MathUnsupported { family, reason })?;
        }
        // A missing database means "not tuned yet"; a damaged one is an error, not a silent
        // fallback to defaults.
        let shape = model_shape_key(model.file(), model.arch());
        let db = match options.database.path() {
            Some(path) => DbSchedules::open_for_model(&path, ctx.info(), &shape)?,
            None => DbSchedules::empty(),
        };
        // The options win over the graph-level choice of `rocky tune`, which wins over the
        // defaults.
        let graph = db.graph_choice_for(options.ubatch);
        let graph_note = db.graph_choice_note(options.ubatch);
        let mut budget = CommandBudget::for_device(ctx.info());
        if let Some(g) = graph {
            budget.max_dispatches = g.max_dispatches_per_cb;
        }
        if let Some(mib) = options.cb_budget_mib {
            budget.max_driver_bytes = mib << 20;
        }
        if let Some(n) = options.cb_max_dispatches {
            budget.max_dispatches = n;
        }
        let (ubatch, ubatch_origin) = match (options.ubatch, graph) {
            (Some(u), _) => (u, UbatchOrigin::Requested),
            (None, Some(g)) => (g.ubatch as usize, UbatchOrigin::Tuned),
            (None, None) => (DEFAULT_UBATCH, UbatchOrigin::Default),
        };
        // Per-op times need timestamps; without them a profile is the host's accounting.
        let no_gpu_profile = if options.profile {
            host_timing_reason(ctx.info())
        } else {
            None
        };
        let device = ctx.info().name.clone();
        let weights = GpuWeights::upload_with_layouts(
            &ctx,
            model.file(),
            model.arch(),
            options.weight_layout,
            &mut |done, total| {
                progress(UploadProgress {
                    device: &device,
                    done,
                    total,
                })
            },
        )?;
        // ROCKY_FUSE wins over the tuned fusion, which wins over the default.
        let fuse = FuseOptions::resolve(graph.map(|g| g.fuse_swiglu))
            .map_err(|detail| SessionError::Environment { detail })?;
        let run_ubatch = ubatch.min(n_ctx.max(1));
        let overlap = resolve_overlap(run_ubatch, graph.map(|g| g.overlap))
            .map_err(|detail| SessionError::Environment { detail })?;
        let executor_options = ExecutorOptions {
            ubatch: run_ubatch,
            budget,
            timeout: GPU_TIMEOUT,
            profile: options.profile && no_gpu_profile.is_none(),
            fuse,
            overlap,
            kv: options.kv,
            kv_rotation: options.kv_rotation,
        };
        let executor = Executor::new(&ctx, model.arch(), weights, executor_options, n_ctx)?;
        Ok(Session {
            model,
            executor,
            schedules: SessionSchedules {
                db,
                custom: None,
                force_shared_memory: options.force_shared_memory,
                math: options.math,
            },
            ubatch_origin,
            graph_note,
            no_gpu_profile,
            decode_time: DecodeTime::default(),
        })
    }

    /// The model this session runs.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// Uses `source` in place of the tuning database's schedules (a test's or an
    /// experiment's); the forced math and shared memory of the options still apply on top.
    pub fn set_schedule_source(&mut self, source: Box<dyn ScheduleSource>) {
        self.schedules.custom = Some(source);
    }

    /// Builds every pipeline the prefill needs, so that the first prefill's time holds none.
    /// Afterwards [`Session::notices`] says which schedules were replaced, and why.
    pub fn prepare(&mut self) -> Result<(), SessionError> {
        Ok(self.executor.prepare(&self.schedules)?)
    }

    /// Builds the decode step's one-row pipelines ahead (not counted in its time).
    pub fn prepare_decode(&mut self) -> Result<(), SessionError> {
        Ok(self.executor.prepare_decode(&self.schedules)?)
    }

    /// Schedules the last preparation replaced, and why.
    pub fn notices(&self) -> &[String] {
        &self.executor.notices
    }

    /// Runs `ids` at the next positions and returns the last one's logits (one per
    /// vocabulary entry); the tokens stay in the KV cache.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>, SessionError> {
        Ok(self.executor.prefill(ids, &self.schedules)?)
    }

    /// Orders the replayed decode step's dispatches by counters on the GPU (`Some(true)`), by
    /// pipeline barriers (`Some(false)`), or as the environment and device choose (`None`).
    pub fn set_decode_chain(&mut self, on: Option<bool>) {
        self.executor.set_decode_chain(on)
    }

    /// Whether replayed decode steps are ordered by counters (`None`), or why not.
    pub fn decode_chain_off(&self) -> Option<String> {
        self.executor.decode_chain_off()
    }

    /// One token at the next position, with kernels prepared for one row; returns its logits.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, SessionError> {
        let logits = self.executor.decode(token, &self.schedules)?;
        if let Some(stats) = &self.executor.last_stats {
            self.decode_time.add(stats);
        }
        Ok(logits)
    }

    /// Greedy decoding with the picks made on the device (`Executor::decode_greedy`): runs
    /// `token`, then each pick, calling `on_pick` with each until it returns false or
    /// `max_steps` steps ran; `Ok(None)` where the device cannot pick and nothing ran.
    pub fn decode_greedy(
        &mut self,
        token: u32,
        max_steps: usize,
        on_pick: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Option<usize>, SessionError> {
        let decode_time = &mut self.decode_time;
        let steps = self.executor.decode_greedy(
            token,
            max_steps,
            &self.schedules,
            &mut |pick, stats| {
                decode_time.add(stats);
                on_pick(pick)
            },
        )?;
        Ok(steps)
    }

    /// Whether greedy decoding picks its tokens on the device (`None`), or why not.
    pub fn device_greedy_off(&self) -> Option<String> {
        self.executor.device_greedy_off()
    }

    /// Tokens picked on the device so far (greedy decoding).
    pub fn device_picks(&self) -> u64 {
        self.executor.device_picks()
    }

    /// Continues `prompt` (from an empty cache) with the model's tokenizer and
    /// end-of-generation tokens; `on_text` gets each piece of text as it is made.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation, crate::error::GenerateFailed> {
        let model = self.model;
        model.generate(self, prompt, options, on_text)
    }

    /// Positions in the KV cache: the next token goes to this position.
    pub fn n_past(&self) -> usize {
        self.executor.n_past()
    }

    /// Positions the KV cache holds.
    pub fn n_ctx(&self) -> usize {
        self.executor.n_ctx()
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        self.executor.reset()
    }

    /// Keeps the first `n_past` cached positions (prefix reuse).
    pub fn truncate(&mut self, n_past: usize) {
        self.executor.truncate(n_past)
    }

    /// A device copy of the cached positions; `None` when the cache is empty.
    pub fn snapshot_kv(&self) -> Result<Option<KvSnapshot>, SessionError> {
        Ok(self.executor.snapshot_kv()?)
    }

    /// The first `n` positions of `snapshot` (taken from this session) become the cache.
    pub fn restore_kv(&mut self, snapshot: &KvSnapshot, n: usize) -> Result<(), SessionError> {
        Ok(self.executor.restore_kv(snapshot, n)?)
    }

    /// Tokens per ubatch actually run (the chosen ubatch, at most the context).
    pub fn ubatch(&self) -> usize {
        self.executor.options().ubatch
    }

    /// Where the ubatch size came from.
    pub fn ubatch_origin(&self) -> UbatchOrigin {
        self.ubatch_origin
    }

    /// Why tuned graph settings stored for the model do not apply at the requested ubatch
    /// (they were measured in another ubatch class, or never against the default there).
    pub fn graph_note(&self) -> Option<&str> {
        self.graph_note.as_deref()
    }

    /// Why a profiled session gets no per-op GPU times on this device (no timestamps, or host
    /// timing forced): its prefills then run unprofiled and only host-side figures exist.
    pub fn no_gpu_profile(&self) -> Option<&str> {
        self.no_gpu_profile.as_deref()
    }

    /// Where the decode steps' time went, summed since the session opened.
    pub fn decode_time(&self) -> DecodeTime {
        self.decode_time
    }

    /// Where the time of the last prefill (or decode step) went.
    pub fn stats(&self) -> Option<&PrefillStats> {
        self.executor.last_stats.as_ref()
    }

    /// The device buffers of the session: (what, bytes).
    pub fn memory_plan(&self) -> Vec<(String, u64)> {
        self.executor.memory_plan()
    }

    /// The uploaded weights (footprint, upload and repack times, layouts).
    pub fn weights(&self) -> &GpuWeights {
        self.executor.weights()
    }

    /// The schedule of every kernel the last preparation chose: (node label, workload at the
    /// rows run, schedule, where it came from), in graph order.
    pub fn schedules_used(&self) -> &[(String, Workload, Schedule, ScheduleOrigin)] {
        self.executor.used()
    }

    /// The per-op table of a profiled session: GPU time per (op, kernel), summed over layers
    /// and prefills, slowest first; empty without profiling.
    pub fn profile_table(&self) -> Vec<ProfileRow> {
        profile::table(&self.executor.profile)
    }

    /// The per-op table of a profiled session's decode steps (each step recorded anew with
    /// timestamps, not replayed), summed over layers and steps.
    pub fn decode_profile_table(&self) -> Vec<ProfileRow> {
        profile::table(&self.executor.decode_profile)
    }
}
