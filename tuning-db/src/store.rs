//! The sled-backed store.
//!
//! Layout (one sled db, four trees):
//! - `trials`: `RecordKey::encode() ++ \n ++ id (u64 big-endian)` → JSON [`StoredTrial`].
//!   Trials of one key are adjacent and in insertion order; the best trial is derived from
//!   them, never stored separately, so it cannot go stale.
//! - `graph_choices`: `canonical(device) ++ \n ++ canonical(model_shape_key)` → JSON [`GraphChoice`].
//! - `seed_rankings`: `RecordKey::encode()` → JSON [`crate::seeds::SeedRanking`]: unmeasured
//!   rankings, never read by `best` or `lookup_for_device` (added without a format bump: an
//!   older rocky simply does not open the tree).
//! - `calibrations`: [`crate::calibration::Calibration`]s of the Mali cost model (measured
//!   figure, prediction, fitted constants), keyed by device, date and what was measured; added
//!   without a format bump, like the seed rankings.
//! - `meta`: `format_version` → decimal string.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::path::{Path, PathBuf};

use rocky_compiler::{Schedule, Workload};
use sled::transaction::{TransactionError, Transactional};

use crate::error::DbError;
use crate::fingerprint::DeviceFingerprint;
use crate::record::{
    canonical_json, device_prefix, validate_trial, GraphChoice, Provenance, RecordKey, StoredTrial,
    Trial, TrialStatus, SEP,
};

/// Bump when the layout above changes incompatibly.
pub const FORMAT_VERSION: u32 = 1;

const TRIALS: &str = "trials";
const GRAPH_CHOICES: &str = "graph_choices";
const SEED_RANKINGS: &str = "seed_rankings";
const CALIBRATIONS: &str = "calibrations";
const META: &str = "meta";
const FORMAT_KEY: &str = "format_version";

pub struct TuningDb {
    path: PathBuf,
    db: sled::Db,
    trials: sled::Tree,
    graph_choices: sled::Tree,
    /// Unmeasured seed rankings (`crate::seeds`), apart from the trials.
    pub(crate) seed_rankings: sled::Tree,
    /// Calibrations of the cost model (`crate::calibration`).
    pub(crate) calibrations: sled::Tree,
}

/// What the database knows for a (device, compiler version, workload).
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Measured on this exact device and driver: use it.
    Exact(Trial),
    /// Measured on the same GPU under another driver version: may seed a search, never be
    /// used blindly.
    SeedOnly(Trial),
    None,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub devices: usize,
    /// Distinct (device, compiler version, workload) keys.
    pub keys: usize,
    /// Distinct workloads over all devices and compiler versions.
    pub workloads: usize,
    pub trials: usize,
    pub ok_trials: usize,
    /// Failed trials by [`crate::FailureKind::as_str`].
    pub failures: BTreeMap<&'static str, usize>,
}

impl TuningDb {
    /// Opens (creating if absent) the database at `path`. Never deletes or rewrites existing
    /// data: a path that is a file, a non-empty directory without a sled database, a corrupt
    /// or foreign-format database, a locked or unwritable path each give their own error.
    pub fn open(path: impl AsRef<Path>) -> Result<TuningDb, DbError> {
        let path = path.as_ref().to_path_buf();
        check_path_before_open(&path)?;
        let config = sled::Config::new().path(&path);
        // sled 0.34 may panic on some damaged files instead of returning Corruption.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return Err(open_error(&path, e)),
            Err(panic) => {
                return Err(DbError::Corrupt {
                    path,
                    detail: format!("sled panicked while opening: {}", panic_text(&panic)),
                })
            }
        };
        let meta = db.open_tree(META)?;
        match meta.get(FORMAT_KEY)? {
            Some(v) if v.as_ref() == FORMAT_VERSION.to_string().as_bytes() => {}
            Some(v) => {
                return Err(DbError::UnsupportedFormat {
                    path,
                    found: String::from_utf8_lossy(&v).into_owned(),
                    supported: FORMAT_VERSION,
                })
            }
            None => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION.to_string().as_bytes())?;
                db.flush()?;
            }
        }
        Ok(TuningDb {
            trials: db.open_tree(TRIALS)?,
            graph_choices: db.open_tree(GRAPH_CHOICES)?,
            seed_rankings: db.open_tree(SEED_RANKINGS)?,
            calibrations: db.open_tree(CALIBRATIONS)?,
            db,
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores a trial measured on this host and flushes it to disk before returning, so a
    /// killed tuning run keeps every trial it finished.
    pub fn add_trial(&self, key: &RecordKey, trial: &Trial) -> Result<(), DbError> {
        let provenance = Provenance {
            host: trial.host.clone(),
            imported_from: None,
            imported_at: None,
        };
        self.add_stored_trial(
            key,
            &StoredTrial {
                trial: trial.clone(),
                provenance,
            },
        )
    }

    /// Stores a trial with explicit provenance and flushes.
    pub fn add_stored_trial(&self, key: &RecordKey, stored: &StoredTrial) -> Result<(), DbError> {
        key.validate().map_err(|detail| DbError::Invalid {
            what: "record key",
            detail,
        })?;
        validate_trial(&key.workload, &stored.trial).map_err(|detail| DbError::Invalid {
            what: "trial",
            detail,
        })?;
        let id = self.db.generate_id()?;
        self.trials
            .insert(trial_key(&key.encode(), id), encode_stored(stored))?;
        self.trials.flush()?;
        Ok(())
    }

    /// Every trial of `key` with its provenance, in insertion order.
    pub fn stored_trials(&self, key: &RecordKey) -> Result<Vec<StoredTrial>, DbError> {
        let mut prefix = key.encode();
        prefix.push(SEP);
        self.trials
            .scan_prefix(prefix)
            .map(|kv| decode_stored(&kv?.1))
            .collect()
    }

    /// Every trial of `key`, in insertion order.
    pub fn trials(&self, key: &RecordKey) -> Result<Vec<Trial>, DbError> {
        Ok(self
            .stored_trials(key)?
            .into_iter()
            .map(|s| s.trial)
            .collect())
    }

    /// The fastest Ok trial of `key` (lowest median; the earlier one on ties) and its provenance.
    pub fn best_stored(&self, key: &RecordKey) -> Result<Option<StoredTrial>, DbError> {
        Ok(fastest(self.stored_trials(key)?))
    }

    /// The fastest Ok trial of `key`.
    pub fn best(&self, key: &RecordKey) -> Result<Option<Trial>, DbError> {
        Ok(self.best_stored(key)?.map(|s| s.trial))
    }

    /// Whether `schedule` was already tried for `key` (Ok or failed): a resumed tuning run
    /// skips it.
    pub fn has_trial(&self, key: &RecordKey, schedule: &Schedule) -> Result<bool, DbError> {
        Ok(self
            .stored_trials(key)?
            .iter()
            .any(|s| &s.trial.schedule == schedule))
    }

    /// Every key with at least one trial on exactly `device` (driver version included).
    pub fn keys_for_device(&self, device: &DeviceFingerprint) -> Result<Vec<RecordKey>, DbError> {
        self.keys_with_prefix(&device_prefix(device))
    }

    /// Every key in the database.
    pub fn all_keys(&self) -> Result<Vec<RecordKey>, DbError> {
        self.keys_with_prefix(&[])
    }

    fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<RecordKey>, DbError> {
        let mut keys = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        for kv in self.trials.scan_prefix(prefix) {
            let (k, _) = kv?;
            let record = record_part(&k)?;
            // Trials of one key are adjacent: decode each key once.
            if last.as_deref() != Some(record) {
                keys.push(
                    RecordKey::decode(record).map_err(|detail| DbError::BadStoredValue {
                        what: "record key",
                        detail,
                    })?,
                );
                last = Some(record.to_vec());
            }
        }
        Ok(keys)
    }

    /// The record to use for `workload` on `device`: an exact match, else the fastest record
    /// of the same GPU under another driver version as a seed only.
    pub fn lookup_for_device(
        &self,
        device: &DeviceFingerprint,
        compiler_version: &str,
        workload: &Workload,
    ) -> Result<Lookup, DbError> {
        let exact = RecordKey {
            device: device.clone(),
            compiler_version: compiler_version.to_string(),
            workload: *workload,
        };
        if let Some(best) = self.best(&exact)? {
            return Ok(Lookup::Exact(best));
        }
        let mut seed: Option<Trial> = None;
        for key in self.all_keys()? {
            let other_driver = key.device.same_gpu(device) && key.device != *device;
            if other_driver && key.compiler_version == compiler_version && key.workload == *workload
            {
                if let Some(best) = self.best(&key)? {
                    if seed.as_ref().map_or(true, |s| best.median_s < s.median_s) {
                        seed = Some(best);
                    }
                }
            }
        }
        Ok(seed.map_or(Lookup::None, Lookup::SeedOnly))
    }

    pub fn stats(&self) -> Result<Stats, DbError> {
        let mut stats = Stats::default();
        let mut devices = BTreeSet::new();
        let mut keys = BTreeSet::new();
        let mut workloads = BTreeSet::new();
        for kv in self.trials.iter() {
            let (k, v) = kv?;
            let record = record_part(&k)?;
            if !keys.contains(record) {
                let key = RecordKey::decode(record).map_err(|detail| DbError::BadStoredValue {
                    what: "record key",
                    detail,
                })?;
                devices.insert(device_prefix(&key.device));
                workloads.insert(canonical_json(&key.workload));
                keys.insert(record.to_vec());
            }
            let stored = decode_stored(&v)?;
            stats.trials += 1;
            match stored.trial.status {
                TrialStatus::Ok => stats.ok_trials += 1,
                TrialStatus::Failed { kind, .. } => {
                    *stats.failures.entry(kind.as_str()).or_default() += 1
                }
            }
        }
        stats.devices = devices.len();
        stats.keys = keys.len();
        stats.workloads = workloads.len();
        Ok(stats)
    }

    /// Stores the graph-level settings for a model shape (e.g. `qwen2-0.5b:q8_0:pp512`) and
    /// flushes; replaces the previous choice.
    pub fn set_graph_choice(
        &self,
        device: &DeviceFingerprint,
        model_shape_key: &str,
        choice: &GraphChoice,
    ) -> Result<(), DbError> {
        validate_graph_choice(device, model_shape_key, choice).map_err(|reason| {
            DbError::Invalid {
                what: "graph choice",
                detail: format!("{model_shape_key:?} {choice:?}: {reason}"),
            }
        })?;
        self.graph_choices.insert(
            graph_key(device, model_shape_key),
            encode_graph_choice(choice),
        )?;
        self.graph_choices.flush()?;
        Ok(())
    }

    pub fn graph_choice(
        &self,
        device: &DeviceFingerprint,
        model_shape_key: &str,
    ) -> Result<Option<GraphChoice>, DbError> {
        match self.graph_choices.get(graph_key(device, model_shape_key))? {
            None => Ok(None),
            Some(v) => decode_graph_choice(&v).map(Some),
        }
    }

    /// Every stored graph choice of exactly `device` (driver version included), or of every
    /// device when `None`; in key order, so each device's choices are adjacent.
    pub fn graph_choices(
        &self,
        device: Option<&DeviceFingerprint>,
    ) -> Result<Vec<StoredGraphChoice>, DbError> {
        let prefix = device.map(device_prefix).unwrap_or_default();
        let mut out = Vec::new();
        for kv in self.graph_choices.scan_prefix(prefix) {
            let (k, v) = kv?;
            let (device, model_shape_key) =
                decode_graph_key(&k).map_err(|detail| DbError::BadStoredValue {
                    what: "graph choice key",
                    detail,
                })?;
            out.push(StoredGraphChoice {
                device,
                model_shape_key,
                choice: decode_graph_choice(&v)?,
            });
        }
        Ok(out)
    }

    /// Stores an import in one sled transaction over the four trees, so trials, graph choices,
    /// seed rankings and calibrations land together or not at all, then flushes. Graph choices
    /// and seed rankings replace the stored ones (the caller has already decided they are
    /// better); calibrations are new ones.
    pub(crate) fn insert_import_atomically(
        &self,
        trials: &[(RecordKey, StoredTrial)],
        graph_choices: &[StoredGraphChoice],
        seed_rankings: &[(RecordKey, crate::seeds::SeedRanking)],
        calibrations: &[crate::calibration::Calibration],
    ) -> Result<(), DbError> {
        // Ids are drawn before the transaction: its closure may run more than once, and
        // the keys it writes must be the same each time.
        let mut trial_batch = sled::Batch::default();
        for (key, stored) in trials {
            let id = self.db.generate_id()?;
            trial_batch.insert(trial_key(&key.encode(), id), encode_stored(stored));
        }
        let mut choice_batch = sled::Batch::default();
        for c in graph_choices {
            choice_batch.insert(
                graph_key(&c.device, &c.model_shape_key),
                encode_graph_choice(&c.choice),
            );
        }
        let mut seed_batch = sled::Batch::default();
        for (key, ranking) in seed_rankings {
            seed_batch.insert(key.encode(), crate::seeds::encode(ranking));
        }
        let mut calibration_batch = sled::Batch::default();
        for c in calibrations {
            calibration_batch.insert(c.key(), crate::calibration::encode(c));
        }
        (
            &self.trials,
            &self.graph_choices,
            &self.seed_rankings,
            &self.calibrations,
        )
            .transaction(|(trials, choices, seeds, calibrations)| {
                trials.apply_batch(&trial_batch)?;
                choices.apply_batch(&choice_batch)?;
                seeds.apply_batch(&seed_batch)?;
                calibrations.apply_batch(&calibration_batch)?;
                Ok(())
            })
            .map_err(|e: TransactionError<Infallible>| match e {
                TransactionError::Storage(e) => DbError::Storage(e),
                TransactionError::Abort(never) => match never {},
            })?;
        self.db.flush()?;
        Ok(())
    }
}

/// A graph choice with the (device, model shape key) it is stored under.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredGraphChoice {
    pub device: DeviceFingerprint,
    pub model_shape_key: String,
    pub choice: GraphChoice,
}

/// The largest ubatch rocky runs (`--ubatch` accepts 1 to 4096).
pub const MAX_UBATCH: u32 = 4096;

/// Checks what every stored or imported graph choice must satisfy: a named device and model
/// shape, a ubatch rocky can run, at least one dispatch per command buffer, and a measured
/// (finite, positive) throughput for the faster-wins merge to compare (and the default's, where
/// stored).
pub(crate) fn validate_graph_choice(
    device: &DeviceFingerprint,
    model_shape_key: &str,
    choice: &GraphChoice,
) -> Result<(), String> {
    if device.device_name.trim().is_empty() {
        return Err("device.device_name is empty".into());
    }
    if model_shape_key.trim().is_empty() {
        return Err("the model shape key is empty".into());
    }
    if !(1..=MAX_UBATCH).contains(&choice.ubatch) {
        return Err(format!(
            "ubatch = {} is out of range 1..={MAX_UBATCH}",
            choice.ubatch
        ));
    }
    if choice.max_dispatches_per_cb == 0 {
        return Err("max_dispatches_per_cb = 0: a command buffer needs at least 1 dispatch".into());
    }
    if !(choice.tok_s.is_finite() && choice.tok_s > 0.0) {
        return Err(format!(
            "tok_s = {} is not a finite positive throughput",
            choice.tok_s
        ));
    }
    if let Some(d) = choice
        .default_tok_s
        .filter(|d| !(d.is_finite() && *d > 0.0))
    {
        return Err(format!(
            "default_tok_s = {d} is not a finite positive throughput"
        ));
    }
    Ok(())
}

/// The fastest Ok trial; the earlier on ties.
pub(crate) fn fastest(trials: Vec<StoredTrial>) -> Option<StoredTrial> {
    let mut best: Option<StoredTrial> = None;
    for s in trials.into_iter().filter(|s| s.trial.is_ok()) {
        if best
            .as_ref()
            .map_or(true, |b| s.trial.median_s < b.trial.median_s)
        {
            best = Some(s);
        }
    }
    best
}

fn trial_key(record: &[u8], id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(record.len() + 9);
    k.extend_from_slice(record);
    k.push(SEP);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The `RecordKey::encode()` part of a trial key.
fn record_part(trial_key: &[u8]) -> Result<&[u8], DbError> {
    let n = trial_key.len();
    if n < 10 || trial_key[n - 9] != SEP {
        return Err(DbError::BadStoredValue {
            what: "trial key",
            detail: format!("{n} bytes, not `record key \\n id`"),
        });
    }
    Ok(&trial_key[..n - 9])
}

fn graph_key(device: &DeviceFingerprint, model_shape_key: &str) -> Vec<u8> {
    let mut k = device_prefix(device);
    k.extend_from_slice(canonical_json(&model_shape_key).as_bytes());
    k
}

/// Inverse of [`graph_key`]: compact JSON holds no raw newline, so the first one ends the
/// device part.
fn decode_graph_key(bytes: &[u8]) -> Result<(DeviceFingerprint, String), String> {
    let mut parts = bytes.splitn(2, |b| *b == SEP);
    let device = parts.next().unwrap_or_default();
    let model = parts
        .next()
        .ok_or_else(|| "key has no model shape part".to_string())?;
    Ok((
        serde_json::from_slice(device).map_err(|e| format!("device: {e}"))?,
        serde_json::from_slice(model).map_err(|e| format!("model shape key: {e}"))?,
    ))
}

fn encode_graph_choice(choice: &GraphChoice) -> Vec<u8> {
    serde_json::to_vec(choice).expect("graph choices serialize")
}

fn decode_graph_choice(bytes: &[u8]) -> Result<GraphChoice, DbError> {
    serde_json::from_slice(bytes).map_err(|e| DbError::BadStoredValue {
        what: "graph choice",
        detail: e.to_string(),
    })
}

fn encode_stored(stored: &StoredTrial) -> Vec<u8> {
    serde_json::to_vec(stored).expect("stored trials serialize")
}

fn decode_stored(bytes: &[u8]) -> Result<StoredTrial, DbError> {
    serde_json::from_slice(bytes).map_err(|e| DbError::BadStoredValue {
        what: "trial",
        detail: e.to_string(),
    })
}

/// Refuses paths sled would misuse: a plain file, or a non-empty directory that holds no sled
/// database (sled would happily add its files to it). Creates missing parent directories.
fn check_path_before_open(path: &Path) -> Result<(), DbError> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => Err(DbError::NotADatabase {
            path: path.to_path_buf(),
            reason: "it is a file; a tuning database is a directory".into(),
        }),
        Ok(_) => {
            let entries = std::fs::read_dir(path).map_err(|source| DbError::NotWritable {
                path: path.to_path_buf(),
                source,
            })?;
            let names: Vec<_> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect();
            // sled writes `conf` first; a directory with a `db` but no `conf` would be taken
            // for a new database and its `db` file overwritten, so it is refused instead.
            let looks_like_sled = names.iter().any(|n| n == "conf");
            if names.is_empty() || looks_like_sled {
                Ok(())
            } else {
                Err(DbError::NotADatabase {
                    path: path.to_path_buf(),
                    reason: format!(
                        "a non-empty directory ({} entries) without sled's `conf` file",
                        names.len()
                    ),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(path)
            .map_err(|source| DbError::NotWritable {
                path: path.to_path_buf(),
                source,
            }),
        Err(source) => Err(DbError::NotWritable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn open_error(path: &Path, e: sled::Error) -> DbError {
    let path = path.to_path_buf();
    match e {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            DbError::Locked {
                path,
                detail: io.to_string(),
            }
        }
        sled::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            DbError::NotWritable { path, source: io }
        }
        sled::Error::Corruption { .. } | sled::Error::Unsupported(_) => DbError::Corrupt {
            path,
            detail: e.to_string(),
        },
        other => DbError::Storage(other),
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}
