//! `rocky predict`: the Mali cost model end to end.
//! - Its dispatch list is the executor's: on the default device (lavapipe here) the predicted
//!   prefill has, per (op, kernel), as many dispatches as `rocky prefill --profile` records
//!   (the executor's own log of what it dispatched: an independent count).
//! - A dispatch list from a file is costed in closed form (cycles × invocations × loops / cores
//!   / clock / efficiency against bytes / bandwidth, plus fixed costs), and `--fit-pp` finds the
//!   per-dispatch cost that reproduces the figure it is given.
//! - Bad input is a clear error, never a panic.

mod common;

use common::{rocky, shared, text};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn tiny() -> std::path::PathBuf {
    shared().join("models/qwen2-tiny-q4_k_m.gguf")
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rocky-predict-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_predicted_prefill_dispatches_what_the_executor_dispatches() {
    let m = tiny();
    let m = m.to_str().unwrap();
    let ids: Vec<String> = (0..70).map(|i| (i + 10).to_string()).collect();
    let ids = ids.join(",");
    // 70 tokens at ubatch 32: two full ubatches and a partial one.
    let out = rocky(&[
        "prefill",
        m,
        "--token-ids",
        &ids,
        "-ub",
        "32",
        "--profile",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let prefill: Value = serde_json::from_slice(&out.stdout).unwrap();
    if prefill["profile_timing"] != "gpu" {
        eprintln!("skipped: the default device has no GPU timestamps, so no per-dispatch log");
        return;
    }
    let mut profiled: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in prefill["profile"].as_array().unwrap() {
        *profiled
            .entry((
                r["op"].as_str().unwrap().into(),
                r["kernel"].as_str().unwrap().into(),
            ))
            .or_default() += r["calls"].as_f64().unwrap();
    }
    let out = rocky(&[
        "predict", m, "-p", "70", "-ub", "32", "--decode", "0", "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["prediction"], true);
    let mut predicted: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in p["prefill"]["result"]["rows"].as_array().unwrap() {
        *predicted
            .entry((
                r["op"].as_str().unwrap().into(),
                r["kernel"].as_str().unwrap().into(),
            ))
            .or_default() += r["calls"].as_f64().unwrap();
    }
    assert_eq!(predicted, profiled);
    assert_eq!(p["prefill"]["result"]["tokens"], 70.0);
}

#[test]
fn a_dispatch_list_is_costed_in_closed_form_and_fitted_exactly() {
    let dir = scratch("list");
    let list = json!({
        "name": "two kernels",
        "statistics": "made up",
        "tokens": 100.0,
        "submits": 2.0,
        "dispatches": [
            // 1e6 invocations x 8 cycles x 5 loop repeats / 4 cores / 1 GHz = 10 ms compute.
            {"op": "a", "kernel": "ka", "count": 3.0, "invocations": 1.0e6, "cycles": 8.0,
             "loop_factor": 5.0, "bytes": 1.0e3, "occupancy": 1.0, "spills": 0.0, "flops": 0.0},
            // 54 MB at 27 GB/s = 2 ms memory.
            {"op": "b", "kernel": "kb", "count": 1.0, "invocations": 10.0, "cycles": 1.0,
             "loop_factor": 1.0, "bytes": 54.0e6, "occupancy": null, "spills": 0.0, "flops": 0.0}
        ]
    });
    let path = dir.join("list.json");
    std::fs::write(&path, list.to_string()).unwrap();
    let path = path.to_str().unwrap();
    let out = rocky(&[
        "predict",
        "--dispatches",
        path,
        "--efficiency",
        "1",
        "--dispatch-us",
        "100",
        "--submit-us",
        "1000",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 3 x 10 ms + 2 ms + 4 x 0.1 ms + 2 x 1 ms = 34.4 ms for 100 tokens.
    let total = p["prefill"]["result"]["total_s"].as_f64().unwrap();
    assert!((total - 0.0344).abs() < 1e-9, "{total}");
    let tps = p["prefill"]["result"]["tok_per_s"].as_f64().unwrap();
    assert!((tps - 100.0 / 0.0344).abs() < 1e-6);
    // Fitting the per-dispatch cost to 2500 tok/s (40 ms): (40 - 32) ms over 4 dispatches.
    let out = rocky(&[
        "predict",
        "--dispatches",
        path,
        "--fit-pp",
        "2500",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let eff = p["constants"]["efficiency"].as_f64().unwrap();
    let dispatch = p["constants"]["dispatch_s"].as_f64().unwrap();
    // The priors' efficiency stays: compute is 30 ms / eff.
    let expected = (0.040 - (0.030 / eff + 0.002)) / 4.0;
    assert!(
        (dispatch - expected).abs() < 1e-12,
        "{dispatch} vs {expected}"
    );
    let tps = p["prefill"]["result"]["tok_per_s"].as_f64().unwrap();
    assert!((tps - 2500.0).abs() < 1e-6, "{tps}");
    assert!(p["constants"]["fitted"]
        .as_str()
        .unwrap()
        .contains("two kernels"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = scratch("bad");
    let missing = dir.join("missing.json");
    let out = rocky(&["predict", "--dispatches", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("missing.json"), "{}", text(&out));
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "{\"tokens\": 1}").unwrap();
    let out = rocky(&["predict", "--dispatches", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("not a dispatch list"), "{}", text(&out));
    let out = rocky(&["predict"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rocky(&["predict", tiny().to_str().unwrap(), "--clock-mhz", "-5"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rocky(&["predict", "/nonexistent/model.gguf"]);
    assert!(!out.status.success());
    assert!(!text(&out).contains("panicked"), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// Statistics lines as llama.cpp prints them with GGML_VK_PIPELINE_STATS=1 (values of Debian's
/// llama.cpp 0.7.0 on Mesa 26.1.6, docs/measurements/2026-12-05d-mali-predict.md).
const LLAMA_STATS: &str = "\
ggml_vulkan: pipeline stats for matmul_q4_k_q8_1_1:
ggml_vulkan:   Cycles: 285
ggml_vulkan:   FMA: 5.8125
ggml_vulkan:   CVT: 21.1719
ggml_vulkan:   SFU: 21.0625
ggml_vulkan:   Load/store: 285
ggml_vulkan:   Threads: 1
ggml_vulkan:   Spills: 25
ggml_vulkan:   Registers used: 64
ggml_vulkan: pipeline stats for quantize_q8_1_x4:
ggml_vulkan:   Cycles: 7.625
ggml_vulkan:   Load/store: 5
ggml_vulkan:   Threads: 1
";

fn python() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: no python3 for tools/llama_predict.py");
    }
    ok.then_some("python3")
}

#[test]
fn llama_cpps_dispatch_list_has_its_graphs_dispatches_and_costs_its_shaders() {
    let Some(py) = python() else { return };
    let dir = scratch("llama");
    let stats = dir.join("stats.log");
    std::fs::write(&stats, LLAMA_STATS).unwrap();
    let list = dir.join("list.json");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/llama_predict.py");
    let out = std::process::Command::new(py)
        .arg(&script)
        .args(["--stats", stats.to_str().unwrap()])
        .args(["--model", tiny().to_str().unwrap()])
        .args(["-p", "100", "--ubatch", "64", "-o", list.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let l: Value = serde_json::from_slice(&std::fs::read(&list).unwrap()).unwrap();
    // The tiny Qwen2 (4 layers, biases): per layer and ubatch 23 dispatches (norm, 4 quantizes
    // + 6 matmuls, 3 bias adds, 2 RoPEs, the V cache write, attention, 2 residual adds, the ffn
    // norm, SwiGLU: 1 + 4 + 6 + 3 + 2 + 1 + 1 + 2 + 1 + 1 + 1 = 23), the embedding per ubatch,
    // the output norm and projection once.
    let n: f64 = l["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["count"].as_f64().unwrap())
        .sum();
    assert_eq!(n, 2.0 * (4.0 * 23.0 + 1.0) + 2.0);
    assert_eq!(l["tokens"], 100.0);
    // A matmul carries the driver's figures; Q6_K's, absent here, is stood in by Q4_K's, said so.
    let mm = l["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kernel"] == "matmul_q4_k_q8_1_1")
        .expect("a Q4_K matmul");
    assert_eq!(mm["cycles"], 285.0);
    assert_eq!(mm["pipes"][3], 285.0);
    assert_eq!(mm["occupancy"], 0.5);
    assert!(l["statistics"].as_str().unwrap().contains("stand-ins"));
    let out = rocky(&["predict", "--dispatches", list.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["prefill"]["result"]["dispatches"], n);
    // Bad input: a log without statistics is refused by name.
    std::fs::write(&stats, "nothing here\n").unwrap();
    let out = std::process::Command::new(py)
        .arg(&script)
        .args(["--stats", stats.to_str().unwrap()])
        .args([
            "--model",
            tiny().to_str().unwrap(),
            "-o",
            list.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("GGML_VK_PIPELINE_STATS"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}
