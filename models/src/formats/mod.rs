//! GGML tensor element types and their block layouts.
//!
//! A GGML tensor row of `n` elements is stored as `n / block_size` blocks of `type_size` bytes.
//! The reader uses this table to validate tensor sizes before touching any data; the
//! dequantizers and quantizers of each format live in the submodules.

use std::fmt;

use rayon::prelude::*;

mod error;
mod half_floats;
mod iq4_nl;
mod iq4_search;
mod iq4_xs;
mod k_quant_scales;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;
mod scale_search;

pub use error::{Conversion, FormatError};

/// Every GGML type id a GGUF file may name and that rocky knows the layout of.
///
/// Knowing the layout (to validate and skip a tensor) is separate from being able to compute
/// with it: `GgmlType::can_dequantize` says which ones have CPU dequantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    IQ4NL,
    IQ4XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
}

impl GgmlType {
    /// All known types, in id order.
    pub const ALL: [GgmlType; 22] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::BF16,
    ];

    /// The id stored in GGUF tensor infos (ggml.h `enum ggml_type`).
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::IQ4NL => 20,
            GgmlType::IQ4XS => 23,
            GgmlType::I8 => 24,
            GgmlType::I16 => 25,
            GgmlType::I32 => 26,
            GgmlType::I64 => 27,
            GgmlType::F64 => 28,
            GgmlType::BF16 => 30,
        }
    }

    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Name as llama.cpp prints it (`Q4_K`, `F16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2K => "Q2_K",
            GgmlType::Q3K => "Q3_K",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::Q8K => "Q8_K",
            GgmlType::IQ4NL => "IQ4_NL",
            GgmlType::IQ4XS => "IQ4_XS",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::BF16 => "BF16",
        }
    }

    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::I8
            | GgmlType::I16
            | GgmlType::I32
            | GgmlType::I64
            | GgmlType::F64 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1
            | GgmlType::IQ4NL => 32,
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K
            | GgmlType::IQ4XS => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::I8 => 1,
            GgmlType::I16 => 2,
            GgmlType::I32 => 4,
            GgmlType::I64 | GgmlType::F64 => 8,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
            GgmlType::IQ4NL => 18,
            GgmlType::IQ4XS => 136,
        }
    }

    /// Bytes of a row of `n` elements, or `None` when `n` is not a whole number of blocks or
    /// the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if n % bs != 0 {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Whether `dequantize` supports this type.
    pub fn can_dequantize(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::BF16
                | GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::Q4K
                | GgmlType::Q5K
                | GgmlType::Q6K
                | GgmlType::IQ4NL
                | GgmlType::IQ4XS
        )
    }
}

impl GgmlType {
    /// The names of the types `dequantize` supports, comma-separated (for error messages).
    pub fn dequantizable_names() -> String {
        supported_list(GgmlType::can_dequantize)
    }

    /// Whether `quantize` supports this type.
    pub fn can_quantize(self) -> bool {
        self.can_dequantize()
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------------------------
// Conversion between f32 and the block formats. Every function validates sizes and types and
// then hands whole blocks to the per-format module; those are bit-exact with ggml-quants.c
// (`dequantize_row_*`, `quantize_row_*_ref`).

/// One format's block codec: elements and bytes per block and the per-block conversions.
struct Codec {
    elems: usize,
    bytes: usize,
    /// Decodes one block (element-wise formats: any number of elements).
    dequantize: fn(&[u8], &mut [f32]),
    quantize: QuantizeFn,
}

#[derive(Clone, Copy)]
enum QuantizeFn {
    /// Converts any number of elements at once (F32, F16, BF16).
    Elementwise(fn(&[f32], &mut [u8])),
    /// Converts one block; fails when a scale does not fit its f16 field. `max_abs` is the
    /// largest magnitude the format can decode to (all scales at their f16 maximum): larger
    /// inputs are rejected up front, which also keeps ggml's f32 sums (up to x³·levels) finite.
    Block {
        quantize_block: fn(&[f32], &mut [u8]) -> Result<(), half_floats::ScaleOverflow>,
        max_abs: f32,
    },
}

fn codec(ty: GgmlType) -> Option<Codec> {
    use QuantizeFn::Elementwise;
    const F16_MAX: f32 = 65504.0;
    let block = |quantize_block, max_abs| QuantizeFn::Block {
        quantize_block,
        max_abs,
    };
    let c = |elems, bytes, dequantize, quantize| {
        Some(Codec {
            elems,
            bytes,
            dequantize,
            quantize,
        })
    };
    match ty {
        GgmlType::F32 => c(
            1,
            4,
            half_floats::dequantize_f32,
            Elementwise(half_floats::quantize_f32),
        ),
        GgmlType::F16 => c(
            1,
            2,
            half_floats::dequantize_f16,
            Elementwise(half_floats::quantize_f16),
        ),
        GgmlType::BF16 => c(
            1,
            2,
            half_floats::dequantize_bf16,
            Elementwise(half_floats::quantize_bf16),
        ),
        GgmlType::Q8_0 => c(
            q8_0::BLOCK_ELEMS,
            q8_0::BLOCK_BYTES,
            q8_0::dequantize_block,
            block(q8_0::quantize_block, F16_MAX * 127.0),
        ),
        GgmlType::Q4_0 => c(
            q4_0::BLOCK_ELEMS,
            q4_0::BLOCK_BYTES,
            q4_0::dequantize_block,
            block(q4_0::quantize_block, F16_MAX * 8.0),
        ),
        GgmlType::Q4_1 => c(
            q4_1::BLOCK_ELEMS,
            q4_1::BLOCK_BYTES,
            q4_1::dequantize_block,
            // m + 15·d with both at the f16 maximum.
            block(q4_1::quantize_block, F16_MAX * 16.0),
        ),
        GgmlType::Q5_1 => c(
            q5_1::BLOCK_ELEMS,
            q5_1::BLOCK_BYTES,
            q5_1::dequantize_block,
            block(q5_1::quantize_block, F16_MAX * 32.0),
        ),
        GgmlType::Q5_0 => c(
            q5_0::BLOCK_ELEMS,
            q5_0::BLOCK_BYTES,
            q5_0::dequantize_block,
            block(q5_0::quantize_block, F16_MAX * 16.0),
        ),
        GgmlType::Q4K => c(
            q4_k::BLOCK_ELEMS,
            q4_k::BLOCK_BYTES,
            q4_k::dequantize_block,
            block(q4_k::quantize_block, F16_MAX * 63.0 * 15.0),
        ),
        GgmlType::Q5K => c(
            q5_k::BLOCK_ELEMS,
            q5_k::BLOCK_BYTES,
            q5_k::dequantize_block,
            block(q5_k::quantize_block, F16_MAX * 63.0 * 31.0),
        ),
        GgmlType::Q6K => c(
            q6_k::BLOCK_ELEMS,
            q6_k::BLOCK_BYTES,
            q6_k::dequantize_block,
            block(q6_k::quantize_block, F16_MAX * 128.0 * 32.0),
        ),
        GgmlType::IQ4NL => c(
            iq4_nl::BLOCK_ELEMS,
            iq4_nl::BLOCK_BYTES,
            iq4_nl::dequantize_block,
            block(iq4_nl::quantize_block, F16_MAX * 127.0),
        ),
        GgmlType::IQ4XS => c(
            iq4_xs::BLOCK_ELEMS,
            iq4_xs::BLOCK_BYTES,
            iq4_xs::dequantize_block,
            // d·(ls - 32) with d at the f16 maximum and ls - 32 = -32, level -127.
            block(iq4_xs::quantize_block, F16_MAX * 32.0 * 127.0),
        ),
        _ => None,
    }
}

fn supported_list(pred: fn(GgmlType) -> bool) -> String {
    GgmlType::ALL
        .into_iter()
        .filter(|t| pred(*t))
        .map(GgmlType::name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn codec_for(ty: GgmlType, conversion: Conversion) -> Result<Codec, FormatError> {
    let (supported, pred): (bool, fn(GgmlType) -> bool) = match conversion {
        Conversion::Dequantize => (ty.can_dequantize(), GgmlType::can_dequantize),
        Conversion::Quantize => (ty.can_quantize(), GgmlType::can_quantize),
    };
    match codec(ty) {
        Some(c) if supported => Ok(c),
        _ => Err(FormatError::Unsupported {
            ty,
            conversion,
            supported: supported_list(pred),
        }),
    }
}

/// Bytes of `n_elements` of `ty`, with the error that explains why there is no such size.
fn bytes_for(ty: GgmlType, n_elements: u64) -> Result<u64, FormatError> {
    ty.row_bytes(n_elements).ok_or_else(|| {
        if n_elements % ty.block_size() as u64 != 0 {
            FormatError::PartialBlock {
                ty,
                n_elements,
                block_size: ty.block_size(),
            }
        } else {
            FormatError::TooLarge {
                ty,
                n_rows: 1,
                row_len: n_elements,
            }
        }
    })
}

fn check_byte_length(ty: GgmlType, n_elements: u64, actual: usize) -> Result<(), FormatError> {
    let expected = bytes_for(ty, n_elements)?;
    if expected != actual as u64 {
        return Err(FormatError::ByteLength {
            ty,
            n_elements,
            expected,
            actual: actual as u64,
            block_size: ty.block_size(),
            type_size: ty.type_size(),
        });
    }
    Ok(())
}

fn dequantize_unchecked(c: &Codec, data: &[u8], out: &mut [f32]) {
    if c.elems == 1 {
        (c.dequantize)(data, out);
    } else {
        for (b, y) in data
            .chunks_exact(c.bytes)
            .zip(out.chunks_exact_mut(c.elems))
        {
            (c.dequantize)(b, y);
        }
    }
}

/// Decodes `out.len()` elements of type `ty` from `data`, which must hold exactly
/// `ty.row_bytes(out.len())` bytes. Results are bit-exact with ggml's `dequantize_row_*`.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let c = codec_for(ty, Conversion::Dequantize)?;
    check_byte_length(ty, out.len() as u64, data.len())?;
    dequantize_unchecked(&c, data, out);
    Ok(())
}

/// `dequantize` into a new vector of `n_elements` values.
pub fn dequantize_to_vec(
    ty: GgmlType,
    data: &[u8],
    n_elements: usize,
) -> Result<Vec<f32>, FormatError> {
    let mut out = vec![0.0f32; n_elements];
    dequantize(ty, data, &mut out)?;
    Ok(out)
}

/// Decodes a tensor of `n_rows` rows of `row_len` elements (as GGUF stores it: rows back to
/// back, each a whole number of blocks) on all rayon threads. For large tensors.
pub fn dequantize_rows(
    ty: GgmlType,
    data: &[u8],
    n_rows: usize,
    row_len: usize,
) -> Result<Vec<f32>, FormatError> {
    let c = codec_for(ty, Conversion::Dequantize)?;
    if row_len % c.elems != 0 {
        return Err(FormatError::PartialBlock {
            ty,
            n_elements: row_len as u64,
            block_size: c.elems,
        });
    }
    let too_large = || FormatError::TooLarge {
        ty,
        n_rows: n_rows as u64,
        row_len: row_len as u64,
    };
    let n = n_rows.checked_mul(row_len).ok_or_else(too_large)?;
    n.checked_mul(std::mem::size_of::<f32>())
        .ok_or_else(too_large)?;
    check_byte_length(ty, n as u64, data.len())?;

    // Blocks are independent and rows are whole blocks, so the work splits at any block
    // boundary: chunks of ~64 Ki elements amortize rayon's per-task cost.
    let blocks_per_task = (65536 / c.elems).max(1);
    let mut out = vec![0.0f32; n];
    out.par_chunks_mut(blocks_per_task * c.elems)
        .zip(data.par_chunks(blocks_per_task * c.bytes))
        .for_each(|(y, b)| dequantize_unchecked(&c, b, y));
    Ok(out)
}

/// Encodes `src` as `ty`, following ggml's reference quantizers (`quantize_row_*_ref`, what
/// llama-quantize uses without an importance matrix; for IQ4_NL / IQ4_XS `quantize_iq4_*`,
/// which llama-quantize calls, see `iq4_search`) bit for bit. `src.len()` must be a whole
/// number of blocks; block formats need finite values within the range their f16 scales
/// allow (see `FormatError::OutOfRange` and `ScaleOverflow`).
///
/// Single-threaded and allocation-free apart from the result: parallelize over rows at the
/// call site (or use `quantize_into` to write into one preallocated buffer).
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, FormatError> {
    codec_for(ty, Conversion::Quantize)?;
    let n_bytes = bytes_for(ty, src.len() as u64)?;
    let n_bytes = usize::try_from(n_bytes).map_err(|_| FormatError::TooLarge {
        ty,
        n_rows: 1,
        row_len: src.len() as u64,
    })?;
    let mut out = vec![0u8; n_bytes];
    quantize_into(ty, src, &mut out)?;
    Ok(out)
}

/// `quantize` into `out`, which must hold exactly `ty.row_bytes(src.len())` bytes.
pub fn quantize_into(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<(), FormatError> {
    let c = codec_for(ty, Conversion::Quantize)?;
    check_byte_length(ty, src.len() as u64, out.len())?;
    match c.quantize {
        QuantizeFn::Elementwise(f) => f(src, out),
        QuantizeFn::Block {
            quantize_block: f,
            max_abs,
        } => {
            if let Some(index) = src.iter().position(|v| v.is_nan() || v.abs() > max_abs) {
                let value = src[index];
                return Err(if value.is_finite() {
                    FormatError::OutOfRange {
                        ty,
                        index,
                        value,
                        max_abs,
                    }
                } else {
                    FormatError::NonFinite { ty, index, value }
                });
            }
            let blocks = src.chunks_exact(c.elems).zip(out.chunks_exact_mut(c.bytes));
            for (block, (x, b)) in blocks.enumerate() {
                f(x, b).map_err(|half_floats::ScaleOverflow(scale)| {
                    FormatError::ScaleOverflow { ty, block, scale }
                })?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod codec_tests {
    use super::*;

    #[test]
    fn codecs_agree_with_the_type_table() {
        for ty in GgmlType::ALL {
            assert_eq!(codec(ty).is_some(), ty.can_dequantize(), "{ty}");
            if let Some(c) = codec(ty) {
                assert_eq!(c.elems, ty.block_size(), "{ty} block size");
                assert_eq!(c.bytes, ty.type_size(), "{ty} type size");
            }
        }
    }
}
