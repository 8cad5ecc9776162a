//! How far 8-bit activations move a model's results from the exact CPU reference, on the
//! prompt `rocky bench` checks its GPU rows with (`check_prompt`, `CHECK_TOKENS` tokens):
//! rocky's int8 GEMMs' rounding (blocks of 32, f32 scales) and llama.cpp's CPU backend's
//! (Q8_K blocks of 256 for K-quants, Q8_0 for legacy quants), both emulated on the CPU
//! (`rocky_models::act_quant`).
//!
//! `cargo run --release -p rocky-tuner --example act_quant_distance -- MODEL [SEED...]`:
//! the logits' |Δ| against the bound of the device check (`CPU_TOLERANCE` × max|logit|), per
//! seed (as `rocky bench --seed`, default 1).
//!
//! `... -- MODEL --logits FILE...`: GPU logits of the seed-1 check prompt (written by `rocky
//! prefill MODEL --token-ids IDS --logits-out FILE`, IDS as this command prints them) against
//! the exact reference and against the reference with rocky's int8 rounding: a kernel that
//! computes what its arithmetic promises is as close to the latter as f32 math is to the
//! former.
//!
//! `... -- MODEL --kv-sensitivity`: how far the f16 KV cache (instead of f32) moves the
//! logits under each rounding (see `kv_sensitivity`).
//!
//! `... -- MODEL --write DIR [SEED...]`: as the first form, and each seed's logits written to
//! DIR as `s{SEED}.{exact,rocky,llama}.f32` (little-endian f32), for comparison with logits
//! from elsewhere (llama.cpp's own, the GPU's).
//!
//! `... -- MODEL --shares [SEED]`: each projection kind's share of the int8 rounding's effect
//! on the logits: rocky's rounding applied to that kind alone (the others exact), then
//! blocks of 16 and 8 instead of 32 on every projection (what a finer activation granularity
//! would buy).
//!
//! `... -- MODEL --gemms [ROWS]`: per projection kind, on the exact pass's own activations,
//! the error of each arithmetic against an f64 dot of the exact activations with the
//! dequantized weights (ROWS output rows sampled per GEMM, default 64), as a fraction of the
//! GEMM's output RMS: rocky int8, llama.cpp's CPU quantization, and rocky's packed-f16 math
//! (operands rounded to f16, each half of a 32-element unit summed in f16, the units in f32).

use half::f16;
use rocky_compiler::{KvType, KvTypes};
use rocky_models::act_quant::{llama_cpp_vec_dot_type, ActivationQuant};
use rocky_models::arch;
use rocky_models::formats;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{self, CpuSession, ReferenceOptions};
use rocky_tuner::graph::check_prompt;
use rocky_tuner::logits_check::{check_logits, CHECK_TOKENS, CPU_TOLERANCE};
use std::collections::BTreeMap;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .expect("usage: act_quant_distance MODEL [SEED...] | --logits FILE... | --kv-sensitivity | --gemms [ROWS]");
    let file = GgufFile::open(std::path::Path::new(path)).expect("a GGUF file");
    let model = arch::load(&file).expect("a model rocky runs");
    if args.get(1).map(String::as_str) == Some("--gemms") {
        let rows = args.get(2).map_or(64, |s| s.parse().expect("a row count"));
        return gemms(&file, &model, rows);
    }
    if args.get(1).map(String::as_str) == Some("--kv-sensitivity") {
        return kv_sensitivity(&file, &model);
    }
    if args.get(1).map(String::as_str) == Some("--logits") {
        return compare_files(&file, &model, &args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("--shares") {
        let seed = args.get(2).map_or(1, |s| s.parse().expect("a seed"));
        return shares(&file, &model, seed);
    }
    let (write, rest) = match args.get(1).map(String::as_str) {
        Some("--write") => (
            Some(std::path::PathBuf::from(args.get(2).expect("--write DIR"))),
            &args[3..],
        ),
        _ => (None, &args[1..]),
    };
    let mut seeds: Vec<u64> = rest.iter().map(|s| s.parse().expect("a seed")).collect();
    if seeds.is_empty() {
        seeds.push(1);
    }
    for seed in seeds {
        let ids = check_prompt(&model, CHECK_TOKENS, seed);
        eprintln!("seed {seed}: token ids {}", join(&ids));
        let run = |activations| {
            let start = Instant::now();
            let options = ReferenceOptions {
                activations,
                ..ReferenceOptions::llama_cpp()
            };
            let logits = reference::forward(&file, &model, &ids, options).expect("a forward pass");
            eprintln!("{activations:?}: {:.1} s", start.elapsed().as_secs_f64());
            logits
        };
        let exact = run(ActivationQuant::Exact);
        let save = |name: &str, logits: &[f32]| {
            if let Some(dir) = &write {
                let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
                std::fs::write(dir.join(format!("s{seed}.{name}.f32")), bytes)
                    .expect("a writable --write folder");
            }
        };
        save("exact", &exact);
        for activations in [ActivationQuant::RockyInt8, ActivationQuant::LlamaCpp] {
            let got = run(activations);
            save(
                if activations == ActivationQuant::RockyInt8 {
                    "rocky"
                } else {
                    "llama"
                },
                &got,
            );
            let scale = exact.iter().fold(0f32, |m, v| m.max(v.abs()));
            let max_abs = exact
                .iter()
                .zip(&got)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let verdict = match check_logits(&exact, &got, CPU_TOLERANCE) {
                Ok(a) => format!("passes, top-1 {} vs {}", a.top1_got, a.top1_reference),
                Err(e) => format!("fails: {e}"),
            };
            println!(
                "{path} seed {seed} {activations:?}: |Δ| {max_abs:.4} against {:.4} allowed \
                 ({:.3} of it; max|logit| {scale:.4}): {verdict}",
                CPU_TOLERANCE * scale,
                max_abs / (CPU_TOLERANCE * scale),
            );
        }
    }
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn compare_files(file: &GgufFile, model: &rocky_models::arch::Model, paths: &[String]) {
    let ids = check_prompt(model, CHECK_TOKENS, 1);
    eprintln!("token ids {}", join(&ids));
    let refs: Vec<(ActivationQuant, Vec<f32>)> =
        [ActivationQuant::Exact, ActivationQuant::RockyInt8]
            .into_iter()
            .map(|a| {
                let options = ReferenceOptions {
                    activations: a,
                    ..ReferenceOptions::llama_cpp()
                };
                (
                    a,
                    reference::forward(file, model, &ids, options).expect("a forward pass"),
                )
            })
            .collect();
    for path in paths {
        let bytes = std::fs::read(path).expect("a logits file");
        let got: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        for (a, r) in &refs {
            let scale = r.iter().fold(0f32, |m, v| m.max(v.abs()));
            let max_abs = r
                .iter()
                .zip(&got)
                .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
            println!(
                "{path} against the {a:?} reference: |Δ| {max_abs:.4}, {:.3} of the allowed {:.4}",
                max_abs / (CPU_TOLERANCE * scale),
                CPU_TOLERANCE * scale
            );
        }
    }
}

/// Each projection kind's share of the int8 rounding's effect on the seed's check logits, and
/// what finer activation blocks would give (see the module docs).
fn shares(file: &GgufFile, model: &rocky_models::arch::Model, seed: u64) {
    let ids = check_prompt(model, CHECK_TOKENS, seed);
    let run = |activations, activations_only| {
        let options = ReferenceOptions {
            activations,
            activations_only,
            ..ReferenceOptions::llama_cpp()
        };
        reference::forward(file, model, &ids, options).expect("a forward pass")
    };
    let exact = run(ActivationQuant::Exact, None);
    let bound = CPU_TOLERANCE * exact.iter().fold(0f32, |m, v| m.max(v.abs()));
    let report = |what: &str, got: &[f32]| {
        let d = exact
            .iter()
            .zip(got)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!(
            "seed {seed} {what}: |Δ| {d:.4} ({:.3} of the allowed {bound:.4})",
            d / bound
        );
    };
    for only in [
        "attn_q.",
        "attn_k.",
        "attn_v.",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "token_embd",
    ] {
        for a in [ActivationQuant::RockyInt8, ActivationQuant::LlamaCpp] {
            report(&format!("{a:?} on {only} alone"), &run(a, Some(only)));
        }
    }
    for n in [32, 16, 8] {
        report(
            &format!("rocky's rounding in blocks of {n}"),
            &run(ActivationQuant::RockyInt8Blocks(n), None),
        );
    }
}

/// How far a small perturbation (the KV cache in f16 instead of f32) moves the logits under
/// each activation rounding: 8-bit rounding is discontinuous, so a perturbation that moves the
/// exact logits by a few thousandths moves the quantized ones by the size of the rounding noise
/// itself. Two int8 computations of the same prompt (a GPU's and the emulation) therefore
/// differ by about as much as either differs from the exact logits.
fn kv_sensitivity(file: &GgufFile, model: &rocky_models::arch::Model) {
    let ids = check_prompt(model, CHECK_TOKENS, 1);
    for activations in [
        ActivationQuant::Exact,
        ActivationQuant::RockyInt8,
        ActivationQuant::LlamaCpp,
    ] {
        let run = |kv| {
            let options = ReferenceOptions {
                activations,
                ..ReferenceOptions::with_kv(kv)
            };
            reference::forward(file, model, &ids, options).expect("a forward pass")
        };
        let f16 = run(KvTypes::F16);
        let f32 = run(KvTypes::new(KvType::F32, KvType::F32));
        let d = f16
            .iter()
            .zip(&f32)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        println!("{activations:?}: f16 KV cache against f32: |Δ| {d:.4}");
    }
}

/// Errors of one arithmetic over one projection kind: (largest |error| / output RMS over the
/// GEMMs, sum of squared errors, sum of squared outputs).
#[derive(Default)]
struct Errors {
    worst: f64,
    sq_err: f64,
    sq_out: f64,
}

impl Errors {
    fn add(&mut self, errs: &[f64], outs: &[f64]) {
        let rms = (outs.iter().map(|v| v * v).sum::<f64>() / outs.len() as f64).sqrt();
        let worst = errs.iter().fold(0f64, |m, e| m.max(e.abs()));
        self.worst = self.worst.max(worst / rms);
        self.sq_err += errs.iter().map(|e| e * e).sum::<f64>();
        self.sq_out += outs.iter().map(|v| v * v).sum::<f64>();
    }

    fn rms_ratio(&self) -> f64 {
        (self.sq_err / self.sq_out).sqrt()
    }
}

fn gemms(file: &GgufFile, model: &rocky_models::arch::Model, rows: usize) {
    let ids = check_prompt(model, CHECK_TOKENS, 1);
    let mut calls: Vec<(String, Vec<f32>, usize)> = Vec::new();
    {
        let mut session = CpuSession::new(file, model, ReferenceOptions::llama_cpp());
        session.observe_linears(Box::new(|name: &str, x: &[f32], k: usize| {
            calls.push((name.to_string(), x.to_vec(), k))
        }));
        session.eval(&ids).expect("a forward pass");
    }
    // Per kind ("ffn_down" of blk.N.ffn_down.weight): (weight types, K, errors per arithmetic).
    let mut kinds: BTreeMap<String, (Vec<String>, usize, [Errors; 3])> = BTreeMap::new();
    for (name, x, k) in &calls {
        let t = file.tensor(name).expect("an observed weight");
        let n = (t.n_elements() as usize) / k;
        let row_bytes = t.ggml_type.row_bytes(*k as u64).unwrap() as usize;
        let data = file.tensor_data(t);
        let rocky = ActivationQuant::RockyInt8.apply(t.ggml_type, x, *k);
        let llama = ActivationQuant::LlamaCpp.apply(t.ggml_type, x, *k);
        let (mut outs, mut errs) = (Vec::new(), [Vec::new(), Vec::new(), Vec::new()]);
        let mut w = vec![0f32; *k];
        for r in 0..rows.min(n) {
            let row = r * n / rows.min(n);
            formats::dequantize(t.ggml_type, &data[row * row_bytes..][..row_bytes], &mut w)
                .expect("a weight row");
            for m in 0..x.len() / k {
                let xr = &x[m * k..][..*k];
                let exact = dot64(xr, &w);
                outs.push(exact);
                errs[0].push(dot64(&rocky[m * k..][..*k], &w) - exact);
                errs[1].push(dot64(&llama[m * k..][..*k], &w) - exact);
                errs[2].push(dot_f16_units(xr, &w) - exact);
            }
        }
        let kind = name
            .trim_end_matches(".weight")
            .rsplit('.')
            .next()
            .unwrap_or(name)
            .to_string();
        let entry = kinds.entry(kind).or_default();
        let ty = format!(
            "{}→{}",
            t.ggml_type.name(),
            llama_cpp_vec_dot_type(t.ggml_type).name()
        );
        if !entry.0.contains(&ty) {
            entry.0.push(ty);
        }
        entry.1 = *k;
        for (e, errs) in entry.2.iter_mut().zip(&errs) {
            e.add(errs, &outs);
        }
    }
    println!(
        "| projection | K | weights → llama.cpp's activations | rocky int8 rms / max | \
         llama.cpp CPU rms / max | rocky f16 rms / max |"
    );
    println!("|---|---:|---|---:|---:|---:|");
    for (kind, (types, k, e)) in &kinds {
        println!(
            "| {kind} | {k} | {} | {:.2e} / {:.2e} | {:.2e} / {:.2e} | {:.2e} / {:.2e} |",
            types.join(", "),
            e[0].rms_ratio(),
            e[0].worst,
            e[1].rms_ratio(),
            e[1].worst,
            e[2].rms_ratio(),
            e[2].worst,
        );
    }
}

fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// rocky's packed-f16 GEMM arithmetic (`Math::FmaF16Packed`, f32 accumulation): operands in
/// f16, the even and the odd elements of each 32-element unit summed by an f16 FMA chain, the
/// two lanes of each unit added to an f32 accumulator.
fn dot_f16_units(x: &[f32], w: &[f32]) -> f64 {
    let mut acc = 0f32;
    for (xu, wu) in x.chunks(32).zip(w.chunks(32)) {
        let mut lanes = [f16::ZERO; 2];
        for (i, (&a, &b)) in xu.iter().zip(wu).enumerate() {
            let (a, b) = (f16::from_f32(a).to_f32(), f16::from_f32(b).to_f32());
            let l = &mut lanes[i % 2];
            *l = f16::from_f32(l.to_f32() + a * b);
        }
        acc += lanes[0].to_f32() + lanes[1].to_f32();
    }
    f64::from(acc)
}
