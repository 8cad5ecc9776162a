//! `rocky bench`: llama-bench-style prefill throughput of a model with tuned schedules, with
//! the compiler's defaults and on the CPU reference, measured side by side in one run.
//!
//! Tuned and default prefills alternate repetition by repetition on one executor (same weights,
//! same buffers), so drift in a shared machine's speed lands on both rows alike and their ratio
//! means something.
//!
//! Every figure is host wall clock. Before any GPU row is timed, each GPU backend's prefill of a
//! short prompt is checked against the CPU reference: a device whose results cannot be checked
//! (the mali-shim executes nothing and is "fast") gets no figures at all. Rows of a device
//! without GPU timestamps are marked, as nothing on the GPU side can cross-check them.

mod table;

use super::gpu::{db_error, db_path, device_error, exec_error, upload_bar};
use crate::error::{CliError, CmdResult};
use rocky_compiler::Workload;
use rocky_compiler::{KvType, KvTypes};
use rocky_models::arch::{self, Model};
use rocky_models::fuse::FuseOptions;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{self, ReferenceOptions};
use rocky_runtime::executor::{
    resolve_overlap, Executor, ForcedMath, ScheduleOrigin, ScheduleSource,
};
use rocky_runtime::{CommandBudget, Context, DeviceSelector};
use rocky_tuner::graph::{
    check_prompt, model_shape_key, prefill_seconds, random_prompt, verify_device, CpuReference,
    PrefillRig,
};
use rocky_tuner::logits_check::CHECK_TOKENS;
use rocky_tuner::DbSchedules;
use std::path::PathBuf;
use std::time::Instant;
pub use table::BenchRow;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// rocky's kernels with the tuning database's schedules (defaults where none).
    Tuned,
    /// rocky's kernels with the compiler's default schedules only.
    Default,
    /// The CPU reference (f32, all cores).
    Cpu,
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  rocky bench model.gguf\n  \
rocky bench model.gguf -p 512,4096 -ub 256,512 -r 5 --md\n  \
rocky bench model.gguf --backends tuned,default --json\n\n\
Rows: `Vulkan tuned` uses the tuning database (run `rocky tune` first), `Vulkan default` the \
compiler's default schedules, `CPU reference` the f32 CPU forward pass. Prompts are random \
token ids; t/s is the mean over repetitions ± the sample standard deviation, each after an \
untimed warm-up.")]
pub struct Args {
    /// The GGUF model.
    pub model: PathBuf,
    /// Prompt lengths to time (comma-separated).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub prompts: Vec<usize>,
    /// Tokens per ubatch (comma-separated; also `-ub` as in llama-bench).
    #[arg(
        short = 'u',
        long = "ubatch",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub ubatches: Vec<usize>,
    /// Timed repetitions per row.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub repetitions: u32,
    /// Which rows to measure (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tuned,default,cpu"
    )]
    pub backends: Vec<BenchBackend>,
    /// Vulkan device: index or part of its name (see `rocky devices`).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tuning database (default: $ROCKY_DB, else ~/.local/share/rocky/tuning.sled).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Force one math family on every GEMM of the GPU rows (f32, f16, int8); `auto` keeps
    /// each schedule's own.
    #[arg(long, value_enum, default_value = "auto")]
    pub math: super::gpu::MathArg,
    /// Element type of the KV cache's keys, every row: f32, f16 or q8_0 (also `-ctk`, as
    /// llama-bench spells it; the table gains its type_k and type_v columns when not f16).
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_k: KvType,
    /// Element type of the KV cache's values (also `-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_v: KvType,
    /// Seed of the random prompt.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON rows (with every repetition's figure).
    #[arg(long, conflicts_with = "md")]
    pub json: bool,
    /// Print llama-bench's markdown table.
    #[arg(long)]
    pub md: bool,
}

impl Args {
    /// The KV cache types of every row.
    fn kv(&self) -> KvTypes {
        KvTypes::new(self.cache_type_k, self.cache_type_v)
    }
}

pub fn run(args: Args) -> CmdResult {
    check_args(&args)?;
    let file = super::open_gguf(&args.model)?;
    let model = arch::load(&file).map_err(|e| CliError::input(e.to_string()))?;
    let identity = ModelIdentity::of(&file, &model);
    let max_prompt = *args.prompts.iter().max().unwrap_or(&1);
    let mut rows = Vec::new();
    let gpu_backends: Vec<BenchBackend> = args
        .backends
        .iter()
        .copied()
        .filter(|b| *b != BenchBackend::Cpu)
        .collect();
    if !gpu_backends.is_empty() {
        rows.extend(bench_gpu(
            &args,
            &file,
            &model,
            &identity,
            &gpu_backends,
            max_prompt,
        )?);
    }
    if args.backends.contains(&BenchBackend::Cpu) {
        for &n in &args.prompts {
            let ids = random_prompt(model.config.n_vocab, n, args.seed);
            eprintln!(
                "bench: CPU reference pp{n}: warm-up + {} runs",
                args.repetitions
            );
            let mut samples = Vec::new();
            for rep in 0..=args.repetitions {
                let start = Instant::now();
                reference::forward(&file, &model, &ids, ReferenceOptions::with_kv(args.kv()))
                    .map_err(|e| CliError::input(e.to_string()))?;
                if rep > 0 {
                    samples.push(start.elapsed().as_secs_f64());
                }
            }
            rows.push(identity.row("CPU reference", "CPU", None, n, None, samples, None, None));
        }
    }
    for r in &mut rows {
        r.type_k = args.cache_type_k.name().into();
        r.type_v = args.cache_type_v.name().into();
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&table::json(&rows)).unwrap_or_default()
        );
    } else if args.md {
        print!("{}", table::markdown(&rows));
    } else {
        print!("{}", table::text(&rows));
    }
    Ok(())
}

fn check_args(args: &Args) -> CmdResult {
    if let Some(&u) = args.ubatches.iter().find(|&&u| u == 0 || u > 4096) {
        return Err(CliError::usage(format!(
            "-ub {u} is out of range: use 1 to 4096"
        )));
    }
    if args.prompts.contains(&0) {
        return Err(CliError::usage("-p: prompt lengths must be at least 1"));
    }
    if args.repetitions == 0 {
        return Err(CliError::usage("-r must be at least 1"));
    }
    Ok(())
}

/// The GPU rows: per ubatch one executor; per prompt length the backends alternate.
fn bench_gpu(
    args: &Args,
    file: &GgufFile,
    model: &Model,
    identity: &ModelIdentity,
    backends: &[BenchBackend],
    max_prompt: usize,
) -> Result<Vec<BenchRow>, CliError> {
    let selector: DeviceSelector = args
        .device
        .parse()
        .map_err(|e| CliError::usage(format!("--device {}: {e}", args.device)))?;
    let ctx = Context::new(&selector).map_err(device_error)?;
    let device = ctx.info().name.clone();
    let tuned = match db_path(args.db.as_deref()) {
        Some(path) => DbSchedules::open_for_model(&path, ctx.info(), &model_shape_key(file, model))
            .map_err(db_error)?,
        None => DbSchedules::empty(),
    };
    if tuned.is_empty() && backends.contains(&BenchBackend::Tuned) {
        eprintln!(
            "bench: no tuned schedules for {device} in the tuning database: the tuned row \
             runs defaults (run `rocky tune {}` first)",
            args.model.display()
        );
    }
    let empty = DbSchedules::empty();
    // The tuned row fuses as `rocky tune` chose for the ubatch, the default row as the
    // defaults do (ROCKY_FUSE overrides both); backends with the same fusions share an
    // executor.
    // Per backend at a ubatch: the fusions and the overlap. The tuned row runs as `rocky tune`
    // chose for the ubatch, the default row as the defaults do (ROCKY_FUSE / ROCKY_OVERLAP
    // override both); backends with the same settings share an executor.
    let settings_at = |ubatch: usize| -> Result<Vec<(FuseOptions, bool)>, CliError> {
        let tuned_choice = tuned.graph_choice_for(Some(ubatch));
        if let Some(note) = tuned.graph_choice_note(Some(ubatch)) {
            if backends.contains(&BenchBackend::Tuned) {
                eprintln!("bench: {note}");
            }
        }
        backends
            .iter()
            .map(|b| {
                let choice = match b {
                    BenchBackend::Tuned => tuned_choice,
                    _ => None,
                };
                let fuse = FuseOptions::resolve(choice.map(|g| g.fuse_swiglu))?;
                let overlap = resolve_overlap(ubatch, choice.map(|g| g.overlap))?;
                Ok((fuse, overlap))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(CliError::usage)
    };
    let family = args.math.family();
    if let Some(f) = family {
        let caps = rocky_runtime::device_caps(ctx.info(), ctx.caps());
        f.check_device(&caps).map_err(CliError::device)?;
    }
    let tuned = ForcedMath {
        inner: &tuned,
        family,
    };
    let defaults = ForcedMath {
        inner: &empty,
        family,
    };
    let budget = CommandBudget::for_device(ctx.info());
    eprintln!("bench: uploading {} to {device}", args.model.display());
    let mut rig = PrefillRig::new(&ctx, file, model, max_prompt, &mut upload_bar(&ctx))
        .map_err(exec_error)?
        .with_kv(args.kv());
    let sources: Vec<&dyn ScheduleSource> = backends
        .iter()
        .map(|b| match b {
            BenchBackend::Tuned => &tuned as &dyn ScheduleSource,
            _ => &defaults,
        })
        .collect();
    let first_ubatch = args.ubatches.first().copied().unwrap_or(1);
    let settings = settings_at(first_ubatch.min(max_prompt))?;
    // Each GPU backend with the schedules and graph settings it runs with.
    let runs: Vec<GpuRun> = backends
        .iter()
        .zip(&sources)
        .zip(&settings)
        .map(|((&backend, &source), &(fuse, overlap))| GpuRun {
            backend,
            source,
            fuse,
            overlap,
        })
        .collect();
    check_results(args, &mut rig, file, model, &runs, budget)?;
    let timestamps = ctx.info().has_timestamps();
    if !timestamps {
        eprintln!(
            "bench: {device} has no GPU timestamps: its rows are host wall clock only (marked *)"
        );
    }
    let mut rows = Vec::new();
    for &ubatch in &args.ubatches {
        let run_ubatch = ubatch.min(max_prompt);
        let settings = settings_at(run_ubatch)?;
        let mut distinct: Vec<(FuseOptions, bool)> = Vec::new();
        for s in &settings {
            if !distinct.contains(s) {
                distinct.push(*s);
            }
        }
        let executor_of: Vec<usize> = settings
            .iter()
            .map(|s| distinct.iter().position(|d| d == s).unwrap_or(0))
            .collect();
        let mut executors = distinct
            .iter()
            .map(|&(fuse, overlap)| rig.executor(run_ubatch, budget, fuse, overlap))
            .collect::<Result<Vec<_>, _>>()
            .map_err(exec_error)?;
        for &n in &args.prompts {
            let ids = random_prompt(model.config.n_vocab, n, args.seed);
            eprintln!(
                "bench: ubatch {ubatch} pp{n}: {} × (warm-up + {} runs)",
                backends.len(),
                args.repetitions
            );
            let mut samples = vec![Vec::new(); backends.len()];
            let mut tuned_counts = vec![(0, 0); backends.len()];
            // Round 0 is the warm-up (pipelines built, clocks up); then round-robin.
            for rep in 0..=args.repetitions {
                for (i, source) in sources.iter().enumerate() {
                    let executor = &mut executors[executor_of[i]];
                    let seconds = prefill_seconds(executor, &ids, *source).map_err(exec_error)?;
                    if rep > 0 {
                        samples[i].push(seconds);
                    } else {
                        tuned_counts[i] = tuned_gemms(executor);
                    }
                }
            }
            for (i, b) in backends.iter().enumerate() {
                let name = match b {
                    BenchBackend::Tuned => "Vulkan tuned",
                    _ => "Vulkan default",
                };
                let executor = &executors[executor_of[i]];
                rows.push(identity.row(
                    name,
                    &device,
                    Some(executor.options().ubatch),
                    n,
                    Some(tuned_counts[i]),
                    std::mem::take(&mut samples[i]),
                    Some(executor.device_bytes()),
                    Some(timestamps),
                ));
            }
        }
    }
    Ok(rows)
}

/// One GPU backend of a bench as `check_results` runs it.
struct GpuRun<'a> {
    backend: BenchBackend,
    source: &'a dyn ScheduleSource,
    fuse: FuseOptions,
    overlap: bool,
}

/// Checks every GPU backend's prefill of a short prompt against the CPU reference before
/// anything is timed: figures of a device that computes garbage (or nothing) are not results.
fn check_results(
    args: &Args,
    rig: &mut PrefillRig,
    file: &GgufFile,
    model: &Model,
    runs: &[GpuRun],
    budget: CommandBudget,
) -> Result<(), CliError> {
    let ids = check_prompt(model, CHECK_TOKENS.min(rig.n_ctx()), args.seed);
    eprintln!(
        "bench: checking the GPU's results against the CPU reference on {} tokens",
        ids.len()
    );
    let cpu = CpuReference::new(file, model, &ids);
    let ubatch = args.ubatches.first().copied().unwrap_or(1).min(ids.len());
    let mut checks = Vec::new();
    for run in runs {
        let mut executor = rig
            .executor(ubatch, budget, run.fuse, run.overlap)
            .map_err(exec_error)?;
        checks.push((run.backend, verify_device(&mut executor, run.source, &cpu)));
    }
    for (b, check) in checks {
        let check = check.map_err(exec_error)?;
        match check.result {
            Err(why) => {
                return Err(CliError::device(format!(
                    "the {b:?} backend's results do not match the CPU reference ({why}): this \
                     device's results cannot be checked, so no figures are reported"
                )))
            }
            Ok(a) => eprintln!(
                "bench: the {b:?} backend agrees with the CPU reference: |Δlogit| {:.4}, \
                 allowed {:.4} ({:.2} of it)",
                a.max_abs_diff,
                a.allowed,
                a.error_ratio()
            ),
        }
    }
    Ok(())
}

/// (GEMM nodes with a tuned schedule, all GEMM nodes) of the executor's last prepare.
fn tuned_gemms(executor: &Executor) -> (usize, usize) {
    let gemms = executor
        .used()
        .iter()
        .filter(|(_, w, _, _)| matches!(w, Workload::Gemm(_)));
    gemms.fold((0, 0), |(t, n), (_, _, _, origin)| {
        (t + usize::from(*origin == ScheduleOrigin::Tuned), n + 1)
    })
}

/// What the model columns of every row say.
struct ModelIdentity {
    name: String,
    size_bytes: u64,
    n_params: u64,
}

impl ModelIdentity {
    fn of(file: &GgufFile, model: &Model) -> ModelIdentity {
        let size_bytes = file.tensors.iter().map(|t| t.size).sum();
        let n_params = model.config.n_params();
        // The weight type holding the most bytes names the quantization (Q4_K for a
        // Q4_K_M file, whose Q6_K and Q8_0 tensors are the minority).
        let mut bytes_per_type = std::collections::BTreeMap::new();
        for t in file.tensors.iter().filter(|t| t.dims.len() >= 2) {
            *bytes_per_type.entry(t.ggml_type.name()).or_insert(0u64) += t.size;
        }
        let main_type = bytes_per_type
            .into_iter()
            .max_by_key(|&(_, b)| b)
            .map_or("?", |(t, _)| t);
        let params = if n_params >= 1_000_000_000 {
            format!("{:.1}B", n_params as f64 / 1e9)
        } else {
            format!("{}M", (n_params as f64 / 1e6).round())
        };
        ModelIdentity {
            name: format!("{} {params} {main_type}", model.config.architecture),
            size_bytes,
            n_params,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        backend: &str,
        device: &str,
        n_ubatch: Option<usize>,
        n_prompt: usize,
        tuned_gemms: Option<(usize, usize)>,
        samples_s: Vec<f64>,
        device_bytes: Option<u64>,
        device_timestamps: Option<bool>,
    ) -> BenchRow {
        BenchRow {
            model: self.name.clone(),
            model_size_bytes: self.size_bytes,
            n_params: self.n_params,
            backend: backend.into(),
            device: device.into(),
            n_ubatch,
            n_prompt,
            tuned_gemms,
            samples_s,
            device_bytes,
            device_timestamps,
            // Every row of a run has the run's cache types (set by `run`).
            type_k: String::new(),
            type_v: String::new(),
        }
    }
}
