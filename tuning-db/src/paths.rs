//! Where the tuning database lives by default.

use std::path::PathBuf;

/// `$ROCKY_DB` if set, else `$XDG_DATA_HOME/rocky/tuning.sled`, else
/// `~/.local/share/rocky/tuning.sled`; `None` only when none of `ROCKY_DB`, `XDG_DATA_HOME`
/// and `HOME` is set.
pub fn default_db_path() -> Option<PathBuf> {
    resolve_db_path(
        std::env::var_os("ROCKY_DB"),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

/// The rule of [`default_db_path`] on explicit values (empty values count as unset, as the
/// XDG spec asks), so it can be tested without touching the process environment.
pub fn resolve_db_path(
    rocky_db: Option<std::ffi::OsString>,
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = set(rocky_db) {
        return Some(p);
    }
    if let Some(d) = set(xdg_data_home) {
        return Some(d.join("rocky").join("tuning.sled"));
    }
    set(home).map(|h| h.join(".local/share/rocky/tuning.sled"))
}
