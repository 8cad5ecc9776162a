//! Graph-level tuning: after the kernels, time whole prefills to choose the ubatch size and
//! the dispatches per command buffer (docs/design.md §6), stored per device and model shape.
//!
//! Kernel schedules are tuned per exact GEMM shape, so a ubatch other than the one the
//! kernels were tuned at runs default schedules; timing whole prefills is what tells whether
//! that still wins (bigger ubatches amortize weight reads, smaller ones keep the working set
//! in cache). The same timing loop serves `rocky bench`.
//!
//! Prefills are timed by the host clock, so nothing here needs GPU timestamps; but a fast
//! prefill is worth nothing if its results are wrong (a driver that executes nothing is the
//! fastest of all). So before any timing the device's default prefill is checked against the
//! CPU reference on a short prompt ([`verify_device`]); when it disagrees nothing is timed and
//! nothing may be stored. Every timed prefill's logits are then checked against the default
//! schedules' logits of the same prompt ([`crate::logits_check`]); a candidate that fails is
//! recorded as failed and is never the choice.

use crate::fault::{self, FaultPlan, GraphFault, INJECTED};
use crate::logits_check::{
    check_logits, check_logits_with_floor, Agreement, CHECK_TOKENS, CPU_TOLERANCE, GRAPH_TOLERANCE,
};
use rocky_compiler::{KvTypes, Math, Schedule};
use rocky_models::act_quant::ActivationQuant;
use rocky_models::arch::Model;
use rocky_models::fuse::FuseOptions;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{self, ReferenceOptions};
use rocky_runtime::executor::{
    DefaultSchedules, ExecError, Executor, ExecutorOptions, GpuWeights, ScheduleSource,
    OVERLAP_MAX_UBATCH,
};
use rocky_runtime::{CommandBudget, Context};
use rocky_tuning_db::GraphChoice;
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One graph-level setting to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GraphCandidate {
    pub ubatch: usize,
    pub max_dispatches: u32,
    /// Gate and up as one GEMM with SwiGLU in its epilogue.
    pub fuse_swiglu: bool,
    /// Ubatches recorded two at a time (`ExecutorOptions::overlap`).
    pub overlap: bool,
}

impl GraphCandidate {
    /// The fusions an executor runs for this candidate.
    pub fn fuse(&self) -> FuseOptions {
        FuseOptions {
            swiglu: self.fuse_swiglu,
            ..FuseOptions::DEFAULT
        }
    }
}

/// A timed candidate.
#[derive(Clone, Debug)]
pub struct GraphTrial {
    pub candidate: GraphCandidate,
    /// Seconds of each timed prefill of the prompt.
    pub seconds: Vec<f64>,
    pub n_tokens: usize,
    /// Why a prefill's logits failed their check against the default schedules' (the
    /// candidate is then never chosen); `None` when every one passed.
    pub failure: Option<String>,
    /// The worst check: largest error over the allowed error (below 1 passed).
    pub error_ratio: f32,
}

impl GraphTrial {
    pub fn is_ok(&self) -> bool {
        self.failure.is_none()
    }

    /// Tokens per second of the median run.
    pub fn tok_s(&self) -> f64 {
        self.n_tokens as f64 / median(&self.seconds)
    }
}

pub struct GraphTuneOptions {
    pub candidates: Vec<GraphCandidate>,
    /// Prompt length of the timed prefills.
    pub n_tokens: usize,
    /// Timed prefills per candidate (after one untimed warm-up).
    pub runs: u32,
    /// Candidates are timed in order until this budget is spent (the first always is).
    pub time: Duration,
    pub seed: u64,
    /// Candidates to fail on purpose (see [`crate::fault`]); empty normally.
    pub faults: FaultPlan,
}

/// The candidates worth timing around a kernel-tuned ubatch: half, the same and double
/// (within the prompt), each with the device's default dispatches per command buffer, a
/// quarter of it and four times it, with ubatches one and two at a time, and (where
/// `can_fuse`: the model has gate/up pairs that fuse) with gate and up separate and fused.
/// The tuned ubatch with the default budget, fusion and overlap comes first: it is the
/// baseline every other candidate has to beat; the same with the other fusion comes second
/// and with the other overlap third (the settings most likely to matter: the tuned fused and
/// separate GEMMs differ by a few percent either way, overlap by up to 17 % at small ubatches);
/// then the default settings at the other ubatches, which a choice at each must beat to be
/// stored for it ([`best_per_ubatch`]).
pub fn default_candidates(
    tuned_ubatch: usize,
    n_tokens: usize,
    default_budget: &CommandBudget,
    can_fuse: bool,
) -> Vec<GraphCandidate> {
    let d = default_budget.max_dispatches.max(1);
    let first = default_settings(tuned_ubatch.min(n_tokens).max(1), default_budget);
    let fusions: &[bool] = if can_fuse {
        &[false, true]
    } else {
        &[first.fuse_swiglu]
    };
    let mut rest = BTreeSet::new();
    for ubatch in [tuned_ubatch / 2, tuned_ubatch, tuned_ubatch * 2] {
        if ubatch == 0 || ubatch > n_tokens.max(1) || ubatch > 4096 {
            continue;
        }
        for max_dispatches in [d, (d / 4).max(1), d.saturating_mul(4)] {
            for &fuse_swiglu in fusions {
                for overlap in [false, true] {
                    rest.insert(GraphCandidate {
                        ubatch,
                        max_dispatches,
                        fuse_swiglu,
                        overlap,
                    });
                }
            }
        }
    }
    rest.remove(&first);
    let flipped = [
        GraphCandidate {
            fuse_swiglu: !first.fuse_swiglu,
            ..first
        },
        GraphCandidate {
            overlap: !first.overlap,
            ..first
        },
    ];
    let defaults_elsewhere: Vec<GraphCandidate> = rest
        .iter()
        .map(|c| default_settings(c.ubatch, default_budget))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let next: Vec<GraphCandidate> = flipped
        .into_iter()
        .chain(defaults_elsewhere)
        .filter(|c| rest.remove(c))
        .collect();
    std::iter::once(first).chain(next).chain(rest).collect()
}

/// What a run at `ubatch` does without a graph choice: the device's dispatches per command
/// buffer, the default fusion, ubatches overlapped where they are small enough.
pub fn default_settings(ubatch: usize, default_budget: &CommandBudget) -> GraphCandidate {
    GraphCandidate {
        ubatch,
        max_dispatches: default_budget.max_dispatches.max(1),
        fuse_swiglu: FuseOptions::DEFAULT.swiglu,
        overlap: ubatch <= OVERLAP_MAX_UBATCH,
    }
}

/// `candidates` with the stored choice's setting second (right after the baseline), unless
/// it is among them already or its ubatch exceeds the prompt. A graph step at another
/// `--ubatch` (say 64 after 512) then re-times the stored setting beside its own in the same
/// run, so the model's choice only moves to a setting that beat it here, not to the best of a
/// neighbourhood that never held it (H200: a run at ubatch 64 replaced the 7272 tok/s choice
/// at 512 by its own best, 5996 at 128).
pub fn with_stored_choice(
    mut candidates: Vec<GraphCandidate>,
    stored: Option<&GraphChoice>,
    n_tokens: usize,
) -> Vec<GraphCandidate> {
    let Some(stored) = stored else {
        return candidates;
    };
    let c = GraphCandidate {
        ubatch: stored.ubatch as usize,
        max_dispatches: stored.max_dispatches_per_cb,
        fuse_swiglu: stored.fuse_swiglu,
        overlap: stored.overlap,
    };
    if c.ubatch == 0 || c.ubatch > n_tokens.max(1) || candidates.contains(&c) {
        return candidates;
    }
    let at = candidates.len().min(1);
    candidates.insert(at, c);
    candidates
}

/// A key naming what graph-level choices depend on: architecture, dimensions and the
/// weight types (`qwen2:24x896:ff4864:h14/2:v151936:q4_k+q6_k+q8_0`).
pub fn model_shape_key(file: &GgufFile, model: &Model) -> String {
    let c = &model.config;
    let types: BTreeSet<String> = file
        .tensors
        .iter()
        .filter(|t| t.dims.len() >= 2)
        .map(|t| t.ggml_type.name().to_lowercase())
        .collect();
    format!(
        "{}:{}x{}:ff{}:h{}/{}:v{}:{}",
        c.architecture,
        c.n_layer,
        c.n_embd,
        c.n_ff,
        c.n_head,
        c.n_head_kv,
        c.n_vocab,
        types.into_iter().collect::<Vec<_>>().join("+")
    )
}

/// A reproducible prompt of `n` token ids spread over the vocabulary (llama-bench also
/// benchmarks random tokens: prefill speed does not depend on which ids they are).
pub fn random_prompt(n_vocab: usize, n: usize, seed: u64) -> Vec<u32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| rng.gen_range(0..n_vocab.max(1)) as u32)
        .collect()
}

/// Makes executors of one model at several ubatch sizes and fusions, uploading the weights
/// once (every executor shares them).
pub struct PrefillRig<'m> {
    ctx: Context,
    file: &'m GgufFile,
    model: &'m Model,
    weights: Arc<GpuWeights>,
    n_ctx: usize,
    /// The KV cache types of its executors (f16 both unless [`PrefillRig::with_kv`]).
    kv: KvTypes,
}

impl<'m> PrefillRig<'m> {
    /// Its executors' KV caches in types `kv` (`rocky bench --cache-type-k/-v`).
    pub fn with_kv(mut self, kv: KvTypes) -> Self {
        self.kv = kv;
        self
    }

    /// Uploads the weights, calling `progress(bytes done, bytes in all)` as it goes.
    pub fn new(
        ctx: &Context,
        file: &'m GgufFile,
        model: &'m Model,
        n_ctx: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<PrefillRig<'m>, ExecError> {
        Ok(PrefillRig {
            weights: Arc::new(GpuWeights::upload_with_progress(
                ctx, file, model, progress,
            )?),
            ctx: ctx.clone(),
            file,
            model,
            n_ctx,
            kv: KvTypes::default(),
        })
    }

    /// An executor at `ubatch` with `budget`, the fusions `fuse` and ubatches overlapped or
    /// not, on the rig's weights. Each holds its own activations and KV cache: drop it (or
    /// [`PrefillRig::give_back`]) before making the next where device memory is tight.
    pub fn executor(
        &mut self,
        ubatch: usize,
        budget: CommandBudget,
        fuse: FuseOptions,
        overlap: bool,
    ) -> Result<Executor<'m>, ExecError> {
        let options = ExecutorOptions {
            ubatch,
            budget,
            timeout: Duration::from_secs(600),
            profile: false,
            fuse,
            overlap,
            kv: self.kv,
            kv_rotation: false,
        };
        Executor::new(
            &self.ctx,
            self.model,
            self.weights.clone(),
            options,
            self.n_ctx,
        )
    }

    /// Whether the model has gate/up pairs that can run fused (see `GpuWeights::combined`).
    pub fn can_fuse(&self) -> bool {
        self.weights.has_combined()
    }

    /// The longest prompt the rig's executors take.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Frees an executor's activations and KV cache (the weights stay with the rig).
    pub fn give_back(&mut self, executor: Executor<'m>) {
        drop(executor);
    }
}

/// Seconds of `runs` prefills of `ids` from position 0, after one untimed warm-up prefill
/// (which also builds the pipelines). Wall time from the first upload to the logits read
/// back, as `rocky prefill` reports it.
pub fn time_prefills(
    executor: &mut Executor,
    ids: &[u32],
    schedules: &dyn ScheduleSource,
    runs: u32,
) -> Result<Vec<f64>, ExecError> {
    prefill_seconds(executor, ids, schedules)?;
    (0..runs.max(1))
        .map(|_| prefill_seconds(executor, ids, schedules))
        .collect()
}

/// Seconds of one prefill of `ids` from position 0 (the executor's earlier prompt forgotten),
/// from the first upload to the logits read back; pipelines are built first, untimed.
pub fn prefill_seconds(
    executor: &mut Executor,
    ids: &[u32],
    schedules: &dyn ScheduleSource,
) -> Result<f64, ExecError> {
    Ok(timed_prefill(executor, ids, schedules)?.0)
}

/// [`prefill_seconds`] with the logits of the prefill.
pub fn timed_prefill(
    executor: &mut Executor,
    ids: &[u32],
    schedules: &dyn ScheduleSource,
) -> Result<(f64, Vec<f32>), ExecError> {
    executor.prepare(schedules)?;
    executor.reset();
    let start = Instant::now();
    let logits = executor.prefill(ids, schedules)?;
    Ok((start.elapsed().as_secs_f64(), logits))
}

/// How the device's default prefill compared with the CPU reference.
#[derive(Clone, Debug)]
pub struct DeviceCheck {
    pub n_tokens: usize,
    pub ubatch: usize,
    /// The comparison, or why the device's results cannot be trusted.
    pub result: Result<Agreement, String>,
}

/// The seeded prompt of `n_tokens` tokens the device checks run ([`CHECK_TOKENS`] is a good
/// length; at most the executor's context).
pub fn check_prompt(model: &Model, n_tokens: usize, seed: u64) -> Vec<u32> {
    random_prompt(model.config.n_vocab, n_tokens.max(1), seed ^ 0xC0FF_EE00)
}

/// The CPU reference's logits of `ids` (`rocky_models::reference::forward`, f16 KV cache as
/// on the GPU): the independent side of every device check.
pub fn cpu_logits(file: &GgufFile, model: &Model, ids: &[u32]) -> Result<Vec<f32>, String> {
    cpu_logits_with(file, model, ids, ActivationQuant::Exact)
}

fn cpu_logits_with(
    file: &GgufFile,
    model: &Model,
    ids: &[u32],
    activations: ActivationQuant,
) -> Result<Vec<f32>, String> {
    let options = ReferenceOptions {
        activations,
        ..ReferenceOptions::llama_cpp()
    };
    reference::forward(file, model, ids, options)
        .map_err(|e| format!("the CPU reference cannot run this model: {e}"))
}

/// The CPU side of a device check: the reference's logits of the check prompt ([`cpu_logits`])
/// and, measured the first time a checked prefill runs GEMMs on 8-bit activations, the
/// distance of llama.cpp's own arithmetic from them on the same prompt.
///
/// Integer-dot GEMMs round their activations to 8 bits, and that rounding alone moves the
/// logits of a deep model by more than [`CPU_TOLERANCE`] allows for float arithmetic: on a
/// synthesized Qwen2.5-3B Q4_K_M, rocky's rounding (blocks of 32, f32 scales) moves them by
/// 1.06-1.59 × the bound over twelve check prompts, llama.cpp's CPU backend's (Q8_K blocks of
/// 256 for K-quant weights) by 1.61-2.45 × (rocky's 0.55-0.81 of llama.cpp's on each prompt),
/// every projection's rounding error being what 8-bit activations give (about 5e-3 of the
/// output RMS at K = 2048;
/// docs/measurements/2026-12-06b-int8-accuracy.md). So a prefill that ran int8 GEMMs is
/// compared like with like: it may be as far from the exact logits as llama.cpp's CPU
/// backend is on this prompt (its `vec_dot_type` rounding emulated by the reference,
/// `ActivationQuant::LlamaCpp`), or within the float bound where that is larger (the 0.5B:
/// 0.60-0.75 × the bound). The emulation is checked against llama.cpp itself: on the tiny
/// quantized goldens it gives llama.cpp's one-token logits to f32 rounding and its distance
/// within 0.83-1.19 × llama.cpp's on longer prompts (`models/tests/reference_golden.rs`), and
/// on the 3B file llama.cpp's real CPU logits sit 1.65-2.21 × the bound from the reference,
/// 0.88-1.15 × the emulated floor on each of eight check prompts
/// (docs/measurements/2026-12-07d-int8-accuracy.md). Comparing with a reference that rounds
/// as rocky's kernels do would not be tighter: the rounding is discontinuous, so any float
/// difference upstream (an f16 instead of an f32 KV cache moves the 0.5B's exact logits by
/// 0.002) moves int8 logits by the size of the rounding noise itself (0.075). A kernel that
/// computes something else than its arithmetic promises is caught tighter by the per-GEMM
/// check against the reference with the kernel's own rounding (`gemm::reference`), before
/// anything is stored.
pub struct CpuReference<'m> {
    file: &'m GgufFile,
    model: &'m Model,
    ids: Vec<u32>,
    /// The exact reference's logits, or why the reference cannot run.
    pub logits: Result<Vec<f32>, String>,
    int8_floor: OnceLock<Result<f32, String>>,
}

impl<'m> CpuReference<'m> {
    /// The reference's logits of `ids`.
    pub fn new(file: &'m GgufFile, model: &'m Model, ids: &[u32]) -> Self {
        CpuReference {
            file,
            model,
            ids: ids.to_vec(),
            logits: cpu_logits(file, model, ids),
            int8_floor: OnceLock::new(),
        }
    }

    /// The prompt.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// max|Δlogit| between the reference with llama.cpp's CPU activation rounding and the exact
    /// reference (one more CPU pass, the first time only).
    pub fn int8_floor(&self) -> Result<f32, String> {
        self.int8_floor
            .get_or_init(|| {
                let exact = self.logits.as_ref().map_err(Clone::clone)?;
                let llama =
                    cpu_logits_with(self.file, self.model, &self.ids, ActivationQuant::LlamaCpp)?;
                Ok(exact
                    .iter()
                    .zip(&llama)
                    .fold(0f32, |m, (a, b)| m.max((a - b).abs())))
            })
            .clone()
    }
}

/// Whether the executor's last prepared program runs a GEMM on 8-bit activations.
pub fn runs_int8_gemms(executor: &Executor) -> bool {
    executor
        .used()
        .iter()
        .any(|(_, _, s, _)| matches!(s, Schedule::Gemm(g) if g.math == Math::Int8Dot))
}

/// Runs `cpu`'s prompt through `executor` with `schedules` and compares the logits with
/// `cpu`'s ([`CPU_TOLERANCE`]; for a program with int8 GEMMs at least llama.cpp's own distance,
/// see [`CpuReference`]). This is what makes anything else this device computes checkable:
/// under a driver that executes nothing (the mali-shim) or computes garbage it fails, and the
/// caller must not store or report results.
pub fn verify_device(
    executor: &mut Executor,
    schedules: &dyn ScheduleSource,
    cpu: &CpuReference,
) -> Result<DeviceCheck, ExecError> {
    let (_, gpu) = timed_prefill(executor, cpu.ids(), schedules)?;
    let int8 = runs_int8_gemms(executor);
    Ok(DeviceCheck {
        n_tokens: cpu.ids().len(),
        ubatch: executor.options().ubatch,
        result: match &cpu.logits {
            Ok(reference) if int8 => cpu
                .int8_floor()
                .and_then(|floor| check_logits_with_floor(reference, &gpu, CPU_TOLERANCE, floor)),
            Ok(reference) => check_logits(reference, &gpu, CPU_TOLERANCE),
            Err(e) => Err(e.clone()),
        },
    })
}

/// What the graph-level step found.
pub struct GraphOutcome {
    /// The device's default prefill against the CPU reference; when it failed nothing was
    /// timed and `trials` is empty.
    pub device_check: Option<DeviceCheck>,
    /// The candidates timed, in order, each with the check of its logits.
    pub trials: Vec<GraphTrial>,
    /// The setting the device could not run, which ended the step (earlier trials stand).
    pub error: Option<ExecError>,
}

impl GraphOutcome {
    /// Why nothing of this step may be stored, when the device's results cannot be checked.
    pub fn unverifiable(&self) -> Option<&str> {
        match &self.device_check {
            Some(DeviceCheck { result: Err(e), .. }) => Some(e),
            Some(_) => None,
            None => Some("the default prefill could not run"),
        }
    }
}

/// Checks the device against the CPU reference, computes the reference logits of the timed
/// prompt with the default schedules at the first candidate's ubatch and the default budget,
/// then times the candidates in order (the first always, the rest while `options.time` lasts),
/// checking every timed prefill's logits against that reference. A candidate the device
/// cannot run (out of memory at a big ubatch) ends the step with its error in the outcome.
pub fn tune_graph(
    rig: &mut PrefillRig,
    schedules: &dyn ScheduleSource,
    options: &GraphTuneOptions,
    default_budget: &CommandBudget,
    progress: &mut dyn FnMut(&GraphTrial),
) -> GraphOutcome {
    let start = Instant::now();
    let ids = random_prompt(rig.model.config.n_vocab, options.n_tokens, options.seed);
    let mut outcome = GraphOutcome {
        device_check: None,
        trials: Vec::new(),
        error: None,
    };
    let ubatch = options.candidates.first().map_or(1, |c| c.ubatch);
    let reference = match default_reference(rig, ubatch, default_budget, &ids, options.seed) {
        Ok((check, reference)) => {
            let verified = check.result.is_ok();
            outcome.device_check = Some(check);
            match reference {
                Some(r) if verified => r,
                _ => return outcome,
            }
        }
        Err(e) => {
            outcome.error = Some(e);
            return outcome;
        }
    };
    for (i, c) in options.candidates.iter().enumerate() {
        if i > 0 && start.elapsed() >= options.time {
            break;
        }
        let budget = CommandBudget {
            max_dispatches: c.max_dispatches,
            ..*default_budget
        };
        let mut executor = match rig.executor(c.ubatch, budget, c.fuse(), c.overlap) {
            Ok(e) => e,
            Err(e) => {
                outcome.error = Some(e);
                return outcome;
            }
        };
        let fault = options.faults.graph_at(i + 1);
        let timed = time_checked(
            &mut executor,
            &ids,
            schedules,
            options.runs,
            &reference,
            fault,
        );
        rig.give_back(executor);
        match timed {
            Ok((seconds, failure, error_ratio)) => {
                let trial = GraphTrial {
                    candidate: *c,
                    seconds,
                    n_tokens: ids.len(),
                    failure,
                    error_ratio,
                };
                progress(&trial);
                outcome.trials.push(trial);
            }
            Err(e) => {
                outcome.error = Some(e);
                return outcome;
            }
        }
    }
    outcome
}

/// The default schedules' logits of the timed prompt, which every candidate's are checked
/// against, and what widens that check where 8-bit activations are on either side.
struct GraphReference<'m> {
    logits: Vec<f32>,
    /// Whether the default program ran int8 GEMMs.
    int8: bool,
    /// The CPU reference of the device check, for its int8 floor (computed on first use).
    cpu: CpuReference<'m>,
}

impl GraphReference<'_> {
    /// Checks a candidate's `logits` (`int8`: its program ran int8 GEMMs). Where either side
    /// rounds its activations to 8 bits, each may be as far from the exact logits as
    /// llama.cpp's own CPU arithmetic is on the check prompt ([`CpuReference`]), so the two may
    /// differ by twice that: without it a tuned f32 GEMM on a device whose default is int8
    /// (Mali, Mesa 26.1's prefill) would fail against the default on a 3B's noise alone.
    fn check(&self, logits: &[f32], int8: bool) -> Result<Agreement, String> {
        if self.int8 || int8 {
            if let Ok(floor) = self.cpu.int8_floor() {
                return check_logits_with_floor(&self.logits, logits, GRAPH_TOLERANCE, 2.0 * floor);
            }
        }
        check_logits(&self.logits, logits, GRAPH_TOLERANCE)
    }
}

/// The device check, then (when it passed) the default schedules' logits of `ids`, which must
/// themselves be finite and not all zero.
fn default_reference<'m>(
    rig: &mut PrefillRig<'m>,
    ubatch: usize,
    budget: &CommandBudget,
    ids: &[u32],
    seed: u64,
) -> Result<(DeviceCheck, Option<GraphReference<'m>>), ExecError> {
    let mut executor = rig.executor(ubatch, *budget, FuseOptions::DEFAULT, false)?;
    let (file, model) = (rig.file, rig.model);
    let checked = (|| {
        let short = check_prompt(model, CHECK_TOKENS.min(rig.n_ctx), seed);
        let cpu = CpuReference::new(file, model, &short);
        let mut check = verify_device(&mut executor, &DefaultSchedules, &cpu)?;
        if check.result.is_err() {
            return Ok((check, None));
        }
        let (_, logits) = timed_prefill(&mut executor, ids, &DefaultSchedules)?;
        // Against itself: fails only when not finite or all zero.
        if let Err(e) = check_logits(&logits, &logits, GRAPH_TOLERANCE) {
            check.result = Err(format!(
                "the default schedules' prefill of the timed prompt: {e}"
            ));
            return Ok((check, None));
        }
        let int8 = runs_int8_gemms(&executor);
        Ok((check, Some(GraphReference { logits, int8, cpu })))
    })();
    rig.give_back(executor);
    checked
}

/// An untimed warm-up prefill, then `runs` timed ones; every prefill's logits are checked
/// against `reference`. Returns the seconds, the first failure and the worst error ratio.
fn time_checked(
    executor: &mut Executor,
    ids: &[u32],
    schedules: &dyn ScheduleSource,
    runs: u32,
    reference: &GraphReference,
    fault: Option<GraphFault>,
) -> Result<(Vec<f64>, Option<String>, f32), ExecError> {
    let mut seconds = Vec::new();
    let (mut failure, mut worst) = (None, 0f32);
    for run in 0..=runs.max(1) {
        let (s, mut logits) = timed_prefill(executor, ids, schedules)?;
        if run > 0 {
            seconds.push(s);
        }
        if fault == Some(GraphFault::Logits) {
            fault::corrupt_logits(&mut logits);
        }
        match reference.check(&logits, runs_int8_gemms(executor)) {
            Ok(a) => worst = worst.max(a.error_ratio()),
            Err(e) => {
                worst = f32::INFINITY;
                if failure.is_none() {
                    let injected = if fault.is_some() { INJECTED } else { "" };
                    failure = Some(format!(
                        "{injected}{}logits differ from the default schedules': {e}",
                        if injected.is_empty() { "" } else { " " }
                    ));
                }
            }
        }
    }
    Ok((seconds, failure, worst))
}

/// The fastest trial whose logits passed their check at each ubatch timed, as records for
/// the database (by ubatch), each with the default settings' throughput at its ubatch. Only
/// ubatches where the default settings were timed and passed count: a setting that never met
/// the default at its ubatch may lose to it (on an H100 the stored ubatch-512 choice ran a
/// ubatch-64 prefill at 0.77x the default), and the fastest of a set holding the default is
/// at least as fast as it.
pub fn best_per_ubatch(
    trials: &[GraphTrial],
    default_budget: &CommandBudget,
) -> Vec<(u32, GraphChoice)> {
    let ubatches: BTreeSet<usize> = trials.iter().map(|t| t.candidate.ubatch).collect();
    ubatches
        .into_iter()
        .filter_map(|u| {
            let at: Vec<GraphTrial> = trials
                .iter()
                .filter(|t| t.candidate.ubatch == u)
                .cloned()
                .collect();
            default_tok_s(&at, u, default_budget)?;
            best_choice(&at, default_budget).map(|c| (u as u32, c))
        })
        .collect()
}

/// The throughput of the default settings at `ubatch` among `trials`, where they were timed
/// and their logits passed.
fn default_tok_s(
    trials: &[GraphTrial],
    ubatch: usize,
    default_budget: &CommandBudget,
) -> Option<f64> {
    let default = default_settings(ubatch, default_budget);
    trials
        .iter()
        .find(|t| t.candidate == default && t.is_ok())
        .map(GraphTrial::tok_s)
}

/// The fastest trial whose logits passed their check, as a record for the database, with the
/// default settings' throughput at its ubatch where they were timed.
pub fn best_choice(trials: &[GraphTrial], default_budget: &CommandBudget) -> Option<GraphChoice> {
    trials
        .iter()
        .filter(|t| t.is_ok())
        .max_by(|a, b| a.tok_s().total_cmp(&b.tok_s()))
        .map(|t| GraphChoice {
            ubatch: t.candidate.ubatch as u32,
            max_dispatches_per_cb: t.candidate.max_dispatches,
            budget_bytes: default_budget.max_driver_bytes,
            tok_s: t.tok_s(),
            fuse_swiglu: t.candidate.fuse_swiglu,
            overlap: t.candidate.overlap,
            default_tok_s: default_tok_s(trials, t.candidate.ubatch, default_budget),
        })
}

pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The graph step's check against the default schedules' logits: plain `GRAPH_TOLERANCE`
    /// without int8 GEMMs, widened to twice llama.cpp's own distance from the exact logits
    /// (measured by the CPU reference on the check prompt) where either side ran int8 GEMMs.
    #[test]
    fn int8_on_either_side_allows_twice_llama_cpps_distance() {
        // The shared folder's tiny model, or the stand-in tools/prepare-test-assets.sh makes
        // (as tests/common/shared_folder.rs finds them).
        use std::path::PathBuf;
        let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let assets = std::env::var_os("ROCKY_TEST_ASSETS")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target/test-assets"));
        let roots = [
            std::env::var_os("ROCKY_SHARED").map(PathBuf::from),
            Some(workspace.join("../shared")),
            Some(assets.join("shared-standin")),
        ];
        let path = roots
            .into_iter()
            .flatten()
            .map(|r| r.join("models/qwen2-tiny-q8_0.gguf"))
            .find(|p| p.is_file())
            .expect("the tiny Q8_0 Qwen2: the shared folder or tools/prepare-test-assets.sh");
        let file = GgufFile::open(&path).unwrap();
        let model = rocky_models::arch::load(&file).unwrap();
        let ids = check_prompt(&model, CHECK_TOKENS, 3);
        let cpu = CpuReference::new(&file, &model, &ids);
        let exact = cpu.logits.clone().unwrap();
        let floor = cpu.int8_floor().unwrap();
        assert!(floor > 0.0, "8-bit activations move the logits");
        let scale = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
        let bound = GRAPH_TOLERANCE * scale;
        let widened = bound.max(2.0 * floor);
        // One logit that is not the top-1 moved down by `d`.
        let top = crate::logits_check::argmax(&exact);
        let moved = |d: f32| {
            let mut got = exact.clone();
            let other = (top + 1) % got.len();
            got[other] -= d;
            got
        };
        let reference = GraphReference {
            logits: exact.clone(),
            int8: false,
            cpu,
        };
        assert!(reference.check(&moved(0.99 * bound), false).is_ok());
        assert!(reference.check(&moved(1.01 * bound), false).is_err());
        assert!(reference.check(&moved(0.99 * widened), true).is_ok());
        assert!(reference.check(&moved(1.01 * widened), true).is_err());
        // The default's own int8 widens it the same way.
        let reference = GraphReference {
            int8: true,
            ..reference
        };
        assert!(reference.check(&moved(0.99 * widened), false).is_ok());
        assert!(reference.check(&moved(1.01 * widened), false).is_err());
    }

    fn budget(d: u32) -> CommandBudget {
        CommandBudget {
            wls: None,
            max_driver_bytes: u64::MAX,
            max_dispatches: d,
        }
    }

    #[test]
    fn candidates_start_with_the_tuned_baseline_and_stay_in_range() {
        let baseline = GraphCandidate {
            ubatch: 32,
            max_dispatches: 512,
            fuse_swiglu: false,
            overlap: true,
        };
        let c = default_candidates(32, 64, &budget(512), false);
        assert_eq!(c[0], baseline);
        // The baseline one ubatch at a time comes next.
        assert_eq!(
            c[1],
            GraphCandidate {
                overlap: false,
                ..baseline
            }
        );
        // Then the default settings at the other ubatches (what a choice there must beat).
        let mut defaults = vec![c[2], c[3]];
        defaults.sort();
        assert_eq!(
            defaults,
            [
                default_settings(16, &budget(512)),
                default_settings(64, &budget(512))
            ]
        );
        // 16, 32, 64 × 128, 512, 2048 × overlap or not.
        assert_eq!(c.len(), 18);
        assert!(c.iter().all(|c| [16, 32, 64].contains(&c.ubatch)));
        assert!(c.iter().all(|c| !c.fuse_swiglu));
        let distinct: BTreeSet<_> = c.iter().collect();
        assert_eq!(distinct.len(), c.len());
        // A prompt shorter than the doubled ubatch drops it.
        let c = default_candidates(32, 40, &budget(512), false);
        assert!(c.iter().all(|c| c.ubatch <= 32));
        // Above OVERLAP_MAX_UBATCH the baseline runs one ubatch at a time.
        let big = 2 * OVERLAP_MAX_UBATCH;
        assert!(!default_candidates(big, 2 * big, &budget(512), false)[0].overlap);
    }

    #[test]
    fn fusable_models_time_the_baseline_fused_second_and_every_setting_both_ways() {
        let c = default_candidates(32, 64, &budget(512), true);
        assert_eq!(c.len(), 36);
        assert!(!c[0].fuse_swiglu);
        assert_eq!(
            c[1],
            GraphCandidate {
                fuse_swiglu: true,
                ..c[0]
            }
        );
        assert_eq!(
            c[2],
            GraphCandidate {
                overlap: !c[0].overlap,
                ..c[0]
            }
        );
        let distinct: BTreeSet<_> = c.iter().collect();
        assert_eq!(distinct.len(), c.len());
        for x in &c {
            let other = GraphCandidate {
                fuse_swiglu: !x.fuse_swiglu,
                ..*x
            };
            assert!(c.contains(&other), "{x:?} without its other fusion");
        }
    }

    #[test]
    fn the_fastest_passing_trial_is_kept_per_ubatch_where_it_met_the_default() {
        let trial = |ubatch, fuse_swiglu, overlap, seconds: f64, ok: bool| GraphTrial {
            candidate: GraphCandidate {
                ubatch,
                max_dispatches: 512,
                fuse_swiglu,
                overlap,
            },
            seconds: vec![seconds],
            n_tokens: 64,
            failure: (!ok).then(|| "logits differ".to_string()),
            error_ratio: 0.0,
        };
        let trials = [
            // The default settings at 32 and 64 (small ubatches overlap).
            trial(32, false, true, 1.0, true),
            trial(32, true, true, 0.5, false), // fastest at 32, but failed its check
            trial(32, true, false, 0.9, true),
            trial(64, false, true, 0.7, true),
            trial(64, true, true, 0.8, true),
            // Fastest of all, but the default at 256 was not timed: no record for 256.
            trial(256, true, false, 0.1, true),
        ];
        let best = best_per_ubatch(&trials, &budget(512));
        let got: Vec<(u32, u32, bool, bool)> = best
            .iter()
            .map(|(u, c)| (*u, c.ubatch, c.fuse_swiglu, c.beat_default().unwrap()))
            .collect();
        assert_eq!(got, [(32, 32, true, true), (64, 64, false, true)]);
        // Each carries the default's throughput at its ubatch (64 tokens in 1.0 s at 32).
        assert_eq!(best[0].1.default_tok_s, Some(64.0));
        assert_eq!(best[1].1.default_tok_s, Some(best[1].1.tok_s));
        // The model's choice is the fastest of all; its ubatch's default was not timed.
        let main = best_choice(&trials, &budget(512)).unwrap();
        assert_eq!((main.ubatch, main.default_tok_s), (256, None));
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn random_prompts_are_reproducible_and_in_the_vocabulary() {
        let a = random_prompt(1000, 64, 5);
        assert_eq!(a, random_prompt(1000, 64, 5));
        assert_ne!(a, random_prompt(1000, 64, 6));
        assert!(a.iter().all(|&t| t < 1000));
    }

    #[test]
    fn the_stored_choice_is_re_timed_second_in_a_run_at_another_ubatch() {
        let budget = budget(512);
        let stored = GraphChoice {
            ubatch: 512,
            max_dispatches_per_cb: 512,
            budget_bytes: 0,
            tok_s: 7272.0,
            fuse_swiglu: true,
            overlap: false,
            default_tok_s: None,
        };
        let base = default_candidates(64, 512, &budget, true);
        assert!(base.iter().all(|c| c.ubatch <= 128));
        let got = with_stored_choice(base.clone(), Some(&stored), 512);
        assert_eq!(got.len(), base.len() + 1);
        assert_eq!(got[0], base[0]);
        assert_eq!(
            got[1],
            GraphCandidate {
                ubatch: 512,
                max_dispatches: 512,
                fuse_swiglu: true,
                overlap: false
            }
        );
        // Already among the candidates: nothing added; too big for the prompt: likewise.
        let again = with_stored_choice(got.clone(), Some(&stored), 512);
        assert_eq!(again, got);
        assert_eq!(with_stored_choice(base.clone(), Some(&stored), 256), base);
        assert_eq!(with_stored_choice(base.clone(), None, 512), base);
    }
}
