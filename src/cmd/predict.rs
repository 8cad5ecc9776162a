//! `rocky predict`: what the Mali would do. Every dispatch of the prefill (and of decode steps)
//! as the executor prepares it, each kernel compiled by the device's own driver with its
//! statistics captured (panvk 26.x: per-pipe cycles, registers → occupancy, spills), times its
//! invocations and loop trips → a time on a G610 MC4 model, bounded below by its memory
//! traffic, plus fixed costs (`rocky_predict`). Nothing is timed: on the Mali shims nothing can
//! be. With `--dispatches FILE` the same model costs a dispatch list made elsewhere
//! (tools/llama_predict.py makes llama.cpp's from its `GGML_VK_PIPELINE_STATS` output).
//!
//! The constants: the built-in fit to the one real Mali figure, unless the tuning database
//! holds a calibration of this device and driver (a figure measured here, e.g. by `rocky
//! report`'s bench, with `--fit-pp … --save-calibration`), which then replaces it, named with
//! its source.

use super::gpu::{self, device_error, GpuArgs};
use crate::error::{CliError, CmdResult};
use rocky_compiler::templates::{self, attention, eltwise, embedding, kv_cache, rms_norm, rope};
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_engine::Model;
use rocky_predict::{
    fit, fit_first, Constants, Dispatch, DispatchList, FitParam, Prediction, Target, ValhallStats,
    FIT_ORDER,
};
use rocky_runtime::executor::step_splits;
use rocky_runtime::{compute_units, device_caps, ComputePipeline, Context, RuntimeError};
use rocky_tuner::static_cost::{self, CostModel, LoopFactors, Unrolled};
use rocky_tuning_db::{
    Calibration, CalibrationConstants, CalibrationTarget, DeviceFingerprint, TuningDb,
};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    rocky predict qwen2.5-3b-q4_k_m.gguf -p 512 -ub 64 --decode 16\n  \
    rocky predict --dispatches llama-3b-ub64.json --fit-pp 21.0 --json\n  \
    rocky predict qwen2.5-3b-q4_k_m.gguf -p 512 -ub 64 --fit-pp 31.2 --fit auto --save-calibration \
    --measured-by 'rocky bench -p 512 -ub 64, tuned row'\n\n\
    Run it where the driver reports Valhall statistics (panvk 26.x: a board, or \
    ../shared/tools/mali-shim26 under qemu). Elsewhere the cycles come from rocky's own IR \
    model and the table says so. Every figure is a PREDICTION of a model, never a measurement; \
    the constants, and what they were fitted to, are printed with it.")]
pub struct Args {
    /// The GGUF model (not needed with --dispatches).
    pub model: Option<PathBuf>,
    /// Prompt tokens of the predicted prefill.
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Decode steps to predict after the prompt (0: none).
    #[arg(long, default_value_t = 16)]
    pub decode: usize,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Cost this dispatch list (JSON, see tools/llama_predict.py) instead of a model's.
    #[arg(long)]
    pub dispatches: Option<PathBuf>,
    /// Fit one constant (--fit) so the prefill predicts this measured tok/s, the others kept
    /// (the seed calibration's or the flags'), and print them: one measured figure, one constant.
    #[arg(long)]
    pub fit_pp: Option<f64>,
    /// With --fit-pp: which constant to fit: dispatch (the per-dispatch cost), ls-rate (the
    /// load/store unit's rate against Mesa's assumed 1 per cycle), efficiency, or auto (the
    /// first of efficiency, ls-rate, dispatch that reproduces the figure).
    #[arg(long, default_value = "dispatch")]
    pub fit: String,
    /// Which constants to predict with: auto (the tuning database's newest calibration of this
    /// device and driver version, else the built-in fit), builtin (the built-in fit to the
    /// seed's figure), or gpu (the newest calibration of the same GPU under any driver
    /// version, e.g. a board's for the shim). With --fit-pp the fit always starts from the
    /// built-in constants.
    #[arg(long, default_value = "auto")]
    pub calibration: String,
    /// With --fit-pp on a MODEL: store the fit in the tuning database (--db) as a calibration
    /// of this device and driver (`rocky db export` carries it), so later predictions here use
    /// it. The figure must have been measured on this device with the same prompt and ubatch.
    #[arg(long, requires = "fit_pp")]
    pub save_calibration: bool,
    /// With --save-calibration: how the --fit-pp figure was measured, stored with it.
    #[arg(long, requires = "save_calibration")]
    pub measured_by: Option<String>,
    /// The load/store unit's thread-operations per core-cycle [default: the seed calibration's].
    #[arg(long)]
    pub ls_rate: Option<f64>,
    /// Achieved fraction of the issue rate [default: the seed calibration's].
    #[arg(long)]
    pub efficiency: Option<f64>,
    /// Fixed cost per dispatch in microseconds [default: the seed calibration's].
    #[arg(long)]
    pub dispatch_us: Option<f64>,
    /// Fixed cost per submit in microseconds [default: 0].
    #[arg(long)]
    pub submit_us: Option<f64>,
    /// Efficiency multiplier at half occupancy [default: 1, no penalty].
    #[arg(long)]
    pub half_occupancy_efficiency: Option<f64>,
    /// GPU clock in MHz [default: 1000, the RK3588's top operating point].
    #[arg(long)]
    pub clock_mhz: Option<f64>,
    /// DRAM bandwidth in GB/s [default: 27, clpeak on a G610].
    #[arg(long)]
    pub bandwidth_gbs: Option<f64>,
    /// Also write the dispatch lists (PREFIX.prefill.json, PREFIX.decode.json) for re-costing
    /// with other constants by --dispatches, without compiling again.
    #[arg(long)]
    pub save_dispatches: Option<PathBuf>,
    /// Print the full prediction as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let mut target = Target::g610_mc4();
    if let Some(mhz) = args.clock_mhz {
        positive("--clock-mhz", mhz)?;
        target.clock_hz = mhz * 1e6;
        target.clock_from = "--clock-mhz".into();
    }
    if let Some(gbs) = args.bandwidth_gbs {
        positive("--bandwidth-gbs", gbs)?;
        target.bandwidth = gbs * 1e9;
        target.bandwidth_from = "--bandwidth-gbs".into();
    }
    let choice = CalibrationChoice::parse(&args.calibration)?;
    if args.save_calibration && args.model.is_none() {
        return Err(CliError::usage(
            "--save-calibration needs a MODEL run on the device the figure was measured on \
             (not --dispatches): the calibration is stored for that device and driver",
        ));
    }
    let (prefill, decode, device) = match (&args.dispatches, &args.model) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::input(format!("--dispatches {}: {e}", path.display())))?;
            let list: DispatchList = serde_json::from_str(&text).map_err(|e| {
                CliError::input(format!(
                    "--dispatches {}: not a dispatch list ({e}); tools/llama_predict.py writes one",
                    path.display()
                ))
            })?;
            check_list(&list, path)?;
            (list, None, None)
        }
        (None, Some(model)) => {
            let (prefill, decode, device) = rocky_lists(&args, model)?;
            if let Some((cores, from)) = &device.cores {
                target = target.with_cores(*cores, from.clone());
            }
            (prefill, decode, Some(device))
        }
        (None, None) => {
            return Err(CliError::usage(
                "rocky predict needs a MODEL, or --dispatches FILE",
            ))
        }
    };
    // The constants: a calibration from the database, or the built-in fit (always the latter
    // under a fit: one figure, one constant, from the same start every time).
    let db_path = super::gpu::db_path(args.gpu.db.as_deref());
    let (mut constants, mut source) = (Constants::seed_calibrated(), CalibrationSource::Builtin);
    if args.fit_pp.is_none() {
        if let Some(found) = find_calibration(choice, device.as_ref(), db_path.as_deref())? {
            constants = constants_of(&found.0);
            if args.clock_mhz.is_none() {
                target.clock_hz = found.0.target.clock_hz;
                target.clock_from = "the calibration's (its constants were fitted at it)".into();
            }
            if args.bandwidth_gbs.is_none() {
                target.bandwidth = found.0.target.bandwidth;
                target.bandwidth_from =
                    "the calibration's (its constants were fitted at it)".into();
            }
            source = CalibrationSource::Database(Box::new(found.0), found.1);
        }
    }
    let builtin_note = match (&source, &device, &db_path) {
        (CalibrationSource::Database(..), _, _) => String::new(),
        _ if args.fit_pp.is_some() => "; the fit starts from the built-in constants".into(),
        (_, None, _) => "; --dispatches: no device to look a calibration up for".into(),
        _ if choice == CalibrationChoice::Builtin => "; --calibration builtin".into(),
        (_, Some(d), Some(path)) => format!(
            "; no calibration of {} in the tuning database {}",
            d.fingerprint.describe(),
            path.display()
        ),
        (_, Some(_), None) => "; no tuning database".into(),
    };
    if let Some(e) = args.efficiency {
        positive("--efficiency", e)?;
        constants.efficiency = e;
        constants.fitted += "; efficiency from --efficiency";
    }
    if let Some(us) = args.dispatch_us {
        non_negative("--dispatch-us", us)?;
        constants.dispatch_s = us * 1e-6;
        constants.fitted += "; dispatch_s from --dispatch-us";
    }
    if let Some(r) = args.ls_rate {
        positive("--ls-rate", r)?;
        constants.ls_rate = r;
        constants.fitted += "; ls_rate from --ls-rate";
    }
    if let Some(us) = args.submit_us {
        non_negative("--submit-us", us)?;
        constants.submit_s = us * 1e-6;
    }
    if let Some(h) = args.half_occupancy_efficiency {
        positive("--half-occupancy-efficiency", h)?;
        constants.half_occupancy_efficiency = h;
    }
    if let Some(prefix) = &args.save_dispatches {
        let mut lists = vec![("prefill", &prefill)];
        if let Some(d) = &decode {
            lists.push(("decode", d));
        }
        for (what, list) in lists {
            let path = PathBuf::from(format!("{}.{what}.json", prefix.display()));
            let text = serde_json::to_string_pretty(list).unwrap_or_default();
            std::fs::write(&path, text).map_err(|e| {
                CliError::output(format!("--save-dispatches {}: {e}", path.display()))
            })?;
        }
    }
    let mut fitted: Option<Fitted> = None;
    if let Some(measured) = args.fit_pp {
        let order: &[FitParam] = match args.fit.as_str() {
            "dispatch" => &[FitParam::DispatchCost],
            "ls-rate" => &[FitParam::LoadStoreRate],
            "efficiency" => &[FitParam::Efficiency],
            "auto" => &FIT_ORDER,
            other => {
                return Err(CliError::usage(format!(
                    "--fit {other}: use dispatch, ls-rate, efficiency or auto"
                )))
            }
        };
        let before = prefill.predict(&target, &constants).tok_per_s;
        let base = describe_constants(&constants);
        // The other constants stay as they are: the seed calibration's, or the flags'.
        let (c, param) = if order.len() == 1 {
            fit(&target, &constants, &prefill, measured, order[0]).map(|c| (c, order[0]))
        } else {
            fit_first(&target, &constants, &prefill, measured, order)
        }
        .map_err(|e| CliError::input(format!("--fit-pp {measured}: {e}")))?;
        constants = c;
        fitted = Some(Fitted {
            measured,
            before,
            base,
            param,
        });
    }
    if let (true, Some(f), Some(d)) = (args.save_calibration, &fitted, &device) {
        let record = Calibration {
            device: d.fingerprint.clone(),
            compiler_version: rocky_compiler::compiler_version().to_string(),
            model: args.model.as_ref().and_then(|m| m.file_name()).map_or_else(
                || prefill.name.clone(),
                |n| n.to_string_lossy().into_owned(),
            ),
            n_prompt: args.n_prompt as u32,
            ubatch: d.ubatch as u32,
            measured_tok_s: f.measured,
            measured_by: args
                .measured_by
                .clone()
                .unwrap_or_else(|| "given to rocky predict --fit-pp".into()),
            predicted_tok_s: f.before,
            base: f.base.clone(),
            fitted: f.param.name().into(),
            constants: CalibrationConstants {
                efficiency: constants.efficiency,
                ls_rate: constants.ls_rate,
                dispatch_s: constants.dispatch_s,
                submit_s: constants.submit_s,
                half_occupancy_efficiency: constants.half_occupancy_efficiency,
            },
            target: CalibrationTarget {
                cores: target.cores,
                clock_hz: target.clock_hz,
                bandwidth: target.bandwidth,
            },
            statistics: prefill.statistics.clone(),
            host: rocky_tuner::host_name(),
            date: rocky_tuning_db::Trial::now_unix_s(),
        };
        let path = db_path.as_deref().ok_or_else(|| {
            CliError::usage(
                "--save-calibration: no tuning database location: pass --db PATH or set ROCKY_DB",
            )
        })?;
        let db = TuningDb::open(path).map_err(super::gpu::db_error)?;
        db.add_calibration(&record).map_err(super::gpu::db_error)?;
        eprintln!(
            "predict: stored the calibration in {} (`rocky db export` carries it): {}",
            path.display(),
            record.describe()
        );
        source = CalibrationSource::Saved(Box::new(record), path.to_path_buf());
    }
    let pp = prefill.predict(&target, &constants);
    let tg = decode.as_ref().map(|d| {
        let p = d.predict(&target, &constants);
        let bytes: f64 = d.dispatches.iter().map(|x| x.bytes * x.count).sum();
        let bound = target.bandwidth_bound_tok_s(bytes / d.tokens.max(1.0));
        (p, bound)
    });
    let calibration_text = match &source {
        CalibrationSource::Builtin if fitted.is_some() => {
            "fitted here to the --fit-pp figure (not stored)".to_string() + &builtin_note
        }
        CalibrationSource::Builtin => format!(
            "built-in ({}){builtin_note}",
            Constants::seed_calibrated().fitted
        ),
        CalibrationSource::Database(c, path) => format!(
            "from the tuning database {}: {}",
            path.display(),
            c.describe()
        ),
        CalibrationSource::Saved(c, path) => format!(
            "fitted here and stored in the tuning database {}: {}",
            path.display(),
            c.describe()
        ),
    };
    if args.json {
        let out = json!({
            "prediction": true,
            "note": "a model's prediction, not a measurement",
            "target": target,
            "constants": constants,
            "calibration": {
                "source": match &source {
                    CalibrationSource::Builtin if fitted.is_some() => "fit",
                    CalibrationSource::Builtin => "builtin",
                    CalibrationSource::Database(..) => "database",
                    CalibrationSource::Saved(..) => "fit_saved",
                },
                "text": calibration_text,
                "record": match &source {
                    CalibrationSource::Database(c, _) | CalibrationSource::Saved(c, _) => Some(c),
                    CalibrationSource::Builtin => None,
                },
            },
            "fit": fitted.as_ref().map(|f| json!({
                "measured_tok_s": f.measured,
                "predicted_before_tok_s": f.before,
                "error_before": rocky_predict::relative_error(f.before, f.measured),
                "base": f.base,
                "fitted": f.param.name(),
            })),
            "prefill": { "name": prefill.name, "statistics": prefill.statistics, "result": pp },
            "decode": tg.as_ref().map(|(p, bound)| json!({
                "result": p,
                "bandwidth_bound_tok_s": bound,
                "share_of_bound": p.tok_per_s / bound,
            })),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    println!(
        "PREDICTION (a model, not a measurement) for {}",
        target.name
    );
    println!(
        "  cores {} ({}); clock {:.0} MHz ({}); bandwidth {:.1} GB/s ({})",
        target.cores,
        target.cores_from,
        target.clock_hz / 1e6,
        target.clock_from,
        target.bandwidth / 1e9,
        target.bandwidth_from
    );
    println!(
        "  constants: efficiency {:.3}, load/store rate {:.2}/cycle, per dispatch {:.1} µs, per submit {:.1} µs, half-occupancy x{:.2} ({})",
        constants.efficiency,
        constants.ls_rate,
        constants.dispatch_s * 1e6,
        constants.submit_s * 1e6,
        constants.half_occupancy_efficiency,
        if constants.fitted.is_empty() { "priors" } else { &constants.fitted }
    );
    println!("  calibration: {calibration_text}");
    if let Some(f) = &fitted {
        println!(
            "  fit: measured {:.2} tok/s (given); the model predicted {:.2} tok/s before the fit ({:+.1}%, with {}); fitted {}",
            f.measured,
            f.before,
            100.0 * rocky_predict::relative_error(f.before, f.measured),
            f.base,
            f.param.name()
        );
    }
    println!("prefill: {} [{}]", prefill.name, prefill.statistics);
    print_table(&pp);
    println!(
        "predicted prefill: {:.1} tok/s ({:.0} tokens in {:.3} s; {:.0} dispatches; compute {:.0}%, memory {:.0}%, fixed {:.0}%)",
        pp.tok_per_s,
        pp.tokens,
        pp.total_s,
        pp.dispatches,
        pp.compute_share * 100.0,
        pp.memory_share * 100.0,
        pp.fixed_share * 100.0
    );
    if let (Some((p, bound)), Some(d)) = (&tg, &decode) {
        println!("decode: {} [{}]", d.name, d.statistics);
        print_table(p);
        println!(
            "predicted decode: {:.1} tok/s; bandwidth bound {:.1} tok/s (every byte once at {:.1} GB/s): {:.0}% of it",
            p.tok_per_s,
            bound,
            target.bandwidth / 1e9,
            100.0 * p.tok_per_s / bound
        );
    }
    Ok(())
}

/// What a --fit-pp did.
struct Fitted {
    measured: f64,
    /// The prediction before the fit.
    before: f64,
    /// The constants it started from, in words.
    base: String,
    param: FitParam,
}

/// Where the constants came from.
enum CalibrationSource {
    /// The built-in fit to the seed's figure (or a fit made here and not stored).
    Builtin,
    /// A calibration from the tuning database at the path.
    Database(Box<Calibration>, PathBuf),
    /// Fitted here and stored in the tuning database at the path.
    Saved(Box<Calibration>, PathBuf),
}

/// `--calibration`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CalibrationChoice {
    Auto,
    Builtin,
    Gpu,
}

impl CalibrationChoice {
    fn parse(s: &str) -> Result<CalibrationChoice, CliError> {
        match s {
            "auto" => Ok(CalibrationChoice::Auto),
            "builtin" => Ok(CalibrationChoice::Builtin),
            "gpu" => Ok(CalibrationChoice::Gpu),
            other => Err(CliError::usage(format!(
                "--calibration {other}: use auto, builtin or gpu"
            ))),
        }
    }
}

/// The calibration `choice` picks from the database at `db` for `device`, with the database's
/// path. A database that does not exist holds none (it is not created).
fn find_calibration(
    choice: CalibrationChoice,
    device: Option<&DeviceRun>,
    db: Option<&std::path::Path>,
) -> Result<Option<(Calibration, PathBuf)>, CliError> {
    let (Some(device), Some(path)) = (device, db) else {
        return Ok(None);
    };
    if choice == CalibrationChoice::Builtin || !path.exists() {
        return Ok(None);
    }
    let db = TuningDb::open(path).map_err(super::gpu::db_error)?;
    let found = match choice {
        CalibrationChoice::Gpu => db.calibration_for_gpu(&device.fingerprint),
        _ => db.calibration_for_device(&device.fingerprint),
    }
    .map_err(super::gpu::db_error)?;
    Ok(found.map(|c| (c, path.to_path_buf())))
}

/// The model's constants of a stored calibration (as `rocky tune --static` takes them).
fn constants_of(c: &Calibration) -> Constants {
    static_cost::calibration_constants(c)
}

/// The constants in one line.
fn describe_constants(c: &Constants) -> String {
    format!(
        "efficiency {:.4}, ls_rate {:.3}, dispatch {:.1} µs, submit {:.1} µs ({})",
        c.efficiency,
        c.ls_rate,
        c.dispatch_s * 1e6,
        c.submit_s * 1e6,
        if c.fitted.is_empty() {
            "priors"
        } else {
            &c.fitted
        }
    )
}

/// The device a MODEL's prediction ran on: its identity, ubatch and core count.
struct DeviceRun {
    fingerprint: DeviceFingerprint,
    ubatch: usize,
    cores: Option<(u32, String)>,
}

fn positive(flag: &str, v: f64) -> Result<(), CliError> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{flag} must be a positive number, not {v}"
        )))
    }
}

fn non_negative(flag: &str, v: f64) -> Result<(), CliError> {
    if v >= 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{flag} must be zero or more, not {v}"
        )))
    }
}

fn check_list(list: &DispatchList, path: &std::path::Path) -> Result<(), CliError> {
    let bad = |what: String| CliError::input(format!("--dispatches {}: {what}", path.display()));
    if list.tokens.is_nan() || list.tokens <= 0.0 {
        return Err(bad(format!("tokens must be positive, not {}", list.tokens)));
    }
    if list.dispatches.is_empty() {
        return Err(bad("no dispatches".into()));
    }
    for d in &list.dispatches {
        let fields = [d.count, d.invocations, d.cycles, d.loop_factor, d.bytes];
        if fields.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(bad(format!(
                "dispatch {} ({}) has a negative or non-finite number",
                d.op, d.kernel
            )));
        }
    }
    Ok(())
}

fn print_table(p: &Prediction) {
    println!(
        "  {:<16} {:>6} {:>9} {:>6} {:>7} {:>8} {:>6} {:>4} {:>6} {:<6} kernel",
        "op", "calls", "ms", "share", "GFLOP/s", "cycles", "loops", "occ", "spills", "bound"
    );
    for r in &p.rows {
        let gflops = if r.flops > 0.0 && r.total_s > 0.0 {
            format!("{:.1}", r.flops / r.total_s / 1e9)
        } else {
            "-".into()
        };
        println!(
            "  {:<16} {:>6} {:>9.3} {:>5.1}% {:>7} {:>8.2} {:>6.1} {:>4} {:>6} {:<6} {}",
            r.op,
            r.calls,
            r.total_s * 1e3,
            100.0 * r.total_s / p.total_s.max(1e-30),
            gflops,
            r.cycles,
            r.loop_factor,
            r.occupancy.map_or("-".into(), |o| format!("{o:.1}")),
            r.spills,
            match r.bound {
                rocky_predict::Bound::Compute => "comp",
                rocky_predict::Bound::Memory => "mem",
            },
            r.kernel
        );
    }
}

/// Driver cycles and occupancy of one kernel, or the IR model's where the driver has none.
#[derive(Clone, Copy)]
struct KernelCost {
    cycles: f64,
    /// The driver's statistics, where it reports cycles.
    driver: Option<ValhallStats>,
    from_driver: bool,
    /// Which loops the driver's static counts are taken to have unrolled
    /// (`static_cost::driver_static`, checked against the driver's `Loops`).
    unrolled: Unrolled,
}

/// rocky's prefill and decode dispatch lists of `model` on the device, and the device's identity,
/// the ubatch and the core count the driver reports.
fn rocky_lists(
    args: &Args,
    path: &std::path::Path,
) -> Result<(DispatchList, Option<DispatchList>, DeviceRun), CliError> {
    if args.n_prompt == 0 {
        return Err(CliError::usage("-p must be at least 1"));
    }
    let model = Model::open(path).map_err(gpu::load_error)?;
    let n_ctx = args.n_prompt + args.decode;
    let mut session = gpu::open_session(&args.gpu, &model, n_ctx, false)?;
    gpu::prepare(&mut session)?;
    let ubatch = session.ubatch();
    let prefill_used: Vec<_> = session.schedules_used().to_vec();
    let decode_used: Vec<_> = if args.decode > 0 {
        session.prepare_decode().map_err(gpu::session_error)?;
        session.schedules_used().to_vec()
    } else {
        Vec::new()
    };
    // A context of its own for the statistics: a pipeline the session's device already built
    // may be served from the driver's in-memory cache without them.
    let selector = args.gpu.options(false)?.device;
    let ctx = Context::new(&selector).map_err(device_error)?;
    let caps = device_caps(ctx.info(), ctx.caps());
    // The compute units the runtime's split-KV rule sees on this device (`Executor`'s).
    let units = compute_units(ctx.info());
    let cores = ctx
        .info()
        .limits
        .shader_cores
        .map(|c| {
            (
                c,
                "reported by the driver (VK_ARM_shader_core_properties)".to_string(),
            )
        })
        .or_else(|| {
            cores_from_name(&ctx.info().name).map(|c| {
                (
                    c,
                    format!("from the driver's device name \"{}\"", ctx.info().name),
                )
            })
        });
    let mut stats: HashMap<(Workload, Schedule), KernelCost> = HashMap::new();
    let mut any_driver = false;
    let mut all_driver = true;
    for (label, w, s, _) in prefill_used.iter().chain(&decode_used) {
        if stats.contains_key(&(*w, *s)) {
            continue;
        }
        let k = kernel_cost(&ctx, &caps, label, w, s)?;
        any_driver |= k.from_driver;
        all_driver &= k.from_driver;
        stats.insert((*w, *s), k);
    }
    let unrolled_note = {
        let n = |u: Unrolled| {
            stats
                .values()
                .filter(|k| k.from_driver && k.unrolled == u)
                .count()
        };
        format!(
            "; loop factors per pipe over the static counts of the loops as the driver kept them \
             (its Loops statistic matched: unroll-requested constant loops unrolled in {}, every \
             constant loop in {} kernels; not matched, every loop once: {})",
            n(Unrolled::Requested),
            n(Unrolled::Constant),
            n(Unrolled::Nothing)
        )
    };
    let source = match (any_driver, all_driver) {
        (true, true) => format!(
            "driver statistics of {} ({}){unrolled_note}",
            ctx.info().name,
            ctx.info().driver.info
        ),
        (true, false) => format!(
            "driver statistics of {} where reported, rocky's IR model elsewhere{unrolled_note}",
            ctx.info().name
        ),
        _ => format!(
            "rocky's IR model (in its own units: {} reports no cycle statistics)",
            ctx.info().name
        ),
    };
    let name = format!(
        "rocky {} pp{} ub {ubatch}",
        path.file_name().map_or("?".into(), |n| n.to_string_lossy()),
        args.n_prompt
    );
    let prefill = DispatchList {
        name,
        statistics: source.clone(),
        tokens: args.n_prompt as f64,
        submits: args.n_prompt.div_ceil(ubatch) as f64,
        dispatches: prefill_dispatches(&prefill_used, &stats, &caps, units, args.n_prompt, ubatch),
    };
    let decode = (args.decode > 0).then(|| {
        let mut dispatches = Vec::new();
        for step in 0..args.decode {
            let pos = args.n_prompt + step;
            dispatches.extend(ubatch_dispatches(
                &decode_used,
                &stats,
                &caps,
                units,
                1,
                pos,
                1,
                true,
            ));
        }
        DispatchList {
            name: format!(
                "rocky decode, {} steps after {} tokens",
                args.decode, args.n_prompt
            ),
            statistics: source,
            tokens: args.decode as f64,
            submits: args.decode as f64,
            dispatches: merge(dispatches),
        }
    });
    let device = DeviceRun {
        fingerprint: rocky_tuner::fingerprint(ctx.info()),
        ubatch,
        cores,
    };
    Ok((prefill, decode, device))
}

/// "Mali-G610 MC4" → 4.
pub fn cores_from_name(name: &str) -> Option<u32> {
    let at = name.find(" MC")?;
    let digits: String = name[at + 3..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok().filter(|&n| n > 0)
}

fn kernel_cost(
    ctx: &Context,
    caps: &DeviceCaps,
    label: &str,
    w: &Workload,
    s: &Schedule,
) -> Result<KernelCost, CliError> {
    let kernel = templates::instantiate(w, s, caps)
        .map_err(|r| CliError::internal(format!("{label}: the prepared kernel refuses: {r}")))?;
    let flat = match ComputePipeline::with_statistics(ctx, None, &kernel) {
        Ok((_p, st)) => Some(st.flat()),
        Err(RuntimeError::StatisticsUnsupported { .. }) => None,
        Err(e) => return Err(device_error(e)),
    };
    if let Some(v) = flat.as_ref().and_then(ValhallStats::from_flat) {
        let model = CostModel::for_device(caps);
        let driver_loops = flat.as_ref().and_then(|f| static_cost::stat(f, "loops"));
        let unrolled = kernel_ir(w, s).map_or(Unrolled::Nothing, |m| {
            static_cost::driver_static(&m, &model, driver_loops).1
        });
        return Ok(KernelCost {
            cycles: v.cycles,
            driver: Some(v),
            from_driver: true,
            unrolled,
        });
    }
    // No driver cycles: the IR's per-invocation bound, every loop once (as a driver counts).
    let model = CostModel::for_device(caps);
    let cycles = kernel_ir(w, s)
        .map(|m| static_cost::count(&m, None, &model).bound(&model))
        .unwrap_or(1.0);
    Ok(KernelCost {
        cycles,
        driver: None,
        from_driver: false,
        unrolled: Unrolled::Nothing,
    })
}

/// The IR of `w`'s kernel with `s` (the GEMV and GEMM through their own templates).
fn kernel_ir(w: &Workload, s: &Schedule) -> Option<rocky_compiler::ir::Module> {
    Some(match (w, s) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => templates::gemm::kernel_ir(w, s),
        (Workload::Gemv(w), Schedule::Gemv(s)) => templates::gemv::kernel_ir(w, s),
        (Workload::RmsNorm(w), Schedule::RmsNorm(s)) => rms_norm::kernel_ir(w, s),
        (Workload::RopeNeox(w), Schedule::RopeNeox(s)) => rope::kernel_ir(w, s),
        (Workload::SwiGlu(w), Schedule::SwiGlu(s)) => {
            eltwise::kernel_ir(eltwise::EltwiseOp::SwiGlu, w, s)
        }
        (Workload::GeGlu(w), Schedule::GeGlu(s)) => {
            eltwise::kernel_ir(eltwise::EltwiseOp::GeGlu, w, s)
        }
        (Workload::Add(w), Schedule::Add(s)) => eltwise::kernel_ir(eltwise::EltwiseOp::Add, w, s),
        (Workload::Scale(w), Schedule::Scale(s)) => {
            eltwise::kernel_ir(eltwise::EltwiseOp::Scale, w, s)
        }
        (Workload::Embedding(w), Schedule::Embedding(s)) => embedding::kernel_ir(w, s),
        (Workload::KvWrite(w), Schedule::KvWrite(s)) => kv_cache::kernel_ir(w, s),
        (Workload::Attention(w), Schedule::Attention(s)) => attention::kernel_ir(w, s),
        (Workload::Hadamard(w), Schedule::Hadamard(s)) => templates::hadamard::kernel_ir(w, s),
        _ => return None,
    })
}

/// The prefill's dispatches: every ubatch runs the used kernels at its rows, the ops after the
/// last row (final norm, output projection: their workloads have one row) only the last.
fn prefill_dispatches(
    used: &[rocky_runtime::executor::UsedKernel],
    stats: &HashMap<(Workload, Schedule), KernelCost>,
    caps: &DeviceCaps,
    units: Option<u32>,
    n_prompt: usize,
    ubatch: usize,
) -> Vec<Dispatch> {
    let mut out = Vec::new();
    let n_ub = n_prompt.div_ceil(ubatch);
    for u in 0..n_ub {
        let pos0 = u * ubatch;
        let rows = ubatch.min(n_prompt - pos0);
        out.extend(ubatch_dispatches(
            used,
            stats,
            caps,
            units,
            ubatch as u32,
            pos0,
            rows,
            u + 1 == n_ub,
        ));
    }
    merge(out)
}

/// Whether a used kernel runs only after the last row (its label is not a layer's and it is
/// not the embedding).
fn after_last_row(label: &str, w: &Workload) -> bool {
    !label.starts_with("blk.") && !matches!(w, Workload::Embedding(_))
}

/// One ubatch of `rows` rows at position `pos0`, on a device whose driver reports `units`
/// compute units (where it does: the runtime's split-KV rule reads them).
#[allow(clippy::too_many_arguments)]
fn ubatch_dispatches(
    used: &[rocky_runtime::executor::UsedKernel],
    stats: &HashMap<(Workload, Schedule), KernelCost>,
    caps: &DeviceCaps,
    units: Option<u32>,
    ubatch: u32,
    pos0: usize,
    rows: usize,
    last: bool,
) -> Vec<Dispatch> {
    let mut out = Vec::new();
    for (label, w, s, _) in used {
        let tail = after_last_row(label, w);
        if tail && !last {
            continue;
        }
        let (full, r) = if tail { (1, 1) } else { (ubatch, rows as u32) };
        let actual = with_rows(w, full, r, (pos0 + rows) as u32);
        let Some(k) = stats.get(&(*w, *s)) else {
            continue;
        };
        let op = op_name(label);
        let threads = templates::instantiate(w, s, caps)
            .map(|kernel| kernel.meta.workgroup_size.iter().product::<u32>())
            .unwrap_or(1);
        // A split-KV attention runs the pieces the runtime picks for this step, not the
        // schedule's cap (the grid's z).
        let pieces = attention_pieces(w, s, r, pos0, units);
        let groups = templates::dispatch_grid(&actual, s)
            .map(|mut g| {
                if matches!(s, Schedule::Attention(a) if attention::split_kv::is_split(a)) {
                    g[2] = pieces;
                }
                g.iter().map(|&x| f64::from(x)).product::<f64>()
            })
            .unwrap_or(1.0);
        let model = CostModel::for_device(caps);
        let factors = loop_factors(&actual, s, &model, pos0, rows, pieces, k.unrolled);
        // The executor writes K, then V, with one KV-write kernel: two dispatches.
        let count = if matches!(w, Workload::KvWrite(_)) {
            2.0
        } else {
            1.0
        };
        let invocations = groups * f64::from(threads);
        let (bytes, combine) = match split_attention(&actual, s, pieces) {
            // The pieces write their partials instead of the output; the combine reads them
            // and writes the output.
            Some((partials, out)) => (
                bytes_of(&actual, pos0 + rows) - out + partials,
                Some(combine_dispatch(&op, &actual, partials, out)),
            ),
            None => (bytes_of(&actual, pos0 + rows), None),
        };
        // Each driver pipe scaled by the loop factor of the IR pipe doing its work: the
        // dispatch `rocky tune --static` ranks by, built by the same function.
        let base = match &k.driver {
            Some(v) => static_cost::driver_dispatch(v, &factors, invocations, bytes),
            None => Dispatch {
                op: String::new(),
                kernel: String::new(),
                count: 1.0,
                invocations,
                cycles: k.cycles,
                loop_factor: factors.bound,
                bytes,
                occupancy: None,
                spills: 0.0,
                flops: 0.0,
                pipes: None,
            },
        };
        out.push(Dispatch {
            op: op.clone(),
            kernel: kernel_name(w, s, caps),
            count,
            flops: actual.flops() as f64,
            ..base
        });
        out.extend(combine);
        // A GEMM split across the grid without the last group reducing: its reduce pass
        // reads the partial sums once and writes the output (memory and a dispatch).
        if let (Workload::Gemm(gw), Schedule::Gemm(gs)) = (&actual, s) {
            if gs.k_groups > 1 && !gs.last_group_reduces {
                let partials = 4.0 * templates::gemm::split_k::scratch_values(gw, gs) as f64;
                out.push(Dispatch {
                    op,
                    kernel: "gemm_split_k_reduce".into(),
                    count: 1.0,
                    invocations: f64::from(gw.m) * f64::from(gw.n),
                    cycles: 0.0,
                    loop_factor: 1.0,
                    bytes: partials + 4.0 * f64::from(gw.m) * f64::from(gw.n),
                    occupancy: None,
                    spills: 0.0,
                    flops: 0.0,
                    pipes: None,
                });
            }
        }
    }
    out
}

fn kernel_name(w: &Workload, s: &Schedule, caps: &DeviceCaps) -> String {
    templates::instantiate(w, s, caps)
        .map(|k| k.meta.name)
        .unwrap_or_else(|_| w.kind().to_string())
}

/// `w` (prepared at `full` rows) at `rows` rows, attention seeing `kv` keys. Rows scale every
/// row count (a per-head norm runs heads × rows rows).
fn with_rows(w: &Workload, full: u32, rows: u32, kv: u32) -> Workload {
    let scale = |m: &mut u32| {
        *m = if full > 0 && *m % full == 0 {
            *m / full * rows
        } else {
            rows
        }
    };
    let mut w = *w;
    match &mut w {
        Workload::Gemm(g) | Workload::Gemv(g) => scale(&mut g.m),
        Workload::RmsNorm(x) => scale(&mut x.m),
        Workload::RopeNeox(x) => scale(&mut x.m),
        Workload::SwiGlu(x) | Workload::GeGlu(x) | Workload::Add(x) | Workload::Scale(x) => {
            scale(&mut x.m)
        }
        Workload::Embedding(x) => scale(&mut x.m),
        Workload::KvWrite(x) => scale(&mut x.m),
        Workload::Hadamard(x) => scale(&mut x.m),
        Workload::Attention(a) => {
            scale(&mut a.m);
            a.max_kv = kv;
        }
    }
    w
}

/// How many times the loops repeat what the driver's static count sees once, per IR pipe: the
/// IR's dynamic counts over its static counts with `unrolled`'s loops at their trips (the
/// driver counts a loop it unrolled once per trip).
fn loop_factors(
    w: &Workload,
    s: &Schedule,
    model: &CostModel,
    pos0: usize,
    rows: usize,
    pieces: u32,
    unrolled: Unrolled,
) -> LoopFactors {
    let Some(module) = kernel_ir(w, s) else {
        return LoopFactors {
            arith: 1.0,
            ls: 1.0,
            bound: 1.0,
            ls_added: None,
        };
    };
    if let (Workload::Gemm(gw), Schedule::Gemm(gs)) = (w, s) {
        // As `rocky tune --static` takes them.
        return static_cost::ir_estimate(gw, gs, *model).factors_as_compiled(unrolled);
    }
    let once = static_cost::count_compiled(&module, unrolled, model).0;
    // The only loops with bounds read at run time are attention's key blocks: a workgroup of
    // `rows` query rows at the ubatch's middle sees about pos0 + rows / 2 keys.
    let dynamic = match (w, s) {
        (Workload::Attention(_), Schedule::Attention(a)) => {
            let keys = pos0 as f64 + (rows as f64 + f64::from(a.rows)) / 2.0;
            attention_block_trips(keys, a.kv_block, pieces)
        }
        _ => 1.0,
    };
    let all = static_cost::count(&module, Some(dynamic), model);
    LoopFactors::of(&once, &all, model).at_least(1.0)
}

pub use rocky_tuner::static_cost::bytes_of;

/// Pieces the runtime dispatches for the prepared workload `w` with `s` at `rows` rows after
/// `pos0` cached keys (`step_splits`, the executor's own rule): 1 where `s` does not split.
fn attention_pieces(w: &Workload, s: &Schedule, rows: u32, pos0: usize, units: Option<u32>) -> u32 {
    match (w, s) {
        (Workload::Attention(aw), Schedule::Attention(a)) => {
            step_splits(aw, a, rows, pos0 as u32, units).max(1)
        }
        _ => 1,
    }
}

/// Key-block trips per workgroup of an attention dispatch whose workgroups see `keys` keys,
/// shared among `pieces` (1: no split). A split kernel's piece covers whole blocks
/// (`split_kv::key_range`: c = ceil(ceil(n / pieces) / kv_block) · kv_block keys, only the
/// last non-empty piece with a partial block, pieces past n empty), so the pieces together run
/// ceil(keys / kv_block) trips, whatever their count: the mean per piece is that over the
/// pieces (a piece does not pay a whole block for its share).
fn attention_block_trips(keys: f64, kv_block: u32, pieces: u32) -> f64 {
    let blocks = (keys / f64::from(kv_block.max(1))).ceil().max(1.0);
    blocks / f64::from(pieces.max(1))
}

/// For a split-KV attention at `pieces` pieces merged by the combine kernel: the bytes of the
/// partials the pieces write (and the combine reads), and of the output (f32 m × q_width).
fn split_attention(w: &Workload, s: &Schedule, pieces: u32) -> Option<(f64, f64)> {
    let (Workload::Attention(aw), Schedule::Attention(a)) = (w, s) else {
        return None;
    };
    if pieces < 2 || a.fused_combine {
        return None;
    }
    let per_piece = f64::from(aw.m) * (f64::from(aw.q_width()) + 4.0 * f64::from(aw.n_heads));
    Some((
        4.0 * f64::from(pieces) * per_piece,
        4.0 * f64::from(aw.m) * f64::from(aw.q_width()),
    ))
}

/// The combine dispatch after a split attention: its memory (the partials read, the output
/// written) only, as the split-K reduce pass (no statistics are taken for it).
fn combine_dispatch(op: &str, w: &Workload, partials: f64, out: f64) -> Dispatch {
    let threads = match w {
        Workload::Attention(aw) => {
            attention::combine::combine_grid(aw, aw.m)
                .iter()
                .map(|&x| f64::from(x))
                .product::<f64>()
                * f64::from(attention::combine::COMBINE_THREADS)
        }
        _ => 0.0,
    };
    Dispatch {
        op: op.to_string(),
        kernel: "attention_combine".into(),
        count: 1.0,
        invocations: threads,
        cycles: 0.0,
        loop_factor: 1.0,
        bytes: partials + out,
        occupancy: None,
        spills: 0.0,
        flops: 0.0,
        pipes: None,
    }
}

/// "blk.12.attn_q" → "attn_q".
fn op_name(label: &str) -> String {
    match label.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, op)| op).to_string(),
        None => label.to_string(),
    }
}

/// Identical dispatches (same op, kernel and numbers) as one with a count.
fn merge(ds: Vec<Dispatch>) -> Vec<Dispatch> {
    let mut out: Vec<Dispatch> = Vec::new();
    for d in ds {
        match out.iter_mut().find(|o| {
            o.op == d.op
                && o.kernel == d.kernel
                && o.invocations == d.invocations
                && o.loop_factor == d.loop_factor
                && o.bytes == d.bytes
                && o.cycles == d.cycles
                && o.pipes == d.pipes
        }) {
            Some(o) => o.count += d.count,
            None => out.push(d),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_counts_read_from_mali_names() {
        assert_eq!(cores_from_name("Mali-G610 MC4"), Some(4));
        assert_eq!(cores_from_name("Mali-G610 MC4 (panvk)"), Some(4));
        assert_eq!(cores_from_name("Mali-G610"), None);
        assert_eq!(cores_from_name("llvmpipe (LLVM 15.0.6, 256 bits)"), None);
    }

    /// `rocky tune --static` ranks a GEMM candidate by the time `rocky predict` gives its
    /// dispatch: the same statistics record costs the same through both paths, and that time
    /// is the closed form of the per-pipe model at the factors the IR counts.
    #[test]
    fn the_static_ranking_scores_a_gemm_as_predict_costs_its_dispatch() {
        use rocky_compiler::templates::gemm::GemmWorkload;
        use rocky_compiler::{ActType, WeightFormat, WeightLayout};
        use rocky_runtime::executor::ScheduleOrigin;
        use std::collections::BTreeMap;
        let caps = DeviceCaps::mali_g610();
        // The 3B's attn_q at a 64-row ubatch, with panvk's default schedule.
        let gw = GemmWorkload {
            m: 64,
            n: 2048,
            k: 2048,
            act: ActType::F32,
            weight: WeightFormat::Q4K,
            layout: WeightLayout::Gguf,
            bias: true,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        };
        let w = Workload::Gemm(gw);
        let s = templates::default_schedule(&w, &caps);
        let Schedule::Gemm(gs) = s else {
            panic!("a GEMM schedule")
        };
        let model = CostModel::for_device(&caps);
        let estimate = static_cost::ir_estimate(&gw, &gs, model);
        // Which reading of the loops a driver that kept 1 loop (the K loop) compiled.
        let unrolled = estimate.reading(Some(1.0));
        let stats = BTreeMap::from([
            ("Cycles".to_string(), 87.0),
            ("FMA".to_string(), 40.0),
            ("CVT".to_string(), 6.0),
            ("SFU".to_string(), 30.0),
            ("Load/store".to_string(), 87.0),
            ("Loops".to_string(), 1.0),
            ("Threads".to_string(), 1.0),
            ("Registers used".to_string(), 60.0),
        ]);
        let v = ValhallStats::from_flat(&stats).unwrap();
        let pm = static_cost::PredictModel::g610_builtin(None);
        // The ranking's score.
        let (ranked_s, source) = static_cost::score(&estimate, Some(&stats), &pm);
        assert_eq!(source, static_cost::ScoreSource::DriverCycles);
        // `rocky predict`'s dispatch of the same kernel in a 64-row ubatch at position 0.
        let used = vec![("blk.0.attn_q".to_string(), w, s, ScheduleOrigin::Default)];
        let kc = KernelCost {
            cycles: v.cycles,
            driver: Some(v),
            from_driver: true,
            unrolled,
        };
        let costs = HashMap::from([((w, s), kc)]);
        let ds = ubatch_dispatches(&used, &costs, &caps, Some(4), 64, 0, 64, false);
        assert_eq!(ds.len(), 1);
        let p = rocky_predict::predict(&pm.target, &pm.constants, &ds, 0.0, 64.0);
        assert!(
            (p.total_s / ranked_s - 1.0).abs() < 1e-12,
            "predict {} s, ranking {ranked_s} s",
            p.total_s
        );
        // The closed form over the IR's own counts: invocations x max(FMA, CVT, SFU x arith
        // factor, load/store x its factor / ls_rate) / 4 cores / 1 GHz / efficiency, or the
        // bytes at 27 GB/s.
        let once = match unrolled {
            Unrolled::Requested => estimate.compiled[0].0,
            Unrolled::Constant => estimate.compiled[1].0,
            Unrolled::Nothing => estimate.static_once,
        };
        let fa = estimate.dynamic.arith / once.arith;
        let fl = estimate.dynamic.ls / once.ls;
        let busiest = (40.0 * fa)
            .max(30.0 * fa)
            .max(87.0 * fl / rocky_predict::SEED_LS_RATE);
        let compute = estimate.invocations * busiest / 4.0 / 1e9 / (470.0 / 512.0);
        let memory = (2048.0 * 2048.0 / 256.0 * 144.0   // Q4_K: 144 bytes per 256 weights
            + 64.0 * 2048.0 * 4.0 * 2.0                 // X in, Y out, f32
            + 4.0 * 2048.0)                             // bias
            / 27.0e9;
        let expected = compute.max(memory);
        assert!(
            (ranked_s / expected - 1.0).abs() < 1e-12,
            "ranking {ranked_s} s, closed form {expected} s (compute {compute}, memory {memory})"
        );
    }

    #[test]
    fn a_split_decode_attention_costs_the_pieces_the_runtime_dispatches() {
        use rocky_compiler::templates::attention::AttentionWorkload;
        use rocky_runtime::executor::ScheduleOrigin;
        use std::collections::BTreeMap;
        let caps = DeviceCaps::mali_g610();
        // The 3B's decode attention with panvk's default (split) schedule, one step after 516
        // cached keys: 517 keys.
        let aw = AttentionWorkload {
            m: 1,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: 128,
            max_kv: 1024,
            window: 0,
            kv: Default::default(),
        };
        let w = Workload::Attention(aw);
        let s = templates::default_schedule(&w, &caps);
        let Schedule::Attention(a) = s else {
            panic!("an attention schedule")
        };
        assert_eq!(a.kv_splits, 32);
        assert_eq!(a.kv_block, 64);
        // The runtime's rule on 4 cores: min(ceil(517 / (4 blocks x 64)), ceil(4 x 2 / 2
        // workgroups)) = min(3, 4) pieces; they run ceil(517 / 64) = 9 key blocks in all (the
        // kernel's own trips: compiler/tests/attention_numerics.rs
        // `split_pieces_run_only_the_key_blocks_they_own`), 3 a piece. The old charge was one
        // block on each of the cap's 32 pieces.
        assert_eq!(attention_pieces(&w, &s, 1, 516, Some(4)), 3);
        assert_eq!(attention_block_trips(517.0, 64, 3), 3.0);
        assert_eq!(attention_block_trips(517.0, 64, 32), 9.0 / 32.0);
        let stats = BTreeMap::from([
            ("Cycles".to_string(), 50.0),
            ("FMA".to_string(), 20.0),
            ("CVT".to_string(), 2.0),
            ("SFU".to_string(), 6.0),
            ("Load/store".to_string(), 50.0),
            ("Loops".to_string(), 0.0),
            ("Threads".to_string(), 1.0),
            ("Registers used".to_string(), 40.0),
        ]);
        let v = ValhallStats::from_flat(&stats).unwrap();
        let kc = KernelCost {
            cycles: v.cycles,
            driver: Some(v),
            from_driver: true,
            unrolled: Unrolled::Nothing,
        };
        let used = vec![("blk.0.attn".to_string(), w, s, ScheduleOrigin::Default)];
        let costs = HashMap::from([((w, s), kc)]);
        let ds = ubatch_dispatches(&used, &costs, &caps, Some(4), 1, 516, 1, true);
        assert_eq!(ds.len(), 2, "{ds:?}");
        // Grid [1 row block, 2 kv heads, 3 pieces] of the kernel's workgroup.
        let threads = templates::instantiate(&w, &s, &caps)
            .unwrap()
            .meta
            .workgroup_size
            .iter()
            .product::<u32>();
        let invocations = 6.0 * f64::from(threads);
        // Q read (f32), the partials written (3 pieces x (2048 values + 16 heads' (max, sum,
        // 0, 0)), f32), K and V of 517 keys (f16, 2 kv heads x 128).
        let bytes = 4.0 * 2048.0 + 4.0 * 3.0 * (2048.0 + 64.0) + 2.0 * 2.0 * 517.0 * 256.0;
        let module = kernel_ir(&w, &s).unwrap();
        let model = CostModel::for_device(&caps);
        let once = static_cost::count_compiled(&module, Unrolled::Nothing, &model).0;
        let all = static_cost::count(&module, Some(3.0), &model);
        let factors = LoopFactors::of(&once, &all, &model).at_least(1.0);
        let expected = static_cost::driver_dispatch(&v, &factors, invocations, bytes);
        assert_eq!(ds[0].invocations, invocations);
        assert_eq!(ds[0].bytes, bytes);
        assert_eq!(ds[0].pipes, expected.pipes);
        assert_eq!(ds[0].loop_factor, expected.loop_factor);
        // The combine: reads the partials, writes the f32 output; memory only.
        assert_eq!(ds[1].kernel, "attention_combine");
        assert_eq!(ds[1].bytes, 4.0 * 3.0 * 2112.0 + 4.0 * 2048.0);
        assert_eq!(ds[1].cycles, 0.0);
    }

    #[test]
    fn op_names_drop_the_layer() {
        assert_eq!(op_name("blk.12.attn_q"), "attn_q");
        assert_eq!(op_name("output"), "output");
    }
}
