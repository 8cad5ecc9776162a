//! Rotary position embedding, in place: NeoX pairing (pairs `i` and `i + head_dim/2`: Qwen2,
//! Gemma 3; llama.cpp's LLAMA_ROPE_TYPE_NEOX) or normal pairing (adjacent `2i` and `2i + 1`:
//! Llama; LLAMA_ROPE_TYPE_NORM), optionally with per-pair frequency factors (Llama 3's
//! `rope_freqs.weight`, which divide pair i's angle as ggml's rope cache does).
//!
//! Contract with the runtime:
//! - binding 0 `x`: f32 [m × n_heads·head_dim], rotated in place;
//! - binding 1 `freqs` (only with `freq_factors`): f32 [head_dim/2], pair i's angle divisor;
//! - push constants ([`RopePush`], 8 bytes): `m` (rows, ≤ the workload's m), `pos0` (position
//!   of row 0; row r is at position `pos0 + r`);
//! - grid `[ceil(head_dim/2 · ceil(n_heads/heads_per_thread) / threads), m, 1]`.
//!
//! Angles: pair i of position p turns by θ_i = p · base^(-2i/head_dim). The kernel builds θ_i
//! exactly as ggml's rope cache (and rocky's CPU reference) does: θ = p, then i times
//! `θ *= theta_scale` in f32 with `theta_scale = powf(base, -2/head_dim)` baked in as a
//! constant. f32 multiplication is correctly rounded on every Vulkan device, so the angles are
//! bit-identical to the oracle's (a closed form such as `p·exp2(-2i/d·log2 base)` would be
//! off by up to ~1e-3 rad at position 4096, from `exp2`'s few-ulp error times p). Each thread
//! pays at most head_dim/2 - 1 dependent multiplications, negligible next to its memory
//! traffic, and reuses the angle for `heads_per_thread` heads.
//!
//! sin/cos come from [`sin_cos`], a Cody–Waite reduction plus minimax polynomials written in
//! the IR: GPU `sin`/`cos` are only specified to 2⁻¹¹ absolute inside [-π, π], and angles
//! here reach 4096 rad and beyond. The fragment is accurate to ~1e-7 absolute for |θ| up to
//! about 51000 (see its docs), so the kernel agrees with the f64 reference to a few f32 ulps of
//! the row's values. With frequency factors the angle is then divided by the pair's factor,
//! as ggml does; Vulkan only bounds that division to 2.5 ulp, so there the reference allows
//! 3 ulp of the angle on top (`reference_with`).

use serde::{Deserialize, Serialize};

use super::expected::Expected;
use super::kv_cache::f32_to_f16_bits;
use super::{check_threads, compile, push_bytes, MAX_GRID_DIM};
use crate::caps::DeviceCaps;
use crate::ir::{Access, Buffer, Builtin, KernelBuilder, Module, Scalar, Type, Unroll, Value};
use crate::kernel::CompiledKernel;
use crate::kv_type::{KvType, KvTypes};
use crate::refusal::Refusal;

pub const BINDING_X: u32 = 0;
pub const BINDING_FREQS: u32 = 1;
/// The fused RoPE-and-KV-write form's (`kv_heads` > 0) other bindings: the new K and V rows
/// (f32, read) and the layer's caches (u32 words, written; the KV write's layout).
pub const BINDING_K: u32 = 2;
pub const BINDING_V: u32 = 3;
pub const BINDING_K_CACHE: u32 = 4;
pub const BINDING_V_CACHE: u32 = 5;

/// Which elements of a head rotate together.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum RopePairing {
    /// `i` with `i + head_dim/2` (GPT-NeoX; Qwen2, Qwen3, Gemma 3).
    #[default]
    Neox,
    /// `2i` with `2i + 1` (the original RoPE; Llama).
    Normal,
}

impl RopePairing {
    pub fn is_neox(&self) -> bool {
        *self == RopePairing::Neox
    }

    pub fn name(&self) -> &'static str {
        match self {
            RopePairing::Neox => "neox",
            RopePairing::Normal => "norm",
        }
    }

    /// Offsets of pair `i`'s two elements within a head.
    pub fn offsets(&self, i: usize, head_dim: usize) -> (usize, usize) {
        match self {
            RopePairing::Neox => (i, i + head_dim / 2),
            RopePairing::Normal => (2 * i, 2 * i + 1),
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// RoPE over `m` rows of `n_heads` heads of `head_dim`; `theta_bits` is the f32 bit pattern of
/// the frequency base (1e6 for Qwen2). `pairing` and `freq_factors` are left out of the
/// serialized form at their defaults (NeoX, none), so the keys of the tuning records made
/// before they existed still name the same kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeWorkload {
    pub m: u32,
    pub n_heads: u32,
    pub head_dim: u32,
    pub theta_bits: u32,
    #[serde(default, skip_serializing_if = "RopePairing::is_neox")]
    pub pairing: RopePairing,
    /// Pair i's angle is divided by `freqs[i]` (binding 1).
    #[serde(default, skip_serializing_if = "is_false")]
    pub freq_factors: bool,
    /// Above 0: the decode step's fusion of RoPE with the KV write ([`kv_kernel_ir`]). `x` is
    /// the query (`n_heads` heads, rotated in place); the new key (`kv_heads` heads) is rotated
    /// and stored into the K cache at its position, the new value copied into the V cache,
    /// each in its cache's type (`kv`: f32 or f16). One dispatch instead of two RoPEs and two
    /// KV writes. Left out of the serialization at 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kv_heads: u32,
    /// The caches' types where `kv_heads` > 0 (left out at f16, f16).
    #[serde(default, skip_serializing_if = "KvTypes::is_default")]
    pub kv: KvTypes,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl RopeWorkload {
    /// NeoX pairing without frequency factors.
    pub fn new(m: u32, n_heads: u32, head_dim: u32, theta: f32) -> Self {
        RopeWorkload {
            m,
            n_heads,
            head_dim,
            theta_bits: theta.to_bits(),
            pairing: RopePairing::Neox,
            freq_factors: false,
            kv_heads: 0,
            kv: KvTypes::default(),
        }
    }

    /// This RoPE of the query fused with the rotation of `kv_heads` key heads and the KV
    /// write into caches of types `kv` (see the field's documentation).
    pub fn with_kv_write(self, kv_heads: u32, kv: KvTypes) -> Self {
        RopeWorkload {
            kv_heads,
            kv,
            ..self
        }
    }

    /// Whether this is the fused RoPE-and-KV-write form.
    pub fn writes_kv(&self) -> bool {
        self.kv_heads > 0
    }

    /// Values of one position's K (and V) row.
    pub fn kv_width(&self) -> u32 {
        self.kv_heads * self.head_dim
    }

    pub fn with_pairing(self, pairing: RopePairing) -> Self {
        RopeWorkload { pairing, ..self }
    }

    pub fn with_freq_factors(self, freq_factors: bool) -> Self {
        RopeWorkload {
            freq_factors,
            ..self
        }
    }

    /// The frequency base.
    pub fn theta(&self) -> f32 {
        f32::from_bits(self.theta_bits)
    }

    /// ggml's `theta_scale = powf(base, -2/head_dim)`: the ratio of neighbouring frequencies.
    pub fn theta_scale(&self) -> f32 {
        self.theta().powf(-2.0 / self.head_dim as f32)
    }

    pub fn row_width(&self) -> u32 {
        self.n_heads * self.head_dim
    }

    /// Four multiply-adds per rotated pair (sin/cos are amortized over the heads).
    pub fn flops(&self) -> u64 {
        3 * u64::from(self.m) * u64::from(self.row_width() + self.kv_width())
    }
}

/// Push constants: `m`, `pos0` (u32 each, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopePush {
    pub m: u32,
    pub pos0: u32,
}

impl RopePush {
    pub const BYTES: u32 = 8;

    pub fn to_bytes(&self) -> Vec<u8> {
        push_bytes(&[self.m, self.pos0])
    }
}

/// Thread layout: thread j of a row rotates pair `j % (head_dim/2)` of heads
/// `(j / (head_dim/2))·heads_per_thread ..` (one angle, several heads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeSchedule {
    pub threads: u32,
    pub heads_per_thread: u32,
}

impl RopeSchedule {
    /// `rope_neox_…` as before for the default workload; `rope_norm_…` and a `_ff` suffix for
    /// the variants.
    pub fn name(&self, w: &RopeWorkload) -> String {
        let kv = if w.writes_kv() {
            format!("_kv{}_{}{}", w.kv_heads, w.kv.k.name(), w.kv.v.name())
        } else {
            String::new()
        };
        format!(
            "rope_{}_h{}x{}{kv}_t{}_hp{}{}",
            w.pairing.name(),
            w.n_heads,
            w.head_dim,
            self.threads,
            self.heads_per_thread,
            if w.freq_factors { "_ff" } else { "" }
        )
    }

    fn head_groups(&self, w: &RopeWorkload) -> u32 {
        w.n_heads.div_ceil(self.heads_per_thread)
    }

    /// Threads per row. The fused form: a thread per two neighbouring pairs of a query or key
    /// head, or per four values of the V row.
    pub fn row_threads(&self, w: &RopeWorkload) -> u32 {
        if w.writes_kv() {
            return (w.n_heads + 2 * w.kv_heads) * (w.head_dim / 4);
        }
        w.head_dim / 2 * self.head_groups(w)
    }

    pub fn validate(&self, w: &RopeWorkload, caps: &DeviceCaps) -> Result<(), Refusal> {
        if w.writes_kv() && self.heads_per_thread != 1 {
            return Err(Refusal::Schedule(
                "the fused RoPE and KV write takes one head per thread: heads_per_thread 1".into(),
            ));
        }
        if self.heads_per_thread == 0 || self.heads_per_thread > w.n_heads {
            return Err(Refusal::Schedule(format!(
                "heads_per_thread {} must be in 1..={}",
                self.heads_per_thread, w.n_heads
            )));
        }
        check_threads(self.threads, caps)?;
        let groups = self.row_threads(w).div_ceil(self.threads);
        if groups > MAX_GRID_DIM {
            return Err(Refusal::Schedule(format!(
                "{groups} workgroups per row exceed the grid limit {MAX_GRID_DIM}"
            )));
        }
        Ok(())
    }
}

pub fn validate_workload(w: &RopeWorkload) -> Result<(), Refusal> {
    let bad = |s: String| Err(Refusal::Workload(s));
    if w.m == 0 || w.n_heads == 0 || w.head_dim == 0 {
        return bad("m, n_heads and head_dim must be at least 1".into());
    }
    if w.head_dim % 2 != 0 {
        return bad(format!(
            "head_dim {} is odd: RoPE rotates pairs",
            w.head_dim
        ));
    }
    if w.m > MAX_GRID_DIM {
        return bad(format!("m = {} exceeds the grid limit {MAX_GRID_DIM}", w.m));
    }
    if u64::from(w.m) * u64::from(w.row_width()) > u64::from(u32::MAX) {
        return bad("the activation is too large for 32-bit indexing".into());
    }
    let t = w.theta();
    if !t.is_finite() || t <= 0.0 || !w.theta_scale().is_finite() {
        return bad(format!("frequency base {t} must be finite and positive"));
    }
    if w.writes_kv() {
        if w.head_dim % 4 != 0 {
            return bad(format!(
                "head_dim {} is not a multiple of 4: the fused KV write stores whole f16 pairs \
                 of two neighbouring rotated pairs",
                w.head_dim
            ));
        }
        if [w.kv.k, w.kv.v].contains(&KvType::Q8_0) {
            return bad(
                "the fused RoPE and KV write stores f32 or f16 caches; q8_0 quantizes whole \
                 blocks in the KV-write kernel"
                    .into(),
            );
        }
        if w.n_heads % w.kv_heads != 0 {
            return bad(format!(
                "{} query heads do not share {} key heads evenly",
                w.n_heads, w.kv_heads
            ));
        }
    }
    Ok(())
}

pub fn dispatch_grid(w: &RopeWorkload, s: &RopeSchedule) -> [u32; 3] {
    [s.row_threads(w).div_ceil(s.threads), w.m, 1]
}

pub fn search_space(w: &RopeWorkload, caps: &DeviceCaps) -> Vec<RopeSchedule> {
    let mut hpts: Vec<u32> = [1, 2, 4, w.n_heads]
        .into_iter()
        .filter(|&h| h >= 1 && h <= w.n_heads)
        .collect();
    hpts.sort_unstable();
    hpts.dedup();
    let mut out = Vec::new();
    for heads_per_thread in hpts {
        for threads in [32, 64, 128, 256] {
            let s = RopeSchedule {
                threads,
                heads_per_thread,
            };
            // Workgroups far wider than a row only idle.
            if threads > 2 * s.row_threads(w).next_power_of_two().max(32) {
                continue;
            }
            if s.validate(w, caps).is_ok() {
                out.push(s);
            }
        }
    }
    out
}

/// 64 threads; two heads per angle (halves the angle work without starving the grid); one in
/// the fused form.
pub fn default_schedule(w: &RopeWorkload, caps: &DeviceCaps) -> RopeSchedule {
    let s = RopeSchedule {
        threads: 64,
        heads_per_thread: if w.writes_kv() {
            1
        } else {
            2.min(w.n_heads.max(1))
        },
    };
    if s.validate(w, caps).is_ok() {
        return s;
    }
    search_space(w, caps).into_iter().next().unwrap_or(s)
}

pub fn instantiate(
    w: &RopeWorkload,
    s: &RopeSchedule,
    caps: &DeviceCaps,
) -> Result<CompiledKernel, Refusal> {
    validate_workload(w)?;
    s.validate(w, caps)?;
    compile(&kernel_ir(w, s), caps)
}

/// The kernel's IR. The pair must validate.
pub fn kernel_ir(w: &RopeWorkload, s: &RopeSchedule) -> Module {
    if w.writes_kv() {
        return kv_kernel_ir(w, s);
    }
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let x = b.buffer(BINDING_X, "x", Type::F32, Access::ReadWrite);
    let freqs = w
        .freq_factors
        .then(|| b.model_buffer(BINDING_FREQS, "freqs", Type::F32));
    let p_m = b.push_field("m", Type::U32);
    let p_pos0 = b.push_field("pos0", Type::U32);
    let half = w.head_dim / 2;
    let row = b.builtin(Builtin::WorkgroupId(1));
    let j = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), s.threads),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let inside = b.logical_and(b.lt(row, b.push(p_m)), b.lt(j, b.c_u32(s.row_threads(w))));
    b.if_(inside, || {
        let i = b.rem(j, b.c_u32(half));
        let group = b.div(j, b.c_u32(half));
        let pos = b.add(b.push(p_pos0), row);
        let theta = ggml_theta(&b, pos, i, w.theta_scale());
        // ggml's rope cache: theta / freq_factors[i] (f32 division).
        let angle = match freqs {
            Some(f) => b.div(theta, b.load(f, i)),
            None => theta,
        };
        let (sin, cos) = sin_cos(&b, angle);
        let row_base = b.muli(row, w.row_width());
        for t in 0..s.heads_per_thread {
            let head = b.addi(b.muli(group, s.heads_per_thread), t);
            let rotate = || {
                let head_base = b.add(row_base, b.muli(head, w.head_dim));
                let (lo, hi) = match w.pairing {
                    RopePairing::Neox => {
                        let lo = b.add(head_base, i);
                        (lo, b.addi(lo, half))
                    }
                    RopePairing::Normal => {
                        let lo = b.add(head_base, b.muli(i, 2));
                        (lo, b.addi(lo, 1))
                    }
                };
                let (x0, x1) = (b.load(x, lo), b.load(x, hi));
                b.store(x, lo, rotated_lo(&b, x0, x1, (sin, cos)));
                b.store(x, hi, rotated_hi(&b, x0, x1, (sin, cos)));
            };
            if w.n_heads % s.heads_per_thread == 0 {
                rotate();
            } else {
                b.if_(b.lt(head, b.c_u32(w.n_heads)), rotate);
            }
        }
    });
    b.finish()
}

/// The fused RoPE and KV write of a decode step (`kv_heads` > 0). Thread `j` of row `r` takes,
/// in this order over j: two neighbouring pairs (2u, 2u+1) of a query head, rotated in place
/// in `x`; two neighbouring pairs of a key head, rotated and stored at row `pos0 + r` of the K
/// cache; or four neighbouring values of the V row, stored in the V cache. Two neighbouring
/// pairs make whole f16 words in either pairing (NeoX: elements 2u, 2u+1 and 2u+h, 2u+1+h
/// with h = head_dim/2 even; normal: 4u .. 4u+3), so no two threads write one cache word.
/// The angles are ggml's (θ of pair 2u+1 is θ of pair 2u times `theta_scale`, the next step of
/// the same product), the rotation the same operations as [`kernel_ir`]'s, and the stores
/// the KV write's ([`super::kv_cache`]: f32 bits, or f16 rounded by [`f32_to_f16_bits`]), so
/// the result is the unfused kernels' bit for bit. Rows past the bound caches are not stored.
fn kv_kernel_ir(w: &RopeWorkload, s: &RopeSchedule) -> Module {
    let b = KernelBuilder::new(s.name(w), [s.threads, 1, 1]);
    let x = b.buffer(BINDING_X, "x", Type::F32, Access::ReadWrite);
    let freqs = w
        .freq_factors
        .then(|| b.model_buffer(BINDING_FREQS, "freqs", Type::F32));
    let k_src = b.buffer(BINDING_K, "k", Type::F32, Access::ReadOnly);
    let v_src = b.buffer(BINDING_V, "v", Type::F32, Access::ReadOnly);
    let k_cache = b.buffer(BINDING_K_CACHE, "k_cache", Type::U32, Access::WriteOnly);
    let v_cache = b.buffer(BINDING_V_CACHE, "v_cache", Type::U32, Access::WriteOnly);
    let p_m = b.push_field("m", Type::U32);
    let p_pos0 = b.push_field("pos0", Type::U32);
    let (hd, quads) = (w.head_dim, w.head_dim / 4);
    let (q_threads, k_threads) = (w.n_heads * quads, w.kv_heads * quads);
    let kv_width = w.kv_width();
    let row = b.builtin(Builtin::WorkgroupId(1));
    let j = b.add(
        b.muli(b.builtin(Builtin::WorkgroupId(0)), s.threads),
        b.builtin(Builtin::LocalInvocationIndex),
    );
    let inside = b.logical_and(b.lt(row, b.push(p_m)), b.lt(j, b.c_u32(s.row_threads(w))));
    b.if_(inside, || {
        let pos = b.add(b.push(p_pos0), row);
        // The four elements (offsets within a head) of quad `u`: two rotated pairs, as
        // (lo, hi) offsets of pair 2u and pair 2u+1.
        let pair_offsets = |u: Value| -> [(Value, Value); 2] {
            let p0 = b.shli(u, 1);
            let p1 = b.addi(p0, 1);
            match w.pairing {
                RopePairing::Neox => [(p0, b.addi(p0, hd / 2)), (p1, b.addi(p1, hd / 2))],
                RopePairing::Normal => {
                    let e = b.shli(u, 2);
                    [(e, b.addi(e, 1)), (b.addi(e, 2), b.addi(e, 3))]
                }
            }
        };
        let angles = |u: Value| quad_angles(&b, pos, u, w.theta_scale(), freqs);
        let is_q = b.lt(j, b.c_u32(q_threads));
        b.if_else(
            is_q,
            || {
                let head = b.div(j, b.c_u32(quads));
                let u = b.rem(j, b.c_u32(quads));
                let base = b.add(b.muli(row, w.row_width()), b.muli(head, hd));
                let sc = angles(u);
                for (t, (lo, hi)) in pair_offsets(u).into_iter().enumerate() {
                    let (lo, hi) = (b.add(base, lo), b.add(base, hi));
                    let (y0, y1) = rotate(&b, b.load(x, lo), b.load(x, hi), sc[t]);
                    b.store(x, lo, y0);
                    b.store(x, hi, y1);
                }
            },
            || {
                let kj = b.sub(j, b.c_u32(q_threads));
                let is_k = b.lt(kj, b.c_u32(k_threads));
                b.if_else(
                    is_k,
                    || {
                        let head = b.div(kj, b.c_u32(quads));
                        let u = b.rem(kj, b.c_u32(quads));
                        let head_at = b.muli(head, hd);
                        let src = b.add(b.muli(row, kv_width), head_at);
                        let sc = angles(u);
                        // (element offset in the row, rotated value), four of them.
                        let mut out: Vec<(Value, Value)> = Vec::new();
                        for (t, (lo, hi)) in pair_offsets(u).into_iter().enumerate() {
                            let (y0, y1) = rotate(
                                &b,
                                b.load(k_src, b.add(src, lo)),
                                b.load(k_src, b.add(src, hi)),
                                sc[t],
                            );
                            out.push((b.add(head_at, lo), y0));
                            out.push((b.add(head_at, hi), y1));
                        }
                        // Neighbouring elements: (2u, 2u+1) and (2u+h, 2u+1+h) in NeoX
                        // (out order lo0, hi0, lo1, hi1), 4u .. 4u+3 in normal pairing.
                        let words = match w.pairing {
                            RopePairing::Neox => [(out[0], out[2]), (out[1], out[3])],
                            RopePairing::Normal => [(out[0], out[1]), (out[2], out[3])],
                        };
                        store_kv(&b, w.kv.k, k_cache, kv_width, pos, words);
                    },
                    || {
                        let e = b.shli(b.sub(kj, b.c_u32(k_threads)), 2);
                        let src = b.add(b.muli(row, kv_width), e);
                        let val = |i: u32| (b.addi(e, i), b.load(v_src, b.addi(src, i)));
                        let words = [(val(0), val(1)), (val(2), val(3))];
                        store_kv(&b, w.kv.v, v_cache, kv_width, pos, words);
                    },
                );
            },
        );
    });
    b.finish()
}

/// (sin, cos) of pairs 2u and 2u+1 at `pos`, as [`kernel_ir`] builds them: θ of pair 2u+1 is θ
/// of pair 2u times `theta_scale` (the next step of ggml's product), each divided by its
/// frequency factor where the model has them. The fused RoPE-and-KV-write kernel's and the
/// GEMV's RoPE-KV epilogue's (a quad of two neighbouring pairs) angles.
pub(crate) fn quad_angles(
    b: &KernelBuilder,
    pos: Value,
    u: Value,
    theta_scale: f32,
    freqs: Option<Buffer>,
) -> [(Value, Value); 2] {
    let p0 = b.shli(u, 1);
    let t0 = ggml_theta(b, pos, p0, theta_scale);
    let t1 = b.mul(t0, b.c_f32(theta_scale));
    let with_factor = |t: Value, pair: Value| match freqs {
        Some(f) => b.div(t, b.load(f, pair)),
        None => t,
    };
    [
        sin_cos(b, with_factor(t0, p0)),
        sin_cos(b, with_factor(t1, b.addi(p0, 1))),
    ]
}

/// ggml's angle of pair `i` at `pos`: θ = pos, then `i` times θ *= theta_scale (f32, correctly
/// rounded), as [`ggml_angle`] computes it on the CPU.
pub(crate) fn ggml_theta(b: &KernelBuilder, pos: Value, i: Value, theta_scale: f32) -> Value {
    let theta = b.var_init("theta", b.convert(pos, Type::F32));
    let scale = b.c_f32(theta_scale);
    b.for_range(b.c_u32(0), i, 1, Unroll::Never, |_| {
        b.store_var(theta, b.mul(b.load_var(theta), scale));
    });
    b.load_var(theta)
}

/// The pair (x0, x1) turned by the angle of `(sin, cos)`: both kernels' one rotation, its first
/// element ([`rotated_lo`]) and its second ([`rotated_hi`]).
pub(crate) fn rotate(
    b: &KernelBuilder,
    x0: Value,
    x1: Value,
    sc: (Value, Value),
) -> (Value, Value) {
    (rotated_lo(b, x0, x1, sc), rotated_hi(b, x0, x1, sc))
}

fn rotated_lo(b: &KernelBuilder, x0: Value, x1: Value, (sin, cos): (Value, Value)) -> Value {
    b.sub(b.mul(x0, cos), b.mul(x1, sin))
}

fn rotated_hi(b: &KernelBuilder, x0: Value, x1: Value, (sin, cos): (Value, Value)) -> Value {
    b.add(b.mul(x0, sin), b.mul(x1, cos))
}

/// Stores two pairs of neighbouring values `((e, a), (e + 1, b))` of position `pos` into a
/// cache of `ty` (f32: a word each; f16: one packed word, the even element low), unless the
/// position lies past the bound cache.
pub(crate) fn store_kv(
    b: &KernelBuilder,
    ty: KvType,
    cache: Buffer,
    kv_width: u32,
    pos: Value,
    words: [((Value, Value), (Value, Value)); 2],
) {
    let row_words = ty.row_words(kv_width);
    let fits = b.lt(pos, b.div(b.array_length(cache), b.c_u32(row_words)));
    b.if_(fits, || {
        let base = b.muli(pos, row_words);
        for ((e, lo), (_, hi)) in words {
            match ty {
                KvType::F16 => {
                    let word = b.or(f32_to_f16_bits(b, lo), b.shli(f32_to_f16_bits(b, hi), 16));
                    b.store(cache, b.add(base, b.shri(e, 1)), word);
                }
                _ => {
                    let at = b.add(base, e);
                    b.store(cache, at, b.bitcast(lo, Type::U32));
                    b.store(cache, b.addi(at, 1), b.bitcast(hi, Type::U32));
                }
            }
        }
    });
}

/// π/2 in three parts: C1 = 201/128 and C2 = 507·2⁻²⁰ have at most 9 significant bits, so
/// `k·C1` and `k·C2` are exact for |k| < 2¹⁵ and `x - k·C1` is exact by Sterbenz's lemma; C3
/// is the f32 rest (π/2 - C1 - C2 = 3.13916478…e-7). Literals are the shortest decimals of
/// the intended f32 values.
const PIO2_1: f32 = 1.570_312_5;
const PIO2_2: f32 = 4.835_128_8e-4;
const PIO2_3: f32 = 3.139_164_7e-7;
/// Cephes' single-precision minimax coefficients on [-π/4, π/4] (relative error ~3e-8).
const SIN_P: [f32; 3] = [-1.951_529_6e-4, 8.332_161e-3, -1.666_665_5e-1];
const COS_P: [f32; 3] = [2.443_315_7e-5, -1.388_731_6e-3, 4.166_664_6e-2];

/// `(sin θ, cos θ)` for an f32 θ, in IR: k = roundEven(θ·2/π), r = θ - k·π/2 (three-part
/// Cody–Waite, exact products while |k| < 2¹⁵, i.e. |θ| < ~51000), polynomials on
/// |r| ≤ π/4, quadrant k mod 4 by selects. Absolute error ≲ 1e-7 in that range; beyond it
/// the reduction loses accuracy gradually (no cliff).
pub fn sin_cos(b: &KernelBuilder, theta: Value) -> (Value, Value) {
    let k = b.round_even(b.mul(theta, b.c_f32(std::f32::consts::FRAC_2_PI)));
    // Marked precise: the exactness argument needs these exact roundings, not a driver's
    // contraction into FMAs (harmless here, but the interpreter then matches the GPU).
    let r = b.precise(|| {
        let r = b.sub(theta, b.mul(k, b.c_f32(PIO2_1)));
        let r = b.sub(r, b.mul(k, b.c_f32(PIO2_2)));
        b.sub(r, b.mul(k, b.c_f32(PIO2_3)))
    });
    let z = b.mul(r, r);
    let horner = |c: &[f32; 3]| {
        let p = b.add(b.mul(b.c_f32(c[0]), z), b.c_f32(c[1]));
        b.add(b.mul(p, z), b.c_f32(c[2]))
    };
    // sin r = r + r·z·P(z); cos r = 1 - z/2 + z²·Q(z).
    let sin_r = b.add(r, b.mul(b.mul(r, z), horner(&SIN_P)));
    let cos_r = b.add(
        b.sub(b.c_f32(1.0), b.mul(z, b.c_f32(0.5))),
        b.mul(b.mul(z, z), horner(&COS_P)),
    );
    // Quadrant: k mod 4 (two's complement `& 3` is the right modulus for negative k too).
    let q = b.andi(b.bitcast(b.convert(k, Type::I32), Type::U32), 3);
    let odd = b.eq(b.andi(q, 1), b.c_u32(1));
    let sin_neg = b.ge(q, b.c_u32(2));
    let cos_neg = b.logical_or(b.eq(q, b.c_u32(1)), b.eq(q, b.c_u32(2)));
    let s = b.select(odd, cos_r, sin_r);
    let c = b.select(odd, sin_r, cos_r);
    let sin = b.select(sin_neg, b.neg(s), s);
    let cos = b.select(cos_neg, b.neg(c), c);
    debug_assert_eq!(sin.ty, Type::scalar(Scalar::F32));
    (sin, cos)
}

// ---- CPU reference ------------------------------------------------------------------------

/// ggml's angle of pair `i` at position `pos`: θ = pos, then i times `θ *= theta_scale` (f32).
pub fn ggml_angle(pos: u32, i: u32, theta_scale: f32) -> f32 {
    let mut theta = pos as f32;
    for _ in 0..i {
        theta *= theta_scale;
    }
    theta
}

/// RoPE of the first `m` rows of `x` (m × n_heads·head_dim) with row r at `pos0 + r`:
/// ggml's f32 angles, then sin/cos and the rotation in f64.
///
/// Allowed error per output: the kernel's sin/cos are within ~1e-7 absolute (reduction and
/// polynomial, |θ| < 51000) and the rotation rounds two products and a sum, so
/// `|out| ≤ |x0| + |x1|` errs by at most `(1e-7 + 3·2⁻²⁴)·(|x0| + |x1|)`; 5e-7 leaves margin.
pub fn reference(w: &RopeWorkload, m: usize, pos0: u32, x: &[f32]) -> Expected {
    assert!(
        !w.freq_factors,
        "rope reference: pass the factors to reference_with"
    );
    reference_with(w, m, pos0, x, None)
}

/// [`reference`] with the workload's pairing and, where it has them, frequency factors
/// (`freqs[i]` divides pair i's f32 angle, as ggml's rope cache does). Vulkan bounds OpFDiv
/// only to 2.5 ulp, so with factors the allowed error adds 3 ulp of the angle times the
/// pair's magnitude.
pub fn reference_with(
    w: &RopeWorkload,
    m: usize,
    pos0: u32,
    x: &[f32],
    freqs: Option<&[f32]>,
) -> Expected {
    let (hd, width) = (w.head_dim as usize, w.row_width() as usize);
    assert!(x.len() >= m * width, "rope reference: x needs {m} rows");
    let half = hd / 2;
    assert_eq!(w.freq_factors, freqs.is_some(), "rope reference: factors");
    if let Some(f) = freqs {
        assert!(f.len() >= half, "rope reference: {half} frequency factors");
    }
    let scale = w.theta_scale();
    let mut values = x[..m * width].to_vec();
    let mut allowed = vec![0f32; m * width];
    for r in 0..m {
        for i in 0..half {
            let mut theta = ggml_angle(pos0 + r as u32, i as u32, scale);
            let mut angle_tol = 0.0;
            if let Some(f) = freqs {
                theta /= f[i];
                angle_tol = 3.0 * f64::from(theta.abs()) * f64::from(f32::EPSILON) / 2.0;
            }
            let (sin, cos) = f64::from(theta).sin_cos();
            for h in 0..w.n_heads as usize {
                let (a, b) = w.pairing.offsets(i, hd);
                let (lo, hi) = (r * width + h * hd + a, r * width + h * hd + b);
                let (x0, x1) = (f64::from(x[lo]), f64::from(x[hi]));
                values[lo] = (x0 * cos - x1 * sin) as f32;
                values[hi] = (x0 * sin + x1 * cos) as f32;
                let tol = ((5e-7 + angle_tol) * (x0.abs() + x1.abs())) as f32 + 1e-30;
                allowed[lo] = tol;
                allowed[hi] = tol;
            }
        }
    }
    Expected { values, allowed }
}
