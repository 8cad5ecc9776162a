//! Where a session's schedules come from, as one [`ScheduleSource`]: the tuning database's
//! (or a caller's own source instead), then every GEMM staged in shared memory where asked,
//! then one math family forced where asked, in that order (as the CLI always layered them),
//! and last, for A/B measurements, fields patched into every GEMV schedule from
//! `ROCKY_GEMV_SCHEDULE` ([`GemvPatch`]).

use crate::staging::ForcedSharedMemory;
use rocky_compiler::templates::gemv::GemvSchedule;
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_runtime::executor::{ForcedMath, MathFamily, ScheduleOrigin, ScheduleSource};
use rocky_tuner::DbSchedules;

pub(crate) struct SessionSchedules {
    /// Tuned schedules of this device from the database, defaults for the rest.
    pub db: DbSchedules,
    /// A caller's source in place of the database's ([`crate::Session::set_schedule_source`]).
    pub custom: Option<Box<dyn ScheduleSource>>,
    pub force_shared_memory: bool,
    pub math: Option<MathFamily>,
}

impl ScheduleSource for SessionSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        let base: &dyn ScheduleSource = match &self.custom {
            Some(custom) => custom.as_ref(),
            None => &self.db,
        };
        let staged = ForcedSharedMemory {
            inner: base,
            on: self.force_shared_memory,
        };
        let (schedule, origin) = ForcedMath {
            inner: &staged,
            family: self.math,
        }
        .schedule(workload, caps);
        match (GemvPatch::from_env(), workload, schedule) {
            (Some(patch), Workload::Gemv(w), Schedule::Gemv(s)) => match patch.apply(&s) {
                Ok(p) if p.validate(w, caps).is_ok() => (Schedule::Gemv(p), origin),
                _ => (schedule, origin),
            },
            _ => (schedule, origin),
        }
    }
}

/// The environment variable holding a [`GemvPatch`].
pub const GEMV_PATCH_ENV: &str = "ROCKY_GEMV_SCHEDULE";

/// Fields of a GEMV schedule set on every GEMV a session runs, e.g.
/// `ROCKY_GEMV_SCHEDULE='{"quad_loads":true,"threads":128}'`: to compare schedule options
/// across a whole decode step on a device, where timing one GEMV at a time misleads (an
/// H100's clocks fall between a sweep's rows: 2026-12-06d). A patched schedule that the
/// workload or device refuses is not used (that GEMV keeps its own). Not a tuning result:
/// nothing is stored.
#[derive(Clone, Debug)]
pub(crate) struct GemvPatch {
    fields: serde_json::Map<String, serde_json::Value>,
}

impl GemvPatch {
    /// The patch in the environment, read once; a malformed one is reported once on stderr
    /// and ignored.
    fn from_env() -> Option<&'static GemvPatch> {
        static PATCH: std::sync::OnceLock<Option<GemvPatch>> = std::sync::OnceLock::new();
        PATCH
            .get_or_init(|| {
                let text = std::env::var(GEMV_PATCH_ENV)
                    .ok()
                    .filter(|t| !t.is_empty())?;
                match GemvPatch::parse(&text) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        eprintln!("warning: {GEMV_PATCH_ENV} ignored: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    pub(crate) fn parse(text: &str) -> Result<GemvPatch, String> {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(fields)) => {
                // Every field must be one a schedule has: apply it to a schedule to find out.
                let patch = GemvPatch { fields };
                let base = GemvSchedule {
                    threads: 64,
                    cols: 1,
                    chunks_per_thread: 8,
                    units_per_thread: 1,
                    vector_width: 1,
                    reduce: rocky_compiler::templates::gemv::Reduce::Shared,
                    accumulate: rocky_compiler::templates::gemm::Precision::F32,
                    math: rocky_compiler::templates::gemm::Math::FmaF32,
                    dot_first: false,
                    quad_loads: false,
                };
                patch
                    .apply(&base)
                    .map_err(|e| format!("not GEMV schedule fields: {e}"))?;
                Ok(patch)
            }
            Ok(_) => Err("expected a JSON object of GEMV schedule fields".into()),
            Err(e) => Err(format!("not JSON: {e}")),
        }
    }

    /// `s` with the patch's fields, or why they do not make a schedule.
    pub(crate) fn apply(&self, s: &GemvSchedule) -> Result<GemvSchedule, serde_json::Error> {
        let mut value = serde_json::to_value(s)?;
        if let serde_json::Value::Object(map) = &mut value {
            for (k, v) in &self.fields {
                map.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::templates::gemm::Math;

    #[test]
    fn a_patch_sets_only_its_fields() {
        let patch = GemvPatch::parse(r#"{"quad_loads":true,"threads":128}"#).unwrap();
        let base = GemvSchedule {
            threads: 64,
            cols: 4,
            chunks_per_thread: 8,
            units_per_thread: 2,
            vector_width: 4,
            reduce: rocky_compiler::templates::gemv::Reduce::Subgroup,
            accumulate: rocky_compiler::templates::gemm::Precision::F32,
            math: Math::FmaF32,
            dot_first: false,
            quad_loads: false,
        };
        let patched = patch.apply(&base).unwrap();
        assert_eq!(
            patched,
            GemvSchedule {
                threads: 128,
                quad_loads: true,
                ..base
            }
        );
    }

    #[test]
    fn a_bad_patch_is_refused_with_the_reason() {
        assert!(GemvPatch::parse("[1]").unwrap_err().contains("JSON object"));
        assert!(GemvPatch::parse(r#"{"threadz":1}"#)
            .unwrap_err()
            .contains("not GEMV schedule fields"));
        assert!(GemvPatch::parse(r#"{"math":"fma_f99"}"#).is_err());
        assert!(GemvPatch::parse("{").unwrap_err().contains("not JSON"));
    }
}
