//! The CPU reference forward pass against llama.cpp's logits in ../shared/golden.
//!
//! The reference runs with an f16 KV cache, as llama.cpp did when it made the golden files
//! (with an f32 cache the largest differences grow from ~2e-5 to ~4e-4 on long prompts).
//!
//! - qwen2-tiny-f32: all-f32 weights, llama.cpp computes in f32 → largest |Δlogit| < 1e-3 and
//!   the same top-1 on every prompt.
//! - qwen2-tiny-{q8_0,q4_k_m}-deq: llama.cpp on dequantized copies → the exact target for an
//!   f32 implementation on the quantized files: largest |Δ| < 1e-3.
//! - qwen2-tiny-{q8_0,q4_k_m}: llama.cpp also quantizes activations → correlation ≥ 0.999 and
//!   the same top-1 wherever llama.cpp's top-1/top-2 gap exceeds twice the largest |Δ|.

mod common;

use rocky_models::arch;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{compare_logits, forward, ReferenceOptions};
use std::path::Path;

struct Golden {
    name: String,
    ids: Vec<u32>,
    logits: Vec<f32>,
}

fn goldens(folder: &str) -> Vec<Golden> {
    let dir = common::shared().join("golden").join(folder);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap().to_string();
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap())
                    .unwrap();
            let ids = meta["token_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let logits = common::read_f32(&dir.join(meta["logits_file"].as_str().unwrap()));
            Golden { name, ids, logits }
        })
        .collect()
}

/// Runs every golden prompt of `folder` on `model_path`; returns per prompt
/// (name, max |Δ|, correlation, same top-1, llama.cpp's top-1/top-2 gap).
fn run(model_path: &Path, folder: &str) -> Vec<(String, f32, f64, bool, f32)> {
    run_with(model_path, folder, ReferenceOptions::llama_cpp())
}

fn run_with(
    model_path: &Path,
    folder: &str,
    options: ReferenceOptions,
) -> Vec<(String, f32, f64, bool, f32)> {
    let file = GgufFile::open(model_path).unwrap();
    let model = arch::load(&file).unwrap();
    goldens(folder)
        .into_iter()
        .map(|g| {
            let ours = forward(&file, &model, &g.ids, options).unwrap();
            let c = compare_logits(&g.logits, &ours);
            println!(
                "{folder:<24} {:<16} n={:<4} max|Δ|={:.2e} corr={:.7} top1 {} {} gap={:.4}",
                g.name,
                g.ids.len(),
                c.max_abs_diff,
                c.correlation,
                c.top1_a,
                if c.top1_a == c.top1_b { "==" } else { "!=" },
                c.gap_a
            );
            (
                g.name,
                c.max_abs_diff,
                c.correlation,
                c.top1_a == c.top1_b,
                c.gap_a,
            )
        })
        .collect()
}

#[test]
fn tiny_f32_matches_llama_cpp_within_1e3() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-*)").is_none() {
        return;
    }
    let rows = run(&common::asset("qwen2-tiny-f32.gguf"), "qwen2-tiny-f32");
    let worst = rows.iter().map(|r| r.1).fold(0f32, f32::max);
    println!(
        "qwen2-tiny-f32: largest |Δlogit| over {} prompts = {worst:.3e}",
        rows.len()
    );
    for (name, d, _, same, _) in &rows {
        assert!(*d < 1e-3, "{name}: |Δ| = {d}");
        assert!(*same, "{name}: top-1 differs");
    }
}

fn quantized(model: &str, folder: &str) {
    let path = common::shared().join("models").join(model);
    // Against llama.cpp on the dequantized weights: exact arithmetic target.
    let deq = run(&path, &format!("{folder}-deq"));
    let worst_deq = deq.iter().map(|r| r.1).fold(0f32, f32::max);
    println!("{folder}-deq: largest |Δlogit| = {worst_deq:.3e}");
    for (name, d, _, same, _) in &deq {
        assert!(*d < 1e-3, "{folder}-deq {name}: |Δ| = {d}");
        assert!(*same, "{folder}-deq {name}: top-1 differs");
    }
    // Against llama.cpp with its quantized activations.
    let rows = run(&path, folder);
    let worst = rows.iter().map(|r| r.1).fold(0f32, f32::max);
    let min_corr = rows.iter().map(|r| r.2).fold(1f64, f64::min);
    println!("{folder}: largest |Δlogit| = {worst:.3e}, lowest correlation = {min_corr:.6}");
    for (name, _, corr, same, gap) in &rows {
        assert!(*corr >= 0.999, "{folder} {name}: correlation {corr}");
        if *gap > 2.0 * worst {
            assert!(
                *same,
                "{folder} {name}: top-1 differs with a clear gap {gap}"
            );
        }
    }
}

#[test]
fn tiny_q8_0_matches_llama_cpp() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-*)").is_none() {
        return;
    }
    quantized("qwen2-tiny-q8_0.gguf", "qwen2-tiny-q8_0");
}

#[test]
fn tiny_q4_k_m_matches_llama_cpp() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-*)").is_none() {
        return;
    }
    quantized("qwen2-tiny-q4_k_m.gguf", "qwen2-tiny-q4_k_m");
}

/// Issue 15 item 5: the tiny f32 goldens were made with llama.cpp's defaults, flash attention
/// on (`-fa auto` picks it on the CPU) over an f16 cache. For fewer than 64 query rows its
/// kernel rounds q to f16 and keeps V's weighted sum in f16 (from 64 rows on a tiled kernel
/// accumulates in f32). The reference imitating that (`ReferenceOptions::llama_cpp_flash`)
/// meets the short prompts' goldens 7-10x closer (measured: 5 tokens 7.7e-4 -> 7.8e-5, 7 tokens
/// 8.1e-4 -> 1.2e-4; the long ones unchanged at <= 6.3e-5), so the largest differences of
/// `tiny_f32_matches_llama_cpp_within_1e3` are llama.cpp's rounding, not rocky's.
#[test]
fn tiny_f32_goldens_carry_llama_cpps_f16_flash_attention_rounding() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-*)").is_none() {
        return;
    }
    let path = common::asset("qwen2-tiny-f32.gguf");
    let plain = run(&path, "qwen2-tiny-f32");
    let flash = run_with(&path, "qwen2-tiny-f32", ReferenceOptions::llama_cpp_flash());
    let worst =
        |rows: &[(String, f32, f64, bool, f32)]| rows.iter().map(|r| r.1).fold(0f32, f32::max);
    println!(
        "largest |Δlogit|: f32 attention {:.3e}, llama.cpp's f16 flash attention {:.3e}",
        worst(&plain),
        worst(&flash)
    );
    for (name, d, _, same, _) in &flash {
        assert!(
            *d < 2e-4,
            "{name}: |Δ| = {d} with llama.cpp's flash-attention rounding"
        );
        assert!(*same, "{name}: top-1 differs");
    }
    assert!(worst(&flash) * 4.0 < worst(&plain));
}

/// The int8 device check's floor (`rocky_tuner::graph::CpuReference::int8_floor`) is the
/// distance of llama.cpp's CPU arithmetic from the exact logits, taken from the reference with
/// llama.cpp's activation rounding emulated (`ActivationQuant::LlamaCpp`: Q8_K blocks of 256
/// for K-quants, Q8_0 for Q8_0/Q5_0), as the goldens of the quantized tiny files were computed.
/// - On one-token prompts (no attention arithmetic between positions) the emulation gives
///   llama.cpp's logits to f32 rounding: it computes llama.cpp's arithmetic.
/// - On longer prompts the float differences upstream (attention) flip some 8-bit roundings and
///   the flips grow layer by layer, so the emulation and llama.cpp become two draws of the
///   same rounding noise; the floor (the emulation's distance from the exact logits) is then
///   llama.cpp's own distance within a factor of two on every prompt.
#[test]
fn llama_cpps_activation_rounding_emulated_meets_its_quantized_goldens() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-*)").is_none() {
        return;
    }
    use rocky_models::act_quant::ActivationQuant;
    let max_abs =
        |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let mut one_token = 0;
    for (model, folder) in [
        ("qwen2-tiny-q8_0.gguf", "qwen2-tiny-q8_0"),
        ("qwen2-tiny-q4_k_m.gguf", "qwen2-tiny-q4_k_m"),
    ] {
        let path = common::shared().join("models").join(model);
        let file = GgufFile::open(&path).unwrap();
        let model = arch::load(&file).unwrap();
        for g in goldens(folder) {
            let exact =
                forward(&file, &model, &g.ids, ReferenceOptions::llama_cpp_flash()).unwrap();
            let options = ReferenceOptions {
                activations: ActivationQuant::LlamaCpp,
                ..ReferenceOptions::llama_cpp_flash()
            };
            let emulated = forward(&file, &model, &g.ids, options).unwrap();
            let (real, floor, apart) = (
                max_abs(&exact, &g.logits),
                max_abs(&exact, &emulated),
                max_abs(&emulated, &g.logits),
            );
            println!(
                "{folder} {} ({} tokens): llama.cpp from exact {real:.3e}, the emulation \
                 from exact (the floor) {floor:.3e}, from llama.cpp {apart:.3e}",
                g.name,
                g.ids.len()
            );
            if g.ids.len() == 1 {
                assert!(apart < 1e-5, "{folder} {}: {apart}", g.name);
                assert!(real > 1e-3, "{folder} {}: {real}", g.name);
                one_token += 1;
            }
            let ratio = floor / real;
            assert!(
                (0.5..=2.0).contains(&ratio),
                "{folder} {}: the floor {floor} is {ratio:.2} x llama.cpp's distance {real}",
                g.name
            );
        }
    }
    assert!(one_token >= 2, "{one_token}");
}
