//! Elementwise kernels over rows of f32 activations: SwiGLU (`y = silu(gate) · up`), GeGLU
//! (`y = gelu_tanh(gate) · up`, Gemma's FFN), the residual add (`y = a + b`) and a scale
//! (`y = x · factor`, Gemma's embedding scale).
//!
//! Contract with the runtime:
//! - SwiGLU and GeGLU bindings: 0 `gate`, 1 `up` (read), 2 `y` (written), all f32 [m × width];
//! - Scale bindings: 0 `x` (read), 1 `y` (written), f32 [m × width]; push constants
//!   [`ScalePush`] (8 bytes: `m`, then `factor` as f32), so one kernel serves every factor;
//! - Add bindings: 0 `a`, 1 `b` (read), 2 `y` (written), all f32 [m × width]. `y` may be bound
//!   to the same range as `a` (in place): every invocation loads `a[i]` and `b[i]` before it
//!   stores `y[i]`, and the stored value depends on the loads, so no compiler can reorder them
//!   even where it assumes the bindings do not alias; no invocation touches another's elements;
//! - push constants ([`EltwisePush`], 4 bytes): `m` (rows, ≤ the workload's m);
//! - grid `[ceil(width / (vector_width·threads·vectors_per_thread)), m, 1]` (m ≤ 65535).

use serde::{Deserialize, Serialize};

use super::expected::Expected;
use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, Type, Value};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

pub const BINDING_A: u32 = 0;
pub const BINDING_B: u32 = 1;
pub const BINDING_Y: u32 = 2;

/// Which elementwise operation (the workload enum carries it as its variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EltwiseOp {
    SwiGlu,
    GeGlu,
    Add,
    Scale,
}

impl EltwiseOp {
    fn name(self) -> &'static str {
        match self {
            EltwiseOp::SwiGlu => "swiglu",
            EltwiseOp::GeGlu => "geglu",
            EltwiseOp::Add => "add",
            EltwiseOp::Scale => "scale",
        }
    }

    /// Names of the first input, the second (none for the one-input scale) and the output.
    pub fn binding_names(self) -> (&'static str, Option<&'static str>, &'static str) {
        match self {
            EltwiseOp::SwiGlu | EltwiseOp::GeGlu => ("gate", Some("up"), "y"),
            EltwiseOp::Add => ("a", Some("b"), "y"),
            EltwiseOp::Scale => ("x", None, "y"),
        }
    }
}

/// `m` rows of `width` f32 values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EltwiseWorkload {
    pub m: u32,
    pub width: u32,
}

impl EltwiseWorkload {
    fn elems(&self) -> u64 {
        u64::from(self.m) * u64::from(self.width)
    }

    /// exp, add, divide, multiply, negate per element.
    pub fn swiglu_flops(&self) -> u64 {
        5 * self.elems()
    }

    pub fn add_flops(&self) -> u64 {
        self.elems()
    }

    /// The cubic, tanh through exp, divide and multiply: about 9 per element.
    pub fn geglu_flops(&self) -> u64 {
        9 * self.elems()
    }
}

/// Push constants: `m` (u32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EltwisePush {
    pub m: u32,
}

impl EltwisePush {
    pub const BYTES: u32 = 4;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m])
    }
}

/// Push constants of the scale kernel: `m` (u32), `factor` (f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalePush {
    pub m: u32,
    pub factor: f32,
}

impl ScalePush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.factor.to_bits()])
    }
}

/// Thread layout: each thread handles `vectors_per_thread` vectors of `vector_width`
/// elements of one row, `threads` apart (neighbouring threads touch neighbouring vectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EltwiseSchedule {
    pub threads: u32,
    /// 1 or 4 (16-byte vectors; needs width % 4 == 0).
    pub vector_width: u32,
    /// 1, 2 or 4.
    pub vectors_per_thread: u32,
}

impl EltwiseSchedule {
    pub fn name(&self, op: EltwiseOp, w: &EltwiseWorkload) -> String {
        format!(
            "{}_w{}_t{}_v{}_x{}",
            op.name(),
            w.width,
            self.threads,
            self.vector_width,
            self.vectors_per_thread
        )
    }

    /// Elements one workgroup covers along a row.
    pub fn span(&self) -> u32 {
        self.threads * self.vector_width * self.vectors_per_thread
    }

    pub fn validate(&self, w: &EltwiseWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        let bad = |s: String| Err(Refusal::Schedule(s));
        if ![1, 4].contains(&self.vector_width) {
            return bad(format!("vector_width {} is not 1 or 4", self.vector_width));
        }
        if ![1, 2, 4].contains(&self.vectors_per_thread) {
            return bad(format!(
                "vectors_per_thread {} is not 1, 2 or 4",
                self.vectors_per_thread
            ));
        }
        if w.width % self.vector_width != 0 {
            return bad(format!(
                "width {} is not a multiple of vector_width {}",
                w.width, self.vector_width
            ));
        }
        check_threads(self.threads, caps)?;
        if w.width.div_ceil(self.span()) > MAX_GRID_DIM {
            return bad(format!(
                "{} workgroups per row exceed the grid limit {MAX_GRID_DIM}",
                w.width.div_ceil(self.span())
            ));
        }
        Ok(())
    }
}

pub fn validate_workload(w: &EltwiseWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.width == 0 {
        return bad(format!(
            "m and width must be at least 1 (got {}×{})",
            w.m, w.width
        ));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!("m = {} exceeds the grid limit {MAX_GRID_DIM}", w.m));
    }
    if w.elems() > u64::from(u32::MAX) {
        return bad(format!(
            "{}×{} is too large for 32-bit indexing",
            w.m, w.width
        ));
    }
    Ok(())
}

pub fn dispatch_grid(w: &EltwiseWorkload, s: &EltwiseSchedule) -> [u32; 3] {
    [w.width.div_ceil(s.span()), w.m, 1]
}

pub fn search_space(w: &EltwiseWorkload, caps: &DeviceCaps) -> Vec<EltwiseSchedule> {
    let mut out = Vec::new();
    for vector_width in [1, 4] {
        for vectors_per_thread in [1, 2, 4] {
            for threads in [32, 64, 128, 256, 512] {
                let s = EltwiseSchedule {
                    threads,
                    vector_width,
                    vectors_per_thread,
                };
                // A workgroup much wider than the row only idles.
                if s.span() > 2 * w.width.next_power_of_two().max(128) {
                    continue;
                }
                if s.validate(w, caps).is_ok() {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// 16-byte vectors where the width allows, 2 per thread, 64 threads (a multiple of every
/// common subgroup size and small enough for any device).
pub fn default_schedule(w: &EltwiseWorkload, caps: &DeviceCaps) -> EltwiseSchedule {
    let s = EltwiseSchedule {
        threads: 64,
        vector_width: if w.width % 4 == 0 { 4 } else { 1 },
        vectors_per_thread: 2,
    };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}

pub fn instantiate(
    op: EltwiseOp,
    w: &EltwiseWorkload,
    s: &EltwiseSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(op, w, s), caps)
}

/// The kernel's IR. The pair must validate.
pub fn kernel_ir(op: EltwiseOp, w: &EltwiseWorkload, s: &EltwiseSchedule) -> Module {
    let b = KernelBuilder::new(s.name(op, w), [s.threads, 1, 1]);
    let vw = s.vector_width;
    let ty = Type::vec(Scalar::F32, vw);
    let (na, nb, ny) = op.binding_names();
    let a = b.buffer(BINDING_A, na, ty, Access::ReadOnly);
    let bb = nb.map(|nb| b.buffer(BINDING_B, nb, ty, Access::ReadOnly));
    // One-input ops write at binding 1: bindings stay numbered without gaps.
    let y_binding = if bb.is_some() { BINDING_Y } else { BINDING_B };
    let y = b.buffer(y_binding, ny, ty, Access::WriteOnly);
    let p_m = b.push_field("m", Type::U32);
    let p_factor = (op == EltwiseOp::Scale).then(|| b.push_field("factor", Type::F32));

    let n_vec = w.width / vw;
    let row = b.builtin(Builtin::WorkgroupId(1));
    let first = b.add(
        b.muli(
            b.builtin(Builtin::WorkgroupId(0)),
            s.threads * s.vectors_per_thread,
        ),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    b.if_(b.lt(row, b.push(p_m)), || {
        let base = b.muli(row, n_vec);
        for e in 0..s.vectors_per_thread {
            let col = b.addi(first, e * s.threads);
            b.if_(b.lt(col, b.c_u32(n_vec)), || {
                let i = b.add(base, col);
                let x0 = b.load(a, i);
                let x1 = bb.map(|bb| b.load(bb, i));
                let v = match (op, x1, p_factor) {
                    (EltwiseOp::SwiGlu, Some(x1), _) => swiglu(&b, x0, x1),
                    (EltwiseOp::GeGlu, Some(x1), _) => geglu(&b, x0, x1),
                    (EltwiseOp::Add, Some(x1), _) => b.add(x0, x1),
                    (EltwiseOp::Scale, _, Some(f)) => b.mul(x0, b.splat(b.push(f), vw)),
                    _ => unreachable!("bindings and push fields follow the op"),
                };
                b.store(y, i, v);
            });
        }
    });
    b.finish()
}

/// `gate / (1 + exp(min(-gate, 80))) · up`. The clamp keeps the divisor within [1, 2¹²⁶],
/// the range where Vulkan specifies division (2.5 ulp); without it a gate below -87 divides by
/// infinity or by a number past 2¹²⁶, which drivers may flush to zero or worse. Clamped, such
/// a gate gives ~gate·1.8e-35 instead of the true gate·exp(gate) (below 1e-35 either way).
/// silu(gate) · up, also the epilogue of the fused gate/up GEMM (`gemm::Epilogue::SwiGlu`).
pub(crate) fn swiglu(b: &KernelBuilder, gate: Value, up: Value) -> Value {
    let lanes = gate.ty.lanes();
    let one = b.splat(b.c_f32(1.0), lanes);
    let arg = b.min(b.neg(gate), b.splat(b.c_f32(80.0), lanes));
    let silu = b.div(gate, b.add(one, b.exp(arg)));
    b.mul(silu, up)
}

/// `gelu_tanh(gate) · up` with GELU's tanh approximation, written as
/// `x · sigmoid(2u)` = `x / (1 + exp(-2u))`, u = √(2/π)·(x + 0.044715·x³) (since
/// `0.5·(1 + tanh(u)) = sigmoid(2u)`), the exponent clamped at 80 as in [`swiglu`]: for very
/// negative gates the clamp gives ~x·1.8e-35 instead of the true x·exp(-2|u|).
pub(crate) fn geglu(b: &KernelBuilder, gate: Value, up: Value) -> Value {
    let lanes = gate.ty.lanes();
    let c = |v: f32| b.splat(b.c_f32(v), lanes);
    let cube = b.mul(b.mul(gate, gate), gate);
    let u = b.mul(
        c(GELU_SQRT_2_OVER_PI),
        b.add(gate, b.mul(c(GELU_COEF_A), cube)),
    );
    let arg = b.min(b.mul(c(-2.0), u), c(80.0));
    let gelu = b.div(gate, b.add(c(1.0), b.exp(arg)));
    b.mul(gelu, up)
}

/// √(2/π) and the cubic coefficient of GELU's tanh approximation (ggml's constants).
const GELU_SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044715;

// ---- CPU references -----------------------------------------------------------------------

/// SwiGLU in f64 over the first `m` rows.
///
/// Allowed error relative to |y|: Vulkan's `exp` is good to 3 + 2·|x| ulp, which only
/// matters relative to 1 + exp(-g) while |g| is moderate and shows up in silu for very
/// negative g (≈ g·exp(g)); the division adds 2.5 ulp and the product 1 ulp. With
/// `(8 + 2·|g|)·2⁻²³` relative the bound holds for every g ≥ -80. Below, the kernel clamps
/// the exponent (see `swiglu`), so both values are under 1e-33·|g·up|: an absolute
/// `1e-30·(1 + |g·up|)` covers them (and is far below anything that matters).
pub fn reference_swiglu(w: &EltwiseWorkload, m: usize, gate: &[f32], up: &[f32]) -> Expected {
    let n = m * w.width as usize;
    assert!(
        gate.len() >= n && up.len() >= n,
        "swiglu reference: gate and up need {n} values"
    );
    let mut values = Vec::with_capacity(n);
    let mut allowed = Vec::with_capacity(n);
    for (&g, &u) in gate[..n].iter().zip(&up[..n]) {
        let (g, u) = (f64::from(g), f64::from(u));
        let y = g / (1.0 + (-g).exp()) * u;
        values.push(y as f32);
        let rel = (8.0 + 2.0 * g.abs()) * 2f64.powi(-23);
        allowed.push((y.abs() * rel + 1e-30 * (1.0 + (g * u).abs())) as f32);
    }
    Expected { values, allowed }
}

/// `a + b` over the first `m` rows: one f32 rounding, so the kernel must match exactly.
pub fn reference_add(w: &EltwiseWorkload, m: usize, a: &[f32], b: &[f32]) -> Expected {
    let n = m * w.width as usize;
    assert!(
        a.len() >= n && b.len() >= n,
        "add reference: a and b need {n} values"
    );
    let values: Vec<f32> = a[..n].iter().zip(&b[..n]).map(|(x, y)| x + y).collect();
    Expected {
        allowed: vec![0.0; n],
        values,
    }
}

/// GeGLU in f64 over the first `m` rows, as `x / (1 + exp(-2u))` (the form `0.5·x·(1 +
/// tanh(u))` cancels for very negative x: 1 + tanh(-13.5) has a relative error of 3e-5 even in
/// f64). Allowed error relative to |y|: the kernel's exp(-2u) carries 3 + 2·|2u| ulp (Vulkan);
/// the f32 u, a few roundings of a value of size |u|, moves exp(-2u) by up to ~5·|u| ulp more;
/// the division and product 3.5 ulp: `(8 + 10·|u|)·2⁻²³` covers them for every u the clamp
/// leaves, and the absolute `1e-30·(1 + |x·up|)` the clamped tail (see [`geglu`]).
pub fn reference_geglu(w: &EltwiseWorkload, m: usize, gate: &[f32], up: &[f32]) -> Expected {
    let n = m * w.width as usize;
    assert!(
        gate.len() >= n && up.len() >= n,
        "geglu reference: gate and up need {n} values"
    );
    let mut values = Vec::with_capacity(n);
    let mut allowed = Vec::with_capacity(n);
    for (&g, &u) in gate[..n].iter().zip(&up[..n]) {
        let (x, up) = (f64::from(g), f64::from(u));
        let t = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        let y = x / (1.0 + (-2.0 * t).exp()) * up;
        values.push(y as f32);
        let rel = (8.0 + 10.0 * t.abs()) * 2f64.powi(-23);
        allowed.push((y.abs() * rel + 1e-30 * (1.0 + (x * up).abs())) as f32);
    }
    Expected { values, allowed }
}

/// `x · factor` over the first `m` rows: one f32 rounding, so the kernel must match exactly.
pub fn reference_scale(w: &EltwiseWorkload, m: usize, x: &[f32], factor: f32) -> Expected {
    let n = m * w.width as usize;
    assert!(x.len() >= n, "scale reference: x needs {n} values");
    Expected {
        values: x[..n].iter().map(|v| v * factor).collect(),
        allowed: vec![0.0; n],
    }
}
