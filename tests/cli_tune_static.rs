//! `rocky tune --static` end to end on lavapipe (which reports no driver statistics, so the
//! analytic IR model scores): it stores unmeasured seed rankings and nothing else; a prefill
//! afterwards runs exactly the kernels it runs with an empty database (no seed is ever a
//! winner), also with rankings edited so that their top picks are not the defaults;
//! export/import carry the rankings; and a live `rocky tune` tries the top-ranked candidate
//! right after the default. About 1 min on lavapipe.

mod common;

use common::{rocky, shared, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

const UBATCH: &str = "16";

fn model() -> PathBuf {
    shared().join("models/qwen2-tiny-q4_k_m.gguf")
}

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", text(&o));
    o
}

fn ok_json(o: Output) -> Value {
    let o = ok(o);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rocky-cli-tune-static-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// (op, kernel, tuned) of every GEMM row of a profiled prefill with database `db`, sorted
/// (the profile lists rows by time).
fn prefill_gemm_kernels(db: &Path) -> Vec<(String, String, bool)> {
    let v = ok_json(rocky(&[
        "prefill",
        s(&model()),
        "--token-ids",
        "100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117",
        "--ubatch",
        UBATCH,
        "--db",
        s(db),
        "--profile",
        "--json",
    ]));
    let rows: Vec<(String, String, bool)> = v["profile"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kernel"].as_str().unwrap().starts_with("gemm_"))
        .map(|r| {
            (
                r["op"].as_str().unwrap().to_string(),
                r["kernel"].as_str().unwrap().to_string(),
                r["tuned"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(!rows.is_empty(), "{v}");
    let mut rows = rows;
    rows.sort();
    rows
}

#[test]
fn static_ranking_stores_seeds_that_prefill_ignores_and_live_tuning_tries_first() {
    let dir = temp_dir("main");
    let db = dir.join("static.sled");
    // 1. Rank without running.
    let v = ok_json(rocky(&[
        "tune",
        s(&model()),
        "--ubatch",
        UBATCH,
        "--static",
        "--static-sample",
        "12",
        "--db",
        s(&db),
        "--json",
    ]));
    let workloads = v["workloads"].as_array().unwrap();
    assert!(workloads.len() >= 4, "{v}");
    for w in workloads {
        let source = w["source"].as_str().unwrap();
        assert!(
            source.starts_with("analytic"),
            "lavapipe has no statistics: {source}"
        );
        assert!(w["ranked"].as_u64().unwrap() >= 2, "{w}");
        assert_eq!(w["driver_compiled"], 0, "{w}");
        let scores: Vec<f64> = w["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["score"].as_f64().unwrap())
            .collect();
        assert!(scores.windows(2).all(|p| p[0] <= p[1]), "{w}");
    }
    // 2. Only seed rankings were stored: no records, no trials, no winner.
    let stats = ok_json(rocky(&["db", "stats", "--db", s(&db), "--json"]));
    assert_eq!(stats["trials"], 0, "{stats}");
    let export = dir.join("seeds.jsonl");
    ok(rocky(&["db", "export", "--db", s(&db), "-o", s(&export)]));
    let lines: Vec<Value> = std::fs::read_to_string(&export)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), workloads.len());
    assert!(lines.iter().all(|l| l["format"] == "rocky-seed-ranking"));
    let listed = text(&ok(rocky(&["db", "list", "--db", s(&db)])));
    assert!(listed.contains("seed ranking (unmeasured"), "{listed}");

    // On lavapipe the analytic model ranks the default schedule first, so a prefill that
    // wrongly took seeds as winners could not be told apart. The rankings are edited to put
    // the second candidate first (the scores stay in order, so the import accepts them):
    // every workload whose default ranked #1 now has a top pick that is not its default.
    let edited: Vec<Value> = lines
        .into_iter()
        .map(|mut l| {
            let c = l["ranking"]["candidates"].as_array_mut().unwrap();
            let first = c[0]["schedule"].clone();
            c[0]["schedule"] = c[1]["schedule"].clone();
            c[1]["schedule"] = first;
            l
        })
        .collect();
    let edited_file = dir.join("edited.jsonl");
    let body: Vec<String> = edited.iter().map(|l| l.to_string()).collect();
    std::fs::write(&edited_file, body.join("\n") + "\n").unwrap();
    let moved: Vec<usize> = workloads
        .iter()
        .enumerate()
        .filter(|(_, w)| w["default_rank"].as_u64() == Some(1))
        .map(|(i, _)| i)
        .collect();
    assert!(!moved.is_empty(), "{v}");

    // 3. Import into a fresh database carries the rankings.
    let imported = dir.join("imported.sled");
    let out = text(&ok(rocky(&[
        "db",
        "import",
        s(&edited_file),
        "--db",
        s(&imported),
    ])));
    assert!(
        out.contains(&format!(
            "seed rankings (unmeasured): {} stored",
            workloads.len()
        )),
        "{out}"
    );

    // 4. A prefill runs what it runs with an empty database (the default schedules), with the
    //    original rankings and with the edited ones whose top picks are not the defaults.
    let empty = dir.join("empty.sled");
    let defaults = prefill_gemm_kernels(&empty);
    assert!(defaults.iter().all(|(_, _, tuned)| !tuned), "{defaults:?}");
    assert_eq!(prefill_gemm_kernels(&db), defaults);
    assert_eq!(prefill_gemm_kernels(&imported), defaults);

    // 5. A live tune of a moved workload on the imported database (not the LM head: its
    //    trials are the slowest): the default first, then the ranking's top candidate.
    let pick = moved
        .iter()
        .copied()
        .find(|&i| workloads[i]["workload"]["gemm"]["m"] != 1)
        .unwrap_or(moved[0]);
    let workload = &workloads[pick]["workload"];
    let line = edited
        .iter()
        .find(|l| l["key"]["workload"] == *workload)
        .unwrap();
    let top = line["ranking"]["candidates"][0]["schedule"].clone();
    let w = &workload["gemm"];
    // (The filter may match another workload of the same shape too; it is tuned alongside.)
    let filter = format!("m={} n={} k={}", w["m"], w["n"], w["k"]);
    ok(rocky(&[
        "tune",
        s(&model()),
        "--ubatch",
        UBATCH,
        "--trials",
        "2",
        "--runs",
        "1",
        "--warmup-ms",
        "0",
        "--strategy",
        "random",
        "--graph-time",
        "0",
        "--attention-kv",
        "0",
        "--workload",
        &filter,
        "--db",
        s(&imported),
    ]));
    let shown = ok_json(rocky(&["db", "show", "--db", s(&imported), "--json"]));
    let record = shown
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"]["workload"] == *workload)
        .unwrap_or_else(|| panic!("no trials for {filter}: {shown}"));
    let trials = record["trials"].as_array().unwrap();
    assert!(trials.len() >= 2, "{record}");
    assert_eq!(trials[1]["trial"]["schedule"], top, "{record}");
    let _ = std::fs::remove_dir_all(&dir);
}
