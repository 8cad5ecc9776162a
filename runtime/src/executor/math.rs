//! Forcing one math family on every GEMM (`--math f32|f16|int8`): for checks against the
//! exact targets and for side-by-side comparisons of the arithmetic paths.
//!
//! The forced schedule keeps the tiles of the schedule the inner source chose (tuned or
//! default) and swaps in the family's arithmetic; where that combination is not valid on the
//! device, the first schedule of the family in the search space runs instead. GEMMs the family
//! cannot run (int8 on unquantized weights) keep the inner source's schedule.

use super::{ScheduleOrigin, ScheduleSource};
use rocky_compiler::{search_space, DeviceCaps, Math, Precision, Schedule, Workload};
use std::str::FromStr;

/// A GEMM arithmetic family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFamily {
    /// f32 FMAs on dequantized weights.
    F32,
    /// Packed f16 FMAs (f16×2), f16 sums within each 32-element unit added to f32 accumulators.
    F16,
    /// 4×8-bit integer dot products on activations quantized per 32 values.
    Int8,
}

impl MathFamily {
    /// (math, accumulation, vector width) of the family's schedules.
    fn arithmetic(self) -> (Math, Precision, u32) {
        match self {
            MathFamily::F32 => (Math::FmaF32, Precision::F32, 1),
            MathFamily::F16 => (Math::FmaF16Packed, Precision::F32, 2),
            MathFamily::Int8 => (Math::Int8Dot, Precision::F32, 4),
        }
    }

    /// Whether the device can run the family at all, or what it lacks.
    pub fn check_device(self, caps: &DeviceCaps) -> Result<(), String> {
        match self {
            MathFamily::F16 if !caps.float16 => {
                Err("--math f16 needs shaderFloat16, which this device does not offer".into())
            }
            MathFamily::Int8 if !caps.integer_dot_product => Err(
                "--math int8 needs shaderIntegerDotProduct, which this device does not offer"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

impl FromStr for MathFamily {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(MathFamily::F32),
            "f16" => Ok(MathFamily::F16),
            "int8" => Ok(MathFamily::Int8),
            other => Err(format!("unknown math {other:?}: use f32, f16 or int8")),
        }
    }
}

/// The inner source's schedules with every GEMM moved to one math family (`None`: the inner
/// source's own, unchanged).
pub struct ForcedMath<'a> {
    pub inner: &'a dyn ScheduleSource,
    pub family: Option<MathFamily>,
}

impl ScheduleSource for ForcedMath<'_> {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        let (base, origin) = self.inner.schedule(workload, caps);
        let (Some(family), Workload::Gemm(w), Schedule::Gemm(g)) = (self.family, workload, base)
        else {
            return (base, origin);
        };
        let (math, accumulate, vector_width) = family.arithmetic();
        if g.math == math && g.accumulate == accumulate {
            return (base, origin);
        }
        let swapped = rocky_compiler::GemmSchedule {
            math,
            accumulate,
            vector_width,
            ..g
        };
        if swapped.validate(w, caps).is_ok() {
            return (Schedule::Gemm(swapped), origin);
        }
        let first_of_family = search_space(workload, caps).into_iter().find(
            |s| matches!(s, Schedule::Gemm(c) if c.math == math && c.accumulate == accumulate),
        );
        match first_of_family {
            Some(s) => (s, origin),
            None => (base, origin),
        }
    }
}
