//! The llama architecture's loader on variants of the synthetic llama-tiny file: what it
//! builds (normal-pairing RoPE with or without rope_freqs, tied or untied output) and the
//! clear errors for what it does not (mixture of experts, RoPE over part of the head, linear
//! RoPE scaling, a malformed rope_freqs). The untied file holds token_embd's data again as
//! output.weight, so its logits must equal the tied file's bit for bit.

use rocky_models::arch::{self, ModelError};
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, TensorSpec};
use rocky_models::graph::{Op, RopePairing};
use rocky_models::reference::{forward, ReferenceOptions};
use rocky_models::synth::{write_model, Quant, Shape, SynthConfig, Vocabulary};
use std::path::{Path, PathBuf};

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn llama_tiny(dir: &Path) -> PathBuf {
    let vocab_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../assets/vocab/ggml-vocab-qwen2.gguf");
    let vocab = Vocabulary::from_gguf(&GgufFile::open(vocab_path).unwrap()).unwrap();
    let path = dir.join("llama-tiny-q8_0.gguf");
    let config = SynthConfig {
        shape: Shape::LlamaTiny,
        quant: Quant::Q8_0,
        seed: 3,
    };
    write_model(&path, &config, &vocab, |_| {}).unwrap();
    path
}

/// `src` rewritten: metadata `set` (added or replaced), tensors named in `drop` left out,
/// `copy_as` = (existing tensor, new name) appended as a copy.
struct Patch<'a> {
    set: Vec<(&'a str, MetaValue)>,
    drop: Vec<&'a str>,
    copy_as: Option<(&'a str, &'a str)>,
}

fn rewrite(src: &Path, out: &Path, patch: Patch) -> PathBuf {
    let file = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        w.set(k, v.clone());
    }
    for (k, v) in patch.set {
        w.set(k, v);
    }
    let mut sources = Vec::new();
    for t in file
        .tensors
        .iter()
        .filter(|t| !patch.drop.contains(&t.name.as_str()))
    {
        sources.push(t);
        w.add_tensor(TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ggml_type: t.ggml_type,
        });
    }
    if let Some((from, to)) = patch.copy_as {
        let t = file.tensor(from).unwrap();
        sources.push(t);
        w.add_tensor(TensorSpec {
            name: to.to_string(),
            dims: t.dims.clone(),
            ggml_type: t.ggml_type,
        });
    }
    w.write(out, |i, _| Ok(file.tensor_data(sources[i]).to_vec()))
        .unwrap();
    out.to_path_buf()
}

fn load_error(path: &Path) -> String {
    match arch::load(&GgufFile::open(path).unwrap()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => {
            assert!(matches!(e, ModelError::Invalid { .. }), "{e}");
            e.to_string()
        }
    }
}

fn ropes(path: &Path) -> Vec<(RopePairing, Option<String>)> {
    let model = arch::load(&GgufFile::open(path).unwrap()).unwrap();
    model
        .graph
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Rope {
                pairing,
                freq_factors,
                ..
            } => Some((*pairing, freq_factors.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn llama_variants_load_or_fail_clearly() {
    let dir = Dir(std::env::temp_dir().join(format!("rocky-llama-arch-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let base = llama_tiny(&dir.0);
    let none = || Patch {
        set: vec![],
        drop: vec![],
        copy_as: None,
    };

    // As written: normal pairing with the factors on all 8 RoPE ops, tied output.
    let r = ropes(&base);
    assert_eq!(r.len(), 8);
    assert!(r
        .iter()
        .all(|r| *r == (RopePairing::Normal, Some("rope_freqs.weight".into()))));
    // Without rope_freqs (Llama 2 / 3.0): no factors.
    let plain = rewrite(
        &base,
        &dir.0.join("plain.gguf"),
        Patch {
            drop: vec!["rope_freqs.weight"],
            ..none()
        },
    );
    assert!(ropes(&plain)
        .iter()
        .all(|r| *r == (RopePairing::Normal, None)));

    // Untied output holding the same values: the same logits.
    let untied = rewrite(
        &base,
        &dir.0.join("untied.gguf"),
        Patch {
            copy_as: Some(("token_embd.weight", "output.weight")),
            ..none()
        },
    );
    let ids: Vec<u32> = (0..12u32).map(|i| 300 + i * 9973 % 150000).collect();
    let logits = |path: &Path| {
        let file = GgufFile::open(path).unwrap();
        let model = arch::load(&file).unwrap();
        let tied = model.config.tied_output;
        (
            tied,
            forward(&file, &model, &ids, ReferenceOptions::llama_cpp()).unwrap(),
        )
    };
    let (tied_a, a) = logits(&base);
    let (tied_b, b) = logits(&untied);
    assert!(tied_a && !tied_b);
    assert_eq!(a, b, "untied output with the embedding's values");

    // What the graph does not build: each a clear error.
    for (name, patch, want) in [
        (
            "moe",
            Patch {
                set: vec![("llama.expert_count", MetaValue::U32(8))],
                ..none()
            },
            "mixture-of-experts",
        ),
        (
            "partial-rope",
            Patch {
                set: vec![("llama.rope.dimension_count", MetaValue::U32(32))],
                ..none()
            },
            "RoPE over part of the head",
        ),
        (
            "linear-scaling",
            Patch {
                set: vec![
                    (
                        "llama.rope.scaling.type",
                        MetaValue::String("linear".into()),
                    ),
                    ("llama.rope.scaling.factor", MetaValue::F32(2.0)),
                ],
                ..none()
            },
            "only Llama 3's frequency factors",
        ),
    ] {
        let path = rewrite(&base, &dir.0.join(format!("{name}.gguf")), patch);
        let e = load_error(&path);
        assert!(e.contains(want), "{name}: {e}");
    }
    // rope_freqs of the wrong length.
    let file = GgufFile::open(&base).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        w.set(k, v.clone());
    }
    for t in &file.tensors {
        let dims = if t.name == "rope_freqs.weight" {
            vec![16]
        } else {
            t.dims.clone()
        };
        w.add_tensor(TensorSpec {
            name: t.name.clone(),
            dims,
            ggml_type: t.ggml_type,
        });
    }
    let short = dir.0.join("short-freqs.gguf");
    w.write(&short, |i, spec| {
        let data = file.tensor_data(&file.tensors[i]);
        Ok(data[..spec.byte_size()? as usize].to_vec())
    })
    .unwrap();
    let e = load_error(&short);
    assert!(e.contains("rope_freqs.weight") && e.contains("[16]"), "{e}");
}
