//! `rocky kernel`: one kernel, built for a workload and a schedule on a device (or a device
//! preset), then inspected (`--dump-spirv`, `--dump-ir`, `--list-space`) or run on seeded
//! random inputs, checked against the compiler's CPU reference and timed with GPU timestamps.
//!
//! Running is implemented for GEMM; its GPU side (buffers, N-slices, dispatch, timing and the
//! column-sampled check) is [`gemm_gpu`], shared with `rocky bench-gemm`.

pub(crate) mod gemm_gpu;
mod stats;
pub(crate) use stats::number as stats_number;

use crate::error::{CliError, CmdResult};
use rocky_compiler::templates::gemm::{self as gemm_template, GemmWorkload};
use rocky_compiler::{
    default_schedule, instantiate, search_space, ActType, CompiledKernel, DeviceCaps, Refusal,
    Schedule, WeightFormat, Workload,
};
use rocky_runtime::executor::{DefaultSchedules, ForcedMath, ScheduleSource};
use rocky_runtime::{device_caps, Context, DeviceSelector, PipelineCache};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  rocky kernel --m 512 --n 2048 --k 2048 --weight q4_k
  rocky kernel --m 512 --n 2048 --k 2048 --weight q6_k --schedule \
'{\"gemm\":{\"bm\":64,\"bn\":64,\"bk\":32,\"tm\":4,\"tn\":4,\"split_k\":1,\"vector_width\":1,\
\"stage_a\":true,\"stage_b\":true,\"accumulate\":\"f32\",\"math\":\"fma_f32\"}}'
  rocky kernel --workload '{\"gemm\":{\"m\":7,\"n\":896,\"k\":896,\"act\":\"f16\",\"weight\":\"q8_0\",\"bias\":true}}' --json
  rocky kernel --m 64 --n 2048 --k 2048 --list-space --verbose
  rocky kernel --m 512 --n 11008 --k 2048 --weight q4_k --stats
  rocky kernel --caps mali-g610 --m 512 --n 2048 --k 2048 --dump-spirv gemm.spv
  rocky kernel --m 512 --n 11008 --k 2048 --weight q4_k --math f16 --stats")]
pub struct Args {
    /// The workload as JSON, e.g. '{"gemm":{"m":512,"n":2048,"k":2048,"act":"f32","weight":"q4_k","bias":false}}'.
    #[arg(long, conflicts_with_all = ["m", "n", "k", "weight", "act", "bias"])]
    pub workload: Option<String>,
    /// GEMM rows (tokens): Y[m×n] = X[m×k] · Wᵀ.
    #[arg(long)]
    pub m: Option<u32>,
    /// GEMM output columns (rows of the weight tensor).
    #[arg(long)]
    pub n: Option<u32>,
    /// GEMM depth (a multiple of the weight format's block).
    #[arg(long)]
    pub k: Option<u32>,
    /// GEMM weight format: f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q4_k, q5_k, q6_k,
    /// iq4_nl or iq4_xs.
    #[arg(long)]
    pub weight: Option<String>,
    /// GEMM weight layout on the device: gguf (the file's blocks), aligned (repacked into
    /// 16-byte-aligned groups; Q8_0, Q5_0, Q6_K) or auto (the device's default).
    #[arg(long, default_value = "auto", conflicts_with = "workload")]
    pub layout: String,
    /// GEMM activation type: f32 or f16.
    #[arg(long)]
    pub act: Option<String>,
    /// GEMM with an f32 bias.
    #[arg(long)]
    pub bias: bool,
    /// The schedule as JSON (`{"gemm":{...}}`); default: the device's default schedule.
    #[arg(long)]
    pub schedule: Option<String>,
    /// The schedule a forced math family takes, as `prefill --math` picks it: f32, f16 or
    /// int8 (the device's default where it is of the family, else a tile built for the family
    /// that fits the device); `auto`: the device's default schedule.
    #[arg(long, value_enum, default_value = "auto", conflicts_with = "schedule")]
    pub math: super::gpu::MathArg,
    /// Vulkan device: index or part of its name (see `rocky devices`); default: the best GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Compile for a device preset instead of a device (nothing is run): desktop, mali-g610
    /// or baseline.
    #[arg(long, value_enum, conflicts_with = "run")]
    pub caps: Option<CapsPreset>,
    /// Write the SPIR-V module (binary) to this file.
    #[arg(long, value_name = "FILE")]
    pub dump_spirv: Option<PathBuf>,
    /// Print the kernel's IR (GEMM only).
    #[arg(long)]
    pub dump_ir: bool,
    /// Print the size of the workload's search space on the device.
    #[arg(long)]
    pub list_space: bool,
    /// With --list-space: print every schedule too (one JSON line each).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Compile the kernel's pipeline on the device and print the driver's statistics of it
    /// (registers, spills, instruction and cycle counts: VK_KHR_pipeline_executable_properties).
    /// Nothing is run, checked or timed (unless --run is given too).
    #[arg(long, conflicts_with = "caps")]
    pub stats: bool,
    /// Run, check and time the kernel even when an inspection flag (--dump-*, --list-space,
    /// --stats) is given (without one, it always runs).
    #[arg(long)]
    pub run: bool,
    /// Timed runs after the checked run (0: check only).
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Which outputs to compare with the CPU reference: all, a seeded sample of columns, or
    /// none; auto checks all up to 2^31 multiply-adds and samples above.
    #[arg(long, value_enum, default_value_t = CheckMode::Auto)]
    pub check: CheckMode,
    /// Columns checked when sampling.
    #[arg(long, default_value_t = 256)]
    pub check_columns: u32,
    /// Seed of the random inputs and of the sampled columns.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Device presets of the compiler, for compiling without the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CapsPreset {
    /// A desktop GPU with every feature.
    Desktop,
    /// Mali-G610 under panvk.
    #[value(name = "mali-g610")]
    MaliG610,
    /// Vulkan 1.1 without optional features.
    Baseline,
}

impl CapsPreset {
    fn caps(self) -> DeviceCaps {
        match self {
            CapsPreset::Desktop => DeviceCaps::desktop_all_features(),
            CapsPreset::MaliG610 => DeviceCaps::mali_g610(),
            CapsPreset::Baseline => DeviceCaps::baseline(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckMode {
    Auto,
    Full,
    Sample,
    None,
}

/// GEMMs up to this many multiply-adds are checked in full by `--check auto`.
const AUTO_FULL_CHECK_MACS: u64 = 1 << 31;

pub fn run(args: Args) -> CmdResult {
    let target = Target::open(&args)?;
    let caps = &target.caps;
    let workload = parse_workload(&args, caps)?;
    let schedule = match &args.schedule {
        Some(text) => parse_schedule(text)?,
        None => match args.math.family() {
            None => default_schedule(&workload, caps),
            Some(family) => {
                family.check_device(caps).map_err(CliError::usage)?;
                let forced = ForcedMath {
                    inner: &DefaultSchedules,
                    family: Some(family),
                };
                forced.schedule(&workload, caps).0
            }
        },
    };
    let mut report = Report::new(&workload, &schedule, &target);
    if let (Some(family), Schedule::Gemm(g)) = (args.math.family(), &schedule) {
        if !family.arithmetic().holds(g) {
            let name = format!("{family:?}").to_lowercase();
            report.notes.push(format!(
                "--math {name} does not run this workload (int8 needs quantized weights): \
                 the default schedule"
            ));
        }
    }

    let inspecting = args.dump_spirv.is_some() || args.dump_ir || args.list_space || args.stats;
    if args.list_space {
        report.space = Some(list_space(&workload, caps, args.verbose));
    }
    let kernel = instantiate(&workload, &schedule, caps).map_err(refused)?;
    report.kernel = Some(describe_kernel(&kernel));
    if let Some(path) = &args.dump_spirv {
        let bytes: Vec<u8> = kernel.spirv.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| {
            CliError::output(format!(
                "cannot write the SPIR-V to {}: {e}",
                path.display()
            ))
        })?;
        report.notes.push(format!(
            "SPIR-V written to {} ({} words)",
            path.display(),
            kernel.spirv.len()
        ));
    }
    if args.dump_ir {
        report.ir = Some(dump_ir(&workload, &schedule)?);
    }
    if args.stats {
        let ctx = target
            .context
            .as_ref()
            .expect("--stats conflicts with --caps");
        report.stats = Some(stats::of_kernel(ctx, &kernel)?);
    }
    if target.context.is_some() && (args.run || !inspecting) {
        report.run = Some(run_kernel(&args, &target, &workload, &schedule, &kernel)?);
    }
    report.print(args.json)
}

/// The device the kernel is built for: an open device, or a preset with no device.
struct Target {
    caps: DeviceCaps,
    context: Option<Context>,
    description: String,
}

impl Target {
    fn open(args: &Args) -> Result<Target, CliError> {
        if let Some(preset) = args.caps {
            return Ok(Target {
                caps: preset.caps(),
                context: None,
                description: format!("preset {preset:?} (no device: nothing is run)"),
            });
        }
        let selector: DeviceSelector = args.device.parse().unwrap_or_default();
        let ctx = Context::new(&selector).map_err(|e| CliError::device(e.to_string()))?;
        let info = ctx.info();
        let description = format!(
            "{} [{}, {}]",
            info.name,
            info.device_type.as_str(),
            info.driver.name
        );
        Ok(Target {
            caps: device_caps(info, ctx.caps()),
            context: Some(ctx),
            description,
        })
    }
}

fn refused(r: Refusal) -> CliError {
    CliError::usage(format!("the kernel is refused: {r}"))
}

/// A lower-case enum value (`"q4_k"`, `"f16"`) through its serde name.
fn parse_name<T: serde::de::DeserializeOwned>(
    flag: &str,
    text: &str,
    choices: &str,
) -> Result<T, CliError> {
    serde_json::from_value(Value::String(text.trim().to_lowercase())).map_err(|_| {
        CliError::usage(format!(
            "--{flag} {text} is not known: choose one of {choices}"
        ))
    })
}

fn parse_workload(args: &Args, caps: &DeviceCaps) -> Result<Workload, CliError> {
    if let Some(text) = &args.workload {
        return serde_json::from_str(text).map_err(|e| {
            CliError::usage(format!(
                "--workload is not a valid workload ({e}); a GEMM looks like \
                 '{{\"gemm\":{{\"m\":512,\"n\":2048,\"k\":2048,\"act\":\"f32\",\"weight\":\"q4_k\",\"bias\":false}}}}'"
            ))
        });
    }
    let (Some(m), Some(n), Some(k)) = (args.m, args.n, args.k) else {
        return Err(CliError::usage(
            "give the workload: --m, --n and --k (with --weight, --act, --bias) for a GEMM, \
             or --workload JSON",
        ));
    };
    let weight: WeightFormat = parse_name(
        "weight",
        args.weight.as_deref().unwrap_or("q4_k"),
        "f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q4_k, q5_k, q6_k, iq4_nl, iq4_xs",
    )?;
    let act: ActType = parse_name("act", args.act.as_deref().unwrap_or("f32"), "f32, f16")?;
    let layout = match args.layout.as_str() {
        "auto" => rocky_compiler::templates::gemm::default_layout(weight, caps),
        name => name.parse().map_err(CliError::usage)?,
    };
    Ok(Workload::Gemm(GemmWorkload {
        m,
        n,
        k,
        act,
        weight,
        layout,
        bias: args.bias,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    }))
}

fn parse_schedule(text: &str) -> Result<Schedule, CliError> {
    serde_json::from_str(text).map_err(|e| {
        CliError::usage(format!(
            "--schedule is not a valid schedule ({e}); list valid ones with --list-space --verbose"
        ))
    })
}

/// The search space: its size, per math mode for GEMM, and optionally every schedule.
fn list_space(workload: &Workload, caps: &DeviceCaps, verbose: bool) -> Value {
    let space = search_space(workload, caps);
    let mut by_math: BTreeMap<String, usize> = BTreeMap::new();
    for s in &space {
        let key = match s {
            Schedule::Gemm(g) => gemm_gpu::math_name(g.math).to_string(),
            other => other.kind().to_string(),
        };
        *by_math.entry(key).or_default() += 1;
    }
    let mut v = json!({ "count": space.len(), "by_math": by_math });
    if verbose {
        v["schedules"] = serde_json::to_value(&space).unwrap_or(Value::Null);
    }
    v
}

fn describe_kernel(k: &CompiledKernel) -> Value {
    json!({
        "name": k.meta.name,
        "workgroup_size": k.meta.workgroup_size,
        "shared_bytes": k.meta.shared_bytes,
        "push_constant_bytes": k.meta.push_constant_bytes,
        "spirv_words": k.spirv.len(),
        "spirv_version": format!("{}.{}", k.meta.spirv_version.0, k.meta.spirv_version.1),
        "required": k.meta.required,
        "bindings": k.meta.bindings.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
    })
}

fn dump_ir(workload: &Workload, schedule: &Schedule) -> Result<String, CliError> {
    match (workload, schedule) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => {
            Ok(format!("{:#?}", gemm_template::kernel_ir(w, s)))
        }
        _ => Err(CliError::usage(format!(
            "--dump-ir is implemented for gemm workloads, not {}: use --dump-spirv and spirv-dis",
            workload.kind()
        ))),
    }
}

fn run_kernel(
    args: &Args,
    target: &Target,
    workload: &Workload,
    schedule: &Schedule,
    kernel: &CompiledKernel,
) -> Result<Value, CliError> {
    let ctx = target.context.as_ref().expect("a device is open");
    // A GEMV kernel runs in the GEMM harness and is checked as its arithmetic twin (the GEMM
    // schedule with the same math and tolerance), as the tuner's GEMV trials are.
    let (w, s, gemv) = match (workload, schedule) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => (w, *s, None),
        (Workload::Gemv(w), Schedule::Gemv(s)) => (
            w,
            rocky_compiler::templates::gemv::reference::arithmetic_twin(s),
            Some(s),
        ),
        _ => {
            return Err(CliError::usage(format!(
                "running and checking is implemented for gemm and gemv workloads, not {}: \
                 inspect it with --dump-spirv or --list-space",
                workload.kind()
            )))
        }
    };
    let s = &s;
    let cache = PipelineCache::open_default(ctx).ok();
    let inputs = gemm_gpu::GemmInputs::random(w, args.seed);
    let gpu = match gemv {
        Some(g) => gemm_gpu::GemmOnGpu::for_gemv(
            ctx,
            cache.as_ref(),
            kernel,
            w,
            g,
            &target.caps,
            &inputs,
            None,
        )?,
        None => gemm_gpu::GemmOnGpu::new(ctx, cache.as_ref(), kernel, w, s, &target.caps, &inputs)?,
    };
    let got = gpu.run_once(ctx)?;
    let mut result = json!({ "slices": gpu.slices.len() });
    // The command-buffer budget's estimate of the driver memory one dispatch takes (panvk's
    // shared-memory allocation), to compare with the driver's own (PANVK_OOM_TRACE=1).
    let budget = rocky_runtime::CommandBudget::for_device(ctx.info());
    if budget.wls.is_some() {
        let estimate = gpu
            .slices
            .iter()
            .map(|slice| {
                let grid = match gemv {
                    Some(g) => rocky_compiler::templates::gemv::dispatch_grid_for(slice.n, g),
                    None => rocky_compiler::templates::gemm::dispatch_grid_for(w.m, slice.n, s),
                };
                budget.dispatch_bytes(kernel.meta.shared_bytes, grid)
            })
            .max()
            .unwrap_or(0);
        result["driver_memory_estimate_bytes"] = json!(estimate);
    }
    let macs = u64::from(w.m) * u64::from(w.n) * u64::from(w.k);
    let cols = match args.check {
        CheckMode::None => None,
        CheckMode::Full => Some(gemm_gpu::all_columns(w)),
        CheckMode::Auto if macs <= AUTO_FULL_CHECK_MACS => Some(gemm_gpu::all_columns(w)),
        CheckMode::Auto | CheckMode::Sample => Some(gemm_gpu::sampled_columns(
            w,
            &gpu.slices,
            args.check_columns,
            args.seed,
        )),
    };
    if let Some(cols) = cols {
        let check = gemm_gpu::check(w, s, &inputs, &got, &cols).map_err(|e| {
            CliError::internal(format!(
                "the kernel's output differs from the CPU reference: {e}\nThis is a compiler \
                 bug: please report it with the workload and schedule above."
            ))
        })?;
        result["check"] = serde_json::to_value(&check).unwrap_or(Value::Null);
    }
    if args.runs > 0 {
        let times = gpu.time(ctx, args.runs)?;
        result["timing"] =
            serde_json::to_value(gemm_gpu::Timing::of(&times, w.flops())).unwrap_or(Value::Null);
    }
    if let Some(cache) = &cache {
        // A cache that cannot be saved only costs compile time next run.
        if let Err(e) = cache.save() {
            eprintln!("note: the pipeline cache was not saved: {e}");
        }
    }
    Ok(result)
}

/// What the command found, printed as text or JSON at the end.
struct Report {
    workload: Workload,
    schedule: Schedule,
    device: String,
    space: Option<Value>,
    kernel: Option<Value>,
    ir: Option<String>,
    run: Option<Value>,
    stats: Option<rocky_runtime::PipelineStatistics>,
    notes: Vec<String>,
}

impl Report {
    fn new(workload: &Workload, schedule: &Schedule, target: &Target) -> Report {
        Report {
            workload: *workload,
            schedule: *schedule,
            device: target.description.clone(),
            space: None,
            kernel: None,
            ir: None,
            run: None,
            stats: None,
            notes: Vec::new(),
        }
    }

    fn print(&self, as_json: bool) -> CmdResult {
        let text = if as_json {
            let v = json!({
                "workload": self.workload,
                "schedule": self.schedule,
                "device": self.device,
                "space": self.space,
                "kernel": self.kernel,
                "ir": self.ir,
                "run": self.run,
                "driver_statistics": self.stats,
                "notes": self.notes,
            });
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        } else {
            self.text()
        };
        write_stdout(&text)
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |label: &str, value: String| {
            out.push_str(&format!("{label:<10}{value}\n"));
        };
        line("workload", to_json(&self.workload));
        line("schedule", to_json(&self.schedule));
        line("device", self.device.clone());
        if let Some(space) = &self.space {
            line(
                "space",
                format!(
                    "{} schedules instantiate on this device ({})",
                    space["count"],
                    space["by_math"]
                        .as_object()
                        .map(|m| m
                            .iter()
                            .map(|(k, v)| format!("{k}: {v}"))
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                ),
            );
            if let Some(list) = space["schedules"].as_array() {
                for s in list {
                    line("", s.to_string());
                }
            }
        }
        if let Some(k) = &self.kernel {
            line(
                "kernel",
                format!(
                    "{}: workgroup {}, {} shared bytes, {} push bytes, SPIR-V {}, {} words",
                    k["name"].as_str().unwrap_or("?"),
                    k["workgroup_size"],
                    k["shared_bytes"],
                    k["push_constant_bytes"],
                    k["spirv_version"].as_str().unwrap_or("?"),
                    k["spirv_words"]
                ),
            );
        }
        for n in &self.notes {
            line("", n.clone());
        }
        if let Some(stats) = &self.stats {
            for l in stats::text(stats) {
                line("stats", l);
            }
        }
        if let Some(run) = &self.run {
            line("slices", format!("{} dispatch(es)", run["slices"]));
            if let Some(bytes) = run.get("driver_memory_estimate_bytes") {
                line(
                    "driver",
                    format!("{bytes} B of shared memory per dispatch (the budget's estimate)"),
                );
            }
            match run.get("check") {
                Some(c) => line(
                    "check",
                    format!(
                        "passed: {} of {} columns ({} outputs) within tolerance; max error {:.4} \
                         of allowed (relative tolerance {})",
                        c["columns_checked"],
                        c["columns"],
                        c["outputs_checked"],
                        c["max_error_ratio"].as_f64().unwrap_or(f64::NAN),
                        c["relative_tolerance"]
                    ),
                ),
                None => line("check", "skipped (--check none)".into()),
            }
            if let Some(t) = run.get("timing") {
                line(
                    "time",
                    format!(
                        "{} runs: median {:.3} ms, min {:.3} ms, max {:.3} ms; {:.1} GFLOP/s",
                        t["runs"],
                        t["median_ms"].as_f64().unwrap_or(f64::NAN),
                        t["min_ms"].as_f64().unwrap_or(f64::NAN),
                        t["max_ms"].as_f64().unwrap_or(f64::NAN),
                        t["gflops"].as_f64().unwrap_or(f64::NAN)
                    ),
                );
            }
        }
        if let Some(ir) = &self.ir {
            out.push_str(ir);
            out.push('\n');
        }
        out
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> CmdResult {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::output(format!(
            "cannot write to standard output: {e}"
        ))),
        _ => Ok(()),
    }
}
