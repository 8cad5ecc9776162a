//! The GEMV template (M = 1 … 8): kernels run by the IR interpreter agree with the CPU
//! reference for every weight format and layout, both activation types, bias, every
//! epilogue, N-slicing, a runtime m below the workload's and a sample of the search space on
//! two device profiles (subgroup and shared-memory reductions); a sample of every space
//! passes spirv-val. Kept cheap (a few seconds): the whole-space spirv-val run is the GEMM's.

mod common;

use common::{desktop_vk12, mali_vk12, parallel, require_spirv_val, spirv_dis, spirv_val};
use half::f16;
use rocky_compiler::dequant::layout::to_device;
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::templates::gemm::{self, ActType, Epilogue, GemmPush, GemmWorkload, NSlice};
use rocky_compiler::templates::gemv::{self, reference, GemvSchedule, Reduce};
use rocky_compiler::{testdata, DeviceCaps, Refusal, WeightFormat, WeightLayout};
use std::collections::BTreeSet;

struct Inputs {
    x: Vec<f32>,
    weights: Vec<u8>,
    bias: Option<Vec<f32>>,
    residual: Option<Vec<f32>>,
    /// The folded RMSNorm's weight (k values).
    norm: Option<Vec<f32>>,
}

fn inputs(w: &GemmWorkload, seed: u64) -> Inputs {
    let tensor = |seed| testdata::random_weights(w.weight, w.n as usize, w.k as usize, seed);
    let weights = match w.epilogue {
        Epilogue::SwiGlu => gemm::combine_gate_up(&tensor(seed + 1), &tensor(seed + 3)).unwrap(),
        _ => tensor(seed + 1),
    };
    let mut x = testdata::random_activations((w.m * w.k) as usize, seed);
    if w.rms_norm_eps_bits.is_some() {
        // A residual stream far from unit scale, so a missing normalization shows.
        x.iter_mut().for_each(|v| *v *= 37.0);
    }
    Inputs {
        x,
        weights,
        norm: w
            .rms_norm_eps_bits
            .map(|_| testdata::random_activations(w.k as usize, seed + 5)),
        bias: w
            .bias
            .then(|| testdata::random_activations(w.n as usize, seed + 2)),
        residual: (w.epilogue == Epilogue::Residual)
            .then(|| testdata::random_activations((w.m * w.n) as usize, seed + 4)),
    }
}

fn act_bytes(v: &[f32], act: ActType) -> Vec<u8> {
    match act {
        ActType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ActType::F16 => v
            .iter()
            .flat_map(|x| f16::from_f32(*x).to_le_bytes())
            .collect(),
    }
}

fn padded(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().div_ceil(4) * 4, 0);
    v
}

/// Runs the kernel built for `w` on its first `rows` rows, in `slices`; Y starts as NaN, so
/// an output never written fails the comparison.
fn run(
    w: &GemmWorkload,
    s: &GemvSchedule,
    caps: &DeviceCaps,
    inp: &Inputs,
    rows: u32,
    slices: &[NSlice],
) -> Vec<f32> {
    let k = gemv::instantiate(w, s, caps).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    let module = gemv::kernel_ir(w, s);
    assert_eq!(module.name, k.meta.name);
    let mut x = act_bytes(&inp.x[..(rows * w.k) as usize], w.act);
    let mut y = act_bytes(&vec![f32::NAN; (rows * w.n) as usize], w.act);
    let mut bias = inp.bias.as_ref().map(|b| act_bytes(b, ActType::F32));
    let mut residual = inp
        .residual
        .as_ref()
        .map(|r| act_bytes(&r[..(rows * w.n) as usize], w.act));
    let mut norm = inp.norm.as_ref().map(|g| act_bytes(g, ActType::F32));
    let weights = to_device(
        w.weight,
        w.layout,
        u64::from(w.k),
        u64::from(w.weight_rows()),
        &inp.weights,
    )
    .unwrap();
    for slice in slices {
        let start = slice.weight_offset as usize;
        let end = (start + slice.weight_range as usize).min(weights.len());
        let mut wslice = padded(&weights[start..end]);
        let mut bufs = vec![
            BufferData {
                binding: 0,
                bytes: &mut x,
            },
            BufferData {
                binding: 1,
                bytes: &mut wslice,
            },
            BufferData {
                binding: 2,
                bytes: &mut y,
            },
        ];
        if let Some(b) = bias.as_mut() {
            bufs.push(BufferData {
                binding: 3,
                bytes: b,
            });
        }
        if let Some(r) = residual.as_mut() {
            bufs.push(BufferData {
                binding: 4,
                bytes: r,
            });
        }
        if let Some(g) = norm.as_mut() {
            bufs.push(BufferData {
                binding: 7,
                bytes: g,
            });
        }
        let push = GemmPush {
            m: rows,
            ..GemmPush::for_slice(w, slice)
        };
        execute(
            &module,
            &mut bufs,
            &push.to_bytes(),
            gemv::dispatch_grid_for(slice.n, s),
            caps.subgroup_size,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
    }
    match w.act {
        ActType::F32 => y
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        ActType::F16 => y
            .chunks(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

fn check(w: &GemmWorkload, s: &GemvSchedule, caps: &DeviceCaps, inp: &Inputs, rows: u32) {
    let wr = GemmWorkload { m: rows, ..*w };
    let r = reference::reference_normed(
        &wr,
        s,
        &inp.x[..(rows * w.k) as usize],
        &inp.weights,
        inp.bias.as_deref(),
        inp.residual.as_ref().map(|r| &r[..(rows * w.n) as usize]),
        inp.norm.as_deref(),
    )
    .unwrap();
    let whole = gemm::n_slices(w, u64::MAX, 16).unwrap();
    let y = run(w, s, caps, inp, rows, &whole);
    if let Err(e) = reference::compare(&wr, s, &y, &r) {
        panic!("{} (rows {rows}): {e}", s.name(w));
    }
}

fn workloads() -> Vec<GemmWorkload> {
    let w = |weight, m, act, bias, epilogue| GemmWorkload {
        m,
        n: 21,
        k: 512,
        act,
        weight,
        layout: WeightLayout::Gguf,
        bias,
        epilogue,
        rms_norm_eps_bits: None,
    };
    use Epilogue::{None as Plain, Residual, SwiGlu};
    vec![
        w(WeightFormat::F32, 1, ActType::F32, true, Plain),
        w(WeightFormat::F16, 3, ActType::F16, false, Residual),
        w(WeightFormat::BF16, 2, ActType::F32, true, Plain),
        w(WeightFormat::Q8_0, 1, ActType::F32, true, Plain),
        w(WeightFormat::Q5_0, 2, ActType::F16, false, SwiGlu),
        w(WeightFormat::Q4_0, 1, ActType::F32, true, Residual),
        w(WeightFormat::Q4_1, 8, ActType::F32, false, Plain),
        w(WeightFormat::Q5_1, 1, ActType::F16, true, Plain),
        w(WeightFormat::Q4K, 1, ActType::F32, false, SwiGlu),
        w(WeightFormat::Q5K, 5, ActType::F32, true, Plain),
        w(WeightFormat::Q6K, 1, ActType::F16, false, Residual),
        w(WeightFormat::IQ4NL, 1, ActType::F32, true, Plain),
        w(WeightFormat::IQ4XS, 2, ActType::F16, false, SwiGlu),
        // k = 448: 14 units, fewer than the threads of any step (guarded partial step).
        GemmWorkload {
            k: 448,
            layout: WeightLayout::Aligned,
            ..w(WeightFormat::Q8_0, 1, ActType::F32, false, Plain)
        },
        GemmWorkload {
            layout: WeightLayout::Aligned,
            ..w(WeightFormat::Q6K, 4, ActType::F32, true, Plain)
        },
        GemmWorkload {
            layout: WeightLayout::Aligned,
            ..w(WeightFormat::Q5_0, 1, ActType::F32, false, SwiGlu)
        },
        // A folded RMSNorm (f32 activations and math only): the decode step's Q/K/V (bias)
        // and gate/up GEMVs, several rows, and a guarded partial step.
        normed(w(WeightFormat::Q8_0, 1, ActType::F32, true, Plain)),
        normed(w(WeightFormat::Q4K, 1, ActType::F32, false, SwiGlu)),
        normed(w(WeightFormat::Q6K, 3, ActType::F32, false, Residual)),
        normed(GemmWorkload {
            k: 448,
            layout: WeightLayout::Aligned,
            ..w(WeightFormat::Q5_0, 1, ActType::F32, true, Plain)
        }),
    ]
}

fn normed(w: GemmWorkload) -> GemmWorkload {
    GemmWorkload {
        rms_norm_eps_bits: Some(1e-6f32.to_bits()),
        ..w
    }
}

#[test]
fn gemv_kernels_across_the_space_match_the_reference() {
    let desktop = desktop_vk12();
    let mali = mali_vk12();
    let cpu = DeviceCaps {
        subgroup_size: 8,
        lane_serial_memory: true,
        ..desktop_vk12()
    };
    let mut seen = BTreeSet::new();
    let mut checked = 0;
    let (mut quads, mut dots_first, mut int8_normed, mut grouped) = (0, 0, 0, 0);
    let formats: BTreeSet<_> = workloads().iter().map(|w| w.weight).collect();
    assert_eq!(
        formats.len(),
        WeightFormat::ALL.len(),
        "every weight format"
    );
    for (i, w) in workloads().iter().enumerate() {
        let inp = inputs(w, 300 + i as u64);
        let space = gemv::search_space(w, &desktop);
        assert!(!space.is_empty(), "empty space for {w:?}");
        // A spread-out sample (a prime stride walks through the axes), and both defaults.
        let mut sample: Vec<(GemvSchedule, &DeviceCaps)> = space
            .iter()
            .skip(i)
            .step_by(37)
            .map(|s| (*s, &desktop))
            .collect();
        // A few with the load and arithmetic variants (16-byte quad loads exist only for
        // Q4_K/Q5_K rows with a thread per unit; dotting first for every quantized format).
        // And int8 math on every workload (a folded RMSNorm's too: its X is quantized before
        // it is normalized).
        // And workgroups of several column groups (one subgroup each), int8 among them.
        for pick in [
            |s: &GemvSchedule| s.quad_loads,
            |s: &GemvSchedule| s.dot_first && !s.quad_loads,
            |s: &GemvSchedule| s.math == gemm::Math::Int8Dot,
            |s: &GemvSchedule| s.column_groups > 1,
            |s: &GemvSchedule| s.column_groups > 1 && s.math == gemm::Math::Int8Dot,
        ] {
            sample.extend(
                space
                    .iter()
                    .filter(|s| pick(s))
                    .skip(i)
                    .step_by(23)
                    .take(2)
                    .map(|s| (*s, &desktop)),
            );
        }
        sample.push((gemv::default_schedule(w, &desktop), &desktop));
        sample.push((gemv::default_schedule(w, &mali), &mali));
        // A CPU implementation's default: one subgroup of 8 per workgroup (the barrier-free
        // path).
        sample.push((gemv::default_schedule(w, &cpu), &cpu));
        for (s, caps) in &sample {
            check(w, s, caps, &inp, w.m);
            if s.math == gemm::Math::Int8Dot && w.rms_norm_eps_bits.is_some() {
                int8_normed += 1;
            }
            let one_subgroup = s.reduce == Reduce::Subgroup && s.threads <= caps.subgroup_size;
            seen.insert((s.math, s.reduce, s.chunks_per_thread, one_subgroup));
            quads += usize::from(s.quad_loads);
            grouped += usize::from(s.column_groups > 1);
            dots_first += usize::from(s.dot_first);
            checked += 1;
        }
        // A runtime m below the workload's (the last rows of a prefill).
        if w.m > 1 {
            check(w, &sample[0].0, sample[0].1, &inp, w.m - 1);
        }
    }
    eprintln!("checked {checked} kernels, {} variants", seen.len());
    assert!(quads >= 4, "{quads} quad-load kernels checked");
    assert!(
        grouped >= 8,
        "{grouped} kernels of several column groups checked"
    );
    assert!(dots_first >= 8, "{dots_first} dot-first kernels checked");
    assert!(
        int8_normed >= 4,
        "{int8_normed} int8 kernels with a folded RMSNorm checked"
    );
    for reduce in [Reduce::Shared, Reduce::Subgroup] {
        assert!(
            seen.iter().any(|v| v.1 == reduce),
            "no {reduce:?} in the sample"
        );
    }
    for math in [
        gemm::Math::FmaF32,
        gemm::Math::FmaF16Packed,
        gemm::Math::Int8Dot,
    ] {
        assert!(
            seen.iter().any(|v| v.0 == math),
            "no {math:?} in the sample"
        );
    }
    for single in [false, true] {
        assert!(
            seen.iter()
                .any(|v| v.1 == Reduce::Subgroup && v.3 == single),
            "no subgroup reduction with one_subgroup = {single} in the sample"
        );
    }
    assert!(
        seen.len() >= 8,
        "the sample must reach the variants: {seen:?}"
    );
}

/// Quants turned into floats by bit operations (`bit_floats`) and loads ahead of the products
/// (`early_loads`), alone and together, on every quantized format, with a thread per unit
/// (constant chunks, wide loads) and with threads sharing a unit (Q6_K's two scales within one
/// thread's chunks or across threads), a folded RMSNorm included.
#[test]
fn bit_float_and_early_load_kernels_match_the_reference() {
    let desktop = desktop_vk12();
    let mut checked = 0;
    for (i, w) in workloads().iter().enumerate() {
        if !w.weight.is_quantized() {
            continue;
        }
        let inp = inputs(w, 700 + i as u64);
        let base = gemv::default_schedule(w, &desktop);
        for (chunks_per_thread, units_per_thread, bit_floats, early_loads) in [
            (8, 1, true, false),
            (8, 2, true, true),
            (4, 1, true, false),
            (2, 1, true, true),
            (8, 1, false, true),
            (4, 1, false, true),
        ] {
            let s = GemvSchedule {
                math: gemm::Math::FmaF32,
                dot_first: true,
                bit_floats,
                early_loads,
                chunks_per_thread,
                units_per_thread,
                vector_width: 4,
                ..base
            };
            if s.validate(w, &desktop).is_err() {
                continue;
            }
            check(w, &s, &desktop, &inp, w.m);
            checked += 1;
        }
    }
    assert!(
        checked >= 60,
        "{checked} bit-float and early-load kernels checked"
    );
}

#[test]
fn n_slices_and_a_wide_grid_cover_every_column() {
    let caps = desktop_vk12();
    let w = GemmWorkload {
        m: 2,
        n: 70,
        k: 256,
        act: ActType::F32,
        weight: WeightFormat::Q4K,
        layout: WeightLayout::Gguf,
        bias: true,
        epilogue: Epilogue::None,
        rms_norm_eps_bits: None,
    };
    let inp = inputs(&w, 7);
    let s = gemv::default_schedule(&w, &caps);
    let r = reference::reference(&w, &s, &inp.x, &inp.weights, inp.bias.as_deref(), None).unwrap();
    // Slices of 16 rows (a 144-byte row: offsets stay 16-aligned at 16 rows... and 9 for n).
    let slices = gemm::n_slices(&w, 16 * 144, 16).unwrap();
    assert!(slices.len() > 2);
    let y = run(&w, &s, &caps, &inp, w.m, &slices);
    reference::compare(&w, &s, &y, &r).unwrap();
    // More column groups than one grid dimension holds: two-dimensional grid.
    let wide = GemmWorkload { n: 300_000, ..w };
    let g = gemv::dispatch_grid(&wide, &GemvSchedule { cols: 2, ..s });
    assert!(
        g[1] > 1 && g[0] <= 65535 && g[0] * g[1] * 2 >= 300_000,
        "{g:?}"
    );
}

#[test]
fn invalid_pairs_are_refused_with_a_reason() {
    let caps = desktop_vk12();
    let w = workloads()[2];
    let s = gemv::default_schedule(&w, &caps);
    let too_many = GemmWorkload { m: 9, ..w };
    assert!(matches!(
        gemv::instantiate(&too_many, &s, &caps),
        Err(Refusal::Workload(_))
    ));
    // A folded RMSNorm: the GEMV's alone, on f32 activations, with f32 math, a sane eps.
    let normed_w = normed(GemmWorkload {
        act: ActType::F32,
        ..w
    });
    assert!(gemv::instantiate(&normed_w, &s, &caps).is_ok());
    assert!(matches!(
        gemm::validate_workload(&normed_w),
        Err(Refusal::Workload(_))
    ));
    for bad_w in [
        normed(GemmWorkload {
            act: ActType::F16,
            ..w
        }),
        GemmWorkload {
            rms_norm_eps_bits: Some(f32::NAN.to_bits()),
            ..normed_w
        },
    ] {
        assert!(matches!(
            gemv::instantiate(&bad_w, &s, &caps),
            Err(Refusal::Workload(_))
        ));
    }
    let f16_math = GemvSchedule {
        math: gemm::Math::FmaF16Packed,
        ..s
    };
    assert!(gemv::instantiate(&w, &f16_math, &caps).is_ok());
    assert!(matches!(
        gemv::instantiate(&normed_w, &f16_math, &caps),
        Err(Refusal::Schedule(_))
    ));
    for bad in [
        GemvSchedule { threads: 48, ..s },
        GemvSchedule { cols: 3, ..s },
        // Column groups need the one-subgroup reduction, each group exactly one subgroup.
        GemvSchedule {
            column_groups: 4,
            ..s
        },
        GemvSchedule {
            reduce: Reduce::OneSubgroup,
            threads: 128,
            column_groups: 2,
            ..s
        },
        GemvSchedule {
            chunks_per_thread: 1,
            ..s
        },
        GemvSchedule {
            math: gemm::Math::Int8Dot,
            chunks_per_thread: 4,
            vector_width: 1,
            ..s
        },
    ] {
        assert!(
            matches!(
                gemv::instantiate(&w, &bad, &caps),
                Err(Refusal::Schedule(_))
            ),
            "{bad:?}"
        );
    }
    let no_subgroups = DeviceCaps {
        subgroup_arithmetic: false,
        ..caps.clone()
    };
    let sg = GemvSchedule {
        reduce: Reduce::Subgroup,
        ..s
    };
    assert!(matches!(
        gemv::instantiate(&w, &sg, &no_subgroups),
        Err(Refusal::MissingFeature(_))
    ));
    assert!(gemv::search_space(&w, &no_subgroups)
        .iter()
        .all(|s| s.reduce == Reduce::Shared));
}

#[test]
fn sampled_spaces_pass_spirv_val() {
    require_spirv_val();
    let profiles = [("desktop", desktop_vk12()), ("mali", mali_vk12())];
    let mut items = Vec::new();
    for (_, caps) in &profiles {
        for (i, w) in workloads().iter().enumerate() {
            for s in gemv::search_space(w, caps).iter().skip(i).step_by(23) {
                items.push((*w, *s, caps.clone()));
            }
        }
    }
    let failures = parallel(&items, |(w, s, caps)| {
        let k = gemv::instantiate(w, s, caps).map_err(|e| format!("{s:?} refused: {e}"))?;
        spirv_val(&k.spirv, "vulkan1.2").map_err(|e| {
            let dis = spirv_dis(&k.spirv);
            format!("{}: {e}\n{}", k.meta.name, &dis[..dis.len().min(3000)])
        })
    });
    eprintln!("validated {} modules", items.len());
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        items.len(),
        failures[..failures.len().min(2)].join("\n\n")
    );
}
