//! Tokenizer test cases shared by the golden tokenizer tests: a text with the ids llama.cpp
//! gave it, and the check that encodes every case.

use rocky_models::tokenizer::Tokenizer;
use serde_json::Value;

/// The ids of a JSON array of integers.
pub fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id array")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// One text with the ids llama.cpp gave it.
pub struct Case {
    pub origin: String,
    pub text: String,
    pub add_special: bool,
    pub parse_special: bool,
    pub expected: Vec<u32>,
}

impl Case {
    /// A golden prompt file (`kind: text`): its text, special-token flags and ids, named
    /// `origin`.
    pub fn from_prompt(j: &Value, origin: String) -> Case {
        Case {
            origin,
            text: j["text"].as_str().expect("text").to_string(),
            add_special: j["add_special"].as_bool().expect("add_special"),
            parse_special: j["parse_special"].as_bool().expect("parse_special"),
            expected: ids_of(&j["token_ids"]),
        }
    }
}

/// llama.cpp's test-tokenizer-0 files `NAME.gguf.inp` / `NAME.gguf.out` in `dir`: texts
/// separated by "\n__ggml_vocab_test__\n" (so each text has no trailing newline of its own
/// unless it has two), one line of space-separated ids per text, tokenized with add_special and
/// parse_special off. Parsed exactly as tests/test-tokenizer-0.cpp `read_tests` does.
pub fn llama_cpp_vocab_test(dir: &std::path::Path, name: &str) -> Vec<Case> {
    let read = |ext: &str| {
        let path = dir.join(format!("{name}.gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].find(SEP) {
            Some(next) => {
                texts.push(inp[pos..pos + next].to_string());
                pos += next + SEP.len();
            }
            None => {
                texts.push(inp[pos..].to_string());
                break;
            }
        }
    }
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        texts.len(),
        lines.len(),
        "{name}: the .inp and .out files disagree on the number of tests"
    );
    texts
        .into_iter()
        .zip(lines)
        .enumerate()
        .map(|(i, (text, line))| Case {
            origin: format!("{name}.gguf.inp #{i}"),
            text,
            add_special: false,
            parse_special: false,
            expected: line
                .split_whitespace()
                .map(|t| {
                    t.parse()
                        .unwrap_or_else(|e| panic!("{name}.gguf.out line {i}: {t:?}: {e}"))
                })
                .collect(),
        })
        .collect()
}

/// Encodes every case; prints a summary and the first differences, returns the mismatches.
pub fn check(label: &str, tokenizer: &Tokenizer, cases: &[Case]) -> usize {
    let mut mismatches = 0;
    let mut ids_checked = 0;
    for case in cases {
        let got = tokenizer
            .encode(&case.text, case.add_special, case.parse_special)
            .unwrap_or_else(|e| panic!("{}: {e}", case.origin));
        ids_checked += case.expected.len();
        if got != case.expected {
            mismatches += 1;
            if mismatches <= 10 {
                eprintln!(
                    "MISMATCH {}: text {:?}\n  llama.cpp {:?}\n  rocky     {:?}",
                    case.origin, case.text, case.expected, got
                );
            }
        }
    }
    println!(
        "{label}: {} texts, {ids_checked} expected ids, {mismatches} mismatches",
        cases.len()
    );
    mismatches
}
