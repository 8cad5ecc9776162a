//! The candidate schedules of a GEMM workload on a device: what the tuner searches.
//!
//! The space is the product of a few axes with cheap pruning rules (no tile much larger than
//! the matrix, staging only where a tile is shared by several threads, split-K only when there
//! are few output rows), filtered by [`GemmSchedule::validate`]. Every schedule returned here
//! instantiates.

use super::schedule::{GemmSchedule, Math, Precision};
use super::workload::GemmWorkload;
use crate::caps::DeviceCaps;

/// (math, accumulation, vector width) combinations worth trying on a device.
pub(crate) fn math_variants(w: &GemmWorkload, caps: &DeviceCaps) -> Vec<(Math, Precision, u32)> {
    let mut v = vec![
        (Math::FmaF32, Precision::F32, 1),
        (Math::FmaF32, Precision::F32, 4),
    ];
    if caps.float16 {
        v.push((Math::FmaF16Packed, Precision::F32, 2));
        v.push((Math::FmaF16Packed, Precision::F16, 2));
        v.push((Math::FmaF16Packed, Precision::F16, 4));
    }
    if caps.integer_dot_product && w.weight.is_quantized() {
        v.push((Math::Int8Dot, Precision::F32, 4));
    }
    v
}

/// Tile grids below this many workgroups also get split-K-across-the-grid candidates
/// (`k_groups` 2, 4, 8 while the split grid stays below twice this).
pub const SPLIT_K_TILES: u32 = 256;

fn pow2_ceil(x: u32) -> u32 {
    x.max(1).next_power_of_two()
}

/// All candidate schedules, each accepted by `validate` for this workload and device.
pub fn search_space(w: &GemmWorkload, caps: &DeviceCaps) -> Vec<GemmSchedule> {
    // A shuffle_a candidate, and its twin broadcasting X as packed f16 pairs (f32 math).
    let push_shuffled = |out: &mut Vec<GemmSchedule>, s: GemmSchedule| {
        if s.validate(w, caps).is_ok() {
            out.push(s);
            let packed = GemmSchedule {
                pack_a_f16: true,
                ..s
            };
            if packed.validate(w, caps).is_ok() {
                out.push(packed);
            }
        }
    };
    let m_cap = pow2_ceil(w.m);
    let n_cap = pow2_ceil(w.weight_rows()).min(256);
    let splits: &[u32] = if w.m <= 16 { &[1, 4] } else { &[1] };
    let mut out = Vec::new();
    for (math, accumulate, vector_width) in math_variants(w, caps) {
        for tm in [1, 2, 4, 8].into_iter().filter(|&t| t <= m_cap) {
            for tn in [1, 2, 4, 8] {
                // Tiny micro-tiles reuse nothing (except in matrix-vector shapes); big ones
                // are kept only where the register budget allows them (`validate`).
                if tm * tn == 1 && m_cap > 1 {
                    continue;
                }
                for &split_k in splits {
                    for threads in [64, 256] {
                        let per_split = threads / split_k;
                        let mut wg_m = 1;
                        while wg_m <= per_split {
                            let wg_n = per_split / wg_m;
                            let (bm, bn) = (wg_m * tm, wg_n * tn);
                            wg_m *= 2;
                            if bm > m_cap || bn > n_cap || wg_n < 8 {
                                continue;
                            }
                            for (stage_a, stage_b) in
                                [(false, false), (true, false), (false, true), (true, true)]
                            {
                                // Without staging bk only sets the units per loop iteration.
                                let bks: &[u32] =
                                    if stage_a || stage_b { &[32, 64] } else { &[64] };
                                for bk in bks.iter().map(|u| u * split_k) {
                                    // Staging pays only for data several threads share.
                                    if (stage_a && wg_n == 1) || (stage_b && bm / tm == 1) {
                                        continue;
                                    }
                                    let s = GemmSchedule {
                                        bm,
                                        bn,
                                        bk,
                                        tm,
                                        tn,
                                        split_k,
                                        vector_width,
                                        stage_a,
                                        stage_b,
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
                                    // Mixed precision folding once per slab, where a
                                    // thread's slab holds several units.
                                    let folded = GemmSchedule {
                                        fold_per_slab: true,
                                        ..s
                                    };
                                    if s.units_per_slab() / s.split_k > 1
                                        && folded.validate(w, caps).is_ok()
                                    {
                                        out.push(folded);
                                    }
                                    if s.validate(w, caps).is_ok() {
                                        out.push(s);
                                        // Too few tiles to fill a GPU: also split K
                                        // across the grid.
                                        let tiles = w.m.div_ceil(bm) * w.weight_rows().div_ceil(bn);
                                        for k_groups in [2, 4, 8] {
                                            if tiles * k_groups / 2 >= SPLIT_K_TILES {
                                                break;
                                            }
                                            let g = GemmSchedule { k_groups, ..s };
                                            if g.validate(w, caps).is_ok() {
                                                out.push(g);
                                                // The last group of a tile reduces.
                                                let g = GemmSchedule {
                                                    last_group_reduces: true,
                                                    ..g
                                                };
                                                if g.validate(w, caps).is_ok() {
                                                    out.push(g);
                                                }
                                            }
                                        }
                                    }
                                    // Int8 with both operands staged, each unit taken in
                                    // halves (fits 4×4 micro-tiles in 64 registers), with
                                    // the weights staged per row as word runs or per unit.
                                    if math == Math::Int8Dot && stage_a && stage_b {
                                        for wide_loads in [true, false] {
                                            let h = GemmSchedule {
                                                half_units: true,
                                                wide_loads,
                                                ..s
                                            };
                                            if h.validate(w, caps).is_ok() {
                                                out.push(h);
                                            }
                                        }
                                    }
                                    // X shared through subgroup shuffles instead of
                                    // shared memory (it pays where shared memory is slow)
                                    // with its own bk = 4·wg_n, tried once.
                                    if !stage_a && bk == 64 {
                                        let s = GemmSchedule {
                                            bk: 4 * wg_n,
                                            shuffle_a: true,
                                            ..s
                                        };
                                        push_shuffled(&mut out, s);
                                        // With the weights read as word runs (where the
                                        // loads, not the FMAs, are the limit).
                                        let s = GemmSchedule {
                                            wide_loads: true,
                                            ..s
                                        };
                                        push_shuffled(&mut out, s);
                                        // And two slabs per K-loop iteration.
                                        let s = GemmSchedule { k_unroll: 2, ..s };
                                        push_shuffled(&mut out, s);
                                        // Sharing the iteration's group headers (aligned
                                        // Q8_0).
                                        let s = GemmSchedule {
                                            share_headers: true,
                                            ..s
                                        };
                                        push_shuffled(&mut out, s);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}
