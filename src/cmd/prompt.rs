//! The prompt of a command, given as text, a file, or token ids, turned into token ids.

use crate::error::CliError;
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
#[group(required = true, multiple = false)]
pub struct PromptArgs {
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// Read the prompt text from a file.
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// The prompt as comma-separated token ids (no tokenizer involved).
    #[arg(long, value_delimiter = ',')]
    pub token_ids: Option<Vec<u32>>,
}

/// Token ids of the prompt; text is tokenized with the model's own tokenizer, special tokens
/// and BOS as the vocabulary asks (llama.cpp's defaults).
pub fn token_ids(args: &PromptArgs, file: &GgufFile) -> Result<Vec<u32>, CliError> {
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
        (_, Some(f), _) => std::fs::read_to_string(f).map_err(|e| {
            CliError::input(format!("cannot read the prompt file {}: {e}", f.display()))
        })?,
        _ => unreachable!("clap requires one prompt source"),
    };
    let tokenizer = Tokenizer::from_gguf(file).map_err(|e| CliError::input(e.to_string()))?;
    let ids = tokenizer
        .encode(&text, true, true)
        .map_err(|e| CliError::input(format!("cannot tokenize the prompt: {e}")))?;
    if ids.is_empty() {
        return Err(CliError::usage("the prompt is empty: give some text"));
    }
    Ok(ids)
}
