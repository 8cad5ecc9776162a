//! Split-K across the grid, second half: the kernel that adds up the `k_groups` f32 partial
//! sums a GEMM with `k_groups > 1` wrote into its scratch buffer, adds the bias, applies the
//! epilogue and writes Y in the activation type. One thread per 4 outputs (per output where n
//! is not a multiple of 4: [`reduce_vector_width`]), read and written as vectors, one
//! dispatch for the whole GEMM (all N-slices). On the H200 at m = 64 the scalar kernel took
//! 10% of a Qwen2.5-3B prefill (docs/measurements/2026-12-03b-h200.md).
//!
//! Bindings: 0 `partials` (f32, `k_groups × m × ldy`, as the GEMM wrote them; with SwiGLU
//! `k_groups × m × 2·ldy`, each row's gate sums then its up sums), 2 `y`, 3 `bias` (when the
//! workload has one), 4 `residual` (`Epilogue::Residual`). Push constants: [`reduce_push`].
//! Grid: [`reduce_grid`].
//!
//! Its oracle is the GEMM's own CPU reference: a split GEMM and its reduce together must give
//! the GEMM's Y (the interpreter and lavapipe tests check the pair over the sampled space).

use super::interface::{GemmPush, BINDING_BIAS, BINDING_RESIDUAL, BINDING_Y};
use super::schedule::GemmSchedule;
use super::workload::{ActType, Epilogue, GemmWorkload};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type, Value};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_PARTIALS: u32 = 0;

/// Threads per workgroup of the reduce kernel (along n).
pub const REDUCE_THREADS: u32 = 64;

/// Outputs per thread of `w`'s reduce kernel: 4 where every row of Y, of the partials and of
/// the bias starts on a 16-byte boundary (n a multiple of 4), else 1.
pub fn reduce_vector_width(w: &GemmWorkload) -> u32 {
    if w.n % 4 == 0 {
        4
    } else {
        1
    }
}

/// Workgroups of `w`'s reduce kernel over `m` rows: n along x, rows along y.
pub fn reduce_grid(w: &GemmWorkload, m: u32) -> [u32; 3] {
    [
        (w.n / reduce_vector_width(w)).div_ceil(REDUCE_THREADS),
        m,
        1,
    ]
}

/// The reduce kernel's push constants: the GEMM's block over the whole width (n = w.n,
/// n_offset 0), one dispatch for all N-slices.
pub fn reduce_push(w: &GemmWorkload) -> GemmPush {
    GemmPush {
        m: w.m,
        n: w.n,
        k: w.k,
        n_offset: 0,
        ldy: w.n,
    }
}

/// f32 values of the scratch buffer a split GEMM of `m` rows needs (0 without split-K).
pub fn scratch_values(w: &GemmWorkload, s: &GemmSchedule) -> u64 {
    if s.k_groups <= 1 {
        return 0;
    }
    u64::from(s.k_groups) * u64::from(w.m) * u64::from(w.weight_rows())
}

/// The reduce kernel of a split GEMM (`s.k_groups > 1`), or a refusal.
pub fn instantiate_reduce(
    w: &GemmWorkload,
    s: &GemmSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    if s.k_groups <= 1 {
        return Err(Refusal::Schedule(
            "only a schedule with k_groups > 1 has a reduce kernel".into(),
        ));
    }
    s.validate(w, caps)?;
    if w.m > super::super::MAX_GRID_DIM {
        return Err(Refusal::Workload(format!(
            "m = {} exceeds the grid limit of the reduce kernel",
            w.m
        )));
    }
    let kernel = super::super::compile(&reduce_ir(w, s), caps)?;
    debug_assert_eq!(kernel.meta.push_constant_bytes, GemmPush::BYTES);
    Ok(kernel)
}

/// The reduce kernel's IR.
pub fn reduce_ir(w: &GemmWorkload, s: &GemmSchedule) -> Module {
    let vw = reduce_vector_width(w);
    let b = KernelBuilder::new(
        format!(
            "gemm_split_k_reduce_g{}_v{vw}_{}{}{}",
            s.k_groups,
            match w.act {
                ActType::F32 => "f32",
                ActType::F16 => "f16",
            },
            if w.bias { "_bias" } else { "" },
            super::schedule::epilogue_suffix(w.epilogue)
        ),
        [REDUCE_THREADS, 1, 1],
    );
    let act = match w.act {
        ActType::F32 => Scalar::F32,
        ActType::F16 => Scalar::F16,
    };
    // `Type::vec` of 1 lane is the scalar itself.
    let (f32v, actv) = (Type::vec(Scalar::F32, vw), Type::vec(act, vw));
    let partials = b.buffer(BINDING_PARTIALS, "partials", f32v, Access::ReadOnly);
    let y = b.buffer(BINDING_Y, "y", actv, Access::WriteOnly);
    let bias = w.bias.then(|| b.model_buffer(BINDING_BIAS, "bias", f32v));
    let residual = (w.epilogue == Epilogue::Residual)
        .then(|| b.buffer(BINDING_RESIDUAL, "residual", actv, Access::ReadOnly));
    let swiglu = w.epilogue == Epilogue::SwiGlu;
    // The GEMM's push-constant block: the same bytes drive both kernels.
    let p_m = b.push_field("m", Type::U32);
    let p_n = b.push_field("n", Type::U32);
    let _p_k = b.push_field("k", Type::U32);
    let p_noff = b.push_field("n_offset", Type::U32);
    let p_ldy = b.push_field("ldy", Type::U32);
    // Columns, offsets and strides in vectors of `vw` (n, n_offset and ldy are multiples).
    let shift = vw.trailing_zeros();
    let (m, n, n_offset, ldy) = (
        b.push(p_m),
        b.shri(b.push(p_n), shift),
        b.shri(b.push(p_noff), shift),
        b.shri(b.push(p_ldy), shift),
    );
    let row = b.builtin(Builtin::WorkgroupId(1));
    let col = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), REDUCE_THREADS),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    b.if_(b.logical_and(b.lt(row, m), b.lt(col, n)), || {
        let ycol = b.add(n_offset, col);
        let stride = if swiglu { b.add(ldy, ldy) } else { ldy };
        let at = |g: u32| b.add(b.mul(b.add(b.muli(m, g), row), stride), ycol);
        // Groups in order, as the CPU reference adds them.
        let sum_from = |shift: Value| {
            let mut sum = b.load(partials, b.add(at(0), shift));
            for g in 1..s.k_groups {
                sum = b.add(sum, b.load(partials, b.add(at(g), shift)));
            }
            sum
        };
        let mut sum = sum_from(b.c_u32(0));
        if let Some(bias) = bias {
            sum = b.add(sum, b.load(bias, ycol));
        }
        if swiglu {
            sum = super::super::eltwise::swiglu(&b, sum, sum_from(ldy));
        }
        let out_at = b.add(b.mul(row, ldy), ycol);
        if let Some(r) = residual {
            sum = b.add(sum, b.convert(b.load(r, out_at), f32v));
        }
        b.store(y, out_at, b.convert(sum, actv));
    });
    b.finish()
}
