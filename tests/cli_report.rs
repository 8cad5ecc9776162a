//! End-to-end test of `rocky report` on the Vulkan device present (lavapipe in CI): the file
//! holds every section with the real output of the command it names (the bench table row,
//! the profile's busy share, the tuning records), and a section that fails keeps its error
//! text while the others still run.

mod common;

use common::{rocky, shared, text};
use std::path::PathBuf;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rocky-cli-report-{}-{name}", std::process::id()))
}

fn tiny() -> String {
    shared()
        .join("models/qwen2-tiny-q8_0.gguf")
        .display()
        .to_string()
}

#[test]
fn the_report_holds_every_section_with_its_real_output() {
    let (db, out) = (temp("db.sled"), temp("report.md"));
    let db_s = db.display().to_string();
    // One tuning record to export: a short tune of the tiny model's first GEMM.
    let tuned = rocky(&[
        "tune",
        &tiny(),
        "--ubatch",
        "16",
        "--trials",
        "2",
        "--time",
        "60",
        "--graph-time",
        "0",
        "--attention-kv",
        "0",
        "--workload",
        "n=256 k=256",
        "--db",
        &db_s,
    ]);
    assert!(tuned.status.success(), "{}", text(&tuned));
    let o = rocky(&[
        "report",
        &tiny(),
        "-o",
        &out.display().to_string(),
        "-p",
        "16",
        "-u",
        "16",
        "-r",
        "1",
        "--db",
        &db_s,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let report = std::fs::read_to_string(&out).unwrap();
    for heading in [
        "## 1. System",
        "## 2. Doctor",
        "## 3. Devices",
        "## 4. Model",
        "## 5. Bench",
        "## 6. Prefill profile (16 tokens)",
        "## 7. Predicted (the Mali cost model: a prediction, not a measurement), calibrated on the bench's measured figure",
        "## 8. Tuning database",
    ] {
        assert!(report.contains(heading), "no {heading:?} in:\n{report}");
    }
    // The sections ran for real: the device, the bench rows, the profile, the records.
    assert!(report.contains("`rocky devices` — exit 0"), "{report}");
    assert!(report.contains("`rocky bench "), "{report}");
    assert!(
        report.matches("| qwen2").count() >= 2,
        "no tuned and default rows:\n{report}"
    );
    assert!(report.contains("GPU busy"), "no profile:\n{report}");
    assert!(
        report.contains("predicted prefill:"),
        "no prediction:\n{report}"
    );
    assert!(
        report.contains("```jsonl\n{"),
        "no tuning records:\n{report}"
    );
    // The bench's measured figure calibrated the model: the prediction section reproduces the
    // tuned row's t/s (read here from the report's own bench table), and the exported records
    // carry the calibration with that figure, measured on the bench's device.
    let bench_row = report
        .lines()
        .find(|l| l.contains("| Vulkan tuned |") && l.contains("| pp16 |"))
        .unwrap_or_else(|| panic!("no tuned pp16 row:\n{report}"));
    let measured: f64 = bench_row
        .rsplit('|')
        .nth(1)
        .and_then(|c| c.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no t/s in {bench_row}"));
    let line = report
        .lines()
        .find(|l| l.contains("\"format\":\"rocky-calibration\""))
        .unwrap_or_else(|| panic!("no calibration in the records:\n{report}"));
    let c: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(c["calibration"]["measured_tok_s"].as_f64(), Some(measured));
    assert_eq!(c["calibration"]["ubatch"], 16);
    assert!(c["calibration"]["measured_by"]
        .as_str()
        .unwrap()
        .contains("Vulkan tuned row"));
    assert!(
        report.contains(&format!("predicted prefill: {measured:.1} tok/s")),
        "the calibrated prediction is not the measured {measured}:\n{report}"
    );
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_dir_all(&db);
}

#[test]
fn a_failing_section_keeps_its_error_and_the_rest_still_runs() {
    let out = temp("bad-device.md");
    let o = rocky(&[
        "report",
        &tiny(),
        "-o",
        &out.display().to_string(),
        "-p",
        "8",
        "-u",
        "8",
        "-r",
        "1",
        "--device",
        "no-such-gpu",
        "--db",
        &temp("empty.sled").display().to_string(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("failed"), "{}", text(&o));
    let report = std::fs::read_to_string(&out).unwrap();
    let bench = &report[report.find("## 5. Bench").unwrap()..];
    assert!(
        bench.contains("no-such-gpu"),
        "the bench error is not in the report:\n{bench}"
    );
    let status = bench
        .lines()
        .find(|l| l.starts_with("`rocky bench"))
        .expect("the bench section names its command");
    assert!(!status.contains("— exit 0"), "{status}");
    assert!(report.contains("`rocky devices` — exit 0"), "{report}");
    assert!(report.contains("No tuning records"), "{report}");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_dir_all(temp("empty.sled"));
}

#[test]
fn a_missing_model_is_refused_before_anything_runs() {
    let out = temp("missing.md");
    let o = rocky(&[
        "report",
        "/no/such/model.gguf",
        "-o",
        &out.display().to_string(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    assert!(!out.exists());
}
