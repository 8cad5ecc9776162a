//! The GEMM CPU reference against closed forms, and the comparison it offers the tuner.

use half::f16;
use rocky_compiler::templates::gemm::reference::{
    compare, quantize_activations_q8, reference, Mismatch, ReferenceError,
};
use rocky_compiler::templates::gemm::{ActType, GemmSchedule, GemmWorkload, Math, Precision};
use rocky_compiler::{testdata, WeightFormat};

fn workload(
    m: u32,
    n: u32,
    k: u32,
    act: ActType,
    weight: WeightFormat,
    bias: bool,
) -> GemmWorkload {
    GemmWorkload {
        m,
        n,
        k,
        act,
        weight,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    }
}

fn schedule(math: Math, accumulate: Precision) -> GemmSchedule {
    GemmSchedule {
        bm: 4,
        bn: 16,
        bk: 32,
        tm: 1,
        tn: 1,
        split_k: 1,
        vector_width: 4,
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
        accumulate,
        math,
    }
}

#[test]
fn f32_weights_closed_form_with_bias() {
    // x[r][k] = r + 1, w[c][k] = (c + 1) / 2  →  y[r][c] = (r+1)(c+1)k/2 + bias[c].
    let (m, n, k) = (3u32, 5u32, 64u32);
    let w = workload(m, n, k, ActType::F32, WeightFormat::F32, true);
    let x: Vec<f32> = (0..m * k).map(|i| (i / k + 1) as f32).collect();
    let wb: Vec<u8> = (0..n * k)
        .flat_map(|i| ((i / k + 1) as f32 * 0.5).to_le_bytes())
        .collect();
    let bias: Vec<f32> = (0..n).map(|c| c as f32 - 2.0).collect();
    let r = reference(&w, Math::FmaF32, &x, &wb, Some(&bias)).unwrap();
    for row in 0..m {
        for c in 0..n {
            let want = (row + 1) as f32 * (c + 1) as f32 * k as f32 * 0.5 + bias[c as usize];
            assert_eq!(r.y[(row * n + c) as usize], want);
        }
    }
}

#[test]
fn quantized_weights_closed_form() {
    // Q8_0 blocks with d = 0.25 and q = j - 16 on element j of each block; x = 1.
    let (n, k) = (2u32, 64u32);
    let w = workload(1, n, k, ActType::F32, WeightFormat::Q8_0, false);
    let mut wb = Vec::new();
    for _ in 0..n * k / 32 {
        wb.extend(f16::from_f32(0.25).to_le_bytes());
        wb.extend((0..32).map(|j| (j as i8 - 16) as u8));
    }
    let r = reference(&w, Math::FmaF32, &vec![1.0; k as usize], &wb, None).unwrap();
    let per_block: f32 = (0..32).map(|j| (j as f32 - 16.0) * 0.25).sum();
    assert_eq!(r.y, vec![per_block * 2.0; 2]);
}

#[test]
fn f16_activations_are_rounded_like_the_kernel_reads_them() {
    let w = workload(1, 1, 32, ActType::F16, WeightFormat::F32, false);
    let x = vec![1.0 + 2f32.powi(-12); 32]; // not representable in f16: reads as 1.0
    let wb: Vec<u8> = (0..32).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let r = reference(&w, Math::FmaF32, &x, &wb, None).unwrap();
    assert_eq!(r.y, vec![32.0]);
}

#[test]
fn int8_activation_quantization_closed_form() {
    let mut block = vec![0f32; 32];
    block[0] = 127.0;
    block[1] = 63.5; // ties to even: 64
    block[2] = -127.0;
    block[3] = 62.5; // ties to even: 62
    let q = quantize_activations_q8(&block);
    assert_eq!(&q[..5], &[127.0, 64.0, -127.0, 62.0, 0.0]);
    assert_eq!(
        quantize_activations_q8(&[0.0; 32]),
        vec![0.0; 32],
        "zero blocks stay zero (no NaN)"
    );
    // The int8 reference uses the quantized activations.
    let w = workload(1, 1, 32, ActType::F32, WeightFormat::F32, false);
    let wb: Vec<u8> = (0..32).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let r = reference(&w, Math::Int8Dot, &block, &wb, None).unwrap();
    assert_eq!(r.y, vec![127.0 + 64.0 - 127.0 + 62.0]);
}

#[test]
fn magnitude_bounds_the_outputs() {
    let w = workload(3, 7, 256, ActType::F32, WeightFormat::Q4K, true);
    let x = testdata::random_activations(3 * 256, 1);
    let wb = testdata::random_weights(WeightFormat::Q4K, 7, 256, 2);
    let bias = testdata::random_activations(7, 3);
    let r = reference(&w, Math::FmaF32, &x, &wb, Some(&bias)).unwrap();
    for (y, m) in r.y.iter().zip(&r.magnitude) {
        assert!(y.abs() <= m * 1.0001 && *m > 0.0);
    }
}

#[test]
fn compare_accepts_rounding_and_catches_errors() {
    let w = workload(2, 3, 64, ActType::F32, WeightFormat::Q8_0, false);
    let x = testdata::random_activations(2 * 64, 5);
    let wb = testdata::random_weights(WeightFormat::Q8_0, 3, 64, 6);
    let r = reference(&w, Math::FmaF32, &x, &wb, None).unwrap();
    let s = schedule(Math::FmaF32, Precision::F32);
    assert_eq!(compare(&w, &s, &r.y, &r), Ok(()));
    let nudged: Vec<f32> =
        r.y.iter()
            .zip(&r.magnitude)
            .map(|(y, m)| y + m * 1e-6)
            .collect();
    assert_eq!(compare(&w, &s, &nudged, &r), Ok(()));
    let mut wrong = r.y.clone();
    wrong[4] += r.magnitude[4] * 0.01;
    assert!(matches!(
        compare(&w, &s, &wrong, &r),
        Err(Mismatch::Value { row: 1, col: 1, .. })
    ));
    // f16 math is allowed more, but not a wrong element.
    let s16 = schedule(Math::FmaF16Packed, Precision::F16);
    let mut slightly = r.y.clone();
    slightly[4] += r.magnitude[4] * 0.005;
    assert_eq!(compare(&w, &s16, &slightly, &r), Ok(()));
    wrong[4] = -wrong[4] - 1.0;
    assert!(compare(&w, &s16, &wrong, &r).is_err());
    assert!(matches!(
        compare(&w, &s, &r.y[..5], &r),
        Err(Mismatch::Length { got: 5, want: 6 })
    ));
    let mut nan = r.y.clone();
    nan[0] = f32::NAN;
    assert!(compare(&w, &s, &nan, &r).is_err(), "NaN never passes");
}

#[test]
fn bad_inputs_are_errors() {
    let w = workload(2, 3, 32, ActType::F32, WeightFormat::F32, true);
    let wb = vec![0u8; 3 * 32 * 4];
    assert_eq!(
        reference(&w, Math::FmaF32, &[0.0; 63], &wb, Some(&[0.0; 3])),
        Err(ReferenceError::XLength { got: 63, want: 64 })
    );
    assert_eq!(
        reference(&w, Math::FmaF32, &[0.0; 64], &wb, None),
        Err(ReferenceError::BiasPresence)
    );
    assert_eq!(
        reference(&w, Math::FmaF32, &[0.0; 64], &wb, Some(&[0.0; 2])),
        Err(ReferenceError::BiasLength { got: 2, want: 3 })
    );
    assert!(matches!(
        reference(&w, Math::FmaF32, &[0.0; 64], &wb[..10], Some(&[0.0; 3])),
        Err(ReferenceError::Weights(_))
    ));
}

#[test]
fn int8_comparison_allows_a_rounding_flip_and_no_more() {
    // One large weight: a GPU whose division rounds x·(1/d) across a .5 moves the output by
    // d·w0 (about 1/127); the comparison must accept one or two such flips, not three.
    let w = workload(1, 1, 32, ActType::F32, WeightFormat::F32, false);
    let x = testdata::random_activations(32, 9);
    let mut wv = [0.01f32; 32];
    wv[0] = 1.0;
    let wb: Vec<u8> = wv.iter().flat_map(|v| v.to_le_bytes()).collect();
    let r = reference(&w, Math::Int8Dot, &x, &wb, None).unwrap();
    let d = x.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
    assert!(
        (r.rounding_flip[0] - d).abs() <= d * 1e-6,
        "flip bound is d·max|w|"
    );
    let s = schedule(Math::Int8Dot, Precision::F32);
    assert_eq!(compare(&w, &s, &[r.y[0] + d], &r), Ok(()));
    assert!(compare(&w, &s, &[r.y[0] + 3.0 * d], &r).is_err());
    // Other maths have no flip allowance.
    let r32 = reference(&w, Math::FmaF32, &x, &wb, None).unwrap();
    assert_eq!(r32.rounding_flip, vec![0.0]);
}
