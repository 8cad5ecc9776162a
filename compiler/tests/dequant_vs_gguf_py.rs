//! The compiler's CPU dequantizers (the oracle of every GPU GEMM test) against gguf-py's
//! `gguf.quants.dequantize`, an implementation independent of rocky's code, bit for bit.
//!
//! The data is tools/dump_dequant_refs.py's, written by tools/prepare-test-assets.sh into
//! $ROCKY_TEST_ASSETS/dequant-refs (default target/test-assets): random raw blocks of every
//! type ("synthetic", including subnormal and negative scales) and tensors of a real model.
//! Types the compiler has no GPU format for are skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocky_compiler::dequant::cpu::dequantize;
use rocky_compiler::WeightFormat;

fn refs_dir() -> PathBuf {
    let assets = std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    assets.join("dequant-refs")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run tools/prepare-test-assets.sh",
            path.display()
        )
    })
}

/// Checks every entry of reference set `set` whose type is a GPU format; returns the
/// elements checked per format.
fn check(set: &str) -> BTreeMap<WeightFormat, usize> {
    let dir = refs_dir().join(set);
    let index: serde_json::Value = serde_json::from_slice(&read(&dir.join("index.json")))
        .unwrap_or_else(|e| panic!("{set}/index.json: {e}"));
    let mut done = BTreeMap::new();
    let mut failures = Vec::new();
    for t in index["tensors"].as_array().expect("tensors") {
        let ty = t["type"].as_str().expect("type");
        let Some(format) = WeightFormat::ALL.into_iter().find(|f| f.ggml_name() == ty) else {
            continue;
        };
        let name = t["name"].as_str().expect("name");
        let row_len = t["row_len"].as_u64().expect("row_len") as usize;
        let n = t["n_elements"].as_u64().expect("n_elements") as usize;
        let raw = read(&dir.join(t["raw"].as_str().expect("raw")));
        let want: Vec<u32> = read(&dir.join(t["f32"].as_str().expect("f32")))
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let got = dequantize(format, &raw, n / row_len, row_len)
            .unwrap_or_else(|e| panic!("{set}/{name}: {e}"));
        let bad: Vec<usize> = (0..n).filter(|&i| got[i].to_bits() != want[i]).collect();
        if let Some(&i) = bad.first() {
            failures.push(format!(
                "{set}/{name} ({format}): {} of {n} differ; first at {i}: ours {:e}, gguf-py {:e}",
                bad.len(),
                got[i],
                f32::from_bits(want[i])
            ));
        }
        *done.entry(format).or_default() += n;
    }
    eprintln!("{set}: bit-exact to gguf-py (elements per format): {done:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    done
}

#[test]
fn cpu_dequantizers_match_gguf_py_on_random_blocks() {
    let done = check("synthetic");
    // The formats whose blocks only this set has (no test model uses them).
    for f in [
        WeightFormat::Q4_0,
        WeightFormat::Q5_0,
        WeightFormat::Q8_0,
        WeightFormat::Q4K,
        WeightFormat::Q5K,
        WeightFormat::BF16,
    ] {
        assert!(done.contains_key(&f), "synthetic refs hold no {f} tensor");
    }
}

#[test]
fn cpu_dequantizers_match_gguf_py_on_q4_1_and_q5_1_blocks() {
    // Random blocks and gguf-py's own quantization of test data (a set of its own: the
    // "synthetic" set of older checkouts lacks these types).
    let done = check("synthetic-q4_1-q5_1");
    assert_eq!(done.get(&WeightFormat::Q4_1), Some(&(32768 + 16384)));
    assert_eq!(done.get(&WeightFormat::Q5_1), Some(&(32768 + 16384)));
}

#[test]
fn cpu_dequantizers_match_gguf_py_on_a_q4_k_m_model() {
    let done = check("qwen2-tiny-q4_k_m");
    assert!(done.contains_key(&WeightFormat::Q4K) && done.contains_key(&WeightFormat::Q6K));
}
