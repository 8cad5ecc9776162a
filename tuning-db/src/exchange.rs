//! Sharing tuning as JSON lines: export, and an all-or-nothing validating import that merges
//! by keeping the faster record per key.
//!
//! A file holds two kinds of line, each tagged by `format` and `version`:
//! - `"rocky-tuning-record"` ([`ExportRecord`]): a kernel record key with its best trial
//!   (and optionally every trial);
//! - `"rocky-graph-choice"` ([`ExportGraphChoice`]): the graph-level settings chosen for a
//!   model shape on a device, after the records. Files from before graph choices were
//!   exported simply have none.
//! - `"rocky-seed-ranking"` ([`ExportSeedRanking`]): an UNMEASURED ranking of a kernel
//!   record's candidates (`rocky tune --static`, see [`crate::seeds`]), last. It only seeds a
//!   board's live search; importing it never changes a key's best trial.
//! - `"rocky-calibration"` ([`ExportCalibration`]): a calibration of the Mali cost model (a
//!   figure measured on a device, the prediction before the fit, the fitted constants; see
//!   [`crate::calibration`]), last. Files from before calibrations were exported have none and
//!   import as before; an older rocky refuses a file with one by its `format`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::calibration::{validate_calibration, Calibration};
use crate::error::DbError;
use crate::fingerprint::DeviceFingerprint;
use crate::record::{validate_trial, GraphChoice, Provenance, RecordKey, StoredTrial, Trial};
use crate::seeds::{validate_ranking, SeedRanking};
use crate::store::{fastest, validate_graph_choice, StoredGraphChoice, TuningDb};

/// Tag of every exported kernel-record line, so a stray JSON file is recognised as not ours.
pub const EXPORT_FORMAT: &str = "rocky-tuning-record";
/// Tag of every exported graph-choice line.
pub const GRAPH_CHOICE_FORMAT: &str = "rocky-graph-choice";
/// Tag of every exported seed-ranking line.
pub const SEED_RANKING_FORMAT: &str = "rocky-seed-ranking";
/// Tag of every exported calibration line.
pub const CALIBRATION_FORMAT: &str = "rocky-calibration";
/// Version of the exported line formats (every kind); import accepts exactly this.
pub const EXPORT_VERSION: u32 = 1;

/// One exported line: the key, its best trial and where that came from, and optionally every
/// trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportRecord {
    pub format: String,
    pub version: u32,
    pub key: RecordKey,
    /// The fastest Ok trial, `None` when every trial failed (only exported with all trials).
    pub best: Option<Trial>,
    pub provenance: Option<Provenance>,
    /// Every trial of the key with its provenance, when exported with `all_trials`.
    #[serde(default)]
    pub trials: Option<Vec<StoredTrial>>,
}

/// One exported graph choice: the device and model shape key it is stored under, and the
/// settings with the throughput they were measured at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportGraphChoice {
    pub format: String,
    pub version: u32,
    pub device: DeviceFingerprint,
    /// The model shape key exactly as stored (the tuner's includes the compiler version).
    pub model: String,
    #[serde(with = "StrictGraphChoice")]
    pub choice: GraphChoice,
}

/// [`GraphChoice`]'s fields with unknown ones refused on import (the stored type itself is
/// lenient). A remote definition, so adding a field to `GraphChoice` fails to compile here
/// instead of silently dropping it from exports.
#[derive(Serialize, Deserialize)]
#[serde(remote = "GraphChoice", deny_unknown_fields)]
struct StrictGraphChoice {
    ubatch: u32,
    max_dispatches_per_cb: u32,
    budget_bytes: u64,
    tok_s: f64,
    #[serde(default)]
    fuse_swiglu: bool,
    #[serde(default)]
    overlap: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    default_tok_s: Option<f64>,
}

/// One exported seed ranking: the record key it ranks and the ranking (unmeasured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportSeedRanking {
    pub format: String,
    pub version: u32,
    pub key: RecordKey,
    pub ranking: SeedRanking,
}

/// One exported calibration of the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportCalibration {
    pub format: String,
    pub version: u32,
    pub calibration: Calibration,
}

/// One parsed and validated line of an export file.
#[derive(Clone, Debug, PartialEq)]
pub enum ExportLine {
    Record(ExportRecord),
    GraphChoice(ExportGraphChoice),
    SeedRanking(ExportSeedRanking),
    Calibration(ExportCalibration),
}

#[derive(Clone, Debug, Default)]
pub struct ExportFilter {
    /// Only this exact device (driver version included).
    pub device: Option<DeviceFingerprint>,
    /// Only workloads of this template kind (`Workload::kind()`, e.g. `gemm`). Graph
    /// choices belong to no kernel template, so they are left out when this is set.
    pub workload_kind: Option<String>,
    /// Also write every trial (failures included), not only the best.
    pub all_trials: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportSummary {
    pub lines: usize,
    /// Keys the database had no trial for before.
    pub new_keys: usize,
    /// Keys whose best trial changed because an imported one was faster.
    pub improved_keys: usize,
    /// Keys whose local best stayed (it was as fast or faster).
    pub kept_local: usize,
    pub trials_added: usize,
    /// Trials already present (same trial, same measuring host): importing twice is a no-op.
    pub duplicate_trials: usize,
    /// Graph-choice lines for a (device, model shape) the database had no choice for.
    pub graph_choices_added: usize,
    /// Graph-choice lines that replaced a local choice of lower throughput.
    pub graph_choices_improved: usize,
    /// Graph-choice lines not stored because the local choice was as fast or faster.
    pub graph_choices_kept_local: usize,
    /// Seed rankings stored (new keys, or newer than the local ranking of the key).
    pub seed_rankings_added: usize,
    /// Seed-ranking lines not stored because the local ranking was as new or newer.
    pub seed_rankings_kept_local: usize,
    /// Calibrations stored (the database did not hold them).
    pub calibrations_added: usize,
    /// Calibration lines already stored (importing twice is a no-op).
    pub calibrations_duplicate: usize,
    /// Calibration lines not stored because a different calibration is stored under the same
    /// device, moment, host and run (the local one is kept).
    pub calibrations_kept_local: usize,
}

/// What [`export_jsonl`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Kernel-record lines.
    pub records: usize,
    /// Graph-choice lines.
    pub graph_choices: usize,
    /// Seed-ranking lines (unmeasured).
    pub seed_rankings: usize,
    /// Calibration lines.
    pub calibrations: usize,
}

/// Writes one [`ExportRecord`] per key that passes `filter`, then one [`ExportGraphChoice`]
/// per stored graph choice of the filtered device (none when `filter.workload_kind` is set),
/// then one [`ExportSeedRanking`] per stored seed ranking that passes `filter`, then one
/// [`ExportCalibration`] per stored calibration of the filtered device (none when
/// `filter.workload_kind` is set: a calibration belongs to no kernel template).
pub fn export_jsonl<W: Write>(
    db: &TuningDb,
    mut writer: W,
    filter: &ExportFilter,
) -> Result<ExportSummary, DbError> {
    let mut write_line = |line: String| {
        writeln!(writer, "{line}").map_err(|source| DbError::Io {
            context: "writing the export".into(),
            source,
        })
    };
    let keys = match &filter.device {
        Some(d) => db.keys_for_device(d)?,
        None => db.all_keys()?,
    };
    let mut summary = ExportSummary::default();
    for key in keys {
        if let Some(kind) = &filter.workload_kind {
            if key.workload.kind() != kind {
                continue;
            }
        }
        let stored = db.stored_trials(&key)?;
        let best = fastest(stored.clone());
        if best.is_none() && !filter.all_trials {
            continue;
        }
        let record = ExportRecord {
            format: EXPORT_FORMAT.into(),
            version: EXPORT_VERSION,
            key,
            provenance: best.as_ref().map(|b| b.provenance.clone()),
            best: best.map(|b| b.trial),
            trials: filter.all_trials.then_some(stored),
        };
        write_line(serde_json::to_string(&record).expect("export records serialize"))?;
        summary.records += 1;
    }
    if filter.workload_kind.is_none() {
        for stored in db.graph_choices(filter.device.as_ref())? {
            let line = ExportGraphChoice {
                format: GRAPH_CHOICE_FORMAT.into(),
                version: EXPORT_VERSION,
                device: stored.device,
                model: stored.model_shape_key,
                choice: stored.choice,
            };
            write_line(serde_json::to_string(&line).expect("graph choices serialize"))?;
            summary.graph_choices += 1;
        }
    }
    for (key, ranking) in db.seed_rankings(filter.device.as_ref())? {
        if let Some(kind) = &filter.workload_kind {
            if key.workload.kind() != kind {
                continue;
            }
        }
        let line = ExportSeedRanking {
            format: SEED_RANKING_FORMAT.into(),
            version: EXPORT_VERSION,
            key,
            ranking,
        };
        write_line(serde_json::to_string(&line).expect("seed rankings serialize"))?;
        summary.seed_rankings += 1;
    }
    if filter.workload_kind.is_none() {
        for calibration in db.calibrations(filter.device.as_ref())? {
            let line = ExportCalibration {
                format: CALIBRATION_FORMAT.into(),
                version: EXPORT_VERSION,
                calibration,
            };
            write_line(serde_json::to_string(&line).expect("calibrations serialize"))?;
            summary.calibrations += 1;
        }
    }
    writer.flush().map_err(|source| DbError::Io {
        context: "writing the export".into(),
        source,
    })?;
    Ok(summary)
}

/// Parses and checks one line of either kind; the error text is the reason only (the caller
/// adds the line number).
pub fn parse_export_line(line: &str) -> Result<ExportLine, String> {
    // Look at format and version first so a newer file gets "unsupported version", not a
    // confusing missing-field error.
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let format = value.get("format").and_then(|v| v.as_str());
    let kind = match format {
        Some(EXPORT_FORMAT | GRAPH_CHOICE_FORMAT | SEED_RANKING_FORMAT | CALIBRATION_FORMAT) => {
            format
        }
        _ => {
            return Err(format!(
                "`format` is {:?}, expected \"{EXPORT_FORMAT}\", \"{GRAPH_CHOICE_FORMAT}\", \
                 \"{SEED_RANKING_FORMAT}\" or \"{CALIBRATION_FORMAT}\" (is this a rocky export?)",
                value.get("format")
            ))
        }
    };
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(EXPORT_VERSION) => {}
        other => {
            return Err(format!(
                "unsupported record version {other:?}; this rocky reads version {EXPORT_VERSION}"
            ))
        }
    }
    match kind {
        Some(EXPORT_FORMAT) => parse_record(value).map(ExportLine::Record),
        Some(GRAPH_CHOICE_FORMAT) => parse_graph_choice(value).map(ExportLine::GraphChoice),
        Some(CALIBRATION_FORMAT) => parse_calibration(value).map(ExportLine::Calibration),
        _ => parse_seed_ranking(value).map(ExportLine::SeedRanking),
    }
}

fn parse_calibration(value: serde_json::Value) -> Result<ExportCalibration, String> {
    // The path names the field at fault ("calibration.measured_tok_s: invalid type ...").
    let line: ExportCalibration = serde_path_to_error::deserialize(value)
        .map_err(|e| format!("bad calibration: {}: {}", e.path(), e.inner()))?;
    validate_calibration(&line.calibration).map_err(|e| format!("calibration: {e}"))?;
    Ok(line)
}

fn parse_seed_ranking(value: serde_json::Value) -> Result<ExportSeedRanking, String> {
    let line: ExportSeedRanking =
        serde_json::from_value(value).map_err(|e| format!("bad seed ranking: {e}"))?;
    line.key.validate()?;
    validate_ranking(&line.key, &line.ranking).map_err(|e| format!("seed ranking: {e}"))?;
    Ok(line)
}

fn parse_record(value: serde_json::Value) -> Result<ExportRecord, String> {
    let record: ExportRecord =
        serde_json::from_value(value).map_err(|e| format!("bad record: {e}"))?;
    record.key.validate()?;
    let workload = &record.key.workload;
    if let Some(best) = &record.best {
        if !best.is_ok() {
            return Err("`best` is a failed trial".into());
        }
        validate_trial(workload, best).map_err(|e| format!("best: {e}"))?;
        if record.provenance.is_none() {
            return Err("`best` has no `provenance`".into());
        }
    }
    for (i, t) in record.trials.iter().flatten().enumerate() {
        validate_trial(workload, &t.trial).map_err(|e| format!("trials[{i}]: {e}"))?;
    }
    if record.best.is_none() && record.trials.as_ref().map_or(true, |t| t.is_empty()) {
        return Err("record has neither `best` nor `trials`".into());
    }
    Ok(record)
}

fn parse_graph_choice(value: serde_json::Value) -> Result<ExportGraphChoice, String> {
    let line: ExportGraphChoice =
        serde_json::from_value(value).map_err(|e| format!("bad graph choice: {e}"))?;
    validate_graph_choice(&line.device, &line.model, &line.choice)
        .map_err(|e| format!("graph choice for {:?}: {e}", line.model))?;
    Ok(line)
}

/// Imports JSON lines written by [`export_jsonl`] (blank lines are skipped).
///
/// Every line is read and validated before anything is written; one bad line fails the whole
/// import with its line number, and nothing is stored. Then all new trials and graph choices
/// go in with one atomic transaction. Merge: imported trials join the key's trials (marked
/// `imported_from: source_name`), so the key's best is the faster of local and imported;
/// trials already present are skipped. An imported graph choice replaces the local one only
/// when there is none or it has a lower `tok_s`.
pub fn import_jsonl<R: BufRead>(
    db: &TuningDb,
    reader: R,
    source_name: &str,
) -> Result<ImportSummary, DbError> {
    let line_error = |line: usize, message: String| DbError::ImportLine {
        source_name: source_name.to_string(),
        line,
        message,
    };
    let mut records = Vec::new();
    let mut graph_choices = Vec::new();
    let mut seed_rankings = Vec::new();
    let mut calibrations = Vec::new();
    let mut summary = ImportSummary::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| line_error(i + 1, format!("cannot read: {e}")))?;
        summary.lines += 1;
        if line.trim().is_empty() {
            continue;
        }
        match parse_export_line(&line).map_err(|m| line_error(i + 1, m))? {
            ExportLine::Record(r) => records.push(r),
            ExportLine::GraphChoice(c) => graph_choices.push(c),
            ExportLine::SeedRanking(r) => seed_rankings.push(r),
            ExportLine::Calibration(c) => calibrations.push(c.calibration),
        }
    }
    let trials = merge_records(db, records, source_name, &mut summary)?;
    let choices = merge_graph_choices(db, graph_choices, &mut summary)?;
    let seeds = merge_seed_rankings(db, seed_rankings, &mut summary)?;
    let calibrations = merge_calibrations(db, calibrations, &mut summary)?;
    db.insert_import_atomically(&trials, &choices, &seeds, &calibrations)?;
    Ok(summary)
}

/// The imported calibrations the database does not hold yet (each once). A calibration is a
/// measurement: it is added, never merged; one whose key (device, moment, host, run) is taken
/// by a different stored calibration keeps the stored one.
fn merge_calibrations(
    db: &TuningDb,
    lines: Vec<Calibration>,
    summary: &mut ImportSummary,
) -> Result<Vec<Calibration>, DbError> {
    let mut new: Vec<Calibration> = Vec::new();
    for c in lines {
        if let Some(pending) = new.iter().find(|p| p.key() == c.key()) {
            if *pending == c {
                summary.calibrations_duplicate += 1;
            } else {
                summary.calibrations_kept_local += 1;
            }
            continue;
        }
        match db.has_calibration(&c)? {
            Some(true) => summary.calibrations_duplicate += 1,
            Some(false) => summary.calibrations_kept_local += 1,
            None => {
                summary.calibrations_added += 1;
                new.push(c);
            }
        }
    }
    Ok(new)
}

/// The imported seed rankings newer than the stored (or pending) ranking of their key; at
/// most one per key.
fn merge_seed_rankings(
    db: &TuningDb,
    lines: Vec<ExportSeedRanking>,
    summary: &mut ImportSummary,
) -> Result<Vec<(RecordKey, SeedRanking)>, DbError> {
    let mut newest: Vec<(RecordKey, SeedRanking)> = Vec::new();
    for line in lines {
        let pending = newest.iter().position(|(k, _)| *k == line.key);
        let current = match pending {
            Some(i) => Some(newest[i].1.clone()),
            None => db.seed_ranking(&line.key)?,
        };
        if current.is_some_and(|c| c.date >= line.ranking.date) {
            summary.seed_rankings_kept_local += 1;
            continue;
        }
        match pending {
            Some(i) => newest[i].1 = line.ranking,
            None => {
                summary.seed_rankings_added += 1;
                newest.push((line.key, line.ranking));
            }
        }
    }
    Ok(newest)
}

/// The imported trials not already stored, counting keys new, improved and kept local.
fn merge_records(
    db: &TuningDb,
    records: Vec<ExportRecord>,
    source_name: &str,
    summary: &mut ImportSummary,
) -> Result<Vec<(RecordKey, StoredTrial)>, DbError> {
    let now = crate::record::Trial::now_unix_s();
    let mut to_insert: Vec<(RecordKey, StoredTrial)> = Vec::new();
    for record in records {
        let existing = db.stored_trials(&record.key)?;
        let pending_same_key: Vec<StoredTrial> = to_insert
            .iter()
            .filter(|(k, _)| *k == record.key)
            .map(|(_, s)| s.clone())
            .collect();
        let before = fastest(existing.iter().chain(&pending_same_key).cloned().collect());
        let incoming: Vec<StoredTrial> = match record.trials {
            Some(trials) => trials,
            None => record
                .best
                .into_iter()
                .zip(record.provenance)
                .map(|(trial, provenance)| StoredTrial { trial, provenance })
                .collect(),
        };
        let mut added = Vec::new();
        for s in incoming {
            let known =
                existing
                    .iter()
                    .chain(&pending_same_key)
                    .chain(&added)
                    .any(|e: &StoredTrial| {
                        e.trial == s.trial && e.provenance.host == s.provenance.host
                    });
            if known {
                summary.duplicate_trials += 1;
                continue;
            }
            added.push(StoredTrial {
                trial: s.trial,
                provenance: Provenance {
                    host: s.provenance.host,
                    imported_from: Some(source_name.to_string()),
                    imported_at: Some(now),
                },
            });
        }
        let after = fastest(
            existing
                .iter()
                .chain(&pending_same_key)
                .chain(&added)
                .cloned()
                .collect(),
        );
        if existing.is_empty() && pending_same_key.is_empty() {
            summary.new_keys += 1;
        } else if before.map(|b| b.trial) != after.map(|a| a.trial) {
            summary.improved_keys += 1;
        } else {
            summary.kept_local += 1;
        }
        summary.trials_added += added.len();
        to_insert.extend(added.into_iter().map(|s| (record.key.clone(), s)));
    }
    Ok(to_insert)
}

/// The imported graph choices faster than what is stored (or pending from earlier lines of
/// the same file) for their (device, model shape); at most one per pair.
fn merge_graph_choices(
    db: &TuningDb,
    lines: Vec<ExportGraphChoice>,
    summary: &mut ImportSummary,
) -> Result<Vec<StoredGraphChoice>, DbError> {
    let mut winners: BTreeMap<(DeviceFingerprint, String), GraphChoice> = BTreeMap::new();
    for line in lines {
        let pair = (line.device, line.model);
        let current = match winners.get(&pair) {
            Some(pending) => Some(pending.clone()),
            None => db.graph_choice(&pair.0, &pair.1)?,
        };
        match current {
            None => summary.graph_choices_added += 1,
            Some(c) if line.choice.tok_s > c.tok_s => summary.graph_choices_improved += 1,
            Some(_) => {
                summary.graph_choices_kept_local += 1;
                continue;
            }
        }
        winners.insert(pair, line.choice);
    }
    Ok(winners
        .into_iter()
        .map(|((device, model_shape_key), choice)| StoredGraphChoice {
            device,
            model_shape_key,
            choice,
        })
        .collect())
}
