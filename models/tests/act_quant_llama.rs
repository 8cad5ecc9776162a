//! The CPU reference's emulation of llama.cpp's activation rounding (`ActivationQuant::
//! LlamaCpp`: quantize-dequantize the activations, then a float dot with the dequantized
//! weights) against llama.cpp's own integer arithmetic, transcribed here from ggml
//! (ggml-quants.c `quantize_row_q8_K_ref` with its `nearest_int`, ggml-cpu's
//! `ggml_vec_dot_q4_K_q8_K_generic` and `ggml_vec_dot_q8_0_q8_0_generic`): the emulated
//! figures of docs/measurements/2026-12-06b-int8-accuracy.md are llama.cpp's CPU backend's.

use half::f16;
use rocky_models::act_quant::ActivationQuant;
use rocky_models::formats::{self, GgmlType};

/// Activations with the shape of a projection's input: mostly small, a few channels large
/// (SwiGLU outputs and residual streams have such outliers).
fn activations(k: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..k)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let u = (state as f32 / u32::MAX as f32) * 2.0 - 1.0;
            if i % 97 == 13 {
                u * 40.0
            } else {
                u * u * u * 3.0
            }
        })
        .collect()
}

fn weights(n: usize, seed: u32) -> Vec<f32> {
    activations(n, seed ^ 0x5bd1_e995)
        .into_iter()
        .map(|v| (v * 0.37).sin() * 0.05)
        .collect()
}

/// ggml's `nearest_int`: round to nearest, ties to even, through the float's mantissa.
fn nearest_int(fval: f32) -> i32 {
    assert!(fval.abs() <= 4_194_303.0);
    let val = fval + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// ggml's `block_q8_K`: d, quants, sums of 16.
struct BlockQ8K {
    d: f32,
    qs: [i8; 256],
    bsums: [i16; 16],
}

fn quantize_row_q8_k_ref(x: &[f32]) -> Vec<BlockQ8K> {
    x.chunks(256)
        .map(|x| {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in x {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            let mut y = BlockQ8K {
                d: 0.0,
                qs: [0; 256],
                bsums: [0; 16],
            };
            if amax == 0.0 {
                return y;
            }
            let iscale = -127.0 / max;
            for (q, &v) in y.qs.iter_mut().zip(x) {
                *q = nearest_int(iscale * v).min(127) as i8;
            }
            for (j, s) in y.bsums.iter_mut().enumerate() {
                *s = y.qs[j * 16..][..16].iter().map(|&q| i16::from(q)).sum();
            }
            y.d = 1.0 / iscale;
            y
        })
        .collect()
}

/// ggml's `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `ggml_vec_dot_q4_K_q8_K_generic`: per super-block, the integer sums of each 32-element
/// sub-block times its 6-bit scale, the mins times the Q8_K sums of 16, then the f32 scales.
fn vec_dot_q4_k_q8_k(w: &[u8], y: &[BlockQ8K]) -> f32 {
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for (x, y) in w.chunks(144).zip(y) {
        let d_x = f16::from_le_bytes([x[0], x[1]]).to_f32();
        let dmin_x = f16::from_le_bytes([x[2], x[3]]).to_f32();
        let scales = &x[4..16];
        let qs = &x[16..144];
        let mut aux8 = [0i8; 256];
        for j in 0..4 {
            for l in 0..32 {
                aux8[64 * j + l] = (qs[32 * j + l] & 0xF) as i8;
                aux8[64 * j + 32 + l] = (qs[32 * j + l] >> 4) as i8;
            }
        }
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += i32::from(y.bsums[j]) * i32::from(scale_min_k4(j / 2, scales).1);
        }
        let mut aux32 = [0i32; 8];
        for j in 0..8 {
            let scale = i32::from(scale_min_k4(j, scales).0);
            for l in 0..32 {
                let i = 32 * j + l;
                aux32[l % 8] += scale * i32::from(y.qs[i]) * i32::from(aux8[i]);
            }
        }
        let d = d_x * y.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        sumf -= dmin_x * y.d * sumi as f32;
    }
    sumf + sums.iter().sum::<f32>()
}

/// `ggml_vec_dot_q8_0_q8_0_generic` with the activations quantized as ggml's Q8_0 (f16 d).
fn vec_dot_q8_0_q8_0(w: &[u8], x: &[f32]) -> f32 {
    let mut sumf = 0f32;
    for (wb, xb) in w.chunks(34).zip(x.chunks(32)) {
        let dw = f16::from_le_bytes([wb[0], wb[1]]).to_f32();
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let dx = f16::from_f32(d).to_f32();
        let sumi: i32 = xb
            .iter()
            .zip(&wb[2..34])
            .map(|(&v, &q)| (v * id).round_ties_even() as i32 * i32::from(q as i8))
            .sum();
        sumf += sumi as f32 * (dw * dx);
    }
    sumf
}

/// The reference's way: activations through `ActivationQuant::LlamaCpp`, weights dequantized,
/// an f64 dot. Returns (dot, Σ|x·w| as the scale of f32 rounding).
fn emulated(ty: GgmlType, w: &[u8], x: &[f32]) -> (f64, f64) {
    let xq = ActivationQuant::LlamaCpp.apply(ty, x, x.len());
    let mut wd = vec![0f32; x.len()];
    formats::dequantize(ty, w, &mut wd).unwrap();
    xq.iter().zip(&wd).fold((0.0, 0.0), |(s, m), (&a, &b)| {
        let p = f64::from(a) * f64::from(b);
        (s + p, m + p.abs())
    })
}

#[test]
fn the_q4_k_emulation_computes_ggmls_q8_k_integer_dot() {
    for (k, seed) in [(2048, 1), (11008, 2), (4864, 3), (2048, 4)] {
        let x = activations(k, seed);
        let w = formats::quantize(GgmlType::Q4K, &weights(k, seed)).unwrap();
        let want = vec_dot_q4_k_q8_k(&w, &quantize_row_q8_k_ref(&x));
        let (got, magnitude) = emulated(GgmlType::Q4K, &w, &x);
        // f32 sums over k products: a few ulps of the magnitude.
        let allowed = 4e-6 * magnitude;
        assert!(
            (got - f64::from(want)).abs() <= allowed,
            "k {k}: emulated {got}, ggml {want} (allowed {allowed:e})"
        );
        // rocky's own rounding (blocks of 32) is another: the comparison tells them apart.
        let rocky = ActivationQuant::RockyInt8.apply(GgmlType::Q4K, &x, k);
        let mut wd = vec![0f32; k];
        formats::dequantize(GgmlType::Q4K, &w, &mut wd).unwrap();
        let rocky: f64 = rocky
            .iter()
            .zip(&wd)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        assert!((rocky - f64::from(want)).abs() > 10.0 * allowed, "k {k}");
        // And the rounding is not nothing: the exact dot differs by more than f32 noise.
        let exact: f64 = x
            .iter()
            .zip(&{
                let mut wd = vec![0f32; k];
                formats::dequantize(GgmlType::Q4K, &w, &mut wd).unwrap();
                wd
            })
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        assert!((exact - got).abs() > 10.0 * allowed, "k {k}");
    }
}

#[test]
fn the_q8_0_emulation_computes_ggmls_q8_0_integer_dot() {
    for (k, seed) in [(896, 5), (2048, 6)] {
        let x = activations(k, seed);
        let w = formats::quantize(GgmlType::Q8_0, &weights(k, seed)).unwrap();
        let want = vec_dot_q8_0_q8_0(&w, &x);
        let (got, magnitude) = emulated(GgmlType::Q8_0, &w, &x);
        let allowed = 4e-6 * magnitude;
        assert!(
            (got - f64::from(want)).abs() <= allowed,
            "k {k}: emulated {got}, ggml {want} (allowed {allowed:e})"
        );
    }
}
