//! Replaying a search strategy on the measurements of an exhaustive run.
//!
//! An exhaustive run records the time of every schedule of a workload's space. Replaying a
//! budgeted strategy against that table (the table answers instead of the GPU) says how close
//! the strategy gets to the true best, for many seeds and at no device cost: the yardstick the
//! tuner's budgets are judged by. As in the real tuner, the default schedule (the first trial
//! an exhaustive run stores) is known before the search starts, and [`replay_model`] replays a
//! model's workloads one after another, each search seeded with the winners the earlier
//! replays found ([`carry_over`](crate::carry_over)), as `rocky tune` does.

use crate::carry_over::{nearest_winners, seed_budget};
use crate::search::{Search, Strategy};
use rocky_compiler::{Schedule, Workload};
use std::collections::HashMap;

/// How one seeded replay ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOutcome {
    pub seed: u64,
    /// Trials used, the default's included.
    pub trials: usize,
    /// Fastest time the replayed search saw.
    pub best_s: f64,
    /// `best_s / exhaustive best` (1.0 = found the best).
    pub ratio: f64,
    /// The schedule behind `best_s`.
    pub best: Schedule,
}

/// The recorded space: every schedule with its median time (`None`: the trial failed).
pub struct RecordedSpace {
    pub schedules: Vec<Schedule>,
    times: HashMap<Schedule, Option<f64>>,
    default: Schedule,
    best_s: f64,
}

impl RecordedSpace {
    /// `trials` in the order they were stored; the first is the default schedule. `None` when
    /// nothing succeeded.
    pub fn new(trials: &[(Schedule, Option<f64>)]) -> Option<RecordedSpace> {
        let default = trials.first()?.0;
        let mut times = HashMap::new();
        let mut schedules = Vec::new();
        for &(s, t) in trials {
            if times.insert(s, t).is_none() {
                schedules.push(s);
            }
        }
        let best_s = times
            .values()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        best_s.is_finite().then_some(RecordedSpace {
            schedules,
            times,
            default,
            best_s,
        })
    }

    pub fn best_s(&self) -> f64 {
        self.best_s
    }

    /// Runs `strategy` for `budget` trials (the default's included) with `seed`.
    pub fn replay(&self, strategy: Strategy, budget: usize, seed: u64) -> ReplayOutcome {
        self.replay_seeded(strategy, budget, seed, &[])
    }

    /// [`RecordedSpace::replay`] with `seeds` queued first, as the tuner queues them.
    pub fn replay_seeded(
        &self,
        strategy: Strategy,
        budget: usize,
        seed: u64,
        seeds: &[Schedule],
    ) -> ReplayOutcome {
        let mut search = Search::new(strategy, self.schedules.clone(), seed);
        search.seed(seeds);
        let default_time = self.times[&self.default];
        search.mark_tried(&self.default, default_time);
        let mut best = default_time.unwrap_or(f64::INFINITY);
        let mut best_schedule = self.default;
        let mut trials = 1;
        while trials < budget {
            // Batches of the tuner's size, so the search sees results as often as it would.
            let batch = search.next_batch(8.min(budget - trials));
            if batch.is_empty() {
                break;
            }
            for i in batch {
                let schedule = search.space()[i];
                let t = self.times[&schedule];
                search.record(i, t);
                if let Some(t) = t.filter(|&t| t < best) {
                    best = t;
                    best_schedule = schedule;
                }
                trials += 1;
            }
        }
        ReplayOutcome {
            seed,
            trials,
            best_s: best,
            ratio: best / self.best_s,
            best: best_schedule,
        }
    }
}

/// Replays a model's workloads in the order given (the order they were tuned in), each with
/// `budget(space size)` trials, seeding each search with the winners of the replays before it
/// the way `rocky tune` seeds from the database. One outcome per workload, in order.
pub fn replay_model(
    model: &[(Workload, &RecordedSpace)],
    strategy: Strategy,
    budget: impl Fn(usize) -> usize,
    seed: u64,
) -> Vec<ReplayOutcome> {
    let mut winners: Vec<(Workload, Schedule)> = Vec::new();
    let mut outcomes = Vec::new();
    for (workload, space) in model {
        let trials = budget(space.schedules.len());
        let seeds = nearest_winners(workload, &winners, seed_budget(trials));
        let outcome = space.replay_seeded(strategy, trials, seed, &seeds);
        winners.push((*workload, outcome.best));
        outcomes.push(outcome);
    }
    outcomes
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rocky_compiler::templates::gemm::{GemmSchedule, Math, Precision};

    /// A plain f32 GEMM schedule with tile `bm`×`bn` (tests tell schedules apart by them).
    pub(crate) fn tile(bm: u32, bn: u32) -> Schedule {
        Schedule::Gemm(GemmSchedule {
            bm,
            bn,
            bk: 32,
            tm: 1,
            tn: 1,
            split_k: 1,
            vector_width: 1,
            stage_a: false,
            stage_b: false,
            shuffle_a: false,
            k_groups: 1,
            wide_loads: false,
            k_unroll: 1,
            share_headers: false,
            last_group_reduces: false,
            fold_per_slab: false,
            pack_a_f16: false,
            half_units: false,
            packed_w: 0,
            accumulate: Precision::F32,
            math: Math::FmaF32,
        })
    }

    /// A space of distinct GEMM schedules (bm and bn vary) with times from `time(i)`.
    fn space(n: usize, time: impl Fn(usize) -> Option<f64>) -> Vec<(Schedule, Option<f64>)> {
        (0..n)
            .map(|i| (tile(1 + (i / 32) as u32, 1 + (i % 32) as u32), time(i)))
            .collect()
    }

    #[test]
    fn exhaustive_replay_with_the_whole_space_finds_the_best() {
        let recorded =
            RecordedSpace::new(&space(100, |i| Some(1.0 + ((i * 37) % 100) as f64))).unwrap();
        assert_eq!(recorded.best_s(), 1.0);
        let out = recorded.replay(Strategy::Exhaustive, 100, 1);
        assert_eq!(out.trials, 100);
        assert_eq!(out.ratio, 1.0);
    }

    #[test]
    fn a_budget_of_one_keeps_the_default_and_failures_never_count_as_fast() {
        // The default (first) takes 10 s, the best 1 s; failed trials have no time.
        let recorded = RecordedSpace::new(&space(50, |i| match i {
            0 => Some(10.0),
            7 => Some(1.0),
            i if i % 2 == 1 => None,
            _ => Some(5.0),
        }))
        .unwrap();
        let out = recorded.replay(Strategy::Random, 1, 3);
        assert_eq!((out.trials, out.best_s, out.ratio), (1, 10.0, 10.0));
        let all = recorded.replay(Strategy::Random, 50, 3);
        assert_eq!(all.best_s, 1.0);
    }

    #[test]
    fn a_model_replay_starts_each_search_from_the_earlier_winners() {
        use rocky_compiler::dequant::WeightFormat;
        use rocky_compiler::templates::gemm::{ActType, GemmWorkload};
        let gemm = |n| {
            Workload::Gemm(GemmWorkload {
                m: 8,
                n,
                k: 64,
                act: ActType::F32,
                weight: WeightFormat::Q8_0,
                layout: rocky_compiler::WeightLayout::Gguf,
                bias: false,
                epilogue: Default::default(),
                rms_norm_eps_bits: None,
            })
        };
        // Two workloads whose fastest schedule is the same (index 37). The first (100
        // schedules) is replayed exhaustively; the second (60) gets 4 trials: the default,
        // one carried-over seed (a quarter of the budget) and two of its own.
        let fastest_at_37 = |i: usize| Some(if i == 37 { 1.0 } else { 2.0 + (i % 7) as f64 });
        let first = RecordedSpace::new(&space(100, fastest_at_37)).unwrap();
        let second = RecordedSpace::new(&space(60, fastest_at_37)).unwrap();
        let model = [(gemm(64), &first), (gemm(128), &second)];
        let budget = |n: usize| if n == 100 { 100 } else { 4 };
        for seed in 1..=10 {
            let out = replay_model(&model, Strategy::Random, budget, seed);
            assert_eq!(out[0].ratio, 1.0);
            assert_eq!((out[1].trials, out[1].ratio), (4, 1.0), "seed {seed}");
            assert_eq!(out[1].best, out[0].best);
        }
        // Without the carry-over, 4 random trials of 60 mostly miss index 37.
        let alone = (1..=10)
            .filter(|&seed| second.replay(Strategy::Random, 4, seed).ratio == 1.0)
            .count();
        assert!(alone < 10);
    }

    #[test]
    fn nothing_successful_is_no_yardstick() {
        assert!(RecordedSpace::new(&space(4, |_| None)).is_none());
        assert!(RecordedSpace::new(&[]).is_none());
    }
}
