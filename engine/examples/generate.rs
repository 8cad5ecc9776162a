//! rocky from Rust without the CLI: greedy continuation of a prompt on the best GPU, with the
//! tuned schedules of `rocky tune`'s database where it has some.
//!
//! cargo run --release -p rocky-engine --example generate -- model.gguf "The capital of France is"

use rocky_engine::{EngineOptions, GenerateOptions, Model, SamplerParams, Session};
use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(prompt)) = (args.next(), args.next()) else {
        eprintln!("usage: generate MODEL.gguf PROMPT");
        std::process::exit(2);
    };
    // The engine's errors say what went wrong and what to do: print them as they read.
    if let Err(e) = run(&path, &prompt) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str, prompt: &str) -> Result<(), Box<dyn std::error::Error>> {
    let model = Model::open(path)?;
    let ids = model.tokenize(prompt)?;
    let max_new_tokens = 32;
    let mut session = Session::open(
        &model,
        &EngineOptions::default(),
        ids.len() + max_new_tokens,
    )?;
    let options = GenerateOptions {
        max_new_tokens,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    let mut stdout = std::io::stdout();
    let reply = session.generate(&ids, &options, &mut |text| {
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    })?;
    eprintln!(
        "\n{} tokens; prefill {:.1} tok/s, decode {:.1} tok/s",
        reply.tokens.len(),
        reply.prefill_tokens_per_second(),
        reply.decode_tokens_per_second().unwrap_or(0.0)
    );
    Ok(())
}
