//! Export → import round trips, the all-or-nothing validation of imports, and merging.

mod common;

use common::*;
use rocky_tuning_db::{
    export_jsonl, import_jsonl, DbError, ExportFilter, FailureKind, RecordKey, TuningDb,
};

/// A source db with two devices, three keys, failures included.
fn populated(dir: &Scratch) -> (TuningDb, Vec<RecordKey>) {
    let db = TuningDb::open(dir.join("src")).unwrap();
    let keys = vec![
        key(gpu("24.2.1"), workload(512, 896)),
        key(gpu("24.2.1"), workload(512, 4864)),
        key(lavapipe(), workload(512, 896)),
    ];
    for (k, key) in keys.iter().enumerate() {
        for i in 0..6u32 {
            // Fastest at a different index per key so "first" or "last" cannot pass for "best".
            let median = 1e-4 * (1.0 + f64::from((i + 6 - k as u32 * 2) % 6));
            db.add_trial(key, &ok_trial(i, median)).unwrap();
        }
        db.add_trial(key, &failed_trial(7, FailureKind::PipelineCreation))
            .unwrap();
    }
    (db, keys)
}

fn export_string(db: &TuningDb, filter: &ExportFilter) -> String {
    let mut out = Vec::new();
    export_jsonl(db, &mut out, filter).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn export_then_import_into_an_empty_db_gives_the_same_best_per_key() {
    let dir = Scratch::new("roundtrip");
    let (src, keys) = populated(&dir);
    let text = export_string(&src, &ExportFilter::default());
    assert_eq!(text.lines().count(), keys.len());

    let dst = TuningDb::open(dir.join("dst")).unwrap();
    let summary = import_jsonl(&dst, text.as_bytes(), "board-1.jsonl").unwrap();
    assert_eq!(summary.new_keys, keys.len());
    assert_eq!(summary.trials_added, keys.len(), "best trials only");
    for k in &keys {
        let want = src.best(k).unwrap().unwrap();
        let got = dst.best_stored(k).unwrap().unwrap();
        assert_eq!(got.trial, want);
        assert_eq!(got.provenance.host, "board-1");
        assert_eq!(
            got.provenance.imported_from.as_deref(),
            Some("board-1.jsonl")
        );
    }
    let mut src_keys = src.all_keys().unwrap();
    let mut dst_keys = dst.all_keys().unwrap();
    src_keys.sort_by_key(|k| k.encode());
    dst_keys.sort_by_key(|k| k.encode());
    assert_eq!(src_keys, dst_keys);

    // Importing the same file again adds nothing.
    let again = import_jsonl(&dst, text.as_bytes(), "board-1.jsonl").unwrap();
    assert_eq!(
        (again.trials_added, again.duplicate_trials),
        (0, keys.len())
    );
}

#[test]
fn export_with_all_trials_carries_failures_too() {
    let dir = Scratch::new("alltrials");
    let (src, keys) = populated(&dir);
    let filter = ExportFilter {
        all_trials: true,
        ..ExportFilter::default()
    };
    let text = export_string(&src, &filter);
    let dst = TuningDb::open(dir.join("dst")).unwrap();
    import_jsonl(&dst, text.as_bytes(), "full").unwrap();
    for k in &keys {
        assert_eq!(dst.trials(k).unwrap(), src.trials(k).unwrap());
    }
    assert_eq!(
        dst.stats().unwrap().failures.get("pipeline_creation"),
        Some(&3)
    );
}

#[test]
fn export_filters_by_device_and_workload_kind() {
    let dir = Scratch::new("filter");
    let (src, _) = populated(&dir);
    let only_gpu = ExportFilter {
        device: Some(gpu("24.2.1")),
        ..ExportFilter::default()
    };
    assert_eq!(export_string(&src, &only_gpu).lines().count(), 2);
    let only_gemm = ExportFilter {
        workload_kind: Some("gemm".into()),
        ..ExportFilter::default()
    };
    assert_eq!(export_string(&src, &only_gemm).lines().count(), 0);
    let only_rms = ExportFilter {
        workload_kind: Some("rms_norm".into()),
        device: Some(lavapipe()),
        ..ExportFilter::default()
    };
    assert_eq!(export_string(&src, &only_rms).lines().count(), 1);
}

/// Applies `edit` to the second line (JSON) of `text`, via serde_json so
/// the rest of the line stays valid.
fn edit_second_line(text: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    edit(&mut v);
    lines[1] = v.to_string();
    lines.join("\n") + "\n"
}

#[test]
fn one_bad_line_fails_the_import_with_its_line_number_and_imports_nothing() {
    let dir = Scratch::new("badline");
    let (src, _) = populated(&dir);
    let good = export_string(&src, &ExportFilter::default());
    assert_eq!(good.lines().count(), 3);

    let bad_json = {
        let mut l: Vec<&str> = good.lines().collect();
        l[1] = "{\"format\": \"rocky-tuning-record\", ";
        l.join("\n")
    };
    let variants: Vec<(&str, String, &str)> = vec![
        ("bad JSON", bad_json, "not valid JSON"),
        (
            "negative time",
            edit_second_line(&good, |v| v["best"]["min_s"] = (-1.0).into()),
            "min_s",
        ),
        (
            "unknown version",
            edit_second_line(&good, |v| v["version"] = 99.into()),
            "version",
        ),
        (
            "missing field",
            edit_second_line(&good, |v| {
                v["key"].as_object_mut().unwrap().remove("compiler_version");
            }),
            "compiler_version",
        ),
        (
            "unknown failure kind",
            edit_second_line(&good, |v| {
                v["best"]["status"] =
                    serde_json::json!({"failed": {"kind": "cosmic_ray", "message": ""}})
            }),
            "cosmic_ray",
        ),
        (
            "times out of order",
            edit_second_line(&good, |v| v["best"]["max_s"] = 1e-9.into()),
            "out of order",
        ),
        (
            "schedule of another template",
            edit_second_line(&good, |v| {
                v["best"]["schedule"] = serde_json::json!(
                    {"add": {"threads": 64, "vector_width": 1, "vectors_per_thread": 1}})
            }),
            "template",
        ),
    ];
    for (name, text, mention) in variants {
        let dst = TuningDb::open(dir.join(&format!("dst-{}", name.replace(' ', "-")))).unwrap();
        let err = import_jsonl(&dst, text.as_bytes(), "shared.jsonl")
            .err()
            .unwrap_or_else(|| panic!("{name}: a bad line must fail the import"));
        match &err {
            DbError::ImportLine { line, message, .. } => {
                assert_eq!(*line, 2, "{name}: {err}");
                assert!(message.contains(mention), "{name}: {err}");
            }
            other => panic!("{name}: wrong error kind: {other}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("line 2") && msg.contains("shared.jsonl"),
            "{msg}"
        );
        // Line 1 was valid, but nothing was written.
        assert_eq!(dst.stats().unwrap().trials, 0, "{name}: nothing imported");
        assert!(dst.all_keys().unwrap().is_empty(), "{name}");
    }
}

#[test]
fn merge_keeps_the_faster_record_per_key_with_its_provenance() {
    let dir = Scratch::new("merge");
    let k_local_wins = key(gpu("24.2.1"), workload(512, 896));
    let k_remote_wins = key(gpu("24.2.1"), workload(512, 4864));
    let k_remote_only = key(gpu("24.2.1"), workload(1, 896));

    let local = TuningDb::open(dir.join("local")).unwrap();
    local.add_trial(&k_local_wins, &ok_trial(1, 1e-4)).unwrap();
    local.add_trial(&k_remote_wins, &ok_trial(1, 9e-4)).unwrap();

    let remote = TuningDb::open(dir.join("remote")).unwrap();
    let remote_trial = |k: &RecordKey, i: u32, m: f64| {
        let mut t = ok_trial(i, m);
        t.host = "board-2".into();
        remote.add_trial(k, &t).unwrap();
        t
    };
    remote_trial(&k_local_wins, 2, 5e-4);
    let faster = remote_trial(&k_remote_wins, 3, 2e-4);
    let only = remote_trial(&k_remote_only, 4, 3e-4);
    let text = export_string(&remote, &ExportFilter::default());

    let summary = import_jsonl(&local, text.as_bytes(), "board-2.jsonl").unwrap();
    assert_eq!(
        (summary.new_keys, summary.improved_keys, summary.kept_local),
        (1, 1, 1)
    );

    let kept = local.best_stored(&k_local_wins).unwrap().unwrap();
    assert_eq!(kept.trial, ok_trial(1, 1e-4));
    assert_eq!(kept.provenance.imported_from, None);

    let won = local.best_stored(&k_remote_wins).unwrap().unwrap();
    assert_eq!(won.trial, faster);
    assert_eq!(won.provenance.host, "board-2");
    assert_eq!(
        won.provenance.imported_from.as_deref(),
        Some("board-2.jsonl")
    );

    assert_eq!(local.best(&k_remote_only).unwrap(), Some(only));
    // The slower local trial is still there: merging never deletes.
    assert!(local.has_trial(&k_remote_wins, &schedule(1)).unwrap());
}

#[test]
fn a_file_that_is_not_an_export_is_refused_on_line_one() {
    let dir = Scratch::new("foreign");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let err = import_jsonl(&db, &b"{\"name\": \"something else\"}\n"[..], "x.json")
        .err()
        .unwrap();
    assert!(matches!(err, DbError::ImportLine { line: 1, .. }), "{err}");
    assert!(err.to_string().contains("rocky-tuning-record"), "{err}");
}

#[test]
fn presets_load_every_jsonl_file_of_a_directory() {
    let dir = Scratch::new("presets");
    let (src, keys) = populated(&dir);
    let presets = dir.join("presets");
    std::fs::create_dir(&presets).unwrap();
    std::fs::write(
        presets.join("lavapipe.jsonl"),
        export_string(&src, &ExportFilter::default()),
    )
    .unwrap();
    std::fs::write(presets.join("README.md"), "not a preset").unwrap();
    let db = TuningDb::open(dir.join("db")).unwrap();
    let loaded = rocky_tuning_db::load_presets(&db, &presets).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].1.new_keys, keys.len());
    let best = db.best_stored(&keys[0]).unwrap().unwrap();
    assert_eq!(
        best.provenance.imported_from.as_deref(),
        Some("preset:lavapipe.jsonl")
    );
    assert!(rocky_tuning_db::load_presets(&db, &dir.join("absent"))
        .unwrap()
        .is_empty());
}
