//! A stream of dependent dispatches that keeps the GPU fed: dispatches are recorded into a small
//! ring of command buffers, each submitted as soon as the command-buffer budget closes it, and
//! the host waits only when it needs a ring slot back or a result.
//!
//! Why: waiting for every command buffer before recording the next leaves the GPU idle for the
//! whole recording time of the next one (on the H200 that was a third of a prefill's wall time,
//! and a board's Cortex-A76 records far slower). With a ring the host records command buffer
//! n+1 while the GPU runs n.
//!
//! All command buffers go to one queue, in order. A barrier opens every command buffer, so
//! its first dispatch sees the writes of every earlier one (the hazard tracker only sees one
//! command buffer). The first command buffers of a stream are kept short, so the GPU starts
//! after a few dispatches instead of after a whole budget's worth of recording.
//!
//! With timestamps on, each ring slot has its own query pool; a slot's timestamps are read when
//! the slot comes round again or at `finish`.
//!
//! The ring's command buffers, descriptor pools and query pools live in a [`StreamRing`] that
//! the caller keeps: a stream borrows it and gives it back at `finish`, so they are made once
//! per context, not once per prefill.

use crate::budget::{Admit, BudgetTracker, CommandBudget};
use crate::buffer::BufferRange;
use crate::commands::{Recorder, RecorderParts};
use crate::device::Context;
use crate::error::{OomKind, Result, RuntimeError, SubmitStage};
use crate::pipeline::ComputePipeline;
use crate::timing::{TickScale, TimestampQueries};
use std::time::{Duration, Instant};

/// Command buffers in flight or being recorded. Three let the host record one while the GPU
/// runs one and the next waits queued behind it. On panvk each one holds its shared-memory
/// allocations until it is reset, so driver memory in use is up to this many budgets.
pub const RING_DEPTH: usize = 3;

/// Dispatches in the first command buffer of a stream; each next one may hold twice as many,
/// up to the budget's cap.
const FIRST_COMMAND_BUFFER_DISPATCHES: u32 = 16;

/// The reusable resources of a stream's ring (see the module documentation). Empty until the
/// first stream fills it; a stream that fails leaves it empty, and the next one refills it.
#[derive(Default)]
pub struct StreamRing {
    parts: Vec<RecorderParts>,
    /// One pool per slot, for command buffers of up to `capacity - 1` dispatches.
    timestamps: Vec<TimestampQueries>,
}

impl StreamRing {
    /// Fills the ring: [`RING_DEPTH`] recorders and, when `profile`, timestamp pools for
    /// command buffers of up to `max_dispatches`.
    fn fill(&mut self, ctx: &Context, profile: bool, max_dispatches: u32) -> Result<()> {
        while self.parts.len() < RING_DEPTH {
            self.parts.push(RecorderParts::new(ctx)?);
        }
        let big_enough = |p: &TimestampQueries| p.capacity() > max_dispatches;
        if profile
            && !(self.timestamps.len() == RING_DEPTH && self.timestamps.iter().all(big_enough))
        {
            self.timestamps = (0..RING_DEPTH)
                .map(|_| TimestampQueries::new(ctx, max_dispatches + 1))
                .collect::<Result<Vec<_>>>()?;
        }
        Ok(())
    }
}

/// Where the time of a stream went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamStats {
    pub dispatches: u64,
    pub command_buffers: u64,
    /// Host time spent recording and submitting (everything but waiting).
    pub host_busy: Duration,
    /// Host time spent waiting for the GPU (ring slots and the final wait).
    pub host_wait: Duration,
    /// With timestamps: GPU time from each command buffer's first to last timestamp, summed.
    pub gpu_busy: Option<Duration>,
    /// Command buffers the driver could not close for lack of memory, whose dispatches were
    /// recorded again into smaller ones.
    pub split_command_buffers: u32,
}

/// A recorded dispatch, kept until its command buffer is submitted so that it can be recorded
/// again if the driver runs out of memory closing that command buffer.
struct Recorded<'a> {
    pipeline: &'a ComputePipeline,
    bindings: Vec<BufferRange<'a>>,
    push_constants: Vec<u8>,
    groups: [u32; 3],
}

struct Slot<'a> {
    rec: Recorder<'a>,
    queries: Option<&'a TimestampQueries>,
    /// Index (in stream order) of the first dispatch recorded in this slot's command buffer.
    first_dispatch: u64,
    /// This slot's submission, numbered in stream order; its timestamps are still unread.
    submitted: Option<u64>,
    /// What this slot's command buffer holds, until the slot is recorded again.
    recorded: Vec<Recorded<'a>>,
}

impl Slot<'_> {
    fn dispatches(&self) -> u32 {
        self.recorded.len() as u32
    }
}

/// See the module documentation.
pub struct Stream<'a> {
    slots: Vec<Slot<'a>>,
    /// Where the recorders' parts go back at `finish`.
    home: &'a mut Vec<RecorderParts>,
    current: usize,
    budget: CommandBudget,
    tracker: BudgetTracker,
    /// Dispatch cap of the command buffer being recorded (ramps up to the budget's).
    cap: u32,
    timeout: Duration,
    /// Command buffers submitted so far.
    submitted: u64,
    /// Command buffers known to have finished (every one numbered below this).
    finished: u64,
    dispatches: u64,
    /// GPU seconds per dispatch in stream order, filled as timestamps are read.
    times: Vec<f64>,
    gpu_busy: Duration,
    host_wait: Duration,
    started: Instant,
    scale: Option<TickScale>,
    split_command_buffers: u32,
    /// Test hook: the driver "runs out of memory" closing a command buffer of more dispatches.
    fail_end_above: Option<u32>,
}

/// A position in a stream: "everything recorded up to here". Waiting for a ticket makes the
/// host free to reuse what those dispatches read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

impl<'a> Stream<'a> {
    /// A stream over `ctx`'s queue using `ring`'s resources (filled first if needed);
    /// `profile` times every dispatch with GPU timestamps.
    pub fn new(
        ctx: &Context,
        ring: &'a mut StreamRing,
        budget: CommandBudget,
        timeout: Duration,
        profile: bool,
    ) -> Result<Stream<'a>> {
        let max = budget.max_dispatches.max(1);
        ring.fill(ctx, profile, max)?;
        let StreamRing { parts, timestamps } = ring;
        let timestamps: &'a [TimestampQueries] = timestamps;
        let slots = std::mem::take(parts)
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                Ok(Slot {
                    rec: Recorder::from_parts(p)?,
                    queries: profile.then(|| &timestamps[i]),
                    first_dispatch: 0,
                    submitted: None,
                    recorded: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut stream = Stream {
            slots,
            home: parts,
            current: 0,
            budget,
            tracker: BudgetTracker::new(budget),
            cap: FIRST_COMMAND_BUFFER_DISPATCHES.min(max),
            timeout,
            submitted: 0,
            finished: 0,
            dispatches: 0,
            times: Vec::new(),
            gpu_busy: Duration::ZERO,
            host_wait: Duration::ZERO,
            started: Instant::now(),
            scale: profile.then(|| timestamps[0].scale()),
            split_command_buffers: 0,
            fail_end_above: None,
        };
        stream.open_current()?;
        Ok(stream)
    }

    /// Records one dispatch (see `Recorder::dispatch`), first submitting the command buffer
    /// being recorded when the budget says this dispatch does not fit in it.
    pub fn dispatch(
        &mut self,
        pipeline: &'a ComputePipeline,
        bindings: &[BufferRange<'a>],
        push_constants: &[u8],
        groups: [u32; 3],
    ) -> Result<()> {
        let cost = self
            .budget
            .dispatch_bytes(pipeline.meta().shared_bytes, groups);
        if self.slots[self.current].dispatches() >= self.cap {
            self.flush()?;
        }
        if self.tracker.admit(cost) == Admit::SubmitFirst {
            self.flush()?;
            self.tracker.admit(cost);
        }
        // Printed when the dispatch enters the command buffer (the recorder may record it
        // later than now, levelled), right before the driver's own line for it.
        let trace =
            (crate::budget::budget_trace() && pipeline.meta().shared_bytes > 0).then(|| {
                format!(
                    "rocky: dispatch {}x{}x{} shared {} B estimate {cost} B",
                    groups[0],
                    groups[1],
                    groups[2],
                    pipeline.meta().shared_bytes
                )
            });
        let slot = &mut self.slots[self.current];
        slot.rec
            .dispatch_traced(pipeline, bindings, push_constants, groups, trace)?;
        slot.recorded.push(Recorded {
            pipeline,
            bindings: bindings.to_vec(),
            push_constants: push_constants.to_vec(),
            groups,
        });
        if let Some(q) = slot.queries {
            slot.rec.write_timestamp(q, slot.dispatches())?;
        }
        self.dispatches += 1;
        Ok(())
    }

    /// A ticket for everything recorded so far.
    pub fn ticket(&self) -> Ticket {
        match self.slots[self.current].dispatches() {
            0 => Ticket(self.submitted),
            _ => Ticket(self.submitted + 1),
        }
    }

    /// Returns once the GPU has finished everything recorded before `ticket` was taken,
    /// submitting the command buffer being recorded if the ticket needs it.
    pub fn wait_for(&mut self, ticket: Ticket) -> Result<()> {
        if ticket.0 > self.submitted {
            self.flush()?;
        }
        while self.finished < ticket.0 {
            let oldest = self
                .slots
                .iter()
                .position(|s| s.submitted == Some(self.finished))
                .expect("every unfinished submission has a slot");
            self.retire(oldest)?;
        }
        Ok(())
    }

    /// Submits what is recorded, waits for all of it and returns the per-dispatch GPU seconds
    /// (empty without timestamps) and where the time went.
    pub fn finish(mut self) -> Result<(Vec<f64>, StreamStats)> {
        let ticket = self.ticket();
        self.wait_for(ticket)?;
        let wall = self.started.elapsed();
        let stats = StreamStats {
            dispatches: self.dispatches,
            command_buffers: self.submitted,
            host_busy: wall.saturating_sub(self.host_wait),
            host_wait: self.host_wait,
            gpu_busy: self.scale.map(|_| self.gpu_busy),
            split_command_buffers: self.split_command_buffers,
        };
        *self.home = self.slots.drain(..).map(|s| s.rec.into_parts()).collect();
        Ok((std::mem::take(&mut self.times), stats))
    }

    /// Submits the current command buffer (if it holds anything) and moves to the next slot,
    /// waiting for that slot's previous submission first.
    fn flush(&mut self) -> Result<()> {
        let slot = &mut self.slots[self.current];
        if slot.dispatches() == 0 {
            return Ok(());
        }
        let submitted = match self.fail_end_above {
            Some(n) if slot.dispatches() > n => Err(RuntimeError::CommandBufferOutOfMemory {
                stage: SubmitStage::End,
                kind: OomKind::Device,
                dispatches: slot.dispatches(),
                declared_shared_bytes: 0,
            }),
            _ => slot.rec.submit(),
        };
        match submitted {
            Ok(()) => {}
            Err(e @ RuntimeError::CommandBufferOutOfMemory { .. }) => {
                return self.record_again_smaller(e)
            }
            Err(e) => return Err(e),
        }
        let slot = &mut self.slots[self.current];
        slot.submitted = Some(self.submitted);
        self.submitted += 1;
        self.cap = (self.cap * 2).min(self.budget.max_dispatches.max(1));
        self.tracker.reset();
        self.current = (self.current + 1) % self.slots.len();
        if self.slots[self.current].submitted.is_some() {
            self.retire(self.current)?;
        }
        self.open_current()
    }

    /// The driver ran out of memory closing (or submitting) the current command buffer, so
    /// nothing of it ran: record its dispatches again into command buffers of at most half as
    /// many dispatches and half its estimated driver memory, from here to the end of the
    /// stream. Panvk 25.x, whose shared-memory allocations outgrow any fixed budget, is the
    /// case this is for. A command buffer of one dispatch cannot be split: its error stands.
    fn record_again_smaller(&mut self, oom: RuntimeError) -> Result<()> {
        let recorded = std::mem::take(&mut self.slots[self.current].recorded);
        // With the budget off (ROCKY_CB_BUDGET=off) the driver's error stands, as before the
        // budget existed.
        if recorded.len() <= 1 || crate::budget::budget_disabled() {
            return Err(oom);
        }
        let half = (recorded.len() / 2) as u32;
        self.budget.max_dispatches = half;
        self.cap = half;
        let bytes = self.tracker.used_bytes();
        if bytes > 0 {
            self.budget.max_driver_bytes = self.budget.max_driver_bytes.min(bytes / 2).max(1);
        }
        self.tracker = BudgetTracker::new(self.budget);
        self.split_command_buffers += 1;
        self.dispatches -= recorded.len() as u64;
        self.open_current()?;
        for r in recorded {
            self.dispatch(r.pipeline, &r.bindings, &r.push_constants, r.groups)?;
        }
        Ok(())
    }

    /// Test hook: pretend the driver runs out of memory closing any command buffer of more
    /// than `dispatches` dispatches (how tests reach `record_again_smaller` on a device with
    /// memory to spare).
    pub fn fail_command_buffers_above(&mut self, dispatches: u32) {
        self.fail_end_above = Some(dispatches);
    }

    /// Waits for slot `i`'s submission, reads its timestamps and resets it for recording.
    fn retire(&mut self, i: usize) -> Result<()> {
        let waited = Instant::now();
        let timeout = self.timeout;
        let slot = &mut self.slots[i];
        let Some(number) = slot.submitted else {
            return Ok(());
        };
        slot.rec.wait(timeout)?;
        self.host_wait += waited.elapsed();
        if let (Some(q), Some(scale)) = (slot.queries, self.scale) {
            let n = slot.dispatches();
            let ticks = q.read(0, n + 1)?;
            let first = slot.first_dispatch as usize;
            if self.times.len() < first + n as usize {
                self.times.resize(first + n as usize, 0.0);
            }
            for k in 0..n as usize {
                self.times[first + k] = scale.elapsed(ticks[k], ticks[k + 1]).as_secs_f64();
            }
            self.gpu_busy += scale.elapsed(ticks[0], ticks[n as usize]);
        }
        slot.submitted = None;
        slot.recorded.clear();
        self.finished = self.finished.max(number + 1);
        Ok(())
    }

    /// Starts recording into the current slot: reset, the opening barrier, the first timestamp.
    fn open_current(&mut self) -> Result<()> {
        let first_dispatch = self.dispatches;
        let slot = &mut self.slots[self.current];
        slot.rec.reset()?;
        slot.rec.barrier()?;
        slot.first_dispatch = first_dispatch;
        slot.recorded.clear();
        if let Some(q) = slot.queries {
            slot.rec.reset_timestamps(q, 0, q.capacity())?;
            slot.rec.write_timestamp(q, 0)?;
        }
        Ok(())
    }
}
