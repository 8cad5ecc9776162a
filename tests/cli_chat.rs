//! `--chat`: the text goes through the GGUF's chat template before tokenizing. Checked against
//! Qwen2's ChatML written out by hand and tokenized without --chat, and the flag errors.

mod common;

use common::{rocky, text};

const VOCAB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/vocab/ggml-vocab-qwen2.gguf"
);

fn ids(args: &[&str]) -> Vec<u64> {
    let o = rocky(args);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn chat_tokenizes_the_chatml_rendering() {
    let chat = ids(&[
        "tokenize",
        VOCAB,
        "--prompt",
        "Hi there",
        "--chat",
        "--system",
        "Be brief.",
        "--json",
    ]);
    let by_hand = ids(&[
        "tokenize",
        VOCAB,
        "--prompt",
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "--json",
    ]);
    assert_eq!(chat, by_hand);
    // <|im_start|> system ... : control tokens, not their spelled-out text.
    assert_eq!(chat[0], 151644);
    // Without --system the template's default system message.
    let default = ids(&[
        "tokenize", VOCAB, "--prompt", "Hi there", "--chat", "--json",
    ]);
    let by_hand = ids(&[
        "tokenize",
        VOCAB,
        "--prompt",
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        "--json",
    ]);
    assert_eq!(default, by_hand);
}

#[test]
fn chat_flag_errors_are_usage_errors() {
    // --chat with token ids, --system without --chat, --chat with --no-special.
    for args in [
        vec!["prefill", VOCAB, "--token-ids", "1,2", "--chat"],
        vec!["prefill", VOCAB, "--prompt", "Hi", "--system", "x"],
        vec![
            "tokenize",
            VOCAB,
            "--prompt",
            "Hi",
            "--chat",
            "--no-special",
        ],
    ] {
        let o = rocky(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
    // Still one prompt source at a time, and one is needed.
    let o = rocky(&["prefill", VOCAB, "--prompt", "a", "--token-ids", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = rocky(&["prefill", VOCAB, "--chat"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
