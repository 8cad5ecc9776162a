//! Chat templates rendered by rocky_models::chat against renderings written out by hand from
//! the models' documented prompt formats: Qwen2's ChatML (the template in
//! assets/vocab/ggml-vocab-qwen2.gguf, as llama.cpp's vocabulary file carries it) and
//! Llama 3's header format (its tokenizer_config.json template, with BOS handling as llama.cpp
//! does it), and against llama.cpp's own renderings (tests/fixtures); plus Python-style
//! methods, raise_exception and a file without a template.

use rocky_models::chat::{self, builtin, ChatError, Message, Specials};
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, ValueType};
use rocky_models::tokenizer::Tokenizer;
use std::path::PathBuf;

fn qwen2_vocab() -> GgufFile {
    GgufFile::open(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/vocab/ggml-vocab-qwen2.gguf"),
    )
    .unwrap()
}

#[test]
fn qwen2_template_renders_chatml() {
    let file = qwen2_vocab();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let specials = Specials::of(&tokenizer, &file);
    assert_eq!(specials.bos_token, "<|endoftext|>");
    assert!(!specials.add_bos && !specials.add_eos);
    let user_only =
        chat::render_for(&file, &[Message::new("user", "Hi there")], &specials).unwrap();
    assert_eq!(
        user_only,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let with_system = chat::render_for(
        &file,
        &[
            Message::new("system", "Be brief."),
            Message::new("user", "What is 2+2?\nSay it."),
        ],
        &specials,
    )
    .unwrap();
    assert_eq!(
        with_system,
        "<|im_start|>system\nBe brief.<|im_end|>\n\
         <|im_start|>user\nWhat is 2+2?\nSay it.<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

/// Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template.
const LLAMA3_TEMPLATE: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

#[test]
fn llama3_template_and_the_bos_the_tokenizer_adds() {
    let messages = [
        Message::new("system", "Be brief. "),
        Message::new("user", " Hi there"),
    ];
    let body = "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
                <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
                <|start_header_id|>assistant<|end_header_id|>\n\n";
    let mut specials = Specials {
        bos_token: "<|begin_of_text|>".into(),
        eos_token: "<|eot_id|>".into(),
        add_bos: true,
        add_eos: false,
    };
    // The tokenizer adds BOS: the template's own is dropped, as llama.cpp does.
    let text = chat::render("llama3", LLAMA3_TEMPLATE, &messages, &specials).unwrap();
    assert_eq!(text, body);
    // A vocabulary that adds none keeps the template's.
    specials.add_bos = false;
    let text = chat::render("llama3", LLAMA3_TEMPLATE, &messages, &specials).unwrap();
    assert_eq!(text, format!("<|begin_of_text|>{body}"));
}

#[test]
fn python_methods_work_and_raise_exception_is_a_clear_error() {
    let t = "{% for m in messages %}{% if m.role not in ['user', 'system'] %}{{ raise_exception('Only user and system roles are supported!') }}{% endif %}[{{ m.role.upper() }}] {{ m.content.strip() }}{% if m.content.strip().startswith('Hi') %}!{% endif %}\n{% endfor %}";
    let specials = Specials::default();
    let text = chat::render("t", t, &[Message::new("user", "  Hi you ")], &specials).unwrap();
    // trim_blocks: the newline after `{% endif %}` goes, as in transformers.
    assert_eq!(text, "[USER] Hi you!");
    let e = chat::render("t", t, &[Message::new("assistant", "x")], &specials).unwrap_err();
    assert!(matches!(e, ChatError::Template { .. }), "{e}");
    assert!(e.to_string().contains("Only user and system roles"), "{e}");
    let e = chat::render("t", "{% for %}", &[], &specials).unwrap_err();
    assert!(e.to_string().contains("cannot be rendered"), "{e}");
}

#[test]
fn a_file_without_a_template_is_a_clear_error() {
    let path = std::env::temp_dir().join(format!("rocky-no-template-{}.gguf", std::process::id()));
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    w.write(&path, |_, _| unreachable!("no tensors")).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert!(chat::template(&file).is_none());
    let e =
        chat::render_for(&file, &[Message::new("user", "Hi")], &Specials::default()).unwrap_err();
    assert!(matches!(e, ChatError::NoTemplate { .. }), "{e}");
    assert!(e.to_string().contains("no chat template"), "{e}");
    std::fs::remove_file(&path).ok();
}

/// llama.cpp's own renderings (tests/fixtures/chat-templates-llama-cpp.json, made by
/// tools/chat-template-fixture.sh with llama-server's /apply-template) of four conversations
/// with the Qwen2 vocabulary's template and Llama 3's (the vocabulary's BOS text passed in), and
/// with llama.cpp's built-in C++ formats chatml, llama3 and gemma against rocky's built-in
/// Jinja versions (models/src/chat/builtin.rs).
#[test]
fn renderings_equal_llama_cpps() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures.join("chat-templates-llama-cpp.json")).unwrap(),
    )
    .unwrap();
    let file = qwen2_vocab();
    let specials = Specials::of(&Tokenizer::from_gguf(&file).unwrap(), &file);
    let llama3 = std::fs::read_to_string(fixtures.join("llama3-chat-template.jinja")).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 20);
    let mut builtins_checked = 0;
    for case in cases {
        let template = match case["template"].as_str().unwrap() {
            "gguf" => chat::template(&file).unwrap(),
            "llama3" => llama3.as_str(),
            other => {
                let name = other
                    .strip_prefix("builtin-")
                    .unwrap_or_else(|| panic!("unknown template {other}"));
                builtins_checked += 1;
                [builtin::CHATML, builtin::LLAMA3, builtin::GEMMA]
                    .into_iter()
                    .find(|b| b.name == name)
                    .unwrap_or_else(|| panic!("no built-in {name}"))
                    .template
            }
        };
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let ours = chat::render("fixture", template, &messages, &specials).unwrap();
        assert_eq!(
            ours,
            case["prompt"].as_str().unwrap(),
            "{}",
            case["template"]
        );
    }
    assert_eq!(builtins_checked, 12);
}

/// A vocabulary-only GGUF of `arch` whose tokens are `tokens`, without a chat template.
fn untemplated(arch: &str, tokens: &[&str]) -> (GgufFile, PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "rocky-untemplated-{arch}-{}-{}.gguf",
        tokens.len(),
        std::process::id()
    ));
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String(arch.into()));
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(
            ValueType::String,
            tokens
                .iter()
                .map(|t| MetaValue::String(t.to_string()))
                .collect(),
        ),
    );
    w.write(&path, |_, _| unreachable!("no tensors")).unwrap();
    (GgufFile::open(&path).unwrap(), path)
}

/// Files without a template get their architecture's built-in format where the vocabulary has
/// its turn marker, and a clear error where it does not.
#[test]
fn files_without_a_template_use_the_built_in_format_of_their_architecture() {
    let messages = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi"),
    ];
    let specials = Specials::default();
    for (arch, marker, want) in [
        (
            "qwen3",
            "<|im_start|>",
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        ),
        (
            "llama",
            "<|start_header_id|>",
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
        (
            "gemma3",
            "<start_of_turn>",
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n",
        ),
    ] {
        let (file, path) = untemplated(arch, &["a", marker, "b"]);
        let (_, source) = chat::template_or_builtin(&file).unwrap();
        assert!(source.contains(&format!("built-in {arch}")), "{source}");
        assert_eq!(chat::render_for(&file, &messages, &specials).unwrap(), want, "{arch}");
        std::fs::remove_file(&path).ok();
        // The same architecture with a vocabulary lacking the marker: no guess.
        let (file, path) = untemplated(arch, &["a", "b"]);
        let e = chat::render_for(&file, &messages, &specials).unwrap_err();
        assert!(matches!(e, ChatError::NoTemplate { .. }), "{arch}: {e}");
        std::fs::remove_file(&path).ok();
    }
}
