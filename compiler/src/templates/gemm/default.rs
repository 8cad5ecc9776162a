//! Rule-based default schedules (in the spirit of MLC's dlight rules), used when a workload
//! has not been tuned on a device.
//!
//! - Shared memory off-chip (Mali/panvk): no staging, X rows shared through subgroup
//!   broadcasts (`shuffle_a`) where the subgroup is a power of two; small register footprint (Mali halves
//!   occupancy above 32 registers); f16 packed math where the device has it, accumulating
//!   in f32; 64 threads.
//! - Devices that emulate f16 (CPU implementations) keep f32 math; where lane-varying loads
//!   run lane by lane (CPU implementations) the X broadcasts feed 4×8 micro-tiles.
//! - GPUs with native f16 and fast shared memory: packed f16 math with f32 accumulation
//!   (the f16 partial sums folded into f32 once per slab), both operands staged, 64-deep K
//!   slabs; 128×128 (8×8) tiles where m ≥ 256, their grid has at least 32 tiles (split
//!   two ways across K below 256) and each workgroup keeps 16 slabs of K, else 64×64 (4×4)
//!   tiles, split four ways across K (`k_groups`) where their grid has fewer than
//!   [`SPLIT_K_MIN_WORKGROUPS`] workgroups;
//!   grids of fewer than 32 such tiles take 32×32 (2×2) tiles split up to 8 ways, each with
//!   its reduce kernel (`last_group_reduces`, one dispatch fewer, made the 3B prefill 6-11 %
//!   slower on the H200: docs/measurements/2026-12-03c-h200.md).
//! - Otherwise: stage both operands, f32 math, 16×16 threads, and the biggest tile whose grid
//!   still fills the GPU: 128×128 (8×8 micro-tiles, where the register budget allows them)
//!   with at least [`BIG_TILE_MIN_WORKGROUPS`] workgroups, 64×64 (4×4) with half as many,
//!   32×32 (2×2) with a quarter, else 16×32 (1×2). 64-deep K slabs at m ≤ 64 and for the
//!   small tiles (half the barriers per FMA; on the H200 1.03-1.3x at m = 64).
//! - Few rows (m ≤ 4, decode-like): one row per workgroup; split-K across 4 threads where
//!   shared memory is on-chip, none at all where it is not (panvk allocates workgroup memory
//!   for every dispatch that declares any).
//!
//! The first rule candidate that validates wins; failing all, the first schedule of the search
//! space; failing that (a workload no schedule can run on the device), the simplest schedule,
//! which `instantiate` then refuses with the reason.

use super::schedule::{GemmSchedule, Math, Precision};
use super::space::search_space;
use super::workload::{ActType, GemmWorkload};
use crate::caps::DeviceCaps;
use crate::dequant::{WeightFormat, WeightLayout};

/// Workgroups a 128×128 tile grid must keep for the big-tile rule (halved for 64×64, quartered
/// for 32×32): below it the GPU is not filled. On the H200 the 512×2048 GEMMs (64 tiles of
/// 128×128) ran 1.4-1.7x slower than with 64×64 tiles, the 512×11008 ones (344 tiles) 1.31x
/// faster; at m = 64, n = 2048 (32 tiles of 64×64) 32×32 tiles were 1.7x faster than 64×64,
/// at n = 11008 (172 tiles) 1.3x slower (docs/measurements/2026-12-02-h200.md).
pub const BIG_TILE_MIN_WORKGROUPS: u32 = 256;

/// The packed-f16 rule takes 64×64 tiles when their grid has at least this many (split
/// across K to four times as many workgroups where it has fewer than
/// [`SPLIT_K_MIN_WORKGROUPS`]), else 32×32 tiles split up to 8 ways towards
/// [`F16_SMALL_GRID_TARGET`] workgroups. On the H200 the 64-row GEMMs with 32 tiles of 64×64
/// split four ways ran 1.3-1.5x faster than 32×32 tiles split twice; the 64×256 one (4 tiles)
/// was 2x faster as 32×32 tiles split 8 ways (docs/measurements/2026-12-02b-h200.md).
pub const F16_BIG_TILE_MIN_TILES: u32 = 32;

/// The packed-f16 rule's 128×128 (8×8) tile needs at least this many rows and this many
/// tiles (a grid of fewer leaves most of a GPU's cores idle even split across K).
pub const F16_HUGE_TILE_MIN_ROWS: u32 = 256;
pub const F16_HUGE_TILE_MIN_TILES: u32 = 32;
/// ... and at least this many K slabs per workgroup (after the split across K).
pub const F16_HUGE_TILE_MIN_SLABS: u32 = 16;

/// Rows from which the int8 rule of devices with slow shuffles takes its 16-row tiles.
pub const INT8_TILE_MIN_ROWS: u32 = 16;

/// Rows from which that rule takes 64-row tiles of 4×4 micro-tiles (fewer rows would leave
/// most of such a tile's rows clamped copies).
pub const INT8_WIDE_TILE_MIN_ROWS: u32 = 64;

/// Column pairs per thread whose W the Mali's 4×4 int8 tile of Q4_K stages as packed
/// nibbles (`GemmSchedule::packed_w`; Q4_1, 55 -> 52 with one pair, is in no model whose
/// prefill was predicted and keeps bytes, docs/measurements/2026-12-07e-mali-prefill.md).
pub const MALI_PACKED_W_PAIRS: u32 = 1;

/// Workgroups the 32×32 split aims for.
pub const F16_SMALL_GRID_TARGET: u32 = 128;

/// Tile grids of at least this many workgroups are not split across K.
pub const SPLIT_K_MIN_WORKGROUPS: u32 = 256;

/// `k_groups` for a tile grid: the smallest power of two up to `max` that brings the grid to
/// `target` workgroups, while each group keeps at least 4 K slabs.
fn split_k_groups(w: &GemmWorkload, s: &GemmSchedule, max: u32, target: u32) -> u32 {
    let tiles = w.m.div_ceil(s.bm) * w.n.div_ceil(s.bn);
    let slabs = w.k / s.bk.max(1);
    let mut g = 1;
    while g < max && tiles * g < target && slabs / (2 * g) >= 4 {
        g *= 2;
    }
    g
}

fn candidates(w: &GemmWorkload, caps: &DeviceCaps) -> Vec<GemmSchedule> {
    let f16 = caps.float16 && !caps.emulated_f16;
    let (math, accumulate, vector_width) = if f16 {
        (Math::FmaF16Packed, Precision::F32, 2)
    } else {
        (Math::FmaF32, Precision::F32, 1)
    };
    let base = GemmSchedule {
        bm: 1,
        bn: 64,
        bk: 128,
        tm: 1,
        tn: 1,
        split_k: 1,
        vector_width,
        stage_a: false,
        stage_b: false,
        shuffle_a: false,
        k_groups: 1,
        wide_loads: false,
        k_unroll: 1,
        share_headers: false,
        last_group_reduces: false,
        fold_per_slab: false,
        pack_a_f16: false,
        half_units: false,
        packed_w: 0,
        accumulate,
        math,
    };
    let mut c = Vec::new();
    if w.m <= 4 {
        if caps.lane_serial_memory && caps.subgroup_shuffle {
            // One row per workgroup, 8 columns per lane, the X row broadcast: on lavapipe the
            // 0.5B's output projection (m = 1, n = 151936, Q8_0) took 40 ms against 280 ms
            // with the GPU rule below (docs/measurements/2026-12-03d-lavapipe.md).
            let sg = caps.subgroup_size;
            c.push(GemmSchedule {
                bm: 1,
                bn: 8 * sg,
                bk: 4 * sg,
                tn: 8,
                shuffle_a: true,
                wide_loads: true,
                ..base
            });
        }
        if caps.shared_memory_is_slow {
            // Decode-like without any workgroup memory (panvk allocates it per dispatch).
            c.push(GemmSchedule {
                bm: 1,
                bn: 128,
                tn: 2,
                bk: 128,
                ..base
            });
        } else {
            // Decode-like: threads split K four ways, reduced through shared memory.
            c.push(GemmSchedule {
                bm: 1,
                bn: 32,
                tn: 2,
                split_k: 4,
                bk: 128,
                ..base
            });
            c.push(GemmSchedule {
                bm: 1,
                bn: 16,
                tn: 1,
                split_k: 4,
                bk: 128,
                ..base
            });
        }
    }
    if caps.shared_memory_is_slow {
        // X rows shared across a subgroup-wide row group through broadcasts (one vec4 load
        // per lane and row per slab instead of eight per unit), 4 rows per thread: on Mesa
        // 26.1.6's Valhall compiler (M=512, K=2048) ls fell from 112 to 18 cycles (Q4_K), 212
        // to 80 (Q6_K), 124 to 46 (Q8_0), without spills
        // (docs/measurements/2026-12-02-mali-shim26-gemm.md).
        //
        // In f32 math: with packed f16 products summed into f32 accumulators every slab, the
        // packing, the broadcasts and the folds cost more than the halved products save. Mesa
        // 26.1.6's estimated cycles per K-loop iteration of this tile (M = 512), packed f16 ->
        // f32: Q5_0 60 -> 38.6, Q6_K 74 -> 41, Q8_0 (GGUF layout) 52 -> 30, Q4_K (two slabs)
        // 45.3 -> 41.4; aligned Q8_0 ties per row and slab (4.22), all without spills
        // (docs/measurements/2026-12-05-mali-gemm-f32.md). Where f16 is emulated or absent the
        // base is f32 already.
        //
        // Where the broadcasts are the slow part (a cross-lane read is an SFU op on Valhall,
        // one per FMA in this 4×1 tile) they carry X as packed f16 pairs, two values per read.
        // Mesa 26.1.6, M = 512, cycles per K-loop iteration, sfu-bound before and after, no
        // spills: Q4_K 41.4 -> 25.4 (ls 22), Q6_K 29.4 -> 21.4 (ls 20), Q5_0 36.75 -> 28.75
        // (docs/measurements/2026-12-05b-mali-packed-broadcast.md). Not on CPU
        // implementations, whose shuffles are plain vector moves.
        //
        // Where the broadcasts and the bitwise dequantization both run on a slow unit (on
        // Valhall cross-lane reads, shifts, masks and IMUL are SFU ops) and the device has
        // 4×8-bit dot products: int8 math with both operands staged in workgroup memory, so
        // each X unit is quantized (like ggml's Q8_1) and each weight unit unpacked to signed
        // bytes once per workgroup tile, not once per lane; 2×4 micro-tiles read from it in
        // half units (`half_units`). Mesa 26.1.6, M = 512, predicted cycles per product
        // (busiest pipe, load/store at calibration A's rate) against the packed-broadcast f32
        // tile below: Q4_K 0.0375 against 0.0496, Q6_K 0.0386 against 0.0681, Q5_0 0.0369
        // against 0.0606, no spills (load/store-bound). Aligned Q8_0 keeps its 5-row f32
        // tile (0.0360, a tie) (docs/measurements/2026-12-06d-mali-gemm.md).
        //
        // From 64 rows, 4×4 micro-tiles in 64×64 workgroup tiles: each fragment read from
        // workgroup memory feeds 4 dot products instead of 2-4, and the staging's fixed work
        // (one X half unit and one W unit per thread and slab) is shared by twice the
        // products. They fit 64 registers since the min term runs first in a block of its
        // own, each column's dot products complete in their own block, and the kernel's
        // geometry is re-read inside the K loop (`GemmSchedule::half_units`). Mesa 26.1.6,
        // M = 512, no spills, load/store per K-loop iteration of 1024 products against 512:
        // Q4_K 95 against 67, Q6_K (aligned) 97 against 69, Q5_0 (aligned) 94 against 66
        // (docs/measurements/2026-12-06e-mali-gemm.md). Both tiles have several rows per
        // thread, so they take thread-major scale tiles and no closing barrier
        // (`GemmSchedule::thread_scales`): Q4_K 95 -> 89, Q6_K 113 -> 104, Q5_0 94 -> 82 at
        // M = 512, no spills (docs/measurements/2026-12-06f-mali-gemm.md); with the min term
        // after each half from the fragments' sums of quants, Q4_K 89 -> 87 (63 registers)
        // and Q5_K 97 with 1 spill -> 89 without. Larger micro-tiles (4×5 to 8×8) all spill
        // at Valhall's 64 registers, the register estimate refuses them
        // (docs/measurements/2026-12-06g-mali-gemm.md).
        let int8_rule = caps.integer_dot_product
            && caps.slow_subgroup_shuffle
            && !caps.lane_serial_memory
            && w.weight.is_quantized()
            && w.weight != WeightFormat::Q8_0;
        // Both operands staged, int8 dot products in half units: the two tiles differ only in
        // their shape.
        let half_unit_int8 = |bm, bn, tm, tn| GemmSchedule {
            bm,
            bn,
            bk: 64,
            tm,
            tn,
            vector_width: 4,
            stage_a: true,
            stage_b: true,
            half_units: true,
            math: Math::Int8Dot,
            accumulate: Precision::F32,
            ..base
        };
        // The 4×4 tile of Q4_K stages its first column pair's W as packed
        // nibbles (`packed_w`): one 16-byte read from workgroup memory gives both columns'
        // half unit, unpacked with shifts and masks (SFU). Mesa 26.1.6, M = 64, Q4_K
        // 11008 × 2048: K-loop load/store 52 -> 49 (both pairs: 44), SFU 10.4 -> 14.4 (both:
        // 17.0), no spills; with both pairs the SFU becomes the busiest pipe and the bias
        // GEMMs predict slower (docs/measurements/2026-12-07e-mali-prefill.md).
        if int8_rule && w.m >= INT8_WIDE_TILE_MIN_ROWS {
            let s = half_unit_int8(64, 64, 4, 4);
            c.push(GemmSchedule {
                packed_w: if s.packs_w(w) && w.weight == WeightFormat::Q4K {
                    MALI_PACKED_W_PAIRS
                } else {
                    0
                },
                ..s
            });
        }
        if int8_rule && w.m >= INT8_TILE_MIN_ROWS {
            c.push(half_unit_int8(16, 32, 2, 4));
        }
        let sg = caps.subgroup_size;
        let shuffled = GemmSchedule {
            bm: 16,
            bn: sg,
            bk: 4 * sg,
            tm: 4,
            tn: 1,
            shuffle_a: true,
            pack_a_f16: caps.slow_subgroup_shuffle
                && !caps.lane_serial_memory
                && w.act == ActType::F32,
            math: Math::FmaF32,
            accumulate: Precision::F32,
            vector_width: 1,
            ..base
        };
        if caps.lane_serial_memory {
            // CPU implementations load lane by lane but compute on all lanes at once: every
            // X vec4 a lane loads (and broadcasts) should feed as many columns as possible.
            // On lavapipe (m = 32, the 0.5B's GEMMs) 4×8 micro-tiles ran 3.3-3.8x faster than
            // the 4×1 tile, 4×4 2.4-3.0x, and 8-row tiles no faster than 4-row ones
            // (docs/measurements/2026-12-03d-lavapipe.md).
            for tn in [8, 4] {
                c.push(GemmSchedule {
                    bn: sg * tn,
                    tn,
                    wide_loads: true,
                    ..shuffled
                });
            }
        }
        // Weights read as word runs, each loaded once per slab (quantized formats): ls fell
        // 18 -> 15 (Q4_K), 80 -> 41 (Q6_K), 46 -> 30 (Q8_0). Q4_K (3 weight loads per slab)
        // also takes two slabs per K-loop iteration where k allows: 22 ls against 25.4 sfu
        // cycles, no spills; Q6_K spilled with two, Q8_0 stayed load-bound
        // (docs/measurements/2026-12-02-mali-shim26-wide-loads.md).
        let wide = GemmSchedule {
            wide_loads: true,
            ..shuffled
        };
        if w.weight == WeightFormat::Q4K {
            c.push(GemmSchedule {
                k_unroll: 2,
                ..wide
            });
        }
        // Q8_0 in the aligned layout (16-byte weight loads) is left with tm X loads, 4
        // weight quads and one scale word per slab against 2·tm sfu cycles (the X
        // broadcasts): more slabs per iteration spread the epilogue's LS ops (arith/ls 0.60
        // -> 0.84 with 4, docs/measurements/2026-12-02c-mali-shim26-repack.md), the 4 slabs
        // of an iteration share their group's header quad, and 5 rows per thread put more
        // broadcasts on each weight load: on Mesa 26.1.6 (M = 512, the four Qwen2.5-3B
        // shapes) 70.25 sfu / 80 ls (0.88) -> 84.375 / 84 (1.004), 63 registers, no spills;
        // 6 or 8 rows spilled with 2 or 4 slabs, and 4 rows stayed at 0.92
        // (docs/measurements/2026-12-03-mali-shim26-q8.md).
        // Without packed broadcasts they keep the base math (packed f16 where the device has
        // it): 5 rows do not fit 64 registers in f32, and per row and slab the f32 4-row tile
        // only ties (4.22). With X broadcast as packed f16 pairs the 5-row tile fits in f32
        // and needs fewer cycles than in packed f16: Mesa 26.1.6 (M = 512, 2048 × 2048, four
        // slabs) 47 cycles (ls-bound, sfu 44) per 20 row-slabs against 84.4, 0 spills
        // (docs/measurements/2026-12-05b-mali-packed-broadcast.md).
        if w.weight == WeightFormat::Q8_0 && w.layout == WeightLayout::Aligned {
            let base_math = GemmSchedule {
                math: base.math,
                accumulate: base.accumulate,
                vector_width: base.vector_width,
                pack_a_f16: wide.pack_a_f16 && base.math == Math::FmaF32,
                ..wide
            };
            let maths = if wide.pack_a_f16 {
                vec![wide, base_math]
            } else {
                vec![base_math]
            };
            for math in maths {
                for k_unroll in [4, 2] {
                    c.push(GemmSchedule {
                        bm: 20,
                        tm: 5,
                        k_unroll,
                        share_headers: true,
                        ..math
                    });
                }
            }
            for k_unroll in [4, 2] {
                c.push(GemmSchedule { k_unroll, ..wide });
            }
        }
        c.push(wide);
        c.push(shuffled);
        c.push(GemmSchedule {
            bm: 16,
            bn: 32,
            bk: 64,
            tm: 4,
            tn: 2,
            ..base
        });
        c.push(GemmSchedule {
            bm: 8,
            bn: 32,
            bk: 64,
            tm: 2,
            tn: 2,
            ..base
        });
        c.push(GemmSchedule {
            bm: 4,
            bn: 16,
            bk: 32,
            tm: 1,
            tn: 1,
            ..base
        });
    } else if f16 {
        // GPUs with native f16 and on-chip shared memory: packed f16 FMAs, f16 sums within
        // each 32-element unit folded into f32, both operands staged, 64-deep K slabs; the
        // biggest tile whose grid still fills the GPU. On the H200 these ran 1.3-1.6x faster
        // than the f32 defaults at M = 512 (35.5-45.2 TFLOP/s against 22.2-28.3), within 3-6 %
        // of f16 accumulation across all of K, and 64-deep slabs 1.3-1.6x faster than 32-deep
        // (docs/measurements/2026-12-02b-h200.md).
        // The f16 partial sums are folded into f32 once per 64-deep slab: 1.02-1.05x over
        // folding every 32 products on every H200 shape (docs/measurements/2026-12-02d-h200.md).
        let staged = GemmSchedule {
            stage_a: true,
            stage_b: true,
            bk: 64,
            fold_per_slab: true,
            ..base
        };
        // 128×128 tiles of 8×8 micro-tiles where there are enough rows and tiles (the register
        // budget of discrete GPUs admits them), split two ways across K below 256 tiles: on
        // the H200 at m = 512 1.22x the 64×64 tile on the 512×11008 gate/up GEMMs (344 tiles),
        // 1.08-1.12x split two ways on the 2048-wide down projections (64 tiles); at m = 64
        // half of each tile is idle and 64×64 split four ways was 2x faster. Each workgroup
        // keeps at least 16 slabs of K.
        let tiles128 = w.m.div_ceil(128) * w.n.div_ceil(128);
        if w.m >= F16_HUGE_TILE_MIN_ROWS && tiles128 >= F16_HUGE_TILE_MIN_TILES {
            let huge = GemmSchedule {
                bm: 128,
                bn: 128,
                tm: 8,
                tn: 8,
                ..staged
            };
            let k_groups = if tiles128 >= SPLIT_K_MIN_WORKGROUPS {
                1
            } else {
                split_k_groups(w, &huge, 2, SPLIT_K_MIN_WORKGROUPS)
            };
            // Short K (the 0.5B's k = 896 gate/up, 14 slabs) lost 11 % of the 0.5B prefill.
            if w.k / (huge.bk * k_groups) >= F16_HUGE_TILE_MIN_SLABS {
                c.push(GemmSchedule { k_groups, ..huge });
            }
        }
        // 64×64 tiles, split four ways across the grid where they leave fewer than 256
        // workgroups (on the H200 1.3-1.5x faster than 32×32 tiles split twice, at m = 64 and
        // for the N = 256 projections; no split at 256 tiles, where two groups were 12 %
        // slower); grids of fewer than 32 such tiles take 32×32 tiles split up to 8 ways
        // (docs/measurements/2026-12-02b-h200.md).
        let tiles64 = w.m.div_ceil(64) * w.n.div_ceil(64);
        if tiles64 >= F16_BIG_TILE_MIN_TILES {
            let big = GemmSchedule {
                bm: 64,
                bn: 64,
                tm: 4,
                tn: 4,
                ..staged
            };
            let k_groups = if tiles64 >= SPLIT_K_MIN_WORKGROUPS {
                1
            } else {
                split_k_groups(w, &big, 4, tiles64 * 4)
            };
            c.push(GemmSchedule { k_groups, ..big });
        }
        for (bm, bn, tm, tn) in [(32, 32, 2, 2), (16, 32, 1, 2)] {
            let small = GemmSchedule {
                bm,
                bn,
                tm,
                tn,
                ..staged
            };
            let k_groups = split_k_groups(w, &small, 8, F16_SMALL_GRID_TARGET);
            c.push(GemmSchedule { k_groups, ..small });
        }
        c.push(GemmSchedule {
            bm: 64,
            bn: 64,
            tm: 4,
            tn: 4,
            ..staged
        });
    } else {
        let fma32 = GemmSchedule {
            math: Math::FmaF32,
            accumulate: Precision::F32,
            vector_width: 1,
            stage_a: true,
            stage_b: true,
            ..base
        };
        // The biggest tile whose grid still fills the GPU (measured on the H200: each step
        // down in tile size was 1.3-2.1x faster where the bigger tile left too few
        // workgroups, and slower where it did not).
        let tiles = [
            (128, 128, 8, 8, BIG_TILE_MIN_WORKGROUPS),
            (64, 64, 4, 4, BIG_TILE_MIN_WORKGROUPS / 2),
            (32, 32, 2, 2, BIG_TILE_MIN_WORKGROUPS / 4),
        ];
        for (bm, bn, tm, tn, min_groups) in tiles {
            if w.m.div_ceil(bm) * w.n.div_ceil(bn) >= min_groups {
                c.push(GemmSchedule {
                    bm,
                    bn,
                    bk: if w.m <= 64 || bm == 32 { 64 } else { 32 },
                    tm,
                    tn,
                    ..fma32
                });
            }
        }
        c.push(GemmSchedule {
            bm: 16,
            bn: 32,
            bk: 64,
            tm: 1,
            tn: 2,
            ..fma32
        });
        c.push(GemmSchedule {
            bm: 64,
            bn: 64,
            bk: 32,
            tm: 4,
            tn: 4,
            ..fma32
        });
        c.push(GemmSchedule {
            bm: 32,
            bn: 64,
            bk: 32,
            tm: 2,
            tn: 4,
            ..fma32
        });
        c.push(GemmSchedule {
            bm: 16,
            bn: 64,
            bk: 32,
            tm: 1,
            tn: 4,
            ..fma32
        });
    }
    c.push(GemmSchedule {
        bm: 1,
        bn: 64,
        bk: 32,
        ..base
    });
    c.push(GemmSchedule {
        math: Math::FmaF32,
        accumulate: Precision::F32,
        vector_width: 1,
        bm: 1,
        bn: 64,
        bk: 32,
        ..base
    });
    c
}

/// The device layout of a weight tensor of `format` that the GEMM defaults read, where the
/// tuner has not chosen one: the aligned layout (`dequant::layout`) where shared memory is
/// slow (Mali: its 16-byte-aligned bodies let Mesa merge the weight loads into 16-byte ones,
/// docs/measurements/2026-12-02c-mali-shim26-repack.md); for Q6_K also on GPUs whose loads are
/// not lane-serial (on the H200 the 3B's Q6_K ffn_down ran 9 % faster at M = 512 and 11 % at
/// M = 64 with the tuned schedule: its 210-byte GGUF blocks are only 2-byte aligned,
/// docs/measurements/2026-12-03e-h200.md); else the GGUF layout (CPU implementations, where
/// the presets were tuned on it and nothing was measured to favour the repack).
pub fn default_layout(format: WeightFormat, caps: &DeviceCaps) -> WeightLayout {
    let has_aligned = matches!(
        format,
        WeightFormat::Q8_0 | WeightFormat::Q5_0 | WeightFormat::Q6K
    );
    let q6k_on_a_gpu = format == WeightFormat::Q6K && !caps.lane_serial_memory;
    if has_aligned && (caps.shared_memory_is_slow || q6k_on_a_gpu) {
        WeightLayout::Aligned
    } else {
        WeightLayout::Gguf
    }
}

/// The default schedule of `w` on `caps` (see the module docs).
pub fn default_schedule(w: &GemmWorkload, caps: &DeviceCaps) -> GemmSchedule {
    // The rules see the grid of weight rows (a SwiGLU GEMM's tile covers bn/2 outputs); the
    // epilogue only rules out what it cannot take (an odd tn).
    let rows = GemmWorkload {
        n: w.weight_rows(),
        epilogue: Default::default(),
        ..*w
    };
    let c = candidates(&rows, caps);
    // SwiGLU needs an even tn: a rule's tile with an odd tn is taken with tn and bn doubled
    // (the same threads, each with its gate and its up columns) before the next rule. Where
    // registers are scarce (a budget of 64 or less) the rows are halved too, so a thread keeps
    // as many accumulators as the unfused tile: Mesa 26.1.6's Valhall compiler spills the
    // fused Q4_K 4×2 tile (14 spills, m = 64, 11008×2048) and not the 2×2 one.
    let scarce = caps.register_budget <= 64;
    let widened = |s: &GemmSchedule| {
        (s.tn % 2 == 1).then(|| {
            let halve = scarce && s.tm % 2 == 0 && s.bm % 2 == 0;
            GemmSchedule {
                tn: 2 * s.tn,
                bn: 2 * s.bn,
                tm: if halve { s.tm / 2 } else { s.tm },
                bm: if halve { s.bm / 2 } else { s.bm },
                ..*s
            }
        })
    };
    let tries = c
        .iter()
        .flat_map(|s| std::iter::once(*s).chain(widened(s).filter(|_| !w.epilogue.is_none())));
    if let Some(s) = tries.clone().find(|s| s.validate(w, caps).is_ok()) {
        return s;
    }
    search_space(w, caps)
        .into_iter()
        .next()
        .unwrap_or(*c.last().expect("at least one candidate"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequant::WeightFormat;
    use crate::templates::gemm::ActType;

    fn gemm(m: u32, n: u32, k: u32) -> GemmWorkload {
        GemmWorkload {
            m,
            n,
            k,
            act: ActType::F32,
            weight: WeightFormat::Q4K,
            layout: crate::dequant::WeightLayout::Gguf,
            bias: false,
            epilogue: Default::default(),
            rms_norm_eps_bits: None,
        }
    }

    #[test]
    fn mali_q8_0_aligned_takes_five_rows_per_thread_and_shared_headers() {
        // Without integer dot products (with them the int8 rule below comes first).
        let caps = DeviceCaps {
            integer_dot_product: false,
            ..DeviceCaps::mali_g610()
        };
        for (n, k, k_unroll) in [
            (2048, 2048, 4),
            (256, 2048, 4),
            (11008, 2048, 4),
            (2048, 11008, 4),
            (896, 896, 2),
        ] {
            let w = GemmWorkload {
                weight: WeightFormat::Q8_0,
                layout: WeightLayout::Aligned,
                ..gemm(512, n, k)
            };
            let s = default_schedule(&w, &caps);
            assert_eq!(
                (s.bm, s.tm, s.tn, s.k_unroll, s.share_headers),
                (20, 5, 1, k_unroll, true),
                "{n}x{k}: {s:?}"
            );
            // In f32 math with X broadcast as f16 pairs (which is what fits 5 rows).
            assert_eq!((s.math, s.pack_a_f16), (Math::FmaF32, true), "{s:?}");
            // The fused SwiGLU GEMM takes 2 rows of 2 columns (as many accumulators as the
            // unfused 4×1) without shared headers.
            let fused = GemmWorkload {
                epilogue: super::super::workload::Epilogue::SwiGlu,
                ..w
            };
            let s = default_schedule(&fused, &caps);
            assert_eq!((s.tm, s.tn, s.share_headers), (2, 2, false), "{s:?}");
            // Other devices' defaults do not share headers.
            let desk = default_schedule(&w, &DeviceCaps::desktop_all_features());
            assert!(!desk.share_headers && !desk.shuffle_a, "{desk:?}");
        }
    }

    #[test]
    fn mali_prefill_gemms_take_staged_int8_tiles_in_half_units() {
        let caps = DeviceCaps::mali_g610();
        for (m, n, k, weight) in [
            (512, 2048, 2048, WeightFormat::Q4K),
            (64, 256, 2048, WeightFormat::Q4K),
            (512, 11008, 2048, WeightFormat::Q4K),
            (64, 2048, 11008, WeightFormat::Q6K),
            (512, 896, 896, WeightFormat::Q5_0),
            (32, 4864, 896, WeightFormat::Q5_0),
        ] {
            let w = GemmWorkload {
                weight,
                layout: default_layout(weight, &caps),
                ..gemm(m, n, k)
            };
            let s = default_schedule(&w, &caps);
            assert_eq!(s.math, Math::Int8Dot, "{m}x{n}x{k}: {s:?}");
            assert!(s.half_units && s.stage_a && s.stage_b, "{s:?}");
            // 4×4 micro-tiles in 64×64 tiles from 64 rows, 2×4 in 16×32 below.
            let want = if m >= INT8_WIDE_TILE_MIN_ROWS {
                (64, 64, 4, 4)
            } else {
                (16, 32, 2, 4)
            };
            assert_eq!((s.bm, s.bn, s.tm, s.tn), want, "{s:?}");
            // The 4×4 tile's 128 W units per slab on 256 threads are staged two threads per
            // unit; the 2×4 tile's 64 on 64 threads one per thread.
            assert_eq!(s.split_w_staging(), s.tm == 4, "{s:?}");
            // Q4_K's 4×4 tile stages its first column pair as packed nibbles.
            let packed = if s.tm == 4 && weight == WeightFormat::Q4K {
                MALI_PACKED_W_PAIRS
            } else {
                0
            };
            assert_eq!(s.packed_w, packed, "{s:?}");
            // The fused SwiGLU GEMM keeps it (tn is even).
            let fused = GemmWorkload {
                epilogue: super::super::workload::Epilogue::SwiGlu,
                ..w
            };
            assert!(default_schedule(&fused, &caps).half_units);
        }
        // Decode-like rows, few rows, float and Q8_0 weights, and devices without integer
        // dot products or with fast shuffles keep their float rules.
        let q4k = gemm(512, 2048, 2048);
        let no_dot = DeviceCaps {
            integer_dot_product: false,
            ..caps.clone()
        };
        let f16_weights = GemmWorkload {
            weight: WeightFormat::F16,
            ..q4k
        };
        let q8_0 = GemmWorkload {
            weight: WeightFormat::Q8_0,
            layout: WeightLayout::Aligned,
            ..q4k
        };
        for (w, caps) in [
            (gemm(1, 2048, 2048), &caps),
            (gemm(8, 2048, 2048), &caps),
            (f16_weights, &caps),
            (q8_0, &caps),
            (q4k, &no_dot),
            (q4k, &DeviceCaps::lavapipe()),
            (q4k, &DeviceCaps::desktop_all_features()),
        ] {
            let s = default_schedule(&w, caps);
            assert_ne!(s.math, Math::Int8Dot, "{w:?} {s:?}");
        }
    }

    #[test]
    fn lane_serial_devices_take_wide_tiles_with_broadcast_x_rows() {
        let caps = DeviceCaps::lavapipe();
        // (m, n, k, weight) → (bm, tm, tn): the 0.5B's GEMMs at ubatch 32, the output
        // projection of one row, a fused SwiGLU GEMM.
        for (m, n, k, weight, want) in [
            (32, 4864, 896, WeightFormat::Q5_0, (16, 4, 8)),
            (32, 896, 4864, WeightFormat::Q4K, (16, 4, 8)),
            (32, 896, 4864, WeightFormat::Q6K, (16, 4, 8)),
            (32, 128, 896, WeightFormat::Q5_0, (16, 4, 8)),
            (512, 2048, 2048, WeightFormat::Q8_0, (16, 4, 8)),
            (1, 151936, 896, WeightFormat::Q8_0, (1, 1, 8)),
        ] {
            let w = GemmWorkload {
                weight,
                layout: default_layout(weight, &caps),
                ..gemm(m, n, k)
            };
            let s = default_schedule(&w, &caps);
            assert!(s.shuffle_a && s.wide_loads, "{m}x{n}x{k}: {s:?}");
            assert_eq!(s.math, Math::FmaF32, "{m}x{n}x{k}: {s:?}");
            assert_eq!((s.bm, s.tm, s.tn), want, "{m}x{n}x{k}: {s:?}");
            assert_eq!(s.bn, caps.subgroup_size * s.tn, "{s:?}");
        }
        // The fused gate/up GEMM keeps the wide tile (an even tn).
        let fused = GemmWorkload {
            weight: WeightFormat::Q5_0,
            layout: WeightLayout::Aligned,
            epilogue: super::super::workload::Epilogue::SwiGlu,
            ..gemm(32, 4864, 896)
        };
        assert_eq!(default_schedule(&fused, &caps).tn, 8);
        // The same device without the lane-serial rule keeps the Mali tile.
        let gpu_like = DeviceCaps {
            lane_serial_memory: false,
            ..DeviceCaps::lavapipe()
        };
        let s = default_schedule(&gemm(32, 4864, 896), &gpu_like);
        assert_eq!(s.tn, 1, "{s:?}");
    }

    #[test]
    fn native_f16_gpus_get_packed_f16_with_f32_accumulation_and_the_tile_that_fills_the_grid() {
        let caps = DeviceCaps::desktop_all_features();
        assert!(caps.float16 && !caps.emulated_f16 && !caps.shared_memory_is_slow);
        // (m, n) → expected (bm, bn): 64×64 where its grid has ≥ 128 workgroups, 32×32 where
        // that grid has ≥ 64, else 16×32.
        // (m, n, k) → expected (bm, bn, k_groups).
        for (m, n, k, want) in [
            (512, 11008, 2048, (128, 128, 1)),
            (512, 2048, 11008, (128, 128, 2)),
            (512, 2048, 2048, (128, 128, 2)),
            (512, 256, 2048, (64, 64, 4)),
            (256, 2048, 2048, (128, 128, 2)),
            (128, 2048, 2048, (64, 64, 4)),
            // The 0.5B's gate/up: 14 slabs of K are too few for the big tile.
            (512, 4864, 896, (64, 64, 1)),
            (64, 11008, 2048, (64, 64, 4)),
            (64, 2048, 11008, (64, 64, 4)),
            (64, 2048, 2048, (64, 64, 4)),
            (64, 256, 2048, (32, 32, 8)),
            // Short K keeps 4 slabs per group.
            (64, 256, 512, (32, 32, 2)),
        ] {
            let s = default_schedule(&gemm(m, n, k), &caps);
            assert_eq!(s.math, Math::FmaF16Packed, "{m}x{n}");
            assert_eq!(s.accumulate, Precision::F32, "{m}x{n}");
            assert!(s.stage_a && s.stage_b && s.bk == 64, "{m}x{n}: {s:?}");
            assert!(s.fold_per_slab, "{m}x{n}: {s:?}");
            assert_eq!((s.bm, s.bn, s.k_groups), want, "{m}x{n}x{k}");
        }
        // Emulated f16 (CPU implementations) keeps f32 math.
        let cpu = DeviceCaps {
            emulated_f16: true,
            ..DeviceCaps::desktop_all_features()
        };
        assert_eq!(
            default_schedule(&gemm(512, 2048, 2048), &cpu).math,
            Math::FmaF32
        );
    }
}
