//! The HTTP side: routes (the OpenAI endpoints, llama-server's /tokenize, /detokenize and
//! /metrics, /health), the API key check, the body limit, the queue's front door, and the
//! OpenAI response shapes (plain JSON or server-sent events, tool calls, logprobs). Runs on
//! tokio; the model never does.

use crate::api::{self, Parsed};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::tools::{Piece, ToolFormat, ToolStream};
use crate::worker::{Event, Job, Logprob, Summary};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use rocky_models::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What every handler shares.
pub struct AppState {
    /// The name /v1/models reports (the first --alias, else the file's name).
    pub model_id: String,
    /// Other names requests may give (the file's name and stem, further aliases); "*" in it:
    /// any name.
    pub names: Vec<String>,
    pub jobs: SyncSender<Job>,
    pub queue: usize,
    pub created: u64,
    /// Requests to /v1/* (and /tokenize, /detokenize, /metrics) must carry it as a Bearer
    /// token; /health stays open for load balancers.
    pub api_key: Option<String>,
    /// Larger bodies are refused with 413 before they are read whole.
    pub max_body: usize,
    /// A copy of the model's tokenizer for /tokenize and /detokenize (the worker's is busy
    /// generating).
    pub tokenizer: Option<Arc<Tokenizer>>,
    pub metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

/// What the HTTP side is started with besides the queue.
pub struct HttpOptions {
    pub model_id: String,
    pub names: Vec<String>,
    pub api_key: Option<String>,
    pub max_body: usize,
    pub tokenizer: Option<Arc<Tokenizer>>,
}

impl AppState {
    pub fn new(
        options: HttpOptions,
        jobs: SyncSender<Job>,
        queue: usize,
        metrics: Arc<Metrics>,
    ) -> AppState {
        AppState {
            model_id: options.model_id,
            names: options.names,
            jobs,
            queue,
            created: unix_time(),
            api_key: options.api_key,
            max_body: options.max_body,
            tokenizer: options.tokenizer,
            metrics,
            next_id: AtomicU64::new(1),
        }
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let guarded = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize,
        ));
    Router::new()
        .route("/health", get(health))
        .merge(guarded)
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        // The limit is checked by `read_body`, which answers in OpenAI's error shape.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// The Bearer check of --api-key (401 otherwise), compared in constant time.
async fn authorize(
    State(s): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(key) = &s.api_key {
        let given = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let same = given.len() == key.len()
            && given
                .bytes()
                .zip(key.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// The body, refused with 413 as soon as it is known to pass the limit (from its
/// Content-Length, else while it arrives), so a 20 MB prompt costs no tokenizing.
async fn read_body(s: &AppState, body: axum::body::Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, s.max_body)
        .await
        .map_err(|_| ApiError::too_large(s.max_body))
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

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.text(),
    )
        .into_response()
}

/// The server's tokenizer and the JSON body of a /tokenize or /detokenize request.
async fn tokenizer_request(
    s: &AppState,
    body: axum::body::Body,
) -> Result<(&Arc<Tokenizer>, Value), ApiError> {
    let body = read_body(s, body).await?;
    let tokenizer = s
        .tokenizer
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("this server has no tokenizer"))?;
    let v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    Ok((tokenizer, v))
}

/// llama-server's `/tokenize`: `{"content": TEXT, "add_special": BOOL, "with_pieces": BOOL}`
/// to `{"tokens": [...]}` (with pieces: `[{"id", "piece"}]`).
async fn tokenize(State(s): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let run = async {
        let (tokenizer, v) = tokenizer_request(&s, body).await?;
        let content = v
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_request("`content` (a string) is required"))?;
        let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        // A long text takes a while: off the async threads, which serve every connection.
        let (text, add_special, t) = (content.to_string(), flag("add_special"), tokenizer.clone());
        let ids = tokio::task::spawn_blocking(move || t.encode(&text, add_special, true))
            .await
            .map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize `content`: {e}")))?;
        let tokens: Vec<Value> = if flag("with_pieces") {
            ids.iter()
                .map(|&id| {
                    let bytes = tokenizer.token_bytes(id).unwrap_or_default();
                    json!({"id": id, "piece": String::from_utf8_lossy(&bytes)})
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok::<_, ApiError>(Json(json!({"tokens": tokens})).into_response())
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

/// llama-server's `/detokenize`: `{"tokens": [ids]}` to `{"content": TEXT}`.
async fn detokenize(State(s): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let run = async {
        let (tokenizer, v) = tokenizer_request(&s, body).await?;
        let ids: Vec<u32> = v
            .get("tokens")
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .ok_or_else(|| ApiError::bad_request("`tokens` (an array of token ids) is required"))?;
        let n = tokenizer.vocab_size();
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= n) {
            return Err(ApiError::bad_request(format!(
                "token id {bad} is outside the vocabulary of {n} tokens"
            )));
        }
        Ok(Json(json!({"content": tokenizer.decode(&ids)})).into_response())
    };
    run.await.unwrap_or_else(|e| e.into_response())
}

/// Which of the two endpoints: they differ only in the shapes of their answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

async fn completions(State(s): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let parsed = read_body(&s, body).await.and_then(|b| api::completion(&b));
    respond(s, Kind::Completion, parsed).await
}

async fn chat_completions(State(s): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let parsed = read_body(&s, body).await.and_then(|b| api::chat(&b));
    respond(s, Kind::Chat, parsed).await
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
        if !model_matches(&s.model_id, &s.names, m) {
            return Err(ApiError::not_found(format!(
                "the model `{m}` does not exist: this server serves `{}`",
                s.model_id
            ))
            .with_code("model_not_found"));
        }
    }
    let stream = parsed.work.stream;
    let (tx, mut rx) = unbounded_channel();
    // Counted before the send: the worker may take the job at once.
    s.metrics.waiting.fetch_add(1, Ordering::Relaxed);
    match s.jobs.try_send(Job {
        work: parsed.work,
        events: tx,
    }) {
        Ok(()) => {
            s.metrics.requests.fetch_add(1, Ordering::Relaxed);
        }
        Err(TrySendError::Full(_)) => {
            s.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
            s.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::busy(s.queue));
        }
        Err(TrySendError::Disconnected(_)) => {
            s.metrics.waiting.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::internal("the model's worker has stopped"));
        }
    }
    // The first event says whether the prompt was accepted: errors before generation are
    // plain JSON errors even for streaming requests.
    let tools = match rx.recv().await {
        Some(Event::Started(tools)) => tools,
        Some(Event::Failed(e)) => return Err(e),
        _ => return Err(ApiError::internal("the model's worker stopped")),
    };
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
        tools,
    };
    if stream {
        Ok(sse(meta, rx).into_response())
    } else {
        whole(meta, rx).await.map(|v| Json(v).into_response())
    }
}

/// The reported id, the other names (the file's name and stem, --alias), or any name where
/// "*" is among them (clients are often configured with a fixed model name).
fn model_matches(id: &str, names: &[String], asked: &str) -> bool {
    asked == id
        || id.strip_suffix(".gguf") == Some(asked)
        || names
            .iter()
            .any(|n| n == "*" || n == asked || n.strip_suffix(".gguf") == Some(asked))
}

struct Meta {
    id: String,
    kind: Kind,
    model: String,
    created: u64,
    /// Where the request has tools: the format the answer's calls are read in.
    tools: Option<ToolFormat>,
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
/// Where a grammar constrained the reply, also its share: `constraint_ms` (masks and parser
/// steps, part of prompt_ms and predicted_ms: the first mask follows the prefill) over
/// `constraint_masks` masks, and `constraint_exposed_ms` of it on the critical path (the rest
/// ran while the device computed the step). Of `predicted_ms`, besides the model's steps
/// (`predicted_eval_ms`): the draws (`predicted_draw_ms`) and, with a grammar, its exposed part
/// in the decode steps (`predicted_constraint_exposed_ms`).
fn timings(s: &Summary) -> Value {
    let mut t = json!({
        "cache_n": s.cached_tokens,
        "prompt_n": s.prompt_tokens - s.cached_tokens,
        "prompt_ms": s.prompt_ms,
        "predicted_n": s.completion_tokens,
        "predicted_ms": s.predicted_ms,
        "predicted_eval_ms": s.predicted_eval_ms,
        "predicted_draw_ms": s.predicted_draw_ms,
    });
    if let Some((ms, masks)) = s.constraint {
        t["constraint_ms"] = json!(ms);
        t["constraint_masks"] = json!(masks);
        t["constraint_exposed_ms"] = json!(s.constraint_exposed_ms);
        t["predicted_constraint_exposed_ms"] = json!(s.predicted_constraint_exposed_ms);
    }
    t
}

/// A call as OpenAI returns it; `index` and the id are per answer.
fn call_json(meta: &Meta, index: usize, call: &crate::tools::ToolCall) -> Value {
    json!({
        "index": index,
        "id": format!("call_{}_{index}", meta.id),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// Chat's per-token entry: `{token, logprob, bytes, top_logprobs}`.
fn chat_logprob(l: &Logprob) -> Value {
    let entry = |a: &crate::worker::Alternative| json!({"token": a.text, "logprob": a.logprob, "bytes": a.bytes});
    let mut v = entry(&l.token);
    v["top_logprobs"] = l.top.iter().map(entry).collect();
    v
}

/// Completions' legacy shape for a run of tokens, `offset` being the first one's text offset.
fn completion_logprobs(list: &[&Logprob], mut offset: usize) -> Value {
    let mut offsets = Vec::new();
    for l in list {
        offsets.push(offset);
        offset += l.token.text.len();
    }
    json!({
        "tokens": list.iter().map(|l| l.token.text.as_str()).collect::<Vec<_>>(),
        "token_logprobs": list.iter().map(|l| l.token.logprob).collect::<Vec<_>>(),
        "top_logprobs": list.iter().map(|l| {
            l.top.iter().map(|a| (a.text.clone(), json!(a.logprob))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

/// The finish reason: a call made is "tool_calls", as OpenAI reports it.
fn finish(s: &Summary, calls: usize) -> &'static str {
    if calls > 0 {
        "tool_calls"
    } else {
        s.finish_reason
    }
}

/// The non-streaming answer: waits for the whole text.
async fn whole(meta: Meta, mut rx: UnboundedReceiver<Event>) -> Result<Value, ApiError> {
    let mut text = String::new();
    let mut logprobs: Vec<Logprob> = Vec::new();
    let mut any_logprobs = false;
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token { text: t, logprob } => {
                text.push_str(&t);
                if let Some(l) = logprob {
                    any_logprobs = true;
                    logprobs.push(l);
                }
            }
            Event::Failed(e) => return Err(e),
            Event::Started(_) => {}
            Event::Done(s) => {
                let choice = match meta.kind {
                    Kind::Completion => json!({
                        "index": 0,
                        "text": text,
                        "logprobs": if any_logprobs {
                            completion_logprobs(&logprobs.iter().collect::<Vec<_>>(), 0)
                        } else {
                            Value::Null
                        },
                        "finish_reason": s.finish_reason,
                    }),
                    Kind::Chat => {
                        let (content, calls) = match meta.tools {
                            None => (Some(text), Vec::new()),
                            Some(format) => {
                                // The same splitter as streaming, fed the whole text.
                                let mut split = ToolStream::new(format);
                                let mut pieces = split.push(&text);
                                pieces.extend(split.finish());
                                let mut content: Option<String> = None;
                                let mut calls = Vec::new();
                                for p in pieces {
                                    match p {
                                        Piece::Content(c) => {
                                            content.get_or_insert_with(String::new).push_str(&c)
                                        }
                                        Piece::Call(c) => {
                                            calls.push(call_json(&meta, calls.len(), &c))
                                        }
                                    }
                                }
                                (content, calls)
                            }
                        };
                        let mut message = json!({"role": "assistant", "content": content});
                        let n_calls = calls.len();
                        if n_calls > 0 {
                            // OpenAI's non-streaming calls have no index.
                            let calls: Vec<Value> = calls
                                .into_iter()
                                .map(|mut c| {
                                    c.as_object_mut().map(|o| o.remove("index"));
                                    c
                                })
                                .collect();
                            message["tool_calls"] = Value::Array(calls);
                        }
                        json!({
                            "index": 0,
                            "message": message,
                            "logprobs": if any_logprobs {
                                json!({"content": logprobs.iter().map(chat_logprob).collect::<Vec<_>>(), "refusal": null})
                            } else {
                                Value::Null
                            },
                            "finish_reason": finish(&s, n_calls),
                        })
                    }
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

/// What a streaming answer remembers between events.
struct Streaming {
    meta: Meta,
    split: Option<ToolStream>,
    calls: usize,
    /// Completions: the text offset of the next token.
    offset: usize,
}

impl Streaming {
    fn chunk(&self, delta_or_text: Value, logprobs: Value, finish: Option<&str>) -> Value {
        let choice = match self.meta.kind {
            Kind::Completion => {
                json!({"index": 0, "text": delta_or_text, "logprobs": logprobs, "finish_reason": finish})
            }
            Kind::Chat => {
                json!({"index": 0, "delta": delta_or_text, "logprobs": logprobs, "finish_reason": finish})
            }
        };
        self.meta.envelope(true, choice)
    }

    /// The chunks of one token's text (none where the splitter holds it back), the token's
    /// log-probabilities on the first.
    fn token(&mut self, text: String, logprob: Option<Logprob>) -> Vec<Value> {
        let mut logprobs = match (&logprob, self.meta.kind) {
            (None, _) => Value::Null,
            (Some(l), Kind::Chat) => json!({"content": [chat_logprob(l)], "refusal": null}),
            (Some(l), Kind::Completion) => completion_logprobs(&[l], self.offset),
        };
        if self.meta.kind == Kind::Completion {
            self.offset += logprob.as_ref().map_or(0, |l| l.token.text.len());
            return vec![self.chunk(json!(text), logprobs, None)];
        }
        let pieces = match self.split.as_mut() {
            Some(split) => split.push(&text),
            None => vec![Piece::Content(text)],
        };
        let mut out = Vec::new();
        for p in pieces {
            out.push(self.piece(p, std::mem::take(&mut logprobs)));
        }
        if out.is_empty() && !logprobs.is_null() {
            out.push(self.chunk(json!({"content": ""}), logprobs, None));
        }
        out
    }

    fn piece(&mut self, p: Piece, logprobs: Value) -> Value {
        let delta = match p {
            Piece::Content(c) => json!({"content": c}),
            Piece::Call(c) => {
                let call = call_json(&self.meta, self.calls, &c);
                self.calls += 1;
                json!({"tool_calls": [call]})
            }
        };
        self.chunk(delta, logprobs, None)
    }

    fn done(&mut self, s: &Summary) -> Vec<Value> {
        let rest = self.split.as_mut().map(|t| t.finish()).unwrap_or_default();
        let mut out: Vec<Value> = rest
            .into_iter()
            .map(|p| self.piece(p, Value::Null))
            .collect();
        let empty = match self.meta.kind {
            Kind::Completion => json!(""),
            Kind::Chat => json!({}),
        };
        let mut v = self.chunk(empty, Value::Null, Some(finish(s, self.calls)));
        v["usage"] = usage(s);
        v["timings"] = timings(s);
        out.push(v);
        out
    }
}

/// The streaming answer: chunks of text (and tool calls, once each is whole), a last chunk
/// with the finish reason and the usage, then `[DONE]`. Dropping the stream (the client went
/// away) closes the channel, which the worker sees at its next token.
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
    let mut state = Streaming {
        split: meta.tools.map(ToolStream::new),
        meta,
        calls: 0,
        offset: 0,
    };
    let events = UnboundedReceiverStream::new(rx).flat_map(move |event| {
        let chunks = match event {
            Event::Token { text, logprob } => state.token(text, logprob),
            Event::Done(s) => state.done(&s),
            // Midway failures (a device error) reach a streaming client as an error object.
            Event::Failed(e) => vec![e.body()],
            Event::Started(_) => Vec::new(),
        };
        futures_util::stream::iter(chunks)
    });
    let stream = futures_util::stream::iter(first)
        .chain(events)
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
