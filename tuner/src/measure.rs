//! One trial: the measurement protocol of DESIGN.md §6 for a GEMM (schedule) on the device.
//!
//! compile (done by the caller, in parallel) → spirv-val (when `validate`) → pipeline and
//! buffers → one run on seeded inputs checked against the CPU reference (all columns, or a
//! seeded sample on big shapes; it is followed by untimed warm-up batches) → `runs` timed
//! runs with GPU timestamps → median, min, max. A candidate whose first timed run is far
//! slower than the workload's best so far stops there (see [`MeasureOptions::prune_factor`]).
//! Every failure becomes a failed [`Trial`]; a mismatch is never a winner.

use crate::fault::{self, Fault, FaultPlan, INJECTED};
use crate::gemm_gpu::{self, GemmInputs, GemmOnGpu, GpuError, Timing};
use crate::spirv_val::{self, spirv_val_path, ValidationError};
use rocky_compiler::{CompiledKernel, DeviceCaps, GemmSchedule, GemmWorkload, Refusal, Schedule};
use rocky_runtime::{Context, PipelineCache, RuntimeError};
use rocky_tuning_db::{FailureKind, Trial, TrialStatus};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// Bound on warm-up batches, for kernels so fast that `warmup` takes very many.
const MAX_WARMUP_BATCHES: u32 = 64;

/// Default of [`MeasureOptions::prune_factor`]: far beyond the run-to-run noise of a shared
/// CPU device (lavapipe runs of one kernel vary by up to ~2x under load).
pub const DEFAULT_PRUNE_FACTOR: f64 = 4.0;

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
    /// Least time of untimed runs before the timed ones (GPU clocks ramp up after idling).
    pub warmup: Duration,
    /// Validate each kernel with spirv-val before its pipeline is created. Default: on when
    /// a `spirv-val` executable is on `PATH`.
    pub validate: bool,
    /// Trials to fail on purpose (testing; empty by default). The tuner passes each trial
    /// its fault, see [`FaultPlan`].
    pub faults: FaultPlan,
    /// A candidate whose first timed run (after the warm-up) takes more than this many times
    /// the best median so far is recorded with that one run: more runs cannot make it the
    /// winner, and in an exhaustive run most of the space is such candidates. `None` times
    /// every candidate in full.
    pub prune_factor: Option<f64>,
}

impl Default for MeasureOptions {
    fn default() -> MeasureOptions {
        MeasureOptions {
            runs: 10,
            max_timed: Duration::from_secs(2),
            check_columns: 64,
            seed: 7,
            timeout: Duration::from_secs(120),
            warmup: Duration::from_millis(30),
            validate: spirv_val_path().is_some(),
            faults: FaultPlan::new(),
            prune_factor: Some(DEFAULT_PRUNE_FACTOR),
        }
    }
}

/// Measures `schedule` for `w` given its compile result; never fails, a problem is a failed
/// trial. `fault` makes the trial fail on purpose at that failure's stage (its message then
/// starts with [`INJECTED`]). `incumbent_s` is the workload's best median so far (for
/// `options.prune_factor`). `host` goes into the trial.
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
    fault: Option<Fault>,
    incumbent_s: Option<f64>,
    host: &str,
) -> Trial {
    let failed = |kind: FailureKind, message: String| {
        Trial::failed(Schedule::Gemm(*schedule), kind, message, host.to_string())
    };
    let kernel = match compiled {
        Ok(k) => k,
        Err(r) => return failed(FailureKind::Refused, r.to_string()),
    };
    let trial = (|| {
        check_spirv(&kernel, options.validate, fault)?;
        run_trial(
            ctx,
            cache,
            caps,
            w,
            schedule,
            &kernel,
            inputs,
            options,
            fault,
            incumbent_s,
        )
    })();
    match trial {
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
        Err((kind, message)) => match fault {
            Some(f) if f.kind() == kind => failed(kind, format!("{INJECTED} {message}")),
            _ => failed(kind, message),
        },
    }
}

/// The spirv-val stage: Err when the validator rejects the kernel (or cannot run). An
/// injected `spirv_val` fault validates the kernel without its last instruction; those
/// words are only ever shown to the validator, never to the driver.
fn check_spirv(
    kernel: &CompiledKernel,
    validate: bool,
    fault: Option<Fault>,
) -> Result<(), (FailureKind, String)> {
    let inject = fault == Some(Fault::SpirvVal);
    if !validate && !inject {
        return Ok(());
    }
    let words: Cow<[u32]> = if inject {
        let cut = fault::drop_last_instruction(&kernel.spirv).ok_or_else(|| {
            let m = "the compiled kernel is not a SPIR-V module with instructions";
            (FailureKind::SpirvVal, m.to_string())
        })?;
        Cow::Owned(cut)
    } else {
        Cow::Borrowed(&kernel.spirv)
    };
    let Some(exe) = spirv_val_path() else {
        return Err(if inject {
            let m = "spirv-val is not on PATH, so the corrupted module was not validated \
                     (and is never given to the driver, which may crash on it)";
            (FailureKind::SpirvVal, m.to_string())
        } else {
            let m = "kernel validation is on but spirv-val is not on PATH: install \
                     spirv-tools (apt-get install spirv-tools) or turn validation off";
            (FailureKind::Other, m.to_string())
        });
    };
    match spirv_val::validate(exe, &words, kernel.meta.spirv_version) {
        Ok(()) if inject => Err((
            FailureKind::Other,
            "spirv-val accepted the module with its last instruction removed".into(),
        )),
        Ok(()) => Ok(()),
        Err(e @ ValidationError::Rejected { .. }) => Err((FailureKind::SpirvVal, e.to_string())),
        // The validator's own trouble (e.g. it cannot start) is not the kernel's fault.
        Err(e @ ValidationError::CannotRun(_)) => Err((FailureKind::Other, e.to_string())),
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
    fault: Option<Fault>,
    incumbent_s: Option<f64>,
) -> Result<Timing, (FailureKind, String)> {
    let mut gpu =
        GemmOnGpu::with_fault(ctx, cache, kernel, w, s, caps, inputs, fault).map_err(classify)?;
    gpu.timeout = options.timeout;
    let start = Instant::now();
    let mut got = gpu.run_once(ctx).map_err(classify)?;
    let one_run = start.elapsed();
    let macs = u64::from(w.m) * u64::from(w.n) * u64::from(w.k);
    let cols = if macs <= FULL_CHECK_MACS {
        gemm_gpu::all_columns(w)
    } else {
        gemm_gpu::sampled_columns(w, &gpu.slices, options.check_columns, options.seed)
    };
    if fault == Some(Fault::Mismatch) {
        // Row 0 of the first checked column: the check must see it.
        fault::perturb(&mut got, cols[0] as usize);
    }
    gemm_gpu::check(w, s, inputs, &got, &cols).map_err(|e| (FailureKind::Mismatch, e))?;
    // The checked run (with its download) bounds one run's time from above.
    let affordable = options.max_timed.as_secs_f64() / one_run.as_secs_f64().max(1e-9);
    let runs = options.runs.min(affordable.floor() as u32).max(1);
    // Untimed batches first, for at least `options.warmup`: the checked run is followed by
    // CPU-side checking, long enough for a GPU to lower its clocks (DVFS), and one batch of a
    // fast kernel lasts well under a millisecond. Batches are sized from the checked run so a
    // slow kernel warms up with one run, not `runs`. (On the H200 the first trials of a
    // workload still read 3-5x slower than the same kernel in `rocky bench-gemm`; 30 ms of
    // warm-up did not change that, so clocks are not the whole story. Open.)
    let per_batch = (options.warmup.as_secs_f64() / one_run.as_secs_f64().max(1e-9)).ceil();
    let warm_batch = (per_batch as u32).clamp(1, runs);
    let warm_start = Instant::now();
    for _ in 0..MAX_WARMUP_BATCHES {
        gpu.time(ctx, warm_batch).map_err(classify)?;
        if warm_start.elapsed() >= options.warmup {
            break;
        }
    }
    // One timed run decides whether the rest are worth it; it counts among the `runs`.
    let mut times = gpu.time(ctx, 1).map_err(classify)?;
    let hopeless = match (options.prune_factor, incumbent_s, times.first()) {
        (Some(factor), Some(best), Some(first)) => first.as_secs_f64() > factor * best,
        _ => false,
    };
    if !hopeless && runs > 1 {
        times.extend(gpu.time(ctx, runs - 1).map_err(classify)?);
    }
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
