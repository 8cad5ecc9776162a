//! Work recorded once and run many times: the decode step.
//!
//! A decode step is the same ~400 dispatches for every token of a generation; only the token
//! id and its position change. Recording them again for every token cost more host time than
//! the GPU spent running them (H100, Qwen2.5-0.5B: 2.0 ms recording against 0.74 ms of GPU
//! wait per token). A [`ReplayRecorder`] records the dispatches once, into command buffers
//! split by the same driver-memory budget as a stream's, and closes them into a [`Replay`];
//! per token the host writes the id and the position into small host-visible buffers the
//! kernels read (see `rocky_compiler::ir::args_buffer`), submits the command buffers and
//! waits once.
//!
//! Each command buffer opens with a barrier, so its first dispatch sees the writes of every
//! earlier submission (the previous step's KV-cache writes among them), as a stream's do.

use crate::budget::{Admit, BudgetTracker, CommandBudget};
use crate::buffer::BufferRange;
use crate::commands::{Recorder, Recording};
use crate::device::Context;
use crate::error::Result;
use crate::pipeline::ComputePipeline;
use crate::pipeline_cache::PipelineCache;
use crate::stream::Stream;
use std::time::{Duration, Instant};

/// Where dispatches go: a stream that runs them as it goes, or a recorder that keeps them.
/// The graph executor records through this, so one recording code path serves both.
pub trait DispatchSink<'a> {
    fn dispatch(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()>;
}

impl<'a> DispatchSink<'a> for Stream<'a> {
    fn dispatch(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        Stream::dispatch(self, pipeline, bindings, push_constants, groups)
    }
}

/// Records dispatches into command buffers that are kept (see the module documentation).
pub struct ReplayRecorder<'a> {
    ctx: Context,
    closed: Vec<Recorder<'a>>,
    current: Recorder<'a>,
    tracker: BudgetTracker,
    chain: Option<Chain<'a>>,
}

/// Counter-ordered recording: the counters every command buffer resets and binds, and the
/// cache the pipelines' twins are built through.
struct Chain<'a> {
    counters: BufferRange<'a>,
    cache: Option<&'a PipelineCache>,
}

impl<'a> ReplayRecorder<'a> {
    /// A recorder whose command buffers hold at most what `budget` allows each.
    pub fn new(ctx: &Context, budget: CommandBudget) -> Result<ReplayRecorder<'a>> {
        Self::with_chain(ctx, budget, None)
    }

    /// A recorder whose dispatches wait for each other on the GPU through `counters` instead
    /// of behind barriers, where their kernels have counter-ordered twins
    /// (`rocky_compiler::ir::chain`; twins built through `cache`). Every command buffer
    /// zeroes `counters` first; after a run, word 0 of `counters` holds the waits that gave
    /// up (the caller reads it: a wait gives up only where dispatches did not start in order).
    pub fn ordered_by_counters(
        ctx: &Context,
        budget: CommandBudget,
        counters: BufferRange<'a>,
        cache: Option<&'a PipelineCache>,
    ) -> Result<ReplayRecorder<'a>> {
        Self::with_chain(ctx, budget, Some(Chain { counters, cache }))
    }

    fn with_chain(
        ctx: &Context,
        budget: CommandBudget,
        chain: Option<Chain<'a>>,
    ) -> Result<ReplayRecorder<'a>> {
        Ok(ReplayRecorder {
            ctx: ctx.clone(),
            closed: Vec::new(),
            current: Self::open(ctx, chain.as_ref())?,
            tracker: BudgetTracker::new(budget),
            chain,
        })
    }

    fn open(ctx: &Context, chain: Option<&Chain<'a>>) -> Result<Recorder<'a>> {
        let mut rec = Recorder::new(ctx)?;
        rec.barrier()?;
        if let Some(c) = chain {
            rec.order_by_counters(c.counters)?;
        }
        Ok(rec)
    }

    /// Closes the recording: its command buffers, ready to run.
    ///
    /// # Safety
    /// As [`Recorder::into_recording`]: every pipeline and buffer recorded must stay alive,
    /// at the same memory, for as long as the replay may run.
    pub unsafe fn finish(self) -> Result<Replay> {
        let mut recordings = Vec::with_capacity(self.closed.len() + 1);
        for rec in self.closed.into_iter().chain([self.current]) {
            if rec.dispatch_count() > 0 {
                // SAFETY: passed on to the caller (this function's contract).
                recordings.push(unsafe { rec.into_recording() }?);
            }
        }
        let dispatches = recordings.iter().map(|r| r.dispatch_count() as u64).sum();
        Ok(Replay {
            recordings,
            dispatches,
        })
    }
}

impl<'a> DispatchSink<'a> for ReplayRecorder<'a> {
    fn dispatch(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        let cost = self
            .tracker
            .budget
            .dispatch_bytes(pipeline.meta().shared_bytes, groups);
        // The tracker counts dispatches and driver bytes as a stream's does; where a stream
        // would submit, the replay closes the command buffer and opens the next.
        if self.tracker.admit(cost) == Admit::SubmitFirst {
            let next = Self::open(&self.ctx, self.chain.as_ref())?;
            self.closed.push(std::mem::replace(&mut self.current, next));
        }
        if let Some(c) = &self.chain {
            if let Some(twin) = pipeline.chained_twin(&self.ctx, c.cache)? {
                return self.current.dispatch_chained(
                    pipeline,
                    twin,
                    bindings,
                    push_constants,
                    groups,
                );
            }
        }
        self.current
            .dispatch(pipeline, bindings, push_constants, groups)
    }
}

/// Command buffers recorded once, run again and again ([`ReplayRecorder::finish`]).
pub struct Replay {
    recordings: Vec<Recording>,
    dispatches: u64,
}

/// Where the host time of one run of a replay went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplayRun {
    /// Submitting the command buffers.
    pub submit: Duration,
    /// Waiting for the GPU to finish them.
    pub wait: Duration,
}

impl Replay {
    /// Submits every command buffer in order, then waits for all of them. The host's writes
    /// to mapped memory before the call are visible to the kernels (queue submission orders
    /// them), and the kernels' writes to the host after it.
    pub fn run(&mut self, timeout: Duration) -> Result<ReplayRun> {
        let submit = self.submit()?;
        let wait = self.wait(timeout)?;
        Ok(ReplayRun { submit, wait })
    }

    /// Submits every command buffer in order without waiting (the host may submit another
    /// replay behind it: queue order and each command buffer's opening barrier order them);
    /// returns the host time it took. [`Replay::wait`] before submitting this one again.
    pub fn submit(&mut self) -> Result<Duration> {
        let start = Instant::now();
        for r in &mut self.recordings {
            r.submit()?;
        }
        Ok(start.elapsed())
    }

    /// Waits for the last [`Replay::submit`] to finish; returns the host time it waited.
    pub fn wait(&mut self, timeout: Duration) -> Result<Duration> {
        let start = Instant::now();
        for r in &mut self.recordings {
            r.wait(timeout)?;
        }
        Ok(start.elapsed())
    }

    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    pub fn command_buffers(&self) -> usize {
        self.recordings.len()
    }
}
