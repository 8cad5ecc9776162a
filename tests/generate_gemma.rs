//! Greedy generation on the real Gemma 3 270M (Q4_K_M) on the CPU reference, against llama.cpp's
//! greedy continuations: the shared golden (../shared/golden/gemma3-270m/greedy32.json) and
//! tests/fixtures/generate/gemma3-270m-greedy32.json (tools/gemma3_greedy_fixture.py: the same
//! llama.cpp on the same file with the prompt passed whole, and on an all-F32 copy of the file).
//!
//! Two facts about the golden, both checked with llama-completion: it ends every run with
//! "\n\n" of its own (`-n 31` ends "…city\n\n" where `-n 32` ends "…city in\n\n"), so those
//! bytes are not part of the continuation; and it was made with the prompt read through `-f`,
//! which drops a trailing newline, so its p4 ran on the prompt without its last "\n" (the ids in
//! the file include it): passing the whole text with `-p` gives another continuation.
//!
//! On the quantized file llama.cpp rounds the activations to Q8_K/Q8_0 before its integer dot
//! products, rocky's reference keeps them f32: where two candidates are closer than that
//! rounding the greedy paths part. Those prompts are checked exactly against llama.cpp on the
//! F32 copy (no activation rounding there), and the divergence from the quantized run is
//! printed with its logit gap and required to be a near tie.

mod common;

use common::{asset, shared};
use rocky_generate::{
    generate, CpuEvaluator, EndOfGeneration, EvalError, Evaluator, GenerateOptions, SamplerParams,
};
use rocky_models::arch;
use rocky_models::gguf::GgufFile;
use rocky_models::reference::{top_k, ReferenceOptions};
use rocky_models::tokenizer::Tokenizer;

/// (target, prompt) pairs whose 32 greedy tokens must be the same bytes as llama.cpp's.
const EXACT: &[(&str, &str)] = &[
    ("golden", "p4_code_python"),
    ("q4_k_m", "p4_code_python"),
    ("f32deq", "p1_short_en"),
    ("f32deq", "p3_non_ascii"),
    ("f32deq", "p4_code_python"),
];

/// Where rocky and llama.cpp on the quantized file part, llama.cpp's token must be within this
/// many logits of rocky's choice (llama.cpp's activation rounding moves Gemma's logits by up
/// to ~0.3 at a top logit of ~20: models/tests/reference_gemma3.rs).
const NEAR_TIE: f32 = 0.1;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

struct Golden {
    name: String,
    text: String,
    prompt_ids: Vec<u32>,
    bytes: Vec<u8>,
    decode_runs: usize,
}

fn goldens() -> Vec<Golden> {
    let path = shared().join("golden/gemma3-270m/greedy32.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let mut bytes = hex(p["generated_hex"].as_str().unwrap());
            // llama-completion's own "\n\n" after the generation (see the module comment).
            assert!(bytes.ends_with(b"\n\n"));
            bytes.truncate(bytes.len() - 2);
            Golden {
                name: p["name"].as_str().unwrap().to_string(),
                text: p["prompt_text"].as_str().unwrap().to_string(),
                prompt_ids: p["prompt_token_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect(),
                bytes,
                decode_runs: p["decode_runs"].as_u64().unwrap() as usize,
            }
        })
        .collect()
}

/// An evaluator that keeps every logits vector it returns (to explain a divergence).
struct Recording<E> {
    inner: E,
    logits: Vec<Vec<f32>>,
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

/// A continuation of llama.cpp's to compare with.
struct Target {
    /// "golden", "q4_k_m" or "f32deq".
    source: &'static str,
    prompt: String,
    ids: Vec<u32>,
    bytes: Vec<u8>,
}

fn targets(tokenizer: &Tokenizer) -> Vec<Target> {
    let mut out = Vec::new();
    for g in goldens() {
        // The prompt as llama-completion -f read it: without a trailing newline.
        let ran = tokenizer
            .encode(g.text.strip_suffix('\n').unwrap_or(&g.text), true, true)
            .unwrap();
        let whole = tokenizer.encode(&g.text, true, true).unwrap();
        assert_eq!(
            whole, g.prompt_ids,
            "{}: the golden's ids are the whole text's",
            g.name
        );
        assert_eq!(
            g.decode_runs, 31,
            "{}: 32 tokens take 31 decode calls",
            g.name
        );
        out.push(Target {
            source: "golden",
            prompt: g.name.clone(),
            ids: ran,
            bytes: g.bytes,
        });
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/generate/gemma3-270m-greedy32.json"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for p in doc["prompts"].as_array().unwrap() {
        let ids = tokenizer
            .encode(p["prompt_text"].as_str().unwrap(), true, true)
            .unwrap();
        for source in ["q4_k_m", "f32deq"] {
            out.push(Target {
                source,
                prompt: p["name"].as_str().unwrap().to_string(),
                ids: ids.clone(),
                bytes: hex(p[format!("{source}_generated_hex")].as_str().unwrap()),
            });
        }
    }
    out
}

/// One greedy generation: the prompt, its bytes and tokens, and the logits of every step.
struct Run {
    ids: Vec<u32>,
    bytes: Vec<u8>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

#[test]
fn gemma3_270m_greedy32_matches_llama_cpp() {
    let file = GgufFile::open(asset("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let model = arch::load(&file).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let end = EndOfGeneration::from_vocabulary(&file, &tokenizer);
    let options = GenerateOptions {
        max_new_tokens: 32,
        sampler: SamplerParams::greedy(),
        stop_strings: Vec::new(),
    };
    // One generation per distinct prompt (the golden's p4 is one token shorter).
    let mut runs: Vec<Run> = Vec::new();
    let mut failures = Vec::new();
    for t in targets(&tokenizer) {
        if !runs.iter().any(|r| r.ids == t.ids) {
            let mut ev = Recording {
                inner: CpuEvaluator::new(&file, &model, ReferenceOptions::llama_cpp(), 2048),
                logits: Vec::new(),
            };
            let out = generate(&mut ev, &tokenizer, &end, &t.ids, &options, &mut |_| {}).unwrap();
            assert_eq!(
                out.tokens.len(),
                32,
                "{}: stopped by {:?}",
                t.prompt,
                out.stop
            );
            assert_eq!(out.decode_steps, 31);
            runs.push(Run {
                ids: t.ids.clone(),
                bytes: out.bytes,
                tokens: out.tokens,
                logits: ev.logits,
            });
        }
        let Run {
            bytes,
            tokens,
            logits,
            ..
        } = runs.iter().find(|r| r.ids == t.ids).unwrap();
        let same = *bytes == t.bytes;
        let exact = EXACT.contains(&(t.source, t.prompt.as_str()));
        println!(
            "{:<15} vs llama.cpp {:<6} ({} prompt tokens): {}{}\n  rocky {:?}\n  llama {:?}",
            t.prompt,
            t.source,
            t.ids.len(),
            if same { "same bytes" } else { "DIFFERENT" },
            if exact { " (required)" } else { "" },
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&t.bytes),
        );
        if same {
            continue;
        }
        if exact {
            failures.push(format!("{} vs {}: not the same bytes", t.prompt, t.source));
        }
        match explain_divergence(&tokenizer, tokens, logits, &t.bytes) {
            Some(gap) if gap <= NEAR_TIE => {}
            Some(gap) => failures.push(format!(
                "{} vs {}: llama.cpp's token is {gap:.4} below rocky's choice, more than a near tie",
                t.prompt, t.source
            )),
            None => failures.push(format!(
                "{} vs {}: llama.cpp's token is not among rocky's top candidates",
                t.prompt, t.source
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Prints the step where rocky's tokens leave llama.cpp's bytes, with rocky's top candidates
/// there and the gap between its choice and the candidate that continues llama.cpp's text.
/// Returns that gap (None when no top candidate continues llama.cpp's text).
fn explain_divergence(
    tokenizer: &Tokenizer,
    tokens: &[u32],
    logits: &[Vec<f32>],
    want: &[u8],
) -> Option<f32> {
    let mut at = 0;
    for (step, &t) in tokens.iter().enumerate() {
        let piece = tokenizer.token_bytes(t).unwrap_or_default();
        if want[at..].starts_with(&piece) {
            at += piece.len();
            continue;
        }
        let l = &logits[step];
        let top = top_k(l, 8);
        let mut gap = None;
        println!(
            "  diverges at generated token {step} (byte {at}): rocky picks {t} {:?} logit {:.4}",
            tokenizer.token_piece(t),
            l[t as usize]
        );
        for (id, logit) in top {
            let p = tokenizer.token_bytes(id as u32).unwrap_or_default();
            let continues = !p.is_empty() && want[at..].starts_with(&p);
            if continues && gap.is_none() {
                gap = Some(l[t as usize] - logit);
            }
            println!(
                "    {id:>7} {logit:>9.4} {:?}{}",
                tokenizer.token_piece(id as u32),
                if continues {
                    format!(
                        "  <- continues llama.cpp's text; gap to rocky's pick {:.4}",
                        l[t as usize] - logit
                    )
                } else {
                    String::new()
                }
            );
        }
        return gap;
    }
    // Rocky's tokens are a prefix of llama.cpp's bytes: no divergence to explain.
    Some(0.0)
}

/// The same targets through `rocky generate` on the GPU (lavapipe in CI; its default schedules
/// there compute in f32, so the GPU follows the CPU reference through the near ties): the
/// golden's p4 as llama.cpp ran it, and p1 and p3 against llama.cpp on the F32 copy. Bytes are
/// taken from the token ids of `--json` (p3 ends inside a UTF-8 character, which the streamed
/// text shows as U+FFFD).
#[test]
fn gemma3_270m_greedy32_on_the_gpu_matches_llama_cpp() {
    let path = asset("gemma-3-270m-q4_k_m.gguf");
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let cases = [
        ("golden", "p4_code_python"),
        ("f32deq", "p1_short_en"),
        ("f32deq", "p3_non_ascii"),
    ];
    for t in targets(&tokenizer)
        .into_iter()
        .filter(|t| cases.contains(&(t.source, t.prompt.as_str())))
    {
        let ids: Vec<String> = t.ids.iter().map(u32::to_string).collect();
        let dir = std::env::temp_dir().join(format!("rocky-generate-gemma-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocky"))
            .args([
                "generate",
                path.to_str().unwrap(),
                "-n",
                "32",
                "--temp",
                "0",
                "--json",
                // The GPU path even where lavapipe alone would default to the CPU one.
                "--device",
                "auto",
            ])
            .args(["--token-ids", &ids.join(",")])
            .env("XDG_RUNTIME_DIR", &dir)
            .env("ROCKY_DB", dir.join("none.sled"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", common::text(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let bytes: Vec<u8> = doc["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|v| tokenizer.token_bytes(v.as_u64().unwrap() as u32).unwrap())
            .collect();
        println!(
            "GPU {:<15} vs llama.cpp {:<6}: {}",
            t.prompt,
            t.source,
            if bytes == t.bytes {
                "same bytes"
            } else {
                "DIFFERENT"
            }
        );
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            String::from_utf8_lossy(&t.bytes),
            "{} vs {}",
            t.prompt,
            t.source
        );
        assert_eq!(bytes, t.bytes);
    }
}
