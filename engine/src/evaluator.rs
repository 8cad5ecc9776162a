//! The session as rocky-generate's [`Evaluator`]: what lets the generation loop (and
//! `rocky serve`'s prefix reuse and conversation snapshots) run on the GPU.

use crate::session::Session;
use rocky_generate::{EvalError, Evaluator, KvSnapshot};

impl Evaluator for Session<'_> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
        self.prefill(tokens).map_err(|e| EvalError(e.to_string()))
    }
    fn decode(&mut self, token: u32) -> Result<Vec<f32>, EvalError> {
        Session::decode(self, token).map_err(|e| EvalError(e.to_string()))
    }
    fn decode_greedy(
        &mut self,
        token: u32,
        max_steps: usize,
        on_pick: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Option<usize>, EvalError> {
        Session::decode_greedy(self, token, max_steps, on_pick)
            .map_err(|e| EvalError(e.to_string()))
    }
    fn n_past(&self) -> usize {
        Session::n_past(self)
    }
    fn n_ctx(&self) -> usize {
        Session::n_ctx(self)
    }
    fn reset(&mut self) {
        Session::reset(self)
    }
    fn truncate(&mut self, n_past: usize) -> bool {
        Session::truncate(self, n_past);
        true
    }
    fn snapshot(&mut self) -> Result<Option<KvSnapshot>, EvalError> {
        let snapshot = self.snapshot_kv().map_err(|e| EvalError(e.to_string()))?;
        Ok(snapshot.map(|s| KvSnapshot {
            n_past: s.n_past(),
            bytes: s.bytes(),
            state: Box::new(s),
        }))
    }
    fn restore(&mut self, snapshot: KvSnapshot, n: usize) -> Result<(), EvalError> {
        let saved = snapshot
            .state
            .downcast::<rocky_runtime::executor::KvSnapshot>()
            .map_err(|_| EvalError("a KV snapshot from another kind of evaluator".into()))?;
        self.restore_kv(&saved, n)
            .map_err(|e| EvalError(e.to_string()))
    }
}
