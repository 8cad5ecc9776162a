//! What can go wrong when converting between f32 and GGML block formats.

use std::fmt;

use super::GgmlType;

/// Which direction of conversion an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    Dequantize,
    Quantize,
}

impl fmt::Display for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Conversion::Dequantize => "dequantization",
            Conversion::Quantize => "quantization",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "{conversion} of {ty} is not supported by rocky; supported types: {supported}. \
         Convert the tensor to one of them (e.g. with llama-quantize) first"
    )]
    Unsupported {
        ty: GgmlType,
        conversion: Conversion,
        /// The supported types, comma-separated.
        supported: String,
    },

    #[error(
        "{ty} data for {n_elements} elements must be {expected} bytes, but {actual} bytes were given \
         (each block of {block_size} elements takes {type_size} bytes)"
    )]
    ByteLength {
        ty: GgmlType,
        n_elements: u64,
        expected: u64,
        actual: u64,
        block_size: usize,
        type_size: usize,
    },

    #[error(
        "{n_elements} elements is not a whole number of {ty} blocks ({block_size} elements each); \
         rows of {ty} tensors must have a multiple of {block_size} elements"
    )]
    PartialBlock {
        ty: GgmlType,
        n_elements: u64,
        block_size: usize,
    },

    #[error("a {ty} tensor of {n_rows} rows of {row_len} elements is too large to address")]
    TooLarge {
        ty: GgmlType,
        n_rows: u64,
        row_len: u64,
    },

    #[error(
        "cannot quantize to {ty}: element {index} is {value}; block formats can only hold finite values"
    )]
    NonFinite {
        ty: GgmlType,
        index: usize,
        value: f32,
    },

    #[error(
        "cannot quantize to {ty}: element {index} is {value:e}, beyond the largest magnitude {ty} \
         can hold ({max_abs:e}, with its f16 scales at their maximum)"
    )]
    OutOfRange {
        ty: GgmlType,
        index: usize,
        value: f32,
        max_abs: f32,
    },

    /// Within `OutOfRange`'s limit, a block can still need a scale beyond f16 (e.g. K-quants
    /// whose values span both signs widely).
    #[error(
        "cannot quantize to {ty}: block {block} (elements {first}..{end}) needs a scale of {scale:e}, \
         beyond the f16 range (±65504) the format stores scales in; its values are too large for {ty}",
        first = block * ty.block_size(),
        end = (block + 1) * ty.block_size()
    )]
    ScaleOverflow {
        ty: GgmlType,
        block: usize,
        scale: f32,
    },
}
