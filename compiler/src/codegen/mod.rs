//! IR → SPIR-V words with rspirv.
//!
//! One module per kernel: entry point `main` (GLCompute) with `LocalSize` from the IR, storage
//! buffers as `StorageBuffer` Block structs holding a runtime array (descriptor set 0,
//! `NonWritable` when read-only), one push-constant Block, workgroup arrays, built-in inputs.
//! Control flow is structured: every `if` gets an `OpSelectionMerge`, every loop an
//! `OpLoopMerge` with a dedicated continue block. Capabilities and extensions come from
//! [`crate::ir::analysis::features`].

mod capabilities;
mod emitter;
mod types;

use thiserror::Error;

pub use capabilities::capabilities_and_extensions;

use crate::ir::{self, Module};

/// Lowest SPIR-V version we emit: StorageBuffer storage class and subgroup ops are core here.
pub const MIN_SPIRV_VERSION: (u8, u8) = (1, 3);
/// Highest SPIR-V version we emit (Vulkan 1.3).
pub const MAX_SPIRV_VERSION: (u8, u8) = (1, 6);

#[derive(Debug, Error)]
pub enum CodegenError {
    #[error("invalid IR: {0}")]
    Ir(#[from] ir::verify::IrError),
    #[error("SPIR-V version {}.{} is not supported: use 1.3 to 1.6", .0.0, .0.1)]
    Version((u8, u8)),
    #[error("kernel {kernel}: {detail}")]
    Unsupported { kernel: String, detail: String },
    #[error("internal rspirv builder error: {0}")]
    Builder(String),
}

/// Lowers `module` to SPIR-V words for the given SPIR-V version (1.3 ..= 1.6).
pub fn emit(module: &Module, spirv_version: (u8, u8)) -> Result<Vec<u32>, CodegenError> {
    if spirv_version < MIN_SPIRV_VERSION || spirv_version > MAX_SPIRV_VERSION {
        return Err(CodegenError::Version(spirv_version));
    }
    ir::verify::verify(module)?;
    emitter::Emitter::new(module, spirv_version).run()
}
