//! The GGUF tokenizers against token ids from the pinned llama.cpp itself (0c1e57098's
//! llama-server, tests/fixtures/llama_cpp_tokenize, made by make_fixtures.py there): llama.cpp's
//! test-tokenizer-0 texts plus texts that exercise digit grouping, letter case, scripts and
//! special tokens, with and without special tokens (BOS/EOS added and control texts parsed),
//! - on every test vocabulary llama.cpp ships: the four without expected ids (aquila,
//!   baichuan, gpt-neox, and nomic-bert-moe's Unigram) and the fifteen with, whose .out files
//!   cover plain text only (here also BOS/EOS, [CLS]/[SEP], Phi-3's stripping), and
//! - on the Qwen2 test vocabulary under every split rule rocky implements: the file's
//!   `tokenizer.ggml.pre` rewritten to one name per rule, so each rule's regexes are checked
//!   against what llama.cpp does with them (its hand-written splitters and its std::regex on
//!   "collapsed" text), not against a re-reading of its source.
//!
//! Run with `-- --nocapture` for the per-fixture table.

mod common;

use common::token_cases::{check, Case};
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue};
use rocky_models::tokenizer::{Tokenizer, TokenizerError};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_cpp_tokenize")
}

/// The vocabulary of `vocab` (a test vocabulary's file stem), its pre-tokenizer name replaced
/// by `pre` when given (written to a scratch GGUF: the files hold metadata only).
fn load(vocab: &str, pre: Option<&str>) -> Result<Tokenizer, TokenizerError> {
    let path = common::asset("llama-cpp-vocab").join(format!("{vocab}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let Some(pre) = pre else {
        return Tokenizer::from_gguf(&file);
    };
    assert!(
        file.tensors.is_empty(),
        "{vocab}: expected a vocabulary-only file"
    );
    let mut w = GgufWriter::new();
    for (key, value) in &file.metadata {
        w.set(key, value.clone());
    }
    w.set("tokenizer.ggml.pre", MetaValue::String(pre.into()));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tokenizer-rules");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{vocab}-pre-{pre}.gguf"));
    w.write(&out, |_, _| Ok(Vec::new())).unwrap();
    Tokenizer::from_gguf(&GgufFile::open(&out).unwrap())
}

fn cases(fixture: &Value, name: &str) -> Vec<Case> {
    fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .enumerate()
        .map(|(i, c)| Case::from_prompt(c, format!("{name} #{i}")))
        .collect()
}

fn fixtures() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p: &PathBuf| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(Path::new(p)).unwrap();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

#[test]
fn every_split_rule_and_untested_vocabulary_gives_llama_cpp_ids() {
    let fixtures = fixtures();
    assert!(fixtures.len() >= 49, "{} fixtures", fixtures.len());
    let mut rows = Vec::new();
    for (name, fixture) in &fixtures {
        let vocab = fixture["vocab"].as_str().unwrap();
        let pre = fixture["pre"].as_str();
        let cases = cases(fixture, name);
        assert!(cases.len() > 100, "{name}: {} cases", cases.len());
        let tokenizer = load(vocab, pre).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mismatches = check(name, &tokenizer, &cases);
        rows.push((name.clone(), cases.len(), mismatches));
    }
    println!("| fixture | cases | mismatches |\n|---|---|---|");
    for (name, n, mismatches) in &rows {
        println!("| {name} | {n} | {mismatches} |");
    }
    let failing: Vec<_> = rows.iter().filter(|r| r.2 > 0).collect();
    assert!(failing.is_empty(), "fixtures with mismatches: {failing:?}");
}
