//! Split-KV attention, second half: merges the partials of the pieces (`split_kv.rs`) into
//! the output exactly as the online softmax merges key blocks. For each (row, head), with the
//! pieces' running maxima m_z, sums l_z and unnormalised outputs o_z:
//!
//! ```text
//! M = max_z m_z;  L = Σ_z l_z·exp(m_z - M);  out = Σ_z o_z·exp(m_z - M) / L   (0 where L = 0)
//! ```
//!
//! One thread per 4 outputs of a row (vec4), [`COMBINE_THREADS`] per workgroup along the
//! row, rows along y. Bindings: 0 `partials` (the split kernel's scratch), 1 `out` (f32
//! m × q_width, the attention output). Push constants ([`CombinePush`]): `m`, `splits` (the
//! pieces the split dispatch used, ≤ `kv_splits`). Grid: [`combine_grid`].
//!
//! Its CPU reference is [`reference_combine`] (the same merge in f64); the pair of kernels
//! together must give the attention reference's output.

use super::schedule::AttentionSchedule;
use super::split_kv::{is_split, ml_offset_vec4, scratch_elem};
use super::workload::AttentionWorkload;
use crate::caps::DeviceCaps;
use crate::ir::{Access, Buffer, Builtin, KernelBuilder, Module, Scalar, Type, Unroll, Value};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;
use crate::templates::{compile, push_bytes, MAX_GRID_DIM};

pub const BINDING_PARTIALS: u32 = 0;
pub const BINDING_OUT: u32 = 1;

/// Threads per workgroup of the combine kernel (along a row's vec4s).
pub const COMBINE_THREADS: u32 = 64;

/// Push constants of the combine kernel: `m`, `splits` (u32 each, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CombinePush {
    pub m: u32,
    pub splits: u32,
}

impl CombinePush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.splits])
    }
}

/// Workgroups of the combine over `m` rows.
pub fn combine_grid(w: &AttentionWorkload, m: u32) -> [u32; 3] {
    [(w.q_width() / 4).div_ceil(COMBINE_THREADS), m, 1]
}

/// The combine kernel of a split schedule, or a refusal.
pub fn instantiate_combine(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    if !is_split(s) {
        return Err(Refusal::Schedule(
            "only a schedule with kv_splits > 1 has a combine kernel".into(),
        ));
    }
    w.validate()?;
    s.validate(w, caps)?;
    if w.m > MAX_GRID_DIM {
        return Err(Refusal::Workload(format!(
            "m = {} exceeds the grid limit of the combine kernel",
            w.m
        )));
    }
    let k = compile(&combine_ir(w, s), caps)?;
    debug_assert_eq!(k.meta.push_constant_bytes, CombinePush::BYTES);
    Ok(k)
}

/// The combine kernel's IR.
pub fn combine_ir(w: &AttentionWorkload, s: &AttentionSchedule) -> Module {
    let b = KernelBuilder::new(
        format!(
            "attention_combine_h{}_d{}_m{}_s{}",
            w.n_heads, w.head_dim, w.m, s.kv_splits
        ),
        [COMBINE_THREADS, 1, 1],
    );
    let v4 = Type::vec(Scalar::F32, 4);
    let partials = b.buffer(
        BINDING_PARTIALS,
        "partials",
        scratch_elem(),
        Access::ReadOnly,
    );
    let out = b.buffer(BINDING_OUT, "out", v4, Access::WriteOnly);
    let p_m = b.push_field("m", Type::U32);
    let p_splits = b.push_field("splits", Type::U32);
    let (m, splits) = (b.push(p_m), b.push(p_splits));

    let row_u4 = w.q_width() / 4;
    let c = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), COMBINE_THREADS),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let row = b.builtin(Builtin::WorkgroupId(1));
    let ok = b.logical_and(b.lt(c, b.c_u32(row_u4)), b.lt(row, m));
    b.if_(ok, || {
        let head = b.div(c, b.c_u32(w.head_dim / 4));
        let splits = b.min(splits, b.c_u32(s.kv_splits));
        let merged = merge_vec4(&b, w, s, partials, splits, row, head, c);
        b.store(out, b.add(b.muli(row, row_u4), c), merged);
    });
    b.finish()
}

/// Output vec4 `c` (of the row's `q_width / 4`; head `head`'s) of query row `row`, merged from
/// the partials of `splits` pieces (at most the schedule's `kv_splits`) as the module
/// documentation says: the combine kernel's body, and the fused combine's
/// (`split_kv::combine_in_last_piece`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn merge_vec4(
    b: &KernelBuilder,
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    partials: Buffer,
    splits: Value,
    row: Value,
    head: Value,
    c: Value,
) -> Value {
    let v4 = Type::vec(Scalar::F32, 4);
    let row_u4 = w.q_width() / 4;
    // Record of piece z: ml0 + (z·m_w + row)·n_heads + head.
    let ml_at = |z| {
        b.add(
            b.c_u32(ml_offset_vec4(w, s)),
            b.add(b.muli(b.add(b.muli(z, w.m), row), w.n_heads), head),
        )
    };
    let mx = b.var_init("mx", b.c_f32(super::kernel::NEG_BIG));
    b.for_range(b.c_u32(0), splits, 1, Unroll::Never, |z| {
        let rec = b.load(partials, ml_at(z));
        b.store_var(mx, b.max(b.load_var(mx), b.extract(rec, 0)));
    });
    let big_m = b.load_var(mx);
    let sum = b.var_init("sum", b.c_f32(0.0));
    let o = b.var_init("o", b.lit(v4, 0.0));
    b.for_range(b.c_u32(0), splits, 1, Unroll::Never, |z| {
        let rec = b.load(partials, ml_at(z));
        let e = b.exp(b.sub(b.extract(rec, 0), big_m));
        b.store_var(sum, b.fma(b.extract(rec, 1), e, b.load_var(sum)));
        let at = b.add(b.muli(b.add(b.muli(z, w.m), row), row_u4), c);
        let part = b.load(partials, at);
        b.store_var(o, b.fma(b.splat(e, 4), part, b.load_var(o)));
    });
    let l = b.load_var(sum);
    let inv = b.select(b.gt(l, b.c_f32(0.0)), b.div(b.c_f32(1.0), l), b.c_f32(0.0));
    b.mul(b.load_var(o), b.splat(inv, 4))
}

/// The combine in f64 over `partials` (scratch order, see `split_kv.rs`) of `splits` pieces:
/// `m` rows × q_width outputs.
pub fn reference_combine(
    w: &AttentionWorkload,
    s: &AttentionSchedule,
    splits: u32,
    m: usize,
    partials: &[f32],
) -> Vec<f32> {
    let (hd, qw, nh, wm) = (
        w.head_dim as usize,
        w.q_width() as usize,
        w.n_heads as usize,
        w.m as usize,
    );
    let ml0 = 4 * ml_offset_vec4(w, s) as usize;
    let splits = splits.min(s.kv_splits) as usize;
    let mut out = vec![0f32; m * qw];
    for i in 0..m {
        for h in 0..nh {
            let rec = |z: usize| {
                let at = ml0 + 4 * ((z * wm + i) * nh + h);
                (f64::from(partials[at]), f64::from(partials[at + 1]))
            };
            let big_m = (0..splits)
                .map(|z| rec(z).0)
                .fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = (0..splits)
                .map(|z| rec(z).1 * (rec(z).0 - big_m).exp())
                .sum();
            for d in 0..hd {
                let o: f64 = (0..splits)
                    .map(|z| {
                        f64::from(partials[(z * wm + i) * qw + h * hd + d])
                            * (rec(z).0 - big_m).exp()
                    })
                    .sum();
                out[i * qw + h * hd + d] = if l > 0.0 { (o / l) as f32 } else { 0.0 };
            }
        }
    }
    out
}
