//! `rocky doctor` on fixture trees built at run time (sysfs symlinks are made here rather than
//! stored in git): a good RK3588 board on panthor, the vendor kernel, missing firmware, another
//! board, and a missing XDG_RUNTIME_DIR. The Vulkan checks see the real loader (lavapipe here).
//! The tuning lines read databases made here by `rocky tune` and `rocky db import`, checked
//! against `rocky db list`.
#![cfg(unix)]

mod common;

use serde_json::Value;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const FIRMWARE: &str = "lib/firmware/arm/mali/arch10.10/mali_csffw.bin";
const GPU: &str = "sys/bus/platform/devices/fb000000.gpu";

/// A temporary directory standing for `/`, removed on drop.
struct Root(PathBuf);

impl Root {
    fn empty() -> Root {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rocky-doctor-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Root(dir)
    }

    /// An RK3588 board as Debian on a mainline kernel sets it up, with the GPU bound to `driver`.
    fn rk3588(driver: &str) -> Root {
        let root = Root::empty();
        root.file(
            "proc/device-tree/compatible",
            b"radxa,rock-5-itx\0rockchip,rk3588\0",
        );
        root.file("proc/sys/kernel/osrelease", b"6.12.0-test\n");
        root.bind_gpu(driver);
        root.file(FIRMWARE, &[0x7f; 64]);
        root.file(
            "usr/share/vulkan/icd.d/panfrost_icd.aarch64.json",
            br#"{"file_format_version":"1.0.1","ICD":{"library_path":"/usr/lib/aarch64-linux-gnu/libvulkan_panfrost.so","api_version":"1.4.318"}}"#,
        );
        root.file(
            "usr/share/vulkan/icd.d/lvp_icd.aarch64.json",
            br#"{"ICD":{"library_path":"libvulkan_lvp.so"}}"#,
        );
        root
    }

    fn file(&self, relative: &str, bytes: &[u8]) {
        let p = self.0.join(relative);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    }

    /// `driver` is a relative symlink as in sysfs (dangling in the fixture, as only its name
    /// counts); an empty name leaves the device unbound.
    fn bind_gpu(&self, driver: &str) {
        let dev = self.0.join(GPU);
        fs::create_dir_all(&dev).unwrap();
        let link = dev.join("driver");
        let _ = fs::remove_file(&link);
        if !driver.is_empty() {
            symlink(format!("../../../bus/platform/drivers/{driver}"), link).unwrap();
        }
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs `rocky doctor --root ROOT [extra]`; `xdg` is the XDG_RUNTIME_DIR to give (None: unset).
/// The default tuning database is a path that does not exist (the user's is never read).
fn doctor(root: &Root, xdg: Option<&Path>, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocky"));
    cmd.arg("doctor").arg("--root").arg(root.path()).args(extra);
    cmd.env("ROCKY_DB", root.path().join("no-tuning.sled"));
    match xdg {
        Some(dir) => cmd.env("XDG_RUNTIME_DIR", dir),
        None => cmd.env_remove("XDG_RUNTIME_DIR"),
    };
    cmd.output().expect("rocky runs")
}

/// A writable XDG_RUNTIME_DIR for the runs that should not fail on it.
fn xdg() -> Root {
    Root::empty()
}

struct Report {
    checks: Vec<Value>,
    code: Option<i32>,
    text: String,
}

impl Report {
    fn check(&self, id: &str) -> &Value {
        self.checks
            .iter()
            .find(|c| c["check"] == id)
            .unwrap_or_else(|| panic!("no check `{id}` in:\n{}", self.text))
    }

    fn status(&self, id: &str) -> &str {
        self.check(id)["status"].as_str().unwrap()
    }

    fn fix(&self, id: &str) -> &str {
        self.check(id)["fix"].as_str().unwrap_or("")
    }

    fn any_fail(&self) -> bool {
        self.checks.iter().any(|c| c["status"] == "fail")
    }
}

fn json_report(root: &Root, xdg: Option<&Path>) -> Report {
    json_report_with(root, xdg, &[])
}

/// `rocky doctor --json [extra]`, checked for shape and for an exit code that follows the checks.
fn json_report_with(root: &Root, xdg: Option<&Path>, extra: &[&str]) -> Report {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let o = doctor(root, xdg, &args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let checks: Vec<Value> = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not a JSON array ({e}):\n{text}"));
    for c in &checks {
        assert!(c["check"].is_string() && c["detail"].is_string(), "{c}");
        assert!(c["fix"].is_string() || c["fix"].is_null(), "{c}");
        let s = c["status"].as_str().unwrap();
        assert!(["pass", "warn", "fail", "skip", "info"].contains(&s), "{c}");
    }
    let report = Report {
        checks,
        code: o.status.code(),
        text,
    };
    // The exit code follows the checks: 4 (device error) exactly when one fails.
    let expected = if report.any_fail() { 4 } else { 0 };
    assert_eq!(report.code, Some(expected), "{}", report.text);
    report
}

/// Whether the loader shows an integrated GPU, asked independently through `rocky devices`.
fn real_integrated_gpu() -> bool {
    let o = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(["devices", "--json"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    let devices: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
    devices.iter().any(|d| d["device_type"] == "integrated")
}

#[test]
fn good_rk3588_board_passes_the_board_checks() {
    let root = Root::rk3588("panthor");
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    for id in ["gpu-driver", "csf-firmware", "panvk-icd", "xdg-runtime-dir"] {
        assert_eq!(r.status(id), "pass", "{id}:\n{}", r.text);
    }
    assert!(r.check("gpu-driver")["detail"]
        .as_str()
        .unwrap()
        .contains("fb000000.gpu is bound to panthor"));
    let icd = r.check("panvk-icd")["detail"].as_str().unwrap();
    assert!(
        icd.contains("panfrost_icd.aarch64.json") && !icd.contains("lvp_icd"),
        "{icd}"
    );
    assert!(r.check("board")["detail"]
        .as_str()
        .unwrap()
        .contains("RK3588"));

    // Vulkan sees the real machine: the Mali check passes only if an integrated GPU exists.
    if r.status("vulkan-loader") == "pass" {
        let expected = if real_integrated_gpu() {
            "pass"
        } else {
            "warn"
        };
        assert_eq!(r.status("mali-device"), expected, "{}", r.text);
        // One device check and one tuning line per device.
        let n = |prefix: &str| {
            r.checks
                .iter()
                .filter(|c| c["check"].as_str().unwrap().starts_with(prefix))
                .count()
        };
        assert!(n("device-") >= 1);
        assert_eq!(n("device-"), n("tuning-"));
        // No database at the default location: not tuned, and the doctor made none.
        assert_eq!(r.status("tuning-0"), "info");
        assert!(r.check("tuning-0")["detail"]
            .as_str()
            .unwrap()
            .contains("not tuned"));
        assert!(!root.path().join("no-tuning.sled").exists());
    }
}

#[test]
fn vendor_kernel_mali_driver_fails_with_the_panthor_advice() {
    let root = Root::rk3588("mali");
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    assert_eq!(r.status("gpu-driver"), "fail", "{}", r.text);
    assert_eq!(r.code, Some(4));
    let detail = r.check("gpu-driver")["detail"].as_str().unwrap();
    assert!(
        detail.contains("`mali`") && detail.contains("6.12.0-test"),
        "{detail}"
    );
    let fix = r.fix("gpu-driver");
    assert!(fix.contains("panthor") && fix.contains("6.10"), "{fix}");
    // The rest of a good board still passes.
    assert_eq!(r.status("csf-firmware"), "pass");
}

#[test]
fn unbound_gpu_fails_and_says_how_to_load_panthor() {
    let root = Root::rk3588("");
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    assert_eq!(r.status("gpu-driver"), "fail", "{}", r.text);
    assert!(r.fix("gpu-driver").contains("modprobe panthor"));
}

#[test]
fn missing_firmware_fails_naming_the_path() {
    let root = Root::rk3588("panthor");
    fs::remove_file(root.path().join(FIRMWARE)).unwrap();
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    assert_eq!(r.status("csf-firmware"), "fail", "{}", r.text);
    assert_eq!(r.code, Some(4));
    assert!(r.check("csf-firmware")["detail"]
        .as_str()
        .unwrap()
        .contains("/lib/firmware/arm/mali/arch10.10/mali_csffw.bin"));
    assert!(r.fix("csf-firmware").contains("linux-firmware"));
}

#[test]
fn missing_panvk_icd_is_a_warning_not_a_failure() {
    let root = Root::rk3588("panthor");
    fs::remove_file(
        root.path()
            .join("usr/share/vulkan/icd.d/panfrost_icd.aarch64.json"),
    )
    .unwrap();
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    assert_eq!(r.status("panvk-icd"), "warn", "{}", r.text);
    assert!(r.fix("panvk-icd").contains("Mesa"));
}

#[test]
fn other_boards_skip_the_rk3588_checks() {
    // An RK3399 with a GPU bound to mali and no firmware: none of it applies.
    let root = Root::empty();
    root.file(
        "proc/device-tree/compatible",
        b"pine64,rockpro64\0rockchip,rk3399\0",
    );
    root.bind_gpu("mali");
    let x = xdg();
    let r = json_report(&root, Some(x.path()));
    for id in ["gpu-driver", "csf-firmware", "panvk-icd", "mali-device"] {
        assert_eq!(r.status(id), "skip", "{id}:\n{}", r.text);
        assert!(r.check(id)["detail"]
            .as_str()
            .unwrap()
            .contains("not an RK3588 board"));
    }
    // A machine without a device tree (a PC) is not an RK3588 either.
    let pc = Root::empty();
    let r = json_report(&pc, Some(x.path()));
    assert_eq!(r.status("gpu-driver"), "skip", "{}", r.text);
}

#[test]
fn unset_xdg_runtime_dir_fails_with_the_export_advice() {
    let root = Root::rk3588("panthor");
    let r = json_report(&root, None);
    assert_eq!(r.status("xdg-runtime-dir"), "fail", "{}", r.text);
    assert_eq!(r.code, Some(4));
    assert_eq!(
        r.fix("xdg-runtime-dir"),
        "export XDG_RUNTIME_DIR=$(mktemp -d)"
    );
}

#[test]
fn xdg_runtime_dir_that_is_not_a_directory_fails() {
    let root = Root::empty();
    let x = xdg();
    let not_a_dir = x.path().join("file");
    fs::write(&not_a_dir, b"").unwrap();
    let r = json_report(&root, Some(&not_a_dir));
    assert_eq!(r.status("xdg-runtime-dir"), "fail", "{}", r.text);
    assert!(r.fix("xdg-runtime-dir").contains("mktemp"));
}

#[test]
fn text_report_marks_failures_and_prints_their_fix() {
    let root = Root::rk3588("mali");
    let x = xdg();
    let o = doctor(&root, Some(x.path()), &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{out}{err}");
    let line = out
        .lines()
        .position(|l| l.contains("gpu-driver"))
        .unwrap_or_else(|| panic!("{out}"));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[line].starts_with("✗ FAIL"), "{out}");
    assert!(
        lines[line + 1]
            .trim_start()
            .starts_with("fix: boot a mainline kernel"),
        "{out}"
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("✓ PASS") && l.contains("csf-firmware")));
    assert!(err.contains("gpu-driver"), "{err}");
}

#[test]
fn root_that_is_not_a_directory_is_a_usage_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(["doctor", "--root", "/nonexistent/rocky-doctor-root"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--root"));
}

/// Runs another rocky command with its own XDG_RUNTIME_DIR and no default database.
fn rocky(args: &[&str], xdg: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rocky"))
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg)
        .env_remove("ROCKY_DB")
        .output()
        .expect("rocky runs")
}

fn rocky_json(args: &[&str], xdg: &Path) -> Value {
    let o = rocky(args, xdg);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "rocky {args:?}:\n{text}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}:\n{text}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The index of the first Vulkan device, as `rocky devices` numbers them.
fn first_device_index(xdg: &Path) -> u64 {
    let devices = rocky_json(&["devices", "--json"], xdg);
    devices[0]["index"]
        .as_u64()
        .unwrap_or_else(|| panic!("no Vulkan device (lavapipe is needed): {devices}"))
}

/// Tunes the tiny model's GEMMs (2 trials each) on device `index` into `db`; the tune summary.
fn tune_tiny(db: &Path, index: u64, xdg: &Path) -> Value {
    let model = common::shared().join("models/qwen2-tiny-q4_k_m.gguf");
    let device = index.to_string();
    rocky_json(
        &[
            "tune",
            s(&model),
            "--ubatch",
            "8",
            "--trials",
            "2",
            "--runs",
            "1",
            "--device",
            &device,
            "--db",
            s(db),
            "--json",
        ],
        xdg,
    )
}

/// What the doctor should count for `device` (a fingerprint as the database stores it) under
/// compiler `version`, worked out from `rocky db list`.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    tuned: u64,
    failed: u64,
    trials: u64,
    other_driver: u64,
    stale: u64,
    other_devices: u64,
}

fn expected_counts(db: &Path, device: &Value, version: &str, xdg: &Path) -> Expected {
    // The GPU without its driver version: records under another driver are seeds only.
    let same_gpu = |d: &Value| {
        [
            "vendor_id",
            "device_id",
            "driver_id",
            "driver_name",
            "device_name",
        ]
        .iter()
        .all(|k| d[k] == device[k])
    };
    let mut e = Expected::default();
    for r in rocky_json(&["db", "list", "--db", s(db), "--json"], xdg)
        .as_array()
        .unwrap()
    {
        let has_best = r["best_schedule"].is_object();
        if !same_gpu(&r["device"]) {
            e.other_devices += 1;
        } else if r["compiler_version"] != version {
            e.stale += 1;
        } else if r["device"] != *device {
            e.other_driver += u64::from(has_best);
        } else {
            e.trials += r["trials"].as_u64().unwrap();
            if has_best {
                e.tuned += 1;
            } else {
                e.failed += 1;
            }
        }
    }
    e
}

fn counts_of(check: &Value) -> Expected {
    let t = &check["tuning"];
    let n = |k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("no tuning.{k} in {check}"))
    };
    Expected {
        tuned: n("tuned_workloads"),
        failed: n("failed_workloads"),
        trials: n("trials"),
        other_driver: n("other_driver_records"),
        stale: n("stale_records"),
        other_devices: n("other_device_records"),
    }
}

/// Rewrites exported lines: `(driver_version, compiler_version, device_name)` replacements per
/// line, `None` keeping the value.
type Edit<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>);

fn edited(lines: &[&str], edits: &[Edit]) -> String {
    let mut out = String::new();
    for (line, (driver, compiler, name)) in lines.iter().zip(edits) {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let key = &mut v["key"];
        if let Some(d) = driver {
            key["device"]["driver_version"] = Value::from(*d);
        }
        if let Some(c) = compiler {
            key["compiler_version"] = Value::from(*c);
        }
        if let Some(n) = name {
            key["device"]["device_name"] = Value::from(*n);
        }
        out += &serde_json::to_string(&v).unwrap();
        out.push('\n');
    }
    out
}

const OLD_DRIVER: &str = "0.0.0-older-driver";
const OLD_COMPILER: &str = "0.0.0+gemm0+glue0+attn0";

#[test]
fn tuning_line_counts_the_records_of_the_device() {
    let dir = Root::empty();
    let x = xdg();
    let index = first_device_index(x.path());
    let db = dir.path().join("tuning.sled");
    let summary = tune_tiny(&db, index, x.path());
    let device = &summary["device"];

    // Records that do not apply any more, made from real ones: 3 from an older driver, 3 from
    // an older compiler (one of them also an older driver), 1 of another GPU.
    let export = dir.path().join("export.jsonl");
    let o = rocky(
        &["db", "export", "-o", s(&export), "--db", s(&db)],
        x.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 7, "{} records exported", lines.len());
    let edits: [Edit; 7] = [
        (Some(OLD_DRIVER), None, None),
        (Some(OLD_DRIVER), None, None),
        (Some(OLD_DRIVER), None, None),
        (None, Some(OLD_COMPILER), None),
        (None, Some(OLD_COMPILER), None),
        (Some(OLD_DRIVER), Some(OLD_COMPILER), None),
        (None, None, Some("Some Other GPU")),
    ];
    let unused = dir.path().join("unused.jsonl");
    fs::write(&unused, edited(&lines, &edits)).unwrap();
    let o = rocky(&["db", "import", s(&unused), "--db", s(&db)], x.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stats = rocky_json(&["db", "stats", "--db", s(&db), "--json"], x.path());

    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&db)]);
    let id = format!("tuning-{index}");
    let check = r.check(&id);
    let version = check["tuning"]["compiler_version"].as_str().unwrap();
    assert_eq!(version, rocky_compiler::compiler_version());
    let expected = expected_counts(&db, device, version, x.path());
    assert_eq!(counts_of(check), expected, "{check}");
    // The same numbers from the tuning run itself, and from how the records were made.
    let workloads = summary["workloads"].as_array().unwrap().len() as u64;
    assert_eq!(expected.tuned + expected.failed, workloads);
    assert_eq!(expected.trials, summary["measured"].as_u64().unwrap());
    assert_eq!(
        (
            expected.other_driver,
            expected.stale,
            expected.other_devices
        ),
        (3, 3, 1)
    );

    assert_eq!(r.status(&id), "pass", "{}", r.text);
    let detail = check["detail"].as_str().unwrap();
    for part in [
        format!(
            "{} workload(s) tuned ({} trials)",
            expected.tuned, expected.trials
        ),
        format!("in {}", db.display()),
        format!("3 record(s) from driver version {OLD_DRIVER}"),
        format!("3 stale record(s) from compiler version {OLD_COMPILER}"),
    ] {
        assert!(detail.contains(&part), "{part:?} missing: {detail}");
    }
    assert!(r.fix(&id).contains("rocky tune"), "{}", r.text);
    // The doctor only reads.
    assert_eq!(
        rocky_json(&["db", "stats", "--db", s(&db), "--json"], x.path()),
        stats
    );

    // A database holding only records that no longer apply: warn, and say to re-tune.
    let stale_db = dir.path().join("stale.sled");
    let o = rocky(
        &["db", "import", s(&unused), "--db", s(&stale_db)],
        x.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&stale_db)]);
    assert_eq!(r.status(&id), "warn", "{}", r.text);
    let check = r.check(&id);
    assert_eq!(
        counts_of(check),
        expected_counts(&stale_db, device, version, x.path())
    );
    assert_eq!(check["tuning"]["tuned_workloads"], 0);
    assert!(
        check["detail"].as_str().unwrap().contains("not tuned"),
        "{check}"
    );
    let fix = r.fix(&id);
    assert!(
        fix.contains("re-tune") && fix.contains(&format!("--db {}", stale_db.display())),
        "{fix}"
    );
}

#[test]
fn absent_database_gets_the_tune_advice_and_is_not_created() {
    let dir = Root::empty();
    let x = xdg();
    let index = first_device_index(x.path());
    let id = format!("tuning-{index}");
    let missing = dir.path().join("missing.sled");
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&missing)]);
    assert_eq!(r.status(&id), "info", "{}", r.text);
    assert!(
        r.check(&id)["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("no tuning database at {}", missing.display())),
        "{}",
        r.text
    );
    assert_eq!(
        r.fix(&id),
        format!(
            "run `rocky tune MODEL.gguf --device {index} --db {}`",
            missing.display()
        )
    );
    assert!(!missing.exists(), "the doctor created a database");

    // From ROCKY_DB (the default location) the tune command needs no --db.
    let r = json_report(&dir, Some(x.path()));
    assert_eq!(
        r.fix(&id),
        format!("run `rocky tune MODEL.gguf --device {index}`")
    );
}

#[test]
fn garbage_at_the_database_path_is_a_warning_naming_it() {
    let dir = Root::empty();
    let x = xdg();
    let index = first_device_index(x.path());
    let id = format!("tuning-{index}");

    // A file where the database directory should be.
    dir.file("file.sled", b"this is not a database\n");
    let file = dir.path().join("file.sled");
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&file)]);
    assert_eq!(r.status(&id), "warn", "{}", r.text);
    let detail = r.check(&id)["detail"].as_str().unwrap();
    assert!(
        detail.contains(s(&file)) && detail.contains("not a rocky tuning database"),
        "{detail}"
    );
    assert!(r.fix(&id).contains("move"), "{}", r.text);

    // A directory with sled's file names but garbage inside: reported, and left as it was.
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
    dir.file("garbage.sled/conf", &garbage[..100]);
    dir.file("garbage.sled/db", &garbage);
    let sled_dir = dir.path().join("garbage.sled");
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&sled_dir)]);
    assert_eq!(r.status(&id), "warn", "{}", r.text);
    let detail = r.check(&id)["detail"].as_str().unwrap();
    assert!(
        detail.contains(s(&sled_dir)) && detail.contains("cannot be read"),
        "{detail}"
    );
    assert_eq!(fs::read(sled_dir.join("db")).unwrap(), garbage);
    assert_eq!(fs::read(sled_dir.join("conf")).unwrap(), &garbage[..100]);
}

#[test]
fn locked_database_is_a_warning_naming_it() {
    let dir = Root::empty();
    let x = xdg();
    let index = first_device_index(x.path());
    let id = format!("tuning-{index}");
    let path = dir.path().join("busy.sled");
    // This process holds the database open, as a running `rocky tune` would.
    let held = rocky_tuning_db::TuningDb::open(&path).unwrap();
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&path)]);
    assert_eq!(r.status(&id), "warn", "{}", r.text);
    let detail = r.check(&id)["detail"].as_str().unwrap();
    assert!(
        detail.contains(s(&path)) && detail.contains("locked by another process"),
        "{detail}"
    );
    assert!(r.fix(&id).contains("again"), "{}", r.text);
    drop(held);

    // Released: an empty database, nothing tuned.
    let r = json_report_with(&dir, Some(x.path()), &["--db", s(&path)]);
    assert_eq!(r.status(&id), "info", "{}", r.text);
    assert!(r.check(&id)["detail"]
        .as_str()
        .unwrap()
        .contains("has no records for this device"));
}
