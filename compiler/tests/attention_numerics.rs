//! Numerics of the attention kernels, run by the IR interpreter (no GPU), against the f64
//! CPU reference over the cache in each of its types (f16 mostly; f32 and q8_0 for K and V
//! apart in `every_cache_type_*`): a KV cache carried across ubatches (pos0 > 0), runtime m
//! smaller than the workload's and not a multiple of the row block, GQA groups of 2 and 7,
//! head_dim 64, 128 and 256, every schedule axis (rows, key block, lanes per row, GQA
//! grouping, K/V staging, shuffle or shared reduction), several subgroup sizes.
//!
//! Tolerance: the reference's worst-case bound for f32 scores and sums and Vulkan's `exp`
//! (see `attention::reference`); the test also prints how close the kernels came to it.

mod common;

use common::{desktop_vk12, mali_vk12};
use rocky_compiler::ir::args_buffer::push_constants_from_buffer;
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::templates::attention::{
    self, AttentionPush, AttentionSchedule, AttentionWorkload, LaneReduce,
};
use rocky_compiler::templates::kv_cache::pack_f16_words;
use rocky_compiler::testdata::{random_activations, SplitMix64};
use rocky_compiler::{DeviceCaps, KvType, KvTypes};

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const SENTINEL: f32 = -12345.0;

/// One attention problem: q rows and a cache holding `pos0 + m_run` positions (plus spare
/// capacity that must never influence the result).
struct Case {
    w: AttentionWorkload,
    m_run: usize,
    pos0: u32,
    q: Vec<f32>,
    k_cache: Vec<u32>,
    v_cache: Vec<u32>,
}

fn case(w: AttentionWorkload, m_run: usize, pos0: u32, seed: u64) -> Case {
    let positions = pos0 as usize + m_run;
    let capacity = positions + 5;
    let kw = w.kv_width() as usize;
    // q of magnitude ~2 so that softmax weights are far from uniform.
    let q: Vec<f32> = random_activations(w.m as usize * w.q_width() as usize, seed)
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    let mut k = random_activations(capacity * kw, seed + 1);
    let mut v = random_activations(capacity * kw, seed + 2);
    // Spare capacity holds huge values: reading past the visible keys would show.
    for x in k[positions * kw..]
        .iter_mut()
        .chain(v[positions * kw..].iter_mut())
    {
        *x = 3.0e4;
    }
    let encode = |ty: KvType, x: &[f32]| -> Vec<u32> {
        x.chunks(kw).flat_map(|row| ty.encode_row(row)).collect()
    };
    Case {
        w,
        m_run,
        pos0,
        q,
        k_cache: encode(w.kv.k, &k),
        v_cache: encode(w.kv.v, &v),
    }
}

/// The cache types of the tests of f32 and q8_0 (and mixes with f16).
const TYPE_PAIRS: [KvTypes; 4] = [
    KvTypes::F32,
    KvTypes::Q8_0,
    KvTypes {
        k: KvType::F32,
        v: KvType::Q8_0,
    },
    KvTypes {
        k: KvType::Q8_0,
        v: KvType::F16,
    },
];

#[test]
fn every_cache_type_matches_the_reference_across_the_space() {
    // As `attention_matches_the_reference_across_the_space`, per cache type pair: every
    // kernel family (row-wise staged and not, tiled, key-split) reads K and V in their types.
    let mut checked = 0;
    let mut families = std::collections::BTreeSet::new();
    for (i, kv) in TYPE_PAIRS.into_iter().enumerate() {
        let w = AttentionWorkload {
            m: 9,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
            max_kv: 64,
            window: 0,
            kv,
        };
        let c = case(w, 7, 13, 100 + i as u64);
        for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
            for s in sample(&w, &caps, 4, 70 + i as u64) {
                // The packed-f16 products are for an f16 cache only.
                assert!(!s.f16_qk || kv.k == KvType::F16, "{}", s.name(&w));
                assert!(!s.f16_pv || kv.v == KvType::F16, "{}", s.name(&w));
                check(&c, &s, &caps, sg);
                families.insert((
                    s.is_tiled(),
                    s.is_key_split(),
                    s.stage_kv,
                    kv.k.name(),
                    kv.v.name(),
                ));
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} attention kernels over f32 / q8_0 caches");
    for kv in TYPE_PAIRS {
        for family in [
            (true, false, true),
            (false, true, false),
            (false, false, true),
        ] {
            let key = (family.0, family.1, family.2, kv.k.name(), kv.v.name());
            assert!(families.contains(&key), "{key:?} never checked");
        }
    }
}

#[test]
fn every_cache_type_decodes_split_and_unsplit() {
    // One decode row over 45 keys: split-KV pieces and their combine read the types too.
    let mut checked = 0;
    for kv in TYPE_PAIRS {
        let w = AttentionWorkload {
            m: 1,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: 64,
            max_kv: 64,
            window: 0,
            kv,
        };
        let c = case(w, 1, 44, 7);
        for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
            let d = attention::default_schedule(&w, &caps);
            assert!(attention::split_kv::is_split(&d), "{}", d.name(&w));
            // Merged in the last piece (a tuner's option, for the row-wise kernel of the
            // desktop default and the key-split kernel of Mali's), by the combine kernel (the
            // default), and unsplit.
            assert!(!d.fused_combine, "{}", d.name(&w));
            let fused = AttentionSchedule {
                fused_combine: true,
                ..d
            };
            let separate = AttentionSchedule {
                fused_combine: false,
                ..d
            };
            let unsplit = AttentionSchedule {
                kv_splits: 0,
                ..separate
            };
            for s in [fused, separate, unsplit] {
                check(&c, &s, &caps, sg);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 24);
}

#[test]
fn packed_f16_products_are_refused_over_other_cache_types() {
    let w = AttentionWorkload {
        m: 9,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv: 64,
        window: 0,
        kv: KvTypes {
            k: KvType::F32,
            v: KvType::Q8_0,
        },
    };
    let caps = desktop_vk12();
    let d = attention::default_schedule(&w, &caps);
    let e = AttentionSchedule { f16_qk: true, ..d }
        .validate(&w, &caps)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("f16_qk reads an f16 K cache; this one is f32"),
        "{e}"
    );
    let e = AttentionSchedule { f16_pv: true, ..d }
        .validate(&w, &caps)
        .unwrap_err();
    assert!(e.to_string().contains("this one is q8_0"), "{e}");
    // q8_0 needs whole blocks of 32 per head.
    let odd = AttentionWorkload {
        head_dim: 48,
        n_kv_heads: 1,
        n_heads: 2,
        kv: KvTypes::Q8_0,
        ..w
    };
    let e = odd.validate().unwrap_err();
    assert!(e.to_string().contains("multiple of 32"), "{e}");
}

/// Runs one schedule on the case; returns the output rows.
fn run(c: &Case, s: &AttentionSchedule, caps: &DeviceCaps, sg: u32) -> Vec<f32> {
    run_form(c, s, caps, sg, false)
}

/// [`run`], with `args_buffer` the kernel's replayable form: its push constants read from a
/// storage buffer at the binding after the last (`instantiate_with_args`, what a recorded
/// decode step runs).
fn run_form(
    c: &Case,
    s: &AttentionSchedule,
    caps: &DeviceCaps,
    sg: u32,
    args_buffer: bool,
) -> Vec<f32> {
    let k = attention::instantiate(&c.w, s, caps)
        .unwrap_or_else(|e| panic!("{s:?} refused for {:?}: {e}", c.w));
    let mut module = attention::kernel_ir(&c.w, s);
    assert_eq!(module.name, k.meta.name);
    if args_buffer {
        let w = rocky_compiler::Workload::Attention(c.w);
        let sched = rocky_compiler::Schedule::Attention(*s);
        let compiled = rocky_compiler::templates::instantiate_with_args(&w, &sched, caps)
            .unwrap_or_else(|e| panic!("{s:?}: the args form is refused: {e}"));
        module = push_constants_from_buffer(&module);
        assert_eq!(compiled.meta.name, module.name);
        assert_eq!(compiled.meta.push_constant_bytes, 0);
    }
    let qw = c.w.q_width() as usize;
    let mut q = bytes_f32(&c.q);
    let mut kc = bytes_u32(&c.k_cache);
    let mut vc = bytes_u32(&c.v_cache);
    let mut out = bytes_f32(&vec![SENTINEL; c.w.m as usize * qw]);
    let push = AttentionPush {
        m: c.m_run as u32,
        pos0: c.pos0,
    }
    .to_bytes();
    // The args form reads the same words from binding 4 and has no push block.
    let mut args = push.clone();
    let (push, args) = if args_buffer {
        (Vec::new(), Some(&mut args))
    } else {
        (push, None)
    };
    if attention::split_kv::is_split(s) {
        // Three pieces (fewer where the cap is lower), then the combine kernel over them.
        let splits = s.kv_splits.min(3);
        let values = attention::split_kv::scratch_values(&c.w, s) as usize;
        let mut partials = bytes_f32(&vec![f32::NAN; values]);
        let mut grid = attention::dispatch_grid(&c.w, s);
        grid[2] = splits;
        if s.fused_combine {
            // The last piece of each tile merges the pieces: no combine kernel; the counters
            // start at zero and must be left at zero for the next dispatch.
            let tiles = attention::split_kv::counters_for(grid) as usize;
            let mut counters = bytes_u32(&vec![0; tiles]);
            let mut bufs: Vec<BufferData> = [&mut q, &mut kc, &mut vc, &mut partials]
                .into_iter()
                .enumerate()
                .map(|(binding, bytes)| BufferData {
                    binding: binding as u32,
                    bytes,
                })
                .collect();
            bufs.push(BufferData {
                binding: attention::split_kv::BINDING_FUSED_OUT,
                bytes: &mut out,
            });
            bufs.push(BufferData {
                binding: attention::split_kv::BINDING_COUNTERS,
                bytes: &mut counters,
            });
            if let Some(args) = args {
                bufs.push(BufferData {
                    binding: attention::split_kv::BINDING_COUNTERS + 1,
                    bytes: args,
                });
            }
            execute(&module, &mut bufs, &push, grid, sg)
                .unwrap_or_else(|e| panic!("{}: {e}", module.name));
            drop(bufs);
            assert!(
                counters.iter().all(|&b| b == 0),
                "{}: the arrival counters were not reset",
                module.name
            );
            let out = f32s(&out);
            assert!(
                out[c.m_run * qw..].iter().all(|&v| v == SENTINEL),
                "{}: rows past the runtime m were written",
                module.name
            );
            return out[..c.m_run * qw].to_vec();
        }
        run_ir(
            &module,
            [&mut q, &mut kc, &mut vc, &mut partials],
            args,
            &push,
            grid,
            sg,
        );
        let combine = attention::combine::combine_ir(&c.w, s);
        let cpush = attention::combine::CombinePush {
            m: c.m_run as u32,
            splits,
        }
        .to_bytes();
        let mut bufs = [
            BufferData {
                binding: attention::combine::BINDING_PARTIALS,
                bytes: &mut partials,
            },
            BufferData {
                binding: attention::combine::BINDING_OUT,
                bytes: &mut out,
            },
        ];
        let grid = attention::combine::combine_grid(&c.w, c.m_run as u32);
        execute(&combine, &mut bufs, &cpush, grid, sg)
            .unwrap_or_else(|e| panic!("{}: {e}", combine.name));
    } else {
        let grid = attention::dispatch_grid(&c.w, s);
        run_ir(
            &module,
            [&mut q, &mut kc, &mut vc, &mut out],
            args,
            &push,
            grid,
            sg,
        );
    }
    let out = f32s(&out);
    assert!(
        out[c.m_run * qw..].iter().all(|&v| v == SENTINEL),
        "{}: rows past the runtime m were written",
        module.name
    );
    out[..c.m_run * qw].to_vec()
}

/// Runs an attention kernel's IR on q, the caches and its binding 3 (output or partials),
/// with `args` at binding 4 for the args-buffer form.
fn run_ir(
    module: &rocky_compiler::ir::Module,
    bytes: [&mut Vec<u8>; 4],
    args: Option<&mut Vec<u8>>,
    push: &[u8],
    grid: [u32; 3],
    sg: u32,
) {
    let mut bufs: Vec<BufferData> = bytes
        .into_iter()
        .chain(args)
        .enumerate()
        .map(|(binding, bytes)| BufferData {
            binding: binding as u32,
            bytes,
        })
        .collect();
    execute(module, &mut bufs, push, grid, sg).unwrap_or_else(|e| panic!("{}: {e}", module.name));
}

/// Checks one schedule; returns how close it came to the tolerance (worst error / allowed).
fn check(c: &Case, s: &AttentionSchedule, caps: &DeviceCaps, sg: u32) -> f32 {
    let expected = attention::reference_for(&c.w, s, c.m_run, c.pos0, &c.q, &c.k_cache, &c.v_cache);
    let got = run(c, s, caps, sg);
    if let Err(e) = expected.check(&got, c.w.q_width() as usize) {
        panic!("{} (pos0 {}, m {}): {e}", s.name(&c.w), c.pos0, c.m_run);
    }
    expected.worst_ratio(&got)
}

/// Schedules of `w` covering every value of every axis of its space (greedily), plus a
/// seeded random sample and the defaults of both device classes.
fn sample(
    w: &AttentionWorkload,
    caps: &DeviceCaps,
    extra: usize,
    seed: u64,
) -> Vec<AttentionSchedule> {
    let mut space = attention::search_space(w, caps);
    let mut rng = SplitMix64::new(seed);
    for i in (1..space.len()).rev() {
        space.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let axes = |s: &AttentionSchedule| {
        [
            ("tiled", s.is_tiled() as u32),
            ("rows", s.rows),
            ("kv_block", s.kv_block),
            ("lanes", s.threads_per_row),
            ("gqa", s.group_heads as u32),
            ("stage", s.stage_kv as u32),
            ("reduce", (s.lane_reduce == LaneReduce::Shared) as u32),
            ("f16_qk", s.f16_qk as u32),
            ("f16_pv", s.f16_pv as u32),
            ("tile_rows", s.tile_rows),
            ("tile_keys", s.tile_keys),
            ("lane_rows", s.lane_rows),
        ]
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for s in &space {
        if axes(s).iter().any(|a| !seen.contains(a)) {
            seen.extend(axes(s));
            out.push(*s);
        }
    }
    out.extend(
        space
            .iter()
            .filter(|s| !out.contains(s))
            .take(extra)
            .copied()
            .collect::<Vec<_>>(),
    );
    for d in [
        attention::default_schedule(w, caps),
        attention::default_schedule(w, &mali_vk12()),
    ] {
        if d.validate(w, caps).is_ok() && !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

#[test]
fn attention_matches_the_reference_across_the_space() {
    // GQA group 2, head_dim 64; the KV cache of two earlier ubatches (pos0 = 13), then a
    // ubatch of 7 rows (kv = 20) in a workload of 9.
    let w = AttentionWorkload {
        m: 9,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv: 64,
        window: 0,
        kv: Default::default(),
    };
    let c = case(w, 7, 13, 1);
    let mut worst = 0f32;
    let mut checked = 0;
    for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
        for s in sample(&w, &caps, 12, 7) {
            worst = worst.max(check(&c, &s, &caps, sg));
            checked += 1;
        }
    }
    eprintln!("checked {checked} attention kernels; worst error / allowed = {worst:.3}");
    assert!(checked >= 30);
}

#[test]
fn sliding_window_attention_matches_the_reference_across_the_space() {
    // Gemma 3's local layers: keys p - window < j ≤ p. pos0 = 13, 7 rows: the window of 5
    // starts past key 0 for every row and inside the first key blocks of most schedules (all
    // masked there), so the rescaling of a fully masked block is exercised.
    let w = AttentionWorkload {
        m: 9,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv: 64,
        window: 5,
        kv: Default::default(),
    };
    let c = case(w, 7, 13, 21);
    // The window changes the answer (so this test can fail).
    let causal = AttentionWorkload { window: 0, ..w };
    let a = attention::reference(&w, 7, 13, &c.q, &c.k_cache, &c.v_cache);
    let b = attention::reference(&causal, 7, 13, &c.q, &c.k_cache, &c.v_cache);
    let moved = a
        .values
        .iter()
        .zip(&b.values)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(moved > 1e-2, "the window should move the outputs: {moved}");
    let mut worst = 0f32;
    let mut checked = 0;
    for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
        for s in sample(&w, &caps, 12, 8) {
            worst = worst.max(check(&c, &s, &caps, sg));
            checked += 1;
        }
    }
    eprintln!("checked {checked} windowed attention kernels; worst error / allowed = {worst:.3}");
    assert!(checked >= 30);
}

#[test]
fn attention_handles_qwen_groups_and_every_head_dim() {
    let mut worst = 0f32;
    // Qwen2.5 0.5B's group of 7 (14/2 heads), 3B's head_dim 128 (group 8 shrunk to 2 heads
    // per kv head), head_dim 256, and head_dim 16 (where one lane per row fits in registers);
    // prefill from an empty cache and later ubatches.
    let cases = [
        (14u32, 2u32, 64u32, 5usize, 0u32),
        (14, 2, 64, 6, 9),
        (4, 2, 128, 5, 11),
        (2, 1, 256, 3, 17),
        (4, 2, 16, 5, 6),
    ];
    let mut one_lane = 0;
    for (i, &(nh, nkv, hd, m_run, pos0)) in cases.iter().enumerate() {
        let w = AttentionWorkload {
            m: m_run as u32 + 1,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            max_kv: 128,
            window: 0,
            kv: Default::default(),
        };
        let c = case(w, m_run, pos0, 10 + i as u64);
        for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
            for s in sample(&w, &caps, 2, 3 + i as u64) {
                worst = worst.max(check(&c, &s, &caps, sg));
                one_lane += usize::from(s.threads_per_row == 1);
            }
        }
    }
    eprintln!("worst error / allowed = {worst:.3}");
    assert!(one_lane > 0, "the one-lane path was not exercised");
}

#[test]
fn attention_works_with_a_small_subgroup_and_without_subgroups() {
    // lavapipe-like subgroups of 4: shuffles only within 4 lanes; the baseline device has
    // no subgroup operations at all (shared-memory reduction).
    let w = AttentionWorkload {
        m: 7,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 64,
        max_kv: 64,
        window: 0,
        kv: Default::default(),
    };
    let c = case(w, 7, 3, 4);
    let small = DeviceCaps {
        subgroup_size: 4,
        ..desktop_vk12()
    };
    let baseline = DeviceCaps {
        register_budget: 128,
        ..DeviceCaps::baseline()
    };
    for (caps, sg) in [(small, 4), (baseline, 4)] {
        let d = attention::default_schedule(&w, &caps);
        check(&c, &d, &caps, sg);
        let space = attention::search_space(&w, &caps);
        assert!(!space.is_empty());
        assert!(space.iter().all(|s| s.threads_per_row == 1
            || s.lane_reduce == LaneReduce::Shared
            || s.threads_per_row <= 4));
        for s in space.iter().step_by(7) {
            check(&c, s, &caps, sg);
        }
    }
}

#[test]
fn one_ubatch_at_a_time_equals_the_whole_prompt() {
    // Rows computed in ubatches of 3 over a cache filled so far agree with the same rows of
    // a single ubatch over the whole prompt (both against the reference, and with each
    // other to the same tolerance).
    let w = AttentionWorkload {
        m: 9,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 64,
        max_kv: 32,
        window: 0,
        kv: Default::default(),
    };
    let caps = desktop_vk12();
    let s = attention::default_schedule(&w, &caps);
    let whole = case(w, 9, 0, 77);
    let all = run(&whole, &s, &caps, 32);
    let qw = w.q_width() as usize;
    for pos0 in [0usize, 3, 6] {
        let part = Case {
            w,
            m_run: 3,
            pos0: pos0 as u32,
            q: {
                let mut q = whole.q[pos0 * qw..(pos0 + 3) * qw].to_vec();
                q.resize(9 * qw, 0.0);
                q
            },
            k_cache: whole.k_cache.clone(),
            v_cache: whole.v_cache.clone(),
        };
        check(&part, &s, &caps, 32);
        let got = run(&part, &s, &caps, 32);
        for (a, b) in got.iter().zip(&all[pos0 * qw..(pos0 + 3) * qw]) {
            assert!((a - b).abs() <= 1e-5, "ubatch at {pos0}: {a} vs {b}");
        }
    }
}

#[test]
fn kv_write_then_attention_carries_the_cache_across_ubatches() {
    // The two templates agree on the cache layout: K and V rows written by the KV-write
    // kernel ubatch after ubatch, then read by attention, give the attention of the whole
    // prompt over the f16-rounded keys and values (the reference packs them itself).
    for kv in [KvTypes::F16].into_iter().chain(TYPE_PAIRS) {
        kv_write_then_attention(kv);
    }
}

/// The KV-write kernel of each type writes what its reference writes, and attention over
/// it matches the reference over the CPU-encoded cache.
fn kv_write_then_attention(kv: KvTypes) {
    use rocky_compiler::templates::kv_cache::{self, KvWritePush, KvWriteWorkload};
    let w = AttentionWorkload {
        m: 4,
        n_heads: 14,
        n_kv_heads: 2,
        head_dim: 64,
        max_kv: 16,
        window: 0,
        kv,
    };
    let (qw, kw) = (w.q_width() as usize, w.kv_width() as usize);
    let n = 11usize; // ubatches of 4, 4 and 3 rows
    let q_all: Vec<f32> = random_activations(n * qw, 90)
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    let k_all = random_activations(n * kw, 91);
    let v_all = random_activations(n * kw, 92);
    let encode = |ty: KvType, x: &[f32]| -> Vec<u32> {
        x.chunks(kw).flat_map(|row| ty.encode_row(row)).collect()
    };
    let (k_want, v_want) = (encode(kv.k, &k_all), encode(kv.v, &v_all));
    let expected = attention::reference(
        &AttentionWorkload { m: n as u32, ..w },
        n,
        0,
        &q_all,
        &k_want,
        &v_want,
    );
    if kv == KvTypes::F16 {
        assert_eq!(k_want, pack_f16_words(&k_all));
    }
    for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
        let kvw = |ty| KvWriteWorkload {
            m: 4,
            kv_width: w.kv_width(),
            ty,
            rotation: 0,
        };
        let s = attention::default_schedule(&w, &caps);
        let words = |ty: KvType| w.max_kv as usize * ty.row_words(w.kv_width()) as usize;
        let mut k_cache = vec![0u32; words(kv.k)];
        let mut v_cache = vec![0u32; words(kv.v)];
        let mut out_all = Vec::new();
        for pos0 in (0..n).step_by(4) {
            let m_run = 4.min(n - pos0);
            let push = KvWritePush {
                m: m_run as u32,
                pos0: pos0 as u32,
            }
            .to_bytes();
            for (src, cache, ty) in [(&k_all, &mut k_cache, kv.k), (&v_all, &mut v_cache, kv.v)] {
                let kvw = kvw(ty);
                let kv_s = kv_cache::default_schedule(&kvw, &caps);
                let kv_module = kv_cache::kernel_ir(&kvw, &kv_s);
                let mut sb = bytes_f32(&src[pos0 * kw..(pos0 + m_run) * kw]);
                sb.resize(4 * kw * 4, 0);
                let mut cb = bytes_u32(cache);
                execute(
                    &kv_module,
                    &mut [
                        BufferData {
                            binding: 0,
                            bytes: &mut sb,
                        },
                        BufferData {
                            binding: 1,
                            bytes: &mut cb,
                        },
                    ],
                    &push,
                    kv_cache::dispatch_grid(&kvw, &kv_s),
                    sg,
                )
                .unwrap();
                *cache = cb
                    .chunks(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
            }
            let mut q = q_all[pos0 * qw..(pos0 + m_run) * qw].to_vec();
            q.resize(4 * qw, 0.0);
            let c = Case {
                w,
                m_run,
                pos0: pos0 as u32,
                q,
                k_cache: k_cache.clone(),
                v_cache: v_cache.clone(),
            };
            out_all.extend(run(&c, &s, &caps, sg));
        }
        // The interpreter's f32 division is IEEE's: q8_0 quants equal the reference's.
        assert_eq!(k_cache[..k_want.len()], k_want[..], "K written as {}", kv.k);
        assert_eq!(v_cache[..v_want.len()], v_want[..], "V written as {}", kv.v);
        if let Err(e) = expected.check(&out_all, qw) {
            panic!("{}: {e}", s.name(&w));
        }
    }
}

#[test]
fn many_key_blocks_with_a_moving_maximum() {
    // 150 cached positions and sharper scores (q ×4, keys growing along the cache), so the
    // running maximum moves block after block and every rescaling step matters.
    let w = AttentionWorkload {
        m: 3,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 64,
        max_kv: 256,
        window: 0,
        kv: Default::default(),
    };
    let mut c = case(w, 3, 150, 55);
    let kw = w.kv_width() as usize;
    let mut k = random_activations(158 * kw, 56);
    for (p, row) in k.chunks_mut(kw).enumerate() {
        row.iter_mut().for_each(|x| *x *= 1.0 + p as f32 / 60.0);
    }
    c.k_cache = pack_f16_words(&k);
    c.q.iter_mut().for_each(|x| *x *= 2.0);
    for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
        for s in sample(&w, &caps, 0, 9).iter().step_by(2) {
            check(&c, s, &caps, sg);
        }
    }
}

#[test]
fn tiled_attention_matches_the_reference_over_its_space() {
    // Qwen2.5-3B's group of 8 at head_dim 128 (shrunk to one kv head) and the 0.5B's group
    // of 7 at head_dim 64: a later ubatch of 19 rows over 37 cached keys, so blocks end
    // mid-row, rows end mid-tile and the last row block is partial.
    let mut checked = 0;
    let mut worst = 0f32;
    for (i, &(nh, nkv, hd)) in [(8u32, 1u32, 128u32), (7, 1, 64)].iter().enumerate() {
        let w = AttentionWorkload {
            m: 20,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            max_kv: 64,
            window: 0,
            kv: Default::default(),
        };
        let c = case(w, 19, 37, 40 + i as u64);
        let caps = desktop_vk12();
        let tiled: Vec<AttentionSchedule> = attention::search_space(&w, &caps)
            .into_iter()
            .filter(|s| s.is_tiled())
            .collect();
        assert!(tiled.len() >= 20, "{} tiled schedules", tiled.len());
        // Every tile shape and math at least once.
        let picks = random_and_covering(&tiled, 12, 5 + i as u64, |p| {
            [
                p.tile_rows,
                p.tile_keys,
                p.f16_qk as u32,
                p.f16_pv as u32,
                0,
            ]
        });
        for s in &picks {
            worst = worst.max(check(&c, s, &caps, 32));
            checked += 1;
        }
    }
    eprintln!("checked {checked} tiled attention kernels; worst error / allowed = {worst:.3}");
}

#[test]
fn key_split_attention_matches_the_reference_over_its_space() {
    // The 0.5B's group of 7 at head_dim 64, the 3B's 8 at 128 (one kv head each) and a
    // sliding-window head_dim 256 (Gemma 3): a later ubatch of 19 rows over 37 cached keys,
    // so key blocks end mid-row, lane groups hold rows past m and the last row block is
    // partial. Mali's device class, where these schedules are offered.
    let mut checked = 0;
    let mut worst = 0f32;
    for (i, &(nh, nkv, hd, window)) in [(7u32, 1u32, 64u32, 0u32), (8, 1, 128, 0), (4, 1, 256, 13)]
        .iter()
        .enumerate()
    {
        let w = AttentionWorkload {
            m: 20,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            max_kv: 64,
            window,
            kv: Default::default(),
        };
        let c = case(w, 19, 37, 60 + i as u64);
        let caps = mali_vk12();
        let split: Vec<AttentionSchedule> = attention::search_space(&w, &caps)
            .into_iter()
            .filter(|s| s.is_key_split())
            .collect();
        assert!(split.len() >= 5, "{} key-split schedules", split.len());
        // Every lane count, keys per lane, rows per group and math at least once.
        let picks = random_and_covering(&split, 8, 9 + i as u64, |p| {
            [
                p.threads_per_row,
                p.kv_block / p.threads_per_row,
                p.lane_rows,
                p.f16_qk as u32,
                p.f16_pv as u32,
            ]
        });
        for s in &picks {
            worst = worst.max(check(&c, s, &caps, 16));
            checked += 1;
        }
    }
    eprintln!("checked {checked} key-split attention kernels; worst error / allowed = {worst:.3}");
}

/// `n` seeded random schedules of `space`, plus the first one of every value of `key` that
/// they miss.
fn random_and_covering(
    space: &[AttentionSchedule],
    n: usize,
    seed: u64,
    key: impl Fn(&AttentionSchedule) -> [u32; 5],
) -> Vec<AttentionSchedule> {
    let mut rng = SplitMix64::new(seed);
    let mut picks: Vec<AttentionSchedule> = (0..n)
        .map(|_| space[(rng.next_u64() % space.len() as u64) as usize])
        .collect();
    for s in space {
        if !picks.iter().any(|p| key(p) == key(s)) {
            picks.push(*s);
        }
    }
    picks
}

/// The replayable form of decode attention (`instantiate_with_args`: m and pos0 read from a
/// storage buffer, so one recorded decode step serves every position) computes exactly what
/// the push-constant form does, and both match the reference: one row at positions across
/// key-block boundaries, split and unsplit schedules, GQA groups of 2 and 7, head_dim 64 and
/// 128, on both device classes.
#[test]
fn decode_attention_reading_its_position_from_a_buffer_matches_the_push_form() {
    let mut checked = 0;
    for (n_heads, n_kv_heads, head_dim) in [(4u32, 2u32, 64u32), (14, 2, 128)] {
        let w = AttentionWorkload {
            m: 1,
            n_heads,
            n_kv_heads,
            head_dim,
            max_kv: 256,
            window: 0,
            kv: Default::default(),
        };
        for pos0 in [0u32, 31, 100] {
            let c = case(w, 1, pos0, 11 + u64::from(pos0));
            for (caps, sg) in [(desktop_vk12(), 32), (mali_vk12(), 16)] {
                let default = attention::default_schedule(&w, &caps);
                let separate = AttentionSchedule {
                    fused_combine: false,
                    ..default
                };
                let unsplit = AttentionSchedule {
                    kv_splits: 0,
                    ..separate
                };
                for s in [default, separate, unsplit] {
                    let expected = attention::reference_for(
                        &c.w, &s, c.m_run, c.pos0, &c.q, &c.k_cache, &c.v_cache,
                    );
                    let pushed = run_form(&c, &s, &caps, sg, false);
                    let from_buffer = run_form(&c, &s, &caps, sg, true);
                    if let Err(e) = expected.check(&from_buffer, c.w.q_width() as usize) {
                        panic!("{} args form (pos0 {pos0}): {e}", s.name(&c.w));
                    }
                    assert_eq!(
                        pushed.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        from_buffer.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{} (pos0 {pos0}): the two forms differ",
                        s.name(&c.w)
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 36);
}

#[test]
fn split_pieces_run_only_the_key_blocks_they_own() {
    // `rocky predict` charges a split decode step ceil(n / kv_block) key-block trips in all,
    // shared among the pieces the runtime dispatches, not a whole block per piece: a piece
    // covers whole blocks (`split_kv::key_range`), only the last non-empty piece has a partial
    // block, and pieces past the keys run none. Checked here on the kernel itself (the IR
    // interpreter): with K = 0 every visible key scores 0 and weighs exp(0 - 0) = 1, so a
    // piece's stored sum is the number of keys its block loop went over.
    let w = AttentionWorkload {
        m: 1,
        n_heads: 16,
        n_kv_heads: 2,
        head_dim: 128,
        max_kv: 256,
        window: 0,
        kv: KvTypes::F16,
    };
    let caps = mali_vk12();
    let s = attention::default_schedule(&w, &caps);
    // The Qwen2.5-3B decode attention's Mali default (`rocky predict`'s 3B decode table).
    assert_eq!(
        s.name(&w),
        "attention_h16_2_d128_r1_kv64_l16_gqa_smem_ks1_split32"
    );
    let block = s.kv_block;
    let ml = 4 * attention::split_kv::ml_offset_vec4(&w, &s) as usize;
    let mut checked = 0;
    for n in [17u32, 150, 200] {
        let mut c = case(w, 1, n - 1, 11);
        c.k_cache.iter_mut().for_each(|x| *x = 0);
        for pieces in [3, s.kv_splits] {
            let module = attention::kernel_ir(&w, &s);
            let mut q = bytes_f32(&c.q);
            let mut kc = bytes_u32(&c.k_cache);
            let mut vc = bytes_u32(&c.v_cache);
            let values = attention::split_kv::scratch_values(&w, &s) as usize;
            let mut partials = bytes_f32(&vec![f32::NAN; values]);
            let push = AttentionPush { m: 1, pos0: n - 1 }.to_bytes();
            let mut grid = attention::dispatch_grid(&w, &s);
            grid[2] = pieces;
            run_ir(
                &module,
                [&mut q, &mut kc, &mut vc, &mut partials],
                None,
                &push,
                grid,
                16,
            );
            let partials = f32s(&partials);
            for head in 0..w.n_heads as usize {
                // (max, sum) of piece z, row 0: vec4 ml + z·m·n_heads + head.
                let keys: Vec<u32> = (0..pieces as usize)
                    .map(|z| {
                        let sum = partials[ml + 4 * (z * w.n_heads as usize + head) + 1];
                        assert_eq!(sum.fract(), 0.0, "piece {z}: sum {sum}");
                        sum as u32
                    })
                    .collect();
                assert_eq!(
                    keys.iter().sum::<u32>(),
                    n,
                    "n {n} pieces {pieces}: {keys:?}"
                );
                let last = keys.iter().rposition(|&k| k > 0).unwrap();
                assert!(
                    keys[..last].iter().all(|&k| k > 0 && k % block == 0),
                    "n {n} pieces {pieces}: {keys:?}"
                );
                let trips: u32 = keys.iter().map(|&k| k.div_ceil(block)).sum();
                assert_eq!(trips, n.div_ceil(block), "n {n} pieces {pieces}: {keys:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6);
}
