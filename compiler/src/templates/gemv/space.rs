//! The candidate schedules of a GEMV workload on a device, and the rule-based default.

use super::schedule::{GemvSchedule, Reduce};
use crate::caps::DeviceCaps;
use crate::templates::gemm::{Epilogue, GemmWorkload, Math, Precision};

/// Every candidate schedule, each accepted by `validate` for this workload and device.
pub fn search_space(w: &GemmWorkload, caps: &DeviceCaps) -> Vec<GemvSchedule> {
    let mut maths = vec![Math::FmaF32];
    if caps.float16 {
        maths.push(Math::FmaF16Packed);
    }
    if caps.integer_dot_product {
        maths.push(Math::Int8Dot);
    }
    let mut reduces = vec![Reduce::Shared];
    if caps.subgroup_arithmetic {
        reduces.extend([Reduce::Subgroup, Reduce::OneSubgroup]);
    }
    let mut out = Vec::new();
    for math in maths {
        for threads in [8, 16, 32, 64, 128, 256] {
            for cols in [1, 2, 4, 8] {
                for (chunks_per_thread, units_per_thread) in
                    [(2, 1), (4, 1), (8, 1), (8, 2), (8, 4)]
                {
                    for vector_width in [1, 4] {
                        for &reduce in &reduces {
                            for (dot_first, quad_loads, bit_floats) in [
                                (false, false, false),
                                (true, false, false),
                                (false, true, false),
                                (true, true, false),
                                (true, false, true),
                                (true, true, true),
                            ] {
                                let s = GemvSchedule {
                                    threads,
                                    cols,
                                    chunks_per_thread,
                                    units_per_thread,
                                    vector_width,
                                    reduce,
                                    accumulate: Precision::F32,
                                    math,
                                    dot_first,
                                    quad_loads,
                                    bit_floats,
                                    early_loads: false,
                                    // With the one-subgroup reduction, a workgroup of several
                                    // subgroups is that many column groups.
                                    column_groups: if reduce == Reduce::OneSubgroup {
                                        (threads / caps.subgroup_size.max(1)).max(1)
                                    } else {
                                        1
                                    },
                                };
                                if s.validate(w, caps).is_ok() {
                                    out.push(s);
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

/// Threads of the desktop default's workgroup.
const DESKTOP_THREADS: u32 = 128;

/// The desktop default's threads and chunks per thread for a row of `units` 32-element units:
/// 128 threads, and the most chunks per thread (the fewest threads sharing a unit and its
/// scales) with which one loop step still gives every thread a piece of the row, else two
/// (the most threads a row of few units can keep busy). Measured on an H100 over whole decode
/// steps (2026-12-06d): 128 threads against 64 with the chunks unchanged lifted Qwen2.5-0.5B
/// (K = 896 and 4864) 6-15 %; on the 3B's K = 2048 that left half the threads idle (no gain),
/// which four chunks per thread (two threads per unit) fills.
fn desktop_threads(units: u32) -> (u32, u32) {
    let chunks = [8, 4]
        .into_iter()
        .find(|&c| units * (8 / c) >= DESKTOP_THREADS)
        .unwrap_or(2);
    (DESKTOP_THREADS, chunks)
}

/// SwiGLU output columns from which the desktop default takes four columns per workgroup.
const WIDE_SWIGLU_COLUMNS: u32 = 8192;

/// Output columns from which a GEMV is a vocabulary projection (the output layer).
const VOCABULARY_COLUMNS: u32 = 65536;

/// Depth (K) from which a decode GEMV is an FFN down projection's (the 3B's 11008).
const DEEP_K: u32 = 8192;

/// The desktop GPU's int8 decode GEMV for deep rows (an FFN's down projection), where the
/// device has integer dot products and the weights are quantized: each thread quantizes its
/// 32-element units of X to 8 bits (ggml's Q8_1) and takes packed 4-element dot products, far
/// fewer instructions per weight than converting every quant to f32, with 128 threads and four
/// columns. Measured on an H100 (2026-12-06e): the 3B's down GEMV (K = 11008) 21.8 → 15.8 µs
/// a call (Q4_K, `--profile`); over whole 3B decode steps, with the vocabulary projection's
/// four columns, 317-319 → 332-335 tok/s against the f32 default (call AD, three interleaved
/// rounds), and 313-317 against 298-306 with int8 also on the gate/up and vocabulary GEMVs
/// (call AG: those were faster alone under `--profile`, slower in the replayed step).
/// Shallower rows (the 0.5B's K = 4864, every K = 2048 GEMV) keep the f32 default. The
/// activations' rounding is ggml's own (llama.cpp's integer-dot GEMVs quantize them the same
/// way), checked against the CPU reference with the activations quantized as the kernel does.
fn desktop_int8(w: &GemmWorkload, caps: &DeviceCaps) -> Option<GemvSchedule> {
    let desktop = !caps.lane_serial_memory && !caps.shared_memory_is_slow;
    if !desktop || !caps.integer_dot_product || !w.weight.is_quantized() || w.m != 1 || w.k < DEEP_K
    {
        return None;
    }
    let s = GemvSchedule {
        threads: 128,
        cols: 4,
        chunks_per_thread: 8,
        units_per_thread: 1,
        vector_width: 1,
        reduce: if caps.subgroup_arithmetic {
            Reduce::Subgroup
        } else {
            Reduce::Shared
        },
        accumulate: Precision::F32,
        math: Math::Int8Dot,
        dot_first: false,
        quad_loads: false,
        column_groups: 1,
        bit_floats: false,
        early_loads: false,
    };
    s.validate(w, caps).is_ok().then_some(s)
}

/// Output columns up to which panvk's default GEMV sums its lanes through workgroup memory:
/// a dispatch there allocates its workgroup memory for every workgroup instance (Mesa 25.0.7:
/// the power-of-two-rounded grid times the core-id range, 19 on RK3588), so 128 bytes per
/// 2-column workgroup at 32768 columns is at most 128 B × 16384 × 32 = 64 MiB. Wider outputs
/// (vocabularies: 151936, 262144 columns) keep the shuffle reduction, which declares none.
pub const SHARED_REDUCE_MAX_COLUMNS: u32 = 32768;

/// The schedule used when the workload is untuned: f32 math, subgroup reduction where the
/// device has it, a thread per unit where K has enough units to
/// occupy 64 threads, else threads sharing units.
pub fn default_schedule(w: &GemmWorkload, caps: &DeviceCaps) -> GemvSchedule {
    let units = w.k / 32;
    if caps.lane_serial_memory && caps.subgroup_arithmetic {
        // CPU implementations (llvmpipe): a workgroup is a function call and a barrier a
        // coroutine switch, so one subgroup per workgroup (no barrier), a thread per unit and
        // 8 columns per workgroup (8x fewer workgroups, each X chunk feeding 8 rows). Two
        // units per thread with wide loads measured 3-10x slower on llvmpipe (Q4_K/Q6_K/Q8_0).
        let s = GemvSchedule {
            threads: caps.subgroup_size.clamp(8, 64).next_power_of_two(),
            cols: if w.m > 4 { 4 } else { 8 },
            chunks_per_thread: 8,
            units_per_thread: 1,
            vector_width: 4,
            reduce: Reduce::Subgroup,
            accumulate: Precision::F32,
            math: Math::FmaF32,
            dot_first: false,
            quad_loads: false,
            column_groups: 1,
            bit_floats: false,
            early_loads: false,
        };
        if s.validate(w, caps).is_ok() {
            return s;
        }
    }
    if caps.shared_memory_is_slow && caps.subgroup_arithmetic {
        // Workgroup memory is ordinary memory allocated per dispatch (panvk): one subgroup
        // per workgroup, a thread per unit (a pair at one row of X, below), and two weight
        // rows per workgroup at one row of X
        // (one where SwiGLU pairs gate and up rows, or X has more rows): on Mesa 25.0.7's
        // Valhall compiler 4 columns spill (Q6_K 24:378, Q5_0 9:26), 2 do not, and 1 runs
        // two threads in flight. Where shuffles are loops (panvk), a subgroup add is a loop
        // per butterfly step that runs once per distinct source lane (16): the 16-lane,
        // 2-column sum of a decode GEMV is 24 such loops, as many instructions as the whole
        // K loop of a 4864-deep row (docs/measurements/2026-12-05-mali-gemv-reduce.md). So
        // the sums go through workgroup memory (128 bytes), except on the widest outputs
        // (vocabulary projections), whose dispatch would allocate hundreds of MiB of it.
        let single_rows = w.m == 1 && w.epilogue.rows_per_column() == 1;
        let reduce = if caps.slow_subgroup_shuffle && w.n <= SHARED_REDUCE_MAX_COLUMNS {
            Reduce::Shared
        } else {
            Reduce::OneSubgroup
        };
        // Two units per thread at one row of X, where the row has an even number of units:
        // a unit pair's header, scale and high-bit words are read once for both (Q4_K's
        // pair shares its 32 quant bytes, which one unit alone reads whole), and the pair's
        // index arithmetic (bitwise operations and shifts, which Valhall runs on its SFU)
        // is done once. Compiler estimates (Mesa 25.0.7 and 26.1.6, no board measurement):
        // docs/measurements/2026-12-06b-mali-decode-gemv.md.
        let units_per_thread = if w.m == 1 && units % 2 == 0 { 2 } else { 1 };
        // A RoPE quad's four rows at one row of X: one unit per thread and two threads per
        // unit. Mesa 25.0.7's compiler (shim, K = 2048, 16 threads, one column) spills them
        // with two units per thread (Q4_K 17:230 spills:fills, Q6_K 43:660) and Q6_K still
        // with one unit and eight chunks (13:187); one unit of four chunks spills none of
        // Q4_K, Q8_0 and Q6_K (docs/measurements/2026-12-07b-rope-in-projection.md).
        let quads = matches!(w.epilogue, Epilogue::RopeKv(_));
        let s = GemvSchedule {
            threads: caps.subgroup_size,
            cols: if single_rows { 2 } else { 1 },
            chunks_per_thread: if quads { 4 } else { 8 },
            units_per_thread: if quads { 1 } else { units_per_thread },
            vector_width: if w.m <= 2 { 4 } else { 1 },
            reduce,
            accumulate: Precision::F32,
            math: Math::FmaF32,
            // Load/store-bound on Valhall: dotting first halved occupancy (2 -> 1 threads on
            // Mesa 25.0.7) and spilled Q6_K (8:38) for no arithmetic that mattered. Quad
            // loads cut load/store cycles (49 -> 31) but also halve occupancy: unmeasured on a
            // board, so not the default.
            dot_first: false,
            quad_loads: false,
            column_groups: 1,
            bit_floats: false,
            early_loads: false,
        };
        if s.validate(w, caps).is_ok() {
            return s;
        }
    }
    if let Some(s) = desktop_int8(w, caps) {
        return s;
    }
    // Four columns for the wide gate/up GEMV of a decode step (each column is a gate row and an
    // up row, so eight weight rows share each X chunk): on an H100 the 3B's 11008 × 2048 Q4_K
    // SwiGLU GEMV ran at 4273 GFLOP/s with 4 columns against 3337 with 2, the best of 24
    // schedules; the narrower shapes measured best at 2 (2026-12-05c-h100-decode-replay.md).
    let wide_swiglu = w.epilogue == Epilogue::SwiGlu && w.n >= WIDE_SWIGLU_COLUMNS;
    // Four columns for a vocabulary projection too: an H100 ran the 3B's 151936 × 2048 Q6_K
    // output GEMV in 0.209 ms against 0.267 with two (2026-12-06e, call AD), and in f32 faster
    // than in int8 (0.210 against 0.235 ms, call AG).
    let vocabulary = w.n >= VOCABULARY_COLUMNS;
    let (threads, chunks_per_thread) = desktop_threads(units);
    // A RoPE quad is four weight rows: one column per workgroup reads as many rows as the
    // narrow GEMVs' two columns of two (unmeasured on its own; it replaces the Q/K/V GEMV's
    // two single-row columns).
    let quads = matches!(w.epilogue, Epilogue::RopeKv(_));
    let s = GemvSchedule {
        threads,
        cols: if w.m > 4 || quads {
            1
        } else if (wide_swiglu || vocabulary) && w.m == 1 {
            4
        } else {
            2
        },
        chunks_per_thread,
        units_per_thread: 1,
        vector_width: 4,
        reduce: if caps.subgroup_arithmetic {
            Reduce::Subgroup
        } else {
            Reduce::Shared
        },
        accumulate: Precision::F32,
        math: Math::FmaF32,
        // Quantized weights dotted with X before their scales are applied (two operations per
        // weight fewer): on an H100 over whole decode steps (2026-12-06d, three rounds) the
        // 3B's decode rose 3-6 % with it, the 0.5B's stayed within noise. Quad loads did not
        // help there (call U). Formats without quants (F16, F32) cannot dot first.
        dot_first: w.weight.is_quantized(),
        quad_loads: false,
        column_groups: 1,
        bit_floats: false,
        early_loads: false,
    };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    let plain = GemvSchedule {
        dot_first: false,
        ..s
    };
    if plain.validate(w, caps).is_ok() {
        return plain;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}
