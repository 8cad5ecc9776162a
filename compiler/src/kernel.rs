//! What a compiled kernel carries besides its SPIR-V words: everything the runtime needs to
//! create a pipeline and dispatch it, without knowing which template produced it.
//!
//! Contract between `compiler` and `runtime`: all storage buffers live in descriptor set 0 at
//! the binding numbers listed here; push constants are one block of `push_constant_bytes`
//! (a multiple of 4) at offset 0 visible to the compute stage; the entry point is `main`.
//!
//! Tensors larger than `maxStorageBufferRange` (128 MiB on lavapipe, e.g. a 151936×2048
//! embedding) are processed in slices: one pipeline, one dispatch per slice, each with the
//! weight binding set to the slice's byte range and the slice described in push constants.
//! For GEMM (`templates::gemm::interface` has the details): `n_slices(workload,
//! maxStorageBufferRange, minStorageBufferOffsetAlignment)` lists the slices (output columns
//! `n_offset..n_offset+n`, weight byte offset and range), `GemmPush::for_slice` their push
//! constants and `dispatch_grid_for(m, slice.n, schedule)` their workgroup counts; bias and Y
//! stay bound whole. Weight ranges are rounded up to 4 bytes (kernels read u32 words), so
//! weight buffers must be allocated with that padding.

use serde::{Deserialize, Serialize};

/// One storage-buffer binding of a kernel (descriptor set 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferBinding {
    pub binding: u32,
    /// Human-readable role ("x", "weight", "bias", "y", ...) used in errors and profiles.
    pub name: String,
    pub read_only: bool,
}

/// Optional device capabilities a kernel needs. The runtime refuses to build a kernel whose
/// requirements the device lacks (and the tuner never proposes one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequiredFeatures {
    /// `shaderFloat16` (f16 arithmetic).
    pub float16: bool,
    /// `storageBuffer16BitAccess` (f16/u16 loads and stores in storage buffers).
    pub storage_16bit: bool,
    /// `storageBuffer8BitAccess` (u8/i8 loads and stores in storage buffers).
    pub storage_8bit: bool,
    /// `shaderInt8` (8-bit integer arithmetic).
    pub int8: bool,
    /// `shaderInt16` (16-bit integer arithmetic). Added by the compiler; `serde(default)` keeps
    /// older serialized metadata readable.
    #[serde(default)]
    pub int16: bool,
    /// `shaderIntegerDotProduct` (VK_KHR_shader_integer_dot_product / Vulkan 1.3).
    pub integer_dot_product: bool,
    /// Subgroup arithmetic operations (reductions).
    pub subgroup_arithmetic: bool,
    /// Subgroup shuffles.
    pub subgroup_shuffle: bool,
}

/// Metadata of one compiled compute kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelMeta {
    /// Stable, descriptive name (template + key schedule parameters).
    pub name: String,
    pub bindings: Vec<BufferBinding>,
    /// Size in bytes of the push-constant block (0 = none).
    pub push_constant_bytes: u32,
    /// `LocalSize` of the entry point.
    pub workgroup_size: [u32; 3],
    /// Bytes of workgroup (shared) memory the kernel declares: the driver-side budgeting on
    /// panvk allocates per dispatch from this.
    pub shared_bytes: u32,
    pub required: RequiredFeatures,
    /// SPIR-V version the module was emitted for, as (major, minor).
    pub spirv_version: (u8, u8),
}

/// A kernel ready for the runtime: SPIR-V words plus metadata.
#[derive(Clone, Debug)]
pub struct CompiledKernel {
    pub meta: KernelMeta,
    pub spirv: Vec<u32>,
    /// The module and device it was compiled from, for the forms derived from it
    /// ([`CompiledKernel::chained`]); `None` for kernels not built from a template module.
    pub source: Option<std::sync::Arc<KernelSource>>,
}

/// What a kernel was compiled from.
#[derive(Clone, Debug)]
pub struct KernelSource {
    pub module: crate::ir::Module,
    pub caps: crate::DeviceCaps,
}

impl CompiledKernel {
    /// The same kernel ordered by counters instead of pipeline barriers
    /// (`ir::chain::ordered_by_counters`): one more binding (`chain`, last) and three more
    /// push-constant words. `None` where the kernel keeps no source.
    pub fn chained(
        &self,
        model_data: crate::ir::chain::ModelData,
    ) -> Option<Result<CompiledKernel, crate::Refusal>> {
        self.source.as_deref().map(|s| s.chained(model_data))
    }
}

impl KernelSource {
    /// The kernel compiled from this source ordered by counters (see
    /// [`CompiledKernel::chained`]).
    pub fn chained(
        &self,
        model_data: crate::ir::chain::ModelData,
    ) -> Result<CompiledKernel, crate::Refusal> {
        crate::templates::compile(
            &crate::ir::chain::ordered_by_counters(&self.module, model_data),
            &self.caps,
        )
    }
}
