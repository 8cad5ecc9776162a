//! The greedy pick kernel run by the IR interpreter against its CPU reference (the first
//! largest logit, never a NaN): random logits at sizes that do and do not fill the threads'
//! last pass, ties across threads, NaNs, all -inf, all NaN; the token, position and pick list
//! it writes, the list wrapping at its capacity; and its SPIR-V through spirv-val.

mod common;

use common::{desktop_vk12, mali_vk12, require_spirv_val, spirv_val};
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::templates::greedy;

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs the kernel once; returns (ids, step args, picks) as words.
fn run(
    threads: u32,
    logits: &[f32],
    ids: [u32; 2],
    args: [u32; 4],
    picks: &[u32],
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let module = greedy::kernel_ir(threads);
    let capacity = picks.len() as u32 - 1;
    let mut l = bytes_f32(logits);
    if l.is_empty() {
        l = vec![0; 4];
    }
    let (mut i, mut a, mut p) = (bytes_u32(&ids), bytes_u32(&args), bytes_u32(picks));
    let mut bufs = vec![
        BufferData {
            binding: greedy::BINDING_LOGITS,
            bytes: &mut l,
        },
        BufferData {
            binding: greedy::BINDING_IDS,
            bytes: &mut i,
        },
        BufferData {
            binding: greedy::BINDING_STEP_ARGS,
            bytes: &mut a,
        },
        BufferData {
            binding: greedy::BINDING_PICKS,
            bytes: &mut p,
        },
    ];
    let push = greedy::push_constants(logits.len() as u32, capacity);
    execute(&module, &mut bufs, &push, [1, 1, 1], 16).unwrap();
    (words(&i), words(&a), words(&p))
}

/// A seeded stream of logits in [-8, 8).
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 16.0 - 8.0
        })
        .collect()
}

#[test]
fn picks_the_first_largest_logit_as_the_reference_does() {
    let mut cases: Vec<(String, Vec<f32>)> = Vec::new();
    for (n, seed) in [(1usize, 1u64), (31, 2), (64, 3), (1000, 4), (4099, 5)] {
        cases.push((format!("random n {n}"), logits(n, seed)));
    }
    // The largest value twice, in different threads' slices and passes: the first wins.
    let mut tie = logits(1000, 6);
    tie[700] = 9.0;
    tie[77] = 9.0;
    tie[900] = 9.0;
    cases.push(("tie across threads".into(), tie));
    let mut nan = logits(500, 7);
    nan[3] = f32::NAN;
    nan[100] = 8.5;
    nan[101] = f32::NAN;
    cases.push(("NaNs never win".into(), nan));
    cases.push(("all -inf".into(), vec![f32::NEG_INFINITY; 300]));
    let mut nan_inf = vec![f32::NAN; 300];
    nan_inf[170] = f32::NEG_INFINITY;
    nan_inf[250] = f32::NEG_INFINITY;
    cases.push(("NaNs and -inf".into(), nan_inf));
    cases.push(("all NaN".into(), vec![f32::NAN; 300]));
    let mut last = vec![0.0; 513];
    last[512] = 1.0;
    cases.push(("the largest in the last partial pass".into(), last));

    for threads in [16u32, 64, 256] {
        for (what, l) in &cases {
            let want = greedy::reference(l);
            let (ids, args, picks) = run(threads, l, [7, 7], [1, 41, 9, 9], &[0, 5, 5, 5]);
            assert_eq!(ids[0], want, "{what}, {threads} threads: token");
            assert_eq!(ids[1], 7, "{what}: wrote past the token");
            assert_eq!(args, vec![1, 42, 9, 9], "{what}: position advanced by one");
            assert_eq!(picks, vec![1, want, 5, 5], "{what}: pick listed");
        }
    }
}

#[test]
fn the_pick_list_counts_on_and_wraps_at_its_capacity() {
    let l = logits(100, 8);
    let want = greedy::reference(&l);
    // Three picks listed; the fourth goes to slot 1 + 3 % 3 = 1.
    let (_, _, picks) = run(64, &l, [0, 0], [1, 0, 0, 0], &[3, 10, 11, 12]);
    assert_eq!(picks, vec![4, want, 11, 12]);
    let (_, _, picks) = run(64, &l, [0, 0], [1, 0, 0, 0], &[5, 10, 11, 12]);
    assert_eq!(picks, vec![6, 10, 11, want]);
}

#[test]
fn greedy_pick_passes_spirv_val() {
    require_spirv_val();
    for caps in [desktop_vk12(), mali_vk12()] {
        let k = greedy::instantiate(&caps).unwrap();
        spirv_val(&k.spirv, "vulkan1.2").unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
        // Its counter-ordered form too (a chained decode step ends with it).
        let source = k
            .source
            .as_ref()
            .expect("a template kernel keeps its source");
        let chained = source
            .chained(rocky_compiler::ir::chain::ModelData::Cached)
            .unwrap();
        spirv_val(&chained.spirv, "vulkan1.2")
            .unwrap_or_else(|e| panic!("{} chained: {e}", k.meta.name));
    }
}
