//! The generation loop: prefill the prompt, then sample and decode one token at a time,
//! streaming complete text to a callback and timing the two phases apart.

use crate::evaluator::{EvalError, Evaluator};
use crate::preparer::Preparer;
use crate::sampler::{Sampler, SamplerParams};
use crate::steer::{log_probs_in, Constraint, TokenLogprob, TokenSet};
use crate::stop::{EndOfGeneration, StopStrings};
use crate::text::{Utf8Stream, Vocabulary};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    pub sampler: SamplerParams,
    pub stop_strings: Vec<String>,
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max_new_tokens` were generated.
    MaxTokens,
    /// The model produced an end-of-generation token (not part of the output).
    EndOfGeneration(u32),
    /// A stop string appeared in the text (it and what follows are not part of the output).
    StopString(String),
    /// The context is full: the next token has no position left.
    ContextFull,
    /// The caller asked to stop (a server's client went away).
    Cancelled,
}

impl StopReason {
    /// A short name for JSON and messages.
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::MaxTokens => "max_tokens",
            StopReason::EndOfGeneration(_) => "end_of_generation",
            StopReason::StopString(_) => "stop_string",
            StopReason::ContextFull => "context_full",
            StopReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV was already in the cache (not evaluated again).
    pub reused_tokens: usize,
    /// The generated tokens (an end-of-generation token excluded).
    pub tokens: Vec<u32>,
    /// Their exact bytes, as llama.cpp prints them (may end inside a UTF-8 character).
    pub bytes: Vec<u8>,
    /// The text streamed to the callback (cut at a stop string; an unfinished character at the
    /// end is U+FFFD).
    pub text: String,
    pub stop: StopReason,
    /// Time of the prompt's evaluation (and the first token's sampling).
    pub prefill: Duration,
    /// Time of the decode steps, sampling included.
    pub decode: Duration,
    /// Single-token evaluations run (one fewer than the tokens when the last one needs none).
    pub decode_steps: usize,
    /// Per generated token, where [`Steering::logprobs`] asked for them.
    pub logprobs: Vec<TokenLogprob>,
    /// The constraint's time on the generation's critical path: its masks applied to the
    /// logits (and computed, where none was prepared during the step) and the waits for a mask
    /// still being prepared when the step's logits came. Zero without a constraint.
    pub constraint_exposed: Duration,
    /// Of `decode`, the time inside the evaluator's decode steps (the rest: sampling, the
    /// constraint's exposed time, text and callbacks).
    pub decode_eval: Duration,
    /// Of `decode`, the sampler's draws and the log-probabilities (the first token's, drawn
    /// in the prefill, excluded).
    pub decode_draw: Duration,
    /// Of `decode`, the constraint's exposed time (`constraint_exposed` without the first
    /// token's, which the prefill holds).
    pub decode_constraint_exposed: Duration,
}

/// What [`generate_steered`] adds to each step beside the sampler.
#[derive(Default)]
pub struct Steering<'a> {
    /// Forbids tokens before each draw (a grammar).
    pub constraint: Option<&'a mut dyn Constraint>,
    /// Some(n): each token's log-probability and its step's n most likely tokens.
    pub logprobs: Option<usize>,
}

/// One generated token, as the step callback sees it.
pub struct Step<'a> {
    /// The text that became complete (often empty; after the last token, what was held back).
    pub text: &'a str,
    /// None for the text released after the last token.
    pub token: Option<u32>,
    pub logprob: Option<&'a TokenLogprob>,
}

impl Generation {
    /// Prompt tokens evaluated (the reused ones excluded) per second.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        (self.prompt_tokens - self.reused_tokens) as f64 / self.prefill.as_secs_f64().max(1e-12)
    }

    /// Decode steps per second; None when no step ran.
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        (self.decode_steps > 0)
            .then(|| self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-12))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the prompt is empty: give at least one token")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens but the context holds {n_ctx}: use a larger context or a shorter prompt")]
    PromptTooLong { prompt: usize, n_ctx: usize },
    #[error("bad sampling settings: {0}")]
    Sampler(String),
    #[error("the output constraint failed: {0}")]
    Constraint(String),
    #[error(transparent)]
    Eval(#[from] EvalError),
}

/// Generates after `prompt` on an evaluator whose cache is empty (it is reset first).
/// `on_text` receives the text as it becomes complete; the pieces add up to `Generation::text`.
pub fn generate(
    evaluator: &mut dyn Evaluator,
    vocabulary: &dyn Vocabulary,
    end: &EndOfGeneration,
    prompt: &[u32],
    options: &GenerateOptions,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation, GenerateError> {
    let mut each = |text: &str| {
        if !text.is_empty() {
            on_text(text);
        }
        true
    };
    generate_reusing(evaluator, vocabulary, end, prompt, 0, options, &mut each)
}

/// [`generate`] keeping the first `reuse` positions of the evaluator's cache, which the caller
/// knows hold `prompt[..reuse]`: only the rest of the prompt is evaluated (at least its last
/// token, whose logits start the generation). `on_step` is called once per generated token
/// with the text that became complete (often empty); returning false stops generation with
/// [`StopReason::Cancelled`]. Where the evaluator cannot rewind, it starts from position 0.
pub fn generate_reusing(
    evaluator: &mut dyn Evaluator,
    vocabulary: &dyn Vocabulary,
    end: &EndOfGeneration,
    prompt: &[u32],
    reuse: usize,
    options: &GenerateOptions,
    on_step: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation, GenerateError> {
    let mut each = |step: &Step| on_step(step.text);
    generate_steered(
        evaluator,
        vocabulary,
        end,
        prompt,
        reuse,
        options,
        Steering::default(),
        &mut each,
    )
}

/// [`generate_reusing`] with a constraint on the tokens and/or their log-probabilities: the
/// callback sees each token with its [`TokenLogprob`].
#[allow(clippy::too_many_arguments)]
pub fn generate_steered(
    evaluator: &mut dyn Evaluator,
    vocabulary: &dyn Vocabulary,
    end: &EndOfGeneration,
    prompt: &[u32],
    reuse: usize,
    options: &GenerateOptions,
    mut steering: Steering,
    on_step: &mut dyn FnMut(&Step) -> bool,
) -> Result<Generation, GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let n_ctx = evaluator.n_ctx();
    if prompt.len() > n_ctx {
        return Err(GenerateError::PromptTooLong {
            prompt: prompt.len(),
            n_ctx,
        });
    }
    let mut sampler = Sampler::new(options.sampler.clone()).map_err(GenerateError::Sampler)?;
    let mut stops = StopStrings::new(options.stop_strings.iter().cloned());
    let mut utf8 = Utf8Stream::new();
    let mut history = prompt.to_vec();
    let mut reuse = reuse.min(prompt.len() - 1).min(evaluator.n_past());
    if !evaluator.truncate(reuse) {
        reuse = 0;
    }
    let mut out = Generation {
        prompt_tokens: prompt.len(),
        reused_tokens: reuse,
        tokens: Vec::new(),
        bytes: Vec::new(),
        text: String::new(),
        stop: StopReason::MaxTokens,
        prefill: Duration::ZERO,
        decode: Duration::ZERO,
        decode_steps: 0,
        logprobs: Vec::new(),
        constraint_exposed: Duration::ZERO,
        decode_eval: Duration::ZERO,
        decode_draw: Duration::ZERO,
        decode_constraint_exposed: Duration::ZERO,
    };
    // Returns whether the caller wants more.
    let mut emit = |text: &str, token: Option<u32>, out: &mut Generation| -> bool {
        out.text.push_str(text);
        let logprob = token.and(out.logprobs.last());
        on_step(&Step {
            text,
            token,
            logprob,
        })
    };
    let end_ids: Vec<u32> = end.ids().collect();
    // What the constraint allows at a step, where it gives a set (a grammar's mask): one
    // buffer for the generation, which the draw reads instead of −∞ written into the logits.
    let mut allowed = TokenSet::default();
    // The constraint's mask, the draw, and the log-probabilities of what the draw saw. The
    // constraint accepts the drawn token later (`unaccepted`): during the next step, on the
    // thread that prepares the next mask, off the decode's critical path.
    let mut choose = |steering: &mut Steering,
                      mut logits: Vec<f32>,
                      history: &[u32],
                      out: &mut Generation|
     -> Result<u32, GenerateError> {
        let mut set = None;
        if let Some(c) = steering.constraint.as_deref_mut() {
            let start = Instant::now();
            allowed.resize(logits.len());
            if c.allowed(&mut allowed, &end_ids)
                .map_err(GenerateError::Constraint)?
            {
                if allowed.is_empty() {
                    return Err(GenerateError::Constraint(
                        "the constraint allows no token".into(),
                    ));
                }
                set = Some(&allowed);
            } else {
                c.mask(&mut logits, &end_ids)
                    .map_err(GenerateError::Constraint)?;
            }
            out.constraint_exposed += start.elapsed();
        }
        let drawn = Instant::now();
        let next = sampler.sample_in(&logits, history, set);
        if let Some(top) = steering.logprobs {
            let seen = sampler.penalized(&logits, history);
            out.logprobs.push(log_probs_in(&seen, set, next, top));
        }
        out.decode_draw += drawn.elapsed();
        Ok(next)
    };
    // The drawn token the constraint has yet to accept (never an end token: those end the
    // loop).
    let unaccepted = |next: u32| (!end.contains(next)).then_some(next);

    // The draws left, the next one included: `max_new_tokens` less the tokens out, and the
    // context's room (a draw is made at each position up to n_ctx; the one at n_ctx outputs
    // its token and stops).
    let draws_left = |out: &Generation, n_past: usize| {
        (options.max_new_tokens - out.tokens.len()).min((n_ctx + 1).saturating_sub(n_past))
    };

    let start = Instant::now();
    // Outputs a drawn token and says whether generation stops there: `Some(reason)` (the
    // reason `None` where it just ends: the last token wanted), `None` to go on. `n_past` is
    // the evaluator's cache length before the token's own step.
    let mut take = |next: u32,
                    n_past: usize,
                    out: &mut Generation,
                    history: &mut Vec<u32>|
     -> Option<Option<StopReason>> {
        if end.contains(next) {
            return Some(Some(StopReason::EndOfGeneration(next)));
        }
        out.tokens.push(next);
        history.push(next);
        let bytes = vocabulary.piece_bytes(next);
        out.bytes.extend_from_slice(&bytes);
        let check = stops.push(&utf8.push(&bytes));
        let go_on = emit(&check.emit, Some(next), out);
        if let Some(s) = check.stopped {
            return Some(Some(StopReason::StopString(s)));
        }
        if !go_on {
            return Some(Some(StopReason::Cancelled));
        }
        // The last token needs no evaluation: nothing samples after it.
        if out.tokens.len() == options.max_new_tokens {
            return Some(None);
        }
        if n_past >= n_ctx {
            return Some(Some(StopReason::ContextFull));
        }
        None
    };
    // Plain greedy decoding (no penalty, constraint or log-probabilities: the draw is the
    // first largest logit) lets an evaluator that can pick on its device do so, the next
    // step queued behind the last without the logits coming back.
    let mut greedy_on_device = options.sampler.temperature <= 0.0
        && (options.sampler.repeat_penalty == 1.0 || options.sampler.repeat_last_n == 0)
        && steering.constraint.is_none()
        && steering.logprobs.is_none();
    // With a constraint, one thread for the whole generation accepts the drawn tokens and
    // prepares each mask while the device computes: the first one during the prefill, each
    // next one during the decode step before it (`preparing`).
    let scoped = std::thread::scope(|scope| {
        let preparer = steering
            .constraint
            .is_some()
            .then(|| Preparer::start(scope));
        if let Some(c) = steering.constraint.as_deref_mut() {
            // After the prefill the cache holds the whole prompt.
            c.draws_left(draws_left(&out, prompt.len()));
        }
        let (logits, _, waited) = preparing(
            || evaluator.eval(&prompt[reuse..]),
            &mut steering.constraint,
            preparer.as_ref(),
            None,
        )?;
        out.constraint_exposed += waited;
        let mut next = choose(&mut steering, logits, &history, &mut out)?;
        let mut pending = unaccepted(next);
        out.prefill = start.elapsed();
        // The first draw belongs to the prefill.
        out.decode_draw = Duration::ZERO;
        let prefill_exposed = out.constraint_exposed;

        let decode_start = Instant::now();
        let mut stopped = None;
        while out.tokens.len() < options.max_new_tokens {
            if let Some(reason) = take(next, evaluator.n_past(), &mut out, &mut history) {
                stopped = reason;
                break;
            }
            if greedy_on_device {
                let start = Instant::now();
                let n_past = evaluator.n_past();
                let room = (options.max_new_tokens - out.tokens.len()).min(n_ctx - n_past);
                let (mut steps, mut ended) = (0usize, None);
                let ran = evaluator.decode_greedy(next, room, &mut |pick| {
                    steps += 1;
                    next = pick;
                    ended = take(pick, n_past + steps, &mut out, &mut history);
                    ended.is_none()
                })?;
                out.decode_eval += start.elapsed();
                match ran {
                    Some(n) => {
                        out.decode_steps += n;
                        if let Some(reason) = ended {
                            stopped = reason;
                            break;
                        }
                        // The evaluator stopped picking early: `next` is out; decode it
                        // step by step below.
                    }
                    None => greedy_on_device = false,
                }
            }
            if let Some(c) = steering.constraint.as_deref_mut() {
                c.draws_left(draws_left(&out, evaluator.n_past() + 1));
            }
            let (logits, eval, waited) = preparing(
                || evaluator.decode(next),
                &mut steering.constraint,
                preparer.as_ref(),
                pending.take(),
            )?;
            out.decode_eval += eval;
            out.constraint_exposed += waited;
            out.decode_steps += 1;
            next = choose(&mut steering, logits, &history, &mut out)?;
            pending = unaccepted(next);
        }
        out.decode = decode_start.elapsed();
        out.decode_constraint_exposed = out.constraint_exposed - prefill_exposed;
        Ok::<_, GenerateError>((stopped, pending))
    });
    let (stopped, pending) = scoped?;
    // The constraint sees every drawn token, the last one too.
    if let (Some(token), Some(c)) = (pending, steering.constraint.as_deref_mut()) {
        c.accept(token).map_err(GenerateError::Constraint)?;
    }
    // An end-of-generation token drawn last has a log-probability but is not output.
    out.logprobs.truncate(out.tokens.len());
    match stopped {
        Some(StopReason::StopString(s)) => out.stop = StopReason::StopString(s),
        other => {
            // The held-back text was not a stop string after all; an unfinished character
            // ends as U+FFFD.
            let tail = stops.push(&utf8.finish());
            emit(&tail.emit, None, &mut out);
            let rest = stops.finish();
            if !rest.is_empty() {
                emit(&rest, None, &mut out);
            }
            out.stop = other.unwrap_or(StopReason::MaxTokens);
        }
    }
    Ok(out)
}

/// `run` (the prefill or a decode step), with the constraint (taken from `slot` and put back)
/// accepting the drawn token (`accept`) and preparing its next mask on the preparer's thread
/// meanwhile (the grammar needs the tokens so far, not the logits): on an H100 the 0.5B's step
/// takes ~1.3 ms and a JSON-schema mask over its 151,936 tokens ~0.3-0.4 ms, which would
/// otherwise add up (2026-12-06e: constrained decode at 0.69× unconstrained; 0.79× with only
/// the mask overlapped, 2026-12-06f). Returns the logits, the evaluator's time and how long
/// the step's end waited for the constraint.
fn preparing<'a>(
    run: impl FnOnce() -> Result<Vec<f32>, EvalError>,
    slot: &mut Option<&'a mut dyn Constraint>,
    preparer: Option<&Preparer<'a>>,
    accept: Option<u32>,
) -> Result<(Vec<f32>, Duration, Duration), GenerateError> {
    let start = Instant::now();
    let (Some(preparer), Some(c)) = (preparer, slot.take()) else {
        let logits = run()?;
        return Ok((logits, start.elapsed(), Duration::ZERO));
    };
    preparer.hand_over(c, accept);
    let logits = run();
    let eval = start.elapsed();
    let wait = Instant::now();
    let (c, prepared) = preparer.take_back().map_err(GenerateError::Constraint)?;
    *slot = Some(c);
    let waited = wait.elapsed();
    prepared.map_err(GenerateError::Constraint)?;
    Ok((logits?, eval, waited))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steer::TokenSet;

    /// A model with a fixed rule: the next token is (last + 1) mod n_vocab, with logit 1 for
    /// it and 0 elsewhere. Counts its calls.
    struct Counter {
        n_vocab: usize,
        n_ctx: usize,
        past: Vec<u32>,
        evals: usize,
        decodes: usize,
        /// Some(k): picks greedily itself (`decode_greedy`), at most k picks a call (then it
        /// stops early and the caller decodes one step itself).
        picks_per_call: Option<usize>,
        /// Steps run by `decode_greedy`.
        picked: usize,
    }

    impl Counter {
        fn new(n_vocab: usize, n_ctx: usize) -> Self {
            Counter {
                n_vocab,
                n_ctx,
                past: Vec::new(),
                evals: 0,
                decodes: 0,
                picks_per_call: None,
                picked: 0,
            }
        }
        fn logits(&self) -> Vec<f32> {
            let mut l = vec![0.0; self.n_vocab];
            l[(*self.past.last().unwrap() as usize + 1) % self.n_vocab] = 1.0;
            l
        }
    }

    impl Evaluator for Counter {
        fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
            if self.past.len() + tokens.len() > self.n_ctx {
                return Err(EvalError("full".into()));
            }
            self.evals += 1;
            self.past.extend_from_slice(tokens);
            Ok(self.logits())
        }
        fn decode(&mut self, token: u32) -> Result<Vec<f32>, EvalError> {
            self.decodes += 1;
            self.eval(&[token])
        }
        fn decode_greedy(
            &mut self,
            token: u32,
            max_steps: usize,
            on_pick: &mut dyn FnMut(u32) -> bool,
        ) -> Result<Option<usize>, EvalError> {
            let Some(per_call) = self.picks_per_call else {
                return Ok(None);
            };
            let mut token = token;
            for step in 0..max_steps.min(per_call) {
                let pick = crate::sampler::argmax(&self.eval(&[token])?);
                self.picked += 1;
                if !on_pick(pick) {
                    return Ok(Some(step + 1));
                }
                token = pick;
            }
            Ok(Some(max_steps.min(per_call)))
        }
        fn n_past(&self) -> usize {
            self.past.len()
        }
        fn n_ctx(&self) -> usize {
            self.n_ctx
        }
        fn reset(&mut self) {
            self.past.clear();
        }
        fn truncate(&mut self, n_past: usize) -> bool {
            self.past.truncate(n_past);
            true
        }
    }

    /// Token i prints as the byte(s) given here.
    struct Bytes(Vec<Vec<u8>>);
    impl Vocabulary for Bytes {
        fn piece_bytes(&self, id: u32) -> Vec<u8> {
            self.0[id as usize].clone()
        }
    }

    fn letters(n: usize) -> Bytes {
        Bytes((0..n).map(|i| vec![b'a' + i as u8]).collect())
    }

    fn greedy(n: usize) -> GenerateOptions {
        GenerateOptions {
            max_new_tokens: n,
            sampler: SamplerParams::greedy(),
            stop_strings: Vec::new(),
        }
    }

    fn run(
        ev: &mut Counter,
        vocab: &dyn Vocabulary,
        end: &[u32],
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> (Generation, Vec<String>) {
        let mut pieces = Vec::new();
        let g = generate(
            ev,
            vocab,
            &EndOfGeneration::from_ids(end.iter().copied()),
            prompt,
            opts,
            &mut |t| pieces.push(t.to_string()),
        )
        .unwrap();
        (g, pieces)
    }

    #[test]
    fn n_tokens_take_one_prefill_and_n_minus_one_decodes() {
        let mut ev = Counter::new(10, 64);
        let (g, pieces) = run(&mut ev, &letters(10), &[], &[0, 1], &greedy(5));
        assert_eq!(g.tokens, vec![2, 3, 4, 5, 6]);
        assert_eq!(g.text, "cdefg");
        assert_eq!(pieces.concat(), g.text);
        assert_eq!(g.bytes, b"cdefg");
        assert_eq!(g.stop, StopReason::MaxTokens);
        // As llama.cpp counts: 32 tokens, 31 decode calls.
        assert_eq!((ev.decodes, g.decode_steps), (4, 4));
        assert_eq!(ev.past, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn an_end_of_generation_token_stops_and_is_not_output() {
        let mut ev = Counter::new(10, 64);
        let (g, _) = run(&mut ev, &letters(10), &[4], &[1], &greedy(8));
        assert_eq!(g.tokens, vec![2, 3]);
        assert_eq!(g.stop, StopReason::EndOfGeneration(4));
        assert_eq!(g.text, "cd");
    }

    #[test]
    fn a_stop_string_cuts_the_text() {
        let mut ev = Counter::new(10, 64);
        let opts = GenerateOptions {
            stop_strings: vec!["ef".into()],
            ..greedy(8)
        };
        let (g, pieces) = run(&mut ev, &letters(10), &[], &[1], &opts);
        assert_eq!(g.text, "cd");
        assert_eq!(pieces.concat(), "cd");
        assert_eq!(g.stop, StopReason::StopString("ef".into()));
    }

    #[test]
    fn greedy_picks_made_by_the_evaluator_give_what_host_picks_give() {
        let stop = GenerateOptions {
            stop_strings: vec!["fg".into()],
            ..greedy(9)
        };
        // (vocabulary, context, end ids, prompt, options): max tokens, an end token, a stop
        // string, a full context.
        type Case = (usize, usize, Vec<u32>, Vec<u32>, GenerateOptions);
        let cases: Vec<Case> = vec![
            (10, 64, vec![], vec![0, 1], greedy(7)),
            (10, 64, vec![6], vec![1], greedy(8)),
            (10, 64, vec![], vec![1], stop),
            (10, 5, vec![], vec![0, 1], greedy(8)),
            (10, 64, vec![], vec![3], greedy(1)),
        ];
        for (i, (n_vocab, n_ctx, end, prompt, opts)) in cases.into_iter().enumerate() {
            let mut host = Counter::new(n_vocab, n_ctx);
            let (want, want_pieces) = run(&mut host, &letters(10), &end, &prompt, &opts);
            assert_eq!(host.picked, 0);
            // All picks in one call, and at most two a call (the rest decoded by the host).
            for per_call in [usize::MAX, 2] {
                let mut dev = Counter::new(n_vocab, n_ctx);
                dev.picks_per_call = Some(per_call);
                let (got, pieces) = run(&mut dev, &letters(10), &end, &prompt, &opts);
                let what = format!("case {i}, {per_call} picks a call");
                assert_eq!(got.tokens, want.tokens, "{what}");
                assert_eq!(got.text, want.text, "{what}");
                assert_eq!(pieces, want_pieces, "{what}");
                assert_eq!(got.stop, want.stop, "{what}");
                assert_eq!(got.decode_steps, want.decode_steps, "{what}");
                assert_eq!(dev.past, host.past, "{what}: the cache");
                assert_eq!(dev.picked + dev.decodes, host.decodes, "{what}");
                if want.decode_steps > 0 {
                    assert!(dev.picked > 0, "{what}: the evaluator picked none");
                }
            }
        }
    }

    #[test]
    fn the_context_limit_ends_generation_cleanly() {
        let mut ev = Counter::new(10, 4);
        let (g, _) = run(&mut ev, &letters(10), &[], &[0, 1], &greedy(8));
        // Positions 0-3 hold the prompt and two generated tokens; the third has no position.
        assert_eq!(g.tokens, vec![2, 3, 4]);
        assert_eq!(g.stop, StopReason::ContextFull);
        let err = generate(
            &mut Counter::new(10, 1),
            &letters(10),
            &EndOfGeneration::default(),
            &[0, 1],
            &greedy(1),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(err
            .to_string()
            .contains("prompt has 2 tokens but the context holds 1"));
    }

    #[test]
    fn split_characters_stream_whole_and_the_bytes_stay_exact() {
        // Tokens 1-3 spell "é" split (c3 | a9) then the first two bytes of "⌧" (e2 8c).
        let vocab = Bytes(vec![
            vec![],
            vec![0xc3],
            vec![0xa9],
            vec![0xe2, 0x8c],
            vec![],
        ]);
        let mut ev = Counter::new(5, 64);
        let (g, pieces) = run(&mut ev, &vocab, &[], &[0], &greedy(3));
        assert_eq!(g.bytes, vec![0xc3, 0xa9, 0xe2, 0x8c]);
        assert_eq!(pieces, vec!["é", "\u{fffd}"]);
        assert_eq!(g.text, "é\u{fffd}");
    }

    #[test]
    fn the_evaluator_is_reset_first() {
        let mut ev = Counter::new(10, 64);
        run(&mut ev, &letters(10), &[], &[0], &greedy(3));
        let (g, _) = run(&mut ev, &letters(10), &[], &[5], &greedy(2));
        assert_eq!(g.tokens, vec![6, 7]);
        assert_eq!(ev.past, vec![5, 6]);
    }

    #[test]
    fn reuse_evaluates_only_the_new_tokens_and_gives_the_same_text() {
        let mut ev = Counter::new(10, 64);
        let (first, _) = run(&mut ev, &letters(10), &[], &[0, 1, 2], &greedy(3));
        let mut each = |_: &str| true;
        let g = generate_reusing(
            &mut ev,
            &letters(10),
            &EndOfGeneration::default(),
            &[0, 1, 7],
            2,
            &greedy(3),
            &mut each,
        )
        .unwrap();
        assert_eq!(first.tokens, vec![3, 4, 5]);
        assert_eq!(g.reused_tokens, 2);
        assert_eq!(g.tokens, vec![8, 9, 0]);
        assert_eq!(ev.past, vec![0, 1, 7, 8, 9]);
        // A prompt wholly cached still evaluates its last token (its logits start the text).
        let g = generate_reusing(
            &mut ev,
            &letters(10),
            &EndOfGeneration::default(),
            &[0, 1, 7],
            3,
            &greedy(1),
            &mut each,
        )
        .unwrap();
        assert_eq!((g.reused_tokens, g.tokens.clone()), (2, vec![8]));
    }

    #[test]
    fn the_caller_can_cancel() {
        let mut ev = Counter::new(10, 64);
        let mut steps = 0;
        let mut each = |_: &str| {
            steps += 1;
            steps < 2
        };
        let g = generate_reusing(
            &mut ev,
            &letters(10),
            &EndOfGeneration::default(),
            &[0],
            0,
            &greedy(8),
            &mut each,
        )
        .unwrap();
        assert_eq!(g.stop, StopReason::Cancelled);
        assert_eq!(g.tokens, vec![1, 2]);
    }

    /// Allows only tokens that are multiples of `k` (and the end tokens); records what it saw.
    struct Multiples {
        k: u32,
        accepted: Vec<u32>,
    }

    impl Constraint for Multiples {
        fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
            for (id, l) in logits.iter_mut().enumerate() {
                if id as u32 % self.k != 0 && !end.contains(&(id as u32)) {
                    *l = f32::NEG_INFINITY;
                }
            }
            Ok(())
        }
        fn accept(&mut self, token: u32) -> Result<(), String> {
            self.accepted.push(token);
            Ok(())
        }
    }

    /// Allows only `(last accepted + 2) mod n` (the prompt's last token to start), computing
    /// that in `prepare` where it can: records, per mask, whether it had been prepared and on
    /// which thread the preparations ran.
    struct TwoAhead {
        n: u32,
        last: u32,
        prepared: Option<u32>,
        masks_prepared: Vec<bool>,
        prepare_threads: Vec<std::thread::ThreadId>,
        accept_threads: Vec<std::thread::ThreadId>,
    }

    impl Constraint for TwoAhead {
        fn mask(&mut self, logits: &mut [f32], _end: &[u32]) -> Result<(), String> {
            self.masks_prepared.push(self.prepared.is_some());
            let allowed = self.prepared.take().unwrap_or((self.last + 2) % self.n);
            for (id, l) in logits.iter_mut().enumerate() {
                if id as u32 != allowed {
                    *l = f32::NEG_INFINITY;
                }
            }
            Ok(())
        }
        fn accept(&mut self, token: u32) -> Result<(), String> {
            self.accept_threads.push(std::thread::current().id());
            self.prepared = None;
            self.last = token;
            Ok(())
        }
        fn prepare(&mut self) -> Result<(), String> {
            self.prepare_threads.push(std::thread::current().id());
            self.prepared = Some((self.last + 2) % self.n);
            Ok(())
        }
    }

    #[test]
    fn a_constraint_prepares_each_mask_on_another_thread_during_the_prefill_or_step() {
        let mut ev = Counter::new(10, 64);
        let mut c = TwoAhead {
            n: 10,
            last: 0,
            prepared: None,
            masks_prepared: Vec::new(),
            prepare_threads: Vec::new(),
            accept_threads: Vec::new(),
        };
        let g = generate_steered(
            &mut ev,
            &letters(10),
            &EndOfGeneration::default(),
            &[0],
            0,
            &greedy(5),
            Steering {
                constraint: Some(&mut c),
                logprobs: None,
            },
            &mut |_: &Step| true,
        )
        .unwrap();
        // The model wants last + 1; the constraint only allows last + 2, from the tokens it
        // accepted (a stale prepared mask would repeat a token).
        assert_eq!(g.tokens, vec![2, 4, 6, 8, 0]);
        // Every mask is prepared ahead of its logits: the first during the prefill, each
        // next one during its decode step.
        assert_eq!(c.masks_prepared, vec![true, true, true, true, true]);
        assert_eq!(c.prepare_threads.len(), 5);
        let here = std::thread::current().id();
        assert!(c.prepare_threads.iter().all(|&t| t != here));
        // One preparing thread for the whole generation, not one per step.
        assert!(c.prepare_threads.windows(2).all(|w| w[0] == w[1]));
        // Every drawn token is accepted, the last too: those before a decode step on the
        // preparing thread (off the step's critical path), the last after the loop.
        assert_eq!(c.last, 0);
        assert_eq!(c.accept_threads.len(), 5);
        assert!(c.accept_threads[..4].iter().all(|&t| t != here));
        assert_eq!(c.accept_threads[4], here);
    }

    /// Records the draws it is told are left, and the draws it masks.
    #[derive(Default)]
    struct Budget {
        told: Vec<usize>,
        masks: usize,
        /// Told before each mask (and each prepare).
        in_order: bool,
    }

    impl Constraint for Budget {
        fn mask(&mut self, _logits: &mut [f32], _end: &[u32]) -> Result<(), String> {
            self.in_order &= self.told.len() == self.masks + 1;
            self.masks += 1;
            Ok(())
        }
        fn accept(&mut self, _token: u32) -> Result<(), String> {
            Ok(())
        }
        fn prepare(&mut self) -> Result<(), String> {
            self.in_order &= self.told.len() == self.masks + 1;
            Ok(())
        }
        fn draws_left(&mut self, left: usize) {
            self.told.push(left);
        }
    }

    #[test]
    fn a_constraint_is_told_the_draws_left_by_max_tokens_and_by_the_context() {
        let budget = |n_ctx: usize, prompt: &[u32], max: usize| {
            let mut ev = Counter::new(10, n_ctx);
            let mut c = Budget {
                in_order: true,
                ..Budget::default()
            };
            let g = generate_steered(
                &mut ev,
                &letters(10),
                &EndOfGeneration::default(),
                prompt,
                0,
                &greedy(max),
                Steering {
                    constraint: Some(&mut c),
                    logprobs: None,
                },
                &mut |_: &Step| true,
            )
            .unwrap();
            assert!(c.in_order);
            // Each draw is told how many remain, itself included: the last draw hears 1.
            assert_eq!(c.masks, g.tokens.len(), "{:?}", c.told);
            (c.told, g.stop)
        };
        // max_tokens 4, room in the context: 4 draws.
        assert_eq!(
            budget(64, &[0, 1], 4),
            (vec![4, 3, 2, 1], StopReason::MaxTokens)
        );
        // A context of 6 after a 3-token prompt: draws at positions 3, 4, 5 and 6 (the last
        // outputs its token and stops), whatever max_tokens says.
        assert_eq!(
            budget(6, &[0, 1, 2], 50),
            (vec![4, 3, 2, 1], StopReason::ContextFull)
        );
        // Both: the nearer limit.
        assert_eq!(
            budget(6, &[0, 1, 2], 3),
            (vec![3, 2, 1], StopReason::MaxTokens)
        );
    }

    #[test]
    fn a_constraint_masks_each_draw_and_logprobs_see_the_masked_logits() {
        let mut ev = Counter::new(10, 64);
        let mut c = Multiples {
            k: 3,
            accepted: Vec::new(),
        };
        let mut seen = Vec::new();
        let mut each = |s: &Step| {
            seen.push((s.token, s.logprob.cloned()));
            true
        };
        let g = generate_steered(
            &mut ev,
            &letters(10),
            &EndOfGeneration::from_ids([8]),
            &[0],
            0,
            &greedy(4),
            Steering {
                constraint: Some(&mut c),
                logprobs: Some(2),
            },
            &mut each,
        )
        .unwrap();
        // After 0 the model wants 1, forbidden: all allowed logits tie at 0, the lowest id
        // (0) wins; and so on each step.
        assert_eq!(g.tokens, vec![0, 0, 0, 0]);
        assert_eq!(c.accepted, g.tokens);
        // Allowed: 0, 3, 6, 9 and the end token 8, all logit 0: ln(1/5) each.
        assert_eq!(g.logprobs.len(), 4);
        for t in &g.logprobs {
            assert!((t.logprob - (0.2f32).ln()).abs() < 1e-6, "{t:?}");
            assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 3]);
        }
        // One step per token, then the held-back text (none here) without a token.
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[1], (Some(0), Some(g.logprobs[1].clone())));
        assert_eq!(seen[4], (None, None));
        // Unmasked, the model's own distribution: logit 1 for the next token, 0 for 9 others.
        let mut ev = Counter::new(10, 64);
        let mut each = |_: &Step| true;
        let g = generate_steered(
            &mut ev,
            &letters(10),
            &EndOfGeneration::default(),
            &[0],
            0,
            &greedy(2),
            Steering {
                constraint: None,
                logprobs: Some(1),
            },
            &mut each,
        )
        .unwrap();
        let want = 1.0 - (1f32.exp() + 9.0).ln();
        assert!((g.logprobs[0].logprob - want).abs() < 1e-6);
        assert_eq!(g.logprobs[1].top[0].0, 2);
    }

    /// [`Multiples`] that also gives its tokens as a set: the loop then draws among them
    /// without writing −∞ into the logits.
    struct MultiplesSet(Multiples);

    impl Constraint for MultiplesSet {
        fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String> {
            self.0.mask(logits, end)
        }
        fn accept(&mut self, token: u32) -> Result<(), String> {
            self.0.accept(token)
        }
        fn allowed(&mut self, allowed: &mut TokenSet, end: &[u32]) -> Result<bool, String> {
            for id in 0..allowed.len() as u32 {
                allowed.set(id, id % self.0.k == 0 || end.contains(&id));
            }
            Ok(true)
        }
    }

    #[test]
    fn a_constraint_given_as_a_set_draws_what_its_mask_draws() {
        for seed in 0..30 {
            let options = GenerateOptions {
                max_new_tokens: 12,
                sampler: SamplerParams {
                    temperature: 1.0,
                    seed,
                    ..SamplerParams::default()
                },
                stop_strings: Vec::new(),
            };
            let run = |c: &mut dyn Constraint| {
                let mut ev = Counter::new(100, 64);
                generate_steered(
                    &mut ev,
                    &Bytes((0..100).map(|i| vec![b'a' + (i % 26) as u8]).collect()),
                    &EndOfGeneration::from_ids([97]),
                    &[0],
                    0,
                    &options,
                    Steering {
                        constraint: Some(c),
                        logprobs: Some(3),
                    },
                    &mut |_: &Step| true,
                )
                .unwrap()
            };
            let masked = run(&mut Multiples {
                k: 7,
                accepted: Vec::new(),
            });
            let set = run(&mut MultiplesSet(Multiples {
                k: 7,
                accepted: Vec::new(),
            }));
            assert_eq!(set.tokens, masked.tokens, "seed {seed}");
            assert_eq!(set.logprobs, masked.logprobs, "seed {seed}");
            assert!(set.tokens.iter().all(|t| t % 7 == 0));
        }
    }
}
