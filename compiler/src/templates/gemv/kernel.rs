//! The GEMV kernel as IR, for a validated (workload, schedule) pair.
//!
//! ```text
//! group = (wg.y · numWorkgroups.x + wg.x) · G + tid / (threads/G)   // G = column_groups
//!                                                // columns group·cols .. +cols
//! tid  %= threads/G                              // the thread within its column group
//! lane  = tid % (8/cpt); slot = tid / (8/cpt)      // chunks lane·cpt .. +cpt of a unit
//! for u0 in (0..k/32).step_by(units_per_step):
//!     u = u0 + slot  (guarded when the last step is partial)
//!     open unit u of every weight row of the group (scales once per unit and row)
//!     for each of the cpt chunks: load 4 elements of every X row, FMAs into m × rows sums
//! reduce the m × rows sums over the workgroup (subgroup adds or a shared-memory tree)
//! threads 0.. store: bias, epilogue, guarded by m and n
//! ```
//! With a folded RMSNorm each X chunk is also squared into a per-row sum and multiplied by the
//! norm weight as it is loaded; the m sums of squares join the reduction, and each output's sum
//! is scaled by `1 / sqrt(sum / k + eps)` before the bias and epilogue.
//! Rows past `m` and columns past `n` read the last valid row/column (clamped), so every
//! load stays in bounds; their results are never stored.

use crate::dequant::ir::{
    int8_unit_fma, open_unit, open_units, quantize_unit_q8, unit_float_form, Int8Scales, Unit,
    WeightRows,
};
use crate::dequant::words::signed_bytes_to_ivec4;
use crate::dequant::WeightLayout;
use crate::dequant::UNIT;
use crate::ir::{
    Access, Buffer, Builtin, KernelBuilder, Module, Scalar, SharedArray, Type, Unroll, Value, Var,
};
use crate::kv_type::KvType;
use crate::templates::gemm::interface::{
    BINDING_BIAS, BINDING_FREQS, BINDING_K_CACHE, BINDING_NORM_WEIGHT, BINDING_POSITION,
    BINDING_RESIDUAL, BINDING_V_CACHE, BINDING_WEIGHT, BINDING_X, BINDING_Y, POSITION_WORD,
};
use crate::templates::gemm::{ActType, Epilogue, GemmWorkload, Math, RopeKv};
use crate::templates::rope::{quad_angles, rotate, store_kv, RopePairing};

use super::schedule::{GemvSchedule, Reduce};

/// Chunks of 4 elements per 32-element unit.
const CHUNKS: u32 = UNIT / 4;

fn act_scalar(a: ActType) -> Scalar {
    match a {
        ActType::F32 => Scalar::F32,
        ActType::F16 => Scalar::F16,
    }
}

/// Builds the IR of the kernel. The pair must have passed `GemvSchedule::validate`.
pub(crate) fn build(w: &GemmWorkload, s: &GemvSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), s.workgroup_size());
    {
        let b = &b;
        let act = act_scalar(w.act);
        let x = b.buffer(BINDING_X, "x", Type::vec(act, 4), Access::ReadOnly);
        // The aligned layout always, and with `quad_loads` Q4_K/Q5_K's GGUF rows: bound as
        // 16-byte quads, `open_units` reads every header and quant run with 16-byte loads
        // (bound as words, a driver must prove the alignment to merge them).
        let weight_elem = if w.layout == WeightLayout::Aligned || s.quad_loads {
            crate::dequant::words::quad_type()
        } else {
            Type::U32
        };
        let weight = b.model_buffer(BINDING_WEIGHT, "weight", weight_elem);
        let y = b.buffer(BINDING_Y, "y", Type::scalar(act), Access::WriteOnly);
        let bias = w
            .bias
            .then(|| b.model_buffer(BINDING_BIAS, "bias", Type::F32));
        let residual = (w.epilogue == Epilogue::Residual).then(|| {
            b.buffer(
                BINDING_RESIDUAL,
                "residual",
                Type::scalar(act),
                Access::ReadOnly,
            )
        });
        let p_m = b.push_field("m", Type::U32);
        let p_n = b.push_field("n", Type::U32);
        // k is the workload's (the pipeline is built per k): the loop bounds are constants.
        let _p_k = b.push_field("k", Type::U32);
        let p_noff = b.push_field("n_offset", Type::U32);
        let p_ldy = b.push_field("ldy", Type::U32);
        let norm = w.rms_norm_eps().map(|eps| Norm {
            weight: b.model_buffer(
                BINDING_NORM_WEIGHT,
                "norm_weight",
                Type::vec(Scalar::F32, 4),
            ),
            eps,
        });
        let rope = match w.epilogue {
            Epilogue::RopeKv(r) => Some(RopeIo {
                r,
                k_cache: b.buffer(BINDING_K_CACHE, "k_cache", Type::U32, Access::WriteOnly),
                v_cache: b.buffer(BINDING_V_CACHE, "v_cache", Type::U32, Access::WriteOnly),
                freqs: r
                    .freq_factors
                    .then(|| b.model_buffer(BINDING_FREQS, "freqs", Type::F32)),
                position: b.buffer(BINDING_POSITION, "position", Type::U32, Access::ReadOnly),
            }),
            _ => None,
        };
        let io = Io {
            m: b.push(p_m),
            n: b.push(p_n),
            n_offset: b.push(p_noff),
            ldy: b.push(p_ldy),
            y,
            bias,
            residual,
            norm,
            rope,
        };
        let rows = WeightRows {
            buffer: weight,
            format: w.weight,
            layout: w.layout,
        };
        let sums = main_loop(b, w, s, x, rows, &io);
        reduce_and_store(b, w, s, sums, &io);
    }
    b.finish()
}

struct Io {
    m: Value,
    n: Value,
    n_offset: Value,
    ldy: Value,
    y: Buffer,
    bias: Option<Buffer>,
    residual: Option<Buffer>,
    norm: Option<Norm>,
    rope: Option<RopeIo>,
}

/// `Epilogue::RopeKv`'s parameters and bindings.
#[derive(Clone, Copy)]
struct RopeIo {
    r: RopeKv,
    k_cache: Buffer,
    v_cache: Buffer,
    freqs: Option<Buffer>,
    position: Buffer,
}

/// The folded RMSNorm: its weight and eps.
#[derive(Clone, Copy)]
struct Norm {
    weight: Buffer,
    eps: f32,
}

/// A thread's partial sums: `outputs[i][r]` for X row i and weight row r of the group (r <
/// cols: the columns; with SwiGLU r ≥ cols: the up rows of columns r - cols), and with a
/// folded RMSNorm `squares[i]`, X row i's sum of squares over the elements it read.
struct Sums {
    outputs: Vec<Vec<Value>>,
    squares: Vec<Value>,
}

/// The first output column of this thread's column group (grid may be two-dimensional for
/// wide N).
fn first_column(b: &KernelBuilder, s: &GemvSchedule) -> Value {
    let workgroup = b.add(
        b.mul(
            b.builtin(Builtin::WorkgroupId(1)),
            b.builtin(Builtin::NumWorkgroups(0)),
        ),
        b.builtin(Builtin::WorkgroupId(0)),
    );
    if s.column_groups <= 1 {
        return b.muli(workgroup, s.cols);
    }
    let within = b.div(
        b.builtin(Builtin::LocalInvocationIndex),
        b.c_u32(s.group_threads()),
    );
    b.muli(b.add(b.muli(workgroup, s.column_groups), within), s.cols)
}

/// The thread's index within its column group: the lanes that split a row's K reduction.
fn thread_in_group(b: &KernelBuilder, s: &GemvSchedule) -> Value {
    let tid = b.builtin(Builtin::LocalInvocationIndex);
    if s.column_groups <= 1 {
        tid
    } else {
        b.rem(tid, b.c_u32(s.group_threads()))
    }
}

/// Each thread's partial sums.
fn main_loop(
    b: &KernelBuilder,
    w: &GemmWorkload,
    s: &GemvSchedule,
    x: Buffer,
    rows: WeightRows,
    io: &Io,
) -> Sums {
    if s.math == Math::Int8Dot {
        return int8_main_loop(b, w, s, x, rows, io);
    }
    let f16 = s.math == Math::FmaF16Packed;
    let ms = if f16 { Scalar::F16 } else { Scalar::F32 };
    let vw = s.vector_width;
    let mrows = w.m as usize;
    let wrows = (s.cols * w.epilogue.rows_per_column()) as usize;
    // f16 math: each unit's products are summed in f16 (`part`) and folded into f32 sums.
    let acc_ty = if f16 {
        Type::F32
    } else {
        Type::vec(Scalar::F32, vw)
    };
    let part_ty = Type::vec(Scalar::F16, vw);
    let grid = |name: &str, ty: Type| -> Vec<Vec<Var>> {
        (0..mrows)
            .map(|i| {
                (0..wrows)
                    .map(|r| b.var_init(&format!("{name}{i}_{r}"), b.lit(ty, 0.0)))
                    .collect()
            })
            .collect()
    };
    let acc = grid("acc", acc_ty);
    let squares = square_sums(b, io, mrows);
    let part = if f16 {
        grid("part", part_ty)
    } else {
        Vec::new()
    };

    let tid = thread_in_group(b, s);
    let lanes = s.lanes_per_unit();
    let lane = b.rem(tid, b.c_u32(lanes));
    let slot = b.div(tid, b.c_u32(lanes));
    let c0 = b.muli(lane, s.chunks_per_thread);
    let x_bases = x_row_bases(b, w, io);
    let row_offs = weight_row_offsets(b, w, s, io);
    let v4m = Type::vec(ms, 4);
    let pieces = |v: Value| -> Vec<Value> {
        if vw == 4 {
            return vec![v];
        }
        let l: Vec<Value> = (0..4).map(|i| b.extract(v, i)).collect();
        l.chunks(vw as usize).map(|c| b.construct(c)).collect()
    };

    let units = w.k / UNIT;
    // `dot_first` (quantized weights, f32 math; `validate`): each unit's integer quants are
    // dotted with X first and the unit's scales applied once to those sums (`Factored`), as
    // ggml does, instead of dequantizing every weight (a multiply and a subtract per weight
    // fewer).
    let factored = s.dot_first;
    // `units_per_thread` consecutive units per thread and step ("groups"), opened together
    // with wide loads (runs of words) where the format has them and a thread takes whole
    // units; else one unit, opened alone.
    let g = s.units_per_thread;
    let wide = lanes == 1 && w.weight.is_quantized();
    let groups = units / g;
    let step = s.units_per_step();
    let group_body = |gi: Value| {
        let first = if g == 1 { gi } else { b.muli(gi, g) };
        let opened: Vec<Vec<Unit>> = row_offs
            .iter()
            .map(|&off| {
                if wide {
                    open_units(b, rows, off, first, g, f16)
                } else {
                    (0..g)
                        .map(|ul| open_unit(b, rows, off, b.addi(first, ul), f16))
                        .collect()
                }
            })
            .collect();
        for ul in 0..g {
            let u = if ul == 0 { first } else { b.addi(first, ul) };
            let mut factored = factored.then(|| Factored::new(b, w, s, &opened, ul, c0));
            // With one thread per unit the chunk indices are constants.
            let chunk_index = |c: u32| {
                if lanes == 1 {
                    (b.c_u32(c), Some(c))
                } else {
                    (b.addi(c0, c), None)
                }
            };
            // Chunk c's norm-weight chunk (shared by every X row) and X chunks, as loaded.
            let load_x = |cv: Value| {
                let k_at = b.add(b.muli(u, CHUNKS), cv);
                let g = io.norm.map(|n| b.load(n.weight, k_at));
                let raw: Vec<Value> = x_bases
                    .iter()
                    .map(|&base| b.load(x, b.add(base, k_at)))
                    .collect();
                (g, raw)
            };
            // `early_loads`: every chunk's X and every row's quant words, before any product.
            let early = (s.early_loads && factored.is_some()).then(|| {
                let xs: Vec<_> = (0..s.chunks_per_thread)
                    .map(|c| load_x(chunk_index(c).0))
                    .collect();
                let words: Vec<Vec<Value>> = opened
                    .iter()
                    .map(|units| {
                        let unit = &units[ul as usize];
                        (0..s.chunks_per_thread)
                            .map(|c| match chunk_index(c) {
                                (_, Some(cc)) => unit.word_i8_at(b, cc),
                                (cv, None) => unit.word_i8(b, cv),
                            })
                            .collect()
                    })
                    .collect();
                (xs, words)
            });
            for c in 0..s.chunks_per_thread {
                let (cv, cc) = chunk_index(c);
                let (g, raw) = match &early {
                    Some((xs, _)) => xs[c as usize].clone(),
                    None => load_x(cv),
                };
                let xv: Vec<Value> = raw
                    .iter()
                    .enumerate()
                    .map(|(i, &xr)| {
                        let xc = b.convert(xr, v4m);
                        match g {
                            Some(g) => normed_chunk(b, xc, g, squares[i]),
                            None => xc,
                        }
                    })
                    .collect();
                if let Some(f) = factored.as_mut() {
                    let words = early
                        .as_ref()
                        .map(|(_, w)| w.iter().map(|row| row[c as usize]).collect::<Vec<_>>());
                    f.chunk(b, &opened, ul, c, cv, cc, words.as_deref(), &xv, &acc);
                    continue;
                }
                for (r, units_of_row) in opened.iter().enumerate() {
                    let unit = &units_of_row[ul as usize];
                    let wv = match (cc, f16) {
                        (Some(c), true) => unit.chunk_f16_at(b, c),
                        (Some(c), false) => unit.chunk_f32_at(b, c),
                        (None, true) => unit.chunk_f16(b, cv),
                        (None, false) => unit.chunk_f32(b, cv),
                    };
                    let wp = pieces(wv);
                    for i in 0..mrows {
                        let target = if f16 { part[i][r] } else { acc[i][r] };
                        let mut a = b.load_var(target);
                        for (xp, wp) in pieces(xv[i]).iter().zip(&wp) {
                            a = b.fma(*xp, *wp, a);
                        }
                        b.store_var(target, a);
                    }
                }
            }
            if let Some(f) = factored {
                f.finish(b, &acc);
            }
            if f16 {
                for i in 0..mrows {
                    for r in 0..wrows {
                        let p = b.convert(b.load_var(part[i][r]), Type::vec(Scalar::F32, vw));
                        let sum =
                            (0..vw).fold(b.load_var(acc[i][r]), |a, l| b.add(a, b.extract(p, l)));
                        b.store_var(acc[i][r], sum);
                        b.store_var(part[i][r], b.lit(part_ty, 0.0));
                    }
                }
            }
        }
    };
    for_each_group(b, groups, step, slot, group_body);
    let outputs = acc
        .iter()
        .map(|row| {
            row.iter()
                .map(|&a| {
                    let v = b.load_var(a);
                    if f16 || vw == 1 {
                        v
                    } else {
                        lanes_sum(b, v, vw)
                    }
                })
                .collect()
        })
        .collect();
    let squares = summed_squares(b, &squares);
    Sums { outputs, squares }
}

/// One unit's products added to the accumulators the factored way, chunk by chunk: per X row
/// and weight row the integer quants are dotted with X (`q · x`, 4 lanes) while the chunks
/// share a scale, then `acc += scale · (q · x)`; after the last chunk `acc -= min · Σx`
/// (Q6_K: a scale per 16 elements; K-quants and Q4_1/Q5_1 a min per unit). Streamed a chunk at
/// a time so that only one chunk of X and of the quants is live (Mali: keeping a unit's eight
/// chunks live spilled).
struct Factored {
    vw: u32,
    /// Per weight row: the unit's scales.
    scales: Vec<Int8Scales>,
    /// The scale of a thread's chunks where threads share units (all of a thread's chunks
    /// lie in one half: `c0` is a multiple of `chunks_per_thread` ≤ 4).
    shared_scale: Vec<Value>,
    /// Chunks per thread and whether a thread's chunks cross from the low to the high scale.
    chunks: u32,
    /// `dots[i][r]`: X row i · weight row r's quants since the last fold.
    dots: Vec<Vec<Option<Value>>>,
    /// Σx of the thread's chunks per X row (formats with a min).
    xsum: Vec<Option<Value>>,
    has_min: bool,
    /// `bit_floats`: the format's `(bits, offset)` (the quants are dotted as `1 + u·2^-bits`
    /// floats, `Unit::unit_floats`), and Σx per X row since the last fold, which takes the
    /// bias back out: `q·x = 2^bits · (f·x) - (2^bits + offset) · Σx`.
    float_form: Option<(u32, f32)>,
    fold_xsum: Vec<Option<Value>>,
}

impl Factored {
    fn new(
        b: &KernelBuilder,
        w: &GemmWorkload,
        s: &GemvSchedule,
        opened: &[Vec<Unit>],
        ul: u32,
        c0: Value,
    ) -> Factored {
        let scales: Vec<Int8Scales> = opened
            .iter()
            .map(|units| units[ul as usize].int8_scales())
            .collect();
        let shared_scale = scales
            .iter()
            .map(|sc| match sc.hi {
                Some(hi) if s.chunks_per_thread < 8 => b.select(b.ge(c0, b.c_u32(4)), hi, sc.lo),
                _ => sc.lo,
            })
            .collect();
        Factored {
            vw: s.vector_width,
            scales,
            shared_scale,
            chunks: s.chunks_per_thread,
            dots: vec![vec![None; opened.len()]; w.m as usize],
            xsum: vec![None; w.m as usize],
            has_min: w.weight.has_min(),
            float_form: s.bit_floats.then(|| unit_float_form(w.weight)),
            fold_xsum: vec![None; w.m as usize],
        }
    }

    /// Chunk `c` of the thread (index `cv`, constant `cc` where known) with X rows `xv`; the
    /// weight rows' quant words of the chunk where loaded ahead (`words`, per row).
    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &mut self,
        b: &KernelBuilder,
        opened: &[Vec<Unit>],
        ul: u32,
        c: u32,
        cv: Value,
        cc: Option<u32>,
        words: Option<&[Value]>,
        xv: &[Value],
        acc: &[Vec<Var>],
    ) {
        let v4 = Type::vec(Scalar::F32, 4);
        if self.has_min {
            for (sum, &x) in self.xsum.iter_mut().zip(xv) {
                *sum = Some(sum.map_or(x, |t| b.add(t, x)));
            }
        }
        if self.float_form.is_some() {
            for (sum, &x) in self.fold_xsum.iter_mut().zip(xv) {
                *sum = Some(sum.map_or(x, |t| b.add(t, x)));
            }
        }
        for (r, units_of_row) in opened.iter().enumerate() {
            let unit = &units_of_row[ul as usize];
            let word = match (words, cc) {
                (Some(words), _) => words[r],
                (None, Some(c)) => unit.word_i8_at(b, c),
                (None, None) => unit.word_i8(b, cv),
            };
            let q = if self.float_form.is_some() {
                unit.unit_floats(b, word)
            } else {
                b.convert(signed_bytes_to_ivec4(b, word), v4)
            };
            for (i, &x) in xv.iter().enumerate() {
                let d = &mut self.dots[i][r];
                *d = Some(match *d {
                    None => b.mul(x, q),
                    Some(t) => b.fma(x, q, t),
                });
            }
        }
        // The dots are folded where the scale changes (Q6_K's halves, a thread per unit) and
        // after the thread's last chunk.
        let split_halves = self.chunks == 8 && self.scales.iter().any(|s| s.hi.is_some());
        if c + 1 == self.chunks || (split_halves && c == 3) {
            // With bit floats, Σx since the last fold times the bias, per X row.
            let unbias: Vec<Option<(Value, f32)>> = self
                .fold_xsum
                .iter_mut()
                .map(|xs| {
                    let xs = xs.take()?;
                    let (bits, offset) = self.float_form?;
                    let scale = (1u32 << bits) as f32;
                    Some((b.mul(xs, b.splat(b.c_f32(scale + offset), 4)), scale))
                })
                .collect();
            for (r, sc) in self.scales.iter().enumerate() {
                let scale = match (split_halves, sc.hi) {
                    (true, Some(hi)) if c == 7 => hi,
                    (true, _) => sc.lo,
                    (false, _) => self.shared_scale[r],
                };
                for (i, row) in acc.iter().enumerate() {
                    let mut dot = self.dots[i][r].take().expect("a chunk was dotted");
                    if let Some((bias, scale)) = unbias[i] {
                        dot = b.fma(dot, b.splat(b.c_f32(scale), 4), b.neg(bias));
                    }
                    let a = fold_scaled(b, self.vw, b.load_var(row[r]), dot, scale);
                    b.store_var(row[r], a);
                }
            }
        }
    }

    /// The min term, once per unit.
    fn finish(self, b: &KernelBuilder, acc: &[Vec<Var>]) {
        for (r, sc) in self.scales.iter().enumerate() {
            let Some(min) = sc.min else { continue };
            for (i, row) in acc.iter().enumerate() {
                let xsum = self.xsum[i].expect("formats with a min sum X");
                let a = fold_scaled(b, self.vw, b.load_var(row[r]), xsum, b.neg(min));
                b.store_var(row[r], a);
            }
        }
    }
}

/// The folded RMSNorm's sums of squares, one 4-wide per X row (none without a norm).
fn square_sums(b: &KernelBuilder, io: &Io, mrows: usize) -> Vec<Var> {
    match io.norm {
        Some(_) => (0..mrows)
            .map(|i| {
                b.var_init(
                    &format!("squares{i}"),
                    b.lit(Type::vec(Scalar::F32, 4), 0.0),
                )
            })
            .collect(),
        None => Vec::new(),
    }
}

/// Each X row's sum of squares, its four lanes added.
fn summed_squares(b: &KernelBuilder, squares: &[Var]) -> Vec<Value> {
    squares
        .iter()
        .map(|&sq| lanes_sum(b, b.load_var(sq), 4))
        .collect()
}

/// A chunk `xc` of X under a folded RMSNorm: squared into the row's sum `sq` (raw: the norm's
/// factor scales the sums at the end), returned times the norm weight's chunk `g`.
fn normed_chunk(b: &KernelBuilder, xc: Value, g: Value, sq: Var) -> Value {
    b.store_var(sq, b.fma(xc, xc, b.load_var(sq)));
    b.mul(xc, g)
}

/// The sum of the first `n` lanes of `v`.
fn lanes_sum(b: &KernelBuilder, v: Value, n: u32) -> Value {
    (1..n).fold(b.extract(v, 0), |t, l| b.add(t, b.extract(v, l)))
}

/// `acc + scale · v` for a 4-lane `v` into an accumulator of `vw` lanes.
fn fold_scaled(b: &KernelBuilder, vw: u32, acc: Value, v: Value, scale: Value) -> Value {
    let narrow = match vw {
        4 => v,
        2 => b.add(
            b.construct(&[b.extract(v, 0), b.extract(v, 1)]),
            b.construct(&[b.extract(v, 2), b.extract(v, 3)]),
        ),
        _ => lanes_sum(b, v, 4),
    };
    b.fma(b.splat(scale, vw), narrow, acc)
}

/// `body(g)` for the unit groups g = slot, slot + step, ... below `groups`: whole steps in a
/// loop, then a guarded last one.
fn for_each_group(b: &KernelBuilder, groups: u32, step: u32, slot: Value, body: impl Fn(Value)) {
    let full = groups / step * step;
    if full > 0 {
        b.for_range(b.c_u32(0), b.c_u32(full), step, Unroll::Auto, |g0| {
            body(b.add(g0, slot))
        });
    }
    if full < groups {
        let gi = b.addi(slot, full);
        b.if_(b.lt(gi, b.c_u32(groups)), || body(gi));
    }
}

/// The first vec4 of each X row (rows past `m` clamped to the last).
fn x_row_bases(b: &KernelBuilder, w: &GemmWorkload, io: &Io) -> Vec<Value> {
    let m_last = b.sub(io.m, b.c_u32(1));
    (0..w.m)
        .map(|i| b.muli(b.min(b.c_u32(i), m_last), w.k / 4))
        .collect()
}

/// `row_off` of the dequant fragments for the group's weight rows: byte (GGUF) or 16-byte
/// (aligned) offsets of the group's `cols` columns (and with SwiGLU their up rows), clamped to
/// the last column.
fn weight_row_offsets(
    b: &KernelBuilder,
    w: &GemmWorkload,
    s: &GemvSchedule,
    io: &Io,
) -> Vec<Value> {
    let wrows = s.cols * w.epilogue.rows_per_column();
    let n_last = b.sub(io.n, b.c_u32(1));
    let row_unit = match w.layout {
        WeightLayout::Aligned => 16,
        WeightLayout::Gguf => 1,
    };
    let row_off_step = (w.weight_row_bytes() / row_unit) as u32;
    let col0 = first_column(b, s);
    (0..wrows)
        .map(|r| {
            let (j, which) = (r % s.cols, r / s.cols);
            let col = b.min(b.addi(col0, j), n_last);
            let row = match w.epilogue {
                Epilogue::RopeKv(rk) => {
                    let (head, offsets) = quad_offsets(b, &rk, col);
                    b.add(b.muli(head, rk.head_dim), offsets[which as usize])
                }
                _ if which > 0 => b.add(col, io.n),
                _ => col,
            };
            b.muli(row, row_off_step)
        })
        .collect()
}

/// The head of quad column `col` and its four rows' offsets within the head, in
/// [`RopeKv::quad_rows`]'s order (pair 2u's lo and hi, then pair 2u+1's).
fn quad_offsets(b: &KernelBuilder, r: &RopeKv, col: Value) -> (Value, [Value; 4]) {
    let quads = b.c_u32(r.head_dim / 4);
    let (head, u) = (b.div(col, quads), b.rem(col, quads));
    let offsets = match r.pairing {
        RopePairing::Neox => {
            let p0 = b.shli(u, 1);
            let h = r.head_dim / 2;
            [p0, b.addi(p0, h), b.addi(p0, 1), b.addi(p0, 1 + h)]
        }
        RopePairing::Normal => {
            let e = b.shli(u, 2);
            [e, b.addi(e, 1), b.addi(e, 2), b.addi(e, 3)]
        }
    };
    (head, offsets)
}

/// The int8 main loop (`validate` made it a thread per unit, scalar sums): per group of
/// `units_per_thread` units, each X row's units are quantized once (`quantize_unit_q8`) and
/// dotted with every weight row's packed quants (`int8_unit_fma`).
///
/// With a folded RMSNorm each unit of X is multiplied by the norm weight and quantized before
/// it is normalized: a unit's quants do not change when all its values are scaled by the same
/// positive factor (only its scale does, up to a rounding flip the comparison allows), so the
/// sums are scaled by `1 / sqrt(mean(x²) + eps)` at the end, as the f32 path does, and each
/// raw chunk is squared into the row's sum of squares as it is loaded.
fn int8_main_loop(
    b: &KernelBuilder,
    w: &GemmWorkload,
    s: &GemvSchedule,
    x: Buffer,
    rows: WeightRows,
    io: &Io,
) -> Sums {
    let mrows = w.m as usize;
    let row_offs = weight_row_offsets(b, w, s, io);
    let acc: Vec<Vec<Var>> = (0..mrows)
        .map(|i| {
            (0..row_offs.len())
                .map(|r| b.var_init(&format!("acc{i}_{r}"), b.c_f32(0.0)))
                .collect()
        })
        .collect();
    let squares = square_sums(b, io, mrows);
    let slot = thread_in_group(b, s);
    let x_bases = x_row_bases(b, w, io);
    let has_min = w.weight.has_min();
    let g = s.units_per_thread;
    let groups = w.k / UNIT / g;
    let step = s.units_per_step();
    let group_body = |gi: Value| {
        let first = if g == 1 { gi } else { b.muli(gi, g) };
        let opened: Vec<Vec<Unit>> = row_offs
            .iter()
            .map(|&off| open_units(b, rows, off, first, g, false))
            .collect();
        for ul in 0..g {
            let u = if ul == 0 { first } else { b.addi(first, ul) };
            let unit_at = b.muli(u, CHUNKS);
            // The norm weight's chunks of this unit, shared by every X row.
            let g: Option<Vec<Value>> = io.norm.map(|n| {
                (0..CHUNKS)
                    .map(|c| b.load(n.weight, b.addi(unit_at, c)))
                    .collect()
            });
            let xs: Vec<(Vec<Value>, Value, Value)> = x_bases
                .iter()
                .enumerate()
                .map(|(i, &base)| {
                    let at = b.add(base, unit_at);
                    let chunks: Vec<Value> = (0..CHUNKS)
                        .map(|c| {
                            let xc = b.convert(b.load(x, b.addi(at, c)), Type::vec(Scalar::F32, 4));
                            match &g {
                                Some(g) => normed_chunk(b, xc, g[c as usize], squares[i]),
                                None => xc,
                            }
                        })
                        .collect();
                    quantize_unit_q8(b, &chunks, has_min)
                })
                .collect();
            for (r, units_of_row) in opened.iter().enumerate() {
                let unit = &units_of_row[ul as usize];
                let ww: Vec<Value> = (0..CHUNKS).map(|c| unit.word_i8_at(b, c)).collect();
                let scales = unit.int8_scales();
                for (i, (xw, dx, sx)) in xs.iter().enumerate() {
                    let a = int8_unit_fma(b, b.load_var(acc[i][r]), xw, *dx, *sx, &ww, scales);
                    b.store_var(acc[i][r], a);
                }
            }
        }
    };
    for_each_group(b, groups, step, slot, group_body);
    Sums {
        outputs: acc
            .iter()
            .map(|row| row.iter().map(|&a| b.load_var(a)).collect())
            .collect(),
        squares: summed_squares(b, &squares),
    }
}

/// Adds the threads' sums over the workgroup and stores the outputs.
fn reduce_and_store(b: &KernelBuilder, w: &GemmWorkload, s: &GemvSchedule, sums: Sums, io: &Io) {
    let t = s.threads;
    // The outputs' sums, then the sums of squares (index `squares_at + i` for X row i).
    let squares_at = w.m * wrows_of(w, s);
    let flat: Vec<Value> = sums
        .outputs
        .iter()
        .flatten()
        .chain(&sums.squares)
        .copied()
        .collect();
    let outputs = flat.len() as u32;
    let tid = b.builtin(Builtin::LocalInvocationIndex);
    // One subgroup holding the totals in every lane: the first lane stores them.
    let leader_stores = |reduced: &[Value]| {
        let leader = b.eq(b.builtin(Builtin::SubgroupInvocationId), b.c_u32(0));
        b.if_(leader, || {
            for i in 0..w.m {
                let scale = io
                    .norm
                    .map(|n| norm_scale(b, w, n, reduced[(squares_at + i) as usize]));
                for j in 0..s.cols {
                    let o = (i * wrows_of(w, s) + j) as usize;
                    let column: Vec<Value> = (0..w.epilogue.rows_per_column())
                        .map(|r| reduced[o + (r * s.cols) as usize])
                        .collect();
                    store(
                        b,
                        w,
                        io,
                        b.c_u32(i),
                        b.add(first_column(b, s), b.c_u32(j)),
                        &column,
                        scale,
                    );
                }
            }
        });
    };
    if s.reduce == Reduce::OneSubgroup {
        // `validate` made each column group (the workgroup, or one of its `column_groups`)
        // one subgroup: no workgroup memory, no barrier.
        let reduced: Vec<Value> = flat.iter().map(|&v| b.subgroup_add(v)).collect();
        leader_stores(&reduced);
        return;
    }
    let red: SharedArray = b.shared_array("partials", Type::F32, outputs * t);
    // After the reduction, `total(o)` reads output o's sum.
    let total: Box<dyn Fn(Value) -> Value> = match s.reduce {
        Reduce::Subgroup => {
            // Subgroup sums; the first lane of each subgroup publishes them. Any subgroup
            // size works: there are at most `threads` subgroups, each with its own slot.
            let sg = b.builtin(Builtin::SubgroupId);
            let n_sg = b.builtin(Builtin::NumSubgroups);
            let reduced: Vec<Value> = flat.iter().map(|&v| b.subgroup_add(v)).collect();
            let leader = b.eq(b.builtin(Builtin::SubgroupInvocationId), b.c_u32(0));
            let single = b.eq(n_sg, b.c_u32(1));
            // NumSubgroups is the same in the whole workgroup: the barrier below is reached
            // by all of it or by none.
            b.if_else(
                single,
                || leader_stores(&reduced),
                || {
                    b.if_(leader, || {
                        for (o, &v) in reduced.iter().enumerate() {
                            b.store_shared(red, b.add(b.c_u32(o as u32 * t), sg), v);
                        }
                    });
                    b.barrier();
                    let total = |o: Value| {
                        let base = b.muli(o, t);
                        let sum = b.var_init("sum", b.c_f32(0.0));
                        b.for_range(b.c_u32(0), n_sg, 1, Unroll::Auto, |g| {
                            let v = b.load_shared(red, b.add(base, g));
                            b.store_var(sum, b.add(b.load_var(sum), v));
                        });
                        b.load_var(sum)
                    };
                    store_all(b, w, s, io, tid, squares_at, &total);
                },
            );
            return;
        }
        Reduce::OneSubgroup => unreachable!("returned above"),
        Reduce::Shared => {
            for (o, &v) in flat.iter().enumerate() {
                b.store_shared(red, b.add(b.c_u32(o as u32 * t), tid), v);
            }
            b.barrier();
            // Halve the live slots per output each step; the pair-adds are spread over
            // all threads.
            let mut stride = t / 2;
            while stride >= 1 {
                let pairs = stride * outputs;
                cooperative(b, t, pairs, tid, |idx| {
                    let o = b.div(idx, b.c_u32(stride));
                    let at = b.add(b.muli(o, t), b.rem(idx, b.c_u32(stride)));
                    let v = b.add(
                        b.load_shared(red, at),
                        b.load_shared(red, b.addi(at, stride)),
                    );
                    b.store_shared(red, at, v);
                });
                b.barrier();
                stride /= 2;
            }
            Box::new(move |o: Value| b.load_shared(red, b.muli(o, t)))
        }
    };
    store_all(b, w, s, io, tid, squares_at, &*total);
}

/// `1 / sqrt(sum_of_squares / k + eps)`: the folded RMSNorm's factor for one X row.
fn norm_scale(b: &KernelBuilder, w: &GemmWorkload, n: Norm, sum_of_squares: Value) -> Value {
    let mean = b.mul(sum_of_squares, b.c_f32(1.0 / w.k as f32));
    b.inverse_sqrt(b.add(mean, b.c_f32(n.eps)))
}

/// Weight rows per workgroup: `cols`, or 2·`cols` with SwiGLU.
fn wrows_of(w: &GemmWorkload, s: &GemvSchedule) -> u32 {
    s.cols * w.epilogue.rows_per_column()
}

/// Stores every output of the group, spread over the threads: output (i, j) is sum index
/// i·wrows + j (and its up sum at + cols; X row i's sum of squares at `squares_at + i`), read
/// through `total`.
fn store_all(
    b: &KernelBuilder,
    w: &GemmWorkload,
    s: &GemvSchedule,
    io: &Io,
    tid: Value,
    squares_at: u32,
    total: &dyn Fn(Value) -> Value,
) {
    let wrows = wrows_of(w, s);
    let col0 = first_column(b, s);
    cooperative(b, s.threads, w.m * s.cols, tid, |idx| {
        let i = b.div(idx, b.c_u32(s.cols));
        let j = b.rem(idx, b.c_u32(s.cols));
        let o = b.add(b.muli(i, wrows), j);
        // The up sum is read only where the output is stored (inside `store`'s guard).
        let inside = b.logical_and(b.lt(i, io.m), b.lt(b.add(col0, j), io.n));
        b.if_(inside, || {
            // The other rows' sums (SwiGLU's up, a quad's three) are read only here, inside
            // the guard.
            let column: Vec<Value> = (0..w.epilogue.rows_per_column())
                .map(|r| total(if r == 0 { o } else { b.addi(o, r * s.cols) }))
                .collect();
            let scale = io
                .norm
                .map(|n| norm_scale(b, w, n, total(b.addi(i, squares_at))));
            store(b, w, io, i, b.add(col0, j), &column, scale);
        });
    });
}

/// Stores output (row, col) from its column's sums (`column[0]`, and SwiGLU's up sum or a
/// quad's other three): the folded RMSNorm's `scale`, bias, epilogue, conversion, guarded by
/// m and n.
fn store(
    b: &KernelBuilder,
    w: &GemmWorkload,
    io: &Io,
    row: Value,
    col: Value,
    column: &[Value],
    scale: Option<Value>,
) {
    let inside = b.logical_and(b.lt(row, io.m), b.lt(col, io.n));
    b.if_(inside, || {
        if let Some(rope) = io.rope {
            return store_rope_kv(b, io, &rope, row, col, column, scale);
        }
        let (mut v, mut up) = (column[0], column.get(1).copied());
        if let Some(scale) = scale {
            v = b.mul(v, scale);
            up = up.map(|u| b.mul(u, scale));
        }
        let ycol = b.add(io.n_offset, col);
        if let Some(bias) = io.bias {
            v = b.add(v, b.load(bias, ycol));
        }
        if let Some(up) = up {
            v = crate::templates::eltwise::swiglu(b, v, up);
        }
        let at = b.add(b.mul(row, io.ldy), ycol);
        if let Some(r) = io.residual {
            v = b.add(v, b.convert(b.load(r, at), Type::F32));
        }
        b.store(io.y, at, b.convert(v, Type::scalar(act_scalar(w.act))));
    });
}

/// Stores quad column `col` of X row `row` (`Epilogue::RopeKv`): the four sums scaled by the
/// folded norm, each row's bias added, then by the part its head is in: the query's two
/// pairs rotated into Y, the key's rotated into the K cache, the value's copied into the V
/// cache, both caches at row `pos0 + row`. The angles, rotation and cache stores are the
/// RoPE-and-KV-write kernel's own fragments (`rope::kv_kernel_ir`), so the results are that
/// kernel's bit for bit given the same sums.
fn store_rope_kv(
    b: &KernelBuilder,
    io: &Io,
    rope: &RopeIo,
    row: Value,
    col: Value,
    column: &[Value],
    scale: Option<Value>,
) {
    let r = &rope.r;
    let (head, offsets) = quad_offsets(b, r, col);
    let head_row = b.muli(head, r.head_dim);
    let values: Vec<Value> = column
        .iter()
        .zip(offsets)
        .map(|(&sum, offset)| {
            let v = match scale {
                Some(s) => b.mul(sum, s),
                None => sum,
            };
            match io.bias {
                Some(bias) => b.add(v, b.load(bias, b.add(head_row, offset))),
                None => v,
            }
        })
        .collect();
    let pos = b.add(b.load(rope.position, b.c_u32(POSITION_WORD)), row);
    let u = b.rem(col, b.c_u32(r.head_dim / 4));
    let rotated = || -> [Value; 4] {
        // (sin, cos) of pairs 2u and 2u+1: ggml's angles, as the fused kernel builds them.
        let sc = quad_angles(b, pos, u, r.theta_scale(), rope.freqs);
        let (a0, a1) = rotate(b, values[0], values[1], sc[0]);
        let (c0, c1) = rotate(b, values[2], values[3], sc[1]);
        [a0, a1, c0, c1]
    };
    // Two whole words of a cache row from the quad's values at their offsets in the row:
    // NeoX (2u, 2u+1) and (2u+h, 2u+1+h), normal (4u, 4u+1) and (4u+2, 4u+3).
    let to_cache = |cache: Buffer, ty: KvType, head_at: Value, v: [Value; 4]| {
        let e: Vec<Value> = offsets.iter().map(|&o| b.add(head_at, o)).collect();
        let out: Vec<(Value, Value)> = e.into_iter().zip(v).collect();
        let words = match r.pairing {
            RopePairing::Neox => [(out[0], out[2]), (out[1], out[3])],
            RopePairing::Normal => [(out[0], out[1]), (out[2], out[3])],
        };
        store_kv(b, ty, cache, r.kv_width(), pos, words);
    };
    let query = || {
        let v = rotated();
        let at = b.add(b.add(b.mul(row, io.ldy), io.n_offset), head_row);
        for (t, &offset) in offsets.iter().enumerate() {
            b.store(io.y, b.add(at, offset), v[t]);
        }
    };
    let key = || {
        let head_at = b.muli(b.sub(head, b.c_u32(r.q_heads)), r.head_dim);
        to_cache(rope.k_cache, r.kv.k, head_at, rotated());
    };
    let value = || {
        let first_v = r.q_heads + r.k_heads;
        let head_at = b.muli(b.sub(head, b.c_u32(first_v)), r.head_dim);
        let v = [values[0], values[1], values[2], values[3]];
        to_cache(rope.v_cache, r.kv.v, head_at, v);
    };
    // Only the parts the projection has, each up to its last head: a value projection of its
    // own compiles no rotation at all (on Mali's Valhall compiler the unused branches cost
    // registers: the 3B's Q6_K value GEMV spilled with them).
    let mut parts: Vec<(u32, &dyn Fn())> = Vec::new();
    let mut end = 0;
    for (heads, part) in [
        (r.q_heads, &query as &dyn Fn()),
        (r.k_heads, &key),
        (r.v_heads, &value),
    ] {
        end += heads;
        if heads > 0 {
            parts.push((end, part));
        }
    }
    by_head(b, head, &parts);
}

/// Runs the first of `parts` whose end head lies above `head` (the last one unconditionally).
fn by_head(b: &KernelBuilder, head: Value, parts: &[(u32, &dyn Fn())]) {
    match parts {
        [] => {}
        [(_, only)] => only(),
        [(end, first), rest @ ..] => {
            b.if_else(b.lt(head, b.c_u32(*end)), first, || by_head(b, head, rest))
        }
    }
}

/// `body(idx)` for idx in tid, tid + threads, ... below `total`.
fn cooperative(b: &KernelBuilder, threads: u32, total: u32, tid: Value, body: impl Fn(Value)) {
    let iters = total.div_ceil(threads);
    for it in 0..iters {
        let idx = b.addi(tid, it * threads);
        if (it + 1) * threads <= total {
            body(idx);
        } else {
            b.if_(b.lt(idx, b.c_u32(total)), || body(idx));
        }
    }
}
