//! The orthonormal Walsh-Hadamard rotation around a quantized KV cache (llama.cpp PR 21038, on
//! by default in llama.cpp 0c1e570): with a q8_0 K, Q and K are multiplied by the Hadamard
//! matrix H of size `n` (the largest power of two dividing head_dim) before K enters the
//! cache, so q·k is unchanged (H is orthonormal) while K's outliers spread over its blocks;
//! with a q8_0 V, V is multiplied by the one of size 64 and the attention output back by it
//! (H is symmetric and H·H = I, so the output is V's weighted sum in V's own basis).
//!
//! This module holds the rule ([`kv_rotation_sizes`]), the transform as IR fragments
//! ([`fwht_chunks`] in one thread; [`Split`], the same over a few lanes, which the q8_0 KV
//! write in [`super::kv_cache`] also uses to rotate K and V before it quantizes them), the
//! in-place kernel that rotates Q before attention and the attention output back after it,
//! and the CPU reference ([`reference`]).
//!
//! The transform is ggml's `ggml_compute_forward_fwht` operation for operation: every value
//! scaled by 1/√n first, then the butterflies (a + b, a - b) at strides 1, 2, 4, ... All of it
//! is marked precise (no contraction into FMAs), so the kernel's results are the reference's
//! bit for bit on every device: f32 add, sub and mul are correctly rounded in Vulkan.
//!
//! Contract of the kernel with the runtime:
//! - binding 0 `x`: f32 [m × width], rotated in place, each aligned run of `n` values on its
//!   own (a run never crosses a head: heads are `head_dim` wide and n divides head_dim);
//! - push constants ([`HadamardPush`], 4 bytes): `m` (rows, ≤ the workload's m);
//! - grid `[ceil(width/n / (threads/L)), m, 1]`: L = [`lanes`]`(n)` threads per run (2 to
//!   8), each holding 16 or 32 of its values; they exchange them once through workgroup
//!   memory ([`Split`]), so that no thread holds a whole run in registers.

use serde::{Deserialize, Serialize};

use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Builtin, KernelBuilder, Module, Scalar, SharedArray, Type, Value};
use crate::kernel::CompiledKernel;
use crate::kv_type::{KvType, KvTypes};
use crate::refusal::Refusal;

pub const BINDING_X: u32 = 0;

/// The run sizes a rotation may use: powers of two from one q8_0 block to 256 values (Gemma's
/// head_dim; a thread holds a whole run in registers). A head_dim of 512 would ask llama.cpp's
/// rule for 512: its kernels are refused by name (no such model is supported yet).
pub const MIN_RUN: u32 = 32;
pub const MAX_RUN: u32 = 256;

/// llama.cpp's choice (`llama_kv_cache::build_input_k_rot` / `build_input_v_rot`) of the
/// Hadamard sizes for heads of `head_dim` over caches of types `kv`, where the rotation is on:
/// K (with Q) by the largest power of two dividing head_dim, V (and the output back) by 64;
/// each only for a q8_0 cache, and neither unless head_dim is a multiple of 64. Unquantized
/// caches are never rotated: their path stays what it was without the option.
pub fn kv_rotation_sizes(kv: KvTypes, head_dim: u32) -> (Option<u32>, Option<u32>) {
    let on = |t: KvType| t == KvType::Q8_0 && head_dim > 0 && head_dim % 64 == 0;
    let mut n_k = 64;
    while head_dim > 0 && head_dim % (2 * n_k) == 0 {
        n_k *= 2;
    }
    (on(kv.k).then_some(n_k), on(kv.v).then_some(64))
}

/// Rotates `m` rows of `width` values in place, each run of `n` values on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HadamardWorkload {
    pub m: u32,
    pub width: u32,
    pub n: u32,
}

impl HadamardWorkload {
    /// The scaling multiply and log2(n) additions per value.
    pub fn flops(&self) -> u64 {
        u64::from(self.m) * u64::from(self.width) * u64::from(1 + self.n.trailing_zeros())
    }

    fn runs(&self) -> u32 {
        self.width / self.n
    }
}

/// Push constants: `m` (u32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HadamardPush {
    pub m: u32,
}

impl HadamardPush {
    pub const BYTES: u32 = 4;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m])
    }
}

/// [`lanes`]`(n)` threads per run; `threads / lanes` runs per workgroup along a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HadamardSchedule {
    pub threads: u32,
}

impl HadamardSchedule {
    pub fn name(&self, w: &HadamardWorkload) -> String {
        format!("hadamard_n{}_w{}_t{}", w.n, w.width, self.threads)
    }

    pub fn validate(&self, w: &HadamardWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        check_threads(self.threads, caps)?;
        if self.threads % lanes(w.n) != 0 {
            return Err(Refusal::Schedule(format!(
                "{} threads are not whole runs of {} lanes",
                self.threads,
                lanes(w.n)
            )));
        }
        if split_shared_bytes(w.n, self.threads, w.runs()) > caps.max_shared_memory_bytes {
            return Err(Refusal::Schedule(
                "the runs exceed the workgroup memory".into(),
            ));
        }
        if w.runs().div_ceil(Split::runs_per_group(w.n, self.threads)) > MAX_GRID_DIM {
            return Err(Refusal::Schedule("too many workgroups per row".into()));
        }
        Ok(())
    }
}

/// Whether `n` is a run size the transform takes.
pub fn valid_run(n: u32) -> bool {
    n.is_power_of_two() && (MIN_RUN..=MAX_RUN).contains(&n)
}

pub fn validate_workload(w: &HadamardWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.width == 0 {
        return bad("m and width must be at least 1".into());
    }
    if !valid_run(w.n) {
        return bad(format!(
            "a Hadamard run of {} values: a power of two from {MIN_RUN} to {MAX_RUN}",
            w.n
        ));
    }
    if w.width % w.n != 0 {
        return bad(format!("width {} is not whole runs of {}", w.width, w.n));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!("m = {} exceeds the grid limit {MAX_GRID_DIM}", w.m));
    }
    if u64::from(w.m) * u64::from(w.width) > u64::from(u32::MAX) {
        return bad("the activation is too large for 32-bit indexing".into());
    }
    Ok(())
}

pub fn dispatch_grid(w: &HadamardWorkload, s: &HadamardSchedule) -> [u32; 3] {
    [
        w.runs().div_ceil(Split::runs_per_group(w.n, s.threads)),
        w.m,
        1,
    ]
}

pub fn search_space(w: &HadamardWorkload, caps: &DeviceCaps) -> Vec<HadamardSchedule> {
    [32, 64, 128]
        .into_iter()
        .map(|threads| HadamardSchedule { threads })
        // Workgroups far wider than a row only idle.
        .filter(|s| s.threads <= 2 * (w.runs() * lanes(w.n)).next_power_of_two().max(32))
        .filter(|s| s.validate(w, caps).is_ok())
        .collect()
}

/// 32 threads: a row of Q holds only n_heads·head_dim/n runs (14 on the 0.5B, 4 lanes each),
/// so wider workgroups would mostly idle; rows fill the grid's second dimension.
pub fn default_schedule(w: &HadamardWorkload, caps: &DeviceCaps) -> HadamardSchedule {
    let s = HadamardSchedule { threads: 32 };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}

pub fn instantiate(
    w: &HadamardWorkload,
    s: &HadamardSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(w, s), caps)
}

/// The kernel's IR. The pair must validate.
pub fn kernel_ir(w: &HadamardWorkload, s: &HadamardSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let x = b.buffer(BINDING_X, "x", Type::vec(Scalar::F32, 4), Access::ReadWrite);
    let p_m = b.push_field("m", Type::U32);
    let split = Split::new(&b, w.n, s.threads, w.runs());
    let row = b.builtin(Builtin::WorkgroupId(1));
    let run = split.run(&b);
    let active = b.logical_and(b.lt(row, b.push(p_m)), b.lt(run, b.c_u32(w.runs())));
    let at = b.add(b.muli(row, w.width / 4), b.muli(run, w.n / 4));
    split.rotate(
        &b,
        active,
        |c| b.load(x, b.add(at, c)),
        |c, v| b.store(x, b.add(at, c), v),
    );
    b.finish()
}

/// Values one lane holds of a run of `n` (see [`Split`]): 16 up to n = 64, 32 above.
pub fn lane_values(n: u32) -> u32 {
    if n <= 64 {
        16
    } else {
        32
    }
}

/// Lanes (threads) that share a run of `n` values: 2 (n = 32), 4 (64, 128) or 8 (256).
pub fn lanes(n: u32) -> u32 {
    n / lane_values(n)
}

/// Workgroup memory of a workgroup of `threads` rotating runs of `n` of a row of `runs`, in
/// bytes: room for the runs it serves, no more than the row has (panvk 25.x allocates a
/// dispatch's workgroup memory for every workgroup instance, docs/design.md §1).
pub fn split_shared_bytes(n: u32, threads: u32, runs: u32) -> u32 {
    Split::runs_per_group(n, threads).min(runs) * n * 4
}

/// One run of `n` values spread over [`lanes`]`(n)` threads, `P` = [`lane_values`]`(n)`
/// values each, through workgroup memory, so that no thread holds a whole run in registers
/// (a run of 64 held by one thread took 134 spill stores on Mali's Valhall compiler, one of
/// 128 took 892; docs/measurements/2026-12-06e-kv-rotation.md). The stages are ggml's, in its
/// order, with the same operands, so the result is [`fwht_chunks`]'s bit for bit:
/// - phase A: lane `l` loads values `l·P .. (l+1)·P` of its run, scales them by 1/√n and runs
///   the butterflies of strides 1 .. P/2 (all inside its P values), then stores them to
///   workgroup memory;
/// - barrier;
/// - phase B: lane `l` loads the vec4s of its P/4/L residue groups (values `4g .. 4g+4`
///   modulo P, L vec4s each, P values apart) and runs the strides P .. n/2 between them.
///
/// P² ≥ 4n makes every lane own at least one residue group. The workgroup's `threads` serve
/// `threads / L` runs, lane = local index mod L.
pub struct Split {
    n: u32,
    threads: u32,
    stage: SharedArray,
    lane: Value,
    local_run: Value,
}

impl Split {
    /// Declares the workgroup memory: `threads / L` runs of `n` values (vec4<f32>), or the
    /// row's `runs` where it has fewer (then the threads past them are never active: their
    /// run is past the row's last).
    pub fn new(b: &KernelBuilder, n: u32, threads: u32, runs: u32) -> Split {
        assert!(valid_run(n) && threads % lanes(n) == 0);
        let tid = b.builtin(Builtin::LocalInvocationIndex);
        let l = lanes(n);
        let held = split_shared_bytes(n, threads, runs) / 16;
        Split {
            n,
            threads,
            stage: b.shared_array("stage", Type::vec(Scalar::F32, 4), held),
            lane: b.andi(tid, l - 1),
            local_run: b.shri(tid, l.trailing_zeros()),
        }
    }

    /// Runs per workgroup.
    pub fn runs_per_group(n: u32, threads: u32) -> u32 {
        threads / lanes(n)
    }

    /// This thread's run: workgroup x · runs per group + its run in the group.
    pub fn run(&self, b: &KernelBuilder) -> Value {
        b.add(
            b.muli(
                b.builtin(Builtin::WorkgroupId(0)),
                Self::runs_per_group(self.n, self.threads),
            ),
            self.local_run,
        )
    }

    /// The lane of this thread within its run.
    pub fn lane(&self) -> Value {
        self.lane
    }

    /// The workgroup memory and the vec4 index of this thread's run in it.
    pub fn stage(&self, b: &KernelBuilder) -> (SharedArray, Value) {
        (self.stage, b.muli(self.local_run, self.n / 4))
    }

    /// Phases A and B: `load(c)` gives vec4 `c` of the run (where `active`), `store(c, v)`
    /// takes the rotated vec4 `c` (each c of the run exactly once over its lanes). Holds one
    /// barrier: every thread of the workgroup must call it.
    pub fn rotate(
        &self,
        b: &KernelBuilder,
        active: Value,
        load: impl Fn(Value) -> Value,
        store: impl Fn(Value, Value),
    ) {
        let (p4, l) = (lane_values(self.n) / 4, lanes(self.n));
        let groups = p4 / l;
        let (stage, base) = self.stage(b);
        let scale = b.splat(b.c_f32(1.0 / (self.n as f32).sqrt()), 4);
        b.if_(active, || {
            let mine = b.muli(self.lane, p4);
            let chunks: Vec<Value> = (0..p4).map(|c| load(b.addi(mine, c))).collect();
            let v = b.precise(|| {
                let v: Vec<Value> = chunks.iter().map(|&c| b.mul(c, scale)).collect();
                chunk_butterflies(b, &lane_butterflies(b, &v))
            });
            for (c, &value) in v.iter().enumerate() {
                b.store_shared(stage, b.add(base, b.addi(mine, c as u32)), value);
            }
        });
        b.barrier();
        b.if_(active, || {
            let first = b.muli(self.lane, groups);
            for g in 0..groups {
                let at: Vec<Value> = (0..l).map(|k| b.addi(first, k * p4 + g)).collect();
                let v: Vec<Value> = at
                    .iter()
                    .map(|&c| b.load_shared(stage, b.add(base, c)))
                    .collect();
                let v = b.precise(|| chunk_butterflies(b, &v));
                for (&c, value) in at.iter().zip(v) {
                    store(c, value);
                }
            }
        });
    }
}

/// One run of `4·chunks.len()` values (vec4<f32> chunks, value 4c + l in lane l of chunk c)
/// multiplied by the orthonormal Walsh-Hadamard matrix of that size, in ggml's order: scaled
/// by 1/√n, then butterflies at strides 1, 2 (inside each vec4, lane by lane) and 4, 8, ...
/// (whole vec4s against each other). Precise: no FMA may merge the scaling into a butterfly.
/// The kernels spread a run over lanes instead ([`Split`], the same operations).
pub fn fwht_chunks(b: &KernelBuilder, chunks: &[Value]) -> Vec<Value> {
    let n = 4 * chunks.len() as u32;
    assert!(valid_run(n), "fwht_chunks: a run of {n} values");
    b.precise(|| {
        let scale = b.splat(b.c_f32(1.0 / (n as f32).sqrt()), 4);
        let v: Vec<Value> = chunks.iter().map(|&c| b.mul(c, scale)).collect();
        chunk_butterflies(b, &lane_butterflies(b, &v))
    })
}

/// The butterflies of strides 1 and 2: lanes of one vec4.
fn lane_butterflies(b: &KernelBuilder, v: &[Value]) -> Vec<Value> {
    let mut v = v.to_vec();
    for stride in [1u32, 2] {
        v = v
            .iter()
            .map(|&c| {
                let lane = |i: u32| b.extract(c, i);
                let out: Vec<Value> = (0..4u32)
                    .map(|i| {
                        let lo = i & !stride;
                        let (a, bb) = (lane(lo), lane(lo | stride));
                        if i & stride == 0 {
                            b.add(a, bb)
                        } else {
                            b.sub(a, bb)
                        }
                    })
                    .collect();
                b.construct(&out)
            })
            .collect();
    }
    v
}

/// The butterflies between whole vec4s `1, 2, 4, ...` chunks apart, in that order.
fn chunk_butterflies(b: &KernelBuilder, v: &[Value]) -> Vec<Value> {
    let mut v = v.to_vec();
    let mut len = 1;
    while len < v.len() {
        let mut next = v.clone();
        for i in (0..v.len()).step_by(2 * len) {
            for j in i..i + len {
                next[j] = b.add(v[j], v[j + len]);
                next[j + len] = b.sub(v[j], v[j + len]);
            }
        }
        v = next;
        len *= 2;
    }
    v
}

// ---- CPU reference ------------------------------------------------------------------------

/// Each run of `n` values of `x` (a power of two dividing its length) multiplied by the
/// orthonormal Walsh-Hadamard matrix of size `n` (Sylvester's order: entry (i, j) is
/// (-1)^popcount(i & j) / √n), computed as ggml's CPU backend does
/// (`ggml_compute_forward_fwht`): scaled by 1/√n first, then the butterflies, strides 1, 2,
/// 4, ... The kernels ([`kernel_ir`], the rotated q8_0 KV write) match it bit for bit.
pub fn reference(x: &mut [f32], n: usize) {
    assert!(n.is_power_of_two() && x.len() % n == 0);
    let scale = 1.0 / (n as f32).sqrt();
    for run in x.chunks_mut(n) {
        run.iter_mut().for_each(|v| *v *= scale);
        let mut len = 1;
        while len < n {
            for i in (0..n).step_by(2 * len) {
                for j in i..i + len {
                    let (a, b) = (run[j], run[j + len]);
                    run[j] = a + b;
                    run[j + len] = a - b;
                }
            }
            len *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_sizes_follow_llama_cpp() {
        let q8 = KvTypes::Q8_0;
        assert_eq!(kv_rotation_sizes(q8, 64), (Some(64), Some(64)));
        assert_eq!(kv_rotation_sizes(q8, 128), (Some(128), Some(64)));
        assert_eq!(kv_rotation_sizes(q8, 192), (Some(64), Some(64)));
        assert_eq!(kv_rotation_sizes(q8, 256), (Some(256), Some(64)));
        assert_eq!(kv_rotation_sizes(q8, 96), (None, None));
        assert_eq!(kv_rotation_sizes(KvTypes::F16, 128), (None, None));
        assert_eq!(kv_rotation_sizes(KvTypes::F32, 128), (None, None));
        let k_only = KvTypes::new(KvType::Q8_0, KvType::F16);
        assert_eq!(kv_rotation_sizes(k_only, 128), (Some(128), None));
    }
}
