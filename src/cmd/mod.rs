//! One module per subcommand; each has an `Args` (clap) and a `run`.

pub mod bench;
pub mod bench_attention;
pub mod bench_gemm;
pub mod bench_gemv;
pub mod db;
pub mod devices;
pub mod doctor;
pub mod generate;
pub mod gpu;
pub mod info;
pub mod kernel;
pub mod predict;
pub mod prefill;
pub mod prompt;
pub mod report;
pub mod serve;
pub mod synth;
pub mod tokenize;
pub mod tune;
pub mod tune_static;

use crate::error::CliError;
use rocky_models::gguf::GgufFile;
use std::path::Path;

/// Opens a GGUF file for a command, turning every failure into an input error that names the
/// file and says what to do (the engine's wording, shared with its `Model::open`).
pub fn open_gguf(path: &Path) -> Result<GgufFile, CliError> {
    rocky_engine::open_gguf(path).map_err(gpu::load_error)
}
