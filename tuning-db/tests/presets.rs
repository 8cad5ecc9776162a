//! The preset records shipped in tuning-db/presets/ stay importable and current: every file
//! passes `rocky db import`'s validation, and every record carries this compiler's version
//! (records of another version are never used, so stale presets would silently do nothing —
//! regenerate them as tuning-db/presets/README.md says).

mod common;

use common::Scratch;
use rocky_tuning_db::{load_presets, TuningDb};
use std::path::PathBuf;

fn presets_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("presets")
}

#[test]
fn shipped_presets_import_cleanly_and_match_the_compiler_version() {
    let files: Vec<_> = std::fs::read_dir(presets_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert!(!files.is_empty(), "no preset files in {:?}", presets_dir());
    let scratch = Scratch::new("presets");
    let db = TuningDb::open(scratch.join("db")).unwrap();
    let summaries = load_presets(&db, &presets_dir()).expect("presets import");
    assert_eq!(summaries.len(), files.len());
    let lines: usize = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f.path())
                .unwrap()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .count()
        })
        .sum();
    let keys = db.all_keys().unwrap();
    assert!(!keys.is_empty());
    let version = rocky_compiler::compiler_version();
    for key in &keys {
        assert_eq!(
            key.compiler_version, version,
            "a preset of compiler {} (now {version}): regenerate tuning-db/presets",
            key.compiler_version
        );
        assert!(
            db.best(key).unwrap().is_some(),
            "{key:?} has no usable trial"
        );
    }
    // One record per line, none dropped (keys are distinct within a preset).
    assert_eq!(db.stats().unwrap().trials, lines);
}
