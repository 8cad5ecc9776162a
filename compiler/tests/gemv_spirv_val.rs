//! Every module the GEMV template (decode, m ≤ 8) can produce passes spirv-val for Vulkan 1.2:
//! the whole search space of a set of workloads covering every weight format and layout,
//! activation type, bias on/off, every epilogue and row counts 1 to 8, on a desktop profile with
//! all features and on a Mali-like profile (as gemm_spirv_val.rs does for the GEMM).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use common::{desktop_vk12, mali_vk12, parallel, require_spirv_val, spirv_dis, spirv_val};
use rocky_compiler::templates::gemm::{ActType, Epilogue, GemmWorkload};
use rocky_compiler::templates::gemv::{self, GemvSchedule};
use rocky_compiler::{DeviceCaps, WeightFormat, WeightLayout};

fn workloads() -> Vec<GemmWorkload> {
    let w = |weight, m, act, bias, epilogue| GemmWorkload {
        m,
        n: 896,
        k: 1024,
        act,
        weight,
        layout: WeightLayout::Gguf,
        bias,
        epilogue,
        rms_norm_eps_bits: None,
    };
    use Epilogue::{None as Plain, Residual, SwiGlu};
    let mut out = vec![
        w(WeightFormat::F32, 1, ActType::F32, true, Plain),
        w(WeightFormat::F16, 3, ActType::F16, false, Residual),
        w(WeightFormat::BF16, 2, ActType::F32, true, Plain),
        w(WeightFormat::Q8_0, 1, ActType::F16, false, SwiGlu),
        w(WeightFormat::Q5_0, 4, ActType::F32, false, SwiGlu),
        w(WeightFormat::Q4_0, 1, ActType::F32, true, Residual),
        w(WeightFormat::Q4_1, 8, ActType::F16, false, Plain),
        w(WeightFormat::Q5_1, 1, ActType::F16, true, Plain),
        w(WeightFormat::Q4K, 1, ActType::F32, false, SwiGlu),
        w(WeightFormat::Q5K, 5, ActType::F32, true, Plain),
        w(WeightFormat::Q6K, 6, ActType::F16, false, Residual),
        w(WeightFormat::IQ4NL, 7, ActType::F32, true, Plain),
        w(WeightFormat::IQ4XS, 2, ActType::F16, false, SwiGlu),
    ];
    // The aligned layout of every format that has it.
    for (i, &weight) in WeightFormat::ALL.iter().enumerate() {
        if WeightLayout::Aligned.supports(weight) {
            out.push(GemmWorkload {
                layout: WeightLayout::Aligned,
                ..w(weight, 1 + i as u32 % 8, ActType::F32, i % 2 == 0, Plain)
            });
        }
    }
    out
}

#[test]
fn whole_gemv_space_passes_spirv_val_for_vulkan_1_2() {
    require_spirv_val();
    let start = Instant::now();
    let profiles: [(&str, DeviceCaps); 2] = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    let mut items: Vec<(GemmWorkload, GemvSchedule, DeviceCaps)> = Vec::new();
    let mut covered = (
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
    );
    for (pname, caps) in &profiles {
        for w in workloads() {
            let space = gemv::search_space(&w, caps);
            assert!(!space.is_empty(), "{pname}: empty space for {w:?}");
            for s in space {
                covered.0.insert(format!("{:?}", (w.weight, w.layout)));
                covered.1.insert(format!("{:?}", w.epilogue));
                covered.2.insert(format!("{:?}", s.reduce));
                covered.3.insert(format!("{:?}", (s.math, s.accumulate)));
                items.push((w, s, caps.clone()));
            }
        }
    }
    // The set must really cover what it claims to.
    let aligned = WeightFormat::ALL
        .iter()
        .filter(|&&f| WeightLayout::Aligned.supports(f))
        .count();
    assert_eq!(covered.0.len(), WeightFormat::ALL.len() + aligned);
    assert_eq!(covered.1.len(), 3, "epilogues: {:?}", covered.1);
    assert!(covered.2.len() >= 3, "reductions: {:?}", covered.2);
    assert!(covered.3.len() >= 2, "maths: {:?}", covered.3);

    // Instantiate everything, then validate each distinct module once.
    let modules = std::sync::Mutex::new(HashMap::new());
    let refused = parallel(&items, |(w, s, caps)| {
        let k = gemv::instantiate(w, s, caps)
            .map_err(|e| format!("{s:?} from the space of {w:?} refused: {e}"))?;
        modules
            .lock()
            .unwrap()
            .entry(k.spirv.clone())
            .or_insert(k.meta.name);
        Ok(())
    });
    assert!(
        refused.is_empty(),
        "{}",
        refused[..refused.len().min(3)].join("\n")
    );
    let distinct: Vec<(Vec<u32>, String)> = modules.into_inner().unwrap().into_iter().collect();
    let failures = parallel(&distinct, |(words, name)| {
        spirv_val(words, "vulkan1.2").map_err(|e| {
            let dis = spirv_dis(words);
            format!("{name}: {e}\n{}", &dis[..dis.len().min(4000)])
        })
    });
    eprintln!(
        "{} schedules, {} distinct modules validated in {:.1?}",
        items.len(),
        distinct.len(),
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} modules failed:\n{}",
        failures.len(),
        distinct.len(),
        failures[..failures.len().min(3)].join("\n\n")
    );
}
