//! Schedules for the executor from the tuning database: the best measured schedule on this
//! exact device, driver and compiler version, else the compiler's default.

use crate::fingerprint::fingerprint;
use rocky_compiler::{compiler_version, default_schedule, DeviceCaps, Schedule, Workload};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};
use rocky_runtime::DeviceInfo;
use rocky_tuning_db::{DbError, DeviceFingerprint, GraphChoice, Lookup, TuningDb};
use std::collections::HashMap;
use std::path::Path;

/// The best schedule per workload, read once from the database (the executor asks per node,
/// and a database error must surface before the prefill, not as a silent default).
pub struct DbSchedules {
    best: HashMap<Workload, Schedule>,
    /// The graph-level choice (ubatch, dispatches per command buffer) for the model, when
    /// loaded with [`DbSchedules::open_for_model`] and one was tuned.
    graph: Option<GraphChoice>,
}

/// The database key of a model's graph-level choice: the model shape and the compiler version
/// (the choice was timed with this compiler's kernels).
pub fn graph_choice_key(model_shape_key: &str) -> String {
    format!("{model_shape_key}@{}", compiler_version())
}

impl DbSchedules {
    /// Reads the exact-match best schedules of `device` for the current compiler version.
    /// Records of another driver version are ignored (they may seed a search, not be used).
    pub fn load(db: &TuningDb, device: &DeviceFingerprint) -> Result<DbSchedules, DbError> {
        let version = compiler_version();
        let mut best = HashMap::new();
        for key in db.keys_for_device(device)? {
            if key.compiler_version != version {
                continue;
            }
            if let Lookup::Exact(t) = db.lookup_for_device(device, &version, &key.workload)? {
                best.insert(key.workload, t.schedule);
            }
        }
        Ok(DbSchedules { best, graph: None })
    }

    /// Opens the database at `path` only if it exists (no database: defaults everywhere, and
    /// nothing is created); then loads this device's records and the graph-level choice stored
    /// for `model_shape_key` (see `graph::model_shape_key`).
    pub fn open_for_model(
        path: &Path,
        info: &DeviceInfo,
        model_shape_key: &str,
    ) -> Result<DbSchedules, DbError> {
        if !path.exists() {
            return Ok(DbSchedules::empty());
        }
        let db = TuningDb::open(path)?;
        let device = fingerprint(info);
        let mut out = DbSchedules::load(&db, &device)?;
        out.graph = db.graph_choice(&device, &graph_choice_key(model_shape_key))?;
        Ok(out)
    }

    pub fn graph_choice(&self) -> Option<&GraphChoice> {
        self.graph.as_ref()
    }

    /// No tuned schedules.
    pub fn empty() -> DbSchedules {
        DbSchedules {
            best: HashMap::new(),
            graph: None,
        }
    }

    /// Workloads with a tuned schedule.
    pub fn len(&self) -> usize {
        self.best.len()
    }

    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }
}

impl ScheduleSource for DbSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        match self.best.get(workload) {
            // Only a schedule for this workload's template: a stray record must not crash.
            Some(s) if s.kind() == workload.kind() => (*s, ScheduleOrigin::Tuned),
            _ => (default_schedule(workload, caps), ScheduleOrigin::Default),
        }
    }
}
