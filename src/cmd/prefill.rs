//! `rocky prefill`: run a prompt through the model and show the next-token candidates.

use super::prompt::{self, PromptArgs};
use crate::error::{CliError, CmdResult};
use crate::units::human_bytes;
use rocky_compiler::{KvType, KvTypes};
use rocky_engine::Model;
use rocky_models::arch::ModelConfig;
use rocky_models::reference;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// rocky's kernels on a Vulkan device.
    Gpu,
    /// The CPU reference (f32, all cores): slow, the oracle for the GPU.
    Cpu,
}

#[derive(clap::Args)]
#[command(
    after_help = "Examples:\n  rocky prefill model.gguf --prompt 'The capital of France is'\n  \
rocky prefill model.gguf --backend cpu --token-ids 785,6722,315 --logits-out logits.f32 --json"
)]
pub struct Args {
    /// The GGUF model.
    pub model: PathBuf,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Where to compute. Default: gpu, but cpu where every Vulkan device is a CPU
    /// implementation and no --device is named (see --device).
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    #[command(flatten)]
    pub gpu: super::gpu::GpuArgs,
    /// Write the last position's logits here (little-endian f32, one per vocabulary entry).
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long)]
    pub json: bool,
    /// Time every kernel with GPU timestamps and print a per-op table (GPU backend). On a
    /// device without timestamps: the wall time and the host's recording/waiting split only.
    #[arg(long)]
    pub profile: bool,
    /// Print the device memory plan (every buffer and its size) to standard error before the
    /// prefill (GPU backend).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

pub fn run(args: Args) -> CmdResult {
    // Checked for both backends: a bad value is a mistake even where it is not used.
    if let Some(u) = args.gpu.ubatch.filter(|&u| u == 0 || u > 4096) {
        return Err(CliError::usage(format!(
            "--ubatch {u} is out of range: use 1 to 4096"
        )));
    }
    let model = Model::open(&args.model).map_err(super::gpu::load_error)?;
    let ids = prompt::token_ids(&args.prompt, &model)?;
    let start = Instant::now();
    // GPU time excludes weight upload and pipeline builds (as llama-bench's pp figure does).
    let mut gpu_seconds = None;
    let mut profile = None;
    let mut ubatch = None;
    let mut stats = None;
    let mut no_gpu_profile = None;
    let backend = match args.backend {
        Some(b) => b,
        None => match super::gpu::cpu_instead(&args.gpu, args.profile || args.verbose) {
            Some(why) => {
                super::gpu::note_cpu_path(&why);
                Backend::Cpu
            }
            None => Backend::Gpu,
        },
    };
    let logits = match backend {
        Backend::Cpu => reference::forward(
            model.file(),
            model.arch(),
            &ids,
            args.gpu.reference_options(),
        )
        .map_err(|e| CliError::input(e.to_string()))?,
        Backend::Gpu => {
            let mut session = super::gpu::open_session(&args.gpu, &model, ids.len(), args.profile)?;
            if args.verbose {
                print_memory_plan(&session.memory_plan(), session.ubatch());
                print_kv_per_token(&model.arch().config, args.gpu.kv());
                eprintln!("{}", super::gpu::weights_summary(&session));
            }
            super::gpu::prepare(&mut session)?;
            let start = Instant::now();
            let logits = session.prefill(&ids).map_err(super::gpu::session_error)?;
            gpu_seconds = Some(start.elapsed().as_secs_f64());
            ubatch = Some((session.ubatch(), session.ubatch_origin().as_str()));
            stats = session.stats().cloned();
            no_gpu_profile = session.no_gpu_profile().map(str::to_string);
            if args.profile && no_gpu_profile.is_none() {
                profile = Some(session.profile_table());
            }
            logits
        }
    };
    let seconds = gpu_seconds.unwrap_or_else(|| start.elapsed().as_secs_f64());
    if let Some(path) = &args.logits_out {
        let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| {
            CliError::output(format!(
                "cannot write the logits to {}: {e}",
                path.display()
            ))
        })?;
    }
    // The tokenizer the prompt was tokenized with (token ids work without one).
    let tokenizer = model.tokenizer().ok();
    let piece = |id: usize| {
        tokenizer
            .as_ref()
            .map(|t| t.token_piece(id as u32))
            .unwrap_or_default()
    };
    let top = reference::top_k(&logits, 5);
    let tok_s = ids.len() as f64 / seconds;
    if args.json {
        let out = json!({
            "model": args.model,
            "backend": format!("{backend:?}").to_lowercase(),
            "n_tokens": ids.len(),
            "ubatch": ubatch.map(|u| u.0),
            "ubatch_origin": ubatch.map(|u| u.1),
            "seconds": seconds,
            "tokens_per_second": tok_s,
            "profile": profile,
            "profile_timing": args.profile.then(|| if no_gpu_profile.is_some() { "host" } else { "gpu" }),
            "profile_note": no_gpu_profile.as_ref().map(|why| format!("per-op GPU times need timestamps: {why}")),
            "stats": stats.as_ref().map(super::gpu::stats_json),
            "top5": top.iter().map(|&(id, l)| json!({"id": id, "text": piece(id), "logit": l})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        println!(
            "prompt {} tokens, {:.3} s, {:.1} tok/s ({:?} backend{})",
            ids.len(),
            seconds,
            tok_s,
            backend,
            ubatch.map_or(String::new(), |(u, origin)| format!(
                ", ubatch {u} ({origin})"
            ))
        );
        println!("next-token candidates:");
        for (id, l) in top {
            println!("  {id:>7}  {:>9.4}  {:?}", l, piece(id));
        }
        if let Some(rows) = &profile {
            println!();
            super::gpu::print_profile(rows);
            if let Some(stats) = &stats {
                println!();
                super::gpu::print_stats(stats);
            }
        }
        if let (true, Some(why)) = (args.profile, &no_gpu_profile) {
            // The host's side of the time is all a device without timestamps can tell.
            println!();
            if let Some(stats) = &stats {
                println!(
                    "wall {:.2} ms from the first upload to the logits read back (host clock)",
                    stats.wall.as_secs_f64() * 1e3
                );
                super::gpu::print_stats(stats);
            }
            println!("no per-op table: per-op GPU times need timestamps ({why})");
        }
    }
    Ok(())
}

/// The memory plan of `--verbose`, on standard error (stdout keeps the results).
/// Bytes of KV cache per token (all layers, K and V) of each cache type, the session's marked:
/// what `--cache-type-k/-v` trade (rocky's GPU layout; q8_0 rows padded to 16 bytes, so where
/// that pads, also llama.cpp's 34 bytes per 32 values for comparison).
fn print_kv_per_token(config: &ModelConfig, chosen: KvTypes) {
    let kv_width = (config.n_head_kv * config.head_dim) as u32;
    let layers = config.n_layer as u64;
    eprintln!(
        "KV cache per token ({} layers, {} values of K and of V each):",
        config.n_layer, kv_width
    );
    for ty in KvType::ALL {
        let bytes = layers * u64::from(ty.row_bytes(kv_width));
        let ggml = match ty {
            KvType::Q8_0 => layers * u64::from(kv_width) / 32 * 34,
            _ => bytes,
        };
        let note = if ggml != bytes {
            format!(" (llama.cpp's {ggml} B: rocky pads each position's scales to 16 bytes)")
        } else {
            String::new()
        };
        eprintln!(
            "  {:<6} {:>10} B for K or V, {:>10} B both{note}",
            ty.name(),
            bytes,
            2 * bytes
        );
    }
    eprintln!(
        "  this session ({chosen}): {} B per token",
        config.kv_bytes_per_position(chosen)
    );
}

fn print_memory_plan(plan: &[(String, u64)], ubatch: usize) {
    eprintln!("device memory plan at ubatch {ubatch}:");
    for (what, bytes) in plan {
        eprintln!("  {what:<48} {:>12}", human_bytes(*bytes));
    }
    let total: u64 = plan.iter().map(|(_, bytes)| bytes).sum();
    eprintln!("  {:<48} {:>12}", "total", human_bytes(total));
}
