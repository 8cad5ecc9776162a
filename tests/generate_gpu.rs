//! Generation on the Vulkan device (lavapipe in CI), in rocky-engine's session as `rocky
//! generate` runs it, against the CPU reference: the prompt's prefill in several ubatches, then one-token decode steps with kernels prepared for one row,
//! must give the CPU reference's greedy tokens, and logits within 2e-3 of its logits at every
//! step. The GEMMs run with f32 math (as tests/gpu_prefill.rs's golden comparisons), so the two
//! differ by summation order only; the models have random weights, whose flat logits would
//! expose any wrong position or cache row at once. The decode steps' projections run the GEMV
//! template (M = 1), as does every prefill's last-row output projection.

mod common;

use common::shared;
use rocky_compiler::{DeviceCaps, Schedule, Workload};
use rocky_engine::{Database, EngineOptions, Model, Session};
use rocky_generate::{
    generate, EndOfGeneration, EvalError, Evaluator, GenerateOptions, SamplerParams, Vocabulary,
};
use rocky_models::reference::{compare_logits, top_k};
use rocky_models::synth::{Quant, Shape};
use rocky_runtime::executor::{ScheduleOrigin, ScheduleSource};
use std::path::Path;

/// The environment of every GPU session here, set once before the first.
fn environment() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
        }
        // The GEMV decode path even on lavapipe (whose default keeps the GEMM), unless the
        // caller chose.
        if std::env::var_os("ROCKY_GEMV").is_none() {
            std::env::set_var("ROCKY_GEMV", "1");
        }
    });
}

/// `common::f32_math::F32Math` (default schedules with f32 FMA math and f32 accumulation),
/// counting the GEMV workloads asked for.
struct F32Math;

thread_local! {
    /// GEMV workloads (M ≤ 8) this thread's executors asked a schedule for.
    static GEMV_ASKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Of those, the projections that rotate q and k and write the KV cache themselves.
    static ROPE_KV_ASKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl ScheduleSource for F32Math {
    fn schedule(&self, w: &Workload, caps: &DeviceCaps) -> (Schedule, ScheduleOrigin) {
        if let Workload::Gemv(g) = w {
            GEMV_ASKED.with(|c| c.set(c.get() + 1));
            if matches!(
                g.epilogue,
                rocky_compiler::templates::gemm::Epilogue::RopeKv(_)
            ) {
                ROPE_KV_ASKED.with(|c| c.set(c.get() + 1));
            }
        }
        common::f32_math::F32Math.schedule(w, caps)
    }
}

/// An evaluator that keeps every logits vector it returns (the GPU session's decode steps
/// stay its own one-row path: `decode` is passed through, not turned into `eval`).
struct Recording<E> {
    inner: E,
    logits: Vec<Vec<f32>>,
}

impl<E: Evaluator> Recording<E> {
    fn new(inner: E) -> Self {
        Recording {
            inner,
            logits: Vec::new(),
        }
    }
}

impl<E: Evaluator> Evaluator for Recording<E> {
    fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EvalError> {
        let l = self.inner.eval(tokens)?;
        self.logits.push(l.clone());
        Ok(l)
    }
    fn decode(&mut self, token: u32) -> Result<Vec<f32>, EvalError> {
        let l = self.inner.decode(token)?;
        self.logits.push(l.clone());
        Ok(l)
    }
    fn n_past(&self) -> usize {
        self.inner.n_past()
    }
    fn n_ctx(&self) -> usize {
        self.inner.n_ctx()
    }
    fn reset(&mut self) {
        self.logits.clear();
        self.inner.reset()
    }
}

/// Token ids print as nothing: this test compares ids and logits, not text.
struct NoText;
impl Vocabulary for NoText {
    fn piece_bytes(&self, _: u32) -> Vec<u8> {
        Vec::new()
    }
}

/// A fixed pseudo-random prompt of ordinary ids (below 1000: plain tokens in the Qwen2
/// vocabulary).
fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7919 + 13) % 1000 + 10).collect()
}

/// Greedy generation of `n_new` tokens after a `n_prompt`-token prompt at `ubatch`, on both.
/// Returns the tokens, the largest `kv_splits` of the decode steps' attention schedules and
/// the decode step's stacked Q/K/V projections (labelled `attn_qkv`, `attn_qk` or `attn_kv`).
fn gpu_decode_matches_cpu(
    path: &Path,
    n_prompt: usize,
    n_new: usize,
    ubatch: usize,
) -> (Vec<u32>, u32, usize) {
    gpu_decode_ordered_matches_cpu(path, n_prompt, n_new, ubatch, None)
}

/// [`gpu_decode_matches_cpu`] with the replayed step ordered by counters (`Some(true)`,
/// `rocky_compiler::ir::chain`) or barriers (`Some(false)`) whatever the default.
fn gpu_decode_ordered_matches_cpu(
    path: &Path,
    n_prompt: usize,
    n_new: usize,
    ubatch: usize,
    chain: Option<bool>,
) -> (Vec<u32>, u32, usize) {
    let model = Model::open(path).unwrap();
    let ids = prompt(n_prompt);
    let n_ctx = n_prompt + n_new;
    let options = GenerateOptions {
        max_new_tokens: n_new,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    // No end-of-generation token: random weights may well pick one.
    let end = EndOfGeneration::default();
    let mut cpu = Recording::new(model.cpu_evaluator(n_ctx));
    let want = generate(&mut cpu, &NoText, &end, &ids, &options, &mut |_| {}).unwrap();

    environment();
    // The session `rocky generate` opens, without a tuning database and with f32 math.
    let engine_options = EngineOptions {
        database: Database::None,
        ubatch: Some(ubatch),
        ..EngineOptions::default()
    };
    let mut session = Session::open(&model, &engine_options, n_ctx).unwrap();
    session.set_schedule_source(Box::new(F32Math));
    session.set_decode_chain(chain);
    let mut gpu = Recording::new(session);
    GEMV_ASKED.with(|c| c.set(0));
    let got = generate(&mut gpu, &NoText, &end, &ids, &options, &mut |_| {}).unwrap();
    // The decode steps ran the GEMV template (unless ROCKY_GEMV=0 asks for the GEMM).
    if std::env::var("ROCKY_GEMV").map_or(true, |v| v != "0") {
        assert!(
            GEMV_ASKED.with(|c| c.get()) > 0,
            "decode used no GEMV kernel"
        );
    }
    // The decode steps' attention schedules (the last `prepare` was a decode step's).
    let kv_splits = gpu
        .inner
        .schedules_used()
        .iter()
        .filter_map(|(_, _, s, _)| match s {
            Schedule::Attention(a) => Some(a.kv_splits),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let stacked = gpu
        .inner
        .schedules_used()
        .iter()
        .filter(|(label, _, _, _)| {
            ["attn_qkv", "attn_qk", "attn_kv"]
                .iter()
                .any(|s| label.ends_with(s))
        })
        .count();
    // The session's ubatch (at most the context) is its own again after the decode steps.
    assert_eq!(gpu.inner.ubatch(), ubatch.min(n_ctx));
    assert_eq!(gpu.inner.n_past(), n_prompt + n_new - 1);
    assert_eq!(gpu.inner.decode_time().steps as usize, n_new - 1);

    let name = path.file_name().unwrap().to_string_lossy();
    let mut worst = 0f32;
    for (step, (g, w)) in gpu.logits.iter().zip(&cpu.logits).enumerate() {
        let cmp = compare_logits(g, w);
        worst = worst.max(cmp.max_abs_diff);
        assert!(
            cmp.max_abs_diff < 2e-3,
            "{name}: step {step} logits differ by {} (corr {})",
            cmp.max_abs_diff,
            cmp.correlation
        );
        if step < got.tokens.len() && got.tokens[step] != want.tokens[step] {
            let top = top_k(w, 2);
            panic!(
                "{name}: step {step}: GPU token {} vs CPU {} (CPU top-2 {:?})",
                got.tokens[step], want.tokens[step], top
            );
        }
    }
    println!(
        "{name}: prompt {n_prompt} at ubatch {ubatch}, {n_new} greedy tokens identical, max |Δlogit| {worst:.2e} over {} steps: {:?}",
        gpu.logits.len(),
        got.tokens
    );
    assert_eq!(got.tokens, want.tokens);
    assert_eq!(got.decode_steps, n_new - 1);
    if chain == Some(true) {
        // Still ordered by counters: no wait gave up (which would have switched to barriers).
        assert_eq!(gpu.inner.decode_chain_off(), None, "{name}");
    }

    // The same executor again: reset, a prefill at its own ubatch after one-row decode steps,
    // then decode steps again, give the same tokens.
    let again = generate(&mut gpu, &NoText, &end, &ids, &options, &mut |_| {}).unwrap();
    assert_eq!(
        again.tokens, want.tokens,
        "{name}: second generation on one executor"
    );
    (got.tokens, kv_splits, stacked)
}

/// Every layer's Q, K and V (one type in this file) as one stacked GEMV in the decode step,
/// whose slices the fused RoPE and KV write read as views.
#[test]
fn synth_qwen2_tiny_q8_0_decode_matches_cpu() {
    let path = common::synth(Shape::Tiny, Quant::Q8_0);
    let (_, _, stacked) = gpu_decode_matches_cpu(&path, 20, 16, 8);
    if std::env::var_os("ROCKY_FUSE").is_none() {
        let layers = Model::open(&path).unwrap().arch().config.n_layer;
        assert_eq!(stacked, layers, "one Q/K/V stack per layer");
    }
}

/// The replayed step ordered by counters instead of barriers (a CPU driver runs dispatches
/// one after another, so every wait is met at its first read): the same tokens and logits,
/// and no wait gave up. Qwen3 adds per-head norms to the chain of kernels, Llama 3 the
/// normal-pairing RoPE with frequency factors, Gemma 3 its sliding window past 32 keys (and
/// the embedding scale and post-norms), each step compared with the CPU reference.
#[test]
fn decode_ordered_by_counters_matches_cpu() {
    let path = common::synth(Shape::Tiny, Quant::Q8_0);
    let (tokens, _, _) = gpu_decode_ordered_matches_cpu(&path, 20, 16, 8, Some(true));
    let (barriers, _, _) = gpu_decode_ordered_matches_cpu(&path, 20, 16, 8, Some(false));
    assert_eq!(tokens, barriers);
    for (shape, n_prompt, n_new, ubatch) in [
        (Shape::Qwen3Tiny, 20, 16, 8),
        (Shape::LlamaTiny, 20, 16, 8),
        (Shape::Gemma3Tiny, 24, 20, 16),
    ] {
        gpu_decode_ordered_matches_cpu(
            &common::synth(shape, Quant::Q4KM),
            n_prompt,
            n_new,
            ubatch,
            Some(true),
        );
    }
}

#[test]
fn qwen2_tiny_q8_0_decode_matches_cpu() {
    gpu_decode_matches_cpu(&shared().join("models/qwen2-tiny-q8_0.gguf"), 13, 16, 512);
}

#[test]
fn qwen2_tiny_q4_k_m_decode_matches_cpu() {
    gpu_decode_matches_cpu(&shared().join("models/qwen2-tiny-q4_k_m.gguf"), 9, 12, 4);
}

/// Gemma 3's sliding window (32 keys in the tiny shape) is passed during the decode steps.
/// Qwen3's per-head Q/K norms and no QKV bias, in the recorded-once decode step.
#[test]
fn synth_qwen3_tiny_decode_matches_cpu() {
    gpu_decode_matches_cpu(&common::synth(Shape::Qwen3Tiny, Quant::Q4KM), 20, 16, 8);
}

/// Llama 3's normal-pairing RoPE with frequency factors, read by the replayed step's RoPE in
/// its args form.
#[test]
fn synth_llama_tiny_decode_matches_cpu() {
    gpu_decode_matches_cpu(&common::synth(Shape::LlamaTiny, Quant::Q4KM), 20, 16, 8);
}

/// A 90-token reply from a 6-token prompt: long enough that, where decode attention splits
/// by the run-time rule (a piece per 4 key blocks; lavapipe reports no compute units, so only
/// the length bounds it), the pieces change as the cache grows and the replayed step is
/// recorded again. (While `split_kv_decode_on_and_off_give_the_same_tokens` forces a fixed
/// count, it does not change.) Tokens and logits must match the CPU reference at every step.
#[test]
fn a_long_decode_across_split_kv_piece_changes_matches_cpu() {
    gpu_decode_matches_cpu(&common::synth(Shape::Tiny, Quant::Q8_0), 6, 90, 8);
}

#[test]
fn synth_gemma3_tiny_decode_past_the_sliding_window_matches_cpu() {
    gpu_decode_matches_cpu(&common::synth(Shape::Gemma3Tiny, Quant::Q4KM), 24, 20, 16);
}

/// Split-KV decode attention forced on (`ROCKY_KV_SPLITS=5`: five pieces at every step,
/// most of them empty at these lengths, and with Gemma 3's sliding window pieces holding only
/// masked keys; merged by the combine kernel and, `ROCKY_FUSED_COMBINE=1`, by the last piece)
/// and off gives the CPU reference's greedy tokens every way, so the same tokens.
/// Only this test sets the variables; other tests of this binary that run meanwhile may decode
/// with five pieces too, which their own CPU comparison covers.
#[test]
fn split_kv_decode_on_and_off_give_the_same_tokens() {
    for (path, n_prompt, n_new, ubatch) in [
        (common::synth(Shape::Gemma3Tiny, Quant::Q4KM), 40, 10, 16),
        (shared().join("models/qwen2-tiny-q8_0.gguf"), 30, 10, 8),
    ] {
        std::env::set_var("ROCKY_KV_SPLITS", "5");
        // The pieces merged by the combine kernel, then by the last piece to finish.
        std::env::set_var("ROCKY_FUSED_COMBINE", "0");
        let (on, splits_on, _) = gpu_decode_matches_cpu(&path, n_prompt, n_new, ubatch);
        std::env::set_var("ROCKY_FUSED_COMBINE", "1");
        let (fused, splits_fused, _) = gpu_decode_matches_cpu(&path, n_prompt, n_new, ubatch);
        std::env::remove_var("ROCKY_FUSED_COMBINE");
        std::env::set_var("ROCKY_KV_SPLITS", "0");
        let (off, splits_off, _) = gpu_decode_matches_cpu(&path, n_prompt, n_new, ubatch);
        std::env::remove_var("ROCKY_KV_SPLITS");
        assert_eq!(
            (splits_on, splits_fused, splits_off),
            (5, 5, 0),
            "{}",
            path.display()
        );
        assert_eq!(on, off, "{}", path.display());
        assert_eq!(fused, off, "{}", path.display());
    }
}

/// Greedy generation with the picks made on the device (the session's `decode_greedy`: the
/// step recorded with the greedy pick at its end, the next step queued behind the last, no
/// logits read back) on `path`, against the CPU reference's greedy tokens. Returns the
/// session's device picks.
fn device_greedy_matches_cpu(
    path: &Path,
    n_prompt: usize,
    n_new: usize,
    ubatch: usize,
    chain: Option<bool>,
) -> u64 {
    let model = Model::open(path).unwrap();
    let ids = prompt(n_prompt);
    let n_ctx = n_prompt + n_new;
    let options = GenerateOptions {
        max_new_tokens: n_new,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    let end = EndOfGeneration::default();
    let want = generate(
        &mut model.cpu_evaluator(n_ctx),
        &NoText,
        &end,
        &ids,
        &options,
        &mut |_| {},
    )
    .unwrap();

    environment();
    let engine_options = EngineOptions {
        database: Database::None,
        ubatch: Some(ubatch),
        ..EngineOptions::default()
    };
    let mut session = Session::open(&model, &engine_options, n_ctx).unwrap();
    session.set_schedule_source(Box::new(F32Math));
    session.set_decode_chain(chain);
    assert_eq!(session.device_greedy_off(), None);
    // The session itself is the evaluator: its `decode_greedy` picks on the device.
    let got = generate(&mut session, &NoText, &end, &ids, &options, &mut |_| {}).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    assert_eq!(
        got.tokens, want.tokens,
        "{name}: device picks vs CPU reference"
    );
    assert_eq!(got.decode_steps, n_new - 1, "{name}");
    assert_eq!(session.n_past(), n_prompt + n_new - 1, "{name}");
    assert_eq!(session.decode_time().steps as usize, n_new - 1, "{name}");
    assert_eq!(
        session.device_picks() as usize,
        n_new - 1,
        "{name}: picks made on the device"
    );
    if chain == Some(true) {
        assert_eq!(
            session.decode_chain_off(),
            None,
            "{name}: still ordered by counters"
        );
    }
    println!(
        "{name}: {n_new} greedy tokens picked on the device equal the CPU reference's: {:?}",
        got.tokens
    );
    session.device_picks()
}

/// Device picks with barriers and with counters, across split-KV piece changes (a 90-token
/// reply: the two recordings are made again mid-generation), and on Qwen3 and Llama 3 files.
#[test]
fn greedy_picks_on_the_device_give_the_cpu_reference_tokens() {
    let tiny = common::synth(Shape::Tiny, Quant::Q8_0);
    device_greedy_matches_cpu(&tiny, 20, 16, 8, Some(false));
    device_greedy_matches_cpu(&tiny, 20, 16, 8, Some(true));
    device_greedy_matches_cpu(&tiny, 6, 90, 8, None);
    for shape in [Shape::Qwen3Tiny, Shape::LlamaTiny] {
        device_greedy_matches_cpu(&common::synth(shape, Quant::Q4KM), 20, 16, 8, None);
    }
}

/// A generation stopped by its caller after 5 tokens, while the device had the next step
/// queued (it ran, and its pick is dropped): the cache and the step's position are the
/// host's again, so a host-driven decode step of the 5th token then gives the CPU
/// reference's logits for that position, and a reused-prefix generation goes on from there
/// with the reference's tokens.
#[test]
fn a_device_greedy_generation_stopped_early_leaves_the_cache_right() {
    let path = common::synth(Shape::Tiny, Quant::Q8_0);
    let model = Model::open(&path).unwrap();
    let ids = prompt(12);
    let n_ctx = 40;
    let options = GenerateOptions {
        max_new_tokens: 10,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    let end = EndOfGeneration::default();
    let mut cpu = Recording::new(model.cpu_evaluator(n_ctx));
    let want = generate(&mut cpu, &NoText, &end, &ids, &options, &mut |_| {}).unwrap();

    environment();
    let engine_options = EngineOptions {
        database: Database::None,
        ubatch: Some(8),
        ..EngineOptions::default()
    };
    let mut session = Session::open(&model, &engine_options, n_ctx).unwrap();
    session.set_schedule_source(Box::new(F32Math));
    let mut steps = 0;
    let got = rocky_generate::generate_reusing(
        &mut session,
        &NoText,
        &end,
        &ids,
        0,
        &options,
        &mut |_| {
            steps += 1;
            steps < 5
        },
    )
    .unwrap();
    assert_eq!(got.tokens, want.tokens[..5]);
    assert!(session.device_picks() >= 4, "the device picked");
    assert_eq!(session.n_past(), ids.len() + 4);
    // The 5th token's step, driven by the host: the reference's logits for that position
    // (CPU logits: [0] the prompt's, [i] the step of token i - 1 ... so token 4's is [5]).
    let logits = session.decode(want.tokens[4]).unwrap();
    let cmp = compare_logits(&logits, &cpu.logits[5]);
    assert!(cmp.max_abs_diff < 2e-3, "max |Δlogit| {}", cmp.max_abs_diff);
    // And a generation reusing the prompt and the 5 tokens continues as the reference did.
    let mut longer = ids.clone();
    longer.extend_from_slice(&want.tokens[..5]);
    let rest = GenerateOptions {
        max_new_tokens: 5,
        ..options
    };
    let reused = longer.len() - 1;
    let more = rocky_generate::generate_reusing(
        &mut session,
        &NoText,
        &end,
        &longer,
        reused,
        &rest,
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(more.reused_tokens, reused);
    assert_eq!(more.tokens, want.tokens[5..]);
}

/// The RoPE and KV write inside the Q/K/V projections (`ROCKY_ROPE_IN_PROJECTION=1`; off by
/// default since it decoded 2-3 % slower on an H100): the CPU reference's tokens and logits on
/// Qwen2 (stacked Q/K/V, Q8_0, and Q4_K_M, whose value layers may project alone) and Llama 3
/// (the normal pairing with frequency factors), the projections asked for with the epilogue.
/// Other tests of this binary that run meanwhile may take the epilogue too, which their own
/// CPU comparison covers.
#[test]
fn rope_and_kv_write_in_the_projections_match_cpu() {
    std::env::set_var("ROCKY_ROPE_IN_PROJECTION", "1");
    for (shape, quant) in [
        (Shape::Tiny, Quant::Q8_0),
        (Shape::Tiny, Quant::Q4KM),
        (Shape::LlamaTiny, Quant::Q4KM),
    ] {
        ROPE_KV_ASKED.with(|c| c.set(0));
        gpu_decode_matches_cpu(&common::synth(shape, quant), 20, 16, 8);
        if std::env::var("ROCKY_GEMV").map_or(true, |v| v != "0") {
            assert!(
                ROPE_KV_ASKED.with(|c| c.get()) > 0,
                "{shape:?} {quant:?}: no projection took the RoPE and the KV write"
            );
        }
    }
    std::env::remove_var("ROCKY_ROPE_IN_PROJECTION");
}
