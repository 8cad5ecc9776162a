//! Recording dispatches into a command buffer and running it.
//!
//! ```text
//! let mut rec = Recorder::new(&ctx)?;
//! rec.dispatch(&pipeline, &[x.whole(), y.whole()], &push_bytes, [groups, 1, 1])?;
//! rec.submit_and_wait(Duration::from_secs(10))?;
//! ```
//!
//! A recorder borrows the pipelines and buffers it records (`'a`), so they cannot be dropped
//! while the GPU may use them. Barriers are inserted only between dispatches that depend on
//! each other, and the dispatches between two explicit ordering points (a barrier, a timestamp,
//! the submit) are recorded level by level: each as early as its dependencies allow (see
//! `hazards`). Out-of-memory at `vkEndCommandBuffer`/`vkQueueSubmit` is
//! reported as `RuntimeError::CommandBufferOutOfMemory`, which the graph executor uses to
//! budget command buffers.

use crate::buffer::BufferRange;
use crate::descriptors::DescriptorPools;
use crate::device::Context;
use crate::error::{OomKind, Result, RuntimeError, SubmitStage};
use crate::hazards::{Access, LevelScheduler};
use crate::pipeline::ComputePipeline;
use crate::submit::CommandBuffer;
use crate::timing::TimestampQueries;
use ash::vk;
use ash::vk::Handle;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Recording,
    /// Ended: can be submitted (again) but not extended until `reset`.
    Executable,
}

/// What a recorder owns and a later recorder can reuse: its command buffer (with pool and
/// fence) and its descriptor pools. Creating these costs driver calls (about a millisecond
/// for a stream's ring on the H200); a stream keeps them across prefills.
pub struct RecorderParts {
    // Field order matters: the command buffer waits for its work before the descriptor pools
    // are destroyed.
    cb: CommandBuffer,
    descriptors: DescriptorPools,
}

impl RecorderParts {
    pub fn new(ctx: &Context) -> Result<RecorderParts> {
        Ok(RecorderParts {
            cb: CommandBuffer::new(&ctx.shared)?,
            descriptors: DescriptorPools::new(&ctx.shared),
        })
    }
}

impl Drop for RecorderParts {
    fn drop(&mut self) {
        if self.cb.is_pending()
            && self
                .cb
                .wait(Duration::from_secs(10), "dropping a recorder")
                .is_err()
        {
            // The GPU may still read these descriptor sets: leak rather than destroy.
            self.descriptors.leak();
        }
    }
}

/// A dispatch validated and bound but not yet in the command buffer.
struct Pending {
    level: u32,
    pipeline: vk::Pipeline,
    layout: vk::PipelineLayout,
    set: vk::DescriptorSet,
    push_constants: Vec<u8>,
    groups: [u32; 3],
    /// Printed to standard error right before the dispatch is recorded (the budget trace).
    trace: Option<String>,
    /// The pipeline is a counter-ordered twin: its last three push words (wait counter, wait
    /// value, signal counter) are filled in when the levels are known.
    chained: bool,
}

/// Whether dispatches are reordered by level (the default). `ROCKY_REORDER=0` records them in
/// call order with a barrier before each dependent one, for comparisons.
fn reorder_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ROCKY_REORDER").map_or(true, |v| v != "0"))
}

/// DIAGNOSTIC ONLY: `ROCKY_DIAG_UNORDERED=1` leaves out the barriers between levels, so
/// dependent dispatches may overlap and read unfinished data (wrong results). It bounds what
/// any overlap of consecutive dispatches could gain.
fn diag_unordered() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ROCKY_DIAG_UNORDERED").is_ok_and(|v| v == "1"))
}

/// One global memory barrier: `src` (stages, accesses) before `dst`.
fn memory_barrier(
    device: &ash::Device,
    cb: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1);
    // SAFETY: `cb` is recording (callers check).
    unsafe {
        device.cmd_pipeline_barrier(
            cb,
            src.0,
            dst.0,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        )
    };
}

/// Orders the compute shaders' earlier writes before later reads and writes.
fn compute_barrier(device: &ash::Device, cb: vk::CommandBuffer) {
    memory_barrier(
        device,
        cb,
        (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_WRITE,
        ),
        (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        ),
    );
}

/// Bytes a counter-ordered twin appends to its kernel's push constants (wait counter, wait
/// value, signal counter).
const CHAIN_PUSH_BYTES: usize = 4 * rocky_compiler::ir::chain::CHAIN_PUSH_WORDS as usize;

/// Counter-ordered recording ([`Recorder::order_by_counters`]): the counters' buffer and the
/// next free counter.
struct ChainCounters<'a> {
    counters: BufferRange<'a>,
    next: u32,
    capacity: u32,
}

/// Counter words with a fixed role: 0 counts waits that gave up
/// (`rocky_compiler::ir::chain::GAVE_UP_WORD`), 1 takes the signals of dispatches whose
/// level got a barrier instead (no one waits for them).
const FIRST_LEVEL_COUNTER: u32 = 2;
const UNWATCHED_COUNTER: u32 = 1;

pub struct Recorder<'a> {
    parts: RecorderParts,
    chain: Option<ChainCounters<'a>>,
    levels: LevelScheduler,
    pending: Vec<Pending>,
    state: State,
    dispatches: u32,
    barriers: u32,
    declared_shared_bytes: u64,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> Recorder<'a> {
    /// A new command buffer, ready to record.
    pub fn new(ctx: &Context) -> Result<Recorder<'a>> {
        Recorder::from_parts(RecorderParts::new(ctx)?)
    }

    /// A recorder reusing `parts` (whose previous work must have finished): resets them and
    /// starts recording.
    pub fn from_parts(mut parts: RecorderParts) -> Result<Recorder<'a>> {
        if parts.cb.is_pending() {
            parts
                .cb
                .wait(Duration::ZERO, "reusing a command buffer")
                .map_err(|_| RuntimeError::InvalidDispatch {
                    kernel: "(recorder)".to_string(),
                    reason: "cannot reuse a command buffer whose work is still running".to_string(),
                })?;
        }
        parts.descriptors.reset()?;
        parts.cb.begin()?;
        Ok(Recorder {
            parts,
            chain: None,
            levels: LevelScheduler::default(),
            pending: Vec::new(),
            state: State::Recording,
            dispatches: 0,
            barriers: 0,
            declared_shared_bytes: 0,
            _borrows: PhantomData,
        })
    }

    /// Records one dispatch of `pipeline` over `groups` workgroups. `bindings[i]` is bound at
    /// `pipeline.meta().bindings[i].binding`; `push_constants` must be exactly the kernel's
    /// push-constant block. The dispatch is ordered after every earlier one it depends on
    /// (shares bytes with, one of the two writing them), and free to run with the others.
    pub fn dispatch(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        self.dispatch_traced(pipeline, bindings, push_constants, groups, None)
    }

    /// [`Recorder::dispatch`] that prints `trace` to standard error when the dispatch goes
    /// into the command buffer (so it sits next to what the driver logs for it).
    pub fn dispatch_traced(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
        trace: Option<String>,
    ) -> Result<()> {
        self.dispatch_inner(pipeline, None, bindings, push_constants, groups, trace)
    }

    /// Orders the dispatches recorded from here on by counters instead of barriers where it
    /// can (`rocky_compiler::ir::chain`): zeroes `counters` (a transfer, then a barrier), and
    /// from then on [`Recorder::dispatch_chained`] dispatches of consecutive levels wait for
    /// each other on the GPU. `counters` must not be bound by any dispatch.
    pub fn order_by_counters(&mut self, counters: BufferRange<'a>) -> Result<()> {
        self.require_recording("order by counters")?;
        self.record_pending();
        let device = &self.parts.cb.shared.device;
        let cb = self.parts.cb.raw;
        let shaders = (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        );
        let fill = (
            vk::PipelineStageFlags::TRANSFER,
            vk::AccessFlags::TRANSFER_WRITE,
        );
        // The fill after every earlier shader's use of the counters (an earlier command
        // buffer of the same replay may still be polling them), the kernels after the fill.
        memory_barrier(device, cb, shaders, fill);
        // SAFETY: recording; the buffer outlives the recorder ('a).
        unsafe {
            device.cmd_fill_buffer(cb, counters.buffer.raw, counters.offset, counters.size, 0)
        };
        memory_barrier(device, cb, fill, shaders);
        self.barriers += 2;
        self.levels.clear();
        self.chain = Some(ChainCounters {
            capacity: (counters.size / 4) as u32,
            counters,
            next: FIRST_LEVEL_COUNTER,
        });
        Ok(())
    }

    /// [`Recorder::dispatch`] of `plain` run as its counter-ordered `twin`
    /// ([`ComputePipeline::chained_twin`]): `bindings` and `push_constants` are `plain`'s;
    /// the counters binding and words are added. Without [`Recorder::order_by_counters`]
    /// first, `plain` is dispatched as it is.
    pub fn dispatch_chained(
        &mut self,
        plain: &'a ComputePipeline,
        twin: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        self.dispatch_inner(plain, Some(twin), bindings, push_constants, groups, None)
    }

    fn dispatch_inner(
        &mut self,
        pipeline: &'a ComputePipeline,
        twin: Option<&'a ComputePipeline>,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
        trace: Option<String>,
    ) -> Result<()> {
        let meta = pipeline.meta();
        let refuse = |reason: String| {
            Err(RuntimeError::InvalidDispatch {
                kernel: meta.name.clone(),
                reason,
            })
        };
        if self.state != State::Recording {
            return refuse(
                "the recorder was already submitted; call reset() to record again".into(),
            );
        }
        if bindings.len() != meta.bindings.len() {
            return refuse(format!(
                "{} buffers given, the kernel has {} bindings ({})",
                bindings.len(),
                meta.bindings.len(),
                meta.bindings
                    .iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if push_constants.len() != meta.push_constant_bytes as usize {
            return refuse(format!(
                "{} bytes of push constants given, the kernel takes {}",
                push_constants.len(),
                meta.push_constant_bytes
            ));
        }
        let caps = &self.parts.cb.shared.caps;
        for axis in 0..3 {
            if groups[axis] == 0 || groups[axis] > caps.max_workgroup_count[axis] {
                return refuse(format!(
                    "grid {groups:?} must be non-zero and within maxComputeWorkGroupCount {:?}",
                    caps.max_workgroup_count
                ));
            }
        }
        let mut accesses = Vec::with_capacity(bindings.len());
        for (range, binding) in bindings.iter().zip(&meta.bindings) {
            let name = &binding.name;
            let buffer = range.buffer;
            if !Arc::ptr_eq(&buffer.shared, &self.parts.cb.shared) {
                return refuse(format!(
                    "buffer for `{name}` belongs to another device context"
                ));
            }
            let end = range.offset.checked_add(range.size);
            if range.size == 0 || end.map_or(true, |e| e > buffer.size()) {
                return refuse(format!(
                    "binding `{name}`: range {}+{} is empty or outside buffer `{}` of {} bytes",
                    range.offset,
                    range.size,
                    buffer.label(),
                    buffer.size()
                ));
            }
            if range.offset % caps.min_storage_buffer_offset_alignment != 0 {
                return refuse(format!(
                    "binding `{name}`: offset {} is not a multiple of \
                     minStorageBufferOffsetAlignment {}",
                    range.offset, caps.min_storage_buffer_offset_alignment
                ));
            }
            if range.size > caps.max_storage_buffer_range as u64 {
                return refuse(format!(
                    "binding `{name}`: {} bytes exceed maxStorageBufferRange {}; bind it in \
                     pieces (Buffer::bindable_spans)",
                    range.size, caps.max_storage_buffer_range
                ));
            }
            accesses.push(Access {
                buffer: buffer.raw.as_raw(),
                offset: range.offset,
                size: range.size,
                write: !binding.read_only,
            });
        }

        let level = self.levels.place(&accesses);

        // A twin (where counters order this recording) binds the counters after the kernel's
        // own buffers (its last binding).
        let chain = match (twin, &self.chain) {
            (Some(t), Some(c)) => {
                let expect = meta.bindings.len() + 1;
                if t.meta().bindings.len() != expect
                    || t.meta().push_constant_bytes as usize
                        != meta.push_constant_bytes as usize + CHAIN_PUSH_BYTES
                {
                    return refuse(format!(
                        "its counter-ordered twin `{}` does not add one binding and three push \
                         words",
                        t.meta().name
                    ));
                }
                Some((t, c.counters))
            }
            _ => None,
        };
        let bound = chain.map_or(pipeline, |(t, _)| t);
        let all_bindings: Vec<BufferRange<'a>> = bindings
            .iter()
            .copied()
            .chain(chain.map(|(_, counters)| counters))
            .collect();
        let set = self
            .parts
            .descriptors
            .allocate(bound.set_layout, all_bindings.len() as u32)?;
        let infos: Vec<vk::DescriptorBufferInfo> = all_bindings
            .iter()
            .map(|r| vk::DescriptorBufferInfo {
                buffer: r.buffer.raw,
                offset: r.offset,
                range: r.size,
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = bound
            .meta()
            .bindings
            .iter()
            .zip(&infos)
            .map(|(b, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(b.binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(std::slice::from_ref(info))
            })
            .collect();
        // SAFETY: the set was just allocated and is not in use by any command yet.
        unsafe {
            self.parts
                .cb
                .shared
                .device
                .update_descriptor_sets(&writes, &[])
        };
        let chained = chain.is_some();
        let mut push_constants = push_constants.to_vec();
        if chained {
            push_constants.resize(push_constants.len() + CHAIN_PUSH_BYTES, 0);
        }
        self.pending.push(Pending {
            level,
            pipeline: bound.raw,
            layout: bound.layout,
            set,
            push_constants,
            groups,
            trace,
            chained,
        });
        if !reorder_enabled() {
            self.record_pending();
        }
        self.dispatches += 1;
        self.declared_shared_bytes += meta.shared_bytes as u64;
        Ok(())
    }

    /// Orders everything recorded so far before everything recorded next, whether or not the
    /// buffers overlap (e.g. between timed repetitions).
    pub fn barrier(&mut self) -> Result<()> {
        self.require_recording("record a barrier")?;
        self.record_pending();
        self.record_barrier();
        self.levels.clear();
        Ok(())
    }

    /// Records the pending dispatches into the command buffer, level by level with one
    /// barrier between consecutive levels; within a level, in call order.
    fn record_pending(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        // Stable: equal levels keep their call order.
        pending.sort_by_key(|p| p.level);
        let waits = self.chain_words(&mut pending);
        let mut open_level = 0;
        let device = &self.parts.cb.shared.device;
        let cb = self.parts.cb.raw;
        for (i, p) in pending.iter().enumerate() {
            if p.level > open_level {
                // A level whose dispatches all wait on the GPU for the level before needs no
                // barrier.
                if !diag_unordered() && !waits[i] {
                    compute_barrier(device, cb);
                    self.barriers += 1;
                }
                open_level = p.level;
            }
            if let Some(t) = &p.trace {
                eprintln!("{t}");
            }
            // SAFETY: recording (callers check); the set, pipeline and buffers are alive for
            // 'a, which outlives this recorder and therefore its submissions.
            unsafe {
                device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, p.pipeline);
                device.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    p.layout,
                    0,
                    &[p.set],
                    &[],
                );
                if !p.push_constants.is_empty() {
                    device.cmd_push_constants(
                        cb,
                        p.layout,
                        vk::ShaderStageFlags::COMPUTE,
                        0,
                        &p.push_constants,
                    );
                }
                device.cmd_dispatch(cb, p.groups[0], p.groups[1], p.groups[2]);
            }
        }
        self.levels.recorded();
    }

    /// Fills in the chain words of the chained dispatches in `pending` (sorted by level) and
    /// returns, per dispatch, whether its level waits for the level before on the GPU instead
    /// of behind a barrier: where every dispatch of both levels is chained and a counter is
    /// free. The first level after an ordering point (a barrier, the counters' reset) waits
    /// for nothing.
    fn chain_words(&mut self, pending: &mut [Pending]) -> Vec<bool> {
        let mut waits = vec![false; pending.len()];
        let Some(chain) = &mut self.chain else {
            return waits;
        };
        /// One level of `pending`: its dispatches `range`, whether all are chained, and the
        /// workgroups they run.
        struct Level {
            range: std::ops::Range<usize>,
            all_chained: bool,
            workgroups: u64,
        }
        let mut levels: Vec<Level> = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            let groups = p.groups.iter().map(|&g| u64::from(g)).product::<u64>();
            match levels.last_mut() {
                Some(l) if pending[l.range.start].level == p.level => {
                    l.range.end = i + 1;
                    l.all_chained &= p.chained;
                    l.workgroups += groups;
                }
                _ => levels.push(Level {
                    range: i..i + 1,
                    all_chained: p.chained,
                    workgroups: groups,
                }),
            }
        }
        let mut before: Option<(u32, u64)> = None;
        for level in levels {
            let counter = (level.all_chained && chain.next < chain.capacity).then(|| {
                chain.next += 1;
                chain.next - 1
            });
            let wait = match (before, counter) {
                (Some((c, n)), Some(_)) if n <= u64::from(u32::MAX) => Some((c, n as u32)),
                _ => None,
            };
            for i in level.range {
                waits[i] = wait.is_some();
                let p = &mut pending[i];
                if !p.chained {
                    continue;
                }
                let (wait_counter, wait_value) = wait.unwrap_or((0, 0));
                let signal = counter.unwrap_or(UNWATCHED_COUNTER);
                let words = p.push_constants.len() - CHAIN_PUSH_BYTES;
                let chain_words = [wait_counter, wait_value, signal].map(u32::to_le_bytes);
                p.push_constants[words..].copy_from_slice(&chain_words.concat());
            }
            before = counter.map(|c| (c, level.workgroups));
        }
        waits
    }

    /// Resets `count` queries of `queries` from `first` (needed before writing them again).
    pub fn reset_timestamps(
        &mut self,
        queries: &'a TimestampQueries,
        first: u32,
        count: u32,
    ) -> Result<()> {
        self.require_recording("reset timestamps")?;
        queries.check_range(first, count)?;
        self.record_pending();
        // SAFETY: recording; the pool outlives the recorder ('a).
        unsafe {
            self.parts.cb.shared.device.cmd_reset_query_pool(
                self.parts.cb.raw,
                queries.raw,
                first,
                count,
            )
        };
        Ok(())
    }

    /// Writes timestamp `index` when all work recorded so far has finished (bottom of pipe).
    pub fn write_timestamp(&mut self, queries: &'a TimestampQueries, index: u32) -> Result<()> {
        self.require_recording("write a timestamp")?;
        queries.check_range(index, 1)?;
        // The timestamp follows everything recorded so far: no dispatch may move across it.
        self.record_pending();
        // SAFETY: recording; the pool outlives the recorder ('a).
        unsafe {
            self.parts.cb.shared.device.cmd_write_timestamp(
                self.parts.cb.raw,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                queries.raw,
                index,
            )
        };
        Ok(())
    }

    /// Ends recording (first time only) and submits. Out-of-memory here is the distinct
    /// `CommandBufferOutOfMemory`; the recorder then stays unusable until `reset`.
    pub fn submit(&mut self) -> Result<()> {
        if self.state == State::Recording {
            self.record_pending();
            self.record_host_visibility();
            let ended = self.parts.cb.end();
            self.state = State::Executable;
            ended.map_err(|r| self.submission_error(SubmitStage::End, r))?;
        }
        self.parts
            .cb
            .submit()
            .map_err(|r| self.submission_error(SubmitStage::Submit, r))
    }

    /// Waits for the last submission; `Timeout` and `DeviceLost` are distinct errors.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let what = format!("a command buffer of {} dispatches", self.dispatches);
        self.parts.cb.wait(timeout, &what)
    }

    /// `submit` then `wait`. May be called again to run the same work again.
    pub fn submit_and_wait(&mut self, timeout: Duration) -> Result<()> {
        self.submit()?;
        self.wait(timeout)
    }

    /// Forgets everything recorded (and frees the driver memory it used) to record anew.
    /// The previous submission must have finished.
    pub fn reset(&mut self) -> Result<()> {
        if self.parts.cb.is_pending() {
            self.wait(Duration::ZERO)
                .map_err(|_| RuntimeError::InvalidDispatch {
                    kernel: "(recorder)".to_string(),
                    reason: "cannot reset while the submitted work is still running; wait first"
                        .to_string(),
                })?;
        }
        self.parts.descriptors.reset()?;
        self.parts.cb.begin()?;
        self.pending.clear();
        self.levels.clear();
        self.state = State::Recording;
        self.dispatches = 0;
        self.barriers = 0;
        self.declared_shared_bytes = 0;
        Ok(())
    }

    /// Ends recording and keeps the command buffer as a [`Recording`] that can be submitted
    /// any number of times (a decode step recorded once and replayed for every token).
    /// Out-of-memory closing it is `CommandBufferOutOfMemory`, as at `submit`.
    ///
    /// # Safety
    /// The recording no longer borrows what it recorded: the caller must keep every pipeline
    /// and buffer recorded into it alive (and its buffers at the same memory) for as long as
    /// the recording may be submitted, and must not submit it while an earlier submission of
    /// it may still run (`Recording::submit` refuses that itself).
    pub unsafe fn into_recording(mut self) -> Result<Recording> {
        self.require_recording("keep it as a recording")?;
        self.record_pending();
        self.record_host_visibility();
        self.parts
            .cb
            .end()
            .map_err(|r| self.submission_error(SubmitStage::End, r))?;
        Ok(Recording {
            dispatches: self.dispatches,
            declared_shared_bytes: self.declared_shared_bytes,
            parts: self.parts,
        })
    }

    /// The command buffer and descriptor pools, for a later recorder (`from_parts`) to reuse.
    pub fn into_parts(self) -> RecorderParts {
        self.parts
    }

    pub fn dispatch_count(&self) -> u32 {
        self.dispatches
    }

    /// Barriers inserted so far (automatic and explicit), counting those the dispatches not
    /// yet in the command buffer will need.
    pub fn barrier_count(&self) -> u32 {
        self.barriers + self.levels.barriers_needed()
    }

    /// Sum of `shared_bytes` over the recorded dispatches (the input of panvk's per-command-
    /// buffer shared-memory budget).
    pub fn declared_shared_bytes(&self) -> u64 {
        self.declared_shared_bytes
    }

    fn require_recording(&self, action: &str) -> Result<()> {
        if self.state == State::Recording {
            Ok(())
        } else {
            Err(RuntimeError::InvalidDispatch {
                kernel: "(recorder)".to_string(),
                reason: format!("cannot {action}: already submitted; call reset() first"),
            })
        }
    }

    fn record_barrier(&mut self) {
        compute_barrier(&self.parts.cb.shared.device, self.parts.cb.raw);
        self.barriers += 1;
    }

    /// Makes the shaders' writes visible to host reads of mapped memory after the fence wait
    /// (UMA downloads read in place).
    fn record_host_visibility(&mut self) {
        memory_barrier(
            &self.parts.cb.shared.device,
            self.parts.cb.raw,
            (
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            ),
            (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
        );
    }

    fn submission_error(&self, stage: SubmitStage, r: vk::Result) -> RuntimeError {
        submission_error(stage, r, self.dispatches, self.declared_shared_bytes)
    }
}

/// A failed `vkEndCommandBuffer` / `vkQueueSubmit` of a command buffer of `dispatches`
/// dispatches: out-of-memory as the distinct `CommandBufferOutOfMemory`, anything else as the
/// Vulkan error.
fn submission_error(
    stage: SubmitStage,
    r: vk::Result,
    dispatches: u32,
    declared_shared_bytes: u64,
) -> RuntimeError {
    match OomKind::of(r) {
        Some(kind) => RuntimeError::CommandBufferOutOfMemory {
            stage,
            kind,
            dispatches,
            declared_shared_bytes,
        },
        None => RuntimeError::vk(
            match stage {
                SubmitStage::End => "vkEndCommandBuffer",
                SubmitStage::Submit => "vkQueueSubmit",
            },
            r,
        ),
    }
}

/// A closed command buffer kept for submitting again ([`Recorder::into_recording`]): the same
/// dispatches, descriptor sets and push constants every time; what changes between runs is
/// what the host wrote into the buffers it reads.
pub struct Recording {
    parts: RecorderParts,
    dispatches: u32,
    declared_shared_bytes: u64,
}

impl Recording {
    /// Submits the command buffer (again). Refused while the previous submission may still
    /// run: wait for it first.
    pub fn submit(&mut self) -> Result<()> {
        if self.parts.cb.is_pending() {
            return Err(RuntimeError::InvalidDispatch {
                kernel: "(recording)".to_string(),
                reason: "submitted again before its previous run finished".to_string(),
            });
        }
        let (dispatches, declared) = (self.dispatches, self.declared_shared_bytes);
        self.parts
            .cb
            .submit()
            .map_err(|r| submission_error(SubmitStage::Submit, r, dispatches, declared))
    }

    /// Waits for the last submission; `Timeout` and `DeviceLost` are distinct errors.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        let what = format!(
            "a recorded command buffer of {} dispatches",
            self.dispatches
        );
        self.parts.cb.wait(timeout, &what)
    }

    pub fn dispatch_count(&self) -> u32 {
        self.dispatches
    }
}
