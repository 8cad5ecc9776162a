//! `rocky tune` stores nothing unchecked and tunes devices without timestamps, end to end on
//! lavapipe with the tiny Q8_0 Qwen2: host timing forced by `ROCKY_HOST_TIMING=1` (what a
//! device without timestamps gets), every graph candidate's logits corrupted by the hidden
//! `--inject-faults graph_logits@N` so no graph choice may be stored; and `prefill --profile`
//! without timestamps reports the host's side instead of failing.

mod common;

use common::{rocky, shared, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn model() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `rocky args` with host timing forced, never with the user's database.
fn rocky_host_timed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env_remove("ROCKY_DB")
        .env("ROCKY_HOST_TIMING", "1")
        .output()
        .expect("rocky runs")
}

fn ok_json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn host_timed_tune_stores_checked_kernels_and_no_corrupted_graph_choice() {
    let dir = std::env::temp_dir().join(format!("rocky-cli-unchecked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("t.sled");
    // Every candidate default_candidates can make (at most 36: 9 settings, gate/up separate
    // and fused, ubatches one or two at a time) is corrupted.
    let faults: Vec<String> = (1..=36).map(|n| format!("graph_logits@{n}")).collect();
    let out = rocky_host_timed(&[
        "tune",
        s(&model()),
        "--ubatch",
        "16",
        "--trials",
        "2",
        "--workload",
        "n=128",
        "--graph-time",
        "3",
        "--inject-faults",
        &faults.join(","),
        "--db",
        s(&db),
        "--json",
    ]);
    let v = ok_json(&out);
    let log = text(&out);
    // Kernel trials: timed by the host, checked, positive.
    assert_eq!(v["timing"], "host", "{log}");
    assert!(log.contains("host clock"), "{log}");
    assert!(log.contains("(host-timed)"), "{log}");
    for w in v["workloads"].as_array().unwrap() {
        assert_eq!(w["timing"], "host", "{w}");
        let best = w["best_ms"].as_f64().expect("a checked best");
        assert!(best > 0.0, "{w}");
    }
    // Graph step: the device check passed, every timed candidate failed its check.
    let step = &v["graph_step"];
    assert_eq!(step["cpu_check"]["passed"], true, "{step:#}");
    let trials = step["trials"].as_array().unwrap();
    assert!(!trials.is_empty(), "{step:#}");
    for t in trials {
        assert_eq!(t["passed"], false, "{t}");
        assert!(
            t["failure"].as_str().unwrap().starts_with("[injected]"),
            "{t}"
        );
    }
    assert_eq!(v["graph"], Value::Null, "{log}");
    assert!(log.contains("nothing stored"), "{log}");
    // Nothing in the database, and prefill does not take a graph choice from it.
    let list = rocky(&["db", "list", "--db", s(&db)]);
    assert!(list.status.success(), "{}", text(&list));
    assert!(!text(&list).contains("graph choice"), "{}", text(&list));
    let prefill = ok_json(&rocky(&[
        "prefill",
        s(&model()),
        "--prompt",
        "hello",
        "--db",
        s(&db),
        "--json",
    ]));
    assert_eq!(prefill["ubatch_origin"], "default", "{prefill:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn profile_without_timestamps_shows_the_host_side() {
    let out = rocky_host_timed(&[
        "prefill",
        s(&model()),
        "--prompt",
        "hello world",
        "--db",
        "/nonexistent/rocky.sled",
        "--profile",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("per-op GPU times need timestamps"), "{log}");
    assert!(log.contains("waiting for the GPU"), "{log}");
    assert!(!log.contains("GFLOP/s"), "no per-op table: {log}");
    let v = ok_json(&rocky_host_timed(&[
        "prefill",
        s(&model()),
        "--prompt",
        "hello world",
        "--db",
        "/nonexistent/rocky.sled",
        "--profile",
        "--json",
    ]));
    assert_eq!(v["profile"], Value::Null);
    assert_eq!(v["profile_timing"], "host");
    assert!(v["stats"]["wall_seconds"].as_f64().unwrap() > 0.0, "{v:#}");
}
