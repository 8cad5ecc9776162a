//! `rocky tokenize MODEL --prompt TEXT`: the token ids (and pieces) of a text, exactly as
//! llama.cpp tokenizes it with the same GGUF vocabulary.

use crate::error::{CliError, CmdResult};
use rocky_models::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky tokenize ggml-vocab-qwen2.gguf --prompt 'The capital of France is'\n  \
rocky tokenize model.gguf --file chat.txt --json\n  \
rocky tokenize model.gguf --prompt 'Hi' --chat --system 'Be brief.'\n  \
rocky tokenize tokenizer.json --prompt '<|im_start|>user' --no-special"
)]
pub struct Args {
    /// A GGUF model or vocabulary-only GGUF (or a Hugging Face tokenizer.json).
    pub model: PathBuf,
    #[command(flatten)]
    pub text: TextArgs,
    /// Print {"n_tokens", "ids", "pieces"} as JSON.
    #[arg(long)]
    pub json: bool,
    /// Tokenize the text literally: no BOS/EOS, and control-token texts such as
    /// <|im_start|> stay plain text. By default BOS/EOS follow the vocabulary and control
    /// tokens in the text are recognized (llama.cpp's defaults).
    #[arg(long)]
    pub no_special: bool,
    /// Tokenize the text as a user message through the model's chat template (what
    /// `prefill --chat` feeds the model).
    #[arg(long, conflicts_with = "no_special")]
    pub chat: bool,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat", value_name = "TEXT")]
    pub system: Option<String>,
}

#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct TextArgs {
    /// The text to tokenize.
    #[arg(long, short = 'p')]
    pub prompt: Option<String>,
    /// Read the text from a file (taken exactly, final newline included).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    let text = read_text(&args.text)?;
    let tokenizer = load_tokenizer(&args.model)?;
    let text = if args.chat {
        if is_json(&args.model) {
            return Err(CliError::usage(
                "--chat needs a GGUF file: the chat template is its tokenizer.chat_template",
            ));
        }
        let file = super::open_gguf(&args.model)?;
        super::prompt::chat_text(args.system.as_deref(), &text, &tokenizer, &file)?
    } else {
        text
    };
    let special = !args.no_special;
    let ids = tokenizer
        .encode(&text, special, special)
        .map_err(|e| CliError::internal(format!("cannot tokenize the text: {e}")))?;
    let pieces: Vec<String> = ids.iter().map(|&id| tokenizer.token_piece(id)).collect();
    if args.json {
        let out = TokenizeJson {
            n_tokens: ids.len(),
            ids: &ids,
            pieces: &pieces,
        };
        println!(
            "{}",
            serde_json::to_string(&out).expect("plain data serializes")
        );
        return Ok(());
    }
    println!("{} tokens", ids.len());
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("[{}]", list.join(", "));
    for (i, (id, piece)) in ids.iter().zip(&pieces).enumerate() {
        println!("{i:>6}  {id:>7}  '{}'", show_piece(piece));
    }
    Ok(())
}

/// The `--json` output, fields in this order.
#[derive(serde::Serialize)]
struct TokenizeJson<'a> {
    n_tokens: usize,
    ids: &'a [u32],
    pieces: &'a [String],
}

fn read_text(args: &TextArgs) -> Result<String, CliError> {
    match (&args.prompt, &args.file) {
        (Some(text), _) => Ok(text.clone()),
        (None, Some(path)) => {
            let bytes = std::fs::read(path).map_err(|e| {
                CliError::input(format!("cannot read the text file {}: {e}", path.display()))
            })?;
            String::from_utf8(bytes).map_err(|e| {
                CliError::input(format!(
                    "{} is not UTF-8 text (invalid byte at offset {}): save it as UTF-8",
                    path.display(),
                    e.utf8_error().valid_up_to()
                ))
            })
        }
        (None, None) => Err(CliError::usage("give the text with --prompt or --file")),
    }
}

fn is_json(model: &Path) -> bool {
    model
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

fn load_tokenizer(model: &Path) -> Result<Tokenizer, CliError> {
    let loaded = if is_json(model) {
        Tokenizer::from_tokenizer_json(model)
    } else {
        let file = super::open_gguf(model)?;
        Tokenizer::from_gguf(&file)
    };
    let tokenizer = loaded.map_err(|e| {
        CliError::input(format!(
            "{e}\nUse a GGUF whose vocabulary is byte-level BPE (tokenizer.ggml.model = gpt2: \
             Qwen, Llama 3, DeepSeek, Falcon, StarCoder, ...), SentencePiece-style (llama: Gemma 3, \
             Llama 2, Phi-3) or WordPiece (bert), or give the model's Hugging Face tokenizer.json \
             as MODEL (`rocky info MODEL` says what the file supports)."
        ))
    })?;
    for warning in tokenizer.warnings() {
        eprintln!("warning: {warning}");
    }
    Ok(tokenizer)
}

/// A piece made readable on one line: line breaks, tabs and other control characters are
/// written as escapes.
fn show_piece(piece: &str) -> String {
    let mut out = String::with_capacity(piece.len());
    for c in piece.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
