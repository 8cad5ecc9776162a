//! TuningDb: trials and best, persistence across reopen, lookups, stats, graph choices and
//! the errors of bad paths.

mod common;

use common::*;
use rocky_tuning_db::{
    paths::resolve_db_path, DbError, FailureKind, GraphChoice, Lookup, RecordKey, TuningDb,
};

#[test]
fn trials_round_trip_and_best_is_the_fastest_ok_trial() {
    let dir = Scratch::new("roundtrip");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let k = key(gpu("24.2.1"), workload(512, 896));
    let medians = [3.0e-4, 1.5e-4, 2.2e-4, 1.7e-4];
    let mut written = Vec::new();
    for (i, m) in medians.iter().enumerate() {
        written.push(ok_trial(i as u32, *m));
    }
    // A failed trial with a zero time must never be taken as the fastest.
    written.push(failed_trial(9, FailureKind::Mismatch));
    for t in &written {
        db.add_trial(&k, t).unwrap();
    }
    assert_eq!(db.trials(&k).unwrap(), written);
    let expected_best = written
        .iter()
        .filter(|t| t.is_ok())
        .min_by(|a, b| a.median_s.total_cmp(&b.median_s))
        .unwrap();
    assert_eq!(db.best(&k).unwrap().as_ref(), Some(expected_best));
    assert!(db.has_trial(&k, &written[2].schedule).unwrap());
    assert!(
        db.has_trial(&k, &schedule(9)).unwrap(),
        "failed trials count as done"
    );
    assert!(!db.has_trial(&k, &schedule(13)).unwrap());

    let other = key(gpu("24.2.1"), workload(512, 4864));
    assert_eq!(db.trials(&other).unwrap(), vec![]);
    assert_eq!(db.best(&other).unwrap(), None);
}

#[test]
fn only_failures_have_no_best() {
    let dir = Scratch::new("failonly");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let k = key(gpu("24.2.1"), workload(8, 64));
    db.add_trial(&k, &failed_trial(0, FailureKind::OutOfMemory))
        .unwrap();
    assert_eq!(db.trials(&k).unwrap().len(), 1);
    assert_eq!(db.best(&k).unwrap(), None);
}

#[test]
fn invalid_trials_are_refused() {
    let dir = Scratch::new("invalid");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let k = key(gpu("1"), workload(8, 64));
    let mut negative = ok_trial(0, 1e-3);
    negative.min_s = -1.0;
    let mut wrong_template = ok_trial(1, 1e-3);
    wrong_template.schedule = rocky_compiler::Schedule::Add(rocky_compiler::EltwiseSchedule {
        threads: 64,
        vector_width: 1,
        vectors_per_thread: 1,
    });
    for bad in [negative, wrong_template] {
        let err = db.add_trial(&k, &bad).unwrap_err();
        assert!(matches!(err, DbError::Invalid { .. }), "{err}");
    }
    assert_eq!(db.trials(&k).unwrap(), vec![]);
}

#[test]
fn trials_survive_drop_and_reopen() {
    let dir = Scratch::new("reopen");
    let path = dir.join("db");
    let k1 = key(gpu("24.2.1"), workload(512, 896));
    let k2 = key(lavapipe(), workload(512, 896));
    let mut expected1 = Vec::new();
    {
        let db = TuningDb::open(&path).unwrap();
        for i in 0..20 {
            let t = ok_trial(i, 1e-4 * f64::from(i + 1));
            db.add_trial(&k1, &t).unwrap();
            expected1.push(t);
        }
        db.add_trial(&k2, &ok_trial(3, 5e-3)).unwrap();
    }
    let db = TuningDb::open(&path).unwrap();
    assert_eq!(db.trials(&k1).unwrap(), expected1);
    assert_eq!(db.best(&k1).unwrap(), Some(expected1[0].clone()));
    assert_eq!(
        db.keys_for_device(&gpu("24.2.1")).unwrap(),
        vec![k1.clone()]
    );
    assert_eq!(db.keys_for_device(&lavapipe()).unwrap(), vec![k2]);
    assert_eq!(
        db.keys_for_device(&gpu("25.0.0")).unwrap(),
        Vec::<RecordKey>::new()
    );
}

#[test]
fn record_keys_encode_canonically_and_decode() {
    let k = key(gpu("24.2.1"), workload(512, 896));
    let bytes = k.encode();
    assert_eq!(RecordKey::decode(&bytes).unwrap(), k);
    // Object keys are sorted, so the encoding starts with the alphabetically first field.
    assert!(
        bytes.starts_with(b"{\"device_id\":"),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    // A driver version that extends another must not make one device a prefix of the other.
    let a = key(gpu("24.2"), workload(1, 4)).encode();
    let b = key(gpu("24.2.1"), workload(1, 4)).encode();
    assert!(!b.starts_with(&a[..a.iter().position(|c| *c == b'\n').unwrap() + 1]));
}

#[test]
fn lookup_is_exact_on_the_same_driver_and_seed_only_on_another() {
    let dir = Scratch::new("lookup");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let w = workload(512, 896);
    let old = key(gpu("24.1.0"), w);
    db.add_trial(&old, &ok_trial(1, 2e-4)).unwrap();
    db.add_trial(&old, &ok_trial(2, 1e-4)).unwrap();
    let cv = &old.compiler_version;

    assert_eq!(
        db.lookup_for_device(&gpu("24.1.0"), cv, &w).unwrap(),
        Lookup::Exact(ok_trial(2, 1e-4))
    );
    assert_eq!(
        db.lookup_for_device(&gpu("24.2.1"), cv, &w).unwrap(),
        Lookup::SeedOnly(ok_trial(2, 1e-4))
    );
    // Another GPU, another compiler version, another workload: nothing.
    assert_eq!(
        db.lookup_for_device(&lavapipe(), cv, &w).unwrap(),
        Lookup::None
    );
    assert_eq!(
        db.lookup_for_device(&gpu("24.2.1"), "9.9.9", &w).unwrap(),
        Lookup::None
    );
    assert_eq!(
        db.lookup_for_device(&gpu("24.2.1"), cv, &workload(1, 896))
            .unwrap(),
        Lookup::None
    );
    // Once measured on the new driver, that record is used, even if slower.
    let new = key(gpu("24.2.1"), w);
    db.add_trial(&new, &ok_trial(3, 5e-4)).unwrap();
    assert_eq!(
        db.lookup_for_device(&gpu("24.2.1"), cv, &w).unwrap(),
        Lookup::Exact(ok_trial(3, 5e-4))
    );
}

#[test]
fn same_gpu_ignores_only_the_driver_version() {
    assert!(gpu("1").same_gpu(&gpu("2")));
    let mut other = gpu("1");
    other.device_id += 1;
    assert!(!gpu("1").same_gpu(&other));
    let mut other_driver = gpu("1");
    other_driver.driver_id = "ARM_PROPRIETARY".into();
    assert!(!gpu("1").same_gpu(&other_driver));
}

#[test]
fn stats_count_devices_keys_workloads_and_failures() {
    let dir = Scratch::new("stats");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let (w1, w2) = (workload(512, 896), workload(512, 4864));
    db.add_trial(&key(gpu("1"), w1), &ok_trial(0, 1e-4))
        .unwrap();
    db.add_trial(&key(gpu("1"), w1), &failed_trial(1, FailureKind::Timeout))
        .unwrap();
    db.add_trial(&key(gpu("1"), w2), &failed_trial(2, FailureKind::Timeout))
        .unwrap();
    db.add_trial(
        &key(lavapipe(), w1),
        &failed_trial(3, FailureKind::SpirvVal),
    )
    .unwrap();
    let s = db.stats().unwrap();
    assert_eq!((s.devices, s.keys, s.workloads), (2, 3, 2));
    assert_eq!((s.trials, s.ok_trials), (4, 1));
    assert_eq!(s.failures.get("timeout"), Some(&2));
    assert_eq!(s.failures.get("spirv_val"), Some(&1));
    assert_eq!(s.failures.len(), 2);
}

#[test]
fn graph_choices_are_per_device_and_model_shape_and_persist() {
    let dir = Scratch::new("graph");
    let path = dir.join("db");
    let choice = GraphChoice {
        ubatch: 256,
        max_dispatches_per_cb: 48,
        budget_bytes: 64 << 20,
        tok_s: 123.5,
        fuse_swiglu: true,
        overlap: true,
        default_tok_s: Some(120.0),
    };
    {
        let db = TuningDb::open(&path).unwrap();
        db.set_graph_choice(&gpu("1"), "qwen2-0.5b:q8_0:pp512", &choice)
            .unwrap();
        let bad = GraphChoice {
            ubatch: 0,
            ..choice.clone()
        };
        assert!(db.set_graph_choice(&gpu("1"), "x", &bad).is_err());
        let bad_default = GraphChoice {
            default_tok_s: Some(f64::NAN),
            ..choice.clone()
        };
        assert!(db.set_graph_choice(&gpu("1"), "x", &bad_default).is_err());
    }
    let db = TuningDb::open(&path).unwrap();
    assert_eq!(
        db.graph_choice(&gpu("1"), "qwen2-0.5b:q8_0:pp512").unwrap(),
        Some(choice)
    );
    assert_eq!(
        db.graph_choice(&gpu("2"), "qwen2-0.5b:q8_0:pp512").unwrap(),
        None
    );
    assert_eq!(
        db.graph_choice(&gpu("1"), "qwen2-0.5b:q8_0:pp128").unwrap(),
        None
    );
}

#[test]
fn a_file_at_the_path_is_not_a_database_and_is_left_alone() {
    let dir = Scratch::new("file");
    let path = dir.join("notes.txt");
    std::fs::write(&path, b"my notes").unwrap();
    let err = TuningDb::open(&path).err().expect("a file must not open");
    assert!(matches!(err, DbError::NotADatabase { .. }), "{err}");
    assert!(err.to_string().contains("notes.txt"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"my notes");
}

#[test]
fn a_non_empty_foreign_directory_is_not_a_database_and_is_left_alone() {
    let dir = Scratch::new("foreign");
    std::fs::write(dir.join("photo.jpg"), b"jpeg").unwrap();
    let err = TuningDb::open(dir.path())
        .err()
        .expect("foreign dir must not open");
    assert!(matches!(err, DbError::NotADatabase { .. }), "{err}");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing was added to the directory");
}

#[test]
fn an_unwritable_path_gives_a_clear_error() {
    let dir = Scratch::new("unwritable");
    // Below a regular file: no directory can be created there, even for root.
    std::fs::write(dir.join("file"), b"x").unwrap();
    let path = dir.join("file/sub/db");
    let err = TuningDb::open(&path).err().expect("must fail");
    assert!(matches!(err, DbError::NotWritable { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("file/sub/db") && msg.contains("ROCKY_DB"),
        "{msg}"
    );

    // A read-only directory, unless we are root (then permissions do not apply).
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&ro, perms).unwrap();
    let probe = ro.join("probe");
    if std::fs::create_dir(&probe).is_err() {
        let err = TuningDb::open(ro.join("db")).err().expect("must fail");
        assert!(matches!(err, DbError::NotWritable { .. }), "{err}");
    }
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&ro, perms).unwrap();
}

#[test]
fn a_corrupt_database_is_an_error_not_a_panic_and_is_not_deleted() {
    let dir = Scratch::new("corrupt");
    let path = dir.join("db");
    {
        let db = TuningDb::open(&path).unwrap();
        db.add_trial(&key(gpu("1"), workload(8, 64)), &ok_trial(0, 1e-4))
            .unwrap();
    }
    let garbage = vec![0xA5u8; 4096];
    std::fs::write(path.join("conf"), &garbage).unwrap();
    std::fs::write(path.join("db"), &garbage).unwrap();
    let err = TuningDb::open(&path)
        .err()
        .expect("a corrupt db must not open");
    assert!(
        matches!(err, DbError::Corrupt { .. } | DbError::Storage(_)),
        "{err}"
    );
    assert_eq!(std::fs::read(path.join("db")).unwrap(), garbage);
}

#[test]
fn default_path_prefers_rocky_db_then_xdg_then_home() {
    let s = |v: &str| Some(std::ffi::OsString::from(v));
    assert_eq!(
        resolve_db_path(s("/x/db"), s("/xdg"), s("/home/u")),
        Some("/x/db".into())
    );
    assert_eq!(
        resolve_db_path(None, s("/xdg"), s("/home/u")),
        Some("/xdg/rocky/tuning.sled".into())
    );
    assert_eq!(
        resolve_db_path(s(""), s(""), s("/home/u")),
        Some("/home/u/.local/share/rocky/tuning.sled".into())
    );
    assert_eq!(resolve_db_path(None, None, None), None);
}
