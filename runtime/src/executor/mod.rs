//! The graph executor: runs a model's prefill graph on the GPU in ubatches, carrying the KV
//! cache across them, with every kernel from rocky's compiler and command buffers split by the
//! driver-memory budget.
//!
//! Per ubatch: the token embeddings are gathered on the host (a few rows; it keeps the
//! 150k-row table out of a storage binding), then every graph node becomes one or more
//! dispatches recorded into budgeted command buffers. Logits are read back for the last
//! position of the last ubatch only.

mod slots;

use crate::budget::{Admit, BudgetTracker, CommandBudget};
use crate::{
    device_caps, Buffer, BufferRange, ComputePipeline, Context, PipelineCache, Recorder,
    RuntimeError,
};
use rocky_compiler::templates::attention::{AttentionPush, AttentionWorkload};
use rocky_compiler::templates::eltwise::{EltwisePush, EltwiseWorkload};
use rocky_compiler::templates::gemm::{n_slices, GemmPush};
use rocky_compiler::templates::kv_cache::{KvWritePush, KvWriteWorkload};
use rocky_compiler::templates::rms_norm::{RmsNormPush, RmsNormWorkload};
use rocky_compiler::templates::rope::{RopePush, RopeWorkload};
use rocky_compiler::{
    default_schedule, dispatch_grid, instantiate, ActType, DeviceCaps, GemmWorkload, Schedule,
    WeightFormat, Workload,
};
use rocky_models::arch::Model;
use rocky_models::formats::{self, GgmlType};
use rocky_models::gguf::GgufFile;
use rocky_models::graph::Op;
use std::collections::HashMap;
use std::time::Duration;

/// Where a node's schedule came from (shown by `--profile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleOrigin {
    Default,
    Tuned,
}

/// Chooses the schedule of each workload: the tuning database, a test's override, or the
/// rule-based default.
pub trait ScheduleSource {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin);
}

/// The compiler's rule-based defaults for the device.
pub struct DefaultSchedules;

impl ScheduleSource for DefaultSchedules {
    fn schedule(&self, workload: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        (default_schedule(workload, caps), ScheduleOrigin::Default)
    }
}

#[derive(Clone, Debug)]
pub struct ExecutorOptions {
    /// Tokens per ubatch (1 to 4096).
    pub ubatch: usize,
    pub budget: CommandBudget,
    /// How long one command buffer may run before it counts as hung.
    pub timeout: Duration,
    /// Time every dispatch with GPU timestamps (see `Executor::profile`).
    pub profile: bool,
}

/// GPU time of one dispatch, from timestamps written around it.
#[derive(Clone, Debug)]
pub struct DispatchTime {
    pub label: String,
    pub kernel: String,
    /// The workload at the rows actually run (for GFLOP/s).
    pub workload: Workload,
    pub origin: ScheduleOrigin,
    pub seconds: f64,
}

/// Errors of the executor, each saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("{0}")]
    Unsupported(String),
    #[error("kernel for {label}: {reason}")]
    Refused { label: String, reason: String },
    #[error(
        "the driver ran out of memory closing a command buffer at ubatch {ubatch} with a budget of {budget_bytes} driver bytes and {max_dispatches} dispatches per command buffer ({source}); lower --ubatch or the budget (--cb-budget-mib / --cb-max-dispatches)"
    )]
    CommandBufferOom {
        ubatch: usize,
        budget_bytes: u64,
        max_dispatches: u32,
        source: RuntimeError,
    },
}

/// A model's weights on the device.
pub struct GpuWeights {
    buffers: HashMap<String, (Buffer, GgmlType)>,
}

impl GpuWeights {
    /// Uploads every tensor the graph uses except the embedding table (gathered on the host).
    pub fn upload(ctx: &Context, file: &GgufFile, model: &Model) -> Result<GpuWeights, ExecError> {
        Self::upload_with_progress(ctx, file, model, &mut |_, _| {})
    }

    /// [`GpuWeights::upload`], calling `progress(bytes done, bytes in all)` after each tensor
    /// (a 3B model is ~2 GB: seconds to minutes on a board's memory bus).
    pub fn upload_with_progress(
        ctx: &Context,
        file: &GgufFile,
        model: &Model,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<GpuWeights, ExecError> {
        let mut names: Vec<&str> = Vec::new();
        for node in &model.graph.nodes {
            match &node.op {
                Op::RmsNorm { weight, .. } => names.push(weight),
                Op::Linear { weight, bias, .. } => {
                    names.push(weight);
                    if let Some(b) = bias {
                        names.push(b);
                    }
                }
                _ => {}
            }
        }
        names.sort_unstable();
        names.dedup();
        let tensors = names
            .iter()
            .map(|&name| {
                file.tensor(name).ok_or_else(|| {
                    ExecError::Unsupported(format!("tensor {name} is missing from the model"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let total: u64 = tensors.iter().map(|t| t.size).sum();
        let mut done = 0;
        let mut buffers = HashMap::new();
        for (name, t) in names.into_iter().zip(tensors) {
            let data = file.tensor_data(t);
            // Kernels read weights as u32 words: pad to a multiple of 4 bytes.
            let mut buf = Buffer::new(ctx, (data.len() as u64).next_multiple_of(4), name)?;
            buf.upload_bytes(0, data)?;
            buffers.insert(name.to_string(), (buf, t.ggml_type));
            done += t.size;
            progress(done, total);
        }
        Ok(GpuWeights { buffers })
    }

    fn get(&self, name: &str) -> &(Buffer, GgmlType) {
        &self.buffers[name]
    }
}

fn weight_format(ty: GgmlType, tensor: &str) -> Result<WeightFormat, ExecError> {
    Ok(match ty {
        GgmlType::F32 => WeightFormat::F32,
        GgmlType::F16 => WeightFormat::F16,
        GgmlType::Q8_0 => WeightFormat::Q8_0,
        GgmlType::Q5_0 => WeightFormat::Q5_0,
        GgmlType::Q4K => WeightFormat::Q4K,
        GgmlType::Q6K => WeightFormat::Q6K,
        other => {
            return Err(ExecError::Unsupported(format!(
                "tensor {tensor} is {other}, which has no GPU kernel yet (GPU formats: F32, F16, Q8_0, Q5_0, Q4_K, Q6_K); run with --backend cpu or requantize"
            )))
        }
    })
}

/// One recorded dispatch, resolved to buffers.
struct Dispatch<'a> {
    label: String,
    workload: Workload,
    origin: ScheduleOrigin,
    pipeline: &'a ComputePipeline,
    bindings: Vec<BufferRange<'a>>,
    push: Vec<u8>,
    groups: [u32; 3],
}

/// The prefill session: activations, KV cache, pipelines.
pub struct Executor<'m> {
    ctx: Context,
    caps: DeviceCaps,
    file: &'m GgufFile,
    model: &'m Model,
    weights: GpuWeights,
    options: ExecutorOptions,
    plan: slots::SlotPlan,
    slots: Vec<Buffer>,
    ids: Buffer,
    /// Per layer (K, V) caches of packed f16, `n_ctx × kv_width`.
    kv: Vec<(Buffer, Buffer)>,
    n_ctx: usize,
    n_past: usize,
    pipelines: HashMap<(Workload, Schedule), ComputePipeline>,
    cache: Option<PipelineCache>,
    /// The schedule used per node label, for profiles.
    pub used: Vec<(String, Workload, Schedule, ScheduleOrigin)>,
    /// Per-dispatch GPU times of every prefill so far (when `options.profile`).
    pub profile: Vec<DispatchTime>,
}

impl<'m> Executor<'m> {
    pub fn new(
        ctx: &Context,
        file: &'m GgufFile,
        model: &'m Model,
        weights: GpuWeights,
        options: ExecutorOptions,
        n_ctx: usize,
    ) -> Result<Executor<'m>, ExecError> {
        if options.ubatch == 0 || options.ubatch > 4096 {
            return Err(ExecError::Unsupported(format!(
                "ubatch {} is out of range: use 1 to 4096",
                options.ubatch
            )));
        }
        let cfg = &model.config;
        let caps = device_caps(ctx.info(), ctx.caps());
        let plan = slots::plan(&model.graph);
        let slot_bytes = (options.ubatch * plan.max_width * 4) as u64;
        let slots = (0..plan.n_slots)
            .map(|i| Buffer::new(ctx, slot_bytes, &format!("activations[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let kv_width = cfg.n_head_kv * cfg.head_dim;
        let kv_bytes = (n_ctx * kv_width * 2) as u64;
        let kv = (0..cfg.n_layer)
            .map(|l| {
                Ok((
                    Buffer::new(ctx, kv_bytes, &format!("k_cache[{l}]"))?,
                    Buffer::new(ctx, kv_bytes, &format!("v_cache[{l}]"))?,
                ))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let ids = Buffer::new(ctx, (options.ubatch * 4) as u64, "token ids")?;
        Ok(Executor {
            ctx: ctx.clone(),
            caps,
            file,
            model,
            weights,
            options,
            plan,
            slots,
            ids,
            kv,
            n_ctx,
            n_past: 0,
            pipelines: HashMap::new(),
            cache: PipelineCache::open_default(ctx).ok(),
            used: Vec::new(),
            profile: Vec::new(),
        })
    }

    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    pub fn options(&self) -> &ExecutorOptions {
        &self.options
    }

    /// Forgets the prompt so far: the next prefill starts at position 0 (benchmarks and the
    /// graph tuner run the same prompt many times on one executor).
    pub fn reset(&mut self) {
        self.n_past = 0;
        self.profile.clear();
    }

    /// Changes how dispatches are split into command buffers from the next prefill on.
    pub fn set_budget(&mut self, budget: CommandBudget) {
        self.options.budget = budget;
    }

    /// Gives the uploaded weights back, so an executor with another ubatch can reuse them
    /// instead of uploading the model again.
    pub fn into_weights(self) -> GpuWeights {
        self.weights
    }

    /// Runs the whole prompt in ubatches and returns the last position's logits.
    pub fn prefill(
        &mut self,
        tokens: &[u32],
        schedules: &dyn ScheduleSource,
    ) -> Result<Vec<f32>, ExecError> {
        let cfg = &self.model.config;
        if tokens.is_empty() {
            return Err(ExecError::Unsupported("the prompt is empty".into()));
        }
        if self.n_past + tokens.len() > self.n_ctx {
            return Err(ExecError::Unsupported(format!(
                "{} tokens do not fit the {}-position KV cache",
                self.n_past + tokens.len(),
                self.n_ctx
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.n_vocab) {
            return Err(ExecError::Unsupported(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                cfg.n_vocab
            )));
        }
        self.prepare(schedules)?;
        let mut logits = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(self.options.ubatch).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            logits = self.run_ubatch(chunk, last)?;
            self.n_past += chunk.len();
        }
        if let Some(c) = &self.cache {
            let _ = c.save();
        }
        Ok(logits)
    }

    /// Workloads of the graph at ubatch size `m` (the last-position ops at m = 1).
    fn node_workloads(&self, m: u32) -> Result<Vec<Vec<(String, Workload)>>, ExecError> {
        let mut out = Vec::new();
        let mut rows = m;
        for node in &self.model.graph.nodes {
            let mut w = Vec::new();
            match &node.op {
                Op::Embedding { .. } => {}
                Op::LastRow { .. } => rows = 1,
                Op::RmsNorm { eps, width, .. } => w.push(Workload::RmsNorm(RmsNormWorkload::new(
                    rows,
                    *width as u32,
                    *eps,
                ))),
                Op::Linear {
                    weight,
                    bias,
                    in_features,
                    out_features,
                } => {
                    let (_, ty) = self.weights.get(weight);
                    w.push(Workload::Gemm(GemmWorkload {
                        m: rows,
                        n: *out_features as u32,
                        k: *in_features as u32,
                        act: ActType::F32,
                        weight: weight_format(*ty, weight)?,
                        bias: bias.is_some(),
                    }))
                }
                Op::RopeNeox {
                    n_heads,
                    head_dim,
                    theta,
                } => w.push(Workload::RopeNeox(RopeWorkload::new(
                    rows,
                    *n_heads as u32,
                    *head_dim as u32,
                    *theta,
                ))),
                Op::Attention {
                    n_heads,
                    n_kv_heads,
                    head_dim,
                    ..
                } => {
                    let kv_width = (n_kv_heads * head_dim) as u32;
                    w.push(Workload::KvWrite(KvWriteWorkload { m: rows, kv_width }));
                    w.push(Workload::Attention(AttentionWorkload {
                        m: rows,
                        n_heads: *n_heads as u32,
                        n_kv_heads: *n_kv_heads as u32,
                        head_dim: *head_dim as u32,
                        max_kv: self.n_ctx as u32,
                    }))
                }
                Op::SwiGlu { width } => w.push(Workload::SwiGlu(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
                Op::Add { width } => w.push(Workload::Add(EltwiseWorkload {
                    m: rows,
                    width: *width as u32,
                })),
            }
            out.push(w.into_iter().map(|w| (node.label.clone(), w)).collect());
        }
        Ok(out)
    }

    /// Compiles (or finds) the pipeline of every workload at the ubatch size.
    pub fn prepare(&mut self, schedules: &dyn ScheduleSource) -> Result<(), ExecError> {
        let workloads = self.node_workloads(self.options.ubatch as u32)?;
        self.used.clear();
        for (label, w) in workloads.into_iter().flatten() {
            let (s, origin) = schedules.schedule(&w, &self.caps);
            if !self.pipelines.contains_key(&(w, s)) {
                let kernel = instantiate(&w, &s, &self.caps).map_err(|r| ExecError::Refused {
                    label: label.clone(),
                    reason: r.to_string(),
                })?;
                let p = ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
                self.pipelines.insert((w, s), p);
            }
            self.used.push((label, w, s, origin));
        }
        Ok(())
    }

    fn run_ubatch(&mut self, tokens: &[u32], want_logits: bool) -> Result<Vec<f32>, ExecError> {
        let m = tokens.len() as u32;
        let graph = &self.model.graph;
        // Host-side embedding gather into the first node's slot.
        let embd_node = &graph.nodes[0];
        let Op::Embedding { table, width } = &embd_node.op else {
            return Err(ExecError::Unsupported(
                "the graph does not start with an embedding".into(),
            ));
        };
        let x = gather_embeddings(self.file, table, *width, tokens)?;
        let embd_slot = self.plan.slot_of[embd_node.output].unwrap();
        self.slots[embd_slot].upload_f32(0, &x)?;
        self.ids.upload_u32(0, tokens)?;

        let ub = self.options.ubatch as u32;
        let full = self.node_workloads(ub)?;
        let pos0 = self.n_past as u32;
        let align = self.ctx.caps().min_storage_buffer_offset_alignment;
        let max_range = u64::from(self.ctx.caps().max_storage_buffer_range);
        let mut dispatches: Vec<Dispatch> = Vec::new();
        let mut rows = m;
        let mut row_offset_of: HashMap<usize, u64> = HashMap::new();
        let slot_range =
            |value: usize, rows: u32, offset: u64| -> Result<BufferRange<'_>, RuntimeError> {
                let slot = self.plan.slot_of[value].expect("activation has a slot");
                let width = self.plan.width_of[value] as u64;
                self.slots[slot].range(offset, u64::from(rows) * width * 4)
            };
        for (node, ws) in graph.nodes.iter().zip(&full) {
            let in_off: Vec<u64> = node
                .inputs
                .iter()
                .map(|v| row_offset_of.get(v).copied().unwrap_or(0))
                .collect();
            let input_offset = |i: usize| in_off[i];
            match &node.op {
                Op::Embedding { .. } => {}
                Op::LastRow { width } => {
                    let off = u64::from(rows - 1) * (*width as u64) * 4 + input_offset(0);
                    if off % align != 0 {
                        return Err(ExecError::Unsupported(format!(
                            "the last row's offset {off} is not aligned to the device's {align} bytes (hidden size {width})"
                        )));
                    }
                    row_offset_of.insert(node.output, off);
                    rows = 1;
                }
                Op::RopeNeox { .. } => {
                    row_offset_of.insert(node.output, input_offset(0));
                }
                _ => {}
            }
            for (label, w) in ws {
                let (s, origin) = self
                    .used
                    .iter()
                    .find(|(l, uw, _, _)| l == label && uw == w)
                    .map(|(_, _, s, o)| (*s, *o))
                    .expect("pipelines prepared for every workload");
                let pipeline = &self.pipelines[&(*w, s)];
                let actual = with_rows(w, rows);
                let groups = dispatch_grid(&actual, &s).map_err(|r| ExecError::Refused {
                    label: label.clone(),
                    reason: r.to_string(),
                })?;
                let mut named: Vec<(&str, BufferRange)> = Vec::new();
                let push: Vec<u8>;
                match (&node.op, w) {
                    (Op::RmsNorm { weight, .. }, _) => {
                        named.push(("x", slot_range(node.inputs[0], rows, input_offset(0))?));
                        named.push(("weight", self.weights.get(weight).0.whole()));
                        named.push(("y", slot_range(node.output, rows, 0)?));
                        push = RmsNormPush { m: rows }.to_bytes();
                    }
                    (Op::Linear { weight, bias, .. }, Workload::Gemm(g)) => {
                        let gw = GemmWorkload { m: rows, ..*g };
                        let wbuf = &self.weights.get(weight).0;
                        let slices =
                            n_slices(&gw, max_range, align).map_err(|r| ExecError::Refused {
                                label: label.clone(),
                                reason: r.to_string(),
                            })?;
                        for slice in slices {
                            let mut named: Vec<(&str, BufferRange)> = vec![
                                ("x", slot_range(node.inputs[0], rows, input_offset(0))?),
                                (
                                    "weight",
                                    wbuf.range(slice.weight_offset, slice.weight_range)?,
                                ),
                                ("y", slot_range(node.output, rows, 0)?),
                            ];
                            if let Some(b) = bias {
                                named.push(("bias", self.weights.get(b).0.whole()));
                            }
                            let groups = rocky_compiler::templates::gemm::dispatch_grid_for(
                                rows,
                                slice.n,
                                match &s {
                                    Schedule::Gemm(gs) => gs,
                                    _ => unreachable!("a GEMM workload has a GEMM schedule"),
                                },
                            );
                            dispatches.push(Dispatch {
                                label: label.clone(),
                                workload: Workload::Gemm(GemmWorkload { n: slice.n, ..gw }),
                                origin,
                                pipeline,
                                bindings: order_bindings(pipeline, named, label)?,
                                push: GemmPush::for_slice(&gw, &slice).to_bytes().to_vec(),
                                groups,
                            });
                        }
                        continue;
                    }
                    (Op::RopeNeox { .. }, _) => {
                        named.push(("x", slot_range(node.inputs[0], rows, input_offset(0))?));
                        push = RopePush { m: rows, pos0 }.to_bytes();
                    }
                    (Op::Attention { layer, .. }, Workload::KvWrite(_)) => {
                        // K goes to the K cache, then V to the V cache: two dispatches.
                        for (input, cache) in
                            [(1usize, &self.kv[*layer].0), (2, &self.kv[*layer].1)]
                        {
                            let named = vec![
                                (
                                    "src",
                                    slot_range(node.inputs[input], rows, input_offset(input))?,
                                ),
                                ("cache", cache.whole()),
                            ];
                            dispatches.push(Dispatch {
                                label: label.clone(),
                                workload: with_rows(w, rows),
                                origin,
                                pipeline,
                                bindings: order_bindings(pipeline, named, label)?,
                                push: KvWritePush { m: rows, pos0 }.to_bytes(),
                                groups,
                            });
                        }
                        continue;
                    }
                    (Op::Attention { layer, .. }, _) => {
                        named.push(("q", slot_range(node.inputs[0], rows, input_offset(0))?));
                        named.push(("k_cache", self.kv[*layer].0.whole()));
                        named.push(("v_cache", self.kv[*layer].1.whole()));
                        named.push(("out", slot_range(node.output, rows, 0)?));
                        push = AttentionPush { m: rows, pos0 }.to_bytes();
                    }
                    (Op::SwiGlu { .. }, _) => {
                        named.push(("gate", slot_range(node.inputs[0], rows, input_offset(0))?));
                        named.push(("up", slot_range(node.inputs[1], rows, input_offset(1))?));
                        named.push(("y", slot_range(node.output, rows, 0)?));
                        push = EltwisePush { m: rows }.to_bytes();
                    }
                    (Op::Add { .. }, _) => {
                        named.push(("a", slot_range(node.inputs[0], rows, input_offset(0))?));
                        named.push(("b", slot_range(node.inputs[1], rows, input_offset(1))?));
                        named.push(("y", slot_range(node.output, rows, 0)?));
                        push = EltwisePush { m: rows }.to_bytes();
                    }
                    (op, _) => {
                        return Err(ExecError::Unsupported(format!(
                            "no GPU lowering for {op:?} ({label})"
                        )))
                    }
                }
                dispatches.push(Dispatch {
                    label: label.clone(),
                    workload: actual,
                    origin,
                    pipeline,
                    bindings: order_bindings(pipeline, named, label)?,
                    push,
                    groups,
                });
            }
        }
        let times = self.submit_budgeted(dispatches)?;
        self.profile.extend(times);
        if !want_logits {
            return Ok(Vec::new());
        }
        let logits_slot = self.plan.slot_of[graph.logits].unwrap();
        Ok(self.slots[logits_slot].download_f32(0, self.model.config.n_vocab)?)
    }

    /// Records dispatches into command buffers, submitting whenever the budget says so.
    /// With profiling on, a timestamp follows every dispatch (and opens each command buffer).
    fn submit_budgeted(
        &self,
        dispatches: Vec<Dispatch<'_>>,
    ) -> Result<Vec<DispatchTime>, ExecError> {
        let budget = self.options.budget;
        let per_cb = (budget.max_dispatches as usize)
            .min(dispatches.len())
            .max(1) as u32;
        let queries = match self.options.profile {
            true => Some(crate::TimestampQueries::new(&self.ctx, per_cb + 1)?),
            false => None,
        };
        let mut times = Vec::new();
        let mut tracker = BudgetTracker::new(budget);
        let mut rec = Recorder::new(&self.ctx)?;
        let oom = |e: RuntimeError| -> ExecError {
            if matches!(e, RuntimeError::CommandBufferOutOfMemory { .. }) {
                ExecError::CommandBufferOom {
                    ubatch: self.options.ubatch,
                    budget_bytes: budget.max_driver_bytes,
                    max_dispatches: budget.max_dispatches,
                    source: e,
                }
            } else {
                e.into()
            }
        };
        // Labels and kernels of the dispatches in the command buffer being recorded.
        let mut pending: Vec<DispatchTime> = Vec::new();
        let mut finish =
            |rec: &mut Recorder, pending: &mut Vec<DispatchTime>| -> Result<(), ExecError> {
                rec.submit_and_wait(self.options.timeout).map_err(oom)?;
                if let Some(q) = &queries {
                    let ticks = q.read(0, pending.len() as u32 + 1)?;
                    let scale = q.scale();
                    for (i, mut t) in pending.drain(..).enumerate() {
                        t.seconds = scale.elapsed(ticks[i], ticks[i + 1]).as_secs_f64();
                        times.push(t);
                    }
                }
                pending.clear();
                Ok(())
            };
        open_timestamps(&mut rec, queries.as_ref(), per_cb)?;
        for d in dispatches {
            let cost = budget.dispatch_bytes(d.pipeline.meta().shared_bytes, d.groups);
            if tracker.admit(cost) == Admit::SubmitFirst {
                finish(&mut rec, &mut pending)?;
                rec.reset()?;
                open_timestamps(&mut rec, queries.as_ref(), per_cb)?;
            }
            rec.dispatch(d.pipeline, &d.bindings, &d.push, d.groups)
                .map_err(|e| match e {
                    RuntimeError::InvalidDispatch { kernel, reason } => ExecError::Refused {
                        label: d.label.clone(),
                        reason: format!("{kernel}: {reason}"),
                    },
                    e => e.into(),
                })?;
            pending.push(DispatchTime {
                label: d.label.clone(),
                kernel: d.pipeline.meta().name.clone(),
                workload: d.workload,
                origin: d.origin,
                seconds: 0.0,
            });
            if let Some(q) = &queries {
                rec.write_timestamp(q, pending.len() as u32)?;
            }
        }
        finish(&mut rec, &mut pending)?;
        drop(finish);
        Ok(times)
    }
}

/// Resets the profile's queries and writes the opening timestamp of a command buffer.
fn open_timestamps<'a>(
    rec: &mut Recorder<'a>,
    queries: Option<&'a crate::TimestampQueries>,
    per_cb: u32,
) -> Result<(), ExecError> {
    if let Some(q) = queries {
        rec.reset_timestamps(q, 0, per_cb + 1)?;
        rec.write_timestamp(q, 0)?;
    }
    Ok(())
}

/// The same workload with `rows` rows (the last, shorter ubatch; the m = 1 tail).
fn with_rows(w: &Workload, rows: u32) -> Workload {
    let mut w = *w;
    match &mut w {
        Workload::Gemm(g) => g.m = rows,
        Workload::RmsNorm(x) => x.m = rows,
        Workload::RopeNeox(x) => x.m = rows,
        Workload::SwiGlu(x) | Workload::Add(x) => x.m = rows,
        Workload::KvWrite(x) => x.m = rows,
        Workload::Attention(x) => x.m = rows,
        _ => {}
    }
    w
}

/// Puts named buffer ranges in the order of the kernel's bindings.
fn order_bindings<'a>(
    pipeline: &ComputePipeline,
    named: Vec<(&str, BufferRange<'a>)>,
    label: &str,
) -> Result<Vec<BufferRange<'a>>, ExecError> {
    let mut named: Vec<Option<(&str, BufferRange<'a>)>> = named.into_iter().map(Some).collect();
    pipeline
        .meta()
        .bindings
        .iter()
        .map(|b| {
            named
                .iter_mut()
                .find(|n| n.as_ref().is_some_and(|(name, _)| *name == b.name))
                .and_then(|n| n.take())
                .map(|(_, r)| r)
                .ok_or_else(|| ExecError::Refused {
                    label: label.to_string(),
                    reason: format!("kernel binding {:?} has no buffer in the executor", b.name),
                })
        })
        .collect()
}

/// Dequantizes the embedding rows of `tokens` on the host.
fn gather_embeddings(
    file: &GgufFile,
    table: &str,
    width: usize,
    tokens: &[u32],
) -> Result<Vec<f32>, ExecError> {
    let t = file
        .tensor(table)
        .ok_or_else(|| ExecError::Unsupported(format!("tensor {table} is missing")))?;
    let row_bytes = t.ggml_type.row_bytes(width as u64).unwrap_or(0) as usize;
    let data = file.tensor_data(t);
    let mut out = vec![0f32; tokens.len() * width];
    for (row, &tok) in out.chunks_mut(width).zip(tokens) {
        let start = tok as usize * row_bytes;
        formats::dequantize(t.ggml_type, &data[start..start + row_bytes], row)
            .map_err(|e| ExecError::Unsupported(format!("tensor {table}: {e}")))?;
    }
    Ok(out)
}
