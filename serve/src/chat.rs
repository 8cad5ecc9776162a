//! Chat messages to prompt text with the model's chat format (rocky-engine's `ChatFormat`,
//! parsed once when the model opened), worded for an HTTP client: a model without a format
//! answers chat requests with 400 and a pointer to /v1/completions, which still works.

use crate::error::ApiError;
use crate::tools::ToolFormat;
use rocky_engine::{ChatError, ChatFormat};
use serde_json::Value;

/// The prompt text of `messages` (and `tools`), ending where the assistant's answer starts.
pub fn render(
    format: &ChatFormat,
    messages: &Value,
    tools: Option<&Value>,
) -> Result<String, ApiError> {
    format.render_json(messages, tools).map_err(|e| match e {
        ChatError::NoTemplate { path } => ApiError::bad_request(format!(
            "{path} has no chat template (tokenizer.chat_template) and rocky has no built-in one \
             for its architecture: use /v1/completions with a prompt already formatted for \
             the model"
        )),
        e => ApiError::bad_request(e.to_string()),
    })
}

/// The format the model writes tool calls in, or a 400 saying its template has none.
pub fn tool_format(format: &ChatFormat) -> Result<ToolFormat, ApiError> {
    let text = format.text().ok_or_else(|| {
        ApiError::bad_request(
            "the model has no chat template, so it has no tool-call format: `tools` cannot be used",
        )
    })?;
    ToolFormat::of_template(text).ok_or_else(|| {
        ApiError::bad_request(format!(
            "`tools`: the model's chat template ({}) has no tool-call format rocky reads \
             (Qwen2.5/Qwen3 <tool_call> blocks, Llama 3.x JSON calls): send the request \
             without tools",
            format.source().unwrap_or("?")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{self, PromptInput};
    use rocky_models::chat::Specials;

    /// Tool conversations through Qwen2.5's and Llama 3.1's templates, rendered by rocky as a
    /// request reaches the template (parsed by `api::chat`), against llama-server --jinja's
    /// renderings of the same requests (tools/tool-template-fixture.sh), at the fixture's date.
    #[test]
    fn tool_prompts_are_llama_servers_bytes() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/");
        let fixture: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}tool-templates-llama-cpp.json")).unwrap(),
        )
        .unwrap();
        let now = fixture["now"].as_u64().unwrap();
        // The vocabulary of the file llama-server rendered with: BOS <|endoftext|>, not added.
        let specials = Specials {
            bos_token: "<|endoftext|>".into(),
            eos_token: "<|im_end|>".into(),
            add_bos: false,
            add_eos: false,
        };
        let mut seen = std::collections::BTreeMap::new();
        for case in fixture["cases"].as_array().unwrap() {
            let name = case["template"].as_str().unwrap();
            let template =
                std::fs::read_to_string(format!("{root}{name}-chat-template.jinja")).unwrap();
            let format = ChatFormat::from_template(name, &template, "a test", specials.clone());
            let want_format = match name {
                "qwen2.5" => ToolFormat::Hermes,
                _ => ToolFormat::LlamaJson,
            };
            assert_eq!(tool_format(&format).unwrap(), want_format);
            let mut body = serde_json::json!({"messages": case["messages"]});
            if let Some(tools) = case.get("tools") {
                body["tools"] = tools.clone();
            }
            let parsed = api::chat(body.to_string().as_bytes()).unwrap();
            let PromptInput::Chat { messages, tools } = parsed.work.input else {
                panic!("a chat input")
            };
            let tools = tools.map(Value::Array);
            let got = format
                .render_json_at(&Value::Array(messages), tools.as_ref(), now)
                .unwrap();
            assert_eq!(
                got,
                case["prompt"].as_str().unwrap(),
                "{name}: {}",
                case["messages"]
            );
            *seen.entry(name.to_string()).or_insert(0) += 1;
        }
        assert!(seen.values().all(|&n| n >= 5), "{seen:?}");
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn a_template_without_tools_refuses_them_by_name() {
        let format = ChatFormat::from_template(
            "g.gguf",
            rocky_models::chat::builtin::GEMMA.template,
            "the built-in gemma format",
            Specials::default(),
        );
        let e = tool_format(&format).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(
            e.message.contains("`tools`") && e.message.contains("gemma"),
            "{}",
            e.message
        );
    }
}
