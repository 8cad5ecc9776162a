//! Errors that end a CLI command, each with an exit code a script can act on.

use std::fmt;
use std::process::ExitCode;

/// Why a command failed, which decides the exit code:
/// 1 internal, 2 usage (bad flags or values), 3 bad input file (model, prompt, database file),
/// 4 no usable device or a device failure, 5 unwritable output or database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Internal = 1,
    Usage = 2,
    Input = 3,
    Device = 4,
    Output = 5,
}

#[derive(Debug)]
pub struct CliError {
    pub kind: ErrorKind,
    pub message: String,
}

impl CliError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CliError {
            kind,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Input, message)
    }
    pub fn device(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Device, message)
    }
    pub fn output(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Output, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.kind as u8)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type CmdResult = Result<(), CliError>;
