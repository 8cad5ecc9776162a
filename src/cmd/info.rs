//! `rocky info MODEL`: what a GGUF file holds, and which rocky commands work on it and why not.

use crate::error::CmdResult;
use rocky_models::arch;
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky info qwen2.5-3b-instruct-q4_k_m.gguf\n  rocky info model.gguf --json"
)]
pub struct Args {
    /// The GGUF model (or vocabulary) file.
    pub model: PathBuf,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let file = super::open_gguf(&args.model)?;
    let mut by_type: BTreeMap<&str, (usize, u64, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let e = by_type.entry(t.ggml_type.name()).or_default();
        e.0 += 1;
        e.1 += t.n_elements();
        e.2 += t.size;
    }
    let arch_name = file.architecture().unwrap_or("(none)").to_string();
    let model = arch::load(&file);
    let tokenizer = Tokenizer::from_gguf(&file);
    let template_err = rocky_models::chat::template_or_builtin(&file).is_none().then(|| {
        "the file has no chat template (tokenizer.chat_template), and rocky's built-in formats (chatml, llama3, gemma) need an architecture they belong to and its marker token in the vocabulary".to_string()
    });
    let commands = command_support(
        model.as_ref().err().map(|e| e.to_string()),
        tokenizer.as_ref().err().map(|e| e.to_string()),
        template_err,
    );
    let all_supported = commands.iter().all(|c| c.reason.is_none());
    if args.json {
        let types: BTreeMap<_, _> = by_type
            .iter()
            .map(|(k, (n, el, b))| (*k, json!({"tensors": n, "elements": el, "bytes": b})))
            .collect();
        let commands_json: serde_json::Map<String, serde_json::Value> = commands
            .iter()
            .map(|c| {
                (
                    c.command.to_string(),
                    json!({"supported": c.reason.is_none(), "reason": c.reason}),
                )
            })
            .collect();
        let out = json!({
            "path": file.path(),
            "file_bytes": file.file_size(),
            "gguf_version": file.version,
            "architecture": arch_name,
            // Every command works; otherwise the first reason why one does not.
            "supported": all_supported,
            "unsupported_reason": commands.iter().find_map(|c| c.reason.clone()),
            "commands": commands_json,
            "model_supported": model.is_ok(),
            "model_error": model.as_ref().err().map(|e| e.to_string()),
            "config": model.as_ref().ok().map(|m| &m.config),
            "n_params": model.as_ref().ok().map(|m| m.config.n_params()),
            "n_tensors": file.tensors.len(),
            "tensor_types": types,
            "tokenizer": tokenizer_json(&file, &tokenizer),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
        return Ok(());
    }
    println!("file          {}", file.path().display());
    println!(
        "size          {:.2} MiB (GGUF v{}, {} tensors, {} metadata keys)",
        file.file_size() as f64 / (1 << 20) as f64,
        file.version,
        file.tensors.len(),
        file.metadata.len()
    );
    if let Some(name) = file.get("general.name").and_then(|v| v.as_str()) {
        println!("name          {name}");
    }
    println!("architecture  {arch_name}");
    match &model {
        Ok(m) => {
            let c = &m.config;
            println!(
                "shape         {} layers, hidden {}, FFN {}, {} heads / {} KV heads, head dim {}, vocab {}",
                c.n_layer, c.n_embd, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.n_vocab
            );
            println!(
                "rope / norm   theta {}, rms eps {:e}, trained context {}, output {}",
                c.rope_theta,
                c.rms_eps,
                c.n_ctx_train,
                if c.tied_output {
                    "tied to token_embd"
                } else {
                    "separate"
                }
            );
            println!("parameters    {:.3} B", c.n_params() as f64 / 1e9);
        }
        Err(e) if file.tensors.is_empty() => {
            println!("model         none (vocabulary-only file): {e}")
        }
        Err(e) => println!("model         cannot run: {e}"),
    }
    println!("tensor types");
    for (ty, (n, el, bytes)) in &by_type {
        println!(
            "  {ty:<6} {n:>5} tensors {:>14} elements {:>10.2} MiB",
            el,
            *bytes as f64 / (1 << 20) as f64
        );
    }
    print_tokenizer(&file, &tokenizer);
    // The full reasons are on the model and tokenizer lines above; each command names which.
    println!("commands");
    for c in &commands {
        match (&c.reason, c.short_reason) {
            (None, _) => println!("  {:<30} yes", c.command),
            (Some(_), "no chat template") => println!(
                "  {:<30} no: no chat template in the file, and no built-in format fits",
                c.command
            ),
            (Some(_), short) => println!("  {:<30} no: {short} (above)", c.command),
        }
    }
    Ok(())
}

/// One rocky command and why it cannot run on the file (None: it can).
struct CommandSupport {
    command: &'static str,
    reason: Option<String>,
    /// The reason in a few words, for the text output.
    short_reason: &'static str,
}

/// What each command needs: `tokenize` the vocabulary only; `prefill --token-ids`, `bench` and
/// `tune` the model only; text prompts, `generate` (which decodes what it generates, even from
/// token ids) and `serve` both; chatting (`--chat`, `/v1/chat/completions`) both and a chat
/// template, the file's own or rocky's built-in one for the architecture.
fn command_support(
    model_err: Option<String>,
    tokenizer_err: Option<String>,
    template_err: Option<String>,
) -> Vec<CommandSupport> {
    let model = model_err.map(|e| format!("the model cannot run: {e}"));
    let tokenizer = tokenizer_err.map(|e| format!("the text cannot be tokenized: {e}"));
    let both = model.clone().or_else(|| tokenizer.clone());
    let chat = both.clone().or(template_err);
    [
        ("tokenize", tokenizer.clone()),
        ("prefill --token-ids", model.clone()),
        ("prefill --prompt/--file", both.clone()),
        ("generate", both.clone()),
        ("serve", both),
        ("--chat, /v1/chat/completions", chat),
        ("bench", model.clone()),
        ("tune", model),
    ]
    .into_iter()
    .map(|(command, reason)| {
        let short_reason = match &reason {
            Some(r) if r.starts_with("the model") => "the model cannot run",
            Some(r) if r.starts_with("the text") => "the text cannot be tokenized",
            Some(_) => "no chat template",
            None => "",
        };
        CommandSupport {
            command,
            reason,
            short_reason,
        }
    })
    .collect()
}

/// A token's id with its text as llama.cpp prints a piece (byte-level and `<0xXX>` tokens as
/// the bytes they stand for).
fn token_json(tokenizer: &Tokenizer, id: Option<u32>) -> serde_json::Value {
    match id {
        Some(id) => json!({"id": id, "text": tokenizer.token_piece(id)}),
        None => serde_json::Value::Null,
    }
}

fn tokenizer_json(
    file: &GgufFile,
    tokenizer: &Result<Tokenizer, impl std::fmt::Display>,
) -> serde_json::Value {
    let s = |k: &str| file.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let mut out = json!({
        "model": s("tokenizer.ggml.model"),
        "pre": s("tokenizer.ggml.pre"),
        "tokens": file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len()),
        "merges": file.get("tokenizer.ggml.merges").and_then(|v| v.as_array()).map(|a| a.len()),
        "supported": tokenizer.is_ok(),
        "error": tokenizer.as_ref().err().map(|e| e.to_string()),
    });
    if let (Ok(t), Some(map)) = (tokenizer, out.as_object_mut()) {
        let info = t.info();
        map.insert("family".into(), json!(info.family));
        map.insert("pre_in_effect".into(), json!(info.pre));
        map.insert("split_rule".into(), json!(info.split_rule));
        map.insert("ignore_merges".into(), json!(info.ignore_merges));
        map.insert("clean_spaces".into(), json!(info.clean_spaces));
        map.insert("add_space_prefix".into(), json!(info.add_space_prefix));
        map.insert("normalizer".into(), json!(info.normalizer));
        map.insert("bos".into(), token_json(t, info.bos));
        map.insert("eos".into(), token_json(t, info.eos));
        map.insert("adds_bos".into(), json!(info.adds_bos));
        map.insert("adds_eos".into(), json!(info.adds_eos));
        map.insert("warnings".into(), json!(info.warnings));
    }
    out
}

fn print_tokenizer(file: &GgufFile, tokenizer: &Result<Tokenizer, impl std::fmt::Display>) {
    let s = |k: &str| {
        file.get(k)
            .and_then(|v| v.as_str())
            .unwrap_or("(none)")
            .to_string()
    };
    let t = match tokenizer {
        Ok(t) => t,
        Err(e) => {
            println!(
                "tokenizer     model={} pre={}: cannot tokenize: {e}",
                s("tokenizer.ggml.model"),
                s("tokenizer.ggml.pre")
            );
            return;
        }
    };
    let info = t.info();
    let mut line = format!("tokenizer     {}, {} tokens", info.family, info.vocab_size);
    if let Some(pre) = &info.pre {
        line += &format!(", pre {pre}");
    }
    if let Some(rule) = &info.split_rule {
        line += &format!(" (split rule {rule})");
    }
    if info.ignore_merges == Some(true) {
        line += ", ignore_merges";
    }
    if let Some(normalizer) = &info.normalizer {
        line += &format!(", {normalizer}");
    }
    println!("{line}");
    let show = |id: Option<u32>| match id {
        Some(id) => format!("{id} {:?}", t.token_piece(id)),
        None => "none".into(),
    };
    println!(
        "special       BOS {}{}, EOS {}{}",
        show(info.bos),
        if info.adds_bos { " (added)" } else { "" },
        show(info.eos),
        if info.adds_eos { " (added)" } else { "" },
    );
    for warning in &info.warnings {
        println!("warning       {warning}");
    }
}
