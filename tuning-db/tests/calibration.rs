//! Calibrations of the Mali cost model: stored apart from everything else, carried by export
//! and import (all or nothing, each once), found for the same device and driver, refused with
//! the field named when malformed; exports written before they existed still import.

mod common;

use common::*;
use rocky_tuning_db::{
    export_jsonl, import_jsonl, Calibration, CalibrationConstants, CalibrationTarget, DbError,
    ExportFilter, TuningDb, CALIBRATION_FORMAT,
};

fn calibration(
    device: rocky_tuning_db::DeviceFingerprint,
    date: u64,
    measured: f64,
) -> Calibration {
    Calibration {
        device,
        compiler_version: "0.1.0+gemm1+glue1+attn1".into(),
        model: "qwen2.5-3b-q4_k_m.gguf".into(),
        n_prompt: 512,
        ubatch: 64,
        measured_tok_s: measured,
        measured_by: "rocky bench -p 512 -ub 64 -r 2, Vulkan tuned row (rocky report)".into(),
        predicted_tok_s: 24.5,
        base: "built-in: ls_rate fitted to the seed's 21.0 tok/s".into(),
        fitted: "efficiency".into(),
        constants: CalibrationConstants {
            efficiency: 0.5,
            ls_rate: 5.846,
            dispatch_s: 0.0,
            submit_s: 0.0,
            half_occupancy_efficiency: 1.0,
        },
        target: CalibrationTarget {
            cores: 4,
            clock_hz: 1.0e9,
            bandwidth: 27.0e9,
        },
        statistics: "driver statistics of Mali-G610 MC4 (Mesa 26.1.3)".into(),
        host: "rock-5b".into(),
        date,
    }
}

fn export_string(db: &TuningDb, filter: &ExportFilter) -> String {
    let mut out = Vec::new();
    export_jsonl(db, &mut out, filter).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn a_calibration_goes_through_export_and_import_unchanged_and_only_once() {
    let dir = Scratch::new("calibration-roundtrip");
    let src = TuningDb::open(dir.join("src")).unwrap();
    let a = calibration(gpu("26.1.3"), 1_790_000_000, 31.0);
    let b = calibration(lavapipe(), 1_790_000_100, 3.25);
    src.add_calibration(&a).unwrap();
    src.add_calibration(&b).unwrap();
    // Beside a kernel record, so the file holds more than one kind of line.
    src.add_trial(&key(gpu("26.1.3"), workload(64, 2048)), &ok_trial(1, 1e-4))
        .unwrap();
    let text = export_string(&src, &ExportFilter::default());
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(&format!("\"format\":\"{CALIBRATION_FORMAT}\"")))
            .count(),
        2
    );

    let dst = TuningDb::open(dir.join("dst")).unwrap();
    let first = import_jsonl(&dst, text.as_bytes(), "board.jsonl").unwrap();
    assert_eq!(
        (first.calibrations_added, first.calibrations_duplicate),
        (2, 0)
    );
    assert_eq!(
        dst.calibrations(None).unwrap(),
        src.calibrations(None).unwrap()
    );
    // Every number reads back bit-exactly: the calibration lines of a second export are the
    // first's, byte for byte (the kernel record's provenance now names the import).
    let calibration_lines = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.contains(CALIBRATION_FORMAT))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        calibration_lines(&export_string(&dst, &ExportFilter::default())),
        calibration_lines(&text)
    );
    // Importing the same file again adds nothing.
    let again = import_jsonl(&dst, text.as_bytes(), "board.jsonl").unwrap();
    assert_eq!(
        (
            again.calibrations_added,
            again.calibrations_duplicate,
            again.calibrations_kept_local
        ),
        (0, 2, 0)
    );
    assert_eq!(dst.calibrations(None).unwrap().len(), 2);
    // The same line twice in one file is stored once.
    let one = text
        .lines()
        .find(|l| l.contains(CALIBRATION_FORMAT))
        .unwrap();
    let third = TuningDb::open(dir.join("third")).unwrap();
    let s = import_jsonl(&third, format!("{one}\n{one}\n").as_bytes(), "twice").unwrap();
    assert_eq!((s.calibrations_added, s.calibrations_duplicate), (1, 1));
    assert_eq!(third.calibrations(None).unwrap().len(), 1);
}

#[test]
fn predict_finds_the_newest_calibration_of_the_same_device_and_driver_only() {
    let dir = Scratch::new("calibration-lookup");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let board = gpu("26.1.3");
    assert_eq!(db.calibration_for_device(&board).unwrap(), None);
    let old = calibration(board.clone(), 1_790_000_000, 30.0);
    let new = calibration(board.clone(), 1_790_000_500, 32.0);
    // Stored newest first, so neither "first" nor "last stored" passes for "newest".
    db.add_calibration(&new).unwrap();
    db.add_calibration(&old).unwrap();
    let other_driver = calibration(gpu("26.1.6"), 1_790_009_999, 40.0);
    db.add_calibration(&other_driver).unwrap();
    assert_eq!(
        db.calibration_for_device(&board).unwrap(),
        Some(new.clone())
    );
    // The shim's driver (26.1.6) finds only its own; lavapipe none.
    assert_eq!(
        db.calibration_for_device(&gpu("26.1.6")).unwrap(),
        Some(other_driver.clone())
    );
    assert_eq!(db.calibration_for_device(&lavapipe()).unwrap(), None);
    assert_eq!(db.calibration_for_device(&gpu("25.0.7")).unwrap(), None);
    // Asked for the same GPU under any driver: the newest of all three.
    assert_eq!(
        db.calibration_for_gpu(&gpu("25.0.7")).unwrap(),
        Some(other_driver)
    );
    assert_eq!(db.calibration_for_gpu(&lavapipe()).unwrap(), None);
    // Calibrations are no trials: the kernel records are untouched.
    assert_eq!(db.stats().unwrap().trials, 0);
}

#[test]
fn the_prediction_error_is_relative_to_the_measured_figure() {
    // 24.5 predicted against 31.0 measured: (24.5 - 31) / 31.
    let c = calibration(gpu("26.1.3"), 1, 31.0);
    assert!((c.error() - (24.5 - 31.0) / 31.0).abs() < 1e-15);
    assert!(c.describe().contains("-21%"), "{}", c.describe());
}

#[test]
fn calibrations_follow_the_device_filter_and_not_the_workload_filter() {
    let dir = Scratch::new("calibration-filter");
    let db = TuningDb::open(dir.join("db")).unwrap();
    db.add_calibration(&calibration(gpu("26.1.3"), 10, 31.0))
        .unwrap();
    db.add_calibration(&calibration(lavapipe(), 20, 3.0))
        .unwrap();
    let only_board = ExportFilter {
        device: Some(gpu("26.1.3")),
        ..ExportFilter::default()
    };
    let text = export_string(&db, &only_board);
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("26.1.3") && !text.contains("llvmpipe"));
    let kernels_only = ExportFilter {
        workload_kind: Some("gemm".into()),
        ..ExportFilter::default()
    };
    assert_eq!(export_string(&db, &kernels_only), "");
}

/// Edits the calibration line of `text` (its only line).
fn edited(text: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    edit(&mut v);
    v.to_string()
}

#[test]
fn a_malformed_calibration_fails_the_import_naming_its_line_and_field_and_imports_nothing() {
    let dir = Scratch::new("calibration-bad");
    let src = TuningDb::open(dir.join("src")).unwrap();
    src.add_calibration(&calibration(gpu("26.1.3"), 10, 31.0))
        .unwrap();
    let line = export_string(&src, &ExportFilter::default());
    let good_record = {
        let other = TuningDb::open(dir.join("other")).unwrap();
        other
            .add_trial(&key(lavapipe(), workload(64, 896)), &ok_trial(2, 2e-4))
            .unwrap();
        other
            .add_calibration(&calibration(lavapipe(), 5, 2.0))
            .unwrap();
        export_string(&other, &ExportFilter::default())
    };
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "measured_tok_s = -31 is not a finite positive number",
            Box::new(|v| v["calibration"]["measured_tok_s"] = (-31.0).into()),
        ),
        (
            "constants.ls_rate = 0 is not a finite positive number",
            Box::new(|v| v["calibration"]["constants"]["ls_rate"] = 0.0.into()),
        ),
        (
            "constants.dispatch_s = -0.001 is not a finite non-negative number",
            Box::new(|v| v["calibration"]["constants"]["dispatch_s"] = (-0.001).into()),
        ),
        (
            "ubatch = 0 is out of range",
            Box::new(|v| v["calibration"]["ubatch"] = 0.into()),
        ),
        (
            "fitted = \"clock\": expected one of efficiency, ls_rate, dispatch_s",
            Box::new(|v| v["calibration"]["fitted"] = "clock".into()),
        ),
        (
            "measured_by is empty",
            Box::new(|v| v["calibration"]["measured_by"] = " ".into()),
        ),
        (
            "missing field `measured_tok_s`",
            Box::new(|v| {
                v["calibration"]
                    .as_object_mut()
                    .unwrap()
                    .remove("measured_tok_s");
            }),
        ),
        (
            "calibration.measured_tok_s: invalid type: string \"fast\"",
            Box::new(|v| v["calibration"]["measured_tok_s"] = "fast".into()),
        ),
        (
            "unknown field `clock_mhz`",
            Box::new(|v| v["calibration"]["constants"]["clock_mhz"] = 1000.into()),
        ),
        (
            "unsupported record version Some(2)",
            Box::new(|v| v["version"] = 2.into()),
        ),
    ];
    for (expected, edit) in cases {
        let dst = TuningDb::open(dir.join(&format!("dst-{}", expected.len()))).unwrap();
        // A good file's lines first, the bad calibration last: nothing at all is stored.
        let text = format!("{good_record}{}\n", edited(&line, &edit));
        let bad_line = good_record.lines().count() + 1;
        let e = import_jsonl(&dst, text.as_bytes(), "board.jsonl").unwrap_err();
        match &e {
            DbError::ImportLine {
                source_name, line, ..
            } => {
                assert_eq!(source_name, "board.jsonl");
                assert_eq!(*line, bad_line, "{e}");
            }
            other => panic!("{other:?}"),
        }
        let text = e.to_string();
        assert!(text.contains(expected), "{expected:?} not in {text}");
        assert!(text.contains("nothing was imported"), "{text}");
        assert!(dst.calibrations(None).unwrap().is_empty());
        assert_eq!(dst.stats().unwrap().trials, 0);
    }
    // Storing one directly is refused the same way.
    let mut bad = calibration(gpu("26.1.3"), 10, 31.0);
    bad.predicted_tok_s = f64::NAN;
    let e = src.add_calibration(&bad).unwrap_err().to_string();
    assert!(e.contains("predicted_tok_s = NaN"), "{e}");
}

#[test]
fn exports_written_before_calibrations_existed_still_import() {
    // The shipped presets were written before calibration lines existed.
    let dir = Scratch::new("calibration-old");
    let db = TuningDb::open(dir.join("db")).unwrap();
    let presets = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("presets/lavapipe.jsonl");
    let text = std::fs::read_to_string(&presets).unwrap();
    assert!(!text.contains(CALIBRATION_FORMAT));
    let s = import_jsonl(&db, text.as_bytes(), "lavapipe.jsonl").unwrap();
    assert!(s.new_keys > 0);
    assert_eq!(s.calibrations_added, 0);
    assert!(db.calibrations(None).unwrap().is_empty());
}
