//! The tuning loop: for each workload, measure the default schedule, then the search's
//! candidates (compiled in parallel, measured one at a time) under a trial budget and a time
//! budget, storing every trial in the database as it completes.

use crate::attention_gpu::{measure_attention, AttentionInputs, AttentionOnGpu};
use crate::carry_over::{nearest_winners, seed_budget};
use crate::fingerprint::fingerprint;
use crate::gemm_gpu::{GemmInputs, GemmOnGpu};
use crate::measure::{
    calibrate_warmup, measure_gemm, measure_gemv, timing_method, MeasureOptions, WarmupCalibration,
};
use crate::search::{Search, Strategy};
use crate::static_rank::{self, static_seed_budget, StaticOutcome};
use crate::workloads::ModelWorkload;
use rayon::prelude::*;
use rocky_compiler::{
    compiler_version, default_schedule, instantiate, search_space, DeviceCaps, Schedule, Workload,
};
use rocky_runtime::{
    device_caps, Context, DeviceSelector, PipelineCache, RuntimeError, TimingMethod,
};
use rocky_tuning_db::{
    DbError, DeviceFingerprint, FailureKind, Lookup, RecordKey, Trial, TrialStatus, TuningDb,
};
use std::time::{Duration, Instant};

/// The seeded inputs of one workload's trials (and, for attention, its reference).
pub enum TrialInputs {
    Gemm(GemmInputs),
    Attention(Box<AttentionInputs>),
}

/// Least warm-up per candidate on a GPU (not a CPU implementation), whatever the calibration
/// measured: the calibration runs after the model's upload and can catch the clocks still
/// high. On the H200 a calibration of 8 ms gave 30 ms warm-ups that timed attention trials at
/// 5x their sustained time (a stored "winner" then slowed pp4096 from 26595 to 25154 tok/s),
/// while 200 ms and more matched `rocky bench-attention` (docs/measurements/2026-12-03b-h200.md).
pub const GPU_MIN_WARMUP: Duration = Duration::from_millis(200);

/// Candidates compiled together before they are measured one by one.
const COMPILE_BATCH: usize = 8;

#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub strategy: Strategy,
    /// Trials per workload, counting those already in the database (so a second run with
    /// the same budget only finishes what an interrupted one left).
    pub trials: usize,
    /// Wall-clock budget of the whole run, shared evenly by the workloads still to tune.
    pub time: Duration,
    pub seed: u64,
    pub measure: MeasureOptions,
    /// Measure, before the first workload, how long this device needs to reach its sustained
    /// speed, and warm each candidate up that long (at least `measure.warmup`); see
    /// [`calibrate_warmup`].
    pub calibrate_warmup: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("the device could not be re-opened after it was lost: {0}")]
    Device(#[from] RuntimeError),
    #[error("{0}")]
    Unsupported(String),
}

/// Why a workload's search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The database already held the trial budget's worth of trials.
    AlreadyDone,
    TrialBudget,
    TimeBudget,
    /// Every schedule of the space was tried.
    SpaceExhausted,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::AlreadyDone => "already done",
            StopReason::TrialBudget => "trial budget",
            StopReason::TimeBudget => "time budget",
            StopReason::SpaceExhausted => "space exhausted",
        }
    }
}

/// What tuning one workload found.
#[derive(Clone, Debug)]
pub struct WorkloadReport {
    pub workload: Workload,
    pub labels: Vec<String>,
    pub space: usize,
    /// The default schedule's trial (measured now or found in the database).
    pub default: Option<Trial>,
    /// The fastest Ok trial of the key after this run.
    pub best: Option<Trial>,
    /// Trials found in the database for this key before the run (not measured again).
    pub skipped: usize,
    pub measured: usize,
    pub failed: usize,
    pub stop: StopReason,
    /// How this run's trials were timed (GPU timestamps, or the host clock on a device
    /// without them); trials found in the database may have been timed otherwise.
    pub timing: TimingMethod,
}

/// What the tuner tells its caller as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The warm-up every candidate gets, measured on this device.
    WarmupCalibrated(WarmupCalibration),
    WorkloadStart {
        index: usize,
        count: usize,
        workload: &'a Workload,
        space: usize,
        already_recorded: usize,
    },
    Trial {
        index: usize,
        count: usize,
        /// 1-based number of this trial among the key's trials.
        number: usize,
        trial: &'a Trial,
        best: Option<&'a Trial>,
    },
    WorkloadDone {
        index: usize,
        count: usize,
        report: &'a WorkloadReport,
    },
}

/// A tuning session on one device with one database.
pub struct Tuner<'db> {
    selector: DeviceSelector,
    ctx: Context,
    caps: DeviceCaps,
    cache: Option<PipelineCache>,
    db: &'db TuningDb,
    device: DeviceFingerprint,
    compiler_version: String,
    host: String,
    /// Devices opened so far: 1, plus one per recovery from a lost device.
    contexts_opened: usize,
}

impl<'db> Tuner<'db> {
    /// `selector` re-opens the device if it is lost during a trial.
    pub fn new(ctx: Context, selector: DeviceSelector, db: &'db TuningDb) -> Tuner<'db> {
        Tuner {
            caps: device_caps(ctx.info(), ctx.caps()),
            cache: PipelineCache::open_default(&ctx).ok(),
            device: fingerprint(ctx.info()),
            compiler_version: compiler_version(),
            host: host_name(),
            selector,
            ctx,
            db,
            contexts_opened: 1,
        }
    }

    /// How many devices this tuner has used: 1, plus one per device loss it recovered from.
    pub fn contexts_opened(&self) -> usize {
        self.contexts_opened
    }

    pub fn device(&self) -> &DeviceFingerprint {
        &self.device
    }

    pub fn key(&self, workload: &Workload) -> RecordKey {
        RecordKey {
            device: self.device.clone(),
            compiler_version: self.compiler_version.clone(),
            workload: *workload,
        }
    }

    /// How this tuner's trials are timed under `measure`.
    pub fn timing(&self, measure: &MeasureOptions) -> TimingMethod {
        timing_method(&self.ctx, measure)
    }

    /// Tunes every workload in turn.
    pub fn tune(
        &mut self,
        workloads: &[ModelWorkload],
        options: &TuneOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<WorkloadReport>, TuneError> {
        let start = Instant::now();
        let mut options = options.clone();
        if options.calibrate_warmup {
            // The calibration keeps its result within [floor, cap]: on a GPU the floor is
            // GPU_MIN_WARMUP, also where the calibration kernel cannot run.
            if !self.ctx.info().is_cpu {
                options.measure.warmup = options.measure.warmup.max(GPU_MIN_WARMUP);
            }
            if let Some(c) = self.calibrate(workloads, &options.measure) {
                options.measure.warmup = c.warmup;
                progress(Progress::WarmupCalibrated(c));
            }
        }
        let options = &options;
        let mut reports = Vec::new();
        for (index, mw) in workloads.iter().enumerate() {
            let left = options.time.saturating_sub(start.elapsed());
            let deadline = Instant::now() + left / (workloads.len() - index) as u32;
            let report = self.tune_one(mw, index, workloads.len(), options, deadline, progress)?;
            progress(Progress::WorkloadDone {
                index,
                count: workloads.len(),
                report: &report,
            });
            reports.push(report);
        }
        if let Some(cache) = &self.cache {
            // A cache that cannot be saved only costs compile time next run.
            let _ = cache.save();
        }
        Ok(reports)
    }

    /// Calibrates the warm-up (at least `measure.warmup`) on the default schedule of the
    /// cheapest GEMM of `workloads`, or of the first attention workload where there is no GEMM
    /// (`--workload attention`: uncalibrated, its trials got the 30 ms floor and the H200 was
    /// timed at 5x its sustained speed). `None` when that kernel cannot run: the trials will
    /// then record why, and use the floor.
    fn calibrate(
        &self,
        workloads: &[ModelWorkload],
        measure: &MeasureOptions,
    ) -> Option<WarmupCalibration> {
        let cheapest_gemm = workloads
            .iter()
            .filter_map(|mw| match mw.workload {
                Workload::Gemm(g) => Some(g),
                _ => None,
            })
            .min_by_key(|g| g.flops());
        let timing = timing_method(&self.ctx, measure);
        let floor = measure.warmup;
        if let Some(gemm) = cheapest_gemm {
            let workload = Workload::Gemm(gemm);
            let Schedule::Gemm(schedule) = default_schedule(&workload, &self.caps) else {
                return None;
            };
            let kernel = instantiate(&workload, &Schedule::Gemm(schedule), &self.caps).ok()?;
            let inputs = GemmInputs::random(&gemm, measure.seed);
            let mut gpu = GemmOnGpu::new(
                &self.ctx,
                self.cache.as_ref(),
                &kernel,
                &gemm,
                &schedule,
                &self.caps,
                &inputs,
            )
            .ok()?;
            gpu.timing = timing;
            return calibrate_warmup(&self.ctx, &gpu, floor, MAX_CALIBRATED_WARMUP).ok();
        }
        let attention = workloads.iter().find_map(|mw| match mw.workload {
            Workload::Attention(a) => Some(a),
            _ => None,
        })?;
        let workload = Workload::Attention(attention);
        let Schedule::Attention(schedule) = default_schedule(&workload, &self.caps) else {
            return None;
        };
        let kernel = instantiate(&workload, &Schedule::Attention(schedule), &self.caps).ok()?;
        let inputs = AttentionInputs::random(&attention, None, measure.seed);
        let mut gpu = AttentionOnGpu::new(
            &self.ctx,
            self.cache.as_ref(),
            &kernel,
            &attention,
            &schedule,
            &inputs,
        )
        .ok()?;
        gpu.timing = timing;
        calibrate_warmup(&self.ctx, &gpu, floor, MAX_CALIBRATED_WARMUP).ok()
    }

    fn tune_one(
        &mut self,
        mw: &ModelWorkload,
        index: usize,
        count: usize,
        options: &TuneOptions,
        deadline: Instant,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<WorkloadReport, TuneError> {
        let workload = mw.workload;
        if !matches!(
            workload,
            Workload::Gemm(_) | Workload::Gemv(_) | Workload::Attention(_)
        ) {
            return Err(TuneError::Unsupported(format!(
                "the tuner measures gemm, gemv and attention workloads, not {}",
                workload.kind()
            )));
        }
        let key = self.key(&workload);
        let space = search_space(&workload, &self.caps);
        let default = default_schedule(&workload, &self.caps);
        let existing = self.db.trials(&key)?;
        progress(Progress::WorkloadStart {
            index,
            count,
            workload: &workload,
            space: space.len(),
            already_recorded: existing.len(),
        });
        let mut report = WorkloadReport {
            workload,
            labels: mw.labels.clone(),
            space: space.len(),
            default: existing.iter().find(|t| t.schedule == default).cloned(),
            best: None,
            skipped: existing.len(),
            measured: 0,
            failed: 0,
            stop: StopReason::AlreadyDone,
            timing: timing_method(&self.ctx, &options.measure),
        };
        let mut search = Search::new(
            options.strategy,
            space,
            options.seed ^ workload_seed(&workload),
        );
        for t in &existing {
            search.mark_tried(&t.schedule, t.is_ok().then_some(t.median_s));
        }
        search.seed(&self.seed_schedules(&workload, options.trials)?);
        let inputs =
            match workload {
                Workload::Attention(a) => TrialInputs::Attention(Box::new(
                    AttentionInputs::random(&a, None, options.measure.seed),
                )),
                Workload::Gemm(g) | Workload::Gemv(g) => {
                    TrialInputs::Gemm(GemmInputs::random(&g, options.measure.seed))
                }
                _ => unreachable!("checked above"),
            };
        let mut recorded = existing.len();
        // The default first, always: "best" can then never be slower than the default.
        if report.default.is_none() {
            let trial = self.measure(&workload, &default, &inputs, options, recorded + 1)?;
            search.mark_tried(&default, trial.is_ok().then_some(trial.median_s));
            recorded += 1;
            self.after_trial(&key, &trial, &mut report, index, count, recorded, progress)?;
            report.default = Some(trial);
        }
        report.stop = loop {
            if recorded >= options.trials {
                break if report.measured == 0 {
                    StopReason::AlreadyDone
                } else {
                    StopReason::TrialBudget
                };
            }
            if Instant::now() >= deadline {
                break StopReason::TimeBudget;
            }
            let batch = search.next_batch(COMPILE_BATCH.min(options.trials - recorded));
            if batch.is_empty() {
                break StopReason::SpaceExhausted;
            }
            let schedules: Vec<Schedule> = batch.iter().map(|&i| search.space()[i]).collect();
            // Compiling is pure: all candidates of the batch at once.
            let caps = &self.caps;
            let kernels: Vec<_> = schedules
                .par_iter()
                .map(|s| instantiate(&workload, s, caps))
                .collect();
            for ((&i, schedule), kernel) in batch.iter().zip(&schedules).zip(kernels) {
                if Instant::now() >= deadline && report.measured > 0 {
                    break;
                }
                if self.db.has_trial(&key, schedule)? {
                    continue;
                }
                let number = recorded + 1;
                let trial =
                    self.measure_compiled(&workload, schedule, kernel, &inputs, options, number)?;
                search.record(i, trial.is_ok().then_some(trial.median_s));
                recorded += 1;
                self.after_trial(&key, &trial, &mut report, index, count, recorded, progress)?;
            }
        };
        report.best = self.db.best(&key)?;
        Ok(report)
    }

    /// Ranks the candidates of every GEMM workload without running them (`rocky tune
    /// --static`, see [`static_rank`](crate::static_rank)) and stores each ranking as an
    /// unmeasured seed ranking; attention workloads are left out. `sample` candidates per
    /// workload at most (the default schedule always among them).
    pub fn rank_static(
        &self,
        workloads: &[ModelWorkload],
        sample: usize,
        seed: u64,
        progress: &mut dyn FnMut(usize, usize, &ModelWorkload, &StaticOutcome, usize),
    ) -> Result<Vec<(ModelWorkload, StaticOutcome)>, TuneError> {
        let gemms: Vec<&ModelWorkload> = workloads
            .iter()
            .filter(|mw| matches!(mw.workload, Workload::Gemm(_)))
            .collect();
        let mut out = Vec::new();
        // Driver-compiled candidates are costed as `rocky predict` costs them, with the
        // database's calibration of this device where it holds one.
        let calibration = self.db.calibration_for_device(&self.device)?;
        let pm = static_rank::predict_model(&self.ctx, calibration.as_ref());
        for (index, mw) in gemms.iter().enumerate() {
            let Workload::Gemm(w) = mw.workload else {
                continue;
            };
            let space = search_space(&mw.workload, &self.caps);
            let default = default_schedule(&mw.workload, &self.caps);
            let candidates = static_rank::sample(&space, &default, sample, seed);
            let Some(outcome) = static_rank::rank_gemm(
                &self.ctx,
                &self.caps,
                &w,
                &candidates,
                &default,
                &self.host,
                &pm,
            ) else {
                continue;
            };
            self.db
                .set_seed_ranking(&self.key(&mw.workload), &outcome.ranking)?;
            progress(index, gemms.len(), mw, &outcome, space.len());
            out.push(((*mw).clone(), outcome));
        }
        Ok(out)
    }

    /// Schedules worth trying first for `workload`: the best-ranked candidates of a static
    /// ranking of this GPU (`rocky tune --static`, unmeasured: they are only tried first),
    /// its best under another driver version of this GPU (a seed, never used blindly), then
    /// the winners of this device's other workloads ([`carry_over`](crate::carry_over)).
    fn seed_schedules(&self, workload: &Workload, trials: usize) -> Result<Vec<Schedule>, DbError> {
        let ranked =
            match self
                .db
                .seed_ranking_for_gpu(&self.device, &self.compiler_version, workload)?
            {
                Some(r) => r.top(static_seed_budget(trials)),
                None => Vec::new(),
            };
        let max = seed_budget(trials) + ranked.len();
        let mut seeds = ranked;
        if let Lookup::SeedOnly(t) =
            self.db
                .lookup_for_device(&self.device, &self.compiler_version, workload)?
        {
            if !seeds.contains(&t.schedule) {
                seeds.push(t.schedule);
            }
        }
        // The template's own picks (shapes a short search rarely draws).
        for s in rocky_compiler::seed_schedules(workload, &self.caps) {
            if !seeds.contains(&s) {
                seeds.push(s);
            }
        }
        let mut winners = Vec::new();
        for key in self.db.keys_for_device(&self.device)? {
            if key.compiler_version != self.compiler_version {
                continue;
            }
            if let Some(best) = self.db.best(&key)? {
                winners.push((key.workload, best.schedule));
            }
        }
        for s in nearest_winners(workload, &winners, max) {
            if !seeds.contains(&s) {
                seeds.push(s);
            }
        }
        seeds.truncate(max);
        Ok(seeds)
    }

    #[allow(clippy::too_many_arguments)]
    fn after_trial(
        &self,
        key: &RecordKey,
        trial: &Trial,
        report: &mut WorkloadReport,
        index: usize,
        count: usize,
        number: usize,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), TuneError> {
        self.db.add_trial(key, trial)?;
        report.measured += 1;
        if !trial.is_ok() {
            report.failed += 1;
        }
        let best = self.db.best(key)?;
        progress(Progress::Trial {
            index,
            count,
            number,
            trial,
            best: best.as_ref(),
        });
        Ok(())
    }

    fn measure(
        &mut self,
        workload: &Workload,
        schedule: &Schedule,
        inputs: &TrialInputs,
        options: &TuneOptions,
        number: usize,
    ) -> Result<Trial, TuneError> {
        let kernel = instantiate(workload, schedule, &self.caps);
        self.measure_compiled(workload, schedule, kernel, inputs, options, number)
    }

    /// Measures trial `number` (1-based among the key's trials; it picks the trial's fault
    /// in `options.measure.faults`).
    fn measure_compiled(
        &mut self,
        workload: &Workload,
        schedule: &Schedule,
        kernel: Result<rocky_compiler::CompiledKernel, rocky_compiler::Refusal>,
        inputs: &TrialInputs,
        options: &TuneOptions,
        number: usize,
    ) -> Result<Trial, TuneError> {
        // The best so far, for pruning hopeless candidates early (never the default: it is
        // measured first, against nothing).
        let incumbent_s = self.db.best(&self.key(workload))?.map(|t| t.median_s);
        let fault = options.measure.faults.at(number);
        let trial = match (workload, schedule, inputs) {
            (Workload::Attention(w), Schedule::Attention(s), TrialInputs::Attention(inputs)) => {
                measure_attention(
                    &self.ctx,
                    self.cache.as_ref(),
                    w,
                    s,
                    kernel,
                    inputs,
                    &options.measure,
                    fault,
                    incumbent_s,
                    &self.host,
                )
            }
            (Workload::Gemm(w), Schedule::Gemm(s), TrialInputs::Gemm(inputs)) => measure_gemm(
                &self.ctx,
                self.cache.as_ref(),
                &self.caps,
                w,
                s,
                kernel,
                inputs,
                &options.measure,
                fault,
                incumbent_s,
                &self.host,
            ),
            (Workload::Gemv(w), Schedule::Gemv(s), TrialInputs::Gemm(inputs)) => measure_gemv(
                &self.ctx,
                self.cache.as_ref(),
                &self.caps,
                w,
                s,
                kernel,
                inputs,
                &options.measure,
                fault,
                incumbent_s,
                &self.host,
            ),
            _ => {
                return Ok(Trial::failed(
                    *schedule,
                    FailureKind::Refused,
                    format!(
                        "a {} schedule for a {} workload",
                        schedule.kind(),
                        workload.kind()
                    ),
                    self.host.clone(),
                ))
            }
        };
        if matches!(
            &trial.status,
            TrialStatus::Failed {
                kind: FailureKind::DeviceLost,
                ..
            }
        ) {
            // Everything made from the lost device is unusable: start over on a new one.
            self.cache = None;
            self.ctx = Context::new(&self.selector)?;
            self.contexts_opened += 1;
            self.cache = PipelineCache::open_default(&self.ctx).ok();
        }
        Ok(trial)
    }
}

/// Longest warm-up a calibration may ask of every candidate.
const MAX_CALIBRATED_WARMUP: Duration = Duration::from_secs(1);

/// Different workloads get different (but reproducible) search orders from one `--seed`.
fn workload_seed(w: &Workload) -> u64 {
    let text = serde_json::to_string(w).unwrap_or_default();
    // FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// This machine's name for the trials' `host` field.
pub fn host_name() -> String {
    let from_file = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| from_file("/proc/sys/kernel/hostname"))
        .or_else(|| from_file("/etc/hostname"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
