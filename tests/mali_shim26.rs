//! End to end on Mesa 26.1.6's panvk (Debian trixie-backports' arm64 driver, the boards' 26.1
//! branch) through ../shared/tools/mali-shim26: the aarch64 rocky under qemu-user, without any
//! version override. `rocky devices` reports the Mali usable (vulkaninfo under the same shim is
//! the witness), every template's default schedule compiles in panvk's own compiler (`rocky
//! kernel --stats`, which also reads the driver's statistics), and a short prefill of the tiny
//! model records and submits at a few ubatches.
//!
//! Nothing executes under the shim: results are not checked. Needs the shim prefix
//! (`tools/setup.sh --mali` unpacks it into ~/.cache/rocky/mali-shim26-26.1.6; ROCKY_MALI_SHIM26
//! names another) and an aarch64 build of rocky (`tools/test.sh --mali` makes it;
//! ROCKY_AARCH64_BIN names another). Every test here is ignored in the default run (the aarch64
//! build and qemu cost tens of minutes on CI's 2 cores): `bash tools/setup.sh --mali && bash
//! tools/test.sh --mali` runs them. Without the shim or the build they skip with a notice,
//! except where the tier is required (`CI` set, or `tools/test.sh --mali`): a failure there.

mod common;

use common::shaderdb::{shaderdb_numbers, shaderdb_twin_value};
use common::{shared, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shim prefix and the aarch64 rocky, or `None` with the reason printed (a panic in CI).
fn setup() -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let prefix = std::env::var_os("ROCKY_MALI_SHIM26")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/rocky/mali-shim26-26.1.6"));
    let bin = std::env::var_os("ROCKY_AARCH64_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/aarch64-unknown-linux-gnu/debug/rocky")
        });
    let missing = if !prefix.join("run-26.sh").is_file()
        || !prefix
            .join("sysroot/usr/lib/aarch64-linux-gnu/libvulkan_panfrost.so")
            .is_file()
    {
        Some(format!(
            "no Mesa 26.1.6 mali-shim at {} (tools/setup.sh unpacks it; or set ROCKY_MALI_SHIM26)",
            prefix.display()
        ))
    } else if !bin.is_file() {
        Some(format!(
            "no aarch64 rocky at {} (tools/test.sh builds it: cargo build --target \
             aarch64-unknown-linux-gnu; or set ROCKY_AARCH64_BIN)",
            bin.display()
        ))
    } else {
        None
    };
    match missing {
        None => Some((prefix, bin)),
        Some(why) => {
            common::mali_shim_missing("26.1.6", &why);
            None
        }
    }
}

/// Runs `program args` under qemu on the shim's panvk 26.1.6, with fresh runtime and cache
/// directories (every pipeline goes through panvk's compiler) and no version override.
fn on_shim(prefix: &Path, program: &Path, args: &[&str], scratch: &Path) -> Output {
    let runtime_dir = scratch.join("runtime");
    let cache_dir = scratch.join("cache");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    std::fs::create_dir_all(&cache_dir).unwrap();
    Command::new("sh")
        .arg(prefix.join("run-26.sh"))
        .arg(program)
        .args(args)
        .env("XDG_RUNTIME_DIR", &runtime_dir)
        .env("XDG_CACHE_HOME", &cache_dir)
        .env("DRM_SHIM_MEM_MB", "16384")
        .env("BIFROST_MESA_DEBUG", "shaderdb")
        .env_remove("MESA_VK_VERSION_OVERRIDE")
        .env_remove("ROCKY_DB")
        .env_remove("ROCKY_CB_BUDGET")
        .output()
        .unwrap_or_else(|e| panic!("running {} under the 26.1.6 shim: {e}", program.display()))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rocky-mali26-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
#[ignore = "opt-in Mali tier (bash tools/test.sh --mali): the aarch64 rocky under qemu"]
fn panvk_26_1_6_is_usable_without_a_version_override() {
    let Some((prefix, rocky)) = setup() else {
        return;
    };
    let dir = scratch("devices");
    let out = on_shim(&prefix, &rocky, &["devices", "--json"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let devices: Value = serde_json::from_slice(&out.stdout).expect("devices JSON");
    let mali = &devices[0];
    assert_eq!(mali["driver"]["id"], "MESA_PANVK", "{mali:#}");
    assert!(
        mali["driver"]["version"]
            .as_str()
            .unwrap_or("")
            .contains("26.1.6"),
        "{mali:#}"
    );
    // The driver's own report, through the same shim.
    let vi = on_shim(&prefix, Path::new("vulkaninfo"), &["--summary"], &dir);
    let info = text(&vi);
    assert!(vi.status.success(), "{info}");
    let api = mali["api_version"].as_str().unwrap();
    assert!(
        info.contains(&format!("apiVersion         = {api}")) || info.contains(api),
        "{api}\n{info}"
    );
    assert!(info.contains("DRIVER_ID_MESA_PANVK"), "{info}");

    let out = on_shim(&prefix, &rocky, &["devices"], &dir);
    let listed = text(&out);
    assert!(out.status.success(), "{listed}");
    assert!(listed.contains("Mali-G610"), "{listed}");
    assert!(!listed.contains("NOT USABLE"), "{listed}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One workload of every template (GEMMs in every weight format, at prefill and at one-row
/// shapes, and with each fused epilogue), at Qwen2.5-0.5B sizes (the SwiGLU GEMM at 3B's:
/// Q4_K needs k a multiple of 256).
const WORKLOADS: &[&str] = &[
    r#"{"gemm":{"m":64,"n":896,"k":4864,"act":"f32","weight":"q4_k","bias":false,"epilogue":"residual"}}"#,
    r#"{"gemm":{"m":64,"n":11008,"k":2048,"act":"f32","weight":"q4_k","bias":false,"epilogue":"swiglu"}}"#,
    r#"{"gemm":{"m":64,"n":896,"k":896,"act":"f32","weight":"q8_0","bias":true}}"#,
    r#"{"gemm":{"m":64,"n":4864,"k":896,"act":"f32","weight":"q5_0","bias":false}}"#,
    r#"{"gemm":{"m":64,"n":896,"k":4864,"act":"f32","weight":"q4_k","bias":false}}"#,
    r#"{"gemm":{"m":64,"n":896,"k":4864,"act":"f32","weight":"q6_k","bias":false}}"#,
    r#"{"gemm":{"m":16,"n":256,"k":256,"act":"f32","weight":"f16","bias":false}}"#,
    r#"{"gemm":{"m":16,"n":256,"k":256,"act":"f32","weight":"f32","bias":false}}"#,
    r#"{"gemm":{"m":1,"n":151936,"k":896,"act":"f32","weight":"q8_0","bias":false}}"#,
    r#"{"rms_norm":{"m":64,"width":896,"eps_bits":897988541}}"#,
    r#"{"rms_norm":{"m":64,"width":2048,"eps_bits":897988541}}"#,
    r#"{"rope_neox":{"m":64,"n_heads":14,"head_dim":64,"theta_bits":1232348160}}"#,
    r#"{"swiglu":{"m":64,"width":4864}}"#,
    r#"{"add":{"m":64,"width":896}}"#,
    r#"{"embedding":{"m":64,"width":896,"table":"q8_0"}}"#,
    r#"{"kv_write":{"m":64,"kv_width":128}}"#,
    r#"{"attention":{"m":64,"n_heads":14,"n_kv_heads":2,"head_dim":64,"max_kv":4096}}"#,
];

#[test]
#[ignore = "opt-in Mali tier (bash tools/test.sh --mali): the aarch64 rocky under qemu"]
fn every_template_default_compiles_on_panvk_26_1_6_with_its_statistics() {
    let Some((prefix, rocky)) = setup() else {
        return;
    };
    let dir = scratch("templates");
    let mut kinds = std::collections::BTreeSet::new();
    let mut spilling = Vec::new();
    for w in WORKLOADS {
        let out = on_shim(
            &prefix,
            &rocky,
            &["kernel", "--workload", w, "--stats", "--json"],
            &dir,
        );
        let log = text(&out);
        assert!(out.status.success(), "{w}:\n{log}");
        let report: Value = serde_json::from_slice(&out.stdout).expect("kernel JSON");
        // The driver compiled it and says what it made: at least one executable with an
        // instruction count above zero.
        let exes = report["driver_statistics"]["executables"]
            .as_array()
            .unwrap_or_else(|| panic!("{w}: no statistics:\n{log}"));
        assert!(!exes.is_empty(), "{w}: {log}");
        let counts_something = exes[0]["statistics"].as_array().unwrap().iter().any(|s| {
            s["name"]
                .as_str()
                .unwrap_or("")
                .to_lowercase()
                .contains("instruction")
                && s["value"].as_f64() > Some(0.0)
        });
        assert!(counts_something, "{w}: {log}");
        // The same numbers as the compiler's own shaderdb line for that one shader.
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("MESA_SHADER_COMPUTE shader:"))
            .collect();
        assert_eq!(lines.len(), 1, "{w}: {log}");
        let theirs = shaderdb_numbers(lines[0]);
        let mut compared = 0;
        for st in exes[0]["statistics"].as_array().unwrap() {
            let (name, value) = (st["name"].as_str().unwrap(), st["value"].as_f64().unwrap());
            if let Some(t) = shaderdb_twin_value(name, &theirs) {
                assert!(
                    (value - t).abs() <= 1e-3 * t.abs().max(1.0),
                    "{w}: {name} {value} vs shaderdb {t}: {}",
                    lines[0]
                );
                compared += 1;
            }
        }
        assert!(
            compared >= 3,
            "{w}: only {compared} statistics have a shaderdb twin: {log}"
        );
        // The defaults fit the register file: no spill instructions (the default RMSNorm
        // spilled 22-158 and attention 67 before their Mali rules, docs/measurements/
        // 2026-12-04-mali-attention.md).
        let spills = exes[0]["statistics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["name"].as_str().map(str::to_lowercase) == Some("spills".into()))
            .and_then(|st| st["value"].as_f64());
        if spills != Some(0.0) {
            spilling.push(format!("{w}: {spills:?} spills"));
        }
        kinds.insert(
            report["workload"]
                .as_object()
                .unwrap()
                .keys()
                .next()
                .unwrap()
                .clone(),
        );
    }
    assert_eq!(kinds.len(), 8, "every template kind: {kinds:?}");
    assert!(
        spilling.is_empty(),
        "defaults that spill:\n{}",
        spilling.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "opt-in Mali tier (bash tools/test.sh --mali): the aarch64 rocky under qemu"]
fn the_tiny_model_records_and_submits_on_panvk_26_1_6() {
    let Some((prefix, rocky)) = setup() else {
        return;
    };
    let model = shared().join("models/qwen2-tiny-q4_k_m.gguf");
    assert!(model.exists(), "{} missing", model.display());
    let dir = scratch("prefill");
    for (ubatch, tokens) in [(1usize, 3usize), (16, 40), (72, 150)] {
        let ids: Vec<String> = (0..tokens).map(|i| (100 + 7 * i).to_string()).collect();
        let ids = ids.join(",");
        let u = ubatch.to_string();
        let args = [
            "prefill",
            model.to_str().unwrap(),
            "--token-ids",
            &ids,
            "--ubatch",
            &u,
        ];
        let out = on_shim(&prefix, &rocky, &args, &dir);
        let log = text(&out);
        assert!(out.status.success(), "ubatch {ubatch}: {log}");
        assert!(log.contains("Gpu backend"), "ubatch {ubatch}: {log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
