//! The one thread that runs the model. GPU work is serial, so requests wait in a bounded
//! queue and run one at a time; the worker remembers which tokens' keys and values the cache
//! holds (the live conversation and several saved ones, see `conversations`), so a request
//! that extends a cached conversation evaluates only its new tokens.

use crate::api::{PromptInput, ResponseFormat, ToolChoice, Work};
use crate::constrain::{Grammars, Guide};
use crate::conversations::{CacheBounds, Conversations};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::tools::ToolFormat;
use llguidance::api::TopLevelGrammar;
use rocky_engine::ChatFormat;
use rocky_generate::{
    generate_steered, EndOfGeneration, Evaluator, GenerateError, GenerateOptions, Generation,
    Steering, TokenLogprob,
};
use rocky_models::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
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

/// What a request hears back, in this order: `Started` or `Failed`; then one `Token` per
/// generated token (and the held-back text at the end); then `Done` (or `Failed` when the
/// model fails midway).
#[derive(Debug)]
pub enum Event {
    /// The prompt was accepted (tokenized, fits the context); generation begins. With the
    /// format the answer's tool calls are written in, where the request has tools.
    Started(Option<ToolFormat>),
    Token {
        /// The text that became complete (may be empty).
        text: String,
        logprob: Option<Logprob>,
    },
    Done(Summary),
    Failed(ApiError),
}

/// A generated token's log-probability, with the tokens' texts for OpenAI's shapes.
#[derive(Clone, Debug)]
pub struct Logprob {
    pub token: Alternative,
    pub top: Vec<Alternative>,
}

#[derive(Clone, Debug)]
pub struct Alternative {
    /// The token's text (its bytes read as UTF-8, U+FFFD where they are part of a character).
    pub text: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

impl Logprob {
    fn of(t: &TokenLogprob, tokenizer: &Tokenizer) -> Logprob {
        let alt = |id: u32, logprob: f32| {
            let bytes = tokenizer.token_bytes(id).unwrap_or_default();
            Alternative {
                text: String::from_utf8_lossy(&bytes).into_owned(),
                bytes,
                logprob,
            }
        };
        Logprob {
            token: alt(t.token, t.logprob),
            top: t.top.iter().map(|&(id, lp)| alt(id, lp)).collect(),
        }
    }
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
    /// Of the prefill and decode time, the grammar's (its masks and parser steps) and the
    /// number of masks, where the request had a constraint.
    pub constraint: Option<(f64, usize)>,
    /// Of the grammar's time, what the generation waited for (ms): masks applied, and masks
    /// not ready when the step's logits came; the rest overlapped the device's steps.
    pub constraint_exposed_ms: f64,
    /// Of `predicted_ms`, the time in the model's decode steps (the rest: sampling, the
    /// grammar's exposed time, detokenizing and streaming).
    pub predicted_eval_ms: f64,
    /// Of `predicted_ms`, the sampler's draws (and log-probabilities).
    pub predicted_draw_ms: f64,
    /// Of `predicted_ms`, the grammar's exposed time (of `constraint_exposed_ms`, what the
    /// decode steps waited: the first mask, after the prefill, excluded).
    pub predicted_constraint_exposed_ms: f64,
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
            constraint: None,
            constraint_exposed_ms: g.constraint_exposed.as_secs_f64() * 1e3,
            predicted_eval_ms: g.decode_eval.as_secs_f64() * 1e3,
            predicted_draw_ms: g.decode_draw.as_secs_f64() * 1e3,
            predicted_constraint_exposed_ms: g.decode_constraint_exposed.as_secs_f64() * 1e3,
        }
    }
}

/// The worker's state between requests.
struct State {
    cached: Conversations,
    /// Built on the first constrained request (the trie of a 152k vocabulary takes a moment).
    grammars: Option<Result<Grammars, String>>,
    metrics: Arc<Metrics>,
}

/// Runs jobs until every sender of `jobs` is gone.
pub fn run(model: &mut Model, bounds: CacheBounds, jobs: Receiver<Job>, metrics: Arc<Metrics>) {
    let mut state = State {
        cached: Conversations::new(bounds),
        grammars: None,
        metrics,
    };
    for job in jobs {
        state.metrics.waiting.fetch_sub(1, Relaxed);
        // A client that left while its request waited costs nothing.
        if job.events.is_closed() {
            continue;
        }
        state.metrics.running.store(1, Relaxed);
        serve_one(model, &mut state, job);
        state.metrics.running.store(0, Relaxed);
    }
}

fn serve_one(model: &mut Model, state: &mut State, job: Job) {
    let events = job.events;
    let prepared = prompt_ids(model, &job.work.input).and_then(|(prompt, tools)| {
        let guide = guide(model, state, &job.work, tools)?;
        Ok((prompt, tools, guide))
    });
    let (prompt, tools, mut guide) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = events.send(Event::Failed(e));
            return;
        }
    };
    let cached = &mut state.cached;
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
    let _ = events.send(Event::Started(tools));
    // Until it ends well, nothing is known about what the cache holds.
    let reuse = cached.prepare(model.evaluator, &prompt);
    let tokenizer = model.tokenizer;
    let mut on_step = |step: &rocky_generate::Step| {
        let logprob = step.logprob.map(|t| Logprob::of(t, tokenizer));
        if !step.text.is_empty() || logprob.is_some() {
            let _ = events.send(Event::Token {
                text: step.text.to_string(),
                logprob,
            });
        }
        // A closed channel: the client went away; stop spending the device on it.
        !events.is_closed()
    };
    let mut no_end = NoEnd;
    let constraint = match guide.as_mut() {
        Some(g) => Some(g as &mut dyn rocky_generate::Constraint),
        // `api` refuses ignore_eos with a grammar, so the two never meet.
        None if job.work.ignore_eos => Some(&mut no_end as &mut dyn rocky_generate::Constraint),
        None => None,
    };
    let steering = Steering {
        constraint,
        logprobs: job.work.logprobs,
    };
    let result = generate_steered(
        model.evaluator,
        model.tokenizer,
        model.end,
        &prompt,
        reuse,
        &options,
        steering,
        &mut on_step,
    );
    match result {
        Ok(g) => {
            cached.finish(&prompt, &g.tokens, model.evaluator.n_past());
            // One line per request on standard error: what was reused and why it ended.
            let mut summary = Summary::of(&g);
            summary.constraint = guide.as_ref().map(|guide| {
                let (spent, masks) = guide.cost();
                (spent.as_secs_f64() * 1e3, masks)
            });
            let exposed = summary.constraint_exposed_ms;
            let grammar = summary.constraint.map_or(String::new(), |(ms, masks)| {
                format!(" (grammar: {ms:.1} ms over {masks} masks, {exposed:.1} ms not overlapped)")
            });
            eprintln!(
                "request: {} prompt tokens ({} cached) in {:.1} ms, {} generated in {:.1} ms{grammar}, stopped by {}",
                g.prompt_tokens,
                g.reused_tokens,
                g.prefill.as_secs_f64() * 1e3,
                g.tokens.len(),
                g.decode.as_secs_f64() * 1e3,
                g.stop.name()
            );
            let m = &state.metrics;
            m.completed.fetch_add(1, Relaxed);
            m.prompt_tokens.fetch_add(g.prompt_tokens as u64, Relaxed);
            m.cached_tokens.fetch_add(g.reused_tokens as u64, Relaxed);
            m.cache_hits
                .fetch_add((g.reused_tokens > 0) as u64, Relaxed);
            m.generated_tokens.fetch_add(g.tokens.len() as u64, Relaxed);
            m.prompt_us.fetch_add(g.prefill.as_micros() as u64, Relaxed);
            m.decode_us.fetch_add(g.decode.as_micros() as u64, Relaxed);
            let _ = events.send(Event::Done(summary));
        }
        Err(e) => {
            model.evaluator.reset();
            let error = match e {
                GenerateError::Eval(e) => ApiError::internal(format!("generation failed: {e}")),
                GenerateError::Constraint(e) => {
                    ApiError::internal(format!("the output grammar failed: {e}"))
                }
                e => ApiError::bad_request(e.to_string()),
            };
            let _ = events.send(Event::Failed(error));
        }
    }
}

/// The request's token ids, checked against the vocabulary and the context, and the format
/// the answer's tool calls come in where the request has tools.
fn prompt_ids(
    model: &Model,
    input: &PromptInput,
) -> Result<(Vec<u32>, Option<ToolFormat>), ApiError> {
    let (text, tools) = match input {
        PromptInput::Ids(ids) => return Ok((check(model, ids.clone())?, None)),
        PromptInput::Text(t) => (t.clone(), None),
        PromptInput::Chat { messages, tools } => {
            let format = match tools {
                None => None,
                Some(_) => Some(crate::chat::tool_format(model.chat)?),
            };
            let tools = tools.as_ref().map(|t| Value::Array(t.clone()));
            let messages = Value::Array(messages.clone());
            (
                crate::chat::render(model.chat, &messages, tools.as_ref())?,
                format,
            )
        }
    };
    let ids = model
        .tokenizer
        .encode(&text, true, true)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))?;
    Ok((check(model, ids)?, tools))
}

/// The grammar the answer must follow, if the request asks for one: `response_format`, or a
/// required tool call.
fn guide(
    model: &Model,
    state: &mut State,
    work: &Work,
    format: Option<ToolFormat>,
) -> Result<Option<Guide>, ApiError> {
    // None: `json_object`, which has its own guide (closed within the draws left).
    let grammar = match (
        &work.response_format,
        &work.tool_choice,
        format,
        &work.input,
    ) {
        (Some(ResponseFormat::JsonObject), ..) => None,
        (Some(ResponseFormat::JsonSchema(schema)), ..) => {
            Some(TopLevelGrammar::from_json_schema(compact(schema.clone())))
        }
        (
            None,
            choice @ (ToolChoice::Required | ToolChoice::Named(_)),
            Some(format),
            PromptInput::Chat {
                tools: Some(tools), ..
            },
        ) => {
            let chosen: Vec<&Value> = tools
                .iter()
                .filter(|t| match choice {
                    ToolChoice::Named(name) => {
                        t.pointer("/function/name").and_then(Value::as_str) == Some(name)
                    }
                    _ => true,
                })
                .collect();
            Some(TopLevelGrammar::from_lark(format.call_grammar(&chosen)))
        }
        _ => return Ok(None),
    };
    let grammars = state
        .grammars
        .get_or_insert_with(|| Grammars::new(model.tokenizer))
        .as_ref()
        .map_err(|e| {
            ApiError::internal(format!("cannot build the vocabulary's token trie: {e}"))
        })?;
    let what = if work.response_format.is_some() {
        "`response_format`"
    } else {
        "a tool's `parameters`"
    };
    match grammar {
        Some(grammar) => grammars.guide(grammar),
        None => grammars.json_object(),
    }
    .map(Some)
    .map_err(|e| ApiError::bad_request(format!("{what} cannot be used as a grammar: {e}")))
}

/// The schema with llguidance's layout options where the client gave none: ", " and ": "
/// between items and no other whitespace. llguidance's default lets whitespace run freely
/// between tokens, and a model (a random-weight one certainly) can fill `max_tokens` with it.
fn compact(mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        map.entry("x-guidance").or_insert_with(
            || json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
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

/// `ignore_eos`: every end-of-generation token's logit set to −∞ (llama-server biases them
/// so), so the reply runs to its token limit.
struct NoEnd;

impl rocky_generate::Constraint for NoEnd {
    fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
        for &id in end {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }
    fn accept(&mut self, _token: u32) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::NoEnd;
    use rocky_generate::Constraint;

    #[test]
    fn no_end_forbids_exactly_the_end_tokens() {
        let mut logits = vec![1.0f32, 2.0, 3.0, 4.0];
        NoEnd.mask(&mut logits, &[1, 3, 9]).unwrap();
        assert_eq!(logits, [1.0, f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY]);
    }
}
