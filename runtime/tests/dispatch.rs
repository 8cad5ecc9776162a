//! Buffers, pipelines and dispatches against a CPU reference.

mod common;

use common::*;
use rocky_runtime::{Buffer, ComputePipeline, Recorder, RequiredFeatures, RuntimeError};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // a*x+b may be fused on the GPU: allow one rounding of difference.
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn test_kernel_passes_spirv_val() {
    let words = affine_spirv();
    let dir = temp_dir("spirv-val");
    let path = dir.join("affine.spv");
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    match std::process::Command::new("spirv-val")
        .args(["--target-env", "vulkan1.1"])
        .arg(&path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "spirv-val rejected the test kernel:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if std::env::var_os("ROCKY_SKIP_SPIRV_VAL").is_some() => {
            eprintln!("spirv-val not run ({e}); ROCKY_SKIP_SPIRV_VAL is set")
        }
        Err(e) => {
            panic!("spirv-val not found ({e}): install spirv-tools or set ROCKY_SKIP_SPIRV_VAL=1")
        }
    }
}

#[test]
fn affine_kernel_matches_the_cpu_reference() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    // Not a multiple of the workgroup size: the bounds check and the last group matter.
    let n = 1000u32;
    let x = test_data(n as usize, 1);
    let xb = Buffer::from_slice(&ctx, &x, "x").unwrap();
    // One sentinel element past n must stay untouched.
    let mut yb = Buffer::new(&ctx, (n as u64 + 1) * 4, "y").unwrap();
    yb.upload_f32(0, &vec![-7.0; n as usize + 1]).unwrap();

    let mut rec = Recorder::new(&ctx).unwrap();
    let push = affine_push(1.5, -0.25, n);
    rec.dispatch(
        &pipeline,
        &[xb.whole(), yb.range(0, n as u64 * 4).unwrap()],
        &push,
        groups_for(n),
    )
    .unwrap();
    rec.submit_and_wait(TIMEOUT).unwrap();
    let got = yb.download_f32(0, n as usize + 1).unwrap();
    assert_close(&got[..n as usize], &affine_cpu(&x, 1.5, -0.25));
    assert_eq!(got[n as usize], -7.0, "wrote past the bound range");
}

#[test]
fn sub_range_bindings_use_their_offset() {
    let ctx = context();
    let align = ctx.caps().min_storage_buffer_offset_alignment;
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 300u32;
    let bytes = n as u64 * 4;
    // x lives at 3 alignment units into a bigger buffer, after different data.
    let x_offset = 3 * align.max(4);
    let mut all = test_data((x_offset / 4) as usize, 2);
    let x = test_data(n as usize, 3);
    all.extend_from_slice(&x);
    all.extend_from_slice(&test_data(50, 4));
    let xb = Buffer::from_slice(&ctx, &all, "x with neighbours").unwrap();
    // y at offset `align` (≠ 0), the bytes around it must be preserved.
    let y_offset = align.max(4);
    let y_total = y_offset + bytes + 64;
    let before = test_data((y_total / 4) as usize, 5);
    let mut yb = Buffer::from_slice(&ctx, &before, "y with neighbours").unwrap();

    let mut rec = Recorder::new(&ctx).unwrap();
    rec.dispatch(
        &pipeline,
        &[
            xb.range(x_offset, bytes).unwrap(),
            yb.range(y_offset, bytes).unwrap(),
        ],
        &affine_push(-2.0, 0.5, n),
        groups_for(n),
    )
    .unwrap();
    rec.submit_and_wait(TIMEOUT).unwrap();

    let got = yb.download_f32(0, (y_total / 4) as usize).unwrap();
    let start = (y_offset / 4) as usize;
    assert_eq!(
        &got[..start],
        &before[..start],
        "bytes before the range changed"
    );
    assert_close(&got[start..start + n as usize], &affine_cpu(&x, -2.0, 0.5));
    assert_eq!(
        &got[start + n as usize..],
        &before[start + n as usize..],
        "bytes after changed"
    );
    // Writing into `yb` once the recorder is gone works (in place or staged); while the
    // recorder lives, the borrow checker forbids it.
    drop(rec);
    yb.upload_f32(0, &[1.0, 2.0]).unwrap();
    assert_eq!(yb.download_f32(0, 2).unwrap(), vec![1.0, 2.0]);
}

#[test]
fn dependent_dispatches_get_a_barrier_and_independent_ones_do_not() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 4096u32;
    let x = test_data(n as usize, 6);
    let xb = Buffer::from_slice(&ctx, &x, "x").unwrap();
    let yb = Buffer::new(&ctx, n as u64 * 4, "y").unwrap();
    let zb = Buffer::new(&ctx, n as u64 * 4, "z").unwrap();
    let wb = Buffer::new(&ctx, n as u64 * 4, "w").unwrap();
    let vb = Buffer::new(&ctx, n as u64 * 4, "v").unwrap();

    let mut rec = Recorder::new(&ctx).unwrap();
    // y = 2x + 1 and w = 3x (both only read x: independent).
    rec.dispatch(
        &pipeline,
        &[xb.whole(), yb.whole()],
        &affine_push(2.0, 1.0, n),
        groups_for(n),
    )
    .unwrap();
    rec.dispatch(
        &pipeline,
        &[xb.whole(), wb.whole()],
        &affine_push(3.0, 0.0, n),
        groups_for(n),
    )
    .unwrap();
    assert_eq!(rec.barrier_count(), 0);
    // z = -y + 4 reads y: needs the first dispatch finished.
    rec.dispatch(
        &pipeline,
        &[yb.whole(), zb.whole()],
        &affine_push(-1.0, 4.0, n),
        groups_for(n),
    )
    .unwrap();
    assert_eq!(rec.barrier_count(), 1);
    assert_eq!(rec.dispatch_count(), 3);
    // v = w / 2 reads w, which the second dispatch writes: it waits for that one, not for the
    // third. Recorded in call order this would take a second barrier (after the third
    // dispatch); levelled, it shares the third's level.
    rec.dispatch(
        &pipeline,
        &[wb.whole(), vb.whole()],
        &affine_push(0.5, 0.0, n),
        groups_for(n),
    )
    .unwrap();
    assert_eq!(rec.barrier_count(), 1);
    rec.submit_and_wait(TIMEOUT).unwrap();
    assert_close(
        &vb.download_f32(0, n as usize).unwrap(),
        &affine_cpu(&affine_cpu(&x, 3.0, 0.0), 0.5, 0.0),
    );

    let y = affine_cpu(&x, 2.0, 1.0);
    assert_close(
        &zb.download_f32(0, n as usize).unwrap(),
        &affine_cpu(&y, -1.0, 4.0),
    );
    assert_close(
        &wb.download_f32(0, n as usize).unwrap(),
        &affine_cpu(&x, 3.0, 0.0),
    );
}

#[test]
fn recorders_can_be_resubmitted_and_reset() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 256u32;
    let x = test_data(n as usize, 7);
    let xb = Buffer::from_slice(&ctx, &x, "x").unwrap();
    let mut yb = Buffer::new(&ctx, n as u64 * 4, "y").unwrap();
    yb.upload_f32(0, &vec![0.0; n as usize]).unwrap();
    {
        let mut rec = Recorder::new(&ctx).unwrap();
        rec.dispatch(
            &pipeline,
            &[xb.whole(), yb.whole()],
            &affine_push(1.0, 1.0, n),
            groups_for(n),
        )
        .unwrap();
        rec.submit_and_wait(TIMEOUT).unwrap();
        rec.submit_and_wait(TIMEOUT).unwrap();
        let err = rec
            .dispatch(
                &pipeline,
                &[xb.whole(), yb.whole()],
                &affine_push(1.0, 1.0, n),
                groups_for(n),
            )
            .unwrap_err();
        assert!(err.to_string().contains("reset()"), "{err}");
        rec.reset().unwrap();
        rec.dispatch(
            &pipeline,
            &[xb.whole(), yb.whole()],
            &affine_push(5.0, 0.0, n),
            groups_for(n),
        )
        .unwrap();
        rec.submit_and_wait(TIMEOUT).unwrap();
    }
    assert_close(
        &yb.download_f32(0, n as usize).unwrap(),
        &affine_cpu(&x, 5.0, 0.0),
    );
}

#[test]
fn invalid_dispatches_are_refused_with_the_reason() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let xb = Buffer::new(&ctx, 1024, "x").unwrap();
    let yb = Buffer::new(&ctx, 1024, "y").unwrap();
    let mut rec = Recorder::new(&ctx).unwrap();
    let push = affine_push(1.0, 0.0, 256);
    let check = |r: Result<(), RuntimeError>, needle: &str| {
        let e = r.unwrap_err();
        assert!(matches!(e, RuntimeError::InvalidDispatch { .. }), "{e:?}");
        assert!(e.to_string().contains(needle), "`{needle}` not in: {e}");
    };
    check(
        rec.dispatch(&pipeline, &[xb.whole()], &push, [4, 1, 1]),
        "2 bindings (x, y)",
    );
    check(
        rec.dispatch(&pipeline, &[xb.whole(), yb.whole()], &push[..8], [4, 1, 1]),
        "takes 12",
    );
    check(
        rec.dispatch(&pipeline, &[xb.whole(), yb.whole()], &push, [0, 1, 1]),
        "non-zero",
    );
    let align = ctx.caps().min_storage_buffer_offset_alignment;
    if align > 1 {
        let misaligned = xb.range(align / 2, 256).unwrap();
        check(
            rec.dispatch(&pipeline, &[misaligned, yb.whole()], &push, [4, 1, 1]),
            "minStorageBufferOffsetAlignment",
        );
    }
    assert!(xb.range(1000, 100).is_err(), "range past the end");
    assert_eq!(rec.dispatch_count(), 0);
}

#[test]
fn kernels_beyond_the_device_limits_or_features_are_refused() {
    let ctx = context();
    let caps = ctx.caps().clone();
    let mut meta = affine_meta();
    meta.shared_bytes = caps.max_shared_bytes + 1;
    let e = ComputePipeline::new(&ctx, None, &affine_spirv(), &meta).unwrap_err();
    assert!(e.to_string().contains("maxComputeSharedMemorySize"), "{e}");

    let mut meta = affine_meta();
    meta.workgroup_size = [caps.max_workgroup_invocations + 1, 1, 1];
    assert!(matches!(
        ComputePipeline::new(&ctx, None, &affine_spirv(), &meta),
        Err(RuntimeError::KernelExceedsLimits { .. })
    ));

    let e = ComputePipeline::new(&ctx, None, &[1, 2, 3, 4, 5], &affine_meta()).unwrap_err();
    assert!(e.to_string().contains("not a SPIR-V module"), "{e}");

    // Feature checks, on a copy of the caps with features removed.
    let mut without = caps.clone();
    without.float16 = false;
    without.integer_dot_product = false;
    let required = RequiredFeatures {
        float16: true,
        integer_dot_product: true,
        int8: caps.int8,
        ..Default::default()
    };
    assert_eq!(
        without.missing(&required),
        vec!["shaderFloat16", "shaderIntegerDotProduct"]
    );
    assert!(caps.missing(&RequiredFeatures::default()).is_empty());
    // And on the real device: a requirement it lacks (if any) is refused by name.
    let all = RequiredFeatures {
        float16: true,
        storage_16bit: true,
        storage_8bit: true,
        int8: true,
        int16: true,
        integer_dot_product: true,
        subgroup_arithmetic: true,
        subgroup_shuffle: true,
    };
    let mut meta = affine_meta();
    meta.required = all;
    let result = ComputePipeline::new(&ctx, None, &affine_spirv(), &meta);
    match caps.missing(&all).as_slice() {
        [] => assert!(result.is_ok()),
        missing => {
            let e = result.unwrap_err();
            assert!(e.to_string().contains(missing[0]), "{e}");
        }
    }
}

#[test]
fn typed_uploads_and_downloads_round_trip() {
    let ctx = context();
    // Larger than one 64 MiB staging chunk, so a device without UMA copies in pieces.
    let count = (80usize << 20) / 4;
    let words: Vec<u32> = (0..count as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let b = Buffer::from_slice(&ctx, &words, "big").unwrap();
    assert_eq!(b.download_u32(0, count).unwrap(), words);
    let tail = b.download_u32((count as u64 - 10) * 4, 10).unwrap();
    assert_eq!(tail, &words[count - 10..]);

    let mut small = Buffer::new(&ctx, 16, "bytes").unwrap();
    small.upload(3, &[1u8, 2, 3]).unwrap();
    assert_eq!(small.download_u8(3, 3).unwrap(), vec![1, 2, 3]);
    let halfs = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)];
    small.upload(8, &halfs).unwrap();
    assert_eq!(small.download::<half::f16>(8, 2).unwrap(), halfs);
}

#[test]
fn buffer_errors_name_the_buffer_and_size() {
    let ctx = context();
    let e = Buffer::new(&ctx, 0, "empty").unwrap_err();
    assert!(e.to_string().contains("`empty`"), "{e}");

    let heap: u64 = ctx
        .info()
        .memory
        .heaps
        .iter()
        .map(|h| h.size)
        .max()
        .unwrap();
    let huge = heap.saturating_mul(4);
    let e = Buffer::new(&ctx, huge, "huge tensor").unwrap_err();
    assert!(e.is_out_of_memory(), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("huge tensor") && msg.contains(&huge.to_string()),
        "{msg}"
    );

    let mut b = Buffer::new(&ctx, 64, "small").unwrap();
    let e = b.upload_f32(60, &[1.0, 2.0]).unwrap_err();
    assert!(
        e.to_string().contains("`small`") && e.to_string().contains("60..68"),
        "{e}"
    );
}

#[test]
fn a_short_wait_times_out_and_a_longer_one_completes() {
    let ctx = context();
    let pipeline = ComputePipeline::new(&ctx, None, &affine_spirv(), &affine_meta()).unwrap();
    let n = 1u32 << 21;
    let xb = Buffer::from_slice(&ctx, &vec![1.0f32; n as usize], "x").unwrap();
    let yb = Buffer::new(&ctx, n as u64 * 4, "y").unwrap();
    let mut rec = Recorder::new(&ctx).unwrap();
    // Ping-pong between x and y: every dispatch depends on the previous one.
    for i in 0..60 {
        let (src, dst) = if i % 2 == 0 { (&xb, &yb) } else { (&yb, &xb) };
        rec.dispatch(
            &pipeline,
            &[src.whole(), dst.whole()],
            &affine_push(1.0, 1.0, n),
            groups_for(n),
        )
        .unwrap();
    }
    rec.submit().unwrap();
    let e = rec.wait(Duration::ZERO).unwrap_err();
    assert!(matches!(e, RuntimeError::Timeout { .. }), "{e:?}");
    rec.wait(TIMEOUT).unwrap();
    // 1 + 60 increments, at both ends of the buffer.
    assert_eq!(xb.download_f32(0, 4).unwrap(), vec![61.0; 4]);
    assert_eq!(
        xb.download_f32((n as u64 - 4) * 4, 4).unwrap(),
        vec![61.0; 4]
    );
}
