//! Chat prompts: a GGUF's `tokenizer.chat_template` (a Jinja2 program from the model's
//! Hugging Face tokenizer_config.json) rendered with minijinja, the way llama.cpp renders it:
//! the messages, `add_generation_prompt`, and `bos_token` / `eos_token` as the vocabulary's
//! token texts; then, where the vocabulary adds BOS (or EOS) itself when tokenizing, a BOS
//! text the template already wrote at the start (an EOS at the end) is removed, so the prompt
//! does not get it twice (llama.cpp common/chat.cpp). A file without a template gets its
//! architecture's built-in format ([`builtin`]) where rocky has one.

pub mod builtin;

use crate::gguf::{GgufFile, MetaValue};
use crate::tokenizer::Tokenizer;
use serde::Serialize;

/// The GGUF key of the template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error(
        "{path} has no chat template ({CHAT_TEMPLATE_KEY}) and rocky has no built-in one for its \
         architecture and vocabulary (built in: chatml for qwen2/qwen3, llama3 for llama, gemma \
         for gemma3): give the prompt already formatted for the model instead of --chat"
    )]
    NoTemplate { path: String },
    #[error("{path}: the chat template cannot be rendered: {detail}")]
    Template { path: String, detail: String },
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// "system", "user" or "assistant".
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What the template gets beside the messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Specials {
    /// Texts of the vocabulary's BOS and EOS tokens ("" where it has none).
    pub bos_token: String,
    pub eos_token: String,
    /// Whether tokenizing adds BOS / EOS (`tokenizer.ggml.add_bos_token` / `add_eos_token`).
    pub add_bos: bool,
    pub add_eos: bool,
}

impl Specials {
    /// The BOS/EOS texts and flags of a GGUF vocabulary, as llama.cpp passes them.
    pub fn of(tokenizer: &Tokenizer, file: &GgufFile) -> Specials {
        let text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
        };
        Specials {
            bos_token: text(tokenizer.bos_id()),
            eos_token: text(tokenizer.eos_id()),
            add_bos: tokenizer.adds_bos(),
            add_eos: file
                .get("tokenizer.ggml.add_eos_token")
                .and_then(MetaValue::as_bool)
                .unwrap_or(false),
        }
    }
}

/// The chat template of `file`, if it has one.
pub fn template(file: &GgufFile) -> Option<&str> {
    file.get(CHAT_TEMPLATE_KEY)
        .and_then(MetaValue::as_str)
        .filter(|t| !t.trim().is_empty())
}

/// The template to chat with and where it comes from: the file's own, else its built-in
/// format (`builtin::for_file`), else None.
pub fn template_or_builtin(file: &GgufFile) -> Option<(&str, String)> {
    if let Some(t) = template(file) {
        return Some((t, format!("the GGUF's {CHAT_TEMPLATE_KEY}")));
    }
    let b = builtin::for_file(file)?;
    let arch = file.architecture().unwrap_or("?");
    Some((
        b.template,
        format!("the built-in {arch} format (llama.cpp's \"{}\")", b.name),
    ))
}

/// Renders `messages` with `template` and `add_generation_prompt = true` (the prompt ends
/// where the assistant's answer starts). `path` names the file in errors. Parses the template
/// each call: a caller rendering many prompts keeps a [`ChatTemplate`] instead.
pub fn render(
    path: &str,
    template: &str,
    messages: &[Message],
    specials: &Specials,
) -> Result<String, ChatError> {
    ChatTemplate::new(path, template, specials.clone())?.render(messages)
}

/// A chat template parsed once, with the specials it is rendered with: a server renders every
/// request's messages with it without parsing the Jinja program again.
#[derive(Debug)]
pub struct ChatTemplate {
    /// The file, for error messages.
    path: String,
    env: minijinja::Environment<'static>,
    specials: Specials,
}

/// The name of the one template in a [`ChatTemplate`]'s environment.
const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Parses `template`; a syntax error is a [`ChatError::Template`] naming `path`.
    pub fn new(path: &str, template: &str, specials: Specials) -> Result<ChatTemplate, ChatError> {
        let error = |e: minijinja::Error| ChatError::Template {
            path: path.to_string(),
            detail: format!("{e:#}"),
        };
        let mut env = minijinja::Environment::new();
        // Python's string/dict methods, and the helpers transformers gives every template.
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
        // Whitespace as transformers (and llama.cpp's minja) render templates: trim_blocks and
        // lstrip_blocks on, a final newline of the template dropped (Jinja's default).
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(error)?;
        env.set_syntax(syntax);
        env.add_template_owned(TEMPLATE_NAME, template.to_string())
            .map_err(error)?;
        Ok(ChatTemplate {
            path: path.to_string(),
            env,
            specials,
        })
    }

    /// The prompt text of `messages`, ending where the assistant's answer starts.
    pub fn render(&self, messages: &[Message]) -> Result<String, ChatError> {
        let error = |e: minijinja::Error| ChatError::Template {
            path: self.path.clone(),
            detail: format!("{e:#}"),
        };
        let specials = &self.specials;
        let text = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(error)?
            .render(minijinja::context! {
                messages => minijinja::value::Serde(messages),
                add_generation_prompt => true,
                bos_token => specials.bos_token.as_str(),
                eos_token => specials.eos_token.as_str(),
            })
            .map_err(error)?;
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

/// `render` with the template of `file` or its built-in format, or the error that it has
/// neither.
pub fn render_for(
    file: &GgufFile,
    messages: &[Message],
    specials: &Specials,
) -> Result<String, ChatError> {
    let path = file.path().display().to_string();
    let (t, _) =
        template_or_builtin(file).ok_or_else(|| ChatError::NoTemplate { path: path.clone() })?;
    render(&path, t, messages, specials)
}
