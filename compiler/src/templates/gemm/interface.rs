//! The GEMM kernel's contract with the runtime: bindings, push constants, dispatch grid and
//! how to process a weight tensor larger than `maxStorageBufferRange` in N-slices.
//!
//! Bindings (descriptor set 0):
//! - 0 `x`: X, m×k row-major, f32 or f16 (read as 4-element vectors; k is a multiple of 32);
//! - 1 `weight`: the rows of W this dispatch computes, in the workload's layout (raw GGUF
//!   blocks, or `dequant::layout`'s aligned groups), read as u32 words. The
//!   bound range must be a multiple of 4 bytes and readable to its end: round the range up to
//!   4 bytes and allocate weight buffers with that padding;
//! - 2 `y`: Y, row stride `ldy` elements, same type as X (written only in range);
//! - 3 `bias` (when the workload has one): all n f32 values (not sliced);
//! - 4 `residual` (`Epilogue::Residual`): R, m × n with row stride `ldy`, same type as Y;
//! - 7 `norm_weight` (the GEMV with a folded RMSNorm only): the norm's k f32 weights;
//! - with `Epilogue::RopeKv` (the GEMV only): 8 `k_cache` and 9 `v_cache`, the layer's caches
//!   (u32 words, the KV write's layout, written at the step's positions), 10 `freqs` (with
//!   frequency factors: head_dim/2 f32), 11 `position` (u32 words; word [`POSITION_WORD`] is
//!   the position of X's row 0: the step-args buffer of the replayed decode step, whose words
//!   are the position readers' push block `m, pos0`). Y then holds only the query part
//!   (row stride `ldy`, columns 0 .. q_heads·head_dim); the K and V parts go to the caches.
//!
//! With `Epilogue::SwiGlu` the weight binding holds the 2n rows of the combined gate/up
//! tensor (gate rows, then up rows; never N-sliced) and the grid has `2n / bn` columns of
//! workgroups, each computing bn/2 outputs from bn/2 gate and bn/2 up rows.
//!
//! With `k_groups > 1` (split-K across the grid) the kernel has no bias binding and `y` is an
//! f32 scratch buffer of `k_groups × m × ldy` values: group g writes its partial sums at
//! `y[(g·m + row)·ldy + n_offset + j]`. The reduce kernel of [`super::split_k`] then sums
//! them, adds the bias and writes the real Y (one dispatch for all N-slices).
//!
//! With `last_group_reduces` as well, `y`, `bias` and `residual` are bound as without
//! split-K, group g writes its partial sums into 5 `partials` (same layout), and the last
//! group of each tile to arrive (6 `counters`, one u32 per tile, index
//! `wg.y · grid.x + wg.x`, all zero between dispatches) sums them into Y: no reduce kernel.
//! Each dispatch (each N-slice) needs counters of its own.
//!
//! Push constants ([`GemmPush`], 20 bytes): `m, n, k, n_offset, ldy`, all u32. `n` is the
//! number of columns this dispatch computes (the slice width), `n_offset` the first of them:
//! the kernel reads weight row `j` of its binding for output column `n_offset + j` and writes
//! `y[row * ldy + n_offset + j]`. `m` and `n` must be at least 1 (skip empty dispatches); `k`
//! must be the workload's k (the schedule's `bk` divides it).

use super::schedule::GemmSchedule;
use super::workload::GemmWorkload;
use crate::refusal::Refusal;

pub const BINDING_X: u32 = 0;
pub const BINDING_WEIGHT: u32 = 1;
pub const BINDING_Y: u32 = 2;
pub const BINDING_BIAS: u32 = 3;
pub const BINDING_RESIDUAL: u32 = 4;
/// `last_group_reduces`: the f32 partial sums, `k_groups × m × ldy` (`2·ldy` with SwiGLU),
/// laid out as the reduce kernel's scratch.
pub const BINDING_IN_PLACE_PARTIALS: u32 = 5;
/// `last_group_reduces`: one u32 arrival counter per workgroup tile of the dispatch
/// ([`counters_of`]), zero before the dispatch and left zero after it.
pub const BINDING_TILE_COUNTERS: u32 = 6;

/// The GEMV's folded RMSNorm (`GemmWorkload::rms_norm_eps_bits`): the norm's f32 weight, k
/// values (read as 4-element vectors).
pub const BINDING_NORM_WEIGHT: u32 = 7;

/// `Epilogue::RopeKv`: the layer's K cache, V cache, the RoPE's frequency factors and the
/// step's position (see the module documentation).
pub const BINDING_K_CACHE: u32 = 8;
pub const BINDING_V_CACHE: u32 = 9;
pub const BINDING_FREQS: u32 = 10;
pub const BINDING_POSITION: u32 = 11;
/// The word of the `position` binding that holds the position of X's row 0.
pub const POSITION_WORD: u32 = 1;

/// Arrival counters a `last_group_reduces` dispatch over `grid` needs: one per (x, y) tile.
pub fn counters_of(grid: [u32; 3]) -> u64 {
    u64::from(grid[0]) * u64::from(grid[1])
}

/// Where each N-slice's tile counters sit in the one counter buffer of a `last_group_reduces`
/// GEMM over `m` rows: (byte offset, bytes) per slice, each offset a multiple of
/// `offset_alignment` (at least 4), and the bytes of the whole buffer.
pub fn counter_layout(
    m: u32,
    w: &GemmWorkload,
    s: &GemmSchedule,
    slices: &[NSlice],
    offset_alignment: u64,
) -> (Vec<(u64, u64)>, u64) {
    let align = offset_alignment.max(4);
    let mut regions = Vec::with_capacity(slices.len());
    let mut total = 0;
    for slice in slices {
        let grid = dispatch_grid_for(m, slice.n * w.epilogue.rows_per_column(), s);
        let bytes = 4 * counters_of(grid);
        regions.push((total, bytes));
        total += bytes.next_multiple_of(align);
    }
    (regions, total)
}

/// The push-constant block of the GEMM kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmPush {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub n_offset: u32,
    pub ldy: u32,
}

impl GemmPush {
    pub const BYTES: u32 = 20;

    /// Push constants of one slice of `w` (the full tensor when `slice` covers all n).
    pub fn for_slice(w: &GemmWorkload, slice: &NSlice) -> GemmPush {
        GemmPush {
            m: w.m,
            n: slice.n,
            k: w.k,
            n_offset: slice.n_offset,
            ldy: w.y_row_width(),
        }
    }

    /// Little-endian bytes in field order, as `vkCmdPushConstants` takes them.
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        for (i, v) in [self.m, self.n, self.k, self.n_offset, self.ldy]
            .iter()
            .enumerate()
        {
            out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        out
    }
}

/// One dispatch's share of the weight tensor: output columns `n_offset..n_offset + n`, whose
/// weight rows are the bytes `weight_offset..weight_offset + weight_range` of the tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NSlice {
    pub n_offset: u32,
    pub n: u32,
    pub weight_offset: u64,
    /// Bytes to bind: the slice's rows rounded up to a multiple of 4.
    pub weight_range: u64,
}

/// Workgroups for `m` rows and an N-slice of `n` weight rows (2× the columns with SwiGLU).
pub fn dispatch_grid_for(m: u32, n: u32, s: &GemmSchedule) -> [u32; 3] {
    [n.div_ceil(s.bn), m.div_ceil(s.bm), s.k_groups]
}

/// Workgroups for the whole workload in one dispatch.
pub fn dispatch_grid(w: &GemmWorkload, s: &GemmSchedule) -> [u32; 3] {
    dispatch_grid_for(w.m, w.weight_rows(), s)
}

/// Splits the weight tensor into slices whose bound range is at most `max_range` bytes and
/// whose offsets are multiples of `offset_alignment` (`minStorageBufferOffsetAlignment`).
/// One slice when the whole tensor fits.
pub fn n_slices(
    w: &GemmWorkload,
    max_range: u64,
    offset_alignment: u64,
) -> Result<Vec<NSlice>, Refusal> {
    let row = w.weight_row_bytes();
    let align = offset_alignment.max(4);
    if !align.is_power_of_two() {
        return Err(Refusal::DeviceLimit(format!(
            "offset alignment {offset_alignment} is not a power of two"
        )));
    }
    let round4 = |b: u64| b.div_ceil(4) * 4;
    let total = row * u64::from(w.weight_rows());
    let paired = w.epilogue.rows_per_column() > 1;
    if paired && round4(total) > max_range {
        // The up rows sit n rows after their gate rows (a RoPE quad's rows half a head
        // apart): the tensor is bound whole.
        return Err(Refusal::DeviceLimit(format!(
            "the {total}-byte weight tensor of a {} epilogue (bound whole) exceeds \
             maxStorageBufferRange {max_range}",
            if w.epilogue == super::workload::Epilogue::SwiGlu {
                "SwiGLU"
            } else {
                "RoPE-and-KV-write"
            }
        )));
    }
    if round4(total) <= max_range {
        return Ok(vec![NSlice {
            n_offset: 0,
            n: w.n,
            weight_offset: 0,
            weight_range: round4(total),
        }]);
    }
    // Rows per slice: as many as fit, rounded down to a multiple that keeps offsets aligned.
    let step = align / gcd(row, align);
    let fit = max_range / row;
    let rows = fit / step * step;
    if rows == 0 {
        return Err(Refusal::DeviceLimit(format!(
            "{} rows of {row} bytes ({} weights) do not fit maxStorageBufferRange {max_range} at offset alignment {align}",
            step, w.weight
        )));
    }
    let mut out = Vec::new();
    let mut start = 0u64;
    while start < u64::from(w.n) {
        let n = rows.min(u64::from(w.n) - start);
        out.push(NSlice {
            n_offset: start as u32,
            n: n as u32,
            weight_offset: start * row,
            weight_range: round4(n * row),
        });
        start += n;
    }
    Ok(out)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
