//! Several conversations' KV caches, so an agent alternating between two or three of them
//! gets prefix reuse for each: the live one sits in the evaluator's cache, the others in
//! snapshots (device copies on the GPU), least recently used first out when a bound is hit
//! (`--cache-slots` snapshots, `--cache-mib` of memory).
//!
//! Per request, the worker asks [`Conversations::prepare`] for the evaluator state to run
//! the prompt on: the live conversation when it matches best, else the snapshot sharing the
//! longest start with the prompt (the live one is saved first). A prompt that shares less
//! than half of the live conversation is another conversation: the live one is saved before
//! it is overwritten (llama.cpp's server picks slots by the same half-similarity rule).

use crate::prefix::CachedTokens;
use rocky_generate::{Evaluator, KvSnapshot};
use std::collections::VecDeque;

/// How many conversations to keep besides the live one, and in how much memory.
#[derive(Clone, Copy, Debug)]
pub struct CacheBounds {
    /// Snapshots kept (0: only the live conversation is reused).
    pub slots: usize,
    /// Their memory together, bytes.
    pub max_bytes: u64,
}

struct Saved {
    ids: CachedTokens,
    snapshot: KvSnapshot,
}

pub struct Conversations {
    bounds: CacheBounds,
    /// The token ids whose K and V the evaluator's cache holds.
    live: CachedTokens,
    /// Oldest (least recently used) first.
    saved: VecDeque<Saved>,
}

impl Conversations {
    pub fn new(bounds: CacheBounds) -> Conversations {
        Conversations {
            bounds,
            live: CachedTokens::default(),
            saved: VecDeque::new(),
        }
    }

    /// Makes the evaluator's cache hold the best cached start of `prompt` and returns its
    /// length (what generation may reuse). Until `finish` is called, the live conversation is
    /// unknown (a failed generation leaves nothing reusable).
    pub fn prepare(&mut self, evaluator: &mut dyn Evaluator, prompt: &[u32]) -> usize {
        let live = self.live.common_prefix(prompt);
        let best = self
            .saved
            .iter()
            .enumerate()
            .map(|(i, s)| (s.ids.common_prefix(prompt), i))
            .max_by_key(|&(n, i)| (n, i));
        let reuse = match best {
            Some((n, i)) if n > live => {
                let entry = self.saved.remove(i).expect("index from the iteration");
                self.save_live(evaluator);
                match evaluator.restore(entry.snapshot, n) {
                    Ok(()) => {
                        eprintln!(
                            "cache: restored a conversation of {} tokens, reusing {n}",
                            entry.ids.len()
                        );
                        n
                    }
                    Err(e) => {
                        eprintln!(
                            "cache: cannot restore a saved conversation ({e}); starting over"
                        );
                        evaluator.reset();
                        0
                    }
                }
            }
            _ => {
                if live * 2 < self.live.len() {
                    self.save_live(evaluator);
                }
                // The CPU reference moves its cache into the snapshot.
                live.min(evaluator.n_past())
            }
        };
        self.live.clear();
        reuse
    }

    /// After a generation that ended well: the cache holds the first `n_past` of the prompt
    /// followed by the generated tokens.
    pub fn finish(&mut self, prompt: &[u32], generated: &[u32], n_past: usize) {
        self.live.set(prompt, generated, n_past);
    }

    /// Conversations kept in snapshots, and their memory.
    pub fn saved(&self) -> (usize, u64) {
        (self.saved.len(), self.saved_bytes())
    }

    fn saved_bytes(&self) -> u64 {
        self.saved.iter().map(|s| s.snapshot.bytes).sum()
    }

    /// Moves the live conversation into a snapshot, dropping the least recently used ones
    /// until the bounds hold.
    fn save_live(&mut self, evaluator: &mut dyn Evaluator) {
        if self.live.is_empty() || self.bounds.slots == 0 {
            return;
        }
        let snapshot = match evaluator.snapshot() {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                eprintln!("cache: cannot save the conversation ({e}); it will be evaluated again");
                return;
            }
        };
        if snapshot.bytes > self.bounds.max_bytes {
            eprintln!(
                "cache: a conversation of {} tokens needs {} bytes, more than --cache-mib allows; not kept",
                self.live.len(),
                snapshot.bytes
            );
            return;
        }
        while self.saved.len() >= self.bounds.slots
            || self.saved_bytes() + snapshot.bytes > self.bounds.max_bytes
        {
            let old = self
                .saved
                .pop_front()
                .expect("bounds hold for an empty list");
            eprintln!(
                "cache: evicted the least recently used conversation ({} tokens, {} bytes)",
                old.ids.len(),
                old.snapshot.bytes
            );
        }
        self.saved.push_back(Saved {
            ids: std::mem::take(&mut self.live),
            snapshot,
        });
        let (n, bytes) = self.saved();
        eprintln!("cache: saved a conversation; {n} kept in {bytes} bytes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_generate::EvalError;

    /// An evaluator whose cache is the list of its tokens; snapshots copy it (as the GPU's
    /// do) or move it out (as the CPU reference's do). 4 bytes per position.
    struct Tape {
        past: Vec<u32>,
        moves: bool,
    }

    impl Evaluator for Tape {
        fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
            self.past.extend_from_slice(tokens);
            Ok(vec![0.0])
        }
        fn n_past(&self) -> usize {
            self.past.len()
        }
        fn n_ctx(&self) -> usize {
            1000
        }
        fn reset(&mut self) {
            self.past.clear();
        }
        fn truncate(&mut self, n_past: usize) -> bool {
            self.past.truncate(n_past);
            true
        }
        fn snapshot(&mut self) -> Result<Option<KvSnapshot>, EvalError> {
            let past = match self.moves {
                true => std::mem::take(&mut self.past),
                false => self.past.clone(),
            };
            Ok(Some(KvSnapshot {
                n_past: past.len(),
                bytes: 4 * past.len() as u64,
                state: Box::new(past),
            }))
        }
        fn restore(&mut self, snapshot: KvSnapshot, n: usize) -> Result<(), EvalError> {
            let mut past = *snapshot.state.downcast::<Vec<u32>>().unwrap();
            past.truncate(n);
            self.past = past;
            Ok(())
        }
    }

    /// One served turn: prepare, check the evaluator holds exactly the reused start, then
    /// "generate" (evaluate the rest) and finish. Returns the reused count.
    fn turn(c: &mut Conversations, ev: &mut Tape, prompt: &[u32]) -> usize {
        let reuse = c.prepare(ev, prompt);
        ev.truncate(reuse);
        assert_eq!(ev.past, prompt[..reuse], "the cache holds the reused start");
        ev.eval(&prompt[reuse..]).unwrap();
        c.finish(prompt, &[], ev.n_past());
        reuse
    }

    fn conv(first: u32, n: usize) -> Vec<u32> {
        (0..n as u32).map(|i| first * 1000 + i).collect()
    }

    #[test]
    fn interleaved_conversations_each_reuse_their_own_start() {
        for moves in [false, true] {
            let mut ev = Tape {
                past: Vec::new(),
                moves,
            };
            let bounds = CacheBounds {
                slots: 2,
                max_bytes: 1 << 20,
            };
            let mut c = Conversations::new(bounds);
            let (a, b) = (conv(1, 20), conv(2, 30));
            assert_eq!(turn(&mut c, &mut ev, &a[..10]), 0);
            assert_eq!(turn(&mut c, &mut ev, &b[..10]), 0);
            assert_eq!(turn(&mut c, &mut ev, &a), 10, "moves {moves}");
            assert_eq!(turn(&mut c, &mut ev, &b), 10, "moves {moves}");
            assert_eq!(turn(&mut c, &mut ev, &a), 20, "moves {moves}");
        }
    }

    #[test]
    fn the_least_recently_used_goes_first_when_a_bound_is_hit() {
        // Slot bound: three conversations besides the live one do not fit two slots.
        let mut ev = Tape {
            past: Vec::new(),
            moves: false,
        };
        let mut c = Conversations::new(CacheBounds {
            slots: 2,
            max_bytes: 1 << 20,
        });
        let convs: Vec<_> = (1..=4).map(|i| conv(i, 10)).collect();
        for p in &convs {
            assert_eq!(turn(&mut c, &mut ev, p), 0);
        }
        // Saved: 2 and 3 (1 was evicted when 3 was saved); 4 is live.
        assert_eq!(c.saved().0, 2);
        assert_eq!(turn(&mut c, &mut ev, &convs[0]), 0, "evicted");
        assert_eq!(turn(&mut c, &mut ev, &convs[2]), 10, "kept");

        // Memory bound: 10 positions take 40 bytes; 100 bytes keep two of them.
        let mut c = Conversations::new(CacheBounds {
            slots: 8,
            max_bytes: 100,
        });
        for p in &convs {
            turn(&mut c, &mut ev, p);
        }
        assert_eq!(c.saved(), (2, 80));
        // Saved: 2 and 3; the turn of 1 saves 4 and evicts 2.
        assert_eq!(turn(&mut c, &mut ev, &convs[0]), 0, "evicted");
        assert_eq!(turn(&mut c, &mut ev, &convs[2]), 10, "kept");
        assert_eq!(turn(&mut c, &mut ev, &convs[1]), 0, "evicted");
        // A conversation larger than the whole bound is not kept at all.
        let mut c = Conversations::new(CacheBounds {
            slots: 8,
            max_bytes: 100,
        });
        let long = conv(9, 30);
        turn(&mut c, &mut ev, &long);
        turn(&mut c, &mut ev, &convs[0]);
        assert_eq!(c.saved(), (0, 0), "30 positions take 120 bytes");
        assert_eq!(turn(&mut c, &mut ev, &long), 0);
    }

    #[test]
    fn the_next_turn_of_the_live_conversation_saves_nothing() {
        let mut ev = Tape {
            past: Vec::new(),
            moves: true,
        };
        let mut c = Conversations::new(CacheBounds {
            slots: 2,
            max_bytes: 1 << 20,
        });
        let a = conv(1, 30);
        turn(&mut c, &mut ev, &a[..10]);
        assert_eq!(turn(&mut c, &mut ev, &a[..20]), 10);
        assert_eq!(turn(&mut c, &mut ev, &a), 20);
        assert_eq!(c.saved().0, 0);
    }
}
