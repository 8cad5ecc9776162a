//! Paths shared by the CLI and end-to-end tests.
#![allow(dead_code)]

pub mod f32_math;
pub mod mali25;
pub mod shaderdb;
#[path = "shared_folder.rs"]
mod shared_folder;
pub mod valhall_listing;

use std::path::PathBuf;
use std::process::{Command, Output};

/// ../shared beside the checkout (override: ROCKY_SHARED) when it is there, else the stand-in
/// that tools/prepare-test-assets.sh makes (the vocabulary, the tiny Q8_0 and Q4_K_M models,
/// and `golden/` without the logits: tests that read those call [`shared_references`]).
pub fn shared() -> PathBuf {
    shared_folder::shared_or_standin(PathBuf::from(env!("CARGO_MANIFEST_DIR")), assets_dir())
}

/// The real shared folder for a test whose references only it holds (`what`: which), or
/// `None` after recording a skip (a failure under `CI` or `ROCKY_SHARED_REQUIRED`).
pub fn shared_references(what: &str) -> Option<PathBuf> {
    shared_folder::shared_references(PathBuf::from(env!("CARGO_MANIFEST_DIR")), what)
}

/// The real shared folder for one part of a test (`what`), or `None` after recording that the
/// test ran without it.
pub fn shared_references_for_part(what: &str) -> Option<PathBuf> {
    shared_folder::shared_references_for_part(PathBuf::from(env!("CARGO_MANIFEST_DIR")), what)
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

/// The Qwen2.5-0.5B-shaped Q4_K_M model with random weights (seed 1) that the GPU prefill and
/// the Mali recording tests share, made once into the test assets (about a minute of CPU;
/// written to a temporary name first, so an interrupted run leaves no half file).
pub fn synth_0_5b() -> PathBuf {
    synth(
        rocky_models::synth::Shape::Qwen25_0_5B,
        rocky_models::synth::Quant::Q4KM,
    )
}

/// The synthetic model of `shape` in mix `quant` (seed 1, the Qwen2 vocabulary), made once
/// into the test assets as `synth-SHAPE-QUANT-seed1.gguf`.
pub fn synth(shape: rocky_models::synth::Shape, quant: rocky_models::synth::Quant) -> PathBuf {
    use rocky_models::gguf::GgufFile;
    use rocky_models::synth::{write_model, SynthConfig, Vocabulary};
    // Tests of one binary run in parallel: one makes it, the others wait.
    static SYNTH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = SYNTH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = assets_dir();
    let path = dir.join(format!(
        "synth-{}-{}-seed1.gguf",
        shape.name(),
        quant.name()
    ));
    if !path.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        // The repository's copy (assets/vocab), so synthetic models need nothing beside the clone.
        let vocab_file = GgufFile::open(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/vocab/ggml-vocab-qwen2.gguf"),
        )
        .unwrap();
        let vocab = Vocabulary::from_gguf(&vocab_file).unwrap();
        let config = SynthConfig {
            shape,
            quant,
            seed: 1,
        };
        let tmp = path.with_extension(format!("gguf.tmp{}", std::process::id()));
        write_model(&tmp, &config, &vocab, |_| {}).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}

/// Where a Mali shim test cannot run (`why`: what is missing and how to get it): a skip with a
/// notice, or a panic where the Mali tier is required (`CI` set, or `ROCKY_MALI_REQUIRED`, which
/// `tools/test.sh --mali` sets).
pub fn mali_shim_missing(tier: &str, why: &str) {
    shared_folder::skip(
        "skipped, as a Mali driver shim is not installed (tools/setup.sh installs Mesa 25.0.7's \
         and tools/setup.sh --mali Mesa 26.1.6's, from the shared folder beside the clone)",
        &format!("the Mali {tier} tier: {why}"),
        "ROCKY_MALI_REQUIRED",
    );
}

/// The Mesa 25.0.7 mali-shim prefix (`ROCKY_MALI_SHIM`, else `~/.cache/rocky/mali-shim-25.0.7`),
/// or `None` after [`mali_shim_missing`] for the `tier` named.
#[allow(dead_code)]
pub fn mali_shim_25(tier: &str) -> Option<PathBuf> {
    let prefix = std::env::var_os("ROCKY_MALI_SHIM")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rocky/mali-shim-25.0.7"))
        })?;
    if prefix.join(".mali-shim-stamp").is_file() && prefix.join("run.sh").is_file() {
        return Some(prefix);
    }
    let why = format!(
        "no Mesa 25.0.7 mali-shim at {} (tools/setup.sh installs it; or set ROCKY_MALI_SHIM)",
        prefix.display()
    );
    mali_shim_missing(tier, &why);
    None
}
