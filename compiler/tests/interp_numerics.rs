//! Numerics of the generated kernels, run by the IR interpreter (no GPU): the dequantization
//! fragments are bit-exact to the CPU dequantizers, and GEMM kernels across the search space
//! agree with the CPU reference, including N-slicing and a runtime m other than the
//! workload's. The interpreter also fails on any out-of-bounds access, so these tests check
//! that the clamped loads never leave the (4-byte padded) buffers.

mod common;

use common::{desktop_vk12, mali_vk12};
use half::f16;
use rocky_compiler::dequant::cpu::dequantize;
use rocky_compiler::dequant::ir::{open_unit, open_units, WeightRows};
use rocky_compiler::dequant::layout::{repack, to_device};
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type};
use rocky_compiler::templates::gemm::reference::{compare, reference};
use rocky_compiler::templates::gemm::{
    self, ActType, Epilogue, GemmPush, GemmSchedule, GemmWorkload, Math, NSlice,
};
use rocky_compiler::templates::peak::{PeakConfig, PeakPrecision};
use rocky_compiler::{testdata, DeviceCaps, WeightFormat, WeightLayout};

/// Tensor bytes padded to a whole number of u32 words (the binding contract).
fn padded(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().div_ceil(4) * 4, 0);
    v
}

/// One invocation per unit of an n×k tensor: writes its 8 chunks as f32 (out_f32), as
/// f16 (out_f16, only with `f16`) and, for quantized formats, its packed int8 words and
/// scales (lo, hi, min).
///
/// With `group`, invocation g opens units `g·group ..` together with `open_units` (wide loads)
/// and writes each of them to the same slots as the one-unit-per-invocation kernel.
fn dequant_kernel(
    format: WeightFormat,
    layout: WeightLayout,
    k: u32,
    with_f16: bool,
    group: Option<u32>,
) -> Module {
    let b = KernelBuilder::new("dequant_probe", [1, 1, 1]);
    let welem = match layout {
        WeightLayout::Aligned => rocky_compiler::dequant::words::quad_type(),
        WeightLayout::Gguf => Type::U32,
    };
    let w = b.buffer(0, "w", welem, Access::ReadOnly);
    let out = b.buffer(1, "out_f32", Type::vec(Scalar::F32, 4), Access::WriteOnly);
    let out_h = b.buffer(2, "out_f16", Type::vec(Scalar::F32, 4), Access::WriteOnly);
    let words = b.buffer(3, "words", Type::U32, Access::WriteOnly);
    let scales = b.buffer(4, "scales", Type::vec(Scalar::F32, 4), Access::WriteOnly);
    let units_per_row = k / 32;
    let count = group.unwrap_or(1);
    let g0 = b.muli(b.builtin(Builtin::WorkgroupId(0)), count);
    let row = b.div(g0, b.c_u32(units_per_row));
    let u = b.rem(g0, b.c_u32(units_per_row));
    // The fragments' row_off: bytes (GGUF), 16-byte units (aligned).
    let unit_bytes = if layout == WeightLayout::Aligned {
        16
    } else {
        1
    };
    let row_off = b.muli(
        row,
        (layout.row_bytes(format, u64::from(k)) / unit_bytes) as u32,
    );
    let rows = WeightRows {
        buffer: w,
        format,
        layout,
    };
    let units = match group {
        Some(count) => open_units(&b, rows, row_off, u, count, with_f16),
        None => vec![open_unit(&b, rows, row_off, u, with_f16)],
    };
    for (ul, unit) in units.iter().enumerate() {
        let g = b.addi(g0, ul as u32);
        for c in 0..8 {
            let slot = b.addi(b.muli(g, 8), c);
            let cv = b.c_u32(c);
            let (f, h, q) = match group {
                Some(_) => (
                    unit.chunk_f32_at(&b, c),
                    with_f16.then(|| unit.chunk_f16_at(&b, c)),
                    format.is_quantized().then(|| unit.word_i8_at(&b, c)),
                ),
                None => (
                    unit.chunk_f32(&b, cv),
                    with_f16.then(|| unit.chunk_f16(&b, cv)),
                    format.is_quantized().then(|| unit.word_i8(&b, cv)),
                ),
            };
            b.store(out, slot, f);
            if let Some(h) = h {
                b.store(out_h, slot, b.convert(h, Type::vec(Scalar::F32, 4)));
            }
            if let Some(q) = q {
                b.store(words, slot, q);
            }
        }
        if format.is_quantized() {
            let s = unit.int8_scales();
            let zero = b.c_f32(0.0);
            b.store(
                scales,
                g,
                b.construct(&[s.lo, s.hi.unwrap_or(s.lo), s.min.unwrap_or(zero), zero]),
            );
        }
    }
    b.finish()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn dequant_fragments_are_bit_exact_to_the_cpu_dequantizers() {
    for format in WeightFormat::ALL {
        check_dequant(format, WeightLayout::Gguf, 768, None);
    }
}

#[test]
fn aligned_layout_units_are_bit_exact_to_the_cpu_dequantizers() {
    let aligned = WeightLayout::Aligned;
    for format in WeightFormat::ALL
        .into_iter()
        .filter(|&f| aligned.supports(f))
    {
        // 768: Q8_0/Q5_0 rows of 3 whole groups, Q6_K rows of one partial group of 3.
        for group in [None, Some(1), Some(2), Some(4), Some(8)] {
            check_dequant(format, aligned, 768, group);
        }
        check_dequant(format, aligned, 1536, Some(16));
        if format.block_elems() == 32 {
            // A partial last group of 7 blocks.
            check_dequant(format, aligned, 736, None);
            check_dequant(format, aligned, 736, Some(1));
        } else {
            check_dequant(format, aligned, 2816, Some(2));
        }
    }
}

#[test]
fn wide_load_groups_are_bit_exact_to_the_cpu_dequantizers() {
    for format in WeightFormat::ALL.into_iter().filter(|f| f.is_quantized()) {
        for count in [1, 2, 4, 8] {
            check_dequant(format, WeightLayout::Gguf, 768, Some(count));
        }
        // Groups of two super-blocks.
        check_dequant(format, WeightLayout::Gguf, 1536, Some(16));
        if format.block_elems() == 32 {
            // An odd number of blocks: the last run ends 2 bytes into the padded final word.
            check_dequant(format, WeightLayout::Gguf, 736, Some(1));
        }
    }
}

fn check_dequant(format: WeightFormat, layout: WeightLayout, k: usize, group: Option<u32>) {
    {
        // An odd number of blocks in total, so the last one ends 2 bytes into its final word.
        let n = 3usize;
        let raw = testdata::random_weights(format, n, k, 11);
        let want = dequantize(format, &raw, n, k).unwrap();
        let units = n * k / 32;
        let mut wbuf = match layout {
            WeightLayout::Gguf => padded(&raw),
            WeightLayout::Aligned => repack(format, k as u64, n as u64, &raw).unwrap(),
        };

        let (mut out, mut out_h) = (vec![0u8; units * 128], vec![0u8; units * 128]);
        let (mut words, mut scales) = (vec![0u8; units * 32], vec![0u8; units * 16]);
        let module = dequant_kernel(format, layout, k as u32, true, group);
        let groups = units as u32 / group.unwrap_or(1);
        execute(
            &module,
            &mut [
                BufferData {
                    binding: 0,
                    bytes: &mut wbuf,
                },
                BufferData {
                    binding: 1,
                    bytes: &mut out,
                },
                BufferData {
                    binding: 2,
                    bytes: &mut out_h,
                },
                BufferData {
                    binding: 3,
                    bytes: &mut words,
                },
                BufferData {
                    binding: 4,
                    bytes: &mut scales,
                },
            ],
            &[],
            [groups, 1, 1],
            4,
        )
        .unwrap_or_else(|e| panic!("{format} {layout} (group {group:?}): {e}"));
        let got = f32s(&out);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{format} {layout} {group:?}: element {i}: {g} vs {w}"
            );
        }
        // f16 chunks: within f16 rounding of the exact value.
        for (i, (h, w)) in f32s(&out_h).iter().zip(&want).enumerate() {
            let tol = 2f32.powi(-10) * w.abs() + 2f32.powi(-9) * max_term(format, &raw, k, i);
            assert!(
                (h - w).abs() <= tol,
                "{format}: f16 element {i}: {h} vs {w}"
            );
        }
        if format.is_quantized() {
            // The int8 view reproduces the same values: scale(q) * q - min.
            let sc = f32s(&scales);
            for (i, w) in want.iter().enumerate() {
                let (unit, e) = (i / 32, i % 32);
                let word =
                    u32::from_le_bytes(words[(unit * 8 + e / 4) * 4..][..4].try_into().unwrap());
                let q = f32::from((word >> (8 * (e % 4))) as u8 as i8);
                let scale = if e < 16 {
                    sc[unit * 4]
                } else {
                    sc[unit * 4 + 1]
                };
                let v = scale * q - sc[unit * 4 + 2];
                assert_eq!(
                    v.to_bits(),
                    w.to_bits(),
                    "{format}: int8 view of element {i}"
                );
            }
        }
    }
}

/// Largest term of the f16 dequantization formula of element i (its rounding scale).
fn max_term(format: WeightFormat, raw: &[u8], k: usize, i: usize) -> f32 {
    let qmax = match format {
        WeightFormat::Q4K => 15.0,
        WeightFormat::Q5K => 31.0,
        _ => return 0.0,
    };
    let row_bytes = format.row_bytes(k as u64) as usize;
    let (row, e) = (i / k, i % k);
    let block = &raw[row * row_bytes + (e / 256) * format.block_bytes() as usize..];
    let dmin = f16::from_le_bytes([block[2], block[3]]).to_f32();
    dmin * 63.0 + f16::from_le_bytes([block[0], block[1]]).to_f32() * 63.0 * qmax
}

struct Inputs {
    x: Vec<f32>,
    weights: Vec<u8>,
    bias: Option<Vec<f32>>,
    residual: Option<Vec<f32>>,
}

fn inputs(w: &GemmWorkload, seed: u64) -> Inputs {
    // SwiGLU: a gate and an up tensor, combined the way the runtime uploads them.
    let rows = w.n as usize;
    let tensor = |seed| testdata::random_weights(w.weight, rows, w.k as usize, seed);
    let weights = match w.epilogue {
        Epilogue::SwiGlu => gemm::combine_gate_up(&tensor(seed + 1), &tensor(seed + 3)).unwrap(),
        _ => tensor(seed + 1),
    };
    Inputs {
        x: testdata::random_activations((w.m * w.k) as usize, seed),
        weights,
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

/// Runs the kernel in the given N-slices (weights bound per slice) and returns Y as f32.
fn run_gemm(
    w: &GemmWorkload,
    s: &GemmSchedule,
    caps: &DeviceCaps,
    inp: &Inputs,
    slices: &[NSlice],
) -> Vec<f32> {
    let k = gemm::instantiate(w, s, caps).unwrap();
    let module = gemm::kernel_ir(w, s);
    assert_eq!(module.name, k.meta.name);
    let mut x = act_bytes(&inp.x, w.act);
    let mut y = vec![0u8; (w.m * w.n * w.act_bytes()) as usize];
    let mut bias = inp.bias.as_ref().map(|b| act_bytes(b, ActType::F32));
    let mut residual = inp.residual.as_ref().map(|r| act_bytes(r, w.act));
    // Split-K across the grid: the GEMM writes f32 partial sums (and binds no bias), the
    // reduce kernel adds them up with the bias into Y.
    // With `last_group_reduces` the GEMM binds Y, its partials and tile counters, and
    // reduces itself.
    let in_place = s.k_groups > 1 && s.last_group_reduces;
    let split = s.k_groups > 1 && !in_place;
    let mut partials = vec![0u8; 4 * gemm::split_k::scratch_values(w, s) as usize];
    let partials_len = partials.len();
    // The weights in the workload's layout, all their rows (with SwiGLU the combined gate/up
    // tensor, repacked row by row as the executor uploads it); the inputs and the reference
    // are GGUF.
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
        assert_eq!(wslice.len() as u64, slice.weight_range);
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
                bytes: if split { &mut partials } else { &mut y },
            },
        ];
        if let (Some(b), false) = (bias.as_mut(), split) {
            bufs.push(BufferData {
                binding: 3,
                bytes: b,
            });
        }
        if let (Some(r), false) = (residual.as_mut(), split) {
            bufs.push(BufferData {
                binding: 4,
                bytes: r,
            });
        }
        let grid = gemm::dispatch_grid_for(w.m, slice.n * w.epilogue.rows_per_column(), s);
        // Non-zero garbage in the partials: the last group must read only what this
        // dispatch wrote.
        let mut in_place_partials = vec![0x7fu8; partials_len];
        let mut counters = vec![0u8; 4 * gemm::interface::counters_of(grid) as usize];
        if in_place {
            bufs.push(BufferData {
                binding: gemm::interface::BINDING_IN_PLACE_PARTIALS,
                bytes: &mut in_place_partials,
            });
            bufs.push(BufferData {
                binding: gemm::interface::BINDING_TILE_COUNTERS,
                bytes: &mut counters,
            });
        }
        let push = GemmPush::for_slice(w, slice).to_bytes();
        execute(&module, &mut bufs, &push, grid, caps.subgroup_size)
            .unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
        drop(bufs);
        assert!(
            counters.iter().all(|&c| c == 0),
            "{}: the tile counters were not left at zero",
            k.meta.name
        );
    }
    if split {
        let reduce = gemm::split_k::reduce_ir(w, s);
        assert!(gemm::split_k::instantiate_reduce(w, s, caps).is_ok());
        let mut bufs = vec![
            BufferData {
                binding: gemm::split_k::BINDING_PARTIALS,
                bytes: &mut partials,
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
        let push = gemm::split_k::reduce_push(w).to_bytes();
        execute(
            &reduce,
            &mut bufs,
            &push,
            gemm::split_k::reduce_grid(w, w.m),
            caps.subgroup_size,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", reduce.name));
    }
    match w.act {
        ActType::F32 => f32s(&y),
        ActType::F16 => y
            .chunks(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    }
}

fn check(w: &GemmWorkload, s: &GemmSchedule, caps: &DeviceCaps, inp: &Inputs) {
    let r = gemm::reference::reference_with_epilogue(
        w,
        s.math,
        &inp.x,
        &inp.weights,
        inp.bias.as_deref(),
        inp.residual.as_deref(),
    )
    .unwrap();
    let whole = gemm::n_slices(w, u64::MAX, 16).unwrap();
    let y = run_gemm(w, s, caps, inp, &whole);
    if let Err(e) = compare(w, s, &y, &r) {
        panic!("{}: {e}", s.name(w));
    }
}

fn test_workloads() -> Vec<GemmWorkload> {
    let w = |weight, m, act, bias| GemmWorkload {
        m,
        n: 40,
        k: 512,
        act,
        weight,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    vec![
        w(WeightFormat::F32, 5, ActType::F32, true),
        w(WeightFormat::F16, 3, ActType::F16, false),
        w(WeightFormat::Q8_0, 9, ActType::F16, true),
        w(WeightFormat::Q5_0, 5, ActType::F32, false),
        w(WeightFormat::Q4K, 7, ActType::F32, true),
        w(WeightFormat::Q6K, 1, ActType::F16, true),
        w(WeightFormat::Q4_0, 6, ActType::F32, true),
        w(WeightFormat::Q5K, 4, ActType::F16, false),
        w(WeightFormat::Q4_1, 5, ActType::F32, true),
        w(WeightFormat::Q5_1, 3, ActType::F16, false),
        w(WeightFormat::BF16, 4, ActType::F32, true),
        w(WeightFormat::BF16, 3, ActType::F16, false),
        w(WeightFormat::IQ4NL, 5, ActType::F32, true),
        w(WeightFormat::IQ4XS, 3, ActType::F16, false),
        // The aligned layout: a partial last group (Q8_0: 14 blocks, Q6_K: 2 super-blocks).
        aligned(GemmWorkload {
            k: 448,
            ..w(WeightFormat::Q8_0, 6, ActType::F32, false)
        }),
        aligned(w(WeightFormat::Q5_0, 3, ActType::F16, true)),
        aligned(w(WeightFormat::Q6K, 5, ActType::F32, false)),
    ]
}

fn aligned(w: GemmWorkload) -> GemmWorkload {
    GemmWorkload {
        layout: WeightLayout::Aligned,
        ..w
    }
}

#[test]
fn gemm_kernels_across_the_space_match_the_reference() {
    let caps = desktop_vk12();
    let mut checked = 0;
    let mut maths = std::collections::BTreeSet::new();
    for (i, w) in test_workloads().iter().enumerate() {
        let inp = inputs(w, 100 + i as u64);
        let space = gemm::search_space(w, &caps);
        // A spread-out sample of the space (a prime stride walks through every axis), plus
        // the defaults of both device classes.
        // Each with the device it was made for (the Mali default shares X rows across a
        // subgroup of 16, which the interpreter then models).
        let mali = mali_vk12();
        let mut sample: Vec<(GemmSchedule, &DeviceCaps)> =
            space.iter().step_by(53).map(|s| (*s, &caps)).collect();
        sample.push((gemm::default_schedule(w, &caps), &caps));
        sample.push((gemm::default_schedule(w, &mali), &mali));
        for (s, dev) in &sample {
            check(w, s, dev, &inp);
            maths.insert((s.math, s.accumulate, s.stage_a, s.stage_b, s.split_k > 1));
            checked += 1;
        }
    }
    eprintln!(
        "checked {checked} kernels, {} distinct (math, acc, staging, split) combinations",
        maths.len()
    );
    assert!(
        maths.len() >= 20,
        "the sample must reach the variants: {maths:?}"
    );
}

/// `pack_a_f16` (X broadcast as f16 pairs): the packed kernel on X computes what the same
/// schedule unpacked computes on X rounded to f16 (exactly: the same products in the same
/// order, so a swapped half or lane shows), and activations beyond f16's range give finite outputs: those of
/// X clamped to ±65504.
#[test]
fn packed_broadcasts_compute_the_product_of_x_rounded_to_f16() {
    let mali = mali_vk12();
    let mut checked = 0;
    for w in test_workloads().iter().filter(|w| w.act == ActType::F32) {
        let packed = gemm::default_schedule(w, &mali);
        if !packed.pack_a_f16 {
            continue;
        }
        let plain = GemmSchedule {
            pack_a_f16: false,
            half_units: false,
            packed_w: 0,
            ..packed
        };
        let mut inp = inputs(w, 300);
        // Some activations past f16's range (an outlier channel).
        for (i, v) in inp.x.iter_mut().enumerate() {
            if i % 97 == 0 {
                *v = if i % 2 == 0 { 1.0e6 } else { -7.0e4 };
            }
        }
        let whole = gemm::n_slices(w, u64::MAX, 16).unwrap();
        let got = run_gemm(w, &packed, &mali, &inp, &whole);
        let rounded = Inputs {
            x: inp
                .x
                .iter()
                .map(|v| f16::from_f32(v.clamp(-65504.0, 65504.0)).to_f32())
                .collect(),
            weights: inp.weights.clone(),
            bias: inp.bias.clone(),
            residual: inp.residual.clone(),
        };
        let want = run_gemm(w, &plain, &mali, &rounded, &whole);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!(g.is_finite(), "{}: y[{i}] = {g}", packed.name(w));
            // The same products in the same order: equal, not just close.
            assert_eq!(
                g,
                e,
                "{}: y[{i}] against the unpacked kernel on f16-rounded X",
                packed.name(w)
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 4,
        "the Mali default packs f32 activations ({checked} checked)"
    );
}

#[test]
fn every_path_of_the_template_matches_the_reference() {
    // Hand-picked schedules so each branch of the kernel is exercised for each format.
    let caps = desktop_vk12();
    let base = GemmSchedule {
        bm: 8,
        bn: 16,
        bk: 64,
        tm: 2,
        tn: 2,
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
        accumulate: rocky_compiler::Precision::F32,
        math: Math::FmaF32,
    };
    for (i, w) in test_workloads().iter().enumerate() {
        let inp = inputs(w, 200 + i as u64);
        let mut variants = vec![];
        let maths = [
            (Math::FmaF32, rocky_compiler::Precision::F32, 1),
            (Math::FmaF32, rocky_compiler::Precision::F32, 4),
            (Math::FmaF16Packed, rocky_compiler::Precision::F32, 2),
            (Math::FmaF16Packed, rocky_compiler::Precision::F16, 4),
            (Math::Int8Dot, rocky_compiler::Precision::F32, 4),
        ];
        for (math, accumulate, vector_width) in maths {
            if math == Math::Int8Dot && !w.weight.is_quantized() {
                continue;
            }
            for (stage_a, stage_b) in [(false, false), (true, false), (false, true), (true, true)] {
                for split_k in [1, 2] {
                    variants.push(GemmSchedule {
                        math,
                        accumulate,
                        vector_width,
                        stage_a,
                        stage_b,
                        split_k,
                        ..base
                    });
                    // Mixed precision folding its f16 partial sums once per slab.
                    let folded = GemmSchedule {
                        math,
                        accumulate,
                        vector_width,
                        stage_a,
                        stage_b,
                        split_k,
                        fold_per_slab: true,
                        ..base
                    };
                    if folded.validate(w, &caps).is_ok() {
                        variants.push(folded);
                    }
                }
                // Wide weight loads, with one, two and eight units per slab, and two slabs
                // per K-loop iteration.
                for (bk, k_unroll) in [(32, 1), (64, 1), (256, 1), (64, 2)] {
                    let s = GemmSchedule {
                        math,
                        accumulate,
                        vector_width,
                        stage_a,
                        stage_b,
                        bk,
                        wide_loads: true,
                        k_unroll,
                        ..base
                    };
                    if s.validate(w, &caps).is_ok() {
                        variants.push(s);
                    }
                }
            }
        }
        for s in &variants {
            check(w, s, &caps, &inp);
        }
    }
}

/// `share_headers` (aligned Q8_0: one header quad per group and K-loop iteration): 2, 4 and
/// 8 units per iteration (a lane picked by the iteration's block, and constant lanes), in
/// both FMA maths and the int8 path, over rows of 3 whole groups and rows ending in a
/// partial group, with the K loop split across the grid.
#[test]
fn shared_group_headers_match_the_reference() {
    let caps = desktop_vk12();
    let mut checked = 0;
    for (i, (m, k)) in [(6, 768), (3, 1280), (5, 640)].into_iter().enumerate() {
        let w = GemmWorkload {
            m,
            n: 24,
            k,
            act: ActType::F32,
            weight: WeightFormat::Q8_0,
            layout: WeightLayout::Aligned,
            bias: i == 1,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        };
        let inp = inputs(&w, 400 + i as u64);
        for (math, accumulate, vector_width) in [
            (Math::FmaF32, rocky_compiler::Precision::F32, 1),
            (Math::FmaF16Packed, rocky_compiler::Precision::F32, 2),
            (Math::Int8Dot, rocky_compiler::Precision::F32, 4),
        ] {
            for (bk, k_unroll, k_groups) in
                [(32, 2, 1), (64, 2, 1), (32, 4, 1), (64, 4, 1), (64, 2, 2)]
            {
                let s = GemmSchedule {
                    bm: 8,
                    bn: 16,
                    bk,
                    tm: 2,
                    tn: 2,
                    split_k: 1,
                    vector_width,
                    stage_a: false,
                    stage_b: false,
                    shuffle_a: false,
                    k_groups,
                    wide_loads: true,
                    k_unroll,
                    share_headers: true,
                    last_group_reduces: false,
                    fold_per_slab: false,
                    pack_a_f16: false,
                    half_units: false,
                    packed_w: 0,
                    accumulate,
                    math,
                };
                if s.validate(&w, &caps).is_ok() {
                    check(&w, &s, &caps, &inp);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 30, "only {checked} schedules validated");
}

/// The fused epilogues (SwiGLU of a combined gate/up tensor, the residual add), each through
/// the GEMM's own store, the in-workgroup split-K reduction and the split-K reduce kernel,
/// against the reference composed from the unfused parts; in both weight layouts
/// (`test_workloads` has aligned ones: the combined gate/up tensor repacked row by row).
#[test]
fn fused_epilogues_match_the_composed_reference() {
    let caps = desktop_vk12();
    let base = GemmSchedule {
        bm: 8,
        bn: 16,
        bk: 64,
        tm: 2,
        tn: 2,
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
        accumulate: rocky_compiler::Precision::F32,
        math: Math::FmaF32,
    };
    let (mut checked, mut aligned) = (0, 0);
    for (i, plain) in test_workloads().iter().enumerate() {
        for epilogue in [Epilogue::SwiGlu, Epilogue::Residual] {
            let w = GemmWorkload {
                epilogue,
                bias: plain.bias && epilogue != Epilogue::SwiGlu,
                ..*plain
            };
            let inp = inputs(&w, 300 + i as u64);
            let mut variants = vec![
                base,
                GemmSchedule {
                    tn: 4,
                    bn: 32,
                    ..base
                },
                GemmSchedule { split_k: 2, ..base },
                GemmSchedule {
                    stage_b: true,
                    stage_a: true,
                    ..base
                },
                GemmSchedule {
                    k_groups: 2,
                    ..base
                },
                GemmSchedule {
                    k_groups: 4,
                    bk: 32,
                    tn: 4,
                    bn: 32,
                    stage_b: true,
                    ..base
                },
                GemmSchedule {
                    wide_loads: true,
                    ..base
                },
                GemmSchedule {
                    wide_loads: true,
                    stage_b: true,
                    ..base
                },
                // The last group of each tile reduces (no reduce kernel): alone, with
                // threads split along K too, and with wide tiles.
                GemmSchedule {
                    k_groups: 2,
                    last_group_reduces: true,
                    ..base
                },
                GemmSchedule {
                    k_groups: 2,
                    split_k: 2,
                    last_group_reduces: true,
                    ..base
                },
                GemmSchedule {
                    k_groups: 4,
                    bk: 32,
                    tn: 4,
                    bn: 32,
                    stage_b: true,
                    last_group_reduces: true,
                    ..base
                },
            ];
            if w.weight.is_quantized() {
                variants.push(GemmSchedule {
                    math: Math::Int8Dot,
                    vector_width: 4,
                    ..base
                });
                variants.push(GemmSchedule {
                    math: Math::Int8Dot,
                    vector_width: 4,
                    stage_a: true,
                    stage_b: true,
                    k_groups: 2,
                    ..base
                });
                variants.push(GemmSchedule {
                    math: Math::Int8Dot,
                    vector_width: 4,
                    k_groups: 4,
                    last_group_reduces: true,
                    ..base
                });
            }
            variants.push(GemmSchedule {
                math: Math::FmaF16Packed,
                vector_width: 2,
                ..base
            });
            variants.push(gemm::default_schedule(&w, &caps));
            base.validate(&w, &caps).unwrap();
            // (wide loads and int8 need quantized weights)
            for s in variants.iter().filter(|s| s.validate(&w, &caps).is_ok()) {
                check(&w, s, &caps, &inp);
                checked += 1;
                aligned += usize::from(w.layout == WeightLayout::Aligned);
            }
        }
        // An odd tn cannot pair gate and up columns.
        let w = GemmWorkload {
            epilogue: Epilogue::SwiGlu,
            bias: false,
            ..*plain
        };
        assert!(GemmSchedule { tn: 1, ..base }.validate(&w, &caps).is_err());
    }
    eprintln!("checked {checked} fused kernels, {aligned} in the aligned layout");
    assert!(checked >= 100, "only {checked} fused kernels validated");
    assert!(
        aligned >= 30,
        "only {aligned} aligned-layout fused kernels validated"
    );
}

#[test]
fn n_slices_and_runtime_m_compute_the_same_product() {
    let caps = desktop_vk12();
    let w = GemmWorkload {
        m: 6,
        n: 50,
        k: 256,
        act: ActType::F32,
        weight: WeightFormat::Q6K,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: true,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    let s = GemmSchedule {
        bm: 4,
        bn: 16,
        bk: 64,
        tm: 1,
        tn: 2,
        split_k: 2,
        vector_width: 4,
        stage_a: true,
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
        accumulate: rocky_compiler::Precision::F32,
        math: Math::Int8Dot,
    };
    let inp = inputs(&w, 7);
    let r = reference(&w, s.math, &inp.x, &inp.weights, inp.bias.as_deref()).unwrap();
    // 4 rows of 210 B per slice: several dispatches with sub-range weight bindings.
    let slices = gemm::n_slices(&w, 4 * 210 + 3, 4).unwrap();
    assert!(slices.len() > 10);
    let y = run_gemm(&w, &s, &caps, &inp, &slices);
    compare(&w, &s, &y, &r).unwrap();
    // A kernel instantiated for m = 512 computes m = 6 from its push constants.
    let big = GemmWorkload { m: 512, ..w };
    let k_big = gemm::instantiate(&big, &s, &caps).unwrap();
    let k_small = gemm::instantiate(&w, &s, &caps).unwrap();
    assert_eq!(
        k_big.spirv, k_small.spirv,
        "m is a push constant, not compiled in"
    );
}

#[test]
fn peak_kernel_computes_its_fma_chains() {
    let cfg = PeakConfig {
        precision: PeakPrecision::F32,
        chains: 3,
        unroll: 4,
        workgroup_size: 8,
    };
    let caps = DeviceCaps::baseline();
    rocky_compiler::templates::peak::instantiate(&cfg, &caps).unwrap();
    let module = rocky_compiler::templates::peak::kernel_ir(&cfg);
    let mut out = vec![0u8; 16 * 4];
    let (iters, mul, add) = (5u32, 0.999f32, 0.001f32);
    let mut push = iters.to_le_bytes().to_vec();
    push.extend(mul.to_le_bytes());
    push.extend(add.to_le_bytes());
    execute(
        &module,
        &mut [BufferData {
            binding: 0,
            bytes: &mut out,
        }],
        &push,
        [2, 1, 1],
        4,
    )
    .unwrap();
    for (gid, got) in f32s(&out).iter().enumerate() {
        let seed = gid as f32 * 1e-6;
        let mut sum = 0f32;
        for c in 0..3 {
            let mut a = seed + c as f32 * 1e-3;
            for _ in 0..iters * 4 {
                a = a.mul_add(mul, add);
            }
            sum += a;
        }
        assert_eq!(got.to_bits(), sum.to_bits(), "invocation {gid}");
    }
    assert_eq!(cfg.flops_per_invocation(iters), 2 * 3 * 4 * 5);
}

#[test]
fn interpreter_catches_out_of_bounds_and_bad_barriers() {
    use rocky_compiler::ir::interp::InterpError;
    let b = KernelBuilder::new("oob", [4, 1, 1]);
    let y = b.buffer(0, "y", Type::U32, Access::WriteOnly);
    let i = b.builtin(Builtin::LocalInvocationIndex);
    b.store(y, b.addi(i, 1), i);
    let m = b.finish();
    let mut buf = vec![0u8; 16];
    let e = execute(
        &m,
        &mut [BufferData {
            binding: 0,
            bytes: &mut buf,
        }],
        &[],
        [1, 1, 1],
        4,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::OutOfBounds {
                index: 4,
                len: 4,
                ..
            }
        ),
        "{e}"
    );

    let b = KernelBuilder::new("barrier", [4, 1, 1]);
    let i = b.builtin(Builtin::LocalInvocationIndex);
    b.if_(b.lt(i, b.c_u32(2)), || b.barrier());
    let m = b.finish();
    assert!(matches!(
        execute(&m, &mut [], &[], [1, 1, 1], 4),
        Err(InterpError::Undefined { .. })
    ));

    let b = KernelBuilder::new("shift", [1, 1, 1]);
    let y = b.buffer(0, "y", Type::U32, Access::WriteOnly);
    b.store(y, b.c_u32(0), b.shl(b.c_u32(1), b.c_u32(32)));
    let m = b.finish();
    let mut buf = vec![0u8; 4];
    assert!(matches!(
        execute(
            &m,
            &mut [BufferData {
                binding: 0,
                bytes: &mut buf
            }],
            &[],
            [1, 1, 1],
            4
        ),
        Err(InterpError::Undefined { .. })
    ));
}

/// The Mali int8 defaults in half units (`half_units`: 4×4 micro-tiles in 64×64 tiles from 64
/// rows, 2×4 in 16×32 below) against the CPU reference in the IR interpreter: formats with a
/// min term (Q4_K, Q5_K: run first, in a block of its own), with a second scale (Q6_K) and
/// with one, both layouts, ragged rows and columns (partial tiles, clamped rows), bias,
/// residual and SwiGLU epilogues.
#[test]
fn mali_half_unit_int8_defaults_match_the_reference() {
    use Epilogue::{None as Plain, Residual as Res, SwiGlu};
    use WeightFormat as F;
    let mali = mali_vk12();
    let mut tiles = std::collections::BTreeSet::new();
    let mut checked = 0;
    let (gguf, aligned) = (WeightLayout::Gguf, WeightLayout::Aligned);
    for (i, (weight, layout, m, n, bias, epilogue)) in [
        (F::Q4K, gguf, 70, 72, true, Plain),
        (F::Q5K, gguf, 64, 40, false, Res),
        (F::Q6K, aligned, 66, 64, false, Plain),
        (F::Q5_0, aligned, 65, 40, true, Plain),
        (F::Q4K, gguf, 64, 40, false, SwiGlu),
        (F::Q4_0, gguf, 64, 24, false, Res),
        (F::IQ4XS, gguf, 64, 40, false, Plain),
        (F::Q4K, gguf, 20, 40, true, Plain),
        (F::Q6K, aligned, 33, 40, false, Res),
    ]
    .into_iter()
    .enumerate()
    {
        let w = GemmWorkload {
            m,
            n,
            k: 512,
            act: ActType::F32,
            weight,
            layout,
            bias,
            epilogue,
            rms_norm_eps_bits: None,
        };
        let s = gemm::default_schedule(&w, &mali);
        assert!(
            s.math == Math::Int8Dot && s.half_units,
            "{w:?}: the Mali default is {s:?}"
        );
        // Q4_K's 4×4 tile stages W as packed nibbles (`packed_w`).
        assert_eq!(
            s.packed_w > 0,
            weight == F::Q4K && s.tm == 4,
            "{w:?}: the Mali default is {s:?}"
        );
        tiles.insert((s.bm, s.bn, s.tm, s.tn));
        check(&w, &s, &mali, &inputs(&w, 700 + i as u64));
        checked += 1;
    }
    assert_eq!(checked, 9);
    assert!(
        tiles.contains(&(64, 64, 4, 4)) && tiles.contains(&(16, 32, 2, 4)),
        "{tiles:?}"
    );
}

/// Half-unit int8 tiles outside the Mali defaults, against the CPU reference in the IR
/// interpreter: several rows per thread with the weights staged as word runs (`wide_loads`,
/// whose staging writes the thread-major scale tiles of `GemmSchedule::thread_scales` too),
/// and one row per thread (no thread-major scales, the closing barrier kept), with a min
/// term (Q4_K), a second scale (Q6_K) and one (Q5_0), over several K slabs; and W staged as
/// packed nibbles (`packed_w`: Q4_K and Q4_1, 4×4 and 2×4 tiles, all or some columns).
#[test]
fn half_unit_int8_tiles_with_and_without_thread_scales_match_the_reference() {
    use WeightFormat as F;
    let mali = mali_vk12();
    let mut checked = 0;
    for (i, ((weight, layout, wide_loads, bm, bn, tm, tn), packed_w)) in [
        (F::Q4K, WeightLayout::Gguf, true, 64, 64, 4, 4),
        (F::Q6K, WeightLayout::Aligned, true, 32, 32, 2, 4),
        (F::Q5_0, WeightLayout::Aligned, false, 16, 64, 4, 2),
        (F::Q4K, WeightLayout::Gguf, false, 16, 64, 1, 4),
        (F::Q6K, WeightLayout::Aligned, true, 16, 64, 1, 4),
        // Min terms taken after each half from the fragments' sums of quants (`min_planes`):
        // Q5_K, Q4_K without wide loads in the m32 default's shape, and three rows.
        (F::Q5K, WeightLayout::Gguf, false, 64, 64, 4, 4),
        (F::Q4K, WeightLayout::Gguf, false, 16, 32, 2, 4),
        (F::Q4K, WeightLayout::Gguf, true, 48, 64, 3, 4),
        // W staged two threads per unit (`split_w_staging`): Q6_K's hi plane, a nibble
        // format's shared qs words, a one-row tile's packed scales (the Q4_K and Q5_K
        // tiles above without wide loads split too).
        (F::Q6K, WeightLayout::Aligned, false, 64, 64, 4, 4),
        (F::Q4_0, WeightLayout::Gguf, false, 64, 64, 4, 4),
        (F::Q6K, WeightLayout::Aligned, false, 16, 64, 1, 4),
    ]
    .into_iter()
    .map(|t| (t, 0))
    .chain([
        // W staged as packed nibbles, a pair of columns' half unit per 16-byte read, for
        // all of a thread's columns or the first pair (the rest as bytes): Q4_K (the Mali
        // default's tile, and 2×4 in 32×64), Q4_1 (a min term of its own format).
        ((F::Q4K, WeightLayout::Gguf, false, 64, 64, 4, 4), 2),
        ((F::Q4K, WeightLayout::Gguf, false, 64, 64, 4, 4), 1),
        ((F::Q4K, WeightLayout::Gguf, false, 32, 64, 2, 4), 2),
        ((F::Q4_1, WeightLayout::Gguf, false, 64, 64, 4, 4), 1),
    ])
    .enumerate()
    {
        let w = GemmWorkload {
            m: 37,
            n: 72,
            k: 512,
            act: ActType::F32,
            weight,
            layout,
            bias: true,
            epilogue: Epilogue::Residual,
            rms_norm_eps_bits: None,
        };
        let s = GemmSchedule {
            bm,
            bn,
            bk: 64,
            tm,
            tn,
            wide_loads,
            packed_w,
            ..gemm::default_schedule(&GemmWorkload { m: 512, ..w }, &mali)
        };
        assert!(packed_w == 0 || s.packs_w(&w), "{s:?}");
        assert!(s.half_units && s.math == Math::Int8Dot, "{s:?}");
        assert_eq!(s.thread_scales(), tm >= 2, "{s:?}");
        assert_eq!(
            s.split_w_staging(),
            !wide_loads && 2 * bn * 2 <= s.threads(),
            "{s:?}"
        );
        s.validate(&w, &mali)
            .unwrap_or_else(|e| panic!("{s:?} refused: {e}"));
        check(&w, &s, &mali, &inputs(&w, 800 + i as u64));
        checked += 1;
    }
    assert_eq!(checked, 15);
}

/// The prefill GEMMs of the synthesized Qwen2.5-0.5B and 3B Q4_K_M files (as `rocky synth`
/// quantizes them) at ubatch 512 and 64, and their one-row output projections and
/// projections (the last ubatch's rows), in the layout each device's defaults read.
fn model_gemms(caps: &DeviceCaps) -> Vec<GemmWorkload> {
    use Epilogue::{None as Plain, Residual, SwiGlu};
    use WeightFormat as F;
    // (hidden, kv width, ffn, attention format, v format, gate/up format, down format, output
    // format)
    let models = [
        (896, 128, 4864, F::Q5_0, F::Q5_0, F::Q5_0, F::Q4K, F::Q8_0),
        (2048, 256, 11008, F::Q4K, F::Q6K, F::Q4K, F::Q6K, F::Q6K),
    ];
    let mut out = Vec::new();
    for (h, kv, ff, attn, v, gate_up, down, output) in models {
        // (n, k, format, bias, epilogue)
        let shapes = [
            (h, h, attn, true, Plain),
            (kv, h, attn, true, Plain),
            (kv, h, v, true, Plain),
            (h, h, attn, false, Residual),
            (ff, h, gate_up, false, SwiGlu),
            (ff, h, gate_up, false, Plain),
            (h, ff, down, false, Residual),
            (151936, h, output, false, Plain),
        ];
        for m in [512, 64, 1] {
            for (n, k, weight, bias, epilogue) in shapes {
                out.push(GemmWorkload {
                    m,
                    n,
                    k,
                    act: ActType::F32,
                    weight,
                    layout: gemm::default_layout(weight, caps),
                    bias,
                    epilogue,
                    rms_norm_eps_bits: None,
                });
            }
        }
    }
    out
}

/// The families `--math` forces: (name, arithmetic, whether the device has it).
fn families(caps: &DeviceCaps) -> Vec<(&'static str, gemm::Arithmetic, bool)> {
    let a = |math, vector_width| gemm::Arithmetic {
        math,
        accumulate: rocky_compiler::Precision::F32,
        vector_width,
    };
    vec![
        ("f32", a(Math::FmaF32, 1), true),
        ("f16", a(Math::FmaF16Packed, 2), caps.float16),
        ("int8", a(Math::Int8Dot, 4), caps.integer_dot_product),
    ]
}

/// A forced math family gets a schedule built for it on every preset and model shape: of the
/// family, valid for the workload and the device (the register estimate within the budget),
/// and sharing each weight load among rows where the workload has them (the one-row tile that
/// the f32 fallback took before ran the H100's 3B prefill at 170 tok/s against 7157, issue
/// 36); where the device lacks the family (or int8 meets float weights) there is none.
#[test]
fn forced_math_families_take_schedules_built_for_them() {
    let presets = [
        ("desktop", DeviceCaps::desktop_all_features()),
        ("mali-g610", DeviceCaps::mali_g610()),
        ("baseline", DeviceCaps::baseline()),
        ("lavapipe", DeviceCaps::lavapipe()),
    ];
    let mut chosen = 0;
    for (device, caps) in &presets {
        for w in model_gemms(caps) {
            for (name, family, has) in families(caps) {
                let got = gemm::family_schedule(&w, caps, family);
                let Some(s) = got else {
                    assert!(!has, "{device} {name} {w:?}: no schedule");
                    continue;
                };
                assert!(
                    has,
                    "{device} {name}: the device lacks the family, got {s:?}"
                );
                assert!(family.holds(&s), "{device} {name} {w:?}: {s:?}");
                s.validate(&w, caps)
                    .unwrap_or_else(|e| panic!("{device} {name} {w:?}: {s:?}: {e}"));
                assert!(s.register_estimate() <= caps.register_budget);
                chosen += 1;
                // The device's own family keeps its default (the baseline's f32 one is a
                // one-row tile: its 128 threads per workgroup take no 16×16 tile).
                let default = gemm::default_schedule(&w, caps);
                if family.holds(&default) {
                    assert_eq!(s, default, "{device} {name} {w:?}");
                } else if w.m >= 64 {
                    assert!(s.bm >= 8, "{device} {name} {w:?}: a {}-row tile", s.bm);
                }
            }
        }
    }
    // desktop, Mali, lavapipe: 3 families; baseline: f32.
    assert!(chosen >= 48 * 10, "{chosen}");
}

/// The forced families' schedules on the model shapes compute what the CPU reference does
/// (with their own arithmetic's rounding), run by the IR interpreter. Each distinct kernel is
/// run once on the same kind of workload cut to one tile (m, n and k are push constants or
/// bound loops: the instructions are the real shape's).
#[test]
fn forced_math_family_kernels_match_the_reference() {
    let presets = [
        ("desktop", desktop_vk12()),
        ("mali-g610", mali_vk12()),
        ("baseline", DeviceCaps::baseline()),
        ("lavapipe", DeviceCaps::lavapipe()),
    ];
    let mut seen = std::collections::HashSet::new();
    let mut checked = 0;
    for (device, caps) in &presets {
        for w in model_gemms(caps) {
            for (name, family, _) in families(caps) {
                let Some(s) = gemm::family_schedule(&w, caps, family) else {
                    continue;
                };
                let small = one_tile(&w, &s);
                if !seen.insert((device.to_string(), s.name(&small))) {
                    continue;
                }
                // The cut workload's kernel is the real shape's, word for word.
                let real = gemm::instantiate(&w, &s, caps).unwrap().spirv;
                let cut = gemm::instantiate(&small, &s, caps)
                    .unwrap_or_else(|e| panic!("{device} {name} {small:?}: {s:?}: {e}"));
                assert_eq!(real, cut.spirv, "{device} {name} {w:?}: {s:?}");
                check(&small, &s, caps, &inputs(&small, 900 + checked));
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} forced-family kernels");
    assert!(checked >= 20, "{checked}");
}

/// `w` cut to one workgroup tile short of a row and a column (ragged edges, one workgroup per
/// K group: the interpreter's time grows with the tiles), and the fewest K slabs the
/// schedule's K groups and unrolling take in whole weight blocks.
fn one_tile(w: &GemmWorkload, s: &GemmSchedule) -> GemmWorkload {
    let step = s.bk * s.k_unroll * s.k_groups;
    let block = w.weight.block_elems().max(32);
    let mut k = step;
    while k % block != 0 {
        k += step;
    }
    let cols = w.epilogue.rows_per_column();
    GemmWorkload {
        m: w.m.min((s.bm - 1).max(1)),
        n: w.n.min((s.bn / cols - 1).max(1)),
        k,
        ..*w
    }
}
