//! The GPU GEMM runner lives in the tuner (it measures trials); `rocky kernel` and
//! `rocky bench-gemm` use it through this module, with its errors turned into CLI errors.

pub use rocky_tuner::gemm_gpu::*;

use crate::error::CliError;

impl From<GpuError> for CliError {
    fn from(e: GpuError) -> CliError {
        match e {
            GpuError::Refused(r) => CliError::usage(format!("the kernel is refused: {r}")),
            GpuError::Device(d) => CliError::device(d.to_string()),
            GpuError::Internal(m) => CliError::internal(m),
        }
    }
}
