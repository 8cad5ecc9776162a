//! End-to-end tests of the `rocky` binary: model description, CPU prefill against llama.cpp's
//! golden logits, and the errors a user meets with bad input.

mod common;

use common::{asset, rocky, shared, text};

#[test]
fn info_describes_a_quantized_qwen2() {
    let m = shared().join("models/qwen2-tiny-q4_k_m.gguf");
    let o = rocky(&["info", m.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["architecture"], "qwen2");
    assert_eq!(v["config"]["n_layer"], 4);
    assert_eq!(v["config"]["n_embd"], 256);
    assert_eq!(v["config"]["n_vocab"], 151936);
    assert_eq!(v["tokenizer"]["pre"], "qwen2");
    // The histogram adds up to the file's 50 tensors.
    let n: u64 = v["tensor_types"]
        .as_object()
        .unwrap()
        .values()
        .map(|t| t["tensors"].as_u64().unwrap())
        .sum();
    assert_eq!(n, 50);
}

#[test]
fn cpu_prefill_writes_the_golden_logits() {
    if common::shared_references("llama.cpp's logits (golden/qwen2-tiny-f32)").is_none() {
        return;
    }
    let m = asset("qwen2-tiny-f32.gguf");
    let golden = shared().join("golden/qwen2-tiny-f32");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(golden.join("t1_short_en.json")).unwrap()).unwrap();
    let out = std::env::temp_dir().join(format!("rocky-logits-{}.f32", std::process::id()));
    // From the text, through the tokenizer, as a user would run it.
    let o = rocky(&[
        "prefill",
        m.to_str().unwrap(),
        "--backend",
        "cpu",
        "--prompt",
        meta["text"].as_str().unwrap(),
        "--logits-out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["n_tokens"], meta["n_tokens"]);
    assert_eq!(v["top5"][0]["id"], meta["top20"][0][0]);
    let read = |p: &std::path::Path| -> Vec<f32> {
        std::fs::read(p)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (ours, theirs) = (read(&out), read(&golden.join("t1_short_en.logits.f32")));
    std::fs::remove_file(&out).ok();
    assert_eq!(ours.len(), theirs.len());
    let worst = ours
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "largest |Δlogit| {worst}");
}

#[test]
fn bad_inputs_give_clear_errors_and_exit_codes() {
    // Missing file.
    let o = rocky(&["info", "/nonexistent/model.gguf"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    // Not a GGUF file.
    let o = rocky(&["info", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("not a GGUF file"), "{}", text(&o));
    // A truncated model.
    let m = std::fs::read(shared().join("models/qwen2-tiny-q8_0.gguf")).unwrap();
    let cut = std::env::temp_dir().join(format!("rocky-cut-{}.gguf", std::process::id()));
    std::fs::write(&cut, &m[..m.len() / 2]).unwrap();
    let o = rocky(&[
        "prefill",
        cut.to_str().unwrap(),
        "--backend",
        "cpu",
        "--token-ids",
        "1,2",
    ]);
    std::fs::remove_file(&cut).ok();
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("truncated"), "{}", text(&o));
    // Gemma 3 on the CPU reference: llama.cpp's top-1 after "The capital of France is"
    // (../shared/golden/gemma3-270m/p1_short_en.json) is " the" (id 506).
    let g = asset("gemma-3-270m-q4_k_m.gguf");
    let o = rocky(&[
        "prefill",
        g.to_str().unwrap(),
        "--backend",
        "cpu",
        "--token-ids",
        "2,818,5279,529,7001,563",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["top5"][0]["id"], 506, "{json}");
    // A token id outside the vocabulary.
    let t = shared().join("models/qwen2-tiny-q8_0.gguf");
    let o = rocky(&[
        "prefill",
        t.to_str().unwrap(),
        "--backend",
        "cpu",
        "--token-ids",
        "999999",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o).contains("outside the vocabulary"), "{}", text(&o));
}
