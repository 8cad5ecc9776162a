//! The schedule a GEMM runs when one arithmetic family is forced on it (`--math f32|f16|int8`).
//!
//! Another family's tile with the arithmetic swapped is not a schedule built for the family:
//! the desktop preset's packed-f16 128×128 tile needs 68 KiB of workgroup memory in f32 (48
//! allowed), and the first f32 schedule of the search space, which then ran instead, reads the
//! weights once per row (`bm` = 1): by the code, what ran an H100's Qwen2.5-3B prefill at 170
//! tok/s against 7157 with f16 (issue 36). So a forced family takes, in order:
//! 1. the device's default, where it is of the family;
//! 2. the default rule run as for a device whose natural family it is (f32: as without f16
//!    and int8 dot products, the rule's f32 tiles; f16: as with native f16 and without int8
//!    dot products; int8: the device itself, whose rule has the only int8 tiles), where that
//!    rule gives the family;
//! 3. that rule's tile with the family's arithmetic, where it validates (the Mali's broadcast
//!    tile in packed f16 is the Mali default before f32 won there);
//! 4. the candidate of the search space in the family that fills the GPU with the most
//!    outputs per thread and the most reuse per tile ([`rank`]), every candidate's register
//!    estimate within the budget (`GemmSchedule::validate`).
//!
//! Each result validates for the workload on the device. `None`: no schedule of the family
//! runs it (int8 on float weights, f16 on a device without it).

use super::default::default_schedule;
use super::schedule::{GemmSchedule, Math, Precision};
use super::space::search_space;
use super::workload::GemmWorkload;
use crate::caps::DeviceCaps;

/// Workgroups from which a tile grid counts as filling the GPU when ranking the search space
/// (the default rules' own thresholds are 128-256 workgroups).
pub const FAMILY_FILL_WORKGROUPS: u32 = 128;

/// An arithmetic family: the math of the inner loop, the accumulation and the vector width of
/// its schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arithmetic {
    pub math: Math,
    pub accumulate: Precision,
    pub vector_width: u32,
}

impl Arithmetic {
    /// Whether `s` computes in this family (the vector width is a tunable within it).
    pub fn holds(&self, s: &GemmSchedule) -> bool {
        s.math == self.math && s.accumulate == self.accumulate
    }

    /// `s` with this arithmetic; options only another family has are turned off.
    fn applied_to(&self, s: &GemmSchedule) -> GemmSchedule {
        let mixed = self.math == Math::FmaF16Packed && self.accumulate == Precision::F32;
        GemmSchedule {
            math: self.math,
            accumulate: self.accumulate,
            vector_width: self.vector_width,
            fold_per_slab: s.fold_per_slab && mixed,
            pack_a_f16: s.pack_a_f16 && self.math == Math::FmaF32,
            half_units: s.half_units && self.math == Math::Int8Dot,
            packed_w: if self.math == Math::Int8Dot {
                s.packed_w
            } else {
                0
            },
            ..*s
        }
    }

    /// The device as the default rule should see it to pick this family's tiles: the rule
    /// takes packed f16 where f16 is native, int8 only on the Mali's rule, f32 otherwise. A
    /// schedule valid on these caps is checked on the real ones again.
    fn leaning(&self, caps: &DeviceCaps) -> DeviceCaps {
        match self.math {
            Math::FmaF32 => DeviceCaps {
                float16: false,
                integer_dot_product: false,
                ..caps.clone()
            },
            Math::FmaF16Packed => DeviceCaps {
                emulated_f16: false,
                integer_dot_product: false,
                ..caps.clone()
            },
            Math::Int8Dot => caps.clone(),
        }
    }
}

/// The schedule of `w` on `caps` in `family` (see the module docs), or `None` where no
/// schedule of the family runs it.
pub fn family_schedule(
    w: &GemmWorkload,
    caps: &DeviceCaps,
    family: Arithmetic,
) -> Option<GemmSchedule> {
    let valid = |s: &GemmSchedule| family.holds(s) && s.validate(w, caps).is_ok();
    let own = default_schedule(w, caps);
    if valid(&own) {
        return Some(own);
    }
    let leaned = default_schedule(w, &family.leaning(caps));
    [leaned, family.applied_to(&leaned), family.applied_to(&own)]
        .into_iter()
        .find(valid)
        .or_else(|| best_of_space(w, caps, family))
}

/// The search space's best candidate in `family` by [`rank`] (the first of equals).
fn best_of_space(w: &GemmWorkload, caps: &DeviceCaps, family: Arithmetic) -> Option<GemmSchedule> {
    // `max_by_key` keeps the last of equals: walk the space backwards.
    search_space(w, caps)
        .into_iter()
        .filter(|s| family.holds(s))
        .rev()
        .max_by_key(|s| rank(w, caps, s))
}

/// How good a candidate looks without running it, greatest best: first a grid of workgroups
/// that fills the GPU (up to [`FAMILY_FILL_WORKGROUPS`]; any grid fills a CPU implementation's
/// few cores, where splitting K only adds a reduce), then the outputs each thread keeps
/// in registers (each loaded operand feeds that many FMAs), then the tile's reuse (outputs
/// per operand row loaded, `bm·bn/(bm+bn)`), then staging where workgroup memory is on-chip,
/// fewer K groups, and last the smaller register estimate.
pub fn rank(w: &GemmWorkload, caps: &DeviceCaps, s: &GemmSchedule) -> impl Ord {
    let groups = w.m.div_ceil(s.bm) * w.weight_rows().div_ceil(s.bn) * s.k_groups;
    let fill = if caps.lane_serial_memory {
        1
    } else {
        FAMILY_FILL_WORKGROUPS
    };
    let reuse = s.bm * s.bn / (s.bm + s.bn);
    let staged = !caps.shared_memory_is_slow && s.stage_a && s.stage_b;
    (
        groups.min(fill),
        s.tm * s.tn,
        reuse,
        staged,
        std::cmp::Reverse(s.k_groups),
        !s.last_group_reduces,
        std::cmp::Reverse(s.register_estimate()),
    )
}
