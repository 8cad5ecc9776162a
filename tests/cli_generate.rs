//! `rocky generate` from the outside: standard output holds the generated text and nothing
//! else, `--json` parses, the GPU and the CPU reference agree, and bad flags end with a clear
//! message and the usage/input exit codes (src/error.rs), never a panic.

mod common;

use common::{asset, shared, text};
use rocky_models::gguf::GgufFile;
use rocky_models::tokenizer::Tokenizer;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `rocky generate ARGS` in a sandbox: its own XDG_RUNTIME_DIR and a tuning database that
/// does not exist. Without `--cpu`, on the GPU path, named (`--device auto`): where the only
/// Vulkan device is a CPU implementation (lavapipe in CI) the default is rocky's CPU path.
fn rocky(args: &[&str]) -> Output {
    rocky_with_env(args, &[])
}

/// [`rocky`] with more environment variables set.
fn rocky_with_env(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let dir = std::env::temp_dir().join(format!(
        "rocky-cli-generate-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .arg("generate")
        .args(args)
        .args(if args.contains(&"--cpu") || args.contains(&"--device") {
            &[][..]
        } else {
            &["--device", "auto"][..]
        })
        .env("XDG_RUNTIME_DIR", &dir)
        .env("ROCKY_DB", dir.join("none.sled"))
        .envs(vars.iter().copied())
        .output()
        .expect("rocky runs");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn tiny() -> PathBuf {
    shared().join("models/qwen2-tiny-q8_0.gguf")
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

const IDS: &str = "785,6722,315,9625,374";

#[test]
fn stdout_is_the_text_of_the_generated_tokens_and_gpu_agrees_with_cpu() {
    let model = tiny();
    let m = model.to_str().unwrap();
    let args = ["--token-ids", IDS, "-n", "12", "--temp", "0"];
    let gpu_json = json(&rocky(&[&[m, "--json"][..], &args].concat()));
    let cpu_json = json(&rocky(&[&[m, "--json", "--cpu"][..], &args].concat()));
    let ids: Vec<u32> = gpu_json["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids.len(), 12);
    assert_eq!(
        gpu_json["token_ids"], cpu_json["token_ids"],
        "GPU vs CPU reference"
    );
    assert_eq!(gpu_json["generated_tokens"], 12);
    assert_eq!(gpu_json["prompt_tokens"], 5);
    assert_eq!(gpu_json["decode_steps"], 11);
    assert_eq!(gpu_json["stop"], "max_tokens");
    assert_eq!(gpu_json["backend"], "gpu");
    assert!(gpu_json["decode_tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(gpu_json["prefill_tokens_per_second"].as_f64().unwrap() > 0.0);
    // The executor's per-step accounting: its parts fit in its wall time, and the steps' wall
    // time fits in the decode loop's own clock (measured around the evaluator calls).
    let step = &gpu_json["decode_step_ms"];
    let part = |k: &str| step[k].as_f64().unwrap_or_else(|| panic!("{k} in {step}"));
    let parts = part("setup") + part("record") + part("wait") + part("readback");
    assert!(parts <= part("wall") * 1.01 + 0.01, "{step}");
    let loop_ms = gpu_json["decode_seconds"].as_f64().unwrap() * 1e3;
    assert!(
        part("wall") * 11.0 <= loop_ms * 1.01 + 0.01,
        "{step} vs {loop_ms} ms"
    );
    assert!(gpu_json["decode_dispatches_per_step"].as_f64().unwrap() >= 1.0);
    assert!(cpu_json["decode_step_ms"].is_null());
    // Barriers by default on a CPU driver, and said why; nothing on the CPU path.
    assert_eq!(gpu_json["decode_ordered_by"], "barriers");
    assert!(gpu_json["decode_barriers_because"].is_string());
    assert!(cpu_json["decode_ordered_by"].is_null());

    // The replayed steps ordered by counters instead (rocky_compiler::ir::chain): the same
    // tokens, and still counters at the end (no wait gave up).
    let chained = json(&rocky_with_env(
        &[&[m, "--json"][..], &args].concat(),
        &[("ROCKY_DECODE_CHAIN", "1")],
    ));
    assert_eq!(chained["decode_ordered_by"], "counters", "{chained}");
    assert!(chained["decode_barriers_because"].is_null());
    assert_eq!(chained["token_ids"], gpu_json["token_ids"]);

    // Streamed: exactly the tokens' text, with the timings on stderr only.
    let streamed = rocky(&[&[m][..], &args].concat());
    assert!(streamed.status.success(), "{}", text(&streamed));
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(&model).unwrap()).unwrap();
    let bytes: Vec<u8> = ids
        .iter()
        .flat_map(|&t| tokenizer.token_bytes(t).unwrap())
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&streamed.stdout),
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(
        gpu_json["text"].as_str().unwrap().as_bytes(),
        streamed.stdout
    );
    let err = String::from_utf8_lossy(&streamed.stderr);
    assert!(
        err.contains("prefill: 5 tokens") && err.contains("decode: 11 steps"),
        "{err}"
    );
    assert!(err.contains("tok/s"), "{err}");
}

/// The real Gemma 3 270M on the GPU: its first 15 greedy tokens for p1 are llama.cpp's
/// (../shared/golden/gemma3-270m/greedy32.json; the paths part at a near tie after that,
/// tests/generate_gemma.rs).
#[test]
fn gemma3_270m_on_the_gpu_prints_llama_cpps_greedy_start() {
    let model = asset("gemma-3-270m-q4_k_m.gguf");
    let o = rocky(&[
        model.to_str().unwrap(),
        "--prompt",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        " the capital of the country of France."
    );
}

#[test]
fn a_stop_string_ends_the_text_before_it() {
    let model = tiny();
    let m = model.to_str().unwrap();
    let all = json(&rocky(&[
        m,
        "--token-ids",
        IDS,
        "-n",
        "12",
        "--temp",
        "0",
        "--cpu",
        "--json",
    ]));
    let full = all["text"].as_str().unwrap().to_string();
    // A stop string from the middle of the continuation (whole characters).
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 4, "{full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let before = &full[..full.find(&stop).unwrap()];
    let o = rocky(&[
        m,
        "--token-ids",
        IDS,
        "-n",
        "12",
        "--temp",
        "0",
        "--cpu",
        "--stop",
        &stop,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), before);
    assert!(String::from_utf8_lossy(&o.stderr).contains("stopped by stop_string"));
}

#[test]
fn the_same_seed_samples_the_same_text() {
    let model = tiny();
    let m = model.to_str().unwrap();
    let run = |seed: &str| {
        json(&rocky(&[
            m,
            "--token-ids",
            IDS,
            "-n",
            "10",
            "--temp",
            "1.5",
            "--top-k",
            "0",
            "--top-p",
            "1",
            "--min-p",
            "0",
            "--seed",
            seed,
            "--cpu",
            "--json",
        ]))["token_ids"]
            .clone()
    };
    let a = run("7");
    assert_eq!(a, run("7"));
    // Random weights give a nearly flat distribution: another seed draws other tokens.
    assert_ne!(a, run("8"));
}

#[test]
fn bad_flags_give_clear_errors() {
    let model = tiny();
    let m = model.to_str().unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--top-p", "2"], 2, "top-p 2 is out of range"),
        (&["--min-p=-1"], 2, "min-p -1 is out of range"),
        (
            &["--repeat-penalty", "0"],
            2,
            "repeat penalty 0 is out of range",
        ),
        (&["-n", "0"], 2, "-n must be at least 1"),
        (&["--ctx", "0"], 2, "--ctx must be at least 1"),
        (&["--ctx", "3"], 2, "the prompt has 5 tokens but --ctx is 3"),
        (&["--temp", "warm"], 2, "invalid value 'warm'"),
        (&["--ubatch", "0"], 2, "--ubatch 0 is out of range"),
    ];
    for (extra, code, message) in cases {
        let o = rocky(&[&[m, "--token-ids", IDS, "--cpu"][..], extra].concat());
        let all = text(&o);
        assert_eq!(o.status.code(), Some(*code), "{extra:?}: {all}");
        assert!(all.contains(message), "{extra:?}: {all}");
        assert!(!all.contains("panicked"), "{extra:?}: {all}");
        assert!(o.stdout.is_empty(), "{extra:?}: stdout {:?}", o.stdout);
    }
    let o = rocky(&[m, "--token-ids", "5,99999999", "--cpu"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("token id 99999999 is outside the vocabulary"));
    let o = rocky(&["/nonexistent/model.gguf", "--prompt", "hi"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("does not exist"));
    // No prompt at all: clap names the missing group.
    let o = rocky(&[m]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!text(&o).contains("panicked"));
}

/// A context smaller than prompt + -n ends generation cleanly when it is full: 5 prompt
/// tokens in 8 positions leave room for 3 decode steps, so 4 tokens (the last one sampled from
/// the logits of position 7, never evaluated).
#[test]
fn a_full_context_stops_generation_cleanly() {
    let model = tiny();
    let m = model.to_str().unwrap();
    for backend in [&["--cpu"][..], &[][..]] {
        let args = [
            m,
            "--token-ids",
            IDS,
            "-n",
            "12",
            "--temp",
            "0",
            "--ctx",
            "8",
            "--json",
        ];
        let doc = json(&rocky(&[&args[..], backend].concat()));
        assert_eq!(doc["stop"], "context_full", "{backend:?}");
        assert_eq!(doc["generated_tokens"], 4, "{backend:?}");
        assert_eq!(doc["decode_steps"], 3, "{backend:?}");
    }
}

/// llama.cpp's -f drops the file's one final newline: `llama-completion -f` with
/// "Hello world\n" evaluates 2 tokens (9707 'Hello', 1879 ' world'), with "Hello world\n\n"
/// 3 (198 '\n' after them), as its --verbose-prompt printed on this tiny model.
#[test]
fn a_prompt_file_loses_one_final_newline_as_llama_cpps_dash_f() {
    let dir = std::env::temp_dir().join(format!("rocky-file-prompt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = tiny();
    for (content, want) in [
        ("Hello world\n", 2),
        ("Hello world\n\n", 3),
        ("Hello world", 2),
    ] {
        let path = dir.join("prompt.txt");
        std::fs::write(&path, content).unwrap();
        let out = json(&rocky(&[
            model.to_str().unwrap(),
            "--file",
            path.to_str().unwrap(),
            "-n",
            "1",
            "--temp",
            "0",
            "--json",
            "--cpu",
        ]));
        assert_eq!(out["prompt_tokens"], want, "{content:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
