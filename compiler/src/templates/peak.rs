//! Peak-throughput kernel: independent FMA chains per thread, for the "device FMA ceiling"
//! figure. Each invocation runs `iterations` (push constant) rounds of `unroll` FMAs on each
//! of `chains` independent accumulators, `a = fma(a, mul, add)`, with `mul` and `add` push
//! constants (so nothing folds), then writes the sum of its chains to `out[global id x]`.
//!
//! Bindings: 0 `out` (f32, one per invocation). Push constants: `iterations: u32`,
//! `mul: f32`, `add: f32` (12 bytes; use e.g. mul = 0.999, add = 0.001 to stay finite).
//! Dispatch `[groups, 1, 1]`; FLOPs = [`PeakConfig::flops_per_invocation`] × invocations.

use serde::{Deserialize, Serialize};

use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Scalar, Type, Unroll};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeakPrecision {
    /// Scalar f32 FMAs.
    #[serde(rename = "f32")]
    F32,
    /// FMAs on f16vec2 (two f16 FMAs each, packed on GPUs that can).
    #[serde(rename = "f16x2")]
    F16Packed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeakConfig {
    pub precision: PeakPrecision,
    /// Independent accumulators per thread (hides FMA latency).
    pub chains: u32,
    /// FMAs per chain per loop iteration (unrolled in the IR).
    pub unroll: u32,
    pub workgroup_size: u32,
}

impl PeakConfig {
    pub fn new(precision: PeakPrecision) -> PeakConfig {
        PeakConfig {
            precision,
            chains: 8,
            unroll: 16,
            workgroup_size: 256,
        }
    }

    /// Floating-point operations one invocation performs for `iterations`.
    pub fn flops_per_invocation(&self, iterations: u32) -> u64 {
        let lanes = match self.precision {
            PeakPrecision::F32 => 1,
            PeakPrecision::F16Packed => 2,
        };
        2 * lanes * u64::from(self.chains) * u64::from(self.unroll) * u64::from(iterations)
    }
}

/// Builds the peak kernel, or refuses it on `caps`.
pub fn instantiate(cfg: &PeakConfig, caps: &DeviceCaps) -> Result<CompiledKernel, Refusal> {
    if cfg.chains == 0 || cfg.unroll == 0 || cfg.workgroup_size == 0 {
        return Err(Refusal::Schedule(
            "chains, unroll and workgroup_size must be at least 1".into(),
        ));
    }
    if cfg.workgroup_size > caps.max_workgroup_invocations
        || cfg.workgroup_size > caps.max_workgroup_size[0]
    {
        return Err(Refusal::DeviceLimit(format!(
            "workgroup of {} invocations, the device allows {}",
            cfg.workgroup_size,
            caps.max_workgroup_invocations
                .min(caps.max_workgroup_size[0])
        )));
    }
    if cfg.precision == PeakPrecision::F16Packed && !caps.float16 {
        return Err(Refusal::MissingFeature("shaderFloat16 (f16x2 peak)".into()));
    }
    super::compile(&kernel_ir(cfg), caps)
}

/// The peak kernel's IR (validate the configuration with [`instantiate`]).
pub fn kernel_ir(cfg: &PeakConfig) -> crate::ir::Module {
    let name = format!("peak_{:?}_c{}_u{}", cfg.precision, cfg.chains, cfg.unroll).to_lowercase();
    let b = KernelBuilder::new(name, [cfg.workgroup_size, 1, 1]);
    let out = b.buffer(0, "out", Type::F32, Access::WriteOnly);
    let p_iter = b.push_field("iterations", Type::U32);
    let p_mul = b.push_field("mul", Type::F32);
    let p_add = b.push_field("add", Type::F32);

    let ty = match cfg.precision {
        PeakPrecision::F32 => Type::F32,
        PeakPrecision::F16Packed => Type::vec(Scalar::F16, 2),
    };
    let gid = b.builtin(Builtin::GlobalInvocationId(0));
    let widen = |v| b.splat(b.convert(v, ty.element()), ty.lanes());
    let mul = widen(b.push(p_mul));
    let add = widen(b.push(p_add));
    let seed = b.mul(b.convert(gid, Type::F32), b.c_f32(1e-6));
    let chains: Vec<_> = (0..cfg.chains)
        .map(|c| {
            b.var_init(
                &format!("chain{c}"),
                widen(b.add(seed, b.c_f32(c as f32 * 1e-3))),
            )
        })
        .collect();
    b.for_range(b.c_u32(0), b.push(p_iter), 1, Unroll::Never, |_| {
        let mut vals: Vec<_> = chains.iter().map(|&c| b.load_var(c)).collect();
        for _ in 0..cfg.unroll {
            vals = vals.iter().map(|&a| b.fma(a, mul, add)).collect();
        }
        for (c, v) in chains.iter().zip(vals) {
            b.store_var(*c, v);
        }
    });
    let mut sum = b.c_f32(0.0);
    for c in &chains {
        let v = b.convert(b.load_var(*c), Type::vec(Scalar::F32, ty.lanes()));
        for l in 0..ty.lanes() {
            sum = b.add(sum, b.extract(v, l));
        }
    }
    b.store(out, gid, sum);
    b.finish()
}
