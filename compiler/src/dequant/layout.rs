//! How a quantized weight tensor is laid out in device memory.
//!
//! - [`WeightLayout::Gguf`]: the GGUF blocks as the file stores them (the default).
//! - [`WeightLayout::Aligned`]: each row's blocks in *groups* of [`GROUP`]: a 16-byte-aligned
//!   header holding the group's 2-byte-aligned fields (the f16 `d` of every block; for Q5_0
//!   also the `qh` words), then the blocks' remaining bytes (the *bodies*) back to back. Every
//!   body starts 16-byte aligned (Q8_0: 32 B of quants; Q6_K: ql/qh/scales, 208 B) or at
//!   least word aligned (Q5_0: 16 B of qs, at 16 B), so a kernel reads quant bytes as whole
//!   words and drivers can merge runs of 4 words into 16-byte loads (Mesa merges only loads
//!   it can prove aligned to their full size: the GGUF blocks of 34 / 22 / 210 bytes sit at
//!   2-byte-aligned offsets). The last group of a row may hold fewer blocks; its header keeps
//!   the full size. Rows are a multiple of 16 bytes.
//!
//! Group sizes: Q8_0 16 + 8·32 = 272 B = 8·34; Q6_K 16 + 8·208 = 1680 B = 8·210; Q5_0
//! 48 + 8·16 = 176 B = 8·22: a row of whole groups takes exactly its GGUF bytes, a partial
//! last group `header - 2r` (Q5_0: `header - 6r`) more for its `r` blocks.
//!
//! The repack runs on the host while the weights are uploaded; the GGUF file is never
//! rewritten. [`repack`] is its reference, [`to_gguf_block`] the inverse used by the CPU
//! checks.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

use super::WeightFormat;

/// Blocks per group of the aligned layout.
pub const GROUP: u32 = 8;

/// Layout of a weight tensor in device memory (see the module docs).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
pub enum WeightLayout {
    #[default]
    #[serde(rename = "gguf")]
    Gguf,
    #[serde(rename = "aligned")]
    Aligned,
}

impl WeightLayout {
    pub const ALL: [WeightLayout; 2] = [WeightLayout::Gguf, WeightLayout::Aligned];

    pub fn is_gguf(&self) -> bool {
        *self == WeightLayout::Gguf
    }

    pub fn name(self) -> &'static str {
        match self {
            WeightLayout::Gguf => "gguf",
            WeightLayout::Aligned => "aligned",
        }
    }

    /// Whether `format` can be stored in this layout.
    pub fn supports(self, format: WeightFormat) -> bool {
        self == WeightLayout::Gguf || AlignedGeometry::of(format).is_some()
    }

    /// Bytes of one row of `k` elements (`k` a multiple of the block size; the layout must
    /// support the format).
    pub fn row_bytes(self, format: WeightFormat, k: u64) -> u64 {
        match (self, AlignedGeometry::of(format)) {
            (WeightLayout::Aligned, Some(g)) => g.row_bytes(k / u64::from(format.block_elems())),
            _ => format.row_bytes(k),
        }
    }
}

impl fmt::Display for WeightLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WeightLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gguf" => Ok(WeightLayout::Gguf),
            "aligned" => Ok(WeightLayout::Aligned),
            _ => Err(format!("unknown weight layout {s:?} (use gguf or aligned)")),
        }
    }
}

/// Where a block's fields go in the aligned layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlignedGeometry {
    pub format: WeightFormat,
    /// Bytes of a group's header (a multiple of 16).
    pub header: u32,
    /// Bytes of a block's body (a multiple of 16).
    pub body: u32,
}

impl AlignedGeometry {
    /// The geometry of `format`, or `None` where the aligned layout does not apply (plain
    /// floats; Q4_K, whose 144-byte blocks are 16-byte aligned already).
    pub fn of(format: WeightFormat) -> Option<AlignedGeometry> {
        let (header, body) = match format {
            WeightFormat::Q8_0 => (16, 32),
            WeightFormat::Q5_0 => (48, 16),
            WeightFormat::Q6K => (16, 208),
            _ => return None,
        };
        Some(AlignedGeometry {
            format,
            header,
            body,
        })
    }

    /// Bytes of a whole group.
    pub fn group_bytes(&self) -> u32 {
        self.header + GROUP * self.body
    }

    /// Bytes of a row of `blocks` blocks.
    pub fn row_bytes(&self, blocks: u64) -> u64 {
        blocks.div_ceil(u64::from(GROUP)) * u64::from(self.header) + blocks * u64::from(self.body)
    }

    /// Row-relative byte offsets of block `i`: (its group's header, its body).
    pub fn offsets(&self, i: u64) -> (u64, u64) {
        let g = i / u64::from(GROUP);
        let j = i % u64::from(GROUP);
        let head = g * u64::from(self.group_bytes());
        (
            head,
            head + u64::from(self.header) + j * u64::from(self.body),
        )
    }

    /// Copies GGUF block `src` (block `j` of its group) into its header slots and body `dst`.
    fn scatter(&self, j: usize, src: &[u8], header: &mut [u8], body: &mut [u8]) {
        match self.format {
            WeightFormat::Q8_0 => {
                header[2 * j..2 * j + 2].copy_from_slice(&src[0..2]);
                body.copy_from_slice(&src[2..34]);
            }
            WeightFormat::Q5_0 => {
                header[2 * j..2 * j + 2].copy_from_slice(&src[0..2]);
                header[16 + 4 * j..20 + 4 * j].copy_from_slice(&src[2..6]);
                body.copy_from_slice(&src[6..22]);
            }
            WeightFormat::Q6K => {
                header[2 * j..2 * j + 2].copy_from_slice(&src[208..210]);
                body.copy_from_slice(&src[0..208]);
            }
            f => unreachable!("no aligned geometry for {f}"),
        }
    }

    /// The inverse of `scatter`.
    fn gather(&self, j: usize, header: &[u8], body: &[u8], out: &mut [u8]) {
        match self.format {
            WeightFormat::Q8_0 => {
                out[0..2].copy_from_slice(&header[2 * j..2 * j + 2]);
                out[2..34].copy_from_slice(body);
            }
            WeightFormat::Q5_0 => {
                out[0..2].copy_from_slice(&header[2 * j..2 * j + 2]);
                out[2..6].copy_from_slice(&header[16 + 4 * j..20 + 4 * j]);
                out[6..22].copy_from_slice(body);
            }
            WeightFormat::Q6K => {
                out[208..210].copy_from_slice(&header[2 * j..2 * j + 2]);
                out[0..208].copy_from_slice(body);
            }
            f => unreachable!("no aligned geometry for {f}"),
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum LayoutError {
    #[error("{format} has no {layout} layout (it applies to Q8_0, Q5_0 and Q6_K)")]
    Unsupported {
        format: WeightFormat,
        layout: WeightLayout,
    },
    #[error("{format}: row length {k} is not a positive multiple of the block size {block}")]
    RowLength {
        format: WeightFormat,
        k: u64,
        block: u32,
    },
    #[error("{format}: {rows} rows of {k} elements are {needed} bytes, got {got}")]
    Size {
        format: WeightFormat,
        rows: u64,
        k: u64,
        needed: u64,
        got: u64,
    },
}

fn geometry_and_rows(
    format: WeightFormat,
    layout: WeightLayout,
    k: u64,
    rows: u64,
    got: u64,
    row_bytes: u64,
) -> Result<AlignedGeometry, LayoutError> {
    let geo = AlignedGeometry::of(format).ok_or(LayoutError::Unsupported { format, layout })?;
    let block = format.block_elems();
    if k == 0 || k % u64::from(block) != 0 {
        return Err(LayoutError::RowLength { format, k, block });
    }
    let needed = rows.checked_mul(row_bytes);
    if needed != Some(got) {
        return Err(LayoutError::Size {
            format,
            rows,
            k,
            needed: needed.unwrap_or(u64::MAX),
            got,
        });
    }
    Ok(geo)
}

/// `rows` GGUF rows of `k` elements (`gguf`, exactly their bytes) in the aligned layout.
pub fn repack(
    format: WeightFormat,
    k: u64,
    rows: u64,
    gguf: &[u8],
) -> Result<Vec<u8>, LayoutError> {
    let layout = WeightLayout::Aligned;
    let geo = geometry_and_rows(
        format,
        layout,
        k,
        rows,
        gguf.len() as u64,
        format.row_bytes(k),
    )?;
    let (src_row, dst_row) = (
        format.row_bytes(k) as usize,
        layout.row_bytes(format, k) as usize,
    );
    let blocks = k / u64::from(format.block_elems());
    let (bb, hb, body) = (
        format.block_bytes() as usize,
        geo.header as usize,
        geo.body as usize,
    );
    let mut out = vec![0u8; dst_row * rows as usize];
    for (src, dst) in gguf
        .chunks_exact(src_row)
        .zip(out.chunks_exact_mut(dst_row))
    {
        for i in 0..blocks {
            let (h, o) = geo.offsets(i);
            let (h, o) = (h as usize, o as usize);
            let j = (i % u64::from(GROUP)) as usize;
            let block = &src[i as usize * bb..(i as usize + 1) * bb];
            // Header and body never overlap: the body starts after the header.
            let (head, rest) = dst.split_at_mut(h + hb);
            geo.scatter(
                j,
                block,
                &mut head[h..],
                &mut rest[o - h - hb..o - h - hb + body],
            );
        }
    }
    Ok(out)
}

/// `rows` GGUF rows of `k` elements as the device holds them in `layout`: borrowed as they
/// are for GGUF, repacked for the aligned layout.
pub fn to_device<'a>(
    format: WeightFormat,
    layout: WeightLayout,
    k: u64,
    rows: u64,
    gguf: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>, LayoutError> {
    match layout {
        WeightLayout::Gguf => Ok(std::borrow::Cow::Borrowed(gguf)),
        WeightLayout::Aligned => Ok(std::borrow::Cow::Owned(repack(format, k, rows, gguf)?)),
    }
}

/// Block `i` of an aligned row, back in its GGUF bytes.
pub fn to_gguf_block(format: WeightFormat, row: &[u8], i: u64) -> Result<Vec<u8>, LayoutError> {
    let layout = WeightLayout::Aligned;
    let geo = AlignedGeometry::of(format).ok_or(LayoutError::Unsupported { format, layout })?;
    let (h, o) = geo.offsets(i);
    let (h, o) = (h as usize, o as usize);
    if row.len() < o + geo.body as usize {
        return Err(LayoutError::Size {
            format,
            rows: 1,
            k: (i + 1) * u64::from(format.block_elems()),
            needed: (o + geo.body as usize) as u64,
            got: row.len() as u64,
        });
    }
    let mut out = vec![0u8; format.block_bytes() as usize];
    let j = (i % u64::from(GROUP)) as usize;
    geo.gather(
        j,
        &row[h..h + geo.header as usize],
        &row[o..o + geo.body as usize],
        &mut out,
    );
    Ok(out)
}

/// Dequantizes `rows` aligned rows of `k` elements (the CPU check of the layout: each block
/// is gathered back and dequantized by [`super::cpu::dequantize`]).
pub fn dequantize_aligned(
    format: WeightFormat,
    bytes: &[u8],
    rows: u64,
    k: u64,
) -> Result<Vec<f32>, LayoutError> {
    let layout = WeightLayout::Aligned;
    let rb = if AlignedGeometry::of(format).is_some() && k % u64::from(format.block_elems()) == 0 {
        layout.row_bytes(format, k)
    } else {
        0
    };
    geometry_and_rows(format, layout, k, rows, bytes.len() as u64, rb)?;
    let blocks = k / u64::from(format.block_elems());
    let mut gguf = Vec::with_capacity(format.row_bytes(k) as usize * rows as usize);
    for row in bytes.chunks_exact(rb as usize) {
        for i in 0..blocks {
            gguf.extend(to_gguf_block(format, row, i)?);
        }
    }
    Ok(
        super::cpu::dequantize(format, &gguf, rows as usize, k as usize)
            .expect("gathered rows have the GGUF size"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::random_weights;

    const FORMATS: [WeightFormat; 3] = [WeightFormat::Q8_0, WeightFormat::Q5_0, WeightFormat::Q6K];

    #[test]
    fn whole_groups_cost_no_memory_and_rows_are_16_byte_multiples() {
        for f in FORMATS {
            let g = AlignedGeometry::of(f).unwrap();
            assert_eq!(g.group_bytes(), GROUP * f.block_bytes(), "{f}");
            for blocks in 1..40u64 {
                let rb = g.row_bytes(blocks);
                assert_eq!(rb % 16, 0, "{f} {blocks}");
                assert!(rb >= blocks * u64::from(f.block_bytes()));
                // Body offsets are 16-byte aligned (the point of the layout).
                for i in 0..blocks {
                    let (h, o) = g.offsets(i);
                    assert_eq!((h % 16, o % 16), (0, 0), "{f} block {i}");
                    assert!(o + u64::from(g.body) <= rb);
                }
            }
        }
    }

    #[test]
    fn dequantizing_repacked_rows_equals_dequantizing_the_gguf_rows() {
        // Row lengths with whole groups, a partial last group and a single block.
        for f in FORMATS {
            let be = u64::from(f.block_elems());
            for (blocks, rows, seed) in [(8, 3, 1), (11, 2, 2), (1, 4, 3), (43, 2, 4), (28, 1, 5)] {
                let k = blocks * be;
                let gguf = random_weights(f, rows, k as usize, seed);
                let want = crate::dequant::cpu::dequantize(f, &gguf, rows, k as usize).unwrap();
                let packed = repack(f, k, rows as u64, &gguf).unwrap();
                assert_eq!(
                    packed.len() as u64,
                    rows as u64 * WeightLayout::Aligned.row_bytes(f, k)
                );
                let got = dequantize_aligned(f, &packed, rows as u64, k).unwrap();
                // Bit for bit (NaN-safe).
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{f} k={k} rows={rows}");
                // And every GGUF block comes back byte for byte.
                let rb = WeightLayout::Aligned.row_bytes(f, k) as usize;
                let gb = f.row_bytes(k) as usize;
                for r in 0..rows {
                    for i in 0..blocks {
                        let bb = f.block_bytes() as usize;
                        let orig = &gguf[r * gb + i as usize * bb..][..bb];
                        let back = to_gguf_block(f, &packed[r * rb..(r + 1) * rb], i).unwrap();
                        assert_eq!(back, orig, "{f} row {r} block {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_sizes_and_formats_are_refused_with_the_reason() {
        let f = WeightFormat::Q8_0;
        let gguf = random_weights(f, 2, 64, 9);
        assert!(matches!(
            repack(WeightFormat::Q4K, 256, 1, &[0; 144]),
            Err(LayoutError::Unsupported { .. })
        ));
        assert!(matches!(
            repack(f, 48, 2, &gguf),
            Err(LayoutError::RowLength { k: 48, .. })
        ));
        assert!(matches!(
            repack(f, 0, 2, &[]),
            Err(LayoutError::RowLength { k: 0, .. })
        ));
        // One byte short, one too many, and a row count whose size overflows.
        assert!(matches!(
            repack(f, 64, 2, &gguf[1..]),
            Err(LayoutError::Size { .. })
        ));
        let mut long = gguf.clone();
        long.push(0);
        assert!(matches!(
            repack(f, 64, 2, &long),
            Err(LayoutError::Size { .. })
        ));
        assert!(matches!(
            repack(f, 64, u64::MAX, &gguf),
            Err(LayoutError::Size { .. })
        ));
        assert!(matches!(
            dequantize_aligned(f, &[0; 15], 1, 32),
            Err(LayoutError::Size { .. })
        ));
        assert!(matches!(
            to_gguf_block(f, &[0; 48], 1),
            Err(LayoutError::Size { .. })
        ));
        let e = repack(WeightFormat::F16, 32, 1, &[0; 64]).unwrap_err();
        assert!(e.to_string().contains("F16 has no aligned layout"), "{e}");
    }

    #[test]
    fn layout_names_round_trip_and_gguf_is_skipped_in_json() {
        for l in WeightLayout::ALL {
            assert_eq!(l.name().parse::<WeightLayout>().unwrap(), l);
        }
        assert!("row-major".parse::<WeightLayout>().is_err());
        assert_eq!(
            serde_json::to_string(&WeightLayout::Aligned).unwrap(),
            "\"aligned\""
        );
    }
}
