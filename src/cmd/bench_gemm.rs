//! `rocky bench-gemm`: the prefill GEMMs of Qwen2.5-3B (M tokens × the four distinct
//! projection shapes) with Q4_K and Q6_K weights and f32 activations, each with its default
//! schedule, next to the device's FMA ceiling measured by the peak kernel.
//!
//! Two schedules per GEMM: the default schedule restricted to f32 math (the device's default
//! with f16 and int8-dot features masked off), and the device's own default when it differs
//! (packed f16 on devices with slow shared memory); with `--all-math`, also the default's tiles
//! with every other math mode the device has. Every GEMM is checked against the CPU
//! reference on a seeded sample of columns before it is timed: a fast wrong kernel is no
//! result. With `--db`, the schedules `rocky tune` stored for these shapes are timed too, each
//! on the exact workload it was tuned for (the residual add or the fused gate/up SwiGLU in its
//! epilogue, as the prefill runs it): the tuned figures against the same ceiling.

use super::kernel::gemm_gpu::{self, GemmInputs, GemmOnGpu, Timing};
use super::kernel::write_stdout;
use crate::error::{CliError, CmdResult};
use rocky_compiler::templates::gemm::{
    default_schedule, Epilogue, GemmSchedule, GemmWorkload, Math, Precision,
};
use rocky_compiler::templates::peak::{self, PeakConfig, PeakPrecision};
use rocky_compiler::{ActType, DeviceCaps, WeightFormat};
use rocky_runtime::{
    device_caps, time_dispatches, Buffer, ComputePipeline, Context, DeviceSelector, PipelineCache,
};
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  rocky bench-gemm
  rocky bench-gemm --device 0 --m 512 --runs 20 --md
  rocky bench-gemm --quick        (lavapipe and other slow devices)")]
pub struct Args {
    /// Vulkan device: index or part of its name (see `rocky devices`); default: the best GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Rows (prompt tokens per ubatch); default 512, or 16 with --quick.
    #[arg(long)]
    pub m: Option<u32>,
    /// Timed runs per GEMM (after one checked warm-up run); default 10, or 1 with --quick.
    #[arg(long)]
    pub runs: Option<u32>,
    /// For slow devices (CPU implementations): M = 16, one timed run, a short peak run.
    #[arg(long)]
    pub quick: bool,
    /// Output columns compared with the CPU reference per GEMM.
    #[arg(long, default_value_t = 32)]
    pub check_columns: u32,
    /// Also time the default schedule's tiles with every other math mode the device has
    /// (packed f16, int8 dot): rows marked `*`.
    #[arg(long)]
    pub all_math: bool,
    /// Weight layout on the device: auto (the device's default), gguf, or aligned (for the
    /// formats that have it; the others stay gguf).
    #[arg(long, default_value = "auto")]
    pub layout: String,
    /// Also time the tuned schedules this tuning database holds for these shapes on this
    /// device (rows `tuned`, each on the workload it was tuned for, epilogue included).
    #[arg(long)]
    pub db: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long, conflicts_with = "md")]
    pub json: bool,
    /// Print a Markdown table.
    #[arg(long)]
    pub md: bool,
}

/// (N, K) of the distinct GEMMs of a Qwen2.5-3B layer, with how often each runs per layer:
/// q and o (2048×2048), k and v (256×2048), gate and up (11008×2048), down (2048×11008).
const QWEN25_3B: [(u32, u32, u32, &str); 4] = [
    (2048, 2048, 2, "q, o"),
    (256, 2048, 2, "k, v"),
    (11008, 2048, 2, "gate, up"),
    (2048, 11008, 1, "down"),
];
const QWEN25_3B_LAYERS: u32 = 36;
const FORMATS: [WeightFormat; 2] = [WeightFormat::Q4K, WeightFormat::Q6K];

#[derive(Clone, Debug, Serialize)]
struct Row {
    m: u32,
    n: u32,
    k: u32,
    uses: &'static str,
    weight: String,
    /// "f32" (default schedule with f32 math), "default" (the device's default), or "f16*" /
    /// "int8*" (the default's tiles with that math, `--all-math`).
    variant: &'static str,
    math: &'static str,
    schedule: GemmSchedule,
    summary: String,
    timing: Timing,
    /// GFLOP/s as a percentage of the peak of the schedule's math, when measured.
    percent_of_peak: Option<f64>,
    max_error_ratio: f64,
    /// The driver's statistics of the pipeline (name → value), where it reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    driver_stats: Option<std::collections::BTreeMap<String, f64>>,
}

#[derive(Clone, Debug, Serialize)]
struct Peak {
    precision: &'static str,
    gflops: f64,
    invocations: u64,
    iterations: u32,
    median_ms: f64,
}

#[derive(Serialize)]
struct Bench {
    device: String,
    m: u32,
    runs: u32,
    peaks: Vec<Peak>,
    notes: Vec<String>,
    rows: Vec<Row>,
}

pub fn run(args: Args) -> CmdResult {
    let started = Instant::now();
    let m = args.m.unwrap_or(if args.quick { 16 } else { 512 });
    let runs = args.runs.unwrap_or(if args.quick { 1 } else { 10 });
    if m == 0 || runs == 0 {
        return Err(CliError::usage("--m and --runs must be at least 1"));
    }
    let selector: DeviceSelector = args.device.parse().unwrap_or_default();
    let ctx = Context::new(&selector).map_err(|e| CliError::device(e.to_string()))?;
    let caps = device_caps(ctx.info(), ctx.caps());
    let info = ctx.info();
    let mut bench = Bench {
        device: format!(
            "{} [{}, {}]",
            info.name,
            info.device_type.as_str(),
            info.driver.name
        ),
        m,
        runs,
        peaks: Vec::new(),
        notes: Vec::new(),
        rows: Vec::new(),
    };
    if info.is_cpu {
        bench.notes.push(
            "a CPU implementation: these are not GPU timings (use --quick on such devices)".into(),
        );
    }
    let cache = PipelineCache::open_default(&ctx).ok();
    let tuned = match &args.db {
        Some(path) => {
            if !path.exists() {
                return Err(CliError::usage(format!(
                    "--db {}: no tuning database there (run `rocky tune` first)",
                    path.display()
                )));
            }
            let db = rocky_tuning_db::TuningDb::open(path).map_err(super::gpu::db_error)?;
            rocky_tuner::DbSchedules::load(&db, &rocky_tuner::fingerprint(ctx.info()))
                .map_err(super::gpu::db_error)?
                .gemm_schedules()
        }
        None => Vec::new(),
    };

    let peak_target = Duration::from_millis(if args.quick { 5 } else { 20 });
    for precision in [PeakPrecision::F32, PeakPrecision::F16Packed] {
        match measure_peak(
            &ctx,
            cache.as_ref(),
            &caps,
            precision,
            peak_target,
            runs.max(3),
        )? {
            Ok(p) => bench.peaks.push(p),
            Err(reason) => bench
                .notes
                .push(format!("no {} peak: {reason}", peak_name(precision))),
        }
    }

    // f32 math: the default rules on the device without its f16 and int8-dot features.
    let f32_caps = DeviceCaps {
        float16: false,
        integer_dot_product: false,
        ..caps.clone()
    };
    let forced: Option<rocky_compiler::WeightLayout> = match args.layout.as_str() {
        "auto" => None,
        name => Some(name.parse().map_err(CliError::usage)?),
    };
    for weight in FORMATS {
        let layout = match forced {
            Some(l) if l.supports(weight) => l,
            Some(_) => rocky_compiler::WeightLayout::Gguf,
            None => rocky_compiler::templates::gemm::default_layout(weight, &caps),
        };
        for &(n, k, _, uses) in &QWEN25_3B {
            let w = GemmWorkload {
                m,
                n,
                k,
                act: ActType::F32,
                weight,
                layout,
                bias: false,
                epilogue: Default::default(),
                rms_norm_eps_bits: None,
            };
            let mut runs_of: Vec<(&'static str, GemmWorkload, GemmSchedule)> =
                variants(&w, &caps, &f32_caps, args.all_math, &mut bench.notes)
                    .into_iter()
                    .map(|(variant, s)| (variant, w, s))
                    .collect();
            runs_of.extend(
                tuned
                    .iter()
                    .filter(|(t, _)| {
                        (t.m, t.n, t.k, t.weight, t.layout, t.act)
                            == (m, n, k, weight, layout, w.act)
                    })
                    .map(|(t, s)| (tuned_variant(t), *t, *s)),
            );
            // Inputs per distinct workload: the variants of one share them (a tuned row's
            // epilogue makes another workload, with its residual or twice the weight rows).
            let mut inputs_of: Option<(GemmWorkload, GemmInputs)> = None;
            for (variant, w, s) in runs_of {
                if inputs_of.as_ref().map(|(iw, _)| *iw) != Some(w) {
                    inputs_of = Some((w, GemmInputs::random(&w, 7)));
                }
                let inputs = &inputs_of.as_ref().expect("just set").1;
                let row = bench_one(
                    &ctx,
                    cache.as_ref(),
                    &caps,
                    &w,
                    &s,
                    inputs,
                    runs,
                    args.check_columns,
                    (!args.quick).then_some(rocky_tuner::tune::GPU_MIN_WARMUP),
                )?;
                let peak = bench.peaks.iter().find(|p| match s.math {
                    Math::FmaF32 => p.precision == "f32",
                    Math::FmaF16Packed => p.precision == "f16x2",
                    _ => false,
                });
                bench.rows.push(Row {
                    uses,
                    variant,
                    percent_of_peak: peak.map(|p| 100.0 * row.timing.gflops / p.gflops),
                    ..row
                });
            }
        }
    }
    if let Some(cache) = &cache {
        if let Err(e) = cache.save() {
            bench
                .notes
                .push(format!("the pipeline cache was not saved: {e}"));
        }
    }
    bench
        .notes
        .push(format!("{:.1} s in all", started.elapsed().as_secs_f64()));

    let text = if args.json {
        serde_json::to_string_pretty(&bench).unwrap_or_default() + "\n"
    } else {
        render(&bench, args.md)
    };
    write_stdout(&text)
}

/// The row label of a tuned schedule: what its epilogue adds to the bare GEMM.
fn tuned_variant(w: &GemmWorkload) -> &'static str {
    match w.epilogue {
        Epilogue::None => "tuned",
        Epilogue::Residual => "tuned +res",
        Epilogue::SwiGlu => "tuned gate+up+swiglu",
        Epilogue::RopeKv(_) => "tuned +rope+kv write",
    }
}

/// The schedules timed for `w`: the f32-math default and the device's default (one row when
/// they are the same), and with `all_math` the default's tiles with each other math mode the
/// device supports (marked `*`), when that schedule is valid (else a note in `skipped`).
fn variants(
    w: &GemmWorkload,
    caps: &DeviceCaps,
    f32_caps: &DeviceCaps,
    all_math: bool,
    skipped: &mut Vec<String>,
) -> Vec<(&'static str, GemmSchedule)> {
    let f32_schedule = default_schedule(w, f32_caps);
    let device_default = default_schedule(w, caps);
    let mut v = if device_default == f32_schedule {
        vec![("default", device_default)]
    } else {
        vec![("f32", f32_schedule), ("default", device_default)]
    };
    if all_math {
        for (label, math, supported) in [
            ("f16*", Math::FmaF16Packed, caps.float16),
            ("int8*", Math::Int8Dot, caps.integer_dot_product),
        ] {
            let s = GemmSchedule {
                math,
                accumulate: Precision::F32,
                vector_width: match math {
                    Math::Int8Dot => 4,
                    _ => device_default.vector_width.max(2),
                },
                ..device_default
            };
            if !supported || v.iter().any(|(_, x)| x.math == math) {
                continue;
            }
            match s.validate(w, caps) {
                Ok(()) => v.push((label, s)),
                Err(e) => skipped.push(format!(
                    "{label} skipped for {}×{}×{} {}: {e}",
                    w.m, w.n, w.k, w.weight
                )),
            }
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn bench_one(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    w: &GemmWorkload,
    s: &GemmSchedule,
    inputs: &GemmInputs,
    runs: u32,
    check_columns: u32,
    settle: Option<Duration>,
) -> Result<Row, CliError> {
    let kernel = rocky_compiler::templates::gemm::instantiate(w, s, caps).map_err(|e| {
        CliError::internal(format!(
            "the default schedule of {w:?} is refused on this device: {e}"
        ))
    })?;
    let gpu = GemmOnGpu::new(ctx, cache, &kernel, w, s, caps, inputs)?;
    let started = Instant::now();
    let got = gpu.run_once(ctx)?;
    let one_run = started.elapsed();
    let cols = gemm_gpu::sampled_columns(w, &gpu.slices, check_columns, 7);
    let check = gemm_gpu::check(w, s, inputs, &got, &cols).map_err(|e| {
        CliError::internal(format!(
            "{} gives wrong results on this device: {e}\nThis is a compiler bug: please report \
             it with `rocky kernel --m {} --n {} --k {} --weight {} --schedule '{}'`.",
            kernel.meta.name,
            w.m,
            w.n,
            w.k,
            w.weight.ggml_name().to_lowercase(),
            serde_json::to_string(&rocky_compiler::Schedule::Gemm(*s)).unwrap_or_default()
        ))
    })?;
    // The CPU check left the GPU idle: bring its clocks back up as the tuner does before
    // each trial, so these figures compare with the tuner's and the prefill's.
    // (Not with --quick: a CPU implementation has no such clocks to ramp.)
    if let Some(least) = settle {
        rocky_tuner::settle_clocks(ctx, &gpu, one_run, least).map_err(CliError::device)?;
    }
    let timing = Timing::of(&gpu.time(ctx, runs)?, w.flops());
    Ok(Row {
        m: w.m,
        n: w.n,
        k: w.k,
        uses: "",
        weight: w.weight.to_string(),
        variant: "",
        math: gemm_gpu::math_name(s.math),
        schedule: *s,
        summary: gemm_gpu::summary(s),
        timing,
        percent_of_peak: None,
        max_error_ratio: check.max_error_ratio,
        driver_stats: gpu.statistics.as_ref().map(|st| st.flat()),
    })
}

fn peak_name(p: PeakPrecision) -> &'static str {
    match p {
        PeakPrecision::F32 => "f32",
        _ => "f16x2",
    }
}

/// Workgroups of the peak kernel are grown to this many before iterations are.
const PEAK_MAX_GROUPS: u32 = 16384;

/// The FMA throughput of the peak kernel: the grid and then the iterations grow until one run
/// takes at least a quarter of `target`, then `runs` runs are timed. `Ok(Err(reason))` when the
/// device cannot run this precision.
fn measure_peak(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    precision: PeakPrecision,
    target: Duration,
    runs: u32,
) -> Result<Result<Peak, String>, CliError> {
    let cfg = PeakConfig::new(precision);
    let kernel = match peak::instantiate(&cfg, caps) {
        Ok(k) => k,
        Err(refusal) => return Ok(Err(refusal.to_string())),
    };
    let device = |e: rocky_runtime::RuntimeError| CliError::device(e.to_string());
    let pipeline = ComputePipeline::from_kernel(ctx, cache, &kernel).map_err(device)?;
    let wg = u64::from(cfg.workgroup_size);
    let out = Buffer::new(ctx, u64::from(PEAK_MAX_GROUPS) * wg * 4, "peak out").map_err(device)?;
    let push = |iterations: u32| -> Vec<u8> {
        [
            iterations.to_le_bytes(),
            0.999f32.to_le_bytes(),
            0.001f32.to_le_bytes(),
        ]
        .concat()
    };
    let time = |groups: u32, iterations: u32, runs: u32| {
        time_dispatches(
            ctx,
            &pipeline,
            &[out.whole()],
            &push(iterations),
            [groups, 1, 1],
            runs,
            Duration::from_secs(120),
        )
        .map_err(device)
    };
    let (mut groups, mut iterations) = (64u32, 16u32);
    for _ in 0..16 {
        let t = time(groups, iterations, 1)?[0];
        if t * 4 >= target {
            break;
        }
        if groups < PEAK_MAX_GROUPS {
            groups *= 4;
        } else {
            iterations *= 4;
        }
    }
    let timing = Timing::of(&time(groups, iterations, runs)?, 0);
    let invocations = u64::from(groups) * wg;
    let flops = cfg.flops_per_invocation(iterations) * invocations;
    Ok(Ok(Peak {
        precision: peak_name(precision),
        gflops: flops as f64 / (timing.median_ms * 1e-3) / 1e9,
        invocations,
        iterations,
        median_ms: timing.median_ms,
    }))
}

fn render(b: &Bench, markdown: bool) -> String {
    let mut out = format!(
        "device: {}\nQwen2.5-3B prefill GEMMs, M = {}, act f32, {} timed run(s) each (median)\n",
        b.device, b.m, b.runs
    );
    let peaks: Vec<String> = b
        .peaks
        .iter()
        .map(|p| format!("{} {:.1} GFLOP/s", p.precision, p.gflops))
        .collect();
    out.push_str(&format!(
        "FMA ceiling (peak kernel): {}\n\n",
        if peaks.is_empty() {
            "not measured".to_string()
        } else {
            peaks.join(", ")
        }
    ));
    let header = [
        "M×N×K",
        "uses",
        "weight",
        "variant",
        "schedule",
        "median ms",
        "GFLOP/s",
        "% peak",
        "err/tol",
    ];
    let cells: Vec<[String; 9]> = b
        .rows
        .iter()
        .map(|r| {
            [
                format!("{}×{}×{}", r.m, r.n, r.k),
                r.uses.to_string(),
                r.weight.clone(),
                r.variant.to_string(),
                r.summary.clone(),
                format!("{:.3}", r.timing.median_ms),
                format!("{:.1}", r.timing.gflops),
                r.percent_of_peak
                    .map_or("-".to_string(), |p| format!("{p:.1}%")),
                format!("{:.3}", r.max_error_ratio),
            ]
        })
        .collect();
    out.push_str(&table(&header, &cells, markdown));

    // Per layer: the seven projections, from the four timed shapes.
    out.push('\n');
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in &b.rows {
        if !keys.contains(&(r.weight.as_str(), r.variant)) {
            keys.push((r.weight.as_str(), r.variant));
        }
    }
    // Tuned rows carry epilogues (one fused GEMM stands for gate and up): they are no
    // per-projection figures to add up.
    keys.retain(|(_, variant)| !variant.starts_with("tuned"));
    for (weight, variant) in keys {
        let ms: f64 = b
            .rows
            .iter()
            .filter(|r| r.weight == weight && r.variant == variant)
            .map(|r| {
                let uses = QWEN25_3B
                    .iter()
                    .find(|s| s.0 == r.n && s.1 == r.k)
                    .map_or(1, |s| s.2);
                f64::from(uses) * r.timing.median_ms
            })
            .sum();
        let model_s = ms * f64::from(QWEN25_3B_LAYERS) * 1e-3;
        out.push_str(&format!(
            "{weight} {variant}: {ms:.3} ms per layer (q k v o gate up down) → {:.1} tok/s \
             for {QWEN25_3B_LAYERS} layers of GEMMs alone\n",
            f64::from(b.m) / model_s
        ));
    }
    let with_stats: Vec<&Row> = b.rows.iter().filter(|r| r.driver_stats.is_some()).collect();
    if !with_stats.is_empty() {
        out.push_str("\ndriver statistics (VK_KHR_pipeline_executable_properties):\n");
        for r in with_stats {
            let stats = r.driver_stats.as_ref().into_iter().flatten();
            let cells: Vec<String> = stats
                .map(|(name, v)| format!("{name} {}", super::kernel::stats_number(*v)))
                .collect();
            out.push_str(&format!(
                "{}×{}×{} {} {}: {}\n",
                r.m,
                r.n,
                r.k,
                r.weight,
                r.variant,
                cells.join(", ")
            ));
        }
    }
    if b.rows.iter().any(|r| r.variant.ends_with('*')) {
        out.push_str("*: the default schedule's tiles with this math mode\n");
    }
    for n in &b.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

/// An aligned text table, or a Markdown one.
pub(crate) fn table<const N: usize>(
    header: &[&str; N],
    rows: &[[String; N]],
    markdown: bool,
) -> String {
    let mut widths: [usize; N] = header.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        if markdown {
            format!("| {} |\n", padded.join(" | "))
        } else {
            format!("{}\n", padded.join("  ").trim_end())
        }
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    if markdown {
        out.push_str(&format!(
            "|{}|\n",
            widths
                .iter()
                .map(|w| "-".repeat(w + 2))
                .collect::<Vec<_>>()
                .join("|")
        ));
    }
    for r in rows {
        out.push_str(&line(r.to_vec()));
    }
    out
}
