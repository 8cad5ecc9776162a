//! Rule-based default schedules (in the spirit of MLC's dlight rules), used when a workload
//! has not been tuned on a device.
//!
//! - Shared memory off-chip (Mali/panvk): no staging; small register footprint (Mali halves
//!   occupancy above 32 registers); f16 packed math where the device has it, accumulating
//!   in f32; 64 threads.
//! - Devices that emulate f16 (CPU implementations) keep f32 math.
//! - Otherwise: stage both operands, 4×4 micro-tiles in 16×16 threads, f32 math.
//! - Few rows (m ≤ 4, decode-like): one row per workgroup; split-K across 4 threads where
//!   shared memory is on-chip, none at all where it is not (panvk allocates workgroup memory
//!   for every dispatch that declares any).
//!
//! The first rule candidate that validates wins; failing all, the first schedule of the search
//! space; failing that (a workload no schedule can run on the device), the simplest schedule,
//! which `instantiate` then refuses with the reason.

use super::schedule::{GemmSchedule, Math, Precision};
use super::space::search_space;
use super::workload::GemmWorkload;
use crate::caps::DeviceCaps;

fn candidates(w: &GemmWorkload, caps: &DeviceCaps) -> Vec<GemmSchedule> {
    let f16 = caps.float16 && !caps.emulated_f16;
    let (math, accumulate, vector_width) = if f16 {
        (Math::FmaF16Packed, Precision::F32, 2)
    } else {
        (Math::FmaF32, Precision::F32, 1)
    };
    let base = GemmSchedule {
        bm: 1,
        bn: 64,
        bk: 128,
        tm: 1,
        tn: 1,
        split_k: 1,
        vector_width,
        stage_a: false,
        stage_b: false,
        accumulate,
        math,
    };
    let mut c = Vec::new();
    if w.m <= 4 {
        if caps.shared_memory_is_slow {
            // Decode-like without any workgroup memory (panvk allocates it per dispatch).
            c.push(GemmSchedule {
                bm: 1,
                bn: 128,
                tn: 2,
                bk: 128,
                ..base
            });
        } else {
            // Decode-like: threads split K four ways, reduced through shared memory.
            c.push(GemmSchedule {
                bm: 1,
                bn: 32,
                tn: 2,
                split_k: 4,
                bk: 128,
                ..base
            });
            c.push(GemmSchedule {
                bm: 1,
                bn: 16,
                tn: 1,
                split_k: 4,
                bk: 128,
                ..base
            });
        }
    }
    if caps.shared_memory_is_slow {
        c.push(GemmSchedule {
            bm: 16,
            bn: 32,
            bk: 64,
            tm: 4,
            tn: 2,
            ..base
        });
        c.push(GemmSchedule {
            bm: 8,
            bn: 32,
            bk: 64,
            tm: 2,
            tn: 2,
            ..base
        });
        c.push(GemmSchedule {
            bm: 4,
            bn: 16,
            bk: 32,
            tm: 1,
            tn: 1,
            ..base
        });
    } else {
        let fma32 = GemmSchedule {
            math: Math::FmaF32,
            accumulate: Precision::F32,
            vector_width: 1,
            stage_a: true,
            stage_b: true,
            ..base
        };
        c.push(GemmSchedule {
            bm: 64,
            bn: 64,
            bk: 32,
            tm: 4,
            tn: 4,
            ..fma32
        });
        c.push(GemmSchedule {
            bm: 32,
            bn: 64,
            bk: 32,
            tm: 2,
            tn: 4,
            ..fma32
        });
        c.push(GemmSchedule {
            bm: 16,
            bn: 64,
            bk: 32,
            tm: 1,
            tn: 4,
            ..fma32
        });
    }
    c.push(GemmSchedule {
        bm: 1,
        bn: 64,
        bk: 32,
        ..base
    });
    c.push(GemmSchedule {
        math: Math::FmaF32,
        accumulate: Precision::F32,
        vector_width: 1,
        bm: 1,
        bn: 64,
        bk: 32,
        ..base
    });
    c
}

/// The default schedule of `w` on `caps` (see the module docs).
pub fn default_schedule(w: &GemmWorkload, caps: &DeviceCaps) -> GemmSchedule {
    let c = candidates(w, caps);
    if let Some(s) = c.iter().find(|s| s.validate(w, caps).is_ok()) {
        return *s;
    }
    search_space(w, caps)
        .into_iter()
        .next()
        .unwrap_or(*c.last().expect("at least one candidate"))
}
