//! What generation runs on: anything that takes tokens at the next positions and returns the
//! last one's logits. The CPU reference implements it here; the GPU session in rocky-engine,
//! so this crate needs no device code.

use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{CpuSession, ReferenceOptions};
use std::cell::Cell;
use std::rc::Rc;

/// An evaluation failure, with the evaluator's own message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

pub trait Evaluator {
    /// Runs `tokens` at positions `n_past()..` and returns the logits of the last one. The
    /// tokens stay in the KV cache.
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError>;

    /// One token at the next position (the decode step). Evaluators with a faster path for a
    /// single row override this.
    fn decode(&mut self, token: u32) -> Result<Vec<f32>, EvalError> {
        self.eval(&[token])
    }

    /// Greedy decoding where the evaluator picks the tokens itself (on the device, without
    /// reading the logits back): runs `token` at the next position, then each token it picks
    /// (the first largest logit, as [`crate::sampler::argmax`]), calling `on_pick` with each
    /// pick until it returns false or `max_steps` steps ran. Returns the steps run (their
    /// tokens stay in the cache), or `Ok(None)` where the evaluator has no such path and
    /// nothing ran (the default): the caller then decodes step by step.
    fn decode_greedy(
        &mut self,
        token: u32,
        max_steps: usize,
        on_pick: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Option<usize>, EvalError> {
        let _ = (token, max_steps, on_pick);
        Ok(None)
    }

    /// Positions in the KV cache.
    fn n_past(&self) -> usize;

    /// Positions the KV cache can hold.
    fn n_ctx(&self) -> usize;

    /// Empties the KV cache: the next `eval` starts at position 0.
    fn reset(&mut self);

    /// Keeps the first `n_past` positions of the KV cache and forgets the rest, so the next
    /// `eval` starts there (prefix reuse: a prompt that shares its start with what is cached
    /// evaluates only the rest). Returns false where this evaluator cannot rewind; it is then
    /// reset instead, and the caller must evaluate from position 0.
    fn truncate(&mut self, n_past: usize) -> bool {
        self.reset();
        n_past == 0
    }

    /// Takes a copy of the cached positions `0..n_past()` (a server keeping several
    /// conversations: the others wait in snapshots). Afterwards the evaluator holds either the
    /// same positions or none (`n_past()` says which: the CPU reference moves its cache out
    /// rather than copy it). `Ok(None)`: this evaluator keeps no snapshots, or the cache is
    /// empty.
    fn snapshot(&mut self) -> Result<Option<KvSnapshot>, EvalError> {
        Ok(None)
    }

    /// Makes the first `n` positions of `snapshot` the cache (at most all it holds): the next
    /// `eval` continues there. `snapshot` must come from this evaluator.
    fn restore(&mut self, snapshot: KvSnapshot, n: usize) -> Result<(), EvalError> {
        let _ = (snapshot, n);
        Err(EvalError("this evaluator keeps no KV snapshots".into()))
    }
}

/// A saved KV cache of some evaluator, opaque to everyone but that evaluator.
pub struct KvSnapshot {
    /// Positions it holds.
    pub n_past: usize,
    /// Memory it takes (what bounds how many a server keeps).
    pub bytes: u64,
    /// The evaluator's own saved state.
    pub state: Box<dyn std::any::Any>,
}

impl std::fmt::Debug for KvSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvSnapshot")
            .field("n_past", &self.n_past)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// The CPU reference forward pass with a context limit (the reference's own cache grows
/// without one; the limit makes it behave as the GPU's fixed cache does).
pub struct CpuEvaluator<'a> {
    file: &'a GgufFile,
    model: &'a Model,
    options: ReferenceOptions,
    session: CpuSession<'a>,
    n_ctx: usize,
    /// Sessions moved out by `snapshot`, by ticket, with whether their ticket still exists.
    stored: Vec<(u64, Rc<Cell<bool>>, CpuSession<'a>)>,
    next_ticket: u64,
}

/// What a CPU snapshot holds: the number of a session in the evaluator's store. Dropping it
/// (a server evicting the conversation) frees the session at the evaluator's next call.
struct CpuTicket {
    id: u64,
    held: Rc<Cell<bool>>,
}

impl Drop for CpuTicket {
    fn drop(&mut self) {
        self.held.set(false);
    }
}

impl<'a> CpuEvaluator<'a> {
    pub fn new(
        file: &'a GgufFile,
        model: &'a Model,
        options: ReferenceOptions,
        n_ctx: usize,
    ) -> CpuEvaluator<'a> {
        CpuEvaluator {
            file,
            model,
            options,
            session: CpuSession::new(file, model, options),
            n_ctx,
            stored: Vec::new(),
            next_ticket: 0,
        }
    }

    /// Frees the stored sessions whose snapshots were dropped.
    fn sweep(&mut self) {
        self.stored.retain(|(_, held, _)| held.get());
    }
}

impl Evaluator for CpuEvaluator<'_> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
        self.sweep();
        let n = self.session.n_past() + tokens.len();
        if n > self.n_ctx {
            return Err(EvalError(format!(
                "{n} tokens do not fit the {}-position context",
                self.n_ctx
            )));
        }
        self.session
            .eval(tokens)
            .map_err(|e| EvalError(e.to_string()))
    }

    fn n_past(&self) -> usize {
        self.session.n_past()
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn reset(&mut self) {
        self.session = CpuSession::new(self.file, self.model, self.options);
    }

    fn truncate(&mut self, n_past: usize) -> bool {
        self.session.truncate(n_past);
        true
    }

    /// Moves the session into the evaluator's store (its cache is host memory: a move costs
    /// nothing, a copy would double it) and starts a fresh one; the snapshot is a ticket to it.
    fn snapshot(&mut self) -> Result<Option<KvSnapshot>, EvalError> {
        self.sweep();
        let n_past = self.session.n_past();
        if n_past == 0 {
            return Ok(None);
        }
        let cfg = &self.model.config;
        let bytes = (n_past * cfg.n_layer * 2 * cfg.n_head_kv * cfg.head_dim * 4) as u64;
        let fresh = CpuSession::new(self.file, self.model, self.options);
        let session = std::mem::replace(&mut self.session, fresh);
        self.next_ticket += 1;
        let ticket = CpuTicket {
            id: self.next_ticket,
            held: Rc::new(Cell::new(true)),
        };
        self.stored.push((ticket.id, ticket.held.clone(), session));
        Ok(Some(KvSnapshot {
            n_past,
            bytes,
            state: Box::new(ticket),
        }))
    }

    fn restore(&mut self, snapshot: KvSnapshot, n: usize) -> Result<(), EvalError> {
        let ticket = snapshot
            .state
            .downcast::<CpuTicket>()
            .map_err(|_| EvalError("a KV snapshot from another kind of evaluator".into()))?;
        let at = self
            .stored
            .iter()
            .position(|(id, ..)| *id == ticket.id)
            .ok_or_else(|| EvalError("a KV snapshot from another evaluator".into()))?;
        let (.., session) = self.stored.swap_remove(at);
        self.session = session;
        self.session.truncate(n);
        Ok(())
    }
}
