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
