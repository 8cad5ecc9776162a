//! `--cache-type-k/-v` (and llama.cpp's `-ctk/-ctv`) on the command line (issue 37): a type
//! rocky has not is a usage error naming it; `prefill -v` prints the cache's bytes per token
//! of every type (checked against the closed form of the tiny model: 4 layers, 2 kv heads of
//! 64); `bench` gains llama-bench's type_k and type_v columns; `--kv-rotation` (llama.cpp's
//! Hadamard rotation around a q8_0 cache) rotates on both backends alike.

use rocky_models::gguf::GgufFile;
use rocky_models::synth::{write_model, Quant, Shape, SynthConfig, Vocabulary};
use std::path::PathBuf;
use std::process::{Command, Output};

fn tiny_model(name: &str) -> PathBuf {
    let vocab_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/vocab/ggml-vocab-qwen2.gguf");
    let vocab = Vocabulary::from_gguf(&GgufFile::open(vocab_path).unwrap()).unwrap();
    let path =
        std::env::temp_dir().join(format!("rocky-cli-kv-{name}-{}.gguf", std::process::id()));
    let config = SynthConfig {
        shape: Shape::Tiny,
        quant: Quant::F32,
        seed: 1,
    };
    write_model(&path, &config, &vocab, |_| {}).unwrap();
    path
}

/// rocky in a sandbox: its own XDG_RUNTIME_DIR and a tuning database that does not exist.
fn rocky(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("rocky-cli-kv-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env("XDG_RUNTIME_DIR", &dir)
        .env("ROCKY_DB", dir.join("none.sled"))
        .output()
        .expect("rocky runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_unknown_cache_type_is_a_usage_error_naming_it() {
    let model = tiny_model("usage");
    let m = model.to_str().unwrap();
    for flag in ["-ctk", "--cache-type-v"] {
        let o = rocky(&["prefill", m, "--token-ids", "1,2,3", flag, "q4_0"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("q4_0") && e.contains("f32, f16 or q8_0"), "{e}");
    }
    std::fs::remove_file(&model).ok();
}

#[test]
fn prefill_verbose_prints_the_cache_per_token_of_every_type() {
    let model = tiny_model("verbose");
    let m = model.to_str().unwrap();
    let o = rocky(&[
        "prefill",
        m,
        "--token-ids",
        "100,200,300",
        "-ctk",
        "q8_0",
        "-ctv",
        "f32",
        "-v",
    ]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    // 4 layers × 128 values: f32 2048 B, f16 1024 B, q8_0 4 × (128 + 16) = 576 B, for K or V
    // (llama.cpp's q8_0: 4 × 128 × 34/32 = 544 B; rocky's 4 scales take a 16-byte unit).
    for line in [
        "f32          2048 B for K or V,       4096 B both\n",
        "f16          1024 B for K or V,       2048 B both\n",
        "q8_0          576 B for K or V,       1152 B both (llama.cpp's 544 B: rocky pads",
    ] {
        assert!(e.contains(line), "no '{line}' in:\n{e}");
    }
    assert!(
        e.contains("this session (K q8_0, V f32): 2624 B per token"),
        "{e}"
    );
    assert!(
        e.contains("KV cache (4 layers, K q8_0, V f32: 2624 B per position)"),
        "{e}"
    );
    std::fs::remove_file(&model).ok();
}

#[test]
fn bench_shows_llama_bench_cache_type_columns() {
    let model = tiny_model("bench");
    let m = model.to_str().unwrap();
    let o = rocky(&[
        "bench",
        m,
        "-p",
        "16",
        "-ub",
        "16",
        "-r",
        "1",
        "--backends",
        "default",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "--md",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    assert!(
        lines.next().unwrap().contains("| type_k | type_v |"),
        "{out}"
    );
    assert!(lines.nth(1).unwrap().contains("| q8_0 | q8_0 |"), "{out}");
    std::fs::remove_file(&model).ok();
}

fn logits(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn kv_rotation_rotates_a_q8_0_cache_on_both_backends_alike() {
    let model = tiny_model("rotation");
    let m = model.to_str().unwrap();
    let ids = (0..40)
        .map(|i| (100 + i * 7919 % 30000).to_string())
        .collect::<Vec<_>>();
    let ids = ids.join(",");
    let dir = std::env::temp_dir();
    let run = |backend: &str, rotation: bool| {
        let out = dir.join(format!(
            "rocky-cli-kv-rot-{backend}-{rotation}-{}.f32",
            std::process::id()
        ));
        let mut args = vec![
            "prefill",
            m,
            "--token-ids",
            &ids,
            "-ctk",
            "q8_0",
            "-ctv",
            "q8_0",
            "--backend",
            backend,
            "--logits-out",
            out.to_str().unwrap(),
        ];
        if backend == "gpu" {
            args.extend(["--math", "f32", "--ubatch", "16"]);
        }
        if rotation {
            args.push("--kv-rotation");
        }
        let o = rocky(&args);
        assert!(o.status.success(), "{backend} {rotation}: {}", stderr(&o));
        let l = logits(&out);
        std::fs::remove_file(&out).ok();
        l
    };
    let diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    let (gpu, cpu) = (run("gpu", true), run("cpu", true));
    let cpu_plain = run("cpu", false);
    // The tolerance of tests/gpu_kv_types.rs for a q8_0 cache; the rotation itself moves the
    // logits by about 1e-2 on this model.
    assert!(
        diff(&gpu, &cpu) <= 5e-4,
        "GPU vs CPU rotated: {}",
        diff(&gpu, &cpu)
    );
    assert!(
        diff(&cpu, &cpu_plain) > 1e-3,
        "--kv-rotation changed nothing: {}",
        diff(&cpu, &cpu_plain)
    );
    std::fs::remove_file(&model).ok();
}
