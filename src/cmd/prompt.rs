//! The prompt of a command, given as text, a file, or token ids, turned into token ids; with
//! `--chat`, the text is first wrapped in the model's chat template as the user's message.

use crate::error::CliError;
use rocky_models::chat::{self, Message, Specials};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use std::path::PathBuf;

// The three sources form one required group; --chat and --system stay outside it (the
// struct-wide group clap derives would make them exclusive with the sources).
#[derive(clap::Args, Clone, Debug)]
#[group(skip)]
#[command(group(
    clap::ArgGroup::new("prompt_source")
        .args(["prompt", "file", "token_ids"])
        .required(true)
        .multiple(false)
))]
pub struct PromptArgs {
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// Read the prompt text from a file (one final newline is dropped, as llama.cpp's -f does).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// The prompt as comma-separated token ids (no tokenizer involved).
    #[arg(long, value_delimiter = ',')]
    pub token_ids: Option<Vec<u32>>,
    /// Send the text as a user message through the model's chat template
    /// (tokenizer.chat_template), ending where the assistant's answer starts.
    #[arg(long, conflicts_with = "token_ids")]
    pub chat: bool,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat", value_name = "TEXT")]
    pub system: Option<String>,
}

/// Token ids of the prompt; text is tokenized with the model's own tokenizer (built once per
/// model, shared with the generation that follows), special tokens and BOS as the vocabulary
/// asks (llama.cpp's defaults), after the model's chat format with --chat.
pub fn token_ids(args: &PromptArgs, model: &rocky_engine::Model) -> Result<Vec<u32>, CliError> {
    let text = match (&args.prompt, &args.file, &args.token_ids) {
        (_, _, Some(ids)) => {
            if ids.is_empty() {
                return Err(CliError::usage(
                    "--token-ids is empty: give at least one id",
                ));
            }
            return Ok(ids.clone());
        }
        (Some(p), _, _) => p.clone(),
        (_, Some(f), _) => {
            let mut text = std::fs::read_to_string(f).map_err(|e| {
                CliError::input(format!("cannot read the prompt file {}: {e}", f.display()))
            })?;
            // As llama.cpp's -f: the file's one final newline (what editors add) is not part
            // of the prompt; a second one is.
            if text.ends_with('\n') {
                text.pop();
            }
            text
        }
        _ => unreachable!("clap requires one prompt source"),
    };
    let tokenizer = model
        .tokenizer()
        .map_err(|e| CliError::input(e.to_string()))?;
    warn_about(tokenizer);
    let text = if args.chat {
        model_chat_text(args.system.as_deref(), &text, model)?
    } else {
        text
    };
    let ids = tokenizer
        .encode(&text, true, true)
        .map_err(|e| CliError::input(format!("cannot tokenize the prompt: {e}")))?;
    if ids.is_empty() {
        return Err(CliError::usage("the prompt is empty: give some text"));
    }
    Ok(ids)
}

/// [system,] user messages through the model's chat format (parsed once per model).
fn model_chat_text(
    system: Option<&str>,
    user: &str,
    model: &rocky_engine::Model,
) -> Result<String, CliError> {
    let format = model
        .chat_format()
        .map_err(|e| CliError::input(e.to_string()))?;
    format.render(&messages(system, user)).map_err(|e| match e {
        // The CLI's wording: what to give instead of --chat.
        rocky_engine::ChatError::NoTemplate { path } => {
            CliError::input(chat::ChatError::NoTemplate { path }.to_string())
        }
        e => CliError::input(e.to_string()),
    })
}

fn messages(system: Option<&str>, user: &str) -> Vec<Message> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(Message::new("system", system));
    }
    messages.push(Message::new("user", user));
    messages
}

/// The chat template of `file` applied to [system,] user messages.
pub fn chat_text(
    system: Option<&str>,
    user: &str,
    tokenizer: &Tokenizer,
    file: &GgufFile,
) -> Result<String, CliError> {
    chat::render_for(
        file,
        &messages(system, user),
        &Specials::of(tokenizer, file),
    )
    .map_err(|e| CliError::input(e.to_string()))
}

/// Prints the tokenizer's warnings (a pre-tokenizer name llama.cpp would not know, bytes the
/// vocabulary has no token for: text that tokenizes differently than the user may think) to
/// standard error, once per run whichever command builds the tokenizer first, as `rocky
/// tokenize` does.
pub fn warn_about(tokenizer: &rocky_models::tokenizer::Tokenizer) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for warning in tokenizer.warnings() {
            eprintln!("warning: {warning}");
        }
    });
}
