//! llama.cpp's tokenizer behaviour on the real qwen2 vocabulary beyond the golden id lists:
//! every top-20 piece llama.cpp printed in the golden files, special-token parsing, and the
//! absence of Unicode normalization.

mod common;

use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::{TokenKind, Tokenizer};
use std::collections::BTreeMap;
use std::sync::OnceLock;

fn qwen2() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = common::shared().join("models/ggml-vocab-qwen2.gguf");
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
    })
}

#[test]
fn token_piece_matches_llama_cpp_for_every_golden_top20_token() {
    let golden = common::shared().join("golden");
    let mut pieces = BTreeMap::new();
    for dir in std::fs::read_dir(&golden).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir()
            || !dir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("qwen2-")
        {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().map_or(true, |e| e != "json") {
                continue;
            }
            let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            for entry in j["top20"].as_array().into_iter().flatten() {
                let id = entry[0].as_u64().unwrap() as u32;
                pieces.insert(id, entry[2].as_str().unwrap().to_string());
            }
        }
    }
    assert!(
        pieces.len() > 100,
        "expected the golden top-20 lists, found {} ids",
        pieces.len()
    );
    let wrong: Vec<_> = pieces
        .iter()
        .filter(|(&id, piece)| qwen2().token_piece(id) != **piece)
        .map(|(&id, piece)| (id, piece.clone(), qwen2().token_piece(id)))
        .collect();
    println!(
        "token_piece: {} distinct golden ids, {} mismatches",
        pieces.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "(id, llama.cpp, rocky): {wrong:?}");
}

#[test]
fn parse_special_turns_chat_markers_into_control_tokens() {
    let t = qwen2();
    let start = t.token_id("<|im_start|>").unwrap();
    let end = t.token_id("<|im_end|>").unwrap();
    assert_eq!(t.token_kind(start), Some(TokenKind::Control));
    let inner = t.encode("user\nhi", false, false).unwrap();
    let expected: Vec<u32> = [vec![start], inner, vec![end]].concat();
    assert_eq!(
        t.encode("<|im_start|>user\nhi<|im_end|>", false, true)
            .unwrap(),
        expected
    );
    assert_eq!(t.decode(&expected), "<|im_start|>user\nhi<|im_end|>");
}

#[test]
fn user_defined_tokens_match_even_without_parse_special() {
    let t = qwen2();
    let pad = t.token_id("[PAD151646]").unwrap();
    assert_eq!(t.token_kind(pad), Some(TokenKind::UserDefined));
    let a = t.encode("a", false, false).unwrap();
    let b = t.encode("b", false, false).unwrap();
    let expected: Vec<u32> = [a, vec![pad], b].concat();
    assert_eq!(t.encode("a[PAD151646]b", false, false).unwrap(), expected);
}

#[test]
fn no_unicode_normalization_as_in_llama_cpp() {
    // Hugging Face's Qwen2 tokenizer.json applies NFC; llama.cpp does not, so a decomposed
    // "é" (e + U+0301) keeps its own bytes and decodes back decomposed.
    let t = qwen2();
    let decomposed = "cafe\u{301}";
    let composed = "caf\u{e9}";
    let ids = t.encode(decomposed, false, false).unwrap();
    assert_ne!(ids, t.encode(composed, false, false).unwrap());
    assert_eq!(t.decode(&ids), decomposed);
}

#[test]
fn qwen2_adds_no_bos_and_reads_special_ids_from_metadata() {
    let t = qwen2();
    assert_eq!(t.vocab_size(), 151936);
    assert!(!t.adds_bos());
    let eot = t.token_id("<|endoftext|>");
    assert_eq!(t.bos_id(), eot);
    assert_eq!(t.eos_id(), eot);
    let text = "Hello world";
    assert_eq!(
        t.encode(text, true, true).unwrap(),
        t.encode(text, false, false).unwrap()
    );
}

#[test]
fn ids_outside_the_vocabulary_decode_to_replacement_characters() {
    let t = qwen2();
    let hello = t.encode("Hello", false, false).unwrap();
    let mut ids = hello.clone();
    ids.push(t.vocab_size() as u32);
    assert_eq!(t.decode(&ids), "Hello\u{FFFD}");
    assert_eq!(t.token_bytes(t.vocab_size() as u32), None);
}
