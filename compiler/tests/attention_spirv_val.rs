//! Every module the attention template can produce passes spirv-val for Vulkan 1.2: the whole
//! search space of Qwen2.5 0.5B (14/2 heads, head_dim 64), 3B (16/2, 128) and a head_dim 256
//! model (8/4) at m in {1, 7, 64, 72} and max_kv 32768 (the 3B's also over f32 and q8_0
//! caches), on a desktop profile with all
//! features and on a Mali-like profile (the spaces are small enough to validate whole). Also
//! the metadata contract, the default schedules, and refusals with reasons.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use common::{desktop_vk12, mali_vk12, parallel, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::templates::attention::{
    self, AttentionPush, AttentionSchedule, AttentionWorkload, LaneReduce,
};
use rocky_compiler::{instantiate, DeviceCaps, KvType, KvTypes, Refusal, Schedule, Workload};

fn workloads() -> Vec<AttentionWorkload> {
    let mut out = Vec::new();
    for (n_heads, n_kv_heads, head_dim) in [(14, 2, 64), (16, 2, 128), (8, 4, 256)] {
        for m in [1, 7, 64, 72] {
            out.push(AttentionWorkload {
                m,
                n_heads,
                n_kv_heads,
                head_dim,
                max_kv: 32768,
                window: 0,
                kv: Default::default(),
            });
        }
    }
    // The 3B's shape over f32 and q8_0 caches (K and V apart).
    for kv in [
        KvTypes::F32,
        KvTypes::Q8_0,
        KvTypes::new(KvType::Q8_0, KvType::F32),
    ] {
        for m in [1, 64] {
            out.push(AttentionWorkload {
                m,
                n_heads: 16,
                n_kv_heads: 2,
                head_dim: 128,
                max_kv: 32768,
                window: 0,
                kv,
            });
        }
    }
    // Gemma 3 270M's sliding-window layers (4 heads, 1 kv head, head_dim 256, window 512).
    for m in [7, 64] {
        out.push(AttentionWorkload {
            m,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 256,
            max_kv: 1024,
            window: 512,
            kv: Default::default(),
        });
    }
    out
}

#[test]
fn whole_attention_spaces_pass_spirv_val_for_vulkan_1_2() {
    require_spirv_val();
    let start = Instant::now();
    let profiles = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    let mut distinct: HashMap<Vec<u32>, String> = HashMap::new();
    let mut sizes = Vec::new();
    let mut axes: BTreeSet<(&str, u32)> = BTreeSet::new();
    let mut failures = Vec::new();
    for (pname, caps) in &profiles {
        for w in workloads() {
            let space = attention::search_space(&w, caps);
            assert!(!space.is_empty(), "{pname}: empty space for {w:?}");
            sizes.push(format!(
                "{pname} {}/{} d{} m={}: {}",
                w.n_heads,
                w.n_kv_heads,
                w.head_dim,
                w.m,
                space.len()
            ));
            for s in &space {
                // Split-KV schedules (decode workloads) differ from their plain twin only in
                // the key range and the partials' store, the same for every cap: the m = 1
                // ones at cap 32 are validated, which keeps this test's time near what it was.
                if s.kv_splits > 1 && (w.m != 1 || s.kv_splits != 32) {
                    continue;
                }
                axes.extend([
                    ("rows", s.rows),
                    ("kv_block", s.kv_block),
                    ("lanes", s.threads_per_row),
                    ("gqa", s.group_heads as u32),
                    ("stage", s.stage_kv as u32),
                    (
                        "reduce_shared",
                        (s.lane_reduce == LaneReduce::Shared) as u32,
                    ),
                    ("f16_qk", s.f16_qk as u32),
                    ("f16_pv", s.f16_pv as u32),
                    ("split", (s.kv_splits > 1) as u32),
                    ("fused_combine", s.fused_combine as u32),
                ]);
                match attention::instantiate(&w, s, caps) {
                    Ok(k) => {
                        let names: Vec<&str> =
                            k.meta.bindings.iter().map(|b| b.name.as_str()).collect();
                        let numbers: Vec<u32> = k.meta.bindings.iter().map(|b| b.binding).collect();
                        let want: &[&str] = if s.fused_combine {
                            &["q", "k_cache", "v_cache", "partials", "out", "counters"]
                        } else if s.kv_splits > 1 {
                            &["q", "k_cache", "v_cache", "partials"]
                        } else {
                            &["q", "k_cache", "v_cache", "out"]
                        };
                        let in_order: Vec<u32> = (0..want.len() as u32).collect();
                        if names != want || numbers != in_order {
                            failures
                                .push(format!("{}: bindings {names:?} {numbers:?}", k.meta.name));
                        }
                        if k.meta.push_constant_bytes != AttentionPush::BYTES
                            || k.meta.shared_bytes != s.shared_bytes(&w)
                            || k.meta.workgroup_size != [s.threads(&w), 1, 1]
                            || !caps.missing(&k.meta.required).is_empty()
                        {
                            failures.push(format!("{}: metadata {:?}", k.meta.name, k.meta));
                        }
                        distinct.entry(k.spirv).or_insert(k.meta.name);
                    }
                    Err(e) => failures.push(format!("{s:?} from the space of {w:?} refused: {e}")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(5)].join("\n")
    );
    // The spaces reach every value of every axis (one lane per row would hold 2·head_dim
    // floats, over every register budget here; attention_numerics covers it at head_dim 16).
    for (axis, values) in [
        ("rows", &[1, 2, 4, 8, 16, 32][..]),
        ("kv_block", &[8, 16, 32, 64]),
        ("lanes", &[2, 4, 8, 16, 32]),
        ("gqa", &[0, 1]),
        ("stage", &[0, 1]),
        ("reduce_shared", &[0, 1]),
        ("f16_qk", &[0, 1]),
        ("f16_pv", &[0, 1]),
        ("split", &[0, 1]),
    ] {
        for v in values {
            assert!(axes.contains(&(axis, *v)), "no schedule with {axis} = {v}");
        }
    }
    let modules: Vec<(Vec<u32>, String)> = distinct.into_iter().collect();
    let failures = parallel(&modules, |(words, name)| {
        spirv_val(words, "vulkan1.2").map_err(|e| {
            let dis = spirv_dis(words);
            format!("{name}: {e}\n{}", &dis[..dis.len().min(3000)])
        })
    });
    eprintln!(
        "space sizes:\n  {}\nvalidated {} distinct modules in {:.1?}",
        sizes.join("\n  "),
        modules.len(),
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} modules failed:\n{}",
        failures.len(),
        modules.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}

#[test]
fn samples_pass_spirv_val_for_vulkan_1_1_and_1_3() {
    require_spirv_val();
    for (version, env) in [((1, 3), "vulkan1.1"), ((1, 6), "vulkan1.3")] {
        let caps = DeviceCaps {
            spirv_version: version,
            ..DeviceCaps::desktop_all_features()
        };
        for w in workloads().iter().filter(|w| w.m == 7) {
            for s in attention::search_space(w, &caps).into_iter().step_by(23) {
                let k = attention::instantiate(w, &s, &caps).unwrap();
                assert_eq!(k.meta.spirv_version, version);
                spirv_val(&k.spirv, env).unwrap_or_else(|e| panic!("{} ({env}): {e}", k.meta.name));
            }
        }
    }
}

/// The tuner's seeds are schedules of the space (tiled, where the space has tiles), valid
/// kernels, and none where shared memory is slow.
#[test]
fn seed_schedules_come_from_the_space() {
    for w in workloads() {
        let space = attention::search_space(&w, &desktop_vk12());
        let seeds = attention::seed_schedules(&w, &desktop_vk12());
        // (a prefill's rows; one query row has too few rows for a tile)
        if w.m >= 64 {
            assert!(!seeds.is_empty(), "no seeds for {w:?}");
        }
        for s in &seeds {
            assert!(s.is_tiled() && space.contains(s), "{s:?} not in the space");
            let k = attention::instantiate(&w, s, &desktop_vk12()).unwrap();
            spirv_val(&k.spirv, "vulkan1.2").unwrap();
        }
        assert!(attention::seed_schedules(&w, &mali_vk12()).is_empty());
    }
}

#[test]
fn default_schedules_are_valid_and_follow_the_device_class() {
    for w in workloads() {
        for caps in [desktop_vk12(), mali_vk12()] {
            let s = attention::default_schedule(&w, &caps);
            let k = attention::instantiate(&w, &s, &caps)
                .unwrap_or_else(|e| panic!("default {s:?} for {w:?} refused: {e}"));
            spirv_val(&k.spirv, "vulkan1.2").unwrap();
            assert!(
                attention::search_space(&w, &caps).contains(&s),
                "{s:?} not in the space"
            );
            assert!(
                s.group_heads,
                "Qwen-like GQA shares K/V loads across the group"
            );
            if caps.shared_memory_is_slow {
                // No staging where workgroup memory is ordinary memory; where shuffles are
                // loops (panvk) the key-split kernel keeps only the exchanged scores there
                // (a few KiB: the driver allocates it per dispatch for every workgroup
                // instance, and the command-buffer budget counts it).
                assert!(!s.stage_kv, "Mali default stages K/V: {s:?}");
                if caps.slow_subgroup_shuffle {
                    assert_eq!(s.lane_reduce, LaneReduce::Shared, "{s:?}");
                    assert!(s.is_key_split(), "{s:?}");
                    assert!(k.meta.shared_bytes <= 4096, "{s:?}");
                } else {
                    // Nothing but the fused combine's last-piece flag.
                    let flag = if s.fused_combine { 4 } else { 0 };
                    assert_eq!(k.meta.shared_bytes, flag, "{s:?}");
                }
                assert!(s.register_estimate(&w) <= 64);
            } else {
                assert!(s.stage_kv);
            }
        }
    }
    // The baseline device (no subgroup operations) still gets a working default.
    let w = workloads()[1];
    let caps = DeviceCaps {
        register_budget: 128,
        ..DeviceCaps::baseline()
    };
    let s = attention::default_schedule(&w, &caps);
    assert_eq!(s.lane_reduce, LaneReduce::Shared);
    attention::instantiate(&w, &s, &caps).unwrap();
}

#[test]
fn invalid_pairs_are_refused_with_reasons() {
    let caps = desktop_vk12();
    let w = workloads()[1];
    let good = attention::default_schedule(&w, &caps);
    let refuse = |w: &AttentionWorkload, s: AttentionSchedule, caps: &DeviceCaps| {
        attention::instantiate(w, &s, caps).unwrap_err()
    };
    // Lanes that do not divide head_dim / 8.
    let e = refuse(
        &w,
        AttentionSchedule {
            threads_per_row: 16,
            ..good
        },
        &caps,
    );
    assert!(
        matches!(e, Refusal::Schedule(_)) && e.to_string().contains("head_dim/8"),
        "{e}"
    );
    // Shuffles wider than the subgroup.
    let small = DeviceCaps {
        subgroup_size: 4,
        ..caps.clone()
    };
    let e = refuse(
        &w,
        AttentionSchedule {
            threads_per_row: 8,
            lane_reduce: LaneReduce::Shuffle,
            ..good
        },
        &small,
    );
    assert!(
        matches!(e, Refusal::DeviceLimit(_)) && e.to_string().contains("subgroup size"),
        "{e}"
    );
    // Shuffles on a device without them.
    let e = refuse(
        &w,
        AttentionSchedule {
            lane_reduce: LaneReduce::Shuffle,
            ..good
        },
        &DeviceCaps {
            subgroup_shuffle: false,
            ..caps.clone()
        },
    );
    assert!(matches!(e, Refusal::MissingFeature(_)), "{e}");
    // Staged blocks over the shared-memory limit (head_dim 256, 64 keys: 64 KiB).
    let w256 = workloads()[9];
    let e = refuse(
        &w256,
        AttentionSchedule {
            kv_block: 64,
            stage_kv: true,
            threads_per_row: 32,
            ..good
        },
        &caps,
    );
    assert!(e.to_string().contains("shared memory"), "{e}");
    // Too many registers on Mali (head_dim 128 in 2 lanes).
    let e = refuse(
        &w,
        AttentionSchedule {
            threads_per_row: 2,
            ..good
        },
        &mali_vk12(),
    );
    assert!(e.to_string().contains("registers"), "{e}");
    // Workloads the template cannot compute.
    let e = refuse(&AttentionWorkload { n_kv_heads: 3, ..w }, good, &caps);
    assert!(matches!(e, Refusal::Workload(_)), "{e}");
    let e = refuse(&AttentionWorkload { head_dim: 100, ..w }, good, &caps);
    assert!(e.to_string().contains("multiple of 8"), "{e}");
    // A schedule of another template, through the top-level dispatch.
    let e = instantiate(
        &Workload::Attention(w),
        &rocky_compiler::default_schedule(
            &Workload::Add(rocky_compiler::EltwiseWorkload { m: 1, width: 8 }),
            &caps,
        ),
        &caps,
    )
    .unwrap_err();
    assert!(matches!(e, Refusal::Mismatch { .. }), "{e}");
}

#[test]
fn workload_keys_grid_and_flops() {
    let w = AttentionWorkload {
        m: 64,
        n_heads: 14,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv: 4096,
        window: 0,
        kv: Default::default(),
    };
    let json = serde_json::to_string(&Workload::Attention(w)).unwrap();
    assert_eq!(
        json,
        r#"{"attention":{"m":64,"n_heads":14,"n_kv_heads":2,"head_dim":64,"max_kv":4096}}"#
    );
    let s = attention::default_schedule(&w, &desktop_vk12());
    let back: Schedule =
        serde_json::from_str(&serde_json::to_string(&Schedule::Attention(s)).unwrap()).unwrap();
    assert_eq!(back, Schedule::Attention(s));
    // A record written before the f16 options existed still loads, as f32 math.
    let old = r#"{"attention":{"rows":2,"kv_block":16,"threads_per_row":8,"group_heads":true,"stage_kv":true,"lane_reduce":"shuffle"}}"#;
    match serde_json::from_str::<Schedule>(old).unwrap() {
        Schedule::Attention(o) => assert!(!o.f16_qk && !o.f16_pv && o.rows == 2),
        other => panic!("{other:?}"),
    }
    // Grid: row blocks × (kv heads when grouped, else q heads).
    let grouped = AttentionSchedule {
        rows: 8,
        group_heads: true,
        ..s
    };
    assert_eq!(attention::dispatch_grid(&w, &grouped), [8, 2, 1]);
    let single = AttentionSchedule {
        rows: 5,
        group_heads: false,
        ..s
    };
    assert_eq!(attention::dispatch_grid(&w, &single), [13, 14, 1]);
    // FLOPs: 4·head_dim·heads per visible (query, key) pair, the ubatch ending at max_kv.
    let pairs: u64 = (0..64u64).map(|i| 4096 - 64 + i + 1).sum();
    assert_eq!(Workload::Attention(w).flops(), 4 * pairs * 64 * 14);
    // The largest shapes the runtime may ask for: ubatch 4096, context 32768.
    for hd in [64, 128, 256] {
        let big = AttentionWorkload {
            m: 4096,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: hd,
            max_kv: 32768,
            window: 0,
            kv: Default::default(),
        };
        for caps in [desktop_vk12(), mali_vk12()] {
            let s = attention::default_schedule(&big, &caps);
            attention::instantiate(&big, &s, &caps).unwrap();
            let grid = attention::dispatch_grid(&big, &s);
            assert!(grid[0] <= 65535 && grid[0] * s.rows >= 4096, "{grid:?}");
        }
    }
    assert_eq!(
        AttentionPush {
            m: 3,
            pos0: 0x0102_0304
        }
        .to_bytes(),
        vec![3, 0, 0, 0, 4, 3, 2, 1]
    );
}

/// The combine kernels of split-KV decode attention (`combine.rs`) pass spirv-val for every
/// decode workload above, both split caps of the space and both profiles; the split kernels
/// themselves are in the whole spaces validated above (decode workloads try each row-wise
/// schedule with `kv_splits`).
#[test]
fn split_kv_combine_kernels_pass_spirv_val() {
    use attention::combine::instantiate_combine;
    require_spirv_val();
    let mut checked = 0;
    for caps in [desktop_vk12(), mali_vk12()] {
        for w in workloads().into_iter().filter(|w| w.m <= 8) {
            let space = attention::search_space(&w, &caps);
            let caps_seen: BTreeSet<u32> = space.iter().map(|s| s.kv_splits).collect();
            assert!(
                caps_seen.contains(&8) && caps_seen.contains(&32),
                "{w:?}: {caps_seen:?}"
            );
            for cap in [8, 32] {
                let s = space.iter().find(|s| s.kv_splits == cap).unwrap();
                let k = instantiate_combine(&w, s, &caps).unwrap_or_else(|e| panic!("{w:?}: {e}"));
                spirv_val(&k.spirv, "vulkan1.2").unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
                checked += 1;
            }
            // A schedule without splits has no combine kernel.
            let plain = space.iter().find(|s| s.kv_splits == 0).unwrap();
            assert!(instantiate_combine(&w, plain, &caps).is_err());
        }
    }
    assert!(checked >= 16);
}

/// The args forms a replayed decode step runs (`instantiate_with_args`: push constants read
/// from a storage buffer) pass spirv-val like their push forms: decode attention split and
/// unsplit, one-row RoPE and the KV write, on the desktop and Mali profiles.
#[test]
fn the_decode_steps_args_forms_pass_spirv_val() {
    use rocky_compiler::templates::instantiate_with_args;
    use rocky_compiler::{default_schedule, KvWriteWorkload, RopeWorkload};
    require_spirv_val();
    let mut checked = 0;
    for caps in [desktop_vk12(), mali_vk12()] {
        let attention = Workload::Attention(AttentionWorkload {
            m: 1,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: 128,
            max_kv: 4096,
            window: 0,
            kv: Default::default(),
        });
        let split = default_schedule(&attention, &caps);
        let Schedule::Attention(a) = split else {
            panic!("attention has an attention schedule")
        };
        let separate = AttentionSchedule {
            fused_combine: false,
            ..a
        };
        let unsplit = Schedule::Attention(AttentionSchedule {
            kv_splits: 0,
            ..separate
        });
        let cases = [
            (attention, split),
            (attention, Schedule::Attention(separate)),
            (attention, unsplit),
            (
                Workload::RopeNeox(RopeWorkload::new(1, 16, 128, 1e6)),
                default_schedule(
                    &Workload::RopeNeox(RopeWorkload::new(1, 16, 128, 1e6)),
                    &caps,
                ),
            ),
            (
                Workload::KvWrite(KvWriteWorkload {
                    m: 1,
                    kv_width: 256,
                    ty: Default::default(),
                    rotation: 0,
                }),
                default_schedule(
                    &Workload::KvWrite(KvWriteWorkload {
                        m: 1,
                        kv_width: 256,
                        ty: Default::default(),
                        rotation: 0,
                    }),
                    &caps,
                ),
            ),
        ];
        for (w, s) in cases {
            let k = instantiate_with_args(&w, &s, &caps)
                .unwrap_or_else(|e| panic!("{w:?}: the args form is refused: {e}"));
            assert_eq!(k.meta.push_constant_bytes, 0);
            assert_eq!(k.meta.bindings.last().unwrap().name, "args");
            if let Err(e) = spirv_val(&k.spirv, "vulkan1.2") {
                panic!("{}: {e}\n{}", k.meta.name, spirv_dis(&k.spirv));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 10);
}
