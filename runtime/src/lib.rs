//! rocky's Vulkan runtime (ash): device discovery and selection, UMA-aware buffers, compute
//! pipelines with an on-disk pipeline cache, dispatch recording with automatic barriers, and
//! GPU timestamps.
//!
//! Every Vulkan object holds its device alive (an `Arc` inside `Context`), so objects may be
//! dropped in any order; a `Recorder` borrows what it records so nothing it uses can be dropped
//! while the GPU may still run it.

mod budget;
mod buffer;
mod commands;
mod descriptors;
mod device;
mod device_caps;
mod error;
pub mod executor;
mod hazards;
mod info;
mod instance;
mod memory;
mod pipeline;
mod pipeline_cache;
mod pipeline_stats;
mod promoted;
mod replay;
mod select;
mod stream;
mod submit;
mod timing;
mod transfer;

pub use budget::{budget_disabled, Admit, BudgetTracker, CommandBudget, WlsModel, BUDGET_ENV};
pub use buffer::{bindable_spans, Buffer, BufferRange, Plain, Span};
pub use commands::{Recorder, RecorderParts, Recording};
pub use device::{probe_devices, Context, RuntimeCaps};
pub use device_caps::{
    compute_units, device_caps, DISCRETE_REGISTER_BUDGET, OTHER_REGISTER_BUDGET,
};
pub use error::{format_bytes, OomKind, Result, RuntimeError, SubmitStage};
pub use info::{
    spirv_version_for, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType, DriverInfo,
    MemoryHeap, MemoryInfo, MemoryType, QueueInfo, SubgroupInfo, SubgroupSizeControl,
};
pub use pipeline::ComputePipeline;
pub use pipeline_cache::{default_path as default_pipeline_cache_path, CacheLoad, PipelineCache};
pub use pipeline_stats::{
    spilling, ExecutableStatistics, PipelineStatistics, Statistic,
    NOT_OFFERED as STATISTICS_NOT_OFFERED,
};
pub use replay::{DispatchSink, Replay, ReplayRecorder, ReplayRun};
pub use select::{list_devices, select_device, DeviceSelector};
pub use stream::{Stream, StreamRing, StreamStats, Ticket, RING_DEPTH};
pub use timing::{
    host_time_submit, host_timing_reason, time_dispatches, time_dispatches_with, TickScale,
    TimestampQueries, TimingMethod, FORCE_HOST_TIMING_ENV,
};

/// The compiler's kernel contract, re-exported so users need not depend on both crates.
pub use rocky_compiler::kernel::{BufferBinding, CompiledKernel, KernelMeta, RequiredFeatures};
