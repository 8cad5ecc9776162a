//! Paths shared by the CLI and end-to-end tests.
#![allow(dead_code)]

pub mod shaderdb;

use std::path::PathBuf;
use std::process::{Command, Output};

/// ../shared beside the checkout (override: ROCKY_SHARED).
pub fn shared() -> PathBuf {
    std::env::var_os("ROCKY_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// Where tools/prepare-test-assets.sh puts generated models (override: ROCKY_TEST_ASSETS).
pub fn assets_dir() -> PathBuf {
    std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-assets"))
}

/// A generated test model; fails with what to run when it is missing.
pub fn asset(name: &str) -> PathBuf {
    let p = assets_dir().join(name);
    assert!(
        p.exists(),
        "{} missing: run tools/prepare-test-assets.sh",
        p.display()
    );
    p
}

/// Runs this build's `rocky` with `args`, never with the user's tuning database (ROCKY_DB is
/// removed from its environment).
pub fn rocky(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env_remove("ROCKY_DB")
        .output()
        .expect("rocky runs")
}

/// Standard output then standard error, for assertion messages and searches.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
