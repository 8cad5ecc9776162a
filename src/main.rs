//! The `rocky` command line: one module per subcommand under `cmd/`.

mod cmd;
mod error;
mod progress;
mod units;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rocky",
    version,
    about = "Auto-tuned LLM prefill on GPUs without matrix cores (Vulkan)",
    long_about = "rocky compiles, tunes and runs the prefill of GGUF language models on any \
                  Vulkan 1.1+ GPU; it is built for the Mali-G610 of RK3588 boards."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe a GGUF model: architecture, shapes, parameters, tensor types, tokenizer.
    Info(cmd::info::Args),
    /// Turn text into token ids with a model's (or vocabulary file's) tokenizer.
    Tokenize(cmd::tokenize::Args),
    /// Run the prefill of a prompt and print the next-token candidates.
    Prefill(cmd::prefill::Args),
    /// Continue a prompt: stream the generated text to standard output (timings to standard
    /// error), greedy or sampled.
    Generate(cmd::generate::Args),
    /// Serve the model over an OpenAI-compatible HTTP API (completions and chat, streaming
    /// or not), reusing the cached prompt prefix across requests.
    Serve(cmd::serve::Args),
    /// Write a random-weight Qwen2.5-shaped GGUF model (for benchmarks and demos).
    Synth(cmd::synth::Args),
    /// List Vulkan devices with the limits and features rocky uses.
    Devices(cmd::devices::Args),
    /// Build one kernel for a workload and schedule: dump, run, check and time it.
    Kernel(cmd::kernel::Args),
    /// Prefill throughput, llama-bench style: tuned, default and CPU-reference rows.
    Bench(cmd::bench::Args),
    /// Time the Qwen2.5-3B prefill GEMMs (Q4_K, Q6_K) against the device's FMA ceiling.
    BenchGemm(cmd::bench_gemm::Args),
    /// Time the decode-step GEMVs (Qwen2.5-0.5B and 3B shapes) with caches flushed, against the
    /// device's copy bandwidth.
    BenchGemv(cmd::bench_gemv::Args),
    /// Time one attention workload (default: Qwen2.5-3B, m 512, KV 512 and 4096) with its
    /// default, f16 and tuned schedules, each checked against the CPU reference.
    BenchAttention(cmd::bench_attention::Args),
    /// Check the board's GPU stack (panthor, firmware, panvk, environment) and Vulkan devices.
    Doctor(cmd::doctor::Args),
    /// Search the schedules of a model's GEMMs and attention on this device into the tuning
    /// database.
    Tune(cmd::tune::Args),
    /// List, inspect, export and import the tuning database.
    Db(cmd::db::Args),
    /// Predict the Mali's prefill and decode speed from the driver's own shader statistics (a
    /// model calibrated on one real figure; never a measurement).
    Predict(cmd::predict::Args),
    /// Write one file to send back from a board: system, doctor, devices, model, bench,
    /// prefill profile and tuning database.
    Report(cmd::report::Args),
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse_from(llama_bench_flags(std::env::args_os()));
    let result = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Prefill(a) => cmd::prefill::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Synth(a) => cmd::synth::run(a),
        Command::Devices(a) => cmd::devices::run(a),
        Command::Kernel(a) => cmd::kernel::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::BenchGemm(a) => cmd::bench_gemm::run(a),
        Command::BenchGemv(a) => cmd::bench_gemv::run(a),
        Command::BenchAttention(a) => cmd::bench_attention::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Db(a) => cmd::db::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Predict(a) => cmd::predict::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// `-ub 256`, `-ctk q8_0` and `-ctv q8_0` as llama.cpp's tools spell them: clap's short
/// flags are one letter, so these are rewritten to `--ubatch`, `--cache-type-k` and
/// `--cache-type-v` before parsing (everywhere; no other flag is spelled so).
fn llama_bench_flags(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some("-ub") => "--ubatch".into(),
        Some("-ctk") => "--cache-type-k".into(),
        Some("-ctv") => "--cache-type-v".into(),
        _ => a,
    })
    .collect()
}

/// Rust ignores SIGPIPE, so writing to a closed pipe (`rocky db list | head`) makes println!
/// panic; a command-line tool should simply stop, as `cat` does.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
