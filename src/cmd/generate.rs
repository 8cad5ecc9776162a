//! `rocky generate`: a prompt's continuation, streamed to standard output as it is made.
//! Standard output holds the generated text and nothing else (or one JSON object with
//! `--json`); timings and notes go to standard error.

use super::gpu::{self, GpuArgs};
use super::prompt::{self, PromptArgs};
use crate::error::{CliError, CmdResult};
use rocky_engine::Model;
use rocky_generate::{generate, GenerateError, GenerateOptions, Generation, SamplerParams};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky generate model.gguf --prompt 'The capital of France is' -n 32 --temp 0\n  \
rocky generate model.gguf --file prompt.txt -n 200 --temp 0.7 --top-p 0.9 --seed 1 --json\n\n\
Sampling follows llama.cpp: the repetition penalty, top-k, top-p and min-p filter the \
untempered distribution, then the temperature applies; --temp 0 is greedy."
)]
pub struct Args {
    /// The GGUF model.
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Tokens to generate at most (fewer when the model ends the text or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    /// Temperature; 0 = greedy (always the most likely token).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the most likely tokens up to this cumulative probability (1 = all).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the most likely one (0 = all).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalty for repeating any of the last --repeat-last-n tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// How many recent tokens (prompt included) the repetition penalty looks at.
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Random seed of the sampler (default: a new one each run, printed to standard error).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when the text contains this string (repeatable; it is not printed).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Context size in tokens (KV cache positions); default: the prompt plus -n.
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Print one JSON object (text, token ids, timings) instead of streaming the text.
    #[arg(long)]
    pub json: bool,
    /// Run on the CPU reference (f32, all cores) instead of the GPU: the oracle, and the
    /// default where every Vulkan device is a CPU implementation (see --device).
    #[arg(long)]
    pub cpu: bool,
    /// Time every dispatch of the decode steps with GPU timestamps and print the per-op table
    /// (per step; the steps are then recorded anew each token instead of replayed, so the
    /// tok/s figures are not replay's).
    #[arg(long, conflicts_with = "cpu")]
    pub profile: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

pub fn run(args: Args) -> CmdResult {
    if args.n_predict == 0 {
        return Err(CliError::usage("-n must be at least 1"));
    }
    if args.ctx == Some(0) {
        return Err(CliError::usage("--ctx must be at least 1"));
    }
    if let Some(u) = args.gpu.ubatch.filter(|&u| u == 0 || u > 4096) {
        return Err(CliError::usage(format!(
            "--ubatch {u} is out of range: use 1 to 4096"
        )));
    }
    let seed = args.seed.unwrap_or_else(random_seed);
    let sampler = SamplerParams {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
        seed,
    };
    sampler.validate().map_err(CliError::usage)?;
    let model = Model::open(&args.model).map_err(gpu::load_error)?;
    // Built once here; the prompt and the generation below use this one.
    let tokenizer = model
        .tokenizer()
        .map_err(|e| CliError::input(format!("generation needs the model's tokenizer: {e}")))?;
    prompt::warn_about(tokenizer);
    let ids = prompt::token_ids(&args.prompt, &model)?;
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= model.n_vocab()) {
        return Err(CliError::input(format!(
            "token id {bad} is outside the vocabulary of {} tokens",
            model.n_vocab()
        )));
    }
    let n_ctx = args.ctx.unwrap_or(ids.len() + args.n_predict);
    if ids.len() > n_ctx {
        return Err(CliError::usage(format!(
            "the prompt has {} tokens but --ctx is {n_ctx}: give a larger --ctx or a shorter prompt",
            ids.len()
        )));
    }
    let end = model.end_of_generation().map_err(gpu::load_error)?;
    let options = GenerateOptions {
        max_new_tokens: args.n_predict,
        sampler,
        stop_strings: args.stop.clone(),
    };
    if args.seed.is_none() && args.temp > 0.0 {
        eprintln!("seed: {seed}");
    }
    let stream = !args.json;
    let mut stdout = std::io::stdout().lock();
    let mut on_text = |text: &str| {
        if stream {
            // A closed pipe ends the process quietly (SIGPIPE is restored in main).
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
    };
    let cpu_instead = if args.cpu {
        None
    } else {
        gpu::cpu_instead(&args.gpu, args.profile)
    };
    if let Some(why) = &cpu_instead {
        gpu::note_cpu_path(why);
    }
    // How the GPU's replayed decode steps were ordered: `None` on the CPU path, else
    // `Ok(())` for counters, `Err(why)` for barriers.
    let mut decode_order: Option<Result<(), String>> = None;
    // Greedy tokens picked on the device, and why not where the GPU path picked on the host.
    let mut device_picks: Option<(u64, Option<String>)> = None;
    let (generation, backend, ubatch, decode_time, profile) = if args.cpu || cpu_instead.is_some() {
        let mut ev = model.cpu_evaluator_options(n_ctx, args.gpu.reference_options());
        let g = generate(&mut ev, tokenizer, end, &ids, &options, &mut on_text);
        (g, "cpu", None, None, None)
    } else {
        let mut session = gpu::open_session(&args.gpu, &model, n_ctx, args.profile)?;
        if let (true, Some(why)) = (args.profile, session.no_gpu_profile()) {
            return Err(CliError::device(format!(
                "--profile needs GPU timestamps: {why}"
            )));
        }
        gpu::prepare(&mut session)?;
        session.prepare_decode().map_err(gpu::session_error)?;
        let ubatch = (session.ubatch(), session.ubatch_origin().as_str());
        let g = generate(&mut session, tokenizer, end, &ids, &options, &mut on_text);
        let profile = args.profile.then(|| session.decode_profile_table());
        decode_order = Some(session.decode_chain_off().map_or(Ok(()), Err));
        device_picks = Some((session.device_picks(), session.device_greedy_off()));
        (g, "gpu", Some(ubatch), Some(session.decode_time()), profile)
    };
    let generation = generation.map_err(generate_error)?;
    // Per step: the table sums every decode step.
    let profile = profile.map(|mut rows| {
        let steps = generation.decode_steps.max(1);
        for r in &mut rows {
            r.seconds /= steps as f64;
            r.flops /= steps as f64;
            r.calls = r.calls.div_ceil(steps);
        }
        rows
    });
    if args.json {
        let out = json!({
            "model": args.model,
            "backend": backend,
            "ubatch": ubatch.map(|u| u.0),
            "n_ctx": n_ctx,
            "prompt_tokens": generation.prompt_tokens,
            "generated_tokens": generation.tokens.len(),
            "text": generation.text,
            "token_ids": generation.tokens,
            "stop": generation.stop.name(),
            "seed": seed,
            "prefill_seconds": generation.prefill.as_secs_f64(),
            "prefill_tokens_per_second": generation.prefill_tokens_per_second(),
            "decode_steps": generation.decode_steps,
            "decode_seconds": generation.decode.as_secs_f64(),
            "decode_tokens_per_second": generation.decode_tokens_per_second(),
            "decode_step_ms": decode_time.and_then(|t| t.per_step_ms()).map(|parts| parts
                .iter()
                .map(|&(name, ms)| (name.to_string(), json!(ms)))
                .collect::<serde_json::Map<_, _>>()),
            "decode_dispatches_per_step": decode_time.and_then(|t| t.dispatches_per_step()),
            // Replayed steps ordered by counters on the GPU or by pipeline barriers (and why).
            "decode_ordered_by": decode_order.as_ref().map(|o| match o {
                Ok(()) => "counters",
                Err(_) => "barriers",
            }),
            "decode_barriers_because": decode_order.and_then(|o| o.err()),
            // Greedy decoding's tokens picked on the device (the next step queued behind the
            // last), and why the device cannot pick where it does not.
            "decode_device_picks": device_picks.as_ref().map(|p| p.0),
            "decode_device_picks_off_because": device_picks.and_then(|p| p.1),
            "decode_profile_per_step": profile,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        eprintln!();
        print_timings(&generation, backend, ubatch);
        if let Some((parts, dispatches)) =
            decode_time.and_then(|t| Some((t.per_step_ms()?, t.dispatches_per_step()?)))
        {
            let line: Vec<String> = parts[1..]
                .iter()
                .map(|(name, ms)| format!("{name} {ms:.2}"))
                .collect();
            eprintln!(
                "decode step in the executor: {:.2} ms, of it {} ms; {dispatches:.0} dispatches",
                parts[0].1,
                line.join(" + ")
            );
        }
        if let Some(rows) = &profile {
            println!("GPU time per decode step, by op (timestamps around each dispatch):");
            gpu::print_profile(rows);
        }
    }
    Ok(())
}

fn print_timings(g: &Generation, backend: &str, ubatch: Option<(usize, &str)>) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "prefill: {} tokens in {:.1} ms, {:.1} tok/s ({backend}{})",
        g.prompt_tokens,
        ms(g.prefill),
        g.prefill_tokens_per_second(),
        ubatch.map_or(String::new(), |(u, origin)| format!(
            ", ubatch {u} ({origin})"
        ))
    );
    match g.decode_tokens_per_second() {
        Some(tps) => eprintln!(
            "decode: {} steps in {:.1} ms, {:.1} tok/s ({:.2} ms/token)",
            g.decode_steps,
            ms(g.decode),
            tps,
            ms(g.decode) / g.decode_steps as f64
        ),
        None => eprintln!("decode: no step (one token generated)"),
    }
    eprintln!(
        "generated {} token(s), stopped by {}",
        g.tokens.len(),
        g.stop.name()
    );
}

fn generate_error(e: GenerateError) -> CliError {
    match e {
        GenerateError::EmptyPrompt | GenerateError::PromptTooLong { .. } => {
            CliError::usage(e.to_string())
        }
        GenerateError::Sampler(m) => CliError::usage(m),
        // The CLI sets no output constraint; the server's grammars report through this.
        GenerateError::Constraint(m) => CliError::usage(m),
        // The evaluator's own message (a device failure, a token outside the vocabulary).
        GenerateError::Eval(e) => CliError::device(format!("generation failed: {e}")),
    }
}

/// A seed from the clock and the process id, for runs without --seed.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}
