//! `rocky serve`: the model behind an OpenAI-compatible HTTP API (crate rocky-serve), on the
//! GPU session of rocky-engine or the CPU reference. This file only opens the model; the
//! server is the crate's.

use super::gpu::{self, GpuArgs};
use crate::error::{CliError, CmdResult};
use rocky_generate::Evaluator;
use rocky_serve::{CacheBounds, ServeOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky serve model.gguf --port 8080 --ctx 4096\n  \
curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n    \
-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'\n\n\
Endpoints: /v1/completions, /v1/chat/completions (\"stream\": true for server-sent events; \
tools, response_format and logprobs as OpenAI's), /v1/models, /tokenize, /detokenize, /metrics \
(Prometheus), /health. One request runs at a time; up to --queue more wait, the rest get 503. \
A request whose prompt starts as the cached tokens do (the next turn of a conversation) \
evaluates only the rest: usage.prompt_tokens_details.cached_tokens says how many were reused. \
Up to --cache-slots other conversations are kept (within --cache-mib), so clients alternating \
between conversations reuse each one's prefix."
)]
pub struct Args {
    /// The GGUF model.
    pub model: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free one, printed on standard error).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context size in tokens (KV cache positions): prompt and answer together.
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// Requests that may wait while one runs; more are answered 503.
    #[arg(long, default_value_t = 16)]
    pub queue: usize,
    /// Conversations whose KV cache is kept besides the live one (snapshots in device memory),
    /// so clients alternating between conversations reuse each one's prefix; the least
    /// recently used goes first. 0: only the last conversation is reused.
    #[arg(long, default_value_t = 4)]
    pub cache_slots: usize,
    /// Memory the kept conversations may take together, MiB (fractions allowed).
    #[arg(long, default_value_t = 1024.0)]
    pub cache_mib: f64,
    /// Another name requests may give for the model (repeatable; the first is what
    /// /v1/models reports). "*" accepts any name, for clients configured with a fixed one.
    #[arg(long)]
    pub alias: Vec<String>,
    /// Require `Authorization: Bearer KEY` on every endpoint but /health (401 otherwise).
    /// Also read from ROCKY_API_KEY, which keeps it out of the process list.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Largest request body, MiB: larger ones are refused (413) before they are tokenized.
    #[arg(long, default_value_t = 8.0)]
    pub max_body_mib: f64,
    /// Run on the CPU reference (f32, all cores) instead of the GPU: the oracle, and the
    /// default where every Vulkan device is a CPU implementation (see --device).
    #[arg(long)]
    pub cpu: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

pub fn run(args: Args) -> CmdResult {
    if args.ctx == 0 {
        return Err(CliError::usage("--ctx must be at least 1"));
    }
    if !(args.cache_mib >= 0.0 && args.cache_mib.is_finite()) {
        return Err(CliError::usage(format!(
            "--cache-mib {} is not a size: give MiB as a number of 0 or more",
            args.cache_mib
        )));
    }
    if !(args.max_body_mib > 0.0 && args.max_body_mib.is_finite()) {
        return Err(CliError::usage(format!(
            "--max-body-mib {} is not a size: give MiB as a number above 0",
            args.max_body_mib
        )));
    }
    let api_key = args
        .api_key
        .clone()
        .or_else(|| std::env::var("ROCKY_API_KEY").ok());
    if api_key.as_deref() == Some("") {
        return Err(CliError::usage(
            "--api-key is empty: give a key, or leave it out",
        ));
    }
    let model = rocky_engine::Model::open(&args.model).map_err(gpu::load_error)?;
    // The tokenizer and the chat format are built once here and serve every request.
    let tokenizer = model
        .tokenizer()
        .map_err(|e| CliError::input(format!("serving needs the model's tokenizer: {e}")))?;
    super::prompt::warn_about(tokenizer);
    let chat = model.chat_format().map_err(gpu::load_error)?;
    match chat.source() {
        Some(source) => eprintln!("chat format: {source}"),
        None => eprintln!(
            "note: {} has no chat template: /v1/chat/completions answers 400, /v1/completions works",
            args.model.display()
        ),
    }
    let options = ServeOptions {
        host: args.host.clone(),
        port: args.port,
        queue: args.queue,
        cache: CacheBounds {
            slots: args.cache_slots,
            max_bytes: (args.cache_mib * (1u64 << 20) as f64) as u64,
        },
        model_id: args
            .model
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned()),
        aliases: args.alias.clone(),
        api_key,
        max_body: (args.max_body_mib * (1u64 << 20) as f64) as usize,
        // The HTTP side's own copy: the worker's is busy generating when /tokenize comes.
        tokenizer: rocky_models::tokenizer::Tokenizer::from_gguf(model.file())
            .ok()
            .map(std::sync::Arc::new),
    };
    // A client that closes its connection must not end the server: writes to its socket then
    // fail with EPIPE instead of raising SIGPIPE (main restores the default action for pipes).
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let serve = |evaluator: &mut dyn Evaluator| {
        let mut served = rocky_serve::Model::of(&model, evaluator).map_err(gpu::load_error)?;
        rocky_serve::run(&options, &mut served).map_err(|e| CliError::output(e.to_string()))
    };
    let cpu_instead = if args.cpu {
        None
    } else {
        gpu::cpu_instead(&args.gpu, false)
    };
    if let Some(why) = &cpu_instead {
        gpu::note_cpu_path(why);
    }
    if args.cpu || cpu_instead.is_some() {
        serve(&mut model.cpu_evaluator_options(args.ctx, args.gpu.reference_options()))
    } else {
        let mut session = gpu::open_session(&args.gpu, &model, args.ctx, false)?;
        gpu::prepare(&mut session)?;
        session.prepare_decode().map_err(gpu::session_error)?;
        serve(&mut session)
    }
}
