//! Where `generate`, `serve` and `prefill` run without flags (issue 34, item 6): on the GPU,
//! unless every Vulkan device is a CPU implementation (lavapipe, as in CI), where rocky's own
//! CPU path is several times faster and runs instead, saying so; naming a device, or asking for
//! the CPU, decides. The judge of "every device is a CPU one" is `rocky devices --json`.

mod common;
mod serve_support;

use common::shared;
use serde_json::Value;
use serve_support::Server;
use std::path::PathBuf;
use std::process::{Command, Output};

fn rocky(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!(
        "rocky-device-default-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env("XDG_RUNTIME_DIR", &dir)
        .env("ROCKY_DB", dir.join("none.sled"))
        .output()
        .expect("rocky runs");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn ok_json(o: &Output) -> Value {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn tiny() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

/// "cpu" where every Vulkan device `rocky devices` lists is a CPU implementation, else "gpu".
fn expected_default() -> &'static str {
    let devices = ok_json(&rocky(&["devices", "--json"]));
    let devices = devices.as_array().expect("a list of devices");
    assert!(!devices.is_empty(), "these tests need a Vulkan device");
    if devices.iter().all(|d| d["is_cpu"] == true) {
        "cpu"
    } else {
        "gpu"
    }
}

const NOTE: &str = "running on rocky's CPU path";

#[test]
fn generate_takes_the_cpu_path_only_where_every_vulkan_device_is_a_cpu() {
    let want = expected_default();
    let model = tiny();
    let m = model.to_str().unwrap();
    let base = [
        "generate",
        m,
        "--token-ids",
        "785,6722,315",
        "-n",
        "3",
        "--temp",
        "0",
        "--json",
    ];
    let run = |extra: &[&str]| rocky(&[&base[..], extra].concat());
    let default = run(&[]);
    let doc = ok_json(&default);
    assert_eq!(doc["backend"], want, "{doc}");
    let err = String::from_utf8_lossy(&default.stderr);
    assert_eq!(err.contains(NOTE), want == "cpu", "{err}");
    if want == "cpu" {
        // The note names the device and how to use it anyway.
        assert!(
            err.contains("CPU implementation") && err.contains("--device"),
            "{err}"
        );
    }
    // Whatever the default, --cpu is the CPU path and a named device or a GPU-only option
    // the GPU's; the tokens agree (greedy, the tiny model's GPU path follows the reference).
    let cpu = ok_json(&run(&["--cpu"]));
    assert_eq!(cpu["backend"], "cpu");
    for extra in [
        &["--device", "auto"][..],
        &["--device", "0"],
        &["--ubatch", "4"],
    ] {
        let gpu = ok_json(&run(extra));
        assert_eq!(gpu["backend"], "gpu", "{extra:?}: {gpu}");
        assert_eq!(gpu["token_ids"], cpu["token_ids"], "{extra:?}");
    }
    assert_eq!(doc["token_ids"], cpu["token_ids"]);
}

#[test]
fn prefill_and_serve_choose_the_same_way() {
    let want = expected_default();
    let model = tiny();
    let m = model.to_str().unwrap();
    let prefill = |extra: &[&str]| {
        ok_json(&rocky(
            &[&["prefill", m, "--token-ids", "1,2,3", "--json"][..], extra].concat(),
        ))
    };
    assert_eq!(prefill(&[])["backend"], want);
    assert_eq!(prefill(&["--device", "auto"])["backend"], "gpu");
    assert_eq!(prefill(&["--backend", "gpu"])["backend"], "gpu");
    assert_eq!(prefill(&["--backend", "cpu"])["backend"], "cpu");

    let server = Server::start_as_given(&model, &["--ctx", "64"]);
    assert_eq!(
        server.log().contains(NOTE),
        want == "cpu",
        "{}",
        server.log()
    );
    let named = Server::start_as_given(&model, &["--ctx", "64", "--device", "auto"]);
    assert!(!named.log().contains(NOTE), "{}", named.log());
}
