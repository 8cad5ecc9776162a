//! GPU timestamps: ordered, positive, scaled by the device's period.

mod common;

use common::*;
use rocky_runtime::{time_dispatches, Buffer, ComputePipeline, Recorder, TimestampQueries};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn timestamps_are_monotone_and_bracket_the_work() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 1u32 << 20;
    let xb = Buffer::from_slice(&ctx, &test_data(n as usize, 10), "x").unwrap();
    let yb = Buffer::new(&ctx, n as u64 * 4, "y").unwrap();
    let queries = TimestampQueries::new(&ctx, 4).unwrap();
    let mut rec = Recorder::new(&ctx).unwrap();
    rec.reset_timestamps(&queries, 0, 4).unwrap();
    rec.write_timestamp(&queries, 0).unwrap();
    rec.dispatch(
        &pipeline,
        &[xb.whole(), yb.whole()],
        &affine_push(1.0, 0.0, n),
        groups_for(n),
    )
    .unwrap();
    rec.write_timestamp(&queries, 1).unwrap();
    rec.dispatch(
        &pipeline,
        &[yb.whole(), xb.whole()],
        &affine_push(1.0, 0.0, n),
        groups_for(n),
    )
    .unwrap();
    rec.write_timestamp(&queries, 2).unwrap();
    rec.write_timestamp(&queries, 3).unwrap();
    let host_start = Instant::now();
    rec.submit_and_wait(TIMEOUT).unwrap();
    let host_elapsed = host_start.elapsed();

    let ticks = queries.read(0, 4).unwrap();
    assert!(
        ticks.windows(2).all(|w| w[0] <= w[1]),
        "not monotone: {ticks:?}"
    );
    let scale = queries.scale();
    let first = scale.elapsed(ticks[0], ticks[1]);
    let second = scale.elapsed(ticks[1], ticks[2]);
    assert!(
        first > Duration::ZERO && second > Duration::ZERO,
        "{ticks:?}"
    );
    // GPU time of the whole command buffer cannot exceed what the host waited for it.
    let gpu_total = scale.elapsed(ticks[0], ticks[3]);
    assert!(
        gpu_total <= host_elapsed,
        "GPU {gpu_total:?} > host {host_elapsed:?}"
    );
    assert_eq!(
        scale.period_ns,
        ctx.info().limits.timestamp_period_ns as f64
    );
}

#[test]
fn repeated_dispatch_timing_returns_one_positive_duration_per_run() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 1u32 << 18;
    let xb = Buffer::from_slice(&ctx, &test_data(n as usize, 11), "x").unwrap();
    let yb = Buffer::new(&ctx, n as u64 * 4, "y").unwrap();
    let host_start = Instant::now();
    let times = time_dispatches(
        &ctx,
        &pipeline,
        &[xb.whole(), yb.whole()],
        &affine_push(2.0, 1.0, n),
        groups_for(n),
        7,
        TIMEOUT,
    )
    .unwrap();
    let host_elapsed = host_start.elapsed();
    assert_eq!(times.len(), 7);
    assert!(times.iter().all(|t| *t > Duration::ZERO), "{times:?}");
    let sum: Duration = times.iter().sum();
    assert!(
        sum <= host_elapsed,
        "sum of runs {sum:?} > host wall time {host_elapsed:?}"
    );
    assert!(time_dispatches(
        &ctx,
        &pipeline,
        &[xb.whole(), yb.whole()],
        &affine_push(2.0, 1.0, n),
        groups_for(n),
        0,
        TIMEOUT
    )
    .unwrap()
    .is_empty());
}

#[test]
fn query_indices_outside_the_pool_are_refused() {
    let ctx = context();
    let queries = TimestampQueries::new(&ctx, 2).unwrap();
    let mut rec = Recorder::new(&ctx).unwrap();
    assert!(rec.write_timestamp(&queries, 2).is_err());
    assert!(rec.reset_timestamps(&queries, 1, 2).is_err());
    assert!(queries.read(0, 3).is_err());
}
