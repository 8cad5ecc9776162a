//! The GGUF container format (llama.cpp's model files): a validating reader and a streaming
//! writer.

mod reader;
mod value;
mod writer;

pub use reader::{GgufFile, TensorInfo};
pub use value::{MetaValue, ValueType};
pub use writer::{GgufWriter, TensorSpec};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is damaged, hostile, or not what rocky expects. `offset` is the byte offset of
    /// the field in the file where one applies.
    #[error("{}: {field}{}: {detail}", path.display(), offset.map(|o| format!(" (byte offset {o})")).unwrap_or_default())]
    Malformed {
        path: PathBuf,
        field: String,
        offset: Option<u64>,
        detail: String,
    },
}
