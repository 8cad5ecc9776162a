//! `rocky report`: the one file a board owner sends back. Nobody building rocky has an RK3588,
//! so the first real Mali figures arrive this way: the system (board, kernel, Mesa, firmware,
//! CPU, memory), `rocky doctor`, `rocky devices`, `rocky info` of the model, a bench table
//! (tuned, default and optionally the CPU reference), a prefill profile and the tuning
//! database, in one Markdown file.
//!
//! It also calibrates the Mali cost model: the bench's measured prefill tok/s (the tuned row
//! at the report's first prompt length and ubatch) goes to `rocky predict --fit-pp … --fit auto
//! --save-calibration`, which prints the model's prediction of the same run before and after
//! the fit and stores the calibration in the tuning database; the database export at the end
//! carries it (`rocky db import` of the report's records gives it to everyone).
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
    // What the Mali cost model predicts for the same prompt and ubatch, beside the measured
    // bench above (after the measuring sections, so they keep their numbers); with the bench's
    // figure it is calibrated on it (the arguments are added once the bench has run).
    let db_file = super::gpu::db_path(args.db.as_deref());
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
    sections.push((PREDICT_TITLE.into(), predict));
    // The database is exported last, so its records include the calibration just made.
    let mut db = vec!["db".to_string()];
    db.extend(db_args.iter().cloned());
    db.extend(["export".into(), "-o".into(), export.display().to_string()]);
    sections.push((DB_TITLE.into(), db));

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
    let mut measured: Option<(f64, String)> = None;
    let mut number = 1;
    let mut has_db = false;
    for (title, argv) in sections.iter() {
        let (mut argv, mut title) = (argv.clone(), title.clone());
        let mut fit_args: Vec<String> = Vec::new();
        if title == DB_TITLE {
            // Only a database that exists is exported (no database is not a failure: the
            // board has not been tuned yet).
            has_db = db_file.as_deref().is_some_and(Path::exists);
            if !has_db {
                continue;
            }
        }
        if title == PREDICT_TITLE {
            if let (Some((tok_s, how)), Some(_)) = (&measured, &db_file) {
                title = format!("{PREDICT_TITLE}, calibrated on the bench's measured figure");
                fit_args = vec![
                    "--fit-pp".into(),
                    format!("{tok_s}"),
                    "--fit".into(),
                    "auto".into(),
                    "--save-calibration".into(),
                    "--measured-by".into(),
                    how.clone(),
                ];
                argv.extend(fit_args.iter().cloned());
            }
        }
        eprintln!("report: {title} …");
        let mut outcome = run_section(&exe, &argv, timeout);
        if !fit_args.is_empty() && !outcome.ok() {
            // The fit failed (no single constant reproduces the figure, said in its output):
            // keep that, and still give the prediction with the constants as they are.
            number += 1;
            failed.push(title.clone());
            write_section(&mut report, number, &title, &argv, &outcome);
            title = PREDICT_TITLE.to_string();
            argv.truncate(argv.len() - fit_args.len());
            eprintln!("report: {title} …");
            outcome = run_section(&exe, &argv, timeout);
        }
        if title == "Bench" && outcome.ok() {
            measured = measured_prefill(&outcome.output, prompt_lengths[0], args.ubatch).map(
                |(tok_s, backend, device)| {
                    (
                        tok_s,
                        format!(
                            "rocky bench -p {} --ubatch {} -r {}: the {backend} row's mean on {device} (rocky report)",
                            prompt_lengths[0], args.ubatch, args.reps
                        ),
                    )
                },
            );
        }
        if !outcome.ok() {
            failed.push(title.clone());
        }
        number += 1;
        write_section(&mut report, number, &title, &argv, &outcome);
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
                "## {}. {DB_TITLE}\n\nNo tuning records at {where_} (run `rocky tune MODEL` first to include them).",
                number + 1
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
            number
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

/// The title of the prediction's section.
const PREDICT_TITLE: &str = "Predicted (the Mali cost model: a prediction, not a measurement)";
/// The title of the database export's section.
const DB_TITLE: &str = "Tuning database";

/// Appends one section: its heading, command, status and output.
fn write_section(report: &mut String, number: usize, title: &str, argv: &[String], o: &Outcome) {
    let _ = writeln!(
        report,
        "## {number}. {title}\n\n`rocky {}` — {}, {:.1} s\n\n```text\n{}```\n",
        shown_command(argv),
        o.status,
        o.seconds,
        fenced(&o.output)
    );
}

/// The measured prefill tok/s of `rocky bench --md`'s output at `n_prompt` and `ubatch`: the
/// tuned GPU row's mean, else the default GPU row's, with the row's backend and device. `None`
/// when the table has no such row (the bench failed, or printed something else).
fn measured_prefill(
    bench_md: &str,
    n_prompt: usize,
    ubatch: usize,
) -> Option<(f64, String, String)> {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let mut lines = bench_md.lines().filter(|l| l.trim_start().starts_with('|'));
    let header = cells(lines.next()?);
    let col = |name: &str| header.iter().position(|h| h == name);
    let (backend, device, ub, test, ts) = (
        col("backend")?,
        col("device")?,
        col("ubatch")?,
        col("test")?,
        col("t/s")?,
    );
    let test_name = format!("pp{n_prompt}");
    let rows: Vec<Vec<String>> = lines
        .map(cells)
        .filter(|r| r.len() == header.len())
        .filter(|r| r[test] == test_name && r[ub] == ubatch.to_string())
        .collect();
    for wanted in ["Vulkan tuned", "Vulkan default"] {
        if let Some(r) = rows.iter().find(|r| r[backend] == wanted) {
            let mean: f64 = r[ts].split_whitespace().next()?.parse().ok()?;
            if mean.is_finite() && mean > 0.0 {
                return Some((mean, wanted.to_string(), r[device].clone()));
            }
        }
    }
    None
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
            if a.len() > 80 && a.chars().all(|c| c.is_ascii_digit() || c == ',') {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `rocky bench --md` as its renderer writes it (the snapshot its own test pins).
    const BENCH_MD: &str = include_str!("../../tests/snapshots/bench-table.md");

    #[test]
    fn the_measured_figure_is_the_tuned_rows_mean_at_the_prompt_and_ubatch() {
        // The snapshot's tuned row: 1536.00 ± 724.08 t/s at pp512, ubatch 512, on an H200.
        let (tok_s, backend, device) = measured_prefill(BENCH_MD, 512, 512).unwrap();
        assert_eq!(tok_s, 1536.0);
        assert_eq!(backend, "Vulkan tuned");
        assert_eq!(device, "NVIDIA H200");
        // Without a tuned row, the default row; another prompt or ubatch: none.
        let no_tuned: String = BENCH_MD
            .lines()
            .filter(|l| !l.contains("Vulkan tuned"))
            .map(|l| format!("{l}\n"))
            .collect();
        let (tok_s, backend, _) = measured_prefill(&no_tuned, 512, 512).unwrap();
        assert_eq!((tok_s, backend.as_str()), (1024.0, "Vulkan default"));
        assert_eq!(measured_prefill(BENCH_MD, 64, 512), None);
        assert_eq!(measured_prefill(BENCH_MD, 512, 64), None);
        // The CPU reference is never taken for the GPU's figure.
        let cpu_only: String = BENCH_MD
            .lines()
            .filter(|l| !l.contains("Vulkan"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(measured_prefill(&cpu_only, 512, 512), None);
        // A failed bench's output (no table) gives nothing.
        assert_eq!(
            measured_prefill("error: out of device memory\n", 512, 512),
            None
        );
    }
}
