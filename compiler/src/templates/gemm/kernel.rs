//! The GEMM kernel as IR, for a validated (workload, schedule) pair.
//!
//! Structure (see `schedule.rs` for the thread layout):
//! ```text
//! for ub in (0..k/32).step_by(bk/32):             // K slabs, in 32-element units
//!     [stage_a: cooperative copy/quantization of X rows m0..m0+bm into shared]
//!     [stage_b: cooperative dequantization of W rows n0..n0+bn into shared]
//!     [barrier]
//!     for each of this thread's units u in the slab:   // kz, kz+split_k, ...
//!         open the weight units (scales) of its tn columns (unless staged)
//!         for c in 0..8: chunk of 4 elements → FMAs into tm×tn accumulators
//!         (int8: 8 packed words per operand → OpSDot, scaled per unit)
//!     [barrier]
//! reduce split_k partial sums through shared memory; add bias; store guarded by m, n
//! ```
//! Rows past `m` and columns past `n` read the last valid row/column (clamped) so every load
//! stays in bounds without branches; their results are never stored.

use super::interface::{
    BINDING_BIAS, BINDING_IN_PLACE_PARTIALS, BINDING_RESIDUAL, BINDING_TILE_COUNTERS,
    BINDING_WEIGHT, BINDING_X, BINDING_Y,
};
use super::schedule::{int8_scale_lanes, GemmSchedule, Math, Precision};
use super::workload::{ActType, Epilogue, GemmWorkload};
use std::cell::RefCell;
use std::rc::Rc;

use crate::dequant::ir::{
    open_unit, open_units, open_units_shared, SharedHeaders, Unit, WeightRows,
};
use crate::dequant::layout::{AlignedGeometry, GROUP};
use crate::dequant::{WeightLayout, UNIT};
use crate::ir::{
    Access, Buffer, Builtin, DotSign, KernelBuilder, Module, PushField, Scalar, SharedArray, Type,
    Unroll, Value, Var,
};

/// Chunks of 4 elements per 32-element unit.
const CHUNKS: u32 = UNIT / 4;

struct Gemm<'a> {
    b: &'a KernelBuilder,
    w: &'a GemmWorkload,
    s: &'a GemmSchedule,
    x: Buffer,
    rows: WeightRows,
    y: Buffer,
    bias: Option<Buffer>,
    /// The residual R of `Epilogue::Residual` (not bound with split-K across the grid).
    residual: Option<Buffer>,
    /// `last_group_reduces`: the partial sums and the tiles' arrival counters.
    in_place_reduce: Option<(Buffer, Buffer)>,
    // Push constants and geometry.
    m: Value,
    n: Value,
    n_offset: Value,
    ldy: Value,
    m_last: Value,
    n_last: Value,
    /// Bytes per weight row; in the aligned layout, 16-byte units per row (the unit of the
    /// dequant fragments' `row_off` there).
    row_bytes: Value,
    x_row_vec4s: Value,
    m0: Value,
    n0: Value,
    kz: Value,
    tx: Value,
    ty: Value,
    tid: Value,
    /// Output row / column of micro-tile entry i / j (unclamped). With SwiGLU only the first
    /// tn/2 columns are outputs: entry j + tn/2 holds the up sum of column j.
    out_rows: Vec<Value>,
    out_cols: Vec<Value>,
    /// First vec4 of each (clamped) X row, and the `row_off` of each (clamped) W row.
    x_bases: Vec<Value>,
    w_row_offs: Vec<Value>,
    /// The push constants m, n and k (`in_loop` reads them again inside the K loop).
    push_mnk: [PushField; 3],
    /// `share_headers`: the current K-loop iteration's group headers of each column
    /// (`dequant::ir::SharedHeaders`) and the current slab's first unit within the
    /// iteration.
    headers: RefCell<Option<(Vec<SharedHeaders>, u32)>>,
}

/// Builds the IR of the kernel. The pair must have passed `GemmSchedule::validate`.
pub(crate) fn build(w: &GemmWorkload, s: &GemmSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), s.workgroup_size());
    {
        let g = Gemm::new(&b, w, s);
        let totals = match s.math {
            Math::Int8Dot => g.int8_main_loop(),
            Math::FmaF32 | Math::FmaF16Packed => g.fma_main_loop(),
        };
        g.reduce_and_store(&totals);
    }
    b.finish()
}

/// The `row_off` of weight row `col` for the dequant fragments (`row_bytes` as [`Gemm`]
/// holds it): bytes in the GGUF layout, 16-byte units in the aligned one (see
/// `dequant::ir::WeightRows`).
fn row_offset(b: &KernelBuilder, col: Value, row_bytes: Value) -> Value {
    b.mul(col, row_bytes)
}

/// Bytes per weight row (16-byte units in the aligned layout) for depth `k`.
fn weight_row_bytes(b: &KernelBuilder, w: &GemmWorkload, k: Value) -> Value {
    let block_shift = w.weight.block_elems().trailing_zeros();
    let blocks = b.shri(k, block_shift);
    match AlignedGeometry::of(w.weight) {
        Some(g) if w.layout == WeightLayout::Aligned => {
            // ceil(blocks / 8) headers and `blocks` bodies, in 16-byte units.
            let groups = b.shri(b.addi(blocks, GROUP - 1), GROUP.trailing_zeros());
            b.add(b.muli(groups, g.header / 16), b.muli(blocks, g.body / 16))
        }
        _ => b.muli(blocks, w.weight.block_bytes()),
    }
}

fn act_scalar(a: ActType) -> Scalar {
    match a {
        ActType::F32 => Scalar::F32,
        ActType::F16 => Scalar::F16,
    }
}

impl<'a> Gemm<'a> {
    fn new(b: &'a KernelBuilder, w: &'a GemmWorkload, s: &'a GemmSchedule) -> Self {
        let act = act_scalar(w.act);
        let x = b.buffer(BINDING_X, "x", Type::vec(act, 4), Access::ReadOnly);
        // The aligned layout is read as 16-byte quads (its runs are whole quads).
        let weight_elem = match w.layout {
            WeightLayout::Aligned => crate::dequant::words::quad_type(),
            WeightLayout::Gguf => Type::U32,
        };
        let weight = b.model_buffer(BINDING_WEIGHT, "weight", weight_elem);
        // Split-K across the grid writes f32 partial sums into y; the reduce kernel adds the
        // bias. With `last_group_reduces` the kernel does all of it and y is Y.
        let split = s.k_groups > 1 && !s.last_group_reduces;
        let in_place_reduce = (s.k_groups > 1 && s.last_group_reduces).then(|| {
            (
                b.coherent_buffer(BINDING_IN_PLACE_PARTIALS, "partials", Type::F32),
                b.coherent_buffer(BINDING_TILE_COUNTERS, "counters", Type::U32),
            )
        });
        let y_ty = if split { Type::F32 } else { Type::scalar(act) };
        let y = b.buffer(BINDING_Y, "y", y_ty, Access::WriteOnly);
        let bias = (w.bias && !split).then(|| b.model_buffer(BINDING_BIAS, "bias", Type::F32));
        let residual = (w.epilogue == Epilogue::Residual && !split).then(|| {
            b.buffer(
                BINDING_RESIDUAL,
                "residual",
                Type::scalar(act),
                Access::ReadOnly,
            )
        });
        let p_m = b.push_field("m", Type::U32);
        let p_n = b.push_field("n", Type::U32);
        let p_k = b.push_field("k", Type::U32);
        let p_noff = b.push_field("n_offset", Type::U32);
        let p_ldy = b.push_field("ldy", Type::U32);

        let (m, n, k) = (b.push(p_m), b.push(p_n), b.push(p_k));
        let (n_offset, ldy) = (b.push(p_noff), b.push(p_ldy));
        let (wg_n, wg_m) = (s.bn / s.tn, s.bm / s.tm);
        let (kz_dim, tx_dim) = if s.shuffle_a { (1, 0) } else { (0, 1) };
        let kz = b.builtin(Builtin::LocalInvocationId(kz_dim));
        let tx = b.builtin(Builtin::LocalInvocationId(tx_dim));
        let ty = b.builtin(Builtin::LocalInvocationId(2));
        let tid = b.builtin(Builtin::LocalInvocationIndex);
        let m0 = b.muli(b.builtin(Builtin::WorkgroupId(1)), s.bm);
        let n0 = b.muli(b.builtin(Builtin::WorkgroupId(0)), s.bn);
        let m_last = b.sub(m, b.c_u32(1));
        let n_last = b.sub(n, b.c_u32(1));
        let row_bytes = weight_row_bytes(b, w, k);
        let x_row_vec4s = b.shri(k, 2);

        let out_rows: Vec<Value> = (0..s.tm).map(|i| b.add(m0, b.addi(ty, i * wg_m))).collect();
        let x_bases = out_rows
            .iter()
            .map(|&r| b.mul(b.min(r, m_last), x_row_vec4s))
            .collect();
        let swiglu = w.epilogue == Epilogue::SwiGlu;
        // SwiGLU: the workgroup's tile holds bn/2 output columns, as bn/2 gate rows then the
        // bn/2 matching up rows, so micro-tile column j (< tn/2) pairs with j + tn/2.
        let out_n0 = if swiglu {
            b.muli(b.builtin(Builtin::WorkgroupId(0)), s.bn / 2)
        } else {
            n0
        };
        let out_tn = if swiglu { s.tn / 2 } else { s.tn };
        let out_cols: Vec<Value> = (0..out_tn)
            .map(|j| b.add(out_n0, b.addi(tx, j * wg_n)))
            .collect();

        let mut g = Gemm {
            b,
            w,
            s,
            x,
            rows: WeightRows {
                buffer: weight,
                format: w.weight,
                layout: w.layout,
            },
            y,
            bias,
            residual,
            in_place_reduce,
            m,
            n,
            n_offset,
            ldy,
            m_last,
            n_last,
            row_bytes,
            x_row_vec4s,
            m0,
            n0,
            kz,
            tx,
            ty,
            tid,
            out_rows,
            out_cols,
            x_bases,
            w_row_offs: Vec::new(),
            push_mnk: [p_m, p_n, p_k],
            headers: RefCell::new(None),
        };
        g.w_row_offs = (0..s.tn)
            .map(|j| g.w_row_off(b.addi(tx, j * wg_n)))
            .collect();
        g
    }

    /// The dequant fragments' `row_off` ([`Gemm::row_off`]) of the (clamped) weight row behind
    /// column `t` of the workgroup's bn-wide tile. With SwiGLU the tile's first bn/2 columns
    /// are gate rows `n0/2 + t` and the rest the matching up rows, which follow the n gate
    /// rows in the combined tensor: the row index is chosen first, so the pairing is the same
    /// in every layout.
    fn w_row_off(&self, t: Value) -> Value {
        let b = self.b;
        if self.w.epilogue != Epilogue::SwiGlu {
            return self.row_off(b.min(b.add(self.n0, t), self.n_last));
        }
        let half = b.c_u32(self.s.bn / 2);
        let up = b.ge(t, half);
        let local = b.select(up, b.sub(t, half), t);
        let n0 = b.muli(b.builtin(Builtin::WorkgroupId(0)), self.s.bn / 2);
        let col = b.min(b.add(n0, local), self.n_last);
        let row = b.select(up, b.add(col, self.n), col);
        self.row_off(row)
    }

    /// The dequant fragments' `row_off` of weight row `col`.
    fn row_off(&self, col: Value) -> Value {
        row_offset(self.b, col, self.row_bytes)
    }

    /// A copy whose geometry (push constants, workgroup and invocation ids and what derives
    /// from them) is read again at this point of the kernel: inside the K loop, these values
    /// are then recomputed each iteration from uniforms and preloaded ids instead of being
    /// held in registers across the loop next to the accumulators (`half_units`). The
    /// per-thread lists (`out_rows`, `x_bases`, `w_row_offs`, ...) are left empty.
    fn in_loop(&self) -> Gemm<'a> {
        let b = self.b;
        let (w, s) = (self.w, self.s);
        let [p_m, p_n, p_k] = self.push_mnk;
        let (m, n, k) = (b.push(p_m), b.push(p_n), b.push(p_k));
        let wg_n = s.bn / s.tn;
        // One thread index; tx and ty derive from it (the workgroup is [1, bn/tn, bm/tm]).
        let tid = b.builtin(Builtin::LocalInvocationIndex);
        let (tx, ty) = if wg_n.is_power_of_two() && s.split_k == 1 && !s.shuffle_a {
            (b.andi(tid, wg_n - 1), b.shri(tid, wg_n.trailing_zeros()))
        } else {
            (
                b.builtin(Builtin::LocalInvocationId(1)),
                b.builtin(Builtin::LocalInvocationId(2)),
            )
        };
        Gemm {
            b,
            w,
            s,
            x: self.x,
            rows: self.rows,
            y: self.y,
            bias: self.bias,
            residual: self.residual,
            in_place_reduce: self.in_place_reduce,
            m,
            n,
            n_offset: self.n_offset,
            ldy: self.ldy,
            m_last: b.sub(m, b.c_u32(1)),
            n_last: b.sub(n, b.c_u32(1)),
            row_bytes: weight_row_bytes(b, w, k),
            x_row_vec4s: b.shri(k, 2),
            m0: b.muli(b.builtin(Builtin::WorkgroupId(1)), s.bm),
            n0: b.muli(b.builtin(Builtin::WorkgroupId(0)), s.bn),
            kz: self.kz,
            tx,
            ty,
            tid,
            out_rows: Vec::new(),
            out_cols: Vec::new(),
            x_bases: Vec::new(),
            w_row_offs: Vec::new(),
            push_mnk: self.push_mnk,
            headers: RefCell::new(None),
        }
    }

    fn units_per_row(&self) -> Value {
        // k is a multiple of 32 (validated), so this is exact.
        self.b.shri(self.x_row_vec4s, 3)
    }

    /// The K units of this workgroup's group: all of them, or with `k_groups` groups the
    /// loop steps `[g·S/G, (g+1)·S/G)` of the S steps (`k_unroll` slabs each) of a row (G a
    /// power of two).
    fn group_units(&self) -> (Value, Value) {
        let b = self.b;
        let s = self.s;
        if s.k_groups == 1 {
            return (b.c_u32(0), self.units_per_row());
        }
        // In steps of the K loop (k_unroll slabs), so every group runs whole iterations.
        let step = s.units_per_slab() * s.k_unroll;
        let steps = b.div(self.units_per_row(), b.c_u32(step));
        let g = b.builtin(Builtin::WorkgroupId(2));
        let shift = s.k_groups.trailing_zeros();
        let start = b.shri(b.mul(g, steps), shift);
        let end = b.shri(b.mul(b.addi(g, 1), steps), shift);
        (b.muli(start, step), b.muli(end, step))
    }

    fn staged(&self) -> bool {
        self.s.stage_a || self.s.stage_b
    }

    /// `body(idx)` for idx in tid, tid+T, ... below `total`: work shared by the whole workgroup.
    fn cooperative(&self, total: u32, body: impl Fn(Value)) {
        let b = self.b;
        let threads = self.s.threads();
        let iters = total.div_ceil(threads);
        b.for_range(b.c_u32(0), b.c_u32(iters), 1, Unroll::Hint, |it| {
            let idx = b.add(self.tid, b.muli(it, threads));
            if total % threads == 0 {
                body(idx);
            } else {
                b.if_(b.lt(idx, b.c_u32(total)), || body(idx));
            }
        });
    }

    /// The K-slab loop shared by both paths: staging, barrier, this thread's units, barrier.
    /// `unit(u, ul, ul_const)`: with `shuffle_a` or `wide_loads` the units of a slab are
    /// unrolled here and `ul_const` is the unit's index in the slab.
    ///
    /// With `wide_loads`, `stage` also opens the slab's weight units (`open_slab`).
    /// `slab_end` runs after this thread's units of each slab (before the closing barrier).
    fn slab_loop(
        &self,
        stage: impl Fn(Value),
        unit: impl Fn(Value, Value, Option<u32>),
        slab_end: impl Fn(),
    ) {
        let b = self.b;
        let s = self.s;
        let upb = s.units_per_slab();
        let step = upb * s.k_unroll;
        let (first, end) = self.group_units();
        b.for_range(first, end, step, Unroll::Auto, |ub0| {
            // The iteration's slabs share the group headers they read (aligned Q8_0): one
            // header quad per group instead of one per slab.
            if s.share_headers {
                let headers: Option<Vec<SharedHeaders>> = self
                    .w_row_offs
                    .iter()
                    .map(|&off| SharedHeaders::new(self.rows, off, ub0, step))
                    .collect();
                *self.headers.borrow_mut() = headers.map(|h| (h, 0));
            }
            // k_unroll slabs per iteration, one after the other.
            for r in 0..s.k_unroll {
                let ub = if r == 0 { ub0 } else { b.addi(ub0, r * upb) };
                if let Some((_, o)) = self.headers.borrow_mut().as_mut() {
                    *o = r * upb;
                }
                if self.staged() || s.shuffle_a || s.wide_loads {
                    stage(ub);
                }
                if self.staged() {
                    b.barrier();
                }
                let per_thread = upb / s.split_k;
                if s.shuffle_a || s.wide_loads {
                    // split_k is 1: this thread takes every unit of the slab.
                    for ul in 0..upb {
                        unit(b.addi(ub, ul), b.c_u32(ul), Some(ul));
                    }
                } else {
                    b.for_range(b.c_u32(0), b.c_u32(per_thread), 1, Unroll::Hint, |uu| {
                        let ul = b.add(self.kz, b.muli(uu, s.split_k));
                        unit(b.add(ub, ul), ul, None);
                    });
                }
                slab_end();
                // Half units need no closing barrier (see `GemmSchedule::thread_scales`).
                if self.staged() && !s.thread_scales() {
                    b.barrier();
                }
            }
        });
    }

    /// `wide_loads`: the units of slab `ub` of each of this thread's columns, opened together.
    fn open_slab(&self, ub: Value, want_f16: bool) -> Vec<Vec<Rc<Unit>>> {
        let upb = self.s.units_per_slab();
        if let Some((headers, o)) = self.headers.borrow().as_ref() {
            return headers
                .iter()
                .map(|h| {
                    open_units_shared(self.b, h, *o, upb, want_f16)
                        .into_iter()
                        .map(Rc::new)
                        .collect()
                })
                .collect();
        }
        self.w_row_offs
            .iter()
            .map(|&off| {
                open_units(self.b, self.rows, off, ub, upb, want_f16)
                    .into_iter()
                    .map(Rc::new)
                    .collect()
            })
            .collect()
    }

    // ---- FMA paths ------------------------------------------------------------------------

    fn math_scalar(&self) -> Scalar {
        match self.s.math {
            Math::FmaF16Packed => Scalar::F16,
            _ => Scalar::F32,
        }
    }

    /// Splits a vec4 into 4/V pieces of V lanes.
    fn pieces(&self, v: Value) -> Vec<Value> {
        let b = self.b;
        let vw = self.s.vector_width;
        if vw == 4 {
            return vec![v];
        }
        let lanes: Vec<Value> = (0..4).map(|l| b.extract(v, l)).collect();
        lanes.chunks(vw as usize).map(|c| b.construct(c)).collect()
    }

    fn fma_main_loop(&self) -> Vec<Vec<Value>> {
        let b = self.b;
        let s = self.s;
        let ms = self.math_scalar();
        let vw = s.vector_width;
        let f16 = ms == Scalar::F16;
        let acc_scalar = match s.accumulate {
            Precision::F32 => Scalar::F32,
            Precision::F16 => Scalar::F16,
        };
        let mixed = f16 && acc_scalar == Scalar::F32;
        // Mixed precision folds each unit's f16 partial sums (vw lanes) into one f32 scalar:
        // the same conversions and adds as a vector accumulator, with vw-fold fewer f32
        // registers, which is what lets the bigger micro-tiles fit the register budget.
        let acc_ty = if mixed {
            Type::F32
        } else {
            Type::vec(acc_scalar, vw)
        };
        let part_ty = Type::vec(Scalar::F16, vw);
        let (tm, tn) = (s.tm as usize, s.tn as usize);
        let grid = |name: &str, ty: Type| -> Vec<Vec<Var>> {
            (0..tm)
                .map(|i| {
                    (0..tn)
                        .map(|j| b.var_init(&format!("{name}{i}_{j}"), b.lit(ty, 0.0)))
                        .collect()
                })
                .collect()
        };
        let acc = grid("acc", acc_ty);
        let part = if mixed {
            grid("part", part_ty)
        } else {
            Vec::new()
        };

        let v4m = Type::vec(ms, 4);
        let row = s.bk / 4 + 1; // padded shared row, in vec4
        let xs = s.stage_a.then(|| b.shared_array("x_tile", v4m, s.bm * row));
        let ws = s.stage_b.then(|| b.shared_array("w_tile", v4m, s.bn * row));
        let upb = s.units_per_slab();
        let pack_x = s.pack_a_f16;
        // Only a packing kernel declares the f16 limit it clamps to.
        let f16_max = pack_x.then(|| b.lit(v4m, 65504.0));
        // shuffle_a: this lane's vec4 of each X row of the slab, and lane 0 of its row group.
        let held: RefCell<Vec<Value>> = RefCell::new(Vec::new());
        // wide_loads without stage_b: the slab's units of each column.
        let slab_units: RefCell<Vec<Vec<Rc<Unit>>>> = RefCell::new(Vec::new());

        let stage = |ub: Value| {
            if s.wide_loads && ws.is_none() {
                *slab_units.borrow_mut() = self.open_slab(ub, f16);
            }
            if s.shuffle_a {
                let first = b.add(b.muli(ub, CHUNKS), self.tx);
                *held.borrow_mut() = self
                    .x_bases
                    .iter()
                    .map(|&base| {
                        let v = b.convert(b.load(self.x, b.add(base, first)), v4m);
                        if let Some(f16_max) = f16_max {
                            // Finite in f16 whatever the activation (an overflow would be inf).
                            let v = b.max(b.min(v, f16_max), b.neg(f16_max));
                            let pair = |i: u32| {
                                b.pack_half2x16(
                                    b.construct(&[b.extract(v, i), b.extract(v, i + 1)]),
                                )
                            };
                            b.construct(&[pair(0), pair(2)])
                        } else {
                            v
                        }
                    })
                    .collect();
            }
            if let Some(xs) = xs {
                let per_row = upb * CHUNKS;
                self.cooperative(s.bm * per_row, |idx| {
                    let r = b.div(idx, b.c_u32(per_row));
                    let cv = b.rem(idx, b.c_u32(per_row));
                    let xrow = b.min(b.add(self.m0, r), self.m_last);
                    let src = b.add(b.mul(xrow, self.x_row_vec4s), b.add(b.muli(ub, CHUNKS), cv));
                    let v = b.convert(b.load(self.x, src), v4m);
                    b.store_shared(xs, b.add(b.muli(r, row), cv), v);
                });
            }
            if let (Some(ws), true) = (ws, s.wide_loads) {
                // One item per W row: the slab's units opened together.
                self.cooperative(s.bn, |r| {
                    let units = open_units(b, self.rows, self.w_row_off(r), ub, upb, f16);
                    for (ul, unit) in units.iter().enumerate() {
                        let dst = b.add(b.muli(r, row), b.c_u32(ul as u32 * CHUNKS));
                        for c in 0..CHUNKS {
                            let v = if f16 {
                                unit.chunk_f16_at(b, c)
                            } else {
                                unit.chunk_f32_at(b, c)
                            };
                            b.store_shared(ws, b.addi(dst, c), v);
                        }
                    }
                });
            } else if let Some(ws) = ws {
                self.cooperative(s.bn * upb, |idx| {
                    let r = b.div(idx, b.c_u32(upb));
                    let ul = b.rem(idx, b.c_u32(upb));
                    let unit = open_unit(b, self.rows, self.w_row_off(r), b.add(ub, ul), f16);
                    let dst = b.add(b.muli(r, row), b.muli(ul, CHUNKS));
                    b.for_range(b.c_u32(0), b.c_u32(CHUNKS), 1, Unroll::Hint, |c| {
                        let v = if f16 {
                            unit.chunk_f16(b, c)
                        } else {
                            unit.chunk_f32(b, c)
                        };
                        b.store_shared(ws, b.add(dst, c), v);
                    });
                });
            }
        };

        let (wg_n, wg_m) = (s.bn / s.tn, s.bm / s.tm);
        // The f16 partial sums are reset after every fold; they start at zero.
        let fold = || {
            for i in 0..tm {
                for j in 0..tn {
                    let p = b.convert(b.load_var(part[i][j]), Type::vec(Scalar::F32, vw));
                    let sum = (0..vw).fold(b.load_var(acc[i][j]), |a, l| b.add(a, b.extract(p, l)));
                    b.store_var(acc[i][j], sum);
                    b.store_var(part[i][j], b.lit(part_ty, 0.0));
                }
            }
        };
        let fold_per_unit = mixed && !s.fold_per_slab;
        let unit_body = |u: Value, ul: Value, ul_const: Option<u32>| {
            let units: Vec<Rc<Unit>> = match (ws, ul_const) {
                (Some(_), _) => Vec::new(),
                (None, Some(ul)) if s.wide_loads => slab_units
                    .borrow()
                    .iter()
                    .map(|col| col[ul as usize].clone())
                    .collect(),
                (None, _) => self
                    .w_row_offs
                    .iter()
                    .map(|&off| Rc::new(open_unit(b, self.rows, off, u, f16)))
                    .collect(),
            };
            let chunk = |c: Value, c_const: Option<u32>| {
                let xv: Vec<Vec<Value>> = (0..s.tm)
                    .map(|i| {
                        let v = match xs {
                            Some(xs) => {
                                let r = b.addi(self.ty, i * wg_m);
                                b.load_shared(
                                    xs,
                                    b.add(b.add(b.muli(r, row), b.muli(ul, CHUNKS)), c),
                                )
                            }
                            None => match (ul_const, c_const) {
                                // Chunk c of slab unit ul is held by lane 8·ul + c (the row
                                // group is the whole subgroup): a constant lane, which
                                // drivers turn into one cross-lane read.
                                (Some(ul), Some(c)) if s.shuffle_a => {
                                    let v = b.subgroup_broadcast(
                                        held.borrow()[i as usize],
                                        ul * CHUNKS + c,
                                    );
                                    if pack_x {
                                        let lo = b.unpack_half2x16(b.extract(v, 0));
                                        let hi = b.unpack_half2x16(b.extract(v, 1));
                                        b.construct(&[lo, hi])
                                    } else {
                                        v
                                    }
                                }
                                _ => {
                                    let src = b
                                        .add(self.x_bases[i as usize], b.add(b.muli(u, CHUNKS), c));
                                    b.convert(b.load(self.x, src), v4m)
                                }
                            },
                        };
                        self.pieces(v)
                    })
                    .collect();
                for j in 0..tn {
                    let wv = match ws {
                        Some(ws) => {
                            let r = b.addi(self.tx, j as u32 * wg_n);
                            b.load_shared(ws, b.add(b.add(b.muli(r, row), b.muli(ul, CHUNKS)), c))
                        }
                        None => match (c_const, f16) {
                            (Some(c), true) => units[j].chunk_f16_at(b, c),
                            (Some(c), false) => units[j].chunk_f32_at(b, c),
                            (None, true) => units[j].chunk_f16(b, c),
                            (None, false) => units[j].chunk_f32(b, c),
                        },
                    };
                    let wp = self.pieces(wv);
                    for i in 0..tm {
                        let target = if mixed { part[i][j] } else { acc[i][j] };
                        let mut a = b.load_var(target);
                        for (xp, wp) in xv[i].iter().zip(&wp) {
                            a = b.fma(*xp, *wp, a);
                        }
                        b.store_var(target, a);
                    }
                }
            };
            if ul_const.is_some() {
                for c in 0..CHUNKS {
                    chunk(b.c_u32(c), Some(c));
                }
            } else {
                b.for_range(b.c_u32(0), b.c_u32(CHUNKS), 1, Unroll::Hint, |c| {
                    chunk(c, None)
                });
            }
            if fold_per_unit {
                fold();
            }
        };

        self.slab_loop(stage, unit_body, || {
            if mixed && s.fold_per_slab {
                fold();
            }
        });

        // Horizontal sums in f32 (mixed precision holds them already).
        if mixed {
            return acc
                .iter()
                .map(|row| row.iter().map(|&a| b.load_var(a)).collect())
                .collect();
        }
        acc.iter()
            .map(|row| {
                row.iter()
                    .map(|&a| {
                        let v = b.convert(b.load_var(a), Type::vec(Scalar::F32, vw));
                        let lanes: Vec<Value> = (0..vw).map(|l| b.extract(v, l)).collect();
                        lanes[1..].iter().fold(lanes[0], |s, &l| b.add(s, l))
                    })
                    .collect()
            })
            .collect()
    }

    // ---- int8 dot-product path ------------------------------------------------------------

    fn int8_main_loop(&self) -> Vec<Vec<Value>> {
        let b = self.b;
        let s = self.s;
        let upb = s.units_per_slab();
        let (tm, tn) = (s.tm as usize, s.tn as usize);
        let fmt = self.w.weight;
        let has_min = fmt.has_min();
        let has_hi = fmt.has_hi_scale();
        let nsc = int8_scale_lanes(fmt);
        let sc_ty = Type::vec(Scalar::F32, nsc);
        let acc: Vec<Vec<Var>> = (0..tm)
            .map(|i| {
                (0..tn)
                    .map(|j| b.var_init(&format!("acc{i}_{j}"), b.c_f32(0.0)))
                    .collect()
            })
            .collect();

        // half_units double-buffers the tiles (slab parity): their addresses then vary with
        // the K loop instead of being loop-invariant registers the driver keeps (and spills)
        // across it.
        let bufs = if s.half_units { 2 } else { 1 };
        let xq = s
            .stage_a
            .then(|| b.shared_array("xq_tile", Type::U32, bufs * s.bm * upb * CHUNKS));
        let xd = (s.stage_a && !s.half_units)
            .then(|| b.shared_array("xd_tile", Type::vec(Scalar::F32, 2), s.bm * upb));
        // half_units: each X unit is quantized by two threads, 16 values each (16 live
        // registers instead of 32): their partial maxima meet in `xa_tile`; `xd4_tile` holds
        // per unit d, the two halves' sums of quants (exact integers) and a spare.
        let xa = s
            .half_units
            .then(|| b.shared_array("xa_tile", Type::F32, bufs * s.bm * upb * 2));
        // Thread-major scales (`thread_scales`): each thread's tm rows' d side by side (a
        // plane for the second half's thread, never read), and their halves' sums of quants
        // side by side, so a thread reads a unit's X scales in one or two wide loads.
        let (wg_n, wg_m) = (s.bn / s.tn, s.bm / s.tm);
        let thread_scales = s.thread_scales();
        let hi_planes = thread_scales && has_hi;
        // With a min term (Q4_K, Q5_K) the mins get a plane of their own too, and each half
        // takes its min term after its dot products, the rows' sums of quants computed from
        // the fragments it holds (`GemmSchedule::thread_scales`).
        let min_planes = thread_scales && has_min;
        let planes = hi_planes || min_planes;
        let xd4 = (s.half_units && !thread_scales)
            .then(|| b.shared_array("xd4_tile", Type::F32, bufs * s.bm * upb * 4));
        let xdd =
            thread_scales.then(|| b.shared_array("xdd_tile", Type::F32, 2 * bufs * s.bm * upb));
        // Declared though no kernel reads it any more (`min_planes` takes the sums from the
        // fragments): the tiles then take the workgroup memory they took before
        // (`GemmSchedule::shared_bytes`), and the search spaces that count it keep their
        // candidates.
        let _xsum =
            thread_scales.then(|| b.shared_array("xsum_tile", Type::F32, bufs * s.bm * upb * 2));
        // packed_w: the first 2·packed_w columns of each thread (tile rows below
        // `packed_rows`) are staged as packed nibbles in `wp_tile`, 4 words per unit instead
        // of 8; the other rows as bytes in `wq_tile`, from its row 0.
        let packed_rows = 2 * s.packed_w * wg_n;
        let plain_rows = s.bn - packed_rows;
        let wq = (s.stage_b && plain_rows > 0)
            .then(|| b.shared_array("wq_tile", Type::U32, bufs * plain_rows * upb * CHUNKS));
        let wp = (s.stage_b && packed_rows > 0)
            .then(|| b.shared_array("wp_tile", Type::U32, bufs * packed_rows * upb * 4));
        // packed_w: the first of the 2 packed words of W row `r`'s unit `ul`, half `half`
        // (`woff`: the buffer's first unit slot of `wp_tile`). A thread's columns j = 2p,
        // 2p + 1 of a unit's half sit side by side (4 words: one 16-byte load in the loop),
        // the pairs and halves of its unit next: word (((thread·upb + ul)·packed_w + p)·2 +
        // half)·4 + 2·(j & 1).
        let packed_at = |r: Value, ul: Value, half: Value, woff: Value| -> Value {
            let (thread, j) = (b.andi(r, wg_n - 1), b.shri(r, wg_n.trailing_zeros()));
            let pair = b.add(
                b.muli(b.add(b.muli(thread, upb), ul), s.packed_w),
                b.shri(j, 1),
            );
            let at = b.add(
                b.muli(b.add(b.muli(pair, 2), half), 4),
                b.muli(b.andi(j, 1), 2),
            );
            b.add(at, b.muli(woff, 4))
        };
        let wsc = s.stage_b.then(|| {
            // thread_scales with a second scale (Q6_K): lo and hi in planes of tn, so a
            // half reads only its own lane (4 live registers instead of 8); with a min term
            // lo and min in planes, so the mins are read only where the min term is taken.
            if planes {
                b.shared_array("wsc_tile", Type::F32, bufs * s.bn * upb * 2)
            } else {
                b.shared_array("wsc_tile", sc_ty, bufs * s.bn * upb)
            }
        });
        // The first slot of the buffer of unit `u`'s slab, for tiles of `rows` rows.
        let buffer_slot = |u: Value, rows: u32| -> Value {
            if bufs == 1 {
                b.c_u32(0)
            } else {
                b.muli(b.andi(b.div(u, b.c_u32(upb)), 1), rows * upb)
            }
        };
        // `thread_scales`: the scale slot (within a buffer) of tile row `r`'s unit `ul`, for
        // a side with `wg` threads of `t` rows each (row r = thread + i·wg): the thread's t
        // rows of one unit are adjacent.
        let scale_slot = |r: Value, ul: Value, wg: u32, t: u32| -> Value {
            let (thread, i) = (b.andi(r, wg - 1), b.shri(r, wg.trailing_zeros()));
            b.add(b.muli(b.add(b.muli(thread, upb), ul), t), i)
        };
        let pack_scales = |sc: crate::dequant::ir::Int8Scales| -> Value {
            match (sc.hi, sc.min) {
                (Some(hi), _) => b.construct(&[sc.lo, hi]),
                (None, Some(min)) => b.construct(&[sc.lo, min]),
                (None, None) => sc.lo,
            }
        };
        // Stores W row `r`'s unit `ul` scales into the thread-major tile (`woff`: the
        // buffer's first slot): with `planes` lane l of column i of the (thread, unit)
        // at woff·2 + (slot·2 + l)·tn + i, else the packed scales at its slot.
        let store_w_scales = |wsc: SharedArray, r: Value, ul: Value, woff: Value, sc| {
            let sc: crate::dequant::ir::Int8Scales = sc;
            let second = if min_planes {
                sc.min
            } else {
                sc.hi.filter(|_| hi_planes)
            };
            match second {
                Some(second) => {
                    let (thread, i) = (b.andi(r, wg_n - 1), b.shri(r, wg_n.trailing_zeros()));
                    let pair = b.muli(b.add(b.muli(thread, upb), ul), 2 * s.tn);
                    let lo_at = b.add(b.add(pair, i), b.muli(woff, 2));
                    b.store_shared(wsc, lo_at, sc.lo);
                    b.store_shared(wsc, b.addi(lo_at, s.tn), second);
                }
                None => b.store_shared(
                    wsc,
                    b.add(scale_slot(r, ul, wg_n, s.tn), woff),
                    pack_scales(sc),
                ),
            }
        };

        let load_x_chunks = |x_base: Value, u: Value| -> Vec<Value> {
            let first = b.add(x_base, b.muli(u, CHUNKS));
            (0..CHUNKS)
                .map(|c| b.convert(b.load(self.x, b.addi(first, c)), Type::vec(Scalar::F32, 4)))
                .collect()
        };

        // wide_loads without stage_b: the slab's units of each column.
        let slab_units: RefCell<Vec<Vec<Rc<Unit>>>> = RefCell::new(Vec::new());

        let stage = |ub: Value| {
            // half_units: the geometry is read again in the loop (`Gemm::in_loop`).
            let fresh;
            let g: &Gemm = if s.half_units {
                fresh = self.in_loop();
                &fresh
            } else {
                self
            };
            let (xoff, woff) = (buffer_slot(ub, s.bm), buffer_slot(ub, s.bn));
            if s.wide_loads && wq.is_none() {
                *slab_units.borrow_mut() = g.open_slab(ub, false);
            }
            if let (Some(xq), Some(xa)) = (xq, xa) {
                // Two threads per (row, unit), one barrier between the halves' maxima and
                // the quantization; every thread takes the same number of steps.
                let total = s.bm * upb * 2;
                let threads = s.threads();
                let steps = total.div_ceil(threads);
                b.for_range(b.c_u32(0), b.c_u32(steps), 1, Unroll::Hint, |it| {
                    let idx = b.add(g.tid, b.muli(it, threads));
                    let live = b.lt(idx, b.c_u32(total));
                    let item = b.min(idx, b.c_u32(total - 1));
                    let half = b.andi(item, 1);
                    let slot = b.shri(item, 1);
                    let r = b.div(slot, b.c_u32(upb));
                    let ul = b.rem(slot, b.c_u32(upb));
                    let xrow = b.min(b.add(g.m0, r), g.m_last);
                    let first = b.add(
                        b.add(b.mul(xrow, g.x_row_vec4s), b.muli(b.add(ub, ul), CHUNKS)),
                        b.muli(half, 4),
                    );
                    let chunks: Vec<Value> = (0..4)
                        .map(|c| {
                            b.convert(b.load(g.x, b.addi(first, c)), Type::vec(Scalar::F32, 4))
                        })
                        .collect();
                    let amax4 = chunks[1..]
                        .iter()
                        .fold(b.abs(chunks[0]), |a, &c| b.max(a, b.abs(c)));
                    let part = b.max(
                        b.max(b.extract(amax4, 0), b.extract(amax4, 1)),
                        b.max(b.extract(amax4, 2), b.extract(amax4, 3)),
                    );
                    let xa_item = b.add(item, b.muli(xoff, 2));
                    b.if_(live, || b.store_shared(xa, xa_item, part));
                    b.barrier();
                    b.if_(live, || {
                        let other = b.load_shared(xa, b.xor(xa_item, b.c_u32(1)));
                        let amax = b.max(part, other);
                        let (words, d) = crate::dequant::ir::quantize_chunks_q8(b, &chunks, amax);
                        // The half's sum of quants as an f32 (an exact integer).
                        // (`min_planes` takes its sums from the fragments instead.)
                        let sum = if has_min && !min_planes {
                            b.convert(crate::dequant::ir::quants_sum(b, &words), Type::F32)
                        } else {
                            b.c_f32(0.0)
                        };
                        let slot = b.add(slot, xoff);
                        let base = b.add(b.muli(slot, CHUNKS), b.muli(half, 4));
                        for (c, w) in words.iter().enumerate() {
                            b.store_shared(xq, b.addi(base, c as u32), *w);
                        }
                        if let Some(xd4) = xd4 {
                            // d at 0 (the first half) or the spare at 3 (the second); the
                            // half's sum of quants at 1 + half.
                            let four = b.muli(slot, 4);
                            b.store_shared(xd4, b.add(four, b.muli(half, 3)), d);
                            if has_min {
                                b.store_shared(xd4, b.add(b.addi(four, 1), half), sum);
                            }
                        }
                        if let Some(xdd) = xdd {
                            // d in the first plane (the first half) or the spare second
                            // plane (unread); no sums (`min_planes`).
                            let at = b.add(scale_slot(r, ul, wg_m, s.tm), xoff);
                            b.store_shared(xdd, b.add(at, b.muli(half, bufs * s.bm * upb)), d);
                        }
                    });
                });
            }
            if let (Some(xq), Some(xd)) = (xq, xd) {
                g.cooperative(s.bm * upb, |idx| {
                    let r = b.div(idx, b.c_u32(upb));
                    let ul = b.rem(idx, b.c_u32(upb));
                    let xrow = b.min(b.add(g.m0, r), g.m_last);
                    let chunks = load_x_chunks(b.mul(xrow, g.x_row_vec4s), b.add(ub, ul));
                    let (words, d, sum) = crate::dequant::ir::quantize_unit_q8(b, &chunks, has_min);
                    let slot = b.add(b.muli(r, upb), ul);
                    for (c, w) in words.iter().enumerate() {
                        b.store_shared(xq, b.addi(b.muli(slot, CHUNKS), c as u32), *w);
                    }
                    b.store_shared(xd, slot, b.construct(&[d, sum]));
                });
            }
            if let (Some(wq), Some(wsc), true) = (wq, wsc, s.wide_loads) {
                // One item per W row: the slab's units opened together.
                g.cooperative(s.bn, |r| {
                    let units = open_units(b, g.rows, g.w_row_off(r), ub, upb, false);
                    for (ul, unit) in units.iter().enumerate() {
                        let slot = b.add(b.addi(b.muli(r, upb), ul as u32), woff);
                        for c in 0..CHUNKS {
                            b.store_shared(
                                wq,
                                b.addi(b.muli(slot, CHUNKS), c),
                                unit.word_i8_at(b, c),
                            );
                        }
                        if thread_scales {
                            store_w_scales(wsc, r, b.c_u32(ul as u32), woff, unit.int8_scales());
                        } else {
                            b.store_shared(wsc, slot, pack_scales(unit.int8_scales()));
                        }
                    }
                });
            } else if let Some(wsc) = wsc {
                if s.split_w_staging() {
                    // Two threads per unit, one half (4 words) each, as X is staged: a
                    // unit per thread would leave threads idle, and a half's words are one
                    // 16-byte load and one 16-byte store instead of two of each.
                    g.cooperative(s.bn * upb * 2, |item| {
                        let half = b.andi(item, 1);
                        let idx = b.shri(item, 1);
                        let r = b.div(idx, b.c_u32(upb));
                        let ul = b.rem(idx, b.c_u32(upb));
                        let unit = open_unit(b, g.rows, g.w_row_off(r), b.add(ub, ul), false);
                        let slot = b.add(b.add(b.muli(r, upb), ul), woff);
                        // Chunks 2q and 2q + 1 of the half (unsigned nibbles) in the low and
                        // high nibbles of packed word q.
                        // The half's 4 byte words, read and unpacked once where both
                        // layouts are stored (one of them by each thread).
                        let half_words = || -> Vec<Value> {
                            (0..4).map(|c| unit.word_i8_half(b, half, c)).collect()
                        };
                        let store_packed = |wp: SharedArray, words: &[Value]| {
                            let at = packed_at(r, ul, half, buffer_slot(ub, packed_rows));
                            for q in 0..2 {
                                let (lo, hi) = (words[2 * q], words[2 * q + 1]);
                                b.store_shared(wp, b.addi(at, q as u32), b.or(lo, b.shli(hi, 4)));
                            }
                        };
                        match (wq, wp) {
                            (Some(wq), None) => {
                                let first = b.add(b.muli(slot, CHUNKS), b.muli(half, 4));
                                for c in 0..4 {
                                    let at = b.addi(first, c);
                                    b.store_shared(wq, at, unit.word_i8_half(b, half, c));
                                }
                            }
                            (None, Some(wp)) => store_packed(wp, &half_words()),
                            (Some(wq), Some(wp)) => {
                                let words = half_words();
                                b.if_else(
                                    b.lt(r, b.c_u32(packed_rows)),
                                    || store_packed(wp, &words),
                                    || {
                                        let r = b.sub(r, b.c_u32(packed_rows));
                                        let slot = b.add(
                                            b.add(b.muli(r, upb), ul),
                                            buffer_slot(ub, plain_rows),
                                        );
                                        let first = b.add(b.muli(slot, CHUNKS), b.muli(half, 4));
                                        for (c, &word) in words.iter().enumerate() {
                                            b.store_shared(wq, b.addi(first, c as u32), word);
                                        }
                                    },
                                )
                            }
                            (None, None) => unreachable!("stage_b stages W"),
                        }
                        let first_half = b.eq(half, b.c_u32(0));
                        let sc = unit.int8_scales();
                        let second = if min_planes {
                            sc.min
                        } else {
                            sc.hi.filter(|_| hi_planes)
                        };
                        match (thread_scales, second) {
                            // Planes: the first half's thread stores lo, the second's the
                            // second lane (min or hi), tn further.
                            (true, Some(second)) => {
                                let (thread, i) =
                                    (b.andi(r, wg_n - 1), b.shri(r, wg_n.trailing_zeros()));
                                let pair = b.muli(b.add(b.muli(thread, upb), ul), 2 * s.tn);
                                let lo_at = b.add(b.add(pair, i), b.muli(woff, 2));
                                let at = b.add(lo_at, b.muli(half, s.tn));
                                b.store_shared(wsc, at, b.select(first_half, sc.lo, second));
                            }
                            _ => b.if_(first_half, || {
                                if thread_scales {
                                    store_w_scales(wsc, r, ul, woff, sc);
                                } else {
                                    b.store_shared(wsc, slot, pack_scales(sc));
                                }
                            }),
                        }
                    });
                } else {
                    let wq = wq.expect("packed_w splits the W staging");
                    g.cooperative(s.bn * upb, |idx| {
                        let r = b.div(idx, b.c_u32(upb));
                        let ul = b.rem(idx, b.c_u32(upb));
                        let unit = open_unit(b, g.rows, g.w_row_off(r), b.add(ub, ul), false);
                        let slot = b.add(b.add(b.muli(r, upb), ul), woff);
                        for c in 0..CHUNKS {
                            b.store_shared(
                                wq,
                                b.addi(b.muli(slot, CHUNKS), c),
                                unit.word_i8(b, b.c_u32(c)),
                            );
                        }
                        if thread_scales {
                            store_w_scales(wsc, r, ul, woff, unit.int8_scales());
                        } else {
                            b.store_shared(wsc, slot, pack_scales(unit.int8_scales()));
                        }
                    });
                }
            }
        };

        // half_units: both operands staged; each unit in two halves of 16 values, only a
        // half's 4-word fragments live at once (see `GemmSchedule::half_units`).
        let half_body = |u: Value, ul: Value| {
            let (xq, wsc) = (
                xq.expect("half_units stages X"),
                wsc.expect("half_units stages W"),
            );
            // Every address is one base per operand plus a constant, so the loads take
            // immediate offsets instead of a live address register each. The thread's ids
            // are read again here (`Gemm::in_loop`), not held across the loop.
            let g = self.in_loop();
            // A condition that always holds (a dispatch has rows) but that the driver cannot
            // prove: code in `if fence` blocks stays in its block. Mesa 26.1.6's Valhall
            // scheduler otherwise takes all 16 dot products of a 4×4 half unit (and their
            // scale products) before any accumulation, about 32 extra live registers, and
            // spills (32-34 spills before the blocks, none after).
            let fence = b.ne(g.m, b.c_u32(0));
            let x_slot0 = b.add(b.add(b.muli(g.ty, upb), ul), buffer_slot(u, s.bm));
            let w_slot0 = b.add(b.add(b.muli(g.tx, upb), ul), buffer_slot(u, plain_rows));
            let x_word0 = b.muli(x_slot0, CHUNKS);
            let w_word0 = b.muli(w_slot0, CHUNKS);
            let x_slot = |i: u32| i * wg_m * upb;
            // Columns j ≥ 2·packed_w, from `wq_tile`'s row 0.
            let w_slot = |j: u32| (j - 2 * s.packed_w) * wg_n * upb;
            // Each row's d (and with a min term the two halves' sums of quants), and each
            // column's scales: with `thread_scales` the thread's rows (columns) of the unit
            // are adjacent, so the driver merges their reads into wide loads.
            let x_scale0 = thread_scales.then(|| {
                b.add(
                    b.muli(b.add(b.muli(g.ty, upb), ul), s.tm),
                    buffer_slot(u, s.bm),
                )
            });
            let w_scale0 = thread_scales.then(|| {
                let slot = b.add(b.muli(g.tx, upb), ul);
                if planes {
                    // Lane 0 (lo) of the thread's columns; lane 1 (hi or min) tn further.
                    b.add(b.muli(slot, 2 * s.tn), b.muli(buffer_slot(u, s.bn), 2))
                } else {
                    b.add(b.muli(slot, s.tn), buffer_slot(u, s.bn))
                }
            });
            // Row i's d, and for one-row tiles with a min term the sums of quants of its two
            // halves (read in that order; several-row tiles take them from the fragments).
            let x_scales = |i: u32, with_sums: bool| -> (Value, Option<(Value, Value)>) {
                match (x_scale0, xdd, xd4) {
                    (Some(x0), Some(xdd), _) => (b.load_shared(xdd, b.addi(x0, i)), None),
                    (_, _, Some(xd4)) => {
                        let four = b.muli(b.addi(x_slot0, x_slot(i)), 4);
                        let d = b.load_shared(xd4, four);
                        let sums = with_sums.then(|| {
                            let s0 = b.load_shared(xd4, b.addi(four, 1));
                            let s1 = b.load_shared(xd4, b.addi(four, 2));
                            (s0, s1)
                        });
                        (d, sums)
                    }
                    _ => unreachable!("half_units stages X scales"),
                }
            };
            let w_at = |j: u32| match w_scale0 {
                Some(w0) => b.addi(w0, j),
                None => b.addi(w_slot0, w_slot(j)),
            };
            // Q4_K/Q5_K in one-row tiles: the min term first, in a block of its own, so the
            // rows' sums of quants and the columns' mins die there; only each row's d and
            // each column's scale leave it (through variables). During the halves only those
            // are live next to the accumulators and fragments. Several-row tiles
            // (`min_planes`) take it after each half instead, see below.
            let (dxs, wscs): (Vec<Value>, Vec<Value>) = if min_planes {
                (
                    (0..s.tm).map(|i| x_scales(i, false).0).collect(),
                    (0..s.tn).map(|j| b.load_shared(wsc, w_at(j))).collect(),
                )
            } else if has_min {
                let dv: Vec<Var> = (0..tm)
                    .map(|i| b.var(&format!("dx{i}"), Type::F32))
                    .collect();
                let lv: Vec<Var> = (0..tn)
                    .map(|j| b.var(&format!("lo{j}"), Type::F32))
                    .collect();
                b.if_(fence, || {
                    let sxs: Vec<Value> = (0..s.tm)
                        .map(|i| {
                            let (d, sums) = x_scales(i, true);
                            let (s0, s1) = sums.expect("a min term has sums");
                            b.store_var(dv[i as usize], d);
                            b.mul(d, b.add(s0, s1))
                        })
                        .collect();
                    for (j, &lo) in lv.iter().enumerate() {
                        let sc = b.load_shared(wsc, w_at(j as u32));
                        b.store_var(lo, b.extract(sc, 0));
                        let min = b.extract(sc, 1);
                        for (i, &sx) in sxs.iter().enumerate() {
                            let a = b.fma(b.neg(min), sx, b.load_var(acc[i][j]));
                            b.store_var(acc[i][j], a);
                        }
                    }
                });
                (
                    dv.iter().map(|&v| b.load_var(v)).collect(),
                    lv.iter().map(|&v| b.load_var(v)).collect(),
                )
            } else {
                (
                    (0..s.tm).map(|i| x_scales(i, false).0).collect(),
                    (0..s.tn).map(|j| b.load_shared(wsc, w_at(j))).collect(),
                )
            };
            for h in 0..2u32 {
                let frag = |arr: SharedArray, word0: Value, slot: u32| -> Vec<Value> {
                    (0..4)
                        .map(|c| b.load_shared(arr, b.addi(word0, slot * CHUNKS + 4 * h + c)))
                        .collect()
                };
                let xf: Vec<Vec<Value>> = (0..s.tm).map(|i| frag(xq, x_word0, x_slot(i))).collect();
                // hi_planes: the second half's scales (lane 1), read for this half only.
                let his: Option<Vec<Value>> = (hi_planes && h == 1).then(|| {
                    (0..s.tn)
                        .map(|j| b.load_shared(wsc, w_at(s.tn + j)))
                        .collect()
                });
                // packed_w: a pair of columns' half from one 16-byte load, each column's
                // 4 words unpacked from 2 (low nibbles, then high nibbles).
                let column = |j: usize, wf: Vec<Value>| {
                    let sc = wscs[j];
                    let scale = if min_planes {
                        sc
                    } else if hi_planes {
                        his.as_ref().map_or(sc, |his| his[j])
                    } else if h == 1 && has_hi {
                        b.extract(sc, 1)
                    } else if nsc > 1 && !has_min {
                        b.extract(sc, 0)
                    } else {
                        sc
                    };
                    for (i, xw) in xf.iter().enumerate() {
                        let dot = (0..4)
                            .map(|c| b.dot4x8(xw[c], wf[c], DotSign::Signed))
                            .reduce(|a, d| b.add(a, d))
                            .expect("four chunks");
                        let a = b.fma(
                            b.mul(dxs[i], scale),
                            b.convert(dot, Type::F32),
                            b.load_var(acc[i][j]),
                        );
                        b.store_var(acc[i][j], a);
                    }
                };
                if let Some(wp) = wp {
                    let w_pk0 = b.add(
                        b.muli(b.add(b.muli(g.tx, upb), ul), 8 * s.packed_w),
                        b.muli(buffer_slot(u, packed_rows), 4),
                    );
                    for p in 0..s.packed_w {
                        b.if_(fence, || {
                            let pw: Vec<Value> = (0..4)
                                .map(|q| b.load_shared(wp, b.addi(w_pk0, (2 * p + h) * 4 + q)))
                                .collect();
                            for jj in 0..2usize {
                                let wf = pw[2 * jj..2 * jj + 2]
                                    .iter()
                                    .flat_map(|&v| {
                                        [b.andi(v, 0x0F0F_0F0F), b.andi(b.shri(v, 4), 0x0F0F_0F0F)]
                                    })
                                    .collect();
                                column(2 * p as usize + jj, wf);
                            }
                        });
                    }
                }
                if let Some(wq) = wq {
                    for j in 2 * s.packed_w as usize..tn {
                        b.if_(fence, || column(j, frag(wq, w_word0, w_slot(j as u32))));
                    }
                }
                if min_planes {
                    // The min term of this half, after its dot products: each row's sum of
                    // quants from the fragments it holds (so X stages no sums), the
                    // columns' mins from their plane.
                    b.if_(fence, || {
                        let ts: Vec<Value> = xf
                            .iter()
                            .enumerate()
                            .map(|(i, xw)| {
                                let q = crate::dequant::ir::quants_sum(b, xw);
                                b.mul(dxs[i], b.convert(q, Type::F32))
                            })
                            .collect();
                        for j in 0..s.tn {
                            let min = b.load_shared(wsc, w_at(s.tn + j));
                            for (row, &t) in acc.iter().zip(&ts) {
                                let a = b.fma(b.neg(min), t, b.load_var(row[j as usize]));
                                b.store_var(row[j as usize], a);
                            }
                        }
                    });
                }
            }
        };
        let unit_body = |u: Value, ul: Value, ul_const: Option<u32>| {
            if s.half_units {
                half_body(u, ul);
                return;
            }
            // Activations of the tm rows: packed words, d, d*Σq.
            let xs: Vec<(Vec<Value>, Value, Value)> = (0..s.tm)
                .map(|i| match (xq, xd) {
                    (Some(xq), Some(xd)) => {
                        let r = b.addi(self.ty, i * wg_m);
                        let slot = b.add(b.muli(r, upb), ul);
                        let base = b.muli(slot, CHUNKS);
                        let words = (0..CHUNKS)
                            .map(|c| b.load_shared(xq, b.addi(base, c)))
                            .collect();
                        let dv = b.load_shared(xd, slot);
                        (words, b.extract(dv, 0), b.extract(dv, 1))
                    }
                    _ => {
                        let chunks = load_x_chunks(self.x_bases[i as usize], u);
                        crate::dequant::ir::quantize_unit_q8(b, &chunks, has_min)
                    }
                })
                .collect();
            for (j, &w_off) in self.w_row_offs.iter().enumerate() {
                let (words, lo, hi, min): (Vec<Value>, Value, Option<Value>, Option<Value>) =
                    match (wq, wsc) {
                        (Some(wq), Some(wsc)) => {
                            let r = b.addi(self.tx, j as u32 * wg_n);
                            let slot = b.add(b.muli(r, upb), ul);
                            let base = b.muli(slot, CHUNKS);
                            let words = (0..CHUNKS)
                                .map(|c| b.load_shared(wq, b.addi(base, c)))
                                .collect();
                            let sc = b.load_shared(wsc, slot);
                            let lo = b.extract(sc, 0);
                            let second = (nsc > 1).then(|| b.extract(sc, 1));
                            (
                                words,
                                lo,
                                second.filter(|_| has_hi),
                                second.filter(|_| has_min),
                            )
                        }
                        _ => {
                            let unit = match ul_const {
                                Some(ul) if s.wide_loads => {
                                    slab_units.borrow()[j][ul as usize].clone()
                                }
                                _ => Rc::new(open_unit(b, self.rows, w_off, u, false)),
                            };
                            let words = (0..CHUNKS).map(|c| unit.word_i8_at(b, c)).collect();
                            let sc = unit.int8_scales();
                            (words, sc.lo, sc.hi, sc.min)
                        }
                    };
                let scales = crate::dequant::ir::Int8Scales { lo, hi, min };
                for (i, (xw, dx, sx)) in xs.iter().enumerate() {
                    let a = crate::dequant::ir::int8_unit_fma(
                        b,
                        b.load_var(acc[i][j]),
                        xw,
                        *dx,
                        *sx,
                        &words,
                        scales,
                    );
                    b.store_var(acc[i][j], a);
                }
            }
        };

        self.slab_loop(stage, unit_body, || {});
        acc.iter()
            .map(|row| row.iter().map(|&a| b.load_var(a)).collect())
            .collect()
    }

    // ---- epilogue -------------------------------------------------------------------------

    /// Reduces split-K partial sums, applies the epilogue and stores the in-range outputs.
    fn reduce_and_store(&self, totals: &[Vec<Value>]) {
        match self.in_place_reduce {
            None => self.for_each_output(totals, |i, j, v, up| self.store_output(i, j, v, up)),
            Some((partials, counters)) => {
                self.for_each_output(totals, |i, j, v, up| {
                    self.store_partial(partials, i, j, v, up)
                });
                self.if_last_group(counters, || {
                    self.for_each_owned(|i, j, up| {
                        let v = self.sum_partials(partials, i, j, 0);
                        let up = up.then(|| self.sum_partials(partials, i, j, 1));
                        self.store_output(i, j, v, up)
                    })
                });
            }
        }
    }

    /// Calls `f(i, j, sum, up sum)` for each micro-tile output this thread finishes, after
    /// adding up the `split_k` threads' sums through shared memory.
    fn for_each_output(
        &self,
        totals: &[Vec<Value>],
        f: impl Fn(usize, usize, Value, Option<Value>),
    ) {
        let b = self.b;
        let s = self.s;
        let (tm, tn) = (s.tm, s.tn);
        // SwiGLU: output column j combines the sums of micro-tile columns j and j + tn/2.
        let out_tn = self.out_cols.len();
        let up_of = |j: usize| (out_tn < tn as usize).then_some(j + out_tn);
        if s.split_k == 1 {
            for (i, row) in totals.iter().enumerate() {
                for j in 0..out_tn {
                    f(i, j, row[j], up_of(j).map(|u| row[u]));
                }
            }
            return;
        }
        let wg_n = s.bn / s.tn;
        let tile = s.bm * s.bn;
        let red: SharedArray = b.shared_array("split_k_partials", Type::F32, s.split_k * tile);
        // Slot of this thread's micro-tile entry (i, j) within one split's tile.
        let thread_base = b.muli(b.add(b.muli(self.ty, wg_n), self.tx), tm * tn);
        let own = b.add(b.muli(self.kz, tile), thread_base);
        for (i, row) in totals.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                b.store_shared(red, b.addi(own, i as u32 * tn + j as u32), v);
            }
        }
        b.barrier();
        let sum_of = |e: u32| {
            let slot = b.addi(thread_base, e);
            let mut sum = b.load_shared(red, slot);
            for z in 1..s.split_k {
                sum = b.add(sum, b.load_shared(red, b.addi(slot, z * tile)));
            }
            sum
        };
        self.for_each_owned(|i, j, up| {
            let e = i as u32 * tn + j as u32;
            let up = up.then(|| sum_of(i as u32 * tn + (j + out_tn) as u32));
            f(i, j, sum_of(e), up)
        });
    }

    /// Calls `f(i, j, has_up)` for each micro-tile output (i, j) this thread finishes: all of
    /// them, or with `split_k` threads per micro-tile, those with (i·tn + j) % split_k = kz.
    fn for_each_owned(&self, f: impl Fn(usize, usize, bool)) {
        let b = self.b;
        let (tm, tn, split_k) = (self.s.tm, self.s.tn, self.s.split_k);
        let out_tn = self.out_cols.len();
        let has_up = out_tn < tn as usize;
        for i in 0..tm as usize {
            for j in 0..out_tn {
                let e = i as u32 * tn + j as u32;
                if split_k == 1 {
                    f(i, j, has_up);
                } else {
                    b.if_(b.eq(self.kz, b.c_u32(e % split_k)), || f(i, j, has_up));
                }
            }
        }
    }

    /// Index of output (row, ycol)'s partial sum of group `g` (`half` 1: its up sum) in the
    /// partials: planes of m × ldy, or m × 2·ldy with SwiGLU (each row's gate sums, then its
    /// up sums), as the reduce kernel reads them.
    fn partial_index(&self, g: Value, row: Value, ycol: Value, half: u32) -> Value {
        let b = self.b;
        let swiglu = self.out_cols.len() < self.s.tn as usize;
        let stride = if swiglu {
            b.add(self.ldy, self.ldy)
        } else {
            self.ldy
        };
        let at = b.add(b.mul(b.add(b.mul(g, self.m), row), stride), ycol);
        if half == 1 {
            b.add(at, self.ldy)
        } else {
            at
        }
    }

    /// Output (i, j)'s row, its column in Y, and whether it is inside m × n.
    /// Output row `i` of this thread's micro-tile. `half_units` recomputes it where it is
    /// used (after the K loop) instead of keeping the value computed at the start live
    /// across the loop: its 4×4 tiles have no registers to spare on Mali.
    fn out_row(&self, i: usize) -> Value {
        if !self.s.half_units {
            return self.out_rows[i];
        }
        let b = self.b;
        let wg_m = self.s.bm / self.s.tm;
        let m0 = b.muli(b.builtin(Builtin::WorkgroupId(1)), self.s.bm);
        let ty = b.builtin(Builtin::LocalInvocationId(2));
        b.add(m0, b.addi(ty, i as u32 * wg_m))
    }

    /// Output column `j` of this thread's micro-tile (see [`Self::out_row`]).
    fn out_col(&self, j: usize) -> Value {
        if !self.s.half_units {
            return self.out_cols[j];
        }
        let b = self.b;
        let wg_n = self.s.bn / self.s.tn;
        let tile_cols = if self.w.epilogue == Epilogue::SwiGlu {
            self.s.bn / 2
        } else {
            self.s.bn
        };
        let n0 = b.muli(b.builtin(Builtin::WorkgroupId(0)), tile_cols);
        let tx = b.builtin(Builtin::LocalInvocationId(1));
        b.add(n0, b.addi(tx, j as u32 * wg_n))
    }

    fn output_at(&self, i: usize, j: usize) -> (Value, Value, Value) {
        let b = self.b;
        let (row, col) = (self.out_row(i), self.out_col(j));
        let inside = b.logical_and(b.lt(row, self.m), b.lt(col, self.n));
        (row, b.add(self.n_offset, col), inside)
    }

    /// Stores this group's partial sums of output (i, j) into `partials` (the reduce kernel's
    /// scratch, or with `last_group_reduces` the in-place partials).
    fn store_partial(&self, partials: Buffer, i: usize, j: usize, v: Value, up: Option<Value>) {
        let b = self.b;
        let (row, ycol, inside) = self.output_at(i, j);
        b.if_(inside, || {
            let g = b.builtin(Builtin::WorkgroupId(2));
            b.store(partials, self.partial_index(g, row, ycol, 0), v);
            if let Some(up) = up {
                b.store(partials, self.partial_index(g, row, ycol, 1), up);
            }
        });
    }

    /// `last_group_reduces`: output (i, j)'s sum over all groups' partials, in group order
    /// (rows and columns outside m × n read a clamped, valid index; they are not stored).
    fn sum_partials(&self, partials: Buffer, i: usize, j: usize, half: u32) -> Value {
        let b = self.b;
        let row = b.min(self.out_row(i), self.m_last);
        let ycol = b.add(self.n_offset, b.min(self.out_col(j), self.n_last));
        let mut sum = b.load(partials, self.partial_index(b.c_u32(0), row, ycol, half));
        for g in 1..self.s.k_groups {
            sum = b.add(
                sum,
                b.load(partials, self.partial_index(b.c_u32(g), row, ycol, half)),
            );
        }
        sum
    }

    /// `last_group_reduces`: publishes this workgroup's partial sums, counts it in at its
    /// tile's counter and runs `then` in the last of the tile's `k_groups` workgroups to
    /// arrive (which resets the counter for the next dispatch). Nobody waits for anybody:
    /// the last one finds the others' sums written, so no forward-progress guarantee is
    /// needed.
    fn if_last_group(&self, counters: Buffer, then: impl FnOnce()) {
        let b = self.b;
        let groups = self.s.k_groups;
        // Every invocation's partials reach device scope before the workgroup counts in.
        b.device_memory_barrier();
        b.barrier();
        let flag = b.shared_array("last_group", Type::U32, 1);
        b.if_(b.eq(self.tid, b.c_u32(0)), || {
            let tile = b.add(
                b.mul(
                    b.builtin(Builtin::WorkgroupId(1)),
                    b.builtin(Builtin::NumWorkgroups(0)),
                ),
                b.builtin(Builtin::WorkgroupId(0)),
            );
            let arrived = b.atomic_add(counters, tile, b.c_u32(1));
            let last = b.eq(arrived, b.c_u32(groups - 1));
            b.if_(last, || {
                // Back to zero (adding -groups in wrapping u32 arithmetic).
                b.atomic_add(counters, tile, b.c_u32(groups.wrapping_neg()));
            });
            b.store_shared(flag, b.c_u32(0), b.select(last, b.c_u32(1), b.c_u32(0)));
        });
        b.barrier();
        b.if_(b.eq(b.load_shared(flag, b.c_u32(0)), b.c_u32(1)), || {
            // See the other groups' partials (their release, our acquire).
            b.device_memory_barrier();
            then();
        });
    }

    /// Stores output (i, j): `v` is its sum (the gate sum with SwiGLU, `up` the up sum).
    fn store_output(&self, i: usize, j: usize, v: Value, up: Option<Value>) {
        if self.s.k_groups > 1 && self.in_place_reduce.is_none() {
            // Split for the reduce kernel: y is the f32 scratch of partial sums.
            return self.store_partial(self.y, i, j, v, up);
        }
        let b = self.b;
        let (row, ycol, inside) = self.output_at(i, j);
        b.if_(inside, || {
            let at = b.add(b.mul(row, self.ldy), ycol);
            let mut v = match self.bias {
                Some(bias) => b.add(v, b.load(bias, ycol)),
                None => v,
            };
            if let Some(up) = up {
                v = super::super::eltwise::swiglu(b, v, up);
            }
            if let Some(r) = self.residual {
                v = b.add(v, b.convert(b.load(r, at), Type::F32));
            }
            let out = b.convert(v, Type::scalar(act_scalar(self.w.act)));
            b.store(self.y, at, out);
        });
    }
}
