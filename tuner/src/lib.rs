//! rocky's tuner: searches kernel schedules on the live GPU and stores every trial in the
//! tuning database; and the executor's database-backed schedule source.
//!
//! - [`workloads`]: the distinct GEMM workloads of a model at a ubatch;
//! - [`carry_over`]: what a workload's search takes from the model's other workloads;
//! - [`search`]: exhaustive, random and evolutionary candidate selection (pure);
//! - [`measure`]: one trial (compile → spirv-val → check against the CPU reference → timed
//!   runs);
//! - [`spirv_val`]: the validation stage of a trial;
//! - [`fault`]: [`FaultPlan`], trials made to fail on purpose at each failure's real stage;
//! - [`attention_gpu`]: attention on the device, its check and one trial (tuner and
//!   `rocky bench-attention`);
//! - [`gemm_gpu`]: a GEMM on the device (also used by `rocky kernel` and `bench-gemm`);
//! - [`static_cost`], [`static_rank`]: `rocky tune --static`, candidates ranked without
//!   running them (driver statistics or an IR model), stored as unmeasured seed rankings;
//! - [`tune`]: the loop with trial and time budgets, resume and device-loss recovery;
//! - [`db_schedules`]: [`DbSchedules`], tuned schedules for the prefill;
//! - [`fingerprint()`]: the database identity of a device.

pub mod attention_gpu;
pub mod carry_over;
pub mod db_schedules;
pub mod fault;
pub mod fingerprint;
pub mod gemm_gpu;
pub mod graph;
pub mod logits_check;
pub mod measure;
pub mod replay;
pub mod search;
pub mod spirv_val;
pub mod static_cost;
pub mod static_rank;
pub mod tune;
pub mod workloads;

pub use db_schedules::DbSchedules;
pub use fault::{Fault, FaultPlan, FaultPlanError, GraphFault};
pub use fingerprint::fingerprint;
pub use measure::{
    calibrate_warmup, measure_gemm, measure_gemv, settle_clocks, MeasureOptions, TimedRuns,
    WarmupCalibration, DEFAULT_PRUNE_FACTOR,
};
pub use search::{Search, Strategy};
pub use tune::{host_name, Progress, StopReason, TuneError, TuneOptions, Tuner, WorkloadReport};
pub use workloads::{
    attention_workloads, model_workloads, model_workloads_with_progress, ModelWorkload,
};
