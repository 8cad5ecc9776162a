//! Which dispatches depend on each other: a barrier is needed when a dispatch touches bytes
//! that an earlier dispatch since the last barrier touched, and one of the two writes them
//! (read-after-write, write-after-read, write-after-write). Independent dispatches are left
//! free to overlap on the GPU.

/// One binding of one dispatch: a byte range of a buffer, read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// The raw `VkBuffer` handle.
    pub(crate) buffer: u64,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) write: bool,
}

impl Access {
    fn overlaps(&self, other: &Access) -> bool {
        self.buffer == other.buffer
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }

    fn conflicts(&self, other: &Access) -> bool {
        (self.write || other.write) && self.overlaps(other)
    }
}

/// The accesses recorded since the last barrier.
#[derive(Debug, Default)]
pub(crate) struct HazardTracker {
    pending: Vec<Access>,
}

impl HazardTracker {
    /// Whether a dispatch making `accesses` must wait for the work recorded since the last
    /// barrier.
    pub(crate) fn needs_barrier(&self, accesses: &[Access]) -> bool {
        accesses
            .iter()
            .any(|a| self.pending.iter().any(|p| a.conflicts(p)))
    }

    pub(crate) fn record(&mut self, accesses: &[Access]) {
        self.pending.extend_from_slice(accesses);
    }

    /// A barrier was recorded: everything before it is ordered.
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
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
    fn detects_each_kind_of_hazard() {
        let mut t = HazardTracker::default();
        t.record(&[read(1, 0, 100), write(2, 0, 100)]);
        assert!(t.needs_barrier(&[read(2, 50, 10)]), "read after write");
        assert!(t.needs_barrier(&[write(1, 99, 1)]), "write after read");
        assert!(t.needs_barrier(&[write(2, 0, 1)]), "write after write");
    }

    #[test]
    fn independent_accesses_need_no_barrier() {
        let mut t = HazardTracker::default();
        t.record(&[read(1, 0, 100), write(2, 0, 100)]);
        assert!(!t.needs_barrier(&[read(1, 0, 100)]), "read after read");
        assert!(
            !t.needs_barrier(&[write(2, 100, 50)]),
            "adjacent, not overlapping"
        );
        assert!(!t.needs_barrier(&[write(3, 0, 100)]), "another buffer");
        t.clear();
        assert!(!t.needs_barrier(&[write(2, 0, 100)]), "after a barrier");
    }
}
