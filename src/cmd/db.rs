//! `rocky db`: look into the tuning database and share it (JSON-lines export and import).

use super::gpu::{db_error, db_path};
use super::tune::{describe_schedule, describe_workload};
use crate::error::{CliError, CmdResult};
use rocky_tuning_db::{
    export_jsonl, import_jsonl, DeviceFingerprint, ExportFilter, RecordKey, TrialStatus, TuningDb,
};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky db list\n  rocky db export -o mali.jsonl --device G610\n  \
rocky db import mali.jsonl --db ~/tuning.sled\n  \
rocky db replay --strategy evolutionary --trials 64 --seeds 20   # after an exhaustive tune"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: DbCommand,
    /// Tuning database (default: $ROCKY_DB, else ~/.local/share/rocky/tuning.sled).
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
pub enum DbCommand {
    /// Every (device, compiler version, workload) with its best schedule and time.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Every trial of the records whose device or workload contains TEXT (all if omitted).
    Show {
        text: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Counts of devices, records, trials and failures.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Write the best record per key as JSON lines.
    Export {
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Only devices whose description contains this text (case-insensitive).
        #[arg(long)]
        device: Option<String>,
        /// Also write every trial, failures included.
        #[arg(long)]
        all_trials: bool,
    },
    /// Merge JSON lines from `rocky db export` (all or nothing; the faster record wins).
    Import { file: PathBuf },
    /// Replay a budgeted search on the trials of an exhaustive run (`rocky tune --strategy
    /// exhaustive`) and report how close it gets to the exhaustive best, over many seeds.
    Replay {
        /// Only records whose device or workload contains this text.
        text: Option<String>,
        #[arg(long, value_enum, default_value = "evolutionary")]
        strategy: super::tune::StrategyArg,
        /// Trial budget: at most this many, and at most --fraction of the recorded space.
        #[arg(long, default_value_t = 64)]
        trials: usize,
        #[arg(long, default_value_t = 0.1)]
        fraction: f64,
        /// Seeds replayed per record (1..=N).
        #[arg(long, default_value_t = 20)]
        seeds: u64,
        /// Records with fewer trials than this are not exhaustive runs and are skipped.
        #[arg(long, default_value_t = 100)]
        min_trials: usize,
        /// Replay each device's workloads one after another in the order they were tuned,
        /// seeding each search with the winners of the earlier replays, as `rocky tune` does
        /// across a model's workloads. Without it every workload is searched from scratch.
        #[arg(long)]
        carry_over: bool,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> CmdResult {
    let path = db_path(args.db.as_deref()).ok_or_else(|| {
        CliError::usage("no tuning database location: pass --db PATH or set ROCKY_DB")
    })?;
    match args.command {
        DbCommand::List { json } => list(&open_existing(&path)?, json),
        DbCommand::Show { text, json } => show(&open_existing(&path)?, text.as_deref(), json),
        DbCommand::Stats { json } => stats(&open_existing(&path)?, json),
        DbCommand::Export {
            output,
            device,
            all_trials,
        } => export(
            &open_existing(&path)?,
            &output,
            device.as_deref(),
            all_trials,
        ),
        DbCommand::Import { file } => import(&path, &file),
        DbCommand::Replay {
            text,
            strategy,
            trials,
            fraction,
            seeds,
            min_trials,
            carry_over,
            json,
        } => replay(
            &open_existing(&path)?,
            text.as_deref(),
            &ReplayPlan {
                strategy: strategy.into(),
                max_trials: trials,
                fraction,
                seeds,
                min_trials,
                carry_over,
            },
            json,
        ),
    }
}

/// Reading commands do not create a database where there is none.
fn open_existing(path: &Path) -> Result<TuningDb, CliError> {
    if !path.exists() {
        return Err(CliError::input(format!(
            "there is no tuning database at {}: run `rocky tune` or `rocky db import`, or pass --db",
            path.display()
        )));
    }
    TuningDb::open(path).map_err(db_error)
}

fn list(db: &TuningDb, as_json: bool) -> CmdResult {
    let keys = db.all_keys().map_err(db_error)?;
    let mut rows = Vec::new();
    for key in &keys {
        let trials = db.trials(key).map_err(db_error)?;
        let best = db.best(key).map_err(db_error)?;
        rows.push((key, trials.len(), best));
    }
    if as_json {
        let out: Vec<_> = rows
            .iter()
            .map(|(key, n, best)| {
                json!({
                    "device": key.device,
                    "compiler_version": key.compiler_version,
                    "workload": key.workload,
                    "trials": n,
                    "best_schedule": best.as_ref().map(|b| b.schedule),
                    "best_median_s": best.as_ref().map(|b| b.median_s),
                    "best_gflops": best.as_ref().map(|b| b.gflops),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    println!(
        "{:<32} {:>6} {:>11} {:>9}  {:<40} device",
        "workload", "trials", "best ms", "GFLOP/s", "best schedule"
    );
    for (key, n, best) in rows {
        let (ms, gf, sched) = match &best {
            Some(b) => (
                format!("{:.4}", b.median_s * 1e3),
                format!("{:.2}", b.gflops),
                describe_schedule(&b.schedule),
            ),
            None => ("-".into(), "-".into(), "(every trial failed)".into()),
        };
        println!(
            "{:<32} {:>6} {:>11} {:>9}  {:<40} {}",
            describe_workload(&key.workload),
            n,
            ms,
            gf,
            sched,
            key.device.describe()
        );
    }
    // Graph-level choices (`rocky tune`'s ubatch and command-buffer setting per model shape),
    // which `rocky prefill` uses too: listed so a reader sees everything that steers a run.
    for g in db.graph_choices(None).map_err(db_error)? {
        println!(
            "graph choice: ubatch {}, ≤{} dispatches per command buffer, gate/up {}, {} ({:.1} tok/s) for {} on {}",
            g.choice.ubatch,
            g.choice.max_dispatches_per_cb,
            if g.choice.fuse_swiglu { "fused" } else { "separate" },
            if g.choice.overlap { "ubatches overlapped" } else { "one ubatch at a time" },
            g.choice.tok_s,
            g.model_shape_key,
            g.device.describe()
        );
    }
    // Unmeasured rankings (`rocky tune --static`): never used as a winner, only tried first by
    // a live `rocky tune` on the same GPU.
    for (key, ranking) in db.seed_rankings(None).map_err(db_error)? {
        let top = ranking
            .candidates
            .first()
            .map_or("none".to_string(), |c| describe_schedule(&c.schedule));
        println!(
            "seed ranking (unmeasured, {} candidates, top {top}) for {} on {}; scores from {}",
            ranking.candidates.len(),
            describe_workload(&key.workload),
            key.device.describe(),
            ranking.source
        );
    }
    // Calibrations of the Mali cost model: a figure measured on the device, the prediction
    // before the fit, the fitted constant; `rocky predict` uses the newest of its device.
    for c in db.calibrations(None).map_err(db_error)? {
        println!("calibration: {}", c.describe());
    }
    Ok(())
}

fn matches(key: &RecordKey, text: Option<&str>) -> bool {
    let Some(text) = text else { return true };
    let text = text.to_lowercase();
    key.device.describe().to_lowercase().contains(&text)
        || describe_workload(&key.workload)
            .to_lowercase()
            .contains(&text)
}

fn show(db: &TuningDb, text: Option<&str>, as_json: bool) -> CmdResult {
    let mut out = Vec::new();
    for key in db.all_keys().map_err(db_error)? {
        if !matches(&key, text) {
            continue;
        }
        let trials = db.stored_trials(&key).map_err(db_error)?;
        if as_json {
            out.push(json!({ "key": key, "trials": trials }));
            continue;
        }
        println!(
            "{} on {} (compiler {})",
            describe_workload(&key.workload),
            key.device.describe(),
            key.compiler_version
        );
        for s in trials {
            let t = &s.trial;
            let result = match &t.status {
                TrialStatus::Ok => format!(
                    "{:.4} ms (min {:.4}, max {:.4}) {:.2} GFLOP/s",
                    t.median_s * 1e3,
                    t.min_s * 1e3,
                    t.max_s * 1e3,
                    t.gflops
                ),
                TrialStatus::Failed { kind, message } => format!(
                    "failed: {} ({})",
                    kind.as_str(),
                    message.lines().next().unwrap_or("")
                ),
            };
            let from = s
                .provenance
                .imported_from
                .map(|f| format!(", imported from {f}"))
                .unwrap_or_default();
            println!(
                "  {:<40} {result}  [host {}{from}]",
                describe_schedule(&t.schedule),
                s.provenance.host
            );
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(())
}

fn stats(db: &TuningDb, as_json: bool) -> CmdResult {
    let s = db.stats().map_err(db_error)?;
    let calibrations = db.calibrations(None).map_err(db_error)?.len();
    if as_json {
        let out = json!({
            "devices": s.devices,
            "keys": s.keys,
            "workloads": s.workloads,
            "trials": s.trials,
            "ok_trials": s.ok_trials,
            "failures": s.failures,
            "calibrations": calibrations,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!("devices:   {}", s.devices);
        println!(
            "records:   {} (device × compiler version × workload)",
            s.keys
        );
        println!("workloads: {}", s.workloads);
        println!("trials:    {} ({} ok)", s.trials, s.ok_trials);
        for (kind, n) in &s.failures {
            println!("  failed {kind}: {n}");
        }
        println!("cost-model calibrations: {calibrations}");
    }
    Ok(())
}

fn export(db: &TuningDb, output: &Path, device: Option<&str>, all_trials: bool) -> CmdResult {
    // Every device of the database whose description contains the text.
    let devices: Vec<Option<DeviceFingerprint>> = match device {
        None => vec![None],
        Some(text) => {
            let text = text.to_lowercase();
            // Devices with kernel records or graph choices (a device may have only one kind).
            let with_records = db
                .all_keys()
                .map_err(db_error)?
                .into_iter()
                .map(|k| k.device);
            let with_choices = db
                .graph_choices(None)
                .map_err(db_error)?
                .into_iter()
                .map(|c| c.device);
            let with_seeds = db
                .seed_rankings(None)
                .map_err(db_error)?
                .into_iter()
                .map(|(k, _)| k.device);
            let with_calibrations = db
                .calibrations(None)
                .map_err(db_error)?
                .into_iter()
                .map(|c| c.device);
            let found: BTreeSet<DeviceFingerprint> = with_records
                .chain(with_choices)
                .chain(with_seeds)
                .chain(with_calibrations)
                .filter(|d| d.describe().to_lowercase().contains(&text))
                .collect();
            if found.is_empty() {
                return Err(CliError::usage(format!(
                    "--device {text}: no device in the database matches; see `rocky db list`"
                )));
            }
            found.into_iter().map(Some).collect()
        }
    };
    let file = std::fs::File::create(output)
        .map_err(|e| CliError::output(format!("cannot create {}: {e}", output.display())))?;
    let mut writer = BufWriter::new(file);
    let (mut records, mut graph_choices, mut seeds, mut calibrations) = (0, 0, 0, 0);
    for device in devices {
        let filter = ExportFilter {
            device,
            workload_kind: None,
            all_trials,
        };
        let written = export_jsonl(db, &mut writer, &filter)
            .map_err(|e| CliError::output(format!("cannot write {}: {e}", output.display())))?;
        records += written.records;
        graph_choices += written.graph_choices;
        seeds += written.seed_rankings;
        calibrations += written.calibrations;
    }
    println!(
        "exported {records} records, {graph_choices} graph choices, {seeds} seed rankings \
         (unmeasured) and {calibrations} cost-model calibrations to {}",
        output.display()
    );
    Ok(())
}

fn import(db_path: &Path, file: &Path) -> CmdResult {
    let input = std::fs::File::open(file)
        .map_err(|e| CliError::input(format!("cannot read {}: {e}", file.display())))?;
    let db = TuningDb::open(db_path).map_err(db_error)?;
    let summary =
        import_jsonl(&db, BufReader::new(input), &file.display().to_string()).map_err(db_error)?;
    println!(
        "imported {} lines into {}: {} new records, {} improved, {} kept local, {} trials added, {} duplicates skipped; \
         graph choices: {} new, {} improved, {} kept local; seed rankings (unmeasured): {} stored, {} kept local; \
         cost-model calibrations: {} new, {} already present, {} kept local",
        summary.lines,
        db_path.display(),
        summary.new_keys,
        summary.improved_keys,
        summary.kept_local,
        summary.trials_added,
        summary.duplicate_trials,
        summary.graph_choices_added,
        summary.graph_choices_improved,
        summary.graph_choices_kept_local,
        summary.seed_rankings_added,
        summary.seed_rankings_kept_local,
        summary.calibrations_added,
        summary.calibrations_duplicate,
        summary.calibrations_kept_local
    );
    Ok(())
}

/// What `rocky db replay` replays, and under which budget.
struct ReplayPlan {
    strategy: rocky_tuner::Strategy,
    max_trials: usize,
    fraction: f64,
    seeds: u64,
    min_trials: usize,
    carry_over: bool,
}

impl ReplayPlan {
    /// Trials for a space of `n`: at most `max_trials` and at most `fraction` of it.
    fn budget(&self, n: usize) -> usize {
        self.max_trials
            .min(((n as f64 * self.fraction).ceil() as usize).max(1))
    }
}

/// One exhaustively measured record, ready to replay.
struct ReplayRecord {
    key: RecordKey,
    /// When its first trial was stored: records replay in the order they were tuned.
    first_date: u64,
    default_ms: Option<f64>,
    space: rocky_tuner::replay::RecordedSpace,
}

/// `rocky db replay`: one line per exhaustively measured record.
fn replay(db: &TuningDb, text: Option<&str>, plan: &ReplayPlan, as_json: bool) -> CmdResult {
    use rocky_tuner::replay::{replay_model, RecordedSpace};
    let fraction = plan.fraction;
    if !(fraction > 0.0 && fraction <= 1.0) || plan.max_trials == 0 || plan.seeds == 0 {
        return Err(CliError::usage(
            "--fraction must be in (0, 1], --trials and --seeds at least 1",
        ));
    }
    // The exhaustively measured records, grouped per device and compiler version (the unit
    // a tuning run works in), each group in the order its records were first measured.
    let mut groups: Vec<Vec<ReplayRecord>> = Vec::new();
    for key in db.all_keys().map_err(db_error)? {
        if !matches(&key, text) {
            continue;
        }
        let trials = db.trials(&key).map_err(db_error)?;
        if trials.len() < plan.min_trials {
            continue;
        }
        let table: Vec<_> = trials
            .iter()
            .map(|t| (t.schedule, t.is_ok().then_some(t.median_s)))
            .collect();
        let Some(space) = RecordedSpace::new(&table) else {
            continue;
        };
        let first_date = trials.iter().map(|t| t.date).min().unwrap_or(0);
        let default_ms = table[0].1.map(|t| t * 1e3);
        let same_run = |g: &Vec<ReplayRecord>| {
            g[0].key.device == key.device && g[0].key.compiler_version == key.compiler_version
        };
        let record = ReplayRecord {
            key: key.clone(),
            first_date,
            default_ms,
            space,
        };
        match groups.iter_mut().find(|g| same_run(g)) {
            Some(g) => g.push(record),
            None => groups.push(vec![record]),
        }
    }
    for g in &mut groups {
        g.sort_by_key(|r| r.first_date);
    }
    let mut out = Vec::new();
    if !as_json {
        println!(
            "{:<36} {:>6} {:>6} {:>11} {:>11} {:>9} {:>9} {:>8}",
            "workload", "space", "budget", "default ms", "best ms", "median", "worst", "≤5% off"
        );
    }
    for group in &groups {
        // ratios[record][seed]
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); group.len()];
        for seed in 1..=plan.seeds {
            if plan.carry_over {
                let model: Vec<_> = group.iter().map(|r| (r.key.workload, &r.space)).collect();
                let outcomes = replay_model(&model, plan.strategy, |n| plan.budget(n), seed);
                for (r, o) in ratios.iter_mut().zip(outcomes) {
                    r.push(o.ratio);
                }
            } else {
                for (r, record) in ratios.iter_mut().zip(group) {
                    let space = &record.space;
                    let budget = plan.budget(space.schedules.len());
                    r.push(space.replay(plan.strategy, budget, seed).ratio);
                }
            }
        }
        for (record, mut ratios) in group.iter().zip(ratios) {
            let (key, default_ms, space) = (&record.key, record.default_ms, &record.space);
            let n = space.schedules.len();
            let budget = plan.budget(n);
            let seeds = plan.seeds;
            ratios.sort_by(f64::total_cmp);
            let median = ratios[ratios.len() / 2];
            let worst = ratios[ratios.len() - 1];
            let within = ratios.iter().filter(|&&r| r <= 1.05).count();
            if as_json {
                out.push(json!({
                    "device": key.device,
                    "workload": key.workload,
                    "space": n,
                    "budget": budget,
                    "carry_over": plan.carry_over,
                    "default_ms": default_ms,
                    "best_ms": space.best_s() * 1e3,
                    "ratios": ratios,
                    "within_5_percent": within,
                    "seeds": seeds,
                }));
            } else {
                println!(
                    "{:<36} {:>6} {:>6} {:>11} {:>11.4} {:>8.3}x {:>8.3}x {:>5}/{seeds}",
                    describe_workload(&key.workload),
                    n,
                    budget,
                    default_ms.map_or("-".into(), |d| format!("{d:.4}")),
                    space.best_s() * 1e3,
                    median,
                    worst,
                    within
                );
            }
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(())
}
