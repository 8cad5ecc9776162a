//! What generation runs on: anything that takes tokens at the next positions and returns the
//! last one's logits. The CPU reference implements it here; the GPU executor in the `rocky`
//! binary, so this crate needs no device code.

use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{CpuSession, ReferenceOptions};

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
}

/// The CPU reference forward pass with a context limit (the reference's own cache grows
/// without one; the limit makes it behave as the GPU's fixed cache does).
pub struct CpuEvaluator<'a> {
    file: &'a GgufFile,
    model: &'a Model,
    options: ReferenceOptions,
    session: CpuSession<'a>,
    n_ctx: usize,
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
        }
    }
}

impl Evaluator for CpuEvaluator<'_> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
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
}
