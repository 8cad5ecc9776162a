//! Embedding lookup: row `ids[r]` of a GGUF table (any supported block format), dequantized
//! into row r of `y`.
//!
//! Contract with the runtime:
//! - bindings: 0 `ids` u32 [m] (read), 1 `table` the rows in the workload's layout as u32
//!   words (read; GGUF blocks, or the aligned layout of `dequant::layout` where the table is
//!   also a GEMV's weight held that way; the same convention as GEMM's weight binding: the
//!   bound range is a multiple of 4 bytes, rows back to back from its start), 2 `y` f32
//!   [m × width] (written);
//! - push constants ([`EmbeddingPush`], 8 bytes): `m`, `row_base`;
//! - grid `[ceil(width/(4·chunks_per_thread) / threads), m, 1]`.
//!
//! The bound range holds table rows `row_base..row_base + n` (n from the binding's length,
//! `OpArrayLength`): a table larger than the device's `maxStorageBufferRange` is gathered by
//! one dispatch per piece, each writing the rows whose ids fall in its piece and leaving the
//! others untouched. An id outside every piece is never read out of bounds and its row is not
//! written (the executor validates ids beforehand). The dequantization is the shared IR
//! fragment, bit-exact to the CPU dequantizers.

use serde::{Deserialize, Serialize};

use super::expected::Expected;
use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::dequant::cpu::dequantize;
use crate::dequant::ir::{open_unit, WeightRows};
use crate::dequant::{WeightFormat, WeightLayout, UNIT};
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_IDS: u32 = 0;
pub const BINDING_TABLE: u32 = 1;
pub const BINDING_Y: u32 = 2;

/// Chunks of 4 elements per 32-element unit.
const CHUNKS: u32 = UNIT / 4;

/// Gathers `m` rows of `width` elements from a table stored in `table` format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingWorkload {
    pub m: u32,
    pub width: u32,
    pub table: WeightFormat,
    /// How the table sits in device memory: GGUF, or aligned where a tied output projection
    /// reads the same tensor as a GEMV weight in that layout (panvk: 16-byte loads of Q6_K).
    /// Omitted from the serialization when GGUF, so stored keys stay valid.
    #[serde(default, skip_serializing_if = "WeightLayout::is_gguf")]
    pub layout: WeightLayout,
}

impl EmbeddingWorkload {
    /// A lookup in a GGUF table.
    pub fn gguf(m: u32, width: u32, table: WeightFormat) -> EmbeddingWorkload {
        EmbeddingWorkload {
            m,
            width,
            table,
            layout: WeightLayout::Gguf,
        }
    }

    /// Bytes of one table row in the workload's layout.
    pub fn row_bytes(&self) -> u64 {
        self.layout.row_bytes(self.table, u64::from(self.width))
    }
}

/// Push constants: `m` (u32), `row_base` (u32: the table row at the start of the binding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingPush {
    pub m: u32,
    pub row_base: u32,
}

impl EmbeddingPush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.row_base])
    }
}

/// Each thread writes `chunks_per_thread` consecutive 4-element chunks of one 32-element
/// unit (and loads that unit's scales once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingSchedule {
    pub threads: u32,
    /// 1, 2, 4 or 8.
    pub chunks_per_thread: u32,
}

impl EmbeddingSchedule {
    pub fn name(&self, w: &EmbeddingWorkload) -> String {
        format!(
            "embedding_{}{}_w{}_t{}_c{}",
            w.table.ggml_name().to_lowercase(),
            if w.layout.is_gguf() { "" } else { "_aligned" },
            w.width,
            self.threads,
            self.chunks_per_thread
        )
    }

    fn row_threads(&self, w: &EmbeddingWorkload) -> u32 {
        w.width / 4 / self.chunks_per_thread
    }

    pub fn validate(&self, w: &EmbeddingWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        if ![1, 2, 4, 8].contains(&self.chunks_per_thread) {
            return Err(Refusal::Schedule(format!(
                "chunks_per_thread {} is not 1, 2, 4 or 8",
                self.chunks_per_thread
            )));
        }
        check_threads(self.threads, caps)?;
        if self.row_threads(w).div_ceil(self.threads) > MAX_GRID_DIM {
            return Err(Refusal::Schedule("too many workgroups per row".into()));
        }
        Ok(())
    }
}

pub fn validate_workload(w: &EmbeddingWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.width == 0 {
        return bad("m and width must be at least 1".into());
    }
    if !w.layout.supports(w.table) {
        return bad(format!(
            "the {} layout does not hold {}",
            w.layout.name(),
            w.table
        ));
    }
    let block = w.table.block_elems().max(UNIT);
    if w.width % block != 0 {
        return bad(format!(
            "width {} is not a multiple of {block} (the {} block / 32-element unit)",
            w.width, w.table
        ));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!("m = {} exceeds the grid limit {MAX_GRID_DIM}", w.m));
    }
    if u64::from(w.m) * u64::from(w.width) > u64::from(u32::MAX) {
        return bad("the output is too large for 32-bit indexing".into());
    }
    if w.row_bytes() > u64::from(u32::MAX) / 4 {
        return bad(format!("a table row of width {} is too large", w.width));
    }
    Ok(())
}

pub fn dispatch_grid(w: &EmbeddingWorkload, s: &EmbeddingSchedule) -> [u32; 3] {
    [s.row_threads(w).div_ceil(s.threads), w.m, 1]
}

pub fn search_space(w: &EmbeddingWorkload, caps: &DeviceCaps) -> Vec<EmbeddingSchedule> {
    let mut out = Vec::new();
    for chunks_per_thread in [1, 2, 4, 8] {
        for threads in [32, 64, 128, 256] {
            let s = EmbeddingSchedule {
                threads,
                chunks_per_thread,
            };
            if threads > 2 * s.row_threads(w).next_power_of_two().max(32) {
                continue;
            }
            if s.validate(w, caps).is_ok() {
                out.push(s);
            }
        }
    }
    out
}

/// 64 threads of 2 chunks (8 elements) each: a unit's scales are loaded by 4 threads, which
/// the cache absorbs, and a row of 896 still spreads over 112 threads.
pub fn default_schedule(w: &EmbeddingWorkload, caps: &DeviceCaps) -> EmbeddingSchedule {
    let s = EmbeddingSchedule {
        threads: 64,
        chunks_per_thread: 2,
    };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}

pub fn instantiate(
    w: &EmbeddingWorkload,
    s: &EmbeddingSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(w, s), caps)
}

/// The kernel's IR. The pair must validate.
pub fn kernel_ir(w: &EmbeddingWorkload, s: &EmbeddingSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let ids = b.buffer(BINDING_IDS, "ids", Type::U32, Access::ReadOnly);
    let table = b.model_buffer(BINDING_TABLE, "table", Type::U32);
    let v4 = Type::vec(Scalar::F32, 4);
    let y = b.buffer(BINDING_Y, "y", v4, Access::WriteOnly);
    let p_m = b.push_field("m", Type::U32);
    let p_base = b.push_field("row_base", Type::U32);
    let row_bytes = w.row_bytes() as u32;
    let cpt = s.chunks_per_thread;
    let threads_per_unit = CHUNKS / cpt;

    let row = b.builtin(Builtin::WorkgroupId(1));
    let j = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), s.threads),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let table_rows = b.div(b.muli(b.array_length(table), 4), b.c_u32(row_bytes));
    let in_grid = b.logical_and(b.lt(row, b.push(p_m)), b.lt(j, b.c_u32(s.row_threads(w))));
    b.if_(in_grid, || {
        // Relative to the piece; unsigned wrap-around puts ids below the piece past its end,
        // so one comparison keeps the read inside the binding.
        let id = b.sub(b.load(ids, row), b.push(p_base));
        b.if_(b.lt(id, table_rows), || {
            let unit = b.div(j, b.c_u32(threads_per_unit));
            let c0 = b.muli(b.rem(j, b.c_u32(threads_per_unit)), cpt);
            let rows = WeightRows {
                buffer: table,
                format: w.table,
                layout: w.layout,
            };
            // The aligned layout addresses rows in 16-byte units (`WeightRows`); its rows are
            // whole 16-byte groups.
            let row_off = if w.layout.is_gguf() {
                b.muli(id, row_bytes)
            } else {
                b.muli(id, row_bytes / 16)
            };
            let u = open_unit(&b, rows, row_off, unit, false);
            let out0 = b.add(b.muli(row, w.width / 4), b.add(b.muli(unit, CHUNKS), c0));
            for c in 0..cpt {
                let chunk = u.chunk_f32(&b, b.addi(c0, c));
                b.store(y, b.addi(out0, c), chunk);
            }
        });
    });
    b.finish()
}

// ---- CPU reference ------------------------------------------------------------------------

/// The first `m` rows of the lookup, with the CPU dequantizer: `table` holds the GGUF bytes of
/// `table_rows` rows (whatever the workload's layout: the kernel reads them repacked) and
/// every id must be one of them (the executor validates ids; the kernel leaves rows of other
/// ids unwritten). The kernel's dequantization is bit-exact, so nothing may differ (allowed
/// error 0).
pub fn reference(
    w: &EmbeddingWorkload,
    m: usize,
    ids: &[u32],
    table: &[u8],
    table_rows: usize,
) -> Expected {
    let (width, rb) = (
        w.width as usize,
        w.table.row_bytes(u64::from(w.width)) as usize,
    );
    assert!(ids.len() >= m && table.len() >= table_rows * rb);
    let mut values = Vec::with_capacity(m * width);
    for &id in &ids[..m] {
        let r = id as usize;
        assert!(
            r < table_rows,
            "id {id} is outside the table of {table_rows} rows"
        );
        let row = dequantize(w.table, &table[r * rb..(r + 1) * rb], 1, width)
            .expect("a whole row of the table");
        values.extend(row);
    }
    Expected {
        allowed: vec![0.0; values.len()],
        values,
    }
}
