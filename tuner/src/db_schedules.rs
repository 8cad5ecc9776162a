//! Schedules for the executor from the tuning database: the best measured schedule on this
//! exact device, driver and compiler version, else the compiler's default.
//!
//! What was measured at one ubatch applies only to runs in its ubatch class ([`ubatch_class`]):
//! graph settings and GEMM schedules that win at 512 rows can lose at 64 (on an H100 the
//! settings `rocky tune --ubatch 512` chose ran a ubatch-64 prefill at 0.77x the default), so a
//! run outside the class of anything measured runs the defaults.

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

/// The class of a ubatch (or of a GEMM's row count): the power of two at or above it, so a
/// class holds the ubatches `(c/2, c]`. A run's partial last ubatch (392 rows of a 5000-token
/// prompt at 512) stays in its run's class when the run's ubatch is a power of two.
pub fn ubatch_class(ubatch: u32) -> u32 {
    ubatch
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(u32::MAX)
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
        DbSchedules::load_for_model(&db, &fingerprint(info), model_shape_key)
    }

    /// [`DbSchedules::open_for_model`] on an open database and a device fingerprint.
    pub fn load_for_model(
        db: &TuningDb,
        device: &DeviceFingerprint,
        model_shape_key: &str,
    ) -> Result<DbSchedules, DbError> {
        let mut out = DbSchedules::load(db, device)?;
        let main = graph_choice_key(model_shape_key);
        let per_ubatch_prefix = format!("{main}#ubatch=");
        for stored in db.graph_choices(Some(device))? {
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

    /// The settings for a run at `ubatch` (`None`: at the chosen ubatch, the model's choice).
    /// At a given ubatch only settings measured in its class ([`ubatch_class`]) and at least as
    /// fast as the default settings there in the tuner's own comparison: the fastest timed at
    /// that ubatch, else at the nearest one of the class (the larger at equal distance), else
    /// the model's choice where its ubatch is of the class and it did not lose to the default.
    /// Settings stored without that comparison (by a tuner before it was kept) are not used at
    /// a given ubatch ([`DbSchedules::graph_choice_note`] says so).
    pub fn graph_choice_for(&self, ubatch: Option<usize>) -> Option<&GraphChoice> {
        let Some(u) = ubatch else {
            return self.graph.as_ref();
        };
        let u = u32::try_from(u).unwrap_or(u32::MAX);
        let class = ubatch_class(u);
        self.per_ubatch
            .iter()
            .filter(|(&at, c)| ubatch_class(at) == class && c.beat_default() == Some(true))
            .min_by_key(|(&at, _)| (at.abs_diff(u), std::cmp::Reverse(at)))
            .map(|(_, c)| c)
            .or(self
                .graph
                .as_ref()
                .filter(|g| ubatch_class(g.ubatch) == class && g.beat_default() != Some(false)))
    }

    /// Why tuned graph settings stored for this model are not used at `ubatch`, where some
    /// are stored but none applies (`None` otherwise): a line for the user.
    pub fn graph_choice_note(&self, ubatch: Option<usize>) -> Option<String> {
        let u = ubatch?;
        if self.graph_choice_for(ubatch).is_some() {
            return None;
        }
        let class = ubatch_class(u32::try_from(u).unwrap_or(u32::MAX));
        let mut measured: Vec<u32> = self.per_ubatch.keys().copied().collect();
        measured.extend(self.graph.as_ref().map(|g| g.ubatch));
        measured.sort_unstable();
        measured.dedup();
        if measured.is_empty() {
            return None;
        }
        let list = measured
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        // What the class holds, if anything: settings that lost to the default, or that were
        // never compared with it.
        let in_class: Vec<&GraphChoice> = self
            .per_ubatch
            .iter()
            .filter(|(&at, _)| ubatch_class(at) == class)
            .map(|(_, c)| c)
            .chain(
                self.graph
                    .iter()
                    .filter(|g| ubatch_class(g.ubatch) == class),
            )
            .collect();
        let range = format!("{}..={class}", class / 2 + 1);
        let why = if in_class.iter().any(|c| c.beat_default() == Some(false)) {
            format!(
                "those of its class ({range}) lost to the default settings in rocky tune's \
                 own comparison"
            )
        } else if !in_class.is_empty() {
            format!(
                "those of its class ({range}) were stored without the default settings' speed \
                 beside them (an older rocky tune)"
            )
        } else {
            format!("none is in its class ({range})")
        };
        Some(format!(
            "graph settings were tuned for this model at ubatch {list}; {why}: ubatch {u} runs \
             the default settings (`rocky tune --ubatch {u}` tunes them)"
        ))
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
/// ubatch 512 ends with 392 rows). Only a tuned `m` at or above `m` in the same ubatch class
/// counts (the smallest one): a tile that fits 512 rows well fits 392, but a schedule tuned
/// for 512 rows can be far from the best at 64 (too few workgroups), where the defaults split
/// K instead. The schedule must still validate for this workload on this device.
fn nearby_gemm_schedule(
    best: &HashMap<Workload, Schedule>,
    workload: &Workload,
    caps: &DeviceCaps,
) -> Option<Schedule> {
    let Workload::Gemm(w) = workload else {
        return None;
    };
    let class = ubatch_class(w.m);
    best.iter()
        .filter_map(|(tuned, s)| match (tuned, s) {
            (Workload::Gemm(t), Schedule::Gemm(g))
                if t.m >= w.m
                    && ubatch_class(t.m) == class
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
        let (s, _) = source.schedule(&Workload::Gemm(gemm(260)), &caps);
        assert_eq!(s, s300);
        // 250 rows are of the class below (129..=256): neither counts.
        let (_, origin) = source.schedule(&Workload::Gemm(gemm(250)), &caps);
        assert_eq!(origin, ScheduleOrigin::Default);
    }

    /// A sled database in a fresh directory, removed when dropped.
    struct ScratchDb {
        dir: std::path::PathBuf,
        db: Option<TuningDb>,
    }

    impl ScratchDb {
        fn new(name: &str) -> ScratchDb {
            let dir = std::env::temp_dir()
                .join(format!("rocky-db-schedules-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let db = Some(TuningDb::open(&dir).unwrap());
            ScratchDb { dir, db }
        }

        fn db(&self) -> &TuningDb {
            self.db.as_ref().unwrap()
        }
    }

    impl Drop for ScratchDb {
        fn drop(&mut self) {
            drop(self.db.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn device() -> DeviceFingerprint {
        DeviceFingerprint {
            vendor_id: 0x10de,
            device_id: 0x2330,
            driver_id: "NVIDIA_PROPRIETARY".into(),
            driver_name: "NVIDIA".into(),
            driver_version: "580.0".into(),
            device_name: "NVIDIA H100".into(),
        }
    }

    const SHAPE: &str = "qwen2:36x2048:ff11008:h16/2:v151936:q4_k+q6_k";

    /// Stores `schedule` as the measured best of `w` on [`device`].
    fn store_gemm(db: &TuningDb, w: GemmWorkload, schedule: Schedule) {
        let key = rocky_tuning_db::RecordKey {
            device: device(),
            compiler_version: compiler_version(),
            workload: Workload::Gemm(w),
        };
        let trial = rocky_tuning_db::Trial {
            schedule,
            status: rocky_tuning_db::TrialStatus::Ok,
            median_s: 1e-4,
            min_s: 1e-4,
            max_s: 1e-4,
            gflops: 1.0,
            date: 0,
            host: "test".into(),
            driver_stats: None,
        };
        db.add_trial(&key, &trial).unwrap();
    }

    /// What `rocky tune --ubatch 512` stored in issue 36: the model's choice (ubatch 1024, 128
    /// dispatches per command buffer, ubatches one at a time), the fastest setting at 512, and
    /// GEMM records at m = 512.
    fn choice(ubatch: u32, tok_s: f64, default_tok_s: Option<f64>) -> GraphChoice {
        GraphChoice {
            ubatch,
            max_dispatches_per_cb: 128,
            budget_bytes: u64::MAX,
            tok_s,
            fuse_swiglu: true,
            overlap: false,
            default_tok_s,
        }
    }

    #[test]
    fn a_database_tuned_at_ubatch_512_gives_the_defaults_at_64() {
        let scratch = ScratchDb::new("tuned-at-512");
        let db = scratch.db();
        let caps = DeviceCaps::desktop_all_features();
        let s512 = tuned_schedule(&gemm(512), &caps);
        store_gemm(db, gemm(512), s512);
        let main = choice(1024, 7415.0, Some(7150.0));
        db.set_graph_choice(&device(), &graph_choice_key(SHAPE), &main)
            .unwrap();
        let at512 = choice(512, 7400.0, Some(7150.0));
        db.set_graph_choice(&device(), &ubatch_choice_key(SHAPE, 512), &at512)
            .unwrap();
        let source = DbSchedules::load_for_model(db, &device(), SHAPE).unwrap();

        // At ubatch 64 (and its partial last ubatch): default settings and schedules.
        assert_eq!(source.graph_choice_for(Some(64)), None);
        let note = source.graph_choice_note(Some(64)).unwrap();
        assert!(
            note.contains("512, 1024") && note.contains("33..=64"),
            "{note}"
        );
        for m in [64, 40] {
            let w = Workload::Gemm(gemm(m));
            assert_eq!(
                source.schedule(&w, &caps),
                (default_schedule(&w, &caps), ScheduleOrigin::Default),
                "m = {m}"
            );
        }
        // At 512 and in its class: what was measured there.
        assert_eq!(source.graph_choice_for(Some(512)), Some(&at512));
        assert_eq!(source.graph_choice_for(Some(400)), Some(&at512));
        assert_eq!(source.graph_choice_note(Some(512)), None);
        for m in [512, 392] {
            assert_eq!(
                source.schedule(&Workload::Gemm(gemm(m)), &caps),
                (s512, ScheduleOrigin::Tuned),
                "m = {m}"
            );
        }
        // Without a ubatch, and in the class of the model's choice: the model's choice.
        assert_eq!(source.graph_choice_for(None), Some(&main));
        assert_eq!(source.graph_choice_for(Some(1024)), Some(&main));
        assert_eq!(source.graph_choice_for(Some(2048)), None);
    }

    #[test]
    fn settings_that_lost_to_the_default_or_never_met_it_are_not_used() {
        let scratch = ScratchDb::new("lost");
        let db = scratch.db();
        // At 64: slower than the default in the tuner's own comparison (an imported line).
        db.set_graph_choice(
            &device(),
            &ubatch_choice_key(SHAPE, 64),
            &choice(64, 4182.0, Some(5421.0)),
        )
        .unwrap();
        // At 128: stored by a tuner that kept no comparison.
        db.set_graph_choice(
            &device(),
            &ubatch_choice_key(SHAPE, 128),
            &choice(128, 6000.0, None),
        )
        .unwrap();
        // The model's choice at 256 lost to the default too.
        let main = choice(256, 5000.0, Some(6000.0));
        db.set_graph_choice(&device(), &graph_choice_key(SHAPE), &main)
            .unwrap();
        let source = DbSchedules::load_for_model(db, &device(), SHAPE).unwrap();
        assert_eq!(source.graph_choice_for(Some(64)), None);
        assert_eq!(source.graph_choice_for(Some(128)), None);
        assert_eq!(source.graph_choice_for(Some(256)), None);
        let note = source.graph_choice_note(Some(128)).unwrap();
        assert!(note.contains("older rocky tune"), "{note}");
        let note = source.graph_choice_note(Some(64)).unwrap();
        assert!(note.contains("lost to the default"), "{note}");
        // A run without --ubatch still takes the model's ubatch (the runs compare it).
        assert_eq!(source.graph_choice_for(None), Some(&main));
        // A database of an older rocky: its model's choice (no comparison) applies in its
        // class.
        let scratch = ScratchDb::new("old");
        let old = choice(512, 7387.0, None);
        scratch
            .db()
            .set_graph_choice(&device(), &graph_choice_key(SHAPE), &old)
            .unwrap();
        let source = DbSchedules::load_for_model(scratch.db(), &device(), SHAPE).unwrap();
        assert_eq!(source.graph_choice_for(Some(300)), Some(&old));
        assert_eq!(source.graph_choice_for(Some(64)), None);
    }

    #[test]
    fn ubatch_classes_are_the_powers_of_two_above() {
        let classes: Vec<u32> = [0, 1, 2, 3, 64, 65, 392, 512, 513, 4096]
            .into_iter()
            .map(ubatch_class)
            .collect();
        assert_eq!(classes, [1, 1, 2, 4, 64, 128, 512, 512, 1024, 4096]);
        assert_eq!(ubatch_class(u32::MAX), u32::MAX);
    }
}
