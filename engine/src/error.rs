//! What can go wrong, as enums a caller can match on: opening a model ([`LoadError`]), opening
//! or running a session on a device ([`SessionError`]), chat prompts ([`ChatError`]). Every
//! message names the thing at fault and what to do; none names a command-line flag (the CLI
//! words its own for the variants that come from its flags).

use rocky_models::gguf::GgufError;
use rocky_models::tokenizer::TokenizerError;
use rocky_runtime::executor::{ExecError, MathFamily};
use rocky_runtime::RuntimeError;
use rocky_tuning_db::DbError;
use std::path::PathBuf;
use std::sync::Arc;

/// Opening a GGUF model, or what the model lacks for a use (its tokenizer).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "model file {} does not exist: check the path (`rocky synth` makes a test model)",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("cannot read the model: {source}")]
    Read { source: GgufError },
    #[error(
        "not a usable GGUF file: {source}\nThe file is damaged or not a GGUF model: download or convert it again."
    )]
    Malformed { source: GgufError },
    /// An architecture, shape or tensor rocky cannot run.
    #[error(transparent)]
    Architecture(#[from] rocky_models::arch::ModelError),
    /// The file's vocabulary gives no tokenizer rocky supports (token ids still work). Shared:
    /// the tokenizer is built once per model, and so is its failure.
    #[error(transparent)]
    Tokenizer(Arc<TokenizerError>),
}

/// Opening a session on a device, or running it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("ubatch {ubatch} is out of range: use 1 to 4096")]
    UbatchOutOfRange { ubatch: usize },
    #[error("a command buffer must hold at least 1 dispatch")]
    NoDispatchesPerCommandBuffer,
    /// The GPU cannot run the forced math family (see [`MathFamily::check_device`]).
    #[error("{reason}")]
    MathUnsupported { family: MathFamily, reason: String },
    /// A `ROCKY_*` override in the environment (ROCKY_FUSE, ROCKY_OVERLAP) has a value rocky
    /// does not know; the detail names the variable and its values.
    #[error("{detail}")]
    Environment { detail: String },
    /// The tuning database exists but cannot be read (a missing one means "not tuned yet").
    #[error(transparent)]
    Database(#[from] DbError),
    /// No usable device, or the device failed (out of memory, lost).
    #[error(transparent)]
    Device(#[from] RuntimeError),
    /// The executor refused or failed (a kernel, the command-buffer budget, a token outside
    /// the vocabulary, a prompt longer than the context).
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Turning chat messages into a prompt.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error(
        "{path} has no chat template (tokenizer.chat_template) and rocky has no built-in one for \
         its architecture: give a prompt already formatted for the model"
    )]
    NoTemplate { path: String },
    /// The template does not parse (shared: it is parsed once per model), or fails to render
    /// these messages.
    #[error(transparent)]
    Template(Arc<rocky_models::chat::ChatError>),
}

/// Turning prompt text into token ids.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot tokenize the prompt: {0}")]
    Encode(rocky_models::tokenizer::TokenizerError),
}

/// A generation that could not run ([`crate::Model::generate`]).
#[derive(Debug, thiserror::Error)]
pub enum GenerateFailed {
    /// The model lacks what generation needs (its tokenizer).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The prompt, the sampling settings or the evaluator failed.
    #[error(transparent)]
    Generate(#[from] rocky_generate::GenerateError),
}
