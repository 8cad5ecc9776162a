//! The stream: a chain of dependent dispatches over a ring of command buffers, against the CPU.

mod common;

use common::*;
use rocky_runtime::{Buffer, CommandBudget, ComputePipeline, Stream, StreamRing};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// `steps` dispatches ping-ponging between two buffers, y = 1.5 x - 0.25 each: every dispatch
/// reads what the previous one wrote, so a missing barrier between command buffers shows up as
/// a wrong result. Command buffers of at most `per_cb` dispatches.
fn run_chain(
    ctx: &rocky_runtime::Context,
    ring: &mut StreamRing,
    steps: usize,
    per_cb: u32,
    profile: bool,
) -> (Vec<f32>, Vec<f64>, rocky_runtime::StreamStats) {
    try_chain(ctx, ring, steps, per_cb, profile, None).expect("the chain runs")
}

/// [`run_chain`], with the driver "running out of memory" closing command buffers of more than
/// `fail_above` dispatches.
fn try_chain(
    ctx: &rocky_runtime::Context,
    ring: &mut StreamRing,
    steps: usize,
    per_cb: u32,
    profile: bool,
    fail_above: Option<u32>,
) -> Result<(Vec<f32>, Vec<f64>, rocky_runtime::StreamStats), rocky_runtime::RuntimeError> {
    let pipeline = ComputePipeline::new(ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 1000u32;
    let x = test_data(n as usize, 9);
    let a = Buffer::from_slice(ctx, &x, "a").unwrap();
    let b = Buffer::new(ctx, n as u64 * 4, "b").unwrap();
    let budget = CommandBudget {
        wls: None,
        max_driver_bytes: u64::MAX,
        max_dispatches: per_cb,
    };
    let (times, stats) = {
        let mut stream = Stream::new(ctx, ring, budget, TIMEOUT, profile)?;
        if let Some(n) = fail_above {
            stream.fail_command_buffers_above(n);
        }
        for i in 0..steps {
            let (src, dst) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let push = affine_push(1.5, -0.25, n);
            stream.dispatch(&pipeline, &[src.whole(), dst.whole()], &push, groups_for(n))?;
        }
        stream.finish()?
    };
    let out = if steps % 2 == 1 { &b } else { &a };
    Ok((out.download_f32(0, n as usize).unwrap(), times, stats))
}

fn chain_cpu(steps: usize) -> Vec<f32> {
    let mut v = test_data(1000, 9);
    for _ in 0..steps {
        v = affine_cpu(&v, 1.5, -0.25);
    }
    v
}

fn assert_close(got: &[f32], want: &[f32]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn dependent_dispatches_over_many_command_buffers_match_the_cpu() {
    let ctx = context();
    let mut ring = StreamRing::default();
    // 3 dispatches per command buffer at most: the 25 steps span 9+ command buffers, more
    // than the ring holds, so slots are reused while earlier ones may still run.
    let (got, times, stats) = run_chain(&ctx, &mut ring, 25, 3, false);
    assert_close(&got, &chain_cpu(25));
    assert!(times.is_empty(), "no timestamps were asked for");
    assert_eq!(stats.dispatches, 25);
    assert!(
        stats.command_buffers >= 9,
        "{} command buffers",
        stats.command_buffers
    );
    assert!(stats.gpu_busy.is_none());
    // The same ring again (its command buffers reused), a different length.
    let (got, _, _) = run_chain(&ctx, &mut ring, 8, 3, false);
    assert_close(&got, &chain_cpu(8));
}

#[test]
fn profiled_streams_time_every_dispatch() {
    let ctx = context();
    if !ctx.info().has_timestamps() {
        eprintln!("SKIPPED: {} has no timestamps", ctx.info().name);
        return;
    }
    let mut ring = StreamRing::default();
    let (got, times, stats) = run_chain(&ctx, &mut ring, 11, 4, true);
    assert_close(&got, &chain_cpu(11));
    assert_eq!(times.len(), 11, "one time per dispatch");
    assert!(times.iter().all(|&t| t >= 0.0));
    let busy = stats.gpu_busy.expect("GPU busy time with timestamps");
    let sum: f64 = times.iter().sum();
    // Each command buffer's span is the sum of its dispatch intervals.
    assert!(
        (busy.as_secs_f64() - sum).abs() <= 1e-6 * 11.0 + 1e-9,
        "{busy:?} vs {sum}"
    );
}

#[test]
fn command_buffers_the_driver_cannot_close_are_recorded_again_smaller() {
    let ctx = context();
    let mut ring = StreamRing::default();
    // Budget of 8 per command buffer, but the "driver" fails any of more than 3.
    let (got, _, stats) = try_chain(&ctx, &mut ring, 25, 8, false, Some(3)).unwrap();
    assert_close(&got, &chain_cpu(25));
    assert_eq!(stats.dispatches, 25);
    assert!(stats.split_command_buffers >= 1, "{stats:?}");
    assert!(stats.command_buffers >= 9, "{stats:?}");
    // A command buffer of one dispatch cannot be split: the error stands (and names OOM).
    let mut ring = StreamRing::default();
    match try_chain(&ctx, &mut ring, 5, 8, false, Some(0)) {
        Err(rocky_runtime::RuntimeError::CommandBufferOutOfMemory { dispatches, .. }) => {
            assert_eq!(dispatches, 1)
        }
        other => panic!(
            "expected an out-of-memory error, got {:?}",
            other.map(|r| r.2)
        ),
    }
}
