//! Paths to the shared reference files and the generated test assets.
#![allow(dead_code)]

use std::path::PathBuf;

#[path = "../../../tests/common/shared_folder.rs"]
mod shared_folder;
pub mod token_cases;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// ../shared beside the checkout (override: ROCKY_SHARED) when it is there, else the stand-in
/// that tools/prepare-test-assets.sh makes (the vocabulary, the tiny Q8_0 and Q4_K_M models,
/// and `golden/` without the logits: tests that read those call [`shared_references`]).
pub fn shared() -> PathBuf {
    shared_folder::shared_or_standin(workspace_root(), assets_dir())
}

/// The real shared folder for a test whose references only it holds (`what`: which), or
/// `None` after recording a skip (a failure under `CI` or `ROCKY_SHARED_REQUIRED`).
pub fn shared_references(what: &str) -> Option<PathBuf> {
    shared_folder::shared_references(workspace_root(), what)
}

/// Where tools/prepare-test-assets.sh puts generated files (override: ROCKY_TEST_ASSETS).
pub fn assets_dir() -> PathBuf {
    std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/test-assets"))
}

/// Models made by tools/prepare-test-assets.sh (override: ROCKY_TEST_ASSETS).
pub fn asset(name: &str) -> PathBuf {
    let p = assets_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run tools/prepare-test-assets.sh first",
        p.display()
    );
    p
}

pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
