//! Opening a model on a Vulkan device for prefill: the flags every GPU command shares.

use super::staging::ForcedSharedMemory;
use crate::error::CliError;
use crate::progress::Bar;
use crate::units::human_bytes;
use rocky_models::arch::Model;
use rocky_models::fuse::FuseOptions;
use rocky_models::gguf::GgufFile;
use rocky_runtime::executor::{
    ExecError, Executor, ExecutorOptions, ForcedMath, GpuWeights, KvSnapshot, LayoutChoice,
    MathFamily, PrefillStats,
};
use rocky_runtime::{host_timing_reason, CommandBudget, Context, DeviceSelector, RuntimeError};
use rocky_tuner::graph::model_shape_key;
use rocky_tuner::DbSchedules;
use rocky_tuning_db::DbError;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Clone, Debug)]
pub struct GpuArgs {
    /// Vulkan device: index or part of its name (see `rocky devices`); default: the best GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tokens per ubatch (1 to 4096); default: the one `rocky tune` chose for this model and
    /// device, else 512.
    #[arg(long, short = 'u')]
    pub ubatch: Option<usize>,
    /// Estimated driver memory per command buffer before it is submitted, in MiB (default:
    /// derived from the device's driver).
    #[arg(long)]
    pub cb_budget_mib: Option<u64>,
    /// Most dispatches per command buffer (default: derived from the device).
    #[arg(long)]
    pub cb_max_dispatches: Option<u32>,
    /// Force one math family on every GEMM: f32, f16 (packed, f32 accumulation across units) or
    /// int8 (dot products on activations quantized per 32 values); `auto` keeps the tuned or
    /// default schedule's.
    #[arg(long, value_enum, default_value = "auto")]
    pub math: MathArg,
    /// Stage every GEMM's operands in workgroup shared memory (a test of the driver's
    /// shared-memory allocation and of the command-buffer budget, e.g. on the mali-shim; slower
    /// on Mali, whose defaults use none).
    #[arg(long)]
    pub force_shared_memory: bool,
    /// Tuning database with the schedules to use (default: $ROCKY_DB, else
    /// ~/.local/share/rocky/tuning.sled); without one, the compiler's default schedules.
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Device layout of the GEMM weights: auto (the device's default: aligned for Q8_0, Q5_0
    /// and Q6_K where shared memory is slow), gguf (the file's blocks) or aligned (repacked into
    /// 16-byte-aligned groups at upload, where the format has it).
    #[arg(long, default_value = "auto")]
    pub weight_layout: String,
}

/// `--math`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathArg {
    /// The tuned or default schedule's own math.
    Auto,
    F32,
    F16,
    Int8,
}

impl MathArg {
    pub fn family(self) -> Option<MathFamily> {
        match self {
            MathArg::Auto => None,
            MathArg::F32 => Some(MathFamily::F32),
            MathArg::F16 => Some(MathFamily::F16),
            MathArg::Int8 => Some(MathFamily::Int8),
        }
    }
}

/// `--db`, else `$ROCKY_DB` / the XDG default; `None` when no location can be derived.
pub fn db_path(flag: Option<&Path>) -> Option<PathBuf> {
    flag.map(Path::to_path_buf)
        .or_else(rocky_tuning_db::default_db_path)
}

/// A database error as a CLI error: unreadable/damaged databases are bad input (3), locked or
/// unwritable ones are an output problem (5).
pub fn db_error(e: DbError) -> CliError {
    match e {
        DbError::NotWritable { .. } | DbError::Locked { .. } | DbError::Io { .. } => {
            CliError::output(e.to_string())
        }
        e => CliError::input(e.to_string()),
    }
}

pub fn device_error(e: RuntimeError) -> CliError {
    match e {
        RuntimeError::OutOfMemory { .. } => CliError::device(format!(
            "{e}\nUse a smaller --ubatch or a smaller model, or close other GPU programs."
        )),
        e => CliError::device(e.to_string()),
    }
}

pub fn exec_error(e: ExecError) -> CliError {
    match e {
        ExecError::Runtime(r) => device_error(r),
        ExecError::Unsupported(m) => CliError::input(m),
        e => CliError::device(e.to_string()),
    }
}

pub struct GpuSession<'m> {
    executor: Executor<'m>,
    /// Tuned schedules of this device from the database, defaults for the rest.
    schedules: DbSchedules,
    /// `--math`: every GEMM in this family.
    math: Option<MathFamily>,
    /// `--force-shared-memory`.
    force_shared_memory: bool,
    /// Where the ubatch size came from: "flag", "tuned" (graph-level choice) or "default".
    pub ubatch_origin: &'static str,
    /// Why `--profile` gets no per-op GPU times on this device (no timestamps, or host timing
    /// forced): the prefill then runs unprofiled and only host-side figures are shown.
    pub no_gpu_profile: Option<String>,
    /// Where the decode steps' time went, summed over the steps since the session opened.
    pub decode_time: DecodeTime,
}

/// Host-side accounting of decode steps (each one a one-row prefill): what the executor did
/// before the first dispatch (schedules, pipelines, descriptor sets), recording and submitting,
/// waiting for the GPU, and reading the logits back. A decode step is short enough that the
/// host's share decides its speed, so `rocky generate` reports it.
#[derive(Debug, Default, Clone, Copy)]
pub struct DecodeTime {
    pub steps: u32,
    pub wall: Duration,
    pub setup: Duration,
    pub record: Duration,
    pub wait: Duration,
    pub readback: Duration,
    pub dispatches: u64,
}

impl DecodeTime {
    fn add(&mut self, s: &PrefillStats) {
        self.steps += 1;
        self.wall += s.wall;
        self.setup += s.setup;
        self.record += s.stream.host_busy;
        self.wait += s.stream.host_wait;
        self.readback += s.readback;
        self.dispatches += s.stream.dispatches;
    }

    /// Dispatches per step, `None` before the first step.
    pub fn dispatches_per_step(&self) -> Option<f64> {
        (self.steps > 0).then(|| self.dispatches as f64 / self.steps as f64)
    }

    /// Milliseconds per step of each part, `None` before the first step.
    pub fn per_step_ms(&self) -> Option<[(&'static str, f64); 5]> {
        let n = self.steps as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n;
        (self.steps > 0).then(|| {
            [
                ("wall", ms(self.wall)),
                ("setup", ms(self.setup)),
                ("record", ms(self.record)),
                ("wait", ms(self.wait)),
                ("readback", ms(self.readback)),
            ]
        })
    }
}

/// The ubatch when neither a flag nor a tuned graph-level choice gives one.
pub const DEFAULT_UBATCH: usize = 512;

impl<'m> GpuSession<'m> {
    pub fn open(
        args: &GpuArgs,
        file: &'m GgufFile,
        model: &'m Model,
        n_tokens: usize,
        profile: bool,
    ) -> Result<GpuSession<'m>, CliError> {
        if let Some(u) = args.ubatch.filter(|&u| u == 0 || u > 4096) {
            return Err(CliError::usage(format!(
                "--ubatch {u} is out of range: use 1 to 4096"
            )));
        }
        let selector: DeviceSelector = args
            .device
            .parse()
            .map_err(|e| CliError::usage(format!("--device {}: {e}", args.device)))?;
        let ctx = Context::new(&selector).map_err(device_error)?;
        // A missing database means "not tuned yet"; a damaged one is an error, not a
        // silent fallback to defaults.
        let shape = model_shape_key(file, model);
        let schedules = match db_path(args.db.as_deref()) {
            Some(path) => {
                DbSchedules::open_for_model(&path, ctx.info(), &shape).map_err(db_error)?
            }
            None => DbSchedules::empty(),
        };
        // Flags win over the graph-level choice of `rocky tune`, which wins over defaults.
        let graph = schedules.graph_choice_for(args.ubatch);
        let mut budget = CommandBudget::for_device(ctx.info());
        if let Some(g) = graph {
            budget.max_dispatches = g.max_dispatches_per_cb;
        }
        if let Some(mib) = args.cb_budget_mib {
            budget.max_driver_bytes = mib << 20;
        }
        if let Some(n) = args.cb_max_dispatches {
            if n == 0 {
                return Err(CliError::usage("--cb-max-dispatches must be at least 1"));
            }
            budget.max_dispatches = n;
        }
        let (ubatch, ubatch_origin) = match (args.ubatch, graph) {
            (Some(u), _) => (u, "flag"),
            (None, Some(g)) => (g.ubatch as usize, "tuned"),
            (None, None) => (DEFAULT_UBATCH, "default"),
        };
        // Per-op times need timestamps; without them a profile is the host's accounting.
        let no_gpu_profile = if profile {
            host_timing_reason(ctx.info())
        } else {
            None
        };
        let layouts = match args.weight_layout.as_str() {
            "auto" => LayoutChoice::Auto,
            name => LayoutChoice::Force(name.parse().map_err(CliError::usage)?),
        };
        let weights =
            GpuWeights::upload_with_layouts(&ctx, file, model, layouts, &mut upload_bar(&ctx))
                .map_err(exec_error)?;
        // ROCKY_FUSE wins over the tuned fusion, which wins over the default.
        let fuse = FuseOptions::resolve(graph.map(|g| g.fuse_swiglu)).map_err(CliError::usage)?;
        let run_ubatch = ubatch.min(n_tokens.max(1));
        let overlap =
            rocky_runtime::executor::resolve_overlap(run_ubatch, graph.map(|g| g.overlap))
                .map_err(CliError::usage)?;
        let options = ExecutorOptions {
            ubatch: run_ubatch,
            budget,
            timeout: Duration::from_secs(600),
            profile: profile && no_gpu_profile.is_none(),
            fuse,
            overlap,
        };
        let executor =
            Executor::new(&ctx, model, weights, options, n_tokens).map_err(exec_error)?;
        Ok(GpuSession {
            executor,
            schedules,
            math: args.math.family(),
            force_shared_memory: args.force_shared_memory,
            ubatch_origin,
            no_gpu_profile,
            decode_time: DecodeTime::default(),
        })
    }

    /// Builds every pipeline the prefill needs (not counted in its time).
    pub fn prepare(&mut self) -> Result<(), CliError> {
        if let Some(family) = self.math {
            family
                .check_device(self.executor.caps())
                .map_err(CliError::device)?;
        }
        let staged = ForcedSharedMemory {
            inner: &self.schedules,
            on: self.force_shared_memory,
        };
        let source = ForcedMath {
            inner: &staged,
            family: self.math,
        };
        self.executor.prepare(&source).map_err(exec_error)?;
        for notice in &self.executor.notices {
            eprintln!("note: {notice}");
        }
        Ok(())
    }

    /// Tokens per ubatch actually run.
    pub fn ubatch(&self) -> usize {
        self.executor.options().ubatch
    }

    /// The device buffers of the session (see `Executor::memory_plan`).
    pub fn memory_plan(&self) -> Vec<(String, u64)> {
        self.executor.memory_plan()
    }

    /// One line on the weights: bytes on the device, upload time (with the repack), and how
    /// many tensors are in the aligned layout.
    pub fn weights_summary(&self) -> String {
        let w = self.executor.weights();
        format!(
            "weights: {} on the device, uploaded in {:.1} ms ({:.1} ms of it repacking), {} tensor(s) in the aligned layout",
            human_bytes(w.footprint().0),
            w.upload_time.as_secs_f64() * 1e3,
            w.repack_time.as_secs_f64() * 1e3,
            w.repacked().len()
        )
    }

    /// Where the time of the last prefill went.
    pub fn stats(&self) -> Option<&PrefillStats> {
        self.executor.last_stats.as_ref()
    }

    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>, CliError> {
        self.executor
            .prefill(
                ids,
                &ForcedMath {
                    inner: &ForcedSharedMemory {
                        inner: &self.schedules,
                        on: self.force_shared_memory,
                    },
                    family: self.math,
                },
            )
            .map_err(exec_error)
    }
}

/// What `rocky generate` needs beyond the prefill (see `Executor::decode`).
impl GpuSession<'_> {
    /// One token at the next position, with kernels prepared for one row.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, CliError> {
        let logits = self
            .executor
            .decode(
                token,
                &ForcedMath {
                    inner: &ForcedSharedMemory {
                        inner: &self.schedules,
                        on: self.force_shared_memory,
                    },
                    family: self.math,
                },
            )
            .map_err(exec_error)?;
        if let Some(stats) = &self.executor.last_stats {
            self.decode_time.add(stats);
        }
        Ok(logits)
    }

    /// Builds the decode step's one-row pipelines (not counted in its time).
    pub fn prepare_decode(&mut self) -> Result<(), CliError> {
        self.executor
            .prepare_decode(&ForcedMath {
                inner: &ForcedSharedMemory {
                    inner: &self.schedules,
                    on: self.force_shared_memory,
                },
                family: self.math,
            })
            .map_err(exec_error)
    }

    /// Positions in the KV cache.
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

    /// Keeps the first `n_past` cached positions (prefix reuse in `rocky serve`).
    pub fn truncate(&mut self, n_past: usize) {
        self.executor.truncate(n_past)
    }

    /// A device copy of the cached positions (another conversation of `rocky serve` waits in
    /// it); `None` when the cache is empty.
    pub fn snapshot_kv(&self) -> Result<Option<KvSnapshot>, ExecError> {
        self.executor.snapshot_kv()
    }

    /// The first `n` positions of `snapshot` become the cache.
    pub fn restore_kv(&mut self, snapshot: &KvSnapshot, n: usize) -> Result<(), ExecError> {
        self.executor.restore_kv(snapshot, n)
    }
}

impl GpuSession<'_> {
    /// The per-op table of `--profile`: GPU time per (op, kernel), summed over layers.
    pub fn profile_table(&self) -> Vec<ProfileRow> {
        let ex = &self.executor;
        let mut rows: Vec<ProfileRow> = Vec::new();
        let total: f64 = ex.profile.iter().map(|t| t.seconds).sum();
        for t in &ex.profile {
            let op = op_name(&t.label);
            let (workload, origin) = (t.workload, t.origin);
            match rows.iter_mut().find(|r| r.op == op && r.kernel == t.kernel) {
                Some(r) => {
                    r.calls += 1;
                    r.seconds += t.seconds;
                    r.flops += workload.flops() as f64;
                }
                None => rows.push(ProfileRow {
                    op,
                    shape: workload_shape(&workload),
                    kernel: t.kernel.clone(),
                    tuned: origin == rocky_runtime::executor::ScheduleOrigin::Tuned,
                    calls: 1,
                    seconds: t.seconds,
                    flops: workload.flops() as f64,
                    share: 0.0,
                }),
            }
        }
        for r in &mut rows {
            r.share = if total > 0.0 { r.seconds / total } else { 0.0 };
        }
        rows.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        rows
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct ProfileRow {
    pub op: String,
    pub shape: String,
    pub kernel: String,
    pub tuned: bool,
    pub calls: usize,
    pub seconds: f64,
    /// Useful floating-point operations of all calls (for GFLOP/s).
    pub flops: f64,
    pub share: f64,
}

/// "blk.12.attn_q" → "attn_q": ops are summed over layers.
fn op_name(label: &str) -> String {
    match label.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, op)| op).to_string(),
        None => label.to_string(),
    }
}

fn workload_shape(w: &rocky_compiler::Workload) -> String {
    serde_json::to_value(w)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
        .map(|v| {
            v.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default()
        })
        .unwrap_or_default()
        .replace('"', "")
}

pub fn print_profile(rows: &[ProfileRow]) {
    println!(
        "{:<14} {:>6} {:>10} {:>7} {:>9} {:<8} {:<48} shape",
        "op", "calls", "ms", "share", "GFLOP/s", "schedule", "kernel"
    );
    for r in rows {
        let gflops = if r.flops > 0.0 && r.seconds > 0.0 {
            format!("{:.1}", r.flops / r.seconds / 1e9)
        } else {
            "-".into()
        };
        println!(
            "{:<14} {:>6} {:>10.3} {:>6.1}% {:>9} {:<8} {:<48} {}",
            r.op,
            r.calls,
            r.seconds * 1e3,
            r.share * 100.0,
            gflops,
            if r.tuned { "tuned" } else { "default" },
            r.kernel,
            r.shape
        );
    }
    // Attention's share at a glance (its rows are spread over the table by time).
    let total: f64 = rows.iter().map(|r| r.seconds).sum();
    let attention: Vec<&ProfileRow> = rows
        .iter()
        .filter(|r| r.kernel.starts_with("attention_"))
        .collect();
    if total > 0.0 && !attention.is_empty() {
        let (secs, flops) = attention
            .iter()
            .fold((0.0, 0.0), |(s, f), r| (s + r.seconds, f + r.flops));
        println!(
            "attention: {:.3} ms of {:.3} ms ({:.1}%), {:.1} GFLOP/s",
            secs * 1e3,
            total * 1e3,
            100.0 * secs / total,
            if secs > 0.0 { flops / secs / 1e9 } else { 0.0 }
        );
    }
}

/// The time-accounting lines of `--profile`: how busy the GPU was and what the host did.
pub fn print_stats(stats: &PrefillStats) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let s = &stats.stream;
    let wall = ms(stats.wall);
    if let Some(busy) = s.gpu_busy {
        println!(
            "GPU busy {:.1}% of {wall:.2} ms wall: {:.2} ms in kernels, {:.2} ms outside them",
            stats.gpu_busy_share().unwrap_or(0.0) * 100.0,
            ms(busy),
            (wall - ms(busy)).max(0.0),
        );
    }
    println!(
        "host: {:.2} ms setting up, {:.2} ms recording and submitting, {:.2} ms waiting for the GPU, {:.2} ms reading the logits; {} dispatches in {} command buffers, {} ubatch(es)",
        ms(stats.setup),
        ms(s.host_busy),
        ms(s.host_wait),
        ms(stats.readback),
        s.dispatches,
        s.command_buffers,
        stats.ubatches
    );
    if s.split_command_buffers > 0 {
        println!(
            "the driver ran out of memory closing {} command buffer(s): their dispatches were recorded again into smaller ones",
            s.split_command_buffers
        );
    }
}

/// JSON of [`PrefillStats`] for `--json`.
pub fn stats_json(stats: &PrefillStats) -> serde_json::Value {
    let s = &stats.stream;
    serde_json::json!({
        "wall_seconds": stats.wall.as_secs_f64(),
        "gpu_busy_seconds": s.gpu_busy.map(|d| d.as_secs_f64()),
        "gpu_busy_share": stats.gpu_busy_share(),
        "setup_seconds": stats.setup.as_secs_f64(),
        "readback_seconds": stats.readback.as_secs_f64(),
        "host_busy_seconds": s.host_busy.as_secs_f64(),
        "host_wait_seconds": s.host_wait.as_secs_f64(),
        "dispatches": s.dispatches,
        "command_buffers": s.command_buffers,
        "split_command_buffers": s.split_command_buffers,
        "ubatches": stats.ubatches,
    })
}

/// A progress callback for a weight upload to `ctx`'s device (a bar on a terminal).
pub fn upload_bar(ctx: &Context) -> impl FnMut(u64, u64) {
    let mut bar = Bar::new(format!("uploading weights to {}", ctx.info().name), 0);
    move |done, total| {
        bar.set_total(total);
        bar.set(
            done,
            &format!("{} of {}", human_bytes(done), human_bytes(total)),
        );
        if done >= total {
            bar.clear();
        }
    }
}
