//! [`crate::EngineOptions::force_shared_memory`] (`--force-shared-memory`): every GEMM stages its operands in workgroup shared memory.
//!
//! Why: the defaults on Mali use no shared memory, so the driver's per-dispatch shared-memory
//! allocation (panvk's WLS, which the command-buffer budget models) is never exercised by a
//! default prefill. This source makes every GEMM a shared-memory one, to check on the real
//! driver (mali-shim) that the budget keeps such prefills within the driver's memory. It is
//! for testing: staged GEMMs are slower on Mali.

use rocky_compiler::{search_space, DeviceCaps, Schedule, Workload};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};

/// The inner source's schedules with every GEMM's X and W slabs staged in shared memory.
pub struct ForcedSharedMemory<'a> {
    pub inner: &'a dyn ScheduleSource,
    pub on: bool,
}

impl ScheduleSource for ForcedSharedMemory<'_> {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        let (base, origin) = self.inner.schedule(workload, caps);
        let (true, Workload::Gemm(w), Schedule::Gemm(g)) = (self.on, workload, base) else {
            return (base, origin);
        };
        if g.stage_a && g.stage_b {
            return (base, origin);
        }
        // The same tiles and math with both slabs staged (shuffling X through subgroups
        // excludes staging it).
        let staged = rocky_compiler::GemmSchedule {
            stage_a: true,
            stage_b: true,
            shuffle_a: false,
            ..g
        };
        if staged.validate(w, caps).is_ok() {
            return (Schedule::Gemm(staged), ScheduleOrigin::Tuned);
        }
        // Else the first schedule of the space that stages both (then either) slab.
        let space = search_space(workload, caps);
        let stages = |both: bool| {
            space.iter().copied().find(|s| match s {
                Schedule::Gemm(c) if both => c.stage_a && c.stage_b,
                Schedule::Gemm(c) => c.stage_a || c.stage_b,
                _ => false,
            })
        };
        match stages(true).or_else(|| stages(false)) {
            Some(s) => (s, ScheduleOrigin::Tuned),
            None => (base, origin),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocky_compiler::templates::gemm::GemmWorkload;
    use rocky_compiler::{ActType, WeightFormat};
    use rocky_runtime::executor::DefaultSchedules;

    #[test]
    fn every_gemm_gets_a_shared_memory_schedule_and_others_are_unchanged() {
        let caps = DeviceCaps::mali_g610();
        let forced = ForcedSharedMemory {
            inner: &DefaultSchedules,
            on: true,
        };
        for (m, n, k, weight) in [
            (512, 2048, 2048, WeightFormat::Q4K),
            (1, 151936, 896, WeightFormat::Q8_0),
            (72, 256, 2048, WeightFormat::Q6K),
        ] {
            let w = Workload::Gemm(GemmWorkload {
                m,
                n,
                k,
                act: ActType::F32,
                weight,
                bias: false,
                epilogue: Default::default(),
                rms_norm_eps_bits: None,
                layout: rocky_compiler::WeightLayout::Gguf,
            });
            let (s, _) = forced.schedule(&w, &caps);
            let kernel = rocky_compiler::instantiate(&w, &s, &caps).expect("instantiates");
            assert!(kernel.meta.shared_bytes > 0, "{w:?}: {s:?}");
            let (d, _) = DefaultSchedules.schedule(&w, &caps);
            let off = ForcedSharedMemory {
                inner: &DefaultSchedules,
                on: false,
            };
            assert_eq!(off.schedule(&w, &caps).0, d);
        }
    }
}
