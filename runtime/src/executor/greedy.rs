//! Greedy decoding with the picks made on the device, the next step queued before the last
//! one finished.
//!
//! A replayed decode step (`decode.rs`) still leaves the GPU idle between tokens: the host
//! waits for the step, reads 600 KB of logits back (a 152k vocabulary), takes the argmax,
//! writes the next token and position and submits again. For greedy decoding the device can
//! do that itself: the step is recorded with the greedy pick at its end
//! (`rocky_compiler::templates::greedy`: the next token into `ids[0]`, the position advanced,
//! the pick appended to a small host-readable list), so step t + 1 needs nothing from the host
//! and is submitted while step t runs. Two recordings of the same step take turns (a command
//! buffer may not be pending twice); the host reads each pick when its step is done and stops
//! submitting once the caller has what it wants. A step that was already queued when the
//! caller stopped wrote its position's K and V and nothing the caller will read: the next
//! prefill or decode writes that position again before anything reads it.

use super::decode::RecordedStep;
use super::{ExecError, Executor, PrefillStats, ScheduleSource};
use crate::stream::StreamStats;
use crate::{Buffer, ComputePipeline, Context};
use rocky_compiler::templates::greedy;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// `ROCKY_DEVICE_GREEDY=0` makes greedy decoding pick on the host (logits read back every
/// step), for A/B measurements.
pub const DEVICE_GREEDY_ENV: &str = "ROCKY_DEVICE_GREEDY";

/// Picks the list holds before it wraps (the host reads each one long before).
pub(super) const PICK_CAPACITY: u32 = 1024;

/// Steps queued on the device at once: the one running and the one behind it.
const IN_FLIGHT: usize = 2;

fn env_off() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var(DEVICE_GREEDY_ENV).is_ok_and(|v| v == "0"))
}

/// The executor's state for device-side greedy decoding.
pub(crate) struct DeviceGreedy {
    /// The pick kernel's pipeline, built at the first greedy decode.
    pipeline: Option<ComputePipeline>,
    /// The list of picks (word 0: how many; pick i at word 1 + i % capacity).
    picks: Buffer,
    /// The counters of the second recording when steps are ordered by counters (the first
    /// uses the executor's own): a queued step zeroes its counters while the previous one's
    /// are still to be read.
    counters: Buffer,
    /// The two recordings that take turns, while valid.
    steps: [Option<RecordedStep>; IN_FLIGHT],
    /// Why greedy decoding picks on the host (set once the pick kernel or a recording
    /// failed).
    off: Option<String>,
    /// Picks read so far (what `rocky generate --json` reports, and tests check).
    picks_read: u64,
}

impl DeviceGreedy {
    pub(super) fn new(ctx: &Context) -> Result<DeviceGreedy, ExecError> {
        Ok(DeviceGreedy {
            pipeline: None,
            picks: Buffer::host_output(ctx, 4 * (1 + u64::from(PICK_CAPACITY)), "greedy picks")?,
            counters: Buffer::host_output(
                ctx,
                4 * super::decode::CHAIN_COUNTERS,
                "decode chain counters (second recording)",
            )?,
            steps: [None, None],
            off: None,
            picks_read: 0,
        })
    }
}

/// A step submitted and not yet read: which recording, and the host time submitting it.
/// (Its token is the pick read last, or the first token: the step ahead of it is always
/// read first.)
struct Queued {
    slot: usize,
    submit: Duration,
}

impl Executor<'_> {
    /// Drops every recorded decode step (they bind buffers and schedules a preparation may
    /// change).
    pub(super) fn drop_recordings(&mut self) {
        self.replay = None;
        self.greedy.steps = [None, None];
    }

    /// Tokens picked on the device so far by [`Executor::decode_greedy`].
    pub fn device_picks(&self) -> u64 {
        self.greedy.picks_read
    }

    /// Whether [`Executor::decode_greedy`] picks on the device (`None`), or why not.
    pub fn device_greedy_off(&self) -> Option<String> {
        if env_off() {
            return Some(format!("{DEVICE_GREEDY_ENV}=0"));
        }
        if let Some(why) = self.decode_replay_off() {
            return Some(format!("decode steps are recorded every token ({why})"));
        }
        self.greedy.off.clone()
    }

    /// Greedy decoding on the device: runs `token` at position `n_past()`, then each token
    /// the device picks from the step before (the first largest logit), calling `on_pick`
    /// with each pick and its step's timing, until `on_pick` returns false or `max_steps`
    /// steps ran. Returns the steps run (each one's token stays in the cache), or `Ok(None)`
    /// where the device cannot pick ([`Executor::device_greedy_off`]) and nothing ran.
    pub fn decode_greedy(
        &mut self,
        token: u32,
        max_steps: usize,
        schedules: &dyn ScheduleSource,
        on_pick: &mut dyn FnMut(u32, &PrefillStats) -> bool,
    ) -> Result<Option<usize>, ExecError> {
        if self.device_greedy_off().is_some() {
            return Ok(None);
        }
        self.check_tokens(&[token])?;
        let max_steps = max_steps.min(self.n_ctx - self.n_past);
        if max_steps == 0 {
            return Ok(Some(0));
        }
        let pos0 = self.n_past as u32;
        if !self.greedy_recordings_serve(pos0) {
            if let Err(e) = self.record_greedy_steps(schedules, pos0) {
                self.greedy.off = Some(format!("recording the greedy decode step failed: {e}"));
                self.greedy.steps = [None, None];
                return Ok(None);
            }
        }
        self.ids.upload_u32(0, &[token])?;
        self.step_args.upload_u32(0, &[1, pos0])?;
        self.greedy.picks.upload_u32(0, &[0])?;

        let timeout = self.options.timeout;
        let mut queue: VecDeque<Queued> = VecDeque::new();
        let (mut submitted, mut done) = (0usize, 0usize);
        let mut input = token;
        let mut wanted = true;
        let mut last_done = Instant::now();
        loop {
            // Queue steps while the caller may want them and the recordings serve their
            // positions (the split-KV pieces change a few times per thousand tokens: then
            // the queue drains, the steps are recorded again and the loop goes on).
            while wanted && queue.len() < IN_FLIGHT && submitted < max_steps {
                let pos = pos0 + submitted as u32;
                if !self.greedy_recordings_serve(pos) {
                    if !queue.is_empty() {
                        break;
                    }
                    self.record_greedy_steps(schedules, pos)?;
                }
                let slot = submitted % IN_FLIGHT;
                let step = self.greedy.steps[slot].as_mut().expect("recorded above");
                let submit = step.replay.submit()?;
                queue.push_back(Queued { slot, submit });
                submitted += 1;
            }
            let Some(q) = queue.pop_front() else {
                break;
            };
            let step = self.greedy.steps[q.slot].as_mut().expect("queued above");
            let wait = step.replay.wait(timeout)?;
            let (chained, dispatches, command_buffers) = (
                step.chained,
                step.replay.dispatches(),
                step.replay.command_buffers() as u64,
            );
            if !wanted {
                // Queued before the caller stopped: its results are not wanted.
                continue;
            }
            if chained && self.greedy_waits_gave_up(q.slot)? {
                // This step's results (and the queued one's) may be wrong: drain, switch to
                // barriers, and run this step again from its own token and position.
                for rest in queue.drain(..) {
                    let s = self.greedy.steps[rest.slot].as_mut().expect("queued");
                    s.replay.wait(timeout)?;
                }
                let pos = pos0 + done as u32;
                self.ids.upload_u32(0, &[input])?;
                self.step_args.upload_u32(0, &[1, pos])?;
                self.greedy.picks.upload_u32(0, &[done as u32])?;
                // Recorded behind barriers now (preparing drops the counter-ordered ones).
                self.record_greedy_steps(schedules, pos)?;
                submitted = done;
                continue;
            }
            let readback = Instant::now();
            let word = 1 + (done as u64 % u64::from(PICK_CAPACITY));
            let pick = self.greedy.picks.download_u32(4 * word, 1)?[0];
            let readback = readback.elapsed();
            self.n_past += 1;
            self.greedy.picks_read += 1;
            done += 1;
            input = pick;
            let now = Instant::now();
            let stats = PrefillStats {
                wall: now - last_done,
                ubatches: 1,
                setup: Duration::ZERO,
                readback,
                stream: StreamStats {
                    dispatches,
                    command_buffers,
                    host_busy: q.submit,
                    host_wait: wait,
                    gpu_busy: None,
                    split_command_buffers: 0,
                },
            };
            last_done = now;
            self.last_stats = Some(stats.clone());
            if !on_pick(pick, &stats) || done == max_steps {
                wanted = false;
            }
        }
        Ok(Some(done))
    }

    /// Whether both recordings exist and serve a step at `pos`.
    fn greedy_recordings_serve(&self, pos: u32) -> bool {
        self.greedy.steps.iter().all(|s| {
            s.as_ref()
                .is_some_and(|s| s.serves(pos, self.compute_units))
        })
    }

    /// Prepares the one-row step and records it twice with the greedy pick at its end.
    fn record_greedy_steps(
        &mut self,
        schedules: &dyn ScheduleSource,
        pos: u32,
    ) -> Result<(), ExecError> {
        self.prepare_decode(schedules)?;
        if self.greedy.pipeline.is_none() {
            let kernel = greedy::instantiate(&self.caps).map_err(|r| ExecError::Refused {
                label: "greedy pick".into(),
                reason: r.to_string(),
            })?;
            let p = ComputePipeline::from_kernel(&self.ctx, self.cache.as_ref(), &kernel)?;
            self.greedy.pipeline = Some(p);
            self.unsaved_pipelines = true;
        }
        let pipeline = self.greedy.pipeline.as_ref().expect("built above");
        let pick = Some((pipeline, &self.greedy.picks));
        let first = self.record_prepared_step(pos, pick, self.greedy_counters(0))?;
        let second = self.record_prepared_step(pos, pick, self.greedy_counters(1))?;
        self.greedy.steps = [Some(first), Some(second)];
        self.save_pipeline_cache();
        Ok(())
    }

    /// The counters the recording in `slot` waits on when ordered by counters: the
    /// executor's own for the first, the second's own (a queued step zeroes its counters
    /// while the previous one's are still to be read).
    fn greedy_counters(&self, slot: usize) -> &Buffer {
        if slot == 0 {
            &self.chain_counters
        } else {
            &self.greedy.counters
        }
    }

    /// Whether a wait of the counter-ordered step in `slot` gave up (then counters stay off
    /// for this executor, as in `decode`).
    fn greedy_waits_gave_up(&mut self, slot: usize) -> Result<bool, ExecError> {
        let gave_up = self.greedy_counters(slot).download_u32(0, 1)?[0];
        Ok(self.chain_gave_up(gave_up))
    }
}
