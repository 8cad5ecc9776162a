use crate::error::{CliError, CmdResult};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err(CliError::internal("`rocky kernel` is not built yet"))
}
