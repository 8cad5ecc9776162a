//! Which dispatches depend on each other: a dispatch must wait for an earlier one when both
//! touch the same bytes and one of them writes them (read-after-write, write-after-read,
//! write-after-write). Independent dispatches are left free to overlap on the GPU.
//!
//! [`LevelScheduler`] goes further than "a barrier before each dependent dispatch": it places
//! every dispatch of a command buffer at the earliest *level* its dependencies allow (one more
//! than the highest level it conflicts with), and the recorder emits the levels in order with
//! one barrier between consecutive levels. Recording order is then no longer execution order:
//! a graph walked node by node (Q projection, its split-K reduce, K projection, its reduce,
//! ...) puts each reduce right behind its GEMM, and with a barrier per hazard the GPU drained
//! between every pair; levelled, the Q, K and V projections share one level and their
//! reduces the next. On the H200 that made the Qwen2.5-3B prefill at ubatch 64 6 % faster and
//! the 0.5B's 20 % (docs/measurements/2026-12-03c-h200.md, call A).

use std::collections::HashMap;

/// One binding of one dispatch: a byte range of a buffer, read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// The raw `VkBuffer` handle.
    pub(crate) buffer: u64,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) write: bool,
}

/// A byte range of one buffer and the highest levels that read and wrote it.
#[derive(Clone, Copy, Debug)]
struct RangeLevels {
    offset: u64,
    size: u64,
    read: Option<u32>,
    write: Option<u32>,
}

impl RangeLevels {
    fn overlaps(&self, a: &Access) -> bool {
        self.offset < a.offset.saturating_add(a.size)
            && a.offset < self.offset.saturating_add(self.size)
    }
}

/// Levels of the dispatches recorded since the last barrier (see the module documentation).
/// Level 0 is the open stage: work already recorded after the last barrier, which a new
/// dispatch may join without one.
#[derive(Debug, Default)]
pub(crate) struct LevelScheduler {
    /// Per buffer, the distinct ranges touched (a graph binds the same few ranges over and
    /// over, so these lists stay short).
    ranges: HashMap<u64, Vec<RangeLevels>>,
    /// Highest level placed so far.
    max_level: u32,
}

impl LevelScheduler {
    /// The level a dispatch making `accesses` goes to, and records it there.
    pub(crate) fn place(&mut self, accesses: &[Access]) -> u32 {
        let mut level = 0;
        for a in accesses {
            for r in self.ranges.get(&a.buffer).into_iter().flatten() {
                if !r.overlaps(a) {
                    continue;
                }
                if let Some(w) = r.write {
                    level = level.max(w + 1);
                }
                if let (true, Some(rd)) = (a.write, r.read) {
                    level = level.max(rd + 1);
                }
            }
        }
        for a in accesses {
            let list = self.ranges.entry(a.buffer).or_default();
            let entry = match list
                .iter_mut()
                .position(|r| r.offset == a.offset && r.size == a.size)
            {
                Some(i) => &mut list[i],
                None => {
                    list.push(RangeLevels {
                        offset: a.offset,
                        size: a.size,
                        read: None,
                        write: None,
                    });
                    list.last_mut().expect("just pushed")
                }
            };
            let slot = if a.write {
                &mut entry.write
            } else {
                &mut entry.read
            };
            *slot = Some(slot.map_or(level, |l| l.max(level)));
        }
        self.max_level = self.max_level.max(level);
        level
    }

    /// Barriers the placed dispatches need: one before each level above 0.
    pub(crate) fn barriers_needed(&self) -> u32 {
        self.max_level
    }

    /// The placed dispatches were recorded, levels in order: only the highest level stays
    /// open (no barrier after it yet), and it becomes level 0.
    pub(crate) fn recorded(&mut self) {
        let top = self.max_level;
        for list in self.ranges.values_mut() {
            list.retain_mut(|r| {
                r.read = r.read.filter(|&l| l == top).map(|_| 0);
                r.write = r.write.filter(|&l| l == top).map(|_| 0);
                r.read.is_some() || r.write.is_some()
            });
        }
        self.ranges.retain(|_, list| !list.is_empty());
        self.max_level = 0;
    }

    /// A barrier was recorded: everything before it is ordered.
    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
        self.max_level = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(buffer: u64, offset: u64, size: u64) -> Access {
        Access {
            buffer,
            offset,
            size,
            write: false,
        }
    }
    fn write(buffer: u64, offset: u64, size: u64) -> Access {
        Access {
            buffer,
            offset,
            size,
            write: true,
        }
    }

    #[test]
    fn each_kind_of_hazard_goes_one_level_up() {
        for (later, what) in [
            (read(2, 50, 10), "read after write"),
            (write(1, 99, 1), "write after read"),
            (write(2, 0, 1), "write after write"),
        ] {
            let mut s = LevelScheduler::default();
            assert_eq!(s.place(&[read(1, 0, 100), write(2, 0, 100)]), 0);
            assert_eq!(s.place(&[later]), 1, "{what}");
            assert_eq!(s.barriers_needed(), 1);
        }
    }

    #[test]
    fn independent_accesses_stay_on_level_zero() {
        let mut s = LevelScheduler::default();
        s.place(&[read(1, 0, 100), write(2, 0, 100)]);
        assert_eq!(s.place(&[read(1, 0, 100)]), 0, "read after read");
        assert_eq!(
            s.place(&[write(2, 100, 50)]),
            0,
            "adjacent, not overlapping"
        );
        assert_eq!(s.place(&[write(3, 0, 100)]), 0, "another buffer");
        assert_eq!(s.barriers_needed(), 0);
        s.clear();
        assert_eq!(s.place(&[write(2, 0, 100)]), 0, "after a barrier");
    }

    /// The shape of a graph walked node by node: GEMM q, its reduce, GEMM k, its reduce.
    /// The k GEMM depends on nothing the q reduce does, so it joins the q GEMM's level.
    #[test]
    fn a_dispatch_moves_back_to_the_earliest_level_its_inputs_allow() {
        let (x, scratch_q, scratch_k, q, k) = (1, 2, 3, 4, 5);
        let mut s = LevelScheduler::default();
        assert_eq!(s.place(&[read(x, 0, 64), write(scratch_q, 0, 64)]), 0);
        assert_eq!(s.place(&[read(scratch_q, 0, 64), write(q, 0, 64)]), 1);
        assert_eq!(s.place(&[read(x, 0, 64), write(scratch_k, 0, 64)]), 0);
        assert_eq!(s.place(&[read(scratch_k, 0, 64), write(k, 0, 64)]), 1);
        // Something reading both outputs waits for both reduces.
        assert_eq!(
            s.place(&[read(q, 0, 64), read(k, 0, 64), write(x, 0, 64)]),
            2
        );
        assert_eq!(s.barriers_needed(), 2);
    }

    /// A chain stays a chain whatever the order of unrelated work.
    #[test]
    fn a_chain_of_dependent_dispatches_gets_one_level_each() {
        let mut s = LevelScheduler::default();
        for i in 0..5u64 {
            assert_eq!(s.place(&[read(i, 0, 8), write(i + 1, 0, 8)]), i as u32);
        }
        assert_eq!(s.barriers_needed(), 4);
    }

    /// After the placed work is recorded, only its top level is still open: a new dispatch
    /// that conflicts with a lower level needs no barrier, one that conflicts with the top
    /// level does.
    #[test]
    fn recorded_work_keeps_only_its_open_level() {
        let mut s = LevelScheduler::default();
        s.place(&[write(1, 0, 8)]);
        s.place(&[read(1, 0, 8), write(2, 0, 8)]);
        s.recorded();
        assert_eq!(s.barriers_needed(), 0);
        assert_eq!(
            s.place(&[read(1, 0, 8)]),
            0,
            "buffer 1's write is behind a barrier"
        );
        assert_eq!(
            s.place(&[read(2, 0, 8)]),
            1,
            "buffer 2 was written in the open level"
        );
        assert_eq!(
            s.place(&[write(1, 0, 8)]),
            1,
            "buffer 1 is read in the open level"
        );
    }
}
