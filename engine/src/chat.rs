//! A model's chat format, parsed once: the GGUF's own template (`tokenizer.chat_template`,
//! rendered by rocky-models as llama.cpp renders it), else the architecture's known format
//! where rocky has one built in (as llama.cpp's built-in templates serve files that carry
//! none: the Gemma 3 270M GGUF is one), else [`ChatError::NoTemplate`] for chat prompts while
//! plain prompts still work.

use crate::error::ChatError;
use rocky_models::chat::{self, builtin, Message, Specials};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use serde_json::Value;
use std::sync::Arc;

/// Where a model's chat format comes from, and its template ready to render.
#[derive(Debug)]
pub struct ChatFormat {
    /// The file, for error messages.
    path: String,
    /// Where the template came from ("the GGUF's tokenizer.chat_template", "the built-in …
    /// format"); None where there is none.
    source: Option<String>,
    /// The template text rendered (a built-in format's tool-aware variant, see
    /// [`tool_builtin`]); None where there is none.
    text: Option<String>,
    /// The parsed template, or why it does not parse (told on every chat prompt, as a
    /// template error is the file's, not the request's).
    template: Option<Result<Template, Arc<chat::ChatError>>>,
}

/// A parsed template and what it is rendered with.
///
/// rocky-models' `ChatTemplate` renders `{role, content}` messages only; a server also
/// renders `tools`, assistant `tool_calls` and `tool` results, which need the messages as
/// JSON and Python's `tojson`. The environment is set up as rocky-models sets up its own
/// (the same whitespace rules and helpers), so plain messages render the same text.
#[derive(Debug)]
struct Template {
    env: minijinja::Environment<'static>,
    specials: Specials,
}

const NAME: &str = "chat";

impl ChatFormat {
    /// Parses the chat format of `file` (with `tokenizer`'s BOS/EOS texts).
    pub fn of(file: &GgufFile, tokenizer: &Tokenizer) -> ChatFormat {
        let path = file.path().display().to_string();
        Self::parse(
            path,
            chat::template_or_builtin(file),
            Specials::of(tokenizer, file),
        )
    }

    /// The format of a template given as text (`source` says where it came from), as a file
    /// carrying it would have; for tests and callers with a template of their own.
    pub fn from_template(
        path: &str,
        template: &str,
        source: &str,
        specials: Specials,
    ) -> ChatFormat {
        Self::parse(path.into(), Some((template, source.into())), specials)
    }

    /// `found`: the template text and where it came from, if any.
    fn parse(path: String, found: Option<(&str, String)>, specials: Specials) -> ChatFormat {
        let source = found.as_ref().map(|(_, source)| source.clone());
        let text = found.map(|(text, _)| tool_builtin(text).unwrap_or(text).to_string());
        let template = text
            .as_deref()
            .map(|t| Template::new(&path, t, specials).map_err(Arc::new));
        ChatFormat {
            path,
            source,
            text,
            template,
        }
    }

    /// Where the template comes from, for a start-up line; None when chat is unavailable.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The template's text (what a caller inspects to know how the model writes tool calls).
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// The prompt text of `messages`, ending where the assistant's answer starts.
    pub fn render(&self, messages: &[Message]) -> Result<String, ChatError> {
        let messages = serde_json::to_value(messages).expect("messages serialize");
        self.render_json(&messages, None)
    }

    /// The prompt text of `messages` given as OpenAI's JSON message objects (`tool_calls`,
    /// `tool_call_id` and the like reach the template as they are), with `tools` in the
    /// template's context where given, as llama-server renders with `--jinja`.
    pub fn render_json(
        &self,
        messages: &Value,
        tools: Option<&Value>,
    ) -> Result<String, ChatError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.render_json_at(messages, tools, now)
    }

    /// [`ChatFormat::render_json`] at the time `now` (Unix seconds, UTC): templates that write
    /// today's date (Llama 3.x's `date_string`, `strftime_now`) get this one.
    pub fn render_json_at(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        now: u64,
    ) -> Result<String, ChatError> {
        match &self.template {
            None => Err(ChatError::NoTemplate {
                path: self.path.clone(),
            }),
            Some(Err(e)) => Err(ChatError::Template(e.clone())),
            Some(Ok(template)) => template.render(messages, tools, now).map_err(|detail| {
                ChatError::Template(Arc::new(chat::ChatError::Template {
                    path: self.path.clone(),
                    detail,
                }))
            }),
        }
    }
}

impl Template {
    fn new(path: &str, text: &str, specials: Specials) -> Result<Template, chat::ChatError> {
        let error = |e: minijinja::Error| chat::ChatError::Template {
            path: path.to_string(),
            detail: format!("{e:#}"),
        };
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("the template raised: {msg}"),
                ))
            },
        );
        // Python's json.dumps, as transformers and llama.cpp's minja give templates `tojson`:
        // ", " and ": " separators ("," with an indent), keys in their order, no HTML escapes.
        // minijinja's own is compact and escapes '<' and '>', which changes tool prompts.
        env.add_filter(
            "tojson",
            |v: minijinja::Value,
             kwargs: minijinja::value::Kwargs|
             -> Result<String, minijinja::Error> {
                let indent: Option<usize> = kwargs.get("indent")?;
                kwargs.assert_all_used()?;
                let json = serde_json::to_value(&v).map_err(|e| {
                    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
                })?;
                Ok(crate::pyjson::dumps(&json, indent))
            },
        );
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(error)?;
        env.set_syntax(syntax);
        env.add_template_owned(NAME, text.to_string())
            .map_err(error)?;
        Ok(Template { env, specials })
    }

    fn render(&self, messages: &Value, tools: Option<&Value>, now: u64) -> Result<String, String> {
        let specials = &self.specials;
        let date = crate::pyjson::Date::of_unix(now);
        // What llama.cpp's chat code gives every template beside the messages: today's date
        // as `date_string` ("05 Dec 2026") and `strftime_now(format)`.
        let strftime_now =
            minijinja::Value::from_function(move |format: String| date.format(&format));
        let mut context = minijinja::context! {
            messages => minijinja::value::Serde(messages),
            add_generation_prompt => true,
            bos_token => specials.bos_token.as_str(),
            eos_token => specials.eos_token.as_str(),
            date_string => date.format("%d %b %Y"),
            strftime_now => strftime_now,
        };
        // Tools only where given: templates test `tools is defined` as well as `tools is none`.
        if let Some(tools) = tools {
            context = minijinja::context! { tools => minijinja::value::Serde(tools), ..context };
        }
        let text = self
            .env
            .get_template(NAME)
            .and_then(|t| t.render(context))
            .map_err(|e| format!("{e:#}"))?;
        // As rocky-models: a BOS (EOS) the tokenizer adds itself is not written twice.
        let mut text = text.as_str();
        if specials.add_bos && !specials.bos_token.is_empty() {
            text = text.strip_prefix(&specials.bos_token).unwrap_or(text);
        }
        if specials.add_eos && !specials.eos_token.is_empty() {
            text = text.strip_suffix(&specials.eos_token).unwrap_or(text);
        }
        Ok(text.to_string())
    }
}

/// The tool-aware variant of a built-in format, rendering the same text as it where a
/// request has no tools: llama.cpp's built-in formats have no tool rendering, so these follow
/// the models' own templates (Qwen2.5's tool system prompt for chatml, Llama 3.1's JSON tool
/// calls for llama3).
fn tool_builtin(text: &str) -> Option<&'static str> {
    if text == builtin::CHATML.template {
        Some(CHATML_TOOLS)
    } else if text == builtin::LLAMA3.template {
        Some(LLAMA3_TOOLS)
    } else {
        None
    }
}

/// ChatML with Qwen2.5's tool rendering (its tokenizer_config.json template, without the
/// default "You are Qwen" system message, which the built-in chatml does not write).
const CHATML_TOOLS: &str = r#"{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] -}}{%- else -%}{{- 'You are a helpful assistant.' -}}{%- endif -%}
{{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" -}}
{%- for tool in tools -%}{{- "\n" -}}{{- tool | tojson -}}{%- endfor -%}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" -}}
{%- elif messages[0]['role'] == 'system' -%}
{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'user' or message.role == 'system' or (message.role == 'assistant' and not message.tool_calls) -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>' + message.role -}}
{%- if message.content -%}{{- '\n' + message.content -}}{%- endif -%}
{%- for tool_call in message.tool_calls -%}
{%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}{%- endif -%}
{{- '\n<tool_call>\n{"name": "' -}}{{- tool_call.name -}}{{- '", "arguments": ' -}}{{- tool_call.arguments | tojson -}}{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"#;

/// Llama 3's header format with Llama 3.1's tool rendering: the tools as JSON before the
/// first user message's text, calls as `{"name": …, "parameters": …}`, results in `ipython`
/// turns.
const LLAMA3_TOOLS: &str = r#"{%- set ns = namespace(tools_done=false) -%}
{%- for message in messages -%}
{%- if message.role == 'assistant' and message.tool_calls -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- for tool_call in message.tool_calls -%}
{%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}{%- endif -%}
{{- '{"name": "' + tool_call.name + '", "parameters": ' -}}{{- tool_call.arguments | tojson -}}{{- '}' -}}
{%- endfor -%}
{{- '<|eot_id|>' -}}
{%- elif message.role == 'tool' -%}
{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + (message.content | trim) + '<|eot_id|>' -}}
{%- elif message.role == 'user' and tools and not ns.tools_done -%}
{%- set ns.tools_done = true -%}
{{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n' -}}
{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' -}}
{{- 'Do not use variables.\n\n' -}}
{%- for t in tools -%}{{- t | tojson(indent=4) -}}{{- '\n\n' -}}{%- endfor -%}
{{- (message.content | trim) + '<|eot_id|>' -}}
{%- else -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + (message.content | trim) + '<|eot_id|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_broken_template_is_an_error_on_every_chat_prompt() {
        let messages = [Message::new("user", "Hi")];
        let none = ChatFormat::parse("m.gguf".into(), None, Specials::default());
        assert_eq!(none.source(), None);
        assert!(
            matches!(none.render(&messages), Err(ChatError::NoTemplate { path }) if path == "m.gguf")
        );
        let broken = ChatFormat::parse(
            "m.gguf".into(),
            Some(("{% for m in messages %}", "a test".into())),
            Specials::default(),
        );
        assert_eq!(broken.source(), Some("a test"));
        // Parsed once, told each time (a server's every chat request), naming the file.
        for _ in 0..2 {
            match broken.render(&messages) {
                Err(e @ ChatError::Template(_)) => assert!(e.to_string().contains("m.gguf"), "{e}"),
                other => panic!("{other:?}"),
            }
        }
        let fine = ChatFormat::parse(
            "m.gguf".into(),
            Some((
                "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}",
                "a test".into(),
            )),
            Specials::default(),
        );
        assert_eq!(fine.render(&messages).unwrap(), "<user>Hi");
    }

    #[test]
    fn the_gemma3_format_is_googles() {
        let specials = Specials {
            bos_token: "<bos>".into(),
            eos_token: "<eos>".into(),
            add_bos: true,
            add_eos: false,
        };
        let messages = [
            Message::new("system", "Be brief."),
            Message::new("user", " Hi "),
            Message::new("assistant", "Hello."),
            Message::new("user", "Why?"),
        ];
        let template =
            chat::ChatTemplate::new("t", chat::builtin::GEMMA.template, specials).unwrap();
        // No BOS in the text: the tokenizer adds it (as with llama.cpp's built-in gemma format).
        // Rendered twice from one parse: the second request sees the same template.
        for _ in 0..2 {
            assert_eq!(
                template.render(&messages).unwrap(),
                "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
                 <start_of_turn>model\nHello.<end_of_turn>\n\
                 <start_of_turn>user\nWhy?<end_of_turn>\n\
                 <start_of_turn>model\n"
            );
        }
    }

    #[test]
    fn tool_aware_builtins_render_plain_chats_as_the_builtins_do() {
        // rocky-models renders the built-in formats as llama.cpp's (its fixture test); the
        // tool-aware variants must give the same text where no tools are involved.
        let chats = [
            vec![Message::new("user", "Hi")],
            vec![
                Message::new("system", " Be brief. "),
                Message::new("user", "2+2?\n"),
                Message::new("assistant", "4"),
                Message::new("system", "Later"),
                Message::new("user", "Again"),
            ],
        ];
        for builtin in [chat::builtin::CHATML, chat::builtin::LLAMA3] {
            let ours =
                ChatFormat::from_template("m", builtin.template, "a test", Specials::default());
            assert_ne!(
                ours.text(),
                Some(builtin.template),
                "the tool variant is used"
            );
            let theirs =
                chat::ChatTemplate::new("m", builtin.template, Specials::default()).unwrap();
            for messages in &chats {
                assert_eq!(
                    ours.render(messages).unwrap(),
                    theirs.render(messages).unwrap(),
                    "{}",
                    builtin.name
                );
            }
        }
    }
}
