//! The fused GEMMs on the Vulkan device against the compiler's CPU reference (the unfused parts
//! composed): SwiGLU over a combined gate/up tensor and the residual add, for several weight
//! formats and activation types, without split-K, split inside the workgroup and split across
//! the grid (the reduce kernel applies the epilogue), through the harness the tuner times and
//! checks every trial with; in the GGUF layout and, for the formats that have it, the aligned
//! layout (the combined gate/up tensor repacked row by row, as the executor uploads it).
//!
//! Needs a Vulkan device (lavapipe is enough); FAILS without one. `ROCKY_TEST_DEVICE` picks it.

use rocky_compiler::templates::gemm::{self, Epilogue, GemmSchedule};
use rocky_compiler::{
    instantiate, ActType, DeviceCaps, GemmWorkload, Schedule, WeightFormat, WeightLayout, Workload,
};
use rocky_runtime::{device_caps, Context, DeviceSelector};
use rocky_tuner::gemm_gpu::{all_columns, check, GemmInputs, GemmOnGpu};

fn ctx() -> Context {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join(format!("rocky-fused-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
    let selector: DeviceSelector = std::env::var("ROCKY_TEST_DEVICE")
        .unwrap_or_default()
        .parse()
        .unwrap();
    Context::new(&selector)
        .unwrap_or_else(|e| panic!("this test needs a Vulkan device (lavapipe is enough): {e}"))
}

#[test]
fn fused_epilogues_on_the_gpu_match_the_reference() {
    let ctx = ctx();
    let caps = device_caps(ctx.info(), ctx.caps());
    let cases = [
        (WeightFormat::Q4K, 512, ActType::F32),
        (WeightFormat::Q6K, 256, ActType::F32),
        (WeightFormat::Q8_0, 128, ActType::F16),
        (WeightFormat::Q5_0, 64, ActType::F32),
        (WeightFormat::F16, 96, ActType::F32),
    ];
    let mali = DeviceCaps {
        subgroup_size: caps.subgroup_size,
        ..DeviceCaps::mali_g610()
    };
    let (mut checked, mut aligned) = (0, 0);
    for (i, (weight, k, act)) in cases.into_iter().enumerate() {
        if act == ActType::F16 && !caps.storage_16bit {
            continue;
        }
        let layouts = WeightLayout::ALL.into_iter().filter(|l| l.supports(weight));
        for (layout, epilogue) in
            layouts.flat_map(|l| [(l, Epilogue::SwiGlu), (l, Epilogue::Residual)])
        {
            // 37 rows and 72 outputs: partial tiles in both directions.
            let w = GemmWorkload {
                m: 37,
                n: 72,
                k,
                act,
                weight,
                layout,
                bias: epilogue == Epilogue::Residual && i % 2 == 0,
                epilogue,
                rms_norm_eps_bits: None,
            };
            let default = gemm::default_schedule(&w, &caps);
            let base = GemmSchedule {
                bm: 16,
                bn: 32,
                bk: 32,
                tm: 2,
                tn: 2,
                split_k: 1,
                k_groups: 1,
                shuffle_a: false,
                wide_loads: false,
                k_unroll: 1,
                stage_a: false,
                stage_b: false,
                ..default
            };
            let mut schedules = vec![
                default,
                base,
                GemmSchedule {
                    split_k: 2,
                    bk: 64,
                    ..base
                },
                GemmSchedule {
                    k_groups: 2,
                    ..base
                },
                GemmSchedule {
                    k_groups: 2,
                    stage_a: true,
                    stage_b: true,
                    tn: 4,
                    bn: 64,
                    ..base
                },
            ];
            if layout == WeightLayout::Aligned {
                // The quad runs of wide loads, and the Mali default (the aligned layout's
                // reason: wide loads, k_unroll) where this device can run it.
                schedules.push(GemmSchedule {
                    wide_loads: true,
                    ..base
                });
                schedules.push(GemmSchedule {
                    wide_loads: true,
                    k_groups: 2,
                    ..base
                });
                schedules.push(gemm::default_schedule(&w, &mali));
            }
            let inputs = GemmInputs::random(&w, 40 + i as u64);
            for s in schedules.iter().filter(|s| s.validate(&w, &caps).is_ok()) {
                let kernel = instantiate(&Workload::Gemm(w), &Schedule::Gemm(*s), &caps)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.name(&w)));
                let gpu = GemmOnGpu::new(&ctx, None, &kernel, &w, s, &caps, &inputs).unwrap();
                let got = gpu.run_once(&ctx).unwrap();
                check(&w, s, &inputs, &got, &all_columns(&w))
                    .unwrap_or_else(|e| panic!("{layout} {}: {e}", s.name(&w)));
                checked += 1;
                aligned += usize::from(layout == WeightLayout::Aligned);
            }
            for must in [
                base,
                GemmSchedule {
                    k_groups: 2,
                    ..base
                },
            ] {
                if let Err(e) = must.validate(&w, &caps) {
                    panic!(
                        "{weight} {layout} {epilogue:?}: {} must run: {e}",
                        must.name(&w)
                    );
                }
            }
        }
    }
    eprintln!("checked {checked} fused GEMMs, {aligned} of them in the aligned layout");
    assert!(checked >= 30, "only {checked} fused GEMMs ran");
    assert!(
        aligned >= 15,
        "only {aligned} aligned-layout fused GEMMs ran"
    );
}
