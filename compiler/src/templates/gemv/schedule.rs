//! How a GEMV / small-M GEMM is computed: the tunable parameters, their validity and
//! resource estimates.
//!
//! Thread layout: a one-dimensional workgroup of `threads` invocations computes `cols`
//! output columns (weight rows; with SwiGLU each column is a gate row and an up row) for all
//! `m` rows. The K reduction is spread over the whole workgroup: the 32-element units of a
//! row are split into `8 / chunks_per_thread` lanes of `chunks_per_thread` 4-element chunks,
//! so `threads · chunks_per_thread / 8` units are in flight per loop step and neighbouring
//! threads read neighbouring bytes of each weight row. Each thread keeps `m × rows` partial
//! sums in registers (the weights dequantized in registers, read once); the workgroup then
//! adds them up through subgroup adds (where the device has subgroup arithmetic) or a tree in
//! shared memory.

use serde::{Deserialize, Serialize};

use crate::caps::DeviceCaps;
use crate::dequant::{WeightFormat, WeightLayout};
use crate::refusal::Refusal;
use crate::templates::gemm::{ActType, GemmWorkload, Math, Precision};

/// Version of the GEMV schedule/kernel semantics (see `GEMM_SCHEDULE_VERSION`).
pub const GEMV_SCHEDULE_VERSION: u32 = 1;

/// The most rows (tokens) the template computes in one dispatch: M = 1 (decode) to 8.
pub const MAX_M: u32 = 8;

/// How the threads' partial sums are added up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Reduce {
    /// A tree over shared memory (every device).
    #[serde(rename = "shared")]
    Shared,
    /// `OpGroupNonUniformFAdd` within each subgroup, then the subgroups' sums through shared
    /// memory (devices with subgroup arithmetic; any subgroup size). Where the workgroup is a
    /// single subgroup at run time (`NumSubgroups` = 1), its first lane stores the sums
    /// directly: no shared memory traffic and no barrier (which CPU implementations such as
    /// llvmpipe run as a costly coroutine switch).
    #[serde(rename = "subgroup")]
    Subgroup,
    /// The workgroup is exactly one subgroup (`threads` = the device's subgroup size):
    /// `OpGroupNonUniformFAdd`, the first lane stores, and the kernel declares no workgroup
    /// memory at all. For panvk, which allocates workgroup memory for every dispatch that
    /// declares any (a decode step's 262144-column output projection on Mesa 25.0.7: 1.2 GiB for
    /// one dispatch with the `subgroup` reduction's 512 bytes).
    #[serde(rename = "one_subgroup")]
    OneSubgroup,
}

/// A GEMV schedule. Serialized field names are stable (tuning-database keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemvSchedule {
    /// Invocations per workgroup (a power of two, 8 to 512). A workgroup that is one subgroup
    /// (where the device makes it one) adds its sums up without shared memory or a barrier.
    pub threads: u32,
    /// Output columns per workgroup (1, 2, 4 or 8).
    pub cols: u32,
    /// 4-element chunks of a 32-element unit one thread takes (2, 4 or 8): the K split's
    /// granularity (8: a thread per unit; 2: four threads share a unit and its scales).
    pub chunks_per_thread: u32,
    /// Consecutive 32-element units a thread takes per loop step (1, 2 or 4; above 1 only
    /// with `chunks_per_thread` 8). With a thread per unit the units are opened with wide
    /// loads (`dequant::ir::open_units`: each byte range read once as a run of words, which
    /// matters where 2-byte-aligned blocks would otherwise cost two loads per word). Omitted
    /// from the serialization when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub units_per_thread: u32,
    /// Width of the FMA accumulators (1, 2 or 4 lanes); loads are always 4 elements wide.
    pub vector_width: u32,
    pub reduce: Reduce,
    /// f32 only (with f16 math each unit's f16 partial sums are added to f32 accumulators).
    pub accumulate: Precision,
    /// `FmaF32`, `FmaF16Packed`, or `Int8Dot`: each thread quantizes its 32-element units
    /// of X to int8 (ggml's Q8_1: a scale and the sum per unit) and takes 4-element packed dot
    /// products with the weights' quants, the format's scales applied once per unit. At one row
    /// of X that is ~0.5 integer instructions per weight instead of a shift, a conversion and
    /// two multiply-adds; the quantization of X is paid once per unit and thread and shared by
    /// the workgroup's `cols` weight rows (so int8 wants several).
    pub math: Math,
    /// Quantized weights with `fma_f32`: dot each unit's integer quants with X first and apply
    /// the unit's scales once per scale (`scale · (q·x) - min · Σx`, as ggml does) instead of
    /// dequantizing every weight: two operations per weight fewer, a 4-lane dot per weight row
    /// more live. Wins where the GEMV is arithmetic-bound; on Mesa 25.0.7's Valhall compiler
    /// (load/store-bound decode GEMVs) it halved occupancy and spilled Q6_K. Omitted from the
    /// serialization when false, so stored schedules keep their keys.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dot_first: bool,
    /// Q4_K/Q5_K rows in the GGUF layout with a thread per unit: the weights bound as 16-byte
    /// quads, so every run `open_units` reads (header, scales, a unit's quants: all 16-aligned
    /// in super-blocks that start on 16 bytes) is one 16-byte load per 16 bytes instead of four
    /// 4-byte ones. On Mesa 25.0.7's Valhall compiler: load/store cycles 49 -> 31 (3B Q4_K
    /// gate/up), occupancy 2 -> 1. Omitted from the serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quad_loads: bool,
    /// Independent groups of threads in a workgroup (1, 2, 4, 8 or 16), each computing its
    /// own `cols` columns over the whole row: a workgroup computes `column_groups · cols`
    /// columns. Above 1 only with the `one_subgroup` reduction, each group one subgroup
    /// (`threads / column_groups` = the subgroup size): the sums are added up by subgroup adds
    /// alone (no workgroup memory, no barrier) while the workgroup stays large enough for the
    /// device to keep all its threads resident (an H100 holds at most 32 workgroups per
    /// multiprocessor: 32-thread workgroups fill half of its 2048 threads). Omitted from the
    /// serialization when 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub column_groups: u32,
    /// With `dot_first`: each quant becomes a float by bit operations alone, `1 + u·2^-bits`
    /// (u the quant made non-negative, written into the mantissa of 1.0), and the unit's
    /// `Σx` takes the bias back out once per scale, instead of an integer-to-float conversion
    /// per weight. NVIDIA issues conversions at a quarter of the FMA rate (16 a clock per
    /// multiprocessor), so a decode GEMV that converts every weight is bound by them; Valhall
    /// converts a byte in one instruction, so there it would add work. Omitted from the
    /// serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub bit_floats: bool,
    /// With `dot_first`: every weight row's quant words and every X chunk a thread needs in a
    /// loop step are loaded before any of them is multiplied, so a thread has all its loads in
    /// flight at once instead of leaving the compiler to hoist them past the arithmetic of the
    /// rows before (a GEMV streams at the rate of the loads it keeps in flight). More live
    /// registers. Omitted from the serialization when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub early_loads: bool,
}

impl GemvSchedule {
    pub fn workgroup_size(&self) -> [u32; 3] {
        [self.threads, 1, 1]
    }

    /// Lanes sharing one 32-element unit.
    pub fn lanes_per_unit(&self) -> u32 {
        8 / self.chunks_per_thread.max(1)
    }

    /// Threads that split one row's K reduction: the workgroup, or one of its
    /// `column_groups`.
    pub fn group_threads(&self) -> u32 {
        self.threads / self.column_groups.max(1)
    }

    /// Columns one workgroup computes.
    pub fn columns_per_workgroup(&self) -> u32 {
        self.cols * self.column_groups.max(1)
    }

    /// Groups of `units_per_thread` units a column group works on per loop step.
    pub fn units_per_step(&self) -> u32 {
        self.group_threads() / self.lanes_per_unit()
    }

    /// Partial sums per thread: m rows × the weight rows of `cols` columns.
    pub fn outputs(&self, w: &GemmWorkload) -> u32 {
        w.m * self.cols * w.epilogue.rows_per_column()
    }

    /// Sums the workgroup adds up: the outputs, and with a folded RMSNorm each X row's sum of
    /// squares.
    pub fn reduced_sums(&self, w: &GemmWorkload) -> u32 {
        let squares = if w.rms_norm_eps_bits.is_some() {
            w.m
        } else {
            0
        };
        self.outputs(w) + squares
    }

    /// Bytes of workgroup memory the kernel declares: one f32 slot per thread and reduced sum.
    pub fn shared_bytes(&self, w: &GemmWorkload) -> u32 {
        if self.reduce == Reduce::OneSubgroup {
            return 0;
        }
        4 * self.threads * self.reduced_sums(w)
    }

    /// Rough count of 32-bit registers per thread: accumulators, a chunk of every X row and
    /// weight row, scales and a fixed overhead for indices.
    pub fn register_estimate(&self, w: &GemmWorkload) -> u32 {
        let outputs = self.outputs(w);
        let wrows = self.cols * w.epilogue.rows_per_column();
        let acc = match self.math {
            Math::FmaF16Packed => outputs + (outputs * self.vector_width).div_ceil(2),
            _ => outputs * self.vector_width,
        };
        if self.math == Math::Int8Dot {
            // Each X row's 8 packed words, its scale and sum; a weight row's words and scales;
            // with a folded RMSNorm a 4-wide sum of squares per X row and the norm weight's
            // chunk.
            let norm = if w.rms_norm_eps_bits.is_some() {
                4 * w.m + 4
            } else {
                0
            };
            return acc + 10 * w.m + 8 + 3 * wrows + 12 + norm;
        }
        // A folded RMSNorm: a 4-wide sum of squares per X row and the norm weight's chunk.
        let norm = if w.rms_norm_eps_bits.is_some() {
            4 * w.m + 4
        } else {
            0
        };
        acc + 4 * w.m + 4 * wrows + 3 * wrows + 12 + norm
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
        let reduce = match self.reduce {
            Reduce::Shared => "sh",
            Reduce::Subgroup => "sg",
            Reduce::OneSubgroup => "onesg",
        };
        format!(
            "gemv_{}_{}{}{}{}_m{}_t{}_c{}_p{}{}_v{}_{}_{}{}{}{}{}{}",
            w.weight.ggml_name().to_lowercase(),
            act,
            if w.rms_norm_eps_bits.is_some() {
                "_norm"
            } else {
                ""
            },
            if w.bias { "_bias" } else { "" },
            crate::templates::gemm::schedule::epilogue_suffix(w.epilogue),
            w.m,
            self.threads,
            self.cols,
            self.chunks_per_thread,
            if self.units_per_thread > 1 {
                format!("_u{}", self.units_per_thread)
            } else {
                String::new()
            },
            self.vector_width,
            reduce,
            math,
            if self.dot_first { "_df" } else { "" },
            if self.quad_loads { "_q16" } else { "" },
            if self.bit_floats { "_bf" } else { "" },
            if self.early_loads { "_el" } else { "" },
            if self.column_groups > 1 {
                format!("_g{}", self.column_groups)
            } else {
                String::new()
            }
        )
    }

    /// Checks the schedule against the workload and the device.
    pub fn validate(&self, w: &GemmWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if !self.threads.is_power_of_two() || !(8..=512).contains(&self.threads) {
            return bad(format!(
                "threads {} is not a power of two from 8 to 512",
                self.threads
            ));
        }
        if ![1, 2, 4, 8].contains(&self.cols) {
            return bad(format!("cols {} is not 1, 2, 4 or 8", self.cols));
        }
        if ![2, 4, 8].contains(&self.chunks_per_thread) {
            return bad(format!(
                "chunks_per_thread {} is not 2, 4 or 8",
                self.chunks_per_thread
            ));
        }
        if ![1, 2, 4].contains(&self.units_per_thread)
            || (self.units_per_thread > 1 && self.chunks_per_thread != 8)
        {
            return bad(format!(
                "units_per_thread {} is not 1, 2 or 4 (above 1 only with chunks_per_thread 8)",
                self.units_per_thread
            ));
        }
        if (w.k / crate::dequant::UNIT) % self.units_per_thread != 0 {
            return bad(format!(
                "units_per_thread {} does not divide the {} units of a row",
                self.units_per_thread,
                w.k / crate::dequant::UNIT
            ));
        }
        if ![1, 2, 4].contains(&self.vector_width) {
            return bad(format!(
                "vector_width {} is not 1, 2 or 4",
                self.vector_width
            ));
        }
        if self.math == Math::Int8Dot {
            if !w.weight.is_quantized() {
                return bad(format!(
                    "int8_dot needs quantized weights, not {}",
                    w.weight
                ));
            }
            if self.chunks_per_thread != 8 {
                return bad(
                    "int8_dot quantizes whole 32-element units of X: chunks_per_thread must be 8"
                        .into(),
                );
            }
            if self.vector_width != 1 {
                return bad("int8_dot keeps scalar sums: vector_width must be 1".into());
            }
            if !caps.integer_dot_product {
                return Err(Refusal::MissingFeature(
                    "shaderIntegerDotProduct (int8_dot math)".into(),
                ));
            }
        }
        if self.dot_first && (self.math != Math::FmaF32 || !w.weight.is_quantized()) {
            return bad(format!(
                "dot_first needs quantized weights and fma_f32 math, not {} with {:?}",
                w.weight, self.math
            ));
        }
        if self.early_loads && !self.dot_first {
            return bad("early_loads loads ahead the quants of dot_first: needs dot_first".into());
        }
        if self.bit_floats && !self.dot_first {
            return bad(
                "bit_floats turns the quants of dot_first into floats: needs dot_first".into(),
            );
        }
        let quad_formats = matches!(w.weight, WeightFormat::Q4K | WeightFormat::Q5K);
        if self.quad_loads
            && !(w.layout == WeightLayout::Gguf && quad_formats && self.lanes_per_unit() == 1)
        {
            return bad(format!(
                "quad_loads reads Q4_K/Q5_K GGUF rows with a thread per unit, not {} {} with \
                 {} chunks per thread",
                w.weight, w.layout, self.chunks_per_thread
            ));
        }
        if w.rms_norm_eps_bits.is_some() && self.math == Math::FmaF16Packed {
            // X is multiplied by the norm weight but normalized only at the end: f16 products
            // of the raw residual stream can overflow. (int8 quantizes each unit of the
            // unnormalized X: the same quants, a scale that differs by the norm's factor.)
            return bad("a folded RMSNorm needs fma_f32 or int8_dot math".into());
        }
        if self.accumulate != Precision::F32 {
            return bad("the GEMV template accumulates in f32".into());
        }
        if self.math == Math::FmaF16Packed && !caps.float16 {
            return Err(Refusal::MissingFeature(
                "shaderFloat16 (fma_f16_packed math)".into(),
            ));
        }
        if self.reduce != Reduce::Shared && !caps.subgroup_arithmetic {
            return Err(Refusal::MissingFeature(
                "subgroup arithmetic (the subgroup reduction)".into(),
            ));
        }
        if ![1, 2, 4, 8, 16].contains(&self.column_groups) || self.threads % self.column_groups != 0
        {
            return bad(format!(
                "column_groups {} is not 1, 2, 4, 8 or 16 dividing the {} threads",
                self.column_groups, self.threads
            ));
        }
        if self.column_groups > 1 && self.reduce != Reduce::OneSubgroup {
            return bad(format!(
                "column_groups {} needs the one_subgroup reduction (each group one subgroup)",
                self.column_groups
            ));
        }
        if self.reduce == Reduce::OneSubgroup && self.group_threads() != caps.subgroup_size {
            return bad(format!(
                "one_subgroup needs threads / column_groups = the subgroup size {}, not {}",
                caps.subgroup_size,
                self.group_threads()
            ));
        }
        if w.act == ActType::F16 && !caps.storage_16bit {
            return Err(Refusal::MissingFeature(
                "storageBuffer16BitAccess (f16 activations)".into(),
            ));
        }
        super::super::check_threads(self.threads, caps)?;
        super::super::check_shared(self.shared_bytes(w), caps)?;
        let regs = self.register_estimate(w);
        if regs > caps.register_budget {
            return Err(Refusal::DeviceLimit(format!(
                "about {regs} registers per thread, the budget is {}",
                caps.register_budget
            )));
        }
        Ok(())
    }
}

fn is_false(v: &bool) -> bool {
    !*v
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}
