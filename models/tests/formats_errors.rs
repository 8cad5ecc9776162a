//! Bad input to the block-format conversions gets an error that names the type and the sizes
//! involved, never a panic.

use rocky_models::formats::{
    dequantize, dequantize_rows, dequantize_to_vec, quantize, quantize_into, Conversion,
    FormatError, GgmlType,
};

#[test]
fn wrong_byte_length_names_type_and_both_sizes() {
    let mut out = vec![0.0f32; 256];
    let err = dequantize(GgmlType::Q4K, &[0u8; 143], &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::ByteLength {
                ty: GgmlType::Q4K,
                n_elements: 256,
                expected: 144,
                actual: 143,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    for part in ["Q4_K", "256 elements", "144 bytes", "143 bytes"] {
        assert!(msg.contains(part), "message {msg:?} lacks {part:?}");
    }
    // Too many bytes is as wrong as too few.
    let err = dequantize_to_vec(GgmlType::Q8_0, &[0u8; 35], 32).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::ByteLength {
                expected: 34,
                actual: 35,
                ..
            }
        ),
        "{err:?}"
    );
    // The output buffer of quantize_into is checked the same way.
    let err = quantize_into(GgmlType::Q6K, &[0.0; 256], &mut [0u8; 200]).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::ByteLength {
                expected: 210,
                actual: 200,
                ..
            }
        ),
        "{err:?}"
    );
    let err = dequantize_rows(GgmlType::Q5_0, &[0u8; 22 * 3], 2, 32).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::ByteLength {
                expected: 44,
                actual: 66,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn unsupported_types_say_which_are_supported() {
    for ty in [
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q8_1,
        GgmlType::Q8K,
        GgmlType::I8,
    ] {
        let bytes = vec![0u8; ty.type_size()];
        let mut out = vec![0.0f32; ty.block_size()];
        let err = dequantize(ty, &bytes, &mut out).unwrap_err();
        assert!(
            matches!(err, FormatError::Unsupported { ty: t, conversion: Conversion::Dequantize, .. } if t == ty),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(ty.name()) && msg.contains("dequantization"),
            "{msg}"
        );
        for supported in [
            "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
            "IQ4_NL", "IQ4_XS",
        ] {
            assert!(msg.contains(supported), "{msg:?} does not list {supported}");
        }
        assert!(dequantize_rows(ty, &bytes, 1, ty.block_size()).is_err());

        let err = quantize(ty, &vec![0.0; ty.block_size()]).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Unsupported {
                    conversion: Conversion::Quantize,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("quantization of"), "{err}");
    }
}

#[test]
fn lengths_that_are_not_whole_blocks_are_rejected() {
    let err = quantize(GgmlType::Q6K, &[0.5; 300]).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::PartialBlock {
                ty: GgmlType::Q6K,
                n_elements: 300,
                block_size: 256
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("300") && msg.contains("Q6_K") && msg.contains("256"),
        "{msg}"
    );

    let err = quantize(GgmlType::Q8_0, &[0.5; 33]).unwrap_err();
    assert!(
        matches!(err, FormatError::PartialBlock { block_size: 32, .. }),
        "{err:?}"
    );

    let mut out = vec![0.0f32; 33];
    let err = dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out).unwrap_err();
    assert!(
        matches!(err, FormatError::PartialBlock { n_elements: 33, .. }),
        "{err:?}"
    );

    // A row length that is not whole blocks, even when the total would be.
    let err = dequantize_rows(GgmlType::Q4K, &[0u8; 144], 2, 128).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::PartialBlock {
                n_elements: 128,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn impossible_tensor_sizes_are_rejected() {
    let err = dequantize_rows(GgmlType::F32, &[], usize::MAX / 2, 4).unwrap_err();
    assert!(matches!(err, FormatError::TooLarge { .. }), "{err:?}");
}

#[test]
fn non_finite_input_to_block_formats_is_rejected_with_its_index() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut x = vec![0.25f32; 512];
        x[300] = bad;
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ] {
            let err = quantize(ty, &x).unwrap_err();
            assert!(
                matches!(err, FormatError::NonFinite { index: 300, .. }),
                "{ty}: {err:?}"
            );
            assert!(err.to_string().contains("element 300"), "{err}");
        }
    }
    // Element-wise float formats represent infinities and NaNs: no error.
    let x = [f32::INFINITY, f32::NAN, -0.0, 1.0];
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let y = dequantize_to_vec(ty, &quantize(ty, &x).unwrap(), 4).unwrap();
        assert!(y[0] == f32::INFINITY && y[1].is_nan() && y[2].to_bits() == (-0.0f32).to_bits());
    }
}

#[test]
fn values_beyond_what_f16_scales_can_reach_are_rejected() {
    // Q8_0 decodes to at most 127 × 65504 (the largest f16) ≈ 8.3e6.
    let mut x = vec![1.0f32; 128];
    x[70] = 1e7;
    let err = quantize(GgmlType::Q8_0, &x).unwrap_err();
    assert!(
        matches!(err, FormatError::OutOfRange { index: 70, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("element 70") && msg.contains("Q8_0"), "{msg}");
    x[70] = 8.3e6; // just inside: its scale, 8.3e6/127 ≈ 65354, fits
    assert!(quantize(GgmlType::Q8_0, &x).is_ok());

    // Far out of range for every block format, including ones whose f32 arithmetic would
    // overflow (ggml's sums reach x³·levels).
    let mut x = vec![1.0f32; 512];
    x[400] = 1e20;
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        let err = quantize(ty, &x).unwrap_err();
        assert!(
            matches!(err, FormatError::OutOfRange { index: 400, .. }),
            "{ty}: {err:?}"
        );
    }
}

#[test]
fn a_block_whose_scale_exceeds_f16_is_rejected_with_its_index() {
    // Q4_K holds up to 63 × 15 × 65504 ≈ 6.2e7 above its offset, but the offset (min) itself
    // only reaches 63 × 65504 ≈ 4.1e6: -5e7 needs dmin = 5e7/63 ≈ 7.9e5, beyond f16.
    let mut x = vec![0.5f32; 768];
    x[600] = -5e7;
    let err = quantize(GgmlType::Q4K, &x).unwrap_err();
    assert!(
        matches!(err, FormatError::ScaleOverflow { block: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("elements 512..768"), "{err}");
    // The same magnitude as a positive value is representable.
    x[600] = 5e7;
    assert!(quantize(GgmlType::Q4K, &x).is_ok());
}

#[test]
fn empty_input_is_fine() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4K] {
        assert!(quantize(ty, &[]).unwrap().is_empty());
        assert!(dequantize_to_vec(ty, &[], 0).unwrap().is_empty());
        assert!(dequantize_rows(ty, &[], 0, ty.block_size())
            .unwrap()
            .is_empty());
    }
}
