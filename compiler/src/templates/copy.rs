//! Copy kernel: the "device memory ceiling" figure that GEMVs are measured against (a decode
//! step reads every weight once, so a GEMV can at best stream its weights as fast as a plain
//! copy moves bytes). Invocation `g` of `T` copies quads `g, g + T, g + 2T, ...` below
//! `quads` (16-byte `uvec4`s: the widest load every device has), so neighbouring invocations
//! touch neighbouring bytes on every iteration. `rocky bench-gemv` also runs it over a buffer
//! larger than the device's caches between timed GEMV runs, so each run reads its weights
//! from memory as a decode step does, not from a cache the previous run filled.
//!
//! Bindings: 0 `src`, 1 `dst` (`uvec4`). Push constants: `quads: u32`, `iterations: u32`
//! (8 bytes; `iterations` = ⌈quads / T⌉). Dispatch `[groups, 1, 1]`; bytes moved = 32 ×
//! quads (16 read and 16 written per quad). The CPU reference is the identity: `dst == src`.

use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Scalar, Type, Unroll};
use crate::kernel::CompiledKernel;
use crate::refusal::Refusal;

/// Invocations per workgroup of the copy kernel.
pub const COPY_WORKGROUP: u32 = 256;

/// Builds the copy kernel, or refuses it on `caps`.
pub fn instantiate(caps: &DeviceCaps) -> Result<CompiledKernel, Refusal> {
    super::check_threads(COPY_WORKGROUP, caps)?;
    super::compile(&kernel_ir(), caps)
}

/// The push constants of a copy of `quads` quads by `groups` workgroups.
pub fn push_constants(quads: u32, groups: u32) -> [u8; 8] {
    let threads = u64::from(groups.max(1)) * u64::from(COPY_WORKGROUP);
    let iterations = u64::from(quads).div_ceil(threads) as u32;
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&quads.to_le_bytes());
    out[4..].copy_from_slice(&iterations.to_le_bytes());
    out
}

/// The copy kernel's IR.
pub fn kernel_ir() -> crate::ir::Module {
    let b = KernelBuilder::new("copy_u32x4".to_string(), [COPY_WORKGROUP, 1, 1]);
    let quad = Type::vec(Scalar::U32, 4);
    let src = b.buffer(0, "src", quad, Access::ReadOnly);
    let dst = b.buffer(1, "dst", quad, Access::WriteOnly);
    let p_quads = b.push_field("quads", Type::U32);
    let p_iter = b.push_field("iterations", Type::U32);
    let quads = b.push(p_quads);
    let gid = b.builtin(Builtin::GlobalInvocationId(0));
    let threads = b.muli(b.builtin(Builtin::NumWorkgroups(0)), COPY_WORKGROUP);
    b.for_range(b.c_u32(0), b.push(p_iter), 1, Unroll::Never, |i| {
        let at = b.add(b.mul(i, threads), gid);
        b.if_(b.lt(at, quads), || b.store(dst, at, b.load(src, at)));
    });
    b.finish()
}
