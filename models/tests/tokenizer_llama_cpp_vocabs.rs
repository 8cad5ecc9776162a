//! The GGUF tokenizers against llama.cpp's own tokenizer test (tests/test-tokenizer-0) on every
//! test vocabulary the pinned llama.cpp ships (`models/ggml-vocab-*.gguf`): each `.inp` text must
//! give exactly the ids of its `.out` file (which llama.cpp's test also demands of llama.cpp).
//! The files come from the llama-cpp-python 0.3.16 sdist on PyPI (its vendored llama.cpp; the
//! vocabularies and expected ids are byte-identical in 0.3.36, whose llama.cpp 0c1e57098 is the
//! one rocky follows), plus gemma-4 and qwen35 from the 0.3.36 sdist, which only it has;
//! tools/prepare-test-assets.sh unpacks them into `$ROCKY_TEST_ASSETS/llama-cpp-vocab/`.
//!
//! Four vocabularies ship without texts (aquila, baichuan, gpt-neox, nomic-bert-moe): they are
//! loaded and checked for what llama.cpp would do with them here, and tokenized against
//! llama.cpp's own ids in tokenizer_llama_cpp_rules.rs. Run with `-- --nocapture` for the
//! per-vocabulary table.

mod common;

use common::token_cases::{check, llama_cpp_vocab_test, Case};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::{Tokenizer, TokenizerError};
use std::path::PathBuf;

/// Every vocabulary with `.inp`/`.out` files, and its tokenizer family as `info().family`
/// begins.
const TESTED: &[(&str, &str)] = &[
    ("bert-bge", "WPM"),
    ("command-r", "BPE"),
    ("deepseek-coder", "BPE"),
    ("deepseek-llm", "BPE"),
    ("falcon", "BPE"),
    ("gemma-4", "BPE"),
    ("gpt-2", "BPE"),
    ("llama-bpe", "BPE"),
    ("llama-spm", "SPM"),
    ("mpt", "BPE"),
    ("phi-3", "SPM"),
    ("qwen2", "BPE"),
    ("qwen35", "BPE"),
    ("refact", "BPE"),
    ("starcoder", "BPE"),
];

fn vocab_dir() -> PathBuf {
    common::asset("llama-cpp-vocab")
}

fn load(name: &str) -> Result<Tokenizer, TokenizerError> {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf(&file)
}

fn open(name: &str) -> Tokenizer {
    load(name).unwrap_or_else(|e| panic!("{e}"))
}

fn cases(name: &str) -> Vec<Case> {
    let file = format!("ggml-vocab-{name}");
    let cases = llama_cpp_vocab_test(&vocab_dir(), &file);
    assert!(
        cases.len() > 40,
        "expected llama.cpp's full test list in {file}.gguf.inp, got {}",
        cases.len()
    );
    cases
}

#[test]
fn every_llama_cpp_test_vocabulary_gives_llama_cpp_ids() {
    let mut rows = Vec::new();
    for &(name, family) in TESTED {
        let tokenizer = open(name);
        let info = tokenizer.info();
        assert!(
            info.family.starts_with(family),
            "{name}: family {}",
            info.family
        );
        // Every tested vocabulary names a pre-tokenizer llama.cpp knows (Falcon's warns only
        // that it lacks tokens for most control bytes, Gemma 4's that llama.cpp adds a BOS the
        // file does not ask for).
        for warning in tokenizer.warnings() {
            println!("{name}: warning: {warning}");
            assert!(!warning.contains("'default'"), "{name}: {warning}");
        }
        let cases = cases(name);
        let mismatches = check(&format!("test-tokenizer-0 {name}"), &tokenizer, &cases);
        // BPE is lossless: every text comes back byte for byte.
        if family == "BPE" {
            for case in &cases {
                let ids = tokenizer.encode(&case.text, false, false).unwrap();
                assert_eq!(tokenizer.decode(&ids), case.text, "{name} {}", case.origin);
            }
        }
        rows.push((name, cases.len(), mismatches));
    }
    println!("| vocabulary | texts | mismatches |\n|---|---|---|");
    for (name, texts, mismatches) in &rows {
        println!("| {name} | {texts} | {mismatches} |");
    }
    let failing: Vec<_> = rows.iter().filter(|r| r.2 > 0).collect();
    assert!(
        failing.is_empty(),
        "vocabularies with mismatches: {failing:?}"
    );
}

#[test]
fn llama3_bpe_vocab_adds_bos_as_llama_cpp_does() {
    // llama.cpp's LLAMA3 branch adds <|begin_of_text|> unless the vocabulary says otherwise.
    let tokenizer = open("llama-bpe");
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
fn gemma4_vocab_adds_bos_and_shows_spaces() {
    // The file says add_bos_token = true; llama.cpp's "gemma4" model adds <bos> (id 2) and
    // spells spaces as U+2581 in its tokens.
    let tokenizer = open("gemma-4");
    let ids = tokenizer.encode("Hello world", true, false).unwrap();
    assert_eq!(ids[0], 2);
    assert_eq!(tokenizer.token_text(2).as_deref(), Some("<bos>"));
    assert_eq!(tokenizer.decode(&ids[1..]), "Hello world");
    let world = *ids.last().unwrap();
    assert_eq!(
        tokenizer.token_text(world).as_deref(),
        Some("\u{2581}world")
    );
    assert_eq!(tokenizer.token_piece(world), " world");
}

#[test]
fn bert_vocab_wraps_text_in_cls_and_sep() {
    // llama.cpp's WordPiece session: [CLS] (101) first and [SEP] (102) last with add_special.
    let tokenizer = open("bert-bge");
    let plain = tokenizer.encode("Hello world", false, false).unwrap();
    let with = tokenizer.encode("Hello world", true, false).unwrap();
    assert_eq!(with.first(), Some(&101));
    assert_eq!(with.last(), Some(&102));
    assert_eq!(&with[1..with.len() - 1], &plain[..]);
    assert_eq!(tokenizer.token_piece(plain[0]), " hello");
}

/// The vocabularies shipped without texts: gpt-2-style BPE files without a pre-tokenizer name
/// (aquila, gpt-neox) get llama.cpp's default split with its warning, Baichuan's
/// SentencePiece and nomic-bert-moe's Unigram load as such.
#[test]
fn vocabularies_without_texts_load_as_llama_cpp_would() {
    for name in ["aquila", "gpt-neox"] {
        let tokenizer = open(name);
        let info = tokenizer.info();
        assert_eq!(info.pre.as_deref(), Some("default"), "{name}");
        assert_eq!(tokenizer.warnings().len(), 1, "{name}");
        assert!(tokenizer.warnings()[0].contains("is missing"), "{name}");
        let ids = tokenizer
            .encode("Hello world! 12345", false, false)
            .unwrap();
        assert!(!ids.is_empty());
        assert_eq!(tokenizer.decode(&ids), "Hello world! 12345", "{name}");
    }
    let baichuan = open("baichuan");
    assert!(baichuan.info().family.starts_with("SPM"));
    let ids = baichuan.encode("Hello world", true, false).unwrap();
    assert_eq!(ids[0], 1, "Baichuan adds <s>");
    assert_eq!(baichuan.decode(&ids[1..]), "Hello world");

    // Unigram with its precompiled charsmap: XLM-RoBERTa's <s> ... </s> around the text (the
    // ids themselves are checked against llama.cpp in tokenizer_llama_cpp_rules.rs).
    let nomic = open("nomic-bert-moe");
    assert!(nomic.info().family.starts_with("UGM"));
    let ids = nomic.encode("Hello world", true, false).unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (0, 2));
    assert_eq!(nomic.decode(&ids[1..ids.len() - 1]), "Hello world");
}
