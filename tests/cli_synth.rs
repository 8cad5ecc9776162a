//! `rocky synth` without `--vocab` uses the Qwen2 vocabulary built into the binary: the model it
//! writes must tokenize exactly like one made with the vocabulary file given explicitly (from
//! ../shared, the copy the repository's asset was taken from), and like that file itself.

mod common;

use common::{rocky, shared, text};
use std::path::Path;

fn synth(out: &Path, vocab: Option<&Path>) {
    let mut args = vec![
        "synth",
        "--shape",
        "tiny",
        "--quant",
        "q8_0",
        "--seed",
        "3",
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(v) = vocab {
        args.extend(["--vocab", v.to_str().unwrap()]);
    }
    let o = rocky(&args);
    assert!(o.status.success(), "{}", text(&o));
}

fn token_ids(model: &Path, prompt: &str) -> Vec<u64> {
    let o = rocky(&[
        "tokenize",
        model.to_str().unwrap(),
        "--prompt",
        prompt,
        "--json",
    ]);
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
fn synth_without_vocab_tokenizes_like_the_explicit_vocabulary() {
    let vocab = shared().join("models/ggml-vocab-qwen2.gguf");
    let dir = std::env::temp_dir().join(format!("rocky-cli-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let builtin = dir.join("builtin.gguf");
    let explicit = dir.join("explicit.gguf");
    synth(&builtin, None);
    synth(&explicit, Some(&vocab));

    let prompt =
        "Hello world <|im_start|>user\nThe GPU does the prefill: 1234 tokens, ça va? 你好\n";
    let a = token_ids(&builtin, prompt);
    let b = token_ids(&explicit, prompt);
    let c = token_ids(&vocab, prompt);
    assert_eq!(a, b, "built-in vs explicit --vocab");
    assert_eq!(a, c, "built-in vs the vocabulary file itself");
    // Qwen2's ids for "Hello", " world" and <|im_start|> (known values of that vocabulary).
    assert_eq!(&a[..3], &[9707, 1879, 220], "{a:?}");
    assert!(a.contains(&151644), "<|im_start|> is recognized: {a:?}");
    // Same seed and shape: the two files differ in nothing but where the vocabulary came from.
    assert_eq!(
        std::fs::read(&builtin).unwrap(),
        std::fs::read(&explicit).unwrap(),
        "the files are byte-identical"
    );
    std::fs::remove_dir_all(&dir).ok();
}
