//! rocky's block formats against two independent implementations:
//! - gguf-py (the `gguf` Python package): its `gguf.quants.dequantize` of tensors from real
//!   models and of random raw blocks, and its `gguf.quants.quantize` where it has one;
//! - llama-quantize: the qwen2-tiny Q8_0 / Q4_K_M files were made by it from qwen2-tiny-f32.gguf,
//!   so quantizing those f32 originals must give back its bytes.
//!
//! The data comes from tools/dump_dequant_refs.py, run by tools/prepare-test-assets.sh into
//! $ROCKY_TEST_ASSETS/dequant-refs (default target/test-assets). Everything is compared bit for
//! bit: both sides do the same f32 operations in the same order, and f16 → f32 is exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocky_models::formats::{dequantize, dequantize_rows, quantize, GgmlType};

fn refs_dir() -> PathBuf {
    let assets = std::env::var_os("ROCKY_TEST_ASSETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-assets"));
    assets.join("dequant-refs")
}

struct Entry {
    name: String,
    ty: GgmlType,
    n_elements: usize,
    row_len: usize,
    raw: Vec<u8>,
    reference: Vec<f32>,
    /// The f32 data `raw` was quantized from, when known.
    source: Option<Vec<f32>>,
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run tools/prepare-test-assets.sh",
            path.display()
        )
    })
}

fn read_f32(path: &Path) -> Vec<f32> {
    read(path)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The entries of one reference set, e.g. "qwen2-tiny-q4_k_m" or "synthetic".
fn load(set: &str) -> Vec<Entry> {
    let dir = refs_dir().join(set);
    let index_path = dir.join("index.json");
    if !index_path.is_file() {
        panic!(
            "missing {}: the gguf-py reference dumps are not there. Run tools/prepare-test-assets.sh \
             (needs python3 with the gguf package), or point ROCKY_TEST_ASSETS at a directory that has them",
            index_path.display()
        );
    }
    let index: serde_json::Value = serde_json::from_slice(&read(&index_path))
        .unwrap_or_else(|e| panic!("{}: {e}", index_path.display()));
    let tensors = index["tensors"].as_array().expect("index.json: tensors");
    tensors
        .iter()
        .map(|t| {
            let field = |k: &str| {
                t[k].as_str()
                    .unwrap_or_else(|| panic!("{set}: entry without {k}"))
            };
            let ty = GgmlType::from_name(field("type")).expect("known type name");
            let e = Entry {
                name: field("name").to_string(),
                ty,
                n_elements: t["n_elements"].as_u64().expect("n_elements") as usize,
                row_len: t["row_len"].as_u64().expect("row_len") as usize,
                raw: read(&dir.join(field("raw"))),
                reference: read_f32(&dir.join(field("f32"))),
                source: t["source"].as_str().map(|s| read_f32(&dir.join(s))),
            };
            assert_eq!(e.reference.len(), e.n_elements, "{set}/{}", e.name);
            e
        })
        .collect()
}

/// Index of the first mismatching element (bitwise) and the number of mismatches.
fn bit_mismatches(ours: &[f32], reference: &[f32]) -> Option<(usize, usize)> {
    let mut first = None;
    let mut count = 0;
    for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
        if a.to_bits() != b.to_bits() {
            first.get_or_insert(i);
            count += 1;
        }
    }
    first.map(|i| (i, count))
}

/// Dequantizes every entry of `set` both ways (serial and row-parallel), requires bit-exact
/// agreement with gguf-py, and checks that the set holds every type in `expected_types`.
fn check_dequantize(set: &str, expected_types: &[GgmlType]) {
    let entries = load(set);
    let mut per_type: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for e in &entries {
        let mut serial = vec![0.0f32; e.n_elements];
        dequantize(e.ty, &e.raw, &mut serial).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        let parallel = dequantize_rows(e.ty, &e.raw, e.n_elements / e.row_len, e.row_len)
            .unwrap_or_else(|err| panic!("{}: {err}", e.name));
        for (how, ours) in [("dequantize", &serial), ("dequantize_rows", &parallel)] {
            if let Some((i, n)) = bit_mismatches(ours, &e.reference) {
                failures.push(format!(
                    "{set}/{} ({}), {how}: {n} of {} elements differ; first at {i}: ours {:e} ({:#010x}), gguf-py {:e} ({:#010x})",
                    e.name, e.ty, e.n_elements, ours[i], ours[i].to_bits(), e.reference[i], e.reference[i].to_bits()
                ));
            }
        }
        let t = per_type.entry(e.ty.name()).or_default();
        t.0 += 1;
        t.1 += e.n_elements;
    }
    println!("{set}: dequantized bit-exactly vs gguf-py (tensors, elements): {per_type:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for ty in expected_types {
        assert!(
            per_type.contains_key(ty.name()),
            "{set} has no {ty} tensor: re-run tools/prepare-test-assets.sh after deleting {}",
            refs_dir().join(set).display()
        );
    }
}

/// Quantizes every entry of `set` that has its f32 source and requires the stored bytes.
/// Returns how many entries of each type were checked.
fn check_quantize(set: &str, producer: &str) -> BTreeMap<&'static str, usize> {
    let mut checked = BTreeMap::new();
    let mut failures = Vec::new();
    for e in load(set) {
        let Some(src) = &e.source else { continue };
        let ours = quantize(e.ty, src).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        assert_eq!(ours.len(), e.raw.len(), "{set}/{}", e.name);
        let block = e.ty.type_size();
        let differing: Vec<usize> = ours
            .chunks_exact(block)
            .zip(e.raw.chunks_exact(block))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, _)| i)
            .collect();
        if let Some(&first) = differing.first() {
            failures.push(format!(
                "{set}/{} ({}): {} of {} blocks differ from {producer}'s; first: block {first}\n ours {:02x?}\n them {:02x?}",
                e.name,
                e.ty,
                differing.len(),
                e.raw.len() / block,
                &ours[first * block..(first + 1) * block],
                &e.raw[first * block..(first + 1) * block],
            ));
        }
        *checked.entry(e.ty.name()).or_default() += 1;
    }
    println!("{set}: quantized byte-exactly like {producer} (tensors per type): {checked:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

#[test]
fn dequantize_matches_gguf_py_on_qwen2_tiny_q4_k_m() {
    check_dequantize(
        "qwen2-tiny-q4_k_m",
        &[GgmlType::F32, GgmlType::Q4K, GgmlType::Q6K],
    );
}

#[test]
fn dequantize_matches_gguf_py_on_qwen2_tiny_q8_0() {
    check_dequantize("qwen2-tiny-q8_0", &[GgmlType::F32, GgmlType::Q8_0]);
}

#[test]
fn dequantize_matches_gguf_py_on_gemma3_270m() {
    use GgmlType::*;
    check_dequantize("gemma-3-270m-q4_k_m", &[F32, Q5_0, Q4K, Q8_0, Q6K]);
}

/// Random raw blocks (every bit random, f16 scales random finite including subnormals) and
/// gguf-py's quantizations of adversarial data: also the types no test model contains.
#[test]
fn dequantize_matches_gguf_py_on_synthetic_blocks() {
    use GgmlType::*;
    check_dequantize("synthetic", &[F16, BF16, Q8_0, Q4_0, Q5_0, Q4K, Q5K, Q6K]);
}

/// Q4_1 and Q5_1 (the formats with a per-block minimum), in their own set: random raw blocks
/// and gguf-py's quantizations of adversarial data, dequantized bit for bit and quantized byte
/// for byte like gguf-py (whose Q4_1/Q5_1 quantizers follow ggml's reference ones).
#[test]
fn q4_1_and_q5_1_match_gguf_py_on_synthetic_data() {
    use GgmlType::*;
    check_dequantize("synthetic-q4_1-q5_1", &[Q4_1, Q5_1]);
    let counts = check_quantize("synthetic-q4_1-q5_1", "gguf-py");
    for ty in ["Q4_1", "Q5_1"] {
        assert!(
            counts.contains_key(ty),
            "synthetic-q4_1-q5_1 lacks gguf-py's {ty} quantization"
        );
    }
}

/// llama-quantize (no importance matrix) uses ggml's reference quantizers: ours must give the
/// same bytes for the f32 weights it quantized, including Q4_K_M's Q4_K and Q6_K tensors.
#[test]
fn quantize_matches_llama_quantize_on_qwen2_tiny() {
    let k = check_quantize("qwen2-tiny-q4_k_m", "llama-quantize");
    let q8 = check_quantize("qwen2-tiny-q8_0", "llama-quantize");
    for (ty, counts) in [("Q4_K", &k), ("Q6_K", &k), ("Q8_0", &q8)] {
        assert!(
            counts.get(ty).copied().unwrap_or(0) > 0,
            "no {ty} tensor with its f32 source: re-run tools/prepare-test-assets.sh"
        );
    }
}

/// gguf-py implements quantization for some types (in 0.19: BF16, Q4_0, Q5_0, Q8_0 among ours;
/// F16 is numpy's conversion); its Q8_0 is documented as bit-exact with ggml's reference.
#[test]
fn quantize_matches_gguf_py_on_synthetic_data() {
    let counts = check_quantize("synthetic", "gguf-py");
    for ty in ["F16", "BF16", "Q8_0", "Q4_0", "Q5_0"] {
        assert!(
            counts.contains_key(ty),
            "synthetic set lacks gguf-py's {ty} quantization"
        );
    }
}
