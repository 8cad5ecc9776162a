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
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |id: u32| (logits[id as usize] as f64 - log_z) as f32;
    let mut best: Vec<u32> = Vec::with_capacity(top + 1);
    if top > 0 {
        // A partial selection: the vocabulary is 152k wide, the list a handful.
        for id in 0..logits.len() as u32 {
            let l = logits[id as usize];
            // A token the constraint forbids is no alternative (and −∞ is not JSON).
            if l == f32::NEG_INFINITY
                || best.len() == top && l <= logits[*best.last().unwrap() as usize]
            {
                continue;
            }
            let at = best.partition_point(|&b| logits[b as usize] >= l);
            best.insert(at, id);
            best.truncate(top);
        }
    }
    TokenLogprob {
        token,
        logprob: lp(token),
        top: best.into_iter().map(|id| (id, lp(id))).collect(),
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
}
