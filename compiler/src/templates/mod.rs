//! Templates: (workload, schedule) → IR → SPIR-V, or a reasoned refusal.
//!
//! [`Workload`] and [`Schedule`] are the serializable keys the tuner and the tuning database
//! use (externally tagged by template: `{"gemm": {...}}`, `{"rms_norm": {...}}`, ...).
//!
//! Besides GEMM, the prefill graph of Qwen2 needs the glue templates [`rms_norm`], [`rope`],
//! [`eltwise`] (SwiGLU, residual add), [`embedding`], [`kv_cache`] (f16 cache writes) and
//! [`attention`] (causal GQA flash attention over the f16 cache). Each has its CPU reference
//! next to it; [`expected`] holds the shared "reference values with allowed error" check.

pub mod attention;
pub mod copy;
pub mod eltwise;
pub mod embedding;
pub mod expected;
pub mod gemm;
pub mod gemv;
pub mod greedy;
pub mod hadamard;
pub mod kv_cache;
pub mod peak;
pub mod rms_norm;
pub mod rope;

use serde::{Deserialize, Serialize};

use crate::caps::DeviceCaps;
use crate::codegen::{self, MAX_SPIRV_VERSION, MIN_SPIRV_VERSION};
use crate::ir::analysis::features;
use crate::ir::{Access, Module};
use crate::kernel::{BufferBinding, CompiledKernel, KernelMeta};
use crate::refusal::Refusal;

/// Version of the glue templates' schedule/kernel semantics (RMSNorm, RoPE, SwiGLU, add,
/// embedding, KV write). Bump it when stored tuning results for the same key become
/// meaningless; field names never change.
pub const GLUE_SCHEDULE_VERSION: u32 = 1;

/// What must be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    Gemm(gemm::GemmWorkload),
    RmsNorm(rms_norm::RmsNormWorkload),
    /// Every RoPE (NeoX or normal pairing, with or without frequency factors: see the
    /// workload). The name stays from when NeoX was the only one: it is the tag in the keys
    /// of stored tuning records.
    RopeNeox(rope::RopeWorkload),
    #[serde(rename = "swiglu")]
    SwiGlu(eltwise::EltwiseWorkload),
    #[serde(rename = "geglu")]
    GeGlu(eltwise::EltwiseWorkload),
    Add(eltwise::EltwiseWorkload),
    Scale(eltwise::EltwiseWorkload),
    Embedding(embedding::EmbeddingWorkload),
    KvWrite(kv_cache::KvWriteWorkload),
    Attention(attention::AttentionWorkload),
    /// A GEMM of at most 8 rows computed by the GEMV template (decode): a workload of its
    /// own, so its tuning records never collide with the GEMM's of the same shape.
    Gemv(gemm::GemmWorkload),
    /// The Walsh-Hadamard rotation of Q before attention and of its output back, around a
    /// q8_0 cache with the rotation on ([`hadamard`]).
    Hadamard(hadamard::HadamardWorkload),
}

/// How it is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    Gemm(gemm::GemmSchedule),
    RmsNorm(rms_norm::RmsNormSchedule),
    RopeNeox(rope::RopeSchedule),
    #[serde(rename = "swiglu")]
    SwiGlu(eltwise::EltwiseSchedule),
    #[serde(rename = "geglu")]
    GeGlu(eltwise::EltwiseSchedule),
    Add(eltwise::EltwiseSchedule),
    Scale(eltwise::EltwiseSchedule),
    Embedding(embedding::EmbeddingSchedule),
    KvWrite(kv_cache::KvWriteSchedule),
    Attention(attention::AttentionSchedule),
    Gemv(gemv::GemvSchedule),
    Hadamard(hadamard::HadamardSchedule),
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Gemm(_) => "gemm",
            Workload::RmsNorm(_) => "rms_norm",
            Workload::RopeNeox(_) => "rope_neox",
            Workload::SwiGlu(_) => "swiglu",
            Workload::GeGlu(_) => "geglu",
            Workload::Add(_) => "add",
            Workload::Scale(_) => "scale",
            Workload::Embedding(_) => "embedding",
            Workload::KvWrite(_) => "kv_write",
            Workload::Attention(_) => "attention",
            Workload::Gemv(_) => "gemv",
            Workload::Hadamard(_) => "hadamard",
        }
    }

    /// Useful floating-point operations, for GFLOP/s figures (0 for pure data movement).
    pub fn flops(&self) -> u64 {
        match self {
            Workload::Gemm(g) | Workload::Gemv(g) => g.flops(),
            Workload::RmsNorm(w) => w.flops(),
            Workload::RopeNeox(w) => w.flops(),
            Workload::SwiGlu(w) => w.swiglu_flops(),
            Workload::GeGlu(w) => w.geglu_flops(),
            Workload::Add(w) | Workload::Scale(w) => w.add_flops(),
            Workload::Embedding(_) | Workload::KvWrite(_) => 0,
            Workload::Attention(w) => w.flops(),
            Workload::Hadamard(w) => w.flops(),
        }
    }
}

impl Schedule {
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::Gemm(_) => "gemm",
            Schedule::RmsNorm(_) => "rms_norm",
            Schedule::RopeNeox(_) => "rope_neox",
            Schedule::SwiGlu(_) => "swiglu",
            Schedule::GeGlu(_) => "geglu",
            Schedule::Add(_) => "add",
            Schedule::Scale(_) => "scale",
            Schedule::Embedding(_) => "embedding",
            Schedule::KvWrite(_) => "kv_write",
            Schedule::Attention(_) => "attention",
            Schedule::Gemv(_) => "gemv",
            Schedule::Hadamard(_) => "hadamard",
        }
    }
}

fn mismatch(workload: &Workload, schedule: &Schedule) -> Refusal {
    Refusal::Mismatch {
        workload: workload.kind().into(),
        schedule: schedule.kind().into(),
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
        (Workload::Gemv(w), Schedule::Gemv(s)) => gemv::instantiate(w, s, device),
        (Workload::RmsNorm(w), Schedule::RmsNorm(s)) => rms_norm::instantiate(w, s, device),
        (Workload::RopeNeox(w), Schedule::RopeNeox(s)) => rope::instantiate(w, s, device),
        (Workload::SwiGlu(w), Schedule::SwiGlu(s)) => {
            eltwise::instantiate(eltwise::EltwiseOp::SwiGlu, w, s, device)
        }
        (Workload::GeGlu(w), Schedule::GeGlu(s)) => {
            eltwise::instantiate(eltwise::EltwiseOp::GeGlu, w, s, device)
        }
        (Workload::Add(w), Schedule::Add(s)) => {
            eltwise::instantiate(eltwise::EltwiseOp::Add, w, s, device)
        }
        (Workload::Scale(w), Schedule::Scale(s)) => {
            eltwise::instantiate(eltwise::EltwiseOp::Scale, w, s, device)
        }
        (Workload::Embedding(w), Schedule::Embedding(s)) => embedding::instantiate(w, s, device),
        (Workload::KvWrite(w), Schedule::KvWrite(s)) => kv_cache::instantiate(w, s, device),
        (Workload::Attention(w), Schedule::Attention(s)) => attention::instantiate(w, s, device),
        (Workload::Hadamard(w), Schedule::Hadamard(s)) => hadamard::instantiate(w, s, device),
        _ => Err(mismatch(workload, schedule)),
    }
}

/// Whether kernels of `workload` read the token's position (RoPE, the KV write, attention):
/// those have an args form ([`instantiate_with_args`]) that a replayed decode step runs.
pub fn reads_position(workload: &Workload) -> bool {
    matches!(
        workload,
        Workload::RopeNeox(_) | Workload::KvWrite(_) | Workload::Attention(_)
    )
}

/// The kernel of `workload` with `schedule` whose push constants are read from a storage
/// buffer instead ([`crate::ir::args_buffer`], binding `args`, one u32 word per field in the
/// push block's order): the kernels of a decode step that read the token's position (RoPE,
/// the KV write, attention), so the step can be recorded once and replayed with the position
/// rewritten in memory. Other workloads keep their push constants and are refused here.
pub fn instantiate_with_args(
    workload: &Workload,
    schedule: &Schedule,
    device: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    let module = match (workload, schedule) {
        (Workload::RopeNeox(w), Schedule::RopeNeox(s)) => {
            rope::validate_workload(w)?;
            s.validate(w, device)?;
            rope::kernel_ir(w, s)
        }
        (Workload::KvWrite(w), Schedule::KvWrite(s)) => {
            kv_cache::validate_workload(w)?;
            s.validate(w, device)?;
            kv_cache::kernel_ir(w, s)
        }
        (Workload::Attention(w), Schedule::Attention(s)) => {
            w.validate()?;
            s.validate(w, device)?;
            attention::kernel_ir(w, s)
        }
        _ if reads_position(workload) => return Err(mismatch(workload, schedule)),
        _ => {
            return Err(Refusal::Workload(format!(
                "{} kernels read no position: they keep their push constants",
                workload.kind()
            )))
        }
    };
    compile(
        &crate::ir::args_buffer::push_constants_from_buffer(&module),
        device,
    )
}

/// Every candidate schedule of `workload` that instantiates on `device`.
pub fn search_space(workload: &Workload, device: &DeviceCaps) -> Vec<Schedule> {
    fn wrap<S>(v: Vec<S>, f: impl Fn(S) -> Schedule) -> Vec<Schedule> {
        v.into_iter().map(f).collect()
    }
    match workload {
        Workload::Gemm(w) => wrap(gemm::search_space(w, device), Schedule::Gemm),
        Workload::Gemv(w) => wrap(gemv::search_space(w, device), Schedule::Gemv),
        Workload::RmsNorm(w) => wrap(rms_norm::search_space(w, device), Schedule::RmsNorm),
        Workload::RopeNeox(w) => wrap(rope::search_space(w, device), Schedule::RopeNeox),
        Workload::SwiGlu(w) => wrap(eltwise::search_space(w, device), Schedule::SwiGlu),
        Workload::GeGlu(w) => wrap(eltwise::search_space(w, device), Schedule::GeGlu),
        Workload::Add(w) => wrap(eltwise::search_space(w, device), Schedule::Add),
        Workload::Scale(w) => wrap(eltwise::search_space(w, device), Schedule::Scale),
        Workload::Embedding(w) => wrap(embedding::search_space(w, device), Schedule::Embedding),
        Workload::KvWrite(w) => wrap(kv_cache::search_space(w, device), Schedule::KvWrite),
        Workload::Attention(w) => wrap(attention::search_space(w, device), Schedule::Attention),
        Workload::Hadamard(w) => wrap(hadamard::search_space(w, device), Schedule::Hadamard),
    }
}

/// The rule-based schedule used when `workload` is untuned on `device`.
/// Schedules of `workload`'s space a search should try first, beside the default: shapes
/// measured fast on some device that a short random search rarely draws (the register-tiled
/// attention: 3 of the 1,575 schedules of the 3B shape on the H200). Each is still timed and checked.
pub fn seed_schedules(workload: &Workload, device: &DeviceCaps) -> Vec<Schedule> {
    match workload {
        Workload::Attention(w) => attention::seed_schedules(w, device)
            .into_iter()
            .map(Schedule::Attention)
            .collect(),
        _ => Vec::new(),
    }
}

pub fn default_schedule(workload: &Workload, device: &DeviceCaps) -> Schedule {
    match workload {
        Workload::Gemm(w) => Schedule::Gemm(gemm::default_schedule(w, device)),
        Workload::Gemv(w) => Schedule::Gemv(gemv::default_schedule(w, device)),
        Workload::RmsNorm(w) => Schedule::RmsNorm(rms_norm::default_schedule(w, device)),
        Workload::RopeNeox(w) => Schedule::RopeNeox(rope::default_schedule(w, device)),
        Workload::SwiGlu(w) => Schedule::SwiGlu(eltwise::default_schedule(w, device)),
        Workload::GeGlu(w) => Schedule::GeGlu(eltwise::default_schedule(w, device)),
        Workload::Add(w) => Schedule::Add(eltwise::default_schedule(w, device)),
        Workload::Scale(w) => Schedule::Scale(eltwise::default_schedule(w, device)),
        Workload::Embedding(w) => Schedule::Embedding(embedding::default_schedule(w, device)),
        Workload::KvWrite(w) => Schedule::KvWrite(kv_cache::default_schedule(w, device)),
        Workload::Attention(w) => Schedule::Attention(attention::default_schedule(w, device)),
        Workload::Hadamard(w) => Schedule::Hadamard(hadamard::default_schedule(w, device)),
    }
}

/// Workgroup counts of one dispatch covering the whole workload.
pub fn dispatch_grid(workload: &Workload, schedule: &Schedule) -> Result<[u32; 3], Refusal> {
    match (workload, schedule) {
        (Workload::Gemm(w), Schedule::Gemm(s)) => Ok(gemm::dispatch_grid(w, s)),
        (Workload::Gemv(w), Schedule::Gemv(s)) => Ok(gemv::dispatch_grid(w, s)),
        (Workload::RmsNorm(w), Schedule::RmsNorm(s)) => Ok(rms_norm::dispatch_grid(w, s)),
        (Workload::RopeNeox(w), Schedule::RopeNeox(s)) => Ok(rope::dispatch_grid(w, s)),
        (Workload::SwiGlu(w), Schedule::SwiGlu(s))
        | (Workload::GeGlu(w), Schedule::GeGlu(s))
        | (Workload::Add(w), Schedule::Add(s))
        | (Workload::Scale(w), Schedule::Scale(s)) => Ok(eltwise::dispatch_grid(w, s)),
        (Workload::Embedding(w), Schedule::Embedding(s)) => Ok(embedding::dispatch_grid(w, s)),
        (Workload::KvWrite(w), Schedule::KvWrite(s)) => Ok(kv_cache::dispatch_grid(w, s)),
        (Workload::Attention(w), Schedule::Attention(s)) => Ok(attention::dispatch_grid(w, s)),
        (Workload::Hadamard(w), Schedule::Hadamard(s)) => Ok(hadamard::dispatch_grid(w, s)),
        _ => Err(mismatch(workload, schedule)),
    }
}

// ---- helpers shared by the glue templates ---------------------------------------------------

/// The largest number of workgroups one grid dimension may hold on every Vulkan device
/// (`maxComputeWorkGroupCount` is at least 65535): templates put rows on a grid dimension.
pub(crate) const MAX_GRID_DIM: u32 = 65535;

/// Checks a one-dimensional workgroup of `threads` invocations against the device limits.
pub(crate) fn check_threads(threads: u32, caps: &DeviceCaps) -> Result<(), Refusal> {
    if threads == 0 {
        return Err(Refusal::Schedule(
            "a workgroup needs at least one thread".into(),
        ));
    }
    let max = caps
        .max_workgroup_invocations
        .min(caps.max_workgroup_size[0]);
    if threads > max {
        return Err(Refusal::DeviceLimit(format!(
            "{threads} threads per workgroup, the device allows {max}"
        )));
    }
    Ok(())
}

/// Checks the workgroup memory a schedule declares against the device limit.
pub(crate) fn check_shared(bytes: u32, caps: &DeviceCaps) -> Result<(), Refusal> {
    if bytes > caps.max_shared_memory_bytes {
        return Err(Refusal::DeviceLimit(format!(
            "{bytes} bytes of shared memory, the device allows {}",
            caps.max_shared_memory_bytes
        )));
    }
    Ok(())
}

/// Lowers a validated template module for `caps`: checks the SPIR-V version and the features
/// the module actually uses, emits SPIR-V and collects the kernel metadata.
pub(crate) fn compile(module: &Module, caps: &DeviceCaps) -> Result<CompiledKernel, Refusal> {
    if caps.spirv_version < MIN_SPIRV_VERSION {
        return Err(Refusal::DeviceLimit(format!(
            "SPIR-V {}.{}: the compiler needs at least {}.{}",
            caps.spirv_version.0, caps.spirv_version.1, MIN_SPIRV_VERSION.0, MIN_SPIRV_VERSION.1
        )));
    }
    let version = caps.spirv_version.min(MAX_SPIRV_VERSION);
    let required = features(module).required();
    let missing = caps.missing(&required);
    if !missing.is_empty() {
        return Err(Refusal::MissingFeature(missing.join(", ")));
    }
    let spirv = codegen::emit(module, version).map_err(|e| Refusal::Internal(e.to_string()))?;
    let bindings = module
        .buffers
        .iter()
        .map(|b| BufferBinding {
            binding: b.binding,
            name: b.name.clone(),
            read_only: b.access == Access::ReadOnly,
        })
        .collect();
    let meta = KernelMeta {
        name: module.name.clone(),
        bindings,
        push_constant_bytes: module.push_constant_bytes(),
        workgroup_size: module.workgroup_size,
        shared_bytes: module.shared_bytes(),
        required,
        spirv_version: version,
    };
    Ok(CompiledKernel {
        meta,
        spirv,
        source: Some(std::sync::Arc::new(crate::kernel::KernelSource {
            module: module.clone(),
            caps: caps.clone(),
        })),
    })
}

/// Little-endian bytes of a push-constant block made of 32-bit fields, in order.
pub(crate) fn push_bytes(fields: &[u32]) -> Vec<u8> {
    fields.iter().flat_map(|v| v.to_le_bytes()).collect()
}
