//! One trial: the measurement protocol of DESIGN.md §6 for a GEMM (schedule) on the device.
//!
//! compile (done by the caller, in parallel) → pipeline and buffers → one run on seeded
//! inputs checked against the CPU reference (all columns, or a seeded sample on big shapes;
//! it is followed by one untimed warm-up batch) → `runs` timed runs with GPU timestamps → median, min, max.
//! Every failure becomes a failed [`Trial`]; a mismatch is never a winner.

use crate::gemm_gpu::{self, GemmInputs, GemmOnGpu, GpuError, Timing};
use rocky_compiler::{CompiledKernel, DeviceCaps, GemmSchedule, GemmWorkload, Refusal, Schedule};
use rocky_runtime::{Context, PipelineCache, RuntimeError};
use rocky_tuning_db::{FailureKind, Trial, TrialStatus};
use std::time::{Duration, Instant};

/// Workloads up to this many multiply-adds are checked in full; bigger ones on sampled columns.
pub const FULL_CHECK_MACS: u64 = 1 << 26;

#[derive(Clone, Debug)]
pub struct MeasureOptions {
    /// Timed runs per trial (after the checked run).
    pub runs: u32,
    /// Fewer runs when a run is slow: the timed runs of one trial stay near this long.
    pub max_timed: Duration,
    /// Columns checked on big workloads (plus the edges of every N-slice).
    pub check_columns: u32,
    /// Seed of the inputs and the sampled columns.
    pub seed: u64,
    /// Longest wait for one submission before the trial counts as hung.
    pub timeout: Duration,
}

impl Default for MeasureOptions {
    fn default() -> MeasureOptions {
        MeasureOptions {
            runs: 10,
            max_timed: Duration::from_secs(2),
            check_columns: 64,
            seed: 7,
            timeout: Duration::from_secs(120),
        }
    }
}

/// Measures `schedule` for `w` given its compile result; never fails, a problem is a failed
/// trial. `host` goes into the trial.
#[allow(clippy::too_many_arguments)]
pub fn measure_gemm(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    w: &GemmWorkload,
    schedule: &GemmSchedule,
    compiled: Result<CompiledKernel, Refusal>,
    inputs: &GemmInputs,
    options: &MeasureOptions,
    host: &str,
) -> Trial {
    let failed = |kind: FailureKind, message: String| {
        Trial::failed(Schedule::Gemm(*schedule), kind, message, host.to_string())
    };
    let kernel = match compiled {
        Ok(k) => k,
        Err(r) => return failed(FailureKind::Refused, r.to_string()),
    };
    match run_trial(ctx, cache, caps, w, schedule, &kernel, inputs, options) {
        Ok(timing) => Trial {
            schedule: Schedule::Gemm(*schedule),
            status: TrialStatus::Ok,
            median_s: timing.median_ms * 1e-3,
            min_s: timing.min_ms * 1e-3,
            max_s: timing.max_ms * 1e-3,
            gflops: timing.gflops,
            date: Trial::now_unix_s(),
            host: host.to_string(),
        },
        Err((kind, message)) => failed(kind, message),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_trial(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    w: &GemmWorkload,
    s: &GemmSchedule,
    kernel: &CompiledKernel,
    inputs: &GemmInputs,
    options: &MeasureOptions,
) -> Result<Timing, (FailureKind, String)> {
    let mut gpu = GemmOnGpu::new(ctx, cache, kernel, w, s, caps, inputs).map_err(classify)?;
    gpu.timeout = options.timeout;
    let start = Instant::now();
    let got = gpu.run_once(ctx).map_err(classify)?;
    let one_run = start.elapsed();
    let macs = u64::from(w.m) * u64::from(w.n) * u64::from(w.k);
    let cols = if macs <= FULL_CHECK_MACS {
        gemm_gpu::all_columns(w)
    } else {
        gemm_gpu::sampled_columns(w, &gpu.slices, options.check_columns, options.seed)
    };
    gemm_gpu::check(w, s, inputs, &got, &cols).map_err(|e| (FailureKind::Mismatch, e))?;
    // The checked run (with its download) bounds one run's time from above.
    let affordable = options.max_timed.as_secs_f64() / one_run.as_secs_f64().max(1e-9);
    let runs = options.runs.min(affordable.floor() as u32).max(1);
    // One untimed batch first: the checked run is followed by CPU-side checking, long enough
    // for a desktop GPU to drop its clocks, and the first trial of a workload (the default
    // schedule) was measured up to 5x slow on the H200 without this.
    gpu.time(ctx, runs).map_err(classify)?;
    let times = gpu.time(ctx, runs).map_err(classify)?;
    let timing = Timing::of(&times, w.flops());
    if !(timing.min_ms > 0.0 && timing.median_ms.is_finite()) {
        return Err((
            FailureKind::Other,
            format!("GPU timestamps gave no usable time ({timing:?})"),
        ));
    }
    Ok(timing)
}

/// Maps a runtime failure to the trial's failure kind.
pub fn classify(e: GpuError) -> (FailureKind, String) {
    let kind = match &e {
        GpuError::Refused(_) => FailureKind::Refused,
        GpuError::Internal(_) => FailureKind::Other,
        GpuError::Device(d) => runtime_failure_kind(d),
    };
    (kind, e.to_string())
}

fn runtime_failure_kind(e: &RuntimeError) -> FailureKind {
    match e {
        _ if e.is_device_lost() => FailureKind::DeviceLost,
        _ if e.is_out_of_memory() => FailureKind::OutOfMemory,
        RuntimeError::Timeout { .. } => FailureKind::Timeout,
        RuntimeError::PipelineCreation { .. }
        | RuntimeError::KernelExceedsLimits { .. }
        | RuntimeError::MissingFeatures { .. } => FailureKind::PipelineCreation,
        _ => FailureKind::Other,
    }
}
