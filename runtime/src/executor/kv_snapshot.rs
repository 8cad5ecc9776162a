//! Copies of the KV cache's first positions, so a server can keep several conversations:
//! the live one stays in the executor's cache, the others wait in snapshots and are copied
//! back when their next turn comes (prefix reuse for an agent that alternates between them).
//!
//! Each layer's K and V caches are `n_ctx × kv_width` rows of packed f16, position-major, so
//! the first `n` positions are one contiguous span per cache: a snapshot is one device buffer
//! holding those spans one after the other, made and restored with device copies in one
//! submission (no host round trip).

use super::{ExecError, Executor};
use crate::buffer::Buffer;

/// The K and V of positions `0..n_past` of every layer, in device memory.
pub struct KvSnapshot {
    buffer: Buffer,
    n_past: usize,
    /// Bytes of one layer's K (or V) span.
    span: u64,
}

impl KvSnapshot {
    /// Positions it holds.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Device memory it takes.
    pub fn bytes(&self) -> u64 {
        self.buffer.size()
    }
}

impl Executor<'_> {
    /// Bytes of K and V per cached position, all layers (what a snapshot of n positions costs
    /// is n times this).
    pub fn kv_bytes_per_position(&self) -> u64 {
        let cfg = &self.model.config;
        (cfg.n_layer * 2 * cfg.n_head_kv * cfg.head_dim * 2) as u64
    }

    /// Copies the cached positions `0..n_past()` into a new device buffer. The cache itself is
    /// unchanged. `None` when the cache is empty (nothing worth keeping).
    pub fn snapshot_kv(&self) -> Result<Option<KvSnapshot>, ExecError> {
        if self.n_past == 0 {
            return Ok(None);
        }
        let span = self.kv_span(self.n_past);
        let total = span * 2 * self.kv.len() as u64;
        let buffer = Buffer::new(&self.ctx, total, "KV snapshot")?;
        let spans: Vec<_> = self
            .kv
            .iter()
            .flat_map(|(k, v)| [k, v])
            .enumerate()
            .map(|(i, cache)| (cache, 0, &buffer, i as u64 * span, span))
            .collect();
        Buffer::copy_spans(&spans)?;
        Ok(Some(KvSnapshot {
            buffer,
            n_past: self.n_past,
            span,
        }))
    }

    /// Replaces the cache by the first `n` positions of `snapshot` (at most all of them): the
    /// next prefill continues at position `n`. The snapshot must come from an executor of the
    /// same model; it stays valid and may be restored again.
    pub fn restore_kv(&mut self, snapshot: &KvSnapshot, n: usize) -> Result<(), ExecError> {
        if snapshot.span != self.kv_span(snapshot.n_past) || snapshot.n_past > self.n_ctx {
            return Err(ExecError::Unsupported(format!(
                "a KV snapshot of {} positions ({} bytes per layer) does not fit this \
                 executor's cache ({} positions of {} bytes): restore snapshots only into \
                 executors of the model that made them",
                snapshot.n_past,
                snapshot.span,
                self.n_ctx,
                self.kv_span(1)
            )));
        }
        let n = n.min(snapshot.n_past);
        let bytes = self.kv_span(n);
        let spans: Vec<_> = self
            .kv
            .iter()
            .flat_map(|(k, v)| [k, v])
            .enumerate()
            .map(|(i, cache)| (&snapshot.buffer, i as u64 * snapshot.span, cache, 0, bytes))
            .collect();
        // Unknown contents if the copy fails midway: forget everything first.
        self.n_past = 0;
        Buffer::copy_spans(&spans)?;
        self.n_past = n;
        Ok(())
    }

    /// Bytes of positions `0..n` in one layer's K (or V) cache.
    fn kv_span(&self, n: usize) -> u64 {
        let cfg = &self.model.config;
        (n * cfg.n_head_kv * cfg.head_dim * 2) as u64
    }
}
