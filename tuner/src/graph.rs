//! Graph-level tuning: after the kernels, time whole prefills to choose the ubatch size and
//! the dispatches per command buffer (DESIGN.md §6), stored per device and model shape.
//!
//! Kernel schedules are tuned per exact GEMM shape, so a ubatch other than the one the
//! kernels were tuned at runs default schedules; timing whole prefills is what tells whether
//! that still wins (bigger ubatches amortize weight reads, smaller ones keep the working set
//! in cache). The same timing loop serves `rocky bench`.

use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_runtime::executor::{ExecError, Executor, ExecutorOptions, GpuWeights, ScheduleSource};
use rocky_runtime::{CommandBudget, Context};
use rocky_tuning_db::GraphChoice;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One graph-level setting to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GraphCandidate {
    pub ubatch: usize,
    pub max_dispatches: u32,
}

/// A timed candidate.
#[derive(Clone, Debug)]
pub struct GraphTrial {
    pub candidate: GraphCandidate,
    /// Seconds of each timed prefill of the prompt.
    pub seconds: Vec<f64>,
    pub n_tokens: usize,
}

impl GraphTrial {
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
}

/// The candidates worth timing around a kernel-tuned ubatch: half, the same and double
/// (within the prompt), each with the device's default dispatches per command buffer, a
/// quarter of it and four times it. The tuned ubatch with the default budget comes first:
/// it is the baseline every other candidate has to beat.
pub fn default_candidates(
    tuned_ubatch: usize,
    n_tokens: usize,
    default_budget: &CommandBudget,
) -> Vec<GraphCandidate> {
    let d = default_budget.max_dispatches.max(1);
    let first = GraphCandidate {
        ubatch: tuned_ubatch.min(n_tokens).max(1),
        max_dispatches: d,
    };
    let mut rest = BTreeSet::new();
    for ubatch in [tuned_ubatch / 2, tuned_ubatch, tuned_ubatch * 2] {
        if ubatch == 0 || ubatch > n_tokens.max(1) || ubatch > 4096 {
            continue;
        }
        for max_dispatches in [d, (d / 4).max(1), d.saturating_mul(4)] {
            rest.insert(GraphCandidate {
                ubatch,
                max_dispatches,
            });
        }
    }
    rest.remove(&first);
    std::iter::once(first).chain(rest).collect()
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

/// Makes executors of one model at several ubatch sizes, uploading the weights once.
pub struct PrefillRig<'m> {
    ctx: Context,
    model: &'m Model,
    weights: Option<GpuWeights>,
    n_ctx: usize,
}

impl<'m> PrefillRig<'m> {
    /// Uploads the weights, calling `progress(bytes done, bytes in all)` as it goes.
    pub fn new(
        ctx: &Context,
        file: &'m GgufFile,
        model: &'m Model,
        n_ctx: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<PrefillRig<'m>, ExecError> {
        Ok(PrefillRig {
            weights: Some(GpuWeights::upload_with_progress(
                ctx, file, model, progress,
            )?),
            ctx: ctx.clone(),
            model,
            n_ctx,
        })
    }

    /// An executor at `ubatch` with `budget`; give it back with [`PrefillRig::give_back`].
    pub fn executor(
        &mut self,
        ubatch: usize,
        budget: CommandBudget,
    ) -> Result<Executor<'m>, ExecError> {
        let weights = self.weights.take().ok_or_else(|| {
            ExecError::Unsupported("the weights are lent to another executor".into())
        })?;
        let options = ExecutorOptions {
            ubatch,
            budget,
            timeout: Duration::from_secs(600),
            profile: false,
        };
        Executor::new(&self.ctx, self.model, weights, options, self.n_ctx)
    }

    pub fn give_back(&mut self, executor: Executor<'m>) {
        self.weights = Some(executor.into_weights());
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
    executor.prepare(schedules)?;
    executor.reset();
    let start = Instant::now();
    executor.prefill(ids, schedules)?;
    Ok(start.elapsed().as_secs_f64())
}

/// Times the candidates in order (the first always, the rest while `options.time` lasts) and
/// returns every trial. A candidate the device cannot run (out of memory at a big ubatch)
/// is an error for the caller to report: the earlier trials are still in the result.
pub fn tune_graph(
    rig: &mut PrefillRig,
    schedules: &dyn ScheduleSource,
    options: &GraphTuneOptions,
    default_budget: &CommandBudget,
    progress: &mut dyn FnMut(&GraphTrial),
) -> (Vec<GraphTrial>, Option<ExecError>) {
    let start = Instant::now();
    let ids = random_prompt(rig.model.config.n_vocab, options.n_tokens, options.seed);
    let mut trials = Vec::new();
    for (i, c) in options.candidates.iter().enumerate() {
        if i > 0 && start.elapsed() >= options.time {
            break;
        }
        let budget = CommandBudget {
            max_dispatches: c.max_dispatches,
            ..*default_budget
        };
        let mut executor = match rig.executor(c.ubatch, budget) {
            Ok(e) => e,
            Err(e) => return (trials, Some(e)),
        };
        let timed = time_prefills(&mut executor, &ids, schedules, options.runs);
        rig.give_back(executor);
        match timed {
            Ok(seconds) => {
                let trial = GraphTrial {
                    candidate: *c,
                    seconds,
                    n_tokens: ids.len(),
                };
                progress(&trial);
                trials.push(trial);
            }
            Err(e) => return (trials, Some(e)),
        }
    }
    (trials, None)
}

/// The fastest trial as a record for the database.
pub fn best_choice(trials: &[GraphTrial], default_budget: &CommandBudget) -> Option<GraphChoice> {
    trials
        .iter()
        .max_by(|a, b| a.tok_s().total_cmp(&b.tok_s()))
        .map(|t| GraphChoice {
            ubatch: t.candidate.ubatch as u32,
            max_dispatches_per_cb: t.candidate.max_dispatches,
            budget_bytes: default_budget.max_driver_bytes,
            tok_s: t.tok_s(),
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

    fn budget(d: u32) -> CommandBudget {
        CommandBudget {
            wls: None,
            max_driver_bytes: u64::MAX,
            max_dispatches: d,
        }
    }

    #[test]
    fn candidates_start_with_the_tuned_baseline_and_stay_in_range() {
        let c = default_candidates(32, 64, &budget(512));
        assert_eq!(
            c[0],
            GraphCandidate {
                ubatch: 32,
                max_dispatches: 512
            }
        );
        // 16, 32, 64 × 128, 512, 2048, without repeating the baseline.
        assert_eq!(c.len(), 9);
        assert!(c.iter().all(|c| [16, 32, 64].contains(&c.ubatch)));
        let distinct: BTreeSet<_> = c.iter().collect();
        assert_eq!(distinct.len(), c.len());
        // A prompt shorter than the doubled ubatch drops it.
        let c = default_candidates(32, 40, &budget(512));
        assert!(c.iter().all(|c| c.ubatch <= 32));
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
}
