//! `rocky doctor`: checks the board's GPU stack (kernel driver, firmware, Vulkan driver,
//! environment) and every Vulkan device, and says what to do about each problem.
//!
//! The board checks read files only (sysfs, /proc, firmware, ICD manifests) under `--root`, so
//! tests run them on fixture trees; the Vulkan checks always use the real loader, and the
//! tuning lines the real (or `--db`) tuning database.

mod board;
mod tuning;
mod vulkan;

use crate::error::{CliError, CmdResult};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky doctor\n  rocky doctor --json | jq '.[] | select(.status == \"fail\")'\n\n\
Exit status: 0 when no check fails, 4 when any check fails."
)]
pub struct Args {
    /// Read sysfs, /proc, firmware and Vulkan ICD files under this directory instead of `/`
    /// (for testing on a copy of a board's files).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Print the checks as a JSON array of {check, status, detail, fix}; the tuning lines
    /// also carry their counts under `tuning`.
    #[arg(long)]
    pub json: bool,
    /// Tuning database to report on (default: $ROCKY_DB, else
    /// ~/.local/share/rocky/tuning.sled). Only read: the doctor never creates one.
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

/// The outcome of one check. Only `Fail` makes `rocky doctor` exit non-zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Works, with a consequence the user should know (slow, reduced precision, ...).
    Warn,
    /// rocky cannot use the GPU until this is fixed.
    Fail,
    /// Does not apply to this machine (e.g. RK3588 checks on another board).
    Skip,
    /// A fact, neither good nor bad.
    Info,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Pass => "✓ PASS",
            Status::Warn => "! WARN",
            Status::Fail => "✗ FAIL",
            Status::Skip => "- SKIP",
            Status::Info => "i INFO",
        }
    }
}

/// One line of the report: `check` is a stable id (`gpu-driver`, `device-0`, ...) for scripts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    pub check: String,
    pub status: Status,
    pub detail: String,
    /// What to do; `None` when there is nothing to do.
    pub fix: Option<String>,
    /// The counts behind a tuning line (absent from the other lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<tuning::TuningCounts>,
}

impl CheckResult {
    pub fn new(check: impl Into<String>, status: Status, detail: impl Into<String>) -> Self {
        CheckResult {
            check: check.into(),
            status,
            detail: detail.into(),
            fix: None,
            tuning: None,
        }
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Every check, in the order a user should fix them (kernel first, then firmware, driver,
/// environment, what Vulkan finally sees, and what the tuning database `db` (from `--db`, else
/// the default location) holds for each device).
pub fn all_checks(root: &std::path::Path, db: Option<&std::path::Path>) -> Vec<CheckResult> {
    let board = board::Board::read(root);
    let mut checks = vec![
        board.identity(),
        board.gpu_driver(),
        board.csf_firmware(),
        board.panvk_icd(),
        vulkan::xdg_runtime_dir(),
    ];
    checks.extend(vulkan::loader_and_devices(board.is_rk3588, db));
    checks
}

pub fn run(args: Args) -> CmdResult {
    if !args.root.is_dir() {
        return Err(CliError::usage(format!(
            "--root {} is not a directory: give the directory that stands for `/`",
            args.root.display()
        )));
    }
    let checks = all_checks(&args.root, args.db.as_deref());
    let text = if args.json {
        serde_json::to_string_pretty(&checks)
            .map_err(|e| CliError::internal(format!("cannot serialize the checks: {e}")))?
            + "\n"
    } else {
        render(&checks)
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(CliError::output(format!(
                "cannot write to standard output: {e}"
            )));
        }
    }
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .map(|c| c.check.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::device(format!(
            "{} check(s) failed: {} (see the fixes above)",
            failed.len(),
            failed.join(", ")
        )))
    }
}

/// The human-readable report: one aligned line per check, its fix indented below.
fn render(checks: &[CheckResult]) -> String {
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let _ = writeln!(
            out,
            "{}  {:<width$}  {}",
            c.status.mark(),
            c.check,
            c.detail
        );
        if let Some(fix) = &c.fix {
            let indent = " ".repeat(6 + 2 + width + 2);
            let _ = writeln!(out, "{indent}fix: {fix}");
        }
    }
    out
}
