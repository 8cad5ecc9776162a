//! The GEMM template's contract: serialized keys, kernel metadata, dispatch, N-slicing and
//! refusals with reasons.

mod common;

use common::{desktop_vk12, mali_vk12};
use rocky_compiler::templates::gemm::{
    self, ActType, GemmPush, GemmSchedule, GemmWorkload, Math, NSlice, Precision,
};
use rocky_compiler::{instantiate, DeviceCaps, Refusal, Schedule, WeightFormat, Workload};

fn q4k(m: u32, act: ActType, bias: bool) -> GemmWorkload {
    GemmWorkload {
        m,
        n: 2048,
        k: 2048,
        act,
        weight: WeightFormat::Q4K,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    }
}

fn sched() -> GemmSchedule {
    GemmSchedule {
        bm: 16,
        bn: 64,
        bk: 64,
        tm: 2,
        tn: 4,
        split_k: 1,
        vector_width: 1,
        stage_a: false,
        stage_b: false,
        shuffle_a: false,
        k_groups: 1,
        wide_loads: false,
        k_unroll: 1,
        share_headers: false,
        last_group_reduces: false,
        fold_per_slab: false,
        pack_a_f16: false,
        half_units: false,
        packed_w: 0,
        accumulate: Precision::F32,
        math: Math::FmaF32,
    }
}

#[test]
fn keys_serialize_with_stable_names() {
    let w = Workload::Gemm(q4k(7, ActType::F16, true));
    let json = serde_json::to_string(&w).unwrap();
    assert_eq!(
        json,
        r#"{"gemm":{"m":7,"n":2048,"k":2048,"act":"f16","weight":"q4_k","bias":true}}"#
    );
    assert_eq!(serde_json::from_str::<Workload>(&json).unwrap(), w);
    let s = Schedule::Gemm(sched());
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(
        json,
        r#"{"gemm":{"bm":16,"bn":64,"bk":64,"tm":2,"tn":4,"split_k":1,"vector_width":1,"stage_a":false,"stage_b":false,"accumulate":"f32","math":"fma_f32"}}"#
    );
    assert_eq!(serde_json::from_str::<Schedule>(&json).unwrap(), s);
    let unknown = json.replace("\"bm\"", "\"bm\":1,\"extra\"");
    assert!(
        serde_json::from_str::<Schedule>(&unknown).is_err(),
        "unknown fields are rejected"
    );
    // A record stored before `share_headers` (the Mali Q8_0 default of 2026-12-02) loads
    // with it off, and the field is written only when on.
    let old = r#"{"gemm":{"bm":16,"bn":16,"bk":64,"tm":4,"tn":1,"split_k":1,"vector_width":2,"stage_a":false,"stage_b":false,"shuffle_a":true,"wide_loads":true,"k_unroll":4,"accumulate":"f32","math":"fma_f16_packed"}}"#;
    let Schedule::Gemm(g) = serde_json::from_str::<Schedule>(old).unwrap() else {
        panic!("a GEMM schedule")
    };
    assert!(!g.share_headers && g.k_unroll == 4);
    assert_eq!(serde_json::to_string(&Schedule::Gemm(g)).unwrap(), old);
    let shared = GemmSchedule {
        share_headers: true,
        ..g
    };
    let json = serde_json::to_string(&shared).unwrap();
    assert!(
        json.contains(r#""k_unroll":4,"share_headers":true"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<GemmSchedule>(&json).unwrap(), shared);
    for f in WeightFormat::ALL {
        let name = serde_json::to_string(&f).unwrap();
        assert_eq!(name, format!("\"{}\"", f.ggml_name().to_lowercase()));
    }
}

#[test]
fn kernel_metadata_describes_the_interface() {
    let caps = desktop_vk12();
    for bias in [false, true] {
        let w = q4k(7, ActType::F32, bias);
        let s = GemmSchedule {
            split_k: 2,
            stage_a: true,
            bk: 64,
            ..sched()
        };
        let k = gemm::instantiate(&w, &s, &caps).unwrap();
        let names: Vec<(u32, &str, bool)> = k
            .meta
            .bindings
            .iter()
            .map(|b| (b.binding, b.name.as_str(), b.read_only))
            .collect();
        let mut want = vec![(0, "x", true), (1, "weight", true), (2, "y", false)];
        if bias {
            want.push((3, "bias", true));
        }
        assert_eq!(names, want);
        assert_eq!(k.meta.push_constant_bytes, GemmPush::BYTES);
        assert_eq!(k.meta.workgroup_size, [2, 16, 8]);
        assert_eq!(k.meta.workgroup_size, s.workgroup_size());
        assert_eq!(k.meta.shared_bytes, s.shared_bytes(&w));
        assert!(k.meta.shared_bytes > 0);
        assert_eq!(k.meta.spirv_version, (1, 5));
        assert!(!k.meta.required.float16 && !k.meta.required.storage_16bit);
        assert_eq!(k.spirv[0], 0x0723_0203, "SPIR-V magic");
    }
    // f16 activations need 16-bit storage only; f16 math needs Float16; int8 needs dot products.
    let k = gemm::instantiate(&q4k(7, ActType::F16, false), &sched(), &caps).unwrap();
    assert!(k.meta.required.storage_16bit && !k.meta.required.float16);
    let s16 = GemmSchedule {
        math: Math::FmaF16Packed,
        vector_width: 2,
        ..sched()
    };
    assert!(
        gemm::instantiate(&q4k(7, ActType::F32, false), &s16, &caps)
            .unwrap()
            .meta
            .required
            .float16
    );
    let s8 = GemmSchedule {
        math: Math::Int8Dot,
        vector_width: 4,
        ..sched()
    };
    let k8 = gemm::instantiate(&q4k(7, ActType::F32, false), &s8, &caps).unwrap();
    assert!(k8.meta.required.integer_dot_product && !k8.meta.required.int8);
}

#[test]
fn push_constants_and_dispatch_grid() {
    let w = GemmWorkload {
        m: 72,
        n: 1000,
        k: 512,
        act: ActType::F32,
        weight: WeightFormat::Q8_0,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: false,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    let s = GemmSchedule {
        bm: 32,
        bn: 64,
        tm: 4,
        tn: 2,
        ..sched()
    };
    assert_eq!(gemm::dispatch_grid(&w, &s), [16, 3, 1]);
    assert_eq!(
        rocky_compiler::dispatch_grid(&Workload::Gemm(w), &Schedule::Gemm(s)).unwrap(),
        [16, 3, 1]
    );
    let slice = NSlice {
        n_offset: 256,
        n: 100,
        weight_offset: 0,
        weight_range: 0,
    };
    let p = GemmPush::for_slice(&w, &slice);
    assert_eq!(
        p,
        GemmPush {
            m: 72,
            n: 100,
            k: 512,
            n_offset: 256,
            ldy: 1000
        }
    );
    let bytes = p.to_bytes();
    let fields: Vec<u32> = bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(fields, vec![72, 100, 512, 256, 1000]);
}

#[test]
fn n_slices_cover_the_tensor_within_the_range_limit() {
    // Qwen2.5's embedding-sized Q8_0 tensor on a 128 MiB device.
    let w = GemmWorkload {
        m: 1,
        n: 151_936,
        k: 2048,
        act: ActType::F32,
        weight: WeightFormat::Q8_0,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: false,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    let row = WeightFormat::Q8_0.row_bytes(2048);
    let (max, align) = (128u64 << 20, 256u64);
    let slices = gemm::n_slices(&w, max, align).unwrap();
    assert!(slices.len() > 1);
    let mut next = 0u32;
    for s in &slices {
        assert_eq!(s.n_offset, next, "contiguous");
        assert_eq!(s.weight_offset, u64::from(s.n_offset) * row);
        assert_eq!(s.weight_offset % align, 0, "aligned offsets");
        assert!(s.weight_range <= max && s.weight_range % 4 == 0);
        assert!(s.weight_range >= u64::from(s.n) * row);
        next += s.n;
    }
    assert_eq!(next, w.n);
    assert_eq!(
        slices.iter().map(|s| u64::from(s.n) * row).sum::<u64>(),
        w.weight_bytes()
    );
    // Fits: one slice with a 4-byte-rounded range (Q8_0 rows of 34 B × 3 = 102 B → 104).
    let small = GemmWorkload { n: 3, k: 32, ..w };
    assert_eq!(
        gemm::n_slices(&small, max, align).unwrap(),
        vec![NSlice {
            n_offset: 0,
            n: 3,
            weight_offset: 0,
            weight_range: 104
        }]
    );
    // A row larger than the range cannot be sliced.
    assert!(matches!(
        gemm::n_slices(&w, 1000, 16),
        Err(Refusal::DeviceLimit(_))
    ));
}

#[test]
fn invalid_pairs_are_refused_with_a_reason() {
    let caps = desktop_vk12();
    let w = q4k(72, ActType::F32, false);
    let refuse = |w: &GemmWorkload, s: &GemmSchedule, caps: &DeviceCaps| {
        gemm::instantiate(w, s, caps).unwrap_err()
    };

    assert!(matches!(
        refuse(&GemmWorkload { k: 2000, ..w }, &sched(), &caps),
        Refusal::Workload(_)
    ));
    assert!(
        matches!(
            refuse(
                &GemmWorkload { k: 2048 + 32, ..w },
                &GemmSchedule { bk: 32, ..sched() },
                &caps
            ),
            Refusal::Workload(_)
        ),
        "Q4_K needs k % 256"
    );
    assert!(matches!(
        refuse(&GemmWorkload { m: 0, ..w }, &sched(), &caps),
        Refusal::Workload(_)
    ));
    assert!(
        matches!(
            refuse(&w, &GemmSchedule { bk: 96, ..sched() }, &caps),
            Refusal::Schedule(_)
        ),
        "bk must divide k"
    );
    assert!(matches!(
        refuse(
            &w,
            &GemmSchedule {
                bm: 12,
                tm: 8,
                ..sched()
            },
            &caps
        ),
        Refusal::Schedule(_)
    ));
    assert!(matches!(
        refuse(
            &w,
            &GemmSchedule {
                split_k: 4,
                bk: 64,
                ..sched()
            },
            &caps
        ),
        Refusal::Schedule(_)
    ));
    assert!(matches!(
        refuse(
            &w,
            &GemmSchedule {
                vector_width: 3,
                ..sched()
            },
            &caps
        ),
        Refusal::Schedule(_)
    ));
    let int8 = GemmSchedule {
        math: Math::Int8Dot,
        vector_width: 4,
        ..sched()
    };
    let f16w = GemmWorkload {
        weight: WeightFormat::F16,
        ..w
    };
    assert!(
        matches!(refuse(&f16w, &int8, &caps), Refusal::Schedule(_)),
        "int8 needs quantized weights"
    );
    assert!(matches!(
        refuse(
            &w,
            &GemmSchedule {
                accumulate: Precision::F16,
                ..sched()
            },
            &caps
        ),
        Refusal::Schedule(_)
    ));

    let base = DeviceCaps::baseline();
    assert!(matches!(
        refuse(&w, &int8, &base),
        Refusal::MissingFeature(_)
    ));
    let f16 = GemmSchedule {
        math: Math::FmaF16Packed,
        vector_width: 2,
        bm: 8,
        bn: 16,
        tm: 1,
        tn: 1,
        ..sched()
    };
    assert!(matches!(
        refuse(&w, &f16, &base),
        Refusal::MissingFeature(_)
    ));
    assert!(matches!(
        refuse(
            &q4k(72, ActType::F16, false),
            &GemmSchedule {
                bm: 8,
                bn: 16,
                tm: 1,
                tn: 1,
                ..sched()
            },
            &base
        ),
        Refusal::MissingFeature(_)
    ));

    let mali = mali_vk12();
    let big_shared = GemmSchedule {
        bm: 64,
        bn: 64,
        tm: 4,
        tn: 4,
        bk: 128,
        stage_a: true,
        stage_b: true,
        ..sched()
    };
    assert!(
        matches!(refuse(&w, &big_shared, &mali), Refusal::DeviceLimit(ref r) if r.contains("shared"))
    );
    let many_threads = GemmSchedule {
        bm: 32,
        bn: 256,
        tm: 1,
        tn: 4,
        ..sched()
    }; // 32*64 = 2048 threads
    assert!(
        matches!(refuse(&w, &many_threads, &caps), Refusal::DeviceLimit(ref r) if r.contains("threads") || r.contains("dimension"))
    );
    let fat = GemmSchedule {
        bm: 64,
        bn: 64,
        tm: 8,
        tn: 8,
        vector_width: 4,
        ..sched()
    };
    assert!(
        matches!(refuse(&w, &fat, &mali), Refusal::DeviceLimit(ref r) if r.contains("registers"))
    );
    let old = DeviceCaps {
        spirv_version: (1, 2),
        ..caps.clone()
    };
    assert!(matches!(
        refuse(&w, &sched(), &old),
        Refusal::DeviceLimit(_)
    ));

    // The generic entry point refuses like the template.
    let e = instantiate(
        &Workload::Gemm(w),
        &Schedule::Gemm(GemmSchedule { bk: 96, ..sched() }),
        &caps,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("bk 96 does not divide k 2048"),
        "{e}"
    );
}

#[test]
fn search_space_respects_the_device_and_round_trips() {
    let w = q4k(72, ActType::F32, true);
    for caps in [desktop_vk12(), mali_vk12(), DeviceCaps::baseline()] {
        let space = gemm::search_space(&w, &caps);
        assert!(!space.is_empty());
        for s in &space {
            assert!(s.validate(&w, &caps).is_ok());
            assert!(s.shared_bytes(&w) <= caps.max_shared_memory_bytes);
            assert!(s.threads() <= caps.max_workgroup_invocations);
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(&serde_json::from_str::<GemmSchedule>(&json).unwrap(), s);
        }
        if !caps.float16 {
            assert!(space.iter().all(|s| s.math != Math::FmaF16Packed));
        }
        if !caps.integer_dot_product {
            assert!(space.iter().all(|s| s.math != Math::Int8Dot));
        }
    }
    // No tile taller than the (power-of-two rounded) number of rows.
    let gemv = q4k(1, ActType::F32, false);
    assert!(gemm::search_space(&gemv, &desktop_vk12())
        .iter()
        .all(|s| s.bm == 1));
}
