//! A model's chat format, parsed once: the GGUF's own template (`tokenizer.chat_template`,
//! rendered by rocky-models as llama.cpp renders it), else the architecture's known format
//! where rocky has one built in (as llama.cpp's built-in templates serve files that carry
//! none: the Gemma 3 270M GGUF is one), else [`ChatError::NoTemplate`] for chat prompts while
//! plain prompts still work.

use crate::error::ChatError;
use rocky_models::chat::{self, ChatTemplate, Message, Specials};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use std::sync::Arc;

/// Where a model's chat format comes from, and its template ready to render.
#[derive(Debug)]
pub struct ChatFormat {
    /// The file, for error messages.
    path: String,
    /// Where the template came from ("the GGUF's tokenizer.chat_template", "the built-in …
    /// format"); None where there is none.
    source: Option<String>,
    /// The parsed template, or why it does not parse (told on every chat prompt, as a
    /// template error is the file's, not the request's).
    template: Option<Result<ChatTemplate, Arc<chat::ChatError>>>,
}

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

    /// `found`: the template text and where it came from, if any.
    fn parse(path: String, found: Option<(&str, String)>, specials: Specials) -> ChatFormat {
        let source = found.as_ref().map(|(_, source)| source.clone());
        let template =
            found.map(|(text, _)| ChatTemplate::new(&path, text, specials).map_err(Arc::new));
        ChatFormat {
            path,
            source,
            template,
        }
    }

    /// Where the template comes from, for a start-up line; None when chat is unavailable.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The prompt text of `messages`, ending where the assistant's answer starts.
    pub fn render(&self, messages: &[Message]) -> Result<String, ChatError> {
        match &self.template {
            None => Err(ChatError::NoTemplate {
                path: self.path.clone(),
            }),
            Some(Err(e)) => Err(ChatError::Template(e.clone())),
            Some(Ok(template)) => template
                .render(messages)
                .map_err(|e| ChatError::Template(Arc::new(e))),
        }
    }
}

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
        let template = ChatTemplate::new("t", chat::builtin::GEMMA.template, specials).unwrap();
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
}
