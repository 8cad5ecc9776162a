//! The checks of what Vulkan sees: the environment panvk needs, the loader, each device's
//! features rocky uses, and each device's tuning state. These use the real loader whatever
//! `--root` says.

use super::tuning::{self, TuningDbState};
use super::{CheckResult, Status};
use rocky_runtime::{probe_devices, DeviceInfo, DeviceType, RuntimeError};
use std::path::Path;

const XDG_FIX: &str = "export XDG_RUNTIME_DIR=$(mktemp -d)";

/// panvk's initialisation fails without a usable `XDG_RUNTIME_DIR`.
pub fn xdg_runtime_dir() -> CheckResult {
    const ID: &str = "xdg-runtime-dir";
    let Some(value) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) else {
        return CheckResult::new(
            ID,
            Status::Fail,
            "XDG_RUNTIME_DIR is not set: panvk fails to initialise without it",
        )
        .with_fix(XDG_FIX);
    };
    let dir = Path::new(&value);
    if !dir.is_dir() {
        return CheckResult::new(
            ID,
            Status::Fail,
            format!("XDG_RUNTIME_DIR={} is not a directory", dir.display()),
        )
        .with_fix(XDG_FIX);
    }
    // Writability is only known by writing: metadata bits ignore ACLs and read-only mounts.
    let probe = dir.join(format!(".rocky-doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            CheckResult::new(ID, Status::Pass, format!("{} (writable)", dir.display()))
        }
        Err(e) => CheckResult::new(
            ID,
            Status::Fail,
            format!("XDG_RUNTIME_DIR={} is not writable: {e}", dir.display()),
        )
        .with_fix(XDG_FIX),
    }
}

/// The loader check, then one check (and one tuning line, from the database `--db` or the
/// default location) per device, then on an RK3588 whether panvk's integrated GPU is among them.
pub fn loader_and_devices(is_rk3588: bool, db: Option<&Path>) -> Vec<CheckResult> {
    const LOADER: &str = "vulkan-loader";
    const DEVICES: &str = "vulkan-devices";
    let devices = match probe_devices() {
        Ok(devices) => devices,
        Err(RuntimeError::LoaderMissing { detail, .. }) => {
            return vec![CheckResult::new(
                LOADER,
                Status::Fail,
                format!("libvulkan.so.1 cannot be loaded: {detail}"),
            )
            .with_fix("install the Vulkan loader (Debian/Ubuntu: `apt-get install libvulkan1`)")]
        }
        Err(RuntimeError::NoDevice { detail, .. }) => {
            let fix = if is_rk3588 {
                "fix the failed checks above (panthor, firmware, panvk ICD, XDG_RUNTIME_DIR); `VK_LOADER_DEBUG=driver vulkaninfo --summary` shows why a driver was skipped"
            } else {
                "install a Vulkan driver: your GPU vendor's, or lavapipe (`apt-get install mesa-vulkan-drivers`) for a CPU implementation"
            };
            return vec![
                CheckResult::new(LOADER, Status::Pass, "libvulkan.so.1 loaded"),
                CheckResult::new(
                    DEVICES,
                    Status::Fail,
                    format!("no Vulkan device found{detail}"),
                )
                .with_fix(fix),
            ];
        }
        Err(e) => {
            return vec![CheckResult::new(
                LOADER,
                Status::Fail,
                format!(
                    "probing Vulkan devices failed: {}",
                    one_line(&e.to_string())
                ),
            )
            .with_fix("run `vulkaninfo --summary` to see whether the driver works outside rocky")]
        }
    };

    let mut checks = vec![CheckResult::new(
        LOADER,
        Status::Pass,
        format!("libvulkan.so.1 loaded, {} device(s)", devices.len()),
    )];
    // Opened once for every device (sled locks the database while it is open).
    let db = TuningDbState::open(crate::cmd::gpu::db_path(db), db.is_some());
    for d in &devices {
        checks.push(device_check(d));
        checks.push(tuning::check(d, &db));
    }
    checks.push(panvk_device(&devices, is_rk3588));
    checks
}

/// On an RK3588 the Mali must show up as an integrated GPU; otherwise rocky runs on whatever
/// else is there (usually lavapipe).
fn panvk_device(devices: &[DeviceInfo], is_rk3588: bool) -> CheckResult {
    const ID: &str = "mali-device";
    if !is_rk3588 {
        return CheckResult::new(ID, Status::Skip, "skip (not an RK3588 board)");
    }
    match devices
        .iter()
        .find(|d| d.device_type == DeviceType::Integrated)
    {
        Some(d) => CheckResult::new(
            ID,
            Status::Pass,
            format!("device {} ({}) is the integrated GPU", d.index, d.name),
        ),
        None => CheckResult::new(
            ID,
            Status::Warn,
            "no integrated-GPU Vulkan device: panvk is not enumerating the Mali, so rocky would run on a CPU implementation or nothing",
        )
        .with_fix("fix the failed checks above (panthor, firmware, panvk ICD, XDG_RUNTIME_DIR); `VK_LOADER_DEBUG=driver vulkaninfo --summary` shows why panvk was skipped"),
    }
}

/// The features and limits rocky's kernels depend on, with what a missing one costs.
fn device_check(d: &DeviceInfo) -> CheckResult {
    let id = format!("device-{}", d.index);
    let f = &d.features;
    let l = &d.limits;
    let sg = &d.subgroup;

    let subgroup = match &sg.size_control {
        Some(c) => format!("subgroup {} ({}..{})", sg.size, c.min_size, c.max_size),
        None => format!("subgroup {}", sg.size),
    };
    let (spv_major, spv_minor) = d.max_spirv_version();
    let facts = [
        format!("{} ({}, {})", d.name, d.device_type.as_str(), d.driver.name),
        format!(
            "Vulkan {} (SPIR-V {spv_major}.{spv_minor})",
            d.usable_api_version
        ),
        format!("fp16 {}", yes_no(f.shader_float16)),
        format!("int8 {}", yes_no(f.shader_int8)),
        format!(
            "int8 dot {}{}",
            yes_no(f.shader_integer_dot_product),
            if f.integer_dot_product_4x8_packed_signed_accelerated {
                " (accelerated)"
            } else {
                ""
            }
        ),
        subgroup,
        format!(
            "shared {}",
            short_bytes(l.max_compute_shared_memory_size as u64)
        ),
        format!(
            "max storage range {}",
            short_bytes(l.max_storage_buffer_range as u64)
        ),
        format!("UMA {}", yes_no(d.memory.uma)),
        format!("timestamps {}", yes_no(d.has_timestamps())),
    ];
    let detail = facts.join(", ");

    if let Some(reason) = d.unusable_reason() {
        return CheckResult::new(id, Status::Fail, format!("{detail}; unusable: {reason}"))
            .with_fix(
                "install a driver that offers what is named, or pick another device with --device",
            );
    }

    // Each missing capability, what rocky does without it, and the feature (and where it
    // comes from) a driver must offer to lift it: features, not a Vulkan or Mesa version.
    let mut consequences: Vec<&str> = Vec::new();
    let mut wanted: Vec<&str> = Vec::new();
    if d.is_cpu {
        consequences
            .push("CPU implementation: results are correct but slow; not for timings or tuning");
    }
    if !f.shader_float16 {
        consequences.push("no fp16: f32 math only (half the FP16 throughput on Mali)");
        wanted.push("shaderFloat16 (VK_KHR_shader_float16_int8 or Vulkan 1.2)");
    }
    if !f.shader_integer_dot_product {
        consequences.push("no int8 dot product: kernels that use OpSDot cannot run");
        wanted.push("shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product or Vulkan 1.3)");
    }
    if !sg.supports("arithmetic") {
        consequences
            .push("no subgroup arithmetic in compute: kernels that reduce with it cannot run");
        wanted.push("subgroup arithmetic in compute (subgroupSupportedOperations)");
    }
    if !d.has_timestamps() {
        consequences.push(
            "no timestamps: prefill runs, but `rocky tune`, `rocky kernel` and \
             `prefill --profile` cannot time kernels here",
        );
        wanted.push("timestamps on the compute queue (timestampValidBits > 0)");
    }
    if consequences.is_empty() {
        CheckResult::new(id, Status::Pass, detail)
    } else {
        let fix = if d.is_cpu {
            "use it for correctness checks; time and tune on a GPU (select one with --device)"
                .to_string()
        } else {
            format!(
                "rocky runs without them; to get them install a driver that offers {} \
                 (on RK3588: a newer Mesa panvk; Mesa 26 reports fp16 and int8 dot product)",
                wanted.join(", ")
            )
        };
        CheckResult::new(
            id,
            Status::Warn,
            format!("{detail}; {}", consequences.join("; ")),
        )
        .with_fix(fix)
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// `32 KiB`, `128 MiB`, `4 GiB`: one report line has room for no more.
fn short_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            let (whole, rest) = (n / size, n % size);
            return if rest == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} B")
}

/// Multi-line runtime errors on one report line.
fn one_line(s: &str) -> String {
    s.lines().collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Mali-G610 on panvk as docs/design.md §1 describes it (written from those facts, not read
    /// from a board): integrated, fp16, accelerated int8 dot, subgroup 16, 32 KiB shared
    /// memory, 4 GiB storage range, UMA.
    fn mali() -> DeviceInfo {
        serde_json::from_str(include_str!(
            "../../../tests/fixtures/doctor/mali-g610-panvk.json"
        ))
        .expect("the Mali profile fixture matches DeviceInfo")
    }

    fn lavapipe_like() -> DeviceInfo {
        let mut d = mali();
        d.index = 1;
        d.name = "llvmpipe".into();
        d.device_type = DeviceType::Cpu;
        d.is_cpu = true;
        d
    }

    #[test]
    fn mali_profile_passes_with_its_facts_listed() {
        let c = device_check(&mali());
        assert_eq!(c.status, Status::Pass, "{c:?}");
        assert_eq!(c.check, "device-0");
        for fact in [
            "Mali-G610 MC4 (panvk) (integrated GPU, panvk)",
            "fp16 yes",
            "int8 dot yes (accelerated)",
            "subgroup 16 (16..16)",
            "shared 32 KiB",
            "max storage range 4.0 GiB",
            "UMA yes",
        ] {
            assert!(c.detail.contains(fact), "{fact} missing: {}", c.detail);
        }
        assert_eq!(c.fix, None);
    }

    #[test]
    fn missing_features_warn_with_their_consequence() {
        let mut d = mali();
        d.features.shader_float16 = false;
        d.features.shader_integer_dot_product = false;
        let c = device_check(&d);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("f32 math only"), "{}", c.detail);
        assert!(c.detail.contains("no int8 dot product"), "{}", c.detail);

        let mut d = mali();
        d.subgroup.operations.retain(|o| o != "arithmetic");
        assert_eq!(device_check(&d).status, Status::Warn);
    }

    #[test]
    fn cpu_implementation_warns_it_is_not_for_timings() {
        let c = device_check(&lavapipe_like());
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("not for timings"), "{}", c.detail);
        assert!(c.fix.unwrap().contains("GPU"));
    }

    #[test]
    fn device_below_vulkan_1_1_fails_naming_the_requirement() {
        let mut d = mali();
        d.api_version = "1.0.0".into();
        d.api_version_raw = 1 << 22;
        d.usable_api_version = "1.0".into();
        let c = device_check(&d);
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(c.detail.contains("needs Vulkan 1.1"), "{}", c.detail);
    }

    /// Mesa 25.0.7's panvk (Debian 13) as `rocky devices --json` recorded it under the
    /// mali-shim: Vulkan 1.1, no fp16, no int8 dot product, no timestamps.
    fn panvk_25() -> DeviceInfo {
        serde_json::from_str(include_str!(
            "../../../runtime/tests/fixtures/mali-g610-panvk-25.0.7.json"
        ))
        .expect("the panvk 25.0.7 fixture matches DeviceInfo")
    }

    #[test]
    fn vulkan_1_1_panvk_is_usable_and_its_gaps_name_features_not_versions() {
        let c = device_check(&panvk_25());
        // Usable (a warning, not a failure): what is missing has a fallback.
        assert_eq!(c.status, Status::Warn, "{c:?}");
        for fact in [
            "(integrated GPU, panvk)",
            "Vulkan 1.1 (SPIR-V 1.3)",
            "fp16 no",
            "int8 yes",
            "int8 dot no",
            "timestamps no",
            "no timestamps: prefill runs",
        ] {
            assert!(c.detail.contains(fact), "{fact} missing: {}", c.detail);
        }
        let fix = c.fix.expect("a fix");
        assert!(fix.contains("shaderFloat16"), "{fix}");
        assert!(fix.contains("shaderIntegerDotProduct"), "{fix}");
        assert!(fix.contains("timestampValidBits"), "{fix}");
        assert!(
            !fix.contains("Mesa ≥") && !fix.contains("1.2 or newer"),
            "{fix}"
        );
    }

    #[test]
    fn rk3588_wants_an_integrated_gpu_among_the_devices() {
        assert_eq!(
            panvk_device(&[lavapipe_like(), mali()], true).status,
            Status::Pass
        );
        let only_cpu = panvk_device(&[lavapipe_like()], true);
        assert_eq!(only_cpu.status, Status::Warn);
        assert!(only_cpu.detail.contains("panvk is not enumerating"));
        assert_eq!(panvk_device(&[lavapipe_like()], false).status, Status::Skip);
    }

    #[test]
    fn byte_sizes_are_short() {
        assert_eq!(short_bytes(100), "100 B");
        assert_eq!(short_bytes(1536), "1.5 KiB");
        assert_eq!(short_bytes(32 << 10), "32 KiB");
        assert_eq!(short_bytes(128 << 20), "128 MiB");
        assert_eq!(short_bytes(u32::MAX as u64), "4.0 GiB");
    }
}
