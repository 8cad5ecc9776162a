//! What the attention kernel computes, and its contract with the runtime.
//!
//! Bindings (descriptor set 0):
//! - 0 `q`: f32 [m × n_heads·head_dim], row i is the query at position `pos0 + i` (RoPE
//!   applied); read as 16-byte vectors;
//! - 1 `k_cache`, 2 `v_cache`: the layer's cache in the KV-write layout of the workload's
//!   types (`kv`: u32 words of f32, f16 pairs or Q8_0 parts, position-major, see
//!   `crate::kv_type`), holding at least positions `0 .. pos0+m` (the ubatch's own keys
//!   written first); f32 and f16 are read as 16-byte vectors, q8_0 as words; bind whole
//!   positions (the cache is sized in positions anyway). Keys past the bound range are
//!   never read;
//! - 3 `out`: f32 [m × n_heads·head_dim].
//!
//! Push constants ([`AttentionPush`], 8 bytes): `m` (rows, ≤ the workload's m), `pos0`.
//! Query row i attends keys `0 ..= pos0 + i` (causal); q head h reads kv head
//! `h / (n_heads / n_kv_heads)`; scores are scaled by `1/sqrt(head_dim)`.
//!
//! Grid: `[ceil(m / rows), n_kv_heads if group_heads else n_heads, 1]`; with `kv_splits`
//! the pieces of the keys along z and binding 3 is the split kernel's `partials` scratch
//! instead of `out` (see `split_kv.rs`).

use serde::{Deserialize, Serialize};

use super::schedule::AttentionSchedule;
use crate::kv_type::KvTypes;
use crate::refusal::Refusal;
use crate::templates::{push_bytes, MAX_GRID_DIM};

pub const BINDING_Q: u32 = 0;
pub const BINDING_K_CACHE: u32 = 1;
pub const BINDING_V_CACHE: u32 = 2;
pub const BINDING_OUT: u32 = 3;

/// Causal GQA attention of `m` query rows against a cache of up to `max_kv` positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionWorkload {
    pub m: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    /// Capacity of the cache in positions (the context length): sizes only the index range
    /// the kernel must handle and the FLOP count; the kernel reads the bound length.
    pub max_kv: u32,
    /// Sliding window (Gemma 3's local layers): the query at position p sees only keys
    /// p - window < j ≤ p. 0 is plain causal attention; omitted from the serialization at 0,
    /// so stored keys stay valid.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub window: u32,
    /// The cache's element types (K and V apart); omitted from the serialization at f16
    /// (the only types before they existed), so stored keys stay valid and records of one
    /// type never serve another.
    #[serde(default, skip_serializing_if = "KvTypes::is_default")]
    pub kv: KvTypes,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl AttentionWorkload {
    /// The `max_kv` a runtime with a cache of `n_ctx` positions uses: the next power of two.
    /// The kernel reads the bound cache length, so `max_kv` only keys the tuning database:
    /// bucketing lets one tuned record serve every context length of its octave (a prefill
    /// of 3000 tokens and one of 4096 share the 4096 record).
    pub fn kv_bucket(n_ctx: u32) -> u32 {
        n_ctx.max(1).checked_next_power_of_two().unwrap_or(1 << 31)
    }

    /// Query heads per kv head.
    pub fn group(&self) -> u32 {
        self.n_heads / self.n_kv_heads.max(1)
    }

    /// f32 elements per q / out row.
    pub fn q_width(&self) -> u32 {
        self.n_heads * self.head_dim
    }

    /// Values per cache position.
    pub fn kv_width(&self) -> u32 {
        self.n_kv_heads * self.head_dim
    }

    /// Query·key pairs of a dispatch whose ubatch ends at the cache's capacity
    /// (pos0 = max_kv - m, the largest a workload may see): row i sees max_kv - m + i + 1 keys.
    pub fn score_pairs(&self) -> u64 {
        let m = u64::from(self.m);
        let past = u64::from(self.max_kv).saturating_sub(m);
        let causal = m * past + m * (m + 1) / 2;
        if self.window == 0 {
            return causal;
        }
        // Row i sees min(past + i + 1, window) keys.
        let w = u64::from(self.window);
        (0..m)
            .map(|i| (past + i + 1).min(w))
            .sum::<u64>()
            .min(causal)
    }

    /// Whether the kernel masks keys before the row's window.
    pub fn is_windowed(&self) -> bool {
        self.window > 0
    }

    /// 2 FLOPs per multiply-add in q·k and in p·v: 4·pairs·head_dim·n_heads.
    pub fn flops(&self) -> u64 {
        4 * self.score_pairs() * u64::from(self.head_dim) * u64::from(self.n_heads)
    }

    /// Checks that the template can compute the workload at all.
    pub fn validate(&self) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Workload(s));
        if self.m == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad("m, n_heads, n_kv_heads and head_dim must be at least 1".into());
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return bad(format!(
                "{} query heads do not split evenly over {} kv heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if let Err(e) = self.kv.check_width(self.head_dim, self.kv_width()) {
            return bad(e);
        }
        if self.head_dim % 8 != 0 || self.head_dim > 512 {
            return bad(format!(
                "head_dim {} must be a multiple of 8 (16-byte f16 loads) and at most 512",
                self.head_dim
            ));
        }
        if self.max_kv == 0 {
            return bad("max_kv must be at least 1".into());
        }
        if self.n_heads > MAX_GRID_DIM {
            return bad(format!(
                "{} heads exceed the grid limit {MAX_GRID_DIM}",
                self.n_heads
            ));
        }
        let q_elems = u64::from(self.m) * u64::from(self.q_width());
        let row_words = u64::from(self.kv.k.row_words(self.kv_width()))
            .max(u64::from(self.kv.v.row_words(self.kv_width())));
        let kv_words = (u64::from(self.max_kv) + u64::from(self.m)) * row_words;
        if q_elems > u64::from(u32::MAX) || kv_words > u64::from(u32::MAX) {
            return bad("q or the cache is too large for 32-bit indexing".into());
        }
        Ok(())
    }
}

/// Push constants: `m`, `pos0` (u32 each, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionPush {
    pub m: u32,
    pub pos0: u32,
}

impl AttentionPush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.pos0])
    }
}

/// Workgroups of one dispatch over the workload's m rows; a split-KV schedule gets its most
/// pieces along z (a dispatch may use fewer: `split_kv::splits_for`).
pub fn dispatch_grid(w: &AttentionWorkload, s: &AttentionSchedule) -> [u32; 3] {
    let heads = if s.group_heads {
        w.n_kv_heads
    } else {
        w.n_heads
    };
    [w.m.div_ceil(s.rows.max(1)), heads, s.kv_splits.max(1)]
}

#[cfg(test)]
mod tests {
    use super::AttentionWorkload;

    #[test]
    fn attention_kv_buckets_are_the_next_power_of_two() {
        let b = AttentionWorkload::kv_bucket;
        assert_eq!(
            [b(0), b(1), b(512), b(513), b(3000), b(4096)],
            [1, 1, 512, 1024, 4096, 4096]
        );
        assert_eq!(b(u32::MAX), 1 << 31);
    }
}
