//! Templates: (workload, schedule) → IR → SPIR-V, or a reasoned refusal.
//!
//! [`Workload`] and [`Schedule`] are the serializable keys the tuner and the tuning database
//! use (externally tagged by template: `{"gemm": {...}}`).

pub mod gemm;
pub mod peak;

use serde::{Deserialize, Serialize};

use crate::caps::DeviceCaps;
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

/// What must be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    Gemm(gemm::GemmWorkload),
}

/// How it is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    Gemm(gemm::GemmSchedule),
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Gemm(_) => "gemm",
        }
    }

    /// Useful floating-point operations, for GFLOP/s figures.
    pub fn flops(&self) -> u64 {
        match self {
            Workload::Gemm(g) => g.flops(),
        }
    }
}

impl Schedule {
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::Gemm(_) => "gemm",
        }
    }
}

/// Instantiates the template of `workload` with `schedule` for `device`.
pub fn instantiate(
    workload: &Workload,
    schedule: &Schedule,
    device: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    match (workload, schedule) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => gemm::instantiate(w, s, device),
    }
}

/// Every candidate schedule of `workload` that instantiates on `device`.
pub fn search_space(workload: &Workload, device: &DeviceCaps) -> Vec<Schedule> {
    match workload {
        Workload::Gemm(w) => gemm::search_space(w, device)
            .into_iter()
            .map(Schedule::Gemm)
            .collect(),
    }
}

/// The rule-based schedule used when `workload` is untuned on `device`.
pub fn default_schedule(workload: &Workload, device: &DeviceCaps) -> Schedule {
    match workload {
        Workload::Gemm(w) => Schedule::Gemm(gemm::default_schedule(w, device)),
    }
}

/// Workgroup counts of one dispatch covering the whole workload.
pub fn dispatch_grid(workload: &Workload, schedule: &Schedule) -> Result<[u32; 3], Refusal> {
    match (workload, schedule) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => Ok(gemm::dispatch_grid(w, s)),
    }
}
