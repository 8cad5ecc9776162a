//! `rocky bench-attention`: one attention workload (default: a Qwen2.5-3B layer, 16/2 heads
//! of 128, a ubatch of 512 ending at KV 4096) with several schedules: the device's default,
//! the default with packed-f16 p·v and with f16 for both products, the tuned schedule of the
//! database (when there is one), and any `--schedule` given. Each is checked against the CPU
//! reference on sampled query rows before it is timed: a fast wrong kernel is no result.

use super::gpu::{db_error, db_path, device_error};
use crate::error::{CliError, CmdResult};
use rocky_compiler::templates::attention::{self, AttentionSchedule, AttentionWorkload};
use rocky_compiler::{instantiate, KvType, KvTypes, Schedule, Workload};
use rocky_runtime::executor::ScheduleSource;
use rocky_runtime::{device_caps, Context, DeviceSelector, PipelineCache, TimingMethod};
use rocky_tuner::attention_gpu::{self, AttentionInputs, AttentionOnGpu};
use rocky_tuner::{fingerprint, DbSchedules};
use rocky_tuning_db::TuningDb;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  rocky bench-attention                       (Qwen2.5-3B shape, m 512, KV 512 and 4096)
  rocky bench-attention --kv 4096 --db tuning.sled --json
  rocky bench-attention --m 16 --kv 64 --quick  (lavapipe)
  rocky bench-attention --kv 4096 --sample 20   (20 seeded schedules of the space too)
  rocky bench-attention --schedule '{\"rows\":4,\"kv_block\":32,\"threads_per_row\":8,\"group_heads\":true,\"stage_kv\":true,\"lane_reduce\":\"shuffle\",\"f16_pv\":true}'")]
pub struct Args {
    /// Vulkan device: index or part of its name (see `rocky devices`).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Query rows (the ubatch).
    #[arg(long, default_value_t = 512)]
    pub m: u32,
    /// KV lengths the ubatch ends at (comma-separated): the m rows attend up to this many keys.
    #[arg(long, value_delimiter = ',', default_values_t = vec![512u32, 4096])]
    pub kv: Vec<u32>,
    #[arg(long, default_value_t = 16)]
    pub heads: u32,
    #[arg(long, default_value_t = 2)]
    pub kv_heads: u32,
    #[arg(long, default_value_t = 128)]
    pub head_dim: u32,
    /// Element type of the KV cache's keys: f32, f16 or q8_0 (also `-ctk`).
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_k: KvType,
    /// Element type of the KV cache's values (also `-ctv`).
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = super::gpu::parse_kv_type)]
    pub cache_type_v: KvType,
    /// Timed runs per schedule (after the checked run and a warm-up).
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Also time this schedule (JSON of the attention schedule).
    #[arg(long)]
    pub schedule: Option<String>,
    /// Tuning database whose tuned attention schedule (of the KV length's bucket, else the
    /// nearest tuned one) is timed too (default: $ROCKY_DB, else the default location).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Also time this many seeded schedules of the search space (each checked first).
    #[arg(long, default_value_t = 0)]
    pub sample: usize,
    /// Slow devices: one timed run, no warm-up.
    #[arg(long)]
    pub quick: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Row {
    kv: u32,
    variant: String,
    kernel: String,
    schedule: AttentionSchedule,
    ms: f64,
    tflops: f64,
    /// Worst |error| / allowed error over the checked rows (below 1 passes).
    error_ratio: f64,
}

pub fn run(args: Args) -> CmdResult {
    if args.m == 0 || args.runs == 0 || args.kv.iter().any(|&kv| kv < args.m) {
        return Err(CliError::usage(
            "--m and --runs must be at least 1, and every --kv at least --m",
        ));
    }
    let extra: Option<AttentionSchedule> = match &args.schedule {
        Some(text) => Some(serde_json::from_str(text).map_err(|e| {
            CliError::usage(format!("--schedule is not an attention schedule: {e}"))
        })?),
        None => None,
    };
    let selector: DeviceSelector = args
        .device
        .parse()
        .map_err(|e| CliError::usage(format!("--device {}: {e}", args.device)))?;
    let ctx = Context::new(&selector).map_err(device_error)?;
    let caps = device_caps(ctx.info(), ctx.caps());
    let cache = PipelineCache::open_default(&ctx).ok();
    let tuned = match db_path(args.db.as_deref()).filter(|p| p.exists()) {
        Some(path) => {
            let db = TuningDb::open(&path).map_err(db_error)?;
            Some(DbSchedules::load(&db, &fingerprint(ctx.info())).map_err(db_error)?)
        }
        None => None,
    };
    let timing = TimingMethod::for_device(ctx.info());
    let mut rows = Vec::new();
    for &kv in &args.kv {
        let w = AttentionWorkload {
            m: args.m,
            n_heads: args.heads,
            n_kv_heads: args.kv_heads,
            head_dim: args.head_dim,
            max_kv: AttentionWorkload::kv_bucket(kv),
            window: 0,
            kv: KvTypes::new(args.cache_type_k, args.cache_type_v),
        };
        w.validate().map_err(|e| CliError::usage(e.to_string()))?;
        let pos0 = kv - args.m;
        let inputs = AttentionInputs::random(&w, Some(pos0), 7);
        let default = attention::default_schedule(&w, &caps);
        let mut variants: Vec<(String, AttentionSchedule)> = vec![("default".into(), default)];
        // (packed-f16 P·V multiplies an f16 V cache's words)
        if caps.float16 && w.kv.v == KvType::F16 {
            variants.push((
                "default+pv16".into(),
                AttentionSchedule {
                    f16_pv: true,
                    ..default
                },
            ));
            variants.push((
                "default+f16".into(),
                AttentionSchedule {
                    f16_pv: true,
                    f16_qk: true,
                    ..default
                },
            ));
        }
        if let Some(t) = &tuned {
            let (s, origin) = t.schedule(&Workload::Attention(w), &caps);
            if let (Schedule::Attention(s), rocky_runtime::executor::ScheduleOrigin::Tuned) =
                (s, origin)
            {
                variants.push(("tuned".into(), s));
            }
        }
        if let Some(s) = extra {
            variants.push(("--schedule".into(), s));
        }
        let space = attention::search_space(&w, &caps);
        let mut rng = rocky_compiler::testdata::SplitMix64::new(u64::from(kv));
        for i in 0..args.sample.min(space.len()) {
            let s = space[(rng.next_u64() % space.len() as u64) as usize];
            variants.push((format!("space#{i}"), s));
        }
        for (variant, s) in variants {
            let kernel = instantiate(&Workload::Attention(w), &Schedule::Attention(s), &caps)
                .map_err(|e| CliError::usage(format!("{variant} schedule refused: {e}")))?;
            let mut gpu = AttentionOnGpu::new(&ctx, cache.as_ref(), &kernel, &w, &s, &inputs)
                .map_err(|e| CliError::device(e.to_string()))?;
            gpu.timing = timing;
            let got = gpu
                .run_once(&ctx)
                .map_err(|e| CliError::device(e.to_string()))?;
            let error_ratio = attention_gpu::check(&w, &s, &inputs, &got).map_err(|e| {
                CliError::device(format!(
                    "{} ({variant}) disagrees with the CPU reference: {e}",
                    kernel.meta.name
                ))
            })?;
            let ms = time_ms(&ctx, &gpu, args.runs, args.quick)
                .map_err(|e| CliError::device(e.to_string()))?;
            let flops = attention_gpu::flops(&w, pos0) as f64;
            rows.push(Row {
                kv,
                variant,
                kernel: kernel.meta.name.clone(),
                schedule: s,
                ms,
                tflops: flops / (ms * 1e-3) / 1e12,
                error_ratio,
            });
        }
    }
    if let Some(c) = &cache {
        let _ = c.save();
    }
    if args.json {
        let out = serde_json::json!({
            "device": ctx.info().name,
            "timing": timing.as_str(),
            "m": args.m, "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim,
            "rows": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!(
            "attention m={} heads {}/{} head_dim {} on {} ({} timing)",
            args.m,
            args.heads,
            args.kv_heads,
            args.head_dim,
            ctx.info().name,
            timing.as_str()
        );
        println!(
            "{:>6} {:<14} {:>10} {:>8} {:>7}  schedule",
            "kv", "variant", "ms", "TFLOP/s", "err"
        );
        for r in &rows {
            println!(
                "{:>6} {:<14} {:>10.4} {:>8.2} {:>7.3}  {}",
                r.kv,
                r.variant,
                r.ms,
                r.tflops,
                r.error_ratio,
                attention_gpu::summary(&r.schedule)
            );
        }
    }
    Ok(())
}

/// Median of `runs` timed runs after about 200 ms of warm-up (clocks ramp up under load).
fn time_ms(
    ctx: &Context,
    gpu: &AttentionOnGpu,
    runs: u32,
    quick: bool,
) -> Result<f64, rocky_tuner::gemm_gpu::GpuError> {
    if !quick {
        let first = gpu.time(ctx, 2)?;
        let per = first.iter().max().copied().unwrap_or_default();
        let batch = (0.05 / per.as_secs_f64().max(1e-6))
            .ceil()
            .clamp(1.0, 1000.0) as u32;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(200) {
            gpu.time(ctx, batch)?;
        }
    }
    let mut times = gpu.time(ctx, if quick { 1 } else { runs })?;
    times.sort();
    Ok(times[times.len() / 2].as_secs_f64() * 1e3)
}
