//! The GGUF tokenizers against llama.cpp's own tokenizer test (tests/test-tokenizer-0) on its
//! Llama vocabularies: `ggml-vocab-llama-bpe.gguf` (Llama 3's byte-level BPE, pre-tokenizer
//! `llama-bpe`) and `ggml-vocab-llama-spm.gguf` (Llama 2's SentencePiece), each with the texts
//! of its `.inp` file and the ids llama.cpp expects in its `.out` file. The files come from the
//! llama-cpp-python sdist on PyPI (which vendors llama.cpp), unpacked by
//! tools/prepare-test-assets.sh into `$ROCKY_TEST_ASSETS/llama-cpp-vocab/`.
//!
//! Every text must give exactly llama.cpp's ids, and decode(encode(text)) must give the text
//! back where the vocabulary is lossless. Run with `-- --nocapture` to see the counts.

mod common;

use common::token_cases::{check, llama_cpp_vocab_test, Case};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use std::path::PathBuf;

fn vocab_dir() -> PathBuf {
    common::asset("llama-cpp-vocab")
}

fn open(name: &str) -> Tokenizer {
    let path = vocab_dir().join(format!("{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
}

fn cases(name: &str) -> Vec<Case> {
    let cases = llama_cpp_vocab_test(&vocab_dir(), name);
    assert!(
        cases.len() > 40,
        "expected llama.cpp's full test list in {name}.gguf.inp, got {}",
        cases.len()
    );
    cases
}

#[test]
fn llama3_bpe_vocab_gives_llama_cpp_ids() {
    let tokenizer = open("ggml-vocab-llama-bpe");
    let cases = cases("ggml-vocab-llama-bpe");
    assert_eq!(check("test-tokenizer-0 llama-bpe", &tokenizer, &cases), 0);
    // Byte-level BPE is lossless: every text comes back byte for byte.
    for case in &cases {
        let ids = tokenizer.encode(&case.text, false, false).unwrap();
        assert_eq!(tokenizer.decode(&ids), case.text, "{}", case.origin);
    }
}

#[test]
fn llama3_bpe_vocab_adds_bos_as_llama_cpp_does() {
    // llama.cpp's LLAMA3 branch adds <|begin_of_text|> unless the vocabulary says otherwise.
    let tokenizer = open("ggml-vocab-llama-bpe");
    let bos = tokenizer.bos_id().expect("a BOS id");
    assert_eq!(
        tokenizer.token_text(bos),
        Some("<|begin_of_text|>".to_string())
    );
    let plain = tokenizer.encode("Hello world", false, false).unwrap();
    let with = tokenizer.encode("Hello world", true, false).unwrap();
    assert_eq!(with[0], bos);
    assert_eq!(&with[1..], &plain[..]);
}

#[test]
fn llama2_spm_vocab_gives_llama_cpp_ids() {
    let tokenizer = open("ggml-vocab-llama-spm");
    assert_eq!(
        check(
            "test-tokenizer-0 llama-spm",
            &tokenizer,
            &cases("ggml-vocab-llama-spm")
        ),
        0
    );
}
