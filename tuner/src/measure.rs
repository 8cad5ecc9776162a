//! One trial: the measurement protocol of docs/design.md §6 for a GEMM (schedule) on the device.
//!
//! compile (done by the caller, in parallel) → spirv-val (when `validate`) → pipeline and
//! buffers → one run on seeded inputs checked against the CPU reference (all columns, or a
//! seeded sample on big shapes) → warm-up batches until the device runs at steady speed →
//! `runs` timed runs with GPU timestamps → median, min, max. On a device without timestamps
//! (or with host timing forced) each timed figure is instead the mean run of a command buffer
//! of many runs, timed by the host clock around its submit and wait (see
//! [`host_samples`]). A candidate whose steady speed
//! is far slower than the workload's best so far stops there (see
//! [`MeasureOptions::prune_factor`]).
//! Every failure becomes a failed [`Trial`]; a mismatch is never a winner.

use crate::fault::{self, Fault, FaultPlan, INJECTED};
use crate::gemm_gpu::{self, GemmInputs, GemmOnGpu, GpuError, Timing};
use crate::spirv_val::{self, spirv_val_path, ValidationError};
use rocky_compiler::templates::gemv::GemvSchedule;
use rocky_compiler::{CompiledKernel, DeviceCaps, GemmSchedule, GemmWorkload, Refusal, Schedule};
use rocky_runtime::{Context, PipelineCache, PipelineStatistics, RuntimeError, TimingMethod};
use rocky_tuning_db::{FailureKind, Trial, TrialStatus};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Bound on warm-up batches; `max_timed` bounds their time.
const MAX_WARMUP_BATCHES: u32 = 1000;

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
    /// Least time of warm-up before the timed runs (GPU clocks ramp up after idling); the
    /// warm-up goes on until the device's speed has settled.
    pub warmup: Duration,
    /// Validate each kernel with spirv-val before its pipeline is created. Default: on when
    /// a `spirv-val` executable is on `PATH`.
    pub validate: bool,
    /// Trials to fail on purpose (testing; empty by default). The tuner passes each trial
    /// its fault, see [`FaultPlan`].
    pub faults: FaultPlan,
    /// A candidate whose steady speed (the last warm-up batch's median run) is more than this
    /// many times the best median so far is recorded with that one run: more runs cannot make
    /// it the winner, and in an exhaustive run most of the space is such candidates. `None`
    /// times every candidate in full.
    pub prune_factor: Option<f64>,
    /// Time with the host clock even when the device has timestamps (tests of the fallback
    /// devices without timestamps get; `ROCKY_HOST_TIMING=1` does the same from outside).
    pub force_host_timing: bool,
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
            force_host_timing: false,
        }
    }
}

/// How trials on `ctx`'s device are timed under `options`.
pub fn timing_method(ctx: &Context, options: &MeasureOptions) -> TimingMethod {
    if options.force_host_timing {
        TimingMethod::Host
    } else {
        TimingMethod::for_device(ctx.info())
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
    trial_of(
        Schedule::Gemm(*schedule),
        compiled,
        options,
        fault,
        host,
        |kernel, driver_stats| {
            run_trial(
                ctx,
                cache,
                caps,
                w,
                schedule,
                kernel,
                inputs,
                options,
                fault,
                incumbent_s,
                driver_stats,
            )
        },
    )
}

/// [`measure_gemm`] for a GEMV schedule (M ≤ 8): the same checked run and timing, in the
/// GEMV's grid, the trial recorded under its own schedule.
#[allow(clippy::too_many_arguments)]
pub fn measure_gemv(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    caps: &DeviceCaps,
    w: &GemmWorkload,
    schedule: &GemvSchedule,
    compiled: Result<CompiledKernel, Refusal>,
    inputs: &GemmInputs,
    options: &MeasureOptions,
    fault: Option<Fault>,
    incumbent_s: Option<f64>,
    host: &str,
) -> Trial {
    let twin = rocky_compiler::templates::gemv::reference::arithmetic_twin(schedule);
    trial_of(
        Schedule::Gemv(*schedule),
        compiled,
        options,
        fault,
        host,
        |kernel, driver_stats| {
            let gpu = GemmOnGpu::for_gemv(ctx, cache, kernel, w, schedule, caps, inputs, fault);
            checked_and_timed(
                ctx,
                gpu,
                w,
                &twin,
                inputs,
                options,
                fault,
                incumbent_s,
                driver_stats,
            )
        },
    )
}

/// The frame every kind of trial shares: a refused compile, the spirv-val stage, then `run`
/// (pipeline, checked run, timing), whose error becomes a failed trial (marked [`INJECTED`]
/// where it is the injected fault's kind) and whose timing an Ok one; the driver statistics
/// `run` kept go into the trial either way.
pub(crate) fn trial_of(
    schedule: Schedule,
    compiled: Result<CompiledKernel, Refusal>,
    options: &MeasureOptions,
    fault: Option<Fault>,
    host: &str,
    run: impl FnOnce(
        &CompiledKernel,
        &mut Option<BTreeMap<String, f64>>,
    ) -> Result<Timing, (FailureKind, String)>,
) -> Trial {
    let failed = |kind: FailureKind, message: String| {
        Trial::failed(schedule, kind, message, host.to_string())
    };
    let kernel = match compiled {
        Ok(k) => k,
        Err(r) => return failed(FailureKind::Refused, r.to_string()),
    };
    let mut driver_stats = None;
    let result = check_spirv(&kernel, options.validate, fault)
        .and_then(|()| run(&kernel, &mut driver_stats));
    let trial = match result {
        Ok(timing) => Trial {
            schedule,
            status: TrialStatus::Ok,
            median_s: timing.median_ms * 1e-3,
            min_s: timing.min_ms * 1e-3,
            max_s: timing.max_ms * 1e-3,
            gflops: timing.gflops,
            date: Trial::now_unix_s(),
            host: host.to_string(),
            driver_stats: None,
        },
        Err((kind, message)) => match fault {
            Some(f) if f.kind() == kind => failed(kind, format!("{INJECTED} {message}")),
            _ => failed(kind, message),
        },
    };
    Trial {
        driver_stats,
        ..trial
    }
}

/// The spirv-val stage: Err when the validator rejects the kernel (or cannot run). An
/// injected `spirv_val` fault validates the kernel without its last instruction; those
/// words are only ever shown to the validator, never to the driver.
pub(crate) fn check_spirv(
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

/// Keeps a trial's driver statistics (`driver_stats` gets them, flattened, where the device
/// reported any) and refuses, untimed, a kernel the driver's compiler spills registers for:
/// such a kernel is slow on every device and never the winner worth a timing. Shared by the
/// GEMM and attention trials.
pub(crate) fn keep_driver_stats(
    statistics: Option<&PipelineStatistics>,
    driver_stats: &mut Option<BTreeMap<String, f64>>,
) -> Result<(), (FailureKind, String)> {
    let Some(stats) = statistics else {
        return Ok(());
    };
    let flat = stats.flat();
    let spilling = rocky_runtime::spilling(&flat);
    *driver_stats = Some(flat);
    if spilling.is_empty() {
        return Ok(());
    }
    let figures: Vec<String> = spilling.iter().map(|(n, v)| format!("{n} {v}")).collect();
    Err((
        FailureKind::Spills,
        format!(
            "skipped: the driver's compiler spills registers ({})",
            figures.join(", ")
        ),
    ))
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
    driver_stats: &mut Option<BTreeMap<String, f64>>,
) -> Result<Timing, (FailureKind, String)> {
    let gpu = GemmOnGpu::with_fault(ctx, cache, kernel, w, s, caps, inputs, fault);
    checked_and_timed(
        ctx,
        gpu,
        w,
        s,
        inputs,
        options,
        fault,
        incumbent_s,
        driver_stats,
    )
}

/// The checked run and the timed runs of a GEMM (or GEMV) set up on the device.
#[allow(clippy::too_many_arguments)]
fn checked_and_timed(
    ctx: &Context,
    gpu: Result<GemmOnGpu, GpuError>,
    w: &GemmWorkload,
    s: &GemmSchedule,
    inputs: &GemmInputs,
    options: &MeasureOptions,
    fault: Option<Fault>,
    incumbent_s: Option<f64>,
    driver_stats: &mut Option<BTreeMap<String, f64>>,
) -> Result<Timing, (FailureKind, String)> {
    let mut gpu = gpu.map_err(classify)?;
    keep_driver_stats(gpu.statistics.as_ref(), driver_stats)?;
    gpu.timeout = options.timeout;
    gpu.timing = timing_method(ctx, options);
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
    timed_runs(
        ctx,
        &gpu,
        gpu.timing,
        one_run,
        options,
        incumbent_s,
        w.flops(),
    )
}

/// The timed part of a trial, after its checked run took `one_run`: warm-up to steady speed,
/// then `options.runs` timed runs (fewer when a run is slow, one when the steady speed is
/// hopeless against `incumbent_s`), timed by `timing`, and their figures at `flops` per run.
pub(crate) fn timed_runs(
    ctx: &Context,
    gpu: &dyn TimedRuns,
    timing: TimingMethod,
    one_run: Duration,
    options: &MeasureOptions,
    incumbent_s: Option<f64>,
    flops: u64,
) -> Result<Timing, (FailureKind, String)> {
    // The checked run (with its download) bounds one run's time from above.
    let affordable = options.max_timed.as_secs_f64() / one_run.as_secs_f64().max(1e-9);
    let runs = options.runs.min(affordable.floor() as u32).max(1);
    let steady = warm_up(ctx, gpu, one_run, options)?;
    // The steady batch's median decides whether the `runs` timed runs are worth it.
    let probe = median(&steady);
    let hopeless = match (options.prune_factor, incumbent_s) {
        (Some(factor), Some(best)) => probe.as_secs_f64() > factor * best,
        _ => false,
    };
    // The steady batch was timed at steady speed: its runs count among the `runs`.
    let runs = runs as usize;
    let times = if hopeless {
        vec![probe]
    } else if timing == TimingMethod::Host {
        host_samples(ctx, gpu, probe, runs, options)?
    } else if steady.len() >= runs {
        steady[steady.len() - runs..].to_vec()
    } else {
        let mut times = steady;
        let more = (runs - times.len()) as u32;
        times.extend(gpu.time_runs(ctx, more).map_err(classify)?);
        times
    };
    let figures = Timing::of(&times, flops);
    if !(figures.min_ms > 0.0 && figures.median_ms.is_finite()) {
        let clock = match timing {
            TimingMethod::Gpu => "GPU timestamps",
            TimingMethod::Host => "the host clock",
        };
        return Err((
            FailureKind::Other,
            format!("{clock} gave no usable time ({figures:?})"),
        ));
    }
    Ok(figures)
}

/// Host timing: `runs` figures (the first is the steady warm-up batch's, `steady`), each the
/// mean run of one command buffer holding enough runs to last about `WARMUP_BATCH_GPU`, so
/// the submission latency (tens of microseconds to a millisecond) is a small part of it; fewer
/// figures when they would take longer than `options.max_timed`.
pub(crate) fn host_samples(
    ctx: &Context,
    gpu: &dyn TimedRuns,
    steady: Duration,
    runs: usize,
    options: &MeasureOptions,
) -> Result<Vec<Duration>, (FailureKind, String)> {
    let per_run = steady.max(Duration::from_nanos(1));
    let reps = (WARMUP_BATCH_GPU.as_secs_f64() / per_run.as_secs_f64()).ceil();
    let reps = (reps as u32).clamp(1, 10_000);
    let per_sample = per_run.as_secs_f64() * f64::from(reps);
    let affordable = (options.max_timed.as_secs_f64() / per_sample).floor() as usize;
    let mut samples = vec![steady];
    while samples.len() < runs.min(affordable.max(1)) {
        samples.push(median(&gpu.time_runs(ctx, reps).map_err(classify)?));
    }
    Ok(samples)
}

/// A kernel set up on the device that can time back-to-back runs of itself (the GEMM, the
/// attention): what the warm-up and the host-timed samples need.
pub trait TimedRuns {
    /// Times of `runs` back-to-back runs (one command buffer).
    fn time_runs(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError>;
}

impl TimedRuns for GemmOnGpu {
    fn time_runs(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError> {
        self.time(ctx, runs)
    }
}

/// GPU time one warm-up batch aims at: long enough that a batch's submission overhead is
/// small against it, so the device is busy (and raises its clocks) for most of the warm-up.
const WARMUP_BATCH_GPU: Duration = Duration::from_millis(10);
/// A batch whose median run is within this fraction of the previous batch's (not faster by
/// more) means the device's clocks have settled.
const STEADY_TOLERANCE: f64 = 0.02;

/// Runs untimed-for-the-record batches until the device is at steady speed, and returns the
/// per-run GPU times of the last batch.
///
/// GPUs lower their clocks while idle (DVFS), and between two trials the device idles while
/// the pipeline is created and the result is checked on the CPU. Without this, a trial is
/// timed partly at idle clocks: on the H200 a 0.12 ms GEMM then read 0.66 ms, while a
/// prefill, which keeps the GPU busy, runs at full clocks. Batches are sized from GPU time
/// (not the checked run's wall time, which is mostly submission and download), and the
/// warm-up ends once it has lasted `options.warmup` and a batch is no faster than the one
/// before it, or after `options.max_timed` or `MAX_WARMUP_BATCHES` batches. No clock speed or
/// ramp time is assumed: a device without DVFS settles after two batches.
pub(crate) fn warm_up(
    ctx: &Context,
    gpu: &dyn TimedRuns,
    one_run: Duration,
    options: &MeasureOptions,
) -> Result<Vec<Duration>, (FailureKind, String)> {
    let start = Instant::now();
    // The checked run's wall time bounds one run's GPU time from above.
    let mut per_run = one_run.max(Duration::from_nanos(1));
    let mut previous: Option<Duration> = None;
    let mut batch = Vec::new();
    for _ in 0..MAX_WARMUP_BATCHES {
        let size = (WARMUP_BATCH_GPU.as_secs_f64() / per_run.as_secs_f64()).ceil();
        let size = (size as u32).clamp(1, options.runs.max(1) * 100);
        batch = gpu.time_runs(ctx, size).map_err(classify)?;
        let now = median(&batch);
        let settled = previous
            .is_some_and(|p| now.as_secs_f64() >= p.as_secs_f64() * (1.0 - STEADY_TOLERANCE));
        // `max_timed` also bounds the warm-up of a device whose speed keeps moving (a
        // shared CPU device under load).
        if (settled && start.elapsed() >= options.warmup) || start.elapsed() >= options.max_timed {
            break;
        }
        previous = Some(now);
        per_run = now.max(Duration::from_nanos(1));
    }
    Ok(batch)
}

/// Keeps the device busy with `gpu`'s runs until its speed has settled, for at least `least`
/// (the trials' warm-up, for benchmarks outside the tuner): a kernel timed right after a CPU
/// check of its output would otherwise run at the clocks of an idle GPU (on an H200, bench-gemm
/// timed the 3B's down projection 4.5x slower than the same kernel inside a prefill).
/// `one_run` bounds one run's time from above (the checked run's wall time).
pub fn settle_clocks(
    ctx: &Context,
    gpu: &dyn TimedRuns,
    one_run: Duration,
    least: Duration,
) -> Result<(), String> {
    let options = MeasureOptions {
        warmup: least,
        ..MeasureOptions::default()
    };
    warm_up(ctx, gpu, one_run, &options)
        .map(|_| ())
        .map_err(|(_, message)| message)
}

/// How long this device must be kept busy before a kernel runs at its sustained speed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmupCalibration {
    /// Load, from idle, until a run first came within [`RAMP_TOLERANCE`] of the sustained
    /// speed.
    pub ramp: Duration,
    /// The warm-up to use per candidate: the ramp with a margin, within the floor and cap.
    pub warmup: Duration,
    /// A run at sustained speed.
    pub sustained: Duration,
}

/// Idle time before the calibration, so the device starts from a low-clock state like the
/// one tuning leaves it in (between trials the GPU is busy only a small part of the time:
/// pipelines are being created, results checked). The tuner starts right after the model's
/// upload, which leaves clocks high for a while: 250 ms of idle did not show the H200's ramp.
const CALIBRATION_IDLE: Duration = Duration::from_secs(2);
/// How long the calibration keeps the device busy.
const CALIBRATION_LOAD: Duration = Duration::from_millis(1200);
/// A run within this fraction of the sustained run time counts as at speed.
pub const RAMP_TOLERANCE: f64 = 0.03;

/// Measures how long `gpu`'s kernel needs from idle to its sustained speed: after
/// `CALIBRATION_IDLE`, back-to-back batches for `CALIBRATION_LOAD`; the sustained time is the
/// median of the last quarter of the batches, the ramp the load before the first batch at
/// that speed. GPUs change clocks with load (DVFS) on their own schedule: on the H200 a 30 ms
/// warm-up left trials timed at 2-2.5x their sustained time while 300 ms gave it, and a
/// Mali's devfreq governor has its own period. Measuring it keeps the protocol free of any
/// device's constants: a device at constant speed (lavapipe) gets `floor`.
pub fn calibrate_warmup(
    ctx: &Context,
    gpu: &dyn TimedRuns,
    floor: Duration,
    cap: Duration,
) -> Result<WarmupCalibration, GpuError> {
    // A first run outside the measurement: pipeline and memory are then resident.
    let first = gpu.time_runs(ctx, 1)?;
    let mut per_run = median(&first).max(Duration::from_nanos(1));
    std::thread::sleep(CALIBRATION_IDLE);
    let start = Instant::now();
    // (load before the batch, the batch's median run)
    let mut samples: Vec<(Duration, Duration)> = Vec::new();
    while start.elapsed() < CALIBRATION_LOAD || samples.len() < 4 {
        let before = start.elapsed();
        let size = (WARMUP_BATCH_GPU.as_secs_f64() / 2.0 / per_run.as_secs_f64()).ceil();
        let batch = gpu.time_runs(ctx, (size as u32).clamp(1, 10_000))?;
        per_run = median(&batch).max(Duration::from_nanos(1));
        samples.push((before, per_run));
        if samples.len() >= 4 && start.elapsed() >= 2 * CALIBRATION_LOAD {
            break;
        }
    }
    let (ramp, sustained) = ramp_and_sustained(&samples, start.elapsed());
    // Half again the ramp: the clock governor's period varies from one ramp to the next.
    let warmup = ramp.mul_f64(1.5).clamp(floor, cap.max(floor));
    Ok(WarmupCalibration {
        ramp,
        warmup,
        sustained,
    })
}

/// From `(load before the batch, its median run)` samples in order: the sustained run time
/// (median of the last quarter) and the load before the first batch within
/// [`RAMP_TOLERANCE`] of it, or within the last quarter's own spread where that is wider (a
/// shared CPU device's noise is no clock ramp); `total` if none.
fn ramp_and_sustained(samples: &[(Duration, Duration)], total: Duration) -> (Duration, Duration) {
    let tail: Vec<Duration> = samples[samples.len() * 3 / 4..]
        .iter()
        .map(|s| s.1)
        .collect();
    let sustained = median(&tail);
    let slowest = tail.iter().max().copied().unwrap_or_default();
    let limit = (sustained.as_secs_f64() * (1.0 + RAMP_TOLERANCE)).max(slowest.as_secs_f64());
    let ramp = samples
        .iter()
        .find(|s| s.1.as_secs_f64() <= limit)
        .map_or(total, |s| s.0);
    (ramp, sustained)
}

/// [`crate::graph::median`] of durations; zero when empty.
pub(crate) fn median(times: &[Duration]) -> Duration {
    let seconds: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    let m = crate::graph::median(&seconds);
    if m.is_finite() {
        Duration::from_secs_f64(m)
    } else {
        Duration::ZERO
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1e3)
    }

    #[test]
    fn the_ramp_ends_at_the_first_batch_at_sustained_speed() {
        // A clock step after 200 ms of load: 0.5 ms runs before it, 0.2 ms after.
        let samples: Vec<_> = (0..60)
            .map(|i| {
                let at = ms(20.0 * i as f64);
                (at, if at < ms(200.0) { ms(0.5) } else { ms(0.2) })
            })
            .collect();
        assert_eq!(
            ramp_and_sustained(&samples, ms(1200.0)),
            (ms(200.0), ms(0.2))
        );
        // A constant-speed device (noise within the tolerance) is at speed at once.
        let flat: Vec<_> = (0..8)
            .map(|i| {
                (
                    ms(100.0 * i as f64),
                    ms(if i % 2 == 0 { 10.0 } else { 10.2 }),
                )
            })
            .collect();
        assert_eq!(ramp_and_sustained(&flat, ms(800.0)).0, ms(0.0));
        // Noise of ±20% throughout (a loaded CPU device) is no ramp either.
        let noisy: Vec<_> = (0..16)
            .map(|i| (ms(50.0 * i as f64), ms([10.0, 12.0, 9.0, 11.5][i % 4])))
            .collect();
        assert_eq!(ramp_and_sustained(&noisy, ms(800.0)).0, ms(0.0));
    }

    #[test]
    fn no_runs_have_no_median_but_zero() {
        assert_eq!(median(&[ms(3.0), ms(1.0), ms(2.0)]), ms(2.0));
        assert_eq!(median(&[]), Duration::ZERO);
    }
}
