//! `rocky tune --static`: rank every GEMM workload's candidates without running any (a device
//! that can compile but not time: the Mali through Mesa's drm-shim) and store the rankings as
//! unmeasured seed rankings. `rocky prefill` never uses them; a live `rocky tune` on the same
//! GPU tries their top candidates first; `rocky db export` carries them to the board.

use super::gpu::db_error;
use super::tune::{describe_schedule, describe_workload};
use crate::error::CmdResult;
use rocky_tuner::static_cost::ScoreSource;
use rocky_tuner::{ModelWorkload, Tuner};
use serde_json::json;
use std::path::Path;

pub fn run(
    tuner: &Tuner,
    workloads: &[ModelWorkload],
    sample: usize,
    seed: u64,
    db: &Path,
    as_json: bool,
) -> CmdResult {
    let say = |line: String| {
        if as_json {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    };
    say(format!(
        "ranking the candidates of each GEMM workload WITHOUT running them on {} (at most {sample} \
         per workload, the default among them) into {}: unmeasured seed rankings, never used as \
         tuned winners",
        tuner.device().describe(),
        db.display()
    ));
    let mut rows = Vec::new();
    let outcomes = tuner
        .rank_static(workloads, sample, seed, &mut |index, count, mw, o, space| {
            let top = o.ranking.candidates.first();
            let disqualified = o
                .ranking
                .candidates
                .iter()
                .filter(|c| c.disqualified.is_some())
                .count();
            say(format!(
                "[{}/{count}] {} ({}): {} candidates ranked ({space} in the space) by {}, {} driver-compiled, \
                 {disqualified} disqualified, {} refused; top {} (score {:.4e}{}); default ranks {}",
                index + 1,
                describe_workload(&mw.workload),
                tensor_kinds(&mw.labels),
                o.ranking.candidates.len(),
                match o.source {
                    ScoreSource::DriverCycles => "the `rocky predict` model of the driver's statistics",
                    ScoreSource::Analytic => "the analytic IR model",
                },
                o.driver_compiled,
                o.refused,
                top.map_or("none".into(), |c| describe_schedule(&c.schedule)),
                top.map_or(f64::NAN, |c| c.score),
                match o.source {
                    ScoreSource::DriverCycles => " s, predicted",
                    ScoreSource::Analytic => "",
                },
                o.default_rank
                    .map_or("(not ranked)".into(), |r| format!("#{}", r + 1)),
            ));
            // The score is `rocky predict`'s time of the dispatch on a G610 MC4.
            if let (ScoreSource::DriverCycles, Some(c)) = (o.source, top) {
                say(format!(
                    "    predicted on a G610 MC4 (the `rocky predict` model, constants as \
                     in `scores:` below; not a measurement): {:.3} ms",
                    c.score * 1e3
                ));
            }
        })
        .map_err(|e| match e {
            rocky_tuner::TuneError::Db(e) => db_error(e),
            other => crate::error::CliError::internal(other.to_string()),
        })?;
    for (mw, o) in &outcomes {
        rows.push(json!({
            "workload": mw.workload,
            "labels": mw.labels,
            "source": o.ranking.source,
            "ranked": o.ranking.candidates.len(),
            "refused": o.refused,
            "driver_compiled": o.driver_compiled,
            "default_rank": o.default_rank.map(|r| r + 1),
            "top": o.ranking.candidates.iter().take(5).collect::<Vec<_>>(),
        }));
    }
    let sources: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .map(|(_, o)| o.ranking.source.as_str())
        .collect();
    for s in &sources {
        say(format!("scores: {s}"));
    }
    say(format!(
        "stored {} seed rankings (unmeasured). `rocky prefill` does not use them; a live `rocky \
         tune` on this GPU tries their top candidates first; `rocky db export` carries them",
        outcomes.len()
    ));
    if as_json {
        let out = json!({
            "static": true,
            "device": tuner.device(),
            "db": db,
            "workloads": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(())
}

/// The distinct tensor kinds of a workload's labels (`blk.3.attn_q` → `attn_q`), for a short
/// line.
fn tensor_kinds(labels: &[String]) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for l in labels {
        let kind = l.rsplit('.').next().unwrap_or(l);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds.join(", ")
}
