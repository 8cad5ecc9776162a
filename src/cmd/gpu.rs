//! Opening a model on a Vulkan device for prefill: the flags every GPU command shares.

use crate::error::CliError;
use rocky_models::arch::Model;
use rocky_models::gguf::GgufFile;
use rocky_runtime::executor::{DefaultSchedules, ExecError, Executor, ExecutorOptions, GpuWeights};
use rocky_runtime::{CommandBudget, Context, DeviceSelector, RuntimeError};
use std::time::Duration;

#[derive(clap::Args, Clone, Debug)]
pub struct GpuArgs {
    /// Vulkan device: index or part of its name (see `rocky devices`); default: the best GPU.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tokens per ubatch (1 to 4096).
    #[arg(long, short = 'u', default_value_t = 512)]
    pub ubatch: usize,
    /// Estimated driver memory per command buffer before it is submitted, in MiB (default:
    /// derived from the device's driver).
    #[arg(long)]
    pub cb_budget_mib: Option<u64>,
    /// Most dispatches per command buffer (default: derived from the device).
    #[arg(long)]
    pub cb_max_dispatches: Option<u32>,
}

pub fn device_error(e: RuntimeError) -> CliError {
    match e {
        RuntimeError::OutOfMemory { .. } => CliError::device(format!(
            "{e}\nUse a smaller --ubatch or a smaller model, or close other GPU programs."
        )),
        e => CliError::device(e.to_string()),
    }
}

pub fn exec_error(e: ExecError) -> CliError {
    match e {
        ExecError::Runtime(r) => device_error(r),
        ExecError::Unsupported(m) => CliError::input(m),
        e => CliError::device(e.to_string()),
    }
}

pub struct GpuSession<'m> {
    executor: Executor<'m>,
}

impl<'m> GpuSession<'m> {
    pub fn open(
        args: &GpuArgs,
        file: &'m GgufFile,
        model: &'m Model,
        n_tokens: usize,
    ) -> Result<GpuSession<'m>, CliError> {
        if args.ubatch == 0 || args.ubatch > 4096 {
            return Err(CliError::usage(format!(
                "--ubatch {} is out of range: use 1 to 4096",
                args.ubatch
            )));
        }
        let selector: DeviceSelector = args
            .device
            .parse()
            .map_err(|e| CliError::usage(format!("--device {}: {e}", args.device)))?;
        let ctx = Context::new(&selector).map_err(device_error)?;
        let mut budget = CommandBudget::for_device(ctx.info());
        if let Some(mib) = args.cb_budget_mib {
            budget.max_driver_bytes = mib << 20;
        }
        if let Some(n) = args.cb_max_dispatches {
            if n == 0 {
                return Err(CliError::usage("--cb-max-dispatches must be at least 1"));
            }
            budget.max_dispatches = n;
        }
        let weights = GpuWeights::upload(&ctx, file, model).map_err(exec_error)?;
        let options = ExecutorOptions {
            ubatch: args.ubatch.min(n_tokens.max(1)),
            budget,
            timeout: Duration::from_secs(600),
        };
        let executor =
            Executor::new(&ctx, file, model, weights, options, n_tokens).map_err(exec_error)?;
        Ok(GpuSession { executor })
    }

    /// Builds every pipeline the prefill needs (not counted in its time).
    pub fn prepare(&mut self) -> Result<(), CliError> {
        self.executor.prepare(&DefaultSchedules).map_err(exec_error)
    }

    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>, CliError> {
        self.executor.prefill(ids, &DefaultSchedules).map_err(exec_error)
    }
}
