//! Forcing one math family on every GEMM (`--math f32|f16|int8`): for checks against the
//! exact targets and for side-by-side comparisons of the arithmetic paths.
//!
//! A GEMM keeps the inner source's schedule (tuned or default) where it is of the family;
//! else it runs the schedule built for the family on the device
//! (`rocky_compiler::templates::gemm::family_schedule`: the default rule as it picks that
//! family, not another family's tile with the arithmetic swapped, which spilled or fell back
//! to a one-row tile 42x slower, issue 36). GEMMs the family cannot run (int8 on unquantized
//! weights) keep the inner source's schedule.

use super::{ScheduleOrigin, ScheduleSource};
use rocky_compiler::templates::gemm::{family_schedule, Arithmetic};
use rocky_compiler::{DeviceCaps, Math, Precision, Schedule, Workload};
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
    /// The arithmetic of the family's schedules.
    pub fn arithmetic(self) -> Arithmetic {
        let (math, accumulate, vector_width) = match self {
            MathFamily::F32 => (Math::FmaF32, Precision::F32, 1),
            MathFamily::F16 => (Math::FmaF16Packed, Precision::F32, 2),
            MathFamily::Int8 => (Math::Int8Dot, Precision::F32, 4),
        };
        Arithmetic {
            math,
            accumulate,
            vector_width,
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
        let arithmetic = family.arithmetic();
        if arithmetic.holds(&g) {
            return (base, origin);
        }
        // The family's own schedule is a default, not what the tuner measured.
        match family_schedule(w, caps, arithmetic) {
            Some(s) => (Schedule::Gemm(s), ScheduleOrigin::Default),
            None => (base, origin),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::DefaultSchedules;
    use rocky_compiler::templates::gemm::{default_schedule, GemmSchedule};
    use rocky_compiler::{ActType, GemmWorkload, WeightFormat};

    fn q4k(m: u32, n: u32, k: u32) -> GemmWorkload {
        GemmWorkload {
            m,
            n,
            k,
            act: ActType::F32,
            weight: WeightFormat::Q4K,
            layout: Default::default(),
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        }
    }

    /// Issue 36: on a desktop GPU `--math f32` swapped f32 into the packed-f16 128×128 tile,
    /// which does not fit the workgroup memory in f32, and then ran the first f32 schedule of
    /// the search space, a one-row tile. Now it runs the default rule's f32 tile.
    #[test]
    fn forced_f32_on_a_desktop_gpu_runs_the_f32_rule_not_a_one_row_tile() {
        let caps = DeviceCaps::desktop_all_features();
        let w = q4k(512, 2048, 2048);
        let f16 = default_schedule(&w, &caps);
        assert_eq!(f16.math, Math::FmaF16Packed);
        let swapped = GemmSchedule {
            math: Math::FmaF32,
            vector_width: 1,
            fold_per_slab: false,
            ..f16
        };
        assert!(swapped.validate(&w, &caps).is_err(), "{swapped:?}");
        let forced = ForcedMath {
            inner: &DefaultSchedules,
            family: Some(MathFamily::F32),
        };
        let (s, origin) = forced.schedule(&Workload::Gemm(w), &caps);
        let Schedule::Gemm(g) = s else {
            panic!("a GEMM schedule: {s:?}")
        };
        let no_f16 = DeviceCaps {
            float16: false,
            integer_dot_product: false,
            ..caps.clone()
        };
        assert_eq!(g, default_schedule(&w, &no_f16));
        // 64×64 tiles of 4×4: the biggest whose grid fills the GPU (256 workgroups).
        assert_eq!(
            (g.math, g.bm, g.bn, g.tm),
            (Math::FmaF32, 64, 64, 4),
            "{g:?}"
        );
        assert_eq!(origin, ScheduleOrigin::Default);
        // The device's own family stays the default, and no family leaves other templates.
        let f16_forced = ForcedMath {
            family: Some(MathFamily::F16),
            ..forced
        };
        assert_eq!(
            f16_forced.schedule(&Workload::Gemm(w), &caps).0,
            Schedule::Gemm(f16)
        );
    }
}
