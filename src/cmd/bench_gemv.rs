//! `rocky bench-gemv`: the GEMVs of a decode step (one row of X) at the Qwen2.5-0.5B and 3B
//! shapes, Q4_K, Q6_K, Q8_0 and Q5_0 weights, each with its default schedule (and with
//! `--int8` the same schedule on int8 dot products where the device has them), next to the
//! device's copy bandwidth measured by the copy kernel: the ceiling of a GEMV, which reads
//! each weight once.
//!
//! Each GEMV is checked against the CPU reference on a seeded sample of columns before it is
//! timed, then timed twice: `warm` (a run right after a run of the same GEMV: a weight smaller
//! than the device's last-level cache is read from that cache) and `cold` (the cache flushed by
//! a copy larger than it before the run, as in a decode step, which streams every weight of
//! the model once per token). Only the cold figure is a decode figure; the gap between the two
//! says how much a benchmark in cache would flatter a GEMV.
//!
//! The variants of one shape (default, `int8*`, `custom*`, a sweep) are all built and checked
//! first, then timed in rounds, one warm and one cold run of each per round: every variant
//! meets the same clocks, and the GPU does not idle between them. Timed one after the other
//! with a pipeline build and a CPU check between them, an H100's later sweep rows ran 2-4×
//! slower than the same schedules early (docs/measurements/2026-12-06d-h100-gemv-defaults.md).

use super::kernel::gemm_gpu::{self, CacheFlush, GemmInputs, GemmOnGpu, Timing};
use super::kernel::write_stdout;
use crate::error::{CliError, CmdResult};
use rocky_compiler::templates::gemm::{Epilogue, GemmWorkload, Math};
use rocky_compiler::templates::gemv::{self, reference::arithmetic_twin, GemvSchedule};
use rocky_compiler::{ActType, DeviceCaps, WeightFormat};
use rocky_runtime::{device_caps, Context, DeviceSelector, PipelineCache};
use serde::Serialize;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  rocky bench-gemv
  rocky bench-gemv --int8 --runs 20 --md
  rocky bench-gemv --quick        (lavapipe and other slow devices)
  rocky bench-gemv --shapes 3B --formats Q4_K,Q6_K --sweep 40 --json")]
pub struct Args {
    /// Vulkan device: index or part of its name (see `rocky devices`); default: the best GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Timed runs per GEMV and timing (after one checked run); default 10, or 2 with --quick.
    #[arg(long)]
    pub runs: Option<u32>,
    /// For slow devices (CPU implementations): the 0.5B layer shapes only (no vocabulary projection), a 64 MiB flush.
    #[arg(long)]
    pub quick: bool,
    /// Also time each default schedule with int8 dot-product math (rows `int8*`).
    #[arg(long)]
    pub int8: bool,
    /// Also time the GEMVs that read a norm's output (q, k, v, gate/up) with the RMSNorm
    /// folded in, as the decode step runs them (rows `norm*`, default schedule).
    #[arg(long)]
    pub norm: bool,
    /// Size of each of the flush copy's two buffers in MiB: larger than the device's last-level
    /// cache (an H100's is 50 MB); default 256, or 64 with --quick.
    #[arg(long)]
    pub flush_mib: Option<u64>,
    /// Also time this schedule (`{"gemv":{...}}`, as `rocky kernel --schedule` takes it) on
    /// every shape where it is valid (rows `custom*`): to try a schedule on all the shapes cold.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Also time this many schedules of each GEMV's search space (seeded draw, rows `sweep`),
    /// cold like the rest: where the defaults stand against the best the template can do.
    #[arg(long, default_value_t = 0)]
    pub sweep: usize,
    /// Only the GEMVs whose "model role" contains one of these (comma-separated, e.g. `3B` or
    /// `3B gate,3B down`).
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Only these weight formats (comma-separated GGML names, e.g. `Q4_K,Q6_K`).
    #[arg(long, value_delimiter = ',')]
    pub formats: Vec<String>,
    /// Output columns compared with the CPU reference per GEMV.
    #[arg(long, default_value_t = 32)]
    pub check_columns: u32,
    /// Print JSON.
    #[arg(long, conflicts_with = "md")]
    pub json: bool,
    /// Print a Markdown table.
    #[arg(long)]
    pub md: bool,
}

/// One GEMV of a decode step: (model, role, N, K, epilogue).
type Shape = (&'static str, &'static str, u32, u32, Epilogue);

/// The decode step's GEMVs of Qwen2.5-0.5B (24 layers) and 3B (36 layers), as the executor
/// runs them with every fusion: o and down with the residual add, gate/up as one SwiGLU GEMV;
/// and once a step the vocabulary projection (`output`, 151936 columns: 136-255 MB of Q6_K,
/// the step's largest single read; not with `--quick`).
const SHAPES: [Shape; 12] = [
    ("0.5B", "q", 896, 896, Epilogue::None),
    ("0.5B", "k, v", 128, 896, Epilogue::None),
    ("0.5B", "o", 896, 896, Epilogue::Residual),
    ("0.5B", "gate/up", 4864, 896, Epilogue::SwiGlu),
    ("0.5B", "down", 896, 4864, Epilogue::Residual),
    ("3B", "q", 2048, 2048, Epilogue::None),
    ("3B", "k, v", 256, 2048, Epilogue::None),
    ("3B", "o", 2048, 2048, Epilogue::Residual),
    ("3B", "gate/up", 11008, 2048, Epilogue::SwiGlu),
    ("3B", "down", 2048, 11008, Epilogue::Residual),
    ("0.5B", "output", 151936, 896, Epilogue::None),
    ("3B", "output", 151936, 2048, Epilogue::None),
];
const FORMATS: [WeightFormat; 4] = [
    WeightFormat::Q4K,
    WeightFormat::Q6K,
    WeightFormat::Q8_0,
    WeightFormat::Q5_0,
];

#[derive(Serialize)]
struct Row {
    model: &'static str,
    role: &'static str,
    n: u32,
    k: u32,
    weight: String,
    /// The weight layout on the device (the device's default for the format).
    layout: String,
    variant: &'static str,
    schedule: GemvSchedule,
    weight_bytes: u64,
    warm: Timing,
    cold: Timing,
    /// Weight bytes over the cold median, GB/s.
    cold_gbps: f64,
    /// `cold_gbps` as a percentage of the copy bandwidth.
    percent_of_copy: f64,
    max_error_ratio: f64,
}

#[derive(Serialize)]
struct Bench {
    device: String,
    runs: u32,
    copy_gbps: f64,
    /// Bytes of each of the flush copy's two buffers.
    flush_bytes: u64,
    notes: Vec<String>,
    rows: Vec<Row>,
}

pub fn run(args: Args) -> CmdResult {
    let runs = args.runs.unwrap_or(if args.quick { 2 } else { 10 });
    if runs == 0 {
        return Err(CliError::usage("--runs must be at least 1"));
    }
    let flush_mib = args.flush_mib.unwrap_or(if args.quick { 64 } else { 256 });
    if flush_mib == 0 {
        return Err(CliError::usage("--flush-mib must be at least 1"));
    }
    let custom = match &args.schedule {
        None => None,
        Some(text) => match serde_json::from_str::<rocky_compiler::Schedule>(text) {
            Ok(rocky_compiler::Schedule::Gemv(s)) => Some(s),
            Ok(_) => {
                return Err(CliError::usage(
                    "--schedule: a gemv schedule, {\"gemv\":{...}}",
                ))
            }
            Err(e) => return Err(CliError::usage(format!("--schedule: {e}"))),
        },
    };
    let selector: DeviceSelector = args.device.parse().unwrap_or_default();
    let ctx = Context::new(&selector).map_err(|e| CliError::device(e.to_string()))?;
    let caps = device_caps(ctx.info(), ctx.caps());
    let info = ctx.info();
    let cache = PipelineCache::open_default(&ctx).ok();
    let flush = CacheFlush::new(&ctx, cache.as_ref(), &caps, flush_mib << 20)?;
    let copy = Timing::of(&flush.time(&ctx, runs.max(3))?, 0);
    let copy_gbps = flush.bytes_moved() as f64 / (copy.median_ms * 1e-3) / 1e9;
    let mut bench = Bench {
        device: format!(
            "{} [{}, {}]",
            info.name,
            info.device_type.as_str(),
            info.driver.name
        ),
        runs,
        copy_gbps,
        flush_bytes: flush.bytes_moved() / 2,
        notes: Vec::new(),
        rows: Vec::new(),
    };
    if info.is_cpu {
        bench
            .notes
            .push("a CPU implementation: these are not GPU timings".into());
    }
    for &(model, role, n, k, epilogue) in &SHAPES {
        if args.quick && (model != "0.5B" || role == "output") {
            continue;
        }
        let name = format!("{model} {role}");
        if !args.shapes.is_empty() && !args.shapes.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        for weight in FORMATS {
            if !args.formats.is_empty()
                && !args
                    .formats
                    .iter()
                    .any(|f| f.eq_ignore_ascii_case(weight.ggml_name()))
            {
                continue;
            }
            let w = GemmWorkload {
                m: 1,
                n,
                k,
                act: ActType::F32,
                weight,
                layout: rocky_compiler::templates::gemm::default::default_layout(weight, &caps),
                bias: false,
                epilogue,
                rms_norm_eps_bits: None,
            };
            if gemv::validate_workload(&w).is_err() {
                continue; // K-quants need K a multiple of 256 (the 0.5B's 896 is not)
            }
            let default = gemv::default_schedule(&w, &caps);
            let mut variants = vec![("default", w, default)];
            if args.int8 {
                let int8 = GemvSchedule {
                    math: Math::Int8Dot,
                    vector_width: 1,
                    chunks_per_thread: 8,
                    ..default
                };
                if int8 != default && int8.validate(&w, &caps).is_ok() {
                    variants.push(("int8*", w, int8));
                }
            }
            if let Some(c) = custom.filter(|c| *c != default && c.validate(&w, &caps).is_ok()) {
                variants.push(("custom*", w, c));
            }
            // The projections a norm feeds (no residual epilogue): Qwen2's eps.
            if args.norm && epilogue != Epilogue::Residual {
                let normed = GemmWorkload {
                    rms_norm_eps_bits: Some(1e-6f32.to_bits()),
                    ..w
                };
                variants.push(("norm*", normed, gemv::default_schedule(&normed, &caps)));
            }
            if args.sweep > 0 {
                use rand::seq::SliceRandom;
                let mut space: Vec<GemvSchedule> = gemv::search_space(&w, &caps)
                    .into_iter()
                    .filter(|s| variants.iter().all(|(_, _, v)| v != s))
                    .collect();
                space.shuffle(&mut <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(5));
                for s in space.into_iter().take(args.sweep) {
                    variants.push(("sweep", w, s));
                }
            }
            // Random weights are made once per workload (a sweep times many schedules on them).
            let mut made: Vec<(GemmWorkload, GemmInputs)> = Vec::new();
            for (_, w, _) in &variants {
                if !made.iter().any(|(m, _)| m == w) {
                    made.push((*w, GemmInputs::random(w, 11)));
                }
            }
            // Built and checked in batches that fit the device memory cap, each batch timed in
            // interleaved rounds.
            let mut batch: Vec<Prepared> = Vec::new();
            let mut batch_bytes = 0u64;
            for (variant, w, s) in variants {
                let inputs = &made.iter().find(|(m, _)| *m == w).expect("made above").1;
                let bytes = weight_bytes(&w);
                if !batch.is_empty() && batch_bytes + bytes > BATCH_WEIGHT_BYTES {
                    time_batch(&ctx, &mut batch, &flush, copy_gbps, runs, &args, &mut bench)?;
                    batch_bytes = 0;
                }
                let target = Target {
                    w: &w,
                    s: &s,
                    inputs,
                    labels: (model, role, variant),
                };
                batch.push(prepare(&ctx, cache.as_ref(), &caps, target, &args)?);
                batch_bytes += bytes;
            }
            time_batch(&ctx, &mut batch, &flush, copy_gbps, runs, &args, &mut bench)?;
        }
    }
    let text = if args.json {
        serde_json::to_string_pretty(&bench).map_err(|e| CliError::internal(e.to_string()))?
    } else {
        render(&bench, args.md)
    };
    write_stdout(&format!("{text}\n"))
}

/// One GEMV to time: its workload, schedule and (model, role, variant) labels.
struct Target<'a> {
    w: &'a GemmWorkload,
    s: &'a GemvSchedule,
    inputs: &'a GemmInputs,
    labels: (&'static str, &'static str, &'static str),
}

/// Weight bytes a batch of variants may hold on the device at once (each variant owns a copy
/// of its shape's weights): a 120-schedule sweep of the 3B's Q8_0 gate/up (48 MB a copy)
/// would take 5.8 GB whole, more than a board can spare.
const BATCH_WEIGHT_BYTES: u64 = 2 << 30;

fn weight_bytes(w: &GemmWorkload) -> u64 {
    w.layout.row_bytes(w.weight, u64::from(w.k)) * u64::from(w.weight_rows())
}

/// A GEMV built on the device and checked, waiting for its timing.
struct Prepared {
    gpu: GemmOnGpu,
    w: GemmWorkload,
    s: GemvSchedule,
    labels: (&'static str, &'static str, &'static str),
    /// The checked run's wall time (how long the clock settling runs it).
    one_run: std::time::Duration,
    max_error_ratio: f64,
}

/// Builds `target` on the device and checks one run against the CPU reference.
fn prepare(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    target: Target,
    args: &Args,
) -> Result<Prepared, CliError> {
    let Target {
        w,
        s,
        inputs,
        labels,
    } = target;
    let kernel = gemv::instantiate(w, s, caps)
        .map_err(|e| CliError::internal(format!("{} is refused on this device: {e}", s.name(w))))?;
    let gpu = GemmOnGpu::for_gemv(ctx, cache, &kernel, w, s, caps, inputs, None)?;
    let started = std::time::Instant::now();
    let got = gpu.run_once(ctx)?;
    let one_run = started.elapsed();
    let cols = gemm_gpu::sampled_columns(w, &gpu.slices, args.check_columns, 7);
    let check = gemm_gpu::check(w, &arithmetic_twin(s), inputs, &got, &cols).map_err(|e| {
        CliError::internal(format!(
            "{} gives wrong results on this device: {e}\nThis is a compiler bug: please report \
             it with `rocky kernel --workload '{}' --schedule '{}'`.",
            kernel.meta.name,
            serde_json::to_string(&rocky_compiler::Workload::Gemv(*w)).unwrap_or_default(),
            serde_json::to_string(&rocky_compiler::Schedule::Gemv(*s)).unwrap_or_default()
        ))
    })?;
    Ok(Prepared {
        gpu,
        w: *w,
        s: *s,
        labels,
        one_run,
        max_error_ratio: check.max_error_ratio,
    })
}

/// Times a batch of prepared GEMVs in `runs` interleaved rounds (one warm and one cold run of
/// each per round), adds their rows to `bench` and empties the batch.
fn time_batch(
    ctx: &Context,
    batch: &mut Vec<Prepared>,
    flush: &CacheFlush,
    copy_gbps: f64,
    runs: u32,
    args: &Args,
    bench: &mut Bench,
) -> Result<(), CliError> {
    let Some(first) = batch.first() else {
        return Ok(());
    };
    // The builds and checks left the GPU idle: bring its clocks up as the tuner does before a
    // trial (not with --quick: a CPU implementation has no such clocks).
    if !args.quick {
        rocky_tuner::settle_clocks(
            ctx,
            &first.gpu,
            first.one_run,
            rocky_tuner::tune::GPU_MIN_WARMUP,
        )
        .map_err(CliError::device)?;
    }
    let mut warm = vec![Vec::new(); batch.len()];
    let mut cold = vec![Vec::new(); batch.len()];
    for _ in 0..runs {
        for (i, p) in batch.iter().enumerate() {
            // The second of two back-to-back runs reads the weight from the cache the first
            // filled (where it fits).
            let pair = p.gpu.time(ctx, 2)?;
            warm[i].push(*pair.last().expect("two runs timed"));
            cold[i].extend(p.gpu.time_cold(ctx, 1, flush)?);
        }
    }
    for ((p, warm), cold) in batch.drain(..).zip(warm).zip(cold) {
        let (model, role, variant) = p.labels;
        let w = p.w;
        let warm = Timing::of(&warm, w.flops());
        let cold = Timing::of(&cold, w.flops());
        let weight_bytes = weight_bytes(&w);
        let cold_gbps = weight_bytes as f64 / (cold.median_ms * 1e-3) / 1e9;
        bench.rows.push(Row {
            model,
            role,
            n: w.n,
            k: w.k,
            weight: w.weight.to_string(),
            layout: w.layout.to_string(),
            variant,
            schedule: p.s,
            weight_bytes,
            cold_gbps,
            warm,
            cold,
            percent_of_copy: 100.0 * cold_gbps / copy_gbps,
            max_error_ratio: p.max_error_ratio,
        });
    }
    Ok(())
}

fn render(b: &Bench, markdown: bool) -> String {
    let mut out = format!(
        "device {}\ncopy bandwidth {:.0} GB/s (the copy kernel over two {} MiB buffers; the \
         ceiling below)\n",
        b.device,
        b.copy_gbps,
        b.flush_bytes >> 20
    );
    for n in &b.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let rows: Vec<[String; 10]> = b
        .rows
        .iter()
        .map(|r| {
            [
                r.model.to_string(),
                r.role.to_string(),
                format!("{}x{}", r.n, r.k),
                r.weight.clone(),
                if r.variant == "default" {
                    r.variant.to_string()
                } else {
                    format!("{} {}", r.variant, short_schedule(&r.schedule))
                },
                format!("{:.1}", r.weight_bytes as f64 / 1e6),
                format!("{:.1}", r.warm.median_ms * 1e3),
                format!("{:.1}", r.cold.median_ms * 1e3),
                format!("{:.0}", r.cold_gbps),
                format!("{:.0} %", r.percent_of_copy),
            ]
        })
        .collect();
    out.push_str(&super::bench_gemm::table(
        &[
            "model",
            "gemv",
            "n x k",
            "weight",
            "schedule",
            "MB",
            "warm us",
            "cold us",
            "cold GB/s",
            "of copy",
        ],
        &rows,
        markdown,
    ));
    out
}

/// A schedule in a few words: threads, columns, chunks per thread, units per thread, vector
/// width, reduction, math, and the dot-first / quad-load options.
fn short_schedule(s: &GemvSchedule) -> String {
    let reduce = match s.reduce {
        gemv::Reduce::Shared => "sh",
        gemv::Reduce::Subgroup => "sg",
        gemv::Reduce::OneSubgroup => "onesg",
    };
    format!(
        "t{} c{} p{} u{} v{} {reduce} {}{}{}",
        s.threads,
        s.cols,
        s.chunks_per_thread,
        s.units_per_thread,
        s.vector_width,
        match s.math {
            Math::FmaF32 => "f32",
            Math::FmaF16Packed => "f16",
            Math::Int8Dot => "int8",
        },
        if s.dot_first { " df" } else { "" },
        if s.quad_loads { " q16" } else { "" }
    )
}
