//! What a grammar adds to each decode step on the host, with the device's step modelled: a
//! stand-in evaluator waits a fixed time per step (as the host does while the GPU runs) and
//! returns random logits over the model's vocabulary, and the same generation runs with and
//! without a JSON-schema constraint (temperature 1, as tools/serve-agents.py --speed asks).
//!
//!     cargo run --release -p rocky-serve --example constrained_overhead -- VOCAB.gguf [STEP_US] [PAIRS]
//!
//! Prints per-token wall time of both and their ratio. The step is a sleep by default
//! (`ROCKY_OVERHEAD_SPIN=1`: a busy wait, as a driver that spins on its fence would).

use llguidance::api::TopLevelGrammar;
use rand::{Rng, SeedableRng};
use rocky_generate::{
    generate_steered, EndOfGeneration, EvalError, Evaluator, GenerateOptions, SamplerParams,
    Steering,
};
use rocky_serve::constrain::Grammars;
use std::time::{Duration, Instant};

/// A device step stood in for by a wait: fixed time, random logits.
struct Waiting {
    n_vocab: usize,
    step: Duration,
    spin: bool,
    past: usize,
    rng: rand::rngs::StdRng,
}

impl Waiting {
    fn logits(&mut self) -> Vec<f32> {
        let start = Instant::now();
        // The logits are made before the wait's end, as a readback is part of a step.
        let logits = (0..self.n_vocab).map(|_| self.rng.gen::<f32>()).collect();
        if self.spin {
            while start.elapsed() < self.step {
                std::hint::spin_loop();
            }
        } else if let Some(rest) = self.step.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
        logits
    }
}

impl Evaluator for Waiting {
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

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: constrained_overhead VOCAB.gguf [STEP_US] [PAIRS]");
    let step_us: u64 = args.next().map_or(1300, |s| s.parse().expect("STEP_US"));
    let pairs: usize = args.next().map_or(10, |s| s.parse().expect("PAIRS"));
    let file = rocky_models::gguf::GgufFile::open(&path).expect("a GGUF file");
    let tokenizer = rocky_models::tokenizer::Tokenizer::from_gguf(&file).expect("its tokenizer");
    let end = EndOfGeneration::from_vocabulary(&file, &tokenizer);
    let grammars = Grammars::new(&tokenizer).expect("the trie");
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 4}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    });
    let mut evaluator = Waiting {
        n_vocab: tokenizer.vocab_size(),
        step: Duration::from_micros(step_us),
        spin: std::env::var("ROCKY_OVERHEAD_SPIN").is_ok_and(|v| v == "1"),
        past: 0,
        rng: rand::rngs::StdRng::seed_from_u64(1),
    };
    let options = GenerateOptions {
        max_new_tokens: 24,
        sampler: SamplerParams {
            temperature: 1.0,
            seed: 3,
            ..SamplerParams::default()
        },
        stop_strings: Vec::new(),
    };
    let prompt = [1u32, 2, 3];
    let mut per_token = [Vec::new(), Vec::new()];
    let mut exposed = Vec::new();
    for _ in 0..pairs {
        for (kind, times) in per_token.iter_mut().enumerate() {
            let mut guide = grammars
                .guide(TopLevelGrammar::from_json_schema(schema.clone()))
                .expect("the schema compiles");
            let steering = Steering {
                constraint: (kind == 1)
                    .then_some(&mut guide as &mut dyn rocky_generate::Constraint),
                logprobs: None,
            };
            let g = generate_steered(
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
            let steps = g.decode_steps.max(1);
            times.push(g.decode.as_secs_f64() * 1e3 / steps as f64);
            if kind == 1 {
                exposed.push(g.constraint_exposed.as_secs_f64() * 1e3 / steps as f64);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (free, bound) = (mean(&per_token[0]), mean(&per_token[1]));
    println!(
        "step {step_us} µs ({}), {pairs} pairs: unconstrained {free:.3} ms/token, json_schema \
         {bound:.3} ms/token ({:.3} of it the grammar not overlapped), \
         constrained/unconstrained speed {:.3}",
        if evaluator.spin { "spin" } else { "sleep" },
        mean(&exposed),
        free / bound
    );
}
