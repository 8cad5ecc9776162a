//! Where tests find the project's shared folder, and how they skip without it.
//!
//! The shared folder (`../shared` beside the clone, or `ROCKY_SHARED`) holds what the repository
//! cannot make itself: llama.cpp's reference outputs (`golden/`, 33 MB of logits) and the Mali
//! driver shims. A clone alone gets a stand-in from tools/prepare-test-assets.sh: the Qwen2
//! vocabulary, the goldens' JSON files without their logits (tests/fixtures/llama-cpp-golden)
//! and the tiny Q8_0 / Q4_K_M models, requantized by rocky into llama-quantize's files byte for
//! byte (pinned by sha256); the tests that need anything else skip:
//! each skip is printed and appended to `ROCKY_SKIP_LOG`, which tools/test.sh summarizes in one
//! line per reason. Where the full tier is required (`CI` or `ROCKY_SHARED_REQUIRED` set), a
//! missing shared folder is a failure instead.
//!
//! Included by path from each test crate's `common` module, so the rule lives in one file.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// `ROCKY_SHARED`, else `../shared` beside the workspace root (`workspace_root` is
/// `CARGO_MANIFEST_DIR/..` or deeper, as the caller's crate sits).
fn shared_root(workspace_root: PathBuf) -> PathBuf {
    std::env::var_os("ROCKY_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root.join("../shared"))
}

/// The real shared folder, recognized by its `golden/` references, if it is there.
pub fn real_shared(workspace_root: PathBuf) -> Option<PathBuf> {
    let root = shared_root(workspace_root);
    root.join("golden").is_dir().then_some(root)
}

/// The real shared folder, else the stand-in of its `models/` in the test assets.
pub fn shared_or_standin(workspace_root: PathBuf, assets_dir: PathBuf) -> PathBuf {
    real_shared(workspace_root).unwrap_or_else(|| assets_dir.join("shared-standin"))
}

/// The real shared folder for a test whose references only it holds (`what`: which ones), or
/// `None` after recording the skip.
pub fn shared_references(workspace_root: PathBuf, what: &str) -> Option<PathBuf> {
    if let Some(root) = real_shared(workspace_root.clone()) {
        return Some(root);
    }
    let root = shared_root(workspace_root);
    skip(
        &format!(
            "skipped, as their references (llama.cpp's logits, the shared goldens) are in the \
             shared folder, which is not at {}: clone rocky beside it or set ROCKY_SHARED",
            root.display()
        ),
        what,
        "ROCKY_SHARED_REQUIRED",
    );
    None
}

/// The real shared folder, or `None` after recording that the running test goes on without the
/// part that needs `what` (listed apart from the tests skipped whole).
pub fn shared_references_for_part(workspace_root: PathBuf, what: &str) -> Option<PathBuf> {
    if let Some(root) = real_shared(workspace_root.clone()) {
        return Some(root);
    }
    let root = shared_root(workspace_root);
    skip(
        &format!(
            "ran without their comparison against llama.cpp's logits, which are in the shared \
             folder (not at {}; clone rocky beside it or set ROCKY_SHARED)",
            root.display()
        ),
        what,
        "ROCKY_SHARED_REQUIRED",
    );
    None
}

/// Records that the running test skips: `reason` (shared by the tests skipped for the same
/// cause, and saying how to run them) and `detail` (this test's need). Panics instead where
/// `CI` or `required_var` is set.
pub fn skip(reason: &str, detail: &str, required_var: &str) {
    let test = test_name();
    if std::env::var_os("CI").is_some() || std::env::var_os(required_var).is_some() {
        panic!("{test} needs {detail}: {reason}");
    }
    eprintln!("SKIPPED {test} ({detail}): {reason}");
    if let Some(log) = std::env::var_os("ROCKY_SKIP_LOG") {
        // One line per skip, appended in one write: test binaries may run side by side.
        let line = format!("{reason}\t{test}\n");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("warning: could not record the skip in {log:?}: {e}");
        }
    }
}

/// `binary::test`, e.g. `gpu_prefill::prefill_matches_golden` (cargo's hash suffix removed).
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".into());
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}
