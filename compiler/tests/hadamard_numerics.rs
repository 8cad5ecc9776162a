//! The Walsh-Hadamard rotation around a q8_0 KV cache (llama.cpp PR 21038), run by the IR
//! interpreter (no GPU) against its CPU references:
//! - the reference is Sylvester's orthonormal matrix (checked against the explicit product in
//!   f64) and its own inverse;
//! - the in-place kernel that rotates Q and the attention output equals the reference bit for
//!   bit (ggml's order of operations, marked precise) over its search space and every run size,
//!   leaving rows past the runtime m untouched;
//! - the rotated q8_0 KV write equals `kv_cache::reference` (rotate, then ggml's q8_0 blocks)
//!   bit for bit, across ubatches and with rows past a short cache dropped;
//! - rotating Q and K alike leaves q·k as it was (to f32 rounding): why rotating only the cache
//!   side would be wrong and rotating both is harmless.

mod common;

use common::{desktop_vk12, mali_vk12};
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::ir::Module;
use rocky_compiler::templates::hadamard::{self, HadamardPush, HadamardWorkload};
use rocky_compiler::templates::kv_cache::{self, KvWritePush, KvWriteWorkload};
use rocky_compiler::testdata::random_activations;
use rocky_compiler::{DeviceCaps, KvType};

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

fn profiles() -> Vec<(DeviceCaps, u32)> {
    vec![(desktop_vk12(), 32), (mali_vk12(), 16)]
}

/// Values with outliers (one channel in 16 eight times larger), as real keys have them.
fn keys(len: usize, seed: u64) -> Vec<f32> {
    random_activations(len, seed)
        .into_iter()
        .enumerate()
        .map(|(i, v)| if i % 16 == 3 { 8.0 * v } else { v })
        .collect()
}

#[test]
fn the_reference_is_sylvesters_orthonormal_matrix_and_its_own_inverse() {
    for n in [32usize, 64, 128, 256] {
        let x = keys(2 * n, n as u64);
        let mut y = x.clone();
        hadamard::reference(&mut y, n);
        for (run, out) in x.chunks(n).zip(y.chunks(n)) {
            for (i, &o) in out.iter().enumerate() {
                let want: f64 = run
                    .iter()
                    .enumerate()
                    .map(|(j, &v)| {
                        let sign = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        sign * f64::from(v) / (n as f64).sqrt()
                    })
                    .sum();
                assert!(
                    (f64::from(o) - want).abs() < 1e-5,
                    "n {n} i {i}: {o} vs {want}"
                );
            }
        }
        hadamard::reference(&mut y, n);
        for (a, b) in x.iter().zip(&y) {
            assert!(
                (a - b).abs() < 1e-5 * (1.0 + a.abs()),
                "n {n}: H·H is not I"
            );
        }
    }
}

#[test]
fn the_rotation_kernel_matches_the_reference_bit_for_bit() {
    const SENTINEL: f32 = -12345.0;
    let mut checked = 0;
    // (width, n): the 0.5B's Q (14 heads of 64), the 3B's (16 of 128) by K's run and V's 64,
    // a head_dim 256 model's, and one run of the smallest size.
    let shapes = [
        (896u32, 64u32),
        (2048, 128),
        (2048, 64),
        (2048, 256),
        (32, 32),
    ];
    for (caps, sg) in profiles() {
        for (width, n) in shapes {
            let w = HadamardWorkload { m: 5, width, n };
            hadamard::validate_workload(&w).unwrap();
            let m_run = 3usize;
            for s in hadamard::search_space(&w, &caps) {
                let module = hadamard::kernel_ir(&w, &s);
                let mut x = keys(5 * width as usize, u64::from(width + n));
                x[m_run * width as usize..].fill(SENTINEL);
                let mut want = x.clone();
                hadamard::reference(&mut want[..m_run * width as usize], n as usize);
                let mut xb = bytes_f32(&x);
                let push = HadamardPush { m: m_run as u32 }.to_bytes();
                run(
                    &module,
                    &mut [&mut xb],
                    &push,
                    hadamard::dispatch_grid(&w, &s),
                    sg,
                );
                let got = f32s(&xb);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{}: not the reference's bits", module.name);
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "{checked} kernels checked");
}

#[test]
fn the_rotated_q8_0_kv_write_matches_the_reference_across_ubatches() {
    let capacity = 11usize;
    let mut checked = 0;
    // (kv_width, n): the 0.5B's K or V (2 heads of 64), the 3B's K (2 of 128) and V (by 64),
    // a head_dim 256 model's K.
    for (kv_width, n) in [(128u32, 64u32), (256, 128), (256, 64), (1024, 256)] {
        let w = KvWriteWorkload::new(5, kv_width, KvType::Q8_0).with_rotation(n);
        kv_cache::validate_workload(&w).unwrap();
        let kw = kv_width as usize;
        let rw = KvType::Q8_0.row_words(kv_width) as usize;
        for (caps, sg) in profiles() {
            for s in kv_cache::search_space(&w, &caps) {
                let module = kv_cache::kernel_ir(&w, &s);
                assert!(module.name.contains(&format!("_r{n}")), "{}", module.name);
                // Three ubatches: 5 rows at 0, 3 rows at 5, then 5 rows at 8 of which only 3 fit.
                // A zeroed cache, as allocated: the scales' padding to 16 bytes (0.5B shape) is
                // never written, by this kernel as by the unrotated one.
                let mut cache = vec![0u32; capacity * rw];
                let mut want = cache.clone();
                for (step, (m_run, pos0)) in
                    [(5usize, 0u32), (3, 5), (5, 8)].into_iter().enumerate()
                {
                    let src = keys(5 * kw, 40 + step as u64);
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
        // What the cache holds decodes to the rotated row, within q8_0's rounding.
        let src = keys(kw, 7);
        let mut cache = vec![0u32; rw];
        kv_cache::reference(&w, 1, 0, &src, &mut cache);
        let mut rotated = src.clone();
        hadamard::reference(&mut rotated, n as usize);
        let back = KvType::Q8_0.decode_row(&cache, kv_width);
        let amax = rotated.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (a, b) in rotated.iter().zip(&back) {
            assert!((a - b).abs() <= amax / 127.0, "{a} decoded as {b}");
        }
    }
    assert!(checked >= 8, "{checked} kernels checked");
}

#[test]
fn rotating_q_and_k_alike_keeps_their_products() {
    for n in [64usize, 128] {
        let q = keys(n, 1);
        let k = keys(n, 2);
        let dot = |a: &[f32], b: &[f32]| -> f64 {
            a.iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum()
        };
        let (mut qr, mut kr) = (q.clone(), k.clone());
        hadamard::reference(&mut qr, n);
        hadamard::reference(&mut kr, n);
        let (before, after) = (dot(&q, &k), dot(&qr, &kr));
        let scale = dot(&q, &q).sqrt() * dot(&k, &k).sqrt();
        assert!(
            (before - after).abs() <= 1e-6 * scale,
            "n {n}: q·k {before} became {after}"
        );
    }
}
