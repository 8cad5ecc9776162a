//! rocky's kernel compiler: a small tile-parameterized IR, templates that instantiate it for a
//! (workload, schedule) pair, SPIR-V codegen with rspirv, and a CPU reference for every template.
//! No Vulkan and no I/O here, so everything can be tested alone.
//!
//! - [`ir`]: the structured IR and its builder; [`codegen`]: IR → SPIR-V;
//! - [`dequant`]: GGUF block formats (CPU dequantizers and IR fragments);
//! - [`templates`]: GEMM, attention and the glue kernels of the prefill graph (RMSNorm, RoPE,
//!   SwiGLU, add, embedding, KV-cache write), each with its CPU reference, and the FMA peak
//!   kernel;
//! - [`caps`]: what the compiler needs to know about a device; [`kernel`]: what it hands to
//!   the runtime; [`refusal`]: why a pair is not compiled.

pub mod caps;
pub mod codegen;
pub mod dequant;
pub mod ir;
pub mod kernel;
pub mod kv_type;
pub mod refusal;
pub mod templates;
pub mod testdata;

pub use caps::DeviceCaps;
pub use dequant::{WeightFormat, WeightLayout};
pub use kernel::{BufferBinding, CompiledKernel, KernelMeta, RequiredFeatures};
pub use kv_type::{KvType, KvTypes};
pub use refusal::Refusal;
pub use templates::attention::{
    AttentionPush, AttentionSchedule, AttentionWorkload, LaneReduce, ATTENTION_SCHEDULE_VERSION,
};
pub use templates::eltwise::{EltwisePush, EltwiseSchedule, EltwiseWorkload, ScalePush};
pub use templates::embedding::{EmbeddingPush, EmbeddingSchedule, EmbeddingWorkload};
pub use templates::gemm::{
    ActType, GemmPush, GemmSchedule, GemmWorkload, Math, NSlice, Precision, GEMM_SCHEDULE_VERSION,
};
pub use templates::kv_cache::{KvWritePush, KvWriteSchedule, KvWriteWorkload};
pub use templates::rms_norm::{RmsNormPush, RmsNormSchedule, RmsNormWorkload, RowReduce};
pub use templates::rope::{RopePush, RopeSchedule, RopeWorkload};
pub use templates::{
    default_schedule, dispatch_grid, instantiate, search_space, seed_schedules, Schedule, Workload,
    GLUE_SCHEDULE_VERSION,
};

/// Version of the compiler as it enters tuning-database keys: the crate version and the
/// schedule semantics versions of the GEMM, glue and attention templates.
pub fn compiler_version() -> String {
    format!(
        "{}+gemm{}+glue{}+attn{}",
        env!("CARGO_PKG_VERSION"),
        GEMM_SCHEDULE_VERSION,
        GLUE_SCHEDULE_VERSION,
        ATTENTION_SCHEDULE_VERSION
    )
}
