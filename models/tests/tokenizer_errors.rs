//! The GGUF tokenizer on small synthetic vocabularies: a valid one is tokenized as the BPE and
//! llama.cpp's special-token rules say (closed form), and every kind of missing, inconsistent
//! or unsupported metadata is refused with an error that names the key or value.

use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, ValueType};
use rocky_models::tokenizer::{TokenKind, Tokenizer, TokenizerError};
use std::path::PathBuf;

/// GPT-2's byte alphabet character for byte `b` (written out here independently of the crate).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
    if printable(b) {
        return b as char;
    }
    let extra = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + extra).unwrap()
}

const HE: u32 = 256;
const HEHE: u32 = 257;
const CONTROL: u32 = 258; // "<|ctl|>", type 3
const USER: u32 = 259; // "<user>", type 4
const IM_END: u32 = 260; // "<|im_end|>" typed user-defined: llama.cpp makes it control

/// A valid vocabulary: the 256 byte tokens (id = byte), two merges, three special tokens.
struct Vocab {
    model: Option<&'static str>,
    pre: Option<&'static str>,
    tokens: Option<Vec<String>>,
    types: Option<Vec<i32>>,
    merges: Option<Vec<String>>,
    extra: Vec<(&'static str, MetaValue)>,
}

impl Vocab {
    fn valid() -> Vocab {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let mut types = vec![1; 256];
        for (text, ty) in [
            ("he", 1),
            ("hehe", 1),
            ("<|ctl|>", 3),
            ("<user>", 4),
            ("<|im_end|>", 4),
        ] {
            tokens.push(text.to_string());
            types.push(ty);
        }
        Vocab {
            model: Some("gpt2"),
            pre: Some("qwen2"),
            tokens: Some(tokens),
            types: Some(types),
            merges: Some(vec!["h e".into(), "he he".into()]),
            extra: vec![("tokenizer.ggml.eos_token_id", MetaValue::U32(CONTROL))],
        }
    }

    fn load(self, name: &str) -> Result<Tokenizer, TokenizerError> {
        let strings = |v: Vec<String>| {
            MetaValue::Array(
                ValueType::String,
                v.into_iter().map(MetaValue::String).collect(),
            )
        };
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::String("qwen2".into()));
        if let Some(m) = self.model {
            w.set("tokenizer.ggml.model", MetaValue::String(m.into()));
        }
        if let Some(p) = self.pre {
            w.set("tokenizer.ggml.pre", MetaValue::String(p.into()));
        }
        if let Some(t) = self.tokens {
            w.set("tokenizer.ggml.tokens", strings(t));
        }
        if let Some(t) = self.types {
            w.set(
                "tokenizer.ggml.token_type",
                MetaValue::Array(ValueType::I32, t.into_iter().map(MetaValue::I32).collect()),
            );
        }
        if let Some(m) = self.merges {
            w.set("tokenizer.ggml.merges", strings(m));
        }
        for (k, v) in self.extra {
            w.set(k, v);
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tokenizer-errors");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.gguf"));
        w.write(&path, |_, _| Ok(Vec::new())).unwrap();
        Tokenizer::from_gguf(&GgufFile::open(&path).unwrap())
    }
}

fn bytes(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

fn expect_error(vocab: Vocab, name: &str, needles: &[&str]) -> TokenizerError {
    let err = vocab
        .load(name)
        .expect_err("the vocabulary must be refused");
    let message = err.to_string();
    println!("{name}: {message}");
    for needle in needles {
        assert!(
            message.contains(needle),
            "{name}: the error should mention {needle:?}: {message}"
        );
    }
    assert!(
        message.contains(&format!("{name}.gguf")),
        "the error should name the file: {message}"
    );
    err
}

#[test]
fn valid_vocabulary_tokenizes_by_merge_rank() {
    let t = Vocab::valid().load("valid").unwrap();
    assert_eq!(t.vocab_size(), 261);
    assert_eq!(t.encode("hehe", false, false).unwrap(), vec![HEHE]);
    // "he he" splits into "he" and " he"; the space stays its own byte token (no merge).
    assert_eq!(
        t.encode("he he", false, false).unwrap(),
        vec![HE, b' ' as u32, HE]
    );
    // "heh": "h e" (rank 0) first, leaving "he" + "h".
    assert_eq!(
        t.encode("heh", false, false).unwrap(),
        vec![HE, b'h' as u32]
    );
    assert_eq!(t.encode("", true, true).unwrap(), Vec::<u32>::new());
    assert_eq!(
        t.decode(&t.encode("he hehe\n", false, false).unwrap()),
        "he hehe\n"
    );
    // Qwen2's default: no BOS even when asked for special tokens, no EOS without add_eos.
    assert!(!t.adds_bos());
    assert_eq!(t.encode("hehe", true, false).unwrap(), vec![HEHE]);
    assert_eq!(t.eos_id(), Some(CONTROL));
}

#[test]
fn control_tokens_are_text_unless_parse_special_but_user_defined_always_match() {
    let t = Vocab::valid().load("specials").unwrap();
    assert_eq!(t.token_kind(CONTROL), Some(TokenKind::Control));
    assert_eq!(t.token_kind(USER), Some(TokenKind::UserDefined));
    assert_eq!(
        t.encode("x<|ctl|>y", false, true).unwrap(),
        vec![b'x' as u32, CONTROL, b'y' as u32]
    );
    assert_eq!(
        t.encode("x<|ctl|>y", false, false).unwrap(),
        bytes("x<|ctl|>y")
    );
    assert_eq!(
        t.encode("x<user>y", false, false).unwrap(),
        vec![b'x' as u32, USER, b'y' as u32]
    );
    assert_eq!(t.decode(&[b'x' as u32, CONTROL, USER]), "x<|ctl|><user>");
}

#[test]
fn end_of_generation_text_is_made_control_as_llama_cpp_does() {
    // Typed user-defined (4) in the file; llama.cpp retypes "<|im_end|>" as control, so it is
    // only matched with parse_special.
    let t = Vocab::valid().load("im_end_retyped").unwrap();
    assert_eq!(t.token_kind(IM_END), Some(TokenKind::Control));
    assert_eq!(
        t.encode("<|im_end|>", false, false).unwrap(),
        bytes("<|im_end|>")
    );
    assert_eq!(t.encode("<|im_end|>", false, true).unwrap(), vec![IM_END]);
}

#[test]
fn add_bos_and_add_eos_flags_are_honoured() {
    let mut v = Vocab::valid();
    v.extra
        .push(("tokenizer.ggml.bos_token_id", MetaValue::U32(USER)));
    v.extra
        .push(("tokenizer.ggml.add_bos_token", MetaValue::Bool(true)));
    v.extra
        .push(("tokenizer.ggml.add_eos_token", MetaValue::Bool(true)));
    let t = v.load("add_bos_eos").unwrap();
    assert!(t.adds_bos());
    assert_eq!(
        t.encode("hehe", true, false).unwrap(),
        vec![USER, HEHE, CONTROL]
    );
    assert_eq!(t.encode("hehe", false, false).unwrap(), vec![HEHE]);
}

#[test]
fn unsupported_model_is_named() {
    let v = Vocab {
        model: Some("rwkv"),
        ..Vocab::valid()
    };
    let e = expect_error(v, "model_rwkv", &["\"rwkv\"", "RWKV", "\"gpt2\"", "\"t5\""]);
    assert!(matches!(e, TokenizerError::UnsupportedModel { .. }));
    let v = Vocab {
        model: Some("some-new-thing"),
        ..Vocab::valid()
    };
    expect_error(v, "model_unknown", &["\"some-new-thing\"", "\"gpt2\""]);
}

#[test]
fn a_split_rule_rocky_cannot_reproduce_is_refused_with_the_reason() {
    let v = Vocab {
        pre: Some("kimi-k2"),
        ..Vocab::valid()
    };
    let e = expect_error(v, "pre_kimi_k2", &["\"kimi-k2\"", "hand-written"]);
    assert!(matches!(e, TokenizerError::UnsupportedPreTokenizer { .. }));
}

/// llama.cpp tokenizes a BPE vocabulary without tokenizer.ggml.pre with its default rule and a
/// warning; rocky does the same, and also for a name llama.cpp does not know (which llama.cpp
/// refuses), saying so. The default rule keeps "hehe" one word, so the merges still apply.
#[test]
fn missing_or_unknown_pre_tokenizer_falls_back_to_the_default_rule_with_a_warning() {
    for (name, pre, needle) in [
        ("pre_missing", None, "is missing"),
        ("pre_empty", Some(""), "is empty"),
        (
            "pre_unknown",
            Some("some-new-pre"),
            "\"some-new-pre\" is unknown",
        ),
    ] {
        let v = Vocab {
            pre,
            ..Vocab::valid()
        };
        let t = v.load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let warnings = t.warnings();
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
        assert!(warnings[0].contains(needle), "{name}: {warnings:?}");
        assert!(warnings[0].contains("'default'"), "{name}: {warnings:?}");
        assert_eq!(t.info().pre.as_deref(), Some("default"));
        assert_eq!(t.encode("hehe", false, false).unwrap(), vec![HEHE]);
        // The default rule cuts punctuation runs off words: "he!!" is "he" then "!!".
        assert_eq!(t.encode("he!!", false, false).unwrap(), vec![HE, 33, 33]);
    }
    // A known name has no warning.
    assert!(Vocab::valid()
        .load("pre_known")
        .unwrap()
        .warnings()
        .is_empty());
}

#[test]
fn missing_metadata_is_named() {
    type Case = (&'static str, fn(&mut Vocab), &'static str);
    let cases: [Case; 4] = [
        ("no_model", |v| v.model = None, "tokenizer.ggml.model"),
        ("no_tokens", |v| v.tokens = None, "tokenizer.ggml.tokens"),
        ("no_types", |v| v.types = None, "tokenizer.ggml.token_type"),
        ("no_merges", |v| v.merges = None, "tokenizer.ggml.merges"),
    ];
    for (name, mutate, key) in cases {
        let mut v = Vocab::valid();
        mutate(&mut v);
        let e = expect_error(v, name, &[key, "missing"]);
        assert!(
            matches!(e, TokenizerError::Metadata { .. }),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn inconsistent_metadata_is_named() {
    let mut v = Vocab::valid();
    v.types.as_mut().unwrap().pop();
    expect_error(
        v,
        "types_short",
        &["tokenizer.ggml.token_type", "260 entries", "261"],
    );

    let mut v = Vocab::valid();
    v.merges.as_mut().unwrap().push("he x".into());
    expect_error(
        v,
        "merge_result_unknown",
        &["tokenizer.ggml.merges", "\"hex\""],
    );

    let mut v = Vocab::valid();
    v.merges.as_mut().unwrap().push("hehe".into());
    expect_error(
        v,
        "merge_without_space",
        &["tokenizer.ggml.merges", "entry 2"],
    );

    let mut v = Vocab::valid();
    v.tokens.as_mut().unwrap()[HEHE as usize] = "he".into();
    expect_error(v, "duplicate_token", &["tokenizer.ggml.tokens", "twice"]);

    // Most of the byte alphabet missing: not a byte-level vocabulary at all.
    let mut v = Vocab::valid();
    for b in (0..100usize).chain(128..256) {
        v.tokens.as_mut().unwrap()[b] = format!("t{b}");
    }
    expect_error(
        v,
        "no_byte_alphabet",
        &["tokenizer.ggml.tokens", "byte-level"],
    );

    let mut v = Vocab::valid();
    v.extra
        .push(("tokenizer.ggml.bos_token_id", MetaValue::U32(261)));
    expect_error(
        v,
        "bos_out_of_range",
        &["tokenizer.ggml.bos_token_id", "261"],
    );

    // ChatGLM's rows have no default BOS, so asking for one without naming it is an error.
    let mut v = Vocab::valid();
    v.pre = Some("chatglm-bpe");
    v.extra
        .push(("tokenizer.ggml.add_bos_token", MetaValue::Bool(true)));
    expect_error(
        v,
        "add_bos_without_bos",
        &["tokenizer.ggml.bos_token_id", "add_bos_token"],
    );
}

/// llama.cpp drops a byte that has no byte-level token (Falcon's vocabulary lacks most control
/// bytes); rocky does too and says so when loading.
#[test]
fn a_missing_byte_token_is_a_warning_and_the_byte_is_dropped() {
    let mut v = Vocab::valid();
    v.tokens.as_mut().unwrap()[0] = "zero".into();
    let t = v.load("missing_byte").unwrap();
    let warnings = t.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("0x00"), "{warnings:?}");
    assert_eq!(t.encode("\0hehe\0", false, false).unwrap(), vec![HEHE]);
}

/// A BPE vocabulary that names no BOS gets llama.cpp's default, token 11.
#[test]
fn bpe_bos_defaults_to_token_11_as_in_llama_cpp() {
    let mut v = Vocab::valid();
    v.extra
        .push(("tokenizer.ggml.add_bos_token", MetaValue::Bool(true)));
    let t = v.load("bos_default").unwrap();
    assert_eq!(t.bos_id(), Some(11));
    assert_eq!(t.encode("hehe", true, false).unwrap(), vec![11, HEHE]);
}

#[test]
fn missing_tokenizer_json_is_an_error_naming_the_file() {
    let err = Tokenizer::from_tokenizer_json("/nonexistent/tokenizer.json").unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/tokenizer.json"),
        "{err}"
    );
}

/// llama.cpp strips whitespace beside special tokens by name, for every tokenizer family: after
/// every special token of a Phi-3 model, before `<mask>` of a Jina v2 vocabulary.
#[test]
fn special_tokens_strip_whitespace_by_model_name_as_llama_cpp_does() {
    let t = Vocab::valid().load("strip_none").unwrap();
    assert_eq!(
        t.encode("<|ctl|> hehe", false, true).unwrap(),
        vec![CONTROL, 32, HEHE]
    );

    let mut v = Vocab::valid();
    v.extra
        .push(("general.name", MetaValue::String("Phi3 Mini".into())));
    let t = v.load("strip_phi3").unwrap();
    assert_eq!(
        t.encode("<|ctl|> hehe", false, true).unwrap(),
        vec![CONTROL, HEHE]
    );

    const MASK: u32 = 261;
    let mut v = Vocab::valid();
    v.pre = Some("jina-v2-es");
    v.tokens.as_mut().unwrap().push("<mask>".into());
    v.types.as_mut().unwrap().push(3);
    let t = v.load("strip_mask").unwrap();
    assert_eq!(t.encode("he <mask>", false, true).unwrap(), vec![HE, MASK]);
    // Only before the token, and only for <mask>.
    assert_eq!(
        t.encode("<mask> he", false, true).unwrap(),
        vec![MASK, 32, HE]
    );
}
