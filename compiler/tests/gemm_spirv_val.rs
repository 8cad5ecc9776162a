//! Every module the GEMM template can produce passes spirv-val for Vulkan 1.2: the whole
//! search space of a set of workloads covering every weight format, activation type, bias
//! on/off and math mode, on a desktop profile with all features and on a Mali-like profile.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use common::{desktop_vk12, mali_vk12, parallel, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::templates::gemm::{self, ActType, GemmSchedule, GemmWorkload, Math, Precision};
use rocky_compiler::templates::peak::{self, PeakConfig, PeakPrecision};
use rocky_compiler::{DeviceCaps, WeightFormat, WeightLayout};

/// What a GEMM module depends on besides the SPIR-V version: (act, weight, layout, bias,
/// schedule).
type ModuleKey = (ActType, WeightFormat, WeightLayout, bool, GemmSchedule);

fn workloads() -> Vec<GemmWorkload> {
    let w = |weight, m, act, bias| GemmWorkload {
        m,
        n: 2048,
        k: 2048,
        act,
        weight,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    vec![
        w(WeightFormat::F32, 7, ActType::F16, true),
        w(WeightFormat::F16, 72, ActType::F32, false),
        w(WeightFormat::Q8_0, 72, ActType::F16, false),
        w(WeightFormat::Q5_0, 7, ActType::F32, true),
        w(WeightFormat::Q4K, 72, ActType::F32, true),
        w(WeightFormat::Q6K, 7, ActType::F16, false),
        w(WeightFormat::Q4K, 1, ActType::F16, true),
        w(WeightFormat::Q4_0, 72, ActType::F16, true),
        w(WeightFormat::Q5K, 7, ActType::F32, false),
        w(WeightFormat::Q4_1, 7, ActType::F16, false),
        w(WeightFormat::Q5_1, 72, ActType::F32, true),
        w(WeightFormat::BF16, 7, ActType::F16, true),
        w(WeightFormat::IQ4NL, 72, ActType::F16, false),
        w(WeightFormat::IQ4XS, 7, ActType::F32, true),
        // The aligned layout (dequant::layout) of every format that has it.
        aligned(w(WeightFormat::Q8_0, 72, ActType::F32, true)),
        aligned(w(WeightFormat::Q5_0, 72, ActType::F16, false)),
        aligned(w(WeightFormat::Q6K, 72, ActType::F32, false)),
        aligned(w(WeightFormat::Q6K, 1, ActType::F16, true)),
    ]
}

fn aligned(w: GemmWorkload) -> GemmWorkload {
    GemmWorkload {
        layout: WeightLayout::Aligned,
        ..w
    }
}

#[test]
fn whole_gemm_space_passes_spirv_val_for_vulkan_1_2() {
    require_spirv_val();
    let start = Instant::now();
    let profiles = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    // The module depends on (act, weight, bias, schedule) and the SPIR-V version only (m, n, k
    // are push constants), and both profiles emit SPIR-V 1.5: validate each distinct one once.
    let mut distinct: HashMap<ModuleKey, (GemmWorkload, DeviceCaps)> = HashMap::new();
    let mut maths = BTreeSet::new();
    let mut formats = BTreeSet::new();
    let mut acts = BTreeSet::new();
    let mut biases = BTreeSet::new();
    let mut sizes = Vec::new();
    for (pname, caps) in &profiles {
        for w in workloads() {
            let space = gemm::search_space(&w, caps);
            assert!(!space.is_empty(), "{pname}: empty space for {w:?}");
            sizes.push(format!(
                "{pname} {} {} m={} {:?}: {}",
                w.weight,
                w.layout,
                w.m,
                w.act,
                space.len()
            ));
            for s in space {
                maths.insert((s.math, s.accumulate));
                formats.insert((w.weight, w.layout));
                acts.insert(w.act);
                biases.insert(w.bias);
                distinct
                    .entry((w.act, w.weight, w.layout, w.bias, s))
                    .or_insert((w, caps.clone()));
            }
        }
    }
    // The set must really cover what it claims to.
    let aligned_formats = WeightFormat::ALL
        .iter()
        .filter(|&&f| WeightLayout::Aligned.supports(f))
        .count();
    assert_eq!(formats.len(), WeightFormat::ALL.len() + aligned_formats);
    assert_eq!(acts.len(), 2);
    assert_eq!(biases.len(), 2);
    for m in [
        (Math::FmaF32, Precision::F32),
        (Math::FmaF16Packed, Precision::F32),
        (Math::FmaF16Packed, Precision::F16),
        (Math::Int8Dot, Precision::F32),
    ] {
        assert!(
            maths.contains(&m),
            "no schedule with {m:?} in the test spaces"
        );
    }

    let items: Vec<_> = distinct.into_iter().collect();
    let failures = parallel(&items, |((_, _, _, _, s), (w, caps))| {
        let k = gemm::instantiate(w, s, caps)
            .map_err(|e| format!("{s:?} from the space refused: {e}"))?;
        spirv_val(&k.spirv, "vulkan1.2").map_err(|e| {
            let dis = spirv_dis(&k.spirv);
            format!("{}: {e}\n{}", k.meta.name, &dis[..dis.len().min(4000)])
        })
    });
    eprintln!(
        "space sizes:\n  {}\nvalidated {} distinct modules in {:.1?}",
        sizes.join("\n  "),
        items.len(),
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} modules failed:\n{}",
        failures.len(),
        items.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}

#[test]
fn samples_pass_spirv_val_for_vulkan_1_1_and_1_3() {
    require_spirv_val();
    for (version, env) in [((1, 3), "vulkan1.1"), ((1, 6), "vulkan1.3")] {
        let caps = DeviceCaps {
            spirv_version: version,
            ..DeviceCaps::desktop_all_features()
        };
        let mut items = Vec::new();
        for w in workloads() {
            for s in gemm::search_space(&w, &caps).into_iter().step_by(97) {
                items.push((w, s));
            }
        }
        let failures = parallel(&items, |(w, s)| {
            let k = gemm::instantiate(w, s, &caps).map_err(|e| e.to_string())?;
            assert_eq!(k.meta.spirv_version, version);
            spirv_val(&k.spirv, env).map_err(|e| format!("{} ({env}): {e}", k.meta.name))
        });
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// The fused epilogues (SwiGLU, residual) and their split-K reduce kernels: a spread-out
/// sample of each format's space (every split-K schedule of the sample also brings its reduce)
/// and the defaults, on both profiles, for Vulkan 1.2 and, on the desktop profile, 1.1.
#[test]
fn fused_epilogue_samples_pass_spirv_val() {
    require_spirv_val();
    let mut items = Vec::new();
    for (caps, env) in [
        (desktop_vk12(), "vulkan1.2"),
        (mali_vk12(), "vulkan1.2"),
        (
            DeviceCaps {
                spirv_version: (1, 3),
                ..DeviceCaps::desktop_all_features()
            },
            "vulkan1.1",
        ),
    ] {
        for plain in workloads() {
            for epilogue in [gemm::Epilogue::SwiGlu, gemm::Epilogue::Residual] {
                let w = GemmWorkload {
                    epilogue,
                    bias: plain.bias && epilogue == gemm::Epilogue::Residual,
                    ..plain
                };
                let space = gemm::search_space(&w, &caps);
                assert!(space.iter().all(|s| s.validate(&w, &caps).is_ok()));
                let mut sample: Vec<GemmSchedule> = space.iter().step_by(307).copied().collect();
                sample.extend(space.iter().filter(|s| s.k_groups > 1).step_by(601));
                sample.push(gemm::default_schedule(&w, &caps));
                for s in sample {
                    items.push((w, s, caps.clone(), env));
                }
            }
        }
    }
    let splits = items.iter().filter(|(_, s, _, _)| s.k_groups > 1).count();
    assert!(
        splits >= 10,
        "the sample must reach split-K reduces ({splits})"
    );
    let failures = parallel(&items, |(w, s, caps, env)| {
        let k = gemm::instantiate(w, s, caps).map_err(|e| format!("{}: {e}", s.name(w)))?;
        spirv_val(&k.spirv, env).map_err(|e| format!("{} ({env}): {e}", k.meta.name))?;
        if s.k_groups > 1 {
            let r = gemm::split_k::instantiate_reduce(w, s, caps).map_err(|e| e.to_string())?;
            spirv_val(&r.spirv, env).map_err(|e| format!("{} ({env}): {e}", r.meta.name))?;
        }
        Ok(())
    });
    eprintln!(
        "{} fused kernels validated ({splits} with a reduce)",
        items.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn default_schedules_are_valid_and_follow_the_device_class() {
    for w in workloads() {
        for caps in [desktop_vk12(), mali_vk12()] {
            let s = gemm::default_schedule(&w, &caps);
            let k = gemm::instantiate(&w, &s, &caps)
                .unwrap_or_else(|e| panic!("default {s:?} for {w:?} refused: {e}"));
            spirv_val(&k.spirv, "vulkan1.2").unwrap();
            if caps.shared_memory_is_slow {
                // Only the int8 tiles read from workgroup memory there (half units, both
                // operands quantized or unpacked once per tile: the broadcasts and per-lane
                // bitwise dequantization they replace run on Valhall's SFU).
                assert!(
                    k.meta.shared_bytes == 0 || (s.half_units && s.math == Math::Int8Dot),
                    "Mali default uses slow shared memory: {s:?}"
                );
                assert!(
                    s.register_estimate() <= 64,
                    "Mali default is register hungry: {s:?}"
                );
            }
        }
    }
    // Without f16 the default falls back to f32 math.
    let w = workloads()[1];
    let s = gemm::default_schedule(&w, &DeviceCaps::baseline());
    assert_eq!(s.math, Math::FmaF32);
    assert!(gemm::instantiate(&w, &s, &DeviceCaps::baseline()).is_ok());
}

#[test]
fn peak_kernels_pass_spirv_val() {
    let caps = desktop_vk12();
    for precision in [PeakPrecision::F32, PeakPrecision::F16Packed] {
        let cfg = PeakConfig::new(precision);
        let k = peak::instantiate(&cfg, &caps).unwrap();
        spirv_val(&k.spirv, "vulkan1.2").unwrap();
        assert_eq!(
            k.meta.required.float16,
            precision == PeakPrecision::F16Packed
        );
    }
    assert!(peak::instantiate(
        &PeakConfig::new(PeakPrecision::F16Packed),
        &DeviceCaps::baseline()
    )
    .is_err());
}
