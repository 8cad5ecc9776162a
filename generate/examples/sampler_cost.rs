//! What a draw costs on the host at a 151,936-token vocabulary, with llama.cpp's default
//! sampling chain: on a model's logits as they come, and on logits a grammar has masked (all
//! but a few tokens at −∞, as a JSON schema leaves them inside a structure).
//!
//!     cargo run --release -p rocky-generate --example sampler_cost [ALLOWED] [DRAWS]

use rand::{Rng, SeedableRng};
use rocky_generate::{Sampler, SamplerParams};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let allowed: usize = args.next().map_or(50, |s| s.parse().expect("ALLOWED"));
    let draws: usize = args.next().map_or(200, |s| s.parse().expect("DRAWS"));
    let n = 151_936;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let logits: Vec<f32> = (0..n).map(|_| rng.gen::<f32>() * 10.0).collect();
    let mut masked = vec![f32::NEG_INFINITY; n];
    for _ in 0..allowed {
        let i = rng.gen_range(0..n);
        masked[i] = logits[i];
    }
    let params = SamplerParams {
        temperature: 1.0,
        seed: 3,
        ..SamplerParams::default()
    };
    for (name, l) in [("model logits", &logits), ("masked logits", &masked)] {
        let mut sampler = Sampler::new(params.clone()).expect("valid settings");
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..draws {
            sum += u64::from(sampler.sample(l, &[]));
        }
        let per = start.elapsed().as_secs_f64() * 1e3 / draws as f64;
        println!("{name:14} ({allowed} allowed where masked): {per:.4} ms a draw (checksum {sum})");
    }
}
