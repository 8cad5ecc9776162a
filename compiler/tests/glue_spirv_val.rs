//! Every module the glue templates (RMSNorm, RoPE, SwiGLU, add, embedding, KV write, the
//! Hadamard rotation around a q8_0 cache) can
//! produce passes spirv-val for Vulkan 1.2: the whole search space of each workload of the
//! Qwen2.5 0.5B and 3B shapes, a head_dim 256 case and m in {1, 7, 64, 72}, on a desktop
//! profile with all features and on a Mali-like profile. Also checks the metadata contract
//! (binding names, push sizes, workgroup sizes) of every kernel.

mod common;

use std::collections::HashMap;
use std::time::Instant;

use common::{desktop_vk12, mali_vk12, parallel, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::embedding::EmbeddingWorkload;
use rocky_compiler::templates::hadamard::{self, HadamardWorkload};
use rocky_compiler::templates::kv_cache::KvWriteWorkload;
use rocky_compiler::templates::rms_norm::RmsNormWorkload;
use rocky_compiler::templates::rope::{RopePairing, RopeWorkload};
use rocky_compiler::{
    default_schedule, instantiate, search_space, CompiledKernel, DeviceCaps, RowReduce, Schedule,
    WeightFormat, Workload,
};

const MS: [u32; 4] = [1, 7, 64, 72];

/// (hidden, n_heads, n_kv_heads, head_dim, ffn) of Qwen2.5 0.5B, 3B and a head_dim 256 model.
const SHAPES: [(u32, u32, u32, u32, u32); 3] = [
    (896, 14, 2, 64, 4864),
    (2048, 16, 2, 128, 11008),
    (2048, 8, 4, 256, 8192),
];

fn workloads() -> Vec<Workload> {
    let mut out = Vec::new();
    for (i, &(hidden, nh, nkv, hd, ffn)) in SHAPES.iter().enumerate() {
        for m in MS {
            out.push(Workload::RmsNorm(RmsNormWorkload::new(m, hidden, 1e-6)));
            out.push(Workload::RopeNeox(RopeWorkload::new(m, nh, hd, 1e6)));
            out.push(Workload::RopeNeox(RopeWorkload::new(m, nkv, hd, 1e6)));
            // Llama's variants: normal pairing, with and without frequency factors.
            let llama = RopeWorkload::new(m, nh, hd, 5e5).with_pairing(RopePairing::Normal);
            out.push(Workload::RopeNeox(llama));
            out.push(Workload::RopeNeox(llama.with_freq_factors(true)));
            out.push(Workload::RopeNeox(
                RopeWorkload::new(m, nkv, hd, 1e6).with_freq_factors(true),
            ));
            // The decode step's fused RoPE and KV write: f16, f32 and mixed caches, both
            // pairings, with frequency factors.
            for kv in [
                rocky_compiler::KvTypes::F16,
                rocky_compiler::KvTypes::F32,
                rocky_compiler::KvTypes::new(
                    rocky_compiler::KvType::F32,
                    rocky_compiler::KvType::F16,
                ),
            ] {
                out.push(Workload::RopeNeox(
                    RopeWorkload::new(m, nh, hd, 1e6).with_kv_write(nkv, kv),
                ));
            }
            out.push(Workload::RopeNeox(
                llama
                    .with_freq_factors(true)
                    .with_kv_write(nkv, rocky_compiler::KvTypes::F16),
            ));
            out.push(Workload::SwiGlu(EltwiseWorkload { m, width: ffn }));
            out.push(Workload::GeGlu(EltwiseWorkload { m, width: ffn }));
            out.push(Workload::Add(EltwiseWorkload { m, width: hidden }));
            out.push(Workload::Scale(EltwiseWorkload { m, width: hidden }));
            // The KV write of every cache type.
            for ty in rocky_compiler::KvType::ALL {
                out.push(Workload::KvWrite(KvWriteWorkload {
                    m,
                    kv_width: nkv * hd,
                    ty,
                    rotation: 0,
                }));
            }
            // Around a q8_0 cache with llama.cpp's Hadamard rotation: the rotated q8_0 writes
            // (K's run, V's 64) and the rotation of Q and of the attention output.
            let (rot_k, rot_v) = hadamard::kv_rotation_sizes(rocky_compiler::KvTypes::Q8_0, hd);
            for n in [rot_k.unwrap(), rot_v.unwrap()] {
                out.push(Workload::KvWrite(
                    KvWriteWorkload::new(m, nkv * hd, rocky_compiler::KvType::Q8_0)
                        .with_rotation(n),
                ));
                out.push(Workload::Hadamard(HadamardWorkload {
                    m,
                    width: nh * hd,
                    n,
                }));
            }
            // Every table format over the shapes: format j on shape j mod SHAPES.len(), or the
            // next shape whose width holds whole blocks of it (IQ4_XS: 256).
            for &table in WeightFormat::ALL
                .iter()
                .enumerate()
                .filter(|&(j, f)| embedding_shape(j, *f) == Some(i))
                .map(|(_, f)| f)
            {
                out.push(Workload::Embedding(EmbeddingWorkload::gguf(
                    m, hidden, table,
                )));
                // The same table held in the aligned layout (a tied output projection's on
                // panvk), where the layout holds the format.
                if rocky_compiler::WeightLayout::Aligned.supports(table) {
                    out.push(Workload::Embedding(EmbeddingWorkload {
                        layout: rocky_compiler::WeightLayout::Aligned,
                        ..EmbeddingWorkload::gguf(m, hidden, table)
                    }));
                }
            }
        }
    }
    // Widths that rule out the vectorized paths.
    out.push(Workload::RmsNorm(RmsNormWorkload::new(7, 90, 1e-5)));
    out.push(Workload::SwiGlu(EltwiseWorkload { m: 7, width: 90 }));
    out.push(Workload::KvWrite(KvWriteWorkload {
        m: 7,
        kv_width: 90,
        ty: Default::default(),
        rotation: 0,
    }));
    out
}

/// The shape (index into SHAPES) that the embedding test of the `j`-th format uses.
fn embedding_shape(j: usize, f: WeightFormat) -> Option<usize> {
    (0..SHAPES.len())
        .map(|d| (j + d) % SHAPES.len())
        .find(|&t| SHAPES[t].0 % f.block_elems() == 0)
}

/// The binding names (at bindings 0, 1, … unless numbered) and push-constant bytes the
/// runtime contract promises per template.
fn contract(w: &Workload) -> (Vec<(u32, &'static str)>, u32) {
    if let Workload::RopeNeox(r) = w {
        if r.writes_kv() {
            let mut names = vec![(0, "x")];
            if r.freq_factors {
                names.push((1, "freqs"));
            }
            names.extend([(2, "k"), (3, "v"), (4, "k_cache"), (5, "v_cache")]);
            return (names, 8);
        }
    }
    let (names, push) = match w {
        Workload::RmsNorm(_) => (vec!["x", "weight", "y"], 4),
        Workload::RopeNeox(w) if w.freq_factors => (vec!["x", "freqs"], 8),
        Workload::RopeNeox(_) => (vec!["x"], 8),
        Workload::SwiGlu(_) | Workload::GeGlu(_) => (vec!["gate", "up", "y"], 4),
        Workload::Add(_) => (vec!["a", "b", "y"], 4),
        Workload::Scale(_) => (vec!["x", "y"], 8),
        Workload::Embedding(_) => (vec!["ids", "table", "y"], 8),
        Workload::KvWrite(_) => (vec!["src", "cache"], 8),
        Workload::Hadamard(_) => (vec!["x"], 4),
        other => panic!("not a glue workload: {other:?}"),
    };
    let numbered = names.into_iter().enumerate();
    (numbered.map(|(i, n)| (i as u32, n)).collect(), push)
}

fn check_meta(w: &Workload, k: &CompiledKernel, caps: &DeviceCaps) -> Result<(), String> {
    let (names, push) = contract(w);
    let got: Vec<(u32, &str)> = k
        .meta
        .bindings
        .iter()
        .map(|b| (b.binding, b.name.as_str()))
        .collect();
    let want = names;
    if got != want {
        return Err(format!("{}: bindings {got:?}, want {want:?}", k.meta.name));
    }
    if k.meta.push_constant_bytes != push {
        return Err(format!(
            "{}: {} push bytes, want {push}",
            k.meta.name, k.meta.push_constant_bytes
        ));
    }
    let threads: u32 = k.meta.workgroup_size.iter().product();
    if threads > caps.max_workgroup_invocations
        || k.meta.shared_bytes > caps.max_shared_memory_bytes
    {
        return Err(format!("{}: over the device limits", k.meta.name));
    }
    if !caps.missing(&k.meta.required).is_empty() {
        return Err(format!("{}: requires what the device lacks", k.meta.name));
    }
    Ok(())
}

#[test]
fn whole_glue_spaces_pass_spirv_val_for_vulkan_1_2() {
    require_spirv_val();
    let start = Instant::now();
    let profiles = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    let mut sizes: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
    let mut candidates = Vec::new();
    for (pname, caps) in &profiles {
        for w in workloads() {
            let space = search_space(&w, caps);
            assert!(!space.is_empty(), "{pname}: empty space for {w:?}");
            let e = sizes.entry((*pname, w.kind())).or_default();
            e.0 = e.0.max(space.len());
            e.1 += space.len();
            // The default belongs to the space; where shared memory is slow it uses none,
            // except the Hadamard rotation's kernels: their lanes swap a run once through it,
            // because a whole run in one thread's registers spills on Mali's compiler
            // (docs/measurements/2026-12-06e-kv-rotation.md). They hold only their runs.
            let d = default_schedule(&w, caps);
            assert!(
                space.contains(&d),
                "{pname}: default {d:?} of {w:?} is not in its space"
            );
            if caps.shared_memory_is_slow {
                let k = instantiate(&w, &d, caps).unwrap();
                match w {
                    Workload::Hadamard(h) => assert!(
                        k.meta.shared_bytes <= h.width * 4,
                        "{pname}: {d:?} holds more than a row"
                    ),
                    Workload::KvWrite(kw) if kw.rotation > 0 => assert!(
                        k.meta.shared_bytes <= kw.kv_width * 4,
                        "{pname}: {d:?} holds more than a row"
                    ),
                    _ => assert_eq!(k.meta.shared_bytes, 0, "{pname}: {d:?} uses shared memory"),
                }
            }
            for s in space {
                candidates.push((w, s, caps.clone()));
            }
        }
    }
    // Instantiate everything (cheap), check the metadata, keep each distinct module once.
    let mut distinct: HashMap<Vec<u32>, String> = HashMap::new();
    let mut failures = Vec::new();
    for (w, s, caps) in &candidates {
        match instantiate(w, s, caps) {
            Ok(k) => {
                if let Err(e) = check_meta(w, &k, caps) {
                    failures.push(e);
                }
                distinct.entry(k.spirv).or_insert(k.meta.name);
            }
            Err(e) => failures.push(format!("{s:?} from the space of {w:?} refused: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        failures[..failures.len().min(5)].join("\n")
    );
    let modules: Vec<(Vec<u32>, String)> = distinct.into_iter().collect();
    let failures = parallel(&modules, |(words, name)| {
        spirv_val(words, "vulkan1.2").map_err(|e| {
            let dis = spirv_dis(words);
            format!("{name}: {e}\n{}", &dis[..dis.len().min(3000)])
        })
    });
    let mut table: Vec<_> = sizes.into_iter().collect();
    table.sort();
    eprintln!(
        "largest space / total schedules per (profile, template): {table:?}\n\
         {} candidates, {} distinct modules validated in {:.1?}",
        candidates.len(),
        modules.len(),
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} modules failed:\n{}",
        failures.len(),
        modules.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}

#[test]
fn rope_keys_stay_those_of_the_stored_records() {
    // The default RoPE (NeoX, no factors) serializes as before the variants existed, so the
    // tuning records and kernel names made then still apply; the variants get keys of their own.
    let default = RopeWorkload::new(64, 14, 64, 1e6);
    assert_eq!(
        serde_json::to_string(&Workload::RopeNeox(default)).unwrap(),
        r#"{"rope_neox":{"m":64,"n_heads":14,"head_dim":64,"theta_bits":1232348160}}"#
    );
    let llama = default
        .with_pairing(RopePairing::Normal)
        .with_freq_factors(true);
    let key = serde_json::to_string(&Workload::RopeNeox(llama)).unwrap();
    assert!(
        key.contains(r#""pairing":"normal""#) && key.contains(r#""freq_factors":true"#),
        "{key}"
    );
    let back: Workload = serde_json::from_str(&key).unwrap();
    assert_eq!(back, Workload::RopeNeox(llama));
    let caps = desktop_vk12();
    let Schedule::RopeNeox(s) = default_schedule(&Workload::RopeNeox(default), &caps) else {
        unreachable!()
    };
    assert_eq!(s.name(&default), "rope_neox_h14x64_t64_hp2");
    assert_eq!(s.name(&llama), "rope_norm_h14x64_t64_hp2_ff");
}

#[test]
fn glue_templates_refuse_bad_pairs_with_reasons() {
    let caps = desktop_vk12();
    let rms = Workload::RmsNorm(RmsNormWorkload::new(7, 90, 1e-6));
    let rope = Workload::RopeNeox(RopeWorkload::new(7, 14, 64, 1e6));
    // A schedule of another template.
    let e = instantiate(&rms, &default_schedule(&rope, &caps), &caps).unwrap_err();
    assert!(e.to_string().contains("does not match"), "{e}");
    assert!(rocky_compiler::dispatch_grid(&rms, &default_schedule(&rope, &caps)).is_err());
    // Vector loads on a width that is not a multiple of 4.
    let Schedule::RmsNorm(mut s) = default_schedule(&rms, &caps) else {
        unreachable!()
    };
    s.vector_width = 4;
    let e = instantiate(&rms, &Schedule::RmsNorm(s), &caps).unwrap_err();
    assert!(e.to_string().contains("vector_width"), "{e}");
    // Subgroup reduction on a device without subgroup arithmetic.
    s.vector_width = 1;
    s.reduce = RowReduce::Subgroup;
    let e = instantiate(&rms, &Schedule::RmsNorm(s), &DeviceCaps::baseline()).unwrap_err();
    assert!(e.to_string().contains("subgroup arithmetic"), "{e}");
    // A single-subgroup workgroup whose size is not the subgroup size.
    s.reduce = RowReduce::OneSubgroup;
    s.threads = 64;
    let e = instantiate(&rms, &Schedule::RmsNorm(s), &caps).unwrap_err();
    assert!(e.to_string().contains("subgroup size 32"), "{e}");
    // Odd head_dim, odd kv_width, an embedding width that splits a block.
    let e = instantiate(
        &Workload::RopeNeox(RopeWorkload::new(7, 14, 63, 1e6)),
        &default_schedule(&rope, &caps),
        &caps,
    )
    .unwrap_err();
    assert!(e.to_string().contains("odd"), "{e}");
    let kv = Workload::KvWrite(KvWriteWorkload {
        m: 7,
        kv_width: 91,
        ty: Default::default(),
        rotation: 0,
    });
    let e = instantiate(&kv, &default_schedule(&kv, &caps), &caps).unwrap_err();
    assert!(e.to_string().contains("odd"), "{e}");
    let emb = Workload::Embedding(EmbeddingWorkload::gguf(7, 896, WeightFormat::Q4K));
    let e = instantiate(&emb, &default_schedule(&emb, &caps), &caps).unwrap_err();
    assert!(e.to_string().contains("multiple of 256"), "{e}");
    // Too many threads for the device.
    let add = Workload::Add(EltwiseWorkload { m: 7, width: 896 });
    let Schedule::Add(mut s) = default_schedule(&add, &caps) else {
        unreachable!()
    };
    s.threads = 2048;
    let e = instantiate(&add, &Schedule::Add(s), &caps).unwrap_err();
    assert!(e.to_string().contains("threads per workgroup"), "{e}");
}

#[test]
fn glue_keys_serialize_with_stable_names() {
    let w = Workload::RmsNorm(RmsNormWorkload::new(64, 896, 1e-6));
    let json = serde_json::to_string(&w).unwrap();
    assert_eq!(
        json,
        format!(
            r#"{{"rms_norm":{{"m":64,"width":896,"eps_bits":{}}}}}"#,
            1e-6f32.to_bits()
        )
    );
    let w = Workload::SwiGlu(EltwiseWorkload { m: 1, width: 4864 });
    assert_eq!(
        serde_json::to_string(&w).unwrap(),
        r#"{"swiglu":{"m":1,"width":4864}}"#
    );
    let w = Workload::GeGlu(EltwiseWorkload { m: 1, width: 2048 });
    assert_eq!(
        serde_json::to_string(&w).unwrap(),
        r#"{"geglu":{"m":1,"width":2048}}"#
    );
    let caps = desktop_vk12();
    for w in workloads() {
        let s = default_schedule(&w, &caps);
        let back: Schedule = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let back: Workload = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(back, w);
        assert_eq!(s.kind(), w.kind());
    }
}
