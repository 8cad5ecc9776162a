//! RMSNorm: `y = x / sqrt(mean(x²) + eps) * weight`, per row.
//!
//! Contract with the runtime:
//! - bindings: 0 `x` f32 [m × width] (read), 1 `weight` f32 [width] (read), 2 `y` f32
//!   [m × width] (written; bind a buffer other than `x`);
//! - push constants ([`RmsNormPush`], 4 bytes): `m` (rows to normalize, ≤ the workload's m);
//! - grid: one workgroup per row, `[m, 1, 1]` (m ≤ 65535).
//!
//! Each workgroup sums the squares of its row (every thread a strided share, in f32), reduces
//! the partial sums ([`RowReduce`]: a shared-memory tree, subgroup adds plus one shared slot
//! per subgroup, or subgroup adds alone in a workgroup of exactly one subgroup), then scales
//! the row.

use serde::{Deserialize, Serialize};

use super::expected::Expected;
use super::{check_shared, check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type, Unroll, Value};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_X: u32 = 0;
pub const BINDING_WEIGHT: u32 = 1;
pub const BINDING_Y: u32 = 2;

/// RMSNorm of `m` rows of `width` f32 values; `eps` stored as its f32 bit pattern (Eq/Hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormWorkload {
    pub m: u32,
    pub width: u32,
    pub eps_bits: u32,
}

impl RmsNormWorkload {
    pub fn new(m: u32, width: u32, eps: f32) -> Self {
        RmsNormWorkload {
            m,
            width,
            eps_bits: eps.to_bits(),
        }
    }

    pub fn eps(&self) -> f32 {
        f32::from_bits(self.eps_bits)
    }

    /// Square, sum, scale and weight each element: about 4 operations.
    pub fn flops(&self) -> u64 {
        4 * u64::from(self.m) * u64::from(self.width)
    }
}

/// Push constants: `m` (u32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsNormPush {
    pub m: u32,
}

impl RmsNormPush {
    pub const BYTES: u32 = 4;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m])
    }
}

/// How the threads of a row combine their partial sums of squares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum RowReduce {
    /// A shared-memory tree, log2(threads) barriers (no subgroup features needed).
    #[serde(rename = "shared_tree")]
    SharedTree,
    /// Subgroup adds, one shared slot per subgroup, one barrier (any subgroup size).
    #[serde(rename = "subgroup")]
    Subgroup,
    /// The workgroup is exactly one subgroup (`threads` = the device's subgroup size): subgroup
    /// adds only, no shared memory and no barrier. Correct only where compute subgroups have
    /// the reported size (fixed-size GPUs such as Mali, NVIDIA, lavapipe); the tuner's
    /// correctness check guards the others, and defaults use it only where shared memory is
    /// slow (panvk allocates workgroup memory for every dispatch that declares any).
    #[serde(rename = "one_subgroup")]
    OneSubgroup,
}

/// How a row is reduced and scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormSchedule {
    /// Threads per workgroup (one workgroup per row); a power of two.
    pub threads: u32,
    /// Elements per load/store: 1 or 4 (16-byte vectors; needs width % 4 == 0).
    pub vector_width: u32,
    pub reduce: RowReduce,
    /// The two passes over the row (sum of squares, then scale) stay loops instead of being
    /// unrolled. Unrolled, a compiler may merge the second pass's loads of x with the first's
    /// and keep the thread's whole slice of the row in registers: Mesa 26.1.6's Valhall
    /// compiler spills 22 registers at width 896 and 158 at 2048 with one 16-lane subgroup per
    /// row. Absent in older records and omitted when false: unrolled.
    #[serde(default, skip_serializing_if = "is_false")]
    pub rolled: bool,
}

fn is_false(x: &bool) -> bool {
    !*x
}

impl RmsNormSchedule {
    pub fn name(&self, w: &RmsNormWorkload) -> String {
        format!(
            "rms_norm_w{}_t{}_v{}_{}{}",
            w.width,
            self.threads,
            self.vector_width,
            match self.reduce {
                RowReduce::SharedTree => "tree",
                RowReduce::Subgroup => "sg",
                RowReduce::OneSubgroup => "onesg",
            },
            if self.rolled { "_rolled" } else { "" }
        )
    }

    /// Shared bytes: one f32 per thread (the tree, or one slot per subgroup whatever the
    /// subgroup size turns out to be); none in a single subgroup.
    pub fn shared_bytes(&self) -> u32 {
        match self.reduce {
            RowReduce::OneSubgroup => 0,
            _ => 4 * self.threads,
        }
    }

    pub fn validate(&self, w: &RmsNormWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if !self.threads.is_power_of_two() {
            return bad(format!("threads {} is not a power of two", self.threads));
        }
        if ![1, 4].contains(&self.vector_width) {
            return bad(format!("vector_width {} is not 1 or 4", self.vector_width));
        }
        if w.width % self.vector_width != 0 {
            return bad(format!(
                "width {} is not a multiple of vector_width {}",
                w.width, self.vector_width
            ));
        }
        if self.reduce != RowReduce::SharedTree && !caps.subgroup_arithmetic {
            return Err(Refusal::MissingFeature(format!(
                "subgroup arithmetic (reduce {:?})",
                self.reduce
            )));
        }
        if self.reduce == RowReduce::OneSubgroup && self.threads != caps.subgroup_size {
            return bad(format!(
                "one_subgroup needs threads = the subgroup size {}, not {}",
                caps.subgroup_size, self.threads
            ));
        }
        check_threads(self.threads, caps)?;
        check_shared(self.shared_bytes(), caps)
    }
}

pub fn validate_workload(w: &RmsNormWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.width == 0 {
        return bad(format!(
            "m and width must be at least 1 (got {}×{})",
            w.m, w.width
        ));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!(
            "m = {} rows exceeds one workgroup per row ({MAX_GRID_DIM})",
            w.m
        ));
    }
    if u64::from(w.m) * u64::from(w.width) > u64::from(u32::MAX) {
        return bad(format!(
            "{}×{} is too large for 32-bit indexing",
            w.m, w.width
        ));
    }
    if !w.eps().is_finite() || w.eps() < 0.0 {
        return bad(format!("eps {} must be finite and non-negative", w.eps()));
    }
    Ok(())
}

pub fn dispatch_grid(w: &RmsNormWorkload, _s: &RmsNormSchedule) -> [u32; 3] {
    [w.m, 1, 1]
}

pub fn search_space(w: &RmsNormWorkload, caps: &DeviceCaps) -> Vec<RmsNormSchedule> {
    let mut out = Vec::new();
    for vector_width in [1, 4] {
        // More threads than vectors in a row would only idle.
        let useful = (w.width / vector_width).max(1).next_power_of_two().max(32);
        for threads in [32, 64, 128, 256, 512] {
            if threads > useful {
                continue;
            }
            for reduce in [RowReduce::SharedTree, RowReduce::Subgroup] {
                let s = RmsNormSchedule {
                    threads,
                    vector_width,
                    reduce,
                    rolled: false,
                };
                if s.validate(w, caps).is_ok() {
                    out.push(s);
                }
            }
        }
        for rolled in [false, true] {
            let single = RmsNormSchedule {
                threads: caps.subgroup_size,
                vector_width,
                reduce: RowReduce::OneSubgroup,
                rolled,
            };
            if single.validate(w, caps).is_ok() {
                out.push(single);
            }
        }
    }
    out
}

/// 16-byte vectors where the width allows. Where shared memory is slow (Mali/panvk: it is
/// ordinary memory, allocated for every dispatch that declares any): one subgroup per row and
/// no shared memory at all, its passes rolled where a thread's slice of the row would take more
/// than half the register budget (see [`RmsNormSchedule::rolled`]). Elsewhere: 128 threads
/// reduced by subgroup adds (one barrier) where available, else the shared tree.
pub fn default_schedule(w: &RmsNormWorkload, caps: &DeviceCaps) -> RmsNormSchedule {
    let vector_width = if w.width % 4 == 0 { 4 } else { 1 };
    let slice = w.width.div_ceil(caps.subgroup_size.max(1));
    let candidates = [
        RmsNormSchedule {
            threads: caps.subgroup_size,
            vector_width,
            reduce: RowReduce::OneSubgroup,
            rolled: slice > caps.register_budget / 2,
        },
        RmsNormSchedule {
            threads: 128,
            vector_width,
            reduce: RowReduce::Subgroup,
            rolled: false,
        },
        RmsNormSchedule {
            threads: 128,
            vector_width,
            reduce: RowReduce::SharedTree,
            rolled: false,
        },
    ];
    let start = if caps.shared_memory_is_slow { 0 } else { 1 };
    candidates[start..]
        .iter()
        .find(|s| s.validate(w, caps).is_ok())
        .copied()
        .or_else(|| search_space(w, caps).into_iter().next())
        .unwrap_or(candidates[2])
}

pub fn instantiate(
    w: &RmsNormWorkload,
    s: &RmsNormSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(w, s), caps)
}

/// The kernel's IR (for the interpreter and for inspection). The pair must validate.
pub fn kernel_ir(w: &RmsNormWorkload, s: &RmsNormSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let vw = s.vector_width;
    let vty = Type::vec(Scalar::F32, vw);
    let x = b.buffer(BINDING_X, "x", vty, Access::ReadOnly);
    let weight = b.model_buffer(BINDING_WEIGHT, "weight", vty);
    let y = b.buffer(BINDING_Y, "y", vty, Access::WriteOnly);
    let p_m = b.push_field("m", Type::U32);
    let partials = (s.reduce != RowReduce::OneSubgroup)
        .then(|| b.shared_array("partials", Type::F32, s.threads));
    let row = b.builtin(Builtin::WorkgroupId(0));
    let tid = b.builtin(Builtin::LocalInvocationIndex);
    let n_vec = w.width / vw;
    // The condition is the same for the whole workgroup, so the barriers inside stay uniform.
    b.if_(b.lt(row, b.push(p_m)), || {
        let base = b.muli(row, n_vec);
        let strided = |body: &dyn Fn(Value)| {
            let iters = n_vec.div_ceil(s.threads);
            let unroll = if s.rolled {
                Unroll::Never
            } else {
                Unroll::Hint
            };
            b.for_range(b.c_u32(0), b.c_u32(iters), 1, unroll, |it| {
                let idx = b.add(tid, b.muli(it, s.threads));
                if n_vec % s.threads == 0 {
                    body(idx);
                } else {
                    b.if_(b.lt(idx, b.c_u32(n_vec)), || body(idx));
                }
            });
        };
        let acc = b.var_init("sum_sq", b.lit(vty, 0.0));
        strided(&|idx| {
            let v = b.load(x, b.add(base, idx));
            b.store_var(acc, b.fma(v, v, b.load_var(acc)));
        });
        let a = b.load_var(acc);
        let partial = (1..vw).fold(b.extract(a, 0), |s, l| b.add(s, b.extract(a, l)));
        let total = match (s.reduce, partials) {
            (RowReduce::SharedTree, Some(slots)) => tree_sum(&b, partial, slots, tid, s.threads),
            (RowReduce::Subgroup, Some(slots)) => subgroup_sum(&b, partial, slots),
            _ => b.subgroup_add(partial),
        };
        let mean = b.div(total, b.c_f32(w.width as f32));
        let scale = b.inverse_sqrt(b.add(mean, b.c_f32(w.eps())));
        let scale_v = b.splat(scale, vw);
        strided(&|idx| {
            let at = b.add(base, idx);
            let v = b.mul(b.mul(b.load(x, at), scale_v), b.load(weight, idx));
            b.store(y, at, v);
        });
    });
    b.finish()
}

/// Sum over the workgroup: subgroup adds, one shared slot per subgroup, then every thread
/// adds the slots in the same order (so all threads agree bit for bit).
fn subgroup_sum(b: &KernelBuilder, partial: Value, slots: crate::ir::SharedArray) -> Value {
    let s = b.subgroup_add(partial);
    let first = b.eq(b.builtin(Builtin::SubgroupInvocationId), b.c_u32(0));
    b.if_(first, || {
        b.store_shared(slots, b.builtin(Builtin::SubgroupId), s)
    });
    b.barrier();
    let total = b.var_init("total", b.c_f32(0.0));
    let n = b.builtin(Builtin::NumSubgroups);
    b.for_range(b.c_u32(0), n, 1, Unroll::Never, |i| {
        b.store_var(total, b.add(b.load_var(total), b.load_shared(slots, i)));
    });
    b.load_var(total)
}

/// Sum over the workgroup through a shared-memory tree (no subgroup features needed).
fn tree_sum(
    b: &KernelBuilder,
    partial: Value,
    slots: crate::ir::SharedArray,
    tid: Value,
    threads: u32,
) -> Value {
    b.store_shared(slots, tid, partial);
    b.barrier();
    let mut stride = threads / 2;
    while stride > 0 {
        b.if_(b.lt(tid, b.c_u32(stride)), || {
            let other = b.load_shared(slots, b.addi(tid, stride));
            b.store_shared(slots, tid, b.add(b.load_shared(slots, tid), other));
        });
        b.barrier();
        stride /= 2;
    }
    b.load_shared(slots, b.c_u32(0))
}

// ---- CPU reference ------------------------------------------------------------------------

/// RMSNorm in f64 of `m` rows of `x` (m × width) with `weight` (width).
///
/// Allowed error of each output, relative to |x · scale · weight|: the kernel sums squares
/// in f32 (each thread ≤ width/threads terms, then ≤ log2(threads) + 1 levels of partial
/// sums: relative error ≤ (width + 10)·2⁻²⁴ of the sum, half of that in the scale), then
/// `inversesqrt` (Vulkan: 2 ulp), the division by width (2.5 ulp) and two products (1 ulp
/// each): `8e-6 + width·3e-8` bounds all of it with margin.
pub fn reference(w: &RmsNormWorkload, m: usize, x: &[f32], weight: &[f32]) -> Expected {
    let width = w.width as usize;
    assert!(
        x.len() >= m * width && weight.len() == width,
        "rms_norm reference: x needs {m}×{width} values, weight {width}"
    );
    let rel = 8e-6 + width as f64 * 3e-8;
    let mut values = Vec::with_capacity(m * width);
    let mut allowed = Vec::with_capacity(m * width);
    for row in x[..m * width].chunks(width) {
        let ss: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let scale = 1.0 / (ss / width as f64 + f64::from(w.eps())).sqrt();
        for (&v, &g) in row.iter().zip(weight) {
            let y = f64::from(v) * scale * f64::from(g);
            values.push(y as f32);
            allowed.push((y.abs() * rel) as f32 + 1e-30);
        }
    }
    Expected { values, allowed }
}
