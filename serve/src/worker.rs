//! The one thread that runs the model. GPU work is serial, so requests wait in a bounded
//! queue and run one at a time; the worker remembers which tokens' keys and values the cache
//! holds (the live conversation and several saved ones, see `conversations`), so a request
//! that extends a cached conversation evaluates only its new tokens.

use crate::api::{PromptInput, Work};
use crate::conversations::{CacheBounds, Conversations};
use crate::error::ApiError;
use rocky_engine::ChatFormat;
use rocky_generate::{
    generate_reusing, EndOfGeneration, Evaluator, GenerateError, GenerateOptions, Generation,
};
use rocky_models::tokenizer::Tokenizer;
use std::sync::mpsc::Receiver;
use tokio::sync::mpsc::UnboundedSender;

/// What the worker runs: the evaluator (GPU session or CPU reference) and what turns text
/// into its tokens, built once with the model and shared by every request.
pub struct Model<'a> {
    pub evaluator: &'a mut dyn Evaluator,
    pub tokenizer: &'a Tokenizer,
    pub end: &'a EndOfGeneration,
    pub chat: &'a ChatFormat,
}

impl<'a> Model<'a> {
    /// `model`'s tokenizer, end-of-generation tokens and chat format (built on the first call,
    /// once per model), running on `evaluator`.
    pub fn of(
        model: &'a rocky_engine::Model,
        evaluator: &'a mut dyn Evaluator,
    ) -> Result<Model<'a>, rocky_engine::LoadError> {
        Ok(Model {
            evaluator,
            tokenizer: model.tokenizer()?,
            end: model.end_of_generation()?,
            chat: model.chat_format()?,
        })
    }
}

/// A queued request and where its results go.
pub struct Job {
    pub work: Work,
    pub events: UnboundedSender<Event>,
}

/// What a request hears back, in this order: `Started` or `Failed`; then text pieces; then
/// `Done` (or `Failed` when the model fails midway).
#[derive(Debug)]
pub enum Event {
    /// The prompt was accepted (tokenized, fits the context); generation begins.
    Started,
    Text(String),
    Done(Summary),
    Failed(ApiError),
}

/// The end of a generation, for `usage`, `finish_reason` and `timings`.
#[derive(Clone, Debug)]
pub struct Summary {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// "stop" or "length", as OpenAI reports them.
    pub finish_reason: &'static str,
    pub prompt_ms: f64,
    pub predicted_ms: f64,
}

impl Summary {
    fn of(g: &Generation) -> Summary {
        use rocky_generate::StopReason::*;
        Summary {
            prompt_tokens: g.prompt_tokens,
            cached_tokens: g.reused_tokens,
            completion_tokens: g.tokens.len(),
            finish_reason: match g.stop {
                EndOfGeneration(_) | StopString(_) => "stop",
                MaxTokens | ContextFull | Cancelled => "length",
            },
            prompt_ms: g.prefill.as_secs_f64() * 1e3,
            predicted_ms: g.decode.as_secs_f64() * 1e3,
        }
    }
}

/// Runs jobs until every sender of `jobs` is gone.
pub fn run(model: &mut Model, bounds: CacheBounds, jobs: Receiver<Job>) {
    let mut cached = Conversations::new(bounds);
    for job in jobs {
        // A client that left while its request waited costs nothing.
        if job.events.is_closed() {
            continue;
        }
        serve_one(model, &mut cached, job);
    }
}

fn serve_one(model: &mut Model, cached: &mut Conversations, job: Job) {
    let events = job.events;
    let prompt = match prompt_ids(model, &job.work.input) {
        Ok(ids) => ids,
        Err(e) => {
            let _ = events.send(Event::Failed(e));
            return;
        }
    };
    let n_ctx = model.evaluator.n_ctx();
    let max_new_tokens = job
        .work
        .max_tokens
        .unwrap_or(n_ctx.saturating_sub(prompt.len()).max(1));
    let options = GenerateOptions {
        max_new_tokens,
        sampler: job.work.sampler,
        stop_strings: job.work.stop,
    };
    let _ = events.send(Event::Started);
    // Until it ends well, nothing is known about what the cache holds.
    let reuse = cached.prepare(model.evaluator, &prompt);
    let mut on_step = |text: &str| {
        if !text.is_empty() {
            let _ = events.send(Event::Text(text.to_string()));
        }
        // A closed channel: the client went away; stop spending the device on it.
        !events.is_closed()
    };
    let result = generate_reusing(
        model.evaluator,
        model.tokenizer,
        model.end,
        &prompt,
        reuse,
        &options,
        &mut on_step,
    );
    match result {
        Ok(g) => {
            cached.finish(&prompt, &g.tokens, model.evaluator.n_past());
            // One line per request on standard error: what was reused and why it ended.
            eprintln!(
                "request: {} prompt tokens ({} cached) in {:.1} ms, {} generated in {:.1} ms, stopped by {}",
                g.prompt_tokens,
                g.reused_tokens,
                g.prefill.as_secs_f64() * 1e3,
                g.tokens.len(),
                g.decode.as_secs_f64() * 1e3,
                g.stop.name()
            );
            let _ = events.send(Event::Done(Summary::of(&g)));
        }
        Err(e) => {
            model.evaluator.reset();
            let error = match e {
                GenerateError::Eval(e) => ApiError::internal(format!("generation failed: {e}")),
                e => ApiError::bad_request(e.to_string()),
            };
            let _ = events.send(Event::Failed(error));
        }
    }
}

/// The request's token ids, checked against the vocabulary and the context.
fn prompt_ids(model: &Model, input: &PromptInput) -> Result<Vec<u32>, ApiError> {
    let text = match input {
        PromptInput::Ids(ids) => return check(model, ids.clone()),
        PromptInput::Text(t) => t.clone(),
        PromptInput::Chat(messages) => crate::chat::render(model.chat, messages)?,
    };
    let ids = model
        .tokenizer
        .encode(&text, true, true)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))?;
    check(model, ids)
}

fn check(model: &Model, ids: Vec<u32>) -> Result<Vec<u32>, ApiError> {
    if ids.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty: give some text"));
    }
    let n_vocab = model.tokenizer.vocab_size();
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(ApiError::bad_request(format!(
            "token id {bad} is outside the vocabulary of {n_vocab} tokens"
        )));
    }
    let n_ctx = model.evaluator.n_ctx();
    if ids.len() > n_ctx {
        return Err(ApiError::bad_request(format!(
            "the prompt has {} tokens but the context holds {n_ctx}: send a shorter prompt or \
             start the server with a larger --ctx",
            ids.len()
        ))
        .with_code("context_length_exceeded"));
    }
    Ok(ids)
}
