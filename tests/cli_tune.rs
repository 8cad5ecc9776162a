//! End-to-end tests of `rocky tune` and `rocky db` on the tiny Q4_K_M Qwen2 (lavapipe is
//! enough): trials for every GEMM of the model, resume, tuned prefill still matching the CPU
//! reference, export/import round trip, and the all-or-nothing import of a bad file.

mod common;

use common::{rocky, shared, text};
use rocky_models::gguf::GgufFile;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UBATCH: &str = "16";
const TRIALS: &str = "4";

fn model() -> PathBuf {
    // Every rocky these tests start runs one-row linears as GEMVs, as on a GPU (lavapipe's
    // default keeps the GEMM there): the GEMV workloads are listed and tuned.
    std::env::set_var("ROCKY_GEMV", "1");
    shared().join("models/qwen2-tiny-q4_k_m.gguf")
}

fn ok_json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rocky-cli-tune-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The GEMMs of a Qwen2 prefill read straight from the GGUF, independently of the executor:
/// the seven projections of every layer at `ubatch` rows and the LM head at one row (the last
/// position only; the token embedding when the head is tied). Each as `(m, n, k, weight, bias)`.
/// (m, n, k, weight type, bias, epilogue) of every GEMM `rocky tune` should tune, worked out
/// from the file's tensors: the projections at the ubatch (the attention output and FFN down
/// projections with the residual add in their epilogue), the output head at m = 1, and gate
/// and up fused into one GEMM with SwiGLU in its epilogue where their types and shapes match
/// (tuned beside the separate ones: the graph step chooses between them).
/// The GEMM workloads of a prefill at `ubatch` and the GEMV ones (m = 1: the last-row output
/// projection and every projection of a decode step), as `gemm_of` lists records.
fn expected_gemms(path: &Path, ubatch: u64) -> BTreeSet<(u64, u64, u64, String, bool, String)> {
    let prefill = prefill_gemms(path, ubatch);
    let mut out: BTreeSet<_> = prefill
        .iter()
        .filter(|g| g.0 > 1)
        .map(|(m, n, k, w, b, e)| (*m, *n, *k, format!("gemm {w}"), *b, e.clone()))
        .collect();
    out.extend(
        prefill
            .iter()
            .map(|(_, n, k, w, b, e)| (1, *n, *k, format!("gemv {w}"), *b, e.clone())),
    );
    out.extend(decode_norm_gemvs(path));
    out
}

/// The decode step's GEMVs with the RMSNorm folded in (ROCKY_GEMV=1 here, so the step's
/// linears are GEMVs): Q, K and V (stacked: the longest run from Q on that shares a type is one
/// GEMV over their rows, then the same for the rest; each with the RoPE and the KV write where
/// ROCKY_ROPE_IN_PROJECTION=1),
/// gate/up (fused where gate and up match) and the output head, each fed by a norm. Their
/// epilogue reads "<epilogue>+norm".
fn decode_norm_gemvs(path: &Path) -> BTreeSet<(u64, u64, u64, String, bool, String)> {
    let rope_in_projection = std::env::var("ROCKY_ROPE_IN_PROJECTION").as_deref() == Ok("1");
    let file = GgufFile::open(path).unwrap();
    let head = if file.tensor("output.weight").is_some() {
        "output"
    } else {
        "token_embd"
    };
    let mut out = BTreeSet::new();
    for t in &file.tensors {
        let Some(base) = t.name.strip_suffix(".weight") else {
            continue;
        };
        let weight = format!("gemv {}", t.ggml_type.to_string().to_lowercase());
        let bias = file.tensor(&format!("{base}.bias")).is_some();
        let epilogue = match base.split('.').collect::<Vec<_>>()[..] {
            ["blk", layer, "attn_q"] => {
                // Stacked where they share a type; with ROCKY_ROPE_IN_PROJECTION=1 each run
                // rotates and writes the cache (`Epilogue::RopeKv`): its columns are quads of
                // four rows.
                let parts: Vec<_> = ["attn_q", "attn_k", "attn_v"]
                    .iter()
                    .map(|p| file.tensor(&format!("blk.{layer}.{p}.weight")).unwrap())
                    .collect();
                let mut rest = &parts[..];
                while let Some(first) = rest.first() {
                    let len = rest
                        .iter()
                        .take_while(|t| t.ggml_type == first.ggml_type)
                        .count();
                    let rows: u64 = rest[..len].iter().map(|t| t.dims[1]).sum();
                    let weight = format!("gemv {}", first.ggml_type.to_string().to_lowercase());
                    let (n, epilogue) = if rope_in_projection {
                        (rows / 4, "rope_kv+norm")
                    } else {
                        (rows, "none+norm")
                    };
                    out.insert((1, n, first.dims[0], weight, bias, epilogue.into()));
                    rest = &rest[len..];
                }
                continue;
            }
            ["blk", _, "attn_k" | "attn_v"] => continue,
            ["blk", layer, "ffn_gate" | "ffn_up"] => {
                let gate = file
                    .tensor(&format!("blk.{layer}.ffn_gate.weight"))
                    .unwrap();
                let up = file.tensor(&format!("blk.{layer}.ffn_up.weight")).unwrap();
                if gate.ggml_type == up.ggml_type && gate.dims == up.dims {
                    if base.ends_with("ffn_up") {
                        continue;
                    }
                    "swiglu+norm"
                } else {
                    "none+norm"
                }
            }
            [name] if name == head => "none+norm",
            _ => continue,
        };
        out.insert((1, t.dims[1], t.dims[0], weight, bias, epilogue.into()));
    }
    out
}

fn prefill_gemms(path: &Path, ubatch: u64) -> BTreeSet<(u64, u64, u64, String, bool, String)> {
    let file = GgufFile::open(path).unwrap();
    let projections = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    let head = if file.tensor("output.weight").is_some() {
        "output"
    } else {
        "token_embd"
    };
    let mut out = BTreeSet::new();
    for t in &file.tensors {
        let Some(base) = t.name.strip_suffix(".weight") else {
            continue;
        };
        let (m, epilogue) = match base.split('.').collect::<Vec<_>>()[..] {
            ["blk", _, "attn_output" | "ffn_down"] => (ubatch, "residual"),
            ["blk", _, op] if projections.contains(&op) => (ubatch, "none"),
            [name] if name == head => (1, "none"),
            _ => continue,
        };
        let bias = file.tensor(&format!("{base}.bias")).is_some();
        let weight = t.ggml_type.to_string().to_lowercase();
        out.insert((
            m,
            t.dims[1],
            t.dims[0],
            weight.clone(),
            bias,
            epilogue.into(),
        ));
        if let Some(layer) = base.strip_suffix(".ffn_gate") {
            let up = file.tensor(&format!("{layer}.ffn_up.weight")).unwrap();
            if up.ggml_type == t.ggml_type && up.dims == t.dims {
                out.insert((ubatch, t.dims[1], t.dims[0], weight, false, "swiglu".into()));
            }
        }
    }
    out
}

fn gemm_of(workload: &Value) -> (u64, u64, u64, String, bool, String) {
    let kind = if workload.get("gemv").is_some() {
        "gemv"
    } else {
        "gemm"
    };
    let g = &workload[kind];
    (
        g["m"].as_u64().unwrap(),
        g["n"].as_u64().unwrap(),
        g["k"].as_u64().unwrap(),
        format!("{kind} {}", g["weight"].as_str().unwrap()),
        g["bias"].as_bool().unwrap(),
        format!(
            "{}{}",
            match &g["epilogue"] {
                Value::String(e) => e.as_str(),
                Value::Object(e) if e.contains_key("rope_kv") => "rope_kv",
                _ => "none",
            },
            if g["rms_norm_eps_bits"].is_null() {
                ""
            } else {
                "+norm"
            }
        ),
    )
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (
        a.iter().map(|&x| f64::from(x)).sum::<f64>() / n,
        b.iter().map(|&x| f64::from(x)).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    sab / (saa * sbb).sqrt()
}

/// `db list --json` as (workload, best schedule) per record, order-independent.
fn best_schedules(db: &Path) -> BTreeSet<String> {
    let v = ok_json(&rocky(&["db", "list", "--db", s(db), "--json"]));
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {} {}", r["device"], r["workload"], r["best_schedule"]))
        .collect()
}

fn tune(db: &Path) -> Output {
    rocky(&[
        "tune",
        s(&model()),
        "--ubatch",
        UBATCH,
        "--trials",
        TRIALS,
        "--runs",
        "3",
        "--seed",
        "5",
        "--graph-time",
        "5",
        // Room for every trial of every workload on a contended 2-core lavapipe (the budget
        // is shared evenly; the output projection's GEMV trials take ~1 s each there).
        "--time",
        "900",
        "--db",
        s(db),
        "--json",
    ])
}

#[test]
fn tune_resume_tuned_prefill_and_export_import() {
    let dir = temp_dir("flow");
    let db = dir.join("tuning.sled");
    let trials: usize = TRIALS.parse().unwrap();

    // 1. Tuning stores trials for every distinct GEMM of the model, and for its attention at
    // the ubatch and at the 4096 KV bucket (the default KV lengths), and for its decode step's
    // attention at 4096.
    let first = ok_json(&tune(&db));
    let gemms = expected_gemms(&model(), UBATCH.parse().unwrap());
    let listed = ok_json(&rocky(&["db", "list", "--db", s(&db), "--json"]));
    let listed = listed.as_array().unwrap();
    let tuned: BTreeSet<_> = listed
        .iter()
        .filter(|r| r["workload"].get("gemm").is_some() || r["workload"].get("gemv").is_some())
        .map(|r| gemm_of(&r["workload"]))
        .collect();
    assert_eq!(tuned, gemms);
    // (m, max_kv): the ubatch at both lengths, the decode step at the longest.
    let attention_kv: BTreeSet<(u64, u64)> = listed
        .iter()
        .filter_map(|r| r["workload"].get("attention"))
        .map(|a| (a["m"].as_u64().unwrap(), a["max_kv"].as_u64().unwrap()))
        .collect();
    let ub: u64 = UBATCH.parse().unwrap();
    assert_eq!(
        attention_kv,
        BTreeSet::from([(ub, 16), (ub, 4096), (1, 4096)]),
        "{listed:?}"
    );
    let expected_records = gemms.len() + attention_kv.len();
    assert_eq!(listed.len(), expected_records, "one record per workload");
    for r in listed {
        assert_eq!(r["trials"].as_u64().unwrap() as usize, trials, "{r}");
        assert!(r["best_schedule"].is_object(), "no successful trial: {r}");
    }
    assert_eq!(
        first["measured"].as_u64().unwrap() as usize,
        trials * expected_records
    );
    for w in first["workloads"].as_array().unwrap() {
        // The default is measured first, so the best is never slower.
        let (d, b) = (
            w["default_ms"].as_f64().unwrap(),
            w["best_ms"].as_f64().unwrap(),
        );
        assert!(b <= d, "{w}");
    }
    let stats = ok_json(&rocky(&["db", "stats", "--db", s(&db), "--json"]));
    assert_eq!(
        stats["trials"].as_u64().unwrap() as usize,
        trials * expected_records
    );

    // 2. Running it again resumes: everything is recorded, nothing is measured twice.
    let second_out = tune(&db);
    let second = ok_json(&second_out);
    assert_eq!(second["measured"], 0, "{}", text(&second_out));
    assert_eq!(
        second["skipped"].as_u64().unwrap() as usize,
        trials * expected_records
    );
    assert!(
        text(&second_out).contains("skipped"),
        "{}",
        text(&second_out)
    );
    let stats2 = ok_json(&rocky(&["db", "stats", "--db", s(&db), "--json"]));
    assert_eq!(stats2, stats);
    // The graph-level choice was made once (the first setting is always timed) and kept.
    let graph = &first["graph"];
    assert!(graph["ubatch"].as_u64().unwrap() >= 1, "{first}");
    assert_eq!(&second["graph"], graph, "{}", text(&second_out));
    // Beside the model's choice, the fastest setting at each ubatch timed (for runs at a
    // ubatch given by flag): the chosen ubatch's is the choice itself.
    let listed = text(&rocky(&["db", "list", "--db", s(&db)]));
    let chosen = graph["ubatch"].as_u64().unwrap();
    let per_ubatch: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("graph choice:") && l.contains("#ubatch="))
        .collect();
    assert!(
        per_ubatch
            .iter()
            .any(|l| l.contains(&format!("ubatch {chosen},"))
                && l.contains(&format!("#ubatch={chosen} "))),
        "{listed}"
    );

    // 3. The prefill uses the tuned schedules and still matches the CPU reference.
    let ids: Vec<String> = (100..121).map(|i| i.to_string()).collect();
    let ids = ids.join(",");
    let (gpu_logits, cpu_logits) = (dir.join("gpu.f32"), dir.join("cpu.f32"));
    let prefill = ok_json(&rocky(&[
        "prefill",
        s(&model()),
        "--token-ids",
        &ids,
        "--ubatch",
        UBATCH,
        "--db",
        s(&db),
        "--profile",
        "--json",
        "--logits-out",
        s(&gpu_logits),
    ]));
    let profile = prefill["profile"].as_array().unwrap();
    let gemm_ops = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "output",
    ];
    let gemm_rows: Vec<_> = profile
        .iter()
        .filter(|r| gemm_ops.contains(&r["op"].as_str().unwrap()))
        .collect();
    assert!(!gemm_rows.is_empty());
    for r in &gemm_rows {
        assert_eq!(r["tuned"], true, "{r}");
    }
    // Attention too: 21 tokens are KV bucket 32, served by the nearest tuned bucket (16).
    let attention: Vec<_> = profile
        .iter()
        .filter(|r| r["kernel"].as_str().unwrap().starts_with("attention_"))
        .collect();
    assert_eq!(attention.len(), 1, "{profile:?}");
    assert_eq!(attention[0]["tuned"], true, "{}", attention[0]);
    ok_json(&rocky(&[
        "prefill",
        s(&model()),
        "--token-ids",
        &ids,
        "--backend",
        "cpu",
        "--json",
        "--logits-out",
        s(&cpu_logits),
    ]));
    let (g, c) = (read_f32(&gpu_logits), read_f32(&cpu_logits));
    assert_eq!(g.len(), c.len());
    let r = correlation(&g, &c);
    assert!(
        r >= 0.999,
        "GPU logits with tuned schedules correlate {r} with the CPU reference"
    );

    // Without --ubatch the prefill takes the graph-level choice.
    let chosen = ok_json(&rocky(&[
        "prefill",
        s(&model()),
        "--token-ids",
        &ids,
        "--db",
        s(&db),
        "--json",
    ]));
    assert_eq!(chosen["ubatch_origin"], "tuned", "{chosen}");
    let expect_ub = graph["ubatch"].as_u64().unwrap().min(21);
    assert_eq!(chosen["ubatch"].as_u64().unwrap(), expect_ub, "{chosen}");

    // 4. Export, import into an empty database: the same best schedules.
    let export = dir.join("export.jsonl");
    let o = rocky(&[
        "db",
        "export",
        "-o",
        s(&export),
        "--db",
        s(&db),
        "--device",
        "llvmpipe",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let other = dir.join("imported.sled");
    let o = rocky(&["db", "import", s(&export), "--db", s(&other)]);
    assert!(o.status.success(), "{}", text(&o));
    let before = best_schedules(&db);
    assert_eq!(before.len(), expected_records);
    assert_eq!(best_schedules(&other), before);
    // ... and the prefill picks the same kernel for every op with either database.
    let kernels = |db: &Path| -> BTreeSet<String> {
        let v = ok_json(&rocky(&[
            "prefill",
            s(&model()),
            "--token-ids",
            &ids,
            "--ubatch",
            UBATCH,
            "--db",
            s(db),
            "--profile",
            "--json",
        ]));
        v["profile"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{} {} tuned={}", r["op"], r["kernel"], r["tuned"]))
            .collect()
    };
    let with_imported = kernels(&other);
    assert!(with_imported.iter().any(|k| k.ends_with("tuned=true")));
    assert_eq!(with_imported, kernels(&db));

    // 5. A malformed file is refused with its line number and changes nothing.
    let lines: Vec<String> = std::fs::read_to_string(&export)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let bad = dir.join("bad.jsonl");
    let mut damaged = lines.clone();
    damaged[1] = damaged[1].replacen("\"median_s\":", "\"median_s\":-", 1);
    std::fs::write(&bad, damaged.join("\n") + "\n").unwrap();
    let stats_other = ok_json(&rocky(&["db", "stats", "--db", s(&other), "--json"]));
    let o = rocky(&["db", "import", s(&bad), "--db", s(&other)]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("line 2"), "{}", text(&o));
    assert_eq!(
        ok_json(&rocky(&["db", "stats", "--db", s(&other), "--json"])),
        stats_other
    );
    assert_eq!(best_schedules(&other), before);

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_database_is_a_clear_error_not_a_silent_default() {
    let dir = temp_dir("baddb");
    let not_a_db = dir.join("tuning.sled");
    std::fs::write(&not_a_db, "not a database").unwrap();
    let o = rocky(&[
        "prefill",
        s(&model()),
        "--token-ids",
        "1,2,3",
        "--db",
        s(&not_a_db),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains(s(&not_a_db)), "{}", text(&o));
    let o = rocky(&["db", "list", "--db", s(&dir.join("missing.sled"))]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        !dir.join("missing.sled").exists(),
        "listing created a database"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every stored trial per workload, as `workload JSON → schedule JSONs`.
fn stored_trials(db: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    // Right after a killed run the database's lock can outlive it for a moment (a spirv-val
    // child the trial had just forked holds the lock file until it execs or exits): wait for
    // it, up to 10 s, rather than read a half-closed store.
    let mut out = rocky(&["db", "show", "--db", s(db), "--json"]);
    for _ in 0..50 {
        if out.status.success() || !text(&out).contains("in use by another process") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        out = rocky(&["db", "show", "--db", s(db), "--json"]);
    }
    let v = ok_json(&out);
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let schedules = r["trials"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["trial"]["schedule"].to_string())
                .collect();
            (r["key"]["workload"].to_string(), schedules)
        })
        .collect()
}

/// SIGKILL in the middle of `rocky tune` (after the first workload finished and the second
/// began): every trial it announced is in the database, the database opens, and a second run
/// resumes where it stopped, keeping the earlier trials and measuring none twice.
#[cfg(unix)]
#[test]
fn tune_killed_mid_run_resumes_with_every_finished_trial() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = temp_dir("kill");
    let db = dir.join("tuning.sled");
    let budget = 3;
    let model = model();
    let args = [
        "tune",
        s(&model),
        "--ubatch",
        "8",
        "--trials",
        "3",
        "--runs",
        "2",
        "--graph-time",
        "0",
        "--db",
        s(&db),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env_remove("ROCKY_DB")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut announced = 0;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Kill right after the first trial of the second workload was announced.
    while let Some(Ok(line)) = lines.next() {
        if line.contains("] trial ") {
            announced += 1;
        }
        if line.starts_with("[2/") && line.contains("] trial ") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        announced > budget,
        "the run ended before the second workload"
    );

    let before = stored_trials(&db);
    let stored: usize = before.values().map(Vec::len).sum();
    // Trials are stored before they are announced: at most one more than announced.
    assert!(
        stored >= announced && stored <= announced + 1,
        "{stored} stored, {announced} announced"
    );
    assert!(before.values().any(|t| t.len() == budget));

    let resumed = rocky(&args);
    assert!(resumed.status.success(), "{}", text(&resumed));
    let out = text(&resumed);
    assert!(out.contains("(budget reached: skipped)"), "{out}");
    assert!(out.contains("(resuming)"), "{out}");
    let after = stored_trials(&db);
    // One record per GEMM and one per attention workload: the ubatch at both default KV
    // lengths (the ubatch and 4096) and the decode step at 4096.
    assert_eq!(after.len(), expected_gemms(&model, 8).len() + 3);
    for (workload, trials) in &after {
        assert_eq!(trials.len(), budget, "{workload}: {trials:?}");
        let distinct: BTreeSet<_> = trials.iter().collect();
        assert_eq!(
            distinct.len(),
            trials.len(),
            "a schedule measured twice: {workload}"
        );
        if let Some(earlier) = before.get(workload) {
            assert!(earlier.iter().all(|t| trials.contains(t)), "{workload}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rocky db replay` on a real (partial) exhaustive run: the budget rule, one ratio per seed,
/// never better than the recorded best, and exactly the best when the whole recorded space is
/// replayed in order (closed form).
#[test]
fn replay_scores_a_search_against_an_exhaustive_run() {
    let dir = temp_dir("replay");
    let db = dir.join("tuning.sled");
    // The output projection's GEMV (one workload).
    let file = GgufFile::open(model()).unwrap();
    let head = file
        .tensor("output.weight")
        .or_else(|| file.tensor("token_embd.weight"))
        .unwrap();
    let head = format!("gemv m=1 n={} ", head.dims[1]);
    let o = rocky(&[
        "tune",
        s(&model()),
        "--ubatch",
        "8",
        "--workload",
        &head,
        "--strategy",
        "exhaustive",
        "--trials",
        "24",
        "--runs",
        "2",
        // All 24 trials must finish: no time budget on a slow or busy machine stops them.
        "--time",
        "3600",
        "--graph-time",
        "0",
        "--db",
        s(&db),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let replay = |extra: &[&str]| -> Value {
        let mut args = vec![
            "db",
            "replay",
            "--db",
            s(&db),
            "--min-trials",
            "24",
            "--json",
        ];
        args.extend_from_slice(extra);
        ok_json(&rocky(&args))
    };
    let v = replay(&["--fraction", "0.25", "--seeds", "5"]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v}");
    let r = &rows[0];
    assert_eq!(r["space"], 24);
    assert_eq!(r["budget"], 6, "ceil(0.25 × 24)");
    let ratios: Vec<f64> = r["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(ratios.len(), 5);
    assert!(ratios.iter().all(|&x| x >= 1.0), "{ratios:?}");
    // One workload has nobody to carry winners over from: the same searches, the same ratios.
    let carried = replay(&["--fraction", "0.25", "--seeds", "5", "--carry-over"]);
    assert_eq!(carried[0]["carry_over"], true);
    assert_eq!(carried[0]["ratios"], r["ratios"]);
    let all = replay(&[
        "--strategy",
        "exhaustive",
        "--fraction",
        "1",
        "--trials",
        "24",
        "--seeds",
        "2",
    ]);
    let ratios = all[0]["ratios"].as_array().unwrap();
    assert!(ratios.iter().all(|x| x.as_f64() == Some(1.0)), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}
