//! A schedule source for end-to-end GPU tests that compare against f32 references.

use rocky_compiler::{
    default_schedule, instantiate, search_space, DeviceCaps, Math, Precision, Schedule, Workload,
};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};

/// Default schedules with f32 FMA math and f32 accumulation for every GEMM: the arithmetic of
/// the golden files and the llama.cpp fixtures, so the logits differ only by what a test varies
/// (the path, the cache type).
pub struct F32Math;

impl ScheduleSource for F32Math {
    fn schedule(&self, w: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        let d = default_schedule(w, caps);
        let Schedule::Gemm(mut g) = d else {
            return (d, ScheduleOrigin::Default);
        };
        g.math = Math::FmaF32;
        g.accumulate = Precision::F32;
        let s = Schedule::Gemm(g);
        if instantiate(w, &s, caps).is_ok() {
            return (s, ScheduleOrigin::Default);
        }
        let alt = search_space(w, caps)
            .into_iter()
            .find(|s| matches!(s, Schedule::Gemm(g) if g.math == Math::FmaF32 && g.accumulate == Precision::F32))
            .expect("an f32 schedule exists");
        (alt, ScheduleOrigin::Default)
    }
}
