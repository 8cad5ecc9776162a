//! Where a session's schedules come from, as one [`ScheduleSource`]: the tuning database's
//! (or a caller's own source instead), then every GEMM staged in shared memory where asked,
//! then one math family forced where asked, in that order (as the CLI always layered them),
//! and last, for A/B measurements, fields patched into every GEMV schedule from
//! `ROCKY_GEMV_SCHEDULE` ([`GemvPatches`]).

use crate::staging::ForcedSharedMemory;
use rocky_compiler::templates::gemm::GemmWorkload;
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
        match (GemvPatches::from_env(), workload, schedule) {
            (Some(patches), Workload::Gemv(w), Schedule::Gemv(s)) => {
                match patches.for_workload(w).map(|p| p.apply(&s)) {
                    Some(Ok(p)) if p.validate(w, caps).is_ok() => (Schedule::Gemv(p), origin),
                    _ => (schedule, origin),
                }
            }
            _ => (schedule, origin),
        }
    }
}

/// The environment variable holding [`GemvPatches`].
pub const GEMV_PATCH_ENV: &str = "ROCKY_GEMV_SCHEDULE";

/// Fields of a GEMV schedule set on the GEMVs a session runs, to compare schedule options
/// across whole decode steps on a device, where timing one GEMV at a time misleads (an H100's
/// clocks fall between a sweep's rows: 2026-12-06d). Either one object, set on every GEMV:
/// `ROCKY_GEMV_SCHEDULE='{"quad_loads":true,"threads":128}'`, or a list of them, each with an
/// optional `"when"` object of workload fields it applies to (JSON-equal to the workload's),
/// the first that matches applying:
/// `'[{"when":{"k":11008},"threads":32,"reduce":"one_subgroup"},{"threads":64}]'`.
/// A patched schedule that the workload or device refuses is not used (that GEMV keeps its
/// own). Not a tuning result: nothing is stored.
#[derive(Clone, Debug)]
pub(crate) struct GemvPatches {
    patches: Vec<GemvPatch>,
}

/// One patch of [`GemvPatches`]: the workload fields it applies to and the schedule fields it
/// sets.
#[derive(Clone, Debug)]
pub(crate) struct GemvPatch {
    when: serde_json::Map<String, serde_json::Value>,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl GemvPatches {
    /// The patches in the environment, read once; malformed ones are reported once on stderr
    /// and ignored.
    fn from_env() -> Option<&'static GemvPatches> {
        static PATCHES: std::sync::OnceLock<Option<GemvPatches>> = std::sync::OnceLock::new();
        PATCHES
            .get_or_init(|| {
                let text = std::env::var(GEMV_PATCH_ENV)
                    .ok()
                    .filter(|t| !t.is_empty())?;
                match GemvPatches::parse(&text) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        eprintln!("warning: {GEMV_PATCH_ENV} ignored: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    pub(crate) fn parse(text: &str) -> Result<GemvPatches, String> {
        let items = match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Array(items)) => items,
            Ok(one @ serde_json::Value::Object(_)) => vec![one],
            Ok(_) => return Err("expected a JSON object of GEMV schedule fields, or a list".into()),
            Err(e) => return Err(format!("not JSON: {e}")),
        };
        let patches = items
            .into_iter()
            .map(GemvPatch::from_value)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GemvPatches { patches })
    }

    /// The first patch whose `when` matches `w`.
    pub(crate) fn for_workload(&self, w: &GemmWorkload) -> Option<&GemvPatch> {
        let value = serde_json::to_value(w).ok()?;
        self.patches.iter().find(|p| {
            p.when
                .iter()
                .all(|(k, v)| value.get(k).is_some_and(|have| have == v))
        })
    }
}

impl GemvPatch {
    fn from_value(v: serde_json::Value) -> Result<GemvPatch, String> {
        let serde_json::Value::Object(mut fields) = v else {
            return Err("expected a JSON object of GEMV schedule fields".into());
        };
        let when = match fields.remove("when") {
            None => serde_json::Map::new(),
            Some(serde_json::Value::Object(when)) => when,
            Some(_) => return Err("\"when\" must be an object of workload fields".into()),
        };
        // Every field must be one a schedule has: apply it to a schedule to find out.
        let patch = GemvPatch { when, fields };
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
            column_groups: 1,
            bit_floats: false,
            early_loads: false,
        };
        patch
            .apply(&base)
            .map_err(|e| format!("not GEMV schedule fields: {e}"))?;
        Ok(patch)
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

    fn base() -> GemvSchedule {
        GemvSchedule {
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
            column_groups: 1,
            bit_floats: false,
            early_loads: false,
        }
    }

    fn workload(n: u32, k: u32) -> GemmWorkload {
        serde_json::from_str(&format!(
            r#"{{"m":1,"n":{n},"k":{k},"act":"f32","weight":"q4_k","bias":false}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_patch_sets_only_its_fields() {
        let patches = GemvPatches::parse(r#"{"quad_loads":true,"threads":128}"#).unwrap();
        let patch = patches.for_workload(&workload(2048, 2048)).unwrap();
        assert_eq!(
            patch.apply(&base()).unwrap(),
            GemvSchedule {
                threads: 128,
                quad_loads: true,
                ..base()
            }
        );
    }

    #[test]
    fn the_first_patch_whose_workload_fields_match_applies() {
        let patches = GemvPatches::parse(
            r#"[{"when":{"k":11008},"threads":32},{"when":{"n":151936,"k":2048},"cols":1},{"threads":256}]"#,
        )
        .unwrap();
        let threads = |n, k| {
            patches
                .for_workload(&workload(n, k))
                .map(|p| p.apply(&base()).unwrap())
        };
        assert_eq!(threads(2048, 11008).unwrap().threads, 32);
        assert_eq!(threads(151936, 2048).unwrap().cols, 1);
        assert_eq!(threads(151936, 2048).unwrap().threads, 64);
        assert_eq!(threads(2048, 2048).unwrap().threads, 256);
        let only = GemvPatches::parse(r#"[{"when":{"k":11008},"threads":32}]"#).unwrap();
        assert!(only.for_workload(&workload(2048, 2048)).is_none());
    }

    #[test]
    fn a_bad_patch_is_refused_with_the_reason() {
        assert!(GemvPatches::parse("[1]")
            .unwrap_err()
            .contains("JSON object"));
        assert!(GemvPatches::parse("7").unwrap_err().contains("JSON object"));
        assert!(GemvPatches::parse(r#"{"threadz":1}"#)
            .unwrap_err()
            .contains("not GEMV schedule fields"));
        assert!(GemvPatches::parse(r#"{"when":3,"threads":32}"#)
            .unwrap_err()
            .contains("workload fields"));
        assert!(GemvPatches::parse(r#"{"math":"fma_f99"}"#).is_err());
        assert!(GemvPatches::parse("{").unwrap_err().contains("not JSON"));
    }
}
