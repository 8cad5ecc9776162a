//! `rocky serve`: an OpenAI-compatible HTTP server (`/v1/completions`,
//! `/v1/chat/completions` with tools, `response_format` and logprobs, `/v1/models`, and
//! llama-server's `/tokenize`, `/detokenize`, `/metrics`, `/health`) over rocky-generate's
//! generation loop.
//!
//! Two threads: tokio serves HTTP (`http`), and the caller's thread runs the model (`worker`),
//! taking requests one at a time from a bounded queue. One job per module: `api` (request
//! bodies), `fields` (what each request field does), `chat` (messages to prompt text, with the
//! model's chat format parsed once), `tools` (tool-call formats: reading calls, their
//! grammar), `constrain` (grammars as a token mask, by llguidance), `prefix` (what the cache
//! holds), `conversations` (several conversations' caches, least recently used out first),
//! `error` (OpenAI's error bodies).

pub mod api;
pub mod chat;
pub mod closing;
pub mod constrain;
pub mod conversations;
pub mod error;
pub mod fields;
pub mod http;
pub mod metrics;
pub mod prefix;
pub mod tools;
pub mod worker;

pub use conversations::CacheBounds;
pub use rocky_engine::ChatFormat;
pub use worker::Model;

use std::sync::Arc;

#[derive(Clone)]
pub struct ServeOptions {
    pub host: String,
    /// 0: any free port (the line on standard error says which).
    pub port: u16,
    /// Requests that may wait while one runs; more get 503.
    pub queue: usize,
    /// The name /v1/models lists and requests may give.
    pub model_id: String,
    /// Conversations kept besides the live one, and their memory.
    pub cache: CacheBounds,
    /// Further names requests may give for the model (the first is what /v1/models reports);
    /// "*": any name.
    pub aliases: Vec<String>,
    /// Where set, requests must carry `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Request bodies larger than this are refused (413).
    pub max_body: usize,
    /// A copy of the tokenizer for /tokenize and /detokenize.
    pub tokenizer: Option<Arc<rocky_models::tokenizer::Tokenizer>>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Server(String),
}

/// Listens, prints `listening on http://HOST:PORT` to standard error once requests are
/// answered, and runs the model on this thread until the HTTP side stops.
pub fn run(options: &ServeOptions, model: &mut Model) -> Result<(), ServeError> {
    let addr = format!("{}:{}", options.host, options.port);
    let listener = std::net::TcpListener::bind(&addr).map_err(|source| ServeError::Bind {
        addr: addr.clone(),
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| ServeError::Server(e.to_string()))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Server(e.to_string()))?;
    let (jobs_tx, jobs_rx) = std::sync::mpsc::sync_channel(options.queue);
    let metrics = Arc::new(metrics::Metrics::default());
    let mut names = options.aliases.clone();
    names.push(options.model_id.clone());
    let state = Arc::new(http::AppState::new(
        http::HttpOptions {
            model_id: options
                .aliases
                .iter()
                .find(|a| *a != "*")
                .unwrap_or(&options.model_id)
                .clone(),
            names,
            api_key: options.api_key.clone(),
            max_body: options.max_body,
            tokenizer: options.tokenizer.clone(),
        },
        jobs_tx,
        options.queue,
        metrics.clone(),
    ));
    let server = std::thread::Builder::new()
        .name("rocky-http".into())
        .spawn(move || -> Result<(), ServeError> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| ServeError::Server(e.to_string()))?;
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)
                    .map_err(|e| ServeError::Server(e.to_string()))?;
                eprintln!("rocky serve: listening on http://{local}");
                axum::serve(listener, http::router(state))
                    .await
                    .map_err(|e| ServeError::Server(e.to_string()))
            })
        })
        .map_err(|e| ServeError::Server(e.to_string()))?;
    // Returns once the HTTP side is gone (its state holds the only sender).
    worker::run(model, options.cache, jobs_rx, metrics);
    server
        .join()
        .map_err(|_| ServeError::Server("the HTTP thread panicked".into()))?
}
