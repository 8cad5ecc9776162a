//! `rocky tune --static`: ranks a GEMM workload's candidates without running any (for a
//! device that can compile but not time, such as the Mali through Mesa's drm-shim) and returns
//! the ranking as an unmeasured [`SeedRanking`]. The live tuner on the board then tries the
//! best-ranked candidates first; nothing here is ever a winner (no candidate ran, none was
//! checked).
//!
//! Where the driver reports its compiler's statistics, every candidate's pipeline is created
//! with them captured and scored from them by `rocky predict`'s cost model: the predicted
//! seconds of its dispatch on a G610 at the built-in calibration
//! ([`static_cost::driver_cost`](crate::static_cost::driver_cost)); elsewhere
//! the candidates are only generated (SPIR-V, no driver compile: the driver would tell nothing
//! more than pass or fail, which the live search finds out anyway) and scored by the IR model.

use crate::static_cost::{
    driver_cost, ir_estimate, score, stat, CostModel, PredictModel, ScoreSource,
};
use rayon::prelude::*;
use rocky_compiler::templates::gemm::GemmWorkload;
use rocky_compiler::{instantiate, DeviceCaps, Schedule, Workload};
use rocky_runtime::{spilling, ComputePipeline, Context};
use rocky_tuning_db::{Calibration, RankedSchedule, SeedRanking, Trial};
use std::collections::BTreeMap;

/// Seed-ranked candidates a live search tries first: at most half its budget, at most 8.
pub fn static_seed_budget(trials: usize) -> usize {
    (trials / 2).min(8)
}

/// What ranking one workload did.
#[derive(Clone, Debug)]
pub struct StaticOutcome {
    pub ranking: SeedRanking,
    pub source: ScoreSource,
    /// Candidates the template refused (left out of the ranking).
    pub refused: usize,
    /// Candidates whose pipelines the driver created (0 where it reports no statistics).
    pub driver_compiled: usize,
    /// Where the default schedule ranks (0-based), if it was a candidate.
    pub default_rank: Option<usize>,
}

/// `count` candidates of `space`: `first` (the default) and then an even, seed-shifted stride
/// over the rest, so a sample covers the whole space rather than one corner of it.
pub fn sample(space: &[Schedule], first: &Schedule, count: usize, seed: u64) -> Vec<Schedule> {
    let mut out = vec![*first];
    let rest: Vec<&Schedule> = space.iter().filter(|s| *s != first).collect();
    let take = count.saturating_sub(1).min(rest.len());
    if take == 0 {
        return out;
    }
    let stride = rest.len() as f64 / take as f64;
    let offset = (seed % 997) as f64 / 997.0 * stride;
    for i in 0..take {
        let index = ((i as f64 * stride + offset) as usize).min(rest.len() - 1);
        out.push(*rest[index]);
    }
    out.dedup();
    out
}

/// The model a driver-compiled ranking is costed on: `calibration` (the tuning database's for
/// this device, where it holds one) or the built-in one, with the driver's core count.
pub fn predict_model(ctx: &Context, calibration: Option<&Calibration>) -> PredictModel {
    let cores = ctx.info().limits.shader_cores.map(|c| {
        (
            c,
            "reported by the driver (VK_ARM_shader_core_properties)".to_string(),
        )
    });
    match calibration {
        Some(c) => PredictModel::from_calibration(c, cores),
        None => PredictModel::g610_builtin(cores),
    }
}

/// Ranks `candidates` of `w` on `ctx` (see the module comment); driver-compiled candidates
/// are costed on `pm` ([`predict_model`]).
pub fn rank_gemm(
    ctx: &Context,
    caps: &DeviceCaps,
    w: &GemmWorkload,
    candidates: &[Schedule],
    default: &Schedule,
    host: &str,
    pm: &PredictModel,
) -> Option<StaticOutcome> {
    let workload = Workload::Gemm(*w);
    let model = CostModel::for_device(caps);
    // Generating the kernels and their IR estimates is pure: all at once.
    let generated: Vec<_> = candidates
        .par_iter()
        .filter_map(|s| {
            let Schedule::Gemm(g) = s else { return None };
            let kernel = instantiate(&workload, s, caps).ok()?;
            Some((*s, kernel, ir_estimate(w, g, model)))
        })
        .collect();
    let refused = candidates.len() - generated.len();
    let with_stats = ctx.has_pipeline_statistics();
    struct Scored {
        schedule: Schedule,
        estimate: crate::static_cost::IrEstimate,
        stats: Option<BTreeMap<String, f64>>,
        disqualified: Option<String>,
    }
    let mut scored = Vec::with_capacity(generated.len());
    let mut driver_compiled = 0;
    for (schedule, kernel, estimate) in generated {
        let (stats, disqualified) = if with_stats {
            // Created and dropped at once: only the compiler's statistics are wanted.
            match ComputePipeline::with_statistics(ctx, None, &kernel) {
                Ok((_, stats)) => {
                    driver_compiled += 1;
                    let flat = stats.flat();
                    let spills = spilling(&flat);
                    let why = (!spills.is_empty()).then(|| {
                        let list: Vec<String> =
                            spills.iter().map(|(n, v)| format!("{n} {v}")).collect();
                        format!("spills: {}", list.join(", "))
                    });
                    (Some(flat), why)
                }
                Err(e) => (None, Some(format!("pipeline creation failed: {e}"))),
            }
        } else {
            (None, None)
        };
        scored.push(Scored {
            schedule,
            estimate,
            stats,
            disqualified,
        });
    }
    if scored.is_empty() {
        return None;
    }
    // One source for the whole ranking: driver cycles only if every qualified candidate has
    // them (scores of different sources are not comparable).
    let all_cycles = scored.iter().filter(|c| c.disqualified.is_none()).all(|c| {
        c.stats
            .as_ref()
            .is_some_and(|s| stat(s, "cycles").is_some())
    });
    let source = if with_stats && all_cycles {
        ScoreSource::DriverCycles
    } else {
        ScoreSource::Analytic
    };
    // (ranked, compute seconds where predicted, registers)
    let mut ranked: Vec<(RankedSchedule, f64, f64)> = scored
        .into_iter()
        .map(|c| {
            let stats_for_score = match source {
                ScoreSource::DriverCycles => c.stats.as_ref(),
                ScoreSource::Analytic => None,
            };
            let (value, _) = score(&c.estimate, stats_for_score, pm);
            let registers = c
                .stats
                .as_ref()
                .and_then(|s| stat(s, "register"))
                .unwrap_or(0.0);
            let mut numbers = c.stats.clone().unwrap_or_default();
            numbers.extend(c.estimate.as_map());
            // Candidates whose time is the memory floor tie: the one with more compute
            // headroom first.
            let mut compute = 0.0;
            if let Some((cost, unrolled)) =
                stats_for_score.and_then(|s| driver_cost(&c.estimate, s, pm))
            {
                compute = cost.compute_s;
                let f = c.estimate.factors_as_compiled(unrolled);
                numbers.extend([
                    ("predicted_s".to_string(), cost.total_s),
                    ("predicted_compute_s".to_string(), cost.compute_s),
                    ("predicted_memory_s".to_string(), cost.memory_s),
                    ("loop_factor_arith".to_string(), f.arith),
                    ("loop_factor_ls".to_string(), f.ls),
                    (
                        "loops_unrolled_reading".to_string(),
                        match unrolled {
                            crate::static_cost::Unrolled::Nothing => 0.0,
                            crate::static_cost::Unrolled::Requested => 1.0,
                            crate::static_cost::Unrolled::Constant => 2.0,
                        },
                    ),
                ]);
            }
            (
                RankedSchedule {
                    schedule: c.schedule,
                    score: value,
                    disqualified: c.disqualified,
                    driver_stats: Some(numbers),
                },
                compute,
                registers,
            )
        })
        .collect();
    ranked.sort_by(|(a, ca, ra), (b, cb, rb)| {
        a.disqualified
            .is_some()
            .cmp(&b.disqualified.is_some())
            .then(a.score.total_cmp(&b.score))
            .then(ca.total_cmp(cb))
            .then(ra.total_cmp(rb))
    });
    let candidates: Vec<RankedSchedule> = ranked.into_iter().map(|(r, _, _)| r).collect();
    let default_rank = candidates.iter().position(|c| c.schedule == *default);
    let mut words = source.describe().to_string();
    if source == ScoreSource::DriverCycles {
        words += &format!("; constants: {}", pm.describe());
    }
    if !with_stats {
        words += "; kernels generated, not compiled by the driver (it reports no statistics)";
    }
    Some(StaticOutcome {
        ranking: SeedRanking {
            source: words,
            date: Trial::now_unix_s(),
            host: host.to_string(),
            candidates,
        },
        source,
        refused,
        driver_compiled,
        default_rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_starts_with_the_default_and_spreads_over_the_space() {
        let space: Vec<Schedule> = (1..=40).map(|i| crate::replay::tests::tile(8, i)).collect();
        let first = space[7];
        let s = sample(&space, &first, 5, 1);
        assert_eq!(s[0], first);
        assert_eq!(s.len(), 5);
        assert!(!s[1..].contains(&first));
        // Spread: the picks are about 39/4 apart, not the first four.
        let positions: Vec<usize> = s[1..]
            .iter()
            .map(|x| space.iter().position(|y| y == x).unwrap())
            .collect();
        assert!(
            positions.windows(2).all(|p| p[1] >= p[0] + 8),
            "{positions:?}"
        );
        // Asking for more than there is gives the whole space once.
        assert_eq!(sample(&space, &first, 100, 3).len(), 40);
        assert_eq!(static_seed_budget(32), 8);
        assert_eq!(static_seed_budget(6), 3);
    }
}
