//! Sharing records as JSON lines: export, and an all-or-nothing validating import that merges
//! by keeping the faster record per key.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::error::DbError;
use crate::fingerprint::DeviceFingerprint;
use crate::record::{validate_trial, Provenance, RecordKey, StoredTrial, Trial};
use crate::store::{fastest, TuningDb};

/// Tag of every exported line, so a stray JSON file is recognised as not ours.
pub const EXPORT_FORMAT: &str = "rocky-tuning-record";
/// Version of the exported line format; import accepts exactly this.
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

#[derive(Clone, Debug, Default)]
pub struct ExportFilter {
    /// Only this exact device (driver version included).
    pub device: Option<DeviceFingerprint>,
    /// Only workloads of this template kind (`Workload::kind()`, e.g. `gemm`).
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
}

/// Writes one [`ExportRecord`] per key that passes `filter`; returns the number of lines.
pub fn export_jsonl<W: Write>(
    db: &TuningDb,
    mut writer: W,
    filter: &ExportFilter,
) -> Result<usize, DbError> {
    let keys = match &filter.device {
        Some(d) => db.keys_for_device(d)?,
        None => db.all_keys()?,
    };
    let mut lines = 0;
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
        let line = serde_json::to_string(&record).expect("export records serialize");
        writeln!(writer, "{line}").map_err(|source| DbError::Io {
            context: "writing the export".into(),
            source,
        })?;
        lines += 1;
    }
    writer.flush().map_err(|source| DbError::Io {
        context: "writing the export".into(),
        source,
    })?;
    Ok(lines)
}

/// Parses and checks one line; the error text is the reason only (the caller adds the line).
pub fn parse_record_line(line: &str) -> Result<ExportRecord, String> {
    // Look at format and version first so a newer file gets "unsupported version", not a
    // confusing missing-field error.
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let format = value.get("format").and_then(|v| v.as_str());
    if format != Some(EXPORT_FORMAT) {
        return Err(format!(
            "`format` is {:?}, expected \"{EXPORT_FORMAT}\" (is this a rocky export?)",
            value.get("format")
        ));
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(EXPORT_VERSION) => {}
        other => {
            return Err(format!(
                "unsupported record version {other:?}; this rocky reads version {EXPORT_VERSION}"
            ))
        }
    }
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
    if record.best.is_none() && record.trials.as_ref().is_none_or(|t| t.is_empty()) {
        return Err("record has neither `best` nor `trials`".into());
    }
    Ok(record)
}

/// Imports JSON lines written by [`export_jsonl`] (blank lines are skipped).
///
/// Every line is read and validated before anything is written; one bad line fails the whole
/// import with its line number, and nothing is stored. Then all new trials go in with one
/// atomic batch. Merge: imported trials join the key's trials (marked `imported_from:
/// source_name`), so the key's best is the faster of local and imported; trials already
/// present are skipped.
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
    let mut summary = ImportSummary::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| line_error(i + 1, format!("cannot read: {e}")))?;
        summary.lines += 1;
        if line.trim().is_empty() {
            continue;
        }
        records.push(parse_record_line(&line).map_err(|m| line_error(i + 1, m))?);
    }

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
    db.insert_trials_atomically(&to_insert)?;
    Ok(summary)
}
