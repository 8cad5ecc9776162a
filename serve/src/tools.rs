//! Tool calls in the model's own words: which format a chat template writes calls in, reading
//! the calls back out of the generated text (whole or as it streams), and the grammar that
//! makes a model write exactly one call when `tool_choice` requires it.
//!
//! Formats, as llama.cpp's common/chat.cpp parses them:
//! - `Hermes`: Qwen2.5 / Qwen3 (and Hermes-style templates): `<tool_call>\n{"name": …,
//!   "arguments": {…}}\n</tool_call>`, several possible, text around them is content.
//! - `LlamaJson`: Llama 3.x: the whole answer is `{"name": …, "parameters": {…}}`, optionally
//!   after `<|python_tag|>`.

use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    LlamaJson,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolFormat {
    /// The format a chat template writes tool calls in; None where it renders no tools.
    pub fn of_template(template: &str) -> Option<ToolFormat> {
        if !template.contains("tools") {
            None
        } else if template.contains(OPEN) {
            Some(ToolFormat::Hermes)
        } else if template.contains("<|start_header_id|>")
            && (template.contains("\"parameters\"") || template.contains("ipython"))
        {
            Some(ToolFormat::LlamaJson)
        } else {
            None
        }
    }

    /// The key the call's arguments go under.
    fn arguments_key(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "arguments",
            ToolFormat::LlamaJson => "parameters",
        }
    }

    /// A Lark grammar (llguidance's dialect) for exactly one call of one of `tools` (OpenAI
    /// tool objects), each call's arguments valid against its function's `parameters`.
    pub fn call_grammar(self, tools: &[&Value]) -> String {
        let calls: Vec<Value> = tools
            .iter()
            .map(|t| {
                let f = &t["function"];
                let parameters = match f.get("parameters") {
                    Some(p) if p.is_object() => p.clone(),
                    _ => json!({"type": "object"}),
                };
                let mut properties = serde_json::Map::new();
                properties.insert("name".into(), json!({"const": f["name"]}));
                properties.insert(self.arguments_key().into(), parameters);
                json!({
                    "type": "object",
                    "properties": properties,
                    "required": ["name", self.arguments_key()],
                    "additionalProperties": false,
                })
            })
            .collect();
        // The separators the templates write calls with; no free whitespace, so a model
        // cannot wander off into blanks.
        let schema = json!({
            "anyOf": calls,
            "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "},
        });
        match self {
            ToolFormat::Hermes => format!(
                "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {schema}\n"
            ),
            ToolFormat::LlamaJson => format!("start: call\ncall: %json {schema}\n"),
        }
    }
}

/// One call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text (OpenAI sends them as a string).
    pub arguments: String,
}

/// What the generated text splits into, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Call(ToolCall),
}

/// Splits streamed text into content and calls: text that may be the start of a call is held
/// back until it is clear. The same splitter reads a whole answer (push it all, then finish),
/// so streamed and whole answers agree.
pub struct ToolStream {
    format: ToolFormat,
    /// Text not yet emitted.
    held: String,
    /// Inside a call (Hermes: after `<tool_call>`; Llama: the answer is a call).
    in_call: bool,
    /// Llama: whether the answer has been seen to be plain text.
    plain: bool,
    /// Whitespace waiting for content to follow it (blank lines around calls are not
    /// content).
    blank: String,
    /// Calls emitted so far.
    calls: usize,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> ToolStream {
        ToolStream {
            format,
            held: String::new(),
            in_call: false,
            plain: false,
            blank: String::new(),
            calls: 0,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out, false),
            ToolFormat::LlamaJson => self.llama(&mut out, false),
        }
        out
    }

    /// The end of the text: what was held back.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out, true),
            ToolFormat::LlamaJson => self.llama(&mut out, true),
        }
        // An answer without calls keeps its trailing whitespace, as without tools.
        if self.calls == 0 && !self.blank.is_empty() {
            out.push(Piece::Content(std::mem::take(&mut self.blank)));
        }
        out
    }

    /// Content text; whitespace at its end waits to see whether content or a call follows.
    fn content(&mut self, text: &str, out: &mut Vec<Piece>) {
        self.blank.push_str(text);
        let n = self.blank.trim_end().len();
        if n == 0 {
            return;
        }
        let text: String = self.blank.drain(..n).collect();
        match out.last_mut() {
            Some(Piece::Content(c)) => c.push_str(&text),
            _ => out.push(Piece::Content(text)),
        }
    }

    fn call(&mut self, call: ToolCall, out: &mut Vec<Piece>) {
        self.blank.clear();
        self.calls += 1;
        out.push(Piece::Call(call));
    }

    fn hermes(&mut self, out: &mut Vec<Piece>, end: bool) {
        loop {
            if self.in_call {
                let Some(close) = self.held.find(CLOSE) else {
                    if end {
                        // A call cut short (max_tokens): what was written stays content.
                        let rest = format!("{OPEN}{}", std::mem::take(&mut self.held));
                        match parse_call(&rest[OPEN.len()..], self.format) {
                            Some(call) => self.call(call, out),
                            None => self.content(&rest, out),
                        }
                    }
                    return;
                };
                let body = self.held[..close].to_string();
                self.held.drain(..close + CLOSE.len());
                self.in_call = false;
                match parse_call(&body, self.format) {
                    Some(call) => self.call(call, out),
                    None => self.content(&format!("{OPEN}{body}{CLOSE}"), out),
                }
                continue;
            }
            if let Some(open) = self.held.find(OPEN) {
                let before = self.held[..open].to_string();
                self.content(&before, out);
                self.held.drain(..open + OPEN.len());
                self.in_call = true;
                continue;
            }
            // Hold back a tail that could be the start of `<tool_call>`.
            let keep = if end {
                0
            } else {
                partial_prefix(&self.held, OPEN)
            };
            let emit = self.held[..self.held.len() - keep].to_string();
            self.held.drain(..emit.len());
            self.content(&emit, out);
            return;
        }
    }

    fn llama(&mut self, out: &mut Vec<Piece>, end: bool) {
        if self.plain {
            let text = std::mem::take(&mut self.held);
            self.content(&text, out);
            return;
        }
        let start = self.held.trim_start();
        let start = start.strip_prefix(PYTHON_TAG).unwrap_or(start).trim_start();
        if !self.in_call {
            if start.starts_with('{') {
                self.in_call = true;
            } else if start.is_empty() || PYTHON_TAG.starts_with(self.held.trim_start()) {
                // Not yet known.
                if !end {
                    return;
                }
            } else {
                self.plain = true;
                return self.llama(out, end);
            }
        }
        if end {
            let text = std::mem::take(&mut self.held);
            let body = text.trim_start();
            let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body);
            match llama_calls(body, self.format) {
                Some(calls) if !calls.is_empty() => {
                    calls.into_iter().for_each(|c| self.call(c, out))
                }
                _ => self.content(&text, out),
            }
        }
    }
}

/// The length of the longest end of `text` that is a proper start of `marker`.
fn partial_prefix(text: &str, marker: &str) -> usize {
    (1..marker.len())
        .rev()
        .find(|&n| {
            text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// `{"name": …, "arguments" (or "parameters"): {…}}`; None where it is not a call.
/// The calls of a Llama 3.x answer: JSON objects one after another, optionally separated by
/// ';' (llama.cpp reads several calls so). Each object ends where the JSON says, so a ';' in an
/// argument's string stays in the string. `None` where any part is not a call.
fn llama_calls(body: &str, format: ToolFormat) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ';' || c.is_whitespace());
        if rest.is_empty() {
            return Some(calls);
        }
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        values.next()?.ok()?;
        let end = values.byte_offset();
        calls.push(parse_call(&rest[..end], format)?);
        rest = &rest[end..];
    }
}

fn parse_call(text: &str, format: ToolFormat) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get(format.arguments_key())
        .or_else(|| v.get("arguments"))
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let arguments = match args {
        // Some models write the arguments as a JSON string already.
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(ToolCall { name, arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(format: ToolFormat, text: &str) -> Vec<Piece> {
        let mut s = ToolStream::new(format);
        let mut out = s.push(text);
        out.extend(s.finish());
        out
    }

    /// Streamed in pieces of every size, the pieces joined equal the whole answer's.
    fn streamed(format: ToolFormat, text: &str, step: usize) -> Vec<Piece> {
        let mut s = ToolStream::new(format);
        let mut out: Vec<Piece> = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(step) {
            out.extend(s.push(&chunk.iter().collect::<String>()));
        }
        out.extend(s.finish());
        // Adjacent content pieces join (a client concatenates deltas).
        let mut joined: Vec<Piece> = Vec::new();
        for p in out {
            match (joined.last_mut(), p) {
                (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
                (_, p) => joined.push(p),
            }
        }
        joined
    }

    fn call(name: &str, arguments: &str) -> Piece {
        Piece::Call(ToolCall {
            name: name.into(),
            arguments: arguments.into(),
        })
    }

    #[test]
    fn hermes_calls_come_out_of_the_text_whole_or_streamed() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
        let want = vec![
            Piece::Content("Let me check.".into()),
            call("get_weather", r#"{"city":"Paris"}"#),
            call("now", "{}"),
        ];
        assert_eq!(whole(ToolFormat::Hermes, text), want);
        for step in 1..8 {
            assert_eq!(
                streamed(ToolFormat::Hermes, text, step),
                want,
                "step {step}"
            );
        }
        // A lone '<' that is not a call is content; a broken call stays text.
        assert_eq!(
            whole(ToolFormat::Hermes, "a < b"),
            vec![Piece::Content("a < b".into())]
        );
        let broken = "<tool_call>\n{\"name\": oops}\n</tool_call>";
        assert_eq!(
            whole(ToolFormat::Hermes, broken),
            vec![Piece::Content(broken.into())]
        );
    }

    #[test]
    fn llama_json_calls_are_the_whole_answer() {
        let text =
            " <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
        let want = vec![call("get_weather", r#"{"city":"Paris"}"#)];
        for step in 1..6 {
            assert_eq!(streamed(ToolFormat::LlamaJson, text, step), want);
        }
        assert_eq!(
            streamed(ToolFormat::LlamaJson, "Hello {there}", 2),
            vec![Piece::Content("Hello {there}".into())]
        );
    }

    /// A ';' inside an argument is the argument's (it split the call in two, which then read
    /// as text: seed 55 of the 100-seed sweep); between calls it separates them. The expected
    /// arguments are serde_json's reading of the same objects.
    #[test]
    fn llama_json_calls_split_at_semicolons_between_objects_only() {
        let one = r#"{"name": "get_weather", "parameters": {"city": "); Lives;x"}}"#;
        let two = r#"{"name": "add", "parameters": {"a": 1, "b": 2}}"#;
        let args = |text: &str| {
            let v: Value = serde_json::from_str(text).unwrap();
            v["parameters"].to_string()
        };
        for step in [1, 3, 1000] {
            assert_eq!(
                streamed(ToolFormat::LlamaJson, one, step),
                vec![call("get_weather", &args(one))]
            );
            assert_eq!(
                streamed(ToolFormat::LlamaJson, &format!("{one}; {two}"), step),
                vec![call("get_weather", &args(one)), call("add", &args(two))]
            );
        }
        // Not a call after the ';': the whole answer is text, as before.
        let text = format!("{one}; hello");
        assert_eq!(
            streamed(ToolFormat::LlamaJson, &text, 4),
            vec![Piece::Content(text.clone())]
        );
    }

    #[test]
    fn formats_are_read_from_templates() {
        assert_eq!(
            ToolFormat::of_template("{% if tools %}<tool_call>{% endif %}"),
            Some(ToolFormat::Hermes)
        );
        assert_eq!(
            ToolFormat::of_template("<|start_header_id|>ipython{% if tools %}{% endif %}"),
            Some(ToolFormat::LlamaJson)
        );
        assert_eq!(ToolFormat::of_template("<start_of_turn>"), None);
    }
}
