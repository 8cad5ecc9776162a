//! What a caller may add to each generation step beside the sampler's settings: a constraint
//! that forbids tokens before the draw (a grammar's token mask, see rocky-serve's `constrain`),
//! and the log-probabilities of the distribution the draw was made from (OpenAI's `logprobs`).
//! Both see the same logits: the model's, masked by the constraint, then the sampler's
//! repetition penalty; the draw's own filters (top-k/p, min-p, temperature) come after.

/// Forbids tokens at each step and follows the tokens drawn. `Send`: the generation loop
/// calls [`Constraint::prepare`] on a second thread while the model evaluates the step.
pub trait Constraint: Send {
    /// Sets the logits of the tokens that may not come next to −∞. `end` lists the model's
    /// end-of-generation tokens: the constraint lets them through where its output may end.
    fn mask(&mut self, logits: &mut [f32], end: &[u32]) -> Result<(), String>;
    /// The token drawn (never an end-of-generation token: those end the loop first).
    fn accept(&mut self, token: u32) -> Result<(), String>;
    /// Does the work of the next [`Constraint::mask`] that needs no logits (a grammar's
    /// token mask), ahead of them: the generation loop runs it while the device computes the
    /// step's logits, so on a fast GPU the mask costs no time of its own. Optional.
    fn prepare(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Told before each draw's [`Constraint::prepare`] and [`Constraint::mask`]: the draws
    /// left, that one included, before `max_new_tokens` or the context cuts the output. For
    /// the output to end by itself, an end-of-generation token must be drawn by the last of
    /// them; a constraint that can close its output in time (a JSON object's closing
    /// brackets) keeps to tokens that leave room for that. Optional.
    fn draws_left(&mut self, _left: usize) {}
    /// The tokens that may come next, written into `allowed` (sized to the step's logits; the
    /// constraint overwrites all of it), with `end` as [`Constraint::mask`] treats it; `true`.
    /// The draw then reads only the allowed tokens' logits, where [`Constraint::mask`] writes
    /// −∞ into every other one of a 152k vocabulary's and the draw scans them all. Optional:
    /// `false` (the default) has the generation loop call [`Constraint::mask`] instead.
    fn allowed(&mut self, _allowed: &mut TokenSet, _end: &[u32]) -> Result<bool, String> {
        Ok(false)
    }
}

/// A set of token ids, 32 to a word (id `i` is bit `i % 32` of word `i / 32`, as llguidance's
/// `SimpleVob` holds them): the tokens a constraint allows at a step. Bits past `len` are
/// always clear.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenSet {
    words: Vec<u32>,
    len: usize,
}

impl TokenSet {
    /// The empty set over ids `0..len`.
    pub fn new(len: usize) -> TokenSet {
        TokenSet {
            words: vec![0; len.div_ceil(32)],
            len,
        }
    }

    /// Ids `0..len`, every one allowed.
    pub fn full(len: usize) -> TokenSet {
        let mut s = TokenSet {
            words: vec![u32::MAX; len.div_ceil(32)],
            len,
        };
        s.clear_past_len();
        s
    }

    /// The ids the set is over (`0..len`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no id is allowed.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Makes the set one over `0..len` (its contents are then unspecified: overwrite them).
    pub fn resize(&mut self, len: usize) {
        if self.len != len {
            self.words.resize(len.div_ceil(32), 0);
            self.len = len;
            self.clear_past_len();
        }
    }

    /// The words, 32 ids each (the last one's bits past `len` clear).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Word `w`'s bits; 0 past the end.
    #[inline]
    pub fn word(&self, w: usize) -> u32 {
        self.words.get(w).copied().unwrap_or(0)
    }

    /// Overwrites the set with `words` (32 ids each, as [`TokenSet::words`]): ids past them are
    /// not allowed, bits past `len` are dropped.
    pub fn copy_from_words(&mut self, words: &[u32]) {
        let n = words.len().min(self.words.len());
        self.words[..n].copy_from_slice(&words[..n]);
        self.words[n..].fill(0);
        self.clear_past_len();
    }

    /// Whether `id` is allowed (false past `len`).
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.word(id as usize / 32) >> (id % 32) & 1 != 0
    }

    /// Allows or forbids `id`; ids past `len` are ignored.
    pub fn set(&mut self, id: u32, allowed: bool) {
        if (id as usize) < self.len {
            let (w, bit) = (id as usize / 32, 1u32 << (id % 32));
            if allowed {
                self.words[w] |= bit;
            } else {
                self.words[w] &= !bit;
            }
        }
    }

    /// How many ids are allowed.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                (b != 0).then(|| {
                    let i = b.trailing_zeros();
                    b &= b - 1;
                    w as u32 * 32 + i
                })
            })
        })
    }

    /// The dense form: −∞ into the logit of every id not allowed (every logit past `len` too).
    pub fn apply(&self, logits: &mut [f32]) {
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            match self.word(w) {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                bits => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if bits >> b & 1 == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }

    fn clear_past_len(&mut self) {
        if self.len % 32 != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u32 << (self.len % 32)) - 1;
            }
        }
    }
}

/// A token's log-probability, and the most likely alternatives at its step.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    /// ln p of the token under the softmax of the logits the sampler saw.
    pub logprob: f32,
    /// The `top` most likely tokens of the same distribution, most likely first (ties: the
    /// lower id first); fewer where fewer tokens are allowed.
    pub top: Vec<(u32, f32)>,
}

/// ln softmax(`logits`)[`token`] and the `top` most likely (id, ln p), from one pass.
pub fn log_probs(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    log_probs_in(logits, None, token, top)
}

/// [`log_probs`] of the logits with every token outside `allowed` at −∞ (where given), read
/// without writing them: the same sums in the same order (a forbidden token adds exp(−∞) = 0),
/// so the same figures.
pub fn log_probs_in(
    logits: &[f32],
    allowed: Option<&TokenSet>,
    token: u32,
    top: usize,
) -> TokenLogprob {
    let max = match allowed {
        None => crate::sampler::logits_max(logits),
        Some(_) => {
            let mut max = f32::NEG_INFINITY;
            each_allowed(logits, allowed, |_, l| max = if l > max { l } else { max });
            max
        }
    };
    let log_z = max as f64 + sum_exp(logits, allowed, max).ln();
    let lp = |id: u32| {
        let l = match allowed {
            Some(set) if !set.contains(id) => f32::NEG_INFINITY,
            _ => logits[id as usize],
        };
        (l as f64 - log_z) as f32
    };
    let mut best: Vec<u32> = Vec::with_capacity(top + 1);
    if top > 0 {
        // A partial selection: the vocabulary is 152k wide, the list a handful; once it is
        // full, a block of 32 whose every logit is at most its worst is passed over whole.
        for (w, chunk) in logits.chunks(32).enumerate() {
            let mut bits = allowed.map_or(u32::MAX, |set| set.word(w));
            if bits == 0 {
                continue;
            }
            if best.len() == top {
                let worst = logits[*best.last().unwrap() as usize];
                if let Ok(block) = <&[f32; 32]>::try_from(chunk) {
                    if block_at_most(block, worst) {
                        continue;
                    }
                }
            }
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let Some(&l) = chunk.get(i) else { break };
                // A token the constraint forbids is no alternative (and −∞ is not JSON).
                if l == f32::NEG_INFINITY
                    || best.len() == top && l <= logits[*best.last().unwrap() as usize]
                {
                    continue;
                }
                let at = best.partition_point(|&b| logits[b as usize] >= l);
                best.insert(at, (w * 32 + i) as u32);
                best.truncate(top);
            }
        }
    }
    TokenLogprob {
        token,
        logprob: lp(token),
        top: best.into_iter().map(|id| (id, lp(id))).collect(),
    }
}

/// Σ e^(l − max) over the logits of `allowed` (all where None), summed in eight f64 lanes by
/// position in each block of 32 (so a forbidden token, skipped or at −∞, adds nothing and the
/// set and its dense form sum alike), each term from [`exp_below_zero`]: libm's `exp`, one
/// call a token, took ~1 ms a step for 151,936 logits on the development VM
/// (serve/examples/host_cost --logprobs 5).
fn sum_exp(logits: &[f32], allowed: Option<&TokenSet>, max: f32) -> f64 {
    const BIT: [u32; 32] = {
        let mut b = [0u32; 32];
        let mut i = 0;
        while i < 32 {
            b[i] = 1 << i;
            i += 1;
        }
        b
    };
    let mut acc = [0f64; 8];
    for (w, chunk) in logits.chunks(32).enumerate() {
        let bits = allowed.map_or(u32::MAX, |set| set.word(w));
        if bits == 0 {
            continue;
        }
        if let Ok(block) = <&[f32; 32]>::try_from(chunk) {
            let mut e = [0f32; 32];
            for i in 0..32 {
                let v = exp_below_zero(block[i] - max);
                e[i] = if bits & BIT[i] != 0 { v } else { 0.0 };
            }
            for j in 0..8 {
                acc[j] += ((e[j] + e[j + 8]) + (e[j + 16] + e[j + 24])) as f64;
            }
        } else {
            for (i, &l) in chunk.iter().enumerate() {
                if bits & BIT[i] != 0 {
                    acc[i % 8] += exp_below_zero(l - max) as f64;
                }
            }
        }
    }
    acc.iter().sum()
}

/// Whether every logit of `block` is at most `worst` (or −∞), none NaN: eight lanes of maxima
/// and of sums (a NaN propagates through the sum), compared lane by lane.
#[inline]
fn block_at_most(block: &[f32; 32], worst: f32) -> bool {
    let mut max = [f32::NEG_INFINITY; 8];
    let mut sum = [0f32; 8];
    for part in block.chunks_exact(8) {
        for j in 0..8 {
            let l = part[j];
            max[j] = if l > max[j] { l } else { max[j] };
            sum[j] += l;
        }
    }
    let mut ok = 0u32;
    for j in 0..8 {
        ok += ((max[j] <= worst) & !sum[j].is_nan()) as u32;
    }
    ok == 8
}

/// e^x for x ≤ 0, within a few f32 ulps (x = n·ln 2 + r, |r| ≤ ln 2 / 2, a degree-7 Taylor
/// polynomial in r, 2^n from the exponent bits), in operations the compiler vectorizes; 0 below
/// f32's normal range (−∞ included), NaN for NaN.
#[inline(always)]
fn exp_below_zero(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4; // 355 / 512: n · LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let under = x < -87.0;
    let x = if under { -87.0 } else { x };
    let big = x * std::f32::consts::LOG2_E + ROUND;
    let n = big - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // `big`'s low mantissa bits hold n (1.5 · 2^23 + n): 2^n's exponent from them, with no
    // float-to-integer conversion (which kept the loop from vectorizing).
    let scale = f32::from_bits(
        big.to_bits()
            .wrapping_sub(ROUND.to_bits())
            .wrapping_add(127)
            << 23,
    );
    if under {
        0.0
    } else {
        p * scale
    }
}

/// `f(id, logit)` for every id in `allowed` (every id where None), ascending.
#[inline]
pub(crate) fn each_allowed(
    logits: &[f32],
    allowed: Option<&TokenSet>,
    mut f: impl FnMut(u32, f32),
) {
    match allowed {
        None => {
            for (id, &l) in logits.iter().enumerate() {
                f(id as u32, l);
            }
        }
        Some(set) => {
            for (w, chunk) in logits.chunks(32).enumerate() {
                let mut bits = set.word(w);
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if let Some(&l) = chunk.get(i) {
                        f((w * 32 + i) as u32, l);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probs_are_the_log_softmax_and_the_top_are_sorted() {
        // Closed form: logits ln(p) for p = 0.1, 0.2, 0.3, 0.4 give back ln p.
        let p = [0.1f32, 0.4, 0.2, 0.3];
        let logits: Vec<f32> = p.iter().map(|p| p.ln() + 5.0).collect();
        let t = log_probs(&logits, 2, 3);
        assert!((t.logprob - 0.2f32.ln()).abs() < 1e-6);
        let ids: Vec<u32> = t.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        for (id, lp) in t.top {
            assert!((lp - p[id as usize].ln()).abs() < 1e-6);
        }
        // A forbidden token has −∞; ties keep the lower id first.
        let t = log_probs(&[0.0, f32::NEG_INFINITY, 0.0], 1, 5);
        assert_eq!(t.logprob, f32::NEG_INFINITY);
        assert_eq!(t.top, vec![(0, 0.5f32.ln()), (2, 0.5f32.ln())]);
        assert_eq!(log_probs(&[1.0, 2.0], 0, 0).top, vec![]);
    }

    /// At a 152k vocabulary, against log-softmax computed directly with libm's f64 exp.
    #[test]
    fn log_probs_over_qwens_vocabulary_size_are_the_direct_log_softmax() {
        let n = 151_936;
        let logits: Vec<f32> = (0..n)
            .map(|i| ((i as u64 * 2_654_435_761) % 10_007) as f32 / 700.0 - 7.0)
            .collect();
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_z = max
            + logits
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        for token in [0u32, 77, 151_935] {
            let t = log_probs(&logits, token, 3);
            let direct = logits[token as usize] as f64 - log_z;
            assert!((t.logprob as f64 - direct).abs() < 1e-6, "{token}");
            for (id, lp) in t.top {
                assert!((lp as f64 - (logits[id as usize] as f64 - log_z)).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn exp_below_zero_is_exp_to_a_few_ulps() {
        let mut x = 0f32;
        while x > -90.0 {
            let want = (x as f64).exp();
            let got = exp_below_zero(x) as f64;
            if x >= -87.0 {
                assert!((got - want).abs() <= 4e-7 * want, "{x}: {got} vs {want}");
            } else {
                assert_eq!(got, 0.0, "{x}");
            }
            x -= 0.001_37;
        }
        assert_eq!(exp_below_zero(0.0), 1.0);
        assert_eq!(exp_below_zero(-0.0), 1.0);
        assert_eq!(exp_below_zero(f32::NEG_INFINITY), 0.0);
        assert!(exp_below_zero(f32::NAN).is_nan());
    }

    #[test]
    fn a_token_set_holds_its_ids_and_nothing_past_its_length() {
        let mut s = TokenSet::new(70);
        assert!(s.is_empty());
        for id in [0, 31, 32, 69, 70, 1000] {
            s.set(id, true);
        }
        assert_eq!(s.ids().collect::<Vec<_>>(), vec![0, 31, 32, 69]);
        assert_eq!(s.count(), 4);
        assert!(s.contains(69) && !s.contains(70) && !s.contains(5000));
        s.set(31, false);
        assert_eq!(s.words(), &[1, 1, 1 << 5]);
        // Words copied in: fewer forbid the rest, bits past the length are dropped.
        s.copy_from_words(&[u32::MAX, 2]);
        assert_eq!(s.words(), &[u32::MAX, 2, 0]);
        s.copy_from_words(&[0, 0, u32::MAX, u32::MAX]);
        assert_eq!(s.ids().collect::<Vec<_>>(), (64..70).collect::<Vec<_>>());
        assert_eq!(TokenSet::full(70).count(), 70);
        s.resize(33);
        assert!(s.words().len() == 2 && s.len() == 33);
        // The dense form: −∞ outside, every logit past the set's ids too.
        let mut set = TokenSet::new(40);
        set.set(1, true);
        set.set(35, true);
        let mut logits = vec![1.0f32; 45];
        set.apply(&mut logits);
        for (id, l) in logits.iter().enumerate() {
            assert_eq!(*l == 1.0, id == 1 || id == 35, "{id}");
        }
    }

    /// Log-probabilities among a set: bit for bit those of the logits with −∞ written outside
    /// it, and a direct log-softmax over the allowed ids to 1e-6.
    #[test]
    fn log_probs_among_a_set_are_those_of_the_masked_logits() {
        let n = 1000;
        let logits: Vec<f32> = (0..n).map(|i| ((i * 7919) % 613) as f32 / 61.0).collect();
        for every in [1usize, 3, 97, 400] {
            let mut set = TokenSet::new(n);
            (0..n).step_by(every).for_each(|i| set.set(i as u32, true));
            let mut dense = logits.clone();
            set.apply(&mut dense);
            let token = set.ids().nth(1).unwrap();
            let got = log_probs_in(&logits, Some(&set), token, 5);
            assert_eq!(got, log_probs(&dense, token, 5), "every {every}");
            let z: f64 = set
                .ids()
                .map(|i| (logits[i as usize] as f64).exp())
                .sum::<f64>()
                .ln();
            let direct = logits[token as usize] as f64 - z;
            assert!((got.logprob as f64 - direct).abs() < 1e-6, "every {every}");
            for (id, lp) in &got.top {
                assert!(set.contains(*id));
                assert!((*lp as f64 - (logits[*id as usize] as f64 - z)).abs() < 1e-6);
            }
            // A token outside the set has probability 0.
            let outside = (0..n as u32).find(|&i| !set.contains(i));
            if let Some(t) = outside {
                let lp = log_probs_in(&logits, Some(&set), t, 0).logprob;
                assert_eq!(lp, f32::NEG_INFINITY);
            }
        }
    }
}
