//! End to end on Mesa 25.0.7's panvk (Debian 13's driver, Vulkan 1.1) through the mali-shim
//! (shared/tools/mali-shim): `rocky devices` reports the Mali usable with the features the driver
//! itself reports (vulkaninfo under the same shim is the independent witness), `rocky doctor`
//! does not fail it and says it has no timestamps, and a prefill compiles its SPIR-V 1.3
//! kernels in panvk's real compiler, records and submits, without MESA_VK_VERSION_OVERRIDE.
//!
//! Nothing executes under the shim, so results are not checked. Skips with a notice when the
//! shim is not installed (`bash shared/tools/mali-shim/build.sh`; ROCKY_MALI_SHIM names
//! another prefix).

mod common;

use common::{shared, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The installed shim prefix, or `None` after recording the skip (a failure where the Mali
/// tier is required).
fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 Vulkan 1.1")
}

/// Runs `program args` on the shim's panvk with fresh runtime and cache directories (so every
/// pipeline really goes through panvk's compiler) and the stock API version.
fn on_shim(prefix: &Path, program: &str, args: &[&str], scratch: &Path) -> Output {
    let runtime_dir = scratch.join("runtime");
    let cache_dir = scratch.join("cache");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    std::fs::create_dir_all(&cache_dir).unwrap();
    Command::new("sh")
        .arg(prefix.join("run.sh"))
        .arg(prefix)
        .arg(program)
        .args(args)
        .env("XDG_RUNTIME_DIR", &runtime_dir)
        .env("XDG_CACHE_HOME", &cache_dir)
        .env_remove("MESA_VK_VERSION_OVERRIDE")
        .env_remove("ROCKY_DB")
        .output()
        .unwrap_or_else(|e| panic!("running {program} under the shim: {e}"))
}

/// The first `name = value` line of vulkaninfo's text output.
fn vulkaninfo_value<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == name).then(|| value.trim())
    })
}

#[test]
fn panvk_25_0_7_is_usable_and_prefill_records_and_submits() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-shim-{}", std::process::id()));
    let rocky = env!("CARGO_BIN_EXE_rocky");

    let out = on_shim(&prefix, rocky, &["devices", "--json"], &scratch);
    assert!(out.status.success(), "{}", text(&out));
    let devices: Value = serde_json::from_slice(&out.stdout).expect("devices JSON");
    let mali = &devices[0];
    assert_eq!(mali["usable_api_version"], "1.1", "{mali:#}");
    assert_eq!(mali["driver"]["id"], "MESA_PANVK", "{mali:#}");

    // The driver's own report, through the same shim.
    let vi = on_shim(&prefix, "vulkaninfo", &[], &scratch);
    if vi.status.success() {
        let info = String::from_utf8_lossy(&vi.stdout);
        let api = vulkaninfo_value(&info, "apiVersion").expect("apiVersion");
        assert!(
            api.starts_with(mali["api_version"].as_str().unwrap()),
            "{api}"
        );
        assert_eq!(
            vulkaninfo_value(&info, "driverID"),
            Some("DRIVER_ID_MESA_PANVK")
        );
        for (vk_name, ours) in [
            ("shaderFloat16", "shader_float16"),
            ("shaderInt8", "shader_int8"),
            ("storageBuffer16BitAccess", "storage_buffer_16bit_access"),
            ("storageBuffer8BitAccess", "storage_buffer_8bit_access"),
            ("subgroupSizeControl", "subgroup_size_control"),
        ] {
            let theirs = vulkaninfo_value(&info, vk_name).unwrap_or("false") == "true";
            assert_eq!(
                mali["features"][ours].as_bool(),
                Some(theirs),
                "{vk_name}: vulkaninfo says {theirs}"
            );
        }
    } else {
        eprintln!("vulkaninfo unavailable: feature flags not cross-checked");
    }

    let out = on_shim(&prefix, rocky, &["devices"], &scratch);
    let devices_text = text(&out);
    assert!(!devices_text.contains("NOT USABLE"), "{devices_text}");
    assert!(devices_text.contains("SPIR-V 1.3"), "{devices_text}");

    let out = on_shim(&prefix, rocky, &["doctor", "--json"], &scratch);
    let checks: Value = serde_json::from_slice(&out.stdout).expect("doctor JSON");
    let device = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "device-0")
        .expect("a device-0 check");
    assert_ne!(device["status"], "fail", "{device:#}");
    assert!(
        device["detail"].as_str().unwrap().contains("timestamps no"),
        "{device:#}"
    );

    let model = shared().join("models/qwen2-tiny-q8_0.gguf");
    assert!(
        model.exists(),
        "{} missing: run tools/prepare-test-assets.sh",
        model.display()
    );
    let long_prompt = "The quick brown fox jumps over the lazy dog while five boxing wizards \
                       jump quickly";
    for prompt in ["hello world", long_prompt] {
        let args = [
            "prefill",
            model.to_str().unwrap(),
            "--prompt",
            prompt,
            "--ubatch",
            "16",
        ];
        let out = on_shim(&prefix, rocky, &args, &scratch);
        assert!(out.status.success(), "{prompt}: {}", text(&out));
        assert!(text(&out).contains("Gpu backend"), "{}", text(&out));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Nothing executes under the shim and panvk 25.0.7 has no timestamps: `rocky tune` must time
/// kernels by the host clock, find that no result matches the CPU reference, and store no
/// kernel winner and no graph choice (before the check it stored a ~47000 tok/s "winner").
#[test]
fn panvk_25_0_7_tune_stores_nothing_it_cannot_check() {
    let Some(prefix) = shim_prefix() else { return };
    let model = shared().join("models/qwen2-tiny-q8_0.gguf");
    assert!(
        model.exists(),
        "{} missing: run tools/prepare-test-assets.sh",
        model.display()
    );
    let scratch = std::env::temp_dir().join(format!("rocky-mali-shim-tune-{}", std::process::id()));
    let db = scratch.join("t.sled");
    let rocky = env!("CARGO_BIN_EXE_rocky");
    let args = [
        "tune",
        model.to_str().unwrap(),
        "--ubatch",
        "16",
        "--trials",
        "2",
        "--time",
        "20",
        "--graph-time",
        "10",
        "--db",
        db.to_str().unwrap(),
    ];
    let out = on_shim(&prefix, rocky, &args, &scratch);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("has no GPU timestamps"), "{log}");
    assert!(
        log.contains("results do not match the CPU reference") && log.contains("nothing stored"),
        "{log}"
    );
    assert!(!log.contains("`rocky prefill` uses it"), "{log}");
    // The database, read without the shim: failed kernel trials only, no graph choice.
    let list = common::rocky(&["db", "list", "--db", db.to_str().unwrap()]);
    let listed = text(&list);
    assert!(list.status.success(), "{listed}");
    assert!(!listed.contains("graph choice"), "{listed}");
    let json = common::rocky(&["db", "list", "--db", db.to_str().unwrap(), "--json"]);
    let records: Value = serde_json::from_slice(&json.stdout).expect("db list JSON");
    let records = records.as_array().unwrap();
    assert!(!records.is_empty(), "{listed}");
    for r in records {
        assert_eq!(
            r["best_schedule"],
            Value::Null,
            "an unchecked kernel winner: {r}"
        );
    }
    // Every trial keeps the driver's statistics of its pipeline (panvk 25.0.7 reports its code
    // size through VK_KHR_pipeline_executable_properties).
    let export = scratch.join("all.jsonl");
    let out = common::rocky(&[
        "db",
        "export",
        "--all-trials",
        "--db",
        db.to_str().unwrap(),
        "-o",
        export.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let lines = std::fs::read_to_string(&export).unwrap();
    let mut trials = 0;
    for line in lines.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        for t in v["trials"].as_array().into_iter().flatten() {
            // Trials that failed before the driver compiled them have none.
            if t["trial"]["status"]["failed"]["kind"] != "mismatch" {
                continue;
            }
            let size = t["trial"]["driver_stats"]["Code Size"].as_f64();
            assert!(
                size > Some(0.0),
                "a trial without the driver's statistics: {t}"
            );
            trials += 1;
        }
    }
    assert!(trials > 0, "{lines}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The command-buffer budget's model of panvk's shared-memory allocation against the driver's
/// own (PANVK_OOM_TRACE=1 logs "... = N B per dispatch" for each change): for staged GEMM
/// schedules over grids of several shapes, rocky's estimate is never below what 25.0.7
/// allocates (with the driver's formula it is equal).
#[test]
fn the_budget_estimates_panvk_25_shared_memory_at_least_as_high_as_the_driver() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-wls-{}", std::process::id()));
    let rocky = env!("CARGO_BIN_EXE_rocky");
    let staged = |bm: u32, bn: u32, bk: u32, tm: u32, tn: u32, stage_b: bool| {
        format!(
            r#"{{"gemm":{{"bm":{bm},"bn":{bn},"bk":{bk},"tm":{tm},"tn":{tn},"split_k":1,"vector_width":1,"stage_a":true,"stage_b":{stage_b},"accumulate":"f32","math":"fma_f32"}}}}"#
        )
    };
    let cases = [
        ("512", "2048", staged(32, 64, 32, 2, 4, true)),
        ("512", "2048", staged(16, 32, 64, 4, 2, false)),
        ("72", "11008", staged(16, 32, 64, 4, 2, false)),
        ("2048", "256", staged(32, 64, 32, 2, 4, true)),
    ];
    std::fs::create_dir_all(scratch.join("cache")).unwrap();
    for (m, n, schedule) in &cases {
        let args = [
            "kernel",
            "--m",
            m,
            "--n",
            n,
            "--k",
            "2048",
            "--weight",
            "q4_k",
            "--check",
            "none",
            "--runs",
            "0",
            "--schedule",
            schedule,
        ];
        let out = Command::new("sh")
            .arg(prefix.join("run.sh"))
            .arg(&prefix)
            .arg(rocky)
            .args(args)
            .env("XDG_RUNTIME_DIR", &scratch)
            .env("XDG_CACHE_HOME", scratch.join("cache"))
            .env("PANVK_OOM_TRACE", "1")
            .env_remove("MESA_VK_VERSION_OVERRIDE")
            .output()
            .expect("rocky kernel under the shim");
        let all = text(&out);
        let number_before = |line: &str, marker: &str| -> Option<u64> {
            let head = line.split(marker).next()?;
            head.split_whitespace().last()?.parse().ok()
        };
        let driver: u64 = all
            .lines()
            .filter(|l| l.starts_with("panvk: dispatch"))
            .filter_map(|l| number_before(l, " B per dispatch"))
            .max()
            .unwrap_or_else(|| panic!("no PANVK_OOM_TRACE line for m={m} n={n}:\n{all}"));
        let estimate: u64 = all
            .lines()
            .find(|l| l.starts_with("driver"))
            .and_then(|l| number_before(l, " B of shared memory"))
            .unwrap_or_else(|| panic!("no estimate for m={m} n={n}:\n{all}"));
        println!("m={m} n={n}: driver {driver} B, estimate {estimate} B");
        assert!(
            estimate >= driver,
            "m={m} n={n}: estimate {estimate} < driver {driver}"
        );
    }
    std::fs::remove_dir_all(&scratch).ok();
}
