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
    let file = GgufFile::open(model_path).unwrap();
    let model = arch::load(&file).unwrap();
    goldens(folder)
        .into_iter()
        .map(|g| {
            let ours = forward(&file, &model, &g.ids, ReferenceOptions::llama_cpp()).unwrap();
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
    quantized("qwen2-tiny-q8_0.gguf", "qwen2-tiny-q8_0");
}

#[test]
fn tiny_q4_k_m_matches_llama_cpp() {
    quantized("qwen2-tiny-q4_k_m.gguf", "qwen2-tiny-q4_k_m");
}
