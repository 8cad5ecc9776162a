//! One module per subcommand; each has an `Args` (clap) and a `run`.

pub mod bench;
pub mod bench_attention;
pub mod bench_gemm;
pub mod db;
pub mod devices;
pub mod doctor;
pub mod generate;
pub mod gpu;
pub mod info;
pub mod kernel;
pub mod prefill;
pub mod prompt;
pub mod report;
pub mod serve;
pub mod staging;
pub mod synth;
pub mod tokenize;
pub mod tune;
pub mod tune_static;

use crate::error::CliError;
use rocky_models::gguf::{GgufError, GgufFile};
use std::path::Path;

/// Opens a GGUF file for a command, turning every failure into an input error that names the
/// file and says what to do.
pub fn open_gguf(path: &Path) -> Result<GgufFile, CliError> {
    if !path.exists() {
        return Err(CliError::input(format!(
            "model file {} does not exist: check the path (`rocky synth` makes a test model)",
            path.display()
        )));
    }
    GgufFile::open(path).map_err(|e| match e {
        GgufError::Io { .. } => CliError::input(format!("cannot read the model: {e}")),
        GgufError::Malformed { .. } => CliError::input(format!(
            "not a usable GGUF file: {e}\nThe file is damaged or not a GGUF model: download or convert it again."
        )),
    })
}
