//! Work recorded once and run again (`ReplayRecorder` / `Replay`, what a decode step uses),
//! against a CPU reference: a chain of dependent dispatches split over several command
//! buffers, run three times with new input the host wrote into mapped memory in between.

mod common;

use common::*;
use rocky_runtime::{Buffer, CommandBudget, ComputePipeline, DispatchSink, ReplayRecorder};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn a_replayed_chain_sees_each_runs_host_input_and_keeps_its_order_across_command_buffers() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 300u32;
    let bytes = u64::from(n) * 4;
    // The input the host rewrites before every run, and four intermediate values.
    let mut input = Buffer::host_input(&ctx, bytes, "x").unwrap();
    let values: Vec<Buffer> = (0..4)
        .map(|i| Buffer::new(&ctx, bytes, &format!("y{i}")).unwrap())
        .collect();
    let output = Buffer::host_output(&ctx, bytes, "out").unwrap();
    // y0 = 2x + 1, y1 = 2y0 + 1, ..., out = 2y3 + 1: each step reads the one before.
    let steps: Vec<(&Buffer, &Buffer)> = std::iter::once(&input)
        .chain(values.iter())
        .zip(values.iter().chain(std::iter::once(&output)))
        .collect();
    // Two dispatches per command buffer: the chain of five spans three.
    let budget = CommandBudget {
        max_dispatches: 2,
        ..CommandBudget::for_device(ctx.info())
    };
    let mut recorder = ReplayRecorder::new(&ctx, budget).unwrap();
    for (src, dst) in &steps {
        DispatchSink::dispatch(
            &mut recorder,
            &pipeline,
            &[src.whole(), dst.whole()],
            &affine_push(2.0, 1.0, n),
            groups_for(n),
        )
        .unwrap();
    }
    // SAFETY: the pipeline and every buffer outlive the replay (dropped after it below).
    let mut replay = unsafe { recorder.finish() }.unwrap();
    assert_eq!(replay.dispatches(), 5);
    assert_eq!(replay.command_buffers(), 3);
    for run in 0..3u32 {
        let x = test_data(n as usize, 11 + run);
        input.upload_f32(0, &x).unwrap();
        replay.run(TIMEOUT).unwrap();
        let mut want = x;
        for _ in 0..5 {
            want = affine_cpu(&want, 2.0, 1.0);
        }
        let got = output.download_f32(0, n as usize).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Five fused a*x+b steps: allow a few roundings of difference.
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "run {run}, element {i}: got {g}, want {w}"
            );
        }
    }
    drop(replay);
}

/// A chain of a template's kernels ordered by counters instead of barriers
/// (`ReplayRecorder::ordered_by_counters`, the decode step's form): the same results as the
/// CPU reference over several runs and command buffers, every level's counter at its
/// workgroup count after a run, and no wait gave up (word 0).
#[test]
fn a_replayed_chain_ordered_by_counters_computes_the_same_and_counts_every_workgroup() {
    use rocky_compiler::templates::eltwise::{self, EltwisePush, EltwiseWorkload};
    use rocky_compiler::{default_schedule, instantiate, Schedule, Workload};
    let ctx = context();
    let caps = rocky_runtime::device_caps(ctx.info(), ctx.caps());
    let n = 3000u32;
    let w = Workload::Add(EltwiseWorkload { m: 1, width: n });
    let s = default_schedule(&w, &caps);
    let kernel = instantiate(&w, &s, &caps).unwrap();
    let pipeline = ComputePipeline::from_kernel(&ctx, None, &kernel).unwrap();
    let (Workload::Add(ew), Schedule::Add(es)) = (&w, &s) else {
        unreachable!()
    };
    let grid = eltwise::dispatch_grid(ew, es);
    let per_level = grid.iter().product::<u32>();
    let bytes = u64::from(n) * 4;
    let mut input = Buffer::host_input(&ctx, bytes, "x").unwrap();
    let values: Vec<Buffer> = (0..5)
        .map(|i| Buffer::new(&ctx, bytes, &format!("y{i}")).unwrap())
        .collect();
    let output = Buffer::host_output(&ctx, bytes, "out").unwrap();
    let counters = Buffer::host_output(&ctx, 4 * 64, "counters").unwrap();
    // y0 = x + x, y1 = y0 + y0, ...: out = 64 x, each level reading the one before.
    let steps: Vec<(&Buffer, &Buffer)> = std::iter::once(&input)
        .chain(values.iter())
        .zip(values.iter().chain(std::iter::once(&output)))
        .collect();
    let budget = CommandBudget {
        max_dispatches: 4,
        ..CommandBudget::for_device(ctx.info())
    };
    let mut recorder =
        ReplayRecorder::ordered_by_counters(&ctx, budget, counters.whole(), None).unwrap();
    for (src, dst) in &steps {
        DispatchSink::dispatch(
            &mut recorder,
            &pipeline,
            &[src.whole(), src.whole(), dst.whole()],
            &EltwisePush { m: 1 }.to_bytes(),
            grid,
        )
        .unwrap();
    }
    // SAFETY: the pipeline and every buffer outlive the replay (dropped after it below).
    let mut replay = unsafe { recorder.finish() }.unwrap();
    assert_eq!(replay.command_buffers(), 2);
    for run in 0..3u32 {
        let x = test_data(n as usize, 5 + run);
        input.upload_f32(0, &x).unwrap();
        replay.run(TIMEOUT).unwrap();
        let got = output.download_f32(0, n as usize).unwrap();
        for (i, (g, x)) in got.iter().zip(&x).enumerate() {
            assert_eq!(*g, 64.0 * x, "run {run}, element {i}");
        }
        // The last command buffer's levels: 2 dispatches, counters 2 and 3 (0: gave up, 1:
        // signals no one waits for).
        let c = counters.download_u32(0, 5).unwrap();
        assert_eq!(c, vec![0, 0, per_level, per_level, 0], "run {run}");
    }
    drop(replay);
}
