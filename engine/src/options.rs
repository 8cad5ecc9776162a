//! How a session runs: which device, which tuning database, and the overrides of what the
//! database or the device's defaults would choose. `EngineOptions::default()` is what `rocky`
//! does without flags.

use rocky_compiler::KvTypes;
use rocky_runtime::executor::{LayoutChoice, MathFamily};
use rocky_runtime::DeviceSelector;
use std::path::PathBuf;

/// The ubatch when neither the options nor a tuned graph-level choice give one.
pub const DEFAULT_UBATCH: usize = 512;

/// The largest ubatch a session runs.
pub const MAX_UBATCH: usize = 4096;

/// Where the tuned schedules come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Database {
    /// `$ROCKY_DB`, else `~/.local/share/rocky/tuning.sled` (XDG): the one `rocky tune` fills.
    #[default]
    Default,
    /// This database.
    At(PathBuf),
    /// None: the compiler's default schedules for every workload.
    None,
}

impl Database {
    /// The database's location; `None` for [`Database::None`], or where no default location
    /// can be derived (no home directory).
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Database::Default => rocky_tuning_db::default_db_path(),
            Database::At(path) => Some(path.clone()),
            Database::None => None,
        }
    }
}

/// Options of a session; each `None`/`Auto` lets the tuned choice or the default decide.
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// The Vulkan device (default: the best GPU).
    pub device: DeviceSelector,
    /// The tuning database whose schedules (and graph-level choices) to use. A missing one
    /// means "not tuned yet"; a damaged one is an error, not a silent fallback.
    pub database: Database,
    /// Tokens per ubatch, 1 to [`MAX_UBATCH`]; default: the tuned one, else
    /// [`DEFAULT_UBATCH`].
    pub ubatch: Option<usize>,
    /// Estimated driver memory per command buffer before it is submitted, in MiB (default:
    /// derived from the device's driver).
    pub cb_budget_mib: Option<u64>,
    /// Most dispatches per command buffer, at least 1 (default: tuned, else derived from the
    /// device).
    pub cb_max_dispatches: Option<u32>,
    /// One math family on every GEMM; `None` keeps the tuned or default schedule's.
    pub math: Option<MathFamily>,
    /// Stage every GEMM's operands in workgroup shared memory (a test of the driver's
    /// shared-memory allocation and the command-buffer budget; slower on Mali).
    pub force_shared_memory: bool,
    /// Device layout of the GEMM weights.
    pub weight_layout: LayoutChoice,
    /// Time every kernel with GPU timestamps (where the device has them): see
    /// [`crate::Session::profile_table`].
    pub profile: bool,
    /// The KV cache's element types, K and V apart (`--cache-type-k/-v`; default f16 both).
    pub kv: KvTypes,
    /// llama.cpp's Walsh-Hadamard rotation around a q8_0 cache (`--kv-rotation`; off by
    /// default): see `rocky_runtime::executor::ExecutorOptions::kv_rotation`.
    pub kv_rotation: bool,
}
