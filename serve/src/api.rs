//! The request bodies of /v1/completions and /v1/chat/completions, read with OpenAI's field
//! names and checked into what the worker runs. Every mistake is a 400 naming the field; no
//! input panics.

use crate::error::ApiError;
use rocky_generate::SamplerParams;
use rocky_models::chat::Message;
use serde::Deserialize;

/// What the worker turns into token ids.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptInput {
    /// Tokenized as `rocky generate --prompt` does (BOS as the vocabulary says, special
    /// tokens parsed).
    Text(String),
    /// Token ids as given.
    Ids(Vec<u32>),
    /// Rendered with the chat format, then tokenized as text.
    Chat(Vec<Message>),
}

/// A checked request.
#[derive(Clone, Debug)]
pub struct Work {
    pub input: PromptInput,
    /// None: until an end-of-generation token or the context is full (llama-server's default).
    pub max_tokens: Option<usize>,
    pub sampler: SamplerParams,
    pub stop: Vec<String>,
    pub stream: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// One part of a message's content array; only text parts are supported.
#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct ChatMessage {
    role: String,
    content: Option<Content>,
}

/// The fields both endpoints share (unknown fields are ignored, as OpenAI clients send many).
#[derive(Deserialize, Default)]
struct Common {
    model: Option<String>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    // llama-server's extensions, the same sampler's other settings.
    top_k: Option<u64>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    seed: Option<u64>,
    stop: Option<Stop>,
    stream: Option<bool>,
    n: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionBody {
    prompt: Option<Prompt>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
struct ChatBody {
    messages: Option<Vec<ChatMessage>>,
    #[serde(flatten)]
    common: Common,
}

/// A parsed request, with the model name it asked for.
pub struct Parsed {
    pub model: Option<String>,
    pub work: Work,
}

fn json_error(e: serde_json::Error) -> ApiError {
    let what = if e.is_syntax() || e.is_eof() {
        "the body is not valid JSON"
    } else {
        "a field has the wrong type or form"
    };
    ApiError::bad_request(format!("{what}: {e}"))
}

/// An untagged field that matched no form: serde only says "did not match any variant", so
/// the message names the field and the forms it takes.
fn check_forms(value: &serde_json::Value) -> Result<(), ApiError> {
    type Accepts = fn(&serde_json::Value) -> bool;
    let forms: [(&str, &str, Accepts); 2] = [
        (
            "prompt",
            "a string, an array of strings or an array of token ids",
            |v| serde_json::from_value::<Prompt>(v.clone()).is_ok(),
        ),
        ("stop", "a string or an array of strings", |v| {
            serde_json::from_value::<Stop>(v.clone()).is_ok()
        }),
    ];
    for (field, expected, ok) in forms {
        if let Some(v) = value.get(field).filter(|v| !v.is_null()) {
            if !ok(v) {
                return Err(ApiError::bad_request(format!(
                    "`{field}` must be {expected}"
                )));
            }
        }
    }
    Ok(())
}

fn parse_value(body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(json_error)?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    check_forms(&value)?;
    Ok(value)
}

/// `/v1/completions`.
pub fn completion(body: &[u8]) -> Result<Parsed, ApiError> {
    let b: CompletionBody = serde_json::from_value(parse_value(body)?).map_err(json_error)?;
    let input =
        match b.prompt {
            None => return Err(ApiError::bad_request("`prompt` is required")),
            Some(Prompt::Text(t)) => PromptInput::Text(t),
            Some(Prompt::Ids(ids)) => PromptInput::Ids(ids),
            Some(Prompt::Texts(mut t)) if t.len() == 1 => PromptInput::Text(t.remove(0)),
            Some(Prompt::Texts(_)) => return Err(ApiError::bad_request(
                "`prompt` as an array holds one string here: rocky serves one prompt per request",
            )),
        };
    common(b.common, input)
}

/// `/v1/chat/completions`.
pub fn chat(body: &[u8]) -> Result<Parsed, ApiError> {
    let b: ChatBody = serde_json::from_value(parse_value(body)?).map_err(json_error)?;
    let messages = b
        .messages
        .ok_or_else(|| ApiError::bad_request("`messages` is required"))?;
    if messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty"));
    }
    let messages = messages
        .into_iter()
        .map(|m| {
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => parts
                    .into_iter()
                    .map(|p| match (p.kind.as_str(), p.text) {
                        ("text", Some(t)) => Ok(t),
                        (kind, _) => Err(ApiError::bad_request(format!(
                            "message content of type `{kind}` is not supported: rocky reads text parts"
                        ))),
                    })
                    .collect::<Result<String, _>>()?,
            };
            Ok(Message { role: m.role, content })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    common(b.common, PromptInput::Chat(messages))
}

fn common(c: Common, input: PromptInput) -> Result<Parsed, ApiError> {
    if c.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request(
            "`n` must be 1: rocky makes one choice per request",
        ));
    }
    let max_tokens = match c.max_completion_tokens.or(c.max_tokens) {
        Some(0) => return Err(ApiError::bad_request("`max_tokens` must be at least 1")),
        m => m.map(|m| m.min(usize::MAX as u64) as usize),
    };
    let defaults = SamplerParams::default();
    let temperature = c.temperature.unwrap_or(defaults.temperature);
    if temperature < 0.0 {
        return Err(ApiError::bad_request(format!(
            "`temperature` {temperature} is negative: use 0 (greedy) or more"
        )));
    }
    let sampler = SamplerParams {
        temperature,
        top_k: c.top_k.map_or(defaults.top_k, |k| k as usize),
        top_p: c.top_p.unwrap_or(defaults.top_p),
        min_p: c.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: c.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        repeat_last_n: defaults.repeat_last_n,
        seed: c.seed.unwrap_or_else(random_seed),
    };
    sampler.validate().map_err(ApiError::bad_request)?;
    let stop = match c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    Ok(Parsed {
        model: c.model,
        work: Work {
            input,
            max_tokens,
            sampler,
            stop,
            stream: c.stream.unwrap_or(false),
        },
    })
}

/// A seed for requests without one (each request draws differently, as OpenAI's do).
fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<Parsed, ApiError>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.message,
        }
    }

    #[test]
    fn openai_fields_map_onto_the_sampler() {
        let p = completion(
            br#"{"model":"m","prompt":"Hi","max_tokens":5,"temperature":0,"top_p":0.5,"seed":7,"stop":["a","b"],"stream":true,"logprobs":null}"#,
        )
        .unwrap();
        assert_eq!(p.model.as_deref(), Some("m"));
        assert_eq!(p.work.input, PromptInput::Text("Hi".into()));
        assert_eq!(p.work.max_tokens, Some(5));
        assert_eq!(p.work.sampler.temperature, 0.0);
        assert_eq!(p.work.sampler.top_p, 0.5);
        assert_eq!(p.work.sampler.seed, 7);
        assert_eq!(p.work.stop, vec!["a", "b"]);
        assert!(p.work.stream);
        let p = chat(
            br#"{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"stop":"x"}"#,
        )
        .unwrap();
        assert_eq!(
            p.work.input,
            PromptInput::Chat(vec![Message::new("user", "Hi")])
        );
        assert_eq!(p.work.stop, vec!["x"]);
        assert!(!p.work.stream);
    }

    #[test]
    fn bad_bodies_are_400s_that_say_what_is_wrong() {
        assert!(err(completion(b"{\"prompt\":")).contains("not valid JSON"));
        assert!(err(completion(b"[1]")).contains("JSON object"));
        assert!(err(completion(br#"{"prompt":"a","max_tokens":"many"}"#)).contains("wrong type"));
        assert!(err(completion(br#"{"prompt":"a","temperature":-1}"#)).contains("negative"));
        assert!(err(completion(br#"{"prompt":"a","top_p":2}"#)).contains("top-p"));
        assert!(err(completion(br#"{"prompt":{"a":1}}"#)).contains("`prompt` must be"));
        assert!(err(completion(br#"{"prompt":"a","stop":3}"#)).contains("`stop` must be"));
        assert!(err(completion(br#"{"max_tokens":3}"#)).contains("`prompt` is required"));
        assert!(err(completion(br#"{"prompt":"a","n":2}"#)).contains("`n` must be 1"));
        assert!(err(chat(br#"{"messages":[]}"#)).contains("empty"));
        assert!(err(chat(br#"{"messages":[{"content":"x"}]}"#)).contains("wrong type"));
    }
}
