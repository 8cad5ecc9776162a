//! What a decode step costs the host beside the model, with and without a JSON-schema
//! constraint, at a real vocabulary's size and without a GPU: the device's step is stood in for
//! by an evaluator that hands out recorded (or random) logits and sleeps the rest of a fixed
//! step, as the host waits while a GPU runs (default 1300 µs: the 0.5B's step on an H100).
//!
//!     cargo run --release -p rocky-serve --example host_cost -- VOCAB.gguf \
//!         [--logits FILE] [--step-us 1300] [--pairs 10] [--tokens 24] [--logprobs N]
//!
//! VOCAB.gguf: a model or vocabulary-only GGUF (its tokenizer and end tokens). `--logits`: little-
//! endian f32 logits, one or more vectors of the vocabulary's size back to back (`rocky prefill
//! MODEL --logits-out`), handed out in turn; without it, normal random logits (sd 1). The
//! sampling is `tools/serve-agents.py --speed`'s: temperature 1, seed 3, llama.cpp's default
//! chain, 24 tokens, the PERSON schema.
//!
//! Two parts, both printed in microseconds per token:
//! 1. The generation loop (`generate_steered`), unconstrained and json_schema interleaved:
//!    host time per decode step (decode less the evaluator's steps), split into the draw, the
//!    grammar's exposed part (its mask applied, and any wait for a mask not ready) and the rest
//!    (text, stop strings, the step callback); and the grammar's own time per token, overlapped
//!    or not. Medians over the pairs.
//! 2. The same work piece by piece on one thread, on the masks of constrained replies: the
//!    grammar's mask computed (`prepare`), the mask made the draw's (`allowed`: the set of
//!    tokens), the draw among the allowed tokens and on the plain logits, the grammar's
//!    `accept`.

use llguidance::api::TopLevelGrammar;
use rand::{Rng, SeedableRng};
use rocky_generate::{
    generate_steered, Constraint, EndOfGeneration, EvalError, Evaluator, GenerateOptions, Sampler,
    SamplerParams, Steering, TokenSet,
};
use rocky_serve::constrain::Grammars;
use std::time::{Duration, Instant};

/// The device's step stood in for: the next logits of a pool, then a sleep to the step's end.
struct Recorded<'a> {
    pool: &'a [Vec<f32>],
    next: usize,
    step: Duration,
    past: usize,
}

impl Recorded<'_> {
    fn logits(&mut self) -> Vec<f32> {
        let start = Instant::now();
        // A fresh vector per step, as the GPU session's readback returns one.
        let logits = self.pool[self.next % self.pool.len()].clone();
        self.next += 1;
        if let Some(rest) = self.step.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
        logits
    }
}

impl Evaluator for Recorded<'_> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
        self.past += tokens.len();
        Ok(self.logits())
    }
    fn n_past(&self) -> usize {
        self.past
    }
    fn n_ctx(&self) -> usize {
        4096
    }
    fn reset(&mut self) {
        self.past = 0;
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// serve-agents.py's PERSON, with the layout the server adds to a schema (`worker::compact`).
fn person_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}},
        "required": ["name", "age", "tags"], "additionalProperties": false,
        "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}})
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: host_cost VOCAB.gguf [--logits FILE] [--step-us 1300] [--pairs 10] \
                 [--tokens 24] [--logprobs N]";
    let path = args.next().expect(usage);
    let (mut logits_file, mut step_us, mut pairs, mut tokens, mut logprobs) =
        (None, 1300u64, 10usize, 24usize, None);
    while let Some(flag) = args.next() {
        let value = args.next().expect(usage);
        match flag.as_str() {
            "--logits" => logits_file = Some(value),
            "--step-us" => step_us = value.parse().expect("--step-us N"),
            "--pairs" => pairs = value.parse().expect("--pairs N"),
            "--tokens" => tokens = value.parse().expect("--tokens N"),
            "--logprobs" => logprobs = Some(value.parse().expect("--logprobs N")),
            _ => panic!("{usage}"),
        }
    }
    let file = rocky_models::gguf::GgufFile::open(&path).expect("a GGUF file");
    let tokenizer = rocky_models::tokenizer::Tokenizer::from_gguf(&file).expect("its tokenizer");
    let end = EndOfGeneration::from_vocabulary(&file, &tokenizer);
    let n = tokenizer.vocab_size();
    let pool: Vec<Vec<f32>> = match &logits_file {
        Some(f) => {
            let bytes = std::fs::read(f).expect("the logits file");
            let all: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert!(
                !all.is_empty() && all.len() % n == 0,
                "{f}: {} floats is no multiple of the vocabulary's {n}",
                all.len()
            );
            all.chunks(n).map(<[f32]>::to_vec).collect()
        }
        None => {
            let mut rng = rand::rngs::StdRng::seed_from_u64(1);
            (0..16)
                .map(|_| {
                    (0..n)
                        .map(|_| {
                            // Box-Muller: a standard normal.
                            let (u, v): (f32, f32) = (rng.gen(), rng.gen());
                            (-2.0 * (1.0 - u).ln()).sqrt() * (std::f32::consts::TAU * v).cos()
                        })
                        .collect()
                })
                .collect()
        }
    };
    let start = Instant::now();
    let grammars = Grammars::new(&tokenizer).expect("the trie");
    println!(
        "vocabulary {n} tokens, {} logit vectors ({}), trie built in {:.0} ms; device step \
         stood in for by {step_us} µs; this host: {} threads",
        pool.len(),
        logits_file.as_deref().unwrap_or("normal random"),
        start.elapsed().as_secs_f64() * 1e3,
        std::thread::available_parallelism().map_or(0, |p| p.get()),
    );
    let schema = person_schema();
    let guide = || {
        grammars
            .guide(TopLevelGrammar::from_json_schema(schema.clone()))
            .expect("the schema compiles")
    };
    let sampler = SamplerParams {
        temperature: 1.0,
        seed: 3,
        ..SamplerParams::default()
    };
    let options = GenerateOptions {
        max_new_tokens: tokens,
        sampler: sampler.clone(),
        stop_strings: Vec::new(),
    };

    // 1. The loop.
    let mut evaluator = Recorded {
        pool: &pool,
        next: 0,
        step: Duration::from_micros(step_us),
        past: 0,
    };
    let prompt = [1u32, 2, 3];
    // Per kind: host, draw, exposed, rest, grammar (µs per decode step).
    let mut rows: [[Vec<f64>; 5]; 2] = Default::default();
    let mut reply = String::new();
    for _ in 0..pairs {
        for (kind, row) in rows.iter_mut().enumerate() {
            let mut g = guide();
            let steering = Steering {
                constraint: (kind == 1).then_some(&mut g as &mut dyn Constraint),
                logprobs,
            };
            evaluator.next = 0;
            let out = generate_steered(
                &mut evaluator,
                &tokenizer,
                &end,
                &prompt,
                0,
                &options,
                steering,
                &mut |_| true,
            )
            .expect("generation");
            let steps = out.decode_steps.max(1) as f64;
            let us = |d: Duration| d.as_secs_f64() * 1e6 / steps;
            let host = us(out.decode) - us(out.decode_eval);
            let (draw, exposed) = (us(out.decode_draw), us(out.decode_constraint_exposed));
            row[0].push(host);
            row[1].push(draw);
            row[2].push(exposed);
            row[3].push(host - draw - exposed);
            if kind == 1 {
                let (spent, masks) = g.cost();
                row[4].push(spent.as_secs_f64() * 1e6 / masks.max(1) as f64);
                reply = out.text;
            }
        }
    }
    let m: Vec<Vec<f64>> = rows
        .iter_mut()
        .map(|r| r.iter_mut().map(|v| median(v)).collect())
        .collect();
    println!(
        "loop, {pairs} pairs of {tokens} tokens (median µs per decode step):\n\
         \x20 unconstrained: host {:7.1} = draw {:6.1} + rest {:5.1}\n\
         \x20 json_schema:   host {:7.1} = draw {:6.1} + grammar exposed {:6.1} + rest {:5.1}; \
         the grammar's own time {:.1} a token (mask, apply, accept; overlapped or not)\n\
         \x20 extra host time {:.1} µs a step; at a {step_us} µs device step: constrained/unconstrained \
         speed {:.3}\n\
         \x20 a json_schema reply: {reply:?}",
        m[0][0],
        m[0][1],
        m[0][3],
        m[1][0],
        m[1][1],
        m[1][2],
        m[1][3],
        m[1][4],
        m[1][0] - m[0][0],
        (step_us as f64 + m[0][0]) / (step_us as f64 + m[1][0]),
    );

    // 2. Piece by piece, one thread: constrained replies walked with the same draws.
    let mut parts: [Vec<f64>; 5] = Default::default();
    let mut rng_pick = 0usize;
    let end_ids: Vec<u32> = end.ids().collect();
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e6
    };
    let mut allowed = TokenSet::new(n);
    for _ in 0..pairs {
        let mut g = guide();
        let mut masked_sampler = Sampler::new(sampler.clone()).unwrap();
        let mut plain_sampler = Sampler::new(sampler.clone()).unwrap();
        let mut history = prompt.to_vec();
        for _ in 0..tokens {
            let source = &pool[rng_pick % pool.len()];
            rng_pick += 1;
            parts[0].push(time(&mut || g.prepare().unwrap()));
            parts[1].push(time(&mut || {
                g.allowed(&mut allowed, &end_ids).unwrap();
            }));
            let mut next = 0;
            parts[2].push(time(&mut || {
                next = masked_sampler.sample_in(source, &history, Some(&allowed))
            }));
            parts[3].push(time(&mut || {
                plain_sampler.sample(source, &history);
            }));
            if end.contains(next) {
                break;
            }
            parts[4].push(time(&mut || g.accept(next).unwrap()));
            history.push(next);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let means: Vec<f64> = parts.iter().map(|v| mean(v)).collect();
    let p: Vec<f64> = parts.iter_mut().map(|v| median(v)).collect();
    // Sorted by `median`: the mask's tail (a string's first bytes walk the whole trie).
    let tail = |v: &[f64], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "pieces, one thread (median µs per token): grammar mask computed {:.1}, made the \
         draw's {:.1}, draw among the allowed tokens {:.1}, draw on plain logits {:.1}, \
         accept {:.1}",
        p[0], p[1], p[2], p[3], p[4]
    );
    println!(
        "  means: {:.1}, {:.1}, {:.1}, {:.1}, {:.1}; the mask's computation: 90th percentile \
         {:.0}, 99th {:.0}, max {:.0} µs",
        means[0],
        means[1],
        means[2],
        means[3],
        means[4],
        tail(&parts[0], 0.9),
        tail(&parts[0], 0.99),
        tail(&parts[0], 1.0),
    );
}
