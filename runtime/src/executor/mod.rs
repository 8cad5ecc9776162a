//! The graph executor: runs a model's prefill graph on the GPU in ubatches, carrying the KV
//! cache across them, with every kernel from rocky's compiler and command buffers split by the
//! driver-memory budget.
//!
//! A prefill is one stream of dispatches (`Stream`): the token ids of the whole prompt are
//! uploaded once, then every ubatch's nodes, from the embedding gather on, become dispatches
//! recorded into a ring of budgeted command buffers that the GPU runs while the host records
//! the next. The host waits once, at the end, for the logits. The last-row ops (final norm and
//! the vocabulary-wide output projection) run in the last ubatch only, and their logits are
//! the only ones read back.

mod decode;
mod greedy;
mod kv_snapshot;
mod math;
mod program;
mod record;
mod rope_kv;
mod slots;
mod split_kv;
mod weights;

pub use decode::DECODE_REPLAY_ENV;
pub use kv_snapshot::KvSnapshot;
pub use math::{ForcedMath, MathFamily};
use program::Program;
pub use program::{decode_fusions, UsedKernel};
pub use split_kv::step_splits;
pub use split_kv::{kv_splits_override, KV_SPLITS_ENV};
use weights::weight_format;
pub use weights::{combined_name, gate_up_name, GpuWeights, LayoutChoice, WeightRef};

use crate::budget::CommandBudget;
use crate::replay::DispatchSink;
use crate::stream::{Stream, StreamRing, StreamStats};
use crate::{
    device_caps, Buffer, BufferRange, ComputePipeline, Context, PipelineCache, RuntimeError,
};
use rocky_compiler::templates::attention::AttentionWorkload;
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::embedding::EmbeddingWorkload;
use rocky_compiler::templates::gemm::{n_slices, Epilogue};
use rocky_compiler::templates::gemv;
use rocky_compiler::templates::hadamard::{self, HadamardWorkload};
use rocky_compiler::templates::kv_cache::KvWriteWorkload;
use rocky_compiler::templates::rms_norm::RmsNormWorkload;
use rocky_compiler::templates::rope::RopeWorkload;
use rocky_compiler::{
    default_schedule, dispatch_grid, instantiate, ActType, DeviceCaps, GemmWorkload, Schedule,
    Workload,
};
use rocky_compiler::{KvType, KvTypes};
use rocky_models::arch::Model;
use rocky_models::fuse::{fuse, FuseOptions};
use rocky_models::graph::{Graph, Op};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a node's schedule came from (shown by `--profile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleOrigin {
    Default,
    Tuned,
}

/// Chooses the schedule of each workload: the tuning database, a test's override, or the
/// rule-based default.
pub trait ScheduleSource {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin);
}

/// The compiler's rule-based defaults for the device.
pub struct DefaultSchedules;

impl ScheduleSource for DefaultSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        (default_schedule(workload, caps), ScheduleOrigin::Default)
    }
}

#[derive(Clone, Debug)]
pub struct ExecutorOptions {
    /// Tokens per ubatch (1 to 4096).
    pub ubatch: usize,
    pub budget: CommandBudget,
    /// How long one command buffer may run before it counts as hung.
    pub timeout: Duration,
    /// Time every dispatch with GPU timestamps (see `Executor::profile`).
    pub profile: bool,
    /// Which ops fuse (the gate/up fusion only where the weights hold the pair combined).
    pub fuse: FuseOptions,
    /// Record ubatches several at a time ([`overlap_sets`]), node by node, each on its own
    /// activation slots, so the GPU runs one's later layers beside the others' earlier ones
    /// (more work per barrier level at small ubatches; an activation set per ubatch in step).
    pub overlap: bool,
    /// The KV cache's element types, K and V apart (llama.cpp's `-ctk`/`-ctv`; f16 both by
    /// default).
    pub kv: KvTypes,
    /// llama.cpp's Walsh-Hadamard rotation around a q8_0 cache (`ReferenceOptions::kv_rotation`,
    /// and off by default as there; llama.cpp 0c1e570 has it on): where a cache is q8_0 and
    /// head_dim a multiple of 64 (`hadamard::kv_rotation_sizes`), its KV write rotates each run
    /// of K (V) before quantizing it, Q is rotated before attention (with a q8_0 K) and the
    /// attention output back after it (with a q8_0 V). f32 and f16 caches never rotate.
    pub kv_rotation: bool,
}

/// Whether ubatches overlap (`ExecutorOptions::overlap`) where nothing was tuned: at ubatches
/// up to this size. Small ubatches leave the GPU half idle at every barrier level, and several
/// recorded in step fill it (H200, Qwen2.5-3B tuned, two in step: ubatch 64 +7 %, 128 +4 %,
/// 512 +0.2 %; 0.5B default at 64: +17 %; deeper: see [`OVERLAP_ROWS_IN_FLIGHT`]); above it
/// the gain is nil and each further set of activations costs memory.
pub const OVERLAP_MAX_UBATCH: usize = 256;

/// Rows of ubatches in flight when ubatches overlap: `overlap_sets` records this many rows' worth
/// of ubatches in step (at least 2, at most [`MAX_OVERLAP_SETS`]). H200, Qwen2.5-3B tuned at
/// ubatch 64, 512 tokens: none 4932 tok/s, 2 in step 4929, 4 5574, 8 5752, against 7465 at
/// ubatch 512 (docs/measurements/2026-12-04-h200.md): 8 sets of 64 rows are the first to keep
/// ubatch 64 within 1.3x of 512. Each set's activations are ubatch-sized, so 8 sets of 64 rows
/// take about the memory of one ubatch of 512 (2.07 against 2.03 GiB with the 3B's weights).
pub const OVERLAP_ROWS_IN_FLIGHT: usize = 512;
pub const MAX_OVERLAP_SETS: usize = 8;

/// How many ubatches are recorded in step at `ubatch` when they overlap:
/// [`OVERLAP_ROWS_IN_FLIGHT`] / ubatch within 2..=[`MAX_OVERLAP_SETS`], or `ROCKY_OVERLAP_SETS`
/// (2 to 8, for measurements of other depths).
pub fn overlap_sets(ubatch: usize) -> usize {
    let env = std::env::var("ROCKY_OVERLAP_SETS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    match env {
        Some(n) => n.clamp(2, MAX_OVERLAP_SETS),
        None => (OVERLAP_ROWS_IN_FLIGHT / ubatch.max(1)).clamp(2, MAX_OVERLAP_SETS),
    }
}

/// The overlap setting where nothing was tuned: `ROCKY_OVERLAP` (`1` on, `0` off: for A/B
/// measurements, it also overrides a tuned setting) or [`OVERLAP_MAX_UBATCH`]'s rule.
pub fn overlap_override_from_env() -> Result<Option<bool>, String> {
    match std::env::var("ROCKY_OVERLAP").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok(other) => Err(format!(
            "ROCKY_OVERLAP={other:?}: use 1 (overlap) or 0 (do not)"
        )),
    }
}

/// Whether a run at `ubatch` overlaps ubatches: `ROCKY_OVERLAP`, else the tuned setting, else
/// [`OVERLAP_MAX_UBATCH`]'s rule.
pub fn resolve_overlap(ubatch: usize, tuned: Option<bool>) -> Result<bool, String> {
    Ok(overlap_override_from_env()?
        .or(tuned)
        .unwrap_or(ubatch <= OVERLAP_MAX_UBATCH))
}

/// GPU time of one dispatch, from timestamps written around it.
#[derive(Clone, Debug)]
pub struct DispatchTime {
    pub label: String,
    pub kernel: String,
    /// The workload at the rows actually run (for GFLOP/s).
    pub workload: Workload,
    pub origin: ScheduleOrigin,
    pub seconds: f64,
}

/// Where the wall time of the last prefill went.
#[derive(Clone, Debug, PartialEq)]
pub struct PrefillStats {
    /// From the call to the logits in host memory.
    pub wall: Duration,
    /// Ubatches run.
    pub ubatches: usize,
    /// Host time before the first dispatch: schedules and pipelines, the token ids, the
    /// command buffers of the stream.
    pub setup: Duration,
    /// Host time reading the logits back.
    pub readback: Duration,
    /// The stream's own accounting (dispatches, command buffers, host busy and waiting time,
    /// GPU busy time when profiling).
    pub stream: StreamStats,
}

impl PrefillStats {
    /// GPU busy share: kernel time (timestamps) over wall time; `None` without timestamps.
    pub fn gpu_busy_share(&self) -> Option<f64> {
        let busy = self.stream.gpu_busy?.as_secs_f64();
        let wall = self.wall.as_secs_f64();
        (wall > 0.0).then(|| busy / wall)
    }
}

/// Errors of the executor, each saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{0}")]
    Unsupported(String),
    #[error("kernel for {label}: {reason}")]
    Refused { label: String, reason: String },
    #[error(
        "the driver ran out of memory closing a command buffer at ubatch {ubatch} with a budget of {budget_bytes} driver bytes and {max_dispatches} dispatches per command buffer ({source}); lower --ubatch or the budget (--cb-budget-mib / --cb-max-dispatches)"
    )]
    CommandBufferOom {
        ubatch: usize,
        budget_bytes: u64,
        max_dispatches: u32,
        source: RuntimeError,
    },
}

/// The prefill session: activations, KV cache, pipelines.
pub struct Executor<'m> {
    ctx: Context,
    caps: DeviceCaps,
    model: &'m Model,
    /// Shared: executors with other ubatches or fusions may run from the same upload.
    weights: Arc<GpuWeights>,
    options: ExecutorOptions,
    /// The prefill's graph (with this executor's fusions), slots and prepared kernels.
    prefill_program: Program,
    /// The decode step's: one row, its own fusions (`program::decode_fusions`).
    step_program: Program,
    /// The prompt's token ids, one region per ubatch at an offset the device can bind
    /// (host-visible: written in place, no staging copy).
    ids: Buffer,
    /// The last position's logits (host-readable: read in place).
    logits: Buffer,
    ids_stride: u64,
    /// Per layer (K, V) caches, `n_ctx` positions each in the type `options.kv` gives it
    /// (`rocky_compiler::kv_type`).
    kv: Vec<(Buffer, Buffer)>,
    n_ctx: usize,
    n_past: usize,
    pipelines: HashMap<(Workload, Schedule), ComputePipeline>,
    /// The reduce kernels of GEMMs split across the grid (`k_groups > 1`), by GEMM.
    reduce_pipelines: HashMap<(Workload, Schedule), ComputePipeline>,
    /// The partial sums of split GEMMs, in regions: the split GEMMs that read the same input
    /// (Q, K and V; gate and up) take one region each, so they and their reduces can run
    /// together; each region is sized for the largest GEMM using it at this ubatch.
    scratch: Vec<Buffer>,
    /// Per scratch region, the tile arrival counters of `last_group_reduces` GEMMs (zero
    /// between dispatches; each N-slice has its own).
    counters: Vec<Buffer>,
    /// Per set of activation slots, the partials of split-KV attention (`split_kv.rs`).
    attn_scratch: Vec<Buffer>,
    /// Per set, the arrival counters of split-KV attention whose last piece merges the
    /// pieces (`fused_combine`; zero between dispatches).
    attn_counters: Vec<Buffer>,
    /// The device's compute units where known (split-KV attention sizes its grid by them).
    compute_units: Option<u32>,
    cache: Option<PipelineCache>,
    /// The stream's command buffers and pools, kept across prefills.
    ring: StreamRing,
    /// Pipelines built since the cache was last saved.
    unsaved_pipelines: bool,
    /// Which program was prepared last (whose kernels `used` lists).
    last_prepared: ProgramKind,
    /// Per-dispatch GPU times of every prefill so far (when `options.profile`).
    pub profile: Vec<DispatchTime>,
    /// Per-dispatch GPU times of every decode step so far (when `options.profile`: a profiled
    /// executor records each step anew with timestamps instead of replaying it).
    pub decode_profile: Vec<DispatchTime>,
    /// Where the time of the last prefill went.
    pub last_stats: Option<PrefillStats>,
    /// Schedules the last `prepare` replaced, and why (for the CLI to show).
    pub notices: Vec<String>,
    /// The args-buffer forms of the position-reading kernels (RoPE, KV write, attention) of
    /// the decode step, by pipeline key (`decode.rs`).
    args_pipelines: HashMap<(Workload, Schedule), ComputePipeline>,
    /// What those kernels read instead of push constants: `m` = 1 and the token's position.
    step_args: Buffer,
    /// The decode step recorded once, while it stays valid (`decode.rs`).
    replay: Option<decode::RecordedStep>,
    /// Why decode steps are recorded per token instead (set once a recording failed).
    replay_off: Option<String>,
    /// The counters a replayed step's dispatches wait on instead of barriers
    /// (`decode.rs`, `rocky_compiler::ir::chain`); word 0 counts waits that gave up.
    chain_counters: Buffer,
    /// Why replayed steps are ordered by barriers instead of counters (`None`: counters where
    /// enabled).
    chain_off: Option<String>,
    /// Counter ordering asked for by the caller ([`Executor::set_decode_chain`]), over the
    /// environment's and the device's default.
    chain_asked: Option<bool>,
    /// Greedy decoding with the picks made on the device (`greedy.rs`).
    greedy: greedy::DeviceGreedy,
}

impl<'m> Executor<'m> {
    pub fn new(
        ctx: &Context,
        model: &'m Model,
        weights: impl Into<Arc<GpuWeights>>,
        options: ExecutorOptions,
        n_ctx: usize,
    ) -> Result<Executor<'m>, ExecError> {
        let weights = weights.into();
        if options.ubatch == 0 || options.ubatch > 4096 {
            return Err(ExecError::Unsupported(format!(
                "ubatch {} is out of range: use 1 to 4096",
                options.ubatch
            )));
        }
        let cfg = &model.config;
        let caps = device_caps(ctx.info(), ctx.caps());
        // Gate and up fuse where this executor's options say so and the weights hold them
        // combined.
        // The prefill's linears are GEMMs (or one-row GEMVs the prefill does not fold norms
        // into): no folded norm. No stacks: a slice of several rows is no view.
        let prefill_fusions = FuseOptions {
            norm: false,
            rope: false,
            stack: false,
            ..options.fuse
        };
        let graph = fuse(&model.graph, prefill_fusions, weights.as_ref());
        // Several sets of activation slots when ubatches overlap (see `ExecutorOptions::overlap`
        // and `overlap_sets`): of n sets, set s holds ubatches s, s + n, ...
        let n_sets = if options.overlap {
            overlap_sets(options.ubatch)
        } else {
            1
        };
        let prefill_program = Program::new(ctx, graph, options.ubatch, n_sets, "activations")?;
        let decode = program::decode_fusions().map_err(ExecError::Unsupported)?;
        let step_graph = fuse(
            &model.graph,
            step_fusions(decode, &caps, options.kv),
            weights.as_ref(),
        );
        let step_program = Program::new(ctx, step_graph, 1, 1, "decode activations")?;
        let kv_width = (cfg.n_head_kv * cfg.head_dim) as u32;
        options
            .kv
            .check_width(cfg.head_dim as u32, kv_width)
            .map_err(ExecError::Unsupported)?;
        let positions = n_ctx.max(1) as u64;
        let k_bytes = positions * u64::from(options.kv.k.row_bytes(kv_width));
        let v_bytes = positions * u64::from(options.kv.v.row_bytes(kv_width));
        let kv = (0..cfg.n_layer)
            .map(|l| {
                Ok((
                    Buffer::new(ctx, k_bytes, &format!("k_cache[{l}]"))?,
                    Buffer::new(ctx, v_bytes, &format!("v_cache[{l}]"))?,
                ))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let align = ctx.caps().min_storage_buffer_offset_alignment.max(4);
        let ids_stride = ((options.ubatch * 4) as u64).next_multiple_of(align);
        let regions = n_ctx.max(1).div_ceil(options.ubatch) as u64;
        let ids = Buffer::host_input(ctx, regions * ids_stride, "token ids")?;
        let logits = Buffer::host_output(ctx, (cfg.n_vocab * 4) as u64, "logits")?;
        let step_args = Buffer::host_input(ctx, 16, "decode step args")?;
        let chain_counters =
            Buffer::host_output(ctx, 4 * decode::CHAIN_COUNTERS, "decode chain counters")?;
        let greedy = greedy::DeviceGreedy::new(ctx)?;
        Ok(Executor {
            ctx: ctx.clone(),
            caps,
            model,
            weights,
            options,
            prefill_program,
            step_program,
            ids,
            ids_stride,
            logits,
            kv,
            n_ctx,
            n_past: 0,
            pipelines: HashMap::new(),
            reduce_pipelines: HashMap::new(),
            scratch: Vec::new(),
            counters: Vec::new(),
            attn_scratch: Vec::new(),
            attn_counters: Vec::new(),
            compute_units: crate::compute_units(ctx.info()),
            cache: PipelineCache::open_default(ctx).ok(),
            ring: StreamRing::default(),
            unsaved_pipelines: false,
            last_prepared: ProgramKind::Prefill,
            profile: Vec::new(),
            decode_profile: Vec::new(),
            last_stats: None,
            notices: Vec::new(),
            args_pipelines: HashMap::new(),
            step_args,
            replay: None,
            replay_off: None,
            chain_counters,
            chain_off: None,
            chain_asked: None,
            greedy,
        })
    }

    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// Bytes of every device buffer this executor holds: its whole footprint, allocated up
    /// front (what `rocky bench` reports as device memory).
    pub fn device_bytes(&self) -> u64 {
        self.memory_plan().iter().map(|(_, bytes)| bytes).sum()
    }

    /// The device buffers this executor holds, as (what, bytes), each counted once: each
    /// activation slot (sized by the largest value it holds at this ubatch), the KV cache, the
    /// token ids, the logits, and the weights in all (named with their largest tensor). What
    /// `prefill --verbose` prints, to check a plan against a driver's limits (panvk: 1 GiB per
    /// buffer, ~4 GiB in all).
    pub fn memory_plan(&self) -> Vec<(String, u64)> {
        let mut plan: Vec<(String, u64)> = self
            .prefill_program
            .slots
            .iter()
            .chain(&self.step_program.slots)
            .map(|b| (b.label().to_string(), b.size()))
            .collect();
        for buffer in self
            .scratch
            .iter()
            .chain(&self.counters)
            .chain(&self.attn_scratch)
            .chain(&self.attn_counters)
        {
            if buffer.size() > 4 {
                plan.push((buffer.label().to_string(), buffer.size()));
            }
        }
        let kv: u64 = self.kv.iter().map(|(k, v)| k.size() + v.size()).sum();
        plan.push((
            format!(
                "KV cache ({} layers, {}: {} B per position)",
                self.kv.len(),
                self.options.kv,
                self.kv_bytes_per_position()
            ),
            kv,
        ));
        plan.push(("token ids".to_string(), self.ids.size()));
        plan.push(("logits".to_string(), self.logits.size()));
        let (weights, largest) = self.weights.footprint();
        let label = match largest {
            Some((name, bytes)) => {
                format!("weights (largest: {name}, {})", crate::format_bytes(bytes))
            }
            None => "weights".to_string(),
        };
        plan.push((label, weights));
        plan
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.options
    }

    /// Forgets the prompt so far: the next prefill starts at position 0 (benchmarks and the
    /// graph tuner run the same prompt many times on one executor).
    pub fn reset(&mut self) {
        self.n_past = 0;
        self.profile.clear();
        self.decode_profile.clear();
    }

    /// Changes how dispatches are split into command buffers from the next prefill on.
    pub fn set_budget(&mut self, budget: CommandBudget) {
        self.drop_recordings();
        self.options.budget = budget;
    }

    /// The graph this executor runs (the model's, with its fusions).
    pub fn graph(&self) -> &Graph {
        &self.prefill_program.graph
    }

    /// The uploaded weights (layouts, upload time, footprint).
    pub fn weights(&self) -> &GpuWeights {
        &self.weights
    }

    /// Gives the uploaded weights back, so an executor with another ubatch can reuse them
    /// instead of uploading the model again.
    pub fn into_weights(self) -> Arc<GpuWeights> {
        self.weights
    }

    /// Runs the whole prompt in ubatches and returns the last position's logits.
    pub fn prefill(
        &mut self,
        tokens: &[u32],
        schedules: &dyn ScheduleSource,
    ) -> Result<Vec<f32>, ExecError> {
        self.check_tokens(tokens)?;
        self.prepare(schedules)?;
        self.run_recording(ProgramKind::Prefill, tokens, self.options.ubatch)
    }

    /// Records `tokens` in ubatches of `ubatch` rows through `kind`'s prepared program as a
    /// stream (recorded and run as it goes), and returns the last position's logits.
    fn run_recording(
        &mut self,
        kind: ProgramKind,
        tokens: &[u32],
        ubatch: usize,
    ) -> Result<Vec<f32>, ExecError> {
        let start = Instant::now();
        let cfg = &self.model.config;
        for (i, chunk) in tokens.chunks(ubatch).enumerate() {
            self.ids.upload_u32(i as u64 * self.ids_stride, chunk)?;
        }
        // Out of `self` while the stream borrows it and `self`'s buffers; back when it is done.
        let mut ring = std::mem::take(&mut self.ring);
        let (times, stream_stats, mut log, setup) = {
            let mut stream = Stream::new(
                &self.ctx,
                &mut ring,
                self.options.budget,
                self.options.timeout,
                self.options.profile,
            )?;
            let setup = start.elapsed();
            let mut log = Vec::new();
            let prog = self.program(kind);
            let n_chunks = tokens.len().div_ceil(ubatch);
            let mut cursors: Vec<UbatchCursor> = tokens
                .chunks(ubatch)
                .enumerate()
                .map(|(i, chunk)| UbatchCursor {
                    index: i,
                    pos0: (self.n_past + i * ubatch) as u32,
                    last: i + 1 == n_chunks,
                    set: i % prog.n_sets,
                    rows: chunk.len() as u32,
                    row_offset_of: HashMap::new(),
                    done: false,
                    replayed: false,
                })
                .collect();
            // Ubatches in groups of `n_sets`, recorded node by node in step: the level
            // scheduler then runs the second's layer l beside the first's later layers (it
            // waits only for the first's KV-cache writes of layer l), so small ubatches fill
            // the GPU together.
            for group in cursors.chunks_mut(prog.n_sets) {
                for node_index in 0..prog.graph.nodes.len() {
                    for cursor in group.iter_mut().filter(|c| !c.done) {
                        self.record_node(prog, &mut stream, cursor, node_index, &mut log)?;
                    }
                }
            }
            let (times, stats) = stream.finish().map_err(|e| self.submit_error(e))?;
            (times, stats, log, setup)
        };
        self.ring = ring;
        self.n_past += tokens.len();
        let readback = Instant::now();
        let logits = self.logits.download_f32(0, cfg.n_vocab)?;
        let readback = readback.elapsed();
        if self.options.profile {
            for (t, seconds) in log.iter_mut().zip(times) {
                t.seconds = seconds;
            }
            match kind {
                ProgramKind::Prefill => self.profile.extend(log),
                ProgramKind::Step => self.decode_profile.extend(log),
            }
        }
        self.last_stats = Some(PrefillStats {
            wall: start.elapsed(),
            ubatches: tokens.len().div_ceil(ubatch),
            setup,
            readback,
            stream: stream_stats,
        });
        self.save_pipeline_cache();
        Ok(logits)
    }

    /// Writes the pipeline cache to disk if pipelines were built since it was last saved (a
    /// failure costs only recompilation next time, so it is not an error).
    fn save_pipeline_cache(&mut self) {
        if self.unsaved_pipelines {
            if let Some(c) = &self.cache {
                let _ = c.save();
            }
            self.unsaved_pipelines = false;
        }
    }

    /// Refuses `tokens` that are empty, do not fit the cache after `n_past`, or lie outside
    /// the vocabulary.
    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ExecError> {
        let n_vocab = self.model.config.n_vocab;
        if tokens.is_empty() {
            return Err(ExecError::Unsupported("the prompt is empty".into()));
        }
        if self.n_past + tokens.len() > self.n_ctx {
            return Err(ExecError::Unsupported(format!(
                "{} tokens do not fit the {}-position KV cache",
                self.n_past + tokens.len(),
                self.n_ctx
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ExecError::Unsupported(format!(
                "token id {bad} is outside the vocabulary of {n_vocab} tokens"
            )));
        }
        Ok(())
    }

    /// Workloads of the graph at ubatch size `m` (the last-position ops at m = 1).
    /// `rope_kv`: the projections that take their attention's RoPE and KV write (the decode
    /// step's, [`rope_kv::plan`]) and those attentions.
    fn node_workloads(
        &self,
        graph: &Graph,
        m: u32,
        rope_kv: &rope_kv::Plan,
    ) -> Result<Vec<Vec<(String, Workload)>>, ExecError> {
        let mut out = Vec::new();
        let mut rows = m;
        for (node_index, node) in graph.nodes.iter().enumerate() {
            let mut w = Vec::new();
            // A projection that rotates and writes the cache: its rows are the quads of the
            // epilogue (`Epilogue::RopeKv`), n = rows / 4.
            let with_rope_kv = |g: GemmWorkload| match rope_kv.projections.get(&node_index) {
                Some(site) => GemmWorkload {
                    n: site.epilogue.rows() / 4,
                    epilogue: Epilogue::RopeKv(site.epilogue),
                    ..g
                },
                None => g,
            };
            match &node.op {
                Op::Embedding { table, width } => {
                    let ty = &self.weights.get(table).ty;
                    w.push(Workload::Embedding(EmbeddingWorkload {
                        m: rows,
                        width: *width as u32,
                        table: weight_format(*ty, table)?,
                        // Where the tied output projection holds it repacked (panvk).
                        layout: self.weights.layout(table),
                    }))
                }
                Op::LastRow { .. } => rows = 1,
                Op::RmsNorm { eps, width, .. } => w.push(Workload::RmsNorm(RmsNormWorkload::new(
                    rows,
                    *width as u32,
                    *eps,
                ))),
                Op::Linear {
                    weight,
                    bias,
                    in_features,
                    out_features,
                    residual,
                    norm,
                } => {
                    let ty = &self.weights.get(weight).ty;
                    w.push(linear_workload(
                        with_rope_kv(GemmWorkload {
                            m: rows,
                            n: *out_features as u32,
                            k: *in_features as u32,
                            act: ActType::F32,
                            weight: weight_format(*ty, weight)?,
                            layout: self.weights.layout(weight),
                            bias: bias.is_some(),
                            epilogue: if *residual {
                                Epilogue::Residual
                            } else {
                                Epilogue::None
                            },
                            rms_norm_eps_bits: norm.as_ref().map(|n| n.eps.to_bits()),
                        }),
                        &self.caps,
                    ))
                }
                Op::LinearSwiGlu {
                    gate,
                    up,
                    in_features,
                    out_features,
                    norm,
                } => {
                    let name = gate_up_name(gate, up);
                    let ty = &self.weights.get(&name).ty;
                    w.push(linear_workload(
                        GemmWorkload {
                            m: rows,
                            n: *out_features as u32,
                            k: *in_features as u32,
                            act: ActType::F32,
                            weight: weight_format(*ty, gate)?,
                            layout: self.weights.layout(&name),
                            bias: false,
                            epilogue: Epilogue::SwiGlu,
                            rms_norm_eps_bits: norm.as_ref().map(|n| n.eps.to_bits()),
                        },
                        &self.caps,
                    ))
                }
                Op::LinearStack {
                    parts,
                    in_features,
                    norm,
                } => {
                    let (name, bias, _) = linear_operands(&node.op);
                    let ty = &self.weights.get(&name).ty;
                    w.push(linear_workload(
                        with_rope_kv(GemmWorkload {
                            m: rows,
                            n: parts.iter().map(|p| p.out_features as u32).sum(),
                            k: *in_features as u32,
                            act: ActType::F32,
                            weight: weight_format(*ty, &name)?,
                            layout: self.weights.layout(&name),
                            bias: bias.is_some(),
                            epilogue: Epilogue::None,
                            rms_norm_eps_bits: norm.as_ref().map(|n| n.eps.to_bits()),
                        }),
                        &self.caps,
                    ))
                }
                // A view of its input (`record_node`): no kernel.
                Op::Slice { .. } => {}
                Op::Rope {
                    n_heads,
                    head_dim,
                    theta,
                    pairing,
                    freq_factors,
                } => w.push(Workload::RopeNeox(
                    RopeWorkload::new(rows, *n_heads as u32, *head_dim as u32, *theta)
                        .with_pairing(*pairing)
                        .with_freq_factors(freq_factors.is_some()),
                )),
                Op::Attention {
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    sliding_window,
                    rope,
                    ..
                } => {
                    let kv_width = (n_kv_heads * head_dim) as u32;
                    let kv = self.options.kv;
                    let (rot_k, rot_v) = self.kv_rotations(*head_dim as u32);
                    if rope.is_some() && (rot_k, rot_v) != (None, None) {
                        // `step_fusions` folds no RoPE over a q8_0 cache, the only kind that
                        // rotates; the fused kernel has no rotation.
                        return Err(ExecError::Unsupported(
                            "the fused RoPE and KV write cannot rotate a q8_0 cache".into(),
                        ));
                    }
                    if rope_kv.attentions.contains(&node_index) {
                        // Its projections rotate q and k and write the caches.
                    } else if let Some(r) = rope {
                        // The folded RoPEs and the KV writes: one kernel (`record/attention.rs`).
                        w.push(Workload::RopeNeox(
                            RopeWorkload::new(rows, *n_heads as u32, *head_dim as u32, r.theta)
                                .with_pairing(r.pairing)
                                .with_freq_factors(r.freq_factors.is_some())
                                .with_kv_write(*n_kv_heads as u32, kv),
                        ));
                    } else {
                        // One write kernel for both caches where their types (and rotations)
                        // agree, else K's then V's (`record/attention.rs` binds each to its
                        // cache).
                        let k = KvWriteWorkload::new(rows, kv_width, kv.k)
                            .with_rotation(rot_k.unwrap_or(0));
                        let v = KvWriteWorkload::new(rows, kv_width, kv.v)
                            .with_rotation(rot_v.unwrap_or(0));
                        w.push(Workload::KvWrite(k));
                        if v != k {
                            w.push(Workload::KvWrite(v));
                        }
                    }
                    let q_width = (n_heads * head_dim) as u32;
                    // Q in K's rotated basis before q·k; the output back from V's after
                    // attention (`record/attention.rs`: the first rotates the node's Q input
                    // in place, the second its output).
                    if let Some(n) = rot_k {
                        w.push(Workload::Hadamard(HadamardWorkload {
                            m: rows,
                            width: q_width,
                            n,
                        }));
                    }
                    w.push(Workload::Attention(AttentionWorkload {
                        m: rows,
                        n_heads: *n_heads as u32,
                        n_kv_heads: *n_kv_heads as u32,
                        head_dim: *head_dim as u32,
                        // Bucketed: the tuning key (see `kv_bucket`), not the cache size.
                        max_kv: AttentionWorkload::kv_bucket(self.n_ctx as u32),
                        window: sliding_window.map_or(0, |w| w as u32),
                        kv,
                    }));
                    if let Some(n) = rot_v {
                        w.push(Workload::Hadamard(HadamardWorkload {
                            m: rows,
                            width: q_width,
                            n,
                        }));
                    }
                }
                Op::SwiGlu { width } => w.push(Workload::SwiGlu(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
                Op::Add { width } => w.push(Workload::Add(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
                // Each head is a row of its own: the RMSNorm kernel over m·n_heads rows.
                Op::HeadRmsNorm {
                    eps,
                    n_heads,
                    head_dim,
                    ..
                } => w.push(Workload::RmsNorm(RmsNormWorkload::new(
                    rows * *n_heads as u32,
                    *head_dim as u32,
                    *eps,
                ))),
                Op::Scale { width, .. } => w.push(Workload::Scale(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
                Op::GeGlu { width } => w.push(Workload::GeGlu(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
            }
            out.push(w.into_iter().map(|w| (node.label.clone(), w)).collect());
        }
        Ok(out)
    }

    /// The Hadamard sizes K (with Q) and V (with the output) rotate by, where
    /// [`ExecutorOptions::kv_rotation`] is on: llama.cpp's rule, shared with the reference.
    fn kv_rotations(&self, head_dim: u32) -> (Option<u32>, Option<u32>) {
        if !self.options.kv_rotation {
            return (None, None);
        }
        hadamard::kv_rotation_sizes(self.options.kv, head_dim)
    }

    /// Compiles (or finds) the pipeline of every workload of the prefill at the ubatch size.
    pub fn prepare(&mut self, schedules: &dyn ScheduleSource) -> Result<(), ExecError> {
        self.prepare_program(ProgramKind::Prefill, self.options.ubatch as u32, schedules)
    }

    /// The kernel and schedule of every node of the program prepared last (the prefill's,
    /// or the decode step's after `prepare_decode`), in graph order: for profiles and the
    /// tuner.
    pub fn used(&self) -> &[UsedKernel] {
        &self.program(self.last_prepared).used
    }

    /// The program of `kind`.
    fn program(&self, kind: ProgramKind) -> &Program {
        match kind {
            ProgramKind::Prefill => &self.prefill_program,
            ProgramKind::Step => &self.step_program,
        }
    }

    fn program_mut(&mut self, kind: ProgramKind) -> &mut Program {
        match kind {
            ProgramKind::Prefill => &mut self.prefill_program,
            ProgramKind::Step => &mut self.step_program,
        }
    }

    /// Chooses the schedule of every kernel of `kind`'s program at `m` rows, compiles (or
    /// finds) its pipeline and sizes the split scratch it needs; `used` then lists them.
    fn prepare_program(
        &mut self,
        kind: ProgramKind,
        m: u32,
        schedules: &dyn ScheduleSource,
    ) -> Result<(), ExecError> {
        // The recorded decode step binds this preparation's buffers and schedules: whatever
        // this one changes, it is recorded again at the next decode.
        self.drop_recordings();
        let prog = self.program(kind);
        // One row of the decode step, its projections GEMVs, no cache rotation: the Q/K/V
        // projections may take the RoPE and the KV write (`rope_kv`).
        let rope_kv = if kind == ProgramKind::Step
            && m == 1
            && gemv_enabled(&self.caps)
            && rope_kv::enabled()
        {
            rope_kv::plan(&prog.graph, self.options.kv)
        } else {
            rope_kv::Plan::default()
        };
        let workloads = self.node_workloads(&prog.graph, m, &rope_kv)?;
        let first_inputs: Vec<Option<usize>> = prog
            .graph
            .nodes
            .iter()
            .map(|n| n.inputs.first().copied())
            .collect();
        let n_sets = prog.n_sets;
        let mut used = Vec::new();
        let mut kernels_of = Vec::new();
        let mut scratch_region_of = Vec::new();
        self.notices.clear();
        // Split GEMMs seen so far per input value: the next one reading it takes the next
        // scratch region.
        let mut split_readers: HashMap<usize, usize> = HashMap::new();
        for (node_index, node) in workloads.into_iter().enumerate() {
            let first = used.len();
            let mut region = None;
            for (label, w) in node {
                let (s, mut origin) = schedules.schedule(&w, &self.caps);
                let mut s = split_kv::apply_override(&w, s, &self.caps)?;
                self.build_pipeline(&label, &w, &s)?;
                if self.over_driver_budget(&w, &s) {
                    // A (tuned) schedule whose one dispatch needs more driver memory than a
                    // whole command buffer may use (panvk 25.x sizes shared memory for the
                    // whole grid: 1.2 GiB for one staged GEMM at ubatch 512) would fail at
                    // vkEndCommandBuffer: run the default schedule instead.
                    (s, origin) = DefaultSchedules.schedule(&w, &self.caps);
                    s = split_kv::apply_override(&w, s, &self.caps)?;
                    self.build_pipeline(&label, &w, &s)?;
                    self.notices.push(format!(
                        "{label}: the tuned schedule needs more driver memory per dispatch than the command-buffer budget at ubatch {m}; using the default"
                    ));
                }
                if is_split_gemm(&s) {
                    let input = first_inputs[node_index].expect("a GEMM node has an input");
                    let readers = split_readers.entry(input).or_insert(0);
                    self.prepare_split_k(&label, &w, &s, *readers, n_sets)?;
                    region = Some(*readers);
                    *readers += 1;
                }
                self.prepare_split_kv(&label, &w, &s, n_sets)?;
                used.push((label, w, s, origin));
            }
            kernels_of.push(first..used.len());
            scratch_region_of.push(region);
        }
        self.last_prepared = kind;
        let prog = self.program_mut(kind);
        prog.used = used;
        prog.kernels_of = kernels_of;
        prog.scratch_region_of = scratch_region_of;
        prog.rope_kv = rope_kv;
        Ok(())
    }

    /// For a GEMM split across the grid: builds its reduce kernel and makes scratch region
    /// `region` large enough for its partial sums at the full ubatch.
    fn prepare_split_k(
        &mut self,
        label: &str,
        w: &Workload,
        s: &Schedule,
        region: usize,
        n_sets: usize,
    ) -> Result<(), ExecError> {
        let (Workload::Gemm(gw), Schedule::Gemm(gs)) = (w, s) else {
            return Ok(());
        };
        if !gs.last_group_reduces && !self.reduce_pipelines.contains_key(&(*w, *s)) {
            let kernel =
                rocky_compiler::templates::gemm::split_k::instantiate_reduce(gw, gs, &self.caps)
                    .map_err(|r| ExecError::Refused {
                        label: label.to_string(),
                        reason: r.to_string(),
                    })?;
            let p = ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
            self.reduce_pipelines.insert((*w, *s), p);
            self.unsaved_pipelines = true;
        }
        // Each set of slots has its own scratch: region r of set s is `r * n_sets + s`.
        for set in 0..n_sets {
            self.ensure_scratch(gw, gs, label, region * n_sets + set)?;
        }
        Ok(())
    }

    /// Makes scratch buffer `region` (and its tile counters) large enough for `gw` split by `gs`.
    fn ensure_scratch(
        &mut self,
        gw: &GemmWorkload,
        gs: &rocky_compiler::GemmSchedule,
        label: &str,
        region: usize,
    ) -> Result<(), ExecError> {
        while self.scratch.len() <= region {
            let r = self.scratch.len();
            self.scratch.push(Buffer::new(
                &self.ctx,
                4,
                &format!("split-K partials[{r}]"),
            )?);
            self.counters.push(Buffer::new(
                &self.ctx,
                4,
                &format!("split-K tile counters[{r}]"),
            )?);
        }
        let bytes = 4 * rocky_compiler::templates::gemm::split_k::scratch_values(gw, gs);
        if self.scratch[region].size() < bytes {
            let label = self.scratch[region].label().to_string();
            // Free the smaller one first: peak memory is the new size, not both.
            self.scratch[region] = Buffer::new(&self.ctx, 4, &label)?;
            self.scratch[region] = Buffer::new(&self.ctx, bytes, &label)?;
        }
        if gs.last_group_reduces {
            let caps = self.ctx.caps();
            let align = caps.min_storage_buffer_offset_alignment;
            let slices =
                n_slices(gw, u64::from(caps.max_storage_buffer_range), align).map_err(|r| {
                    ExecError::Refused {
                        label: label.to_string(),
                        reason: r.to_string(),
                    }
                })?;
            let (_, bytes) = rocky_compiler::templates::gemm::interface::counter_layout(
                gw.m, gw, gs, &slices, align,
            );
            if self.counters[region].size() < bytes {
                let label = self.counters[region].label().to_string();
                // Zero: the kernels leave their counters as they found them.
                self.counters[region] =
                    Buffer::from_slice(&self.ctx, &vec![0u32; (bytes / 4) as usize], &label)?;
            }
        }
        Ok(())
    }

    /// Compiles the pipeline of (`w`, `s`) unless it is built already.
    fn build_pipeline(&mut self, label: &str, w: &Workload, s: &Schedule) -> Result<(), ExecError> {
        if self.pipelines.contains_key(&(*w, *s)) {
            return Ok(());
        }
        let kernel = instantiate(w, s, &self.caps).map_err(|r| ExecError::Refused {
            label: label.to_string(),
            reason: r.to_string(),
        })?;
        let p = ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
        self.pipelines.insert((*w, *s), p);
        self.unsaved_pipelines = true;
        Ok(())
    }

    /// Whether one dispatch of (`w`, `s`) at the full ubatch needs more driver memory than the
    /// command-buffer budget allows (only drivers with a WLS model; see `budget`).
    fn over_driver_budget(&self, w: &Workload, s: &Schedule) -> bool {
        let budget = self.options.budget;
        let shared = self.pipelines[&(*w, *s)].meta().shared_bytes;
        dispatch_grid(w, s)
            .map(|grid| budget.dispatch_bytes(shared, grid) > budget.max_driver_bytes)
            .unwrap_or(false)
    }

    /// An error of the stream as the executor reports it: an out-of-memory closing or
    /// submitting a command buffer names the budget that caused it.
    fn submit_error(&self, e: RuntimeError) -> ExecError {
        if matches!(e, RuntimeError::CommandBufferOutOfMemory { .. }) {
            let budget = self.options.budget;
            ExecError::CommandBufferOom {
                ubatch: self.options.ubatch,
                budget_bytes: budget.max_driver_bytes,
                max_dispatches: budget.max_dispatches,
                source: e,
            }
        } else {
            e.into()
        }
    }

    /// Records node `node_index` of the ubatch at `cursor` into the stream. Only the last
    /// ubatch runs the ops after the last row (final norm, output projection): at `LastRow`
    /// any other ubatch is done.
    fn record_node<'s>(
        &'s self,
        prog: &'s Program,
        stream: &mut dyn DispatchSink<'s>,
        cursor: &mut UbatchCursor,
        node_index: usize,
        log: &mut Vec<DispatchTime>,
    ) -> Result<(), ExecError> {
        let align = self.ctx.caps().min_storage_buffer_offset_alignment;
        let node = &prog.graph.nodes[node_index];
        let mut rows = cursor.rows;
        let row_offset_of = &mut cursor.row_offset_of;
        let input_offsets: Vec<u64> = node
            .inputs
            .iter()
            .map(|v| row_offset_of.get(v).copied().unwrap_or(0))
            .collect();
        match &node.op {
            // What follows the last row only makes the logits, which only the last ubatch
            // returns.
            Op::LastRow { .. } if !cursor.last => {
                cursor.done = true;
                return Ok(());
            }
            Op::LastRow { width } => {
                let off = u64::from(rows - 1) * (*width as u64) * 4 + input_offsets[0];
                if off % align != 0 {
                    return Err(ExecError::Unsupported(format!(
                        "the last row's offset {off} is not aligned to the device's {align} bytes (hidden size {width})"
                    )));
                }
                row_offset_of.insert(node.output, off);
                rows = 1;
            }
            Op::Rope { .. } => {
                row_offset_of.insert(node.output, input_offsets[0]);
            }
            // A part of a stack's one row: a view at its first column (the upload combined
            // the stack only where every part's offset is aligned; checked again here).
            Op::Slice { offset, .. } => {
                let off = input_offsets[0] + (*offset as u64) * 4;
                if rows != 1 || off % align != 0 {
                    return Err(ExecError::Unsupported(format!(
                        "{}: a slice of {rows} rows at byte {off} is no view the device can bind (alignment {align}); run with ROCKY_FUSE set without stack",
                        node.label
                    )));
                }
                row_offset_of.insert(node.output, off);
                return Ok(());
            }
            _ => {}
        }
        record::NodeRecorder {
            exec: self,
            prog,
            stream,
            log,
            node_index,
            node,
            ubatch: cursor.index,
            set: cursor.set,
            rows,
            pos0: cursor.pos0,
            replayed: cursor.replayed,
            input_offsets,
        }
        .record()?;
        cursor.rows = rows;
        Ok(())
    }
}

/// Which of the executor's two programs (see `program.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProgramKind {
    Prefill,
    Step,
}

/// Where the recording of one ubatch stands (see `Executor::record_node`).
struct UbatchCursor {
    /// The ubatch's number in the prompt (its token ids' region).
    index: usize,
    pos0: u32,
    last: bool,
    /// Which set of activation slots and split-K scratch it uses.
    set: usize,
    /// Rows of the values now (`m`, then 1 after the last row).
    rows: u32,
    /// Byte offset of values that are a view into another (the last row, rope in place).
    row_offset_of: HashMap<usize, u64>,
    done: bool,
    /// Recorded for replay (a decode step): the position-reading kernels take their args
    /// form, reading the position from `step_args` instead of push constants.
    replayed: bool,
}

/// The weight tensor, bias and residual flag of a linear node (the combined gate/up tensor of
/// a fused one; a stack's combined weights and biases).
fn linear_operands(op: &Op) -> (String, Option<String>, bool) {
    match op {
        Op::Linear {
            weight,
            bias,
            residual,
            ..
        } => (weight.clone(), bias.clone(), *residual),
        Op::LinearSwiGlu { gate, up, .. } => (gate_up_name(gate, up), None, false),
        Op::LinearStack { parts, .. } => {
            let weights: Vec<&str> = parts.iter().map(|p| p.weight.as_str()).collect();
            let biases: Vec<&str> = parts.iter().filter_map(|p| p.bias.as_deref()).collect();
            (
                combined_name(&weights),
                (!biases.is_empty()).then(|| combined_name(&biases)),
                false,
            )
        }
        _ => unreachable!("only linear nodes have GEMM workloads"),
    }
}

/// The weight of the RMSNorm folded into a linear node, if any.
fn folded_norm_weight(op: &Op) -> Option<&str> {
    match op {
        Op::Linear { norm, .. } | Op::LinearSwiGlu { norm, .. } | Op::LinearStack { norm, .. } => {
            norm.as_ref().map(|n| n.weight.as_str())
        }
        _ => None,
    }
}

/// The decode step's fusions on this device: `decode` (`program::decode_fusions`), with the
/// RMSNorm folded into the projections only where one-row linears run as GEMVs (the GEMM
/// computes no folded norm) and registers are not scarce: with a register budget of 64 or
/// less (Mali, where more than 32 halves occupancy) the folded GEMVs' extra live values cost
/// more than the norm's dispatch is likely to (Mesa 25.0.7's Valhall compiler: the 3B's gate/up
/// and q GEMVs from 2 threads to 1 and load/store cycles 49 -> 62, the vocabulary projection
/// 52 -> 185 cycles with 12:113 spills). `ROCKY_FUSE` with `norm` still folds them there.
///
/// The RoPEs fold into the attention's KV write (one kernel for two RoPEs and two KV writes)
/// where both caches are f32 or f16: a q8_0 cache quantizes whole blocks in its own kernel.
///
/// On an H100 the fold sped the 0.5B's decode (hidden 896) up by 11 %; the 3B's (hidden 2048)
/// lost 4 % with the GEMV default of then (docs/measurements/2026-12-06-decode-fusions.md) and
/// gains 1-3 % with today's (128 threads, dot-first: 345 -> 272 dispatches per step, the same
/// tokens; docs/measurements/2026-12-06d-h100-gemv-defaults.md), so it no longer depends on
/// the width.
fn step_fusions(decode: FuseOptions, caps: &DeviceCaps, kv: KvTypes) -> FuseOptions {
    let forced = FuseOptions::env_override().ok().flatten().is_some();
    let registers_to_spare = caps.register_budget > 64 || forced;
    FuseOptions {
        norm: decode.norm && gemv_enabled(caps) && registers_to_spare,
        rope: decode.rope && ![kv.k, kv.v].contains(&KvType::Q8_0),
        ..decode
    }
}

/// Rows up to which a linear node runs the GEMV template. The template computes up to
/// `gemv::MAX_M` rows, but only one row is measured against the GEMM so far (decode, and
/// the prefill's last-row output projection); prefill ubatches of 2 to 8 keep the GEMM's
/// small-M schedules (and their tuning records) until the GEMV is measured there too.
const GEMV_ROWS: u32 = 1;

/// The workload of a linear node at `g.m` rows: the GEMV template's for at most
/// [`GEMV_ROWS`] rows where [`gemv_enabled`], else the GEMM's.
/// A projection with a folded RMSNorm is always the GEMV's (only it computes one; the decode
/// step folds norms only where its linears run as GEMVs, see [`step_fusions`]).
fn linear_workload(g: GemmWorkload, caps: &DeviceCaps) -> Workload {
    let gemv_rows = g.m <= GEMV_ROWS.min(gemv::MAX_M) && gemv_enabled(caps);
    if gemv_rows || g.rms_norm_eps_bits.is_some() {
        Workload::Gemv(g)
    } else {
        Workload::Gemm(g)
    }
}

/// Whether one-row linear nodes run the GEMV template: `ROCKY_GEMV=1` / `0` force it on / off
/// (before/after measurements, tests); otherwise on, except on CPU implementations
/// (`lane_serial_memory`: lavapipe), where the GEMM's shuffle-and-wide-load m = 1 schedules
/// measured 2x faster (docs/measurements/2026-12-04-decode-lavapipe.md).
fn gemv_enabled(caps: &DeviceCaps) -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var("ROCKY_GEMV").as_deref() {
        Ok("0") => Some(false),
        Ok("1") => Some(true),
        _ => None,
    });
    forced.unwrap_or(!caps.lane_serial_memory)
}

/// The attention workload of an attention node's pipeline key.
fn w_attention(w: &Workload) -> &AttentionWorkload {
    match w {
        Workload::Attention(a) => a,
        _ => unreachable!("an attention node's second kernel is attention"),
    }
}

/// Whether `s` is a GEMM split across the grid (partial sums, then a reduce kernel).
fn is_split_gemm(s: &Schedule) -> bool {
    matches!(s, Schedule::Gemm(gs) if gs.k_groups > 1)
}

/// The same workload with `rows` rows (the last, shorter ubatch; the m = 1 tail).
fn with_rows(w: &Workload, rows: u32) -> Workload {
    let mut w = *w;
    match &mut w {
        Workload::Gemm(g) | Workload::Gemv(g) => g.m = rows,
        Workload::RmsNorm(x) => x.m = rows,
        Workload::RopeNeox(x) => x.m = rows,
        Workload::SwiGlu(x) | Workload::GeGlu(x) | Workload::Add(x) | Workload::Scale(x) => {
            x.m = rows
        }
        Workload::KvWrite(x) => x.m = rows,
        Workload::Attention(x) => x.m = rows,
        Workload::Embedding(x) => x.m = rows,
        Workload::Hadamard(x) => x.m = rows,
    }
    w
}

/// Puts named buffer ranges in the order of the kernel's bindings.
fn order_bindings<'a>(
    pipeline: &ComputePipeline,
    named: Vec<(&str, BufferRange<'a>)>,
    label: &str,
) -> Result<Vec<BufferRange<'a>>, ExecError> {
    let mut named: Vec<Option<(&str, BufferRange<'a>)>> = named.into_iter().map(Some).collect();
    pipeline
        .meta()
        .bindings
        .iter()
        .map(|b| {
            named
                .iter_mut()
                .find(|n| n.as_ref().is_some_and(|(name, _)| *name == b.name))
                .and_then(|n| n.take())
                .map(|(_, r)| r)
                .ok_or_else(|| ExecError::Refused {
                    label: label.to_string(),
                    reason: format!("kernel binding {:?} has no buffer in the executor", b.name),
                })
        })
        .collect()
}
