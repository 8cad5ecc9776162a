//! Chat formats built into rocky for GGUF files that carry no `tokenizer.chat_template` (the
//! Gemma 3 270M GGUF is one): llama.cpp's built-in formats of the same names (src/llama-chat.cpp,
//! `llm_chat_apply_template`), written as Jinja so they render through the same path as a
//! file's own template. Like llama.cpp's, they write no BOS: the tokenizer adds it where the
//! vocabulary asks.
//!
//! The format is picked by architecture, and only where the vocabulary has the format's turn
//! marker as a token: a format whose markers the tokenizer would split into plain text is
//! worse than none (a Llama 2 file is `llama` too, but has no `<|start_header_id|>`).

use crate::gguf::{GgufFile, MetaValue};

/// One built-in chat format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIn {
    /// llama.cpp's name of the format (`--chat-template NAME`).
    pub name: &'static str,
    pub template: &'static str,
    /// A token the vocabulary must have for the format to apply.
    pub marker: &'static str,
}

/// ChatML (llama.cpp "chatml"): no default system message, contents as they are.
pub const CHATML: BuiltIn = BuiltIn {
    name: "chatml",
    template: "{%- for message in messages -%}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}",
    marker: "<|im_start|>",
};

/// Llama 3's header format (llama.cpp "llama3"): contents trimmed.
pub const LLAMA3: BuiltIn = BuiltIn {
    name: "llama3",
    template: "{%- for message in messages -%}\
{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + '<|eot_id|>' }}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}",
    marker: "<|start_header_id|>",
};

/// Gemma's turn format (llama.cpp "gemma"): the assistant is "model"; system messages have no
/// turn of their own: their trimmed texts are joined and put before the next user turn's text.
pub const GEMMA: BuiltIn = BuiltIn {
    name: "gemma",
    template: "{%- set ns = namespace(system='') -%}\
{%- for message in messages -%}\
{%- if message['role'] == 'system' -%}\
{%- set ns.system = ns.system + (message['content'] | trim) -%}\
{%- else -%}\
{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}\
{{ '<start_of_turn>' + role + '\n' }}\
{%- if ns.system and role != 'model' -%}{{ ns.system + '\n\n' }}{%- set ns.system = '' -%}{%- endif -%}\
{{ (message['content'] | trim) + '<end_of_turn>\n' }}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}",
    marker: "<start_of_turn>",
};

/// The built-in format for an architecture, before the vocabulary check.
pub fn for_architecture(arch: &str) -> Option<BuiltIn> {
    match arch {
        "qwen2" | "qwen3" => Some(CHATML),
        "llama" => Some(LLAMA3),
        "gemma3" => Some(GEMMA),
        _ => None,
    }
}

/// The built-in format for `file`: by its architecture, where its vocabulary has the format's
/// marker token.
pub fn for_file(file: &GgufFile) -> Option<BuiltIn> {
    let builtin = for_architecture(file.architecture().ok()?)?;
    let tokens = file.get("tokenizer.ggml.tokens")?.as_array()?;
    tokens
        .iter()
        .any(|t| matches!(t, MetaValue::String(s) if s == builtin.marker))
        .then_some(builtin)
}
