//! GPU timestamps: a query pool, conversion of ticks to time with the device's
//! `timestampPeriod` and `timestampValidBits`, and timing of repeated dispatches.
//!
//! Devices without timestamps (Mesa 25.0.7's panvk, Debian 13's driver) are timed by the host
//! instead: [`TimingMethod::Host`] records many repetitions in one command buffer and reads the
//! host clock around its submit and wait, so each figure includes a share of the submission
//! latency. Callers say which method produced a figure.

use crate::buffer::BufferRange;
use crate::commands::Recorder;
use crate::device::{Context, Shared};
use crate::error::{Result, RuntimeError};
use crate::info::DeviceInfo;
use crate::pipeline::ComputePipeline;
use ash::vk;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Environment variable that forces host timing on a device that has timestamps (`1`), so the
/// fallback of devices without them is exercised (and tested) on any device.
pub const FORCE_HOST_TIMING_ENV: &str = "ROCKY_HOST_TIMING";

/// How kernel and prefill times are measured on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingMethod {
    /// GPU timestamps around each run.
    Gpu,
    /// The host clock around the submit and wait of a command buffer of many runs.
    Host,
}

impl TimingMethod {
    /// `Gpu` when the compute queue has timestamps and `ROCKY_HOST_TIMING` is not `1`.
    pub fn for_device(info: &DeviceInfo) -> TimingMethod {
        match host_timing_reason(info) {
            Some(_) => TimingMethod::Host,
            None => TimingMethod::Gpu,
        }
    }

    /// `"gpu"` or `"host"`, as JSON output and notes name it.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMethod::Gpu => "gpu",
            TimingMethod::Host => "host",
        }
    }
}

/// Why `info`'s device is timed by the host, or `None` when it gets GPU timestamps.
pub fn host_timing_reason(info: &DeviceInfo) -> Option<String> {
    if !info.has_timestamps() {
        return Some(format!(
            "{} has no GPU timestamps on its compute queue",
            info.name
        ));
    }
    let forced = std::env::var(FORCE_HOST_TIMING_ENV).is_ok_and(|v| v.trim() == "1");
    forced.then(|| format!("{FORCE_HOST_TIMING_ENV}=1 forces host timing"))
}

/// Submits `rec` (holding `runs` repetitions of the same work) and waits for it, timing both
/// with the host clock; returns `runs` equal per-run times (the wall time over `runs`).
/// Recording happens before and is not counted; ending the command buffer, submitting and
/// waiting are. The caller makes `runs` large enough that this overhead is small.
pub fn host_time_submit(
    rec: &mut Recorder<'_>,
    runs: u32,
    timeout: Duration,
) -> Result<Vec<Duration>> {
    if runs == 0 {
        return Ok(Vec::new());
    }
    let start = Instant::now();
    rec.submit_and_wait(timeout)?;
    let per_run = start.elapsed() / runs;
    Ok(vec![per_run; runs as usize])
}

/// How raw timestamps become durations on one device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TickScale {
    /// Nanoseconds per tick (`timestampPeriod`): 1.0 on lavapipe, ~41.7 on a 24 MHz timer.
    pub period_ns: f64,
    /// Bits of a timestamp that are meaningful (`timestampValidBits`, 1..=64).
    pub valid_bits: u32,
}

impl TickScale {
    fn mask(&self) -> u64 {
        if self.valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.valid_bits) - 1
        }
    }

    /// Time from tick `start` to tick `end`, allowing the counter to wrap once in between
    /// (only the valid bits count).
    pub fn elapsed(&self, start: u64, end: u64) -> Duration {
        let ticks = end.wrapping_sub(start) & self.mask();
        // Whole nanoseconds: finer than any timer's resolution, and free of the rounding
        // of a detour through seconds.
        Duration::from_nanos((ticks as f64 * self.period_ns).round() as u64)
    }
}

/// A pool of timestamp queries on the compute queue.
pub struct TimestampQueries {
    shared: Arc<Shared>,
    pub(crate) raw: vk::QueryPool,
    capacity: u32,
    scale: TickScale,
}

impl TimestampQueries {
    /// A pool of `capacity` timestamps; `TimestampsUnsupported` when the queue has none.
    pub fn new(ctx: &Context, capacity: u32) -> Result<TimestampQueries> {
        let shared = &ctx.shared;
        let valid_bits = shared
            .info
            .compute_queue
            .as_ref()
            .map_or(0, |q| q.timestamp_valid_bits);
        if valid_bits == 0 || shared.info.limits.timestamp_period_ns <= 0.0 {
            return Err(RuntimeError::TimestampsUnsupported {
                device: shared.info.name.clone(),
            });
        }
        if capacity == 0 {
            return Err(RuntimeError::InvalidDispatch {
                kernel: "(timestamps)".to_string(),
                reason: "a timestamp pool needs at least one query".to_string(),
            });
        }
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(capacity);
        // SAFETY: valid device and create info.
        let raw = unsafe { shared.device.create_query_pool(&info, None) }
            .map_err(|r| RuntimeError::vk("vkCreateQueryPool", r))?;
        Ok(TimestampQueries {
            shared: shared.clone(),
            raw,
            capacity,
            scale: TickScale {
                period_ns: shared.info.limits.timestamp_period_ns as f64,
                valid_bits: valid_bits.min(64),
            },
        })
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn scale(&self) -> TickScale {
        self.scale
    }

    /// Raw ticks of queries `first..first + count`, masked to the valid bits. Call after the
    /// submission that wrote them has finished; waits for each result to be available.
    pub fn read(&self, first: u32, count: u32) -> Result<Vec<u64>> {
        self.check_range(first, count)?;
        let mut ticks = vec![0u64; count as usize];
        // SAFETY: the range is inside the pool; 64-bit results into a u64 slice.
        unsafe {
            self.shared.device.get_query_pool_results(
                self.raw,
                first,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|r| RuntimeError::vk("vkGetQueryPoolResults", r))?;
        let mask = self.scale.mask();
        Ok(ticks.into_iter().map(|t| t & mask).collect())
    }

    pub(crate) fn check_range(&self, first: u32, count: u32) -> Result<()> {
        if first
            .checked_add(count)
            .map_or(true, |end| end > self.capacity)
        {
            return Err(RuntimeError::InvalidDispatch {
                kernel: "(timestamps)".to_string(),
                reason: format!(
                    "queries {first}..{} outside a pool of {}",
                    first.saturating_add(count),
                    self.capacity
                ),
            });
        }
        Ok(())
    }
}

impl Drop for TimestampQueries {
    fn drop(&mut self) {
        // SAFETY: recorders borrow the pool and finish before it drops.
        unsafe { self.shared.device.destroy_query_pool(self.raw, None) };
    }
}

/// Runs one dispatch `runs` times back to back in one command buffer, each run fully after the
/// previous one, and returns each run's GPU time (timestamp before and after it).
/// `TimestampsUnsupported` on a device without timestamps: see [`time_dispatches_with`].
pub fn time_dispatches(
    ctx: &Context,
    pipeline: &ComputePipeline,
    bindings: &[BufferRange<'_>],
    push_constants: &[u8],
    groups: [u32; 3],
    runs: u32,
    timeout: Duration,
) -> Result<Vec<Duration>> {
    time_dispatches_with(
        ctx,
        TimingMethod::Gpu,
        pipeline,
        bindings,
        push_constants,
        groups,
        runs,
        timeout,
    )
}

/// [`time_dispatches`] by `method`: with [`TimingMethod::Host`] the same `runs` repetitions
/// (with the same barriers, without timestamps) are timed together by the host clock around
/// their submit and wait, and each run gets the mean ([`host_time_submit`]).
#[allow(clippy::too_many_arguments)]
pub fn time_dispatches_with(
    ctx: &Context,
    method: TimingMethod,
    pipeline: &ComputePipeline,
    bindings: &[BufferRange<'_>],
    push_constants: &[u8],
    groups: [u32; 3],
    runs: u32,
    timeout: Duration,
) -> Result<Vec<Duration>> {
    if runs == 0 {
        return Ok(Vec::new());
    }
    if method == TimingMethod::Host {
        let mut rec = Recorder::new(ctx)?;
        for run in 0..runs {
            if run > 0 {
                rec.barrier()?;
            }
            rec.dispatch(pipeline, bindings, push_constants, groups)?;
        }
        return host_time_submit(&mut rec, runs, timeout);
    }
    let count = runs
        .checked_mul(2)
        .ok_or_else(|| RuntimeError::InvalidDispatch {
            kernel: pipeline.meta().name.clone(),
            reason: format!("{runs} runs are too many to time"),
        })?;
    let queries = TimestampQueries::new(ctx, count)?;
    let mut rec = Recorder::new(ctx)?;
    rec.reset_timestamps(&queries, 0, count)?;
    for run in 0..runs {
        if run > 0 {
            // Each run must start after the previous one ends, even if it only reads.
            rec.barrier()?;
        }
        rec.write_timestamp(&queries, 2 * run)?;
        rec.dispatch(pipeline, bindings, push_constants, groups)?;
        rec.write_timestamp(&queries, 2 * run + 1)?;
    }
    rec.submit_and_wait(timeout)?;
    let ticks = queries.read(0, count)?;
    let scale = queries.scale();
    Ok(ticks
        .chunks(2)
        .map(|pair| scale.elapsed(pair[0], pair[1]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_scale_by_the_period() {
        let mali = TickScale {
            period_ns: 1e9 / 24e6,
            valid_bits: 64,
        };
        // 24 million ticks of a 24 MHz timer are one second.
        let d = mali.elapsed(1_000, 24_001_000);
        assert!((d.as_secs_f64() - 1.0).abs() < 1e-9, "{d:?}");
        let ns = TickScale {
            period_ns: 1.0,
            valid_bits: 64,
        };
        assert_eq!(ns.elapsed(5, 1_005), Duration::from_nanos(1_000));
    }

    #[test]
    fn wrapped_counters_use_only_valid_bits() {
        let s = TickScale {
            period_ns: 1.0,
            valid_bits: 36,
        };
        let max = (1u64 << 36) - 1;
        // 10 ticks to reach the wrap (max - 9 → 0), 4 more after it.
        assert_eq!(s.elapsed(max - 9, 4), Duration::from_nanos(14));
        // Garbage in the invalid high bits is ignored.
        assert_eq!(s.elapsed(7 | (1 << 40), 9), Duration::from_nanos(2));
    }
}
