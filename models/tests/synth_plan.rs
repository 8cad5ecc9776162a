//! Tensor lists and types of synthetic models, without writing the big files:
//! - the tiny shape against the files llama-quantize made (qwen2-tiny-q4_k_m/q8_0.gguf);
//! - the Qwen2.5 shapes against llama.cpp's Q4_K_M rules, worked out by hand below from
//!   `llama_tensor_get_type` / `use_more_bits` / `tensor_type_fallback` (src/llama-quant.cpp);
//! - parameter counts against the published sizes of the Qwen2.5 checkpoints.

mod common;

use std::collections::BTreeMap;

use rocky_models::formats::GgmlType;
use rocky_models::gguf::GgufFile;
use rocky_models::synth::{tensor_plan, PlannedTensor, Quant, Shape, TensorKind};

fn plan_of(shape: Shape, quant: Quant) -> BTreeMap<String, PlannedTensor> {
    tensor_plan(&shape.params(), quant)
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect()
}

/// Every tensor of `reference` has the planned dims and type, and nothing else is planned.
fn assert_plan_matches_file(quant: Quant, reference: &str) {
    let path = common::shared().join("models").join(reference);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plan = plan_of(Shape::Tiny, quant);
    assert_eq!(
        plan.len(),
        file.tensors.len(),
        "tensor count vs {reference}"
    );
    for t in &file.tensors {
        let planned = plan
            .get(&t.name)
            .unwrap_or_else(|| panic!("{reference} has {}, which the plan lacks", t.name));
        assert_eq!(planned.dims, t.dims, "{} dims", t.name);
        assert_eq!(
            planned.ggml_type, t.ggml_type,
            "{}: planned {}, llama-quantize chose {}",
            t.name, planned.ggml_type, t.ggml_type
        );
    }
}

#[test]
fn tiny_q4_k_m_types_match_llama_quantize() {
    assert_plan_matches_file(Quant::Q4KM, "qwen2-tiny-q4_k_m.gguf");
}

#[test]
fn tiny_q8_0_types_match_llama_quantize() {
    assert_plan_matches_file(Quant::Q8_0, "qwen2-tiny-q8_0.gguf");
}

/// Layers where llama.cpp's Q4_K_M gives attn_v and ffn_down Q6_K, listed by hand from
/// `i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2` with C integer division.
fn more_bits_layers(shape: Shape) -> Vec<u64> {
    match shape {
        // n = 4: n/8 = 0, 7n/8 = 3.
        Shape::Tiny | Shape::Qwen3Tiny | Shape::LlamaTiny => vec![2, 3],
        // n = 7: n/8 = 0, 7n/8 = 6.
        Shape::Gemma3Tiny => vec![2, 5, 6],
        // n = 24: n/8 = 3, 7n/8 = 21.
        Shape::Qwen25_0_5B => vec![0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23],
        // n = 28: n/8 = 3, 7n/8 = 24.
        Shape::Qwen25_1_5B => vec![0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27],
        // n = 36: n/8 = 4, 7n/8 = 31.
        Shape::Qwen25_3B => vec![
            0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35,
        ],
    }
}

/// The expected Q4_K_M type of every tensor of a Qwen2.5 shape. `hidden_fits_k` says whether
/// n_embd is a multiple of 256 (the K-quant block): if not, tensors with rows of n_embd fall
/// back Q4_K -> Q5_0 and Q6_K -> Q8_0, and the tied embedding takes Q8_0 instead of Q6_K.
/// (Every FFN width here is a multiple of 256: 4864 = 19·256, 8960 = 35·256, 11008 = 43·256.)
fn expected_q4_k_m(shape: Shape, hidden_fits_k: bool) -> BTreeMap<String, GgmlType> {
    use GgmlType::*;
    let p = shape.params();
    let (q4, q6) = if hidden_fits_k {
        (Q4K, Q6K)
    } else {
        (Q5_0, Q8_0)
    };
    let more = more_bits_layers(shape);
    let mut want = BTreeMap::new();
    want.insert(
        "token_embd.weight".to_string(),
        if hidden_fits_k { Q6K } else { Q8_0 },
    );
    want.insert("output_norm.weight".to_string(), F32);
    for l in 0..p.n_layer {
        let more_bits = more.contains(&l);
        for (name, ty) in [
            ("attn_norm.weight", F32),
            ("ffn_norm.weight", F32),
            ("attn_q.bias", F32),
            ("attn_k.bias", F32),
            ("attn_v.bias", F32),
            ("attn_q.weight", q4),
            ("attn_k.weight", q4),
            ("attn_v.weight", if more_bits { q6 } else { q4 }),
            ("attn_output.weight", q4),
            ("ffn_gate.weight", q4),
            ("ffn_up.weight", q4),
            // Rows of n_ff: always whole K blocks for these shapes.
            ("ffn_down.weight", if more_bits { Q6K } else { Q4K }),
        ] {
            want.insert(format!("blk.{l}.{name}"), ty);
        }
    }
    want
}

fn assert_q4_k_m_plan(shape: Shape, hidden_fits_k: bool) {
    assert_eq!(
        shape.params().n_embd % 256 == 0,
        hidden_fits_k,
        "test premise"
    );
    let plan: BTreeMap<String, GgmlType> = plan_of(shape, Quant::Q4KM)
        .into_iter()
        .map(|(name, t)| (name, t.ggml_type))
        .collect();
    let want = expected_q4_k_m(shape, hidden_fits_k);
    assert_eq!(plan.len(), want.len(), "{} tensor count", shape.name());
    for (name, ty) in &want {
        assert_eq!(plan.get(name), Some(ty), "{} {name}", shape.name());
    }
}

#[test]
fn qwen25_0_5b_q4_k_m_falls_back_for_896_wide_rows() {
    assert_q4_k_m_plan(Shape::Qwen25_0_5B, false);
}

#[test]
fn qwen25_1_5b_q4_k_m_types() {
    assert_q4_k_m_plan(Shape::Qwen25_1_5B, true);
}

#[test]
fn qwen25_3b_q4_k_m_types() {
    assert_q4_k_m_plan(Shape::Qwen25_3B, true);
}

#[test]
fn tiny_q4_k_m_hand_rules_agree_with_the_reference_file() {
    // The hand-written rules above, checked on the one shape llama-quantize actually ran on.
    assert_q4_k_m_plan(Shape::Tiny, true);
}

#[test]
fn f16_bf16_and_q8_0_use_one_type_for_all_matrices() {
    for shape in Shape::ALL {
        for (quant, ty) in [
            (Quant::F16, GgmlType::F16),
            (Quant::BF16, GgmlType::BF16),
            (Quant::Q8_0, GgmlType::Q8_0),
        ] {
            for t in tensor_plan(&shape.params(), quant) {
                let want = if t.dims.len() == 2 { ty } else { GgmlType::F32 };
                assert_eq!(
                    t.ggml_type,
                    want,
                    "{} {} {}",
                    shape.name(),
                    quant.name(),
                    t.name
                );
            }
        }
    }
}

/// Q5_K_M: the Q4_K_M rules over Q5_K (llama-quant.cpp names both ftypes in the same attn_v and
/// ffn_down conditions); rows of 896 fall back Q5_K -> Q5_1 and Q6_K -> Q8_0.
#[test]
fn q5_k_m_follows_the_q4_k_m_rules_over_q5_k() {
    use GgmlType::*;
    for (shape, fits) in [(Shape::Qwen25_0_5B, false), (Shape::Qwen25_3B, true)] {
        let plan = plan_of(shape, Quant::Q5KM);
        let (k, fallback) = if fits { (Q5K, Q5K) } else { (Q5K, Q5_1) };
        for (name, q4km) in expected_q4_k_m(shape, fits) {
            let want = match q4km {
                Q4K => k,
                Q5_0 => fallback,
                other => other,
            };
            assert_eq!(plan[&name].ggml_type, want, "{} {name}", shape.name());
        }
    }
}

/// Q4_0 / Q4_1 / Q5_0 / Q5_1 without an importance matrix: every matrix in the mix's type but
/// the tied embedding, which takes the output rule (Q6_K, or Q8_0 where n_embd is not a
/// multiple of 256).
/// IQ4_NL / IQ4_XS, by llama-quant.cpp's rules for LLAMA_FTYPE_MOSTLY_IQ4_NL / IQ4_XS without an
/// importance matrix (worked out by hand here): the output rule for the tied embedding (Q6_K,
/// Q8_0 when its rows are not whole 256-blocks), Q5_K for attn_v when n_head / n_head_kv ≥ 4 and
/// for ffn_down of layers below n_layer / 8, the mix's type elsewhere; `tensor_type_fallback`
/// turns IQ4_XS rows that are not a multiple of 256 into IQ4_NL and Q5_K ones into Q5_1.
#[test]
fn iq4_mixes_follow_llama_quantize_rules() {
    use GgmlType::*;
    for shape in Shape::ALL {
        let p = shape.params();
        let gqa = p.n_head / p.n_head_kv;
        for (quant, ty) in [(Quant::IQ4NL, IQ4NL), (Quant::IQ4XS, IQ4XS)] {
            for t in tensor_plan(&p, quant) {
                let row = t.dims[0];
                let k256 =
                    |t: GgmlType, fallback: GgmlType| if row % 256 == 0 { t } else { fallback };
                let layer = t
                    .name
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .map(|l| l.parse::<u64>().unwrap());
                let want = if t.name == "token_embd.weight" {
                    k256(Q6K, Q8_0)
                } else if t.dims.len() == 1 {
                    F32
                } else if (t.name.ends_with("attn_v.weight") && gqa >= 4)
                    || (t.name.ends_with("ffn_down.weight") && layer.unwrap() < p.n_layer / 8)
                {
                    k256(Q5K, Q5_1)
                } else if ty == IQ4XS {
                    k256(IQ4XS, IQ4NL)
                } else {
                    IQ4NL
                };
                assert_eq!(
                    t.ggml_type,
                    want,
                    "{} {} {}",
                    shape.name(),
                    quant.name(),
                    t.name
                );
            }
        }
    }
    // The Qwen2.5-0.5B shape exercises every rule: 7 query heads per KV head, 24 layers, 896-wide
    // rows (so IQ4_NL, Q5_1 and Q8_0 fallbacks) and 4864-wide ffn_down rows.
    let plan = plan_of(Shape::Qwen25_0_5B, Quant::IQ4XS);
    let ty = |n: &str| plan[n].ggml_type;
    assert_eq!(ty("token_embd.weight"), Q8_0);
    assert_eq!(ty("blk.0.attn_q.weight"), IQ4NL);
    assert_eq!(ty("blk.0.attn_v.weight"), Q5_1);
    assert_eq!(ty("blk.2.ffn_down.weight"), Q5K);
    assert_eq!(ty("blk.3.ffn_down.weight"), IQ4XS);
}

#[test]
fn legacy_mixes_use_their_type_but_for_the_output() {
    use GgmlType::*;
    for shape in Shape::ALL {
        let fits = shape.params().n_embd % 256 == 0;
        for (quant, ty) in [
            (Quant::Q4_0, Q4_0),
            (Quant::Q4_1, Q4_1),
            (Quant::Q5_0, Q5_0),
            (Quant::Q5_1, Q5_1),
        ] {
            for t in tensor_plan(&shape.params(), quant) {
                let want = if t.name == "token_embd.weight" {
                    if fits {
                        Q6K
                    } else {
                        Q8_0
                    }
                } else if t.dims.len() == 2 {
                    ty
                } else {
                    F32
                };
                assert_eq!(
                    t.ggml_type,
                    want,
                    "{} {} {}",
                    shape.name(),
                    quant.name(),
                    t.name
                );
            }
        }
    }
}

#[test]
fn kinds_follow_names() {
    for t in tensor_plan(&Shape::Qwen25_0_5B.params(), Quant::Q4KM) {
        let want = if t.name.ends_with("_norm.weight") {
            TensorKind::Norm
        } else if t.name.ends_with(".bias") {
            TensorKind::Bias
        } else {
            TensorKind::Matrix
        };
        assert_eq!(t.kind, want, "{}", t.name);
        assert_eq!(t.dims.len() == 2, want == TensorKind::Matrix, "{}", t.name);
    }
}

#[test]
fn parameter_counts_match_the_published_checkpoints() {
    // Totals of the Hugging Face safetensors of Qwen/Qwen2.5-{0.5B,1.5B,3B} (tied embeddings
    // counted once): 0.49B, 1.54B, 3.09B on the model cards.
    for (shape, want) in [
        (Shape::Qwen25_0_5B, 494_032_768u64),
        (Shape::Qwen25_1_5B, 1_543_714_304),
        (Shape::Qwen25_3B, 3_085_938_688),
    ] {
        let n: u64 = tensor_plan(&shape.params(), Quant::F16)
            .iter()
            .map(PlannedTensor::n_elements)
            .sum();
        assert_eq!(n, want, "{}", shape.name());
    }
}

#[test]
fn qwen3_and_gemma3_plans_name_the_tensors_their_loaders_expect() {
    let names = |shape: Shape| -> Vec<String> {
        tensor_plan(&shape.params(), Quant::Q8_0)
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    let qwen3 = names(Shape::Qwen3Tiny);
    assert!(qwen3.contains(&"blk.0.attn_q_norm.weight".to_string()));
    assert!(!qwen3.iter().any(|n| n.ends_with(".bias")), "{qwen3:?}");
    let gemma3 = names(Shape::Gemma3Tiny);
    for n in [
        "blk.6.attn_k_norm.weight",
        "blk.6.post_attention_norm.weight",
        "blk.6.post_ffw_norm.weight",
    ] {
        assert!(gemma3.contains(&n.to_string()), "{n} missing");
    }
    assert!(!gemma3.iter().any(|n| n.ends_with(".bias")));
}

#[test]
fn llama_tiny_has_llama3_rope_factors_first() {
    // The factors as convert_hf_to_gguf.py computes them for rope_scaling {factor 8,
    // low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 64}, base 500000,
    // head_dim 64 (numpy f32 frequencies, Python floats, stored f32): computed outside rocky.
    let plan = tensor_plan(&Shape::LlamaTiny.params(), Quant::Q4KM);
    let t = &plan[0];
    assert_eq!(t.name, "rope_freqs.weight");
    assert_eq!((t.dims.clone(), t.ggml_type), (vec![32], GgmlType::F32));
    let f = t.fixed.as_ref().unwrap();
    let want = [1.0, 1.0, 1.0, 1.425_495_1, 2.442_259, 4.637_150_3, 8.0, 8.0];
    for (i, (&got, want)) in f.iter().zip(want).enumerate() {
        assert!((got - want).abs() < 1e-5, "factor {i}: {got} vs {want}");
    }
    assert!(f[8..].iter().all(|&x| x == 8.0));
    // No biases, no Q/K norms.
    assert!(plan
        .iter()
        .all(|t| !t.name.ends_with(".bias") && !t.name.contains("_q_norm")));
}
