//! Split-K across the grid, second half: the kernel that adds up the `k_groups` f32 partial
//! sums a GEMM with `k_groups > 1` wrote into its scratch buffer, adds the bias and writes Y in
//! the activation type. One thread per output, one dispatch for the whole GEMM (all N-slices).
//!
//! Bindings: 0 `partials` (f32, `k_groups × m × ldy`, as the GEMM wrote them), 2 `y`, 3 `bias`
//! (when the workload has one). Push constants: [`reduce_push`]. Grid: [`reduce_grid`].
//!
//! Its oracle is the GEMM's own CPU reference: a split GEMM and its reduce together must give
//! the GEMM's Y (the interpreter and lavapipe tests check the pair over the sampled space).

use super::interface::{GemmPush, BINDING_BIAS, BINDING_Y};
use super::schedule::GemmSchedule;
use super::workload::{ActType, GemmWorkload};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_PARTIALS: u32 = 0;

/// Threads per workgroup of the reduce kernel (along n).
pub const REDUCE_THREADS: u32 = 64;

/// Workgroups of the reduce kernel for `m` rows of `n` columns: n along x, rows along y.
pub fn reduce_grid(m: u32, n: u32) -> [u32; 3] {
    [n.div_ceil(REDUCE_THREADS), m, 1]
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
    u64::from(s.k_groups) * u64::from(w.m) * u64::from(w.n)
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
    let b = KernelBuilder::new(
        format!(
            "gemm_split_k_reduce_g{}_{}{}",
            s.k_groups,
            match w.act {
                ActType::F32 => "f32",
                ActType::F16 => "f16",
            },
            if w.bias { "_bias" } else { "" }
        ),
        [REDUCE_THREADS, 1, 1],
    );
    let act = match w.act {
        ActType::F32 => Scalar::F32,
        ActType::F16 => Scalar::F16,
    };
    let partials = b.buffer(BINDING_PARTIALS, "partials", Type::F32, Access::ReadOnly);
    let y = b.buffer(BINDING_Y, "y", Type::scalar(act), Access::WriteOnly);
    let bias = w
        .bias
        .then(|| b.buffer(BINDING_BIAS, "bias", Type::F32, Access::ReadOnly));
    // The GEMM's push-constant block: the same bytes drive both kernels.
    let p_m = b.push_field("m", Type::U32);
    let p_n = b.push_field("n", Type::U32);
    let _p_k = b.push_field("k", Type::U32);
    let p_noff = b.push_field("n_offset", Type::U32);
    let p_ldy = b.push_field("ldy", Type::U32);
    let (m, n, n_offset, ldy) = (b.push(p_m), b.push(p_n), b.push(p_noff), b.push(p_ldy));
    let row = b.builtin(Builtin::WorkgroupId(1));
    let col = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), REDUCE_THREADS),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    b.if_(b.logical_and(b.lt(row, m), b.lt(col, n)), || {
        let ycol = b.add(n_offset, col);
        let at = |g: u32| b.add(b.mul(b.add(b.muli(m, g), row), ldy), ycol);
        // Groups in order, as the CPU reference adds them.
        let mut sum = b.load(partials, at(0));
        for g in 1..s.k_groups {
            sum = b.add(sum, b.load(partials, at(g)));
        }
        if let Some(bias) = bias {
            sum = b.add(sum, b.load(bias, ycol));
        }
        b.store(
            y,
            b.add(b.mul(row, ldy), ycol),
            b.convert(sum, Type::scalar(act)),
        );
    });
    b.finish()
}
