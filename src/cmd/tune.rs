//! `rocky tune`: search the schedules of a model's GEMM and attention workloads on this device
//! and store every trial in the tuning database, which `rocky prefill` then uses.

use super::gpu::{db_error, db_path, device_error, exec_error, upload_bar};
use super::kernel::gemm_gpu::summary;
use crate::error::{CliError, CmdResult};
use crate::progress::Bar;
use rocky_compiler::{Schedule, Workload};
use rocky_models::arch;
use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_runtime::{host_timing_reason, CommandBudget, TimingMethod};
use rocky_runtime::{Context, DeviceSelector};
use rocky_tuner::db_schedules::{graph_choice_key, ubatch_choice_key};
use rocky_tuner::graph::{self, GraphOutcome, GraphTuneOptions, PrefillRig};
use rocky_tuner::{
    attention_workloads, model_workloads_with_progress, MeasureOptions, Progress, TuneOptions,
    Tuner, WorkloadReport,
};
use rocky_tuner::{DbSchedules, FaultPlan};
use rocky_tuning_db::GraphChoice;
use rocky_tuning_db::{Trial, TrialStatus, TuningDb};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// Random population, then one-field mutations of the fastest schedules.
    Evolutionary,
    /// A seeded random order of the search space.
    Random,
    /// The whole space in order (small spaces; the yardstick for the others).
    Exhaustive,
}

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky tune model.gguf --trials 64 --time 1800\n  \
rocky tune model.gguf --ubatch 128 --strategy random --seed 3 --db tuning.sled\n  \
rocky tune model.gguf --ubatch 64 --static --db pre-tuned.sled   # rank only, no timing\n\n\
Trials are stored as they finish; running the same command again resumes where it stopped \
(the budget counts trials already in the database)."
)]
pub struct Args {
    /// The GGUF model whose GEMM workloads are tuned.
    pub model: PathBuf,
    /// Tokens per ubatch: tune the shapes `rocky prefill --ubatch` will run (1 to 4096).
    #[arg(long, short = 'u', default_value_t = 512)]
    pub ubatch: usize,
    /// Trials per workload, the default schedule's included.
    #[arg(long, default_value_t = 32)]
    pub trials: usize,
    /// Time budget of the whole run in seconds, shared by the workloads.
    #[arg(long, default_value_t = 300)]
    pub time: u64,
    #[arg(long, value_enum, default_value = "evolutionary")]
    pub strategy: StrategyArg,
    /// Seed of the search (and of the random inputs).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Timed runs per trial (fewer for slow kernels).
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// A candidate whose first timed run is this many times slower than the best so far is
    /// recorded after that run instead of timed `--runs` times; 0 times every one in full.
    #[arg(long, default_value_t = rocky_tuner::DEFAULT_PRUNE_FACTOR)]
    pub prune: f64,
    /// Milliseconds of warm-up before each candidate is timed (it then goes on until the
    /// device's speed has settled). Default: measured on this device before the first
    /// workload, from how long its clocks take to ramp up under load (at least 30 ms).
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// Tuning database (default: $ROCKY_DB, else ~/.local/share/rocky/tuning.sled).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Vulkan device: index or part of its name (see `rocky devices`).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Print the summary as JSON (progress goes to standard error).
    #[arg(long)]
    pub json: bool,
    /// Seconds for graph-level tuning after the kernels (ubatch size and dispatches per
    /// command buffer, by timing whole prefills); 0 skips it.
    #[arg(long, default_value_t = 120)]
    pub graph_time: u64,
    /// Prompt length of the graph-level prefills (default: twice --ubatch).
    #[arg(long)]
    pub graph_tokens: Option<usize>,
    /// KV lengths whose attention is tuned too (comma-separated; bucketed to powers of two,
    /// at least --ubatch; a prefill uses the nearest tuned length). Default: --ubatch and
    /// 4096. `0` tunes no attention.
    #[arg(long, value_delimiter = ',')]
    pub attention_kv: Option<Vec<u32>>,
    /// KV cache type of the keys the attention workloads read: f32, f16 or q8_0 (also
    /// `-ctk`); their records are keyed by it, so tune each type you run.
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_k: rocky_compiler::KvType,
    /// KV cache type of the values (also `-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_v: rocky_compiler::KvType,
    /// Tune only the workloads whose description (`m=512 n=896 k=896 q4_k`,
    /// `attention m=512 kv=4096 …`) contains this text.
    #[arg(long)]
    pub workload: Option<String>,
    /// Make trials fail on purpose, e.g. `spirv_val@2,device_lost@3` (trial numbers of every
    /// workload): checks how the tuner survives failures. The failures are stored like real
    /// ones, so use a scratch --db.
    #[arg(long, hide = true)]
    pub inject_faults: Option<String>,
    /// Rank each GEMM workload's candidates WITHOUT running them, from the driver's compiler
    /// statistics (or, where it reports none, an analytic model of the kernel's IR), and store
    /// the rankings as unmeasured seed rankings: for pre-tuning a board on a device that can
    /// compile but not time (the Mali through Mesa's drm-shim). Nothing is timed or stored as
    /// a winner; a live `rocky tune` on the same GPU tries the top candidates first.
    #[arg(long = "static")]
    pub static_rank: bool,
    /// Candidates ranked per workload with --static (the default schedule always among them;
    /// a spread sample of bigger spaces).
    #[arg(long, default_value_t = 256)]
    pub static_sample: usize,
}

impl From<StrategyArg> for rocky_tuner::Strategy {
    fn from(s: StrategyArg) -> Self {
        match s {
            StrategyArg::Evolutionary => rocky_tuner::Strategy::Evolutionary,
            StrategyArg::Random => rocky_tuner::Strategy::Random,
            StrategyArg::Exhaustive => rocky_tuner::Strategy::Exhaustive,
        }
    }
}

pub fn run(args: Args) -> CmdResult {
    if args.ubatch == 0 || args.ubatch > 4096 {
        return Err(CliError::usage(format!(
            "--ubatch {} is out of range: use 1 to 4096",
            args.ubatch
        )));
    }
    if args.trials == 0 || args.runs == 0 {
        return Err(CliError::usage("--trials and --runs must be at least 1"));
    }
    if !(args.prune == 0.0 || args.prune >= 1.0) {
        return Err(CliError::usage(format!(
            "--prune {}: use 0 (off) or a factor of at least 1",
            args.prune
        )));
    }
    let faults = match &args.inject_faults {
        Some(text) => {
            FaultPlan::parse(text).map_err(|e| CliError::usage(format!("--inject-faults: {e}")))?
        }
        None => FaultPlan::default(),
    };
    let file = super::open_gguf(&args.model)?;
    let model = arch::load(&file).map_err(|e| CliError::input(e.to_string()))?;
    let path = db_path(args.db.as_deref()).ok_or_else(|| {
        CliError::usage("no tuning database location: pass --db PATH or set ROCKY_DB")
    })?;
    let selector: DeviceSelector = args
        .device
        .parse()
        .map_err(|e| CliError::usage(format!("--device {}: {e}", args.device)))?;
    let ctx = Context::new(&selector).map_err(device_error)?;
    let workloads =
        model_workloads_with_progress(&ctx, &file, &model, args.ubatch, &mut upload_bar(&ctx))
            .map_err(exec_error)?;
    let kv_lengths = args
        .attention_kv
        .clone()
        .unwrap_or_else(|| vec![args.ubatch as u32, 4096]);
    let mut workloads = workloads;
    if !kv_lengths.contains(&0) {
        // After the GEMMs: the time budget is shared evenly, so attention gets its share
        // (one workload's worth per KV length).
        workloads.extend(attention_workloads(
            &model,
            args.ubatch,
            &kv_lengths,
            rocky_compiler::KvTypes::new(args.cache_type_k, args.cache_type_v),
        ));
    }
    let workloads: Vec<_> = match &args.workload {
        Some(text) => workloads
            .into_iter()
            .filter(|w| describe_workload(&w.workload).contains(text.as_str()))
            .collect(),
        None => workloads,
    };
    if workloads.is_empty() {
        return Err(CliError::usage(format!(
            "--workload {:?} matches none of the model's GEMM or attention workloads at ubatch {}",
            args.workload.as_deref().unwrap_or(""),
            args.ubatch
        )));
    }
    // Opened only now: a model or device that cannot be tuned leaves no empty database behind.
    let db = TuningDb::open(&path).map_err(db_error)?;
    let options = TuneOptions {
        strategy: args.strategy.into(),
        trials: args.trials,
        time: Duration::from_secs(args.time),
        seed: args.seed,
        measure: MeasureOptions {
            runs: args.runs,
            seed: args.seed,
            faults,
            prune_factor: (args.prune > 0.0).then_some(args.prune),
            warmup: args
                .warmup_ms
                .map_or(MeasureOptions::default().warmup, Duration::from_millis),
            ..MeasureOptions::default()
        },
        calibrate_warmup: args.warmup_ms.is_none(),
    };
    let mut tuner = Tuner::new(ctx.clone(), selector.clone(), &db);
    if args.static_rank {
        if args.static_sample == 0 {
            return Err(CliError::usage("--static-sample must be at least 1"));
        }
        return super::tune_static::run(
            &tuner,
            &workloads,
            args.static_sample,
            args.seed,
            &path,
            args.json,
        );
    }
    let say = |line: String| {
        if args.json {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    };
    say(format!(
        "tuning {} GEMM, {} decode GEMV and {} attention workloads at ubatch {} on {} ({:?}, {} trials each, {} s) into {}",
        workloads.iter().filter(|w| matches!(w.workload, Workload::Gemm(_))).count(),
        workloads.iter().filter(|w| matches!(w.workload, Workload::Gemv(_))).count(),
        workloads.iter().filter(|w| matches!(w.workload, Workload::Attention(_))).count(),
        args.ubatch,
        tuner.device().describe(),
        args.strategy,
        args.trials,
        args.time,
        path.display()
    ));
    if ctx.info().is_cpu {
        say(
            "note: this is a CPU implementation of Vulkan; its timings say nothing about a GPU"
                .into(),
        );
    }
    let method = tuner.timing(&options.measure);
    if method == TimingMethod::Host {
        let reason = host_timing_reason(ctx.info()).unwrap_or_else(|| "forced".into());
        say(format!(
            "timing: host clock around the submit and wait of many runs per command buffer \
             ({reason}): kernel times include a share of the submission latency"
        ));
    }
    let tag = match method {
        TimingMethod::Host => " (host-timed)",
        TimingMethod::Gpu => "",
    };
    let mut bar = Bar::new("tuning", args.trials as u64);
    let reports = tuner
        .tune(&workloads, &options, &mut |p| {
            // On a terminal the trials move a bar; in logs and pipes each is a line.
            if let (
                true,
                Progress::Trial {
                    index,
                    count,
                    number,
                    best,
                    ..
                },
            ) = (bar.is_live(), &p)
            {
                let best = best.map_or("none yet".into(), timing);
                bar.set(
                    *number as u64,
                    &format!(
                        "workload {}/{count}, trial {number}/{}, best {best}",
                        index + 1,
                        args.trials
                    ),
                );
                return;
            }
            bar.clear();
            let mut line = progress_line(&p, args.trials);
            if matches!(&p, Progress::Trial { trial, .. } if trial.is_ok()) {
                line += tag;
            }
            say(line)
        })
        .map_err(|e| match e {
            rocky_tuner::TuneError::Db(e) => db_error(e),
            rocky_tuner::TuneError::Device(e) => device_error(e),
            rocky_tuner::TuneError::Unsupported(m) => CliError::internal(m),
        })?;
    drop(bar);
    let device = tuner.device().clone();
    drop(tuner);
    let (graph, graph_report) = if args.graph_time > 0 {
        let nothing_new = reports.iter().all(|r| r.measured == 0);
        tune_graph_level(
            &args,
            &file,
            &model,
            &selector,
            &db,
            &device,
            nothing_new,
            &say,
        )?
    } else {
        (None, json!(null))
    };
    if args.json {
        let out = json!({
            "graph": graph,
            "graph_step": graph_report,
            "timing": method.as_str(),
            "device": device,
            "db": path,
            "ubatch": args.ubatch,
            "skipped": reports.iter().map(|r| r.skipped).sum::<usize>(),
            "measured": reports.iter().map(|r| r.measured).sum::<usize>(),
            "workloads": reports.iter().map(report_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        print!("{}", summary_table(&reports));
        let unchecked = reports.iter().filter(|r| r.best.is_none()).count();
        if unchecked > 0 {
            println!(
                "{unchecked} workload(s) have no trial that passed its check against the CPU \
                 reference: none is used, `rocky prefill` runs the default schedule there"
            );
        }
        if let Some(g) = &graph {
            println!(
                "graph: ubatch {} with at most {} dispatches per command buffer, gate/up {}, \
                 ubatches {} ({:.1} tok/s); `rocky prefill` uses it when --ubatch is not given",
                g.ubatch,
                g.max_dispatches_per_cb,
                if g.fuse_swiglu { "fused" } else { "separate" },
                if g.overlap {
                    "overlapped"
                } else {
                    "one at a time"
                },
                g.tok_s
            );
        }
    }
    Ok(())
}

/// Times whole prefills around the kernel-tuned ubatch (see `rocky_tuner::graph`) with the
/// schedules just tuned and stores the fastest setting whose results passed their checks for
/// this device and model shape; nothing when the device's results cannot be checked. Returns
/// the stored choice and a JSON account of the step.
#[allow(clippy::too_many_arguments)]
fn tune_graph_level(
    args: &Args,
    file: &GgufFile,
    model: &Model,
    selector: &DeviceSelector,
    db: &TuningDb,
    device: &rocky_tuning_db::DeviceFingerprint,
    kernels_unchanged: bool,
    say: &dyn Fn(String),
) -> Result<(Option<GraphChoice>, serde_json::Value), CliError> {
    let key = graph_choice_key(&graph::model_shape_key(file, model));
    // Skipped only where this ubatch's setting was compared with the default settings: one
    // stored by an older tuner without that comparison is not used, so it is timed again.
    let shape_key = graph::model_shape_key(file, model);
    let at_ubatch = db
        .graph_choice(device, &ubatch_choice_key(&shape_key, args.ubatch as u32))
        .map_err(db_error)?;
    if kernels_unchanged && at_ubatch.is_some_and(|c| c.beat_default().is_some()) {
        if let Some(done) = db.graph_choice(device, &key).map_err(db_error)? {
            say("graph-level choice already stored and no kernel changed: skipped".into());
            return Ok((Some(done), json!({"skipped": "already stored"})));
        }
    }
    let n_tokens = args.graph_tokens.unwrap_or(2 * args.ubatch).clamp(1, 4096);
    // A fresh context: the tuner may have re-created its own after a lost device.
    let ctx = Context::new(selector).map_err(device_error)?;
    let budget = CommandBudget::for_device(ctx.info());
    let schedules = DbSchedules::load(db, device).map_err(db_error)?;
    let faults = match &args.inject_faults {
        Some(text) => FaultPlan::parse(text).unwrap_or_default(),
        None => FaultPlan::default(),
    };
    let mut rig =
        PrefillRig::new(&ctx, file, model, n_tokens, &mut upload_bar(&ctx)).map_err(exec_error)?;
    let stored = db.graph_choice(device, &key).map_err(db_error)?;
    let options = GraphTuneOptions {
        candidates: graph::with_stored_choice(
            graph::default_candidates(args.ubatch, n_tokens, &budget, rig.can_fuse()),
            stored.as_ref(),
            n_tokens,
        ),
        n_tokens,
        runs: 2,
        time: Duration::from_secs(args.graph_time),
        seed: args.seed,
        faults,
    };
    say(format!(
        "graph-level tuning: up to {} settings, prefills of {n_tokens} tokens timed by the host \
         clock, {} s; each checked against the default schedules, which are checked against \
         the CPU reference first",
        options.candidates.len(),
        args.graph_time
    ));
    let mut outcome = graph::tune_graph(&mut rig, &schedules, &options, &budget, &mut |t| {
        let result = match &t.failure {
            None => format!("{:.1} tok/s", t.tok_s()),
            Some(why) => format!("failed ({why})"),
        };
        say(format!(
            "graph: ubatch {:>4}, ≤{:>5} dispatches/command buffer, gate/up {}, {}: {result}",
            t.candidate.ubatch,
            t.candidate.max_dispatches,
            if t.candidate.fuse_swiglu {
                "fused"
            } else {
                "separate"
            },
            if t.candidate.overlap {
                "overlapped"
            } else {
                "one at a time"
            },
        ))
    });
    if let Some(check) = &outcome.device_check {
        if let Ok(a) = &check.result {
            say(format!(
                "graph: the default prefill agrees with the CPU reference on {} tokens \
                 (largest |Δlogit| {:.2e}, allowed {:.2e})",
                check.n_tokens, a.max_abs_diff, a.allowed
            ));
        }
    }
    let report = graph_report(&outcome);
    if let Some(e) = outcome.error.take() {
        // A bigger ubatch that does not fit is an answer, not a failure of the run.
        say(format!(
            "graph: stopped at a setting the device could not run: {}",
            first_line(&exec_error(e).message)
        ));
    }
    if let Some(why) = outcome.unverifiable() {
        say(match outcome.device_check {
            Some(_) => format!(
                "graph: results do not match the CPU reference: this device's results cannot \
                 be checked, nothing stored ({})",
                first_line(why)
            ),
            None => "graph: the default prefill could not run: nothing stored".into(),
        });
        return Ok((None, report));
    }
    let Some(choice) = graph::best_choice(&outcome.trials, &budget) else {
        if !outcome.trials.is_empty() {
            say("graph: no setting's results passed their check: nothing stored".into());
        }
        return Ok((None, report));
    };
    db.set_graph_choice(device, &key, &choice)
        .map_err(db_error)?;
    // And the fastest at each ubatch where the default settings were timed beside it, for runs
    // at a ubatch given by flag.
    for (ubatch, best) in graph::best_per_ubatch(&outcome.trials, &budget) {
        db.set_graph_choice(device, &ubatch_choice_key(&shape_key, ubatch), &best)
            .map_err(db_error)?;
    }
    Ok((Some(choice), report))
}

/// The graph step for `--json`: the device check, every candidate and why nothing was stored.
fn graph_report(outcome: &GraphOutcome) -> serde_json::Value {
    let check = outcome.device_check.as_ref().map(|c| {
        json!({
            "n_tokens": c.n_tokens,
            "ubatch": c.ubatch,
            "passed": c.result.is_ok(),
            "error_ratio": c.result.as_ref().ok().map(|a| a.error_ratio()),
            "failure": c.result.as_ref().err(),
        })
    });
    let trials: Vec<_> = outcome
        .trials
        .iter()
        .map(|t| {
            json!({
                "ubatch": t.candidate.ubatch,
                "max_dispatches": t.candidate.max_dispatches,
                "fuse_swiglu": t.candidate.fuse_swiglu,
                "overlap": t.candidate.overlap,
                "seconds": t.seconds,
                "tok_s": t.is_ok().then(|| t.tok_s()),
                "passed": t.is_ok(),
                "failure": t.failure,
                "error_ratio": t.error_ratio.is_finite().then_some(t.error_ratio),
            })
        })
        .collect();
    json!({
        "timing": "host",
        "cpu_check": check,
        "trials": trials,
        "unverifiable": outcome.unverifiable(),
        "error": outcome.error.as_ref().map(|e| e.to_string()),
    })
}

/// `m=16 n=896 k=896 q4_k +bias`, `m=16 n=4864 k=896 q4_k +swiglu` (gate and up fused),
/// `gemv m=1 n=896 k=896 q4_k`, `gemv+norm m=1 …` (the decode step's GEMVs with the RMSNorm
/// folded in: a prefix of its own, so `--workload "gemv m=1"` does not select them too).
pub fn describe_workload(w: &Workload) -> String {
    use rocky_compiler::templates::gemm::Epilogue;
    match w {
        Workload::Gemm(g) | Workload::Gemv(g) => format!(
            "{}m={} n={} k={} {}{}{}",
            match (w, g.rms_norm_eps_bits) {
                (Workload::Gemv(_), Some(_)) => "gemv+norm ",
                (Workload::Gemv(_), None) => "gemv ",
                _ => "",
            },
            g.m,
            g.n,
            g.k,
            g.weight.ggml_name().to_lowercase(),
            if g.bias { " +bias" } else { "" },
            match g.epilogue {
                Epilogue::None => "",
                Epilogue::SwiGlu => " +swiglu",
                Epilogue::Residual => " +res",
                Epilogue::RopeKv(_) => " +rope+kv",
            }
        ),
        Workload::Attention(a) => format!(
            "attention m={} kv={} h={}/{} d={}{}",
            a.m,
            a.max_kv,
            a.n_heads,
            a.n_kv_heads,
            a.head_dim,
            if a.is_windowed() {
                format!(" window={}", a.window)
            } else {
                String::new()
            }
        ),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

pub fn describe_schedule(s: &Schedule) -> String {
    match s {
        Schedule::Gemm(g) => summary(g),
        Schedule::Attention(a) => rocky_tuner::attention_gpu::summary(a),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn timing(t: &Trial) -> String {
    format!("{:.4} ms {:.2} GFLOP/s", t.median_s * 1e3, t.gflops)
}

fn progress_line(p: &Progress, budget: usize) -> String {
    match p {
        Progress::WarmupCalibrated(c) => format!(
            "warm-up: {:.0} ms per candidate (under load this device reached its sustained speed \
             after {:.0} ms; a run of the calibration kernel then took {:.4} ms)",
            c.warmup.as_secs_f64() * 1e3,
            c.ramp.as_secs_f64() * 1e3,
            c.sustained.as_secs_f64() * 1e3
        ),
        Progress::WorkloadStart {
            index,
            count,
            workload,
            space,
            already_recorded,
        } => format!(
            "[{}/{count}] {}: space {space} schedules, {already_recorded} trials already recorded{}",
            index + 1,
            describe_workload(workload),
            if *already_recorded >= budget {
                " (budget reached: skipped)"
            } else if *already_recorded > 0 {
                " (resuming)"
            } else {
                ""
            }
        ),
        Progress::Trial {
            index,
            count,
            number,
            trial,
            best,
        } => {
            let result = match &trial.status {
                TrialStatus::Ok => timing(trial),
                TrialStatus::Failed { kind, message } => {
                    format!("failed ({}: {})", kind.as_str(), first_line(message))
                }
            };
            format!(
                "[{}/{count}] trial {number}/{budget}: {} → {result}; best {}",
                index + 1,
                describe_schedule(&trial.schedule),
                best.map_or("none yet".into(), timing)
            )
        }
        Progress::WorkloadDone {
            index,
            count,
            report,
        } => format!(
            "[{}/{count}] done: {} new trials ({} failed), {} skipped (already recorded); stopped by {}",
            index + 1,
            report.measured,
            report.failed,
            report.skipped,
            report.stop.as_str()
        ),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn ok_ms(t: &Option<Trial>) -> Option<f64> {
    t.as_ref().filter(|t| t.is_ok()).map(|t| t.median_s * 1e3)
}

fn report_json(r: &WorkloadReport) -> serde_json::Value {
    let (default_ms, best_ms) = (ok_ms(&r.default), ok_ms(&r.best));
    json!({
        "workload": r.workload,
        "labels": r.labels,
        "space": r.space,
        "default_ms": default_ms,
        "best_ms": best_ms,
        "speedup": default_ms.zip(best_ms).map(|(d, b)| d / b),
        "best_schedule": r.best.as_ref().map(|t| t.schedule),
        "skipped": r.skipped,
        "measured": r.measured,
        "failed": r.failed,
        "stop": r.stop.as_str(),
        "timing": r.timing.as_str(),
    })
}

fn summary_table(reports: &[WorkloadReport]) -> String {
    let mut out = format!(
        "\n{:<32} {:>5} {:>11} {:>11} {:>8}  best schedule\n",
        "workload", "uses", "default ms", "best ms", "speed-up"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
    for r in reports {
        let (d, b) = (ok_ms(&r.default), ok_ms(&r.best));
        out += &format!(
            "{:<32} {:>5} {:>11} {:>11} {:>8}  {}\n",
            describe_workload(&r.workload),
            r.labels.len(),
            ms(d),
            ms(b),
            d.zip(b)
                .map_or("-".into(), |(d, b)| format!("{:.2}x", d / b)),
            r.best
                .as_ref()
                .map_or("-".into(), |t| describe_schedule(&t.schedule))
        );
    }
    out
}
