//! Chat messages to prompt text: the GGUF's own template (`tokenizer.chat_template`, rendered
//! by rocky-models as llama.cpp renders it), else the architecture's known format where rocky
//! has one built in (as llama.cpp's built-in templates serve files that carry none: the Gemma 3
//! 270M GGUF is one), else a clear error for chat requests while plain completions still work.

use rocky_models::chat::{self, Message, Specials};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;

/// Where a model's chat format comes from.
#[derive(Clone, Debug)]
pub struct ChatFormat {
    /// The file, for error messages.
    path: String,
    /// The template and where it came from ("the GGUF", "built-in gemma3"); None where there
    /// is neither.
    template: Option<(String, String)>,
    specials: Specials,
}

impl ChatFormat {
    pub fn of(file: &GgufFile, tokenizer: &Tokenizer) -> ChatFormat {
        let path = file.path().display().to_string();
        // The file's own template, else the built-in format of its architecture
        // (rocky_models::chat::builtin).
        let template = chat::template_or_builtin(file).map(|(t, source)| (t.to_string(), source));
        ChatFormat {
            path,
            template,
            specials: Specials::of(tokenizer, file),
        }
    }

    /// Where the template comes from, for the start-up line; None when chat is unavailable.
    pub fn source(&self) -> Option<&str> {
        self.template.as_ref().map(|(_, s)| s.as_str())
    }

    /// The prompt text of `messages`, ending where the assistant's answer starts.
    pub fn render(&self, messages: &[Message]) -> Result<String, String> {
        let (template, _) = self.template.as_ref().ok_or_else(|| {
            format!(
                "{} has no chat template (tokenizer.chat_template) and rocky has no built-in one \
                 for its architecture: use /v1/completions with a prompt already formatted for \
                 the model",
                self.path
            )
        })?;
        chat::render(&self.path, template, messages, &self.specials).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = chat::render("t", chat::builtin::GEMMA.template, &messages, &specials).unwrap();
        // No BOS in the text: the tokenizer adds it (as with llama.cpp's built-in gemma format).
        assert_eq!(
            text,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
             <start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nWhy?<end_of_turn>\n\
             <start_of_turn>model\n"
        );
    }
}
