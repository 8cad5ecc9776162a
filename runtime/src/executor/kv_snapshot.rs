//! Copies of the KV cache's first positions, so a server can keep several conversations:
//! the live one stays in the executor's cache, the others wait in snapshots and are copied
//! back when their next turn comes (prefix reuse for an agent that alternates between them).
//!
//! Each layer's K and V caches are `n_ctx` positions of `kv_width` values in their types
//! (`rocky_compiler::kv_type`), position-major, so the first `n` positions are one contiguous
//! span per cache: a snapshot is one device buffer holding those spans one after the other
//! (K then V of each layer), made and restored with device copies in one submission (no host
//! round trip). It holds the cache's bytes as they are, so it restores only into a cache of
//! the same types.

use super::{ExecError, Executor};
use crate::buffer::Buffer;
use rocky_compiler::KvTypes;

/// The K and V of positions `0..n_past` of every layer, in device memory.
pub struct KvSnapshot {
    buffer: Buffer,
    n_past: usize,
    /// The cache types it was taken in.
    kv: KvTypes,
    /// Whether that cache was Hadamard-rotated (`ExecutorOptions::kv_rotation`): a rotated
    /// q8_0 cache holds other values than an unrotated one of the same bytes.
    rotated: bool,
    /// Bytes of one layer's K span and V span.
    spans: (u64, u64),
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
    /// Bytes of K and V per cached position, all layers, in this executor's cache types (what
    /// a snapshot of n positions costs is n times this).
    pub fn kv_bytes_per_position(&self) -> u64 {
        self.model.config.kv_bytes_per_position(self.options.kv)
    }

    /// The cache's types.
    pub fn kv_types(&self) -> KvTypes {
        self.options.kv
    }

    /// Copies the cached positions `0..n_past()` into a new device buffer. The cache itself is
    /// unchanged. `None` when the cache is empty (nothing worth keeping).
    pub fn snapshot_kv(&self) -> Result<Option<KvSnapshot>, ExecError> {
        if self.n_past == 0 {
            return Ok(None);
        }
        let (k_span, v_span) = self.kv_span(self.n_past);
        let layer = k_span + v_span;
        let total = layer * self.kv.len() as u64;
        let buffer = Buffer::new(&self.ctx, total, "KV snapshot")?;
        let spans: Vec<_> = self
            .kv
            .iter()
            .enumerate()
            .flat_map(|(l, (k, v))| {
                let at = l as u64 * layer;
                [
                    (k, 0, &buffer, at, k_span),
                    (v, 0, &buffer, at + k_span, v_span),
                ]
            })
            .collect();
        Buffer::copy_spans(&spans)?;
        Ok(Some(KvSnapshot {
            buffer,
            n_past: self.n_past,
            kv: self.options.kv,
            rotated: self.options.kv_rotation,
            spans: (k_span, v_span),
        }))
    }

    /// Replaces the cache by the first `n` positions of `snapshot` (at most all of them): the
    /// next prefill continues at position `n`. The snapshot must come from an executor of the
    /// same model; it stays valid and may be restored again.
    pub fn restore_kv(&mut self, snapshot: &KvSnapshot, n: usize) -> Result<(), ExecError> {
        if snapshot.kv != self.options.kv {
            return Err(ExecError::Unsupported(format!(
                "a KV snapshot of a {} cache cannot be restored into this executor's {} \
                 cache: restore snapshots only into executors with the cache types that made \
                 them",
                snapshot.kv, self.options.kv
            )));
        }
        if snapshot.rotated != self.options.kv_rotation {
            return Err(ExecError::Unsupported(
                "a KV snapshot taken with the Hadamard KV rotation on (off) cannot be restored \
                 into an executor with it off (on): the rotated cache holds other values"
                    .into(),
            ));
        }
        if snapshot.spans != self.kv_span(snapshot.n_past) || snapshot.n_past > self.n_ctx {
            let (k1, v1) = self.kv_span(1);
            return Err(ExecError::Unsupported(format!(
                "a KV snapshot of {} positions ({} bytes per layer) does not fit this \
                 executor's cache ({} positions of {} bytes): restore snapshots only into \
                 executors of the model that made them",
                snapshot.n_past,
                snapshot.spans.0 + snapshot.spans.1,
                self.n_ctx,
                k1 + v1
            )));
        }
        let n = n.min(snapshot.n_past);
        let (k_bytes, v_bytes) = self.kv_span(n);
        let layer = snapshot.spans.0 + snapshot.spans.1;
        let spans: Vec<_> = self
            .kv
            .iter()
            .enumerate()
            .flat_map(|(l, (k, v))| {
                let at = l as u64 * layer;
                [
                    (&snapshot.buffer, at, k, 0, k_bytes),
                    (&snapshot.buffer, at + snapshot.spans.0, v, 0, v_bytes),
                ]
            })
            .collect();
        // Unknown contents if the copy fails midway: forget everything first.
        self.n_past = 0;
        Buffer::copy_spans(&spans)?;
        self.n_past = n;
        Ok(())
    }

    /// Bytes of positions `0..n` in one layer's K cache and in its V cache.
    fn kv_span(&self, n: usize) -> (u64, u64) {
        let cfg = &self.model.config;
        let kv_width = (cfg.n_head_kv * cfg.head_dim) as u32;
        let kv = self.options.kv;
        (
            n as u64 * u64::from(kv.k.row_bytes(kv_width)),
            n as u64 * u64::from(kv.v.row_bytes(kv_width)),
        )
    }
}
