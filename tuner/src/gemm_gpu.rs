//! A GEMM on the GPU, for the tuner's trials, `rocky kernel` and `rocky bench-gemm`: seeded
//! inputs, buffers, one dispatch per N-slice, timing with GPU timestamps (or the host clock
//! on devices without them, see [`GemmOnGpu::timing`]), and the check against
//! the compiler's CPU reference (for all outputs, or for a sample of columns on big workloads).
//! The tuner's device-side fault injection hooks in here (see `fault`).

use crate::fault::{self, Fault};
use half::f16;
use rayon::prelude::*;
use rocky_compiler::kv_type::KvType;
use rocky_compiler::templates::gemm::interface::{
    counter_layout, BINDING_BIAS, BINDING_FREQS, BINDING_IN_PLACE_PARTIALS, BINDING_K_CACHE,
    BINDING_NORM_WEIGHT, BINDING_POSITION, BINDING_RESIDUAL, BINDING_TILE_COUNTERS,
    BINDING_V_CACHE, BINDING_WEIGHT, BINDING_X, BINDING_Y,
};
use rocky_compiler::templates::gemm::reference::{
    compare, reference_full, relative_tolerance, Mismatch, Reference,
};
use rocky_compiler::templates::gemm::split_k::{
    instantiate_reduce, reduce_grid, reduce_push, scratch_values, BINDING_PARTIALS,
};
use rocky_compiler::templates::gemm::{
    dispatch_grid_for, n_slices, Epilogue, GemmPush, GemmSchedule, GemmWorkload, Math,
};
use rocky_compiler::templates::gemv::GemvSchedule;
use rocky_compiler::testdata::{random_activations, random_weights, SplitMix64};
use rocky_compiler::{ActType, CompiledKernel, DeviceCaps, NSlice, Precision, Refusal};
use rocky_runtime::{
    host_time_submit, Buffer, BufferRange, ComputePipeline, Context, PipelineCache,
    PipelineStatistics, Recorder, RuntimeError, TimestampQueries, TimingMethod,
};
use serde::Serialize;
use std::time::Duration;

/// Default wait per submission. Generous: a big GEMM on lavapipe takes tens of seconds per run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

pub fn math_name(m: Math) -> &'static str {
    match m {
        Math::FmaF32 => "fma_f32",
        Math::FmaF16Packed => "fma_f16_packed",
        Math::Int8Dot => "int8_dot",
    }
}

/// A short summary of a schedule for tables: tiles, split-K, vector width, staging of
/// A/B, math and accumulation.
pub fn summary(s: &GemmSchedule) -> String {
    format!(
        "{}x{}x{} t{}x{} k{} v{} st{}{}{}{} {} acc{}",
        s.bm,
        s.bn,
        s.bk,
        s.tm,
        s.tn,
        s.split_k,
        s.vector_width,
        u8::from(s.stage_a),
        u8::from(s.stage_b),
        if s.shuffle_a { " shfa" } else { "" },
        if s.k_groups > 1 {
            format!(" g{}", s.k_groups)
        } else {
            String::new()
        },
        math_name(s.math),
        match s.accumulate {
            Precision::F32 => "32",
            _ => "16",
        }
    )
}

/// Why a GEMM could not be set up or run on the device.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The workload cannot be laid out on this device (e.g. no valid N-slicing).
    #[error("the kernel is refused: {0}")]
    Refused(Refusal),
    #[error(transparent)]
    Device(#[from] RuntimeError),
    /// A kernel/workload disagreement: a bug in rocky, not in the input.
    #[error("{0}")]
    Internal(String),
}

fn device_error(e: RuntimeError) -> GpuError {
    GpuError::Device(e)
}

/// Seeded random inputs of a GEMM, as the reference sees them (activations in f32).
pub struct GemmInputs {
    pub x: Vec<f32>,
    /// All weight rows: with SwiGLU the n gate rows then the n up rows (the combined tensor).
    pub weight: Vec<u8>,
    pub bias: Option<Vec<f32>>,
    /// The residual of `Epilogue::Residual` (m × n).
    pub residual: Option<Vec<f32>>,
    /// The folded RMSNorm's weight (k values), for workloads with `rms_norm_eps_bits`.
    pub norm_weight: Option<Vec<f32>>,
    /// `Epilogue::RopeKv` with frequency factors: head_dim/2 angle divisors in [1, 4).
    pub freqs: Option<Vec<f32>>,
}

impl GemmInputs {
    pub fn random(w: &GemmWorkload, seed: u64) -> GemmInputs {
        let rows = w.weight_rows() as usize;
        GemmInputs {
            x: random_activations(w.m as usize * w.k as usize, seed),
            weight: random_weights(w.weight, rows, w.k as usize, seed ^ 0x5745),
            bias: w
                .bias
                .then(|| random_activations(w.y_row_width() as usize, seed ^ 0xB1A5)),
            residual: (w.epilogue == Epilogue::Residual)
                .then(|| random_activations(w.m as usize * w.n as usize, seed ^ 0x2E51)),
            norm_weight: w
                .rms_norm_eps_bits
                .map(|_| random_activations(w.k as usize, seed ^ 0x7093)),
            freqs: match w.epilogue {
                Epilogue::RopeKv(r) if r.freq_factors => Some(
                    random_activations(r.head_dim as usize / 2, seed ^ 0xF4E9)
                        .into_iter()
                        .map(|v| 2.5 + 1.5 * v)
                        .collect(),
                ),
                _ => None,
            },
        }
    }
}

fn act_buffer(
    ctx: &Context,
    act: ActType,
    values: &[f32],
    label: &str,
) -> Result<Buffer, GpuError> {
    match act {
        ActType::F32 => Buffer::from_slice(ctx, values, label),
        _ => {
            let halfs: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            Buffer::from_slice(ctx, &halfs, label)
        }
    }
    .map_err(device_error)
}

/// What a split GEMM reducing in its last group binds besides its own buffers.
struct InPlaceSplit {
    /// Every group's partial sums.
    partials: Buffer,
    /// One u32 per tile and N-slice, zero between dispatches.
    counters: Buffer,
    /// Each N-slice's (offset, size) in `counters`.
    regions: Vec<(u64, u64)>,
}

/// Where a RoPE-and-KV-write GEMV (`Epilogue::RopeKv`) writes its key and value rows: cache
/// rows `ROPE_KV_POS0 ..` (not 0, so a kernel that ignores the position fails the check).
pub const ROPE_KV_POS0: u32 = 5;

/// A RoPE-and-KV-write GEMV's other buffers: the caches (a marker in every word), the
/// position (the step-args layout: `m, pos0`) and the frequency factors.
struct RopeKvBuffers {
    k_cache: Buffer,
    v_cache: Buffer,
    position: Buffer,
    freqs: Option<Buffer>,
}

/// The GEMM's pipeline and buffers on a device, ready to dispatch.
pub struct GemmOnGpu {
    w: GemmWorkload,
    s: GemmSchedule,
    pipeline: ComputePipeline,
    /// The driver's statistics of the GEMM's pipeline, where the device reports them
    /// (`Context::has_pipeline_statistics`).
    pub statistics: Option<PipelineStatistics>,
    x: Buffer,
    weight: Buffer,
    y: Buffer,
    bias: Option<Buffer>,
    residual: Option<Buffer>,
    norm_weight: Option<Buffer>,
    /// Split-K across the grid (`k_groups > 1`): the reduce kernel and the partial sums.
    split: Option<(ComputePipeline, Buffer)>,
    /// Split-K whose last group per tile reduces (`last_group_reduces`): the partial sums,
    /// the tile counters (zero) and each slice's region of them (`counter_layout`).
    in_place: Option<InPlaceSplit>,
    /// One dispatch each; one slice unless the weights exceed `maxStorageBufferRange`.
    pub slices: Vec<NSlice>,
    /// How long one submission may run before it counts as hung.
    pub timeout: Duration,
    /// How [`GemmOnGpu::time`] measures: GPU timestamps unless the caller chooses the host
    /// clock (the tuner does on devices without timestamps). Never switched silently, so
    /// `rocky kernel` and `bench-gemm` keep refusing a device without timestamps.
    pub timing: TimingMethod,
    /// A failure to meet on purpose at its device stage (tuner fault injection).
    fault: Option<Fault>,
    /// The kernel is the GEMV template's ([`GemmOnGpu::for_gemv`]): its grid, and `s` is the
    /// GEMM schedule of the same arithmetic (no split-K), for the check's tolerance.
    gemv: Option<GemvSchedule>,
    rope_kv: Option<RopeKvBuffers>,
}

impl GemmOnGpu {
    pub fn new(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
        w: &GemmWorkload,
        s: &GemmSchedule,
        caps: &DeviceCaps,
        inputs: &GemmInputs,
    ) -> Result<GemmOnGpu, GpuError> {
        GemmOnGpu::with_fault(ctx, cache, kernel, w, s, caps, inputs, None)
    }

    /// [`GemmOnGpu::new`], failing on purpose with `fault` where the device would report it:
    /// `PipelineCreation` here, `OutOfMemory`, `DeviceLost` and `Timeout` in
    /// [`GemmOnGpu::run_once`] (other faults are not device-side and are ignored).
    #[allow(clippy::too_many_arguments)]
    pub fn with_fault(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
        w: &GemmWorkload,
        s: &GemmSchedule,
        caps: &DeviceCaps,
        inputs: &GemmInputs,
        fault: Option<Fault>,
    ) -> Result<GemmOnGpu, GpuError> {
        let slices = n_slices(
            w,
            caps.max_storage_buffer_range,
            u64::from(caps.min_storage_buffer_offset_alignment),
        )
        .map_err(GpuError::Refused)?;
        if fault == Some(Fault::PipelineCreation) {
            // Instead of calling the driver, whose compiler would have failed.
            let e = fault::pipeline_creation_error(&kernel.meta.name);
            return Err(device_error(e));
        }
        // Where the driver reports its compiler's statistics, every GEMM keeps them (the tuner
        // stores them with the trial and skips spilling candidates; bench-gemm prints them).
        let (pipeline, statistics) =
            ComputePipeline::from_kernel_keeping_statistics(ctx, cache, kernel)
                .map_err(device_error)?;
        let x = act_buffer(ctx, w.act, &inputs.x, "x")?;
        // In the workload's layout, all weight rows (with SwiGLU the combined tensor's 2n rows,
        // each repacked on its own); the inputs and the reference are GGUF.
        let device_weight = rocky_compiler::dequant::layout::to_device(
            w.weight,
            w.layout,
            u64::from(w.k),
            u64::from(w.weight_rows()),
            &inputs.weight,
        )
        .map_err(|e| GpuError::Internal(format!("weight layout: {e}")))?;
        // Kernels read whole u32 words: the weight buffer is padded to 4 bytes.
        let mut padded = Buffer::new(ctx, (device_weight.len() as u64).div_ceil(4) * 4, "weight")
            .map_err(device_error)?;
        padded
            .upload_bytes(0, &device_weight)
            .map_err(device_error)?;
        // NaN first, so an output the kernel never writes cannot pass a check.
        let y = act_buffer(
            ctx,
            w.act,
            &vec![f32::NAN; w.m as usize * w.y_row_width() as usize],
            "y",
        )?;
        let rope_kv = match w.epilogue {
            Epilogue::RopeKv(r) => {
                let rows = ROPE_KV_POS0 + w.m;
                let cache = |ty: KvType, label| {
                    let words = vec![CACHE_MARKER; (ty.row_words(r.kv_width()) * rows) as usize];
                    Buffer::from_slice(ctx, &words, label).map_err(device_error)
                };
                Some(RopeKvBuffers {
                    k_cache: cache(r.kv.k, "k cache")?,
                    v_cache: cache(r.kv.v, "v cache")?,
                    position: Buffer::from_slice(ctx, &[w.m, ROPE_KV_POS0], "position")
                        .map_err(device_error)?,
                    freqs: match &inputs.freqs {
                        Some(f) => Some(Buffer::from_slice(ctx, f, "freqs").map_err(device_error)?),
                        None => None,
                    },
                })
            }
            _ => None,
        };
        let bias = match &inputs.bias {
            Some(b) => Some(Buffer::from_slice(ctx, b, "bias").map_err(device_error)?),
            None => None,
        };
        let residual = match &inputs.residual {
            Some(r) => Some(act_buffer(ctx, w.act, r, "residual")?),
            None => None,
        };
        let norm_weight = match &inputs.norm_weight {
            Some(g) => Some(Buffer::from_slice(ctx, g, "norm weight").map_err(device_error)?),
            None => None,
        };
        let in_place = if s.k_groups > 1 && s.last_group_reduces {
            let partials = Buffer::new(ctx, 4 * scratch_values(w, s), "split-K partials")
                .map_err(device_error)?;
            let align = ctx.caps().min_storage_buffer_offset_alignment;
            let (regions, total) = counter_layout(w.m, w, s, &slices, align);
            let counters = Buffer::from_slice(
                ctx,
                &vec![0u32; (total / 4) as usize],
                "split-K tile counters",
            )
            .map_err(device_error)?;
            Some(InPlaceSplit {
                partials,
                counters,
                regions,
            })
        } else {
            None
        };
        let split = if s.k_groups > 1 && !s.last_group_reduces {
            let reduce = instantiate_reduce(w, s, caps).map_err(GpuError::Refused)?;
            let reduce = ComputePipeline::from_kernel(ctx, cache, &reduce).map_err(device_error)?;
            let scratch = Buffer::new(ctx, 4 * scratch_values(w, s), "split-K partials")
                .map_err(device_error)?;
            Some((reduce, scratch))
        } else {
            None
        };
        Ok(GemmOnGpu {
            w: *w,
            s: *s,
            pipeline,
            statistics,
            x,
            weight: padded,
            y,
            bias,
            residual,
            norm_weight,
            split,
            in_place,
            slices,
            timeout: DEFAULT_TIMEOUT,
            timing: TimingMethod::Gpu,
            fault,
            gemv: None,
            rope_kv,
        })
    }

    /// A GEMV kernel (same bindings, push constants and N-slices as an unsplit GEMM) of
    /// schedule `s`, as [`GemmOnGpu::with_fault`] builds a GEMM's.
    #[allow(clippy::too_many_arguments)]
    pub fn for_gemv(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        kernel: &CompiledKernel,
        w: &GemmWorkload,
        s: &GemvSchedule,
        caps: &DeviceCaps,
        inputs: &GemmInputs,
        fault: Option<Fault>,
    ) -> Result<GemmOnGpu, GpuError> {
        let twin = rocky_compiler::templates::gemv::reference::arithmetic_twin(s);
        let mut gpu = GemmOnGpu::with_fault(ctx, cache, kernel, w, &twin, caps, inputs, fault)?;
        gpu.gemv = Some(*s);
        Ok(gpu)
    }

    fn residual_binding(&self) -> Result<BufferRange<'_>, GpuError> {
        self.residual.as_ref().map(Buffer::whole).ok_or_else(|| {
            GpuError::Internal("a kernel binds a residual the workload lacks".into())
        })
    }

    /// Records one dispatch per N-slice.
    fn record<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<(), GpuError> {
        for (index, slice) in self.slices.iter().enumerate() {
            let grid = match &self.gemv {
                Some(g) => rocky_compiler::templates::gemv::dispatch_grid_for(slice.n, g),
                None => dispatch_grid_for(
                    self.w.m,
                    slice.n * self.w.epilogue.rows_per_column(),
                    &self.s,
                ),
            };
            let in_place = |what: &str| {
                GpuError::Internal(format!(
                    "the kernel binds {what}, which only a last_group_reduces schedule has"
                ))
            };
            let mut bindings: Vec<BufferRange<'a>> = Vec::new();
            for b in &self.pipeline.meta().bindings {
                bindings.push(match b.binding {
                    BINDING_X => self.x.whole(),
                    BINDING_WEIGHT => self
                        .weight
                        .range(slice.weight_offset, slice.weight_range)
                        .map_err(device_error)?,
                    BINDING_Y => match &self.split {
                        Some((_, scratch)) => scratch.whole(),
                        None => self.y.whole(),
                    },
                    BINDING_BIAS => self.bias.as_ref().map(Buffer::whole).ok_or_else(|| {
                        GpuError::Internal("the kernel binds a bias the workload lacks".into())
                    })?,
                    BINDING_RESIDUAL => self.residual_binding()?,
                    BINDING_NORM_WEIGHT => self
                        .norm_weight
                        .as_ref()
                        .map(Buffer::whole)
                        .ok_or_else(|| {
                            GpuError::Internal(
                                "the kernel binds a norm weight the workload lacks".into(),
                            )
                        })?,
                    BINDING_IN_PLACE_PARTIALS => match &self.in_place {
                        Some(split) => split.partials.whole(),
                        None => return Err(in_place("partials")),
                    },
                    BINDING_TILE_COUNTERS => match &self.in_place {
                        Some(split) => split
                            .counters
                            .range(split.regions[index].0, split.regions[index].1)
                            .map_err(device_error)?,
                        None => return Err(in_place("tile counters")),
                    },
                    BINDING_K_CACHE | BINDING_V_CACHE | BINDING_POSITION | BINDING_FREQS => {
                        let r = self.rope_kv.as_ref().ok_or_else(|| {
                            GpuError::Internal(format!(
                                "the kernel binds {}, which only a RoPE-KV GEMV has",
                                b.name
                            ))
                        })?;
                        match b.binding {
                            BINDING_K_CACHE => r.k_cache.whole(),
                            BINDING_V_CACHE => r.v_cache.whole(),
                            BINDING_POSITION => r.position.whole(),
                            _ => r.freqs.as_ref().map(Buffer::whole).ok_or_else(|| {
                                GpuError::Internal(
                                    "the kernel binds frequency factors the workload lacks".into(),
                                )
                            })?,
                        }
                    }
                    other => {
                        return Err(GpuError::Internal(format!(
                            "the GEMM kernel has an unknown binding {other} ({})",
                            b.name
                        )))
                    }
                });
            }
            let push = GemmPush::for_slice(&self.w, slice).to_bytes();
            rec.dispatch(&self.pipeline, &bindings, &push, grid)
                .map_err(device_error)?;
        }
        if let Some((reduce, scratch)) = &self.split {
            rec.barrier().map_err(device_error)?;
            let mut bindings: Vec<BufferRange<'a>> = Vec::new();
            for b in &reduce.meta().bindings {
                bindings.push(match b.binding {
                    BINDING_PARTIALS => scratch.whole(),
                    BINDING_Y => self.y.whole(),
                    BINDING_BIAS => self.bias.as_ref().map(Buffer::whole).ok_or_else(|| {
                        GpuError::Internal("the reduce binds a bias the workload lacks".into())
                    })?,
                    BINDING_RESIDUAL => self.residual_binding()?,
                    other => {
                        return Err(GpuError::Internal(format!(
                            "the split-K reduce kernel has an unknown binding {other} ({})",
                            b.name
                        )))
                    }
                });
            }
            let push = reduce_push(&self.w).to_bytes();
            rec.dispatch(reduce, &bindings, &push, reduce_grid(&self.w, self.w.m))
                .map_err(device_error)?;
        }
        Ok(())
    }

    /// Runs the GEMM once and returns Y (as f32).
    pub fn run_once(&self, ctx: &Context) -> Result<Vec<f32>, GpuError> {
        let mut rec = Recorder::new(ctx).map_err(device_error)?;
        self.record(&mut rec)?;
        self.submit_and_wait(&mut rec).map_err(device_error)?;
        drop(rec);
        if let (Epilogue::RopeKv(r), Some(buffers)) = (self.w.epilogue, &self.rope_kv) {
            return rope_kv_outputs(&self.w, &r, &self.y, buffers).map_err(device_error);
        }
        let count = self.w.m as usize * self.w.n as usize;
        match self.w.act {
            ActType::F32 => self.y.download_f32(0, count),
            _ => self
                .y
                .download::<f16>(0, count)
                .map(|v| v.into_iter().map(f16::to_f32).collect()),
        }
        .map_err(device_error)
    }

    /// Submits the checked run and waits for it; an injected device fault fails it here, at
    /// the call where a driver reports that failure.
    fn submit_and_wait(&self, rec: &mut Recorder<'_>) -> Result<(), RuntimeError> {
        let what = format!("a command buffer of {} dispatches", rec.dispatch_count());
        match self.fault {
            // Nothing is submitted: the driver fails vkEndCommandBuffer.
            Some(Fault::OutOfMemory) => Err(fault::command_buffer_out_of_memory(rec)),
            Some(Fault::DeviceLost) => {
                // The work really runs (so nothing is left in flight); the wait reports the
                // loss. The tuner then drops this context and opens a new one.
                rec.submit_and_wait(self.timeout)?;
                Err(fault::device_lost_error(&what))
            }
            Some(Fault::Timeout) => {
                rec.submit()?;
                let waited = rec.wait(fault::TIMEOUT_WAIT);
                // Drain before returning: the recorder and the buffers it uses are dropped on
                // the way out, and destroying what the GPU still runs is undefined behaviour.
                rec.wait(self.timeout)?;
                Err(fault::timeout_error(waited, &what))
            }
            _ => rec.submit_and_wait(self.timeout),
        }
    }

    /// Time of each of `runs` back-to-back runs (all N-slices each), one command buffer. With
    /// host timing every run gets the mean: the host clock around the whole submit and wait,
    /// over `runs` (see [`host_time_submit`]).
    pub fn time(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError> {
        if self.timing == TimingMethod::Host {
            let mut rec = Recorder::new(ctx).map_err(device_error)?;
            for run in 0..runs {
                if run > 0 {
                    rec.barrier().map_err(device_error)?;
                }
                self.record(&mut rec)?;
            }
            return host_time_submit(&mut rec, runs, self.timeout).map_err(device_error);
        }
        self.time_with_timestamps(ctx, runs, None)
    }

    /// [`GemmOnGpu::time`] with `flush` run before each timed run (outside its timestamps),
    /// so every run starts with caches that hold none of its inputs. GPU timestamps only.
    pub fn time_cold<'a>(
        &'a self,
        ctx: &'a Context,
        runs: u32,
        flush: &'a CacheFlush,
    ) -> Result<Vec<Duration>, GpuError> {
        self.time_with_timestamps(ctx, runs, Some(flush))
    }

    /// `runs` runs between GPU timestamps, each after `flush` (outside its timestamps) where
    /// one is given.
    fn time_with_timestamps<'a>(
        &'a self,
        ctx: &'a Context,
        runs: u32,
        flush: Option<&'a CacheFlush>,
    ) -> Result<Vec<Duration>, GpuError> {
        let queries = TimestampQueries::new(ctx, 2 * runs).map_err(device_error)?;
        let mut rec = Recorder::new(ctx).map_err(device_error)?;
        rec.reset_timestamps(&queries, 0, 2 * runs)
            .map_err(device_error)?;
        for run in 0..runs {
            if run > 0 {
                rec.barrier().map_err(device_error)?;
            }
            if let Some(flush) = flush {
                flush.record(&mut rec)?;
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

/// A pair of buffers larger than the device's caches and the copy kernel that moves one into
/// the other: recorded before a timed run it evicts what earlier runs left in the caches, so
/// the run reads its weights from memory as a decode step does (a decode step streams every
/// weight once; repeated runs of one GEMV would otherwise time a cache). Timed on its own it
/// is the device's copy bandwidth, the ceiling a GEMV's weight stream is measured against.
pub struct CacheFlush {
    pipeline: ComputePipeline,
    src: Buffer,
    dst: Buffer,
    quads: u32,
    groups: u32,
}

impl CacheFlush {
    /// Buffers of `bytes` each (clamped to the device's storage-buffer range).
    pub fn new(
        ctx: &Context,
        cache: Option<&PipelineCache>,
        caps: &DeviceCaps,
        bytes: u64,
    ) -> Result<CacheFlush, GpuError> {
        let kernel = rocky_compiler::templates::copy::instantiate(caps).map_err(|e| {
            GpuError::Internal(format!("the copy kernel is refused on this device: {e}"))
        })?;
        let pipeline = ComputePipeline::from_kernel(ctx, cache, &kernel).map_err(device_error)?;
        let bytes = bytes
            .min(caps.max_storage_buffer_range)
            .min(u64::from(u32::MAX) * 16)
            / 16
            * 16;
        let quads = (bytes / 16).max(1) as u32;
        let src =
            Buffer::new(ctx, u64::from(quads) * 16, "cache flush src").map_err(device_error)?;
        let dst =
            Buffer::new(ctx, u64::from(quads) * 16, "cache flush dst").map_err(device_error)?;
        // Enough workgroups to fill any device; each invocation then loops over the rest.
        let groups = quads
            .div_ceil(rocky_compiler::templates::copy::COPY_WORKGROUP)
            .min(65_535);
        Ok(CacheFlush {
            pipeline,
            src,
            dst,
            quads,
            groups,
        })
    }

    /// Bytes one copy reads and writes.
    pub fn bytes_moved(&self) -> u64 {
        32 * u64::from(self.quads)
    }

    fn record<'a>(&'a self, rec: &mut Recorder<'a>) -> Result<(), GpuError> {
        rec.dispatch(
            &self.pipeline,
            &[self.src.whole(), self.dst.whole()],
            &rocky_compiler::templates::copy::push_constants(self.quads, self.groups),
            [self.groups, 1, 1],
        )
        .map_err(device_error)
    }

    /// `runs` timed copies (GPU timestamps): the copy bandwidth is `bytes_moved` over each.
    pub fn time(&self, ctx: &Context, runs: u32) -> Result<Vec<Duration>, GpuError> {
        rocky_runtime::time_dispatches(
            ctx,
            &self.pipeline,
            &[self.src.whole(), self.dst.whole()],
            &rocky_compiler::templates::copy::push_constants(self.quads, self.groups),
            [self.groups, 1, 1],
            runs,
            Duration::from_secs(120),
        )
        .map_err(device_error)
    }
}

/// Median, min and max of timed runs, and the median's throughput.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub runs: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub gflops: f64,
}

impl Timing {
    pub fn of(times: &[Duration], flops: u64) -> Timing {
        let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let median = crate::graph::median(&ms);
        Timing {
            runs: ms.len(),
            median_ms: median,
            min_ms: ms.first().copied().unwrap_or(f64::NAN),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
            gflops: flops as f64 / (median * 1e-3) / 1e9,
        }
    }
}

pub fn all_columns(w: &GemmWorkload) -> Vec<u32> {
    (0..w.n).collect()
}

/// `count` seeded columns, plus the first and last column of every N-slice (where
/// slicing mistakes would show).
pub fn sampled_columns(w: &GemmWorkload, slices: &[NSlice], count: u32, seed: u64) -> Vec<u32> {
    let mut r = SplitMix64::new(seed ^ 0xC015);
    let mut cols: Vec<u32> = (0..count)
        .map(|_| (r.next_u64() % u64::from(w.n)) as u32)
        .collect();
    for s in slices {
        cols.extend([s.n_offset, s.n_offset + s.n - 1]);
    }
    cols.sort_unstable();
    cols.dedup();
    cols
}

/// What a check compared.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub columns: u32,
    pub columns_checked: usize,
    pub outputs_checked: usize,
    /// Largest |error| / allowed error (below 1 passes).
    pub max_error_ratio: f64,
    pub relative_tolerance: f64,
}

/// The reference for output columns `cols` only: their weight rows (and bias values) form
/// an m × |cols| GEMM the reference computes exactly.
fn reference_columns(
    w: &GemmWorkload,
    math: Math,
    inputs: &GemmInputs,
    cols: &[u32],
) -> Result<(GemmWorkload, Reference), String> {
    let row = w.weight.row_bytes(u64::from(w.k)) as usize;
    // With SwiGLU the sub-GEMM's combined tensor: the columns' gate rows, then their up rows.
    let parts: Vec<usize> = match w.epilogue {
        Epilogue::SwiGlu => vec![0, w.n as usize],
        _ => vec![0],
    };
    let weight: Vec<u8> = parts
        .iter()
        .flat_map(|&first| {
            cols.iter().flat_map(move |&j| {
                let r = first + j as usize;
                &inputs.weight[r * row..(r + 1) * row]
            })
        })
        .copied()
        .collect();
    let residual: Option<Vec<f32>> = inputs.residual.as_ref().map(|res| {
        (0..w.m as usize)
            .flat_map(|r| {
                cols.iter()
                    .map(move |&j| res[r * w.n as usize + j as usize])
            })
            .collect()
    });
    let bias: Option<Vec<f32>> = inputs
        .bias
        .as_ref()
        .map(|b| cols.iter().map(|&j| b[j as usize]).collect());
    let sub = GemmWorkload {
        n: cols.len() as u32,
        ..*w
    };
    let r = reference_full(
        &sub,
        math,
        &inputs.x,
        &weight,
        bias.as_deref(),
        residual.as_deref(),
        inputs.norm_weight.as_deref(),
    )
    .map_err(|e| format!("reference: {e}"))?;
    Ok((sub, r))
}

/// Largest |error| / allowed over the outputs, with the allowance `compare` applies
/// (`compare` decides pass/fail; this is the figure for reports).
fn max_error_ratio(w: &GemmWorkload, s: &GemmSchedule, got: &[f32], r: &Reference) -> f64 {
    let rel = relative_tolerance(s);
    (0..got.len())
        .map(|i| {
            let mut allowed = rel * r.magnitude[i] + 2.0 * r.rounding_flip[i] + 1e-30;
            if w.act == ActType::F16 {
                allowed += r.y[i].abs() * 2f32.powi(-11) + 6e-8;
            }
            f64::from((got[i] - r.y[i]).abs()) / f64::from(allowed)
        })
        .fold(0.0, f64::max)
}

/// Compares columns `cols` of `got` (m × n) with the reference, in parallel over column
/// chunks. When only some columns are compared, every output must still be finite (Y
/// starts as NaN, so unwritten outputs fail).
pub fn check(
    w: &GemmWorkload,
    s: &GemmSchedule,
    inputs: &GemmInputs,
    got: &[f32],
    cols: &[u32],
) -> Result<Check, String> {
    if let Epilogue::RopeKv(_) = w.epilogue {
        return check_rope_kv(w, s, inputs, got);
    }
    let n = w.n as usize;
    if cols.len() < n {
        if let Some(i) = got.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "y[{}][{}] = {} (never written, or not finite)",
                i / n,
                i % n,
                got[i]
            ));
        }
    }
    let ratios = cols
        .par_chunks(16)
        .map(|chunk| {
            let (sub, r) = reference_columns(w, s.math, inputs, chunk)?;
            let got_sub: Vec<f32> = (0..w.m as usize)
                .flat_map(|row| chunk.iter().map(move |&j| got[row * n + j as usize]))
                .collect();
            compare(&sub, s, &got_sub, &r).map_err(|e| match e {
                // Report the column of the whole output, not of the chunk.
                Mismatch::Value {
                    row,
                    col,
                    got,
                    want,
                    allowed,
                } => format!(
                    "y[{row}][{}] = {got}, reference {want} (allowed error {allowed})",
                    chunk[col as usize]
                ),
                other => other.to_string(),
            })?;
            Ok(max_error_ratio(&sub, s, &got_sub, &r))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(Check {
        columns: w.n,
        columns_checked: cols.len(),
        outputs_checked: cols.len() * w.m as usize,
        max_error_ratio: ratios.into_iter().fold(0.0, f64::max),
        // Through its shortest decimal form, so JSON shows 0.002 and not 0.0020000000949.
        relative_tolerance: relative_tolerance(s)
            .to_string()
            .parse()
            .unwrap_or(f64::NAN),
    })
}

/// What no RoPE-KV store writes: the caches start with it in every word.
const CACHE_MARKER: u32 = 0x7fc0_2468;

/// A RoPE-and-KV-write GEMV's outputs as one vector: the rotated query (Y's first
/// q_heads·head_dim columns of each row), then the key rows and the value rows read back from
/// the caches at `ROPE_KV_POS0 ..` (as f32: an f16 cache's words unpacked, a marker as NaN).
fn rope_kv_outputs(
    w: &GemmWorkload,
    r: &rocky_compiler::templates::gemm::RopeKv,
    y: &Buffer,
    buffers: &RopeKvBuffers,
) -> Result<Vec<f32>, RuntimeError> {
    let (m, width) = (w.m as usize, w.y_row_width() as usize);
    let q_width = (r.q_heads * r.head_dim) as usize;
    let y = y.download_f32(0, m * width)?;
    let mut out: Vec<f32> = (0..m)
        .flat_map(|i| y[i * width..i * width + q_width].to_vec())
        .collect();
    for (heads, cache, ty) in [
        (r.k_heads, &buffers.k_cache, r.kv.k),
        (r.v_heads, &buffers.v_cache, r.kv.v),
    ] {
        if heads == 0 {
            continue;
        }
        let row_words = ty.row_words(r.kv_width()) as usize;
        let words = cache.download::<u32>(0, (ROPE_KV_POS0 as usize + m) * row_words)?;
        let as_f32 = |bits: u32| {
            if bits == CACHE_MARKER {
                f32::NAN
            } else {
                f32::from_bits(bits)
            }
        };
        for word in &words[ROPE_KV_POS0 as usize * row_words..] {
            match ty {
                KvType::F16 => out.extend([
                    f16::from_bits(*word as u16).to_f32(),
                    f16::from_bits((*word >> 16) as u16).to_f32(),
                ]),
                _ => out.push(as_f32(*word)),
            }
        }
    }
    Ok(out)
}

/// Checks a RoPE-and-KV-write GEMV's outputs ([`rope_kv_outputs`]) against the unfused
/// composition (`gemv::reference::rope_kv_for`: the projection's reference, then the RoPE's),
/// an f16 cache's rounding allowed.
fn check_rope_kv(
    w: &GemmWorkload,
    twin: &GemmSchedule,
    inputs: &GemmInputs,
    got: &[f32],
) -> Result<Check, String> {
    let Epilogue::RopeKv(r) = w.epilogue else {
        unreachable!("a RoPE-KV workload")
    };
    let want = rocky_compiler::templates::gemv::reference::rope_kv_for(
        w,
        twin,
        &inputs.x,
        &inputs.weight,
        inputs.bias.as_deref(),
        inputs.norm_weight.as_deref(),
        inputs.freqs.as_deref(),
        ROPE_KV_POS0,
    )
    .map_err(|e| format!("reference: {e}"))?;
    let mut expected = want.q.clone();
    for (part, ty) in [(&want.k, r.kv.k), (&want.v, r.kv.v)] {
        expected.values.extend(&part.values);
        expected
            .allowed
            .extend(part.values.iter().zip(&part.allowed).map(|(v, a)| {
                if ty == KvType::F16 {
                    a + v.abs() * 2f32.powi(-11) + 6e-8
                } else {
                    *a
                }
            }));
    }
    expected
        .check(got, (r.q_heads * r.head_dim).max(1) as usize)
        .map_err(|e| format!("RoPE-KV outputs (query, then key and value rows): {e}"))?;
    Ok(Check {
        columns: w.n,
        columns_checked: w.n as usize,
        outputs_checked: expected.values.len(),
        max_error_ratio: f64::from(expected.worst_ratio(got)),
        relative_tolerance: relative_tolerance(twin)
            .to_string()
            .parse()
            .unwrap_or(f64::NAN),
    })
}
