//! What generation needs of the executor beyond the prefill: the cache position, and one
//! token at a time with kernels built for one row.
//!
//! Kept apart from the prefill's recording code: the decode step is a prefill of one token
//! whose pipelines are prepared at m = 1, so the default rule picks the small-M GEMM schedules
//! (a prefill's ubatch-sized tiles would compute 63 of 64 rows for nothing), and tuned ones
//! where the database has them for m = 1.

use super::{ExecError, Executor, ScheduleSource};

impl Executor<'_> {
    /// Positions in the KV cache: the next token goes to this position.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Positions the KV cache holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Forgets the positions from `n_past` on, so the next prefill starts there (prefix reuse
    /// by a server: a prompt sharing its start with the cached tokens prefills only the rest).
    /// Nothing needs clearing: a prefill writes its own positions' K and V before attention
    /// reads them, and attention reads no position past the row's own (`max_kv = pos0 + rows`).
    pub fn truncate(&mut self, n_past: usize) {
        self.n_past = self.n_past.min(n_past);
    }

    /// Runs `token` at position `n_past()` and returns its logits; the token stays in the
    /// cache. The pipelines are prepared for one row for the step (the executor's ubatch is
    /// restored after it, and the next `prefill` prepares its own again).
    pub fn decode(
        &mut self,
        token: u32,
        schedules: &dyn ScheduleSource,
    ) -> Result<Vec<f32>, ExecError> {
        let ubatch = self.options.ubatch;
        self.options.ubatch = 1;
        let result = self.prefill(&[token], schedules);
        self.options.ubatch = ubatch;
        result
    }
}

impl Executor<'_> {
    /// Builds the one-row pipelines of [`Executor::decode`] ahead, so the first decode step
    /// is not timed with pipeline compilation in it.
    pub fn prepare_decode(&mut self, schedules: &dyn ScheduleSource) -> Result<(), ExecError> {
        let ubatch = self.options.ubatch;
        self.options.ubatch = 1;
        let result = self.prepare(schedules);
        self.options.ubatch = ubatch;
        result
    }
}
