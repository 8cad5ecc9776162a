//! The GPU path with each KV cache type (issue 37) on the Vulkan device present (lavapipe in
//! CI), on the synthetic Qwen2 tiny model of tests/fixtures/llama-kv-types (all-f32 weights,
//! f32 GEMM math): a prefill in ubatches of 64 (attention over earlier ubatches' keys), then
//! the last token as a decode step (the split-KV kernels and their combine), then the same step
//! again after restoring a KV snapshot. Per type pair:
//! - the GPU equals the CPU reference with the same types (`ReferenceOptions::with_kv`);
//! - f32 K and V: within 2e-4 of llama.cpp's log-probabilities with `-fa off -ctk f32 -ctv f32`;
//! - q8_0: as far from llama.cpp's f32 answer as llama.cpp's own q8_0 cache without its
//!   Hadamard rotation (the arithmetic rocky's cache does with the rotation off, the default),
//!   to within the 2e-4 (see models/tests/reference_kv_types.rs, which also checks the
//!   reference's q8_0 blocks against llama.cpp's rounding for rounding).
//!
//! With llama.cpp's Walsh-Hadamard rotation on (`ExecutorOptions::kv_rotation`), per type pair
//! with a q8_0 cache: the GPU equals the CPU reference with `kv_rotation` (same next token,
//! logits within the q8_0 tolerance), and is as close to llama.cpp's own (rotated) q8_0 run as
//! that reference is (the reference, without llama.cpp's CPU-only rounding of Q to q8_0, is
//! what the GPU computes); over f16 and f32 caches the option changes nothing, bit for bit.

mod common;

use common::f32_math::F32Math;
use rocky_compiler::{KvType, KvTypes};
use rocky_models::arch::{self, Model};
use rocky_models::fuse::FuseOptions;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{forward, ReferenceOptions};
use rocky_models::synth::{write_model, Quant, Shape, SynthConfig, Vocabulary};
use rocky_runtime::executor::{Executor, ExecutorOptions, GpuWeights};
use rocky_runtime::{CommandBudget, Context, DeviceSelector};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// llama.cpp's bound of issue 37, in log-probability.
const F32_MAX_DELTA: f64 = 2e-4;
/// How much farther than llama.cpp's q8_0 cache without rotation rocky's may be from the f32
/// answer (models/tests/reference_kv_types.rs).
const Q8_0_DISTANCE_SLACK: f64 = 2e-4;

/// Per run (f32, f16, q8_0, q8_0-norot): (prompt ids, llama.cpp's top log-probabilities).
type Runs = HashMap<String, Vec<(Vec<u32>, Vec<(usize, f64)>)>>;

fn fixture() -> Runs {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama-kv-types/qwen2-tiny.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(v["model"], "rocky synth --shape tiny --quant f32 --seed 1");
    let mut out = Runs::new();
    for run in v["runs"].as_array().unwrap() {
        let prompts = run["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let ids = p["token_ids"].as_array().unwrap();
                let top = p["top_logprobs"].as_array().unwrap();
                (
                    ids.iter().map(|x| x.as_u64().unwrap() as u32).collect(),
                    top.iter()
                        .map(|t| (t[0].as_u64().unwrap() as usize, t[1].as_f64().unwrap()))
                        .collect(),
                )
            })
            .collect();
        out.insert(run["run"].as_str().unwrap().to_string(), prompts);
    }
    out
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    logits.iter().map(|&l| l as f64 - lse).collect()
}

fn max_delta(top: &[(usize, f64)], ours: &[f64]) -> f64 {
    top.iter()
        .map(|&(id, lp)| (lp - ours[id]).abs())
        .fold(0.0, f64::max)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The fixture's model, written to a file of `test`'s own (the tests run in parallel and each
/// removes its file).
fn tiny_model(test: &str) -> PathBuf {
    let vocab_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/vocab/ggml-vocab-qwen2.gguf");
    let vocab = Vocabulary::from_gguf(&GgufFile::open(vocab_path).unwrap()).unwrap();
    let path = std::env::temp_dir().join(format!(
        "rocky-gpu-kv-tiny-{test}-{}.gguf",
        std::process::id()
    ));
    let config = SynthConfig {
        shape: Shape::Tiny,
        quant: Quant::F32,
        seed: 1,
    };
    write_model(&path, &config, &vocab, |_| {}).unwrap();
    path
}

/// An executor of `n_ctx` positions over caches of `kv`, prefilling in ubatches of 64.
fn executor<'a>(
    ctx: &'a Context,
    file: &GgufFile,
    model: &'a Model,
    n_ctx: usize,
    kv: KvTypes,
    kv_rotation: bool,
) -> Executor<'a> {
    let weights = GpuWeights::upload(ctx, file, model).unwrap();
    let options = ExecutorOptions {
        ubatch: 64,
        budget: CommandBudget::for_device(ctx.info()),
        timeout: Duration::from_secs(600),
        profile: false,
        fuse: FuseOptions::DEFAULT,
        overlap: false,
        kv,
        kv_rotation,
    };
    Executor::new(ctx, model, weights, options, n_ctx).unwrap()
}

/// The last position's logits: a prefill of all but the last token in ubatches of 64, the last
/// token as a decode step; then the cache restored from a snapshot taken before that step and
/// the step again (it must give the same logits).
fn gpu_logits(
    ctx: &Context,
    file: &GgufFile,
    model: &Model,
    ids: &[u32],
    kv: KvTypes,
    kv_rotation: bool,
) -> Vec<f32> {
    let mut ex = executor(ctx, file, model, ids.len(), kv, kv_rotation);
    let (last, head) = ids.split_last().unwrap();
    ex.prefill(head, &F32Math).unwrap();
    let snapshot = ex.snapshot_kv().unwrap().expect("a prefix");
    assert_eq!(
        snapshot.bytes(),
        head.len() as u64 * model.config.kv_bytes_per_position(kv),
        "the snapshot holds the {kv} cache's bytes"
    );
    let first = ex.decode(*last, &F32Math).unwrap();
    ex.restore_kv(&snapshot, head.len()).unwrap();
    let again = ex.decode(*last, &F32Math).unwrap();
    assert_eq!(first, again, "{kv}: the step after a restore differs");
    first
}

#[test]
fn gpu_with_each_cache_type_matches_the_reference_and_llama_cpp() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let ctx = Context::new(&DeviceSelector::Best).expect("a Vulkan device (lavapipe in CI)");
    let path = tiny_model("types");
    let file = GgufFile::open(&path).unwrap();
    let model = arch::load(&file).unwrap();
    let runs = fixture();
    let pairs = [
        KvTypes::F32,
        KvTypes::F16,
        KvTypes::Q8_0,
        KvTypes::new(KvType::Q8_0, KvType::F32),
    ];
    // The 9- and 120-token prompts: one ubatch, and two with a partial one.
    for (i, (ids, llama_f32)) in runs["f32"].iter().enumerate().take(2) {
        // llama.cpp's q8_0 cache without its rotation: the same blocks as rocky's.
        let llama_q8: HashMap<usize, f64> = runs["q8_0-norot"][i].1.iter().copied().collect();
        let shared: Vec<(usize, f64)> = llama_f32
            .iter()
            .filter(|(id, _)| llama_q8.contains_key(id))
            .copied()
            .collect();
        let llama_q8_dist = shared
            .iter()
            .map(|&(id, lp)| (lp - llama_q8[&id]).abs())
            .fold(0.0, f64::max);
        for kv in pairs {
            let gpu = gpu_logits(&ctx, &file, &model, ids, kv, false);
            let cpu = forward(&file, &model, ids, ReferenceOptions::with_kv(kv)).unwrap();
            let d_ref = max_abs_diff(&gpu, &cpu);
            let ours = log_softmax(&gpu);
            let d_f32 = max_delta(&shared, &ours);
            println!(
                "n={} {kv}: GPU vs CPU reference max|Δlogit| {d_ref:.2e}; from llama.cpp's f32 \
                 answer {d_f32:.2e} (llama.cpp's q8_0 cache, unrotated: {llama_q8_dist:.2e})",
                ids.len()
            );
            match kv {
                KvTypes::F32 => {
                    assert!(d_ref <= 1e-4, "{kv}: GPU vs CPU {d_ref}");
                    let d = max_delta(llama_f32, &ours);
                    assert!(d <= F32_MAX_DELTA, "{kv}: {d} from llama.cpp's f32 cache");
                }
                KvTypes::F16 => assert!(d_ref <= 1e-4, "{kv}: GPU vs CPU {d_ref}"),
                _ => {
                    // A K row within a rounding of the CPU's may land on the other side of a
                    // q8_0 rounding boundary (d/127 apart): looser than f32's (measured 1e-6
                    // to 4e-6 on lavapipe: no quant moved).
                    assert!(d_ref <= 5e-4, "{kv}: GPU vs CPU {d_ref}");
                    if kv == KvTypes::Q8_0 {
                        assert!(
                            d_f32 <= llama_q8_dist + Q8_0_DISTANCE_SLACK,
                            "{kv}: {d_f32} from llama.cpp's f32 answer, llama.cpp's q8_0 {llama_q8_dist}"
                        );
                    }
                }
            }
        }
    }
    drop(file);
    std::fs::remove_file(&path).ok();
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best })
}

/// llama.cpp's Hadamard rotation around a q8_0 cache on the GPU (`kv_rotation`): rotated K and
/// V in the KV write, Q rotated before attention and the output back, against the CPU
/// reference that rotates the same way and against llama.cpp's own q8_0 run (rotated, its
/// default). The tiny model's head_dim is 64: K and V both rotate by 64.
#[test]
fn gpu_kv_rotation_matches_the_reference_and_llama_cpp() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let ctx = Context::new(&DeviceSelector::Best).expect("a Vulkan device (lavapipe in CI)");
    let path = tiny_model("rotation");
    let file = GgufFile::open(&path).unwrap();
    let model = arch::load(&file).unwrap();
    let runs = fixture();
    let rotated = [
        KvTypes::Q8_0,
        KvTypes::new(KvType::Q8_0, KvType::F32),
        KvTypes::new(KvType::F16, KvType::Q8_0),
    ];
    for (i, (ids, llama_f32)) in runs["f32"].iter().enumerate().take(2) {
        // llama.cpp's q8_0 cache as it runs by default: rotated.
        let llama_q8 = &runs["q8_0"][i].1;
        // For scale: how far llama.cpp's q8_0 run is from its f32 answer (over the f32 run's
        // top tokens the q8_0 run also lists), as the unrotated test above measures it.
        let llama_q8_map: HashMap<usize, f64> = llama_q8.iter().copied().collect();
        let shared: Vec<(usize, f64)> = llama_f32
            .iter()
            .filter(|(id, _)| llama_q8_map.contains_key(id))
            .copied()
            .collect();
        let llama_q8_dist = shared
            .iter()
            .map(|&(id, lp)| (lp - llama_q8_map[&id]).abs())
            .fold(0.0, f64::max);
        for kv in rotated {
            let gpu = gpu_logits(&ctx, &file, &model, ids, kv, true);
            let options = ReferenceOptions {
                kv_rotation: true,
                ..ReferenceOptions::with_kv(kv)
            };
            let cpu = forward(&file, &model, ids, options).unwrap();
            let d_ref = max_abs_diff(&gpu, &cpu);
            let unrotated = forward(&file, &model, ids, ReferenceOptions::with_kv(kv)).unwrap();
            let rotation_moves = max_abs_diff(&cpu, &unrotated);
            let d_llama = max_delta(llama_q8, &log_softmax(&gpu));
            let ref_llama = max_delta(llama_q8, &log_softmax(&cpu));
            let unrotated_llama = max_delta(llama_q8, &log_softmax(&unrotated));
            println!(
                "n={} {kv} rotated: GPU vs CPU reference max|Δlogit| {d_ref:.2e} (the rotation \
                 moves the reference by {rotation_moves:.2e}); from llama.cpp's q8_0 run: GPU \
                 {d_llama:.2e}, reference {ref_llama:.2e} (unrotated reference \
                 {unrotated_llama:.2e})",
                ids.len()
            );
            assert_eq!(argmax(&gpu), argmax(&cpu), "{kv}: another next token");
            // As the unrotated q8_0 paths above: a value within rounding of the CPU's may
            // cross a q8_0 rounding boundary.
            assert!(d_ref <= 5e-4, "{kv} rotated: GPU vs CPU {d_ref}");
            // The check must see the rotation: the GPU is nearer the rotated reference than
            // the rotation moves it.
            assert!(
                d_ref < rotation_moves,
                "{kv}: GPU vs rotated reference {d_ref}, the rotation moves {rotation_moves}"
            );
            if kv == KvTypes::Q8_0 {
                println!(
                    "n={} {kv} rotated: from llama.cpp's f32 answer GPU {:.2e}, llama.cpp's \
                     q8_0 run {llama_q8_dist:.2e}",
                    ids.len(),
                    max_delta(&shared, &log_softmax(&gpu))
                );
                // What is left is llama.cpp's CPU-only rounding of Q to q8_0, which the
                // reference leaves out as the GPU does (with it the reference is within 3e-5:
                // models/tests/reference_kv_types.rs).
                assert!(
                    d_llama <= ref_llama + 1e-4,
                    "{kv} rotated: {d_llama} from llama.cpp's q8_0 run, the reference {ref_llama}"
                );
                assert!(
                    d_llama < unrotated_llama,
                    "{kv}: rotated {d_llama} is no nearer llama.cpp's q8_0 run than unrotated \
                     {unrotated_llama}"
                );
            }
        }
    }
    // Over unquantized caches the option is a no-op (as llama.cpp's, and the reference's).
    let ids = &runs["f32"][0].0;
    for kv in [KvTypes::F16, KvTypes::F32] {
        assert_eq!(
            gpu_logits(&ctx, &file, &model, ids, kv, true),
            gpu_logits(&ctx, &file, &model, ids, kv, false),
            "{kv}: the rotation option changed an unquantized cache's path"
        );
    }
    drop(file);
    std::fs::remove_file(&path).ok();
}

/// A rotated q8_0 cache holds other values than an unrotated one of the same bytes: its
/// snapshot restores into an executor with the rotation, and is refused by one without.
#[test]
fn a_rotated_snapshot_restores_only_with_the_rotation() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    let ctx = Context::new(&DeviceSelector::Best).expect("a Vulkan device (lavapipe in CI)");
    let path = tiny_model("snapshot");
    let file = GgufFile::open(&path).unwrap();
    let model = arch::load(&file).unwrap();
    let ids: Vec<u32> = (0..9).map(|i| 100 + i * 7919 % 30000).collect();
    let mut rotated = executor(&ctx, &file, &model, 16, KvTypes::Q8_0, true);
    rotated.prefill(&ids, &F32Math).unwrap();
    let snapshot = rotated.snapshot_kv().unwrap().expect("a prefix");
    let mut again = executor(&ctx, &file, &model, 16, KvTypes::Q8_0, true);
    again.restore_kv(&snapshot, ids.len()).unwrap();
    let mut plain = executor(&ctx, &file, &model, 16, KvTypes::Q8_0, false);
    let e = plain.restore_kv(&snapshot, ids.len()).unwrap_err();
    assert!(e.to_string().contains("Hadamard"), "{e}");
    drop(file);
    std::fs::remove_file(&path).ok();
}
