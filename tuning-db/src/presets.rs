//! Preset records shipped with rocky (see `tuning-db/presets/README.md`).

use std::path::Path;

use crate::error::DbError;
use crate::exchange::{import_jsonl, ImportSummary};
use crate::store::TuningDb;

/// Imports every `*.jsonl` file of `dir` (sorted by name) with the usual validating,
/// all-or-nothing-per-file merge; the source name is `preset:<file name>`. A missing
/// directory imports nothing.
pub fn load_presets(db: &TuningDb, dir: &Path) -> Result<Vec<(String, ImportSummary)>, DbError> {
    let io_err = |context: String| move |source| DbError::Io { context, source };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(io_err(format!(
                "reading presets directory {}",
                dir.display()
            ))(e))
        }
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let reader = std::fs::File::open(&file)
            .map(std::io::BufReader::new)
            .map_err(io_err(format!("opening preset file {}", file.display())))?;
        let summary = import_jsonl(db, reader, &format!("preset:{name}"))?;
        out.push((name, summary));
    }
    Ok(out)
}
