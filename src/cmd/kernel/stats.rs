//! `rocky kernel --stats`: the driver's own statistics of a kernel's compiled pipeline
//! (`VK_KHR_pipeline_executable_properties`), without running it: what a device that cannot
//! execute or time (the mali-shim) still tells about a schedule.

use crate::error::CliError;
use rocky_runtime::{CompiledKernel, ComputePipeline, Context, PipelineStatistics, RuntimeError};

/// Compiles `kernel` on `ctx` with statistics captured. No pipeline cache: a pipeline served
/// from one may come without its statistics, and compiling is what is asked for.
pub fn of_kernel(ctx: &Context, kernel: &CompiledKernel) -> Result<PipelineStatistics, CliError> {
    match ComputePipeline::with_statistics(ctx, None, kernel) {
        Ok((_pipeline, stats)) => Ok(stats),
        Err(e @ RuntimeError::StatisticsUnsupported { .. }) => Err(CliError::device(format!(
            "--stats: {e}; `rocky kernel --dump-spirv` and the driver's own debug output \
             (Mesa: BIFROST_MESA_DEBUG=shaderdb on panvk) are the alternatives"
        ))),
        Err(e) => Err(CliError::device(e.to_string())),
    }
}

/// One line per statistic: `executable: name = value (description)`.
pub fn text(stats: &PipelineStatistics) -> Vec<String> {
    let mut lines = Vec::new();
    if stats.executables.is_empty() {
        lines.push("the driver reported no executables for this pipeline".to_string());
    }
    for exe in &stats.executables {
        lines.push(format!(
            "{} (subgroup size {}): {}",
            exe.name, exe.subgroup_size, exe.description
        ));
        let width = exe
            .statistics
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0);
        for s in &exe.statistics {
            lines.push(format!(
                "  {:<width$}  {:>10}  {}",
                s.name,
                number(s.value),
                s.description
            ));
        }
    }
    lines
}

/// Integers without a fraction, others with up to two decimals.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}
