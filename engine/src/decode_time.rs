//! Host-side accounting of decode steps.

use rocky_runtime::executor::PrefillStats;
use std::time::Duration;

/// Where the decode steps' time went, summed over the steps since the session opened (each
/// step a one-row prefill): what the executor did before the first dispatch (schedules,
/// pipelines, descriptor sets), recording and submitting, waiting for the GPU, and reading
/// the logits back. A decode step is short enough that the host's share decides its speed,
/// so `rocky generate` reports it.
#[derive(Debug, Default, Clone, Copy)]
pub struct DecodeTime {
    pub steps: u32,
    pub wall: Duration,
    pub setup: Duration,
    pub record: Duration,
    pub wait: Duration,
    pub readback: Duration,
    pub dispatches: u64,
}

impl DecodeTime {
    pub(crate) fn add(&mut self, s: &PrefillStats) {
        self.steps += 1;
        self.wall += s.wall;
        self.setup += s.setup;
        self.record += s.stream.host_busy;
        self.wait += s.stream.host_wait;
        self.readback += s.readback;
        self.dispatches += s.stream.dispatches;
    }

    /// Dispatches per step, `None` before the first step.
    pub fn dispatches_per_step(&self) -> Option<f64> {
        (self.steps > 0).then(|| self.dispatches as f64 / self.steps as f64)
    }

    /// Milliseconds per step of each part (wall, setup, record, wait, readback), `None`
    /// before the first step.
    pub fn per_step_ms(&self) -> Option<[(&'static str, f64); 5]> {
        let n = self.steps as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n;
        (self.steps > 0).then(|| {
            [
                ("wall", ms(self.wall)),
                ("setup", ms(self.setup)),
                ("record", ms(self.record)),
                ("wait", ms(self.wait)),
                ("readback", ms(self.readback)),
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_step_figures_are_averages_and_absent_before_a_step() {
        let mut t = DecodeTime::default();
        assert!(t.per_step_ms().is_none() && t.dispatches_per_step().is_none());
        let mut s = PrefillStats {
            wall: Duration::from_millis(3),
            ubatches: 1,
            setup: Duration::from_millis(1),
            readback: Duration::ZERO,
            stream: Default::default(),
        };
        s.stream.dispatches = 10;
        t.add(&s);
        s.wall = Duration::from_millis(5);
        s.stream.dispatches = 20;
        t.add(&s);
        let parts = t.per_step_ms().unwrap();
        assert_eq!(parts[0].0, "wall");
        assert!((parts[0].1 - 4.0).abs() < 1e-9, "{parts:?}");
        assert!((parts[1].1 - 1.0).abs() < 1e-9, "{parts:?}");
        assert_eq!(t.dispatches_per_step(), Some(15.0));
    }
}
