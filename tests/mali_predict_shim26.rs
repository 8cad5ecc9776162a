//! `rocky predict` on Mesa 26.1.6's panvk (../shared/tools/mali-shim26: the aarch64 rocky under
//! qemu-user): the prediction takes its cycles from the driver, and they are the driver's. Every
//! kernel's cycles in the table must be one of the figures the driver's own compiler printed for
//! the run (`BIFROST_MESA_DEBUG=shaderdb` on stderr: an independent path out of the driver, not
//! the Vulkan statistics query rocky reads), and the core count is the driver's.
//!
//! Ignored in the default run, like tests/mali_shim26.rs (`bash tools/setup.sh --mali && bash
//! tools/test.sh --mali` runs it); without the shim or the aarch64 build it skips with a notice.

mod common;

use common::shaderdb::shaderdb_numbers;
use common::{shared, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    if !prefix.join("run-26.sh").is_file() {
        common::mali_shim_missing(
            "26.1.6",
            &format!("no Mesa 26.1.6 mali-shim at {}", prefix.display()),
        );
        return None;
    }
    if !bin.is_file() {
        common::mali_shim_missing(
            "26.1.6",
            &format!("no aarch64 rocky at {} (ROCKY_AARCH64_BIN)", bin.display()),
        );
        return None;
    }
    Some((prefix, bin))
}

#[test]
#[ignore = "opt-in Mali tier (bash tools/test.sh --mali): the aarch64 rocky under qemu"]
fn predicted_cycles_are_the_drivers_own() {
    let Some((prefix, rocky)) = setup() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("rocky-predict26-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["runtime", "cache"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let model = shared().join("models/qwen2-tiny-q4_k_m.gguf");
    let db = dir.join("none.sled");
    let out = Command::new("sh")
        .arg(prefix.join("run-26.sh"))
        .arg(&rocky)
        .args(["predict", model.to_str().unwrap(), "-p", "64", "-ub", "32"])
        .args(["--decode", "2", "--json", "--db", db.to_str().unwrap()])
        .env("XDG_RUNTIME_DIR", dir.join("runtime"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("BIFROST_MESA_DEBUG", "shaderdb")
        .env_remove("MESA_VK_VERSION_OVERRIDE")
        .env_remove("ROCKY_DB")
        .output()
        .expect("rocky predict under the 26.1.6 shim");
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let p: Value = serde_json::from_slice(&out.stdout).expect("predict JSON");
    assert_eq!(p["target"]["cores"], 4, "{log}");
    assert!(
        p["target"]["cores_from"]
            .as_str()
            .unwrap()
            .contains("driver"),
        "{log}"
    );
    assert!(
        p["prefill"]["statistics"]
            .as_str()
            .unwrap()
            .starts_with("driver statistics"),
        "{log}"
    );
    let printed: Vec<f64> = log
        .lines()
        .filter(|l| l.contains("MESA_SHADER_COMPUTE shader:"))
        .filter_map(|l| shaderdb_numbers(l).get("cycles").copied())
        .collect();
    assert!(!printed.is_empty(), "no shaderdb lines:\n{log}");
    for part in ["prefill", "decode"] {
        for row in p[part]["result"]["rows"].as_array().unwrap() {
            let c = row["cycles"].as_f64().unwrap();
            if c == 0.0 {
                continue; // a split-K reduce or an attention combine, costed by its bytes only
            }
            assert!(
                printed.iter().any(|&x| (x - c).abs() <= 1e-3 * c.max(1.0)),
                "{part} {}: {c} cycles is no figure the driver's compiler printed ({printed:?})",
                row["kernel"]
            );
        }
    }
    let tps = p["prefill"]["result"]["tok_per_s"].as_f64().unwrap();
    assert!(tps.is_finite() && tps > 0.0, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
