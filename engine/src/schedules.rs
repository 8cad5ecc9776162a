//! Where a session's schedules come from, as one [`ScheduleSource`]: the tuning database's
//! (or a caller's own source instead), then every GEMM staged in shared memory where asked,
//! then one math family forced where asked, in that order (as the CLI always layered them).

use crate::staging::ForcedSharedMemory;
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_runtime::executor::{ForcedMath, MathFamily, ScheduleOrigin, ScheduleSource};
use rocky_tuner::DbSchedules;

pub(crate) struct SessionSchedules {
    /// Tuned schedules of this device from the database, defaults for the rest.
    pub db: DbSchedules,
    /// A caller's source in place of the database's ([`crate::Session::set_schedule_source`]).
    pub custom: Option<Box<dyn ScheduleSource>>,
    pub force_shared_memory: bool,
    pub math: Option<MathFamily>,
}

impl ScheduleSource for SessionSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        let base: &dyn ScheduleSource = match &self.custom {
            Some(custom) => custom.as_ref(),
            None => &self.db,
        };
        let staged = ForcedSharedMemory {
            inner: base,
            on: self.force_shared_memory,
        };
        ForcedMath {
            inner: &staged,
            family: self.math,
        }
        .schedule(workload, caps)
    }
}
