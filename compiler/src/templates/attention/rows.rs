//! Which (query, head) rows a workgroup of the tiled and key-split kernels serves, and which
//! part of the KV cache they read: workgroup row `r` is query `first_row + r / heads` of the
//! workgroup's query block (grid x) and head `r % heads` of its heads (grid y: one kv head's
//! group with `group_heads`, else one q head).

use super::schedule::AttentionSchedule;
use super::workload::AttentionWorkload;
use crate::ir::{Builtin, KernelBuilder, Value};

pub(crate) struct WorkgroupRows<'a> {
    b: &'a KernelBuilder,
    w: &'a AttentionWorkload,
    s: &'a AttentionSchedule,
    /// The workgroup's first query row (grid x × rows).
    pub first_row: Value,
    /// m - 1: rows past m compute this row again and store nothing.
    last: Value,
    head_y: Value,
}

impl<'a> WorkgroupRows<'a> {
    pub(crate) fn new(
        b: &'a KernelBuilder,
        w: &'a AttentionWorkload,
        s: &'a AttentionSchedule,
        m: Value,
    ) -> Self {
        let q_block = b.builtin(Builtin::WorkgroupId(0));
        WorkgroupRows {
            b,
            w,
            s,
            first_row: b.muli(q_block, s.rows),
            last: b.sub(m, b.c_u32(1)),
            head_y: b.builtin(Builtin::WorkgroupId(1)),
        }
    }

    /// Query (unclamped, for the store), clamped query and q head of workgroup row `r`.
    pub(crate) fn row(&self, r: Value) -> (Value, Value, Value) {
        let b = self.b;
        let hg = self.s.heads_per_workgroup(self.w);
        let (qi, hh) = if hg > 1 {
            (b.div(r, b.c_u32(hg)), b.rem(r, b.c_u32(hg)))
        } else {
            (r, b.c_u32(0))
        };
        let query = b.add(self.first_row, qi);
        let head = if self.s.group_heads {
            b.add(b.muli(self.head_y, self.w.group()), hh)
        } else {
            self.head_y
        };
        (query, b.min(query, self.last), head)
    }

    /// The workgroup's kv head.
    pub(crate) fn kvh(&self) -> Value {
        if self.s.group_heads {
            self.head_y
        } else {
            self.b.div(self.head_y, self.b.c_u32(self.w.group()))
        }
    }
}
