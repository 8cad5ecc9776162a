//! `rocky kernel --stats`: the driver's statistics of a kernel's pipeline through
//! VK_KHR_pipeline_executable_properties, compiled and never run.
//! - On Mesa 25.0.7's panvk (mali-shim, x86): the statistics of a GEMM agree with the line the
//!   driver's compiler itself prints for the same pipeline under `BIFROST_MESA_DEBUG=shaderdb`
//!   (an independent path out of the driver: stderr of its compiler, not the Vulkan query).
//! - On lavapipe (no such extension in Mesa 22.3): a clear message, no panic.
//!
//! The shim test skips with a notice when the shim is absent (a failure in CI and in
//! `tools/test.sh --mali`).

mod common;

use common::shaderdb::{shaderdb_numbers, shaderdb_twin_value};
use common::text;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 statistics")
}

#[test]
fn shaderdb_lines_parse() {
    let n = shaderdb_numbers(
        "MESA_SHADER_COMPUTE shader: 263 inst, 28.750000 cycles, 18.000000 ls, 6 quadwords, \
         1 threads, 0 loops, 5:24 spills:fills",
    );
    assert_eq!(n["inst"], 263.0);
    assert_eq!(n["cycles"], 28.75);
    assert_eq!(n["quadwords"], 6.0);
    assert_eq!((n["spills"], n["fills"]), (5.0, 24.0));
}

#[test]
fn panvk_25_0_7_statistics_agree_with_its_shaderdb_line() {
    let Some(prefix) = shim_prefix() else { return };
    let scratch = std::env::temp_dir().join(format!("rocky-mali-stats-{}", std::process::id()));
    std::fs::create_dir_all(scratch.join("cache")).unwrap();
    for (n, k, weight) in [("2048", "2048", "q4_k"), ("2048", "11008", "q6_k")] {
        let out = Command::new("sh")
            .arg(prefix.join("run.sh"))
            .arg(&prefix)
            .arg(env!("CARGO_BIN_EXE_rocky"))
            .args([
                "kernel", "--m", "512", "--n", n, "--k", k, "--weight", weight,
            ])
            .args(["--stats", "--json"])
            .env("XDG_RUNTIME_DIR", &scratch)
            .env("XDG_CACHE_HOME", scratch.join("cache"))
            .env("BIFROST_MESA_DEBUG", "shaderdb")
            .env("MESA_SHADER_CACHE_DISABLE", "true")
            .env_remove("MESA_VK_VERSION_OVERRIDE")
            .output()
            .expect("rocky kernel under the shim");
        let log = text(&out);
        assert!(out.status.success(), "{log}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("kernel JSON");
        assert!(
            report["run"].is_null(),
            "--stats must not run the kernel: {log}"
        );
        let shaderdb: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("MESA_SHADER_COMPUTE shader:"))
            .collect();
        // One pipeline, one compute shader compiled.
        assert_eq!(shaderdb.len(), 1, "{log}");
        let theirs = shaderdb_numbers(shaderdb[0]);
        let exes = report["driver_statistics"]["executables"]
            .as_array()
            .expect("statistics");
        assert_eq!(exes.len(), 1, "{log}");
        let mut compared = Vec::new();
        for s in exes[0]["statistics"].as_array().unwrap() {
            let name = s["name"].as_str().unwrap();
            let value = s["value"].as_f64().unwrap();
            if let Some(t) = shaderdb_twin_value(name, &theirs) {
                assert!(
                    (value - t).abs() <= 1e-3 * value.abs().max(1.0),
                    "{n}x{k} {weight}: {name} = {value}, shaderdb says {t}:\n{log}"
                );
                compared.push(name.to_string());
            }
        }
        println!(
            "{n}x{k} {weight}: compared {compared:?} with `{}`",
            shaderdb[0]
        );
        assert!(
            !compared.is_empty(),
            "no statistic has a shaderdb twin:\n{log}"
        );
    }
    std::fs::remove_dir_all(&scratch).ok();
}

/// lavapipe (Mesa 22.3) has no VK_KHR_pipeline_executable_properties: `--stats` says so and
/// fails cleanly; a device that has it (a newer Mesa, NVIDIA) must print statistics instead.
#[test]
fn kernel_stats_on_the_default_device_is_statistics_or_a_clear_refusal() {
    let out = common::rocky(&[
        "kernel", "--m", "16", "--n", "256", "--k", "256", "--weight", "q8_0", "--stats",
    ]);
    let log = text(&out);
    assert!(!log.contains("panicked"), "{log}");
    if out.status.success() {
        assert!(log.contains("stats"), "{log}");
        assert!(
            !log.contains("check     passed"),
            "--stats alone must not run: {log}"
        );
    } else {
        assert!(
            log.contains("VK_KHR_pipeline_executable_properties") && log.contains("does not offer"),
            "{log}"
        );
    }
}
