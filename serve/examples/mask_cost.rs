//! What the output grammar costs per generated token: llguidance's token mask over a model's
//! whole vocabulary, applied to the logits, for a JSON-schema reply walked token by token.
//!
//!     cargo run --release -p rocky-serve --example mask_cost -- MODEL.gguf [STEPS]
//!
//! Prints the trie's build time (once per model) and the mask's time per step (mean, median,
//! 99th percentile); compare with a decode step of the same model (`rocky generate` prints
//! its decode tok/s).

use llguidance::api::TopLevelGrammar;
use rand::{Rng, SeedableRng};
use rocky_generate::Constraint;
use rocky_serve::constrain::Grammars;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: mask_cost MODEL.gguf [STEPS]");
    let steps: usize = args
        .next()
        .map_or(200, |s| s.parse().expect("STEPS is a number"));
    let file = rocky_models::gguf::GgufFile::open(&path).expect("a GGUF file");
    let tokenizer = rocky_models::tokenizer::Tokenizer::from_gguf(&file).expect("its tokenizer");
    let n = tokenizer.vocab_size();
    let start = Instant::now();
    let grammars = Grammars::new(&tokenizer).expect("the trie");
    println!(
        "vocabulary {n} tokens: trie and parser factory built in {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 8},
            "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]}
        },
        "required": ["name", "age", "tags", "address"],
        "x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut times = Vec::new();
    let end = [tokenizer.eos_id().unwrap_or(0)];
    let mut text = Vec::new();
    let mut guide = grammars
        .guide(TopLevelGrammar::from_json_schema(schema.clone()))
        .unwrap();
    let mut logits = vec![0f32; n];
    while times.len() < steps {
        // Random logits, as a random-weight model gives: the mask decides what may follow.
        logits.iter_mut().for_each(|l| *l = rng.gen::<f32>());
        let t = Instant::now();
        guide.mask(&mut logits, &end).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e6);
        let allowed: Vec<u32> = (0..n as u32)
            .filter(|&i| logits[i as usize].is_finite())
            .collect();
        let next = allowed[rng.gen_range(0..allowed.len())];
        if end.contains(&next) {
            println!("reply: {}", String::from_utf8_lossy(&text));
            text.clear();
            guide = grammars
                .guide(TopLevelGrammar::from_json_schema(schema.clone()))
                .unwrap();
            continue;
        }
        text.extend(tokenizer.token_bytes(next).unwrap_or_default());
        guide.accept(next).unwrap();
    }
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "mask per step over {} steps: mean {:.0} µs, median {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        times.len(),
        mean,
        times[times.len() / 2],
        times[times.len() * 99 / 100],
        times[times.len() - 1]
    );
}
