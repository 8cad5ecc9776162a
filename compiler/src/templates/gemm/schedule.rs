//! How a GEMM is computed: the tunable parameters, their validity and resource estimates.
//!
//! Thread layout: a workgroup is `[split_k, bn/tn, bm/tm]` threads. Thread (kz, tx, ty)
//! computes the `tm × tn` outputs at rows `ty + i·(bm/tm)` and columns `tx + j·(bn/tn)` of the
//! workgroup's `bm × bn` block tile (strided, so neighbouring threads touch neighbouring
//! rows/columns), over the 32-element K units `kz, kz+split_k, …` of each `bk` slab; the
//! `split_k` partial sums are reduced through workgroup memory at the end (split-K is
//! *within* the workgroup, so a kernel stays a single dispatch).

use serde::{Deserialize, Serialize};

use super::workload::{ActType, Epilogue, GemmWorkload};
use crate::caps::DeviceCaps;
use crate::dequant::{WeightFormat, UNIT};
use crate::refusal::Refusal;

/// Version of the GEMM schedule/kernel semantics. Bump it when a change makes stored tuning
/// results for the same (workload, schedule) key meaningless; field names never change.
pub const GEMM_SCHEDULE_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Precision {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "f16")]
    F16,
}

/// The arithmetic of the inner loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Math {
    /// f32 FMAs on dequantized weights.
    #[serde(rename = "fma_f32")]
    FmaF32,
    /// f16 FMAs on f16vec2/f16vec4 (packed on GPUs that have it). With f32 accumulation the
    /// f16 partial sum of each 32-element unit is added to an f32 accumulator.
    #[serde(rename = "fma_f16_packed")]
    FmaF16Packed,
    /// Packed int8 dot products (`OpSDot`, 4×8 bit). Activations are quantized on the fly, per
    /// row and 32-element unit, like ggml's Q8_0 (`d = amax/127`, `q = roundEven(x/d)`), by the
    /// thread that needs them or, with `stage_a`, once per workgroup into shared memory.
    /// Weights are unpacked to signed bytes (Q5_0/Q6_K re-centred, Q4_K nibbles with its
    /// min term applied through the activation sums).
    #[serde(rename = "int8_dot")]
    Int8Dot,
}

/// A GEMM schedule. Serialized field names are stable (tuning-database keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmSchedule {
    /// Block tile: rows of X/Y per workgroup.
    pub bm: u32,
    /// Block tile: columns of Y (rows of W) per workgroup.
    pub bn: u32,
    /// K slab per main-loop iteration (multiple of 32; the depth of shared staging).
    pub bk: u32,
    /// Per-thread micro-tile rows.
    pub tm: u32,
    /// Per-thread micro-tile columns.
    pub tn: u32,
    /// Threads sharing one micro-tile along K (reduced through shared memory).
    pub split_k: u32,
    /// Width of the FMA accumulators (1, 2 or 4 lanes); loads are always 4 elements wide.
    /// Int8Dot uses 4 (one packed word).
    pub vector_width: u32,
    /// Stage the X slab in shared memory (cooperative load; int8: cooperative quantization).
    pub stage_a: bool,
    /// Stage the dequantized W slab in shared memory (cooperative dequantization).
    pub stage_b: bool,
    /// Share the X loads of a row group through subgroup shuffles instead of shared memory:
    /// the `bn/tn` threads of a row group (one whole subgroup: `bn/tn` = subgroup size) each load one
    /// vec4 of every X row of the slab (`bk = 4·bn/tn`), and each chunk is then read from the
    /// lane holding it. Cuts X loads `bn/tn`-fold where shared memory is not on-chip (Mali).
    /// FMA math only, no split-K, no `stage_a`. Omitted from the serialization when false, so
    /// schedules without it keep their keys.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shuffle_a: bool,
    /// Workgroups sharing one output tile along K (split-K across the grid): workgroup z of
    /// `k_groups` takes its share of the K slabs and writes f32 partial sums into a scratch
    /// buffer of `k_groups × m × ldy`, and a second, small kernel
    /// ([`super::split_k::instantiate_reduce`]) adds them up with the bias into Y. It fills
    /// the GPU where the tile grid alone has too few workgroups (few rows, few columns, long
    /// K: the ubatch-64 and k/v projections). Omitted from the serialization when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub k_groups: u32,
    /// Read each slab's weight bytes as runs of consecutive 32-bit words, every run once per
    /// slab and column, shared by the units that use it (`dequant::ir::open_units`): a Q4_K
    /// super-block's header and sub-block pair, a Q6_K half's qh bytes. Drivers merge runs
    /// they can prove 16-byte aligned into 16-byte loads (Q4_K); the 2-byte-aligned blocks
    /// (Q8_0, Q5_0, Q6_K) read each 4-byte field as one word of the run and a shift-or
    /// instead of two loads. Quantized weights, no split-K, a power-of-two number of units
    /// per slab. Omitted from the serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub wide_loads: bool,
    /// Slabs per iteration of the K loop (1, 2 or 4), unrolled in the kernel: fewer loop
    /// branches and counter updates, and a compiler scheduling two slabs' loads and math
    /// together; k must be a multiple of `bk · k_unroll`. Omitted from the serialization when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub k_unroll: u32,
    /// With `wide_loads` and several slabs per K-loop iteration, in the aligned layout of
    /// Q8_0: the iteration loads each group header it reads (the 8 f16 `d`s of 8 blocks, one
    /// 16-byte quad) once and shares it across its slabs (`dequant::ir::SharedHeaders`),
    /// instead of one header load per slab: 3 fewer loads per 4 slabs of 2 units, for the
    /// quad's registers live across the iteration. Needs `bk·k_unroll/32` units per
    /// iteration to be a multiple or an even divisor of 8. Omitted from the serialization
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub share_headers: bool,
    /// With `k_groups > 1`: no reduce kernel. Each workgroup writes its partial sums, then
    /// counts itself in at its tile's counter (an atomic); the last of the tile's `k_groups`
    /// to arrive adds up all their partials (in group order, as the reduce kernel does),
    /// applies bias and epilogue and writes Y, and resets the counter. One dispatch and one
    /// barrier level fewer per split GEMM (at ubatch 64 the reduces were 9 % of a
    /// Qwen2.5-3B prefill on the H200), but as the default it made that prefill 6 % (ubatch
    /// 512) to 11 % (ubatch 64) slower there: a search dimension, not a default. Omitted
    /// from the serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_group_reduces: bool,
    /// Mixed precision (packed f16 math, f32 accumulation): add the f16 partial sums into the
    /// f32 accumulators once per `bk` slab instead of once per 32-element unit. The fold
    /// (convert, add, reset per output) is about a quarter of the inner loop's instructions
    /// at one unit; a slab of 64 (128) halves (quarters) it, and an f16 sum of 64-128
    /// products stays well inside the mixed tolerance. Omitted from the serialization when
    /// false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fold_per_slab: bool,
    /// With `shuffle_a` and f32 math on f32 activations: each lane packs the X values it holds
    /// into f16 pairs before the broadcasts (GLSL PackHalf2x16, no Float16 feature needed) and
    /// unpacks what it receives, so one 32-bit cross-lane read carries two X values instead of
    /// one. On Valhall a broadcast is an SFU op at about four times an FMA's cost, one per FMA
    /// in the 4×1 tile, so it bounds that tile; packed, the conversions go to the CVT unit,
    /// which has room. X is rounded to f16 (as llama.cpp's Vulkan matmuls round activations),
    /// clamped to ±65504 first; products and sums stay f32. Omitted from the serialization
    /// when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pack_a_f16: bool,
    /// Int8-dot math with both operands staged (`stage_a`, `stage_b`): each 32-element unit
    /// is taken in two halves of 16 values, each thread reading one 4-word fragment of its
    /// `tm` rows and one of each of its `tn` columns at a time from workgroup memory and
    /// adding each half's scaled dot product into its f32 accumulator. Only a half unit's
    /// fragments are live at once (instead of every row's whole unit); each X unit is
    /// quantized by two threads (16 values each), the tiles are double-buffered by slab
    /// parity and output indices are recomputed after the K loop. The Q4_K/Q5_K min term
    /// runs first, in a block of its own (only each row's d and each column's scale leave
    /// it), each column's dot products of a half complete in a block of their own, and the
    /// kernel's geometry (push constants, ids) is re-read inside the K loop instead of held
    /// in registers across it. On Mesa 26.1.6 2×4 and 4×4 tiles compile without spills
    /// (4×4 spilled 28-49 before the blocks). Per unit a thread reads `2·(tm + tn)` shared
    /// quads and `tm + tn` scale loads for `32·tm·tn` products, and the bitwise
    /// dequantization and the activation quantization are done once per workgroup tile
    /// instead of per lane. Omitted from the serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub half_units: bool,
    /// Half units (`half_units`, split W staging, thread-major scales, an even `tn`) of
    /// formats whose int8 quants are unsigned nibbles (Q4_K, Q4_1): the first `2·packed_w`
    /// of each thread's `tn` columns are staged in workgroup memory as packed 4-bit quants,
    /// 8 per word, instead of one per byte, a pair of columns side by side, so one 16-byte
    /// load from workgroup memory gives a half unit of two columns instead of one; the loop
    /// unpacks each word with a mask and a shift and a mask (on Valhall SFU work, traded for
    /// load/store). 0 (none) to `tn/2` (all). Same products, same order of additions.
    /// Omitted from the serialization when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub packed_w: u32,
    pub accumulate: Precision,
    pub math: Math,
}

impl GemmSchedule {
    /// `LocalSize` of the kernel: `[split_k, bn/tn, bm/tm]` (`[bn/tn, 1, bm/tm]` with
    /// `shuffle_a`).
    pub fn workgroup_size(&self) -> [u32; 3] {
        if self.shuffle_a {
            // The row group along x, where implementations form subgroups (llvmpipe
            // vectorizes x only: with x = 1 its subgroups hold one invocation).
            return [
                self.bn / self.tn.max(1),
                self.split_k,
                self.bm / self.tm.max(1),
            ];
        }
        [
            self.split_k,
            self.bn / self.tn.max(1),
            self.bm / self.tm.max(1),
        ]
    }

    pub fn threads(&self) -> u32 {
        self.workgroup_size().iter().product()
    }

    /// Half units of several rows per thread (`tm` ≥ 2) take thread-major scale tiles and no
    /// closing barrier per slab (Mesa 26.1.6, M = 512, load/store per K-loop iteration: see
    /// docs/measurements/2026-12-06f-mali-gemm.md). Each thread's rows (columns) of a unit have
    /// their scales side by side in workgroup memory, so the driver merges a unit's scale reads
    /// into one or two wide loads instead of one load per row and per column. The closing
    /// barrier is redundant in half units: the staging's first barrier (between the X halves'
    /// maxima and the quantization) comes before any tile write of the next slab, and every
    /// thread reaches it only after its reads of this slab. With a min term (Q4_K, Q5_K) each
    /// half takes its min term after its dot products, the rows' sums of quants from the
    /// fragments the thread holds and the columns' mins from a plane of their own, instead
    /// of a first block reading staged sums: 2 fewer loads per slab and no sums staged, and
    /// the mins are live only after the dot products (Q4_K 4×4: load/store 89 -> 87 cycles,
    /// 63 registers; Q5_K stops spilling; docs/measurements/2026-12-06g-mali-gemm.md).
    /// One-row tiles (the desktop search spaces sample them) keep their kernel unchanged.
    pub fn thread_scales(&self) -> bool {
        let (wg_n, wg_m) = (self.bn / self.tn.max(1), self.bm / self.tm.max(1));
        self.half_units && self.tm >= 2 && wg_n.is_power_of_two() && wg_m.is_power_of_two()
    }

    /// Half units stage W two threads per unit, one half (4 words) each, where a unit per
    /// thread would leave threads idle (`bn` · units per slab · 2 ≤ threads: the 64×64 4×4
    /// tile's 128 units on 256 threads). A thread then loads and stores a half's words once
    /// each (one 16-byte access) instead of a unit's twice, and stores one scale; every
    /// thread takes one step. Mesa 26.1.6, M = 64, Q4_K (11008 × 2048): load/store per K-loop
    /// iteration 55 -> 52 (docs/measurements/2026-12-07c-mali-prefill.md).
    pub fn split_w_staging(&self) -> bool {
        self.half_units
            && self.stage_b
            && !self.wide_loads
            && 2 * self.bn * self.units_per_slab() <= self.threads()
    }

    /// Whether `packed_w` may be set for `w`: half units with split W staging and
    /// thread-major scales, an even `tn`, and int8 quants that are unsigned nibbles.
    pub fn packs_w(&self, w: &GemmWorkload) -> bool {
        self.split_w_staging()
            && self.thread_scales()
            && self.tn % 2 == 0
            && matches!(w.weight, WeightFormat::Q4K | WeightFormat::Q4_1)
    }

    /// 32-element units per `bk` slab.
    pub fn units_per_slab(&self) -> u32 {
        self.bk / UNIT
    }

    /// Bytes of workgroup memory the kernel declares.
    pub fn shared_bytes(&self, w: &GemmWorkload) -> u32 {
        let upb = self.units_per_slab();
        let mut bytes = 0;
        match self.math {
            Math::Int8Dot => {
                // half_units double-buffers its tiles.
                let bufs = if self.half_units { 2 } else { 1 };
                if self.stage_a {
                    // half_units: two partial maxima and (d, two sums, a spare) per unit.
                    let scales = if self.half_units { 2 * 4 + 4 * 4 } else { 8 };
                    bytes += bufs * self.bm * upb * (8 * 4 + scales);
                }
                if self.stage_b {
                    // packed_w: 4 words of nibbles per unit instead of 8 of bytes.
                    let packed = 2 * self.packed_w * (self.bn / self.tn.max(1));
                    bytes += bufs * upb * (packed * 16 + (self.bn - packed.min(self.bn)) * 32);
                    bytes += bufs * self.bn * upb * 4 * int8_scale_lanes(w.weight);
                }
            }
            Math::FmaF32 | Math::FmaF16Packed => {
                let vec4 = if self.math == Math::FmaF32 { 16 } else { 8 };
                let row = (self.bk / 4 + 1) * vec4;
                if self.stage_a {
                    bytes += self.bm * row;
                }
                if self.stage_b {
                    bytes += self.bn * row;
                }
            }
        }
        if self.split_k > 1 {
            bytes += self.split_k * self.bm * self.bn * 4;
        }
        if self.last_group_reduces {
            // The workgroup's "arrived last" flag.
            bytes += 4;
        }
        bytes
    }

    /// Rough count of 32-bit registers per thread: accumulators, one chunk of operands,
    /// per-unit scales and a fixed overhead for indices.
    pub fn register_estimate(&self) -> u32 {
        let (tm, tn, v) = (self.tm, self.tn, self.vector_width);
        let overhead = 12;
        // shuffle_a holds one vec4 of each X row for the whole slab (two words packed).
        let held = |lane_regs: u32| match (self.shuffle_a, self.pack_a_f16) {
            (true, true) => 2 * tm,
            (true, false) => lane_regs * tm,
            (false, _) => 0,
        };
        // wide_loads keeps a column's runs (about a unit's words) live across the slab.
        let wide = if self.wide_loads { 4 * tn } else { 0 };
        match self.math {
            Math::FmaF32 => tm * tn * v + 4 * tm + 4 * tn + 3 * tn + held(4) + wide + overhead,
            Math::FmaF16Packed => {
                let acc = match self.accumulate {
                    Precision::F16 => (tm * tn * v).div_ceil(2),
                    // One f32 scalar per output plus the unit's packed f16 partial sums.
                    Precision::F32 => tm * tn + (tm * tn * v).div_ceil(2),
                };
                acc + 2 * tm + 2 * tn + 3 * tn + held(2) + wide + overhead
            }
            Math::Int8Dot if self.half_units => {
                // Accumulators, a half unit's 4-word fragment of each row with its two
                // scales, one column's fragment and the columns' scales.
                tm * tn + 6 * tm + 4 + 2 * tn + overhead
            }
            Math::Int8Dot => {
                let quantize = if self.stage_a { 0 } else { 32 };
                tm * tn + 10 * tm + 8 + 3 * tn + quantize + wide + overhead
            }
        }
    }

    /// A descriptive kernel name.
    pub fn name(&self, w: &GemmWorkload) -> String {
        let act = match w.act {
            ActType::F32 => "f32",
            ActType::F16 => "f16",
        };
        let math = match self.math {
            Math::FmaF32 => "fma32",
            Math::FmaF16Packed => "fma16",
            Math::Int8Dot => "dot8",
        };
        let acc = match self.accumulate {
            Precision::F32 => "acc32",
            Precision::F16 => "acc16",
        };
        format!(
            "gemm_{}_{}{}{}_b{}x{}x{}_t{}x{}_k{}_v{}_s{}{}{}{}{}{}{}{}{}{}{}{}_{}_{}",
            w.weight.ggml_name().to_lowercase(),
            act,
            if w.bias { "_bias" } else { "" },
            epilogue_suffix(w.epilogue),
            self.bm,
            self.bn,
            self.bk,
            self.tm,
            self.tn,
            self.split_k,
            self.vector_width,
            self.stage_a as u8,
            self.stage_b as u8,
            if self.shuffle_a { "_shfa" } else { "" },
            if self.wide_loads { "_wide" } else { "" },
            if self.k_unroll > 1 {
                format!("_u{}", self.k_unroll)
            } else {
                String::new()
            },
            if self.k_groups > 1 {
                format!("_g{}", self.k_groups)
            } else {
                String::new()
            },
            if self.fold_per_slab { "_fs" } else { "" },
            if self.pack_a_f16 { "_pk16" } else { "" },
            if self.half_units { "_hu" } else { "" },
            if self.packed_w > 0 {
                format!("_p{}", self.packed_w)
            } else {
                String::new()
            },
            if self.share_headers { "_sh" } else { "" },
            if self.last_group_reduces { "_lgr" } else { "" },
            acc,
            math
        )
    }

    /// Checks the schedule against the workload and the device.
    pub fn validate(&self, w: &GemmWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        for (name, v) in [
            ("bm", self.bm),
            ("bn", self.bn),
            ("bk", self.bk),
            ("tm", self.tm),
            ("tn", self.tn),
            ("split_k", self.split_k),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if self.bm % self.tm != 0 || self.bn % self.tn != 0 {
            return bad(format!(
                "block tile {}x{} is not a multiple of the micro-tile {}x{}",
                self.bm, self.bn, self.tm, self.tn
            ));
        }
        if self.bk % UNIT != 0 {
            return bad(format!("bk {} is not a multiple of {UNIT}", self.bk));
        }
        if self.units_per_slab() % self.split_k != 0 {
            return bad(format!(
                "bk {} holds {} units of {UNIT}, not divisible among split_k {} threads",
                self.bk,
                self.units_per_slab(),
                self.split_k
            ));
        }
        if w.k % self.bk != 0 {
            return bad(format!("bk {} does not divide k {}", self.bk, w.k));
        }
        if !self.k_groups.is_power_of_two() || self.k_groups > MAX_K_GROUPS {
            return bad(format!(
                "k_groups {} is not a power of two up to {MAX_K_GROUPS}",
                self.k_groups
            ));
        }
        if self.last_group_reduces && self.k_groups == 1 {
            return bad("last_group_reduces needs k_groups above 1".into());
        }
        if w.k / self.bk < self.k_groups {
            return bad(format!(
                "k {} holds {} slabs of bk {}, fewer than k_groups {}",
                w.k,
                w.k / self.bk.max(1),
                self.bk,
                self.k_groups
            ));
        }
        if w.epilogue == Epilogue::SwiGlu && self.tn % 2 != 0 {
            return bad(format!(
                "the SwiGLU epilogue pairs micro-tile columns j and j + tn/2: tn {} is odd",
                self.tn
            ));
        }
        if u64::from(self.k_groups) * u64::from(w.m) * u64::from(w.weight_rows())
            > u64::from(u32::MAX)
        {
            return bad(format!(
                "{} partial planes of {}x{} are too large for 32-bit indexing",
                self.k_groups, w.m, w.n
            ));
        }
        if w.k / (self.bk * self.k_unroll.max(1)) < self.k_groups {
            return bad(format!(
                "k {} holds fewer than k_groups {} steps of k_unroll {} slabs",
                w.k, self.k_groups, self.k_unroll
            ));
        }
        if ![1, 2, 4].contains(&self.k_unroll) || w.k % (self.bk * self.k_unroll) != 0 {
            return bad(format!(
                "k_unroll {} is not 1, 2 or 4 slabs of {} dividing k {}",
                self.k_unroll, self.bk, w.k
            ));
        }
        if ![1, 2, 4].contains(&self.vector_width) {
            return bad(format!(
                "vector_width {} is not 1, 2 or 4",
                self.vector_width
            ));
        }
        match self.math {
            Math::FmaF32 => {
                if self.accumulate != Precision::F32 {
                    return bad("fma_f32 math accumulates in f32".into());
                }
            }
            Math::FmaF16Packed => {
                if self.vector_width < 2 {
                    return bad("fma_f16_packed needs vector_width 2 or 4".into());
                }
            }
            Math::Int8Dot => {
                if !w.weight.is_quantized() {
                    return bad(format!(
                        "int8_dot needs quantized weights, not {}",
                        w.weight
                    ));
                }
                if self.accumulate != Precision::F32 {
                    return bad("int8_dot accumulates in f32".into());
                }
                if self.vector_width != 4 {
                    return bad("int8_dot works on packed words: vector_width must be 4".into());
                }
            }
        }

        if self.fold_per_slab
            && (self.math != Math::FmaF16Packed
                || self.accumulate != Precision::F32
                || self.bk > MAX_FOLD_SLAB)
        {
            return bad(format!(
                "fold_per_slab needs packed f16 math with f32 accumulation and bk up to {MAX_FOLD_SLAB}"
            ));
        }

        if self.shuffle_a {
            let wg_n = self.bn / self.tn;
            if self.math == Math::Int8Dot || self.stage_a || self.split_k != 1 {
                return bad("shuffle_a needs FMA math, no stage_a and no split-K".into());
            }
            if !wg_n.is_power_of_two() || wg_n < 8 || self.bk != 4 * wg_n {
                return bad(format!(
                    "shuffle_a needs a power-of-two row group of at least 8 threads and bk = 4 x {wg_n}"
                ));
            }
            if !caps.subgroup_shuffle {
                return Err(Refusal::MissingFeature(
                    "subgroup shuffle (shuffle_a)".into(),
                ));
            }
            if wg_n != caps.subgroup_size {
                return Err(Refusal::DeviceLimit(format!(
                    "shuffle_a: a row group of {wg_n} threads is not one subgroup of {}",
                    caps.subgroup_size
                )));
            }
        }

        if self.pack_a_f16
            && !(self.shuffle_a && self.math == Math::FmaF32 && w.act == ActType::F32)
        {
            return bad("pack_a_f16 needs shuffle_a, fma_f32 math and f32 activations".into());
        }

        if self.half_units && !(self.math == Math::Int8Dot && self.stage_a && self.stage_b) {
            return bad("half_units needs int8_dot math with stage_a and stage_b".into());
        }

        if self.packed_w > 0 && !(self.packs_w(w) && self.packed_w <= self.tn / 2) {
            return bad(
                "packed_w needs half units with split W staging and thread-major scales, at most \
                 tn/2 pairs, and a format of unsigned 4-bit quants (Q4_K, Q4_1)"
                    .into(),
            );
        }

        if self.wide_loads {
            if !w.weight.is_quantized() {
                return bad(format!(
                    "wide_loads needs quantized weights, not {} (whose chunks are whole words already)",
                    w.weight
                ));
            }
            if self.split_k != 1 || !self.units_per_slab().is_power_of_two() {
                return bad(
                    "wide_loads needs no split-K and a power-of-two number of units per slab"
                        .into(),
                );
            }
        }

        if self.share_headers {
            let step = self.units_per_slab() * self.k_unroll;
            let fits = step >= 2
                && (step % crate::dequant::layout::GROUP == 0
                    || crate::dequant::layout::GROUP % step == 0);
            if !(self.wide_loads
                && !self.stage_b
                && self.k_unroll > 1
                && w.weight == WeightFormat::Q8_0
                && w.layout == crate::dequant::WeightLayout::Aligned
                && fits)
            {
                return bad(format!(
                    "share_headers needs wide_loads without stage_b, k_unroll above 1, Q8_0 weights in the aligned layout and a multiple or an even divisor of 8 units per K-loop iteration ({step})"
                ));
            }
        }

        // Device features.
        if self.math == Math::FmaF16Packed && !caps.float16 {
            return Err(Refusal::MissingFeature(
                "shaderFloat16 (fma_f16_packed math)".into(),
            ));
        }
        if self.math == Math::Int8Dot && !caps.integer_dot_product {
            return Err(Refusal::MissingFeature(
                "shaderIntegerDotProduct (int8_dot math)".into(),
            ));
        }
        if w.act == ActType::F16 && !caps.storage_16bit {
            return Err(Refusal::MissingFeature(
                "storageBuffer16BitAccess (f16 activations)".into(),
            ));
        }

        // Device limits.
        let wg = self.workgroup_size();
        for (d, (&have, &max)) in wg.iter().zip(caps.max_workgroup_size.iter()).enumerate() {
            if have > max {
                return Err(Refusal::DeviceLimit(format!(
                    "workgroup size {wg:?}: dimension {d} is {have}, the device allows {max}"
                )));
            }
        }
        if self.threads() > caps.max_workgroup_invocations {
            return Err(Refusal::DeviceLimit(format!(
                "{} threads per workgroup, the device allows {}",
                self.threads(),
                caps.max_workgroup_invocations
            )));
        }
        let shared = self.shared_bytes(w);
        if shared > caps.max_shared_memory_bytes {
            return Err(Refusal::DeviceLimit(format!(
                "{shared} bytes of shared memory, the device allows {}",
                caps.max_shared_memory_bytes
            )));
        }
        let regs = self.register_estimate();
        if regs > caps.register_budget {
            return Err(Refusal::DeviceLimit(format!(
                "about {regs} registers per thread, the budget is {}",
                caps.register_budget
            )));
        }
        Ok(())
    }
}

/// The epilogue's part of a kernel name ("" without one).
pub(crate) fn epilogue_suffix(e: Epilogue) -> String {
    match e {
        Epilogue::None => String::new(),
        Epilogue::SwiGlu => "_swiglu".into(),
        Epilogue::Residual => "_res".into(),
        Epilogue::RopeKv(r) => format!(
            "_ropekv_{}_q{}k{}v{}{}",
            r.pairing.name(),
            r.q_heads,
            r.k_heads,
            r.v_heads,
            if r.freq_factors { "_ff" } else { "" }
        ),
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// The longest K span (elements) whose products `fold_per_slab` sums in f16 before folding.
pub const MAX_FOLD_SLAB: u32 = 128;

/// The largest `k_groups` the template accepts.
pub const MAX_K_GROUPS: u32 = 16;

/// f32 scales stored per unit by the int8 path's weight staging.
pub(crate) fn int8_scale_lanes(f: WeightFormat) -> u32 {
    if f.has_min() || f.has_hi_scale() {
        2
    } else {
        1
    }
}
