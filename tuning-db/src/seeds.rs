//! Seed rankings: a workload's candidate schedules ranked WITHOUT running them (`rocky tune
//! --static`: from the driver's compiler statistics, or from an analytic model of the kernel's
//! IR), made on a device that can compile but not time (the Mali through Mesa's drm-shim).
//!
//! They are kept apart from the trials on purpose: nothing here was measured or checked, so a
//! ranking is never a winner. `TuningDb::best`, `lookup_for_device` and so the prefill's
//! schedule source never see it; only the live tuner reads it, to try the best-ranked
//! candidates first. Stored in the `seed_rankings` tree, one ranking per record key (a new
//! ranking of the same key replaces the old one); exported and imported as
//! `"rocky-seed-ranking"` lines so a board owner can import a pre-tuned database.

use rocky_compiler::Schedule;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::error::DbError;
use crate::fingerprint::DeviceFingerprint;
use crate::record::RecordKey;
use crate::store::TuningDb;

/// One candidate of a ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankedSchedule {
    pub schedule: Schedule,
    /// Estimated cost of the whole workload in the ranking's own units (lower ranks higher);
    /// comparable only within one ranking.
    pub score: f64,
    /// Why the candidate must not be tried (e.g. "spills: Spills 4"); ranked last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disqualified: Option<String>,
    /// The driver's statistics of the compiled pipeline, where it reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_stats: Option<BTreeMap<String, f64>>,
}

/// An unmeasured ranking of one key's candidates, best first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRanking {
    /// Where the scores come from, in words (e.g. "driver statistics: Cycles …" or
    /// "analytic: IR operation counts …"); printed wherever the ranking is shown.
    pub source: String,
    /// Unix seconds when it was made.
    pub date: u64,
    pub host: String,
    /// Candidates, best-ranked first; disqualified ones last.
    pub candidates: Vec<RankedSchedule>,
}

impl SeedRanking {
    /// The best-ranked candidates that are not disqualified, at most `max`.
    pub fn top(&self, max: usize) -> Vec<Schedule> {
        self.candidates
            .iter()
            .filter(|c| c.disqualified.is_none())
            .take(max)
            .map(|c| c.schedule)
            .collect()
    }
}

/// Checks a ranking against its key: schedules of the key's template, finite non-negative
/// scores in non-decreasing order among the qualified candidates (which come first), a
/// source named.
pub fn validate_ranking(key: &RecordKey, ranking: &SeedRanking) -> Result<(), String> {
    if ranking.source.trim().is_empty() {
        return Err("the ranking names no source of its scores".into());
    }
    if ranking.candidates.is_empty() {
        return Err("the ranking has no candidates".into());
    }
    let mut last: Option<f64> = None;
    let mut seen_disqualified = false;
    for (i, c) in ranking.candidates.iter().enumerate() {
        if c.schedule.kind() != key.workload.kind() {
            return Err(format!(
                "candidates[{i}] is a `{}` schedule for a `{}` workload",
                c.schedule.kind(),
                key.workload.kind()
            ));
        }
        if !c.score.is_finite() || c.score < 0.0 {
            return Err(format!(
                "candidates[{i}].score = {} is not a finite non-negative number",
                c.score
            ));
        }
        if c.disqualified.is_some() {
            seen_disqualified = true;
            continue;
        }
        if seen_disqualified {
            return Err(format!(
                "candidates[{i}] is qualified but follows a disqualified one"
            ));
        }
        if last.is_some_and(|l| c.score < l) {
            return Err(format!(
                "candidates[{i}].score {} is below the one before it: not ranked best first",
                c.score
            ));
        }
        last = Some(c.score);
    }
    Ok(())
}

impl TuningDb {
    /// Stores (replacing) the seed ranking of `key` and flushes.
    pub fn set_seed_ranking(&self, key: &RecordKey, ranking: &SeedRanking) -> Result<(), DbError> {
        key.validate().map_err(|detail| DbError::Invalid {
            what: "record key",
            detail,
        })?;
        validate_ranking(key, ranking).map_err(|detail| DbError::Invalid {
            what: "seed ranking",
            detail,
        })?;
        self.seed_rankings.insert(key.encode(), encode(ranking))?;
        self.seed_rankings.flush()?;
        Ok(())
    }

    /// The seed ranking stored for exactly `key`.
    pub fn seed_ranking(&self, key: &RecordKey) -> Result<Option<SeedRanking>, DbError> {
        match self.seed_rankings.get(key.encode())? {
            None => Ok(None),
            Some(v) => decode(&v).map(Some),
        }
    }

    /// Every stored ranking of exactly `device`, or of every device when `None`.
    pub fn seed_rankings(
        &self,
        device: Option<&DeviceFingerprint>,
    ) -> Result<Vec<(RecordKey, SeedRanking)>, DbError> {
        let prefix = device.map(crate::record::device_prefix).unwrap_or_default();
        let mut out = Vec::new();
        for kv in self.seed_rankings.scan_prefix(prefix) {
            let (k, v) = kv?;
            let key = RecordKey::decode(&k).map_err(|detail| DbError::BadStoredValue {
                what: "seed ranking key",
                detail,
            })?;
            out.push((key, decode(&v)?));
        }
        Ok(out)
    }

    /// The ranking the live tuner seeds `workload`'s search with on `device`: the one made for
    /// this GPU (any driver version: a ranking made on the shim's Mali serves the board's) and
    /// this compiler version, the newest when there are several.
    pub fn seed_ranking_for_gpu(
        &self,
        device: &DeviceFingerprint,
        compiler_version: &str,
        workload: &rocky_compiler::Workload,
    ) -> Result<Option<SeedRanking>, DbError> {
        let mut found: Option<SeedRanking> = None;
        for (key, ranking) in self.seed_rankings(None)? {
            if key.device.same_gpu(device)
                && key.compiler_version == compiler_version
                && key.workload == *workload
                && found.as_ref().map_or(true, |f| ranking.date > f.date)
            {
                found = Some(ranking);
            }
        }
        Ok(found)
    }
}

pub(crate) fn encode(ranking: &SeedRanking) -> Vec<u8> {
    serde_json::to_vec(ranking).expect("seed rankings serialize")
}

fn decode(bytes: &[u8]) -> Result<SeedRanking, DbError> {
    serde_json::from_slice(bytes).map_err(|e| DbError::BadStoredValue {
        what: "seed ranking",
        detail: e.to_string(),
    })
}
