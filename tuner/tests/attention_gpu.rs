//! Attention on a real Vulkan device (lavapipe is enough) against the CPU reference: the
//! default, the f16 variants and a seeded sample of the search space at several (m, KV
//! length, head_dim 64/128, GQA group) combinations, KV lengths that leave the last key block
//! partial; then a tuning run over attention workloads that stores only checked winners, and
//! the database lookup that serves other KV lengths from the nearest tuned one.
//!
//! FAILS without a Vulkan device (never silently skipped). `ROCKY_TEST_DEVICE` picks one.

use rocky_compiler::templates::attention::{self, AttentionSchedule, AttentionWorkload};
use rocky_compiler::testdata::SplitMix64;
use rocky_compiler::{instantiate, Schedule, Workload};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};
use rocky_runtime::{device_caps, Context, DeviceSelector};
use rocky_tuner::attention_gpu::{self, AttentionInputs, AttentionOnGpu};
use rocky_tuner::{fingerprint, DbSchedules, MeasureOptions, ModelWorkload, Strategy};
use rocky_tuner::{TuneOptions, Tuner};
use rocky_tuning_db::TuningDb;
use std::path::PathBuf;
use std::sync::Once;
use std::time::Duration;

fn private_environment() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = temp_dir("env");
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
        std::env::set_var("XDG_CACHE_HOME", dir.join("cache"));
    });
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rocky-attn-gpu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn selector() -> DeviceSelector {
    let text = std::env::var("ROCKY_TEST_DEVICE").unwrap_or_default();
    text.parse().unwrap()
}

fn context() -> Context {
    private_environment();
    Context::new(&selector())
        .unwrap_or_else(|e| panic!("this test needs a Vulkan device (lavapipe is enough): {e}"))
}

#[test]
fn attention_kernels_match_the_cpu_reference_on_the_device() {
    let ctx = context();
    let caps = device_caps(ctx.info(), ctx.caps());
    // (m, kv the ubatch ends at, n_heads, n_kv_heads, head_dim): KV lengths that are no
    // multiple of any key block (the last block partial), GQA groups 1, 2 and 7 (Qwen2.5
    // 0.5B's 14/2), head_dim 64 and 128 (Qwen2.5 3B).
    let cases = [
        (7u32, 7u32, 2u32, 2u32, 64u32),
        (16, 53, 4, 2, 64),
        (5, 77, 14, 2, 64),
        (9, 41, 4, 1, 128),
        (16, 100, 16, 2, 128),
    ];
    let mut checked = 0;
    let mut f16_checked = 0;
    for (i, &(m, kv, nh, nkv, hd)) in cases.iter().enumerate() {
        let w = AttentionWorkload {
            m,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            max_kv: AttentionWorkload::kv_bucket(kv),
            window: 0,
            kv: Default::default(),
        };
        let inputs = AttentionInputs::random(&w, Some(kv - m), 40 + i as u64);
        assert_eq!(
            inputs.reference.rows.len(),
            m as usize,
            "small cases check every row"
        );
        let d = attention::default_schedule(&w, &caps);
        let mut schedules = vec![d];
        if caps.float16 {
            schedules.push(AttentionSchedule { f16_pv: true, ..d });
            schedules.push(AttentionSchedule {
                f16_pv: true,
                f16_qk: true,
                ..d
            });
        }
        let space = attention::search_space(&w, &caps);
        let mut rng = SplitMix64::new(i as u64);
        for _ in 0..6 {
            schedules.push(space[(rng.next_u64() % space.len() as u64) as usize]);
        }
        for s in schedules {
            let kernel = instantiate(&Workload::Attention(w), &Schedule::Attention(s), &caps)
                .unwrap_or_else(|e| panic!("{s:?}: {e}"));
            let gpu = AttentionOnGpu::new(&ctx, None, &kernel, &w, &s, &inputs).unwrap();
            let got = gpu.run_once(&ctx).unwrap();
            let ratio = attention_gpu::check(&w, &s, &inputs, &got)
                .unwrap_or_else(|e| panic!("{} (m {m}, kv {kv}): {e}", kernel.meta.name));
            assert!(ratio < 1.0);
            checked += 1;
            f16_checked += usize::from(s.f16_pv || s.f16_qk);
        }
    }
    eprintln!("checked {checked} attention kernels on the device ({f16_checked} with f16)");
    assert!(checked >= 5 * 7);
    if caps.float16 {
        assert!(f16_checked >= 10);
    }
}

#[test]
fn a_wrong_output_fails_the_check() {
    let ctx = context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let w = AttentionWorkload {
        m: 4,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 64,
        max_kv: 32,
        window: 0,
        kv: Default::default(),
    };
    let inputs = AttentionInputs::random(&w, Some(19), 3);
    let s = attention::default_schedule(&w, &caps);
    let kernel = instantiate(&Workload::Attention(w), &Schedule::Attention(s), &caps).unwrap();
    let gpu = AttentionOnGpu::new(&ctx, None, &kernel, &w, &s, &inputs).unwrap();
    let mut got = gpu.run_once(&ctx).unwrap();
    attention_gpu::check(&w, &s, &inputs, &got).unwrap();
    got[3 * w.q_width() as usize + 5] += 0.05;
    assert!(attention_gpu::check(&w, &s, &inputs, &got).is_err());
    got[0] = f32::NAN;
    assert!(attention_gpu::check(&w, &s, &inputs, &got).is_err());
}

#[test]
fn tuning_attention_stores_checked_winners_and_other_kv_lengths_use_the_nearest() {
    let ctx = context();
    let caps = device_caps(ctx.info(), ctx.caps());
    let dir = temp_dir("tune");
    let db = TuningDb::open(dir.join("tuning.sled")).unwrap();
    let shape = |max_kv| AttentionWorkload {
        m: 8,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv,
        window: 0,
        kv: Default::default(),
    };
    let workloads: Vec<ModelWorkload> = [8, 64]
        .into_iter()
        .map(|kv| ModelWorkload {
            workload: Workload::Attention(shape(kv)),
            labels: vec!["blk.0.attn".into()],
        })
        .collect();
    let options = TuneOptions {
        strategy: Strategy::Random,
        trials: 4,
        time: Duration::from_secs(3600),
        seed: 5,
        measure: MeasureOptions {
            runs: 2,
            max_timed: Duration::from_millis(200),
            ..MeasureOptions::default()
        },
        calibrate_warmup: false,
    };
    let mut tuner = Tuner::new(ctx.clone(), selector(), &db);
    let reports = tuner.tune(&workloads, &options, &mut |_| {}).unwrap();
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert_eq!(r.measured, 4, "{r:?}");
        let best = r.best.as_ref().expect("a checked best");
        assert!(best.is_ok() && best.median_s > 0.0);
        // The winner is checked again here, independently of the tuner.
        let Schedule::Attention(s) = best.schedule else {
            panic!("{best:?}")
        };
        let Workload::Attention(w) = r.workload else {
            unreachable!()
        };
        let inputs = AttentionInputs::random(&w, None, 99);
        let kernel = instantiate(&r.workload, &best.schedule, &caps).unwrap();
        let gpu = AttentionOnGpu::new(&ctx, None, &kernel, &w, &s, &inputs).unwrap();
        attention_gpu::check(&w, &s, &inputs, &gpu.run_once(&ctx).unwrap()).unwrap();
    }
    drop(tuner);
    let schedules = DbSchedules::load(&db, &fingerprint(ctx.info())).unwrap();
    let best_of = |i: usize| reports[i].best.as_ref().unwrap().schedule;
    // Exact keys, then the nearest tuned KV length (log scale) for untuned buckets.
    for (kv, want) in [(8, 0), (64, 1), (16, 0), (32, 1), (4096, 1)] {
        let (s, origin) = schedules.schedule(&Workload::Attention(shape(kv)), &caps);
        assert_eq!(origin, ScheduleOrigin::Tuned, "kv {kv}");
        assert_eq!(s, best_of(want), "kv {kv}");
    }
    // Another shape has no neighbour: the default.
    let other = AttentionWorkload { m: 16, ..shape(64) };
    let (s, origin) = schedules.schedule(&Workload::Attention(other), &caps);
    assert_eq!(origin, ScheduleOrigin::Default);
    assert_eq!(
        s,
        Schedule::Attention(attention::default_schedule(&other, &caps))
    );
}

/// Split-KV decode attention (`split_kv.rs` + `combine.rs`) on the device: the split kernel's
/// partials against their CPU simulation, the combine of those partials against the combine's
/// CPU reference, and the pair's output against the attention reference, for KV lengths that
/// are no multiple of the pieces or the key blocks, more pieces than key blocks (empty
/// pieces), a sliding window with pieces holding only masked keys (Gemma 3's shape: 4 heads
/// of 256 on one kv head), GQA 14/2 (Qwen2.5-0.5B) and a small batch (m = 3).
#[test]
fn split_kv_attention_matches_the_cpu_reference_on_the_device() {
    use attention::combine::reference_combine;
    use attention::split_kv::{reference_partials, splits_for};
    let ctx = context();
    let caps = device_caps(ctx.info(), ctx.caps());
    // (m, kv, n_heads, n_kv_heads, head_dim, window, forced piece counts)
    type Case = (u32, u32, u32, u32, u32, u32, &'static [u32]);
    let cases: [Case; 5] = [
        (1, 1, 14, 2, 64, 0, &[2, 5]),
        (1, 37, 14, 2, 64, 0, &[1, 3, 32]),
        (1, 1000, 14, 2, 64, 0, &[7, 32]),
        (1, 300, 4, 1, 256, 64, &[2, 6]),
        (3, 203, 4, 2, 64, 0, &[4]),
    ];
    let mut checked = 0;
    for (i, &(m, kv, nh, nkv, hd, window, forced)) in cases.iter().enumerate() {
        let w = AttentionWorkload {
            m,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            max_kv: AttentionWorkload::kv_bucket(kv),
            window,
            kv: Default::default(),
        };
        let default = attention::default_schedule(&w, &caps);
        assert!(
            default.kv_splits > 1,
            "decode defaults split the keys: {default:?}"
        );
        // The key-split kernel (Mali's default) splits the same way.
        let lanes = (hd / 8).min(16);
        let key_split = AttentionSchedule {
            rows: 1,
            kv_block: lanes,
            threads_per_row: lanes,
            group_heads: true,
            stage_kv: false,
            lane_reduce: attention::LaneReduce::Shared,
            f16_qk: false,
            f16_pv: false,
            tile_rows: 0,
            tile_keys: 0,
            lane_rows: 1,
            kv_splits: default.kv_splits,
            fused_combine: false,
        };
        // Both kernels with the pieces merged by the combine kernel and in the last piece.
        let variants = [default, key_split].into_iter().flat_map(|d| {
            [false, true].map(|fused_combine| AttentionSchedule { fused_combine, ..d })
        });
        for d in variants {
            let inputs = AttentionInputs::random(&w, Some(kv - m), 70 + i as u64);
            let kernel = instantiate(&Workload::Attention(w), &Schedule::Attention(d), &caps)
                .unwrap_or_else(|e| panic!("{d:?}: {e}"));
            let mut gpu = AttentionOnGpu::new(&ctx, None, &kernel, &w, &d, &inputs).unwrap();
            let grid = attention::dispatch_grid(&w, &d);
            let rule = splits_for(
                &d,
                kv,
                grid[0] * grid[1],
                rocky_runtime::compute_units(ctx.info()),
            );
            assert_eq!(gpu.splits, rule);
            for &splits in forced.iter().chain([rule].iter()) {
                gpu.splits = splits;
                let got = gpu.run_once(&ctx).unwrap();
                let what = format!("m {m} kv {kv} window {window} splits {splits}");
                attention_gpu::check(&w, &d, &inputs, &got)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                let partials = gpu
                    .partials()
                    .unwrap()
                    .expect("a split schedule has partials");
                let (q, k, v) = (&inputs.q, &inputs.k_cache, &inputs.v_cache);
                let want = reference_partials(&w, &d, splits, m as usize, kv - m, q, k, v);
                // Only the pieces dispatched are written (the rest stay NaN).
                for (j, (&g, &r)) in partials.iter().zip(&want).enumerate() {
                    let (o_end, per) = (
                        (d.kv_splits * m * w.q_width()) as usize,
                        (m * w.q_width()) as usize,
                    );
                    let piece = if j < o_end {
                        j / per
                    } else {
                        (j - o_end) / (4 * (m * nh) as usize)
                    };
                    if piece >= splits as usize {
                        continue;
                    }
                    let tol = 2e-4 * (1.0 + r.abs());
                    assert!(
                        (g - r).abs() <= tol,
                        "{what}: partial {j} = {g}, simulated {r}"
                    );
                }
                let combined = reference_combine(&w, &d, splits, m as usize, &partials);
                for (j, (&g, &r)) in got.iter().zip(&combined).enumerate() {
                    assert!(
                        (g - r).abs() <= 1e-5 * (1.0 + r.abs()),
                        "{what}: out {j} = {g}, CPU combine of the same partials {r}"
                    );
                }
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} split-KV runs on the device");
    assert_eq!(checked, 60);
}
