//! One test per bad input a user can give the `rocky` binary: each checks the exit code
//! (src/error.rs: 2 usage, 3 input, 4 device, 5 output) and that the message names the file or
//! flag at fault and what to do about it. Cases already covered by cli_basics.rs
//! (`info` on a non-GGUF file, CPU prefill of a truncated model and of an out-of-vocabulary
//! token) are not repeated here.

mod common;

use common::{shared, text};
use rocky_models::formats::GgmlType;
use rocky_models::gguf::{GgufFile, GgufWriter, MetaValue, TensorSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary directory, removed on drop.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Temp {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rocky-cli-errors-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Temp(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs rocky with `env` added, in a sandbox: its own XDG_RUNTIME_DIR, and a default tuning
/// database that does not exist (so the user's database is never read or written).
fn rocky_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let sandbox = Temp::new("run");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocky"));
    cmd.args(args)
        .env("XDG_RUNTIME_DIR", &sandbox.0)
        .env("ROCKY_DB", sandbox.join("default-db.sled"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("rocky runs")
}

fn rocky(args: &[&str]) -> Output {
    rocky_env(args, &[])
}

/// Asserts the exit code, that the error is a message rather than a panic, and that it
/// contains every one of `parts` (the thing at fault and the fix).
fn assert_error(o: &Output, code: i32, parts: &[&str]) {
    let t = text(o);
    assert_eq!(o.status.code(), Some(code), "{t}");
    assert!(!t.contains("panicked"), "a panic, not an error:\n{t}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("error: "),
        "{t}"
    );
    for part in parts {
        assert!(t.contains(part), "{part:?} missing from:\n{t}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny_model() -> PathBuf {
    shared().join("models/qwen2-tiny-q4_k_m.gguf")
}

/// `rocky tune MODEL` with the smallest useful budget into `db`.
fn tune_args<'a>(model: &'a str, db: &'a str) -> Vec<&'a str> {
    vec![
        "tune", model, "--ubatch", "8", "--trials", "1", "--runs", "1", "--db", db,
    ]
}

/// A copy of the tiny model with `patch` applied to its bytes.
fn patched_model(dir: &Temp, name: &str, patch: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    let mut bytes = std::fs::read(tiny_model()).unwrap();
    patch(&mut bytes);
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The tiny model rewritten with `tensor` as `ty` (zero data): a valid GGUF with a weight
/// format the GPU kernels do not read.
fn model_with_type(dir: &Temp, tensor: &str, ty: GgmlType) -> PathBuf {
    let file = GgufFile::open(tiny_model()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        w.set(k, v.clone());
    }
    assert!(file.tensor(tensor).is_some(), "{tensor} not in the model");
    for t in &file.tensors {
        w.add_tensor(TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ggml_type: if t.name == tensor { ty } else { t.ggml_type },
        });
    }
    let out = dir.join(&format!("{ty}.gguf"));
    w.write(&out, |i, spec| {
        let t = &file.tensors[i];
        Ok(if t.name == tensor {
            vec![0u8; spec.byte_size()? as usize]
        } else {
            file.tensor_data(t).to_vec()
        })
    })
    .unwrap();
    out
}

/// The tiny model with `general.architecture` set to `arch` (its tensors unchanged).
fn model_with_architecture(dir: &Temp, arch: &str) -> PathBuf {
    let file = GgufFile::open(tiny_model()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &file.metadata {
        let v = if k == "general.architecture" {
            MetaValue::String(arch.into())
        } else {
            v.clone()
        };
        w.set(k, v);
    }
    for t in &file.tensors {
        w.add_tensor(TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ggml_type: t.ggml_type,
        });
    }
    let out = dir.join(&format!("{arch}.gguf"));
    w.write(&out, |i, _| Ok(file.tensor_data(&file.tensors[i]).to_vec()))
        .unwrap();
    out
}

/// Byte offset of `tensor`'s type id in the header of the GGUF `bytes`: after its name
/// (u64 length + bytes), its dimension count (u32) and its dimensions (u64 each).
fn type_field_offset(bytes: &[u8], tensor: &str) -> usize {
    let mut needle = (tensor.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(tensor.as_bytes());
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{tensor} not found in the header"));
    let dims_at = at + needle.len();
    let n_dims = u32::from_le_bytes(bytes[dims_at..dims_at + 4].try_into().unwrap()) as usize;
    dims_at + 4 + 8 * n_dims
}

#[test]
fn missing_model_file_is_named_for_prefill_tune_and_info() {
    let dir = Temp::new("missing");
    let missing = dir.join("no-such-model.gguf");
    let db = dir.join("tuning.sled");
    for args in [
        vec!["prefill", s(&missing), "--token-ids", "1,2"],
        tune_args(s(&missing), s(&db)),
        vec!["info", s(&missing)],
    ] {
        let o = rocky(&args);
        assert_error(&o, 3, &[s(&missing), "does not exist", "check the path"]);
    }
    assert!(!db.exists(), "tune created a database for a missing model");
}

#[test]
fn tune_refuses_a_file_with_a_bad_magic() {
    let dir = Temp::new("magic");
    let bad = patched_model(&dir, "ggml.gguf", |b| b[..4].copy_from_slice(b"GGML"));
    let db = dir.join("tuning.sled");
    let o = rocky(&tune_args(s(&bad), s(&db)));
    assert_error(
        &o,
        3,
        &[
            s(&bad),
            "magic",
            "not a GGUF file",
            "download or convert it again",
        ],
    );
    assert!(!db.exists(), "tune created a database for a bad model");
}

#[test]
fn tune_refuses_a_truncated_tensor_data_section() {
    let dir = Temp::new("truncated");
    // The header is intact; the last tensor's data is cut short.
    let cut = patched_model(&dir, "cut.gguf", |b| b.truncate(b.len() - 4096));
    let db = dir.join("tuning.sled");
    let o = rocky(&tune_args(s(&cut), s(&db)));
    assert_error(
        &o,
        3,
        &[
            s(&cut),
            "runs past the end of the file",
            "truncated",
            "download or convert it again",
        ],
    );
}

#[test]
fn a_hostile_tensor_count_is_refused_before_allocating() {
    let dir = Temp::new("count");
    // tensor_count (u64 at byte 8) claims 2^60 tensors: reserving room for them would abort.
    let hostile = patched_model(&dir, "hostile.gguf", |b| {
        b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes())
    });
    let db = dir.join("tuning.sled");
    for args in [
        tune_args(s(&hostile), s(&db)),
        vec!["prefill", s(&hostile), "--token-ids", "1,2"],
    ] {
        let o = rocky(&args);
        assert_error(
            &o,
            3,
            &[
                s(&hostile),
                "tensor_count (byte offset 8)",
                "cannot fit",
                "download or convert it again",
            ],
        );
    }
}

#[test]
fn unsupported_architecture_is_named_for_prefill_and_tune() {
    let dir = Temp::new("arch");
    let mamba = model_with_architecture(&dir, "mamba");
    let db = dir.join("tuning.sled");
    for args in [
        vec!["prefill", s(&mamba), "--token-ids", "2,3"],
        vec![
            "prefill",
            s(&mamba),
            "--backend",
            "cpu",
            "--token-ids",
            "2,3",
        ],
        tune_args(s(&mamba), s(&db)),
    ] {
        let o = rocky(&args);
        assert_error(
            &o,
            3,
            &[
                s(&mamba),
                "architecture \"mamba\" is not supported",
                "qwen2, qwen3, llama, gemma3",
            ],
        );
    }
}

#[test]
fn a_weight_format_rocky_cannot_compute_is_named_for_prefill_and_tune() {
    let dir = Temp::new("q2k");
    let tensor = "blk.0.ffn_up.weight";
    let q2k = model_with_type(&dir, tensor, GgmlType::Q2K);
    let db = dir.join("tuning.sled");
    for args in [
        vec![
            "prefill",
            s(&q2k),
            "--token-ids",
            "1,2,3",
            "--backend",
            "gpu",
        ],
        tune_args(s(&q2k), s(&db)),
    ] {
        let o = rocky(&args);
        assert_error(
            &o,
            3,
            &[
                s(&q2k),
                tensor,
                "has type Q2_K",
                "cannot compute with yet",
                "requantize the model",
            ],
        );
    }
}

/// BF16 (the type this test used as "readable by the CPU reference, no GPU kernel" until BF16
/// got its GPU path) now prefills on the GPU; every type the CPU reference reads has a GPU
/// format, and the executor's refusal of others is checked in rocky-runtime
/// (executor::weight_format_tests).
#[test]
fn a_bf16_weight_prefills_on_the_gpu() {
    let dir = Temp::new("bf16");
    let bf16 = model_with_type(&dir, "blk.0.ffn_up.weight", GgmlType::BF16);
    let o = rocky(&[
        "prefill",
        s(&bf16),
        "--token-ids",
        "1,2,3",
        "--backend",
        "gpu",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// IQ4_NL and IQ4_XS (ggml types 20 and 23) were refused like the other i-quants until they
/// got their formats; they now prefill on the GPU, while the i-quants around them (IQ1_S 19,
/// IQ3_S 21, IQ2_S 22) are still refused by id with the tensor named.
#[test]
fn iq4_weights_prefill_and_other_i_quants_are_refused() {
    let dir = Temp::new("iq4");
    let tensor = "blk.0.ffn_up.weight";
    for ty in [GgmlType::IQ4NL, GgmlType::IQ4XS] {
        let m = model_with_type(&dir, tensor, ty);
        let o = rocky(&["prefill", s(&m), "--token-ids", "1,2,3", "--backend", "gpu"]);
        assert_eq!(o.status.code(), Some(0), "{ty}: {}", text(&o));
    }
    for id in [19u32, 21, 22] {
        let m = patched_model(&dir, &format!("type{id}.gguf"), |b| {
            let at = type_field_offset(b, tensor);
            b[at..at + 4].copy_from_slice(&id.to_le_bytes());
        });
        let o = rocky(&["prefill", s(&m), "--token-ids", "1,2,3", "--backend", "gpu"]);
        assert_error(
            &o,
            3,
            &[
                s(&m),
                tensor,
                &format!("unknown or unsupported ggml type id {id}"),
            ],
        );
    }
}

#[test]
fn a_ggml_type_rocky_does_not_know_is_named_with_its_tensor() {
    let dir = Temp::new("iq2");
    let tensor = "blk.0.ffn_up.weight";
    // IQ2_XXS (ggml type 16): an i-quant rocky cannot even size.
    let iq2 = patched_model(&dir, "iq2_xxs.gguf", |b| {
        let at = type_field_offset(b, tensor);
        b[at..at + 4].copy_from_slice(&16u32.to_le_bytes());
    });
    let db = dir.join("tuning.sled");
    for args in [
        vec![
            "prefill",
            s(&iq2),
            "--token-ids",
            "1,2,3",
            "--backend",
            "gpu",
        ],
        tune_args(s(&iq2), s(&db)),
    ] {
        let o = rocky(&args);
        assert_error(
            &o,
            3,
            &[
                s(&iq2),
                tensor,
                "unknown or unsupported ggml type id 16",
                "rocky reads",
            ],
        );
    }
}

#[test]
fn ubatch_zero_is_a_usage_error_for_prefill_and_tune() {
    let dir = Temp::new("ubatch");
    let m = tiny_model();
    let db = dir.join("tuning.sled");
    let mut tune = tune_args(s(&m), s(&db));
    tune[3] = "0";
    for args in [
        vec!["prefill", s(&m), "--token-ids", "1,2", "--ubatch", "0"],
        tune,
    ] {
        let o = rocky(&args);
        assert_error(&o, 2, &["--ubatch 0", "use 1 to 4096"]);
    }
    assert!(!db.exists(), "tune created a database for a usage error");
}

#[test]
fn no_vulkan_device_says_what_to_install() {
    let dir = Temp::new("novulkan");
    let m = tiny_model();
    let db = dir.join("tuning.sled");
    // Point the loader at a driver manifest that does not exist: it finds no device.
    let no_driver = [
        ("VK_ICD_FILENAMES", "/nonexistent.json"),
        ("VK_DRIVER_FILES", "/nonexistent.json"),
    ];
    for args in [
        vec!["devices"],
        vec!["prefill", s(&m), "--token-ids", "1,2", "--backend", "gpu"],
        tune_args(s(&m), s(&db)),
    ] {
        let o = rocky_env(&args, &no_driver);
        assert_error(
            &o,
            4,
            &[
                "no Vulkan device found",
                "install mesa-vulkan-drivers",
                "rocky doctor",
                // The override that caused it is pointed out.
                "VK_ICD_FILENAMES=/nonexistent.json",
            ],
        );
    }
    // The doctor names the failed check and the driver to install.
    let o = rocky_env(&["doctor"], &no_driver);
    assert_error(
        &o,
        4,
        &[
            "vulkan-devices",
            "no Vulkan device found",
            "install a Vulkan driver",
        ],
    );
}

#[test]
fn unwritable_database_path_is_an_output_error_naming_it() {
    let dir = Temp::new("unwritable");
    let m = tiny_model();
    // A regular file where a directory of the path should be.
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let under_file = file.join("tuning.sled");
    let export = dir.join("empty.jsonl");
    std::fs::write(&export, b"").unwrap();
    for db in [Path::new("/proc/rocky.sled"), &under_file] {
        for args in [
            tune_args(s(&m), s(db)),
            vec!["db", "import", s(&export), "--db", s(db)],
        ] {
            let o = rocky(&args);
            assert_error(
                &o,
                5,
                &[
                    &format!(
                        "cannot create or write the tuning database at {}",
                        db.display()
                    ),
                    "choose a writable location (--db PATH or ROCKY_DB)",
                ],
            );
        }
    }
    assert!(file.is_file(), "the file in the way was replaced");
}

fn stats(db: &Path) -> Value {
    let o = rocky(&["db", "stats", "--db", s(db), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn list(db: &Path) -> Value {
    let o = rocky(&["db", "list", "--db", s(db), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn malformed_import_line_is_named_and_nothing_is_imported() {
    let dir = Temp::new("import");
    // Real records to start from: a minimal tuning run, exported.
    let tuned = dir.join("tuned.sled");
    let m = tiny_model();
    let o = rocky(&tune_args(s(&m), s(&tuned)));
    assert!(o.status.success(), "{}", text(&o));
    let export = dir.join("export.jsonl");
    let o = rocky(&["db", "export", "-o", s(&export), "--db", s(&tuned)]);
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<String> = std::fs::read_to_string(&export)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert!(lines.len() >= 4, "{} records exported", lines.len());

    // A database that already holds one record.
    let db = dir.join("target.sled");
    let first = dir.join("first.jsonl");
    std::fs::write(&first, format!("{}\n", lines[0])).unwrap();
    let o = rocky(&["db", "import", s(&first), "--db", s(&db)]);
    assert!(o.status.success(), "{}", text(&o));
    let (stats_before, list_before) = (stats(&db), list(&db));
    assert_eq!(stats_before["keys"], 1, "{stats_before}");

    // Lines 1 and 2 are good records new to the database, line 3 is cut mid-object, line 4
    // repeats the record already there.
    let bad = dir.join("bad.jsonl");
    let broken = &lines[3][..lines[3].len() / 2];
    let content = [
        lines[1].as_str(),
        lines[2].as_str(),
        broken,
        lines[0].as_str(),
    ]
    .join("\n");
    std::fs::write(&bad, content + "\n").unwrap();
    let o = rocky(&["db", "import", s(&bad), "--db", s(&db)]);
    assert_error(&o, 3, &[s(&bad), "line 3", "nothing was imported"]);
    assert_eq!(
        stats(&db),
        stats_before,
        "the failed import changed the counts"
    );
    assert_eq!(
        list(&db),
        list_before,
        "the failed import changed the records"
    );
}
