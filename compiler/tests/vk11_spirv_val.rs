//! Kernels for Vulkan 1.1 devices (Mesa 25.0.7 panvk on RK3588 boards): every template emits
//! SPIR-V 1.3 that spirv-val accepts for `vulkan1.1`, for a sample of each search space and
//! each default schedule, on the panvk 25.0.7 profile (no fp16, no int8 dot) and on the
//! featureless baseline; and the defaults fall back to f32 math where fp16/int8 are missing.

mod common;

use common::{mali_panvk25, parallel, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::templates::attention::AttentionWorkload;
use rocky_compiler::templates::eltwise::EltwiseWorkload;
use rocky_compiler::templates::embedding::EmbeddingWorkload;
use rocky_compiler::templates::gemm::{ActType, GemmWorkload, Math};
use rocky_compiler::templates::kv_cache::KvWriteWorkload;
use rocky_compiler::templates::peak::{self, PeakConfig, PeakPrecision};
use rocky_compiler::templates::rms_norm::RmsNormWorkload;
use rocky_compiler::templates::rope::RopeWorkload;
use rocky_compiler::{
    default_schedule, instantiate, search_space, DeviceCaps, Schedule, WeightFormat, Workload,
};

/// Candidates validated per workload and profile (plus the default): enough to cover every
/// axis of the small glue spaces and a spread of the large GEMM ones in a few seconds.
const SAMPLES: usize = 12;

/// One workload of every template, and of GEMM and embedding one per weight format and
/// activation type (Qwen2.5 0.5B-like shapes, with 1024 where a K-quant needs 256 | k).
fn workloads() -> Vec<Workload> {
    let mut out = Vec::new();
    for (i, weight) in WeightFormat::ALL.into_iter().enumerate() {
        for act in [ActType::F32, ActType::F16] {
            out.push(Workload::Gemm(GemmWorkload {
                m: [1, 7, 72][i % 3],
                n: 1024,
                k: 1024,
                act,
                weight,
                layout: rocky_compiler::WeightLayout::Gguf,
                bias: i % 2 == 0,
                epilogue: Default::default(),
                rms_norm_eps_bits: None,
            }));
        }
        out.push(Workload::Embedding(EmbeddingWorkload::gguf(
            7, 1024, weight,
        )));
    }
    for m in [1, 72] {
        out.push(Workload::RmsNorm(RmsNormWorkload::new(m, 896, 1e-6)));
        out.push(Workload::RopeNeox(RopeWorkload::new(m, 14, 64, 1e6)));
        out.push(Workload::SwiGlu(EltwiseWorkload { m, width: 4864 }));
        out.push(Workload::Add(EltwiseWorkload { m, width: 896 }));
        out.push(Workload::KvWrite(KvWriteWorkload {
            m,
            kv_width: 128,
            ty: Default::default(),
            rotation: 0,
        }));
        out.push(Workload::Attention(AttentionWorkload {
            m,
            n_heads: 14,
            n_kv_heads: 2,
            head_dim: 64,
            max_kv: 4096,
            window: 0,
            kv: Default::default(),
        }));
    }
    out
}

/// The Vulkan 1.1 profiles: the board's driver, the same without any optional feature, and
/// a desktop GPU held to Vulkan 1.1.
fn profiles() -> Vec<(&'static str, DeviceCaps)> {
    vec![
        ("mali-panvk-25.0.7", mali_panvk25()),
        ("baseline", DeviceCaps::baseline()),
        (
            "desktop-vk1.1",
            DeviceCaps {
                spirv_version: (1, 3),
                ..DeviceCaps::desktop_all_features()
            },
        ),
    ]
}

/// f16 activations are stored as f16: without 16-bit storage there is nothing to compile (the
/// executor uses f32 activations; f16 ones are a GEMM variant for devices that have it).
fn applies(w: &Workload, caps: &DeviceCaps) -> bool {
    !matches!(w, Workload::Gemm(g) if g.act == ActType::F16 && !caps.storage_16bit)
}

/// Every `len / SAMPLES`-th candidate, so the sample spans the whole space.
fn sample(space: Vec<Schedule>) -> Vec<Schedule> {
    let step = (space.len() / SAMPLES).max(1);
    space.into_iter().step_by(step).collect()
}

#[test]
fn every_template_emits_spirv_1_3_that_passes_spirv_val_for_vulkan_1_1() {
    require_spirv_val();
    let mut items = Vec::new();
    for (pname, caps) in profiles() {
        for w in workloads().into_iter().filter(|w| applies(w, &caps)) {
            let space = search_space(&w, &caps);
            // An empty space would mean the template needs a feature Vulkan 1.1 lacks.
            assert!(!space.is_empty(), "{pname}: empty space for {w:?}");
            let mut schedules = sample(space);
            schedules.push(default_schedule(&w, &caps));
            for s in schedules {
                items.push((pname, w, s, caps.clone()));
            }
        }
    }
    let failures = parallel(&items, |(pname, w, s, caps)| {
        let k = instantiate(w, s, caps).map_err(|e| format!("{pname}: {s:?} refused: {e}"))?;
        if k.meta.spirv_version != (1, 3) {
            return Err(format!(
                "{pname}: {} is SPIR-V {:?}",
                k.meta.name, k.meta.spirv_version
            ));
        }
        let missing = caps.missing(&k.meta.required);
        if !missing.is_empty() {
            return Err(format!("{pname}: {} requires {missing:?}", k.meta.name));
        }
        spirv_val(&k.spirv, "vulkan1.1").map_err(|e| {
            let dis = spirv_dis(&k.spirv);
            format!(
                "{pname}: {}: {e}\n{}",
                k.meta.name,
                &dis[..dis.len().min(3000)]
            )
        })
    });
    eprintln!("validated {} modules for vulkan1.1", items.len());
    assert!(
        failures.is_empty(),
        "{} of {} modules failed:\n{}",
        failures.len(),
        items.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}

#[test]
fn defaults_fall_back_to_f32_math_without_fp16_or_int8_dot() {
    for (pname, caps) in profiles() {
        for w in workloads().into_iter().filter(|w| applies(w, &caps)) {
            let s = default_schedule(&w, &caps);
            let k = instantiate(&w, &s, &caps)
                .unwrap_or_else(|e| panic!("{pname}: default {s:?} of {w:?} refused: {e}"));
            let r = &k.meta.required;
            assert!(
                caps.float16 || !r.float16,
                "{pname}: {} needs fp16",
                k.meta.name
            );
            assert!(
                caps.integer_dot_product || !r.integer_dot_product,
                "{pname}: {} needs int8 dot",
                k.meta.name
            );
            assert!(caps.int8 || !r.int8, "{pname}: {} needs int8", k.meta.name);
            if let (Schedule::Gemm(g), false) = (s, caps.float16) {
                assert_ne!(g.math, Math::FmaF16Packed, "{pname}: {w:?}");
            }
        }
    }
}

#[test]
fn peak_kernels_pass_spirv_val_for_vulkan_1_1() {
    let caps = mali_panvk25();
    let k = peak::instantiate(&PeakConfig::new(PeakPrecision::F32), &caps).unwrap();
    assert_eq!(k.meta.spirv_version, (1, 3));
    spirv_val(&k.spirv, "vulkan1.1").unwrap();
    // The f16 peak needs shaderFloat16, which panvk 25.0.7 lacks: refused, naming it.
    let err = peak::instantiate(&PeakConfig::new(PeakPrecision::F16Packed), &caps).unwrap_err();
    assert!(err.to_string().contains("shaderFloat16"), "{err}");
}
