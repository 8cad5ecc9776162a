//! The SentencePiece-style GGUF tokenizer (`tokenizer.ggml.model = "llama"`):
//!
//! - the real Gemma 3 270M vocabulary (the model file made by tools/prepare-test-assets.sh)
//!   against llama.cpp's token ids in ../shared/golden/gemma3-270m: `tokenize_only.json` (with
//!   and without special tokens), the text prompts `p*.json` (their own add_special and
//!   parse_special flags) and the prompts of `greedy32.json` (BOS added, special tokens parsed);
//!   the pieces llama.cpp printed for its top-20 tokens; decode(encode(text)) == text;
//! - a small synthetic vocabulary in closed form: merging by score, ties to the leftmost pair,
//!   the space prefix, byte fallback, the default special ids;
//! - hostile vocabularies (scores of the wrong type or length, NaN scores, missing byte tokens,
//!   a misspelled byte token) refused with an error naming the key, never a panic.
//!
//! Each test prints what it checked (run with `-- --nocapture` to see it).

mod common;

use common::token_cases::{check, ids_of, Case};

use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, ValueType};
use rocky_models::tokenizer::{TokenKind, Tokenizer, TokenizerError};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn golden_dir() -> PathBuf {
    common::shared().join("golden/gemma3-270m")
}

/// The Gemma 3 tokenizer, read from the model file once per test binary.
fn gemma() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = common::asset("gemma-3-270m-q4_k_m.gguf");
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
    })
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn tokenize_only_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let list = read_json(&golden_dir().join("tokenize_only.json"));
    for (i, entry) in list.as_array().expect("a list").iter().enumerate() {
        let text = entry["text"].as_str().expect("text").to_string();
        for add_special in [true, false] {
            cases.push(Case {
                origin: format!("tokenize_only.json #{i} add_special={add_special}"),
                text: text.clone(),
                add_special,
                // Made with parse_special off: "<bos>" in the text comes out as "<", "bos", ">".
                parse_special: false,
                expected: ids_of(&entry[format!("ids_add_special_{add_special}")]),
            });
        }
    }
    cases
}

fn text_prompt_cases() -> Vec<Case> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("the gemma3-270m golden folder")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with('p') && name.ends_with(".json")
        })
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| read_json(p))
        .filter(|j| j["kind"] == "text")
        .map(|j| Case::from_prompt(&j, format!("{}.json", j["name"].as_str().unwrap())))
        .collect()
}

/// llama-completion's prompts: BOS added and special tokens parsed (see the folder's README).
fn greedy_prompt_cases() -> Vec<Case> {
    let greedy = read_json(&golden_dir().join("greedy32.json"));
    greedy["prompts"]
        .as_array()
        .expect("a prompt list")
        .iter()
        .map(|p| Case {
            origin: format!("greedy32.json {}", p["name"].as_str().unwrap()),
            text: p["prompt_text"].as_str().expect("prompt_text").to_string(),
            add_special: true,
            parse_special: true,
            expected: ids_of(&p["prompt_token_ids"]),
        })
        .collect()
}

#[test]
fn gemma3_tokenize_only_json() {
    let cases = tokenize_only_cases();
    assert!(
        cases.len() >= 36,
        "expected 18 texts twice, found {}",
        cases.len()
    );
    assert_eq!(check("gemma3 tokenize_only.json", gemma(), &cases), 0);
}

#[test]
fn gemma3_text_prompts_and_greedy_prompts() {
    let prompts = text_prompt_cases();
    assert!(
        prompts.len() >= 3,
        "expected the p1/p3/p4 text prompts, found {}",
        prompts.len()
    );
    assert_eq!(check("gemma3 text prompts", gemma(), &prompts), 0);
    let greedy = greedy_prompt_cases();
    assert!(!greedy.is_empty(), "no prompts in greedy32.json");
    assert_eq!(
        check("gemma3 greedy32 prompts (parse_special)", gemma(), &greedy),
        0
    );
}

#[test]
fn gemma3_decode_gives_every_golden_text_back() {
    let mut cases = tokenize_only_cases();
    cases.extend(text_prompt_cases());
    let mut failures = 0;
    for case in &cases {
        let ids = gemma().encode(&case.text, false, false).unwrap();
        let back = gemma().decode(&ids);
        if back != case.text {
            failures += 1;
            eprintln!(
                "ROUND TRIP {}: {:?} came back as {:?}",
                case.origin, case.text, back
            );
        }
    }
    println!(
        "gemma3 decode(encode(text)): {} texts, {failures} failures",
        cases.len()
    );
    assert_eq!(failures, 0);
}

#[test]
fn gemma3_token_piece_matches_llama_cpp_for_every_golden_top20_token() {
    let mut pieces = std::collections::BTreeMap::new();
    for f in std::fs::read_dir(golden_dir()).unwrap() {
        let f = f.unwrap().path();
        if f.extension().map_or(true, |e| e != "json") {
            continue;
        }
        for entry in read_json(&f)["top20"].as_array().into_iter().flatten() {
            let id = entry[0].as_u64().unwrap() as u32;
            pieces.insert(id, entry[2].as_str().unwrap().to_string());
        }
    }
    assert!(
        pieces.len() >= 40,
        "expected the golden top-20 lists, found {} ids",
        pieces.len()
    );
    let wrong: Vec<_> = pieces
        .iter()
        .filter(|(&id, piece)| gemma().token_piece(id) != **piece)
        .map(|(&id, piece)| (id, piece.clone(), gemma().token_piece(id)))
        .collect();
    println!(
        "gemma3 token_piece: {} distinct golden ids, {} mismatches",
        pieces.len(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "(id, llama.cpp, rocky): {wrong:?}");
}

#[test]
fn gemma3_special_tokens_as_the_vocabulary_says() {
    let t = gemma();
    assert_eq!(t.vocab_size(), 262144);
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_id(), Some(1));
    assert!(t.adds_bos());
    let start = t.token_id("<start_of_turn>").unwrap();
    let end = t.token_id("<end_of_turn>").unwrap();
    assert_eq!(t.token_kind(start), Some(TokenKind::Control));
    let text = "<start_of_turn>user\nhi<end_of_turn>";
    // parse_special turns the markers into their ids; no space prefix (Gemma turns it off),
    // "\n" is a user-defined token cut out either way.
    let ids = t.encode(text, true, true).unwrap();
    assert_eq!(ids.first(), Some(&2));
    assert_eq!(ids[1], start);
    assert_eq!(ids.last(), Some(&end));
    assert_eq!(t.decode(&ids[1..]), text);
    assert!(t.encode(text, false, false).unwrap().len() > ids.len());
    // "</s>" is typed user-defined in Gemma's vocabulary, but llama.cpp makes every
    // end-of-generation text a control token, so it is plain text unless parse_special is on
    // (ids from llama.cpp 0c1e57098 itself, not in the golden files).
    let eos_text = t.token_id("</s>").unwrap();
    assert_eq!(eos_text, 212);
    assert_eq!(t.token_kind(eos_text), Some(TokenKind::Control));
    assert_eq!(
        t.encode("a</s>b", false, false).unwrap(),
        vec![236746, 954, 236751, 236813, 236763]
    );
    assert_eq!(
        t.encode("a</s>b", true, true).unwrap(),
        vec![2, 236746, 212, 236763]
    );
    // Byte fallback: a character the vocabulary lacks comes out as its UTF-8 bytes.
    let lacking = ['\u{e000}', '\u{10fffd}', '\u{1}']
        .into_iter()
        .find(|c| t.token_id(&c.to_string()).is_none())
        .expect("some private-use or control character outside the vocabulary");
    let ids = t.encode(&lacking.to_string(), false, false).unwrap();
    let bytes: Vec<u32> = lacking
        .to_string()
        .bytes()
        .map(|b| t.token_id(&format!("<0x{b:02X}>")).unwrap())
        .collect();
    assert_eq!(ids, bytes);
    assert_eq!(t.decode(&ids), lacking.to_string());
    println!("gemma3: special tokens, chat markers and byte fallback as expected");
}

#[test]
fn gemma3_cannot_be_exported_as_tokenizer_json() {
    let err = gemma().to_tokenizer_json().expect_err("no tokenizer.json");
    assert!(err.to_string().contains("SentencePiece"), "{err}");
}

// ---- a synthetic SentencePiece vocabulary -------------------------------------------------

const UNK: u32 = 0;
const BOS: u32 = 1;
const EOS: u32 = 2;
/// The token of byte `b` is `BYTE0 + b`.
const BYTE0: u32 = 3;

/// Normal tokens after the byte tokens: (text, score). "bc" outranks "ab"; "aa" ties with
/// itself wherever it can form.
const PIECES: &[(&str, f32)] = &[
    ("\u{2581}", -1.0),
    ("a", -2.0),
    ("b", -3.0),
    ("c", -4.0),
    ("ab", -5.0),
    ("bc", -0.5),
    ("aa", -6.0),
    ("\u{2581}a", -7.0),
    ("\u{2581}ab", -8.0),
];

fn piece(text: &str) -> u32 {
    BYTE0 + 256 + PIECES.iter().position(|(t, _)| *t == text).unwrap() as u32
}

struct Spm {
    tokens: Vec<String>,
    types: Vec<i32>,
    scores: Option<MetaValue>,
    extra: Vec<(&'static str, MetaValue)>,
}

impl Spm {
    fn valid() -> Spm {
        let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
        let mut types = vec![2, 3, 3];
        let mut scores = vec![0.0f32; 3];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for (text, score) in PIECES {
            tokens.push(text.to_string());
            types.push(1);
            scores.push(*score);
        }
        Spm {
            tokens,
            types,
            scores: Some(MetaValue::Array(
                ValueType::F32,
                scores.into_iter().map(MetaValue::F32).collect(),
            )),
            extra: Vec::new(),
        }
    }

    fn load(self, name: &str) -> Result<Tokenizer, TokenizerError> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::String("llama".into()));
        w.set("tokenizer.ggml.model", MetaValue::String("llama".into()));
        w.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(
                ValueType::String,
                self.tokens.into_iter().map(MetaValue::String).collect(),
            ),
        );
        w.set(
            "tokenizer.ggml.token_type",
            MetaValue::Array(
                ValueType::I32,
                self.types.into_iter().map(MetaValue::I32).collect(),
            ),
        );
        if let Some(scores) = self.scores {
            w.set("tokenizer.ggml.scores", scores);
        }
        for (k, v) in self.extra {
            w.set(k, v);
        }
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tokenizer-spm");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.gguf"));
        w.write(&path, |_, _| Ok(Vec::new())).unwrap();
        Tokenizer::from_gguf(&GgufFile::open(&path).unwrap())
    }
}

fn byte(b: u8) -> u32 {
    BYTE0 + b as u32
}

#[test]
fn synthetic_vocabulary_merges_by_score_as_llama_cpp() {
    let t = Spm::valid().load("valid").unwrap();
    let no_prefix = |text: &str| {
        let mut ids = t.encode(text, false, false).unwrap();
        // Every text starts with the space prefix (llama.cpp's default for "llama"): "▁" plus
        // whatever it merged with.
        assert!(ids[0] == piece("\u{2581}a") || ids[0] == piece("\u{2581}"));
        ids.remove(0);
        ids
    };
    // "bc" (score -0.5) is merged before "ab" (-5), which then no longer exists as a pair:
    // "▁cabc" -> "▁", "c", "a", "bc".
    assert_eq!(no_prefix("cabc"), vec![piece("c"), piece("a"), piece("bc")]);
    // "▁abc": "bc" first, then "▁a" (-7); "abc" and "▁abc" are no tokens.
    assert_eq!(
        t.encode("abc", false, false).unwrap(),
        vec![piece("\u{2581}a"), piece("bc")]
    );
    // Equal scores go to the leftmost pair: "caaa" -> "c", "aa", "a", not "a", "aa".
    assert_eq!(no_prefix("caaa"), vec![piece("c"), piece("aa"), piece("a")]);
    // "▁ab": "ab" (-5) outranks "▁a" (-7) and merges first; the new pair "▁" + "ab" is the
    // token "▁ab" (-8), merged although its score is lower than the now stale "▁a".
    assert_eq!(
        t.encode("ab", false, false).unwrap(),
        vec![piece("\u{2581}ab")]
    );
    // Spaces become "▁"; a character not in the vocabulary is spelled by its bytes.
    assert_eq!(
        t.encode("a é", false, false).unwrap(),
        vec![
            piece("\u{2581}a"),
            piece("\u{2581}"),
            byte(0xc3),
            byte(0xa9)
        ]
    );
    // The defaults: BOS <s> = 1 added, no EOS; the empty text is just BOS.
    assert_eq!(t.bos_id(), Some(BOS));
    assert_eq!(t.eos_id(), Some(EOS));
    assert_eq!(t.encode("", true, false).unwrap(), vec![BOS]);
    assert_eq!(t.encode("", false, false).unwrap(), Vec::<u32>::new());
    assert_eq!(
        t.encode("a", true, false).unwrap(),
        vec![BOS, piece("\u{2581}a")]
    );
    // A special token is text without parse_special; with it, the text after it gets the
    // space prefix again.
    assert_eq!(
        t.encode("a</s>a", false, true).unwrap(),
        vec![piece("\u{2581}a"), EOS, piece("\u{2581}a")]
    );
    assert_eq!(
        t.encode("<unk>", false, true).unwrap(),
        vec![UNK],
        "unknown-typed tokens are matched with parse_special"
    );
    assert!(!t.encode("a</s>a", false, false).unwrap().contains(&EOS));
    // Decoding drops the space prefix it added and turns "▁" and byte tokens back.
    for text in ["ab c", "a é  a", " a", "caaa\n"] {
        let ids = t.encode(text, false, false).unwrap();
        assert_eq!(t.decode(&ids), text, "{ids:?}");
    }
    assert_eq!(t.token_kind(byte(0)), Some(TokenKind::Byte));
    assert_eq!(t.token_bytes(byte(0xc3)), Some(vec![0xc3]));
    assert_eq!(t.token_piece(BOS), "<s>");
    println!("synthetic SentencePiece vocabulary: merges, prefix, byte fallback, defaults");
}

#[test]
fn synthetic_vocabulary_flags_from_the_metadata() {
    let mut v = Spm::valid();
    v.extra = vec![
        ("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false)),
        ("tokenizer.ggml.add_eos_token", MetaValue::Bool(true)),
        ("tokenizer.ggml.add_bos_token", MetaValue::Bool(false)),
        ("tokenizer.ggml.bos_token_id", MetaValue::U32(2)),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(1)),
    ];
    let t = v.load("flags").unwrap();
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_id(), Some(1));
    assert!(!t.adds_bos());
    assert_eq!(
        t.encode("ab", true, false).unwrap(),
        vec![piece("ab"), 1],
        "no prefix, no BOS, EOS added"
    );
    assert_eq!(t.encode("ab", false, false).unwrap(), vec![piece("ab")]);
    assert_eq!(t.decode(&[piece("\u{2581}a")]), " a");
}

#[test]
fn phi3_special_tokens_drop_the_whitespace_after_them_as_in_llama_cpp() {
    // llama.cpp decides this by the model name: Phi-3's special tokens (but <unk>, <s>) strip
    // ASCII whitespace on their right.
    let text = "a</s> \n a<s> a";
    let plain = Spm::valid().load("not_phi3").unwrap();
    let prefix = piece("\u{2581}");
    assert_eq!(
        plain.encode(text, false, true).unwrap(),
        vec![
            piece("\u{2581}a"),
            EOS,
            prefix,
            prefix,
            byte(b'\n'),
            piece("\u{2581}a"),
            BOS,
            prefix,
            piece("\u{2581}a"),
        ]
    );
    let mut v = Spm::valid();
    v.extra = vec![("general.name", MetaValue::String("Phi3 Mini".into()))];
    let phi3 = v.load("phi3").unwrap();
    assert_eq!(
        phi3.encode(text, false, true).unwrap(),
        vec![
            piece("\u{2581}a"),
            EOS,
            piece("\u{2581}a"),
            BOS,
            prefix,
            piece("\u{2581}a"),
        ]
    );
    // Without parse_special nothing is cut out, so nothing is stripped.
    assert_eq!(
        phi3.encode(text, false, false).unwrap(),
        plain.encode(text, false, false).unwrap()
    );
}

fn expect_error(v: Spm, name: &str, needles: &[&str]) -> TokenizerError {
    let err = v.load(name).expect_err("the vocabulary must be refused");
    let message = err.to_string();
    println!("{name}: {message}");
    for needle in needles.iter().chain(&[name]) {
        assert!(
            message.contains(needle),
            "{name}: the error should mention {needle:?}: {message}"
        );
    }
    err
}

#[test]
fn hostile_vocabularies_are_refused_by_key() {
    let scores = "tokenizer.ggml.scores";
    let v = Spm {
        scores: None,
        ..Spm::valid()
    };
    expect_error(v, "scores_missing", &[scores, "missing"]);

    let n = Spm::valid().tokens.len();
    let v = Spm {
        scores: Some(MetaValue::Array(
            ValueType::F32,
            vec![MetaValue::F32(0.0); n - 1],
        )),
        ..Spm::valid()
    };
    expect_error(v, "scores_short", &[scores, &format!("{}", n - 1)]);

    let v = Spm {
        scores: Some(MetaValue::Array(
            ValueType::String,
            vec![MetaValue::String("0".into()); n],
        )),
        ..Spm::valid()
    };
    expect_error(v, "scores_strings", &[scores, "f32"]);

    // i32 scores are read as llama.cpp reads them: converted to float.
    let doubled = match Spm::valid().scores {
        Some(MetaValue::Array(_, list)) => list
            .iter()
            .map(|s| match s {
                MetaValue::F32(x) => MetaValue::I32((x * 2.0) as i32),
                _ => unreachable!("valid() has f32 scores"),
            })
            .collect(),
        _ => unreachable!("valid() has scores"),
    };
    let v = Spm {
        scores: Some(MetaValue::Array(ValueType::I32, doubled)),
        ..Spm::valid()
    };
    let t = v.load("scores_i32").unwrap();
    assert_eq!(
        t.encode("ab", false, false).unwrap(),
        vec![piece("\u{2581}ab")]
    );
    assert_eq!(
        t.encode("cabc", false, false).unwrap(),
        vec![piece("\u{2581}"), piece("c"), piece("a"), piece("bc")]
    );

    let v = Spm {
        scores: Some(MetaValue::F32(1.0)),
        ..Spm::valid()
    };
    expect_error(v, "scores_scalar", &[scores, "array"]);

    let mut nan = vec![MetaValue::F32(0.0); n];
    nan[n - 1] = MetaValue::F32(f32::NAN);
    let v = Spm {
        scores: Some(MetaValue::Array(ValueType::F32, nan)),
        ..Spm::valid()
    };
    expect_error(v, "scores_nan", &[scores, "NaN"]);

    // No "<0x41>" and no "A" token: the letter A could not be encoded.
    let mut v = Spm::valid();
    v.tokens[byte(0x41) as usize] = "<byte A>".into();
    v.types[byte(0x41) as usize] = 1;
    expect_error(v, "byte_missing", &["tokenizer.ggml.tokens", "<0x41>"]);

    // The one-character ASCII token is llama.cpp's second choice for a byte.
    let mut v = Spm::valid();
    v.tokens[byte(0x41) as usize] = "A".into();
    v.types[byte(0x41) as usize] = 1;
    let t = v.load("byte_as_plain_char").unwrap();
    assert_eq!(
        t.encode("\u{1}A", false, false).unwrap(),
        vec![piece("\u{2581}"), byte(1), byte(0x41)]
    );

    let mut v = Spm::valid();
    v.types[piece("ab") as usize] = 6;
    expect_error(
        v,
        "byte_misspelled",
        &["tokenizer.ggml.token_type", "<0xXX>"],
    );

    let mut v = Spm::valid();
    v.types.pop();
    expect_error(v, "types_short", &["tokenizer.ggml.token_type"]);

    let mut v = Spm::valid();
    v.tokens.truncate(2);
    v.types.truncate(2);
    v.scores = Some(MetaValue::Array(
        ValueType::F32,
        vec![MetaValue::F32(0.0); 2],
    ));
    expect_error(v, "tiny", &["tokenizer.ggml.tokens", "<0x00>"]);

    let mut v = Spm::valid();
    v.extra = vec![("tokenizer.ggml.bos_token_id", MetaValue::U32(n as u32))];
    expect_error(v, "bos_out_of_range", &["tokenizer.ggml.bos_token_id"]);

    let mut v = Spm::valid();
    v.tokens[piece("bc") as usize] = "ab".into();
    expect_error(v, "duplicate", &["tokenizer.ggml.tokens", "twice"]);
}

#[test]
fn other_tokenizer_models_stay_refused_by_name() {
    for model in ["plamo2", "rwkv", "some-new-thing"] {
        let mut v = Spm::valid();
        v.extra = vec![("tokenizer.ggml.model", MetaValue::String(model.into()))];
        let err = expect_error(
            v,
            &format!("model_{model}"),
            &[&format!("\"{model}\""), "\"gpt2\"", "\"llama\""],
        );
        assert!(matches!(err, TokenizerError::UnsupportedModel { .. }));
    }
}
