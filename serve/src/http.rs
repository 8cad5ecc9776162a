//! The HTTP side: routes, the queue's front door, and the OpenAI response shapes (plain JSON
//! or server-sent events). Runs on tokio; the model never does.

use crate::api::{self, Parsed};
use crate::error::ApiError;
use crate::worker::{Event, Job, Summary};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;

pub struct AppState {
    pub model_id: String,
    pub jobs: SyncSender<Job>,
    pub queue: usize,
    pub created: u64,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(model_id: String, jobs: SyncSender<Job>, queue: usize) -> AppState {
        AppState {
            model_id,
            jobs,
            queue,
            created: unix_time(),
            next_id: AtomicU64::new(1),
        }
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        // Agents send long conversations: axum's 2 MB default is too small for a long context.
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state(state)
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": s.model_id, "object": "model", "created": s.created, "owned_by": "rocky"}],
    }))
}

/// Which of the two endpoints: they differ only in the shapes of their answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(s, Kind::Completion, api::completion(&body)).await
}

async fn chat_completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(s, Kind::Chat, api::chat(&body)).await
}

async fn respond(s: Arc<AppState>, kind: Kind, parsed: Result<Parsed, ApiError>) -> Response {
    match run(s, kind, parsed).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    s: Arc<AppState>,
    kind: Kind,
    parsed: Result<Parsed, ApiError>,
) -> Result<Response, ApiError> {
    let parsed = parsed?;
    if let Some(m) = parsed.model.as_deref() {
        if !model_matches(&s.model_id, m) {
            return Err(ApiError::not_found(format!(
                "the model `{m}` does not exist: this server serves `{}`",
                s.model_id
            ))
            .with_code("model_not_found"));
        }
    }
    let stream = parsed.work.stream;
    let (tx, mut rx) = unbounded_channel();
    match s.jobs.try_send(Job {
        work: parsed.work,
        events: tx,
    }) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Err(ApiError::busy(s.queue)),
        Err(TrySendError::Disconnected(_)) => {
            return Err(ApiError::internal("the model's worker has stopped"))
        }
    }
    // The first event says whether the prompt was accepted: errors before generation are
    // plain JSON errors even for streaming requests.
    match rx.recv().await {
        Some(Event::Started) => {}
        Some(Event::Failed(e)) => return Err(e),
        _ => return Err(ApiError::internal("the model's worker stopped")),
    }
    let id = format!(
        "{}-{}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        s.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let meta = Meta {
        id,
        kind,
        model: s.model_id.clone(),
        created: unix_time(),
    };
    if stream {
        Ok(sse(meta, rx).into_response())
    } else {
        whole(meta, rx).await.map(|v| Json(v).into_response())
    }
}

/// The file's name or its stem both name the model (clients are often configured with one).
fn model_matches(id: &str, asked: &str) -> bool {
    asked == id || id.strip_suffix(".gguf") == Some(asked)
}

struct Meta {
    id: String,
    kind: Kind,
    model: String,
    created: u64,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choice: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        })
    }
}

fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
    })
}

/// llama-server's names for the same figures, for measuring prefix reuse.
fn timings(s: &Summary) -> Value {
    json!({
        "cache_n": s.cached_tokens,
        "prompt_n": s.prompt_tokens - s.cached_tokens,
        "prompt_ms": s.prompt_ms,
        "predicted_n": s.completion_tokens,
        "predicted_ms": s.predicted_ms,
    })
}

/// The non-streaming answer: waits for the whole text.
async fn whole(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Result<Value, ApiError> {
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Failed(e) => return Err(e),
            Event::Started => {}
            Event::Done(s) => {
                let choice = match meta.kind {
                    Kind::Completion => json!({
                        "index": 0, "text": text, "logprobs": null, "finish_reason": s.finish_reason,
                    }),
                    Kind::Chat => json!({
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": null,
                        "finish_reason": s.finish_reason,
                    }),
                };
                let mut v = meta.envelope(false, choice);
                v["usage"] = usage(&s);
                v["timings"] = timings(&s);
                return Ok(v);
            }
        }
    }
    Err(ApiError::internal("the model's worker stopped"))
}

/// The streaming answer: one chunk per piece of text, a last chunk with the finish reason and
/// the usage, then `[DONE]`. Dropping the stream (the client went away) closes the channel,
/// which the worker sees at its next token.
fn sse(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let first = (meta.kind == Kind::Chat).then(|| {
        meta.envelope(
            true,
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}),
        )
    });
    let meta = Arc::new(meta);
    let events = UnboundedReceiverStream::new(rx).map(move |event| {
        let chunk = |text: &str, finish: Option<&str>| {
            let choice = match meta.kind {
                Kind::Completion => {
                    json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
                }
                Kind::Chat => {
                    let delta = if finish.is_some() {
                        json!({})
                    } else {
                        json!({"content": text})
                    };
                    json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
                }
            };
            meta.envelope(true, choice)
        };
        match event {
            Event::Text(t) => Some(chunk(&t, None)),
            Event::Done(s) => {
                let mut v = chunk("", Some(s.finish_reason));
                v["usage"] = usage(&s);
                v["timings"] = timings(&s);
                Some(v)
            }
            // Midway failures (a device error) reach a streaming client as an error object.
            Event::Failed(e) => Some(e.body()),
            Event::Started => None,
        }
    });
    let stream = futures_util::stream::iter(first.map(Some))
        .chain(events)
        .filter_map(|v| async move { v })
        .map(|v| Ok(SseEvent::default().data(v.to_string())))
        .chain(futures_util::stream::once(async {
            Ok(SseEvent::default().data("[DONE]"))
        }));
    Sse::new(stream)
}

fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
