//! Chat messages to prompt text with the model's chat format (rocky-engine's `ChatFormat`,
//! parsed once when the model opened), worded for an HTTP client: a model without a format
//! answers chat requests with 400 and a pointer to /v1/completions, which still works.

use crate::error::ApiError;
use rocky_engine::{ChatError, ChatFormat};
use rocky_models::chat::Message;

/// The prompt text of `messages`, ending where the assistant's answer starts.
pub fn render(format: &ChatFormat, messages: &[Message]) -> Result<String, ApiError> {
    format.render(messages).map_err(|e| match e {
        ChatError::NoTemplate { path } => ApiError::bad_request(format!(
            "{path} has no chat template (tokenizer.chat_template) and rocky has no built-in one \
             for its architecture: use /v1/completions with a prompt already formatted for \
             the model"
        )),
        e => ApiError::bad_request(e.to_string()),
    })
}
