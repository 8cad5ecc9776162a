//! `rocky report`: the one file a board owner sends back. Nobody building rocky has an RK3588,
//! so the first real Mali figures arrive this way: the system (board, kernel, Mesa, firmware,
//! CPU, memory), `rocky doctor`, `rocky devices`, `rocky info` of the model, a bench table
//! (tuned, default and optionally the CPU reference), a prefill profile and the tuning
//! database, in one Markdown file.
//!
//! Each section runs as a child `rocky` process with its output captured, so a section that
//! fails (a driver out of memory, a missing device) still leaves its error text in the report
//! and the others run: on a board that misbehaves the errors are the point. A section that
//! runs past `--section-timeout` is stopped and marked so.

use crate::error::{CliError, CmdResult};
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
rocky report qwen2.5-0.5b-q4_k_m.gguf\n  \
rocky report model.gguf -o g610-report.md -p 512,2048 --db ~/tuning.sled --cpu\n\n\
Send the file it writes (default rocky-report.md) with your issue: it holds no file contents \
besides the tuning records, and of the environment only MESA_*, PAN*, BIFROST_*, VK_*, \
RADV_* and ROCKY_* variables.")]
pub struct Args {
    /// The GGUF model to bench and profile (the one you run)
    pub model: PathBuf,
    /// Where to write the report
    #[arg(short, long, default_value = "rocky-report.md")]
    pub output: PathBuf,
    /// Prompt lengths of the bench (comma-separated); the profile uses the first (at most 8192)
    #[arg(short = 'p', long, default_value = "512")]
    pub prompt: String,
    /// Tokens per ubatch of the bench and the profile
    #[arg(short = 'u', long, default_value_t = 512)]
    pub ubatch: usize,
    /// Bench repetitions
    #[arg(short = 'r', long, default_value_t = 2)]
    pub reps: usize,
    /// Also bench the CPU reference (minutes for 512 tokens on a board)
    #[arg(long)]
    pub cpu: bool,
    /// Tuning database (default: $ROCKY_DB, else ~/.local/share/rocky/tuning.sled)
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Vulkan device: index or part of its name (see `rocky devices`)
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Seconds one section may run before it is stopped
    #[arg(long, default_value_t = 900)]
    pub section_timeout: u64,
}

/// Longest profiled prompt: its ids travel as one command-line argument, and Linux caps one
/// argument at 128 KiB (8192 ids of up to 6 digits and a comma fit).
const MAX_PROFILE_TOKENS: usize = 8192;

/// Environment variables worth reporting: the drivers' and rocky's switches, nothing else.
const ENV_PREFIXES: &[&str] = &["MESA_", "PAN", "BIFROST_", "VK_", "RADV_", "ROCKY_"];

pub fn run(args: Args) -> CmdResult {
    if args.reps == 0 || args.ubatch == 0 {
        return Err(CliError::usage("--reps and --ubatch must be at least 1"));
    }
    let prompt_lengths = parse_lengths(&args.prompt)?;
    // The model must open: every section but the system ones needs it.
    let file = super::open_gguf(&args.model)?;
    let model = rocky_models::arch::load(&file)
        .map_err(|e| CliError::input(format!("cannot run this model: {e}")))?;
    let n_vocab = model.config.n_vocab;
    drop(file);

    let exe = std::env::current_exe()
        .map_err(|e| CliError::internal(format!("cannot find rocky's own executable: {e}")))?;
    let model_path = args.model.display().to_string();
    let mut db_args: Vec<String> = Vec::new();
    if let Some(db) = &args.db {
        db_args.extend(["--db".to_string(), db.display().to_string()]);
    }
    let device_args = ["--device".to_string(), args.device.clone()];
    let backends = if args.cpu {
        "tuned,default,cpu"
    } else {
        "tuned,default"
    };
    let profile_tokens = prompt_lengths[0].min(MAX_PROFILE_TOKENS);
    let ids = profile_token_ids(profile_tokens, n_vocab);
    let export = std::env::temp_dir().join(format!("rocky-report-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&export);

    let mut sections: Vec<(String, Vec<String>)> = vec![
        ("Doctor".into(), vec!["doctor".into()]),
        ("Devices".into(), vec!["devices".into()]),
        ("Model".into(), vec!["info".into(), model_path.clone()]),
    ];
    let mut bench = vec![
        "bench".to_string(),
        model_path.clone(),
        "-p".into(),
        args.prompt.clone(),
        "--ubatch".into(),
        args.ubatch.to_string(),
        "-r".into(),
        args.reps.to_string(),
        "--backends".into(),
        backends.into(),
        "--md".into(),
    ];
    bench.extend(device_args.iter().cloned());
    bench.extend(db_args.iter().cloned());
    sections.push(("Bench".into(), bench));
    let mut profile = vec![
        "prefill".to_string(),
        model_path.clone(),
        "--token-ids".into(),
        ids,
        "--ubatch".into(),
        args.ubatch.to_string(),
        "--profile".into(),
        "--verbose".into(),
    ];
    profile.extend(device_args.iter().cloned());
    profile.extend(db_args.iter().cloned());
    sections.push((
        format!("Prefill profile ({profile_tokens} tokens)"),
        profile,
    ));
    // Only a database that exists is exported (no database is not a failure: the board has
    // not been tuned yet).
    let db_file = super::gpu::db_path(args.db.as_deref());
    let has_db = db_file.as_deref().is_some_and(Path::exists);
    if has_db {
        let mut db = vec!["db".to_string()];
        db.extend(db_args.iter().cloned());
        db.extend(["export".into(), "-o".into(), export.display().to_string()]);
        sections.push(("Tuning database".into(), db));
    }
    // What the Mali cost model predicts for the same prompt and ubatch, beside the measured
    // bench above (last, so the other sections keep their numbers): a board's report calibrates the model (`rocky predict --fit-pp`).
    let mut predict = vec![
        "predict".to_string(),
        model_path.clone(),
        "-p".into(),
        prompt_lengths[0].to_string(),
        "--ubatch".into(),
        args.ubatch.to_string(),
        "--decode".into(),
        "16".into(),
    ];
    predict.extend(device_args.iter().cloned());
    predict.extend(db_args.iter().cloned());
    sections.push((
        "Predicted (the Mali cost model: a prediction, not a measurement)".into(),
        predict,
    ));

    let mut report = String::new();
    let _ = writeln!(
        report,
        "# rocky report\n\nrocky {} (compiler {}), written {} (seconds since the Unix epoch)\n",
        env!("CARGO_PKG_VERSION"),
        rocky_compiler::compiler_version(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
    let _ = writeln!(report, "## 1. System\n\n```text\n{}```\n", system_facts());
    let timeout = Duration::from_secs(args.section_timeout.max(1));
    let mut failed = Vec::new();
    for (i, (title, argv)) in sections.iter().enumerate() {
        eprintln!("report: {title} …");
        let outcome = run_section(&exe, argv, timeout);
        if !outcome.ok() {
            failed.push(title.clone());
        }
        let _ = writeln!(
            report,
            "## {}. {title}\n\n`rocky {}` — {}, {:.1} s\n\n```text\n{}```\n",
            i + 2,
            shown_command(argv),
            outcome.status,
            outcome.seconds,
            fenced(&outcome.output)
        );
    }
    match std::fs::read_to_string(&export) {
        Ok(records) if !records.trim().is_empty() => {
            let _ = writeln!(
                report,
                "Records (`rocky db import` reads them from a file of these lines):\n\n```jsonl\n{}```\n",
                fenced(&records)
            );
        }
        // The export ran (its section above says how) and wrote nothing.
        _ if has_db => report.push_str("No tuning records in it.\n"),
        _ => {
            let where_ = db_file.map_or("(no location: set ROCKY_DB)".to_string(), |p| {
                p.display().to_string()
            });
            let _ = writeln!(
                report,
                "## {}. Tuning database\n\nNo tuning records at {where_} (run `rocky tune MODEL` first to include them).",
                sections.len() + 2
            );
        }
    }
    let _ = std::fs::remove_file(&export);
    std::fs::write(&args.output, &report).map_err(|e| {
        CliError::output(format!(
            "cannot write the report to {}: {e}",
            args.output.display()
        ))
    })?;
    if failed.is_empty() {
        eprintln!(
            "report: wrote {} ({} sections)",
            args.output.display(),
            sections.len() + 1
        );
    } else {
        eprintln!(
            "report: wrote {}; these sections failed and hold their error text: {}",
            args.output.display(),
            failed.join(", ")
        );
    }
    Ok(())
}

fn parse_lengths(list: &str) -> Result<Vec<usize>, CliError> {
    let lengths: Vec<usize> = list
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| CliError::usage(format!("-p {list:?}: give prompt lengths like 512,2048")))?;
    if lengths.is_empty() || lengths.iter().any(|&n| n == 0 || n > 65536) {
        return Err(CliError::usage(format!(
            "-p {list:?}: each prompt length must be 1 to 65536"
        )));
    }
    Ok(lengths)
}

/// `n` ordinary token ids for the profile (no tokenizer needed), spread over the vocabulary
/// below its special tokens.
fn profile_token_ids(n: usize, n_vocab: usize) -> String {
    let range = n_vocab.clamp(2, 100_000) as u64 - 1;
    (0..n as u64)
        .map(|i| (1 + (i * 7919 + 104_729) % range).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The command as shown in the report, long id lists shortened.
fn shown_command(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if a.len() > 80 {
                format!("<{} token ids>", a.split(',').count())
            } else if a.contains(' ') {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Text that cannot close the Markdown fence it sits in, ending in a newline.
fn fenced(text: &str) -> String {
    let mut t = text.replace("```", "'''");
    if !t.ends_with('\n') {
        t.push('\n');
    }
    t
}

struct Outcome {
    status: String,
    seconds: f64,
    output: String,
}

impl Outcome {
    fn ok(&self) -> bool {
        self.status == "exit 0"
    }
}

/// Runs `rocky ARGV` with stdout and stderr captured (stderr after stdout), stopping it after
/// `timeout`.
fn run_section(exe: &Path, argv: &[String], timeout: Duration) -> Outcome {
    let start = Instant::now();
    let spawned = Command::new(exe)
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                status: format!("could not start: {e}"),
                seconds: 0.0,
                output: String::new(),
            }
        }
    };
    // Drain both pipes on threads, so a chatty section cannot block on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => {
                break match s.code() {
                    Some(c) => format!("exit {c}"),
                    None => "killed by a signal".to_string(),
                }
            }
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break format!("stopped after {} s (--section-timeout)", timeout.as_secs());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => break format!("could not wait for it: {e}"),
        }
    };
    let mut output = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !stderr.trim().is_empty() {
        output.push_str("\n[stderr]\n");
        output.push_str(&stderr);
    }
    Outcome {
        status,
        seconds: start.elapsed().as_secs_f64(),
        output,
    }
}

/// Board, OS, kernel, CPU, memory, GPU firmware and the relevant environment, each from where
/// Linux keeps it; what is missing says so.
fn system_facts() -> String {
    let mut s = String::new();
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let line = |label: &str, value: Option<String>| {
        format!(
            "{label:<10} {}\n",
            value
                .map(|v| v.trim().trim_end_matches('\0').to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "(unknown)".into())
        )
    };
    s += &line("board", read("/proc/device-tree/model"));
    s += &line(
        "os",
        read("/etc/os-release").and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        }),
    );
    s += &line("kernel", read("/proc/version"));
    s += &line("arch", Some(std::env::consts::ARCH.to_string()));
    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let mut parts: Vec<&str> = cpuinfo
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "model name" | "CPU part").then_some(v.trim())
        })
        .collect();
    parts.sort_unstable();
    parts.dedup();
    s += &line("cpu", Some(format!("{cores} cores; {}", parts.join(", "))));
    s += &line(
        "memory",
        read("/proc/meminfo").and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal"))
                .map(str::to_string)
        }),
    );
    s += &line(
        "panthor",
        Some(
            if Path::new("/sys/module/panthor").exists() {
                "kernel module loaded"
            } else {
                "kernel module not loaded"
            }
            .to_string(),
        ),
    );
    s += &line("firmware", Some(mali_firmware()));
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    s += &line(
        "env",
        Some(if env.is_empty() {
            "(none of MESA_*, PAN*, BIFROST_*, VK_*, RADV_*, ROCKY_*)".into()
        } else {
            env.join(" ")
        }),
    );
    s
}

/// The Mali CSF firmware files under /lib/firmware/arm/mali, with their sizes.
fn mali_firmware() -> String {
    let mut found = Vec::new();
    let root = Path::new("/lib/firmware/arm/mali");
    if let Ok(dirs) = std::fs::read_dir(root) {
        for dir in dirs.flatten() {
            if let Ok(files) = std::fs::read_dir(dir.path()) {
                for f in files.flatten() {
                    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                    found.push(format!(
                        "{} ({size} bytes)",
                        f.path().strip_prefix(root).unwrap_or(&f.path()).display()
                    ));
                }
            }
        }
    }
    found.sort();
    if found.is_empty() {
        format!("none under {}", root.display())
    } else {
        found.join(", ")
    }
}
