//! rocky's tuning database: every trial of every (device, compiler version, workload) in a
//! sled store, flushed as it completes, with the best schedule derived from the trials; plus
//! graph-level choices, and JSON-lines export/import for sharing records between machines.
//!
//! - [`fingerprint`]: which GPU and driver a record belongs to;
//! - [`record`]: keys, trials, provenance and their validation;
//! - [`store`]: [`TuningDb`] over sled;
//! - [`exchange`]: export (kernel records and graph choices) and the all-or-nothing,
//!   faster-wins import;
//! - [`seeds`]: unmeasured seed rankings (`rocky tune --static`), never winners;
//! - [`calibration`]: calibrations of the Mali cost model (`rocky predict`): a measured
//!   figure, the prediction before the fit, the fitted constants;
//! - [`paths`]: the default database location; [`presets`]: shipped records.

pub mod calibration;
pub mod error;
pub mod exchange;
pub mod fingerprint;
pub mod paths;
pub mod presets;
pub mod record;
pub mod seeds;
pub mod store;

pub use calibration::{
    validate_calibration, Calibration, CalibrationConstants, CalibrationTarget, FITTED_CONSTANTS,
};
pub use error::DbError;
pub use exchange::{
    export_jsonl, import_jsonl, parse_export_line, ExportFilter, ExportGraphChoice, ExportLine,
    ExportRecord, ExportSeedRanking, ExportSummary, ImportSummary, CALIBRATION_FORMAT,
    EXPORT_FORMAT, EXPORT_VERSION, GRAPH_CHOICE_FORMAT, SEED_RANKING_FORMAT,
};
pub use fingerprint::DeviceFingerprint;
pub use paths::default_db_path;
pub use presets::load_presets;
pub use record::{
    validate_trial, FailureKind, GraphChoice, Provenance, RecordKey, StoredTrial, Trial,
    TrialStatus,
};
pub use seeds::{RankedSchedule, SeedRanking};
pub use store::{Lookup, Stats, StoredGraphChoice, TuningDb, FORMAT_VERSION};
