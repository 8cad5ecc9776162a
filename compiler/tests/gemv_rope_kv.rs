//! The GEMV's RoPE-and-KV-write epilogue (`Epilogue::RopeKv`, a decode step's Q/K/V projection
//! with the query's and key's RoPE and the KV write folded in): kernels run by the IR
//! interpreter write the rotated query into Y and the rotated key and the value into f16 and
//! f32 caches at the step's position, as the unfused projection followed by the CPU RoPE
//! reference does (`gemv::reference::rope_kv`); cache rows of other positions stay untouched.
//! Both pairings, frequency factors, bias, a folded RMSNorm, int8 math, the parts a layer can
//! have (Q, K and V; Q and K; V alone) and each device profile's default; spirv-val on a
//! sample.

mod common;

use common::{desktop_vk12, mali_vk12, require_spirv_val, spirv_val};
use half::f16;
use rocky_compiler::ir::interp::{execute, BufferData};
use rocky_compiler::kv_type::{KvType, KvTypes};
use rocky_compiler::templates::gemm::{ActType, Epilogue, GemmPush, GemmWorkload, Math, RopeKv};
use rocky_compiler::templates::gemv::{self, reference, GemvSchedule};
use rocky_compiler::templates::rope::RopePairing;
use rocky_compiler::{testdata, DeviceCaps, WeightFormat, WeightLayout};

const HEAD_DIM: u32 = 16;
const KV_HEADS: u32 = 2;
/// Cache rows (positions) bound; the step writes at `POS0 ..`.
const CACHE_ROWS: u32 = 11;
const POS0: u32 = 9;

/// Which parts the projection holds: (q heads, k heads, v heads).
const QKV: (u32, u32, u32) = (4, KV_HEADS, KV_HEADS);
const QK: (u32, u32, u32) = (4, KV_HEADS, 0);
const V_ONLY: (u32, u32, u32) = (0, 0, KV_HEADS);

struct Case {
    parts: (u32, u32, u32),
    weight: WeightFormat,
    m: u32,
    pairing: RopePairing,
    freq_factors: bool,
    bias: bool,
    norm: bool,
    kv: KvTypes,
}

fn workload(c: &Case) -> GemmWorkload {
    let r = RopeKv {
        head_dim: HEAD_DIM,
        q_heads: c.parts.0,
        k_heads: c.parts.1,
        v_heads: c.parts.2,
        kv_heads: KV_HEADS,
        theta_bits: 10000f32.to_bits(),
        pairing: c.pairing,
        freq_factors: c.freq_factors,
        kv: c.kv,
    };
    GemmWorkload {
        m: c.m,
        n: r.rows() / 4,
        k: 256,
        act: ActType::F32,
        weight: c.weight,
        layout: WeightLayout::Gguf,
        bias: c.bias,
        epilogue: Epilogue::RopeKv(r),
        rms_norm_eps_bits: c.norm.then(|| 1e-6f32.to_bits()),
    }
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words_of(v: &[u8]) -> Vec<u32> {
    v.chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The values of one cache row (position `pos`) of a cache of `ty`.
fn cache_row(cache: &[u8], ty: KvType, width: usize, pos: usize) -> Vec<f32> {
    let words = words_of(cache);
    match ty {
        KvType::F32 => words[pos * width..(pos + 1) * width]
            .iter()
            .map(|w| f32::from_bits(*w))
            .collect(),
        KvType::F16 => words[pos * width / 2..(pos + 1) * width / 2]
            .iter()
            .flat_map(|w| {
                [
                    f16::from_bits(*w as u16).to_f32(),
                    f16::from_bits((*w >> 16) as u16).to_f32(),
                ]
            })
            .collect(),
        KvType::Q8_0 => unreachable!("not a RoPE-KV cache type"),
    }
}

fn check(c: &Case, s: &GemvSchedule, caps: &DeviceCaps, seed: u64) {
    let w = workload(c);
    let Epilogue::RopeKv(r) = w.epilogue else {
        unreachable!()
    };
    let name = s.name(&w);
    let kernel = gemv::instantiate(&w, s, caps).unwrap_or_else(|e| panic!("{name}: {e}"));
    let module = gemv::kernel_ir(&w, s);
    let rows = r.rows() as usize;
    let weights = testdata::random_weights(w.weight, rows, w.k as usize, seed);
    let mut x = testdata::random_activations((w.m * w.k) as usize, seed + 1);
    if c.norm {
        x.iter_mut().for_each(|v| *v *= 23.0);
    }
    let bias = c.bias.then(|| testdata::random_activations(rows, seed + 2));
    let norm = c
        .norm
        .then(|| testdata::random_activations(w.k as usize, seed + 3));
    let freqs: Option<Vec<f32>> = c.freq_factors.then(|| {
        (0..HEAD_DIM / 2)
            .map(|i| 1.0 + (i % 5) as f32 * 0.75)
            .collect()
    });
    let want = reference::rope_kv(
        &w,
        s,
        &x,
        &weights,
        bias.as_deref(),
        norm.as_deref(),
        freqs.as_deref(),
        POS0,
    )
    .unwrap();

    let q_width = (r.q_heads * HEAD_DIM) as usize;
    let kv_width = r.kv_width() as usize;
    // Y as wide as the query part (its row stride), NaN so that a missed store fails; the
    // caches filled with a marker that no store writes.
    let ldy = q_width.max(1);
    let mut y = bytes_f32(&vec![f32::NAN; w.m as usize * ldy]);
    let marker = 0x7fc0_1234u32;
    let cache_bytes = |ty: KvType| {
        let words = ty.row_words(r.kv_width()) * CACHE_ROWS;
        (0..words)
            .flat_map(|_| marker.to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let mut k_cache = cache_bytes(c.kv.k);
    let mut v_cache = cache_bytes(c.kv.v);
    let mut position: Vec<u8> = [1u32, POS0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut x_bytes = bytes_f32(&x);
    let mut w_bytes = weights.clone();
    w_bytes.resize(weights.len().div_ceil(4) * 4, 0);
    let mut bias_bytes = bias.as_ref().map(|b| bytes_f32(b));
    let mut norm_bytes = norm.as_ref().map(|g| bytes_f32(g));
    let mut freq_bytes = freqs.as_ref().map(|f| bytes_f32(f));
    let mut bufs = vec![
        BufferData {
            binding: 0,
            bytes: &mut x_bytes,
        },
        BufferData {
            binding: 1,
            bytes: &mut w_bytes,
        },
        BufferData {
            binding: 2,
            bytes: &mut y,
        },
        BufferData {
            binding: 8,
            bytes: &mut k_cache,
        },
        BufferData {
            binding: 9,
            bytes: &mut v_cache,
        },
        BufferData {
            binding: 11,
            bytes: &mut position,
        },
    ];
    for (binding, data) in [
        (3, bias_bytes.as_mut()),
        (7, norm_bytes.as_mut()),
        (10, freq_bytes.as_mut()),
    ] {
        if let Some(bytes) = data {
            bufs.push(BufferData { binding, bytes });
        }
    }
    let push = GemmPush {
        m: w.m,
        n: w.n,
        k: w.k,
        n_offset: 0,
        ldy: ldy as u32,
    };
    execute(
        &module,
        &mut bufs,
        &push.to_bytes(),
        gemv::dispatch_grid(&w, s),
        caps.subgroup_size,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", kernel.meta.name));
    drop(bufs);

    if r.q_heads > 0 {
        let got: Vec<f32> = words_of(&y).into_iter().map(f32::from_bits).collect();
        if let Err(e) = want.q.check(&got, q_width) {
            panic!("{name}: query: {e}");
        }
    }
    // The caches: the step's rows hold the key and value (with their type's rounding), every
    // other row still the marker.
    for (part, heads, cache, ty, expected) in [
        ("key", r.k_heads, &k_cache, c.kv.k, &want.k),
        ("value", r.v_heads, &v_cache, c.kv.v, &want.v),
    ] {
        let row_words = ty.row_words(r.kv_width()) as usize;
        let words = words_of(cache);
        for pos in 0..CACHE_ROWS as usize {
            let written = (POS0 as usize..(POS0 + w.m) as usize).contains(&pos);
            let row = &words[pos * row_words..(pos + 1) * row_words];
            if heads == 0 || !written {
                assert!(
                    row.iter().all(|&v| v == marker),
                    "{name}: {part} cache row {pos} was written"
                );
            }
        }
        if heads == 0 {
            continue;
        }
        // Rows past the bound cache are not stored: check those that fit.
        let fit = (CACHE_ROWS - POS0).min(w.m) as usize;
        let mut got = Vec::new();
        for i in 0..fit {
            got.extend(cache_row(cache, ty, kv_width, POS0 as usize + i));
        }
        let mut e = expected.clone();
        e.values.truncate(fit * kv_width);
        e.allowed.truncate(fit * kv_width);
        if ty == KvType::F16 {
            for (a, v) in e.allowed.iter_mut().zip(&e.values) {
                *a += v.abs() * 2f32.powi(-11) + 6e-8;
            }
        }
        if let Err(err) = e.check(&got, kv_width) {
            panic!("{name}: {part} cache: {err}");
        }
    }
}

fn cases() -> Vec<Case> {
    let f16 = KvTypes::default();
    let case = |parts, weight, m, pairing, freq_factors, bias, norm, kv| Case {
        parts,
        weight,
        m,
        pairing,
        freq_factors,
        bias,
        norm,
        kv,
    };
    use RopePairing::{Neox, Normal};
    use WeightFormat::{Q4K, Q6K, Q8_0};
    vec![
        // Qwen2's decode step: Q, K and V with biases and the attention norm folded.
        case(QKV, Q4K, 1, Neox, false, true, true, f16),
        // The 3B's Q6_K value layers: Q and K stacked, V alone.
        case(QK, Q4K, 1, Neox, false, true, true, f16),
        case(V_ONLY, Q6K, 1, Neox, false, true, true, f16),
        // Llama 3: normal pairing with frequency factors, no bias; f32 caches.
        case(QKV, Q8_0, 1, Normal, true, false, true, KvTypes::F32),
        // Several rows (positions POS0 ..), one past the bound cache; no norm.
        case(QKV, Q8_0, 3, Neox, false, true, false, f16),
    ]
}

#[test]
fn rope_kv_gemv_matches_projection_then_rope() {
    let desktop = desktop_vk12();
    let mali = mali_vk12();
    let cpu = DeviceCaps {
        subgroup_size: 8,
        lane_serial_memory: true,
        ..desktop_vk12()
    };
    let mut checked = 0;
    for (i, c) in cases().iter().enumerate() {
        let w = workload(c);
        gemv::validate_workload(&w).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let mut sample: Vec<(GemvSchedule, &DeviceCaps)> = vec![
            (gemv::default_schedule(&w, &desktop), &desktop),
            (gemv::default_schedule(&w, &mali), &mali),
            (gemv::default_schedule(&w, &cpu), &cpu),
        ];
        let space = gemv::search_space(&w, &desktop);
        // A spread of the space: several columns per workgroup, int8 math.
        sample.extend(
            space
                .iter()
                .skip(i)
                .step_by(97)
                .take(3)
                .map(|s| (*s, &desktop)),
        );
        sample.extend(
            space
                .iter()
                .filter(|s| s.math == Math::Int8Dot && s.cols > 1)
                .skip(i)
                .take(1)
                .map(|s| (*s, &desktop)),
        );
        for (j, (s, caps)) in sample.iter().enumerate() {
            check(c, s, caps, 700 + (i * 10 + j) as u64);
            checked += 1;
        }
    }
    assert!(checked >= 25, "{checked} kernels checked");
}

#[test]
fn rope_kv_refusals_name_the_reason() {
    let c = Case {
        parts: QKV,
        weight: WeightFormat::Q8_0,
        m: 1,
        pairing: RopePairing::Neox,
        freq_factors: false,
        bias: false,
        norm: false,
        kv: KvTypes::default(),
    };
    let w = workload(&c);
    let Epilogue::RopeKv(r) = w.epilogue else {
        unreachable!()
    };
    let refused = |w: GemmWorkload| gemv::validate_workload(&w).unwrap_err().to_string();
    let q8 = GemmWorkload {
        epilogue: Epilogue::RopeKv(RopeKv {
            kv: KvTypes {
                k: KvType::Q8_0,
                v: KvType::F16,
            },
            ..r
        }),
        ..w
    };
    assert!(refused(q8).contains("q8_0"));
    let wrong_n = GemmWorkload { n: w.n + 1, ..w };
    assert!(refused(wrong_n).contains("quads"));
    let f16_act = GemmWorkload {
        act: ActType::F16,
        ..w
    };
    assert!(refused(f16_act).contains("f32"));
    // The GEMM template has no such epilogue.
    assert!(
        rocky_compiler::templates::gemm::validate_workload(&GemmWorkload { m: 64, ..w })
            .unwrap_err()
            .to_string()
            .contains("GEMV")
    );
}

#[test]
fn rope_kv_kernels_pass_spirv_val() {
    require_spirv_val();
    for caps in [desktop_vk12(), mali_vk12()] {
        for c in cases() {
            let w = workload(&c);
            let s = gemv::default_schedule(&w, &caps);
            let k = gemv::instantiate(&w, &s, &caps).unwrap();
            spirv_val(&k.spirv, "vulkan1.2").unwrap_or_else(|e| panic!("{}: {e}", k.meta.name));
        }
    }
}
