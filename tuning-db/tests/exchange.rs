//! Export → import round trips, the all-or-nothing validation of imports, and merging; for
//! kernel records and graph choices.

mod common;

use common::*;
use rocky_tuning_db::{
    export_jsonl, import_jsonl, DbError, DeviceFingerprint, ExportFilter, FailureKind, GraphChoice,
    RecordKey, StoredGraphChoice, TuningDb,
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

/// Applies `edit` to line `number` (1-based, JSON) of `text`, via serde_json so the rest of
/// the line stays valid.
fn edit_line(text: &str, number: usize, edit: impl Fn(&mut serde_json::Value)) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[number - 1]).unwrap();
    edit(&mut v);
    lines[number - 1] = v.to_string();
    lines.join("\n") + "\n"
}

fn edit_second_line(text: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    edit_line(text, 2, edit)
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

fn choice(ubatch: u32, tok_s: f64) -> GraphChoice {
    GraphChoice {
        ubatch,
        max_dispatches_per_cb: 48,
        budget_bytes: 64 << 20,
        tok_s,
        fuse_swiglu: ubatch >= 128,
        overlap: ubatch <= 64,
        default_tok_s: Some(tok_s * 0.9),
    }
}

const MODEL_A: &str = "qwen2-0.5b:q8_0:pp512@0.1.0+gemm1+glue1+attn1";
const MODEL_B: &str = "qwen2-1.5b:q4_k_m:pp512@0.1.0+gemm1+glue1+attn1";

/// [`populated`] plus two graph choices, one per device.
fn populated_with_choices(dir: &Scratch) -> (TuningDb, Vec<RecordKey>) {
    let (db, keys) = populated(dir);
    db.set_graph_choice(&gpu("24.2.1"), MODEL_A, &choice(128, 210.5))
        .unwrap();
    db.set_graph_choice(&lavapipe(), MODEL_B, &choice(32, 12.25))
        .unwrap();
    (db, keys)
}

fn stored(device: DeviceFingerprint, model: &str, choice: GraphChoice) -> StoredGraphChoice {
    StoredGraphChoice {
        device,
        model_shape_key: model.into(),
        choice,
    }
}

fn sorted_choices(db: &TuningDb) -> Vec<StoredGraphChoice> {
    let mut all = db.graph_choices(None).unwrap();
    all.sort_by_key(|c| (c.device.clone(), c.model_shape_key.clone()));
    all
}

#[test]
fn graph_choices_travel_with_export_and_import() {
    let dir = Scratch::new("graph-roundtrip");
    let (src, keys) = populated_with_choices(&dir);
    let mut out = Vec::new();
    let written = export_jsonl(&src, &mut out, &ExportFilter::default()).unwrap();
    assert_eq!((written.records, written.graph_choices), (keys.len(), 2));
    let text = String::from_utf8(out).unwrap();
    let formats: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["format"].to_string())
        .collect();
    let record = "\"rocky-tuning-record\"".to_string();
    let graph = "\"rocky-graph-choice\"".to_string();
    assert_eq!(
        formats,
        [vec![record; keys.len()], vec![graph; 2]].concat(),
        "records first, then graph choices"
    );

    let dst = TuningDb::open(dir.join("dst")).unwrap();
    let summary = import_jsonl(&dst, text.as_bytes(), "board-1.jsonl").unwrap();
    assert_eq!(summary.lines, keys.len() + 2);
    assert_eq!(summary.new_keys, keys.len());
    assert_eq!(
        (
            summary.graph_choices_added,
            summary.graph_choices_improved,
            summary.graph_choices_kept_local
        ),
        (2, 0, 0)
    );
    let mut want = vec![
        stored(gpu("24.2.1"), MODEL_A, choice(128, 210.5)),
        stored(lavapipe(), MODEL_B, choice(32, 12.25)),
    ];
    want.sort_by_key(|c| (c.device.clone(), c.model_shape_key.clone()));
    assert_eq!(sorted_choices(&src), want);
    assert_eq!(sorted_choices(&dst), want);
    for k in &keys {
        assert_eq!(dst.best(k).unwrap(), src.best(k).unwrap());
    }
    // The second board can look the choice up by its own device and model shape.
    assert_eq!(
        dst.graph_choice(&gpu("24.2.1"), MODEL_A).unwrap(),
        Some(choice(128, 210.5))
    );

    // Importing again changes nothing: equal throughput keeps the local choice.
    let again = import_jsonl(&dst, text.as_bytes(), "board-1.jsonl").unwrap();
    assert_eq!(
        (again.graph_choices_added, again.graph_choices_improved),
        (0, 0)
    );
    assert_eq!(again.graph_choices_kept_local, 2);
    assert_eq!(sorted_choices(&dst), want);
}

/// A graph choice exported before fusion and overlap were tuned has neither field: it imports
/// as unfused and one ubatch at a time, which is what it ran.
#[test]
fn graph_choices_without_the_fusion_field_import_as_unfused() {
    let dir = Scratch::new("graph-old");
    let (src, _) = populated_with_choices(&dir);
    let mut out = Vec::new();
    export_jsonl(&src, &mut out, &ExportFilter::default()).unwrap();
    let old: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["format"] == "rocky-graph-choice" {
                for field in ["fuse_swiglu", "overlap", "default_tok_s"] {
                    let removed = v["choice"].as_object_mut().unwrap().remove(field);
                    assert!(removed.is_some(), "exports carry {field}");
                }
            }
            v.to_string()
        })
        .collect();
    let dst = TuningDb::open(dir.join("dst")).unwrap();
    import_jsonl(&dst, old.join("\n").as_bytes(), "old.jsonl").unwrap();
    let choices = sorted_choices(&dst);
    assert_eq!(choices.len(), 2);
    assert!(choices
        .iter()
        .all(|c| !c.choice.fuse_swiglu && !c.choice.overlap));
    // Nor had they met the default at their ubatch.
    assert!(choices.iter().all(|c| c.choice.beat_default().is_none()));
}

#[test]
fn graph_choices_follow_the_device_filter_and_not_the_workload_filter() {
    let dir = Scratch::new("graph-filter");
    let (src, _) = populated_with_choices(&dir);
    let export = |filter: ExportFilter| {
        let mut out = Vec::new();
        let s = export_jsonl(&src, &mut out, &filter).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap().lines().count(),
            s.records + s.graph_choices
        );
        (s.records, s.graph_choices)
    };
    let only_gpu = ExportFilter {
        device: Some(gpu("24.2.1")),
        ..ExportFilter::default()
    };
    assert_eq!(export(only_gpu), (2, 1));
    // Another driver version is another device.
    let other_driver = ExportFilter {
        device: Some(gpu("25.0.0")),
        ..ExportFilter::default()
    };
    assert_eq!(export(other_driver), (0, 0));
    // A kernel-template filter asks for kernel records only.
    let only_rms = ExportFilter {
        workload_kind: Some("rms_norm".into()),
        ..ExportFilter::default()
    };
    assert_eq!(export(only_rms), (3, 0));
}

#[test]
fn merging_graph_choices_keeps_the_higher_throughput() {
    let dir = Scratch::new("graph-merge");
    let device = gpu("24.2.1");
    let local = TuningDb::open(dir.join("local")).unwrap();
    local
        .set_graph_choice(&device, "improved", &choice(64, 100.0))
        .unwrap();
    local
        .set_graph_choice(&device, "local-faster", &choice(64, 300.0))
        .unwrap();
    local
        .set_graph_choice(&device, "tie", &choice(64, 80.0))
        .unwrap();
    local
        .set_graph_choice(&device, "local-only", &choice(16, 5.0))
        .unwrap();

    let remote = TuningDb::open(dir.join("remote")).unwrap();
    remote
        .set_graph_choice(&device, "improved", &choice(256, 150.0))
        .unwrap();
    remote
        .set_graph_choice(&device, "local-faster", &choice(256, 200.0))
        .unwrap();
    remote
        .set_graph_choice(&device, "tie", &choice(256, 80.0))
        .unwrap();
    remote
        .set_graph_choice(&device, "remote-only", &choice(512, 50.0))
        .unwrap();
    let text = export_string(&remote, &ExportFilter::default());

    let summary = import_jsonl(&local, text.as_bytes(), "board-2.jsonl").unwrap();
    assert_eq!(
        (
            summary.graph_choices_added,
            summary.graph_choices_improved,
            summary.graph_choices_kept_local
        ),
        (1, 1, 2)
    );
    let got = |model: &str| local.graph_choice(&device, model).unwrap();
    assert_eq!(got("improved"), Some(choice(256, 150.0)));
    assert_eq!(got("local-faster"), Some(choice(64, 300.0)));
    assert_eq!(
        got("tie"),
        Some(choice(64, 80.0)),
        "a tie keeps the local choice"
    );
    assert_eq!(got("local-only"), Some(choice(16, 5.0)));
    assert_eq!(got("remote-only"), Some(choice(512, 50.0)));
}

#[test]
fn repeated_graph_choice_lines_in_one_file_keep_the_fastest() {
    let dir = Scratch::new("graph-repeat");
    let src = TuningDb::open(dir.join("src")).unwrap();
    src.set_graph_choice(&lavapipe(), MODEL_A, &choice(8, 1.0))
        .unwrap();
    let line = export_string(&src, &ExportFilter::default());
    let with_tok_s = |ubatch: u32, tok_s: f64| {
        edit_line(&line, 1, |v| {
            v["choice"]["ubatch"] = ubatch.into();
            v["choice"]["tok_s"] = tok_s.into();
            v["choice"]["default_tok_s"] = (tok_s * 0.9).into();
        })
    };
    // Slow, fastest, middle: neither the first nor the last line may pass for the best.
    let text = with_tok_s(8, 10.0) + &with_tok_s(32, 30.0) + &with_tok_s(16, 20.0);
    let dst = TuningDb::open(dir.join("dst")).unwrap();
    let summary = import_jsonl(&dst, text.as_bytes(), "repeats").unwrap();
    assert_eq!(
        (
            summary.graph_choices_added,
            summary.graph_choices_improved,
            summary.graph_choices_kept_local
        ),
        (1, 1, 1)
    );
    assert_eq!(
        sorted_choices(&dst),
        vec![stored(lavapipe(), MODEL_A, choice(32, 30.0))]
    );
}

#[test]
fn one_bad_graph_choice_line_fails_the_whole_import_and_imports_nothing() {
    let dir = Scratch::new("graph-badline");
    let (src, keys) = populated_with_choices(&dir);
    let good = export_string(&src, &ExportFilter::default());
    // Lines 1-3 are kernel records, 4 and 5 graph choices.
    assert_eq!(good.lines().count(), keys.len() + 2);
    let bad_choice_line = keys.len() + 1;
    let edit = |f: fn(&mut serde_json::Value)| edit_line(&good, bad_choice_line, f);
    let variants: Vec<(&str, String, &str)> = vec![
        (
            "ubatch 0",
            edit(|v| v["choice"]["ubatch"] = 0.into()),
            "ubatch = 0",
        ),
        (
            "ubatch 4097",
            edit(|v| v["choice"]["ubatch"] = 4097.into()),
            "ubatch = 4097",
        ),
        (
            "no dispatches",
            edit(|v| v["choice"]["max_dispatches_per_cb"] = 0.into()),
            "max_dispatches_per_cb",
        ),
        (
            "zero tok/s",
            edit(|v| v["choice"]["tok_s"] = 0.0.into()),
            "tok_s",
        ),
        (
            "negative tok/s",
            edit(|v| v["choice"]["tok_s"] = (-3.5).into()),
            "tok_s",
        ),
        (
            "unknown field in the choice",
            edit(|v| v["choice"]["ubatch_hint"] = 7.into()),
            "ubatch_hint",
        ),
        (
            "unknown top-level field",
            edit(|v| v["note"] = "x".into()),
            "note",
        ),
        (
            "missing model",
            edit(|v| {
                v.as_object_mut().unwrap().remove("model");
            }),
            "model",
        ),
        (
            "empty model",
            edit(|v| v["model"] = "".into()),
            "model shape key is empty",
        ),
        (
            "unnamed device",
            edit(|v| v["device"]["device_name"] = " ".into()),
            "device_name",
        ),
        (
            "device without a vendor",
            edit(|v| {
                v["device"].as_object_mut().unwrap().remove("vendor_id");
            }),
            "vendor_id",
        ),
        (
            "unknown version",
            edit(|v| v["version"] = 2.into()),
            "version",
        ),
    ];
    for (name, text, mention) in variants {
        let dst = TuningDb::open(dir.join(&format!("dst-{}", name.replace(' ', "-")))).unwrap();
        // A choice already there must survive a failed import unchanged.
        dst.set_graph_choice(&gpu("24.2.1"), MODEL_A, &choice(4, 1.0))
            .unwrap();
        let err = import_jsonl(&dst, text.as_bytes(), "shared.jsonl")
            .err()
            .unwrap_or_else(|| panic!("{name}: a bad line must fail the import"));
        match &err {
            DbError::ImportLine { line, message, .. } => {
                assert_eq!(*line, bad_choice_line, "{name}: {err}");
                assert!(message.contains(mention), "{name}: {err}");
            }
            other => panic!("{name}: wrong error kind: {other}"),
        }
        assert!(
            err.to_string().contains(&format!("line {bad_choice_line}")),
            "{err}"
        );
        // The kernel records before the bad line and the graph choice after it: none stored.
        assert_eq!(dst.stats().unwrap().trials, 0, "{name}: nothing imported");
        assert_eq!(
            sorted_choices(&dst),
            vec![stored(gpu("24.2.1"), MODEL_A, choice(4, 1.0))],
            "{name}"
        );
    }
}

#[test]
fn a_bad_record_line_also_keeps_the_good_graph_choices_out() {
    let dir = Scratch::new("graph-bad-record");
    let (src, _) = populated_with_choices(&dir);
    let good = export_string(&src, &ExportFilter::default());
    let mut lines: Vec<String> = good.lines().map(String::from).collect();
    // Graph choices first, then a broken record.
    lines.rotate_right(2);
    let text = edit_line(&(lines.join("\n") + "\n"), 4, |v| {
        v["best"]["median_s"] = (-1.0).into()
    });
    let dst = TuningDb::open(dir.join("dst")).unwrap();
    let err = import_jsonl(&dst, text.as_bytes(), "shared.jsonl")
        .err()
        .unwrap();
    assert!(matches!(err, DbError::ImportLine { line: 4, .. }), "{err}");
    assert!(dst.graph_choices(None).unwrap().is_empty());
    assert_eq!(dst.stats().unwrap().trials, 0);
}

/// A line exactly as written before graph choices were exported (golden text, not produced
/// by the current exporter).
const OLD_EXPORT_LINE: &str = r#"{"format":"rocky-tuning-record","version":1,"key":{"device":{"vendor_id":65541,"device_id":0,"driver_id":"MESA_LLVMPIPE","driver_name":"llvmpipe","driver_version":"24.0.5","device_name":"llvmpipe (LLVM 17.0.6, 256 bits)"},"compiler_version":"0.1.0+gemm1+glue1+attn1","workload":{"rms_norm":{"m":512,"width":896,"eps_bits":897988541}}},"best":{"schedule":{"rms_norm":{"threads":64,"vector_width":1,"reduce":"shared_tree"}},"status":"ok","median_s":0.0002,"min_s":0.00018,"max_s":0.00024,"gflops":5.0,"date":1790000001,"host":"board-1"},"provenance":{"host":"board-1","imported_from":null,"imported_at":null}}"#;

#[test]
fn an_export_without_graph_choice_lines_still_imports() {
    let dir = Scratch::new("old-export");
    let db = TuningDb::open(dir.join("db")).unwrap();
    db.set_graph_choice(&lavapipe(), MODEL_B, &choice(32, 12.25))
        .unwrap();
    let text = format!("{OLD_EXPORT_LINE}\n");
    let summary = import_jsonl(&db, text.as_bytes(), "old.jsonl").unwrap();
    assert_eq!(
        (summary.lines, summary.new_keys, summary.trials_added),
        (1, 1, 1)
    );
    assert_eq!(
        (
            summary.graph_choices_added,
            summary.graph_choices_improved,
            summary.graph_choices_kept_local
        ),
        (0, 0, 0)
    );
    let k = key(lavapipe(), workload(512, 896));
    let best = db.best(&k).unwrap().unwrap();
    assert_eq!(best.schedule, schedule(1));
    assert_eq!(best.median_s, 2e-4);
    // The local graph choice is untouched.
    assert_eq!(
        sorted_choices(&db),
        vec![stored(lavapipe(), MODEL_B, choice(32, 12.25))]
    );
}

/// The driver's pipeline statistics ride along with a trial: stored, exported and imported
/// unchanged; the old line above (written before they existed) still imports, without them.
#[test]
fn driver_statistics_survive_store_export_and_import_and_old_lines_have_none() {
    let dir = Scratch::new("driver-stats");
    let src = TuningDb::open(dir.join("src")).unwrap();
    let k = key(lavapipe(), workload(512, 896));
    let mut t = ok_trial(1, 2e-4);
    t.driver_stats = Some(
        [("Spills".to_string(), 0.0), ("Cycles".to_string(), 12.5)]
            .into_iter()
            .collect(),
    );
    src.add_trial(&k, &t).unwrap();
    assert_eq!(src.trials(&k).unwrap(), vec![t.clone()]);
    let text = export_string(&src, &ExportFilter::default());
    assert!(
        text.contains(r#""driver_stats":{"Cycles":12.5,"Spills":0.0}"#),
        "{text}"
    );
    let dst = TuningDb::open(dir.join("dst")).unwrap();
    import_jsonl(&dst, text.as_bytes(), "stats.jsonl").unwrap();
    assert_eq!(dst.best(&k).unwrap().unwrap().driver_stats, t.driver_stats);

    let old = TuningDb::open(dir.join("old")).unwrap();
    import_jsonl(&old, format!("{OLD_EXPORT_LINE}\n").as_bytes(), "old.jsonl").unwrap();
    let best = old.best(&k).unwrap().unwrap();
    assert_eq!(best.driver_stats, None);
    // A trial without statistics is written as before: no `driver_stats` key at all.
    let plain = export_string(&old, &ExportFilter::default());
    assert!(!plain.contains("driver_stats"), "{plain}");
}
