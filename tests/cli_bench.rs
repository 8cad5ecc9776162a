//! `rocky bench` end to end on the tiny Q4_K_M Qwen2 (lavapipe is enough): the rows a user
//! asked for, tuned schedules really used by the tuned row and not by the default row, the
//! statistics consistent with the raw samples, the markdown header of llama-bench, and the
//! usage errors.

mod common;

use common::{rocky, text};
use serde_json::Value;
use std::path::PathBuf;

fn model() -> String {
    common::shared()
        .join("models/qwen2-tiny-q4_k_m.gguf")
        .to_string_lossy()
        .into_owned()
}

fn temp_db(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocky-cli-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn bench_rows_use_tuned_schedules_and_report_consistent_statistics() {
    let db = temp_db("rows");
    let db_s = db.to_str().unwrap();
    let m = model();
    let o = rocky(&["tune", &m, "--ubatch", "8", "--trials", "2", "--db", db_s]);
    assert!(o.status.success(), "{}", text(&o));

    let o = rocky(&[
        "bench", &m, "-p", "8,16", "-ub", "8", "-r", "2", "--db", db_s, "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).expect("JSON rows");
    // 2 prompt lengths × (tuned, default) + 2 CPU rows.
    assert_eq!(rows.len(), 6, "{rows:#?}");
    let of = |backend: &str| -> Vec<&Value> {
        rows.iter().filter(|r| r["backend"] == backend).collect()
    };
    for r in of("Vulkan tuned") {
        let (tuned, all) = (
            r["tuned_gemms"][0].as_u64().unwrap(),
            r["tuned_gemms"][1].as_u64().unwrap(),
        );
        // Every GEMM of an 8-token ubatch was tuned above (the 16-token prompt runs two
        // ubatches of the same shape).
        assert!(all > 0 && tuned == all, "{r}");
        assert_eq!(r["n_ubatch"], 8);
    }
    for r in of("Vulkan default") {
        assert_eq!(r["tuned_gemms"][0], 0, "{r}");
    }
    // Device memory: every weight of the file is on the device (tied embeddings), plus the
    // activations, KV cache, ids and logits.
    for r in of("Vulkan tuned").into_iter().chain(of("Vulkan default")) {
        let model = r["model_size_bytes"].as_u64().unwrap();
        assert!(r["device_bytes"].as_u64().unwrap() > model, "{r}");
    }
    let cpu = of("CPU reference");
    assert_eq!(cpu.len(), 2);
    assert!(cpu
        .iter()
        .all(|r| r["n_ubatch"].is_null() && r["device_bytes"].is_null()));
    for r in &rows {
        let n = r["n_prompt"].as_f64().unwrap();
        assert_eq!(r["test"], format!("pp{n}"));
        let secs: Vec<f64> = r["samples_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let ts: Vec<f64> = r["samples_ts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(secs.len(), 2, "{r}");
        for (s, t) in secs.iter().zip(&ts) {
            assert!(*s > 0.0 && (t - n / s).abs() <= 1e-9 * t, "{r}");
        }
        let mean = ts.iter().sum::<f64>() / ts.len() as f64;
        let sd = ((ts[0] - mean).powi(2) + (ts[1] - mean).powi(2)).sqrt();
        assert!(
            (r["avg_ts"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean,
            "{r}"
        );
        assert!(
            (r["stddev_ts"].as_f64().unwrap() - sd).abs() <= 1e-9 * mean.max(1.0),
            "{r}"
        );
    }

    // The markdown table: llama-bench's header (as in the snapshot) and one line per row.
    let o = rocky(&[
        "bench",
        &m,
        "-p",
        "8",
        "-ub",
        "8",
        "-r",
        "1",
        "--db",
        db_s,
        "--md",
        "--backends",
        "tuned,default",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let snapshot = include_str!("snapshots/bench-table.md");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], snapshot.lines().take(2).collect::<Vec<_>>()[..]);
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[2].contains("| Vulkan tuned |") && lines[2].contains("| pp8 |"),
        "{out}"
    );
    std::fs::remove_dir_all(&db).ok();
}

#[test]
fn bench_rejects_bad_arguments_with_usage_errors() {
    let m = model();
    for (args, needle) in [
        (vec!["-ub", "0"], "-ub 0 is out of range"),
        (vec!["-p", "0"], "prompt lengths must be at least 1"),
        (vec!["-r", "0"], "-r must be at least 1"),
    ] {
        let mut all = vec!["bench", m.as_str()];
        all.extend(args);
        let o = rocky(&all);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(needle), "{}", text(&o));
    }
    let o = rocky(&["bench", "/nonexistent/model.gguf"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
}
