//! Paths to the shared reference files and the generated test assets.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod token_cases;

/// ../shared beside the checkout (override: ROCKY_SHARED).
pub fn shared() -> PathBuf {
    std::env::var_os("ROCKY_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
}

/// Models made by tools/prepare-test-assets.sh (override: ROCKY_TEST_ASSETS).
pub fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    let p = dir.join(name);
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
