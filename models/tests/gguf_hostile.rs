//! The GGUF reader against damaged and hostile files: every truncated or mutated copy of a real
//! model must give an error or a consistent file, never a panic, an out-of-bounds read or a
//! huge allocation. A seeded mutation fuzzer runs for `ROCKY_FUZZ_SECONDS` (CI: 60).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocky_models::formats::GgmlType;
use rocky_models::gguf::{GgufError, GgufFile, GgufWriter, MetaValue, TensorSpec, ValueType};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

mod common;

fn real_model() -> Vec<u8> {
    let p = common::shared().join("models/qwen2-tiny-q8_0.gguf");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run tools/prepare-test-assets.sh, or set ROCKY_SHARED)",
            p.display()
        )
    })
}

/// A small file exercising every value type, nested arrays and several tensor types.
fn small_model() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("qwen2".into()));
    w.set("u8", MetaValue::U8(7));
    w.set("i8", MetaValue::I8(-7));
    w.set("u16", MetaValue::U16(700));
    w.set("i16", MetaValue::I16(-700));
    w.set("u32", MetaValue::U32(70000));
    w.set("i32", MetaValue::I32(-70000));
    w.set("f32", MetaValue::F32(1.5));
    w.set("bool", MetaValue::Bool(true));
    w.set("u64", MetaValue::U64(1 << 40));
    w.set("i64", MetaValue::I64(-(1 << 40)));
    w.set("f64", MetaValue::F64(-2.25));
    w.set(
        "strings",
        MetaValue::Array(
            ValueType::String,
            vec![
                MetaValue::String("a".into()),
                MetaValue::String("ünï".into()),
            ],
        ),
    );
    w.set(
        "nested",
        MetaValue::Array(
            ValueType::Array,
            vec![MetaValue::Array(
                ValueType::I32,
                vec![MetaValue::I32(1), MetaValue::I32(2)],
            )],
        ),
    );
    w.set("empty", MetaValue::Array(ValueType::F32, vec![]));
    for (name, ty, dims) in [
        ("a", GgmlType::F32, vec![8u64, 2]),
        ("b", GgmlType::Q8_0, vec![64, 3]),
        ("c", GgmlType::Q4K, vec![256, 1, 2]),
        ("d", GgmlType::F16, vec![5]),
    ] {
        w.add_tensor(TensorSpec {
            name: name.into(),
            dims,
            ggml_type: ty,
        });
    }
    let path = std::env::temp_dir().join(format!("rocky-small-{}.gguf", std::process::id()));
    w.write(&path, |i, t| {
        Ok((0..t.byte_size().unwrap())
            .map(|b| (b as u8).wrapping_mul(i as u8 + 3))
            .collect())
    })
    .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    bytes
}

/// Parses `bytes` and touches everything a loader would: metadata accessors, every tensor's
/// data, the architecture. Returns whether the parse succeeded; panics propagate.
fn exercise(bytes: Vec<u8>) -> Result<(), GgufError> {
    let len = bytes.len() as u64;
    let f = GgufFile::from_bytes("mutant.gguf", bytes)?;
    for (k, v) in &f.metadata {
        let _ = (f.get(k), v.to_string(), v.as_u64(), v.as_f64());
    }
    let mut sum = 0u64;
    for t in &f.tensors {
        let d = f.tensor_data(t);
        assert_eq!(d.len() as u64, t.size);
        assert!(f.data_offset + t.offset + t.size <= len);
        sum += d.first().copied().unwrap_or(0) as u64;
    }
    let _ = rocky_models::arch::load(&f).map(|m| m.graph.nodes.len());
    std::hint::black_box(sum);
    Ok(())
}

fn must_not_panic(bytes: Vec<u8>, what: &str) -> bool {
    match catch_unwind(AssertUnwindSafe(|| exercise(bytes))) {
        Ok(r) => r.is_err(),
        Err(_) => panic!("the GGUF reader panicked on {what}"),
    }
}

#[test]
fn writer_and_reader_round_trip() {
    let bytes = small_model();
    let f = GgufFile::from_bytes("small.gguf", bytes).expect("our own file parses");
    assert_eq!(f.version, 3);
    assert_eq!(f.get("i64"), Some(&MetaValue::I64(-(1 << 40))));
    assert_eq!(f.get_str("general.architecture").unwrap(), "qwen2");
    assert_eq!(f.get_str_array("strings").unwrap(), vec!["a", "ünï"]);
    assert_eq!(
        f.get("nested").unwrap().as_array().unwrap()[0],
        MetaValue::Array(ValueType::I32, vec![MetaValue::I32(1), MetaValue::I32(2)])
    );
    let c = f.tensor("c").unwrap();
    assert_eq!(
        (c.dims.clone(), c.ggml_type, c.size),
        (vec![256, 1, 2], GgmlType::Q4K, 288)
    );
    let d = f.tensor_data(f.tensor("b").unwrap());
    assert_eq!(d.len(), 3 * 2 * 34);
    assert_eq!(d[5], 5u8.wrapping_mul(4));
}

#[test]
fn every_truncation_of_a_real_model_is_an_error() {
    let bytes = real_model();
    let real = GgufFile::from_bytes("real.gguf", bytes.clone()).expect("the real model parses");
    let header_end = real.data_offset as usize;
    // Every length inside the first 4 KiB, then a stride through the header, then through data.
    let mut lengths: Vec<usize> = (0..4096).collect();
    lengths.extend((4096..header_end).step_by(header_end / 300));
    lengths.extend((header_end..bytes.len()).step_by(bytes.len() / 200));
    lengths.push(bytes.len() - 1);
    let mut errors = 0;
    for &n in &lengths {
        assert!(
            must_not_panic(
                bytes[..n].to_vec(),
                &format!("a copy truncated to {n} bytes")
            ),
            "a copy truncated to {n} of {} bytes was accepted",
            bytes.len()
        );
        errors += 1;
    }
    println!("{errors} truncated copies, all rejected with an error");
}

#[test]
fn hostile_counts_are_rejected_without_allocating() {
    // A header claiming 2^62 metadata pairs, or a string of 2^63 bytes, must fail fast.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend((1u64 << 62).to_le_bytes());
    let e = GgufFile::from_bytes("bomb.gguf", b)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("metadata_kv_count") && e.contains("byte offset 16"),
        "{e}"
    );

    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend((1u64 << 63).to_le_bytes());
    b.extend([0u8; 64]);
    let e = GgufFile::from_bytes("bomb.gguf", b)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("metadata[0].key") && e.contains("byte offset 24"),
        "{e}"
    );
}

fn mutate(rng: &mut StdRng, seed: &[u8], hot_len: usize) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        // The region mutations aim at: the header, clamped to what earlier edits left.
        let hot = hot_len.min(b.len()).max(1);
        match rng.gen_range(0..6) {
            0 => {
                let i = rng.gen_range(0..hot);
                b[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let i = rng.gen_range(0..hot);
                b[i] = rng.gen();
            }
            2 => {
                // An interesting 8- or 4-byte integer over a count, length, offset or type.
                let values = [
                    0u64,
                    1,
                    2,
                    31,
                    32,
                    255,
                    u32::MAX as u64,
                    1 << 32,
                    1 << 62,
                    u64::MAX,
                    seed.len() as u64,
                ];
                let v = values[rng.gen_range(0..values.len())];
                let w = if rng.gen() { 8 } else { 4 };
                let i = rng.gen_range(0..hot.saturating_sub(w).max(1));
                let bytes = v.to_le_bytes();
                let end = (i + w).min(b.len());
                b[i..end].copy_from_slice(&bytes[..end - i]);
            }
            3 => {
                let n = rng.gen_range(0..b.len());
                b.truncate(n);
            }
            4 => {
                let i = rng.gen_range(0..hot);
                let n = rng.gen_range(1..16).min(b.len() - i);
                b.drain(i..i + n);
            }
            _ => {
                let i = rng.gen_range(0..hot);
                let junk: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
                b.splice(i..i, junk);
            }
        }
        if b.len() < 2 {
            break;
        }
    }
    b
}

#[test]
fn seeded_mutation_fuzz() {
    let seconds: u64 = std::env::var("ROCKY_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let small = small_model();
    let real = real_model();
    let real_header = GgufFile::from_bytes("real", real.clone())
        .unwrap()
        .data_offset as usize;
    // Mutating the vocabulary-sized header of the real model is slow to re-parse; take its
    // first part (the counts, the architecture keys and the start of the token list) and the
    // whole small model, which has every value type.
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut runs, mut rejected) = (0u64, 0u64);
    while Instant::now() < deadline {
        let (seed, hot) = if runs % 8 == 7 {
            (&real, real_header)
        } else {
            (&small, small.len())
        };
        let m = mutate(&mut rng, seed, hot);
        if must_not_panic(m, &format!("mutation #{runs} (seed 0x5eed)")) {
            rejected += 1;
        }
        runs += 1;
    }
    println!("{runs} mutated files in {seconds} s: {rejected} rejected with errors, {} accepted, 0 panics", runs - rejected);
    assert!(runs > 100, "the fuzzer ran only {runs} cases");
}
