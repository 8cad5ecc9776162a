//! Schedules for the executor from the tuning database: the best measured schedule on this
//! exact device, driver and compiler version, else the compiler's default.

use crate::fingerprint::fingerprint;
use rocky_compiler::{
    compiler_version, default_schedule, AttentionWorkload, DeviceCaps, GemmWorkload, Schedule,
    Workload,
};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};
use rocky_runtime::DeviceInfo;
use rocky_tuning_db::{DbError, DeviceFingerprint, GraphChoice, Lookup, TuningDb};
use std::collections::HashMap;
use std::path::Path;

/// The best schedule per workload, read once from the database (the executor asks per node,
/// and a database error must surface before the prefill, not as a silent default).
pub struct DbSchedules {
    best: HashMap<Workload, Schedule>,
    /// The graph-level choice (ubatch, dispatches per command buffer, fusion) for the model,
    /// when loaded with [`DbSchedules::open_for_model`] and one was tuned.
    graph: Option<GraphChoice>,
    /// The fastest setting timed at each ubatch (see [`ubatch_choice_key`]): what a run at a
    /// ubatch given by flag uses.
    per_ubatch: HashMap<u32, GraphChoice>,
}

/// The database key of a model's graph-level choice: the model shape and the compiler version
/// (the choice was timed with this compiler's kernels).
pub fn graph_choice_key(model_shape_key: &str) -> String {
    format!("{model_shape_key}@{}", compiler_version())
}

/// The database key of the fastest setting timed at `ubatch` for a model: its fusion and
/// dispatches per command buffer differ by ubatch (on the H200 gate and up fused won at
/// ubatch 512 and lost at 64), so a run at another ubatch than the chosen one reads its own.
pub fn ubatch_choice_key(model_shape_key: &str, ubatch: u32) -> String {
    format!("{}#ubatch={ubatch}", graph_choice_key(model_shape_key))
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
        Ok(DbSchedules {
            best,
            graph: None,
            per_ubatch: HashMap::new(),
        })
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
        let main = graph_choice_key(model_shape_key);
        let per_ubatch_prefix = format!("{main}#ubatch=");
        for stored in db.graph_choices(Some(&device))? {
            if stored.model_shape_key == main {
                out.graph = Some(stored.choice);
            } else if let Some(u) = stored.model_shape_key.strip_prefix(&per_ubatch_prefix) {
                if let Ok(u) = u.parse::<u32>() {
                    out.per_ubatch.insert(u, stored.choice);
                }
            }
        }
        Ok(out)
    }

    /// The model's graph-level choice (its ubatch is what a run without `--ubatch` uses).
    pub fn graph_choice(&self) -> Option<&GraphChoice> {
        self.graph.as_ref()
    }

    /// The settings for a run at `ubatch` (`None`: at the chosen ubatch): the fastest timed at
    /// that ubatch, else the model's choice.
    pub fn graph_choice_for(&self, ubatch: Option<usize>) -> Option<&GraphChoice> {
        ubatch
            .and_then(|u| self.per_ubatch.get(&(u as u32)))
            .or(self.graph.as_ref())
    }

    /// The tuned GEMM schedules, each with the exact workload it was tuned for (epilogue and
    /// layout included), in a stable order: for benchmarks that time them one by one.
    pub fn gemm_schedules(&self) -> Vec<(GemmWorkload, rocky_compiler::GemmSchedule)> {
        let mut out: Vec<_> = self
            .best
            .iter()
            .filter_map(|(w, s)| match (w, s) {
                (Workload::Gemm(w), Schedule::Gemm(s)) => Some((*w, *s)),
                _ => None,
            })
            .collect();
        out.sort_by_key(|(w, _)| format!("{w:?}"));
        out
    }

    /// No tuned schedules.
    pub fn empty() -> DbSchedules {
        DbSchedules {
            best: HashMap::new(),
            graph: None,
            per_ubatch: HashMap::new(),
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

impl DbSchedules {
    /// For an attention workload without its own record: the tuned schedule of the same
    /// shape (m, heads, head_dim) at the nearest KV length (`rocky tune` tunes a few KV
    /// buckets; the kernel is correct at every KV length, and a schedule's fit depends on
    /// m and the heads far more than on the keys walked), if it is valid here.
    fn nearest_attention(&self, workload: &Workload, caps: &DeviceCaps) -> Option<Schedule> {
        let Workload::Attention(w) = workload else {
            return None;
        };
        let distance = |kv: u32| {
            (f64::from(kv.max(1)) / f64::from(w.max_kv.max(1)))
                .log2()
                .abs()
        };
        self.best
            .iter()
            .filter_map(|(k, s)| match (k, s) {
                (Workload::Attention(o), Schedule::Attention(a))
                    if AttentionWorkload {
                        max_kv: w.max_kv,
                        ..*o
                    } == *w
                        && a.validate(w, caps).is_ok() =>
                {
                    Some((distance(o.max_kv), o.max_kv, *s))
                }
                _ => None,
            })
            // Nearest first; at equal distance the longer KV (the costlier ubatches).
            .min_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, _, s)| s)
    }
}

impl ScheduleSource for DbSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        match self.best.get(workload) {
            // Only a schedule for this workload's template: a stray record must not crash.
            Some(s) if s.kind() == workload.kind() => (*s, ScheduleOrigin::Tuned),
            _ => match nearby_gemm_schedule(&self.best, workload, caps)
                .or_else(|| self.nearest_attention(workload, caps))
            {
                Some(s) => (s, ScheduleOrigin::Tuned),
                None => (default_schedule(workload, caps), ScheduleOrigin::Default),
            },
        }
    }
}

/// The schedule tuned for the same GEMM at a slightly larger row count, for a GEMM whose own
/// row count was not tuned: the partial last ubatch of a prompt (a 5000-token prompt at
/// ubatch 512 ends with 392 rows). Only a tuned `m` in `[m, 2m)` counts (the smallest one):
/// a tile that fits 512 rows well fits 392, but a schedule tuned for 512 rows can be far
/// from the best at 64 (too few workgroups), where the defaults split K instead. The
/// schedule must still validate for this workload on this device.
fn nearby_gemm_schedule(
    best: &HashMap<Workload, Schedule>,
    workload: &Workload,
    caps: &DeviceCaps,
) -> Option<Schedule> {
    let Workload::Gemm(w) = workload else {
        return None;
    };
    let upper = w.m.saturating_mul(2);
    best.iter()
        .filter_map(|(tuned, s)| match (tuned, s) {
            (Workload::Gemm(t), Schedule::Gemm(g))
                if t.m >= w.m
                    && t.m < upper
                    && GemmWorkload { m: t.m, ..*w } == *t
                    && g.validate(w, caps).is_ok() =>
            {
                Some((t.m, *s))
            }
            _ => None,
        })
        .min_by_key(|(m, _)| *m)
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::{ActType, WeightFormat};

    fn gemm(m: u32) -> GemmWorkload {
        GemmWorkload {
            m,
            n: 2048,
            k: 2048,
            act: ActType::F32,
            weight: WeightFormat::Q4K,
            layout: Default::default(),
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        }
    }

    /// A schedule of the space that is not this workload's default, so a test can tell the
    /// two apart.
    fn tuned_schedule(w: &GemmWorkload, caps: &DeviceCaps) -> Schedule {
        let default = default_schedule(&Workload::Gemm(*w), caps);
        rocky_compiler::search_space(&Workload::Gemm(*w), caps)
            .into_iter()
            .find(|s| *s != default)
            .expect("the space holds more than the default")
    }

    #[test]
    fn a_partial_ubatch_uses_the_schedule_tuned_for_the_full_one() {
        let caps = DeviceCaps::desktop_all_features();
        let s512 = tuned_schedule(&gemm(512), &caps);
        let best = HashMap::from([(Workload::Gemm(gemm(512)), s512)]);
        let source = DbSchedules {
            best,
            graph: None,
            per_ubatch: HashMap::new(),
        };
        // 392 rows: the last ubatch of a 5000-token prompt at ubatch 512.
        let (s, origin) = source.schedule(&Workload::Gemm(gemm(392)), &caps);
        assert_eq!((s, origin), (s512, ScheduleOrigin::Tuned));
        // 256 rows is half of 512: too far, the default.
        let w256 = Workload::Gemm(gemm(256));
        let (s, origin) = source.schedule(&w256, &caps);
        assert_eq!(origin, ScheduleOrigin::Default);
        assert_eq!(s, default_schedule(&w256, &caps));
        // Larger than anything tuned: the default.
        let (_, origin) = source.schedule(&Workload::Gemm(gemm(600)), &caps);
        assert_eq!(origin, ScheduleOrigin::Default);
    }

    #[test]
    fn only_the_same_gemm_at_another_row_count_counts() {
        let caps = DeviceCaps::desktop_all_features();
        let other = GemmWorkload {
            bias: true,
            ..gemm(512)
        };
        let best = HashMap::from([(Workload::Gemm(other), tuned_schedule(&other, &caps))]);
        let source = DbSchedules {
            best,
            graph: None,
            per_ubatch: HashMap::new(),
        };
        let (_, origin) = source.schedule(&Workload::Gemm(gemm(400)), &caps);
        assert_eq!(origin, ScheduleOrigin::Default);
    }

    #[test]
    fn the_smallest_larger_tuned_row_count_wins() {
        let caps = DeviceCaps::desktop_all_features();
        let s300 = tuned_schedule(&gemm(300), &caps);
        let space = rocky_compiler::search_space(&Workload::Gemm(gemm(400)), &caps);
        let s400 = *space.iter().rev().find(|s| **s != s300).unwrap();
        let best = HashMap::from([
            (Workload::Gemm(gemm(400)), s400),
            (Workload::Gemm(gemm(300)), s300),
        ]);
        let source = DbSchedules {
            best,
            graph: None,
            per_ubatch: HashMap::new(),
        };
        let (s, _) = source.schedule(&Workload::Gemm(gemm(250)), &caps);
        assert_eq!(s, s300);
    }
}
