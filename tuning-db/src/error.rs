//! Errors of the tuning database: each names the path or line at fault and what to do next.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(
        "cannot create or write the tuning database at {path}: {source}; \
         fix the permissions or choose a writable location (--db PATH or ROCKY_DB)"
    )]
    NotWritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{path} is not a rocky tuning database ({reason}); \
         choose a new path or an existing database directory (--db PATH or ROCKY_DB)"
    )]
    NotADatabase { path: PathBuf, reason: String },

    #[error(
        "the tuning database at {path} is corrupt ({detail}); it was left untouched: \
         move it aside and re-import an export (`rocky db import`) or tune again"
    )]
    Corrupt { path: PathBuf, detail: String },

    #[error(
        "the tuning database at {path} is in use by another process ({detail}); \
         wait for it to finish or use another database (--db PATH or ROCKY_DB)"
    )]
    Locked { path: PathBuf, detail: String },

    #[error(
        "the tuning database at {path} has format version {found}, this rocky supports {supported}; \
         use a matching rocky or a new database path"
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: String,
        supported: u32,
    },

    #[error("tuning database storage error: {0}")]
    Storage(#[from] sled::Error),

    #[error("a stored {what} does not decode ({detail}); the database may be damaged")]
    BadStoredValue { what: &'static str, detail: String },

    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },

    #[error("import from {source_name}, line {line}: {message}; nothing was imported")]
    ImportLine {
        source_name: String,
        line: usize,
        message: String,
    },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}
