//! Which tokens' keys and values the evaluator's cache holds, so a request that starts the
//! same way (the next turn of an agent's conversation) evaluates only what is new.

/// The token ids at positions 0.. of the cache, in order.
#[derive(Clone, Debug, Default)]
pub struct CachedTokens {
    ids: Vec<u32>,
}

impl CachedTokens {
    /// How many of `prompt`'s first tokens are in the cache already.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        self.ids
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// After a generation: the cache holds the first `n_past` of the prompt followed by the
    /// generated tokens (the last generated token was sampled but never evaluated, so
    /// `n_past` may be one short of all of them).
    pub fn set(&mut self, prompt: &[u32], generated: &[u32], n_past: usize) {
        self.ids.clear();
        self.ids.extend(prompt.iter().chain(generated).take(n_past));
    }

    /// Nothing is known about the cache (after a failure): no reuse.
    pub fn clear(&mut self) {
        self.ids.clear();
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_prefix_stops_at_the_first_difference() {
        let mut c = CachedTokens::default();
        assert_eq!(c.common_prefix(&[1, 2]), 0);
        c.set(&[1, 2, 3], &[4, 5], 4);
        assert_eq!(c.len(), 4);
        assert_eq!(c.common_prefix(&[1, 2, 3, 4, 9]), 4);
        assert_eq!(c.common_prefix(&[1, 2, 7]), 2);
        assert_eq!(c.common_prefix(&[1, 2]), 2);
        c.clear();
        assert_eq!(c.common_prefix(&[1]), 0);
    }
}
