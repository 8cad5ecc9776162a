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

/// `rocky predict … --json` of the tiny model at 40 tokens, ubatch 32, with `extra` flags.
fn predict_tiny(db: &std::path::Path, extra: &[&str]) -> Value {
    let m = tiny();
    let mut args = vec![
        "predict",
        m.to_str().unwrap(),
        "-p",
        "40",
        "-ub",
        "32",
        "--decode",
        "0",
        "--json",
        "--db",
        db.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = rocky(&args);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tok_s(p: &Value) -> f64 {
    p["prefill"]["result"]["tok_per_s"].as_f64().unwrap()
}

/// A figure measured on a device becomes a calibration in the tuning database; `rocky db
/// export` carries it and `rocky db import` gives it to another database, where `rocky predict`
/// on the same device uses it (and reproduces the figure) instead of the built-in fit, naming
/// it; `--calibration builtin` still gives the built-in prediction. A malformed calibration
/// line fails the import with its line and field named, and imports nothing.
#[test]
fn a_measured_figure_becomes_a_calibration_that_export_carries_and_predict_uses() {
    let dir = scratch("calibration");
    let (board, other) = (dir.join("board.sled"), dir.join("other.sled"));
    // No database yet: the built-in constants, said so; nothing is created by reading.
    let builtin = predict_tiny(&board, &[]);
    assert_eq!(builtin["calibration"]["source"], "builtin");
    assert!(!board.exists());
    let before = tok_s(&builtin);
    // A "measured" figure a third of the prediction: the fit starts from the built-in
    // constants, so its "before" is the prediction above (an independent run).
    let measured = before / 3.0;
    let m = format!("{measured}");
    let fitted = predict_tiny(
        &board,
        &[
            "--fit-pp",
            &m,
            "--fit",
            "auto",
            "--save-calibration",
            "--measured-by",
            "a test's stand-in figure",
        ],
    );
    assert_eq!(fitted["calibration"]["source"], "fit_saved");
    let fit_before = fitted["fit"]["predicted_before_tok_s"].as_f64().unwrap();
    assert!(
        (fit_before - before).abs() <= 1e-9 * before,
        "{fit_before} vs {before}"
    );
    assert!((tok_s(&fitted) - measured).abs() <= 1e-6 * measured);
    let record = &fitted["calibration"]["record"];
    assert_eq!(record["measured_tok_s"].as_f64().unwrap(), measured);
    assert_eq!(record["predicted_tok_s"].as_f64().unwrap(), fit_before);
    assert_eq!(record["ubatch"], 32);
    assert_eq!(record["n_prompt"], 40);
    assert_eq!(record["model"], "qwen2-tiny-q4_k_m.gguf");
    assert_eq!(record["measured_by"], "a test's stand-in figure");
    // Slower than predicted: the efficiency is what is fitted, 1/3 of the built-in one where
    // every dispatch is compute-bound at both.
    assert_eq!(record["fitted"], "efficiency");

    // Export from the board's database, import into another.
    let file = dir.join("board.jsonl");
    let out = rocky(&[
        "db",
        "export",
        "-o",
        file.to_str().unwrap(),
        "--db",
        board.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1 cost-model calibrations"),
        "{}",
        text(&out)
    );
    let exported = std::fs::read_to_string(&file).unwrap();
    assert_eq!(exported.lines().count(), 1, "{exported}");
    let line: Value = serde_json::from_str(exported.trim()).unwrap();
    assert_eq!(line["format"], "rocky-calibration");
    assert_eq!(&line["calibration"], record);
    let out = rocky(&[
        "db",
        "import",
        file.to_str().unwrap(),
        "--db",
        other.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("cost-model calibrations: 1 new"),
        "{}",
        text(&out)
    );
    // Same device and driver: the imported calibration is used, named, and reproduces the
    // figure it was fitted to.
    let used = predict_tiny(&other, &[]);
    assert_eq!(used["calibration"]["source"], "database");
    assert_eq!(&used["calibration"]["record"], record);
    assert!(used["calibration"]["text"]
        .as_str()
        .unwrap()
        .contains("a test's stand-in figure"));
    assert!((tok_s(&used) - measured).abs() <= 1e-6 * measured);
    // The built-in fit on request gives the built-in prediction back.
    let again = predict_tiny(&other, &["--calibration", "builtin"]);
    assert_eq!(again["calibration"]["source"], "builtin");
    assert!((tok_s(&again) - before).abs() <= 1e-9 * before);

    // A malformed calibration (a figure that is not a number): refused, named, nothing stored.
    let mut bad = line.clone();
    bad["calibration"]["measured_tok_s"] = "fast".into();
    let bad_file = dir.join("bad.jsonl");
    std::fs::write(&bad_file, format!("\n{bad}\n")).unwrap();
    let third = dir.join("third.sled");
    let out = rocky(&[
        "db",
        "import",
        bad_file.to_str().unwrap(),
        "--db",
        third.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("bad.jsonl, line 2"), "{t}");
    assert!(t.contains("measured_tok_s"), "{t}");
    assert!(t.contains("nothing was imported"), "{t}");
    assert!(!t.contains("panicked"), "{t}");
    assert_eq!(
        predict_tiny(&third, &[])["calibration"]["source"],
        "builtin"
    );

    // Storing needs a measured figure and a device of its own.
    let out = rocky(&["predict", tiny().to_str().unwrap(), "--save-calibration"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// A made-up final-code listing of a mul_mmq-shaped shader (an outer loop holding three loops)
/// with its statistics after it, as BIFROST_MESA_DEBUG=shaders and GGML_VK_PIPELINE_STATS=1
/// print them: load/store instructions 1 before the loop, 1 + 2 + 3 + 5 in it, 7 after.
const SHADER_DUMP: &str = "\
shader: MESA_SHADER_COMPUTE
block0 {
        r0 = LOAD.i32 r1, offset:0
} -> block1  from
block1 {
        r0 = LOAD.i32 r1, offset:0
        BRANCHZ.i16.eq r0.h00, u256 -> block6
} -> block6 block2  from block0 block5
block2 {
        r0 = LOAD.i32 r1, offset:0
        STORE.i32 r0, r1, offset:0
        BRANCHZ.i16.eq r0.h00, u256 -> block2
} -> block2 block3  from block1 block2
block3 {
        r0 = LOAD.i32 r1, offset:0
        r0 = LD_PKA.i32 r1, offset:0
        r0 = LEA_PKA r1, u2
        BRANCHZ.i16.eq r0.h00, u256 -> block3
} -> block3 block4  from block2 block3
block4 {
        r0 = LOAD.i32 r1, offset:0
        r0 = LOAD.i32 r1, offset:0
        r0 = LOAD.i32 r1, offset:0
        r0 = LOAD.i32 r1, offset:0
        r0 = LOAD.i32 r1, offset:0
        r0 = IDPADD.s32 r0, r1, r2
        BRANCHZ.i16.eq r0.h00, u256 -> block4
} -> block4 block5  from block3 block4
block5 {
        BRANCHZ.i16.eq u256, u256 -> block1
} -> block1  from block4
block6 {
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
        STORE.i32 r0, r1, offset:0
}
   LOAD.i32 r0, r1, offset:0
   NOP.end
ggml_vulkan: pipeline stats for matmul_q4_k_q8_1_1:
ggml_vulkan:   Instructions: 25
ggml_vulkan:   Cycles: 19
ggml_vulkan:   FMA: 0.1
ggml_vulkan:   CVT: 0.1
ggml_vulkan:   SFU: 0.1
ggml_vulkan:   Load/store: 19
ggml_vulkan:   Threads: 1
ggml_vulkan:   Loops: 4
ggml_vulkan:   Spills: 0
";

/// `--shader-dump` weights mul_mmq's loops by their trips: at ubatch 64 (the m tile: 128
/// threads, 64 x 64) the A-load loop runs 64 / (128 x 8 / 32) = 2 times, the B-load loop
/// 64 / (128 x 16 / 32) = 1, the k-step loop 4, per trip of the outer loop, which runs K / 128
/// times: for K = 1024, (8 x (2x2 + 1x3 + 4x5 + 1) + (1 + 7)) / 19 = 232 / 19, where the whole
/// shader weighted by K / 32 gives 32. A listing whose counts are not its statistics' is not
/// used (the encoded disassembly after the last block is no block's).
#[test]
fn llama_cpps_matmul_loops_are_weighted_by_their_trips_from_the_drivers_code() {
    let Some(py) = python() else { return };
    let dir = scratch("loops");
    let dump = dir.join("dump.log");
    std::fs::write(&dump, SHADER_DUMP).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/llama_predict.py");
    let shape = r#"{"hidden":1024,"layers":1,"heads":8,"kv_heads":8,"head_dim":128,"ffn":2048,"vocab":1000}"#;
    let run = |extra: &[&str]| -> Value {
        let list = dir.join("list.json");
        let out = std::process::Command::new(py)
            .arg(&script)
            .args(["--stats", dump.to_str().unwrap(), "--shape", shape])
            .args(["-p", "64", "--ubatch", "64", "-o", list.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&std::fs::read(&list).unwrap()).unwrap()
    };
    let attn_q = |l: &Value| -> f64 {
        l["dispatches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["op"] == "attn_q")
            .unwrap()["loop_factor"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(attn_q(&run(&[])), 32.0);
    let weighted = run(&["--shader-dump", dump.to_str().unwrap()]);
    assert!(
        (attn_q(&weighted) - 232.0 / 19.0).abs() < 1e-12,
        "{weighted}"
    );
    // FFN down: K = 2048, 16 outer trips: (16 x 28 + 8) / 19.
    let down = weighted["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["op"] == "ffn_down")
        .unwrap()["loop_factor"]
        .as_f64()
        .unwrap();
    assert!((down - 456.0 / 19.0).abs() < 1e-12, "{down}");
    // Statistics that do not match the listing: the listing is not used.
    let wrong = dir.join("wrong.log");
    std::fs::write(
        &wrong,
        SHADER_DUMP.replace("Load/store: 19", "Load/store: 20"),
    )
    .unwrap();
    let l = run(&["--shader-dump", wrong.to_str().unwrap()]);
    assert_eq!(attn_q(&l), 32.0);
    std::fs::remove_dir_all(dir).ok();
}

/// The built-in constant reproduces the figure it was fitted to from the committed list.
#[test]
fn the_built_in_calibration_reproduces_the_seed_figure_from_its_list() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "docs/measurements/2026-12-06-predict-calibration-data/llama-3b-pp512-ub64-loops.json",
    );
    let out = rocky(&[
        "predict",
        "--dispatches",
        list.to_str().unwrap(),
        "--calibration",
        "builtin",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tps = p["prefill"]["result"]["tok_per_s"].as_f64().unwrap();
    // SEED_LS_RATE is rounded to 5 digits: within 0.01 %.
    assert!((tps - 21.0).abs() < 21.0e-4, "{tps}");
}
