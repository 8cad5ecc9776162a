//! Reads `tokenizer.ggml.*` metadata into a validated vocabulary, applying llama.cpp's rules
//! for token kinds and special-token flags. Anything missing or inconsistent is an error that
//! names the key: a tokenizer that guesses produces plausible but wrong ids. The readers of the
//! keys every vocabulary has (tokens, token types, special ids, flags) are shared with the
//! SentencePiece vocabulary (`spm`).

use super::pre_tokenizer::{PreTokenizer, SplitRule};
use super::{TokenKind, TokenizerError};
use crate::gguf::{GgufFile, MetaValue};
use std::collections::{HashMap, HashSet};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
pub(super) const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub(super) const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
pub(super) const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
pub(super) const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
pub(super) const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub(super) const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// A byte-level BPE vocabulary as llama.cpp would load it.
pub(crate) struct GgufVocab {
    pub tokens: Vec<String>,
    pub kinds: Vec<TokenKind>,
    /// In rank order, duplicates removed (the first occurrence keeps its rank, as in llama.cpp).
    pub merges: Vec<(String, String)>,
    pub pre: PreTokenizer,
    /// What was tolerated: llama.cpp's default pre-tokenizer instead of the file's own, bytes
    /// without a token.
    pub warnings: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

impl GgufVocab {
    pub fn read(file: &GgufFile) -> Result<GgufVocab, TokenizerError> {
        let err = metadata_error(file);

        let model = tokenizer_model(file)?;
        // llama.cpp's "gemma4" model is its BPE with the pre-tokenizer forced to "gemma4".
        let (pre, pre_warning) = match model {
            "gpt2" => resolve_pre_tokenizer(file)?,
            "gemma4" => (
                PreTokenizer::from_gguf_name("gemma4").expect("the table has gemma4"),
                None,
            ),
            _ => {
                return Err(TokenizerError::UnsupportedModel {
                    path: file.path().to_path_buf(),
                    model: model.to_string(),
                })
            }
        };
        // Refuse a split rule rocky knows but cannot reproduce before reading the rest.
        if let Err(why) = pre.rule.regexes() {
            return Err(TokenizerError::UnsupportedPreTokenizer {
                path: file.path().to_path_buf(),
                pre: pre.name.to_string(),
                why: why.to_string(),
            });
        }

        let tokens = read_tokens(file, &err)?;
        let n = tokens.len();
        let mut kinds = read_kinds(file, n, &err)?;
        let token_ids = index_tokens(&tokens, &err)?;
        let merges = read_merges(file, &token_ids, &err)?;
        let missing = if pre.rule.byte_level() {
            missing_byte_tokens(&token_ids)
        } else {
            missing_fallback_tokens(&token_ids)
        };
        if missing.len() > 128 {
            let detail = if pre.rule.byte_level() {
                format!("has no byte-level token for {} of the bytes UTF-8 text can hold: not a GPT-2 byte-level BPE vocabulary", missing.len())
            } else {
                format!("has no <0xXX> token for {} of the bytes UTF-8 text can hold: pre-tokenizer \"{}\" spells characters without a token by those", missing.len(), pre.name)
            };
            return Err(err(KEY_TOKENS, detail));
        }
        let mut warnings: Vec<String> = pre_warning.into_iter().collect();
        if !missing.is_empty() {
            let list: Vec<String> = missing.iter().map(|b| format!("0x{b:02x}")).collect();
            warnings.push(format!(
                "{KEY_TOKENS} has no token for the byte(s) {}: text containing them loses them, as in llama.cpp",
                list.join(" ")
            ));
        }

        // llama.cpp's BPE defaults: BOS and EOS are token 11 (GPT-2-era files named neither)
        // unless that is outside the vocabulary; ChatGLM's rows have no default BOS.
        // The "gemma4" model has no defaults at all.
        let defaults = model == "gpt2";
        let default_id = |id: u32, allowed: bool| (allowed && (id as usize) < n).then_some(id);
        let bos = read_token_id(file, KEY_BOS, n, &err)?
            .or(default_id(11, defaults && !pre.no_default_bos));
        let eos = read_token_id(file, KEY_EOS, n, &err)?.or(default_id(11, defaults));
        let mut add_bos = read_flag(file, KEY_ADD_BOS, pre.default_add_bos, &err)?;
        if pre.rule == SplitRule::Gemma4 && !add_bos {
            // llama.cpp 0c1e57098 overrides the file here (its PR 21500), with a warning.
            add_bos = true;
            warnings.push(format!(
                "{KEY_ADD_BOS} is false, but llama.cpp adds a BOS for Gemma 4 vocabularies anyway, and so does rocky"
            ));
        }
        let add_eos = read_flag(file, KEY_ADD_EOS, false, &err)?;
        if add_bos && bos.is_none() {
            return Err(err(
                KEY_BOS,
                format!("is missing but {KEY_ADD_BOS} asks for a BOS token"),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(err(
                KEY_EOS,
                format!("is missing but {KEY_ADD_EOS} asks for an EOS token"),
            ));
        }

        force_control_looking_tokens(file, &token_ids, &mut kinds);

        Ok(GgufVocab {
            tokens,
            kinds,
            merges,
            pre,
            warnings,
            bos,
            eos,
            add_bos,
            add_eos,
        })
    }
}

/// `tokenizer.ggml.pre` to llama.cpp's settings. A missing name gets llama.cpp's default rule
/// with its warning. A name llama.cpp does not know (it refuses such a file) also gets the
/// default rule, so that the file still tokenizes, with a warning that the ids may not be the
/// ones the model was trained on.
fn resolve_pre_tokenizer(
    file: &GgufFile,
) -> Result<(PreTokenizer, Option<String>), TokenizerError> {
    let err = metadata_error(file);
    let Some(value) = file.get(KEY_PRE) else {
        return Ok((
            PreTokenizer::default_rule(),
            Some(format!(
                "{KEY_PRE} is missing: using llama.cpp's 'default' pre-tokenizer, as llama.cpp does (it warns that generation quality will be degraded; convert the model again to record its pre-tokenizer)"
            )),
        ));
    };
    let name = value
        .as_str()
        .ok_or_else(|| err(KEY_PRE, format!("is {value}, expected a string")))?;
    if name.is_empty() {
        // llama.cpp treats an empty name as a missing one.
        return Ok((
            PreTokenizer::default_rule(),
            Some(format!(
                "{KEY_PRE} is empty: using llama.cpp's 'default' pre-tokenizer, as llama.cpp does"
            )),
        ));
    }
    Ok(match PreTokenizer::from_gguf_name(name) {
        Some(pre) => (pre, None),
        None => (
            PreTokenizer::default_rule(),
            Some(format!(
                "{KEY_PRE} \"{name}\" is unknown to llama.cpp 0c1e57098 (which refuses the file): using its 'default' pre-tokenizer, so token ids may differ from the ones the model was trained on"
            )),
        ),
    })
}

pub(super) type ErrFn<'a> = dyn Fn(&str, String) -> TokenizerError + 'a;

/// `tokenizer.ggml.model`: which tokenizer family the vocabulary belongs to.
pub(super) fn tokenizer_model(file: &GgufFile) -> Result<&str, TokenizerError> {
    let err = metadata_error(file);
    match file.get(KEY_MODEL) {
        None => Err(err(
            KEY_MODEL,
            "is missing: the file carries no tokenizer (use the GGUF converted with its vocabulary, or a tokenizer.json)".into(),
        )),
        Some(v) => v
            .as_str()
            .ok_or_else(|| err(KEY_MODEL, format!("is {v}, expected a string"))),
    }
}

/// The error for a bad `key` of `file`'s tokenizer metadata.
pub(super) fn metadata_error(file: &GgufFile) -> impl Fn(&str, String) -> TokenizerError + '_ {
    |key: &str, detail: String| TokenizerError::Metadata {
        path: file.path().to_path_buf(),
        key: key.to_string(),
        detail,
    }
}

pub(super) fn read_tokens(file: &GgufFile, err: &ErrFn) -> Result<Vec<String>, TokenizerError> {
    let values = file
        .get(KEY_TOKENS)
        .ok_or_else(|| err(KEY_TOKENS, "is missing: the file has no vocabulary".into()))?;
    let list = values.as_array().ok_or_else(|| {
        err(
            KEY_TOKENS,
            format!("is {values}, expected an array of strings"),
        )
    })?;
    if list.is_empty() {
        return Err(err(KEY_TOKENS, "is empty".into()));
    }
    if list.len() > u32::MAX as usize {
        return Err(err(
            KEY_TOKENS,
            format!(
                "has {} entries, more than token ids can address",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            // llama.cpp renames empty tokens so that every token text is unique and matchable.
            Some("") => Ok(format!("[EMPTY_{i}]")),
            Some(s) => Ok(s.to_string()),
            None => Err(err(
                KEY_TOKENS,
                format!("entry {i} is {v}, expected a string"),
            )),
        })
        .collect()
}

pub(super) fn read_kinds(
    file: &GgufFile,
    n: usize,
    err: &ErrFn,
) -> Result<Vec<TokenKind>, TokenizerError> {
    let values = file.get(KEY_TOKEN_TYPE).ok_or_else(|| {
        err(
            KEY_TOKEN_TYPE,
            "is missing: without token types the control tokens cannot be told apart (convert the model again)".into(),
        )
    })?;
    let list = values.as_array().ok_or_else(|| {
        err(
            KEY_TOKEN_TYPE,
            format!("is {values}, expected an array of integers"),
        )
    })?;
    if list.len() != n {
        return Err(err(
            KEY_TOKEN_TYPE,
            format!(
                "has {} entries but {KEY_TOKENS} has {n}: the vocabulary is inconsistent",
                list.len()
            ),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64().map(TokenKind::from_gguf).ok_or_else(|| {
                err(
                    KEY_TOKEN_TYPE,
                    format!("entry {i} is {v}, expected an integer"),
                )
            })
        })
        .collect()
}

pub(super) fn index_tokens<'v>(
    tokens: &'v [String],
    err: &ErrFn,
) -> Result<HashMap<&'v str, u32>, TokenizerError> {
    let mut ids = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if let Some(first) = ids.insert(t.as_str(), i as u32) {
            return Err(err(
                KEY_TOKENS,
                format!("holds {t:?} twice (ids {first} and {i}): the vocabulary is inconsistent"),
            ));
        }
    }
    Ok(ids)
}

fn read_merges(
    file: &GgufFile,
    ids: &HashMap<&str, u32>,
    err: &ErrFn,
) -> Result<Vec<(String, String)>, TokenizerError> {
    let values = file.get(KEY_MERGES).ok_or_else(|| {
        err(
            KEY_MERGES,
            "is missing: a gpt2 (BPE) vocabulary needs its merge list".into(),
        )
    })?;
    let list = values.as_array().ok_or_else(|| {
        err(
            KEY_MERGES,
            format!("is {values}, expected an array of strings"),
        )
    })?;
    let mut seen = HashSet::with_capacity(list.len());
    let mut merges = Vec::with_capacity(list.len());
    let mut joined = String::new();
    for (i, v) in list.iter().enumerate() {
        let text = v
            .as_str()
            .ok_or_else(|| err(KEY_MERGES, format!("entry {i} is {v}, expected a string")))?;
        // llama.cpp splits at the first space after the first byte; byte-level tokens never
        // contain a space, so this is the only split.
        let split = text
            .bytes()
            .skip(1)
            .position(|b| b == b' ')
            .map(|p| p + 1)
            .ok_or_else(|| {
                err(
                    KEY_MERGES,
                    format!("entry {i} {text:?} is not two tokens separated by a space"),
                )
            })?;
        let (left, right) = (&text[..split], &text[split + 1..]);
        joined.clear();
        joined.push_str(left);
        joined.push_str(right);
        for part in [left, right, joined.as_str()] {
            if !ids.contains_key(part) {
                return Err(err(
                    KEY_MERGES,
                    format!("entry {i} {text:?} needs token {part:?}, which is not in {KEY_TOKENS}: the vocabulary is inconsistent"),
                ));
            }
        }
        if seen.insert((left, right)) {
            merges.push((left.to_string(), right.to_string()));
        }
    }
    Ok(merges)
}

/// The bytes without a `<0xXX>` token, for the BPE over raw UTF-8 (Gemma 4), whose characters
/// without a token are spelled by those.
fn missing_fallback_tokens(ids: &HashMap<&str, u32>) -> Vec<u8> {
    let in_utf8 = |b: u8| !matches!(b, 0xc0 | 0xc1 | 0xf5..=0xff);
    (0..=255u8)
        .filter(|&b| in_utf8(b))
        .filter(|&b| !ids.contains_key(format!("<0x{b:02X}>").as_str()))
        .collect()
}

/// The bytes UTF-8 text can hold that have no single-character token. llama.cpp drops such a
/// byte from the text it tokenizes (Falcon's vocabulary lacks most control characters), and so
/// does the BPE here; the caller reports them. 0xC0, 0xC1 and 0xF5..0xFF never occur in UTF-8.
fn missing_byte_tokens(ids: &HashMap<&str, u32>) -> Vec<u8> {
    let in_utf8 = |b: u8| !matches!(b, 0xc0 | 0xc1 | 0xf5..=0xff);
    (0..=255u8)
        .filter(|&b| in_utf8(b))
        .filter(|&b| !ids.contains_key(super::byte_level::byte_to_char(b).to_string().as_str()))
        .collect()
}

pub(super) fn read_token_id(
    file: &GgufFile,
    key: &str,
    n: usize,
    err: &ErrFn,
) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    match v.as_u64() {
        Some(id) if (id as usize) < n => Ok(Some(id as u32)),
        Some(id) => Err(err(
            key,
            format!("is {id}, outside the {n}-token vocabulary"),
        )),
        None => Err(err(key, format!("is {v}, expected a token id"))),
    }
}

pub(super) fn read_flag(
    file: &GgufFile,
    key: &str,
    default: bool,
    err: &ErrFn,
) -> Result<bool, TokenizerError> {
    match file.get(key) {
        None => Ok(default),
        Some(MetaValue::Bool(b)) => Ok(*b),
        Some(v) => Err(err(key, format!("is {v}, expected true or false"))),
    }
}

/// llama.cpp 0c1e57098's end-of-generation texts (its end-of-turn texts are among them): made
/// control tokens here, and tokens that end generation (`rocky-generate`'s stop conditions).
pub const END_OF_GENERATION: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// llama.cpp's load-time fix-up: tokens whose text marks end-of-generation or fill-in-the-middle
/// are made control tokens even when the converter typed them otherwise (Qwen2.5's
/// `<|fim_prefix|>`… are user-defined in its tokenizer.json). This changes whether they are
/// matched in text with `parse_special` off, so it must be mirrored.
///
/// llama.cpp forces every end-of-generation text, and for each FIM role whose id is not in the
/// metadata the first matching text it meets; rocky forces all matching texts of such a role
/// (the same result unless a vocabulary holds two spellings of one role).
pub(super) fn force_control_looking_tokens(
    file: &GgufFile,
    ids: &HashMap<&str, u32>,
    kinds: &mut [TokenKind],
) {
    // (metadata keys that name the role's token, texts llama.cpp recognizes for it)
    const ROLES: &[(&[&str], &[&str])] = &[
        (
            &[
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.prefix_token_id",
            ],
            &[
                "<|fim_prefix|>",
                "<fim-prefix>",
                "<fim_prefix>",
                "<｜fim▁begin｜>",
                "<PRE>",
                "▁<PRE>",
                "<|code_prefix|>",
                "<|prefix|>",
            ],
        ),
        (
            &[
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.suffix_token_id",
            ],
            &[
                "<|fim_suffix|>",
                "<fim-suffix>",
                "<fim_suffix>",
                "<｜fim▁hole｜>",
                "<SUF>",
                "▁<SUF>",
                "<|code_suffix|>",
                "<|suffix|>",
            ],
        ),
        (
            &[
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.middle_token_id",
            ],
            &[
                "<|fim_middle|>",
                "<fim-middle>",
                "<fim_middle>",
                "<｜fim▁end｜>",
                "<MID>",
                "▁<MID>",
                "<|code_middle|>",
                "<|middle|>",
            ],
        ),
        (
            &["tokenizer.ggml.fim_pad_token_id"],
            &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        ),
        (
            &["tokenizer.ggml.fim_rep_token_id"],
            &[
                "<|fim_repo|>",
                "<|repo_name|>",
                "<fim-repo>",
                "<REPO>",
                "<reponame>",
            ],
        ),
        (&["tokenizer.ggml.fim_sep_token_id"], &["<|file_sep|>"]),
    ];
    let mut force = |text: &str| {
        if let Some(&id) = ids.get(text) {
            kinds[id as usize] = TokenKind::Control;
        }
    };
    END_OF_GENERATION.iter().for_each(|t| force(t));
    for (keys, texts) in ROLES {
        if keys.iter().all(|k| file.get(k).is_none()) {
            texts.iter().for_each(|t| force(t));
        }
    }
}
