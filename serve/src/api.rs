//! The request bodies of /v1/completions and /v1/chat/completions, read with OpenAI's field
//! names and checked into what the worker runs. Every mistake is a 400 naming the field; no
//! input panics.

use crate::error::ApiError;
use crate::fields;
use rocky_generate::SamplerParams;
use serde::Deserialize;
use serde_json::{json, Value};

/// What the worker turns into token ids.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptInput {
    /// Tokenized as `rocky generate --prompt` does (BOS as the vocabulary says, special
    /// tokens parsed).
    Text(String),
    /// Token ids as given.
    Ids(Vec<u32>),
    /// Rendered with the chat format, then tokenized as text: OpenAI's message objects
    /// (content as one string, `developer` as `system`), and the tools where the request
    /// has them and `tool_choice` is not "none".
    Chat {
        messages: Vec<Value>,
        tools: Option<Vec<Value>>,
    },
}

/// Which tool the answer must call, if any (OpenAI's `tool_choice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides: its calls are parsed from its text.
    Auto,
    /// At least one call (a grammar constrains the output to one call of one of the tools).
    Required,
    /// One call of this function.
    Named(String),
}

/// What the output must be besides text (OpenAI's `response_format`).
#[derive(Clone, Debug, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(Value),
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
    /// With tools in the prompt: which call is required.
    pub tool_choice: ToolChoice,
    pub response_format: Option<ResponseFormat>,
    /// Some(n): each token's log-probability and its n most likely alternatives.
    pub logprobs: Option<usize>,
    /// llama-server's `ignore_eos`: the end-of-generation tokens are never drawn (their logits
    /// are −∞, as llama-server biases them), so the reply runs to `max_tokens`.
    pub ignore_eos: bool,
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
    tool_calls: Option<Vec<InCall>>,
    tool_call_id: Option<String>,
    name: Option<String>,
}

/// An assistant message's earlier tool call, to be rendered back into the prompt.
#[derive(Deserialize)]
struct InCall {
    id: Option<String>,
    function: InFunction,
}

#[derive(Deserialize)]
struct InFunction {
    name: String,
    /// A JSON text, as OpenAI sends it.
    arguments: String,
}

/// One entry of `tools`.
#[derive(Deserialize)]
struct Tool {
    #[serde(rename = "type")]
    kind: String,
    function: Option<ToolFunction>,
}

#[derive(Deserialize)]
struct ToolFunction {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
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
    ignore_eos: Option<bool>,
}

#[derive(Deserialize)]
struct CompletionBody {
    prompt: Option<Prompt>,
    /// The number of alternatives per token (OpenAI's legacy completions shape).
    logprobs: Option<u64>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Deserialize)]
struct ChatBody {
    messages: Option<Vec<ChatMessage>>,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<Value>,
    response_format: Option<Value>,
    logprobs: Option<bool>,
    top_logprobs: Option<u64>,
    #[serde(flatten)]
    common: Common,
}

/// OpenAI's limit on `top_logprobs`.
const MAX_TOP_LOGPROBS: u64 = 20;

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
    let value = parse_value(body)?;
    fields::check(&value, fields::COMPLETION)?;
    let b: CompletionBody = serde_json::from_value(value).map_err(json_error)?;
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
    if b.logprobs.is_some_and(|n| n > 5) {
        return Err(ApiError::bad_request(
            "`logprobs` is at most 5 for /v1/completions (OpenAI's limit)",
        ));
    }
    let mut parsed = common(b.common, input)?;
    parsed.work.logprobs = b.logprobs.map(|n| n as usize);
    Ok(parsed)
}

/// `/v1/chat/completions`.
pub fn chat(body: &[u8]) -> Result<Parsed, ApiError> {
    let value = parse_value(body)?;
    fields::check(&value, fields::CHAT)?;
    let b: ChatBody = serde_json::from_value(value).map_err(json_error)?;
    let messages = b
        .messages
        .ok_or_else(|| ApiError::bad_request("`messages` is required"))?;
    if messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty"));
    }
    let messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, ApiError>>()?;
    let tools = b.tools.map(tools).transpose()?.filter(|t| !t.is_empty());
    let choice = tool_choice(b.tool_choice.as_ref(), tools.as_deref())?;
    let tools = if choice.is_some() { tools } else { None };
    let response_format = b
        .response_format
        .as_ref()
        .map(response_format)
        .transpose()?
        .flatten();
    if response_format.is_some()
        && matches!(choice, Some(ToolChoice::Required | ToolChoice::Named(_)))
    {
        return Err(ApiError::bad_request(
            "`response_format` and a required `tool_choice` both constrain the answer: send one",
        ));
    }
    let logprobs = match (b.logprobs, b.top_logprobs) {
        (_, Some(n)) if n > MAX_TOP_LOGPROBS => {
            return Err(ApiError::bad_request(format!(
                "`top_logprobs` is at most {MAX_TOP_LOGPROBS}"
            )))
        }
        (Some(true), n) => Some(n.unwrap_or(0) as usize),
        (_, Some(_)) => {
            return Err(ApiError::bad_request(
                "`top_logprobs` needs `logprobs: true`",
            ))
        }
        _ => None,
    };
    let mut parsed = common(b.common, PromptInput::Chat { messages, tools })?;
    let constrained = response_format.is_some()
        || matches!(choice, Some(ToolChoice::Required | ToolChoice::Named(_)));
    if parsed.work.ignore_eos && constrained {
        return Err(ApiError::bad_request(
            "`ignore_eos` cannot go with `response_format` or a required `tool_choice`: a \
             constrained answer ends where its grammar does",
        ));
    }
    parsed.work.tool_choice = choice.unwrap_or(ToolChoice::Auto);
    parsed.work.response_format = response_format;
    parsed.work.logprobs = logprobs;
    Ok(parsed)
}

/// A message as the template gets it: content as one string (text parts joined), `developer`
/// as `system` (the templates know no developer role), earlier tool calls with their
/// arguments as JSON objects (as llama-server passes them: templates write them with
/// `tojson`).
fn message(i: usize, m: ChatMessage) -> Result<Value, ApiError> {
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
    let role = match m.role.as_str() {
        "developer" => "system",
        "system" | "user" | "assistant" | "tool" => m.role.as_str(),
        other => {
            return Err(ApiError::bad_request(format!(
                "`messages[{i}].role` `{other}` is not one of system, developer, user,                  assistant, tool"
            )))
        }
    };
    let mut out = json!({"role": role, "content": content});
    if let Some(calls) = m.tool_calls.filter(|c| !c.is_empty()) {
        if role != "assistant" {
            return Err(ApiError::bad_request(format!(
                "`messages[{i}].tool_calls` belongs to assistant messages"
            )));
        }
        let calls = calls
            .into_iter()
            .map(|c| {
                let arguments: Value =
                    serde_json::from_str(&c.function.arguments).map_err(|e| {
                        ApiError::bad_request(format!(
                            "`messages[{i}].tool_calls` arguments of `{}` are not JSON: {e}",
                            c.function.name
                        ))
                    })?;
                let mut call = json!({
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": arguments},
                });
                if let Some(id) = c.id {
                    call["id"] = json!(id);
                }
                Ok(call)
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        out["tool_calls"] = Value::Array(calls);
    }
    if role == "tool" {
        if let Some(id) = m.tool_call_id {
            out["tool_call_id"] = json!(id);
        }
    }
    if let Some(name) = m.name {
        out["name"] = json!(name);
    }
    Ok(out)
}

/// The tools as the template gets them (OpenAI's objects, `type` and `function`).
fn tools(list: Vec<Tool>) -> Result<Vec<Value>, ApiError> {
    list.into_iter()
        .enumerate()
        .map(|(i, t)| {
            let f = match (t.kind.as_str(), t.function) {
                ("function", Some(f)) => f,
                ("function", None) => {
                    return Err(ApiError::bad_request(format!(
                        "`tools[{i}].function` is required"
                    )))
                }
                (kind, _) => {
                    return Err(ApiError::bad_request(format!(
                        "`tools[{i}].type` `{kind}` is not supported: rocky serves function tools"
                    )))
                }
            };
            if f.name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].function.name` is empty"
                )));
            }
            if let Some(p) = f.parameters.as_ref().filter(|p| !p.is_object()) {
                return Err(ApiError::bad_request(format!(
                    "`tools[{i}].function.parameters` must be a JSON schema object, not {p}"
                )));
            }
            let mut function = json!({"name": f.name});
            if let Some(d) = f.description {
                function["description"] = json!(d);
            }
            if let Some(p) = f.parameters {
                function["parameters"] = p;
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

/// `tool_choice`: None where the tools are not to be used ("none", or no tools).
fn tool_choice(v: Option<&Value>, tools: Option<&[Value]>) -> Result<Option<ToolChoice>, ApiError> {
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::bad_request(format!(
                    "`tool_choice` `{other}` is not none, auto, required or a function"
                )))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => {
                ToolChoice::Named(name.to_string())
            }
            _ => {
                return Err(ApiError::bad_request(
                    "`tool_choice` as an object is {\"type\": \"function\", \"function\": {\"name\": …}}",
                ))
            }
        },
    };
    let Some(tools) = tools else {
        return match choice {
            ToolChoice::Auto => Ok(None),
            _ => Err(ApiError::bad_request(
                "`tool_choice` requires a tool call but `tools` is empty",
            )),
        };
    };
    if let ToolChoice::Named(name) = &choice {
        if !tools
            .iter()
            .any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name))
        {
            return Err(ApiError::bad_request(format!(
                "`tool_choice` names `{name}`, which is not in `tools`"
            )));
        }
    }
    Ok(Some(choice))
}

/// `response_format`: None for `text`, the default.
fn response_format(v: &Value) -> Result<Option<ResponseFormat>, ApiError> {
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::JsonObject)),
        Some("json_schema") => match v.pointer("/json_schema/schema") {
            Some(schema) if schema.is_object() => {
                Ok(Some(ResponseFormat::JsonSchema(schema.clone())))
            }
            _ => Err(ApiError::bad_request(
                "`response_format.json_schema.schema` must be a JSON schema object",
            )),
        },
        _ => Err(ApiError::bad_request(
            "`response_format.type` must be text, json_object or json_schema",
        )),
    }
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
            tool_choice: ToolChoice::Auto,
            response_format: None,
            logprobs: None,
            ignore_eos: c.ignore_eos.unwrap_or(false),
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
            PromptInput::Chat {
                messages: vec![json!({"role": "user", "content": "Hi"})],
                tools: None
            }
        );
        assert_eq!(p.work.stop, vec!["x"]);
        assert!(!p.work.stream);
        assert!(!p.work.ignore_eos);
    }

    #[test]
    fn ignore_eos_is_read_and_refused_beside_a_grammar() {
        let p = completion(br#"{"prompt":"a","ignore_eos":true,"cache_prompt":true}"#).unwrap();
        assert!(p.work.ignore_eos);
        let p = chat(br#"{"messages":[{"role":"user","content":"a"}],"ignore_eos":true}"#).unwrap();
        assert!(p.work.ignore_eos);
        let both = br#"{"messages":[{"role":"user","content":"a"}],"ignore_eos":true,"response_format":{"type":"json_object"}}"#;
        assert!(err(chat(both)).contains("`ignore_eos` cannot go with"));
        assert!(err(completion(br#"{"prompt":"a","ignore_eos":1}"#)).contains("wrong type"));
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

    #[test]
    fn tool_history_reaches_the_template_as_llama_server_passes_it() {
        let p = chat(
            br#"{"messages":[{"role":"developer","content":"Be brief."},
                {"role":"user","content":"Hi"},
                {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
                  "function":{"name":"f","arguments":"{\"x\": [1, 2]}"}}]},
                {"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"ok"}]}],
              "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
              "tool_choice":{"type":"function","function":{"name":"f"}}}"#,
        )
        .unwrap();
        let PromptInput::Chat { messages, tools } = p.work.input else {
            panic!("chat")
        };
        assert_eq!(
            messages,
            vec![
                json!({"role": "system", "content": "Be brief."}),
                json!({"role": "user", "content": "Hi"}),
                json!({"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                    "function": {"name": "f", "arguments": {"x": [1, 2]}}, "id": "c1"}]}),
                json!({"role": "tool", "content": "ok", "tool_call_id": "c1"}),
            ]
        );
        assert_eq!(tools.unwrap().len(), 1);
        assert_eq!(p.work.tool_choice, ToolChoice::Named("f".into()));
        // "none" keeps the tools out of the prompt.
        let p = chat(
            br#"{"messages":[{"role":"user","content":"Hi"}],"tool_choice":"none",
            "tools":[{"type":"function","function":{"name":"f"}}]}"#,
        )
        .unwrap();
        assert!(matches!(
            p.work.input,
            PromptInput::Chat { tools: None, .. }
        ));
        // Arguments that are not JSON are the client's mistake, named.
        let e = err(chat(
            br#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}]}"#,
        ));
        assert!(
            e.contains("`messages[0].tool_calls`") && e.contains("`f`"),
            "{e}"
        );
        let e = err(chat(
            br#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]}"#,
        ));
        assert!(e.contains("`tools[0].type`"), "{e}");
    }
}
