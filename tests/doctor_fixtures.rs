//! `rocky doctor` on fixture trees built at run time (sysfs symlinks are made here rather than
//! stored in git): a good RK3588 board on panthor, the vendor kernel, missing firmware, another
//! board, and a missing XDG_RUNTIME_DIR. The Vulkan checks see the real loader (lavapipe here).
#![cfg(unix)]

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
fn doctor(root: &Root, xdg: Option<&Path>, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocky"));
    cmd.arg("doctor").arg("--root").arg(root.path()).args(extra);
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
    let o = doctor(root, xdg, &["--json"]);
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
        assert_eq!(r.status("tuning-0"), "info");
        assert!(r.check("tuning-0")["detail"]
            .as_str()
            .unwrap()
            .contains("not tuned"));
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
