//! Choosing the next token from the logits: greedy, or a seeded draw after llama.cpp's default
//! chain of filters (repetition penalty, top-k, top-p, min-p, temperature), so that the same
//! flags mean the same thing in both programs.

use crate::steer::TokenSet;
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
        self.sample_in(logits, history, None)
    }

    /// [`Sampler::sample`] among the tokens of `allowed` (every token where None): the draw
    /// made on the logits with every other token's at −∞, made without writing them (a
    /// grammar's mask leaves a few tokens of a 152k vocabulary, or most of them, and the draw
    /// reads only those). The same candidates, probabilities and random numbers, so the same
    /// tokens, except that a forbidden token is never drawn: −∞ logits had probability 0 but
    /// could be drawn where every allowed token's sum rounded below the random number.
    pub fn sample_in(
        &mut self,
        logits: &[f32],
        history: &[u32],
        allowed: Option<&TokenSet>,
    ) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax_in(&self.penalized(logits, history), allowed);
        }
        let candidates = self.distribution_in(logits, history, allowed);
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
        self.distribution_in(logits, history, None)
    }

    /// [`Sampler::distribution`] among the tokens of `allowed` (every token where None): that
    /// of the logits with every other token's at −∞, without the zero-probability candidates
    /// those would add where fewer than top-k tokens are allowed. Empty where no token is.
    pub fn distribution_in(
        &self,
        logits: &[f32],
        history: &[u32],
        allowed: Option<&TokenSet>,
    ) -> Vec<Candidate> {
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
            top_k(&logits, p.top_k, allowed)
        } else {
            match allowed {
                None => (0..logits.len() as u32).collect(),
                Some(set) => set
                    .ids()
                    .take_while(|&id| (id as usize) < logits.len())
                    .collect(),
            }
        };
        if order.is_empty() {
            return Vec::new();
        }
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
            // `probs` is not empty: `order` was not.
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

/// The ids of the `k` largest logits among `allowed` (all where None; on a tie the lower id
/// ranks higher), in no order: one pass over the logits with a heap of the k best so far,
/// whose worst most ids fail against. Once the heap is full, a block of 32 logits whose
/// largest is below the heap's worst is passed over whole (its maximum is a few vector
/// instructions: a 152k vocabulary's pass is then mostly those), and a block no id of which is
/// allowed is never read.
fn top_k(logits: &[f32], k: usize, allowed: Option<&TokenSet>) -> Vec<u32> {
    let mut best = Best::new(k);
    for (w, chunk) in logits.chunks(32).enumerate() {
        let bits = allowed.map_or(u32::MAX, |set| set.word(w));
        if bits == 0 {
            continue;
        }
        if best.full() {
            if let Ok(block) = <&[f32; 32]>::try_from(chunk) {
                // Every logit of the block, allowed or not (those not allowed are the model's
                // own values, not −∞): below the bar, none of the allowed ones can enter.
                if block_below(block, best.bar) {
                    continue;
                }
            }
        }
        let mut b = bits;
        while b != 0 {
            let i = b.trailing_zeros() as usize;
            b &= b - 1;
            if let Some(&l) = chunk.get(i) {
                best.offer((w * 32 + i) as u32, l);
            }
        }
    }
    best.heap.into_iter().map(|r| r.1).collect()
}

/// Whether no logit of `block` can enter a full heap whose worst is `bar`: each is below it,
/// or −∞ (which never enters a full heap); false where one is NaN (those rank by `total_cmp`,
/// which the exact comparison applies). Eight lanes of maxima and of sums, compared with the
/// bar lane by lane: vector instructions without a serial reduction. A NaN propagates through
/// the sum (as do +∞ and −∞ together, which only sends the block to the exact comparison).
#[inline]
fn block_below(block: &[f32; 32], bar: f32) -> bool {
    let mut max = [f32::NEG_INFINITY; 8];
    let mut sum = [0f32; 8];
    for part in block.chunks_exact(8) {
        for j in 0..8 {
            let l = part[j];
            max[j] = if l > max[j] { l } else { max[j] };
            sum[j] += l;
        }
    }
    let mut below = 0u32;
    for j in 0..8 {
        let skip = (max[j] < bar) | (max[j] == f32::NEG_INFINITY);
        below += (skip & !sum[j].is_nan()) as u32;
    }
    below == 8
}

/// An id ordered so that a max-heap's top is the worst of those it holds.
struct Ranked(f32, u32);

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Greater = worse: a smaller logit, or the same logit and a higher id.
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Ranked {}

/// The k best ids offered so far.
struct Best {
    heap: std::collections::BinaryHeap<Ranked>,
    k: usize,
    /// The worst logit kept, once the heap is full: a plain `<` against it rejects most ids at
    /// once (where `<` and `total_cmp` differ, NaN and ±0, the exact comparison decides).
    bar: f32,
}

impl Best {
    fn new(k: usize) -> Best {
        Best {
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
            k,
            bar: f32::NEG_INFINITY,
        }
    }

    fn full(&self) -> bool {
        self.heap.len() == self.k
    }

    #[inline]
    fn offer(&mut self, id: u32, l: f32) {
        // Once the heap is full a −∞ never enters it (it ties the worst at best, with a higher
        // id): a mask written into the logits leaves most at −∞, and with fewer than k tokens
        // allowed the bar stays −∞, so without this each of them took the exact comparison
        // (0.25 against 0.10 ms a draw at 151,936 tokens, `examples/sampler_cost`).
        if l < self.bar || (l == f32::NEG_INFINITY && self.full()) {
            return;
        }
        let candidate = Ranked(l, id);
        if self.heap.len() < self.k {
            self.heap.push(candidate);
        } else if self.heap.peek().is_some_and(|worst| candidate < *worst) {
            self.heap.pop();
            self.heap.push(candidate);
        } else {
            return;
        }
        if self.full() {
            self.bar = self.heap.peek().map_or(f32::NEG_INFINITY, |worst| worst.0);
        }
    }
}

/// The index of the largest logit, the first one on a tie (as llama.cpp's greedy sampler); a
/// NaN is never the largest (0 where every logit is NaN).
pub fn argmax(logits: &[f32]) -> u32 {
    // The maximum over 16 independent lanes (a loop the compiler turns into vector compares:
    // a greedy decode step scans 152k logits), then the first index holding it.
    let max = logits_max(logits);
    logits.iter().position(|&l| l == max).unwrap_or(0) as u32
}

/// [`argmax`] among the tokens of `allowed` (all where None): that of the logits with every
/// other token's at −∞, read without writing them. Where no allowed logit is above −∞ (all
/// −∞ or NaN), the first allowed id (0 where none is), never a forbidden one.
pub fn argmax_in(logits: &[f32], allowed: Option<&TokenSet>) -> u32 {
    let Some(set) = allowed else {
        return argmax(logits);
    };
    let blocks = || {
        logits
            .chunks(32)
            .enumerate()
            .map(|(w, chunk)| (w, set.word(w), chunk))
            .filter(|&(_, bits, _)| bits != 0)
    };
    let mut max = f32::NEG_INFINITY;
    for (_, bits, chunk) in blocks() {
        if bits == u32::MAX && chunk.len() == 32 {
            let m = logits_max(chunk);
            max = if m > max { m } else { max };
        } else {
            let mut b = bits;
            while b != 0 {
                let i = b.trailing_zeros() as usize;
                b &= b - 1;
                if let Some(&l) = chunk.get(i) {
                    max = if l > max { l } else { max };
                }
            }
        }
    }
    let mut first = None;
    for (w, bits, chunk) in blocks() {
        let mut b = bits;
        while b != 0 {
            let i = b.trailing_zeros() as usize;
            b &= b - 1;
            let Some(&l) = chunk.get(i) else { break };
            first.get_or_insert((w * 32 + i) as u32);
            if l == max && max > f32::NEG_INFINITY {
                return (w * 32 + i) as u32;
            }
        }
    }
    first.unwrap_or(0)
}

/// The largest of `logits`, NaN never (−∞ where all are NaN), over 16 lanes.
pub(crate) fn logits_max(logits: &[f32]) -> f32 {
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
    lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m })
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
    use crate::steer::TokenSet;

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
            let mut got = top_k(logits, k, None);
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

    /// Random logits over `n` ids with ties (a few levels) and a set allowing about `density`
    /// of them (`None`: all), with the logits a mask would leave: −∞ outside the set.
    fn masked_case(n: usize, density: f64, seed: u64) -> (Vec<f32>, TokenSet, Vec<f32>) {
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(seed);
        let logits: Vec<f32> = (0..n)
            .map(|_| (rng.gen_range(0..200) as f32) / 20.0 - 5.0)
            .collect();
        let mut set = TokenSet::new(n);
        for id in 0..n as u32 {
            if rng.gen_bool(density) {
                set.set(id, true);
            }
        }
        let mut dense = logits.clone();
        set.apply(&mut dense);
        (logits, set, dense)
    }

    /// The chains the tests run: llama.cpp's default, each filter alone, none, greedy, and the
    /// repetition penalty.
    fn chains() -> Vec<SamplerParams> {
        let base = SamplerParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        };
        vec![
            SamplerParams {
                temperature: 1.0,
                ..SamplerParams::default()
            },
            SamplerParams::default(),
            base.clone(),
            SamplerParams {
                top_k: 5,
                ..base.clone()
            },
            SamplerParams {
                top_p: 0.5,
                ..base.clone()
            },
            SamplerParams {
                min_p: 0.2,
                temperature: 0.7,
                ..base.clone()
            },
            SamplerParams::greedy(),
            SamplerParams {
                repeat_penalty: 1.3,
                ..SamplerParams::default()
            },
        ]
    }

    /// The draw among a set's tokens against the draw on the logits with −∞ written outside
    /// it (the algorithm before sets, whose chain the tests above check against full sorts):
    /// the same tokens seed by seed, the same candidates less those of probability 0, the same
    /// probabilities bit for bit; for sets from one token to all, sizes not a multiple of 32.
    #[test]
    fn a_draw_among_a_set_is_the_draw_on_the_masked_logits() {
        let history = [3u32, 7, 7, 100, 2];
        for (case, (n, density)) in [
            (1000, 0.002),
            (1000, 0.02),
            (3001, 0.01),
            (3001, 0.3),
            (3001, 0.9),
            (4096, 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            let (logits, set, dense) = masked_case(n, density, case as u64);
            if set.is_empty() {
                continue;
            }
            for params in chains() {
                let what = format!("n {n}, {} allowed, {params:?}", set.count());
                let s = Sampler::new(params.clone()).unwrap();
                let by_set = s.distribution_in(&logits, &history, Some(&set));
                let by_mask: Vec<Candidate> = s
                    .distribution(&dense, &history)
                    .into_iter()
                    .filter(|c| c.p > 0.0)
                    .collect();
                if params.temperature > 0.0 {
                    assert_eq!(by_set, by_mask, "{what}");
                    assert!(by_set.iter().all(|c| set.contains(c.id)), "{what}");
                }
                for seed in 0..20 {
                    let params = SamplerParams {
                        seed,
                        ..params.clone()
                    };
                    let mut a = Sampler::new(params.clone()).unwrap();
                    let mut b = Sampler::new(params).unwrap();
                    for _ in 0..5 {
                        let x = a.sample_in(&logits, &history, Some(&set));
                        let y = b.sample(&dense, &history);
                        assert!(set.contains(x), "{what}: {x} is forbidden");
                        // Where rounding left the allowed probabilities' sum under the random
                        // number, the masked draw fell through to a forbidden token.
                        if set.contains(y) {
                            assert_eq!(x, y, "{what}, seed {seed}");
                        }
                    }
                }
            }
        }
    }

    /// The distribution among a set against a direct computation: every allowed id sorted by
    /// a full sort, softmax in f64, top-p, min-p and the temperature by hand.
    #[test]
    fn the_distribution_among_a_set_is_the_direct_computation() {
        let (logits, set, _) = masked_case(5000, 0.05, 11);
        for (top_k, top_p, min_p, t) in [
            (40, 0.95, 0.05, 0.8),
            (0, 1.0, 0.0, 1.0),
            (10, 0.7, 0.0, 1.5),
            (1000, 1.0, 0.1, 0.5),
        ] {
            let s = Sampler::new(SamplerParams {
                temperature: t,
                top_k,
                top_p,
                min_p,
                ..SamplerParams::default()
            })
            .unwrap();
            let got = s.distribution_in(&logits, &[], Some(&set));
            let mut ids: Vec<u32> = (0..logits.len() as u32)
                .filter(|&i| set.contains(i))
                .collect();
            ids.sort_by(|&a, &b| {
                logits[b as usize]
                    .total_cmp(&logits[a as usize])
                    .then(a.cmp(&b))
            });
            if top_k > 0 {
                ids.truncate(top_k);
            }
            let max = logits[ids[0] as usize] as f64;
            let e: Vec<f64> = ids
                .iter()
                .map(|&i| (logits[i as usize] as f64 - max).exp())
                .collect();
            let z: f64 = e.iter().sum();
            let p: Vec<f64> = e.iter().map(|x| x / z).collect();
            let mut keep = ids.len();
            if top_p < 1.0 {
                let mut cum = 0.0;
                keep = p
                    .iter()
                    .position(|&q| {
                        cum += q;
                        cum >= top_p as f64 - 1e-9
                    })
                    .map_or(keep, |i| i + 1);
            }
            let keep_min = p.iter().take_while(|&&q| q >= p[0] * min_p as f64).count();
            ids.truncate(keep.min(keep_min).max(1));
            let w: Vec<f64> = ids
                .iter()
                .map(|&i| ((logits[i as usize] as f64 - max) / t as f64).exp())
                .collect();
            let wz: f64 = w.iter().sum();
            let what = format!("top-k {top_k}, top-p {top_p}, min-p {min_p}, T {t}");
            assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), ids, "{what}");
            for (c, w) in got.iter().zip(&w) {
                assert!((c.p as f64 - w / wz).abs() < 1e-6, "{what}: {c:?}");
            }
        }
    }

    /// `top_k` among a set, and on logits whose blocks of 32 the pass skips or must not skip
    /// (NaN, ±∞, ties at the heap's worst, −0.0 beside 0.0), against the full order.
    #[test]
    fn top_k_among_a_set_and_past_skipped_blocks_is_the_full_orders_prefix() {
        for (case, density) in [0.001, 0.01, 0.2, 0.97, 1.0].into_iter().enumerate() {
            let (mut logits, set, _) = masked_case(7000, density, 100 + case as u64);
            logits[64] = f32::NAN;
            logits[65] = f32::INFINITY;
            logits[66] = f32::NEG_INFINITY;
            logits[3000] = -0.0;
            logits[3001] = 0.0;
            logits[6500] = f32::NAN;
            logits[6501] = f32::NEG_INFINITY;
            logits[6502] = f32::INFINITY;
            for w in 150..160 {
                // Whole blocks of −∞, allowed.
                logits[w * 32..w * 32 + 32].fill(f32::NEG_INFINITY);
            }
            let rank = |a: &u32, b: &u32| {
                logits[*b as usize]
                    .total_cmp(&logits[*a as usize])
                    .then(a.cmp(b))
            };
            for allowed in [None, Some(&set)] {
                let mut full: Vec<u32> = (0..logits.len() as u32)
                    .filter(|&i| allowed.is_none_or(|s| s.contains(i)))
                    .collect();
                full.sort_by(rank);
                for k in [1, 2, 40, 64, 500] {
                    let mut got = top_k(&logits, k, allowed);
                    got.sort_by(rank);
                    let want = &full[..k.min(full.len())];
                    assert_eq!(
                        got,
                        want,
                        "density {density}, set {}, k {k}",
                        allowed.is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn argmax_among_a_set_is_the_argmax_of_the_masked_logits() {
        for (case, density) in [0.001, 0.05, 0.5, 1.0].into_iter().enumerate() {
            let (mut logits, set, mut dense) = masked_case(3333, density, 200 + case as u64);
            assert_eq!(argmax_in(&logits, Some(&set)), argmax(&dense));
            // A NaN allowed is never the largest; one forbidden is never seen.
            let first = set.ids().next().unwrap();
            logits[first as usize] = f32::NAN;
            dense[first as usize] = f32::NAN;
            logits[5] = f32::NAN;
            assert_eq!(argmax_in(&logits, Some(&set)), argmax(&dense));
        }
        // Only −∞ (or NaN) allowed: the first allowed id, never a forbidden one.
        let logits = [1.0, f32::NEG_INFINITY, 2.0, f32::NAN, f32::NEG_INFINITY];
        let mut set = TokenSet::new(5);
        set.set(3, true);
        set.set(4, true);
        assert_eq!(argmax_in(&logits, Some(&set)), 3);
        assert_eq!(argmax_in(&logits, Some(&TokenSet::new(5))), 0);
        assert_eq!(argmax_in(&logits, None), argmax(&logits));
    }
}
