//! `rocky info MODEL`: what a GGUF file holds and whether rocky can run it.

use crate::error::CmdResult;
use rocky_models::arch;
use rocky_models::gguf::GgufFile;
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
    let tokenizer = tokenizer_summary(&file);
    if args.json {
        let types: BTreeMap<_, _> = by_type
            .iter()
            .map(|(k, (n, el, b))| (*k, json!({"tensors": n, "elements": el, "bytes": b})))
            .collect();
        let out = json!({
            "path": file.path(),
            "file_bytes": file.file_size(),
            "gguf_version": file.version,
            "architecture": arch_name,
            "supported": model.is_ok(),
            "unsupported_reason": model.as_ref().err().map(|e| e.to_string()),
            "config": model.as_ref().ok().map(|m| &m.config),
            "n_params": model.as_ref().ok().map(|m| m.config.n_params()),
            "n_tensors": file.tensors.len(),
            "tensor_types": types,
            "tokenizer": tokenizer,
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
    println!(
        "tokenizer     {}",
        tokenizer
            .as_object()
            .map(|o| o
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default()
    );
    Ok(())
}

fn tokenizer_summary(file: &GgufFile) -> serde_json::Value {
    let s = |k: &str| file.get(k).and_then(|v| v.as_str()).map(str::to_string);
    json!({
        "model": s("tokenizer.ggml.model"),
        "pre": s("tokenizer.ggml.pre"),
        "tokens": file.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map(|a| a.len()),
        "merges": file.get("tokenizer.ggml.merges").and_then(|v| v.as_array()).map(|a| a.len()),
    })
}
