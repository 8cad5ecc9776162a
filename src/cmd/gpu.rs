//! The flags every GPU command shares, turned into the engine's options, and the engine's
//! errors and figures as the CLI shows them. The session itself is rocky-engine's.

use crate::error::CliError;
use crate::progress::Bar;
use crate::units::human_bytes;
use rocky_compiler::{KvType, KvTypes};
use rocky_engine::{
    Database, EngineOptions, LayoutChoice, LoadError, Model, ProfileRow, Session, SessionError,
};
use rocky_models::reference::ReferenceOptions;
use rocky_runtime::executor::{ExecError, MathFamily, PrefillStats};
use rocky_runtime::{Context, DeviceSelector, RuntimeError};
use rocky_tuning_db::DbError;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Clone, Debug)]
pub struct GpuArgs {
    /// Vulkan device: index or part of its name (see `rocky devices`), or `auto` for the best
    /// one. Default: the best GPU; where every Vulkan device is a CPU implementation (lavapipe),
    /// generate, serve and prefill run on rocky's own CPU path instead, which is several times
    /// faster there, unless a device (`auto` included) or a GPU-only option (--ubatch, --db,
    /// --math, --profile, ...) is named.
    #[arg(long)]
    pub device: Option<String>,
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
    /// Element type of the KV cache's keys: f32, f16 or q8_0 (also `-ctk`, as llama.cpp
    /// spells it). q8_0 takes about half of f16's memory, f32 twice it.
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = parse_kv_type)]
    pub cache_type_k: KvType,
    /// Element type of the KV cache's values: f32, f16 or q8_0 (also `-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = parse_kv_type)]
    pub cache_type_v: KvType,
    /// Rotate around a q8_0 cache as llama.cpp does by default (its PR 21038): K (with Q) and
    /// V (with the attention output) by an orthonormal Walsh-Hadamard matrix, spreading
    /// outliers over the q8_0 blocks. Only a q8_0 K or V with head_dim a multiple of 64
    /// rotates; f16 and f32 caches are unchanged.
    #[arg(long)]
    pub kv_rotation: bool,
}

/// `--cache-type-k` / `--cache-type-v` (llama.cpp's names; others refused by name).
pub fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::parse(s)
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
    database(flag).path()
}

/// The engine's database of `--db`: that one, else the default location.
fn database(flag: Option<&Path>) -> Database {
    match flag {
        Some(path) => Database::At(path.to_path_buf()),
        None => Database::Default,
    }
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

impl GpuArgs {
    /// Whether an option only the GPU path uses was given (the KV cache types are both
    /// paths'): asking for one asks for the GPU.
    pub fn names_gpu_options(&self) -> bool {
        self.ubatch.is_some()
            || self.cb_budget_mib.is_some()
            || self.cb_max_dispatches.is_some()
            || self.math != MathArg::Auto
            || self.force_shared_memory
            || self.db.is_some()
            || self.weight_layout != "auto"
    }

    /// The KV cache types of `--cache-type-k/-v`.
    pub fn kv(&self) -> KvTypes {
        KvTypes::new(self.cache_type_k, self.cache_type_v)
    }

    /// What the CPU path computes with these cache flags: the types and the rotation.
    pub fn reference_options(&self) -> ReferenceOptions {
        ReferenceOptions {
            kv_rotation: self.kv_rotation,
            ..ReferenceOptions::with_kv(self.kv())
        }
    }

    /// The engine's options of these flags (`profile`: `--profile`).
    /// (The engine checks the ranges of the numbers; [`session_error`] words its refusals.)
    pub fn options(&self, profile: bool) -> Result<EngineOptions, CliError> {
        let named = self.device.as_deref().unwrap_or("auto");
        let device: DeviceSelector = named
            .parse()
            .map_err(|e| CliError::usage(format!("--device {named}: {e}")))?;
        let weight_layout = match self.weight_layout.as_str() {
            "auto" => LayoutChoice::Auto,
            name => LayoutChoice::Force(name.parse().map_err(CliError::usage)?),
        };
        Ok(EngineOptions {
            device,
            database: database(self.db.as_deref()),
            ubatch: self.ubatch,
            cb_budget_mib: self.cb_budget_mib,
            cb_max_dispatches: self.cb_max_dispatches,
            math: self.math.family(),
            force_shared_memory: self.force_shared_memory,
            weight_layout,
            profile,
            kv: self.kv(),
            kv_rotation: self.kv_rotation,
        })
    }
}

/// Why generate, serve and prefill run on rocky's CPU path though neither `--cpu` nor
/// `--backend cpu` asked for it: no `--device` was given, nor an option only the GPU path has
/// (`--ubatch`, `--db`, `--math`, ...; `gpu_only`: the command's own, such as `--profile`),
/// and the device rocky would pick is a CPU implementation of Vulkan (lavapipe, SwiftShader). The best device is a CPU one only where every usable device is, and
/// there rocky's CPU path is 5-9x faster than its kernels on the CPU driver; llama.cpp likewise
/// skips CPU Vulkan devices unless they are named. `None`: the GPU path, as before (where the
/// devices cannot be listed, the session's own error says why).
pub fn cpu_instead(args: &GpuArgs, gpu_only: bool) -> Option<String> {
    if args.device.is_some() || args.names_gpu_options() || gpu_only {
        return None;
    }
    let devices = rocky_runtime::probe_devices().ok()?;
    let best = rocky_runtime::select_device(&devices, &DeviceSelector::Best).ok()?;
    let d = &devices[best];
    d.is_cpu.then(|| {
        let only = if devices.len() == 1 {
            format!("the only Vulkan device, {}, is", d.name)
        } else {
            format!("every Vulkan device ({} of them) is", devices.len())
        };
        format!(
            "{only} a CPU implementation; --device {} to use it",
            d.index
        )
    })
}

/// The line on standard error saying which path runs, where [`cpu_instead`] chose the CPU.
pub fn note_cpu_path(why: &str) {
    eprintln!("running on rocky's CPU path: {why}");
}

/// Opens `model` on the device of `args` with `n_ctx` KV positions, the upload shown as a
/// bar on a terminal.
pub fn open_session<'m>(
    args: &GpuArgs,
    model: &'m Model,
    n_ctx: usize,
    profile: bool,
) -> Result<Session<'m>, CliError> {
    let options = args.options(profile)?;
    let mut bar: Option<Bar> = None;
    Session::open_with_progress(model, &options, n_ctx, &mut |p| {
        let bar =
            bar.get_or_insert_with(|| Bar::new(format!("uploading weights to {}", p.device), 0));
        show_upload(bar, p.done, p.total);
    })
    .map_err(session_error)
}

/// Builds the session's prefill pipelines (not counted in its time) and prints the notices of
/// schedules it replaced.
pub fn prepare(session: &mut Session) -> Result<(), CliError> {
    session.prepare().map_err(session_error)?;
    for notice in session.notices() {
        eprintln!("note: {notice}");
    }
    if let Some(note) = session.graph_note() {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// An engine error as the CLI's: flags' mistakes are usage errors (2), the database's as
/// [`db_error`], the device's as [`device_error`].
pub fn session_error(e: SessionError) -> CliError {
    match e {
        SessionError::UbatchOutOfRange { ubatch } => {
            CliError::usage(format!("--ubatch {ubatch} is out of range: use 1 to 4096"))
        }
        SessionError::NoDispatchesPerCommandBuffer => {
            CliError::usage("--cb-max-dispatches must be at least 1")
        }
        SessionError::MathUnsupported { reason, .. } => CliError::device(reason),
        SessionError::Environment { detail } => CliError::usage(detail),
        SessionError::Database(e) => db_error(e),
        SessionError::Device(e) => device_error(e),
        SessionError::Exec(e) => exec_error(e),
    }
}

/// A model that cannot be opened (or lacks its tokenizer) is bad input (3).
pub fn load_error(e: LoadError) -> CliError {
    CliError::input(e.to_string())
}

/// One line on the weights: bytes on the device, upload time (with the repack), and how
/// many tensors are in the aligned layout.
pub fn weights_summary(session: &Session) -> String {
    let w = session.weights();
    format!(
        "weights: {} on the device, uploaded in {:.1} ms ({:.1} ms of it repacking), {} tensor(s) in the aligned layout",
        human_bytes(w.footprint().0),
        w.upload_time.as_secs_f64() * 1e3,
        w.repack_time.as_secs_f64() * 1e3,
        w.repacked().len()
    )
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
    move |done, total| show_upload(&mut bar, done, total)
}

fn show_upload(bar: &mut Bar, done: u64, total: u64) {
    bar.set_total(total);
    bar.set(
        done,
        &format!("{} of {}", human_bytes(done), human_bytes(total)),
    );
    if done >= total {
        bar.clear();
    }
}
