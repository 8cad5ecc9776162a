//! Recording prefills on Mesa 25.0.7's real panvk (Debian 13's driver) through the mali-shim,
//! across ubatch sizes, board memory sizes and schedules, with the command-buffer budget on
//! and off. Nothing executes under the shim, so results are not checked; what is checked is
//! what a board would refuse at recording time:
//! - every prefill records and submits, at ubatch 1 to 4096, on a 4 GiB and a 16 GiB board
//!   (`DRM_SHIM_MEM_MB`), with the default schedules and with every GEMM staged in shared
//!   memory (`--force-shared-memory`), for the tiny model and the Qwen2.5-0.5B shape (the file
//!   tests/gpu_prefill.rs makes) and, in the opt-in Mali tier (`tools/test.sh --mali`: the
//!   ignored test), the 3B shape;
//! - for every shared-memory dispatch the driver logs (the shim's `PANVK_OOM_TRACE=1`: "panvk:
//!   dispatch XxYxZ ... = T B per dispatch"), rocky's budget estimated at least T for the same
//!   dispatch (`ROCKY_CB_BUDGET=trace` prints it just before the dispatch is recorded, on the
//!   same stderr);
//! - with the budget off (`ROCKY_CB_BUDGET=off`) the shared-memory prefill fails on the driver,
//!   so the budget is what makes it pass.
//!
//! `ROCKY_MALI_TABLE=FILE` appends the table of outcomes (markdown rows) to FILE. Skips with a
//! notice when the shim is absent (a failure in CI and in `tools/test.sh --mali`).

mod common;

use common::{assets_dir, shared, text};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UBATCHES: [usize; 7] = [1, 16, 64, 72, 512, 2048, 4096];
const MEMORY_MB: [u32; 2] = [4096, 16384];

fn shim_prefix() -> Option<PathBuf> {
    common::mali_shim_25("25.0.7 recording")
}

/// The Qwen2.5-3B-shaped Q4_K_M file made by `rocky synth` (1.8 GiB, kept in the test assets
/// between runs; only the opt-in 3B row uses it).
fn synth_3b() -> PathBuf {
    let path = assets_dir().join("synth-qwen2.5-3b-q4_k_m.gguf");
    if !path.exists() {
        std::fs::create_dir_all(assets_dir()).unwrap();
        let tmp = path.with_extension("gguf.tmp");
        let vocab = shared().join("models/ggml-vocab-qwen2.gguf");
        let out = common::rocky(&[
            "synth",
            "--shape",
            "qwen2.5-3b",
            "--quant",
            "q4_k_m",
            "--vocab",
            vocab.to_str().unwrap(),
            "--force",
            "-o",
            tmp.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "rocky synth qwen2.5-3b: {}",
            text(&out)
        );
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// One prefill under the shim.
struct Run<'a> {
    model: &'a Path,
    ubatch: usize,
    memory_mb: u32,
    shared_memory: bool,
    budget: &'static str,
}

impl Run<'_> {
    fn exec(&self, prefix: &Path, scratch: &Path) -> Output {
        // Two full ubatches and a one-token remainder below 512; one full ubatch above (the
        // memory is the point there, and 2×4096 tokens of a 3B prefill add nothing).
        let tokens = if self.ubatch >= 512 {
            self.ubatch
        } else {
            2 * self.ubatch + 1
        };
        let ids: Vec<String> = (0..tokens)
            .map(|i| (100 + 7 * i % 30000).to_string())
            .collect();
        let ids = ids.join(",");
        let ubatch = self.ubatch.to_string();
        let mut args = vec![
            "prefill",
            self.model.to_str().unwrap(),
            "--token-ids",
            &ids,
            "--ubatch",
            &ubatch,
        ];
        if self.shared_memory {
            args.push("--force-shared-memory");
        }
        let runtime_dir = scratch.join("runtime");
        std::fs::create_dir_all(&runtime_dir).unwrap();
        Command::new("sh")
            .arg(prefix.join("run.sh"))
            .arg(prefix)
            .arg(env!("CARGO_BIN_EXE_rocky"))
            .args(&args)
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            // One pipeline cache per test: the driver compiles each kernel once.
            .env("XDG_CACHE_HOME", scratch.join("cache"))
            .env("DRM_SHIM_MEM_MB", self.memory_mb.to_string())
            .env("PANVK_OOM_TRACE", "1")
            .env("ROCKY_CB_BUDGET", self.budget)
            .env_remove("MESA_VK_VERSION_OVERRIDE")
            .env_remove("ROCKY_DB")
            .output()
            .expect("rocky prefill under the shim")
    }

    fn row(&self, outcome: &str) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            self.model.file_name().unwrap().to_string_lossy(),
            self.ubatch,
            self.memory_mb,
            if self.shared_memory {
                "shared memory"
            } else {
                "default"
            },
            if self.budget == "off" { "off" } else { "on" },
            outcome
        )
    }
}

/// The first error line of a failed run (for the table).
fn error_text(log: &str) -> String {
    log.lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| log.lines().last().unwrap_or("(no output)"))
        .trim_start_matches("error: ")
        .replace('|', "/")
}

/// Pairs each of the driver's WLS lines with rocky's estimate for the dispatch just before it
/// and returns (driver bytes, estimate bytes) per driver line; panics on a driver line with
/// no estimate of the same grid before it.
fn wls_pairs(log: &str) -> Vec<(u64, u64)> {
    let mut last_estimate: Option<(String, u64)> = None;
    let mut pairs = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("rocky: dispatch ") {
            // "XxYxZ shared S B estimate E B"
            let grid = rest.split_whitespace().next().unwrap_or("").to_string();
            let e = rest
                .split("estimate ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .expect("rocky's trace line");
            last_estimate = Some((grid, e));
        } else if let Some(rest) = line.strip_prefix("panvk: dispatch ") {
            // "XxYxZ wls S B x I instances x C core_id_range = T B per dispatch"
            let grid = rest.split_whitespace().next().unwrap_or("");
            let total: u64 = rest
                .split("= ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .expect("the driver's trace line");
            if total == 0 {
                continue;
            }
            let (g, e) = last_estimate
                .clone()
                .unwrap_or_else(|| panic!("driver line without a rocky estimate: {line}"));
            assert_eq!(
                g, grid,
                "the driver's dispatch is not the one rocky traced: {line}"
            );
            pairs.push((total, e));
        }
    }
    pairs
}

fn table_file() -> Option<std::fs::File> {
    let path = std::env::var_os("ROCKY_MALI_TABLE")?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
}

/// Every (ubatch, memory, schedules) prefill of `model` records and submits with the budget
/// on, and the budget's estimate covers every dispatch the driver sized.
fn records_everywhere(model: &Path, name: &str) {
    let Some(prefix) = shim_prefix() else { return };
    let scratch =
        std::env::temp_dir().join(format!("rocky-mali-rec-{name}-{}", std::process::id()));
    let mut table = String::new();
    let mut failures = Vec::new();
    for ubatch in UBATCHES {
        for memory_mb in MEMORY_MB {
            for shared_memory in [false, true] {
                let run = Run {
                    model,
                    ubatch,
                    memory_mb,
                    shared_memory,
                    budget: "trace",
                };
                let started = std::time::Instant::now();
                let out = run.exec(&prefix, &scratch);
                let log = text(&out);
                let outcome = if out.status.success() && log.contains("Gpu backend") {
                    let pairs = wls_pairs(&log);
                    let worst = pairs.iter().map(|p| p.0).max().unwrap_or(0);
                    if let Some((d, e)) = pairs.iter().find(|(d, e)| e < d) {
                        failures.push(format!(
                            "{name} ub {ubatch} {memory_mb} MB: estimate {e} < driver {d}"
                        ));
                    }
                    // GEMMs whose one staged dispatch the budget refused (default instead).
                    let fallbacks = log
                        .lines()
                        .filter(|l| l.contains("using the default"))
                        .count();
                    if shared_memory {
                        format!(
                            "ok: {} driver WLS sizes, largest {} MiB, estimate ≥ driver; {} GEMMs \
                             over the budget ran the default",
                            pairs.len(),
                            worst >> 20,
                            fallbacks
                        )
                    } else {
                        "ok".to_string()
                    }
                } else {
                    let e = error_text(&log);
                    failures.push(format!(
                        "{name} ub {ubatch} {memory_mb} MB shared {shared_memory}: {e}"
                    ));
                    format!("error: {e}")
                };
                eprintln!(
                    "{name} ub {ubatch} mem {memory_mb} shared {shared_memory}: {outcome} ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
                table.push_str(&run.row(&outcome));
            }
        }
    }
    if let Some(mut f) = table_file() {
        let _ = f.write_all(table.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_tiny_model_records_at_every_ubatch_memory_and_schedule() {
    records_everywhere(&shared().join("models/qwen2-tiny-q4_k_m.gguf"), "tiny");
}

#[test]
fn the_qwen2_5_0_5b_shape_records_at_every_ubatch_memory_and_schedule() {
    if shim_prefix().is_none() {
        return;
    }
    records_everywhere(&common::synth_0_5b(), "0.5b");
}

#[test]
#[ignore = "opt-in Mali tier (bash tools/test.sh --mali): synthesizes a 1.8 GiB model, minutes of CPU"]
fn the_qwen2_5_3b_shape_records_at_every_ubatch_memory_and_schedule() {
    if shim_prefix().is_none() {
        return;
    }
    records_everywhere(&synth_3b(), "3b");
}

/// Without the budget the driver's shared-memory allocations outgrow a 4 GiB board: the
/// prefill that passes above fails here, at recording time, with the driver's out-of-memory.
#[test]
fn without_the_budget_the_shared_memory_prefill_fails_on_the_driver() {
    let Some(prefix) = shim_prefix() else { return };
    let model = common::synth_0_5b();
    let scratch = std::env::temp_dir().join(format!("rocky-mali-off-{}", std::process::id()));
    let mut table = String::new();
    for (ubatch, shared_memory, budget) in [(512, true, "off"), (512, false, "off")] {
        let run = Run {
            model: &model,
            ubatch,
            memory_mb: 4096,
            shared_memory,
            budget,
        };
        let out = run.exec(&prefix, &scratch);
        let log = text(&out);
        let ok = out.status.success();
        table.push_str(&run.row(&if ok {
            "ok".to_string()
        } else {
            format!("error: {}", error_text(&log))
        }));
        if shared_memory {
            assert!(
                !ok,
                "the budget off, yet the shared-memory prefill passed:\n{log}"
            );
            assert!(
                log.contains("out of device memory") || log.contains("ran out of"),
                "{log}"
            );
        } else {
            // Without shared memory there is nothing for the budget to do.
            assert!(ok, "{log}");
        }
    }
    if let Some(mut f) = table_file() {
        let _ = f.write_all(table.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
