//! `rocky info --json` on every test vocabulary of the pinned llama.cpp (vocabulary-only GGUF
//! files, see models/tests/tokenizer_llama_cpp_vocabs.rs) and on a runnable model: each command
//! is reported as working or not with the reason, and the tokenizer as llama.cpp would load it.
//! The facts checked come from the files' own metadata (pre-tokenizer names, special token
//! texts) and from llama.cpp's loader (default pre-tokenizer for a file without a name, t5
//! vocabularies being Unigram), not from rocky.

mod common;

use common::{asset, rocky, shared, text};
use rocky_models::gguf::GgufFile;
use serde_json::Value;

/// GPT-2's byte alphabet character for byte `b`, written out here independently of the crate.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
    if printable(b) {
        return b as char;
    }
    let extra = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + extra).unwrap()
}

/// The bytes UTF-8 text can hold that a byte-level vocabulary has no token for, read from the
/// file itself.
fn missing_bytes(path: &std::path::Path) -> Vec<u8> {
    let file = GgufFile::open(path).unwrap();
    let tokens: std::collections::HashSet<&str> = file
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    (0..=255u8)
        .filter(|b| !matches!(b, 0xc0 | 0xc1 | 0xf5..=0xff))
        .filter(|&b| !tokens.contains(byte_char(b).to_string().as_str()))
        .collect()
}

fn info(path: &std::path::Path) -> Value {
    let o = rocky(&["info", path.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

const TOKENIZE: &str = "tokenize";
const MODEL_ONLY: &[&str] = &["prefill --token-ids", "bench", "tune"];
const BOTH: &[&str] = &[
    "prefill --prompt/--file",
    "generate",
    "serve",
    "--chat, /v1/chat/completions",
];

/// (vocabulary, tokenizer family prefix (None: refused, which no test vocabulary is now),
/// pre-tokenizer in effect,
/// warnings (a missing pre-tokenizer name; bytes without a token, checked independently below),
/// BOS text where the file names a well-known one)
type VocabExpectation = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    usize,
    Option<&'static str>,
);

const VOCABS: &[VocabExpectation] = &[
    ("aquila", Some("BPE"), Some("default"), 1, None),
    ("baichuan", Some("SPM"), None, 0, Some("<s>")),
    ("bert-bge", Some("WPM"), None, 0, Some("[CLS]")),
    (
        "command-r",
        Some("BPE"),
        Some("command-r"),
        0,
        Some("<BOS_TOKEN>"),
    ),
    (
        "deepseek-coder",
        Some("BPE"),
        Some("deepseek-coder"),
        0,
        Some("<｜begin▁of▁sentence｜>"),
    ),
    (
        "deepseek-llm",
        Some("BPE"),
        Some("deepseek-llm"),
        0,
        Some("<｜begin▁of▁sentence｜>"),
    ),
    ("falcon", Some("BPE"), Some("falcon"), 1, None),
    (
        "gemma-4",
        Some("BPE (raw UTF-8"),
        Some("gemma4"),
        0,
        Some("<bos>"),
    ),
    (
        "gpt-2",
        Some("BPE"),
        Some("gpt-2"),
        0,
        Some("<|endoftext|>"),
    ),
    ("gpt-neox", Some("BPE"), Some("default"), 1, None),
    (
        "llama-bpe",
        Some("BPE"),
        Some("llama-bpe"),
        0,
        Some("<|begin_of_text|>"),
    ),
    ("llama-spm", Some("SPM"), None, 0, Some("<s>")),
    ("mpt", Some("BPE"), Some("mpt"), 0, None),
    ("nomic-bert-moe", Some("UGM"), None, 0, Some("<s>")),
    ("phi-3", Some("SPM"), None, 0, Some("<s>")),
    (
        "qwen2",
        Some("BPE"),
        Some("qwen2"),
        0,
        Some("<|endoftext|>"),
    ),
    (
        "qwen35",
        Some("BPE"),
        Some("qwen35"),
        0,
        Some("<|endoftext|>"),
    ),
    ("refact", Some("BPE"), Some("refact"), 1, None),
    ("starcoder", Some("BPE"), Some("starcoder"), 1, None),
];

#[test]
fn info_tells_the_truth_about_every_llama_cpp_test_vocabulary() {
    let dir = asset("llama-cpp-vocab");
    for &(name, family, pre, warnings, bos) in VOCABS {
        let v = info(&dir.join(format!("ggml-vocab-{name}.gguf")));
        let commands = &v["commands"];
        // No tensors: nothing that runs the model works, and the reason says so.
        assert_eq!(v["n_tensors"], 0, "{name}");
        assert_eq!(v["supported"], false, "{name}");
        for command in MODEL_ONLY.iter().chain(BOTH) {
            assert_eq!(commands[command]["supported"], false, "{name} {command}");
            let reason = commands[command]["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("the model cannot run"),
                "{name} {command}: {reason}"
            );
        }
        let tokenizer = &v["tokenizer"];
        match family {
            Some(family) => {
                assert_eq!(commands[TOKENIZE]["supported"], true, "{name}: {v}");
                assert_eq!(tokenizer["supported"], true, "{name}");
                let got = tokenizer["family"].as_str().unwrap_or_default();
                assert!(got.starts_with(family), "{name}: family {got}");
                assert_eq!(tokenizer["pre_in_effect"].as_str(), pre, "{name}");
                let w = tokenizer["warnings"].as_array().unwrap();
                assert_eq!(w.len(), warnings, "{name}: {w:?}");
                if family == "BPE" && name != "gemma-4" {
                    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
                    let all = serde_json::to_string(w).unwrap();
                    for b in missing_bytes(&path) {
                        assert!(all.contains(&format!("0x{b:02x}")), "{name}: {b:#x} {all}");
                    }
                }
                if let Some(bos) = bos {
                    assert_eq!(tokenizer["bos"]["text"], bos, "{name}");
                }
            }
            None => {
                assert_eq!(commands[TOKENIZE]["supported"], false, "{name}");
                let reason = commands[TOKENIZE]["reason"].as_str().unwrap_or_default();
                assert!(reason.contains("\"t5\""), "{name}: {reason}");
                assert_eq!(tokenizer["supported"], false, "{name}");
            }
        }
    }
}

#[test]
fn info_text_lists_each_command_with_its_reason() {
    let path = asset("llama-cpp-vocab").join("ggml-vocab-command-r.gguf");
    let o = rocky(&["info", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // One line per command: its name, padding, then the answer.
    let answer = |command: &str| {
        out.lines()
            .skip_while(|l| *l != "commands")
            .find_map(|l| l.strip_prefix(&format!("  {command} ")))
            .map(|rest| rest.trim_start().to_string())
            .unwrap_or_else(|| panic!("no line for {command}: {out}"))
    };
    assert_eq!(answer("tokenize"), "yes", "{out}");
    assert!(
        answer("generate").starts_with("no: the model cannot run"),
        "{out}"
    );
    assert!(out.contains("pre command-r"), "{out}");
    assert!(out.contains("BOS 5 \"<BOS_TOKEN>\""), "{out}");
}

#[test]
fn info_says_a_runnable_model_supports_every_command() {
    let v = info(&shared().join("models/qwen2-tiny-q4_k_m.gguf"));
    assert_eq!(v["supported"], true, "{v}");
    assert_eq!(v["unsupported_reason"], Value::Null);
    for (command, state) in v["commands"].as_object().unwrap() {
        assert_eq!(state["supported"], true, "{command}: {state}");
    }
    assert_eq!(v["tokenizer"]["pre_in_effect"], "qwen2");
}

/// A runnable Llama-shaped model carrying Falcon's BPE vocabulary (no chat template, and no
/// Llama 3 header tokens for rocky's built-in llama3 format): everything but chatting works.
#[test]
fn info_says_chat_needs_a_template() {
    let out = llama_tiny_with("falcon");
    let v = info(&out);
    for (command, state) in v["commands"].as_object().unwrap() {
        let chat = command.contains("chat");
        assert_eq!(state["supported"], !chat, "{command}: {state}");
        if chat {
            let reason = state["reason"].as_str().unwrap();
            assert!(reason.contains("no chat template"), "{reason}");
        }
    }
    assert_eq!(v["supported"], false);
    assert_eq!(v["tokenizer"]["pre_in_effect"], "falcon");
}

/// A runnable model whose vocabulary names no pre-tokenizer (aquila's): `rocky prefill` and
/// `rocky generate` with a text prompt run, on the default split rule, and say so on standard
/// error as `rocky tokenize` and llama.cpp do.
#[test]
fn text_commands_print_the_tokenizers_warnings() {
    let out = llama_tiny_with("aquila");
    let model = out.to_str().unwrap();
    for args in [
        vec![
            "prefill",
            model,
            "--prompt",
            "Hello world",
            "--backend",
            "cpu",
        ],
        vec![
            "generate",
            model,
            "--prompt",
            "Hello world",
            "-n",
            "2",
            "--cpu",
        ],
    ] {
        let o = rocky(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
        assert_eq!(warnings.len(), 1, "{args:?}: {err}");
        assert!(warnings[0].contains("pre-tokenizer"), "{args:?}: {err}");
    }
}

/// A runnable Llama-shaped Q8_0 file (`rocky synth --shape llama-tiny`) carrying llama.cpp's test
/// vocabulary `vocab` (e.g. "falcon": `ggml-vocab-falcon.gguf`).
fn llama_tiny_with(vocab: &str) -> std::path::PathBuf {
    let vocab_file = asset("llama-cpp-vocab").join(format!("ggml-vocab-{vocab}.gguf"));
    let out =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("llama-{vocab}.gguf"));
    let o = rocky(&[
        "synth",
        "--shape",
        "llama-tiny",
        "--quant",
        "q8_0",
        "--vocab",
        vocab_file.to_str().unwrap(),
        "--seed",
        "1",
        "-o",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    out
}
