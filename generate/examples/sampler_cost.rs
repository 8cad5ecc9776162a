//! What a draw costs on the host at a 151,936-token vocabulary, with llama.cpp's default
//! sampling chain: on a model's logits as they come; on logits a grammar has masked (all but
//! `ALLOWED` tokens at −∞, as a JSON schema leaves them inside a structure); and among the
//! same allowed tokens given as a set (`Sampler::sample_in`, what the generation loop does
//! with a grammar), few of them or most of the vocabulary (a string's content).
//!
//!     cargo run --release -p rocky-generate --example sampler_cost [ALLOWED] [DRAWS]

use rand::{Rng, SeedableRng};
use rocky_generate::{Sampler, SamplerParams, TokenSet};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let allowed: usize = args.next().map_or(50, |s| s.parse().expect("ALLOWED"));
    let draws: usize = args.next().map_or(200, |s| s.parse().expect("DRAWS"));
    let n = 151_936;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let logits: Vec<f32> = (0..n).map(|_| rng.gen::<f32>() * 10.0).collect();
    let mut masked = vec![f32::NEG_INFINITY; n];
    let mut few = TokenSet::new(n);
    for _ in 0..allowed {
        let i = rng.gen_range(0..n);
        masked[i] = logits[i];
        few.set(i as u32, true);
    }
    // Most of the vocabulary: every token but one in eight, scattered.
    let mut most = TokenSet::full(n);
    for _ in 0..n / 8 {
        most.set(rng.gen_range(0..n as u32), false);
    }
    let params = SamplerParams {
        temperature: 1.0,
        seed: 3,
        ..SamplerParams::default()
    };
    let cases: [(&str, &[f32], Option<&TokenSet>); 4] = [
        ("model logits", &logits, None),
        ("masked logits", &masked, None),
        ("allowed set", &logits, Some(&few)),
        ("7/8 allowed set", &logits, Some(&most)),
    ];
    for (name, l, set) in cases {
        let mut sampler = Sampler::new(params.clone()).expect("valid settings");
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..draws {
            sum += u64::from(sampler.sample_in(l, &[], set));
        }
        let per = start.elapsed().as_secs_f64() * 1e3 / draws as f64;
        println!("{name:16} ({allowed} allowed where masked): {per:.4} ms a draw (checksum {sum})");
    }
    // The log-probabilities a `logprobs` request adds to each step (top 5).
    for (name, l, set) in cases {
        let start = Instant::now();
        let mut sum = 0f64;
        for i in 0..draws {
            let t = rocky_generate::log_probs_in(l, set, (i * 7919 % n) as u32, 5);
            sum += t.top.iter().map(|x| x.1 as f64).sum::<f64>();
        }
        let per = start.elapsed().as_secs_f64() * 1e3 / draws as f64;
        println!("{name:16} log-probabilities, top 5: {per:.4} ms (checksum {sum:.3})");
    }
}
