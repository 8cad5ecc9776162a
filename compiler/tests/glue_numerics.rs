//! Numerics of the glue kernels, run by the IR interpreter (no GPU), against their CPU
//! references over the whole search space of small workloads: RMSNorm, NeoX RoPE (including
//! positions past 4000 and 30000), SwiGLU, add, embedding (every table format) and the f16
//! KV-cache write (bit-exact rounding, including subnormals, ties, overflow and NaN). Runtime
//! m is smaller than the workload's m, so rows past it must stay untouched; the interpreter
//! fails on any out-of-bounds access.
//!
//! Tolerances (stated and derived next to each reference):
//! - RMSNorm: `8e-6 + width·3e-8` relative (f32 sum of squares, inversesqrt);
//! - RoPE: `5e-7·(|x0| + |x1|)` (sin/cos fragment ~1e-7 absolute, angles bit-exact);
//! - SwiGLU: `(8 + 2|g|)·2⁻²³` relative (Vulkan exp accuracy); add, embedding and KV write:
//!   exact.

mod common;

use common::{desktop_vk12, mali_vk12};
use half::f16;
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::ir::{Access, Builtin, KernelBuilder, Module, Type};
use rocky_compiler::templates::eltwise::{
    self, EltwiseOp, EltwisePush, EltwiseWorkload, ScalePush,
};
use rocky_compiler::templates::embedding::{self, EmbeddingPush, EmbeddingWorkload};
use rocky_compiler::templates::expected::Expected;
use rocky_compiler::templates::kv_cache::{self, KvWritePush, KvWriteWorkload};
use rocky_compiler::templates::rms_norm::{self, RmsNormPush, RmsNormWorkload};
use rocky_compiler::templates::rope::{self, RopePairing, RopePush, RopeWorkload};
use rocky_compiler::testdata::{random_activations, random_weights, SplitMix64};
use rocky_compiler::{DeviceCaps, WeightFormat};

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs `module` with `buffers` bound at bindings 0, 1, ... in order.
fn run(module: &Module, buffers: &mut [&mut Vec<u8>], push: &[u8], grid: [u32; 3], sg: u32) {
    let mut data: Vec<BufferData> = buffers
        .iter_mut()
        .enumerate()
        .map(|(i, b)| BufferData {
            binding: i as u32,
            bytes: b.as_mut_slice(),
        })
        .collect();
    execute(module, &mut data, push, grid, sg).unwrap_or_else(|e| panic!("{}: {e}", module.name));
}

/// Device profiles with the subgroup size to interpret with (the one each reports): desktop,
/// Mali, and a lavapipe-like small subgroup (several subgroups per workgroup).
fn profiles() -> Vec<(DeviceCaps, u32)> {
    let small = DeviceCaps {
        subgroup_size: 4,
        ..mali_vk12()
    };
    vec![(desktop_vk12(), 32), (mali_vk12(), 16), (small, 4)]
}

const SENTINEL: f32 = -12345.0;

/// Rows `m..` of a `width`-wide output must still hold the sentinel.
fn untouched(out: &[f32], m: usize, width: usize, what: &str) {
    assert!(
        out[m * width..].iter().all(|&v| v == SENTINEL),
        "{what}: rows past the runtime m were written"
    );
}

fn check(expected: &Expected, got: &[f32], width: usize, what: &str) {
    if let Err(e) = expected.check(got, width) {
        panic!("{what}: {e}");
    }
}

#[test]
fn rms_norm_matches_the_reference_across_its_space() {
    let mut checked = 0;
    for (width, m_run) in [(96u32, 5usize), (90, 3), (2048, 2)] {
        let w = RmsNormWorkload::new(7, width, 1e-6);
        let wd = width as usize;
        // Rows of very different scales: the norm must not care.
        let mut x = random_activations(7 * wd, 1 + u64::from(width));
        for (r, row) in x.chunks_mut(wd).enumerate() {
            row.iter_mut().for_each(|v| *v *= 10f32.powi(r as i32 - 2));
        }
        let weight = random_activations(wd, 2);
        let expected = rms_norm::reference(&w, m_run, &x, &weight);
        for (caps, sg) in profiles() {
            for s in rms_norm::search_space(&w, &caps) {
                rms_norm::instantiate(&w, &s, &caps).unwrap();
                let module = rms_norm::kernel_ir(&w, &s);
                let (mut xb, mut wb) = (bytes_f32(&x), bytes_f32(&weight));
                let mut y = bytes_f32(&vec![SENTINEL; 7 * wd]);
                let push = RmsNormPush { m: m_run as u32 }.to_bytes();
                let grid = rms_norm::dispatch_grid(&w, &s);
                run(&module, &mut [&mut xb, &mut wb, &mut y], &push, grid, sg);
                let y = f32s(&y);
                check(&expected, &y[..m_run * wd], wd, &module.name);
                untouched(&y, m_run, wd, &module.name);
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} rms_norm kernels");
    assert!(checked > 30);
}

#[test]
fn sin_cos_fragment_is_accurate_over_the_position_range() {
    // One invocation per angle; the fragment's error against f64.
    let b = KernelBuilder::new("sin_cos_probe", [64, 1, 1]);
    let input = b.buffer(0, "theta", Type::F32, Access::ReadOnly);
    let out = b.buffer(
        1,
        "out",
        Type::vec(rocky_compiler::ir::Scalar::F32, 2),
        Access::WriteOnly,
    );
    let i = b.builtin(Builtin::GlobalInvocationId(0));
    let (s, c) = rope::sin_cos(&b, b.load(input, i));
    b.store(out, i, b.construct(&[s, c]));
    let module = b.finish();
    let mut rng = SplitMix64::new(5);
    let mut thetas: Vec<f32> = (0..4096).map(|_| rng.uniform(0.0, 51_000.0)).collect();
    thetas.extend((0..1024).map(|_| rng.uniform(-8.0, 8.0)));
    // Quadrant boundaries and multiples of π/2 where the reduction cancels most.
    for k in 0..1024 {
        let x = (k as f64 * 31.0 + 1.0) * std::f64::consts::FRAC_PI_2;
        thetas.extend([x as f32, f32::from_bits((x as f32).to_bits() + 1)]);
    }
    thetas.resize(thetas.len().div_ceil(64) * 64, 0.5);
    let mut tb = bytes_f32(&thetas);
    let mut ob = vec![0u8; thetas.len() * 8];
    run(
        &module,
        &mut [&mut tb, &mut ob],
        &[],
        [thetas.len() as u32 / 64, 1, 1],
        16,
    );
    let got = f32s(&ob);
    let mut worst = 0f64;
    for (k, &t) in thetas.iter().enumerate() {
        let (s, c) = f64::from(t).sin_cos();
        let err = (f64::from(got[2 * k]) - s)
            .abs()
            .max((f64::from(got[2 * k + 1]) - c).abs());
        worst = worst.max(err);
    }
    eprintln!(
        "sin_cos: worst absolute error {worst:.3e} over {} angles",
        thetas.len()
    );
    assert!(worst < 1.5e-7, "sin_cos error {worst}");
}

#[test]
fn rope_matches_the_reference_across_its_space_and_positions() {
    let mut checked = 0;
    // Three heads (not a multiple of two heads per thread), head_dim 64 and 128, positions
    // from 0, past 4000 and past 30000 (ggml's angles, bit-exact in the kernel).
    for (n_heads, head_dim, theta, pos0) in [
        (3u32, 64u32, 1e6f32, 0u32),
        (3, 64, 1e6, 4090),
        (2, 128, 1e4, 30_000),
    ] {
        let w = RopeWorkload::new(6, n_heads, head_dim, theta);
        let width = w.row_width() as usize;
        let m_run = 4;
        let x = random_activations(6 * width, 7 + u64::from(pos0));
        let expected = rope::reference(&w, m_run, pos0, &x);
        for (caps, sg) in profiles().into_iter().take(2) {
            for s in rope::search_space(&w, &caps) {
                rope::instantiate(&w, &s, &caps).unwrap();
                let module = rope::kernel_ir(&w, &s);
                let mut xb = bytes_f32(&x);
                let push = RopePush {
                    m: m_run as u32,
                    pos0,
                }
                .to_bytes();
                run(
                    &module,
                    &mut [&mut xb],
                    &push,
                    rope::dispatch_grid(&w, &s),
                    sg,
                );
                let got = f32s(&xb);
                check(&expected, &got[..m_run * width], width, &module.name);
                assert_eq!(
                    &got[m_run * width..],
                    &x[m_run * width..],
                    "{}",
                    module.name
                );
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} rope kernels");
    assert!(checked > 20);
}

/// Llama 3-style frequency factors for `half` pairs: 1 for the fast pairs, the scaling factor
/// 8 for the slow ones, smoothly in between (the shape of llama.cpp's `rope_freqs`).
fn llama3_like_factors(half: usize) -> Vec<f32> {
    (0..half)
        .map(|i| {
            let t = i as f32 / (half - 1) as f32;
            if t < 0.3 {
                1.0
            } else if t > 0.7 {
                8.0
            } else {
                1.0 / (1.0 - (t - 0.3) / 0.4 * (1.0 - 1.0 / 8.0))
            }
        })
        .collect()
}

/// Runs every schedule of `w` (with `freqs` bound where it has factors) over the first `m_run`
/// rows of `x`; returns each schedule's output.
fn run_rope(
    w: &RopeWorkload,
    x: &[f32],
    m_run: usize,
    pos0: u32,
    freqs: Option<&[f32]>,
) -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    for (caps, sg) in profiles().into_iter().take(2) {
        for s in rope::search_space(w, &caps) {
            rope::instantiate(w, &s, &caps).unwrap();
            let module = rope::kernel_ir(w, &s);
            let mut xb = bytes_f32(x);
            let mut fb = bytes_f32(freqs.unwrap_or(&[]));
            let push = RopePush {
                m: m_run as u32,
                pos0,
            }
            .to_bytes();
            let mut buffers: Vec<&mut Vec<u8>> = vec![&mut xb];
            if freqs.is_some() {
                buffers.push(&mut fb);
            }
            run(&module, &mut buffers, &push, rope::dispatch_grid(w, &s), sg);
            out.push((module.name.clone(), f32s(&xb)));
        }
    }
    out
}

#[test]
fn rope_variants_match_the_reference_and_each_other() {
    // Normal pairing and frequency factors (Llama 3), each against the reference, and two
    // closed-form relations that need no reference: normal pairing is NeoX pairing on heads
    // whose even elements come first; factors of 1 change nothing.
    let mut checked = 0;
    for (n_heads, head_dim, theta, pos0) in [(3u32, 64u32, 5e5f32, 0u32), (2, 128, 5e5, 4090)] {
        let base = RopeWorkload::new(6, n_heads, head_dim, theta);
        let (hd, width, m_run) = (head_dim as usize, base.row_width() as usize, 4);
        let x = random_activations(6 * width, 11 + u64::from(pos0));
        let factors = llama3_like_factors(hd / 2);
        for pairing in [RopePairing::Neox, RopePairing::Normal] {
            for freqs in [None, Some(factors.as_slice())] {
                let w = base
                    .with_pairing(pairing)
                    .with_freq_factors(freqs.is_some());
                let expected = rope::reference_with(&w, m_run, pos0, &x, freqs);
                for (name, got) in run_rope(&w, &x, m_run, pos0, freqs) {
                    assert!(
                        name.starts_with(&format!("rope_{}_", pairing.name())),
                        "{name}"
                    );
                    assert_eq!(name.ends_with("_ff"), freqs.is_some(), "{name}");
                    check(&expected, &got[..m_run * width], width, &name);
                    assert_eq!(&got[m_run * width..], &x[m_run * width..], "{name}");
                    checked += 1;
                }
            }
        }
        // Normal pairing ≡ NeoX after de-interleaving each head (the kernels, not the reference).
        let deinterleave = |v: &[f32]| -> Vec<f32> {
            v.chunks(hd)
                .flat_map(|h| {
                    h.iter()
                        .step_by(2)
                        .chain(h.iter().skip(1).step_by(2))
                        .copied()
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let normal = base
            .with_pairing(RopePairing::Normal)
            .with_freq_factors(true);
        let neox = base.with_freq_factors(true);
        let got_normal = &run_rope(&normal, &x, m_run, pos0, Some(&factors))[0].1;
        let got_neox = &run_rope(&neox, &deinterleave(&x), m_run, pos0, Some(&factors))[0].1;
        assert_eq!(
            deinterleave(got_normal),
            *got_neox,
            "normal vs de-interleaved NeoX"
        );
        // Factors of 1 are no factors.
        let ones = vec![1.0f32; hd / 2];
        let with_ones = &run_rope(&neox, &x, m_run, pos0, Some(&ones))[0].1;
        let without = &run_rope(&base, &x, m_run, pos0, None)[0].1;
        assert_eq!(with_ones, without, "factors of 1");
        // And the factors matter: the slow pairs turn by 1/8 of the angle.
        assert_ne!(
            &run_rope(&neox, &x, m_run, pos0.max(1), Some(&factors))[0].1,
            &run_rope(&base, &x, m_run, pos0.max(1), None)[0].1
        );
    }
    eprintln!("checked {checked} rope variant kernels");
    assert!(checked > 40);
}

#[test]
fn rope_angles_follow_ggml_not_a_closed_form() {
    // The oracle's iterative angles differ from pos·base^(-2i/d) by much more than the
    // tolerance at large positions: the reference (and so the kernel) must use them.
    let w = RopeWorkload::new(1, 1, 128, 1e6);
    let scale = w.theta_scale();
    let pos = 4000u32;
    let worst = (0..64)
        .map(|i| {
            let exact = f64::from(pos) * 1e6f64.powf(-2.0 * f64::from(i) / 128.0);
            (f64::from(rope::ggml_angle(pos, i, scale)) - exact).abs()
        })
        .fold(0f64, f64::max);
    assert!(worst > 1e-5, "iterative angles unexpectedly exact: {worst}");
}

#[test]
fn eltwise_kernels_match_their_references_across_their_spaces() {
    let mut checked = 0;
    for width in [96u32, 90, 1000] {
        let w = EltwiseWorkload { m: 6, width };
        let wd = width as usize;
        let m_run = 5;
        let mut a = random_activations(6 * wd, 3);
        let b = random_activations(6 * wd, 4);
        // Gates over a wide range, with the extremes where exp overflows or vanishes.
        for (i, v) in a.iter_mut().enumerate() {
            *v *= [1.0, 8.0, 30.0, 120.0][i % 4];
        }
        let factor = 25.298_222;
        for op in [
            EltwiseOp::SwiGlu,
            EltwiseOp::GeGlu,
            EltwiseOp::Add,
            EltwiseOp::Scale,
        ] {
            let expected = match op {
                EltwiseOp::SwiGlu => eltwise::reference_swiglu(&w, m_run, &a, &b),
                EltwiseOp::GeGlu => eltwise::reference_geglu(&w, m_run, &a, &b),
                EltwiseOp::Add => eltwise::reference_add(&w, m_run, &a, &b),
                EltwiseOp::Scale => eltwise::reference_scale(&w, m_run, &a, factor),
            };
            let push = match op {
                EltwiseOp::Scale => ScalePush {
                    m: m_run as u32,
                    factor,
                }
                .to_bytes(),
                _ => EltwisePush { m: m_run as u32 }.to_bytes(),
            };
            for (caps, sg) in profiles().into_iter().take(2) {
                for s in eltwise::search_space(&w, &caps) {
                    eltwise::instantiate(op, &w, &s, &caps).unwrap();
                    let module = eltwise::kernel_ir(op, &w, &s);
                    let (mut ab, mut bb) = (bytes_f32(&a), bytes_f32(&b));
                    let mut y = bytes_f32(&vec![SENTINEL; 6 * wd]);
                    let grid = eltwise::dispatch_grid(&w, &s);
                    match op {
                        EltwiseOp::Scale => run(&module, &mut [&mut ab, &mut y], &push, grid, sg),
                        _ => run(&module, &mut [&mut ab, &mut bb, &mut y], &push, grid, sg),
                    }
                    let y = f32s(&y);
                    check(&expected, &y[..m_run * wd], wd, &module.name);
                    untouched(&y, m_run, wd, &module.name);
                    checked += 1;
                }
            }
        }
    }
    eprintln!("checked {checked} elementwise kernels");
    assert!(checked > 100);
}

#[test]
fn embedding_gathers_bit_exact_rows_for_every_format() {
    let mut checked = 0;
    for table in WeightFormat::ALL {
        let width = 512u32;
        let w = EmbeddingWorkload::gguf(6, width, table);
        let rows = 9usize;
        let raw = random_weights(table, rows, width as usize, 21);
        let rb = w.row_bytes() as usize;
        // Ids out of order and repeated; the table is bound in two pieces (rows 0..5 and
        // 5..9, as the executor splits a table over maxStorageBufferRange), each dispatch
        // writing only its own ids' rows.
        let ids = [4u32, 0, 8, 4, 6, 3];
        let m_run = 5;
        let expected = embedding::reference(&w, m_run, &ids, &raw, rows);
        let piece = |from: usize, to: usize| {
            let mut bytes = raw[from * rb..to * rb].to_vec();
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            bytes
        };
        for (caps, sg) in profiles().into_iter().take(1) {
            for s in embedding::search_space(&w, &caps) {
                gather_in_two_pieces(&w, &s, &caps, sg, &ids, m_run, rows, &piece, &expected);
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} embedding kernels");
    assert!(checked > 10);
}

/// Runs schedule `s` of `w` over a table bound in two pieces (rows 0..5 and 5..`rows`, each
/// dispatch writing only its own ids' rows; `piece(from, to)` gives a piece's bytes as the
/// device holds them) and checks the first `m_run` rows against `expected`.
#[allow(clippy::too_many_arguments)]
fn gather_in_two_pieces(
    w: &EmbeddingWorkload,
    s: &embedding::EmbeddingSchedule,
    caps: &DeviceCaps,
    sg: u32,
    ids: &[u32],
    m_run: usize,
    rows: usize,
    piece: &dyn Fn(usize, usize) -> Vec<u8>,
    expected: &Expected,
) {
    embedding::instantiate(w, s, caps).unwrap();
    let module = embedding::kernel_ir(w, s);
    let grid = embedding::dispatch_grid(w, s);
    let width = w.width as usize;
    let mut idb = bytes_u32(ids);
    let mut y = bytes_f32(&vec![SENTINEL; w.m as usize * width]);
    for (from, to) in [(0usize, 5usize), (5, rows)] {
        let mut tb = piece(from, to);
        let push = EmbeddingPush {
            m: m_run as u32,
            row_base: from as u32,
        }
        .to_bytes();
        run(&module, &mut [&mut idb, &mut tb, &mut y], &push, grid, sg);
    }
    let y = f32s(&y);
    check(expected, &y[..m_run * width], width, &module.name);
    untouched(&y, m_run, width, &module.name);
}

/// A table held in the aligned layout (a tied output projection's, on panvk) gathers the same
/// rows as the CPU dequantizer reads from the GGUF bytes, bit for bit, also from the second of
/// two bound pieces and with a partial last group (width 512: Q6_K has 2 of a group's 8
/// blocks per row, so its aligned rows are longer than its GGUF rows).
#[test]
fn embedding_gathers_bit_exact_rows_from_an_aligned_table() {
    use rocky_compiler::dequant::layout::repack;
    use rocky_compiler::WeightLayout;
    let mut checked = 0;
    for table in WeightFormat::ALL {
        if !WeightLayout::Aligned.supports(table) {
            continue;
        }
        let width = 512u32;
        let w = EmbeddingWorkload {
            layout: WeightLayout::Aligned,
            ..EmbeddingWorkload::gguf(6, width, table)
        };
        let rows = 9usize;
        let raw = random_weights(table, rows, width as usize, 23);
        let aligned = repack(table, u64::from(width), rows as u64, &raw).unwrap();
        let rb = w.row_bytes() as usize;
        assert_eq!(
            rb,
            WeightLayout::Aligned.row_bytes(table, u64::from(width)) as usize
        );
        assert_eq!(aligned.len(), rows * rb);
        let ids = [4u32, 0, 8, 4, 6, 3];
        let m_run = 5;
        // The reference dequantizes the GGUF bytes.
        let expected = embedding::reference(&w, m_run, &ids, &raw, rows);
        let piece = |from: usize, to: usize| {
            let mut bytes = aligned[from * rb..to * rb].to_vec();
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            bytes
        };
        for (caps, sg) in profiles() {
            let s = embedding::default_schedule(&w, &caps);
            let name = embedding::kernel_ir(&w, &s).name;
            assert!(name.contains("_aligned"), "{name}");
            gather_in_two_pieces(&w, &s, &caps, sg, &ids, m_run, rows, &piece, &expected);
            checked += 1;
        }
    }
    eprintln!("checked {checked} aligned embedding kernels");
    // Q8_0, Q5_0 and Q6_K on each profile.
    assert!(checked >= 3 * profiles().len(), "{checked}");
    // A format the layout does not hold is refused.
    let q4k = EmbeddingWorkload {
        layout: WeightLayout::Aligned,
        ..EmbeddingWorkload::gguf(1, 512, WeightFormat::Q4K)
    };
    assert!(embedding::validate_workload(&q4k).is_err());
}

#[test]
fn embedding_leaves_rows_of_ids_outside_the_bound_piece_unwritten() {
    let (width, rows) = (64u32, 4usize);
    let w = EmbeddingWorkload::gguf(3, width, WeightFormat::Q8_0);
    let raw = random_weights(w.table, rows, width as usize, 5);
    let (caps, sg) = profiles().into_iter().next().unwrap();
    let s = embedding::default_schedule(&w, &caps);
    let module = embedding::kernel_ir(&w, &s);
    // Piece = rows 2..4: id 1 lies below it, id 7 past it, id 3 inside.
    let mut idb = bytes_u32(&[1, 7, 3]);
    let mut tb = raw[2 * w.row_bytes() as usize..].to_vec();
    let mut y = bytes_f32(&vec![SENTINEL; 3 * width as usize]);
    let push = EmbeddingPush { m: 3, row_base: 2 }.to_bytes();
    run(
        &module,
        &mut [&mut idb, &mut tb, &mut y],
        &push,
        embedding::dispatch_grid(&w, &s),
        sg,
    );
    let y = f32s(&y);
    let wd = width as usize;
    assert!(
        y[..2 * wd].iter().all(|&v| v == SENTINEL),
        "rows of outside ids were written"
    );
    let expected = embedding::reference(&w, 1, &[3], &raw, rows);
    check(&expected, &y[2 * wd..], wd, &module.name);
}

/// f32 values whose f16 rounding is delicate, plus random ones over the whole f16 range.
fn delicate_values() -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.5,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001), // signalling NaN
        f32::from_bits(0x7FC1_2345),
        2f32.powi(-14),                          // smallest normal f16
        2f32.powi(-14) * (1.0 - 2f32.powi(-11)), // rounds up to it
        2f32.powi(-24),                          // smallest subnormal
        2f32.powi(-25),                          // tie: to even zero
        2f32.powi(-25) * 1.000_001,              // just above the tie: up
        2f32.powi(-24) * 1.5,                    // tie between 1 and 2 subnormal units: to 2
        2f32.powi(-24) * 2.5,                    // tie: to 2
        2f32.powi(-26),
        1e-30,
        -3e-6,
        1.0 + 2f32.powi(-11),       // tie: to even 1.0
        1.0 + 3.0 * 2f32.powi(-11), // tie: up
        2048.5,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
    ];
    let mut rng = SplitMix64::new(9);
    for _ in 0..2000 {
        let e = rng.uniform(-28.0, 17.0);
        let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
        v.push(sign * 2f32.powf(e) * rng.uniform(1.0, 2.0));
    }
    for _ in 0..500 {
        v.push(f32::from_bits(rng.next_u64() as u32));
    }
    v.truncate(v.len() / 4 * 4);
    v
}

#[test]
fn f16_rounding_of_the_kv_write_is_bit_exact() {
    let values = delicate_values();
    let kv_width = 4u32;
    let m = values.len() / 4;
    let w = KvWriteWorkload {
        m: m as u32,
        kv_width,
        ty: Default::default(),
        rotation: 0,
    };
    let caps = desktop_vk12();
    for s in kv_cache::search_space(&w, &caps) {
        let module = kv_cache::kernel_ir(&w, &s);
        let mut src = bytes_f32(&values);
        let mut cache = vec![0u8; values.len() * 2];
        let push = KvWritePush {
            m: m as u32,
            pos0: 0,
        }
        .to_bytes();
        run(
            &module,
            &mut [&mut src, &mut cache],
            &push,
            kv_cache::dispatch_grid(&w, &s),
            32,
        );
        let words = u32s(&cache);
        for (i, &v) in values.iter().enumerate() {
            let got = (words[i / 2] >> (16 * (i % 2))) as u16;
            let want = f16::from_f32(v);
            if v.is_nan() {
                // NaN stays a NaN of the same sign (payload bits are not promised).
                assert!(
                    f16::from_bits(got).is_nan() && (got >> 15) == want.to_bits() >> 15,
                    "{}: NaN {v:?} → {got:#06x}",
                    module.name
                );
            } else {
                assert_eq!(
                    got,
                    want.to_bits(),
                    "{}: {v:e} ({:#010x}) → {got:#06x}, want {:#06x}",
                    module.name,
                    v.to_bits(),
                    want.to_bits()
                );
            }
        }
    }
}

#[test]
fn kv_write_fills_the_cache_across_ubatches() {
    let kv_width = 36u32;
    let capacity = 11usize;
    let w = KvWriteWorkload {
        m: 5,
        kv_width,
        ty: Default::default(),
        rotation: 0,
    };
    let kw = kv_width as usize;
    let mut checked = 0;
    for (caps, sg) in profiles().into_iter().take(2) {
        for s in kv_cache::search_space(&w, &caps) {
            let module = kv_cache::kernel_ir(&w, &s);
            // Three ubatches: 5 rows at 0, 3 rows at 5, then 5 rows at 8 of which only 3 fit.
            let mut cache = vec![0xDEAD_BEEFu32; capacity * kw / 2];
            let mut want = cache.clone();
            for (step, (m_run, pos0)) in [(5usize, 0u32), (3, 5), (5, 8)].into_iter().enumerate() {
                let src = random_activations(5 * kw, 30 + step as u64);
                kv_cache::reference(&w, m_run, pos0, &src, &mut want);
                let mut sb = bytes_f32(&src);
                let mut cb = bytes_u32(&cache);
                let push = KvWritePush {
                    m: m_run as u32,
                    pos0,
                }
                .to_bytes();
                run(
                    &module,
                    &mut [&mut sb, &mut cb],
                    &push,
                    kv_cache::dispatch_grid(&w, &s),
                    sg,
                );
                cache = u32s(&cb);
                assert_eq!(cache, want, "{} after ubatch {step}", module.name);
            }
            checked += 1;
        }
    }
    assert!(checked >= 8);
}

/// The replayable forms of the decode step's position-reading glue (`instantiate_with_args`:
/// `m` and `pos0` read from a storage buffer after the last binding, so one recorded step
/// serves every token) match their references: RoPE within its tolerance at positions up to
/// past 30000, the KV write bit-exact, one row at a time as decode writes it.
#[test]
fn rope_and_kv_write_reading_the_position_from_a_buffer_match_their_references() {
    use rocky_compiler::ir::args_buffer::push_constants_from_buffer;
    use rocky_compiler::templates::instantiate_with_args;
    use rocky_compiler::{Schedule, Workload};
    let mut checked = 0;
    for (caps, sg) in profiles() {
        let w = RopeWorkload::new(1, 3, 64, 1e6);
        let width = w.row_width() as usize;
        let s = rope::default_schedule(&w, &caps);
        let compiled =
            instantiate_with_args(&Workload::RopeNeox(w), &Schedule::RopeNeox(s), &caps).unwrap();
        let module = push_constants_from_buffer(&rope::kernel_ir(&w, &s));
        assert_eq!(compiled.meta.name, module.name);
        assert_eq!(compiled.meta.push_constant_bytes, 0);
        for pos0 in [0u32, 1, 4095, 30_001] {
            let x = random_activations(width, 40 + u64::from(pos0));
            let mut xb = bytes_f32(&x);
            let mut args = bytes_u32(&[1, pos0]);
            run(
                &module,
                &mut [&mut xb, &mut args],
                &[],
                rope::dispatch_grid(&w, &s),
                sg,
            );
            check(
                &rope::reference(&w, 1, pos0, &x),
                &f32s(&xb),
                width,
                &module.name,
            );
            checked += 1;
        }

        let kv_width = 36u32;
        let kw = kv_width as usize;
        let w = KvWriteWorkload {
            m: 1,
            kv_width,
            ty: Default::default(),
            rotation: 0,
        };
        let s = kv_cache::default_schedule(&w, &caps);
        instantiate_with_args(&Workload::KvWrite(w), &Schedule::KvWrite(s), &caps).unwrap();
        let module = push_constants_from_buffer(&kv_cache::kernel_ir(&w, &s));
        let mut cache = vec![0xDEAD_BEEFu32; 6 * kw / 2];
        let mut want = cache.clone();
        for pos0 in 0..6u32 {
            let src = random_activations(kw, 60 + u64::from(pos0));
            kv_cache::reference(&w, 1, pos0, &src, &mut want);
            let mut sb = bytes_f32(&src);
            let mut cb = bytes_u32(&cache);
            let mut args = bytes_u32(&[1, pos0]);
            run(
                &module,
                &mut [&mut sb, &mut cb, &mut args],
                &[],
                kv_cache::dispatch_grid(&w, &s),
                sg,
            );
            cache = u32s(&cb);
            assert_eq!(cache, want, "{} at position {pos0}", module.name);
            checked += 1;
        }
    }
    assert_eq!(checked, 30);
    // Kernels that read no position keep their push constants.
    let add = Workload::Add(EltwiseWorkload { m: 1, width: 8 });
    let caps = desktop_vk12();
    let s = rocky_compiler::default_schedule(&add, &caps);
    assert!(instantiate_with_args(&add, &s, &caps).is_err());
}

/// Runs `module` with each buffer bound at its own binding number.
fn run_bound(
    module: &Module,
    buffers: &mut [(u32, &mut Vec<u8>)],
    push: &[u8],
    grid: [u32; 3],
    sg: u32,
) {
    let mut data: Vec<BufferData> = buffers
        .iter_mut()
        .map(|(binding, b)| BufferData {
            binding: *binding,
            bytes: b.as_mut_slice(),
        })
        .collect();
    execute(module, &mut data, push, grid, sg).unwrap_or_else(|e| panic!("{}: {e}", module.name));
}

/// The decode step's fused RoPE and KV write (`RopeWorkload::with_kv_write`) against the
/// kernels it replaces, composed: RoPE of the query in place, RoPE of the key, the KV writes of
/// the rotated key and of the value. Bit for bit, for both pairings, with and without
/// frequency factors, f16 and f32 caches (and one of each), one and three rows, positions
/// past 4096 and rows past the cache's end (not stored by either); the query also within
/// RoPE's tolerance of the f64 reference.
#[test]
fn rope_fused_with_the_kv_write_equals_rope_then_kv_write_bit_for_bit() {
    use rocky_compiler::{KvType, KvTypes};
    let (n_heads, kv_heads, hd) = (4u32, 2u32, 16u32);
    let (qw, kw) = ((n_heads * hd) as usize, (kv_heads * hd) as usize);
    let capacity = 4100usize;
    let factors = llama3_like_factors(hd as usize / 2);
    let mut checked = 0;
    for (caps, sg) in profiles().into_iter().take(2) {
        for pairing in [RopePairing::Neox, RopePairing::Normal] {
            for freqs in [None, Some(&factors[..])] {
                for kv in [
                    KvTypes::F16,
                    KvTypes::F32,
                    KvTypes::new(KvType::F16, KvType::F32),
                ] {
                    let q_rope = RopeWorkload::new(3, n_heads, hd, 1e6)
                        .with_pairing(pairing)
                        .with_freq_factors(freqs.is_some());
                    let k_rope = RopeWorkload {
                        n_heads: kv_heads,
                        ..q_rope
                    };
                    let fused = q_rope.with_kv_write(kv_heads, kv);
                    let s = rope::default_schedule(&fused, &caps);
                    rope::instantiate(&fused, &s, &caps).unwrap();
                    let module = rope::kernel_ir(&fused, &s);
                    let write = |ty| KvWriteWorkload {
                        m: 3,
                        kv_width: kv_heads * hd,
                        ty,
                        rotation: 0,
                    };
                    let words = |ty: KvType| capacity * ty.row_words(kv_heads * hd) as usize;
                    for (m_run, pos0) in [(1usize, 0u32), (3, 5), (1, 4097), (3, 4098)] {
                        let seed = u64::from(pos0) + m_run as u64;
                        let q = random_activations(3 * qw, 70 + seed);
                        let k = random_activations(3 * kw, 80 + seed);
                        let v = random_activations(3 * kw, 90 + seed);
                        let push = RopePush {
                            m: m_run as u32,
                            pos0,
                        }
                        .to_bytes();
                        // Fused.
                        let (mut qb, mut kb, mut vb) =
                            (bytes_f32(&q), bytes_f32(&k), bytes_f32(&v));
                        let mut fb = bytes_f32(freqs.unwrap_or(&[]));
                        let mut kc = bytes_u32(&vec![0xDEAD_BEEF; words(kv.k)]);
                        let mut vc = bytes_u32(&vec![0xDEAD_BEEF; words(kv.v)]);
                        let mut buffers: Vec<(u32, &mut Vec<u8>)> = vec![
                            (rope::BINDING_X, &mut qb),
                            (rope::BINDING_K, &mut kb),
                            (rope::BINDING_V, &mut vb),
                            (rope::BINDING_K_CACHE, &mut kc),
                            (rope::BINDING_V_CACHE, &mut vc),
                        ];
                        if freqs.is_some() {
                            buffers.push((rope::BINDING_FREQS, &mut fb));
                        }
                        run_bound(
                            &module,
                            &mut buffers,
                            &push,
                            rope::dispatch_grid(&fused, &s),
                            sg,
                        );
                        // The kernels it replaces.
                        let unfused_rope = |w: &RopeWorkload, x: &[f32]| {
                            let s = rope::default_schedule(w, &caps);
                            let mut xb = bytes_f32(x);
                            let mut fb = bytes_f32(freqs.unwrap_or(&[]));
                            let mut buffers: Vec<&mut Vec<u8>> = vec![&mut xb];
                            if freqs.is_some() {
                                buffers.push(&mut fb);
                            }
                            run(
                                &rope::kernel_ir(w, &s),
                                &mut buffers,
                                &push,
                                rope::dispatch_grid(w, &s),
                                sg,
                            );
                            f32s(&xb)
                        };
                        let q_want = unfused_rope(&q_rope, &q);
                        let k_roped = unfused_rope(&k_rope, &k);
                        let mut kc_want = vec![0xDEAD_BEEFu32; words(kv.k)];
                        let mut vc_want = vec![0xDEAD_BEEFu32; words(kv.v)];
                        kv_cache::reference(&write(kv.k), m_run, pos0, &k_roped, &mut kc_want);
                        kv_cache::reference(&write(kv.v), m_run, pos0, &v, &mut vc_want);
                        let what = format!("{} m {m_run} pos0 {pos0}", module.name);
                        let q_got = f32s(&qb);
                        assert!(
                            q_got
                                .iter()
                                .zip(&q_want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{what}: the query differs from the RoPE kernel's"
                        );
                        assert_eq!(
                            &q_got[m_run * qw..],
                            &q[m_run * qw..],
                            "{what}: rows past m"
                        );
                        check(
                            &rope::reference_with(&q_rope, m_run, pos0, &q, freqs),
                            &q_got[..m_run * qw],
                            qw,
                            &what,
                        );
                        assert!(u32s(&kc) == kc_want, "{what}: the K cache differs");
                        assert!(u32s(&vc) == vc_want, "{what}: the V cache differs");
                        assert_eq!(f32s(&kb), k, "{what}: the key source was written");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2 * 3 * 4);
}

/// The fused form refuses what it cannot store: q8_0 caches, head_dim not a multiple of 4,
/// and more than one head per thread.
#[test]
fn rope_fused_with_the_kv_write_refuses_q8_0_caches_and_odd_quads() {
    use rocky_compiler::{KvType, KvTypes};
    let caps = desktop_vk12();
    let base = RopeWorkload::new(1, 4, 64, 1e6);
    let q8 = base.with_kv_write(2, KvTypes::new(KvType::F16, KvType::Q8_0));
    assert!(rope::validate_workload(&q8).is_err());
    let odd = RopeWorkload::new(1, 4, 6, 1e6).with_kv_write(2, KvTypes::F16);
    assert!(rope::validate_workload(&odd).is_err());
    let ok = base.with_kv_write(2, KvTypes::F16);
    rope::validate_workload(&ok).unwrap();
    let two = rope::RopeSchedule {
        threads: 64,
        heads_per_thread: 2,
    };
    assert!(two.validate(&ok, &caps).is_err());
    assert!(rope::search_space(&ok, &caps)
        .iter()
        .all(|s| s.heads_per_thread == 1));
}
