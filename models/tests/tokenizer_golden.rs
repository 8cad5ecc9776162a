//! The GGUF tokenizer against llama.cpp's token ids in ../shared/golden:
//!
//! - `tokenizer/ggml-vocab-qwen2.gguf.{inp,out}`: llama.cpp's own test-tokenizer-0 cases for the
//!   qwen2 vocabulary (add_special = false, parse_special = false, as that test runs them);
//! - every `qwen2-*/tokenize_only.json`: short texts with and without special tokens;
//! - every text prompt `qwen2-*/t*.json` (its own add_special/parse_special flags), tokenized
//!   with the tokenizer of the model file itself;
//! - decode(encode(text)) == text for all of those texts;
//! - the same texts through a tokenizer.json exported from the GGUF vocabulary.
//!
//! Each test prints what it checked (run with `-- --nocapture` to see it) and fails on any id
//! that differs.

mod common;

use common::token_cases::{check, ids_of, llama_cpp_vocab_test, Case};

use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn golden() -> PathBuf {
    common::shared().join("golden")
}

fn vocab_path() -> PathBuf {
    common::shared().join("models/ggml-vocab-qwen2.gguf")
}

/// The qwen2 vocabulary tokenizer, built once per test binary.
fn qwen2() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| open_tokenizer(&vocab_path()))
}

fn open_tokenizer(path: &Path) -> Tokenizer {
    let file = GgufFile::open(path).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// llama.cpp's test-tokenizer-0 cases for the qwen2 vocabulary.
fn llama_cpp_vocab_test_cases() -> Vec<Case> {
    llama_cpp_vocab_test(&golden().join("tokenizer"), "ggml-vocab-qwen2")
}

/// The folders of golden outputs made with the qwen2 vocabulary.
fn qwen2_folders() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(golden())
        .expect("the golden directory")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("qwen2-")
        })
        .collect();
    dirs.sort();
    assert!(
        !dirs.is_empty(),
        "no qwen2-* folders in {}",
        golden().display()
    );
    dirs
}

fn tokenize_only_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dir in qwen2_folders() {
        let path = dir.join("tokenize_only.json");
        if !path.exists() {
            continue;
        }
        let folder = dir.file_name().unwrap().to_string_lossy().into_owned();
        for (i, entry) in read_json(&path)
            .as_array()
            .expect("a list")
            .iter()
            .enumerate()
        {
            let text = entry["text"].as_str().expect("text").to_string();
            for add_special in [true, false] {
                cases.push(Case {
                    origin: format!("{folder}/tokenize_only.json #{i} add_special={add_special}"),
                    text: text.clone(),
                    add_special,
                    // llama.cpp tokenized these with parse_special off: "<|im_start|>" in the
                    // text comes out as plain-text pieces in both lists.
                    parse_special: false,
                    expected: ids_of(&entry[format!("ids_add_special_{add_special}")]),
                });
            }
        }
    }
    assert!(!cases.is_empty(), "no tokenize_only.json found");
    cases
}

fn text_prompt_cases(dir: &Path) -> Vec<Case> {
    let folder = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with('t') && name.ends_with(".json") && name != "tokenize_only.json"
        })
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| read_json(p))
        .filter(|j| j["kind"] == "text")
        .map(|j| Case::from_prompt(&j, format!("{folder}/{}.json", j["name"].as_str().unwrap())))
        .collect()
}

/// decode(encode(text)) must give the text back (no normalization, lossless byte-level BPE).
fn check_round_trip(label: &str, tokenizer: &Tokenizer, cases: &[Case]) -> usize {
    let mut failures = 0;
    for case in cases {
        let ids = tokenizer
            .encode(&case.text, false, case.parse_special)
            .unwrap();
        let back = tokenizer.decode(&ids);
        if back != case.text {
            failures += 1;
            eprintln!(
                "ROUND TRIP {}: {:?} came back as {:?}",
                case.origin, case.text, back
            );
        }
    }
    println!(
        "{label}: {} texts round-tripped, {failures} failures",
        cases.len()
    );
    failures
}

#[test]
fn llama_cpp_tokenizer_test_qwen2_vocab() {
    let cases = llama_cpp_vocab_test_cases();
    assert!(
        cases.len() > 40,
        "expected llama.cpp's full test list, got {}",
        cases.len()
    );
    assert_eq!(check("test-tokenizer-0 qwen2", qwen2(), &cases), 0);
}

#[test]
fn tokenize_only_json_in_every_qwen2_folder() {
    assert_eq!(
        check("tokenize_only.json", qwen2(), &tokenize_only_cases()),
        0
    );
}

#[test]
fn text_prompts_with_the_model_files_own_tokenizer() {
    // The prompts in qwen2-tiny-f32 were tokenized with that model; its GGUF carries the
    // vocabulary, so this also checks reading a tokenizer out of a full model file.
    let model = open_tokenizer(&common::asset("qwen2-tiny-f32.gguf"));
    let own = text_prompt_cases(&golden().join("qwen2-tiny-f32"));
    assert!(
        own.len() >= 4,
        "expected the t1..t4 text prompts, found {}",
        own.len()
    );
    assert_eq!(
        check("qwen2-tiny-f32 text prompts (model file)", &model, &own),
        0
    );

    let all: Vec<Case> = qwen2_folders()
        .iter()
        .flat_map(|d| text_prompt_cases(d))
        .collect();
    assert_eq!(
        check(
            "text prompts, all qwen2 folders (vocab file)",
            qwen2(),
            &all
        ),
        0
    );
}

#[test]
fn decode_gives_every_golden_text_back() {
    let mut cases = llama_cpp_vocab_test_cases();
    cases.extend(tokenize_only_cases());
    cases.extend(qwen2_folders().iter().flat_map(|d| text_prompt_cases(d)));
    assert_eq!(check_round_trip("decode(encode(text))", qwen2(), &cases), 0);
}

#[test]
fn exported_tokenizer_json_gives_the_same_ids() {
    let json = qwen2().to_tokenizer_json().unwrap();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qwen2-exported-tokenizer.json");
    std::fs::write(&path, json).unwrap();
    let hf = Tokenizer::from_tokenizer_json(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hf.vocab_size(), qwen2().vocab_size());
    let mut cases = llama_cpp_vocab_test_cases();
    cases.extend(tokenize_only_cases().into_iter().filter(|c| !c.add_special));
    assert_eq!(
        check("tokenizer.json exported from the GGUF", &hf, &cases),
        0
    );
    assert_eq!(
        check_round_trip("tokenizer.json decode(encode(text))", &hf, &cases),
        0
    );
}

/// The repository's copy of the goldens without their logits (tests/fixtures/llama-cpp-golden,
/// what a clone without the shared folder tests against) is the shared folder's, file for file.
#[test]
fn golden_fixtures_match_the_shared_folder() {
    let Some(shared) = common::shared_references("the shared golden/ to compare the copy with")
    else {
        return;
    };
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/llama-cpp-golden");
    let mut compared = 0;
    let mut stack = vec![shared.join("golden")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.to_string_lossy().ends_with(".logits.f32") {
                continue;
            }
            let relative = path.strip_prefix(shared.join("golden")).unwrap();
            let copy = fixtures.join(relative);
            let theirs = std::fs::read(&path).unwrap();
            let ours = std::fs::read(&copy).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (see tests/fixtures/llama-cpp-golden/SOURCE.md)",
                    copy.display()
                )
            });
            assert!(
                ours == theirs,
                "{} differs from {} (see tests/fixtures/llama-cpp-golden/SOURCE.md)",
                copy.display(),
                path.display()
            );
            compared += 1;
        }
    }
    assert!(compared >= 60, "only {compared} golden files compared");
}
