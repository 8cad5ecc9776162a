//! Attention on Mali's real compiler (Mesa 25.0.7 panvk over the drm-shim, x86): the default
//! schedule of each model shape (the key-split kernel) compiles without spilling, costs fewer
//! load/store cycles per (row, key) than its row-wise twin, and the fact behind avoiding
//! shuffles holds: the driver compiles each subgroup shuffle into a loop of its own, and the
//! shuffle-reduced row-wise twin spills.
//!
//! Both numbers come from the driver's compiler itself (`BIFROST_MESA_DEBUG=shaderdb` on
//! stderr), nothing is run. Skips with a notice when the shim is absent (a failure in CI and
//! in `tools/test.sh --mali`).

mod common;

use common::shaderdb::shaderdb_numbers;
use common::text;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 attention statistics")
}

/// Compiles one attention pipeline on the shim (`schedule` None: the device's default) and
/// returns the schedule it used and the compiler's shaderdb numbers.
fn compile(
    prefix: &Path,
    scratch: &Path,
    workload: &str,
    schedule: Option<&str>,
) -> (Value, BTreeMap<String, f64>) {
    let mut args = vec!["kernel", "--workload", workload, "--stats", "--json"];
    if let Some(s) = schedule {
        args.extend(["--schedule", s]);
    }
    let out = Command::new("sh")
        .arg(prefix.join("run.sh"))
        .arg(prefix)
        .arg(env!("CARGO_BIN_EXE_rocky"))
        .args(&args)
        .env("XDG_RUNTIME_DIR", scratch)
        .env("XDG_CACHE_HOME", scratch.join("cache"))
        .env("BIFROST_MESA_DEBUG", "shaderdb")
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env_remove("MESA_VK_VERSION_OVERRIDE")
        .output()
        .expect("rocky kernel under the shim");
    let log = text(&out);
    assert!(out.status.success(), "{workload}:\n{log}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("kernel JSON");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("MESA_SHADER_COMPUTE shader:"))
        .collect();
    assert_eq!(lines.len(), 1, "one pipeline, one shader: {log}");
    (report["schedule"].clone(), shaderdb_numbers(lines[0]))
}

#[test]
fn default_attention_does_not_spill_on_panvk_and_shuffles_are_loops_there() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-attn-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("cache")).unwrap();
    // Qwen2.5-0.5B, Qwen2.5-3B and Gemma 3 270M shapes (head_dim 64, 128, 256).
    for workload in [
        r#"{"attention":{"m":512,"n_heads":14,"n_kv_heads":2,"head_dim":64,"max_kv":512}}"#,
        r#"{"attention":{"m":512,"n_heads":16,"n_kv_heads":2,"head_dim":128,"max_kv":512}}"#,
        r#"{"attention":{"m":512,"n_heads":4,"n_kv_heads":1,"head_dim":256,"max_kv":512}}"#,
    ] {
        let (schedule, default) = compile(&prefix, &scratch, workload, None);
        println!("{workload}: default {schedule} -> {default:?}");
        assert_eq!(
            (default["spills"], default["fills"]),
            (0.0, 0.0),
            "{workload}: the default {schedule} spills on panvk"
        );
        let a = &schedule["attention"];
        assert!(
            a["lane_rows"].as_u64().unwrap_or(0) > 0,
            "{schedule}: panvk's default is the key-split kernel"
        );
        let lanes = a["threads_per_row"].as_u64().unwrap();
        let kv_block = a["kv_block"].as_u64().unwrap();
        // Its row-wise twin (the lanes split head_dim, 8-key blocks, partial sums through
        // shared memory) costs more load/store cycles per (row, key) where the key-split
        // kernel's score loop is unrolled whole (one loop: head_dim 64; beyond, its rolled
        // loop is counted once and the comparison would flatter it).
        let mut rowwise = schedule.clone();
        rowwise["attention"]
            .as_object_mut()
            .unwrap()
            .remove("lane_rows");
        rowwise["attention"]["kv_block"] = 8.into();
        let (_, row) = compile(&prefix, &scratch, workload, Some(&rowwise.to_string()));
        println!("{workload}: row-wise {rowwise} -> {row:?}");
        if default["loops"] == 1.0 {
            let per_row_key = |ls: f64, kv: u64| ls * lanes as f64 / kv as f64;
            assert!(
                per_row_key(default["ls"], kv_block) < per_row_key(row["ls"], 8),
                "{workload}: key-split {default:?} against row-wise {row:?}"
            );
        }
        // The row-wise twin reducing its lanes by subgroup shuffles: each shuffle is a loop
        // of its own (8 keys × log2(lanes) shuffles, beside the key-block loop), and the
        // registers they hold spill: why panvk's defaults never shuffle.
        let mut shuffled = rowwise.clone();
        shuffled["attention"]["lane_reduce"] = "shuffle".into();
        let (_, twin) = compile(&prefix, &scratch, workload, Some(&shuffled.to_string()));
        println!("{workload}: shuffled {shuffled} -> {twin:?}");
        let shuffles = 8 * u64::from(lanes.trailing_zeros());
        assert!(
            twin["loops"] >= row["loops"] + shuffles as f64,
            "{workload}: {} loops with shuffles against {} without ({shuffles} shuffles)",
            twin["loops"],
            row["loops"]
        );
        assert!(
            twin["spills"] > 0.0,
            "{workload}: the shuffle reduction no longer spills: {twin:?}"
        );
    }
    std::fs::remove_dir_all(&scratch).ok();
}
