//! The tuning line of each device: how many of its workloads have a tuned schedule that
//! `rocky prefill` will use (this device, this driver version, this compiler version), and which
//! records no longer apply (another driver version, another compiler version).
//!
//! The doctor only looks: it never creates a database where there is none (opening one with
//! `TuningDb::open` would), and a locked or damaged database is a warning, not a failure.

use super::{CheckResult, Status};
use rocky_runtime::DeviceInfo;
use rocky_tuning_db::{DbError, DeviceFingerprint, RecordKey, TuningDb};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The database as the doctor found it; opened once for all devices.
pub enum TuningDbState {
    /// None of `--db`, `ROCKY_DB`, `XDG_DATA_HOME`, `HOME` says where it is.
    NoLocation,
    /// Nothing (or an empty directory) at the path: nothing was tuned yet.
    Absent {
        path: PathBuf,
        explicit: bool,
    },
    Open {
        db: TuningDb,
        explicit: bool,
    },
    /// Something is there but cannot be read: locked, damaged, not a database.
    Unusable {
        path: PathBuf,
        explicit: bool,
        error: DbError,
    },
}

impl TuningDbState {
    /// Opens the database at `path` (from `--db` when `explicit`) if one is there.
    pub fn open(path: Option<PathBuf>, explicit: bool) -> TuningDbState {
        let Some(path) = path else {
            return TuningDbState::NoLocation;
        };
        if is_absent(&path) {
            return TuningDbState::Absent { path, explicit };
        }
        // sled writes `conf` when it creates a database. Without it, sled would take the
        // directory for a new database and write over whatever `db` file is there: the doctor
        // must not change what it examines.
        if path.is_dir() && !path.join("conf").is_file() {
            let error = DbError::NotADatabase {
                path: path.clone(),
                reason: "a non-empty directory without sled's `conf` file".into(),
            };
            return TuningDbState::Unusable {
                path,
                explicit,
                error,
            };
        }
        match TuningDb::open(&path) {
            Ok(db) => TuningDbState::Open { db, explicit },
            Err(error) => TuningDbState::Unusable {
                path,
                explicit,
                error,
            },
        }
    }
}

/// No database yet: nothing at the path, or an empty directory (sled would fill it in).
fn is_absent(path: &Path) -> bool {
    match std::fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_none(),
        Err(_) => !path.exists(),
    }
}

/// What the database holds for one device, as the JSON report's `tuning` field.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TuningCounts {
    pub db: PathBuf,
    pub compiler_version: String,
    /// Workloads with a successful trial on this device, driver version and compiler version:
    /// the ones `rocky prefill` runs with a tuned schedule.
    pub tuned_workloads: usize,
    /// Workloads of this device, driver and compiler version whose every trial failed.
    pub failed_workloads: usize,
    /// All trials (failed ones included) of this device, driver and compiler version.
    pub trials: usize,
    /// Records with a successful trial of the same GPU under another driver version (this
    /// compiler version): a new driver can change the fastest schedule, so they are not used.
    pub other_driver_records: usize,
    pub other_driver_versions: Vec<String>,
    /// Records of this GPU (any driver version) from another compiler version: stale, the
    /// schedules mean something else now.
    pub stale_records: usize,
    pub stale_compiler_versions: Vec<String>,
    /// Records of other devices (not counted above).
    pub other_device_records: usize,
}

/// Counts `device`'s records in `db` for `compiler_version`.
pub fn count(
    db: &TuningDb,
    device: &DeviceFingerprint,
    compiler_version: &str,
) -> Result<TuningCounts, DbError> {
    let mut c = TuningCounts {
        db: db.path().to_path_buf(),
        compiler_version: compiler_version.to_string(),
        ..TuningCounts::default()
    };
    let mut driver_versions = BTreeSet::new();
    let mut compiler_versions = BTreeSet::new();
    for key in db.all_keys()? {
        let RecordKey {
            device: ref d,
            compiler_version: ref v,
            ..
        } = key;
        if !d.same_gpu(device) {
            c.other_device_records += 1;
            continue;
        }
        let current = v == compiler_version;
        if !current {
            c.stale_records += 1;
            compiler_versions.insert(v.clone());
            continue;
        }
        let trials = db.trials(&key)?;
        let any_ok = trials.iter().any(|t| t.is_ok());
        if d != device {
            if any_ok {
                c.other_driver_records += 1;
                driver_versions.insert(d.driver_version.clone());
            }
            continue;
        }
        c.trials += trials.len();
        if any_ok {
            c.tuned_workloads += 1;
        } else {
            c.failed_workloads += 1;
        }
    }
    c.other_driver_versions = driver_versions.into_iter().collect();
    c.stale_compiler_versions = compiler_versions.into_iter().collect();
    Ok(c)
}

/// The check of `device` against the database `state`.
pub fn check(device: &DeviceInfo, state: &TuningDbState) -> CheckResult {
    let id = format!("tuning-{}", device.index);
    let tune = |path: &Path, explicit: bool| {
        // `--db` is only needed when the doctor was pointed at a database the tuner would not
        // find by itself.
        let db = if explicit {
            format!(" --db {}", path.display())
        } else {
            String::new()
        };
        format!("rocky tune MODEL.gguf --device {}{db}", device.index)
    };
    match state {
        TuningDbState::NoLocation => CheckResult::new(
            id,
            Status::Info,
            "not tuned: no tuning database location (none of ROCKY_DB, XDG_DATA_HOME, HOME is set)",
        )
        .with_fix(format!(
            "set ROCKY_DB=PATH, then run `rocky tune MODEL.gguf --device {}`",
            device.index
        )),
        TuningDbState::Absent { path, explicit } => CheckResult::new(
            id,
            Status::Info,
            format!(
                "not tuned: no tuning database at {} (prefill uses default schedules)",
                path.display()
            ),
        )
        .with_fix(format!("run `{}`", tune(path, *explicit))),
        TuningDbState::Unusable {
            path,
            explicit,
            error,
        } => unusable(id, path, error, &tune(path, *explicit)),
        TuningDbState::Open { db, explicit } => {
            let version = rocky_compiler::compiler_version();
            match count(db, &rocky_tuner::fingerprint(device), &version) {
                Ok(c) => {
                    let tune = tune(db.path(), *explicit);
                    let mut result = counted(id, &c, &tune);
                    result.tuning = Some(c);
                    result
                }
                Err(e) => unusable(id, db.path(), &e, &tune(db.path(), *explicit)),
            }
        }
    }
}

/// A database that is there but cannot be read.
fn unusable(id: String, path: &Path, error: &DbError, tune: &str) -> CheckResult {
    let shown = path.display();
    match error {
        DbError::Locked { .. } => CheckResult::new(
            id,
            Status::Warn,
            format!(
                "the tuning database at {shown} is locked by another process (a running `rocky tune` or `rocky prefill`?): its state is unknown"
            ),
        )
        .with_fix("run `rocky doctor` again when that process has finished"),
        DbError::NotWritable { .. } | DbError::Io { .. } => CheckResult::new(
            id,
            Status::Warn,
            format!(
                "cannot open the tuning database at {shown}: {}",
                one_line(&error.to_string())
            ),
        )
        .with_fix(format!(
            "fix the permissions of {shown}, or point ROCKY_DB (or --db) at a writable location"
        )),
        _ => CheckResult::new(
            id,
            Status::Warn,
            format!(
                "the tuning database at {shown} cannot be read, so `rocky prefill` and `rocky tune` refuse it: {}",
                one_line(&error.to_string())
            ),
        )
        .with_fix(format!(
            "move {shown} aside, then run `{tune}` (or `rocky db import` an export)"
        )),
    }
}

/// The line for a database that was read.
fn counted(id: String, c: &TuningCounts, tune: &str) -> CheckResult {
    let db = c.db.display();
    let mut unused: Vec<String> = Vec::new();
    if c.other_driver_records > 0 {
        unused.push(format!(
            "{} record(s) from driver version {} (not used: a new driver can change the fastest schedule)",
            c.other_driver_records,
            c.other_driver_versions.join(", ")
        ));
    }
    if c.stale_records > 0 {
        unused.push(format!(
            "{} stale record(s) from compiler version {}",
            c.stale_records,
            c.stale_compiler_versions.join(", ")
        ));
    }
    if c.failed_workloads > 0 {
        unused.push(format!(
            "{} workload(s) where every trial failed",
            c.failed_workloads
        ));
    }
    let also = if unused.is_empty() {
        String::new()
    } else {
        format!("; {}", unused.join("; "))
    };
    if c.tuned_workloads > 0 {
        let result = CheckResult::new(
            id,
            Status::Pass,
            format!(
                "{} workload(s) tuned ({} trials) for compiler {} in {db}{also}",
                c.tuned_workloads, c.trials, c.compiler_version
            ),
        );
        // Tuned, but a previous tuning of other shapes no longer applies: say how to redo it.
        return if c.stale_records > 0 || c.other_driver_records > 0 {
            result.with_fix(format!(
                "to replace the records of another driver or compiler version, run `{tune}` for their models"
            ))
        } else {
            result
        };
    }
    if unused.is_empty() {
        let others = if c.other_device_records > 0 {
            format!(" ({} record(s) of other devices)", c.other_device_records)
        } else {
            String::new()
        };
        return CheckResult::new(
            id,
            Status::Info,
            format!(
                "not tuned: {db} has no records for this device{others} (prefill uses default schedules)"
            ),
        )
        .with_fix(format!("run `{tune}`"));
    }
    // Tuning was done once, but none of it applies now: the user likely expects tuned speed.
    CheckResult::new(
        id,
        Status::Warn,
        format!(
            "not tuned for this driver and compiler {} (prefill uses default schedules){also}",
            c.compiler_version
        ),
    )
    .with_fix(format!("re-tune: run `{tune}`"))
}

/// Multi-line errors on one report line.
fn one_line(s: &str) -> String {
    s.lines().collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::Workload;
    use rocky_tuning_db::{Trial, TrialStatus};

    fn device(driver_version: &str) -> DeviceFingerprint {
        DeviceFingerprint {
            vendor_id: 0x13b5,
            device_id: 0xa867,
            driver_id: "MESA_PANVK".into(),
            driver_name: "panvk".into(),
            driver_version: driver_version.into(),
            device_name: "Mali-G610 MC4 (panvk)".into(),
        }
    }

    fn workload(n: u32) -> Workload {
        serde_json::from_value(serde_json::json!({
            "gemm": {"m": 8, "n": n, "k": 256, "act": "f32", "weight": "q4_k", "bias": false}
        }))
        .expect("a GEMM workload")
    }

    fn trial(w: &Workload, ok: bool) -> Trial {
        let caps = rocky_compiler::DeviceCaps::desktop_all_features();
        Trial {
            schedule: rocky_compiler::default_schedule(w, &caps),
            status: if ok {
                TrialStatus::Ok
            } else {
                TrialStatus::Failed {
                    kind: rocky_tuning_db::FailureKind::PipelineCreation,
                    message: "test".into(),
                }
            },
            median_s: if ok { 1e-3 } else { 0.0 },
            min_s: if ok { 1e-3 } else { 0.0 },
            max_s: if ok { 1e-3 } else { 0.0 },
            gflops: 0.0,
            date: 0,
            host: "test".into(),
            driver_stats: None,
        }
    }

    struct TempDb(PathBuf);
    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_db(name: &str) -> (TempDb, TuningDb) {
        let dir =
            std::env::temp_dir().join(format!("rocky-doctor-tuning-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = TuningDb::open(&dir).unwrap();
        (TempDb(dir), db)
    }

    fn add(db: &TuningDb, d: &DeviceFingerprint, version: &str, w: Workload, ok: &[bool]) {
        let key = RecordKey {
            device: d.clone(),
            compiler_version: version.into(),
            workload: w,
        };
        for &o in ok {
            db.add_trial(&key, &trial(&w, o)).unwrap();
        }
    }

    #[test]
    fn counts_split_exact_other_driver_stale_and_other_devices() {
        let (_dir, db) = temp_db("counts");
        let here = device("25.0.1");
        let old_driver = device("24.2.0");
        let mut other_gpu = device("25.0.1");
        other_gpu.device_id = 1;
        // Two tuned workloads (3 trials, one failed), one where every trial failed.
        add(&db, &here, "v2", workload(256), &[true, false]);
        add(&db, &here, "v2", workload(512), &[true]);
        add(&db, &here, "v2", workload(768), &[false]);
        // Seeds only, one of them without a successful trial (not counted).
        add(&db, &old_driver, "v2", workload(256), &[true]);
        add(&db, &old_driver, "v2", workload(1024), &[false]);
        // Stale: this GPU, any driver, another compiler version.
        add(&db, &here, "v1", workload(256), &[true]);
        add(&db, &old_driver, "v0", workload(256), &[true]);
        add(&db, &other_gpu, "v2", workload(256), &[true]);

        let c = count(&db, &here, "v2").unwrap();
        assert_eq!(
            (c.tuned_workloads, c.trials, c.failed_workloads),
            (2, 4, 1),
            "{c:?}"
        );
        assert_eq!(c.other_driver_records, 1);
        assert_eq!(c.other_driver_versions, ["24.2.0"]);
        assert_eq!(c.stale_records, 2);
        assert_eq!(c.stale_compiler_versions, ["v0", "v1"]);
        assert_eq!(c.other_device_records, 1);
    }

    fn counts(tuned: usize, other_driver: usize, stale: usize) -> TuningCounts {
        TuningCounts {
            db: "/db".into(),
            compiler_version: "v2".into(),
            tuned_workloads: tuned,
            trials: tuned * 4,
            other_driver_records: other_driver,
            other_driver_versions: vec!["24.2.0".into(); other_driver.min(1)],
            stale_records: stale,
            stale_compiler_versions: vec!["v1".into(); stale.min(1)],
            ..TuningCounts::default()
        }
    }

    #[test]
    fn tuned_passes_and_names_the_counts() {
        let c = counted("tuning-0".into(), &counts(3, 0, 0), "rocky tune X");
        assert_eq!(c.status, Status::Pass);
        assert!(c
            .detail
            .starts_with("3 workload(s) tuned (12 trials) for compiler v2 in /db"));
        assert_eq!(c.fix, None);
    }

    #[test]
    fn only_stale_or_other_driver_records_warn_to_retune() {
        for c in [counts(0, 2, 0), counts(0, 0, 1)] {
            let r = counted("tuning-0".into(), &c, "rocky tune X");
            assert_eq!(r.status, Status::Warn, "{r:?}");
            assert_eq!(r.fix.as_deref(), Some("re-tune: run `rocky tune X`"));
        }
        let r = counted("tuning-0".into(), &counts(0, 2, 0), "rocky tune X");
        assert!(r.detail.contains("2 record(s) from driver version 24.2.0"));
        let r = counted("tuning-0".into(), &counts(0, 0, 1), "rocky tune X");
        assert!(r
            .detail
            .contains("1 stale record(s) from compiler version v1"));
    }

    #[test]
    fn nothing_for_this_device_is_info_with_the_tune_command() {
        let mut c = counts(0, 0, 0);
        c.other_device_records = 5;
        let r = counted("tuning-1".into(), &c, "rocky tune X");
        assert_eq!(r.status, Status::Info);
        assert!(
            r.detail.contains("not tuned") && r.detail.contains("5 record(s) of other devices")
        );
        assert_eq!(r.fix.as_deref(), Some("run `rocky tune X`"));
    }

    #[test]
    fn empty_directory_and_missing_path_are_absent_and_left_alone() {
        let dir = std::env::temp_dir().join(format!("rocky-doctor-absent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(
            TuningDbState::open(Some(dir.clone()), false),
            TuningDbState::Absent { .. }
        ));
        assert!(!dir.exists(), "the doctor created a database");
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(
            TuningDbState::open(Some(dir.clone()), false),
            TuningDbState::Absent { .. }
        ));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_without_sled_conf_is_unusable_and_left_untouched() {
        let dir = std::env::temp_dir().join(format!("rocky-doctor-noconf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let garbage: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        std::fs::write(dir.join("db"), &garbage).unwrap();
        let state = TuningDbState::open(Some(dir.clone()), true);
        assert!(
            matches!(
                &state,
                TuningDbState::Unusable {
                    error: DbError::NotADatabase { .. },
                    ..
                }
            ),
            "a directory with only a garbage `db` file was opened"
        );
        assert_eq!(std::fs::read(dir.join("db")).unwrap(), garbage);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
