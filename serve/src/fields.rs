//! Every request field rocky serve knows, and what it does with each: honoured, accepted and
//! ignored (with why: the README lists these), or accepted only at the value that changes
//! nothing. Any other field is a 400 naming it, as OpenAI answers an unrecognized argument:
//! a setting the client relies on is never dropped in silence.

use crate::error::ApiError;
use serde_json::Value;

/// What happens to a field.
#[derive(Clone, Copy)]
pub enum Rule {
    Honoured,
    /// Accepted and ignored, for this reason.
    Ignored(&'static str),
    /// Accepted only where the value keeps OpenAI's default behaviour (`ok`); otherwise a 400
    /// saying `why`.
    DefaultOnly {
        ok: fn(&Value) -> bool,
        why: &'static str,
    },
}

use Rule::*;

fn zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}
fn empty(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.is_empty())
}
fn is_false(v: &Value) -> bool {
    v == &Value::Bool(false)
}
fn one(v: &Value) -> bool {
    v.as_u64() == Some(1)
}

const SHARED: &[(&str, Rule)] = &[
    ("model", Honoured),
    ("max_tokens", Honoured),
    ("temperature", Honoured),
    ("top_p", Honoured),
    ("top_k", Honoured),
    ("min_p", Honoured),
    ("repeat_penalty", Honoured),
    ("seed", Honoured),
    ("stop", Honoured),
    ("stream", Honoured),
    ("n", Honoured),
    // llama-server's: end-of-generation tokens masked out (benchmarks: fixed reply lengths).
    ("ignore_eos", Honoured),
    (
        "stream_options",
        Ignored("the usage is always in the last streamed chunk"),
    ),
    (
        "user",
        Ignored("an end-user id for abuse monitoring: rocky keeps no accounts"),
    ),
    (
        "cache_prompt",
        Ignored("llama-server's switch: rocky always reuses a cached prefix"),
    ),
    (
        "frequency_penalty",
        DefaultOnly {
            ok: zero,
            why: "rocky's sampler has a repetition penalty instead: use `repeat_penalty`",
        },
    ),
    (
        "presence_penalty",
        DefaultOnly {
            ok: zero,
            why: "rocky's sampler has a repetition penalty instead: use `repeat_penalty`",
        },
    ),
    (
        "logit_bias",
        DefaultOnly {
            ok: empty,
            why: "rocky does not bias logits",
        },
    ),
];

/// `/v1/chat/completions`' own fields.
pub const CHAT: &[(&str, Rule)] = &[
    ("messages", Honoured),
    ("max_completion_tokens", Honoured),
    ("tools", Honoured),
    ("tool_choice", Honoured),
    ("response_format", Honoured),
    ("logprobs", Honoured),
    ("top_logprobs", Honoured),
    (
        "parallel_tool_calls",
        Ignored(
            "calls the model writes are all returned; a required tool_choice constrains the \
             answer to one call",
        ),
    ),
    (
        "metadata",
        Ignored("tags for OpenAI's stored completions: rocky stores nothing"),
    ),
    (
        "service_tier",
        Ignored("rocky has one tier: the requests in its queue"),
    ),
    (
        "store",
        DefaultOnly {
            ok: is_false,
            why: "rocky stores no completions",
        },
    ),
];

/// `/v1/completions`' own fields.
pub const COMPLETION: &[(&str, Rule)] = &[
    ("prompt", Honoured),
    ("logprobs", Honoured),
    (
        "echo",
        DefaultOnly {
            ok: is_false,
            why: "rocky does not echo the prompt",
        },
    ),
    (
        "best_of",
        DefaultOnly {
            ok: one,
            why: "rocky makes one choice per request",
        },
    ),
    (
        "suffix",
        DefaultOnly {
            ok: |_| false,
            why: "rocky does not insert text between a prompt and a suffix",
        },
    ),
];

/// The body's fields against `own` and the shared list: a 400 naming the first unknown field
/// or unsupported value. A null value is a field left out.
pub fn check(body: &Value, own: &[(&str, Rule)]) -> Result<(), ApiError> {
    let Some(map) = body.as_object() else {
        return Ok(());
    };
    for (key, value) in map {
        if value.is_null() {
            continue;
        }
        let rule = own
            .iter()
            .chain(SHARED)
            .find(|(name, _)| name == key)
            .map(|(_, r)| *r);
        match rule {
            None => {
                return Err(ApiError::bad_request(format!(
                    "unrecognized request field `{key}`: rocky serve does not support it \
                     (the README's serve section lists the fields it reads)"
                )))
            }
            Some(DefaultOnly { ok, why }) if !ok(value) => {
                return Err(ApiError::bad_request(format!(
                    "`{key}` {value} is not supported: {why}"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Every field and what happens to it, for the README's table (a test keeps the two equal).
pub fn table() -> String {
    let mut out = String::new();
    for (endpoint, own) in [
        ("both", SHARED),
        ("chat", CHAT),
        ("completions", COMPLETION),
    ] {
        for (name, rule) in own {
            let what = match rule {
                Honoured => "honoured".to_string(),
                Ignored(why) => format!("accepted, ignored: {why}"),
                DefaultOnly { why, .. } => format!("only its default; otherwise 400: {why}"),
            };
            out.push_str(&format!("| `{name}` | {endpoint} | {what} |\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_and_unsupported_values_are_400s_naming_them() {
        let e = check(&json!({"prompt": "a", "best_of": 3}), COMPLETION).unwrap_err();
        assert!(e.message.contains("`best_of` 3"), "{}", e.message);
        let e = check(&json!({"messages": [], "n_predict": 3}), CHAT).unwrap_err();
        assert!(e.message.contains("`n_predict`"), "{}", e.message);
        // A completions-only field is unknown to chat.
        assert!(check(&json!({"echo": false}), CHAT).is_err());
        assert!(check(
            &json!({"echo": false, "best_of": 1, "suffix": null, "user": "u", "logit_bias": {}}),
            COMPLETION
        )
        .is_ok());
    }

    #[test]
    fn the_readme_lists_every_field() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let table = table();
        assert!(
            readme.contains(&table),
            "README.md's serve section must hold this table:\n{table}"
        );
    }
}
