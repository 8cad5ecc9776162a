//! Synthetic tiny models written to disk: they load as qwen2 models, carry the vocabulary
//! file's tokenizer unchanged, are reproducible from the seed, and their weights have the
//! intended distribution: N(0, 0.02) matrices and biases, 1 + N(0, 0.02) norms, and in the
//! quantized files the quantization of the very same values as the f16 file.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocky_models::arch;
use rocky_models::formats::{dequantize_to_vec, GgmlType};
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue};
use rocky_models::synth::{
    tensor_data, tensor_plan, write_model, Quant, Shape, SynthConfig, SynthError, TensorKind,
    Vocabulary,
};

const STD: f64 = 0.02;

fn vocab_path() -> PathBuf {
    common::shared().join("models/ggml-vocab-qwen2.gguf")
}

fn vocab() -> Vocabulary {
    let file = GgufFile::open(vocab_path()).expect("vocabulary file");
    Vocabulary::from_gguf(&file).expect("qwen2 vocabulary")
}

fn tmp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("synth-files");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tiny model in `quant` with `seed`, written once per test run under `tag` (several
/// tests read the same files; writes are serialized, each one uses all cores anyway).
fn synthesized(quant: Quant, seed: u64, tag: &str) -> PathBuf {
    static WRITTEN: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut written = WRITTEN.lock().unwrap_or_else(|e| e.into_inner());
    let map = written.get_or_insert_with(HashMap::new);
    if let Some(p) = map.get(tag) {
        return p.clone();
    }
    let path = tmp_dir().join(format!("{tag}.gguf"));
    let config = SynthConfig {
        shape: Shape::Tiny,
        quant,
        seed,
    };
    let mut calls = 0;
    let summary = write_model(&path, &config, &vocab(), |p| {
        assert_eq!(p.index, calls, "progress in tensor order");
        calls += 1;
    })
    .unwrap();
    assert_eq!(calls, summary.n_tensors);
    assert_eq!(summary.file_bytes, std::fs::metadata(&path).unwrap().len());
    map.insert(tag.to_string(), path.clone());
    path
}

fn open(path: &Path) -> GgufFile {
    GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn values(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    dequantize_to_vec(t.ggml_type, file.tensor_data(t), t.n_elements() as usize).unwrap()
}

#[test]
fn every_quant_loads_as_qwen2_with_the_planned_tensors() {
    for (quant, tag) in [
        (Quant::F16, "f16-7"),
        (Quant::Q8_0, "q8_0-7"),
        (Quant::Q4KM, "q4_k_m-7"),
    ] {
        let file = open(&synthesized(quant, 7, tag));
        let model = arch::load(&file).unwrap_or_else(|e| panic!("{tag}: {e}"));
        let c = &model.config;
        let p = Shape::Tiny.params();
        assert_eq!(
            (
                c.n_embd,
                c.n_layer,
                c.n_head,
                c.n_head_kv,
                c.head_dim,
                c.n_ff
            ),
            (256, 4, 4, 2, 64, 768),
            "{tag}"
        );
        assert_eq!(c.n_vocab as u64, vocab().n_tokens, "{tag}");
        assert_eq!(c.n_ctx_train as u64, p.n_ctx, "{tag}");
        assert_eq!((c.rope_theta, c.rms_eps), (1.0e6, 1.0e-6), "{tag}");
        assert!(c.tied_output, "{tag}: no output.weight expected");

        let plan = tensor_plan(
            &SynthConfig {
                shape: Shape::Tiny,
                quant,
                seed: 7,
            }
            .params(&vocab()),
            quant,
        );
        assert_eq!(file.tensors.len(), plan.len(), "{tag}");
        for (t, want) in file.tensors.iter().zip(&plan) {
            assert_eq!(
                (&t.name, &t.dims, t.ggml_type),
                (&want.name, &want.dims, want.ggml_type)
            );
        }

        assert_eq!(file.get_str("general.architecture").unwrap(), "qwen2");
        assert_eq!(
            file.get_u64("general.file_type").unwrap(),
            quant.file_type() as u64
        );
        assert_eq!(
            file.get("general.quantization_version")
                .and_then(|v| v.as_u64()),
            quant.is_quantized().then_some(2),
            "{tag}"
        );
    }
}

#[test]
fn tokenizer_metadata_is_the_vocabulary_files() {
    let source = open(&vocab_path());
    let tokenizer = |f: &GgufFile| -> Vec<(String, MetaValue)> {
        f.metadata
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .cloned()
            .collect()
    };
    let want = tokenizer(&source);
    assert!(want.len() >= 5, "the vocabulary file has a tokenizer");
    for (quant, tag) in [
        (Quant::F16, "f16-7"),
        (Quant::Q8_0, "q8_0-7"),
        (Quant::Q4KM, "q4_k_m-7"),
    ] {
        let file = open(&synthesized(quant, 7, tag));
        let got = tokenizer(&file);
        assert_eq!(got.len(), want.len(), "{tag}: tokenizer key count");
        for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
            assert_eq!(gk, wk, "{tag}");
            assert!(gv == wv, "{tag}: {gk} differs from the vocabulary file");
        }
    }
}

#[test]
fn same_seed_gives_the_same_file_and_another_seed_other_weights() {
    let a = std::fs::read(synthesized(Quant::Q4KM, 7, "q4_k_m-7")).unwrap();
    let b = std::fs::read(synthesized(Quant::Q4KM, 7, "q4_k_m-7-again")).unwrap();
    assert!(a == b, "two runs with seed 7 wrote different bytes");

    let (fa, fc) = (
        open(&synthesized(Quant::Q4KM, 7, "q4_k_m-7")),
        open(&synthesized(Quant::Q4KM, 8, "q4_k_m-8")),
    );
    for (ta, tc) in fa.tensors.iter().zip(&fc.tensors) {
        assert_eq!(ta.name, tc.name);
        assert!(
            fa.tensor_data(ta) != fc.tensor_data(tc),
            "{}: seeds 7 and 8 gave the same data",
            ta.name
        );
    }
}

#[test]
fn values_do_not_depend_on_the_thread_count() {
    let plan = tensor_plan(&Shape::Tiny.params(), Quant::Q4KM);
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let three_threads = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    // ffn_down of layer 3 (Q6_K) and ffn_up of layer 0 (Q4_K): many rows, both K formats.
    for name in ["blk.3.ffn_down.weight", "blk.0.ffn_up.weight"] {
        let i = plan.iter().position(|t| t.name == name).unwrap();
        let a = one_thread
            .install(|| tensor_data(&plan[i], i as u64, 5))
            .unwrap();
        let b = three_threads
            .install(|| tensor_data(&plan[i], i as u64, 5))
            .unwrap();
        assert!(a == b, "{name}");
    }
}

/// Moments of a sample.
struct Stats {
    n: f64,
    mean: f64,
    std: f64,
    /// E[(x-μ)^4] / σ^4 (3 for a Gaussian).
    kurtosis: f64,
    /// Share of values within one and two standard deviations of the mean.
    within_1: f64,
    within_2: f64,
}

fn stats(xs: &[f32]) -> Stats {
    let n = xs.len() as f64;
    let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n;
    let m2 = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let m4 = xs.iter().map(|&x| (x as f64 - mean).powi(4)).sum::<f64>() / n;
    let std = m2.sqrt();
    let share = |k: f64| {
        xs.iter()
            .filter(|&&x| (x as f64 - mean).abs() < k * std)
            .count() as f64
            / n
    };
    Stats {
        n,
        mean,
        std,
        kurtosis: m4 / (m2 * m2),
        within_1: share(1.0),
        within_2: share(2.0),
    }
}

/// `s` is a sample of N(`mean`, 0.02): mean and standard deviation within 5 standard errors
/// (plus `extra_rel` of σ for quantization noise), and a Gaussian shape when n is large.
fn assert_normal(what: &str, s: &Stats, mean: f64, extra_rel: f64) {
    let se_mean = STD / s.n.sqrt();
    let se_std_rel = 1.0 / (2.0 * s.n).sqrt();
    assert!(
        (s.mean - mean).abs() < 5.0 * se_mean + extra_rel * STD,
        "{what}: mean {} vs {mean} (n {})",
        s.mean,
        s.n
    );
    assert!(
        (s.std / STD - 1.0).abs() < 5.0 * se_std_rel + extra_rel,
        "{what}: std {} vs {STD} (n {})",
        s.std,
        s.n
    );
    if s.n >= 30_000.0 {
        // Standard errors: kurtosis sqrt(24/n), shares sqrt(p(1-p)/n) (all < 0.5/sqrt(n)).
        let se = 1.0 / s.n.sqrt();
        assert!(
            (s.kurtosis - 3.0).abs() < 5.0 * (24.0f64).sqrt() * se + 20.0 * extra_rel,
            "{what}: kurtosis {}",
            s.kurtosis
        );
        assert!(
            (s.within_1 - 0.682_689).abs() < 2.5 * se + extra_rel,
            "{what}: within 1σ {}",
            s.within_1
        );
        assert!(
            (s.within_2 - 0.954_500).abs() < 2.5 * se + extra_rel,
            "{what}: within 2σ {}",
            s.within_2
        );
    }
}

#[test]
fn f16_weights_are_normal_with_the_target_moments() {
    let file = open(&synthesized(Quant::F16, 7, "f16-7"));
    let plan = tensor_plan(&Shape::Tiny.params(), Quant::F16);
    let mut pooled: HashMap<&str, Vec<f32>> = HashMap::new();
    for t in &plan {
        let v = values(&file, &t.name);
        match t.kind {
            // Each matrix on its own (the smallest has 32768 values), f16 rounding is
            // 2^-11 relative: far below the tolerances.
            TensorKind::Matrix => assert_normal(&t.name, &stats(&v), 0.0, 0.0),
            TensorKind::Bias => pooled.entry("biases").or_default().extend(v),
            TensorKind::Norm => pooled.entry("norms").or_default().extend(v),
            TensorKind::Fixed => {}
        }
    }
    assert_normal("biases", &stats(&pooled["biases"]), 0.0, 0.0);
    assert_normal("norms", &stats(&pooled["norms"]), 1.0, 0.0);
}

#[test]
fn quantized_files_hold_the_same_weights_as_the_f16_file() {
    let reference = open(&synthesized(Quant::F16, 7, "f16-7"));
    for (quant, tag) in [(Quant::Q8_0, "q8_0-7"), (Quant::Q4KM, "q4_k_m-7")] {
        let file = open(&synthesized(quant, 7, tag));
        for t in &file.tensors {
            let exact = values(&reference, &t.name);
            let got = values(&file, &t.name);
            if t.ggml_type == GgmlType::F32 {
                // Norms and biases are F32 in every mix: the very same values.
                assert!(got == exact, "{tag} {}", t.name);
                continue;
            }
            let err = (exact
                .iter()
                .zip(&got)
                .map(|(a, b)| ((a - b) as f64).powi(2))
                .sum::<f64>()
                / exact.len() as f64)
                .sqrt();
            // RMS error relative to σ. Measured on these files (and with gguf-py's
            // dequantizers): Q4_K 0.071σ, Q6_K 0.018σ, Q8_0 0.0054σ; the bounds leave ~40%.
            let bound = match t.ggml_type {
                GgmlType::Q4K => 0.10,
                GgmlType::Q6K => 0.025,
                GgmlType::Q8_0 => 0.0075,
                other => panic!("{tag}: unexpected type {other} for {}", t.name),
            };
            assert!(
                err / STD < bound,
                "{tag} {} ({}): RMS error {:.4}σ",
                t.name,
                t.ggml_type,
                err / STD
            );
            if t.dims.len() == 2 {
                // Quantization noise adds ~err²/σ² to the variance.
                assert_normal(
                    &format!("{tag} {}", t.name),
                    &stats(&got),
                    0.0,
                    (err / STD).powi(2),
                );
            }
        }
    }
}

fn write_vocab_like(path: &Path, model: Option<&str>) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("llama".into()));
    if let Some(m) = model {
        w.set("tokenizer.ggml.model", MetaValue::String(m.into()));
        w.set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(
                rocky_models::gguf::ValueType::String,
                vec![MetaValue::String("a".into())],
            ),
        );
    }
    w.write(path, |_, _| unreachable!("no tensors")).unwrap();
}

#[test]
fn vocabularies_other_than_gpt2_bpe_are_refused_with_a_reason() {
    let dir = tmp_dir();
    for (name, model, needle) in [
        ("spm-vocab.gguf", Some("llama"), "not \"gpt2\""),
        ("no-tokenizer.gguf", None, "no tokenizer.ggml.model"),
    ] {
        let path = dir.join(name);
        write_vocab_like(&path, model);
        let err = Vocabulary::from_gguf(&open(&path)).unwrap_err();
        assert!(matches!(err, SynthError::Vocabulary { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains(needle) && msg.contains("ggml-vocab-qwen2.gguf"),
            "{msg}"
        );
    }
}

#[test]
fn an_unwritable_output_is_a_write_error_and_leaves_nothing() {
    let path = tmp_dir().join("no-such-folder/model.gguf");
    let config = SynthConfig {
        shape: Shape::Tiny,
        quant: Quant::Q8_0,
        seed: 1,
    };
    let err = write_model(&path, &config, &vocab(), |_| {}).unwrap_err();
    assert!(matches!(err, SynthError::Write { .. }), "{err}");
    assert!(err.to_string().contains("no-such-folder"), "{err}");
    assert!(!path.exists());
}
