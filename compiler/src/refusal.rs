//! Why a template refuses a (workload, schedule) pair on a device.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A template's reasoned refusal. The tuner records it as a failed candidate; the categories
/// let it tell "never valid" from "not on this device".
#[derive(Clone, Debug, Error, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The workload itself cannot be computed by this template.
    #[error("unsupported workload: {0}")]
    Workload(String),
    /// The schedule is inconsistent or does not fit the workload.
    #[error("invalid schedule: {0}")]
    Schedule(String),
    /// The device lacks a feature the schedule needs.
    #[error("device lacks {0}")]
    MissingFeature(String),
    /// A device limit (workgroup size, shared memory, registers, SPIR-V version) is exceeded.
    #[error("over a device limit: {0}")]
    DeviceLimit(String),
    /// The workload and schedule belong to different templates.
    #[error("schedule kind `{schedule}` does not match workload kind `{workload}`")]
    Mismatch { workload: String, schedule: String },
    /// A bug in the compiler (IR or codegen failure): please report it.
    #[error("internal compiler error: {0}")]
    Internal(String),
}
