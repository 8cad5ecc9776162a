//! Choosing the next token from the logits: greedy, or a seeded draw after llama.cpp's default
//! chain of filters (repetition penalty, top-k, top-p, min-p, temperature), so that the same
//! flags mean the same thing in both programs.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::borrow::Cow;

/// The sampling settings; the defaults are llama.cpp's (`--temp 0.8 --top-k 40 --top-p 0.95
/// --min-p 0.05 --repeat-penalty 1.0 --repeat-last-n 64`).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// 0 (or below) = greedy: the most likely token, no randomness.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = all.
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities add up to at least p; 1 = all.
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the most likely one; 0 = all.
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recently seen tokens by this; 1 = off.
    pub repeat_penalty: f32,
    /// How many of the last tokens (prompt included) the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (what the golden continuations were made with).
    pub fn greedy() -> Self {
        SamplerParams {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// A message naming the bad value, for settings no sampler can use.
    pub fn validate(&self) -> Result<(), String> {
        if !self.temperature.is_finite() {
            return Err(format!("temperature {} is not a number", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!(
                "top-p {} is out of range: use a value in (0, 1]",
                self.top_p
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!(
                "min-p {} is out of range: use a value in [0, 1]",
                self.min_p
            ));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(format!(
                "repeat penalty {} is out of range: use a positive value (1 = off)",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// A candidate token and its probability after the filters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub p: f32,
}

pub struct Sampler {
    params: SamplerParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Result<Sampler, String> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng })
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// The next token. `history` holds the tokens so far (prompt and generated), for the
    /// repetition penalty.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(&self.penalized(logits, history));
        }
        let candidates = self.distribution(logits, history);
        let u: f32 = self.rng.gen();
        draw(&candidates, u)
    }

    /// Logits after the repetition penalty (llama.cpp: each distinct recent token once,
    /// logit / penalty when positive, logit · penalty otherwise); the logits themselves where
    /// the penalty is off (no copy of a 152k vocabulary's logits per token).
    pub fn penalized<'a>(&self, logits: &'a [f32], history: &[u32]) -> Cow<'a, [f32]> {
        let penalty = self.params.repeat_penalty;
        if penalty == 1.0 || self.params.repeat_last_n == 0 {
            return Cow::Borrowed(logits);
        }
        let mut out = logits.to_vec();
        let recent = &history[history.len().saturating_sub(self.params.repeat_last_n)..];
        let mut seen = std::collections::HashSet::new();
        for &t in recent {
            if let Some(l) = out.get_mut(t as usize) {
                if seen.insert(t) {
                    *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
                }
            }
        }
        Cow::Owned(out)
    }

    /// The distribution a non-greedy draw is made from, most likely first: penalty, top-k,
    /// top-p and min-p on the softmax of the logits, then the temperature on what is left
    /// (llama.cpp's default order: the filters look at the untempered probabilities).
    pub fn distribution(&self, logits: &[f32], history: &[u32]) -> Vec<Candidate> {
        let p = &self.params;
        let logits = self.penalized(logits, history);
        // Most likely first; ties keep the lower id first, so the result does not depend on
        // the sort (a total order: the k best are one set however they are found).
        let by_rank = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let mut order: Vec<u32> = if p.top_k > 0 && p.top_k < logits.len() {
            // Only the top k are ordered, found in one pass, where sorting a 152k vocabulary
            // took ~6 ms a token on a desktop core (more than an H100's decode step).
            top_k(&logits, p.top_k)
        } else {
            (0..logits.len() as u32).collect()
        };
        order.sort_by(by_rank);
        let probs = softmax(
            &order
                .iter()
                .map(|&i| logits[i as usize])
                .collect::<Vec<_>>(),
        );
        if p.top_p < 1.0 {
            // The smallest prefix that reaches top_p, the token crossing it included.
            let mut cum = 0.0f64;
            let mut keep = probs.len();
            for (i, &q) in probs.iter().enumerate() {
                cum += q as f64;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            order.truncate(keep);
        }
        if p.min_p > 0.0 {
            let threshold = probs[0] * p.min_p;
            let keep = probs[..order.len()]
                .iter()
                .take_while(|&&q| q >= threshold)
                .count()
                .max(1);
            order.truncate(keep);
        }
        let t = if p.temperature > 0.0 {
            p.temperature
        } else {
            1.0
        };
        let tempered: Vec<f32> = order.iter().map(|&i| logits[i as usize] / t).collect();
        softmax(&tempered)
            .into_iter()
            .zip(order)
            .map(|(p, id)| Candidate { id, p })
            .collect()
    }
}

/// The ids of the `k` largest logits (on a tie the lower id ranks higher), in no order: one
/// pass over the logits with a heap of the k best so far, whose worst most ids fail against.
fn top_k(logits: &[f32], k: usize) -> Vec<u32> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    /// An id ordered so that the heap's top is the worst of those it holds.
    struct Ranked(f32, u32);
    impl Ord for Ranked {
        fn cmp(&self, other: &Self) -> Ordering {
            // Greater = worse: a smaller logit, or the same logit and a higher id.
            other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
        }
    }
    impl PartialOrd for Ranked {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl PartialEq for Ranked {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other) == Ordering::Equal
        }
    }
    impl Eq for Ranked {}
    let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(k + 1);
    // The worst logit kept, once the heap is full: a plain `<` against it rejects most ids at
    // once (where `<` and `total_cmp` differ, NaN and ±0, the exact comparison decides).
    let mut bar = f32::NEG_INFINITY;
    for (id, &l) in logits.iter().enumerate() {
        // Once the heap is full a −∞ never enters it (it ties the worst at best, with a higher
        // id): a grammar's mask leaves most logits at −∞, and with fewer than k tokens allowed
        // the bar stays −∞, so without this each of them took the exact comparison (0.25
        // against 0.10 ms a draw at 151,936 tokens, `examples/sampler_cost`).
        if l < bar || (l == f32::NEG_INFINITY && heap.len() == k) {
            continue;
        }
        let candidate = Ranked(l, id as u32);
        if heap.len() < k {
            heap.push(candidate);
        } else if heap.peek().is_some_and(|worst| candidate < *worst) {
            heap.pop();
            heap.push(candidate);
        } else {
            continue;
        }
        if heap.len() == k {
            bar = heap.peek().map_or(f32::NEG_INFINITY, |worst| worst.0);
        }
    }
    heap.into_iter().map(|r| r.1).collect()
}

/// The index of the largest logit, the first one on a tie (as llama.cpp's greedy sampler); a
/// NaN is never the largest (0 where every logit is NaN).
pub fn argmax(logits: &[f32]) -> u32 {
    // The maximum over 16 independent lanes (a loop the compiler turns into vector compares:
    // a greedy decode step scans 152k logits), then the first index holding it.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (m, &l) in lanes.iter_mut().zip(chunk) {
            if l > *m {
                *m = l;
            }
        }
    }
    let max = lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
    logits.iter().position(|&l| l == max).unwrap_or(0) as u32
}

/// Probabilities of `logits` (max subtracted first; the sum in f64).
fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = logits.iter().map(|&l| ((l - max) as f64).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|&x| (x / sum) as f32).collect()
}

/// The candidate whose cumulative probability interval holds `u` ∈ [0, 1).
fn draw(candidates: &[Candidate], u: f32) -> u32 {
    let mut cum = 0.0f32;
    for c in candidates {
        cum += c.p;
        if u < cum {
            return c.id;
        }
    }
    // Rounding left the sum a hair under u: the last candidate.
    candidates.last().map_or(0, |c| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits whose softmax is exactly 0.1, 0.2, 0.3, 0.4.
    fn four() -> Vec<f32> {
        [0.1f32, 0.2, 0.3, 0.4].iter().map(|p| p.ln()).collect()
    }

    fn params(f: impl FnOnce(&mut SamplerParams)) -> Sampler {
        let mut p = SamplerParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 1,
        };
        f(&mut p);
        Sampler::new(p).unwrap()
    }

    fn probs_by_id(c: &[Candidate]) -> Vec<(u32, f32)> {
        let mut v: Vec<(u32, f32)> = c.iter().map(|c| (c.id, c.p)).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    fn assert_close(got: &[(u32, f32)], want: &[(u32, f32)]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0, "{got:?} vs {want:?}");
            assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn no_filter_is_the_softmax() {
        let s = params(|_| {});
        let d = s.distribution(&four(), &[]);
        assert_close(&probs_by_id(&d), &[(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)]);
    }

    #[test]
    fn top_k_renormalizes_the_k_most_likely() {
        let s = params(|p| p.top_k = 2);
        let d = s.distribution(&four(), &[]);
        assert_close(&probs_by_id(&d), &[(2, 3.0 / 7.0), (3, 4.0 / 7.0)]);
    }

    #[test]
    fn top_p_keeps_the_token_that_crosses_p() {
        // 0.4 < 0.5 ≤ 0.4 + 0.3: the two most likely stay.
        let d = params(|p| p.top_p = 0.5).distribution(&four(), &[]);
        assert_close(&probs_by_id(&d), &[(2, 3.0 / 7.0), (3, 4.0 / 7.0)]);
        // 0.4 alone reaches 0.4.
        let d = params(|p| p.top_p = 0.4).distribution(&four(), &[]);
        assert_close(&probs_by_id(&d), &[(3, 1.0)]);
    }

    #[test]
    fn min_p_is_relative_to_the_most_likely() {
        // Threshold 0.6 · 0.4 = 0.24: 0.3 and 0.4 stay.
        let d = params(|p| p.min_p = 0.6).distribution(&four(), &[]);
        assert_close(&probs_by_id(&d), &[(2, 3.0 / 7.0), (3, 4.0 / 7.0)]);
        // Threshold 0.45 · 0.4 = 0.18: 0.2 stays too.
        let d = params(|p| p.min_p = 0.45).distribution(&four(), &[]);
        assert_close(
            &probs_by_id(&d),
            &[(1, 2.0 / 9.0), (2, 3.0 / 9.0), (3, 4.0 / 9.0)],
        );
    }

    #[test]
    fn temperature_raises_probabilities_to_one_over_t() {
        // softmax(ln p / T) ∝ p^(1/T).
        for t in [0.5f32, 2.0] {
            let d = params(|p| p.temperature = t).distribution(&four(), &[]);
            let w: Vec<f32> = [0.1f32, 0.2, 0.3, 0.4]
                .iter()
                .map(|p| p.powf(1.0 / t))
                .collect();
            let sum: f32 = w.iter().sum();
            let want: Vec<(u32, f32)> = w
                .iter()
                .enumerate()
                .map(|(i, x)| (i as u32, x / sum))
                .collect();
            assert_close(&probs_by_id(&d), &want);
        }
    }

    #[test]
    fn filters_see_untempered_probabilities() {
        // At T = 10 the tempered distribution is nearly flat, but top-p still cuts on the
        // original 0.4 / 0.3: two tokens, with tempered weights 0.3^0.1 : 0.4^0.1.
        let d = params(|p| {
            p.temperature = 10.0;
            p.top_p = 0.5
        })
        .distribution(&four(), &[]);
        let (a, b) = (0.3f32.powf(0.1), 0.4f32.powf(0.1));
        assert_close(&probs_by_id(&d), &[(2, a / (a + b)), (3, b / (a + b))]);
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_logits() {
        let s = params(|p| p.repeat_penalty = 2.0);
        // Token 0 twice in the history: penalized once.
        let out = s.penalized(&[2.0, -2.0, 1.0], &[0, 1, 0]);
        assert_eq!(out, vec![1.0, -4.0, 1.0]);
        // Only the last `repeat_last_n` tokens count.
        let s = params(|p| {
            p.repeat_penalty = 2.0;
            p.repeat_last_n = 1
        });
        assert_eq!(
            s.penalized(&[2.0, -2.0, 1.0], &[0, 1]),
            vec![2.0, -4.0, 1.0]
        );
    }

    #[test]
    fn greedy_takes_the_first_maximum_after_the_penalty() {
        let mut s = Sampler::new(SamplerParams::greedy()).unwrap();
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]), 1);
        let mut s = Sampler::new(SamplerParams {
            repeat_penalty: 2.0,
            ..SamplerParams::greedy()
        })
        .unwrap();
        // 3 / 2 = 1.5 < 2: the penalty moves the choice to token 3.
        assert_eq!(s.sample(&[1.0, 3.0, 1.0, 2.0], &[1]), 3);
    }

    #[test]
    fn draws_follow_the_distribution_and_the_seed() {
        let mut s = params(|p| p.seed = 42);
        let n = 40_000;
        let mut counts = [0usize; 4];
        let draws: Vec<u32> = (0..n).map(|_| s.sample(&four(), &[])).collect();
        draws.iter().for_each(|&t| counts[t as usize] += 1);
        for (i, want) in [0.1, 0.2, 0.3, 0.4].iter().enumerate() {
            let got = counts[i] as f64 / n as f64;
            // 4 standard deviations of a binomial proportion at n = 40000 is ≤ 0.01.
            assert!((got - want).abs() < 0.01, "token {i}: {got} vs {want}");
        }
        // The same seed gives the same draws; another seed other ones.
        let mut again = params(|p| p.seed = 42);
        let same: Vec<u32> = (0..n).map(|_| again.sample(&four(), &[])).collect();
        assert_eq!(draws, same);
        let mut other = params(|p| p.seed = 43);
        let diff: Vec<u32> = (0..100).map(|_| other.sample(&four(), &[])).collect();
        assert_ne!(draws[..100], diff[..]);
    }

    #[test]
    fn bad_settings_are_refused_with_the_value() {
        let bad = |f: fn(&mut SamplerParams)| {
            let mut p = SamplerParams::default();
            f(&mut p);
            Sampler::new(p).err().expect("refused")
        };
        assert!(bad(|p| p.top_p = 0.0).contains("top-p 0"));
        assert!(bad(|p| p.top_p = 1.5).contains("top-p 1.5"));
        assert!(bad(|p| p.min_p = -0.1).contains("min-p"));
        assert!(bad(|p| p.repeat_penalty = 0.0).contains("repeat penalty"));
        assert!(bad(|p| p.temperature = f32::NAN).contains("temperature"));
    }

    /// The one-pass top-k against a full sort of every id (most likely first, the lower id
    /// first on a tie), on logits with many ties, -0.0 beside 0.0, infinities and a NaN.
    #[test]
    fn top_k_is_the_prefix_of_the_full_order() {
        let mut x: u64 = 7;
        let mut logits: Vec<f32> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) % 64) as f32 / 4.0 - 8.0
            })
            .collect();
        logits[10] = -0.0;
        logits[11] = 0.0;
        logits[12] = f32::INFINITY;
        logits[13] = f32::NEG_INFINITY;
        logits[14] = f32::NAN;
        assert_top_k_is_the_full_orders_prefix(&logits, &[1, 2, 40, 333, 4999], "");
    }

    /// `top_k(logits, k)` for each of `ks` holds the first k ids of every id sorted most likely
    /// first (the lower id first on a tie).
    fn assert_top_k_is_the_full_orders_prefix(logits: &[f32], ks: &[usize], what: &str) {
        let by_rank = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let mut full: Vec<u32> = (0..logits.len() as u32).collect();
        full.sort_by(by_rank);
        for &k in ks {
            let mut got = top_k(logits, k);
            got.sort_by(by_rank);
            assert_eq!(got, full[..k], "{what}k = {k}");
        }
    }

    /// The same on logits a grammar masked: all but a few at −∞ (fewer and more than k left),
    /// so the −∞ kept are the lowest ids, as the full order has them.
    #[test]
    fn top_k_of_masked_logits_is_the_prefix_of_the_full_order() {
        for allowed in [0usize, 3, 39, 40, 41, 500] {
            let mut logits = vec![f32::NEG_INFINITY; 20000];
            for j in 0..allowed {
                let at = (j * 7919 + 13) % logits.len();
                logits[at] = (j % 17) as f32 - 3.0;
            }
            assert_top_k_is_the_full_orders_prefix(
                &logits,
                &[1, 40, 64],
                &format!("allowed {allowed}, "),
            );
        }
    }

    /// The default chain (top-k 40 first) draws what sorting every id drew before the one-pass
    /// top-k: the same candidates and probabilities.
    #[test]
    fn the_default_distribution_is_the_full_sorts() {
        let logits: Vec<f32> = (0..3000)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
            .collect();
        let s = Sampler::new(SamplerParams {
            seed: 1,
            ..SamplerParams::default()
        })
        .unwrap();
        let got = s.distribution(&logits, &[]);
        // The chain by hand: the 40 best by a full sort, softmax, top-p 0.95, min-p 0.05, T 0.8.
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        order.truncate(40);
        let probs = softmax(
            &order
                .iter()
                .map(|&i| logits[i as usize])
                .collect::<Vec<_>>(),
        );
        let mut cum = 0.0f64;
        let keep_p = probs
            .iter()
            .position(|&q| {
                cum += q as f64;
                cum >= 0.95
            })
            .map_or(probs.len(), |i| i + 1);
        let keep_min = probs.iter().take_while(|&&q| q >= probs[0] * 0.05).count();
        order.truncate(keep_p.min(keep_min).max(1));
        let want: Vec<u32> = order.clone();
        assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), want);
        let tempered: Vec<f32> = order.iter().map(|&i| logits[i as usize] / 0.8).collect();
        for (c, p) in got.iter().zip(softmax(&tempered)) {
            assert_eq!(c.p, p);
        }
    }

    #[test]
    fn argmax_takes_the_first_maximum_and_never_a_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 2.0, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, 5.0]), 2);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
        assert_eq!(argmax(&[-0.0, 0.0]), 0);
        // Past the 16-lane chunks: the maximum in the remainder, and a tie across both.
        let mut v: Vec<f32> = (0..37).map(|i| (i % 5) as f32).collect();
        assert_eq!(argmax(&v), 4);
        v[36] = 9.0;
        assert_eq!(argmax(&v), 36);
        v[20] = 9.0;
        assert_eq!(argmax(&v), 20);
    }
}
