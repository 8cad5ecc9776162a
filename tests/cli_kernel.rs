//! End-to-end tests of `rocky kernel` and `rocky bench-gemm` on the Vulkan device present
//! (lavapipe is enough; the tests fail, not skip, without one): a GEMM checked against the CPU
//! reference, refusals with their reason and exit code 2, SPIR-V dumps spirv-val accepts, the
//! search space as the compiler lists it, and the benchmark table.

use rocky_compiler::templates::gemm::GemmWorkload;
use rocky_compiler::{
    instantiate, search_space, ActType, DeviceCaps, Schedule, WeightFormat, Workload,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SPIRV_VAL: &str = "/usr/bin/spirv-val";

fn rocky(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocky"));
    cmd.args(args);
    // Mesa needs a runtime dir; give the child a private one when the environment has none.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join(format!("rocky-cli-kernel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        cmd.env("XDG_RUNTIME_DIR", dir);
    }
    cmd.output().expect("rocky runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rocky-cli-kernel-{}-{name}", std::process::id()))
}

/// spirv-val's verdict on a binary module for a Vulkan target environment.
fn spirv_val(path: &Path, target_env: &str) -> Result<(), String> {
    assert!(
        Path::new(SPIRV_VAL).exists(),
        "{SPIRV_VAL} is missing: install the `spirv-tools` package"
    );
    let o = Command::new(SPIRV_VAL)
        .args(["--target-env", target_env])
        .arg(path)
        .output()
        .expect("spirv-val runs");
    if o.status.success() {
        Ok(())
    } else {
        Err(text(&o))
    }
}

/// The Vulkan environment whose SPIR-V version the module targets.
fn vulkan_env(spirv_version: &str) -> &'static str {
    match spirv_version {
        "1.3" => "vulkan1.1",
        "1.5" => "vulkan1.2",
        "1.6" => "vulkan1.3",
        other => panic!("unexpected SPIR-V version {other}"),
    }
}

#[test]
fn q4k_gemm_runs_and_matches_the_reference() {
    let v = json(&rocky(&[
        "kernel", "--m", "7", "--n", "256", "--k", "2048", "--weight", "q4_k", "--bias", "--runs",
        "2", "--json",
    ]));
    assert_eq!(v["workload"]["gemm"]["weight"], "q4_k");
    let check = &v["run"]["check"];
    assert_eq!(check["columns_checked"], 256, "{v:#}");
    assert_eq!(check["outputs_checked"], 7 * 256);
    let ratio = check["max_error_ratio"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&ratio), "{v:#}");
    let timing = &v["run"]["timing"];
    assert_eq!(timing["runs"], 2);
    assert!(timing["median_ms"].as_f64().unwrap() > 0.0, "{v:#}");
    assert_eq!(v["run"]["slices"], 1);

    // The text form shows the same steps.
    let o = rocky(&[
        "kernel", "--m", "7", "--n", "256", "--k", "2048", "--weight", "q4_k", "--runs", "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for label in [
        "workload", "schedule", "kernel", "check", "passed", "time", "GFLOP/s",
    ] {
        assert!(out.contains(label), "no `{label}` in:\n{out}");
    }
}

/// A GEMV workload (decode rows) runs in the same harness, checked against the CPU reference
/// as its arithmetic twin: the command measures GEMV against GEMM at the same rows.
#[test]
fn gemv_runs_and_matches_the_reference() {
    let workload = r#"{"gemv":{"m":3,"n":256,"k":512,"act":"f32","weight":"q6_k","bias":true}}"#;
    let v = json(&rocky(&[
        "kernel",
        "--workload",
        workload,
        "--runs",
        "1",
        "--json",
    ]));
    assert!(v["schedule"]["gemv"].is_object(), "{v:#}");
    let check = &v["run"]["check"];
    assert_eq!(check["outputs_checked"], 3 * 256, "{v:#}");
    let ratio = check["max_error_ratio"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&ratio), "{v:#}");
    assert!(
        v["run"]["timing"]["median_ms"].as_f64().unwrap() > 0.0,
        "{v:#}"
    );
}

#[test]
fn an_explicit_schedule_is_used_and_a_sample_of_columns_is_checked() {
    let schedule = r#"{"gemm":{"bm":8,"bn":32,"bk":64,"tm":2,"tn":2,"split_k":1,"vector_width":1,"stage_a":true,"stage_b":false,"accumulate":"f32","math":"fma_f32"}}"#;
    let workload = r#"{"gemm":{"m":7,"n":896,"k":896,"act":"f32","weight":"q8_0","bias":true}}"#;
    let v = json(&rocky(&[
        "kernel",
        "--workload",
        workload,
        "--schedule",
        schedule,
        "--check",
        "sample",
        "--check-columns",
        "20",
        "--runs",
        "0",
        "--json",
    ]));
    assert_eq!(v["schedule"]["gemm"]["bm"], 8);
    assert_eq!(v["kernel"]["workgroup_size"], serde_json::json!([1, 16, 4]));
    let cols = v["run"]["check"]["columns_checked"].as_u64().unwrap();
    // 20 seeded columns (some may coincide) plus the first and last.
    assert!((3..=22).contains(&cols), "{v:#}");
    assert!(v["run"].get("timing").is_none());
}

#[test]
fn weights_beyond_the_binding_limit_run_in_n_slices() {
    // Qwen2.5-3B's 151936×2048 Q6_K output matrix: 255 MiB, over lavapipe's 128 MiB limit.
    let devices = json(&rocky(&["devices", "--json"]));
    let v = json(&rocky(&[
        "kernel",
        "--m",
        "1",
        "--n",
        "151936",
        "--k",
        "2048",
        "--weight",
        "q6_k",
        "--check",
        "sample",
        "--check-columns",
        "64",
        "--runs",
        "1",
        "--json",
    ]));
    let limit = devices
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            v["device"]
                .as_str()
                .unwrap()
                .starts_with(d["name"].as_str().unwrap())
        })
        .expect("the device is listed")["limits"]["max_storage_buffer_range"]
        .as_u64()
        .unwrap();
    let bytes: u64 = 151936 * 2048 / 256 * 210;
    let slices = v["run"]["slices"].as_u64().unwrap();
    assert!(
        slices >= bytes.div_ceil(limit),
        "{slices} slices for {bytes} bytes, limit {limit}"
    );
    assert!(
        slices <= bytes.div_ceil(limit) + 1,
        "{slices} slices for {bytes} bytes, limit {limit}"
    );
    // The sample includes both sides of every slice boundary.
    assert!(
        v["run"]["check"]["columns_checked"].as_u64().unwrap() >= 2 * slices,
        "{v:#}"
    );
    assert!(
        v["run"]["check"]["max_error_ratio"].as_f64().unwrap() < 1.0,
        "{v:#}"
    );
}

#[test]
fn refusals_give_the_reason_and_exit_code_2() {
    // bm is not a multiple of tm.
    let bad = r#"{"gemm":{"bm":6,"bn":32,"bk":64,"tm":4,"tn":2,"split_k":1,"vector_width":1,"stage_a":false,"stage_b":false,"accumulate":"f32","math":"fma_f32"}}"#;
    let o = rocky(&[
        "kernel",
        "--m",
        "64",
        "--n",
        "256",
        "--k",
        "2048",
        "--schedule",
        bad,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused"), "{err}");
    assert!(err.contains("not a multiple of the micro-tile"), "{err}");

    // A device preset without f16 refuses packed-f16 math, naming the feature.
    let f16 = bad
        .replace("\"bm\":6", "\"bm\":8")
        .replace("\"vector_width\":1", "\"vector_width\":2")
        .replace("fma_f32", "fma_f16_packed");
    let o = rocky(&[
        "kernel",
        "--caps",
        "baseline",
        "--m",
        "64",
        "--n",
        "256",
        "--k",
        "2048",
        "--schedule",
        &f16,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("shaderFloat16"), "{}", text(&o));

    // K not a multiple of the Q4_K block.
    let o = rocky(&[
        "kernel", "--m", "1", "--n", "896", "--k", "896", "--weight", "q4_k",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not a multiple of 256"), "{}", text(&o));

    // Malformed input is a usage error too, with an example of the right form.
    let o = rocky(&["kernel", "--workload", "{\"gemm\":{\"m\":1}}"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("a GEMM looks like"), "{}", text(&o));
    let o = rocky(&[
        "kernel", "--m", "1", "--n", "64", "--k", "256", "--weight", "q3_k",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("q6_k"), "{}", text(&o));
}

#[test]
fn dumped_spirv_passes_spirv_val() {
    // For the device present, in the SPIR-V version the device takes.
    let path = temp_file("device.spv");
    let v = json(&rocky(&[
        "kernel",
        "--m",
        "64",
        "--n",
        "2048",
        "--k",
        "2048",
        "--weight",
        "q6_k",
        "--act",
        "f16",
        "--dump-spirv",
        path.to_str().unwrap(),
        "--json",
    ]));
    // An inspection flag alone does not run the kernel.
    assert!(v["run"].is_null(), "{v:#}");
    let version = v["kernel"]["spirv_version"].as_str().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(
        bytes.len(),
        4 * v["kernel"]["spirv_words"].as_u64().unwrap() as usize
    );
    assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes(), "SPIR-V magic");
    spirv_val(&path, vulkan_env(version)).unwrap();

    // For a preset, without a device: Mali's prefill default where the device has integer
    // dot products (the preset does, as Mesa 26.1 does): int8 math on both operands staged in
    // workgroup memory, in half units (docs/measurements/2026-12-06d-mali-gemm.md).
    let path = temp_file("mali.spv");
    let v = json(&rocky(&[
        "kernel",
        "--caps",
        "mali-g610",
        "--m",
        "512",
        "--n",
        "11008",
        "--k",
        "2048",
        "--weight",
        "q4_k",
        "--dump-spirv",
        path.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["schedule"]["gemm"]["math"], "int8_dot");
    assert_eq!(v["schedule"]["gemm"]["half_units"], true);
    assert_eq!(v["schedule"]["gemm"]["stage_a"], true);
    assert_eq!(v["schedule"]["gemm"]["stage_b"], true);
    spirv_val(
        &path,
        vulkan_env(v["kernel"]["spirv_version"].as_str().unwrap()),
    )
    .unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_listed_space_is_the_compilers() {
    let w = GemmWorkload {
        m: 7,
        n: 896,
        k: 896,
        act: ActType::F16,
        weight: WeightFormat::Q5_0,
        layout: rocky_compiler::WeightLayout::Gguf,
        bias: true,
        epilogue: Default::default(),
        rms_norm_eps_bits: None,
    };
    let v = json(&rocky(&[
        "kernel",
        "--caps",
        "mali-g610",
        "--m",
        "7",
        "--n",
        "896",
        "--k",
        "896",
        "--weight",
        "q5_0",
        "--act",
        "f16",
        "--bias",
        "--list-space",
        "--verbose",
        "--json",
    ]));
    let caps = DeviceCaps::mali_g610();
    let workload = Workload::Gemm(w);
    let expected = search_space(&workload, &caps);
    assert_eq!(v["space"]["count"], expected.len());
    let listed: Vec<Schedule> = serde_json::from_value(v["space"]["schedules"].clone()).unwrap();
    assert_eq!(listed, expected);
    // Every listed schedule instantiates (the space's promise, seen through the CLI).
    assert!(listed
        .iter()
        .all(|s| instantiate(&workload, s, &caps).is_ok()));
    let by_math = v["space"]["by_math"].as_object().unwrap();
    let total: u64 = by_math.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, expected.len() as u64);
    assert!(by_math.contains_key("int8_dot"), "{by_math:?}");
}

/// `--math F` shows the schedule a forced family takes, as `prefill --math` picks it: the
/// compiler's `family_schedule` for the preset, of the family, valid there (the register
/// estimate within the budget); int8 on float weights keeps the default and says so.
#[test]
fn a_forced_math_family_shows_the_schedule_built_for_it() {
    use rocky_compiler::templates::gemm::{default_schedule, family_schedule, Arithmetic};
    use rocky_compiler::{Math, Precision};
    let families = [
        ("f32", Math::FmaF32, 1),
        ("f16", Math::FmaF16Packed, 2),
        ("int8", Math::Int8Dot, 4),
    ];
    for (preset, caps) in [
        ("desktop", DeviceCaps::desktop_all_features()),
        ("mali-g610", DeviceCaps::mali_g610()),
    ] {
        for (name, math, vector_width) in families {
            let v = json(&rocky(&[
                "kernel", "--caps", preset, "--m", "512", "--n", "11008", "--k", "2048",
                "--weight", "q4_k", "--math", name, "--json",
            ]));
            let w: Workload = serde_json::from_value(v["workload"].clone()).unwrap();
            let Workload::Gemm(g) = w else {
                panic!("{w:?}")
            };
            let family = Arithmetic {
                math,
                accumulate: Precision::F32,
                vector_width,
            };
            let expected = family_schedule(&g, &caps, family).unwrap();
            let got: Schedule = serde_json::from_value(v["schedule"].clone()).unwrap();
            assert_eq!(got, Schedule::Gemm(expected), "{preset} {name}");
            assert!(family.holds(&expected), "{preset} {name}: {expected:?}");
            assert!(expected.register_estimate() <= caps.register_budget);
            assert!(expected.validate(&g, &caps).is_ok(), "{preset} {name}");
        }
        let f32_weights = json(&rocky(&[
            "kernel", "--caps", preset, "--m", "512", "--n", "2048", "--k", "2048", "--weight",
            "f32", "--math", "int8", "--json",
        ]));
        let w: Workload = serde_json::from_value(f32_weights["workload"].clone()).unwrap();
        let Workload::Gemm(g) = w else {
            panic!("{w:?}")
        };
        let got: Schedule = serde_json::from_value(f32_weights["schedule"].clone()).unwrap();
        assert_eq!(got, Schedule::Gemm(default_schedule(&g, &caps)));
        assert!(
            f32_weights["notes"]
                .to_string()
                .contains("--math int8 does not run this workload"),
            "{f32_weights}"
        );
    }
}

#[test]
fn bench_gemm_quick_prints_the_table() {
    let o = rocky(&["bench-gemm", "--quick", "--m", "4"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for column in [
        "M×N×K",
        "weight",
        "variant",
        "schedule",
        "median ms",
        "GFLOP/s",
        "% peak",
        "err/tol",
    ] {
        assert!(out.contains(column), "no column `{column}` in:\n{out}");
    }
    assert!(out.contains("FMA ceiling (peak kernel): f32 "), "{out}");
    // Four shapes for each of Q4_K and Q6_K (one or two schedule variants each).
    for shape in ["4×2048×2048", "4×256×2048", "4×11008×2048", "4×2048×11008"] {
        let rows = out.lines().filter(|l| l.starts_with(shape)).count();
        assert!((2..=4).contains(&rows), "{rows} rows of {shape} in:\n{out}");
    }
    assert!(out.contains("Q4_K") && out.contains("Q6_K"), "{out}");

    // A tuning database that is not there is a usage error naming the path, not a silent
    // table without tuned rows.
    let missing = temp_file("no-such-db.sled");
    let o = rocky(&[
        "bench-gemm",
        "--quick",
        "--m",
        "2",
        "--db",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such-db.sled"), "{}", text(&o));

    // JSON: every row checked within tolerance.
    let v = json(&rocky(&["bench-gemm", "--quick", "--m", "2", "--json"]));
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() >= 8, "{v:#}");
    for r in rows {
        let ratio = r["max_error_ratio"].as_f64().unwrap();
        assert!((0.0..1.0).contains(&ratio), "{r:#}");
    }
}

#[test]
fn bench_gemv_quick_checks_every_gemv_and_reports_against_the_copy() {
    let v = json(&rocky(&[
        "bench-gemv",
        "--quick",
        "--runs",
        "1",
        "--flush-mib",
        "8",
        "--int8",
        "--norm",
        "--json",
    ]));
    let copy = v["copy_gbps"].as_f64().unwrap();
    assert!(copy > 0.0 && copy.is_finite(), "{v:#}");
    assert_eq!(v["flush_bytes"].as_u64(), Some(8 << 20), "{v:#}");
    let rows = v["rows"].as_array().unwrap();
    // --quick: the 0.5B's five GEMVs; K = 896 takes Q8_0 and Q5_0, the down projection's
    // K = 4864 the K-quants too (K-quants need a multiple of 256).
    let defaults: Vec<_> = rows.iter().filter(|r| r["variant"] == "default").collect();
    assert_eq!(defaults.len(), 4 * 2 + 4, "{v:#}");
    // --norm: q, k/v and gate/up (the projections a norm feeds) with the norm folded in, at
    // K = 896's Q8_0 and Q5_0; each checked against the normalize-then-project reference below.
    let normed: Vec<_> = rows.iter().filter(|r| r["variant"] == "norm*").collect();
    assert_eq!(normed.len(), 3 * 2, "{v:#}");
    assert!(normed
        .iter()
        .all(|r| r["role"] != "o" && r["role"] != "down"));
    for r in rows {
        assert_eq!(r["model"], "0.5B", "{r:#}");
        let ratio = r["max_error_ratio"].as_f64().unwrap();
        assert!((0.0..1.0).contains(&ratio), "{r:#}");
        // The weight bytes are the tensor's (a closed form per format), and the throughput
        // and its share of the copy follow from them and the cold median.
        let (n, k) = (r["n"].as_u64().unwrap(), r["k"].as_u64().unwrap());
        let rows_of = if r["role"] == "gate/up" { 2 * n } else { n };
        let block = match r["weight"].as_str().unwrap() {
            "Q8_0" => (32, 34),
            "Q5_0" => (32, 22),
            "Q4_K" => (256, 144),
            "Q6_K" => (256, 210),
            other => panic!("unexpected format {other}"),
        };
        if r["layout"] == "gguf" {
            assert_eq!(
                r["weight_bytes"].as_u64(),
                Some(rows_of * k / block.0 * block.1),
                "{r:#}"
            );
        }
        let cold_s = r["cold"]["median_ms"].as_f64().unwrap() * 1e-3;
        let gbps = r["cold_gbps"].as_f64().unwrap();
        let want = r["weight_bytes"].as_f64().unwrap() / cold_s / 1e9;
        assert!((gbps - want).abs() <= 1e-6 * want, "{r:#}");
        let share = r["percent_of_copy"].as_f64().unwrap();
        assert!(
            (share - 100.0 * gbps / copy).abs() <= 1e-6 * share.max(1.0),
            "{r:#}"
        );
    }
    // Bad input is a usage error naming the flag.
    for (args, flag) in [
        (vec!["bench-gemv", "--runs", "0"], "--runs"),
        (vec!["bench-gemv", "--flush-mib", "0"], "--flush-mib"),
        (
            vec!["bench-gemv", "--schedule", "{\"gemm\":{}}"],
            "--schedule",
        ),
    ] {
        let o = rocky(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(flag), "{args:?}: {}", text(&o));
    }
}
