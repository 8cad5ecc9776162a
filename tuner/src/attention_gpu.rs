//! Attention on the GPU, for the tuner's trials and `rocky bench-attention`: seeded inputs of
//! a workload's longest ubatch, buffers, timing with GPU timestamps (or the host clock, see
//! [`AttentionOnGpu::timing`]), the check against the compiler's CPU reference on sampled
//! query rows (every row on small workloads), and one trial ([`measure_attention`]).
//!
//! A workload is measured at its longest ubatch: the `m` query rows end at `max_kv`
//! (pos0 = max_kv − m), the keys a prefill's last ubatch of that length attends. The
//! reference is computed once per workload and checks every candidate.

use crate::fault::{self, Fault};
use crate::gemm_gpu::{GpuError, DEFAULT_TIMEOUT};
use crate::measure::{
    classify, keep_driver_stats, timed_runs, timing_method, trial_of, MeasureOptions, TimedRuns,
};
use rocky_compiler::templates::attention::combine::{
    combine_grid, instantiate_combine, CombinePush,
};
use rocky_compiler::templates::attention::split_kv::{
    counters_for, is_split, scratch_values, splits_for, BINDING_COUNTERS, BINDING_FUSED_OUT,
};
use rocky_compiler::templates::attention::workload::{
    BINDING_K_CACHE, BINDING_OUT, BINDING_Q, BINDING_V_CACHE,
};
use rocky_compiler::templates::attention::{
    dispatch_grid, reference_rows, AttentionPush, AttentionSchedule, AttentionWorkload,
    ReferenceRows,
};
use rocky_compiler::testdata::{random_activations, SplitMix64};
use rocky_compiler::KvType;
use rocky_compiler::{CompiledKernel, Refusal, Schedule};
use rocky_runtime::{
    host_time_submit, Buffer, BufferRange, ComputePipeline, Context, PipelineCache,
    PipelineStatistics, Recorder, RuntimeError, TimestampQueries, TimingMethod,
};
use rocky_tuning_db::{FailureKind, Trial};
use std::time::{Duration, Instant};

/// Query·key multiply-adds (per head) up to which every query row is checked; bigger
/// workloads check [`SAMPLED_ROWS`] seeded rows plus the first and the last.
const FULL_CHECK_PAIRS: u64 = 1 << 18;
const SAMPLED_ROWS: usize = 8;

fn device_error(e: RuntimeError) -> GpuError {
    GpuError::Device(e)
}

/// Seeded inputs of a workload's longest ubatch and their reference.
pub struct AttentionInputs {
    pub pos0: u32,
    /// q: m × q_width; scaled ×2 so that the softmax weights are far from uniform.
    pub q: Vec<f32>,
    /// pos0 + m positions of f16 pairs (KV-write layout).
    pub k_cache: Vec<u32>,
    pub v_cache: Vec<u32>,
    /// The checked rows' reference values and error statistics.
    pub reference: ReferenceRows,
}

impl AttentionInputs {
    /// Inputs with `pos0` cached keys before the m rows (default: `max_kv - m`).
    pub fn random(w: &AttentionWorkload, pos0: Option<u32>, seed: u64) -> AttentionInputs {
        let pos0 = pos0.unwrap_or(w.max_kv.saturating_sub(w.m));
        let positions = pos0 as usize + w.m as usize;
        let kw = w.kv_width() as usize;
        let q: Vec<f32> = random_activations(w.m as usize * w.q_width() as usize, seed)
            .iter()
            .map(|v| 2.0 * v)
            .collect();
        // Each cache in its type (`rocky_compiler::kv_type`), encoded as the KV write would.
        let encode = |ty: KvType, x: Vec<f32>| -> Vec<u32> {
            x.chunks(kw).flat_map(|row| ty.encode_row(row)).collect()
        };
        let k_cache = encode(w.kv.k, random_activations(positions * kw, seed ^ 0x4B));
        let v_cache = encode(w.kv.v, random_activations(positions * kw, seed ^ 0x56));
        let rows = checked_rows(w, pos0, seed);
        let reference = reference_rows(w, &rows, pos0, &q, &k_cache, &v_cache);
        AttentionInputs {
            pos0,
            q,
            k_cache,
            v_cache,
            reference,
        }
    }
}

/// Every row of a small workload; else the first, the last and seeded rows in between.
fn checked_rows(w: &AttentionWorkload, pos0: u32, seed: u64) -> Vec<usize> {
    let m = w.m as usize;
    let pairs = u64::from(w.m) * (u64::from(pos0) + u64::from(w.m)) * u64::from(w.head_dim);
    if pairs <= FULL_CHECK_PAIRS {
        return (0..m).collect();
    }
    let mut r = SplitMix64::new(seed ^ 0xA77);
    let mut rows: Vec<usize> = (0..SAMPLED_ROWS)
        .map(|_| (r.next_u64() % m as u64) as usize)
        .collect();
    rows.extend([0, m - 1]);
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// The attention kernel's pipeline and buffers on a device, ready to dispatch.
pub struct AttentionOnGpu {
    w: AttentionWorkload,
    s: AttentionSchedule,
    pos0: u32,
    pipeline: ComputePipeline,
    /// The driver's statistics of the attention pipeline, where the device reports them
    /// (`Context::has_pipeline_statistics`).
    pub statistics: Option<PipelineStatistics>,
    q: Buffer,
    k_cache: Buffer,
    v_cache: Buffer,
    out: Buffer,
    /// Split-KV schedules: the partials' scratch, and the combine kernel or (where the last
    /// piece merges the pieces, `fused_combine`) the arrival counters, zero between runs.
    split: Option<SplitParts>,
    /// Pieces of the keys a split dispatch uses (1 without splits): by default what the
    /// runtime's rule picks for the workload's longest ubatch on this device
    /// (`split_kv::splits_for`); tests set it to force a count.
    pub splits: u32,
    pub timeout: Duration,
    /// GPU timestamps unless the caller chooses the host clock (devices without them).
    pub timing: TimingMethod,
}

/// What a split-KV schedule binds and runs besides the attention kernel.
struct SplitParts {
    scratch: Buffer,
    merge: Merge,
}

enum Merge {
    Kernel(ComputePipeline),
    InLastPiece { counters: Buffer },
}

impl AttentionOnGpu {
    pub fn new(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
        w: &AttentionWorkload,
        s: &AttentionSchedule,
        inputs: &AttentionInputs,
    ) -> Result<AttentionOnGpu, GpuError> {
        let (pipeline, statistics) =
            ComputePipeline::from_kernel_keeping_statistics(ctx, cache, kernel)
                .map_err(device_error)?;
        let q = Buffer::from_slice(ctx, &inputs.q, "q").map_err(device_error)?;
        let k_cache = Buffer::from_slice(ctx, &inputs.k_cache, "k_cache").map_err(device_error)?;
        let v_cache = Buffer::from_slice(ctx, &inputs.v_cache, "v_cache").map_err(device_error)?;
        // NaN first, so an output the kernel never writes cannot pass a check.
        let nan = vec![f32::NAN; w.m as usize * w.q_width() as usize];
        let out = Buffer::from_slice(ctx, &nan, "out").map_err(device_error)?;
        let split = if is_split(s) {
            // NaN too: a partial the split kernel never writes cannot pass either.
            let nan = vec![f32::NAN; scratch_values(w, s) as usize];
            let scratch = Buffer::from_slice(ctx, &nan, "partials").map_err(device_error)?;
            let merge = if s.fused_combine {
                let tiles = counters_for(dispatch_grid(w, s)) as usize;
                let counters = Buffer::from_slice(ctx, &vec![0u32; tiles], "counters")
                    .map_err(device_error)?;
                Merge::InLastPiece { counters }
            } else {
                let caps = rocky_runtime::device_caps(ctx.info(), ctx.caps());
                let kernel = instantiate_combine(w, s, &caps).map_err(GpuError::Refused)?;
                let p = ComputePipeline::from_kernel(ctx, cache, &kernel).map_err(device_error)?;
                Merge::Kernel(p)
            };
            Some(SplitParts { scratch, merge })
        } else {
            None
        };
        let grid = dispatch_grid(w, s);
        let splits = splits_for(
            s,
            inputs.pos0 + w.m,
            grid[0] * grid[1],
            rocky_runtime::compute_units(ctx.info()),
        );
        Ok(AttentionOnGpu {
            w: *w,
            s: *s,
            pos0: inputs.pos0,
            pipeline,
            statistics,
            q,
            k_cache,
            v_cache,
            out,
            split,
            splits,
            timeout: DEFAULT_TIMEOUT,
            timing: TimingMethod::Gpu,
        })
    }

    fn record<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<(), GpuError> {
        let mut bindings: Vec<BufferRange<'a>> = Vec::new();
        for b in &self.pipeline.meta().bindings {
            bindings.push(match b.binding {
                BINDING_Q => self.q.whole(),
                BINDING_K_CACHE => self.k_cache.whole(),
                BINDING_V_CACHE => self.v_cache.whole(),
                BINDING_OUT => match &self.split {
                    Some(parts) => parts.scratch.whole(),
                    None => self.out.whole(),
                },
                BINDING_FUSED_OUT => self.out.whole(),
                BINDING_COUNTERS => match &self.split {
                    Some(SplitParts {
                        merge: Merge::InLastPiece { counters },
                        ..
                    }) => counters.whole(),
                    _ => {
                        return Err(GpuError::Internal(
                            "arrival counters bound without the fused combine".into(),
                        ))
                    }
                },
                other => {
                    return Err(GpuError::Internal(format!(
                        "the attention kernel has an unknown binding {other} ({})",
                        b.name
                    )))
                }
            });
        }
        let push = AttentionPush {
            m: self.w.m,
            pos0: self.pos0,
        }
        .to_bytes();
        let mut grid = dispatch_grid(&self.w, &self.s);
        grid[2] = self.splits.clamp(1, grid[2]);
        rec.dispatch(&self.pipeline, &bindings, &push, grid)
            .map_err(device_error)?;
        if let Some(SplitParts {
            scratch,
            merge: Merge::Kernel(combine),
        }) = &self.split
        {
            // The recorder orders it after the split dispatch (it reads what that wrote).
            let push = CombinePush {
                m: self.w.m,
                splits: grid[2],
            }
            .to_bytes();
            rec.dispatch(
                combine,
                &[scratch.whole(), self.out.whole()],
                &push,
                combine_grid(&self.w, self.w.m),
            )
            .map_err(device_error)?;
        }
        Ok(())
    }

    /// The split kernel's partials after a run (scratch order, see `split_kv.rs`); `None`
    /// without splits.
    pub fn partials(&self) -> Result<Option<Vec<f32>>, GpuError> {
        match &self.split {
            Some(SplitParts { scratch, .. }) => Ok(Some(
                scratch
                    .download_f32(0, scratch_values(&self.w, &self.s) as usize)
                    .map_err(device_error)?,
            )),
            None => Ok(None),
        }
    }

    /// Runs the kernel once and returns the output (m × q_width).
    pub fn run_once(&self, ctx: &Context) -> Result<Vec<f32>, GpuError> {
        let mut rec = Recorder::new(ctx).map_err(device_error)?;
        self.record(&mut rec)?;
        rec.submit_and_wait(self.timeout).map_err(device_error)?;
        drop(rec);
        self.out
            .download_f32(0, self.w.m as usize * self.w.q_width() as usize)
            .map_err(device_error)
    }

    /// Time of each of `runs` back-to-back runs (one command buffer); with host timing every
    /// run gets the mean of the host clock around the submit and wait.
    pub fn time(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError> {
        let mut rec = Recorder::new(ctx).map_err(device_error)?;
        if self.timing == TimingMethod::Host {
            for run in 0..runs {
                if run > 0 {
                    rec.barrier().map_err(device_error)?;
                }
                self.record(&mut rec)?;
            }
            return host_time_submit(&mut rec, runs, self.timeout).map_err(device_error);
        }
        let queries = TimestampQueries::new(ctx, 2 * runs).map_err(device_error)?;
        rec.reset_timestamps(&queries, 0, 2 * runs)
            .map_err(device_error)?;
        for run in 0..runs {
            if run > 0 {
                rec.barrier().map_err(device_error)?;
            }
            rec.write_timestamp(&queries, 2 * run)
                .map_err(device_error)?;
            self.record(&mut rec)?;
            rec.write_timestamp(&queries, 2 * run + 1)
                .map_err(device_error)?;
        }
        rec.submit_and_wait(self.timeout).map_err(device_error)?;
        let ticks = queries.read(0, 2 * runs).map_err(device_error)?;
        let scale = queries.scale();
        Ok(ticks.chunks(2).map(|p| scale.elapsed(p[0], p[1])).collect())
    }
}

impl TimedRuns for AttentionOnGpu {
    fn time_runs(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError> {
        self.time(ctx, runs)
    }
}

/// Checks `got` (m × q_width) against the reference rows with `s`'s error bound; every other
/// output must be finite (unwritten outputs are NaN). Returns the worst error / allowed.
pub fn check(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    inputs: &AttentionInputs,
    got: &[f32],
) -> Result<f64, String> {
    let qw = w.q_width() as usize;
    if got.len() != w.m as usize * qw {
        return Err(format!(
            "{} outputs, expected {}",
            got.len(),
            w.m as usize * qw
        ));
    }
    if let Some(i) = got.iter().position(|v| !v.is_finite()) {
        return Err(format!(
            "out[{}][{}] = {} (never written, or not finite)",
            i / qw,
            i % qw,
            got[i]
        ));
    }
    let expected = inputs.reference.expected(s);
    let rows: Vec<f32> = inputs
        .reference
        .rows
        .iter()
        .flat_map(|&r| got[r * qw..(r + 1) * qw].iter().copied())
        .collect();
    expected.check(&rows, qw).map_err(|e| {
        // Name the ubatch row, not the index among the checked rows.
        format!("{e} (checked rows {:?})", inputs.reference.rows)
    })?;
    Ok(f64::from(expected.worst_ratio(&rows)))
}

/// FLOPs of one run of `inputs` (pos0 cached keys before the m rows).
pub fn flops(w: &AttentionWorkload, pos0: u32) -> u64 {
    AttentionWorkload {
        max_kv: pos0 + w.m,
        ..*w
    }
    .flops()
}

/// One attention trial: spirv-val → pipeline → one checked run → warm-up → timed runs, like
/// the GEMM's (`measure_gemm`). Never fails; a problem is a failed trial, a mismatch never
/// a winner. `fault`: spirv_val and mismatch faults are met here (device faults are
/// exercised by the GEMM trials).
#[allow(clippy::too_many_arguments)]
pub fn measure_attention(
    ctx: &Context,
    cache: Option<&PipelineCache>,
    w: &AttentionWorkload,
    schedule: &AttentionSchedule,
    compiled: Result<CompiledKernel, Refusal>,
    inputs: &AttentionInputs,
    options: &MeasureOptions,
    fault: Option<Fault>,
    incumbent_s: Option<f64>,
    host: &str,
) -> Trial {
    trial_of(
        Schedule::Attention(*schedule),
        compiled,
        options,
        fault,
        host,
        |kernel, driver_stats| {
            let mut gpu =
                AttentionOnGpu::new(ctx, cache, kernel, w, schedule, inputs).map_err(classify)?;
            keep_driver_stats(gpu.statistics.as_ref(), driver_stats)?;
            gpu.timeout = options.timeout;
            gpu.timing = timing_method(ctx, options);
            let start = Instant::now();
            let mut got = gpu.run_once(ctx).map_err(classify)?;
            let one_run = start.elapsed();
            if fault == Some(Fault::Mismatch) {
                let row = inputs.reference.rows[0];
                fault::perturb(&mut got, row * w.q_width() as usize);
            }
            check(w, schedule, inputs, &got).map_err(|e| (FailureKind::Mismatch, e))?;
            timed_runs(
                ctx,
                &gpu,
                gpu.timing,
                one_run,
                options,
                incumbent_s,
                flops(w, inputs.pos0),
            )
        },
    )
}

/// A short summary of an attention schedule for tables.
pub fn summary(s: &AttentionSchedule) -> String {
    format!(
        "r{} kv{} l{}{}{} {}{}{}",
        s.rows,
        s.kv_block,
        s.threads_per_row,
        if s.group_heads { " gqa" } else { "" },
        if s.stage_kv { " staged" } else { "" },
        match s.lane_reduce {
            rocky_compiler::LaneReduce::Shuffle => "shfl",
            rocky_compiler::LaneReduce::Shared => "smem",
        },
        match (s.f16_qk, s.f16_pv) {
            (false, false) => "",
            (true, false) => " qk16",
            (false, true) => " pv16",
            (true, true) => " f16",
        },
        if s.is_tiled() {
            format!(" t{}x{}", s.tile_rows, s.tile_keys)
        } else if s.is_key_split() {
            format!(" ks{}", s.lane_rows)
        } else {
            String::new()
        }
    ) + &if is_split(s) {
        format!(" split{}", s.kv_splits)
    } else {
        String::new()
    }
}
