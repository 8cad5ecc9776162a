//! One kernel compiled by Mesa 25.0.7's panvk under the drm-shim (x86 rocky), with the
//! compiler's shaderdb line and its scheduled listing (`BIFROST_MESA_DEBUG=shaders,shaderdb`):
//! what the Mali tier's kernel tests read. Nothing is run.

use super::shaderdb::shaderdb_numbers;
use super::text;
use super::valhall_listing::messages_once;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Compiles one pipeline (`rocky kernel --workload`) on the shim (`schedule` None: the device's default) and
/// returns the schedule it used, the compiler's shaderdb numbers and its log (the listing).
pub fn compile(
    prefix: &Path,
    scratch: &Path,
    workload: &str,
    schedule: Option<&str>,
) -> (Value, BTreeMap<String, f64>, String) {
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
        .env("BIFROST_MESA_DEBUG", "shaders,shaderdb")
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env_remove("MESA_VK_VERSION_OVERRIDE")
        .output()
        .expect("rocky kernel under the shim");
    let log = text(&out);
    assert!(out.status.success(), "{workload}:\n{log}");
    // The driver writes its listings to stdout too: the report is the last top-level object.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report_at = if stdout.starts_with("{\n") {
        0
    } else {
        stdout.rfind("\n{\n").map_or(0, |i| i + 1)
    };
    let report: Value = serde_json::from_str(&stdout[report_at..]).expect("kernel JSON");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("MESA_SHADER_COMPUTE shader:"))
        .collect();
    assert_eq!(lines.len(), 1, "one pipeline, one shader: {log}");
    let numbers = shaderdb_numbers(lines[0]);
    (report["schedule"].clone(), numbers, log)
}

/// The listing read as the driver reads it: its messages, every block once, are the shaderdb
/// `ls` estimate.
pub fn assert_listing_matches_shaderdb(what: &str, listing: &str, numbers: &BTreeMap<String, f64>) {
    assert_eq!(
        f64::from(messages_once(listing)),
        numbers["ls"],
        "{what}: load/store messages in the listing against the shaderdb line"
    );
}
